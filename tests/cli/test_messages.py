"""Messages a command-line or config user can meet name what that user can type.

An error or warning that tells its reader to ``pass skip_missing=True`` or ``category=`` helps a
Python caller and nobody at a shell: every such hint in the modules a command or a config reaches
(datasets, readers, prediction, drawing, training, evaluation, benchmarks, the CLI) also names the
flag (``--category``) or the config key (``data.skip_missing``), or addresses the hint to Python
callers as such ("in Python, pass features="). The few hints only the Python API can meet are listed
below with the reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "gridify"
#: the modules a gridify command or a config reaches
REACHED = [
    *sorted((ROOT / "datasets").glob("*.py")),
    *sorted((ROOT / "io").glob("*.py")),
    *sorted((ROOT / "training").glob("*.py")),
    *sorted((ROOT / "bench").glob("*.py")),
    *sorted((ROOT / "api").glob("*.py")),
    *sorted((ROOT / "export").glob("*.py")),
    *sorted((ROOT / "cli").glob("*.py")),
    *sorted((ROOT / "vis").glob("*.py")),
    *(ROOT / f"{name}.py" for name in ("evaluation", "scene_inference")),
]
#: a Python keyword given as advice: "pass category=", "skip_missing=True"
HINT = re.compile(r"\b[Pp]ass \w+=|\b\w+=(True|False)\b")
#: what a command-line or config user types
TYPED = re.compile(r"(?<![\w-])--[a-z][\w-]*|\b(data|model|optim|trainer)\.[a-z<]")
#: (file, text in the message) of the hints only a Python caller meets, and why
API_ONLY = {
    ("io/registry.py", "replace=True"): "register_reader: a Python registration",
    ("io/npy.py", "allow_pickle=False"): "a statement of what the reader does, not advice",
    ("io/builtin.py", "allow_pickle=False"): "the format table: what the reader does",
    ("datasets/dynamic.py", "timestamps="): "read_sequence: a Python function (no command or config reads sequences)",
    ("api/functional.py", "features=None"): "gridify.gridify(features=...): the functional API",
    ("api/inputs.py", "normalize=True"): "gridify.gridify / predict on arrays beyond float32: files drop such rows",
    ("datasets/modelnet.py", "download=True"): "DatasetNotFoundError: the CLI says 'gridify download' (error_line)",
    ("datasets/shapenet.py", "download=True"): "DatasetNotFoundError: the CLI says 'gridify download' (error_line)",
}
#: the dataset classes a command reaches only through a config (gridify.training.data.build_dataset), which
#: rewrites their ``key=value`` advice into the config's words (gridify.training.schema.dataset_message)
REWRITTEN = ("datasets/modelnet.py", "datasets/shapenet.py")


def _text(node: ast.AST) -> str:
    """Every string constant under ``node`` (an f-string's literal parts, a concatenation), joined."""
    return "".join(n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def _messages(path: Path):
    """``(line, text)`` of every call argument holding a message: exceptions, warnings, ``fail``, SystemExit."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, (ast.Constant, ast.JoinedStr, ast.BinOp)):
                    text = _text(arg)
                    if text:
                        yield node.lineno, text


def test_hints_reachable_from_the_command_line_name_the_flag_or_key():
    bad = []
    for path in REACHED:
        rel = path.relative_to(ROOT).as_posix()
        for line, text in _messages(path):
            hint = HINT.search(text)
            if hint is None or TYPED.search(text) or "in Python" in text[: hint.start()]:
                continue  # no hint, the flag / key named, or the hint addressed to Python callers as such
            if any(f == rel and key in text for f, key in API_ONLY) or rel in REWRITTEN:
                continue
            bad.append(f"{rel}:{line}: {text[:140]!r}")
    assert not bad, "messages that give a Python keyword only:\n" + "\n".join(bad)


def test_the_scan_finds_what_it_looks_for():
    """The scan itself: it sees the hint of a message built from an f-string and accepts one that names both."""
    src = 'raise ValueError(f"{where}: the release is incomplete (pass skip_missing=True to use it)")\n'
    ((_, text),) = _messages_of(src)
    assert HINT.search(text) and not TYPED.search(text)
    assert TYPED.search("set data.skip_missing: true (skip_missing=True)") and TYPED.search("(--category)")


def _messages_of(source: str):
    tree = ast.parse(source)
    return [(n.lineno, _text(n.args[0])) for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args]


def test_dataset_advice_reaches_a_config_user_in_config_words(tmp_path):
    """What REWRITTEN relies on: a ModelNet / ShapeNet-Part message met through a config names data.<key>."""
    import pytest

    from gridify.training.config import ConfigError, resolve_config
    from gridify.training.data import build_dataset

    cfg = resolve_config("modelnet10", [f"data.root={tmp_path}", "data.source=pcd", "data.use_normals=true"])
    with pytest.raises(ConfigError, match=r"data\.use_normals=false") as info:
        build_dataset(cfg, "train")
    assert "use_normals=False" not in str(info.value)
