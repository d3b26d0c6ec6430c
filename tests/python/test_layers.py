"""The Python client's modules form tiers: each imports only from its own tier or below,
and no imports go round in a cycle. Read from the sources (ast), so nothing is imported."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[2] / "client" / "python" / "gpucompute"

#: lowest first; a module imports from its own tier or a lower one
TIERS: List[Tuple[str, Set[str]]] = [
    ("wire and types", {"_build_proto", "_pb", "errors", "_wire", "_types", "_heap"}),
    ("operands and device arrays", {"_device_array", "_cuda_arrays", "_shared_slice",
                                    "_operands"}),
    ("call steps and streams", {"_stream", "_steps", "_session", "_aio_session",
                                "_stripe_workers"}),
    ("features", {"_shared_memory", "_transfers", "_streaming", "_compute_methods",
                  "_shared_pool"}),
    ("the API", {"_api"}),
    ("clients", {"client", "aio", "replicas", "dask", "__init__"}),
]
TIER_OF: Dict[str, int] = {name: i for i, (_, names) in enumerate(TIERS) for name in names}


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _package_modules(node: ast.AST, modules: Set[str]) -> List[str]:
    """The package's modules an import statement names (relative or gpucompute.*)."""
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[1] for alias in node.names
                if alias.name.startswith("gpucompute.")]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level == 0:
        if not (node.module or "").startswith("gpucompute"):
            return []
        parts = (node.module or "").split(".")[1:]
    elif node.level == 1:
        parts = (node.module or "").split(".") if node.module else []
    else:
        return []
    if parts:
        return [parts[0]]
    return [alias.name for alias in node.names if alias.name in modules]


def _imports(path: Path, modules: Set[str]) -> Tuple[Set[str], Set[str]]:
    """(modules imported at run time, anywhere in the file; those imported only for
    type checking, under ``if TYPE_CHECKING:``)."""
    runtime: Set[str] = set()
    typing_only: Set[str] = set()

    def visit(node: ast.AST, checking: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, checking)
            return
        for name in _package_modules(node, modules):
            (typing_only if checking else runtime).add(name)
        for child in ast.iter_child_nodes(node):
            visit(child, checking)

    visit(ast.parse(path.read_text(), str(path)), False)
    return runtime, typing_only - runtime


def _graph() -> Tuple[Dict[str, Set[str]], Dict[str, Set[str]]]:
    files = {p.stem: p for p in PACKAGE.glob("*.py")}
    modules = set(files) | {"_proto"}
    runtime, typing_only = {}, {}
    for name, path in files.items():
        runtime[name], typing_only[name] = _imports(path, modules)
        runtime[name].discard("_proto")  # generated code, below every tier
    return runtime, typing_only


def _cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One cycle of `graph` as a path that returns to its start; [] when there is none."""
    state: Dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: List[str] = []

    def walk(node: str) -> List[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return []


def test_every_module_has_a_tier():
    runtime, _ = _graph()
    missing = sorted(set(runtime) - set(TIER_OF))
    assert not missing, f"declare the tier of {missing} in TIERS"


def test_runtime_imports_go_only_downward():
    runtime, _ = _graph()
    upward = [f"{m} ({TIERS[TIER_OF[m]][0]}) imports {d} ({TIERS[TIER_OF[d]][0]})"
              for m, deps in sorted(runtime.items()) for d in sorted(deps)
              if m in TIER_OF and d in TIER_OF and TIER_OF[d] > TIER_OF[m]]
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    runtime, typing_only = _graph()
    assert _cycle(runtime) == []
    both = {m: runtime[m] | typing_only[m] for m in runtime}
    assert _cycle(both) == [], "a cycle through type-only imports"


def test_type_only_imports_go_downward_too():
    _, typing_only = _graph()
    upward = [f"{m} imports {d} for type checking"
              for m, deps in sorted(typing_only.items()) for d in sorted(deps)
              if m in TIER_OF and d in TIER_OF and TIER_OF[d] > TIER_OF[m]]
    assert not upward, "\n".join(upward)


def test_the_checker_sees_a_cycle_and_a_type_checking_block(tmp_path):
    (tmp_path / "a.py").write_text("from . import b\nfrom ._c import x\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n"
        "def f():\n    from .a import z\n")
    modules = {"a", "b", "_c"}
    assert _imports(tmp_path / "a.py", modules) == ({"b", "_c"}, set())
    assert _imports(tmp_path / "b.py", modules) == ({"a"}, set())
    assert _cycle({"a": {"b", "_c"}, "b": {"a"}, "_c": set()}) == ["a", "b", "a"]
