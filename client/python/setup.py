"""setuptools entry: generate gpucompute/_proto from proto/ before anything is packaged.

All metadata lives in pyproject.toml. The generation runs when setup.py is loaded (every
setuptools command, egg_info/dist_info included, needs the gpucompute._proto package to
exist); it is a no-op when the generated module already matches the .proto sources.
gpucompute/_build_proto.py is loaded by path because the package's own dependencies
(grpc, numpy) need not be installed in the build environment.
"""
import importlib.util
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent


def generate_proto() -> None:
    spec = importlib.util.spec_from_file_location(
        "_gpucompute_build_proto", HERE / "gpucompute" / "_build_proto.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build()


generate_proto()
setup()
