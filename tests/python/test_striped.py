"""Striped downloads in the Python client (issue #12): ranges fetched at once on their
own connections, reassembled byte-exact in place; a stripe failing fails the call."""
from __future__ import annotations

import numpy as np
import pytest

import gpucompute


def _pattern(n: int) -> np.ndarray:
    return (np.arange(n, dtype=np.uint64) * 2654435761 % (1 << 32)).astype(np.uint32).view(
        np.float32)


@pytest.mark.parametrize("stripes", [2, 4])
def test_striped_download_is_byte_exact(server, stripes):
    data = _pattern((5 << 20) // 4 + 3085)  # not a multiple of the stripe
    with server.client(timeout=60, stripes=stripes, stripe_bytes=1 << 20) as c:
        buf = c.upload(data)
        back = c.download(buf, chunk_bytes=256 << 10)
        assert back.dtype == data.dtype and back.shape == data.shape
        assert np.array_equal(back.view(np.uint32), data.view(np.uint32))
        out = np.empty_like(data)
        assert c.download(buf, out=out) is out
        assert np.array_equal(out.view(np.uint32), data.view(np.uint32))
        small = _pattern(1000)
        small_buf = c.upload(small)
        assert np.array_equal(c.download(small_buf).view(np.uint32), small.view(np.uint32))
        c.delete(buf)
        c.delete(small_buf)


def test_striped_download_of_a_deleted_buffer_fails(server):
    with server.client(timeout=60, stripes=3, stripe_bytes=1 << 20) as c:
        buf = c.upload(_pattern(3 << 20))
        c.delete(buf)
        with pytest.raises(gpucompute.errors.GpuComputeError) as e:
            c.download(buf.id)
        assert "NOT_FOUND" in str(e.value.code)


def test_stripes_must_be_positive(server):
    with pytest.raises(ValueError):
        server.client(stripes=0)


@pytest.mark.parametrize("stripes", [2, 3])
def test_striped_upload_is_byte_exact(server, stripes):
    data = _pattern((3 << 20) // 4 + 777)
    with server.client(timeout=60, stripes=stripes, stripe_bytes=1 << 20) as c:
        buf = c.upload(data)
        assert buf.shape == data.shape
    with server.client(timeout=60) as plain:
        assert np.array_equal(plain.download(buf.id).view(np.uint32), data.view(np.uint32))
        plain.delete(buf.id)


def test_striped_aio_round_trip(server):
    import asyncio

    async def run():
        async with gpucompute.aio.Client(server.target, stripes=3, stripe_bytes=1 << 20) as c:
            data = _pattern((2 << 20) // 4 + 5)
            buf = await c.upload(data)
            back = await c.download(buf)
            await c.delete(buf)
            return data, back

    data, back = asyncio.run(run())
    assert np.array_equal(back.view(np.uint32), data.view(np.uint32))
