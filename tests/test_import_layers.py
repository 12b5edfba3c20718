"""mmspec's packages form layers that follow the data flow: a module imports only from its
own package or from a layer below, and no chain of imports leads back to where it began.
Every import counts, those inside functions too (a lazy import is a dependency all the same)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "mmspec"

# lowest first; packages of one layer do not import each other
LAYERS = [
    {"core", "utils", "assets"},  # contracts, sampling, rules; checkpoint and JSON files; where the shipped models are
    {"kernels", "io", "tokenizers"},  # verification; media files and atomic writes; codecs
    {"datasets"},
    {"models", "decoding", "metrics"},  # networks and sessions; the engine over their contract; judges
    {"pipelines"},
    {"runs"},  # resumable batch runs and the benchmark harness
    {"apps", "hf_generate"},
    {"commands"},
]
LAYER = {package: i for i, layer in enumerate(LAYERS) for package in layer}


def module_name(path: Path) -> str:
    parts = ("mmspec",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def imports(path: Path) -> set[str]:
    """The mmspec modules `path` imports (a `from package import submodule` names the submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mmspec.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("mmspec"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return found


GRAPH = {name: imports(path) for name, path in MODULES.items()}


def package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_package_has_a_layer():
    packages = {package(m) for m in MODULES if package(m) and (ROOT / package(m)).is_dir()}
    loose = sorted(m for m in MODULES if package(m) and not (ROOT / package(m)).is_dir())
    assert not loose, f"modules outside every package: {loose}"
    assert packages <= set(LAYER), f"packages without a layer: {sorted(packages - set(LAYER))}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if package(m)))
def test_no_module_imports_sideways_or_upward(module):
    own = package(module)
    wrong = sorted(dep for dep in GRAPH[module]
                   if package(dep) and package(dep) != own and LAYER[package(dep)] >= LAYER[own])
    assert not wrong, f"{module} (layer {LAYER[own]}) imports {wrong}"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
