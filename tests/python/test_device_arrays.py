"""Device arrays in, device arrays out: a CuPy or PyTorch input gives a result of its
library on its device (written by the server through CUDA IPC where it shares the
input that way, else copied back); NumPy in, NumPy out.

The CuPy and PyTorch checks need the library and a GPU (they skip elsewhere) and run on
the GPU machine; the missing-driver case runs everywhere a driver is missing.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import gpucompute as gc
from gpucompute import _cuda_arrays
from conftest import ServerProcess


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


class FakeDeviceArray:
    """__cuda_array_interface__ over host memory: what a device array looks like to the
    client on a host that cannot read device memory."""

    def __init__(self, a):
        self.host = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str,
                                         "data": (a.ctypes.data, False), "version": 3}


@pytest.mark.skipif(_has_driver(), reason="this host has a CUDA driver")
def test_a_device_array_without_a_driver_says_so(client):
    with pytest.raises(_cuda_arrays.NoCudaDriver, match="CUDA driver cannot be loaded"):
        client.normalize(FakeDeviceArray(np.ones((2, 3))))
    assert issubclass(_cuda_arrays.NoCudaDriver, RuntimeError)


def test_numpy_in_numpy_out(client):
    assert type(client.normalize(np.ones((2, 3)))) is np.ndarray


@pytest.fixture(scope="module")
def gpu_server():
    """A server on this host's GPU, sharing memory (CUDA IPC); skipped without one."""
    if not _has_driver():
        pytest.skip("no CUDA driver on this host")
    s = ServerProcess("--backend=cuda", "--allow_shared_memory")
    yield s
    s.stop()




@pytest.mark.parametrize("server_kind", ["cuda", "cpu"])
def test_cupy_in_cupy_out(server_kind, gpu_server, server):
    cupy = pytest.importorskip("cupy")
    target = gpu_server if server_kind == "cuda" else server
    with gc.Client(target.target, timeout=60) as c:
        a = cupy.random.random((4, 1000), dtype=cupy.float32) + 0.5
        out = c.normalize(a)
        assert isinstance(out, cupy.ndarray) and out.device == a.device
        cupy.testing.assert_allclose(out, a / a.sum(axis=-1, keepdims=True), rtol=1e-5)
        lat = cupy.linspace(29, 31, 100)
        d = c.haversine_points(lat, lat + 70, (30, 101))
        assert isinstance(d, cupy.ndarray) and d.shape == (1, 100)


@pytest.mark.parametrize("server_kind", ["cuda", "cpu"])
def test_torch_in_torch_out(server_kind, gpu_server, server):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    target = gpu_server if server_kind == "cuda" else server
    with gc.Client(target.target, timeout=60) as c:
        a = torch.rand((4, 1000), dtype=torch.float64, device="cuda") + 0.5
        out = c.normalize(a)
        assert isinstance(out, torch.Tensor) and out.device == a.device
        torch.testing.assert_close(out, a / a.sum(dim=-1, keepdim=True))
        f = torch.full((1000,), 2.0, dtype=torch.float64, device="cuda")
        p = c.discount_product(f, a)
        assert isinstance(p, torch.Tensor) and p.shape == (4, 1000)
