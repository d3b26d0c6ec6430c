"""Servers stopped (SIGTERM) and started again under running clients: no call ever hangs.

A client process holds four clients of one address (session, session with a timeout,
one call per request, asyncio) while this process starts a server there, stops it and
starts another, many times. After each start every client's next calls succeed; a call
made as the server drains returns at once (its result, or Unavailable); one made once
it has gone raises Unavailable, within its timeout or without one (every other server
gets no call while it drains: the first call after a working one then meets a refused
connection).
"""
from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import CLIENT_DIR, ServerProcess

RESTARTS = 50
TIMEOUT_S = 3.0
#: what a call without a timeout may take before it counts as hung
HANG_S = 10.0

CLIENT = r"""
import asyncio, faulthandler, json, signal, sys, time
import numpy as np
sys.path.insert(0, sys.argv[2])
import gpucompute, gpucompute.aio

faulthandler.register(signal.SIGUSR1, all_threads=True)  # the stacks, should one hang
target, timeout = sys.argv[1], float(sys.argv[3])
# Reconnect at once after a restart (gRPC's backoff would wait 1 s and more).
fast = [("grpc.initial_reconnect_backoff_ms", 20), ("grpc.max_reconnect_backoff_ms", 50)]
clients = {"session": gpucompute.Client(target, options=fast),
           "session+timeout": gpucompute.Client(target, timeout=timeout, options=fast),
           "unary": gpucompute.Client(target, session=False, options=fast)}
loop = asyncio.new_event_loop()

async def make_aio():
    return gpucompute.aio.Client(target, options=fast)

aio = loop.run_until_complete(make_aio())
x = np.arange(16, dtype=np.float64).reshape(2, 8) + 1

def outcome(call):
    start = time.monotonic()
    try:
        call()
        what = "ok"
    except gpucompute.GpuComputeError as e:
        what = f"{type(e).__name__}: {e}"
    return what, round(time.monotonic() - start, 3)

for _ in sys.stdin:
    results = {name: outcome(lambda: client.normalize(x)) for name, client in clients.items()}
    results["aio"] = outcome(lambda: loop.run_until_complete(aio.normalize(x)))
    print(json.dumps(results), flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Clients:
    """The client process; ``call()`` has each of its clients make one call."""

    def __init__(self, target: str, log: Path):
        self.log = log
        with open(log, "w") as stderr:  # a file: a full pipe would stop the process
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CLIENT, target, str(CLIENT_DIR), str(TIMEOUT_S)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)

    def call(self, what: str):
        self.proc.stdin.write("call\n")
        self.proc.stdin.flush()
        # Four calls in turn, each bounded: the timed one by its timeout, the others by HANG_S.
        ready, _, _ = select.select([self.proc.stdout], [], [], 3 * HANG_S + TIMEOUT_S)
        if not ready:
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1)
            self.proc.kill()
            raise AssertionError(f"a call hung ({what}):\n{self.log.read_text()}")
        line = self.proc.stdout.readline()
        assert line, f"the client process ended ({what}):\n{self.log.read_text()}"
        results = json.loads(line)
        for name, (_, seconds) in results.items():
            bound = TIMEOUT_S + 1 if name == "session+timeout" else HANG_S
            assert seconds < bound, f"{name} took {seconds} s ({what}): {results}"
        return {name: outcome for name, (outcome, _) in results.items()}

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def test_restarted_servers_never_hang_a_call(tmp_path):
    port = _free_port()
    clients = _Clients(f"127.0.0.1:{port}", tmp_path / "clients.log")
    try:
        for restart in range(RESTARTS):
            server = ServerProcess(f"--address=127.0.0.1:{port}", "--grace_period=1s")
            try:
                # Up: within a second every client calls it (a reconnect, a new session).
                deadline = time.monotonic() + 5
                while True:
                    outcomes = clients.call(f"server {restart} up")
                    if set(outcomes.values()) == {"ok"}:
                        break
                    assert all(o == "ok" or o.startswith("Unavailable") for o in
                               outcomes.values()), outcomes
                    assert time.monotonic() < deadline, outcomes
                    time.sleep(0.02)
                assert set(clients.call(f"server {restart} up, again").values()) == {"ok"}
                server.proc.send_signal(signal.SIGTERM)
                if restart % 2:  # draining: a result or Unavailable, at once
                    outcomes = clients.call(f"server {restart} draining")
                    assert all(o == "ok" or o.startswith("Unavailable") for o in
                               outcomes.values()), outcomes
                server.proc.wait(timeout=15)
                # Gone: Unavailable, which names the refused connection.
                outcomes = clients.call(f"server {restart} gone")
                assert all(o.startswith("Unavailable") for o in outcomes.values()), outcomes
            finally:
                server.stop()
    finally:
        clients.close()
