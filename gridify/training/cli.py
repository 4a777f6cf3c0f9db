"""Train and test a gridified network from a YAML config, with PyTorch Lightning.

The command line of ``gridify train``, ``scripts/train.py`` and ``python -m gridify.training``:

    gridify train --config procedural                       # a shipped config, by name (or a path)
    gridify train --config procedural model.resolution=7 trainer.max_epochs=2
    gridify train --config modelnet10 --data-root /data --accelerator gpu --precision bf16-mixed
    gridify train --config folder_classification --data-root path/to/my/folder
    gridify train --config procedural --devices 2 --strategy ddp --accelerator cpu
    gridify train --config procedural --devices 2 --strategy ddp_spawn --accelerator cpu
    torchrun --nproc_per_node 2 scripts/train.py --config procedural
    gridify train --config procedural --resume auto         # continue last.ckpt

Positional ``section.key=value`` arguments override the config; values are parsed as YAML
(``trainer.max_epochs=2``, ``data.augmentations=[rotate_z]``, ``optim.lr=1e-3``).
``--data-root`` is ``data.root=...``; without it the datasets look in ``$GRIDIFY_DATA``, then the
repository's ``datasets/``.

Errors are printed as one line, ``<program>: config error: ...`` / ``<program>: error: ...``
(:func:`error_line`; an ``OSError`` while writing as ``<path>: <cause>``, :mod:`gridify._paths`),
where the program is the name the command was started as (:func:`program_name`). Parsing the
arguments needs no Lightning; it is imported when the run starts.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, Optional, Sequence


from gridify._commands import program_name, train_parser
from gridify._paths import one_line_errors
from gridify.datasets import DatasetNotFoundError, DownloadError

from .config import ConfigError, resolve_config
from .config_docs import annotated_yaml

__all__ = ["program_name", "build_parser", "config_from_args", "error_line", "main"]


build_parser = train_parser  # the parser lives in gridify._commands (no torch while parsing)


def config_from_args(args: argparse.Namespace) -> Dict[str, Any]:
    """The resolved config: ``--config`` <- positional overrides <- the shorthand flags."""
    overrides = list(args.overrides)
    for flag, key in (
        ("output_dir", "output_dir"),
        ("data_root", "data.root"),
        ("accelerator", "trainer.accelerator"),
        ("devices", "trainer.devices"),
        ("strategy", "trainer.strategy"),
        ("precision", "trainer.precision"),
        ("max_epochs", "trainer.max_epochs"),
    ):
        value = getattr(args, flag)
        if value is not None:
            # strings are quoted so a path like "a: b" stays a string; devices may be a list or int
            text = value if flag in ("devices", "max_epochs") else json.dumps(str(value))
            overrides.append(f"{key}={text}")
    return resolve_config(args.config, overrides)


def error_line(exc: BaseException) -> str:
    """The one-line message of an error a user can fix, in the words of the command line.

    A missing dataset says how to fetch it (``gridify download``) or where to point ``--data-root``;
    an error raised again by a DataLoader worker is reduced to the worker's own message; any other
    message is joined onto one line.
    """
    if isinstance(exc, DatasetNotFoundError):
        fetch = (
            f"get it with 'gridify download {exc.archive}{f' --root {exc.root}' if exc.root else ''}' or "
            if getattr(exc, "archive", None)
            else ""
        )
        return f"{exc.summary.rstrip('.')} ({fetch}point --data-root at it)"
    if isinstance(exc, DownloadError):
        return f"{exc.summary} ('gridify download NAME --instructions' says where to put the archive by hand)"
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if any(ln.startswith("Original Traceback") for ln in lines):  # re-raised by a DataLoader worker
        lines = [lines[-1].split(": ", 1)[-1]]
    return "; ".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Train and test from the command line ``argv`` (default ``sys.argv[1:]``); returns the run summary."""
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)
    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        raise SystemExit(f"{parser.prog}: config error: {error_line(exc)}")
    if args.print_config:  # each declared key followed by its rule (training/config_docs.py) as a YAML comment
        print(annotated_yaml(cfg))
        return {"config": cfg}
    from .runner import RUN_ERRORS, run  # Lightning is imported only when a run starts

    with one_line_errors(parser.prog):  # an OSError while writing (a full disk, ulimit -f): one line too
        try:
            return run(cfg, resume=args.resume, overwrite=args.overwrite, argv=list(argv or sys.argv[1:]))
        except RUN_ERRORS as exc:
            raise SystemExit(f"{parser.prog}: error: {error_line(exc)}")
