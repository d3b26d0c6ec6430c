"""Stripes in worker processes (Client(stripe_processes=True)): the striped
uploads, downloads and stream_* calls of test_striped.py with each stripe in a worker
process and the data in shared memory, byte-exact against one stream, leaving no fd or
/dev/shm entry behind; close() stops the workers; a worker that dies is reported and
replaced. A stripe refused by the server: test_striped.py's failing-stripe test, run
with stripe processes too."""
from __future__ import annotations

import gc
import os
import signal
import time

import numpy as np
import pytest

import gpucompute


def _pattern(n: int) -> np.ndarray:
    return (np.arange(n, dtype=np.uint64) * 2654435761 % (1 << 32)).astype(np.uint32).view(
        np.float32)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _shm_entries() -> set:
    # The client's own objects only: other programs on the host come and go meanwhile.
    return {e for e in os.listdir("/dev/shm") if e.startswith("gpucompute_")}


def _ended(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as f:  # a zombie until Popen reaps it: ended too
            if f.read().split()[2] == "Z":
                return True
        time.sleep(0.05)
    return False


def test_process_stripes_are_byte_exact_and_leave_nothing(server, rng):
    data = _pattern((17 << 20) // 4 + 3085)  # not a multiple of the stripe; out= copied by parts
    values = rng.uniform(0.1, 10, (37, 300, 7)).astype(np.float32)  # 37 rows over 3 calls
    factors = rng.uniform(0.5, 1.0, (300, 7)).astype(np.float32)
    shm_before = _shm_entries()
    with server.client(timeout=60) as plain:
        expected = plain.stream_discount_product(factors, values)
        expected_l2 = plain.stream_normalize(values, norm="l2")
    with server.client(timeout=60, stripes=3, stripe_bytes=1 << 20,
                       stripe_processes=True) as c:
        buf = c.upload(data)
        gc.collect()
        fds_before = _open_fds()  # the workers' sockets included
        back = c.download(buf, chunk_bytes=256 << 10)
        assert back.tobytes() == data.tobytes() and back.shape == data.shape
        out = np.empty_like(data)  # outside shared memory: copied in at the end
        assert c.download(buf, out=out) is out
        assert out.tobytes() == data.tobytes()
        c.delete(buf)

        kwargs = dict(input_chunk_bytes=20 << 10)
        c.stripe_bytes = 64 << 10
        got, timing = c.stream_discount_product(factors, values, return_timing=True, **kwargs)
        assert got.tobytes() == expected.tobytes() and timing.wall > 0
        assert c.stream_normalize(values, norm="l2", **kwargs).tobytes() == expected_l2.tobytes()
        out = np.full_like(values, np.nan)
        assert c.stream_discount_product(factors, values, out=out, **kwargs) is out
        assert out.tobytes() == expected.tobytes()
        shared = c.stripe_array(values.shape, values.dtype)  # no copy in for this one
        shared[...] = values
        assert c.stream_discount_product(factors, shared, **kwargs).tobytes() == expected.tobytes()
        assert len(c._workers.pids()) == 3
        with pytest.raises(gpucompute.DeadlineExceeded):
            c.stream_discount_product(factors, values, timeout=1e-4, **kwargs)

        del back, got, shared, out
        gc.collect()
        assert _open_fds() <= fds_before  # every block's fd closed with its last view
        assert not [b for b in c.list_buffers() if b.id == buf.id]
    assert _shm_entries() <= shm_before


def test_close_stops_the_workers(server):
    c = server.client(timeout=60, stripes=2, stripe_bytes=1 << 20, stripe_processes=True)
    data = _pattern(3 << 20)
    buf = c.upload(data)
    pids = c._workers.pids()
    assert len(pids) == 2
    c.delete(buf)
    c.close()
    assert all(_ended(pid) for pid in pids)
    with pytest.raises(ValueError, match="closed"):
        c._workers.run(None, None, 0, None)


def test_a_dead_worker_is_reported_and_replaced(server, rng):
    values = rng.uniform(-1, 1, (4, 1 << 16)).astype(np.float64)  # 4 stripes of 512 KiB
    factors = rng.uniform(0.5, 1.0, 1 << 16)
    with server.client(timeout=60, stripes=2, stripe_bytes=256 << 10,
                       stripe_processes=True) as c:
        assert c.stream_discount_product(factors, values).tobytes() == (factors * values).tobytes()
        victim = c._workers.pids()[0]
        os.kill(victim, signal.SIGKILL)
        assert _ended(victim)
        with pytest.raises(gpucompute.StripeWorkerDied, match=f"process {victim} ended"):
            c.stream_discount_product(factors, values)
        assert c.stream_discount_product(factors, values).tobytes() == (factors * values).tobytes()
        assert victim not in c._workers.pids() and len(c._workers.pids()) == 2


def test_process_stripes_need_no_credentials(server):
    import grpc

    with pytest.raises(ValueError, match="stripe_processes"):
        gpucompute.Client(server.target, stripes=2, stripe_processes=True,
                          credentials=grpc.local_channel_credentials())
    with server.client(stripes=1, stripe_processes=True) as c:  # one stripe: no workers
        assert c._workers is None
