"""Striped transfers in the Python client: download ranges fetched, upload
ranges sent and streamed calls run at once on their own connections, reassembled
byte-exact in place; a stripe failing fails the call and cancels the others."""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import grpc
import numpy as np
import pytest

import gpucompute
from gpucompute._pb import pb
from conftest import ServerProcess


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


@pytest.mark.parametrize("processes", [False, True])
def test_striped_aio_round_trip(server, processes):
    async def run():
        async with gpucompute.aio.Client(server.target, stripes=3, stripe_bytes=1 << 20,
                                         stripe_processes=processes) as c:
            data = _pattern((2 << 20) // 4 + 5)
            buf = await c.upload(data)
            back = await c.download(buf)
            await c.delete(buf)
            return data, back

    data, back = asyncio.run(run())
    assert np.array_equal(back.view(np.uint32), data.view(np.uint32))


@pytest.mark.parametrize("op", ["discount_product", "normalize"])
def test_striped_streaming_is_byte_exact(server, rng, op):
    """Calls over row ranges at once, written in place, equal one call's result."""
    values = rng.uniform(0.1, 10, (37, 300, 7)).astype(np.float32)  # 37 rows over 3 calls
    factors = rng.uniform(0.5, 1.0, (300, 7)).astype(np.float32)

    def run(c, **kwargs):
        if op == "normalize":
            return c.stream_normalize(values, norm="l2", input_chunk_bytes=20 << 10, **kwargs)
        return c.stream_discount_product(factors, values, input_chunk_bytes=20 << 10, **kwargs)

    with server.client(timeout=60) as plain, \
            server.client(timeout=60, stripes=3, stripe_bytes=64 << 10) as striped:
        expected = run(plain)
        back, timing = run(striped, return_timing=True)
        assert back.tobytes() == expected.tobytes()
        assert timing.wall > 0
        out = np.full_like(values, np.nan)
        assert run(striped, out=out) is out
        assert out.tobytes() == expected.tobytes()
        with pytest.raises(ValueError, match=r"out has shape \(37, 7, 300\)"):
            run(striped, out=np.empty((37, 7, 300), np.float32))
        # Factors spanning the first axis cannot be cut there: one call, same result.
        full = rng.uniform(0.5, 1.0, values.shape).astype(np.float32)
        assert (striped.stream_discount_product(full, values).tobytes()
                == (full * values).tobytes())


def test_striped_streaming_aio(server, rng):
    values = rng.uniform(-1, 1, (9, 4096)).astype(np.float64)
    factors = rng.uniform(0.5, 1.0, 4096)

    async def run():
        async with gpucompute.aio.Client(server.target, stripes=4, stripe_bytes=32 << 10) as c:
            return await c.stream_discount_product(factors, values, input_chunk_bytes=8192)

    assert asyncio.run(run()).tobytes() == (factors * values).tobytes()


def _admitted(call):
    """call()'s result once the server admits it: slots of cancelled calls come back as
    the server sees the cancellations."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return call()
        except gpucompute.ResourceExhausted:
            assert time.monotonic() < deadline, "a stripe's slot was never freed"
            time.sleep(0.05)


@contextlib.contextmanager
def _only_slot_held(target):
    """The server's only request slot (--max_in_flight=1) taken by a Buffers.Upload whose
    header is sent and whose data never comes: the stripes meet a full server whatever
    their timing. Cancelled on leaving."""
    release = threading.Event()

    def messages():
        yield pb.UploadRequest(header=pb.UploadHeader(dtype=pb.FLOAT32, shape=[4]))
        release.wait()

    with grpc.insecure_channel(target) as channel:
        upload = channel.stream_unary("/gpucompute.v1.Buffers/Upload",
                                      request_serializer=pb.UploadRequest.SerializeToString,
                                      response_deserializer=pb.BufferInfo.FromString)
        held = upload.future(messages(), timeout=60)
        try:
            with gpucompute.Client(target) as probe:
                deadline = time.monotonic() + 10
                while True:  # until the server counts the upload in flight
                    try:
                        probe.discount_product(np.ones(1, np.float32), np.ones(1, np.float32))
                    except gpucompute.ResourceExhausted:
                        break
                    assert time.monotonic() < deadline, "the held upload was never admitted"
                    time.sleep(0.01)
            yield
        finally:
            held.cancel()
            release.set()


@pytest.mark.parametrize("processes", [False, True])
def test_a_refused_stripe_fails_the_call_and_keeps_no_slot(rng, processes):
    """Every slot taken: the stripes are refused; the call fails with that status, naming
    the limit and, in stripe processes (test_stripe_processes.py), the stripe's rows.
    Once the slot comes back a call is admitted, and no stripe left a buffer. (Which
    stripes a free server would refuse depends on their timing, so the test holds the
    slot itself.)"""
    server = ServerProcess("--max_in_flight=1")
    try:
        values = rng.uniform(-1, 1, (3, 1 << 22)).astype(np.float32)  # 3 stripes of 16 MiB
        factors = rng.uniform(0.5, 1.0, 1 << 22).astype(np.float32)
        with server.client(timeout=60, stripes=3, stripe_bytes=1 << 20,
                           stripe_processes=processes) as c:
            with _only_slot_held(server.target):
                with pytest.raises(gpucompute.ResourceExhausted) as e:
                    c.stream_discount_product(factors, values)
            assert "max_in_flight 1" in str(e.value)
            assert e.value.reason == "RESOURCE_EXHAUSTED"  # carried back from a stripe process
            assert e.value.call == "stream_discount_product"
            assert ("(stripe rows [" in str(e.value)) == processes
            small = values[:, :1000]
            back = _admitted(lambda: c.stream_discount_product(factors[:1000], small))
            assert back.tobytes() == (factors[:1000] * small).tobytes()
            assert not c.list_buffers()
    finally:
        server.stop()


@pytest.mark.parametrize("processes", [False, True])
def test_cancelling_a_striped_stream_cancels_every_stripe(rng, processes):
    """An asyncio task cancelled mid-call: each stripe's call is cancelled, so the server
    frees their slots (three in flight at most: a full-width call runs right after)."""
    server = ServerProcess("--max_in_flight=3")
    values = rng.uniform(-1, 1, (3, 1 << 23)).astype(np.float32)  # 3 stripes of 32 MiB
    factors = rng.uniform(0.5, 1.0, 1 << 23).astype(np.float32)
    small = np.ascontiguousarray(values[:, :1 << 18])  # 3 MiB: three calls again

    async def run():
        async with gpucompute.aio.Client(server.target, timeout=60, stripes=3,
                                         stripe_bytes=1 << 20, stripe_processes=processes) as c:
            task = asyncio.ensure_future(c.stream_discount_product(factors, values))
            await asyncio.sleep(0.02)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            deadline = time.monotonic() + 10
            while True:  # the slots come back as the server sees the cancellations
                try:
                    return await c.stream_discount_product(factors[:1 << 18], small)
                except gpucompute.ResourceExhausted:
                    assert time.monotonic() < deadline, "a stripe's slot was never freed"
                    await asyncio.sleep(0.05)

    try:
        back = asyncio.run(run())
        assert back.tobytes() == (factors[:1 << 18] * small).tobytes()
    finally:
        server.stop()
