"""Fixtures: the gpucompute client from this checkout and a real server on a free port.

The server binary is $GPUCOMPUTE_SERVER, else build/server/gpucompute-server under the
repository root. Every server runs the CPU backend, is started on port 0 (the port it
picks is read from its "(port N)" log line) and is stopped at the end.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENT_DIR = REPO / "client" / "python"
EXAMPLES_DIR = REPO / "examples"

# The client from this checkout, its protobuf module generated first (the build step a
# pip install runs; here the tests run it).
_gen = subprocess.run([sys.executable, "-m", "gpucompute._build_proto", "--quiet"],
                      cwd=str(CLIENT_DIR), capture_output=True, text=True)
if _gen.returncode != 0:
    raise RuntimeError(f"python -m gpucompute._build_proto failed:\n{_gen.stderr}")
sys.path.insert(0, str(CLIENT_DIR))

import gpucompute  # noqa: E402


def server_path() -> Path:
    env = os.environ.get("GPUCOMPUTE_SERVER")
    path = Path(env) if env else REPO / "build" / "server" / "gpucompute-server"
    if not path.is_absolute():
        path = (REPO / path) if not path.exists() else path.resolve()
    return path


def wait_for_log(proc: subprocess.Popen, log_path: str | Path, pattern: str,
                 timeout: float) -> re.Match | None:
    """The first match of `pattern` in the log that `proc` writes to `log_path`; None once
    `proc` has exited or `timeout` seconds have passed without one."""
    deadline = time.monotonic() + timeout
    while True:
        match = re.search(pattern, Path(log_path).read_text(errors="replace"))
        if match or proc.poll() is not None or time.monotonic() > deadline:
            return match
        time.sleep(0.02)


def stop_process(proc: subprocess.Popen, timeout: float) -> int:
    """SIGTERM, then SIGKILL if `proc` still runs after `timeout` seconds; its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class ServerProcess:
    """A gpucompute-server child process on 127.0.0.1:<free port>."""

    def __init__(self, *flags: str, startup_timeout: float = 30.0):
        path = server_path()
        if not path.exists():
            pytest.fail(f"gpucompute-server not found at {path}: build it or set "
                        "GPUCOMPUTE_SERVER", pytrace=False)
        self.log = tempfile.NamedTemporaryFile(prefix="gpucompute-server-", suffix=".log",
                                               delete=False)
        args = [str(path), "--backend=cpu", "--address=127.0.0.1:0", "--metrics_address=",
                "--grace_period=2s", *flags]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        m = wait_for_log(self.proc, self.log.name, r"\(port (\d+)\)", startup_timeout)
        if m is None:
            self.stop()
            pytest.fail(f"{' '.join(args)} did not start:\n{self.output()}", pytrace=False)
        self.port = int(m.group(1))
        self.target = f"127.0.0.1:{self.port}"

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def client(self, **kwargs) -> "gpucompute.Client":
        return gpucompute.Client(self.target, **kwargs)

    def stop(self) -> None:
        stop_process(self.proc, timeout=10)
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


@pytest.fixture(scope="session")
def server():
    s = ServerProcess("--buffer_quota_bytes=1073741824")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def tight_server():
    """Small limits: 1 MiB messages, 4 MiB buffer quota."""
    s = ServerProcess("--max_message_bytes=1048576", "--buffer_quota_bytes=4194304")
    yield s
    s.stop()


@pytest.fixture
def fresh_server():
    s = ServerProcess()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server):
    c = server.client(timeout=60)
    yield c
    c.close()


@pytest.fixture
def rng(request):
    # Fresh inputs every run, reproducible from the printed seed on failure.
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")
    return __import__("numpy").random.default_rng(seed)
