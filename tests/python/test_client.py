"""Every client method against NumPy/SciPy on fresh random inputs, in both dtypes."""
import threading

import grpc
import numpy as np
import pytest

import gpucompute as gc
import reference as ref

DTYPES = [np.float32, np.float64]
# Relative tolerance by dtype: the CPU backend accumulates in float64 and rounds once.
RTOL = {np.float32: 2e-6, np.float64: 1e-12}


def assert_close(got, want, dtype, rtol=None, scale=None):
    rtol = RTOL[dtype] if rtol is None else rtol
    want = np.asarray(want, np.float64)
    scale = np.max(np.abs(want)) if scale is None else scale
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=rtol * scale)


# -- server ----------------------------------------------------------------------------


def test_health_and_info(client):
    assert client.health() == "SERVING"
    info = client.info()
    assert info.backend == "cpu"
    assert info.devices and info.devices[0].healthy
    assert set(info.operations) == {"DiscountProduct", "HaversineGrid", "Normalize",
                                    "LombScargle", "StreamingCompute"}
    assert info.operations["LombScargle"] == (np.dtype(np.float32), np.dtype(np.float64))
    assert info.limits.buffer_quota_bytes == 1 << 30
    assert info.limits.max_chunk_bytes >= info.limits.default_chunk_bytes
    assert info.limits.max_device_queue_depth == 64  # the server's default
    assert info.raw.version == info.version


# -- DiscountProduct ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((40, 5), (7, 40, 5)), ((3, 1), (1, 4)), ((), (6,)),
                                    ((2, 3, 4), (2, 3, 4))])
def test_discount_product(client, rng, dtype, shapes):
    fs, vs = shapes
    f = rng.standard_normal(fs).astype(dtype)
    v = rng.standard_normal(vs).astype(dtype)
    out = client.discount_product(f, v)
    want = f * v
    assert out.dtype == dtype and out.shape == want.shape
    np.testing.assert_array_equal(out, want)


def test_discount_product_seed_case(client):
    mult_by = np.arange(20000, dtype=np.float64).reshape(4000, 5)
    discount = np.arange(2000000, dtype=np.float64).reshape(100, 4000, 5)
    out, timing = client.discount_product(mult_by, discount, return_timing=True)
    np.testing.assert_array_equal(out, mult_by * discount)
    assert timing.upload > 0  # 16 MB > the 8 MiB threshold: went through Buffers.Upload


def test_non_contiguous_and_big_endian_inputs(client, rng):
    base = rng.standard_normal((20, 30))
    f = base[::2, ::3]  # a strided view
    v = base[1::2, 1::3].astype(">f8")
    out = client.discount_product(f, v)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, f * v.astype(np.float64))


# -- HaversineGrid -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_haversine_grid(client, rng, dtype):
    refs = [(30.0, 101.0), (float(rng.uniform(-80, 80)), float(rng.uniform(-180, 180)))]
    out = client.haversine_grid(gc.LatLonMesh(29, 31, 37, 99, 101, 23), refs, dtype=dtype)
    assert out.dtype == dtype and out.shape == (2, 37, 23)
    lat = np.linspace(29, 31, 37)[:, None]
    lon = np.linspace(99, 101, 23)[None, :]
    assert_close(out, ref.haversine(lat, lon, refs), dtype)


def test_haversine_grid_radius_and_single_ref(client):
    out = client.haversine_grid(gc.LatLonMesh(-10, 10, 5, 0, 40, 9), (0.0, 0.0), radius=1.0)
    assert out.shape == (1, 5, 9)
    lat = np.linspace(-10, 10, 5)[:, None]
    lon = np.linspace(0, 40, 9)[None, :]
    assert_close(out, ref.haversine(lat, lon, [(0.0, 0.0)], radius=1.0), np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(50,), (6, 7)])
def test_haversine_points(client, rng, dtype, shape):
    lat = rng.uniform(-89, 89, shape).astype(dtype)
    lon = rng.uniform(-180, 180, shape).astype(dtype)
    refs = [(10.0, 20.0), (-45.5, 170.0), (89.0, -3.0)]
    out = client.haversine_points(lat, lon, refs, radius=6371.0)
    assert out.dtype == dtype and out.shape == (3,) + shape
    assert_close(out, ref.haversine(lat, lon, refs, radius=6371.0), dtype)


