"""No library module decides by comparing a task's name: what differs between tasks is an attribute or method of
its registered :class:`gridify.tasks.Task` (``get_task(name).whole_scenes``, ``.dense``, ...), so that a new task
needs no edit outside ``gridify/tasks.py``."""

import ast
from pathlib import Path

from gridify.tasks import task_names

PACKAGE = Path(__file__).resolve().parents[2] / "gridify"
#: a dataset's own ``task`` argument (label per cloud or per point) is a mode of that dataset, not a Task: the
#: datasets sit below ``tasks`` and cannot ask it
DATASET_MODES = {"datasets/folder.py", "datasets/procedural.py"}


def _literals(node: ast.AST, constants: dict) -> list:
    """The strings ``node`` spells: a literal, a module constant bound to one, or a tuple / list / set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name) and node.id in constants:
        return [constants[node.id]]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for elt in node.elts for v in _literals(elt, constants)]
    return []


def _task_name_comparisons(tree: ast.Module, names: set) -> list:
    constants = {
        t.id: stmt.value.value
        for stmt in tree.body
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
        for t in stmt.targets
        if isinstance(t, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators):
                values = _literals(node.left, constants) + _literals(right, constants)
                if isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) and names & set(values):
                    found.append((node.lineno, sorted(names & set(values))))
    return found


def test_no_library_module_compares_a_task_name():
    names = set(task_names())
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "tasks.py" or rel in DATASET_MODES:
            continue
        for lineno, hit in _task_name_comparisons(ast.parse(path.read_text()), names):
            bad.append(f"gridify/{rel}:{lineno}: compares with {hit}")
    assert not bad, "ask the registered Task (gridify.tasks.get_task(name)) instead:\n" + "\n".join(bad)
