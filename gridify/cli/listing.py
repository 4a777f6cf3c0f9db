"""``gridify list``: what gridify ships and knows by name (the configs, the shipped models, the registered
architectures, the datasets, every config key), from the package's files and the parser's literals alone
(``gridify._clinames``): no PyTorch."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, List

from .._pretrained import PRETRAINED

__all__ = ["LIST_KINDS", "LIST_WIDTH", "add_list_parser", "cmd_list"]


LIST_KINDS = ("configs", "models", "datasets")


def add_list_parser(sub: Any) -> None:
    """The ``list`` sub-command."""
    li = sub.add_parser(
        "list",
        help="list the shipped configs, the shipped and registered models and the datasets",
        description="List what gridify ships and knows by name: the training configs (gridify train --config "
        "NAME), the shipped models (--model NAME, gridify.load(NAME)) and the model architectures of the "
        "registry (model.name), the datasets (data.name). Generated from the package's registries.",
    )
    li.add_argument(
        "what",
        nargs="?",
        choices=(*LIST_KINDS, "keys", "all"),
        default="all",
        help="what to list (default all: configs, models and datasets; keys: every config key, its type, range "
        "and default)",
    )
    li.set_defaults(func=cmd_list)


def _config_summary(path: Path) -> str:
    """The first sentence of a config file's header comment (its description, whole: the header's lines up to
    an indented example line or the first full stop), or ''."""
    import re

    words: List[str] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        text = line.strip()
        if not text.startswith("#") or text.startswith("#  ") or not text.lstrip("# "):
            break  # the header ends, or its examples (indented) begin
        words.append(text.lstrip("# "))
    header = " ".join(words)
    end = re.search(r"(?<!\be\.g)(?<!\bi\.e)\.(?=\s|$)", header)
    return (header[: end.end()] if end else header).strip().rstrip(":")


#: the width ``gridify list`` wraps its descriptions to (they were cut with "..." at 90 characters)
LIST_WIDTH = 118


def _listed(name: str, text: str, column: int = 34) -> str:
    """``  name  description``, the description wrapped under itself (never cut)."""
    import textwrap

    head = f"  {name:{column}s} "
    if not text:
        return head.rstrip()
    return textwrap.fill(
        text, width=max(LIST_WIDTH, len(head) + 40), initial_indent=head, subsequent_indent=" " * len(head)
    )


def cmd_list(args: argparse.Namespace) -> int:
    """Print what gridify ships and knows by name from the package's files and the parser's literals alone
    (``gridify._clinames``, held equal to the registries by ``tests/cli/test_startup.py``): no PyTorch, well
    under a second (about 3 s when it read the registries)."""
    from .._clinames import DATASET_NAMES, KEY_ROWS, MODEL_NAMES

    if args.what == "keys":  # the rows of docs/config_keys.md (gridify.training.schema.print_keys)
        for key, rule, default, doc in KEY_ROWS:
            print(f"{key:34} {rule}" + (f"  [default {default}]" if default else "") + (f"  - {doc}" if doc else ""))
        return 0
    kinds = LIST_KINDS if args.what == "all" else (args.what,)
    if "configs" in kinds:  # read from the files alone
        from .._commands import CONFIG_DIR, shipped_config_names

        print("configs (gridify train --config NAME):")
        for name in shipped_config_names():
            print(_listed(name, _config_summary(CONFIG_DIR / f"{name}.yaml")))
    if "models" in kinds:
        print("shipped models (--model NAME, gridify.load(NAME); model cards: docs/guides/prediction.md):")
        for name in sorted(PRETRAINED):
            print(f"  {name}")
        print(f"model architectures (model.name): {', '.join(MODEL_NAMES)}")
    if "datasets" in kinds:
        print(f"datasets (data.name): {', '.join(DATASET_NAMES)}")
    return 0
