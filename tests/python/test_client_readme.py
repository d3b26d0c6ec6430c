"""client/python/README.md lists every public method of gpucompute.Client."""
from __future__ import annotations

import re

import gpucompute as gc
from conftest import CLIENT_DIR


def test_the_readme_lists_every_method():
    text = (CLIENT_DIR / "README.md").read_text()
    methods = text[text.index("## Methods"):text.index("## Install")]
    rows = [line.split("|")[1] for line in methods.splitlines() if line.startswith("| `")]
    listed = {name for row in rows for name in re.findall(r"`(\w+)\(", row)}
    public = {name for name in dir(gc.Client)
              if not name.startswith("_") and callable(getattr(gc.Client, name))}
    assert public - listed == set(), "add them to client/python/README.md's Methods"
    assert listed - public == set(), "the README lists methods the client does not have"
