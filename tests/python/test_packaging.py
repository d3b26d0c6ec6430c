"""The package as a newcomer gets it: the documented install, its file modes, its types."""
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest

from conftest import CLIENT_DIR, REPO


def documented_install_commands():
    """The shell block of client/python/README.md's "## Install" section."""
    text = (CLIENT_DIR / "README.md").read_text()
    section = text[text.index("## Install"):]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1).strip().splitlines()


def source_copy(tmp_path):
    """proto/ and client/python/ as a fresh clone has them (nothing generated)."""
    src = tmp_path / "repo"
    shutil.copytree(REPO / "proto", src / "proto")
    shutil.copytree(CLIENT_DIR, src / "client" / "python",
                    ignore=shutil.ignore_patterns("_proto", "__pycache__", "build",
                                                  "*.egg-info", ".mypy_cache"))
    return src


def world_readable(path):
    return path.stat().st_mode & stat.S_IROTH


def test_documented_install_command(tmp_path):
    """Exactly the README's commands (HOME is the temporary directory), offline, with this
    Python: then the package imports, ships py.typed and every file is world-readable."""
    commands = documented_install_commands()
    assert any("--no-build-isolation --no-index" in c for c in commands), commands
    src = source_copy(tmp_path)
    env = dict(os.environ, HOME=str(tmp_path), PIP_NO_INDEX="1",
               PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    env.pop("PYTHONPATH", None)
    for command in commands:
        proc = subprocess.run(["bash", "-c", command], cwd=str(src), env=env,
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 and ("ensurepip" in proc.stdout + proc.stderr
                                     or "No module named pip" in proc.stderr):
            pytest.skip(f"python3-venv / pip missing: {proc.stdout}{proc.stderr}")
        assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
    python = tmp_path / ".venvs" / "gpucompute" / "bin" / "python"
    check = subprocess.run(
        [str(python), "-c", "import gpucompute, gpucompute.aio, gpucompute._pb as p; "
         "print(gpucompute.__file__); print(gpucompute.Client, p.pb.NormalizeRequest)"],
        capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert check.returncode == 0, check.stderr
    package = tmp_path / check.stdout.splitlines()[0]  # an absolute path
    package = package.parent
    assert str(tmp_path / ".venvs") in str(package)
    assert (package / "py.typed").is_file()
    generated = sorted((package / "_proto").glob("*.py"))
    assert [p.name for p in generated] == ["__init__.py", "gpucompute_pb2.py"]
    unreadable = [str(p) for p in package.rglob("*") if p.is_file() and not world_readable(p)]
    assert not unreadable


def test_generated_files_are_world_readable(tmp_path):
    """python -m gpucompute._build_proto (the step every build runs) writes files others
    can read; it used mkstemp's 0600 before."""
    src = source_copy(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "gpucompute._build_proto", "--quiet"],
                          cwd=str(src / "client" / "python"), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = src / "client" / "python" / "gpucompute" / "_proto"
    files = [p for p in out.rglob("*") if p.is_file()]
    # __init__.py, gpucompute_pb2.py, google_rpc.binpb, src/.../gpucompute.proto and the
    # two google/rpc protos
    assert len(files) == 6
    assert all(world_readable(p) for p in files), [(str(p), oct(p.stat().st_mode))
                                                    for p in files]


def test_mypy_strict():
    """mypy --strict is clean on the package (settings in client/python/pyproject.toml)."""
    pytest.importorskip("mypy", reason="mypy is not installed (Debian: mypy)")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir=/dev/null",
                           "-p", "gpucompute"], cwd=str(CLIENT_DIR), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
