"""The five seed walkthroughs in examples/, run at reduced sizes as subprocesses."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CLIENT_DIR, EXAMPLES_DIR, REPO


def run_example(script, target, *args, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(CLIENT_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.run([sys.executable, str(EXAMPLES_DIR / script), "--target", target,
                           *args], capture_output=True, text=True, timeout=timeout, env=env)
    out = proc.stdout + proc.stderr
    print(out)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{out}"
    assert "CHECK FAIL" not in out and "OK:" in out
    return out


def test_seed000_discount(server):
    out = run_example("seed000_discount.py", server.target, "--small")
    assert "thread case equals NumPy" in out
    assert "batch 3/3" in out  # the full case, batched through stored buffers


def test_seed000_discount_streaming(server):
    out = run_example("seed000_discount.py", server.target, "--small", "--streaming",
                      "--batch", "5")
    assert "streamed" in out and "batch 3/3" in out  # each batch one StreamingCompute call


def test_seed000_discount_streaming_in_processes(server):
    out = run_example("seed000_discount.py", server.target, "--small", "--streaming",
                      "--batch", "6", "--stripes", "2", "--processes")
    assert "streamed" in out and "batch 2/2" in out


def test_seed001_haversine(server):
    out = run_example("seed001_haversine.py", server.target, "--n", "200", "--repeats", "2")
    assert "float32 mesh matches NumPy haversine" in out


def test_seed002_first_call(fresh_server):
    out = run_example("seed002_first_call.py", fresh_server.target, "--scale", "0.05",
                      "--repeats", "3", "--max-ratio", "5", "--slack-ms", "20")
    assert out.count("first request costs what later ones do") == 10
    assert out.count("the first result is right") == 10


def test_seed002_first_call_through_the_cli(fresh_server):
    cli = os.environ.get("GPUCOMPUTE_CLI")
    cli = Path(cli).resolve() if cli else REPO / "build" / "client" / "gpucompute-cli"
    if not cli.exists():
        pytest.skip(f"{cli} not built (set GPUCOMPUTE_CLI)")
    out = run_example("seed002_first_call.py", fresh_server.target, "--scale", "0.02",
                      "--repeats", "2", "--max-ratio", "5", "--slack-ms", "50", "--cli", str(cli))
    assert "requests through the CLI" in out
    assert out.count("first request costs what later ones do") == 10
    assert out.count("the first result is right") == 10


def test_seed003_normalize(server):
    out = run_example("seed003_normalize.py", server.target, "--size", "200000")
    assert "concurrent: every row sums to 1" in out


def test_seed004_lombscargle(server):
    out = run_example("seed004_lombscargle.py", server.target, "--freqs", "16384",
                      "--repeats", "2")
    assert "float32 periodogram matches" in out and "float64 periodogram matches" in out


def test_example_exits_nonzero_when_server_is_absent():
    proc = subprocess.run([sys.executable, str(EXAMPLES_DIR / "seed001_haversine.py"),
                           "--target", "127.0.0.1:1", "--timeout", "5"],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(CLIENT_DIR)))
    assert proc.returncode != 0

