"""README.md and docs/*.md as a test: every ```sh and ```python block runs as written,
so the documentation cannot drift from the product.

The blocks run in order (README.md, then docs/ by name), each from the repository root
of a scratch copy of the clone the README assumes: links to the
repository's entries, except build/, which holds the binaries under test
($GPUCOMPUTE_SERVER, $GPUCOMPUTE_CLI, else this checkout's build/), so files the blocks
write stay out of the checkout. `python3` is this interpreter, with the client from this
checkout on PYTHONPATH (a reader installs it with pip as the README says). They talk to a server this test starts as
`scripts/dev.sh serve` does after building: build/server/gpucompute-server with no
flags, so on the README's addresses localhost:50051 and localhost:9464. A block marked
`<!-- readme-test: skip (REASON) -->` is not run; the quick start's is checked here.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import readme_blocks
from conftest import CLIENT_DIR, REPO, server_path, stop_process, wait_for_log

README = REPO / "README.md"
BLOCKS = readme_blocks.parse(README)
DOCS = sorted((REPO / "docs").glob("*.md"))
DOC_BLOCKS = [block for page in DOCS
              for block in readme_blocks.parse(page, str(page.relative_to(REPO)))]
RUNNABLE = [b for b in BLOCKS + DOC_BLOCKS
            if b.language in readme_blocks.RUNNABLE and not b.skip_reason]
README_PORTS = (50051, 9464)
BLOCK_TIMEOUT_S = 30


def cli_path() -> Path:
    env = os.environ.get("GPUCOMPUTE_CLI")
    return Path(env).resolve() if env else REPO / "build" / "client" / "gpucompute-cli"


def check_port_free(port: int) -> None:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("localhost", port))
            return
        except OSError as e:
            error = e
    pytest.fail(f"the README's commands use localhost:{port}, which is taken here ({error}): "
                "stop what listens there (another gpucompute-server?)", pytrace=False)


class ReadmeSession:
    """The scratch directory, the environment of the blocks and the server they reach."""

    def __init__(self, workdir: Path, tmp_bin: Path):
        self.workdir = workdir
        for entry in REPO.iterdir():
            if entry.name not in ("build", ".git"):
                (workdir / entry.name).symlink_to(entry)
        for binary, target in (("server/gpucompute-server", server_path()),
                               ("client/gpucompute-cli", cli_path())):
            if not target.exists():
                pytest.fail(f"{target} not found: build it or set GPUCOMPUTE_SERVER and "
                            "GPUCOMPUTE_CLI", pytrace=False)
            link = workdir / "build" / binary
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target)
        interpreter = tmp_bin / "python3"
        interpreter.parent.mkdir()
        interpreter.symlink_to(sys.executable)
        self.env = dict(os.environ, PATH=f"{interpreter.parent}:{os.environ['PATH']}",
                        PYTHONPATH=str(CLIENT_DIR))
        self.log_path = tmp_bin.parent / "server.log"
        self.log = open(self.log_path, "w")
        self.server = subprocess.Popen(["build/server/gpucompute-server"], cwd=workdir,
                                       env=self.env, stdout=self.log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if wait_for_log(self.server, self.log_path, "serving gRPC on", timeout=30) is None:
            self.stop()
            pytest.fail(f"build/server/gpucompute-server did not start:\n"
                        f"{self.server_log()}", pytrace=False)

    def server_log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def run(self, block: readme_blocks.Block) -> subprocess.CompletedProcess:
        command = (["bash", "-euo", "pipefail", "-c", block.text] if block.language == "sh"
                   else ["python3", "-c", block.text])
        return subprocess.run(command, cwd=self.workdir, env=self.env, capture_output=True,
                              text=True, timeout=BLOCK_TIMEOUT_S)

    def stop(self) -> int:
        returncode = stop_process(self.server, timeout=15)
        self.log.close()
        return returncode


@pytest.fixture(scope="module")
def readme(tmp_path_factory):
    for port in README_PORTS:
        check_port_free(port)
    scratch = tmp_path_factory.mktemp("readme")
    (scratch / "clone").mkdir()
    session = ReadmeSession(scratch / "clone", scratch / "bin")
    yield session
    assert session.stop() == 0, f"the server did not exit 0 on SIGTERM:\n{session.server_log()}"


def test_every_block_is_run_or_says_why_not():
    for block in BLOCKS + DOC_BLOCKS:
        assert block.language in ("", *readme_blocks.RUNNABLE), (
            f"{block.id} is a ```{block.language} block: run it here or label it sh/python")
        assert not block.skip_reason or block.language in readme_blocks.RUNNABLE, block.id
    # In the README the quick start only (it installs and builds); anything more needs a
    # good reason. docs/ pages may skip what needs other machines, each saying why.
    skipped = [b for b in BLOCKS if b.skip_reason]
    assert len(skipped) <= 1, [b.id for b in skipped]
    assert any(b in RUNNABLE for b in BLOCKS), (
        "README.md has no ```sh or ```python block left to run")


def test_quick_start_commands_exist():
    """`scripts/dev.sh serve` and `scripts/dev.sh test` would install, build and (test)
    run this very suite, so they are not run; scripts/dev.sh must take each command."""
    dev_sh = REPO / "scripts" / "dev.sh"
    usage = subprocess.run([str(dev_sh)], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2, usage
    quick_start = [b for b in BLOCKS if "scripts/dev.sh" in b.text and b.language == "sh"]
    assert quick_start, "README.md lost its quick start"
    for block in quick_start:
        for line in block.text.splitlines():
            command = line.split("#")[0].split()
            assert command[:1] == ["scripts/dev.sh"], line
            assert f"scripts/dev.sh {command[1]}" in usage.stderr, (line, usage.stderr)
    # What serve runs once built is what the readme fixture starts.
    assert 'exec "$build/server/gpucompute-server" "$@"' in dev_sh.read_text()


# What may differ from the README's log lines: the time, the start-up time and which
# backend runs (it depends on the build and the machine); the rest must read as shown.
_LOG_VARIES = (
    (re.escape("2026-01-05T09:30:00.125Z"), r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"),
    (re.escape("ready in 2.913ms"), r"ready in [0-9.]+(?:us|ms|s)"),
    (re.escape("instance 5f3a9c21"), r"instance [0-9a-f]{8}"),
    (re.escape("backend cpu (cpu: auto, this build has no CUDA backend)"),
     r"backend \w+ \(.*\)"),
)


def test_server_logs_what_the_readme_shows(readme):
    shown = next(b for b in BLOCKS if "gpucompute-server: serving gRPC on" in b.text)
    log = readme.server_log().splitlines()
    for line in shown.text.splitlines():
        pattern = re.escape(line)
        for fixed, varies in _LOG_VARIES:
            pattern = pattern.replace(fixed, varies)
        assert any(re.fullmatch(pattern, logged) for logged in log), (line, log)


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_block_runs_as_written(readme, block):
    result = readme.run(block)
    assert result.returncode == 0, (
        f"{block.source} line {block.line}: this block failed ({result.returncode}):\n"
        f"{block.text}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}\n"
        f"--- server log\n{readme.server_log()}")
    if block.expected_output is not None:
        assert result.stdout == block.expected_output, result.stderr
    # As the README says, each CLI compute command reports its timing and writes its --out.
    for out in re.findall(r"--out=(\S+\.npy)", block.text):
        assert np.load(readme.workdir / out).size > 0, out
    assert result.stdout.count("timing (us) queue ") == block.text.count("--out="), result.stdout
