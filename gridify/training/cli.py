"""Train and test a gridified network from a YAML config, with PyTorch Lightning.

The command line of ``gridify train``, ``scripts/train.py`` and ``python -m gridify.training``:

    python scripts/train.py --config configs/procedural.yaml
    python scripts/train.py --config configs/procedural.yaml model.resolution=7 trainer.max_epochs=2
    python scripts/train.py --config configs/modelnet10.yaml --accelerator gpu --precision bf16-mixed
    python scripts/train.py --config configs/procedural.yaml --devices 2 --strategy ddp --accelerator cpu
    python scripts/train.py --config configs/procedural.yaml --devices 2 --strategy ddp_spawn --accelerator cpu
    torchrun --nproc_per_node 2 scripts/train.py --config configs/procedural.yaml
    python scripts/train.py --config configs/procedural.yaml --resume auto      # continue last.ckpt

Positional ``section.key=value`` arguments override the config; values are parsed as YAML
(``trainer.max_epochs=2``, ``data.augmentations=[rotate_z]``, ``optim.lr=1e-3``).

Errors are printed as ``<program>: config error: ...`` / ``<program>: error: ...``, where the
program is the name the command was started as (:func:`program_name`). Parsing the arguments
needs no Lightning; it is imported when the run starts.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, Optional, Sequence

import yaml

from .config import SECTIONS, ConfigError, resolve_config

__all__ = ["program_name", "build_parser", "config_from_args", "main"]


def program_name(script: str) -> str:
    """The name this command was started as, for usage lines and error prefixes.

    ``gridify train`` through the ``gridify`` console script (it names the sub-command in the
    environment variable ``GRIDIFY_PROG``, so ``sys.argv`` stays runnable for launchers that
    re-execute it, such as DDP), ``script`` itself (e.g. ``train.py``) when that script was run,
    and ``script`` as well when the command is called from Python (tests, notebooks).
    """
    given = os.environ.get("GRIDIFY_PROG", "")
    if given.startswith("gridify "):
        return given
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name == script else script


def build_parser() -> argparse.ArgumentParser:
    """The ``train`` argument parser (its program name from :func:`program_name`)."""
    p = argparse.ArgumentParser(prog=program_name("train.py"), description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Overrides: section.key=value, e.g. model.resolution=7 trainer.max_epochs=2")
    p.add_argument("--config", help="YAML config (sections: " + ", ".join(SECTIONS) + ")")
    p.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides (YAML values)")
    p.add_argument("--output-dir", help="shorthand for output_dir=...")
    p.add_argument("--accelerator", help="shorthand for trainer.accelerator (cpu, gpu, auto)")
    p.add_argument("--devices", help="shorthand for trainer.devices (a count, a list or auto)")
    p.add_argument("--strategy", help="shorthand for trainer.strategy (auto, ddp, ddp_spawn, ...)")
    p.add_argument("--precision", help="shorthand for trainer.precision (32-true, 16-mixed, bf16-mixed)")
    p.add_argument("--max-epochs", type=int, help="shorthand for trainer.max_epochs")
    p.add_argument("--resume", metavar="PATH|auto",
                   help="continue from a Lightning checkpoint; 'auto' = <output_dir>/checkpoints/last.ckpt if present")
    p.add_argument("--overwrite", action="store_true",
                   help="start afresh in an output_dir that already holds checkpoints/logs (deletes them)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    return p


def config_from_args(args: argparse.Namespace) -> Dict[str, Any]:
    """The resolved config: ``--config`` <- positional overrides <- the shorthand flags."""
    overrides = list(args.overrides)
    for flag, key in (("output_dir", "output_dir"), ("accelerator", "trainer.accelerator"),
                      ("devices", "trainer.devices"), ("strategy", "trainer.strategy"),
                      ("precision", "trainer.precision"), ("max_epochs", "trainer.max_epochs")):
        value = getattr(args, flag)
        if value is not None:
            # strings are quoted so a path like "a: b" stays a string; devices may be a list or int
            text = value if flag in ("devices", "max_epochs") else json.dumps(str(value))
            overrides.append(f"{key}={text}")
    return resolve_config(args.config, overrides)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Train and test from the command line ``argv`` (default ``sys.argv[1:]``); returns the run summary."""
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)
    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        raise SystemExit(f"{parser.prog}: config error: {exc}")
    if args.print_config:
        print(yaml.safe_dump(cfg, sort_keys=False))
        return {"config": cfg}
    from .runner import RUN_ERRORS, run  # Lightning is imported only when a run starts

    try:
        return run(cfg, resume=args.resume, overwrite=args.overwrite, argv=list(argv or sys.argv[1:]))
    except RUN_ERRORS as exc:
        raise SystemExit(f"{parser.prog}: error: {exc}")
