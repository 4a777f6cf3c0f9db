"""One implementation of each idea (issue 74): the rule "read a scan with every per-point field its format holds"
lives in gridify.io alone (``read_scan`` / ``holds_fields``), the scene layouts are found through their registry
(no comparison with a layout's name outside the layouts' own modules), and the names that meant two things
(``read_scene``, ``_read_scan``, ``check_run``, ``read_labels``) are defined once, and the neighbour searches
(k-d trees, all-pairs distances) are written in gridify.ops alone.

Every module under ``gridify/`` and ``scripts/`` is parsed (code only: messages and docstrings may name the rule).
"""

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gridify"
SOURCES = sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "scripts").rglob("*.py"))
LAYOUT_NAMES = (
    "pointcept",
    "s3dis",
    "scannet",
    "semantickitti",
    "mmdet3d_scannet",
    "mmdet3d_scannet_instance",
    "mmdet3d_s3dis",
)


def _rel(path):
    return path.relative_to(ROOT).as_posix()


@functools.lru_cache(maxsize=None)
def _parsed():
    """Every source parsed once for the whole module (parsing them all takes about a second)."""
    return tuple((path, ast.parse(path.read_text(encoding="utf-8"))) for path in SOURCES)


def _trees():
    yield from _parsed()


def _is_const(node, value):
    return isinstance(node, ast.Constant) and node.value == value


def _fields_rule_uses(tree):
    """Lines that apply the fields rule: ``reader_takes(..., "fields")``, ``fields="all"``, ``{"fields": "all"}``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "reader_takes" and any(_is_const(a, "fields") for a in node.args):
                yield node.lineno
            if any(k.arg == "fields" and _is_const(k.value, "all") for k in node.keywords):
                yield node.lineno
        elif isinstance(node, ast.Dict):
            if any(_is_const(k, "fields") and _is_const(v, "all") for k, v in zip(node.keys, node.values)):
                yield node.lineno


def test_the_fields_rule_of_a_scan_lives_in_gridify_io_only():
    where = {f"{_rel(p)}:{line}" for p, tree in _trees() for line in _fields_rule_uses(tree)}
    outside = sorted(w for w in where if not w.startswith("gridify/io/"))
    assert not outside, (
        "read a scan with gridify.io.read_scan (and ask gridify.io.holds_fields) instead of repeating the rule "
        "'fields=\"all\" where the format has fields':\n" + "\n".join(outside)
    )
    assert any(w.startswith("gridify/io/read.py:") for w in where)  # the one place


def _name_comparisons(tree):
    """Lines comparing something with a layout's name: ``layout == "s3dis"``, ``x in ("s3dis", ...)``,
    ``{"s3dis": ...}.get(layout)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for right in [node.left, *node.comparators]:
                values = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
                if any(isinstance(v, ast.Constant) and v.value in LAYOUT_NAMES for v in values):
                    yield node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            table = node.func.value  # a lookup table by layout name: {"s3dis": ..., ...}.get(layout)
            if isinstance(table, ast.Dict) and any(_is_const(k, n) for k in table.keys for n in LAYOUT_NAMES):
                yield node.lineno


def test_no_module_outside_the_layouts_branches_on_a_layouts_name():
    """Adding a scene layout touches one new module: nothing else compares a layout's name (the benchmarks name the
    data they time, and the command line's literal tables of choices are no branches)."""
    allowed = ("gridify/datasets/layouts/", "gridify/bench/", "gridify/_commands.py", "scripts/")
    bad = [
        f"{_rel(p)}:{line}"
        for p, tree in _trees()
        if not _rel(p).startswith(allowed)
        for line in _name_comparisons(tree)
    ]
    assert not bad, "ask the layout (gridify.datasets.layouts.get_layout) instead:\n" + "\n".join(bad)


def _definitions(name):
    """The modules of gridify defining a function ``name`` at module level (methods are not counted)."""
    found = []
    for path, tree in _parsed():
        if path.is_relative_to(PACKAGE) and any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body):
            found.append(_rel(path))
    return found


def test_names_that_meant_two_things_are_defined_once():
    assert _definitions("read_scene") == ["gridify/datasets/scene_layouts.py"]  # a layout's scene (SceneRef)
    assert _definitions("read_scan") == ["gridify/io/read.py"]  # a scan file with its fields
    assert _definitions("_read_scan") == []
    assert _definitions("read_labels") == ["gridify/io/labels.py"]  # the one label-file reader
    assert len(_definitions("check_run")) <= 1  # the benchmark's; predict's is check_predict_arguments
    # the numpy entry of the one estimator (gridify.api.estimate_normals) calls gridify.ops.estimate_normals
    assert _definitions("estimate_normals") == ["gridify/api/inputs.py", "gridify/ops/normals.py"]


#: the names a neighbour search is written with (a k-d tree, all-pairs distances)
SEARCH_NAMES = {"cKDTree", "KDTree", "cdist", "NearestNeighbors", "BallTree"}


def _search_uses(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in SEARCH_NAMES:
            yield node.lineno, node.attr
        elif isinstance(node, ast.Name) and node.id in SEARCH_NAMES:
            yield node.lineno, node.id
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in SEARCH_NAMES:
                    yield node.lineno, alias.name


def test_neighbour_searches_live_in_gridify_ops_only():
    """kNN and radius searches are gridify.ops' (knn, knn_dense, radius): a reader, a transform or a model asks
    them instead of building its own tree or distance matrix (transforms' and io.normals' own searches are gone)."""
    where = {
        f"{_rel(p)}:{line} ({name})"
        for p, tree in _trees()
        if not _rel(p).startswith("gridify/ops/")
        for line, name in _search_uses(tree)
    }
    assert not where, "search through gridify.ops (knn, radius) instead:\n" + "\n".join(sorted(where))
    assert any(name == "cKDTree" for line, name in _search_uses(ast.parse((PACKAGE / "ops/knn.py").read_text())))
