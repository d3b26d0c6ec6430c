"""Generate the protobuf message modules of the gpucompute client from proto/.

    python -m gpucompute._build_proto [--proto-dir DIR] [--force] [--quiet]

Writes ``gpucompute/_proto/gpucompute_pb2.py`` (git-ignored) next to this file and a
copy of the .proto source under ``gpucompute/_proto/src/`` so that an sdist can be
built again without the repository around it. Only message classes are generated:
the client calls its RPCs through ``grpc.Channel.unary_stream`` & co. with the
messages' own (de)serializers, so no grpc plugin (and no grpcio-tools version check
against grpcio) is involved. grpc.health.v1 is encoded by hand in ``_wire.py``: its
two one-field messages do not justify registering ``grpc/health/v1/health.proto`` in
the default descriptor pool, where it would clash with grpcio-health-checking. For the
same reason the vendored google.rpc error details (``google/rpc/*.proto``, read by
``errors.py``) are written as a descriptor set, ``_proto/google_rpc.binpb``, that
errors.py loads into a pool of its own, not as modules (googleapis-common-protos has
them in the default pool).

The generator is, in order of preference:
  1. ``$GPUCOMPUTE_PROTOC`` (a protoc binary),
  2. ``protoc`` on PATH and ``grpc_tools.protoc`` (from grpcio-tools), whichever is the
     newest one that is not newer than the protobuf runtime installed here
     (protobuf's rule: new gencode never runs on an older runtime; old gencode runs on
     newer runtimes; protoc 3.21's gencode runs on the 4.21 ... 7.x Python runtimes).
     Without a runtime to compare with (an isolated build environment) the oldest
     generator wins, as the one most runtimes accept.

It runs when the package is built (setup.py, so wheels and installs ship the generated
module) and, in a source checkout used without installing, on import (``_pb.py``).
This module uses the standard library only: setup.py loads it by path, before any of
the client's dependencies may be installed.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

PACKAGE_DIR = Path(__file__).resolve().parent
OUT_DIR = PACKAGE_DIR / "_proto"
SRC_COPY_DIR = OUT_DIR / "src"
# client/python/gpucompute -> the repository's proto/
REPO_PROTO_DIR = PACKAGE_DIR.parent.parent.parent / "proto"
# Relative to the proto root (the directory passed to protoc as -I).
PROTO_FILES = ["gpucompute/v1/gpucompute.proto", "google/rpc/status.proto",
               "google/rpc/error_details.proto"]
# The error details, compiled to a descriptor set (with their imports) for errors.py.
ERROR_PROTO_FILES = ["google/rpc/status.proto", "google/rpc/error_details.proto"]
ERROR_DESCRIPTOR_SET = "google_rpc.binpb"
# (proto relative path, generated module name inside gpucompute/_proto)
MODULES = [("gpucompute/v1/gpucompute.proto", "gpucompute_pb2")]

_STAMP_RE = re.compile(r"^PROTO_SHA256 = \"([0-9a-f]+)\"$", re.M)


class ProtoBuildError(RuntimeError):
    pass


def find_proto_root(explicit: Optional[str] = None) -> Optional[Path]:
    """The directory holding gpucompute/v1/gpucompute.proto, or None."""
    candidates = []
    if explicit:
        candidates.append(Path(explicit))
    if os.environ.get("GPUCOMPUTE_PROTO_DIR"):
        candidates.append(Path(os.environ["GPUCOMPUTE_PROTO_DIR"]))
    candidates.append(REPO_PROTO_DIR)
    candidates.append(SRC_COPY_DIR)
    for root in candidates:
        if all((root / f).is_file() for f in PROTO_FILES):
            return root.resolve()
    return None


def proto_digest(root: Path) -> str:
    h = hashlib.sha256()
    for f in PROTO_FILES:
        h.update(f.encode())
        h.update(b"\0")
        h.update((root / f).read_bytes())
    return h.hexdigest()


def generated_digest() -> Optional[str]:
    """The digest recorded by the last generation, or None if nothing is generated."""
    init = OUT_DIR / "__init__.py"
    if (not init.is_file() or not (OUT_DIR / ERROR_DESCRIPTOR_SET).is_file()
            or not all((OUT_DIR / (m + ".py")).is_file() for _, m in MODULES)):
        return None
    match = _STAMP_RE.search(init.read_text())
    return match.group(1) if match else None


def _release(version: str) -> Optional[int]:
    """protobuf release number: protoc 3.21.12 / python 4.21.12 -> 21; protoc 29.3 /
    python 5.29.3 -> 29; python 3.20.3 -> 20."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not m:
        return None
    major, minor = int(m.group(1)), int(m.group(2))
    if m.group(3) is None and major >= 22:  # protoc >= 22 prints "libprotoc 25.1"
        return major
    return minor


def _runtime_release() -> Optional[int]:
    try:
        import google.protobuf  # noqa: F401  (may be absent in a build environment)
    except Exception:
        return None
    return _release(getattr(sys.modules["google.protobuf"], "__version__", ""))


