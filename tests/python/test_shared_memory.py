"""Same-host zero copy from Python: Client.shared_array operands and out=, slices,
mixing with plain NumPy, freeing, and what a client is told when it cannot use it.
The CuPy (CUDA IPC) tests run where CuPy and a GPU are (bench/run_gpu_shm.sh)."""
from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

import gpucompute
from conftest import ServerProcess
from gpucompute import _cuda_arrays, _shared_memory

ON_CUDA = os.environ.get("GPUCOMPUTE_TEST_BACKEND") == "cuda"


@pytest.fixture(scope="module")
def shm_server():
    s = ServerProcess("--allow_shared_memory", *(["--backend=cuda"] if ON_CUDA else []))
    yield s
    s.stop()


def sum_rows(a):
    return a / a.sum(axis=-1, keepdims=True, dtype=np.float64)


def test_shared_operands_and_out(shm_server):
    rng = np.random.default_rng()
    with shm_server.client() as gc:
        x = gc.shared_array((10, 1000), np.float32)
        x[...] = rng.uniform(0.5, 2.0, x.shape)
        out = gc.shared_array((10, 1000), np.float32)
        got, timing = gc.normalize(x, out=out, return_timing=True)
        assert got is out
        np.testing.assert_allclose(out, sum_rows(x), rtol=1e-6)
        assert timing.transfer_out >= 0
        # Streamed back when out is plain NumPy; in place when out is the input.
        np.testing.assert_allclose(gc.normalize(x), sum_rows(x), rtol=1e-6)
        expected = sum_rows(x)
        gc.normalize(x, out=x)
        np.testing.assert_allclose(x, expected, rtol=1e-6)


def test_slices_mix_with_plain_numpy(shm_server):
    rng = np.random.default_rng()
    with shm_server.client() as gc:
        arena = gc.shared_array(4 * 5 + 3 * 4 * 5 + 7, np.float64)
        factors = arena[7:27].reshape(4, 5)       # a slice at an offset
        values = arena[27:].reshape(3, 4, 5)
        factors[...] = rng.uniform(0.5, 1.0, factors.shape)
        values[...] = rng.uniform(-1, 1, values.shape)
        for f, v in [(factors, values), (factors.copy(), values), (factors, values.copy())]:
            np.testing.assert_allclose(gc.discount_product(f, v), factors * values, rtol=1e-15)
        # Not C-contiguous: sent inline as a copy, still right.
        np.testing.assert_allclose(gc.normalize(values[:, ::2]), sum_rows(values[:, ::2]),
                                   rtol=1e-13)
        out = gc.shared_array((3, 4, 5))
        gc.discount_product(factors, values, out=out)
        np.testing.assert_allclose(out, factors * values, rtol=1e-15)


def test_status_free_and_close(shm_server):
    gc = shm_server.client()
    a = gc.shared_array(1000)
    status = gc.shared_memory_status()
    assert a.nbytes in [r.byte_size for r in status.regions]
    assert gc.free_shared(a) == a.nbytes
    assert gc.free_shared(a) == 0
    a[...] = 1.0  # still an array: now sent inline
    np.testing.assert_allclose(gc.normalize(a), np.full(1000, 1e-3))
    b = gc.shared_array(16)
    ids = {r.id for r in gc.shared_memory_status().regions}
    gc.close()
    with shm_server.client() as other:
        assert not ids & {r.id for r in other.shared_memory_status().regions}
    del b


def test_aio_client(shm_server):
    async def run():
        async with gpucompute.aio.Client(shm_server.target) as gc:
            x = await gc.shared_array(64, np.float64)
            x[...] = np.arange(1, 65)
            out = await gc.shared_array(64, np.float64)
            await gc.normalize(x, out=out, norm="max_abs")
            np.testing.assert_allclose(out, x / 64)
    asyncio.run(run())


def test_refused_without_the_flag_and_from_another_host(server, shm_server, monkeypatch):
    with server.client() as gc:
        with pytest.raises(gpucompute.FailedPrecondition, match="--allow_shared_memory"):
            gc.shared_array(10)
        np.testing.assert_allclose(gc.normalize(np.ones(4)), np.full(4, 0.25))
    monkeypatch.setattr(_shared_memory, "host_boot_id", lambda: "another-host")
    with shm_server.client() as gc:
        with pytest.raises(gpucompute.FailedPrecondition, match="another host"):
            gc.shared_array(10)


class FakeDeviceArray:
    """__cuda_array_interface__ over host memory: enough to read the interface."""

    def __init__(self, a, strides=None):
        self.host = a
        self.__cuda_array_interface__ = {
            "shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
            "strides": strides, "version": 3}


def test_device_array_interfaces_are_read_without_cuda():
    a = np.zeros((3, 4), np.float32)
    arr = _cuda_arrays.CudaArray(FakeDeviceArray(a), "x")
    assert (arr.ptr, arr.shape, arr.dtype, arr.nbytes) == (a.ctypes.data, (3, 4), a.dtype, 48)
    assert _cuda_arrays.is_cuda_array(FakeDeviceArray(a))
    assert not _cuda_arrays.is_cuda_array(a)  # host DLPack (kDLCPU) is not device memory
    with pytest.raises(ValueError, match="not C-contiguous"):
        _cuda_arrays.CudaArray(FakeDeviceArray(a, strides=(4, 12)), "x")
    _cuda_arrays.CudaArray(FakeDeviceArray(np.zeros((1, 4)), strides=(999, 8)), "x")
    with pytest.raises(TypeError, match="int32"):
        _cuda_arrays.CudaArray(FakeDeviceArray(np.zeros(3, np.int32)), "x")
    # The DLPack reader, on a host array (the fields are the same for a CUDA one).
    b = np.arange(12, dtype=np.float64).reshape(3, 4)[1:]
    assert _cuda_arrays._from_dlpack(b) == (b.ctypes.data, "<f8", (2, 4), None)  # compact
    assert _cuda_arrays._from_dlpack(b[:, ::2])[2:] == ((2, 2), (32, 16))


class DLPackOnly:
    """A device array that speaks DLPack only (as some libraries do)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@pytest.mark.skipif(not ON_CUDA, reason="CUDA IPC needs the CUDA backend and CuPy")
def test_cupy_operands_and_out(shm_server):
    cp = pytest.importorskip("cupy")
    with shm_server.client() as gc:
        x = cp.random.uniform(0.5, 2.0, (10, 100_000)).astype(cp.float32)
        out = cp.empty_like(x)
        assert gc.normalize(x, out=out) is out
        cp.testing.assert_allclose(out, x / x.sum(axis=-1, keepdims=True), rtol=1e-5)
        # Device operands with a host result, and device and host operands mixed.
        np.testing.assert_allclose(gc.normalize(x), cp.asnumpy(out), rtol=1e-6)
        f = cp.random.uniform(0.5, 1, (40, 5))
        v = np.random.default_rng().uniform(-1, 1, (8, 40, 5))
        np.testing.assert_allclose(gc.discount_product(f, v), cp.asnumpy(f) * v, rtol=1e-15)
        # DLPack only, in and out.
        out2 = cp.empty_like(x)
        gc.normalize(DLPackOnly(x), out=DLPackOnly(out2))
        cp.testing.assert_allclose(out2, out, rtol=1e-6)
        assert gc.free_shared(x) > 0
