"""What a NumPy or SciPy user expects of the client: NumPy's casting rules, lists as
arrays, normalize's axis, errors that are also the builtins, GPUCOMPUTE_TARGET."""
from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest
from scipy import signal

import gpucompute as gc
import gpucompute.aio


def _normalized(a, axis=-1):
    a = np.asarray(a, dtype=np.float64)
    return a / a.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype, expected", [
    (np.int64, np.float64), (np.int8, np.float64), (np.uint16, np.float64),
    (np.bool_, np.float64), (np.float16, np.float32), (np.float32, np.float32),
    (np.float64, np.float64), (">f8", np.float64)])
def test_inputs_cast_as_numpy_would(client, dtype, expected):
    a = np.array([[1, 2, 3], [1, 0, 1]]).astype(dtype)
    out = client.normalize(a)
    assert out.dtype == expected
    np.testing.assert_allclose(out, _normalized(a), rtol=1e-6)
    stored = client.upload(a)
    assert stored.dtype == expected
    stored.delete()


def test_a_list_is_an_array(client):
    np.testing.assert_allclose(client.normalize([[1, 2, 3]]), [[1 / 6, 2 / 6, 3 / 6]])
    assert client.normalize([1, 3]).tolist() == [0.25, 0.75]


def test_mixed_operands_promote_as_numpy(client):
    factors, values = np.full(3, 0.5, np.float32), np.arange(6.0).reshape(2, 3)
    out = client.discount_product(factors, values)
    assert out.dtype == np.float64 == (factors * values).dtype
    np.testing.assert_array_equal(out, factors * values)
    ints = client.discount_product(np.int16(3) * np.ones(3, np.int16), np.ones(3, np.float32))
    assert ints.dtype == np.float32  # int16 with float32: NumPy's result_type


def test_dtype_chooses_the_computing_dtype(client):
    a = np.arange(1.0, 7.0).reshape(2, 3)
    out = client.normalize(a, dtype=np.float32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, _normalized(a), rtol=1e-6)
    with pytest.raises(TypeError, match="float32 or float64"):
        client.normalize(a, dtype=np.int32)


def test_normalize_along_an_axis(client, rng):
    a = rng.random((3, 4, 5))
    for axis in (0, 1, -2, 2, -1):
        np.testing.assert_allclose(client.normalize(a, axis=axis), _normalized(a, axis),
                                   rtol=1e-12)
    out = np.empty_like(a)
    result, timing = client.normalize(a, axis=0, out=out, return_timing=True)
    assert result is out and timing.total > 0
    np.testing.assert_allclose(out, _normalized(a, 0), rtol=1e-12)
    with pytest.raises(ValueError, match="out of bounds"):
        client.normalize(a, axis=3)
    with pytest.raises(ValueError, match="keep_on_device"):
        client.normalize(a, axis=0, keep_on_device=True)


def test_lombscargle_reads_lists_as_scipy_does(client):
    x = [0.1 * i + 0.01 * (i % 3) for i in range(40)]
    y = [np.sin(2.0 * v) for v in x]
    freqs = [0.5 + 0.25 * k for k in range(12)]
    expected = signal.lombscargle(np.array(x), np.array(y), np.array(freqs))
    np.testing.assert_allclose(client.lombscargle(x, y, freqs), expected, rtol=1e-9)
    # equal-length rows are a 2-D batch; rows of different lengths a ragged one
    batch = client.lombscargle([x, x], [y, y], freqs)
    np.testing.assert_allclose(batch, [expected, expected], rtol=1e-9)
    ragged = client.lombscargle([x, x[:30]], [y, y[:30]], freqs)
    np.testing.assert_allclose(ragged[0], expected, rtol=1e-9)


def test_complex_and_object_stay_errors(client):
    for bad in (np.ones(3, np.complex64), np.array([None, 1.0], dtype=object)):
        with pytest.raises(TypeError, match="dtype"):
            client.normalize(bad)


def test_errors_are_the_builtins_too():
    assert issubclass(gc.DeadlineExceeded, TimeoutError)
    assert issubclass(gc.Unavailable, ConnectionError)
    assert issubclass(gc.InvalidArgument, ValueError)
    assert issubclass(gc.NotFound, LookupError)
    assert issubclass(gc.OutOfRange, IndexError)
    assert issubclass(gc.PermissionDenied, PermissionError)
    assert issubclass(gc.Unauthenticated, PermissionError)
    assert issubclass(gc.Unimplemented, NotImplementedError)