def _probe(cmd: List[str]) -> Optional[str]:
    try:
        out = subprocess.run(cmd + ["--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return (out.stdout or out.stderr).strip()


def _generators() -> List[Tuple[str, List[str], Optional[int]]]:
    """(label, command, release) for each generator found."""
    found = []
    env = os.environ.get("GPUCOMPUTE_PROTOC")
    if env:
        version = _probe([env])
        if version is None:
            raise ProtoBuildError(f"GPUCOMPUTE_PROTOC={env!r} does not run")
        return [(f"{env} ({version})", [env], _release(version))]
    protoc = shutil.which("protoc")
    if protoc:
        version = _probe([protoc])
        if version:
            found.append((f"{protoc} ({version})", [protoc], _release(version)))
    try:
        import grpc_tools  # noqa: F401
        cmd = [sys.executable, "-m", "grpc_tools.protoc"]
        version = _probe(cmd)
        if version:
            found.append((f"grpc_tools.protoc ({version})", cmd, _release(version)))
    except Exception:
        pass
    return found


def choose_generator() -> Tuple[str, List[str]]:
    gens = _generators()
    if not gens:
        raise ProtoBuildError(
            "no protobuf compiler found: install protoc (Debian: protobuf-compiler) or "
            "grpcio-tools (pip install grpcio-tools), or set GPUCOMPUTE_PROTOC")
    if len(gens) == 1:
        return gens[0][0], gens[0][1]
    runtime = _runtime_release()
    known = [(label, cmd, release) for label, cmd, release in gens if release is not None]
    if runtime is not None:
        fitting = [g for g in known if g[2] <= runtime]
        if fitting:
            best = max(fitting, key=lambda g: g[2])
            return best[0], best[1]
    if known:
        best = min(known, key=lambda g: g[2])
        return best[0], best[1]
    return gens[0][0], gens[0][1]


def _well_known_includes(cmd: List[str]) -> List[str]:
    """-I for google/protobuf/*.proto where the generator does not find them itself
    (grpc_tools.protoc carries them in its package; a protoc binary knows its own)."""
    if "grpc_tools.protoc" not in cmd:
        return []
    import grpc_tools  # noqa: F401  (chosen as generator, so importable)
    return [f"-I{Path(str(sys.modules['grpc_tools'].__file__)).parent / '_proto'}"]


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix="." + path.name + ".")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would travel into wheels and installs
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def build(proto_dir: Optional[str] = None, force: bool = False, quiet: bool = False) -> Path:
    """Generate gpucompute/_proto from the .proto files; returns the output directory.

    Does nothing when the generated files already match the .proto sources (by digest)
    unless force is set.
    """
    root = find_proto_root(proto_dir)
    if root is None:
        if generated_digest() is not None and not force:
            return OUT_DIR  # installed package without its sources: keep what is there
        raise ProtoBuildError(
            "cannot find gpucompute/v1/gpucompute.proto: pass --proto-dir or set "
            "GPUCOMPUTE_PROTO_DIR to the repository's proto/ directory")
    digest = proto_digest(root)
    if not force and generated_digest() == digest:
        return OUT_DIR
    label, cmd = choose_generator()
    with tempfile.TemporaryDirectory(prefix="gpucompute-proto-") as tmp:
        tmp_path = Path(tmp)
        src = tmp_path / "src"
        out = tmp_path / "out"
        out.mkdir()
        for f in PROTO_FILES:
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / f, src / f)
        messages = [f for f in PROTO_FILES if f not in ERROR_PROTO_FILES]
        descriptor_set = out / ERROR_DESCRIPTOR_SET
        for args in (cmd + [f"-I{src}", f"--python_out={out}"] + [str(src / f) for f in messages],
                     cmd + [f"-I{src}", *_well_known_includes(cmd),
                            f"--descriptor_set_out={descriptor_set}",
                            "--include_imports"] + [str(src / f) for f in ERROR_PROTO_FILES]):
            result = subprocess.run(args, capture_output=True, text=True)
            if result.returncode != 0:
                raise ProtoBuildError(f"{' '.join(args)} failed:\n{result.stderr}")
        _write_atomic(OUT_DIR / ERROR_DESCRIPTOR_SET, descriptor_set.read_bytes())
        for proto, module in MODULES:
            generated = out / (proto[: -len(".proto")] + "_pb2.py")
            text = generated.read_bytes()
            _write_atomic(OUT_DIR / (module + ".py"), text)
        for f in PROTO_FILES:
            if (root / f).resolve() != (SRC_COPY_DIR / f).resolve():
                _write_atomic(SRC_COPY_DIR / f, (root / f).read_bytes())
    init = (
        '"""Generated by gpucompute._build_proto; do not edit, do not commit."""\n'
        f"GENERATOR = {label!r}\n"
        f'PROTO_SHA256 = "{digest}"\n'
    )
    # Written last: its digest marks the generation as complete.
    _write_atomic(OUT_DIR / "__init__.py", init.encode())
    if not quiet:
        print(f"gpucompute: generated {OUT_DIR} with {label}", file=sys.stderr)
    return OUT_DIR


def in_source_checkout() -> bool:
    """True when this package is client/python/gpucompute of a repository checkout, used
    without installing: the one case that generates on import (an installed package
    carries the modules generated by its build)."""
    return ((PACKAGE_DIR.parent / "pyproject.toml").is_file()
            and all((REPO_PROTO_DIR / f).is_file() for f in PROTO_FILES))


def ensure_generated() -> None:
    """Called on import in a source checkout: generate when missing, regenerate when the
    repository's .proto changed."""
    current = generated_digest()
    if current == proto_digest(REPO_PROTO_DIR):
        return
    try:
        build(str(REPO_PROTO_DIR), quiet=True)
    except (OSError, ProtoBuildError):
        if current is None:
            raise
        # Stale but present, and not writable or no compiler: use what is there.


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proto-dir", help="directory holding gpucompute/v1/gpucompute.proto")
    parser.add_argument("--force", action="store_true", help="regenerate even if up to date")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    try:
        out = build(args.proto_dir, force=args.force, quiet=args.quiet)
    except ProtoBuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
