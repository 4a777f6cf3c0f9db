"""The shell commands of the README's and the docs' ``bash`` blocks, and which of them the docs test runs.

A command line is one logical line of a block (``\\`` continuations joined, comments kept for the shell).
:func:`classify` decides, by the rules below and nothing else, whether the test runs it for real or only
parses it; ``tests/docs/conftest.py`` prints the tally so nobody reads "parsed" as "ran".
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

#: the ``scripts/`` that are ``gridify`` sub-commands under another name (parsed by that command's parser)
SCRIPTS = {"scripts/train.py": "train", "scripts/evaluate.py": "evaluate"}
#: arguments that name data a user fetches first (the developers' copies, a data root, a placeholder)
LARGE_DATA = ("../shared/", "/data", "path/to/")


@dataclass(frozen=True)
class Command:
    """One command line of a doc: where it is, its text, and what the test does with it."""

    doc: str  # "README.md", "docs/guides/export.md"
    line: int  # 1-based line of the command in the doc
    text: str  # the line as the shell gets it (continuations joined)
    argv: tuple  # ("gridify", sub-command, ...) for gridify commands and their script forms; () otherwise
    mode: str  # "run" or "parse"
    reason: str  # why it is only parsed, or why its run is slow ("" for a quick run)
    slow: bool = False

    @property
    def id(self) -> str:
        short = re.sub(r"\s+", " ", re.sub(r"\s+#.*", "", self.text))
        short = short if len(short) <= 90 else short[:87] + "..."
        return f"{self.doc}:{self.line} {short}"

    def option(self, *names: str) -> str | None:
        """The value of the first of ``names`` given (``--out X`` or ``--out=X``)."""
        args = self.argv
        for i, a in enumerate(args):
            for n in names:
                if a == n and i + 1 < len(args):
                    return args[i + 1]
                if a.startswith(n + "="):
                    return a.split("=", 1)[1]
        return None


def command_lines(code: str, first_line: int):
    """``(line number, text)`` of each command of a block whose code starts at ``first_line``."""
    pending, start = "", None
    for i, raw in enumerate(code.splitlines()):
        if start is None:
            start = first_line + i
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        text = (pending + raw).strip()
        if text and not text.startswith("#"):
            yield start, text
        pending, start = "", None


def as_gridify(tokens) -> tuple:
    """``("gridify", sub-command, ...)`` for ``gridify`` / ``.venv/bin/gridify`` and the scripts that are the same
    commands (``python scripts/train.py``, ``torchrun ... scripts/train.py``); ``()`` for anything else."""
    if tokens and Path(tokens[0]).name == "gridify":
        return ("gridify", *tokens[1:])
    for i, tok in enumerate(tokens):
        if tok in SCRIPTS and (Path(tokens[0]).name.startswith("python") or tokens[0] == "torchrun"):
            return ("gridify", SCRIPTS[tok], *tokens[i + 1 :])
    return ()


def _has(argv, *flags) -> bool:
    return any(a in flags or a.split("=", 1)[0] in flags for a in argv)


# The rules, first match wins: (test on (sub-command, its arguments), why it is only parsed).
PARSE_ONLY = [
    (lambda c, a: c == "train", "trains (parsed, its config resolved with the overrides)"),
    (lambda c, a: c == "bench", "benchmarks for minutes (parsed)"),
    (lambda c, a: c == "download" and not _has(a, "--list", "--instructions"), "downloads (parsed)"),
    (lambda c, a: c == "evaluate" and not _has(a, "--scan"), "evaluates a dataset split (parsed)"),
    (lambda c, a: c == "show" and not _has(a, "--out"), "opens an interactive window (parsed)"),
    (
        lambda c, a: any(x.startswith(LARGE_DATA) for x in a),
        "reads data a user downloads first: ../shared/data, /data, path/to/ (parsed)",
    ),
]
# Runs that take longer than a few seconds of CPU: marked slow (run by `pytest -m slow`, .ci/run's slow tests).
SLOW = [
    (lambda c, a: c == "export", "traces the model and checks the file in onnxruntime (15 s to minutes)"),
]


def classify(doc: str, line: int, text: str) -> Command:
    """The command at ``doc:line`` and what the test does with it (see the rules above)."""
    argv = as_gridify(shlex.split(text, comments=True))
    if not argv:
        return Command(doc, line, text, (), "parse", "not a gridify command")
    sub, args = argv[1], list(argv[2:])
    for rule, reason in PARSE_ONLY:
        if rule(sub, args):
            return Command(doc, line, text, argv, "parse", reason)
    for rule, reason in SLOW:
        if rule(sub, args):
            return Command(doc, line, text, argv, "run", reason, slow=True)
    return Command(doc, line, text, argv, "run", "")


def outputs(cmd: Command) -> list:
    """The files / folders a run of ``cmd`` must leave (its ``--out`` / ``--output``)."""
    out = cmd.option("--out", "--output")
    return [] if out is None else [out]