def test_errors_from_a_server_are_the_builtins(client):
    with pytest.raises(ValueError):  # InvalidArgument
        client.normalize(np.ones((0, 3)))
    with pytest.raises(LookupError):  # NotFound
        client.download("no-such-buffer")
    with pytest.raises(TimeoutError):  # DeadlineExceeded
        client.lombscargle(np.linspace(0, 1, 4000), np.ones(4000),
                           gc.FrequencyGrid(0.1, 10, 2_000_000), method="direct",
                           timeout=0.001)


def test_a_refused_connection_is_unavailable_naming_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens once it closes
    with gc.Client(f"127.0.0.1:{port}", timeout=5) as c:
        for _ in range(3):
            with pytest.raises(ConnectionError, match="(?i)connection refused"):
                c.normalize(np.ones(3))


def test_the_target_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("GPUCOMPUTE_TARGET", server.target)
    with gc.Client() as c:
        assert c.target == server.target and c.health() == "SERVING"

    async def aio():
        async with gpucompute.aio.Client() as c:
            return await c.health()

    assert asyncio.run(aio()) == "SERVING"
    monkeypatch.delenv("GPUCOMPUTE_TARGET")
    with pytest.raises(ValueError, match="GPUCOMPUTE_TARGET"):
        gc.Client()


def test_streams_cast_too(client):
    a = np.arange(1, 13).reshape(3, 4)
    out = client.stream_normalize(a)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, _normalized(a), rtol=1e-12)
    chunks = client.stream_normalize(iter([a[:2], a[2:]]), shape=a.shape)
    np.testing.assert_allclose(chunks, _normalized(a), rtol=1e-12)


def test_a_result_larger_than_a_chunk_is_not_tried_as_one_message():
    """The client reads such a result as a stream at once: no refused one-message try
    counted as FAILED_PRECONDITION in the server's metrics."""
    import re
    import urllib.request

    from conftest import ServerProcess

    s = ServerProcess("--metrics_address=127.0.0.1:0")
    try:
        metrics_port = re.findall(r"\(port (\d+)\)", s.output())[1]

        def refused():
            text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read()
            return sum(float(line.rsplit(" ", 1)[1]) for line in text.decode().splitlines()
                       if line.startswith("gpucompute_requests_total{")
                       and 'code="FAILED_PRECONDITION"' in line)

        with s.client() as c:
            lat = np.linspace(-60, 60, 100_000, dtype=np.float32)
            for _ in range(3):  # 1.2 MB results, more than one 1 MiB chunk
                d = c.haversine_points(lat, lat, [(0, 0), (1, 1), (2, 2)])
                assert d.shape == (3, 100_000)
            c.normalize(np.ones((2, 8)))  # small: one message
        assert refused() == 0
    finally:
        s.stop()


def test_legacy_normalize_gives_scipy_110s_result(client, rng):
    x = np.sort(rng.uniform(0, 30, 200))
    y = 5.0 + np.sin(1.7 * x)  # far from zero mean: the two semantics differ most
    freqs = np.linspace(0.2, 4, 300)
    legacy = signal.lombscargle(x, y, freqs, precenter=True, normalize=True)
    got = client.lombscargle(x, y, freqs, precenter=True, normalize=True, legacy_normalize=True)
    np.testing.assert_allclose(got, legacy, rtol=1e-9, atol=1e-12 * legacy.max())
    batch = client.lombscargle(x, [y, 2 * y - 3], freqs, precenter=True, normalize=True,
                               legacy_normalize=True)
    np.testing.assert_allclose(batch[1], signal.lombscargle(x, 2 * y - 3, freqs, precenter=True,
                                                            normalize=True), rtol=1e-9,
                               atol=1e-12)
    ragged = client.lombscargle([x, x[:150]], [y, y[:150]], freqs, precenter=True,
                                normalize=True, legacy_normalize=True)
    np.testing.assert_allclose(ragged[1], signal.lombscargle(x[:150], y[:150], freqs,
                                                             precenter=True, normalize=True),
                               rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="legacy_normalize"):
        client.lombscargle(x, y, freqs, precenter=True, normalize=True, legacy_normalize=True,
                           weights=np.ones_like(x))
