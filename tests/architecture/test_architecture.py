"""The library's structure, as ARCHITECTURE.md states it: layers, no cycles, no private imports, short functions.

Every import statement of every module under ``gridify/`` is read (module-level and inside
functions alike, since a function-level import can hide a cycle just as well).
"""

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gridify"

#: bottom to top; a module may import only from its own package or from a lower layer
LAYERS = [
    ["_version", "_checks", "_optional", "_files", "_paths", "registry", "runtime", "_clinames", "_pretrained"],
    ["ops", "metrics", "precision", "_cliargs", "_progress"],
    # above ops: seeded transforms (RandomResample's neighbours are ops.knn's) and the file readers
    # (repair_normals' nearest valid point is ops.knn's)
    ["transforms", "io"],
    ["nn", "datasets", "vis", "scene_inference", "_commands"],
    ["backbones", "baselines"],
    ["models"],
    ["tasks"],  # task objects: loss, metrics, primary metric (gridify/tasks.py)
    ["checkpoint"],
    ["api", "export"],
    ["training"],
    ["bench"],  # the benchmarks and their harness (gridify/bench/)
    ["evaluation"],
    ["cli"],
]
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}
MAX_FUNCTION_LINES = 80


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        yield ".".join(parts), is_pkg, path


MODULES = {name: (is_pkg, path) for name, is_pkg, path in _modules()}


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str):
    """``(imported module, imported name or None, line)`` for every import of ``module`` inside gridify."""
    is_pkg, path = MODULES[module]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "gridify":
                    yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_pkg, node)
            if target.split(".")[0] != "gridify":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub, None, node.lineno) if sub in MODULES else (target, alias.name, node.lineno)


def _unit(module: str) -> str:
    """The layered unit of a module: ``gridify.nn.fields`` -> ``nn``; the root package -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_library_unit_has_a_layer():
    units = {_unit(m) for m in MODULES} - {""}
    assert units - set(LAYER_OF) == set(), "add the new module to LAYERS here and to ARCHITECTURE.md"


def test_no_module_imports_upward_across_layers():
    bad = []
    for module in MODULES:
        unit = _unit(module)
        if not unit:  # the root package is the facade and re-exports everything
            continue
        for target, _, line in _imports(module):
            other = _unit(target)
            if other == unit:
                continue
            if other == "" or LAYER_OF[other] >= LAYER_OF[unit]:
                bad.append(f"{MODULES[module][1].relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert not bad, "imports that go up (or sideways) across layers:\n" + "\n".join(bad)


def test_no_module_imports_a_private_name_of_another():
    bad = [
        f"{MODULES[m][1].relative_to(PACKAGE.parent)}:{line} imports {name} from {target}"
        for m in MODULES
        for target, name, line in _imports(m)
        if name is not None and name.startswith("_") and not name.startswith("__")
    ]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = defaultdict(set)
    for module in MODULES:
        for target, _, _ in _imports(module):
            while target not in MODULES:  # a name imported from a module: the module itself
                target = target.rsplit(".", 1)[0]
            if target != module and not module.startswith(target + "."):  # a package's own __init__ is no edge
                graph[module].add(target)
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t) :] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_function_is_longer_than_80_lines(module):
    path = MODULES[module][1]
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{path.relative_to(PACKAGE.parent)}: {long}"


def test_architecture_md_draws_these_layers():
    """ARCHITECTURE.md's table "What lives in each layer" names the units of LAYERS, layer by layer, in order."""
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text.split("## What lives in each layer", 1)[1].split("\n## ", 1)[0]
    drawn = {}
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0] or cells[0] in ("layer", "---"):
            continue
        drawn.setdefault(cells[0], set()).update(re.findall(r"`([A-Za-z_]+)`", cells[1]))
    assert list(drawn.values()) == [set(names) for names in LAYERS], list(drawn.items())