# -- Normalize ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm", ["sum", "l1", "l2", "max_abs"])
@pytest.mark.parametrize("shape", [(1000,), (8, 300), (2, 3, 50)])
def test_normalize(client, rng, dtype, norm, shape):
    a = rng.uniform(0.1, 1.0, shape) if norm == "sum" else rng.standard_normal(shape)
    a = a.astype(dtype)
    out = client.normalize(a, norm=norm)
    assert out.dtype == dtype and out.shape == shape
    assert_close(out, ref.normalize(a, norm), dtype)
    if norm == "sum":
        np.testing.assert_allclose(out.astype(np.float64).sum(axis=-1), 1.0,
                                   rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_normalize_default_is_sum(client, rng):
    a = rng.uniform(1, 2, (3, 10))
    np.testing.assert_allclose(client.normalize(a), a / a.sum(axis=-1, keepdims=True),
                               rtol=1e-13)


# -- LombScargle -------------------------------------------------------------------------


def _signal(rng, dtype, n=120, batch=None):
    x = np.sort(rng.uniform(0, 10, n))
    shape = (n,) if batch is None else (batch, n)
    y = 2.0 * np.cos(1.3 * x + 0.4) + 0.5 + 0.3 * rng.standard_normal(shape)
    return x.astype(dtype), y.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("precenter", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
def test_lombscargle_vs_scipy(client, rng, dtype, precenter, normalize):
    x, y = _signal(rng, dtype)
    freqs = np.linspace(0.05, 6.0, 257).astype(dtype)
    out = client.lombscargle(x, y, freqs, precenter=precenter, normalize=normalize)
    assert out.dtype == dtype and out.shape == (257,)
    want = ref.scipy_classic(x, y, freqs.astype(np.float64), precenter, normalize)
    assert_close(out, want, dtype, rtol=1e-9 if dtype == np.float64 else 2e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lombscargle_frequency_grid(client, rng, dtype):
    x, y = _signal(rng, dtype)
    grid = gc.FrequencyGrid(0.01, 10.0, 3000)
    out = client.lombscargle(x, y, grid)
    assert out.dtype == dtype and out.shape == (3000,)
    want = ref.scipy_classic(x, y, grid.numpy(np.float64), False, False)
    assert_close(out, want, dtype, rtol=1e-9 if dtype == np.float64 else 2e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lombscargle_batch(client, rng, dtype):
    x, y = _signal(rng, dtype, n=90, batch=4)
    freqs = np.linspace(0.1, 5, 100).astype(dtype)
    out = client.lombscargle(x, y, freqs, normalize=True)
    assert out.shape == (4, 100)
    want = np.stack([ref.scipy_classic(x, row, freqs, False, True) for row in y])
    assert_close(out, want, dtype, rtol=1e-9 if dtype == np.float64 else 2e-5)


def test_reference_matches_scipy_classic(rng):
    """The SciPy 1.15 reference itself reduces to SciPy's classic options."""
    x, y = _signal(rng, np.float64)
    freqs = np.linspace(0.05, 6.0, 200)
    for precenter in (False, True):
        for normalize in (False, True):
            np.testing.assert_allclose(
                ref.lombscargle_1_15(x, y, freqs, precenter, normalize),
                ref.scipy_classic(x, y, freqs, precenter, normalize), rtol=1e-9, atol=1e-12)


def test_reference_matches_scipy_1_15(rng):
    """Where SciPy >= 1.15 is installed, the reference equals it, weights and all."""
    import scipy
    from scipy import signal
    if tuple(int(v) for v in scipy.__version__.split(".")[:2]) < (1, 15):
        pytest.skip(f"SciPy {scipy.__version__} < 1.15 has no weights/floating_mean")
    x, y = _signal(rng, np.float64)
    w = rng.uniform(0.2, 3.0, x.shape)
    freqs = np.linspace(0.05, 6.0, 200)
    for weights in (None, w):
        for floating_mean in (False, True):
            for normalize in (False, True):
                np.testing.assert_allclose(
                    ref.lombscargle_1_15(x, y, freqs, normalize=normalize, weights=weights,
                                         floating_mean=floating_mean),
                    signal.lombscargle(x, y, freqs, normalize=normalize, weights=weights,
                                       floating_mean=floating_mean),
                    rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("floating_mean", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_lombscargle_weights_floating_mean(client, rng, dtype, floating_mean, normalize,
                                           weighted):
    x, y = _signal(rng, dtype)
    w = rng.uniform(0.2, 3.0, x.shape).astype(dtype) if weighted else None
    freqs = np.linspace(0.05, 6.0, 211).astype(dtype)
    out = client.lombscargle(x, y, freqs, normalize=normalize, weights=w,
                             floating_mean=floating_mean)
    want = ref.lombscargle_1_15(x, y, freqs, normalize=normalize, weights=w,
                                floating_mean=floating_mean)
    assert out.dtype == dtype
    assert_close(out, want, dtype, rtol=1e-8 if dtype == np.float64 else 2e-5)


def test_lombscargle_batched_weights_and_grid(client, rng):
    x, y = _signal(rng, np.float64, n=70, batch=3)
    w = rng.uniform(0.5, 2.0, y.shape)
    grid = gc.FrequencyGrid(0.2, 4.0, 150)
    out = client.lombscargle(x, y, grid, precenter=True, weights=w, floating_mean=True,
                             normalize="normalize")
    want = ref.lombscargle_1_15(x, y, grid.numpy(), precenter=True, normalize=True, weights=w,
                                floating_mean=True)
    assert_close(out, want, np.float64, rtol=1e-8)


# -- options: timing, chunking, keep_on_device -------------------------------------------


def test_return_timing(client, rng):
    a = rng.uniform(1, 2, (4, 1000))
    out, t = client.normalize(a, return_timing=True)
    assert isinstance(t, gc.Timing)
    assert t.backend == "cpu" and t.device
    for v in (t.queue, t.transfer_in, t.compute, t.transfer_out, t.total, t.wall):
        assert v >= 0
    assert t.total >= t.compute and t.wall > 0 and t.upload == 0
    assert "compute" in str(t)


def test_timing_stages_add_up_to_the_total(client, rng):
    """prepare, queue, in, compute, out and stream write, plus other less overlapped, are
    the total, as the CLI prints it; a result streamed in chunks spends time writing them."""
    a = rng.uniform(1, 2, (64, 4096))
    for chunk_bytes in (None, 64 << 10):
        _, t = client.normalize(a, chunk_bytes=chunk_bytes, return_timing=True)
        assert t.prepare >= 0 and t.stream_write >= 0
        assert t.stages == pytest.approx(t.prepare + t.queue + t.transfer_in + t.compute
                                         + t.transfer_out + t.stream_write, abs=1e-12)
        assert min(t.other, t.overlapped) == 0
        assert t.stages + t.other - t.overlapped == pytest.approx(t.total, abs=1e-9)
        assert "stream write" in str(t) and "prepare" in str(t)
        assert ("overlapped" if t.overlapped else "other") in str(t)
    assert t.stream_write > 0


def test_one_message_results_are_read_as_unary_calls(server, rng):
    """A result the server promises as one message is read as a unary call; a larger
    one (the client knows its size) is read as a stream at once, with no one-message try
    for the server to refuse and count as FAILED_PRECONDITION; a request with more than 1 MiB
    of inline input is streamed at once; an older server (no promise) is only ever read
    as streams. (With session=False: test_session.py has the session's path.)"""
    with server.client(timeout=30, session=False) as c:
        stubs = c._stripe_stubs[0]
        called = []
        for key in ("Compute.Normalize", "Compute.Normalize/unary"):
            def spy(*args, _real=stubs[key], _key=key, **kwargs):
                called.append(_key)
                return _real(*args, **kwargs)
            stubs[key] = spy
        small = rng.uniform(0.5, 1.5, (4, 256))
        np.testing.assert_allclose(c.normalize(small), small / small.sum(1, keepdims=True),
                                   rtol=1e-12)
        assert called == ["Compute.Normalize/unary"]
        called.clear()
        large = rng.uniform(0.5, 1.5, (8, 1024))
        np.testing.assert_allclose(c.normalize(large, chunk_bytes=4096),
                                   large / large.sum(1, keepdims=True), rtol=1e-12)
        assert called == ["Compute.Normalize"]
        called.clear()
        # Inputs past 1 MiB stream at once: a refused try would send them twice.
        huge = rng.uniform(0.5, 1.5, (2, 1 << 17))
        np.testing.assert_allclose(c.normalize(huge), huge / huge.sum(1, keepdims=True),
                                   rtol=1e-12)
        assert called == ["Compute.Normalize"]
        called.clear()
        c._single_message = False
        c.normalize(small)
        assert called == ["Compute.Normalize"]


@pytest.mark.parametrize("chunk_bytes", [4096, 10000, 4 << 20])
def test_chunk_bytes(client, rng, chunk_bytes):
    a = rng.uniform(1, 2, (7, 12345)).astype(np.float32)  # 345,660 bytes of result
    out = client.normalize(a, chunk_bytes=chunk_bytes)
    assert_close(out, ref.normalize(a), np.float32)


def test_keep_on_device_chain(client, rng):
    f = rng.standard_normal((10, 3))
    v = rng.standard_normal((4, 10, 3))
    with client.discount_product(f, v, keep_on_device=True, buffer_name="chain") as kept:
        assert isinstance(kept, gc.DeviceArray)
        assert kept.shape == (4, 10, 3) and kept.dtype == np.float64 and kept.name == "chain"
        assert kept.nbytes == 4 * 10 * 3 * 8 and kept.location
        out, t = client.normalize(kept, norm="l2", return_timing=True)
        assert t.transfer_in == 0
        np.testing.assert_allclose(out, ref.normalize(f * v, "l2"), rtol=1e-12)
        np.testing.assert_array_equal(kept.download(), f * v)


# -- buffers ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_array_lifecycle(client, rng, dtype):
    a = rng.standard_normal((33, 17)).astype(dtype)
    dev = client.upload(a, name="lifecycle")
    assert (dev.shape, dev.dtype, dev.nbytes, dev.name) == ((33, 17), dtype, a.nbytes,
                                                             "lifecycle")
    assert dev.ndim == 2 and dev.size == a.size and len(dev.id) == 32
    listed = client.list_buffers()
    assert dev.id in [b.id for b in listed]
    assert listed.used_bytes >= a.nbytes and listed.quota_bytes == 1 << 30
    np.testing.assert_array_equal(dev.download(), a)
    np.testing.assert_array_equal(dev.download(chunk_bytes=4096), a)
    back, t = dev.download(return_timing=True)
    assert isinstance(t, gc.Timing)
    out = client.normalize(dev, norm="max_abs")  # as an operand
    assert_close(out, ref.normalize(a, "max_abs"), dtype)
    assert dev.delete() == a.nbytes
    assert dev.deleted and dev.delete() == 0  # idempotent on the handle
    assert dev.id not in [b.id for b in client.list_buffers()]
    with pytest.raises(gc.NotFound) as e:
        client.download(dev.id)
    assert e.value.code == grpc.StatusCode.NOT_FOUND and dev.id in e.value.message
    with pytest.raises(ValueError):
        client.normalize(dev)  # a deleted handle is refused before any call


def test_device_array_context_manager(client, rng):
    a = rng.standard_normal(100)
    with client.upload(a) as dev:
        assert dev.id in [b.id for b in client.list_buffers()]
    assert dev.deleted
    assert dev.id not in [b.id for b in client.list_buffers()]
    with client.upload(a) as dev2:
        client.delete(dev2.id)  # deleted behind the handle's back: exit stays quiet
    assert dev2.deleted


def test_upload_chunking(client, rng):
    a = rng.standard_normal((1000, 37))
    with client.upload(a, chunk_bytes=1000) as dev:
        np.testing.assert_array_equal(dev.download(), a)


def test_auto_upload_by_threshold(server, rng):
    c = server.client(upload_threshold=1024)
    before = {b.id for b in c.list_buffers()}
    f = rng.standard_normal((50, 5))
    v = rng.standard_normal((20, 50, 5))
    out, t = c.discount_product(f, v, return_timing=True)
    np.testing.assert_array_equal(out, f * v)
    assert t.upload > 0
    assert {b.id for b in c.list_buffers()} == before  # temporaries deleted
    c.close()


def test_auto_upload_by_server_message_limit(tight_server, rng):
    c = tight_server.client()
    assert c.info().limits.max_receive_message_bytes == 1 << 20
    a = rng.uniform(1, 2, (4, 65536))  # 2 MiB inline: more than the server accepts
    out, t = c.normalize(a, return_timing=True)
    assert t.upload > 0
    assert_close(out, ref.normalize(a), np.float64)
    assert len(c.list_buffers()) == 0
    c.close()


def test_concurrent_calls_from_threads(client, rng):
    arrays = [rng.uniform(1, 2, 20000).astype(np.float32) for _ in range(8)]
    results = [None] * len(arrays)

    def work(i):
        results[i] = client.normalize(arrays[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(arrays))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for a, r in zip(arrays, results):
        assert_close(r, ref.normalize(a), np.float32)


def test_token_is_accepted(server, rng):
    c = server.client(token="secret-token")
    a = rng.uniform(1, 2, 10)
    np.testing.assert_allclose(c.normalize(a), a / a.sum(), rtol=1e-13)
    c.close()


# -- errors -------------------------------------------------------------------------------


# Integers, bools and float16 are cast as NumPy would (test_numpy_rules.py); these stay errors.
@pytest.mark.parametrize("bad", [np.ones(3, complex), np.array([object(), 1.0]),
                                 np.array(["a", "b"]), np.ones(3, np.longdouble),
                                 np.array(["2020-01-01"], "datetime64[D]")])
def test_unsupported_dtypes_raise_type_error(client, bad):
    if bad.dtype == np.longdouble and np.dtype(np.longdouble).itemsize == 8:
        pytest.skip("long double is float64 on this platform")
    with pytest.raises(TypeError, match="dtype"):
        client.normalize(bad)
    with pytest.raises(TypeError):
        client.upload(bad)


def test_a_stored_operand_of_another_dtype_raises_type_error(client):
    """Mixed host operands promote as NumPy's do; a stored one cannot be cast here."""
    with client.upload(np.ones(3, np.float32)) as factors:
        with pytest.raises(TypeError, match="factors.*float32.*cannot be cast"):
            client.discount_product(factors, np.ones(3))
        out = client.discount_product(factors, np.full(3, 2.0), dtype=np.float32)
        assert out.dtype == np.float32 and out.tolist() == [2.0] * 3


def test_client_side_value_errors(client):
    with pytest.raises(ValueError, match="norm"):
        client.normalize(np.ones(3), norm="l3")
    with pytest.raises(ValueError, match="refs"):
        client.haversine_grid(gc.LatLonMesh(0, 1, 2, 0, 1, 2), refs=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="radius"):
        client.haversine_grid(gc.LatLonMesh(0, 1, 2, 0, 1, 2), refs=(0, 0), radius=0)
    with pytest.raises(ValueError, match="amplitude"):
        client.lombscargle(np.ones(5), np.ones(5), np.ones(3), normalize="psd")
    with pytest.raises(TypeError):
        client.haversine_grid(gc.LatLonMesh(0, 1, 2, 0, 1, 2), refs=(0, 0), dtype=np.int32)


def test_invalid_argument_from_server(client):
    with pytest.raises(gc.InvalidArgument) as e:
        client.normalize(np.array([[1.0, 2.0], [0.0, 0.0]]))
    err = e.value
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "row 1" in err.message
    assert isinstance(err, gc.GpuComputeError) and isinstance(err, ValueError)
    assert "INVALID_ARGUMENT" in str(err) and "Normalize" in str(err)

    with pytest.raises(gc.InvalidArgument, match="factors"):
        client.discount_product(np.ones((3, 4)), np.ones(5))
    with pytest.raises(gc.InvalidArgument, match="latitude"):
        client.haversine_grid(gc.LatLonMesh(0, 95, 3, 0, 1, 3), refs=(0, 0))
    with pytest.raises(gc.InvalidArgument, match="chunk_bytes"):
        client.normalize(np.ones(3), chunk_bytes=1)
    with pytest.raises(gc.InvalidArgument, match="weights"):
        client.lombscargle(np.arange(5.0), np.ones(5), np.ones(3), weights=-np.ones(5))


def test_not_found(client):
    # Ids of this server's instance that it never issued (another instance's ids are
    # FailedPrecondition: test_replicas.py).
    instance = client.info().instance_id
    with pytest.raises(gc.NotFound) as e:
        client.normalize(gc.DeviceArray(client, instance + "0" * 24, (3,), np.float64, 24, "cpu"))
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(gc.NotFound):
        client.delete(instance + "f" * 24)


def test_resource_exhausted(tight_server):
    c = tight_server.client()
    with pytest.raises(gc.ResourceExhausted) as e:
        c.upload(np.zeros(1 << 20))  # 8 MiB > the 4 MiB quota
    assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and e.value.message
    assert len(c.list_buffers()) == 0
    c.close()


def test_unavailable():
    c = gc.Client("127.0.0.1:1")
    with pytest.raises(gc.Unavailable) as e:
        c.health(timeout=10)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    c.close()


def test_deadline_exceeded(client):
    x = np.linspace(0, 10, 4096)
    with pytest.raises(gc.DeadlineExceeded) as e:
        client.lombscargle(x, np.cos(x), gc.FrequencyGrid(0.1, 10, 1 << 20), timeout=0.001)
    assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_client_default_timeout(server):
    c = server.client(timeout=0.001)
    x = np.linspace(0, 10, 4096)
    with pytest.raises(gc.DeadlineExceeded):
        c.lombscargle(x, np.cos(x), gc.FrequencyGrid(0.1, 10, 1 << 20))
    c.close()


# -- a newcomer's first hour --------------------------------------------------------------


def test_options_are_keyword_only(client):
    """Operands positional as in SciPy, everything after them keyword-only."""
    x = np.linspace(0, 10, 50)
    with pytest.raises(TypeError):
        client.normalize(np.ones(3), "l2")
    with pytest.raises(TypeError):
        client.lombscargle(x, np.cos(x), np.ones(3), True)
    with pytest.raises(TypeError):
        client.haversine_grid(gc.LatLonMesh(0, 1, 2, 0, 1, 2), (0, 0), 1.0)
    with pytest.raises(TypeError):
        client.haversine_points(np.zeros(2), np.zeros(2), (0, 0), 1.0)
    with pytest.raises(TypeError):
        client.discount_product(np.ones(3), np.ones(3), True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_receives_every_result(client, rng, dtype):
    a = rng.uniform(1, 2, (3, 40)).astype(dtype)
    out = np.empty_like(a)
    assert client.normalize(a, out=out) is out
    assert_close(out, ref.normalize(a), dtype)
    f, v = a[0], a
    prod = np.empty((3, 40), dtype)
    got, timing = client.discount_product(f, v, out=prod, return_timing=True)
    assert got is prod and isinstance(timing, gc.Timing)
    np.testing.assert_array_equal(prod, f * v)
    grid = np.empty((1, 4, 5), dtype)
    client.haversine_grid(gc.LatLonMesh(0, 1, 4, 0, 1, 5), (0, 0), dtype=dtype, out=grid)
    points = np.empty((1, 40), dtype)
    client.haversine_points(a[0], a[1], (0, 0), out=points)
    x = np.sort(rng.uniform(0, 10, 40)).astype(dtype)
    power = np.empty((3, 7), dtype)
    client.lombscargle(x, a, np.linspace(0.1, 2, 7).astype(dtype), out=power)
    assert_close(power, np.stack([ref.scipy_classic(x, row, np.linspace(0.1, 2, 7), False,
                                                    False) for row in a]), dtype,
                 rtol=1e-9 if dtype == np.float64 else 2e-5)
    with client.upload(a) as dev:
        back = np.empty_like(a)
        assert dev.download(out=back) is back
        np.testing.assert_array_equal(back, a)


def test_out_mismatch_names_both_shapes_and_dtypes(client):
    a = np.ones((2, 3))
    with pytest.raises(ValueError, match=r"out has shape \(3, 2\) and dtype float64; the "
                                         r"result has shape \(2, 3\) and dtype float64"):
        client.normalize(a, out=np.empty((3, 2)))
    with pytest.raises(ValueError, match=r"dtype float32; .* dtype float64"):
        client.normalize(a, out=np.empty((2, 3), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        client.normalize(a, out=np.empty((3, 2)).T)
    with pytest.raises(ValueError, match="keep_on_device"):
        client.normalize(a, out=np.empty((2, 3)), keep_on_device=True)
    assert client.normalize(a).shape == (2, 3)  # the client is still fine


def test_np_asarray_downloads_a_device_array(client, rng):
    a = rng.standard_normal((4, 5))
    with client.upload(a) as dev:
        back = np.asarray(dev)
        assert back.dtype == np.float64 and back.shape == (4, 5)  # not an object array
        np.testing.assert_array_equal(back, a)
        np.testing.assert_array_equal(np.asarray(dev, dtype=np.float32), a.astype(np.float32))
        np.testing.assert_array_equal(np.array(dev) * 2, a * 2)


def test_errors_name_the_call_made(client, tight_server):
    with pytest.raises(gc.InvalidArgument) as e:
        client.normalize(np.array([[1.0, 2.0], [0.0, 0.0]]))
    assert e.value.call == "normalize" and e.value.method == "Compute.Normalize"
    assert str(e.value).startswith("normalize: INVALID_ARGUMENT: ") and "row 1" in str(e.value)
    c = tight_server.client()
    with pytest.raises(gc.ResourceExhausted) as e:  # the automatic upload overflows the quota
        c.normalize(np.ones((2, 1 << 19)))
    assert e.value.call == "normalize" and e.value.method == "Buffers.Upload"
    assert str(e.value).startswith("normalize: RESOURCE_EXHAUSTED: ")
    with pytest.raises(gc.NotFound) as e:
        c.download(c.info().instance_id + "0" * 24)
    assert str(e.value).startswith("download: NOT_FOUND: ")
    c.close()
