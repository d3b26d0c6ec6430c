"""The blocking client's Compute.Session: with session=True (the default)
the calls it reads as one message go over one open session; results and exceptions are
those of the unary calls; threads share the session; a server restart opens a new one."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import gpucompute as gc
from conftest import ServerProcess

# x, y and a grid for a Lomb-Scargle request that runs about a second on the CPU backend.
_SLOW_X = np.sort(np.random.default_rng(7).uniform(0, 100, 20000))
_SLOW_GRID = gc.FrequencyGrid(0.1, 3, 100000)


def _download_and_delete(kept):
    try:
        return kept.download()
    finally:
        kept.delete()


def _calls(rng):
    """Each operation and result option once: (name, call(client))."""
    a32 = rng.uniform(0.5, 1.5, (5, 300)).astype(np.float32)
    factors, values = rng.uniform(0, 1, (3, 4)), rng.uniform(0, 1, (6, 3, 4))
    lat, lon = rng.uniform(-80, 80, 50), rng.uniform(-180, 180, 50)
    x = np.sort(rng.uniform(0, 50, 200))
    y = np.sin(1.3 * x) + rng.normal(0, 0.1, x.size)
    freqs = np.linspace(0.1, 3, 400)
    mesh = gc.LatLonMesh(29, 31, 40, 99, 101, 50)
    chunked = rng.uniform(1, 2, (8, 1024))
    return [
        ("normalize", lambda c: c.normalize(a32, norm="l2")),
        ("discount_product", lambda c: c.discount_product(factors, values)),
        ("haversine_grid", lambda c: c.haversine_grid(mesh, [(30, 100)], dtype=np.float32)),
        ("haversine_points", lambda c: c.haversine_points(lat, lon, [(0, 0), (45, 90)])),
        ("lombscargle", lambda c: c.lombscargle(x, y, freqs, normalize=True)),
        ("lombscargle amplitude", lambda c: c.lombscargle(x, y, freqs, normalize="amplitude")),
        ("out=", lambda c: c.normalize(a32, out=np.empty_like(a32))),
        ("kept", lambda c: _download_and_delete(c.normalize(a32, keep_on_device=True))),
        ("timing", lambda c: c.normalize(a32, return_timing=True)[0]),
        ("chunked (streamed after the refusal)",
         lambda c: c.normalize(chunked, chunk_bytes=4096)),
    ]


def test_session_and_unary_calls_give_identical_results(server, rng):
    with server.client(timeout=60) as on, server.client(timeout=60, session=False) as off:
        for name, call in _calls(np.random.default_rng(rng.integers(1 << 31))):
            got_on = call(on)
            got_off = call(off)
            assert got_on.dtype == got_off.dtype and got_on.shape == got_off.shape, name
            np.testing.assert_array_equal(got_on, got_off, err_msg=name)
        assert on._session is not None and not on._session.broken
        assert off._session is None


def test_the_session_carries_the_small_calls(server, rng):
    with server.client(timeout=60) as c:
        runs = []
        c.normalize(rng.uniform(1, 2, 8))  # opens the session
        session = c._session
        real_run = session.run

        def spy(rpc, request, timeout):
            runs.append(rpc)
            return real_run(rpc, request, timeout)

        session.run = spy
        c.normalize(rng.uniform(1, 2, (4, 256)))
        c.lombscargle(np.arange(10.0), np.arange(10.0), np.linspace(0.1, 1, 10))
        c.normalize(rng.uniform(1, 2, (2, 1 << 17)))  # more than 1 MiB in: streamed at once
        assert runs == ["Compute.Normalize", "Compute.LombScargle"]
        assert c._session is session


def _failure(call):
    try:
        call()
    except gc.GpuComputeError as e:
        return type(e), str(e), e.code, e.message
    raise AssertionError("no exception")


def test_session_and_unary_calls_raise_identical_exceptions(server, rng):
    zero_row = np.array([[1.0, 2.0], [0.0, 0.0]])
    uneven = np.array([0.1, 0.2, 0.5, 0.51])
    x = np.arange(16.0)
    failing = [
        lambda c: c.normalize(zero_row),
        lambda c: c.discount_product(np.ones((2, 3)), np.ones((4, 5))),
        lambda c: c.lombscargle(x, np.sin(x), uneven, method="nufft"),
        lambda c: c.haversine_points(np.array([95.0]), np.array([0.0]), [(0, 0)]),
        lambda c: c.lombscargle(_SLOW_X, np.sin(_SLOW_X), _SLOW_GRID, method="direct",
                                timeout=0.05),
    ]
    with server.client(timeout=60) as on, server.client(timeout=60, session=False) as off:
        for call in failing:
            assert _failure(lambda: call(on)) == _failure(lambda: call(off))
        # The session goes on after each.
        np.testing.assert_allclose(on.normalize(np.ones(4)), np.full(4, 0.25))
        assert not on._session.broken


def test_a_timed_out_request_raises_on_time_while_others_go_on(server):
    with server.client() as c:
        c.normalize(np.ones(4))
        start = time.monotonic()
        with pytest.raises(gc.DeadlineExceeded):
            c.lombscargle(_SLOW_X, np.sin(_SLOW_X), _SLOW_GRID, method="direct", timeout=0.1)
        assert time.monotonic() - start < 0.5  # not when the work ends, ~1 s later
        np.testing.assert_allclose(c.normalize(np.ones(4)), np.full(4, 0.25))


def test_threads_share_one_session(server):
    with server.client(timeout=60) as c:
        c.normalize(np.ones(4))
        session = c._session
        errors = []

        def work(seed):
            r = np.random.default_rng(seed)
            try:
                for _ in range(150):
                    a = r.uniform(0.5, 1.5, (r.integers(1, 4), r.integers(2, 300)))
                    np.testing.assert_allclose(c.normalize(a), a / a.sum(1, keepdims=True),
                                               rtol=1e-12)
                with pytest.raises(gc.InvalidArgument):
                    c.normalize(np.zeros((1, 3)))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert c._session is session


def test_a_server_restart_opens_a_new_session(rng):
    first = ServerProcess()
    port = first.port
    c = gc.Client(first.target, timeout=30)
    try:
        np.testing.assert_allclose(c.normalize(np.ones(4)), np.full(4, 0.25))
        broken = c._session
        # A request in flight when the server goes raises as its unary call would.
        outcome = []
        slow = threading.Thread(target=lambda: outcome.append(_failure(lambda: c.lombscargle(
            _SLOW_X, np.sin(_SLOW_X), _SLOW_GRID, method="direct"))))
        slow.start()
        time.sleep(0.3)
        first.proc.kill()
        slow.join(timeout=30)
        first.stop()
        assert outcome and outcome[0][0] is gc.errors.Unavailable, outcome
        second = ServerProcess(f"--address=127.0.0.1:{port}")
        try:
            deadline = time.monotonic() + 20
            while True:  # the channel reconnects: as a unary call, UNAVAILABLE meanwhile
                try:
                    np.testing.assert_allclose(c.normalize(np.ones(4)), np.full(4, 0.25))
                    break
                except gc.errors.Unavailable:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            assert c._session is not broken and not c._session.broken
        finally:
            second.stop()
    finally:
        c.close()


def test_session_off_opens_none(server):
    with server.client(session=False) as c:
        c.normalize(np.ones(4))
        assert c._session is None


# gpucompute.aio: the same session on grpc.aio.

def test_aio_session_and_unary_calls_give_identical_results_and_exceptions(server, rng):
    import asyncio

    import gpucompute.aio

    zero_row = np.array([[1.0, 2.0], [0.0, 0.0]])

    async def outcome(call):
        try:
            return await call
        except gc.GpuComputeError as e:
            return type(e), str(e)

    async def main():
        async with gc.aio.Client(server.target, timeout=60) as on, \
                gc.aio.Client(server.target, timeout=60, session=False) as off:
            calls = _calls(np.random.default_rng(rng.integers(1 << 31)))
            for name, call in calls[:6]:  # those whose result needs no awaited download
                got_on, got_off = await call(on), await call(off)
                np.testing.assert_array_equal(got_on, got_off, err_msg=name)
            assert await outcome(on.normalize(zero_row)) == await outcome(off.normalize(zero_row))
            slow = dict(method="direct", timeout=0.1)
            start = time.monotonic()
            timed_out = await outcome(on.lombscargle(_SLOW_X, np.sin(_SLOW_X), _SLOW_GRID, **slow))
            assert time.monotonic() - start < 0.5
            assert timed_out == await outcome(
                off.lombscargle(_SLOW_X, np.sin(_SLOW_X), _SLOW_GRID, **slow))
            # Many tasks at once on the one session.
            rows = [np.random.default_rng(s).uniform(0.5, 1.5, (2, 64)) for s in range(64)]
            results = await asyncio.gather(*(on.normalize(r) for r in rows))
            for r, got in zip(rows, results):
                np.testing.assert_allclose(got, r / r.sum(1, keepdims=True), rtol=1e-12)
            assert on._session is not None and not on._session.broken
            assert off._session is None

    asyncio.run(main())
