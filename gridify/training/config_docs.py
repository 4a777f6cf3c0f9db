"""The declared config keys as documentation: the key listing, ``docs/config_keys.md``, a commented config.

From the tables of :mod:`gridify.training.config_keys`: :func:`declared_keys` (every key, dotted, with its
spec), :func:`key_rows` (``(key, rule, default, meaning)`` of every key; ``gridify list keys`` prints a
snapshot of them, ``gridify._clinames.KEY_ROWS``), :func:`markdown_table` (``docs/config_keys.md``,
``python -m gridify.training.schema --markdown``), :func:`annotated_yaml` (a resolved config in, its YAML out
with each declared key's rule as a comment: ``gridify train --print-config``), :func:`print_keys` and
:func:`main` (``python -m gridify.training.schema``). All of it is re-exported by
:mod:`gridify.training.schema`. No Lightning import.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from gridify.registry import DATASETS, MODELS

from .config_errors import dataset_keys, model_keys
from .config_keys import DATASET_KEYS, DEFAULTS, MODEL_KEYS, SCHEMA
from .specs import Choice, Spec

__all__ = ["declared_keys", "key_rows", "markdown_table", "annotated_yaml", "print_keys", "main"]


def declared_keys() -> List[Tuple[str, Spec]]:
    """Every declared key, dotted (``trainer.checkpoint.keep_all``, ``data.<dataset arg>``, ``model.<arg>``),
    with its spec, in the order of the docs table."""
    out: List[Tuple[str, Spec]] = []

    def walk(prefix: str, specs: Dict[str, Any]) -> None:
        for key, spec in specs.items():
            name = f"{prefix}.{key}" if prefix else key
            if isinstance(spec, dict):
                walk(name, spec)
            else:
                out.append((name, spec))

    walk("", SCHEMA)
    out.insert([k for k, _ in out].index("optim.lr"), ("model.name", Choice(MODELS.names, doc="the model")))
    out += [(f"data.{k}", s) for k, s in DATASET_KEYS.items()]
    out += [(f"model.{k}", s) for k, s in MODEL_KEYS.items()]
    return out


def _default(key: str) -> Any:
    node: Any = DEFAULTS
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return "(from the dataset / model)" if key.startswith(("data.", "model.")) else ""
        node = node[part]
    return yaml.safe_dump(node, default_flow_style=True, width=1000).strip().removesuffix("\n...")


def _users(key: str) -> str:
    """``data.*`` / ``model.*``: the datasets or models that take the key."""
    section, _, arg = key.partition(".")
    if section == "data" and key in (f"data.{k}" for k in DATASET_KEYS):
        return ", ".join(n for n in DATASETS.names() if arg in dataset_keys(n))
    if section == "model" and arg in MODEL_KEYS:
        return ", ".join(n for n in MODELS.names() if arg in model_keys(n))
    return ""


def key_rows() -> List[Tuple[str, str, str, str]]:
    """``(key, rule, default, description)`` of every declared key (the description names the datasets /
    models that take a dataset or model argument)."""
    rows = []
    for key, spec in declared_keys():
        users = _users(key)
        doc = f"{spec.doc} ({users})" if users else spec.doc
        rows.append((key, spec.rule(), _default(key), doc))
    return rows


def markdown_table() -> str:
    """``docs/config_keys.md``: every config key, its type and range, default and meaning."""
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    lines = [
        "# Config keys",
        "",
        "Generated from `gridify/training/schema.py` by `python -m gridify.training.schema --markdown`",
        "(a test checks that it is up to date). Every value is checked before a run starts: numbers are",
        "finite, booleans are `true`/`false` (not strings), integers are integers. `data.*` arguments are",
        "checked against the chosen dataset's constructor and `model.*` arguments against the chosen",
        "model's (an argument of neither is an error); the model, optimizer and trainer are built inside",
        "the run's one-line error path.",
        "",
        "| key | type and range | default | meaning |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| `{k}` | {esc(r)} | {'`' + esc(d) + '`' if d and not d.startswith('(') else esc(d)} | {esc(m)} |"
        for k, r, d, m in key_rows()
    ]
    return "\n".join(lines) + "\n"


def annotated_yaml(cfg: Dict[str, Any]) -> str:
    """The resolved config ``cfg`` as YAML, each declared key followed by its rule as a comment."""
    rules = {k: s.rule() for k, s in declared_keys()}
    out, stack = [], []
    for line in yaml.safe_dump(cfg, sort_keys=False, width=1000).splitlines():
        m = re.match(r"^( *)([A-Za-z_][\w\-]*):", line)
        if m:
            depth = len(m.group(1)) // 2
            stack = stack[:depth] + [m.group(2)]
            rule = rules.get(".".join(stack))
            if rule:
                line = f"{line}  # {rule}"
        out.append(line)
    return "\n".join(out) + "\n"


def print_keys() -> None:
    """Every config key, one per line: its rule, default and meaning (``gridify list keys``)."""
    for key, rule, default, doc in key_rows():
        print(f"{key:34} {rule}" + (f"  [default {default}]" if default else "") + (f"  - {doc}" if doc else ""))


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python -m gridify.training.schema [--markdown]``: list every config key (or print the docs table)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--markdown"]:
        sys.stdout.write(markdown_table())
        return
    print_keys()
