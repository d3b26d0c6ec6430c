"""gpucompute.dask: one job's blocks over three CPU-backend servers (127.0.0.2, .3, .4),
each bound to one worker of a real distributed LocalCluster (worker processes) by the
Servers plugin; every function against NumPy on several blocks (ragged last blocks,
float32 and float64), the local threaded scheduler, an error naming its block, seed 000's
shapes, and a server killed mid-job with the job still finishing correctly (last: it
leaves one server and one worker fewer)."""
from __future__ import annotations

import signal
import time

import numpy as np
import pytest

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
import dask.array as da  # noqa: E402

import gpucompute  # noqa: E402
import gpucompute.dask as gcd  # noqa: E402
import reference  # noqa: E402
from conftest import ServerProcess  # noqa: E402

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
# Shared memory on two servers; the third takes every block over gRPC.
SHARED = ("--allow_shared_memory",)


@pytest.fixture(scope="module")
def servers():
    started = [ServerProcess(f"--address={host}:0", *(SHARED if i < 2 else ()))
               for i, host in enumerate(HOSTS)]
    for s, host in zip(started, HOSTS):
        s.target = f"{host}:{s.port}"
    yield started
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def cluster(servers):
    with distributed.LocalCluster(n_workers=3, threads_per_worker=2, processes=True,
                                  dashboard_address=None) as lc, \
            distributed.Client(lc) as client:
        client.register_worker_plugin(gcd.Servers({i: s.target for i, s in enumerate(servers)}))
        yield client


def test_each_worker_calls_its_own_server(cluster, servers):
    bound = sorted(cluster.run(gcd.server_target).values())
    assert bound == sorted(s.target for s in servers)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_function_equals_numpy(cluster, rng, dtype):
    rtol = 2e-5 if dtype == np.float32 else 1e-12
    # discount product: values (D, M, O) in ragged blocks along D and M, factors (M, O)
    # chunked to match along M.
    factors = rng.random((250, 5)).astype(dtype)
    values = rng.random((23, 250, 5)).astype(dtype)
    got = gcd.discount_product(da.from_array(factors, chunks=(100, 5)),
                               da.from_array(values, chunks=(5, 100, 5)))
    assert got.numblocks == (5, 3, 1)
    # normalize along axis 0 (rows whole), blocks split the other axis: 4, ragged.
    a = (rng.random((300, 70)) + 0.5).astype(dtype)
    normalized = gcd.normalize(da.from_array(a, chunks=(64, 20)), axis=0)
    # haversine points, a (n, m) grid of points in ragged 2-D blocks, two references.
    lat = rng.uniform(-80, 80, (45, 37)).astype(dtype)
    lon = rng.uniform(-170, 170, (45, 37)).astype(dtype)
    refs = [(30.0, 101.0), (-12.5, 3.25)]
    dist = gcd.haversine_points(da.from_array(lat, chunks=(20, 16)),
                                da.from_array(lon, chunks=(20, 16)), refs)
    # Lomb-Scargle: 11 series of 64 samples in blocks of 4, one shared grid.
    x = np.sort(rng.uniform(0, 30, 64)).astype(dtype)
    y = rng.standard_normal((11, 64)).astype(dtype)
    grid = gpucompute.FrequencyGrid(0.1, 5.0, 40)
    power = gcd.lombscargle(x, da.from_array(y, chunks=(4, 64)), grid, method="direct")
    assert power.numblocks == (3, 1)

    got, normalized, dist, power = dask.compute(got, normalized, dist, power)

    for out in (got, normalized, dist, power):
        assert out.dtype == dtype
    np.testing.assert_array_equal(got, factors * values)
    np.testing.assert_allclose(normalized, reference.normalize(a.T).T, rtol=rtol)
    np.testing.assert_allclose(dist, reference.haversine(lat, lon, refs),
                               rtol=rtol, atol=1e-3 if dtype == np.float32 else 1e-9)
    want = np.stack([reference.lombscargle_1_15(x, row, grid.numpy()) for row in y])
    np.testing.assert_allclose(power, want, rtol=1e-3 if dtype == np.float32 else 1e-9,
                               atol=1e-3 * want.max() if dtype == np.float32 else 1e-12)


def test_large_blocks_through_shared_memory(cluster, rng):
    # Blocks of 1 MiB (in and out): over shared memory to .2 and .3, over gRPC to .4.
    a = rng.random((12, 1 << 16)) + 0.1
    got = gcd.normalize(da.from_array(a, chunks=(1, -1)), norm="l2").compute()
    np.testing.assert_allclose(got, reference.normalize(a, "l2"), rtol=1e-12)


def test_local_threaded_scheduler(servers, rng, monkeypatch):
    monkeypatch.setenv(gcd.TARGET_ENV, servers[2].target)
    assert gcd.server_target() == servers[2].target
    a = rng.random((30, 17)).astype(np.float32) + 0.5
    got = gcd.normalize(da.from_array(a, chunks=(7, 17))).compute(scheduler="threads")
    np.testing.assert_allclose(got, reference.normalize(a), rtol=2e-5)


def test_errors_name_the_block_and_server(rng):
    a = da.from_array(rng.random((8, 4)), chunks=(3, 4))
    start = time.monotonic()
    with pytest.raises(gpucompute.Unavailable,
                       match=r"normalize block \(\d, 0\) on 127\.0\.0\.1:1: .*does not answer"):
        gcd.normalize(a, target="127.0.0.1:1", timeout=5).compute(scheduler="threads")
    assert time.monotonic() - start < 20
    with pytest.raises(TypeError, match="float32 or float64"):
        gcd.normalize(da.ones((3, 3), dtype=np.int32))


def test_seed_000_shapes(cluster, rng):
    # The seed's example: multBy (M=4000, O=5) over discount (D=100, 4000, 5), float64,
    # ten blocks along D.
    mult_by = rng.random((4000, 5))
    discount = rng.random((100, 4000, 5))
    cv = gcd.discount_product(mult_by, da.from_array(discount, chunks=(10, 4000, 5)))
    np.testing.assert_array_equal(cv.compute(), mult_by * discount)


def test_server_killed_mid_job(cluster, servers):
    # Inputs generated on the workers (no NumPy array shipped in the graph), in 120
    # blocks spread over the three workers; .3's server is killed once a quarter is done.
    a = da.random.RandomState(49).random((120 * 64, 1024), chunks=(64, 1024)) + 0.1
    want = reference.normalize(a.compute(scheduler="threads"))
    result = cluster.persist(gcd.normalize(a, timeout=30))
    futures = distributed.futures_of(result)
    deadline = time.monotonic() + 60
    while sum(f.done() for f in futures) < len(futures) // 4:
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.005)
    assert sum(f.done() for f in futures) < len(futures) // 2, "too late to kill mid-job"
    servers[1].proc.send_signal(signal.SIGKILL)
    got = cluster.compute(result).result(timeout=60)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # The worker whose server died left; the two others did the rest.
    while len(cluster.scheduler_info()["workers"]) > 2:
        assert time.monotonic() < deadline, "the worker of the lost server did not leave"
        time.sleep(0.05)
    assert sorted(cluster.run(gcd.server_target).values()) == sorted(
        s.target for i, s in enumerate(servers) if i != 1)
