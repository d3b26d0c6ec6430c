"""The transparent same-host path: plain NumPy operands and results of 1 MiB and more go
through shared memory the client keeps (a pool reused across calls) where the server
maps this host's memory; nothing changes for the caller, and shared_memory=False turns
it off. (bench/same_host.py times it against local CuPy.)"""
from __future__ import annotations

import numpy as np
import pytest

import gpucompute
from conftest import ServerProcess


@pytest.fixture(scope="module")
def shm_server():
    s = ServerProcess("--allow_shared_memory")
    yield s
    s.stop()


def _regions(client):
    return list(client.shared_memory_status().regions)


def test_large_numpy_arrays_go_through_the_pool(shm_server, rng):
    with shm_server.client() as c:
        for _ in range(3):
            a = rng.uniform(0.5, 2.0, (4, 100_000))  # 3.2 MB in, 3.2 MB out
            out, timing = c.normalize(a, return_timing=True)
            np.testing.assert_allclose(out, a / a.sum(axis=-1, keepdims=True), rtol=1e-12)
            assert out.flags.owndata and out.flags.writeable
            assert timing.transfer_out >= 0
        regions = _regions(c)
        assert len(regions) == 2  # the input's and the result's, made once, reused
        # Results the client knows the shape of, and out= a plain array, the same way.
        f, v = rng.uniform(size=(1, 100_000)), rng.uniform(size=(3, 100_000))
        np.testing.assert_array_equal(c.discount_product(f, v), f * v)
        lat, lon = rng.uniform(-80, 80, 200_000), rng.uniform(-180, 180, 200_000)
        d = c.haversine_points(lat, lon, [(0, 0), (10, 10)])
        assert d.shape == (2, 200_000)
        grid = c.haversine_grid(gpucompute.LatLonMesh(29, 31, 500, 99, 101, 500), (30, 101),
                                dtype=np.float32)
        assert grid.shape == (1, 500, 500) and grid.dtype == np.float32
        assert abs(grid[0, 250, 0] - 192.5) < 5  # 2 degrees of longitude at 30 N, ~193 km
        given = np.empty_like(v)
        assert c.normalize(v, out=given) is given
        np.testing.assert_allclose(given, v / v.sum(axis=-1, keepdims=True), rtol=1e-12)
        np.testing.assert_allclose(c.normalize(a.T, axis=0), (a / a.sum(-1, keepdims=True)).T,
                                   rtol=1e-12)
    with shm_server.client() as c:
        assert _regions(c) == []  # closed: unregistered


def test_small_arrays_and_the_option_off_use_grpc(shm_server):
    with shm_server.client() as c:
        c.normalize(np.ones((4, 1000)))  # 32 kB
        assert _regions(c) == []
    with shm_server.client(shared_memory=False) as c:
        out = c.normalize(np.ones((4, 100_000)))
        assert out.shape == (4, 100_000) and _regions(c) == []


def test_a_server_without_shared_memory_is_used_over_grpc(client):
    out = client.normalize(np.ones((4, 100_000)))
    np.testing.assert_allclose(out, np.full((4, 100_000), 1e-5))


def test_a_failed_call_does_not_lend_its_regions_again(shm_server):
    with shm_server.client() as c:
        with pytest.raises(gpucompute.InvalidArgument):
            c.lombscargle(np.ones(300_000), np.ones(300_000), np.ones(3), accuracy=1.0)
        assert c._pool._free == []
        out = c.normalize(np.ones((2, 300_000)))
        assert out[0, 0] == 1 / 300_000
