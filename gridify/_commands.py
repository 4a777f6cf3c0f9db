"""The argument parsers of ``gridify train`` and ``gridify evaluate``, importable without PyTorch.

``gridify train --help``, ``gridify evaluate --help`` and their argument errors answer before
anything heavy is imported: :func:`gridify.cli.main` parses with these first, then hands the
arguments to :func:`gridify.training.main` / :func:`gridify.evaluation.main`, which build their
parsers from here too (one definition). The few library values they show are plain literals,
held equal to the library's by ``tests/cli/test_startup.py``.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import _cliargs as types

__all__ = ["program_name", "train_parser", "evaluate_parser", "CONFIG_SECTIONS", "EVAL_PRECISIONS"]

#: :data:`gridify.training.config.SECTIONS` (the top-level keys of a config)
CONFIG_SECTIONS = ("seed", "task", "output_dir", "data", "model", "optim", "trainer")
#: :data:`gridify.precision.PRECISIONS`
EVAL_PRECISIONS = ("fp32", "bf16", "fp16")


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


def train_parser() -> argparse.ArgumentParser:
    """The ``train`` argument parser (its program name from :func:`program_name`)."""
    p = argparse.ArgumentParser(
        prog=program_name("train.py"),
        description="Train and test a gridified network from a YAML config, with PyTorch Lightning.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Overrides: section.key=value, e.g. model.resolution=7 trainer.max_epochs=2",
    )
    p.add_argument(
        "--config",
        help="a shipped config by name (procedural, modelnet10, folder_classification, ...) "
        "or a YAML file (sections: " + ", ".join(CONFIG_SECTIONS) + ")",
    )
    p.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides (YAML values)")
    p.add_argument("--output-dir", type=types.output_dir, help="shorthand for output_dir=...")
    p.add_argument(
        "--data-root",
        help="shorthand for data.root=...: the data root (or your own folder); "
        "default $GRIDIFY_DATA, else the repository's datasets/",
    )
    p.add_argument("--accelerator", help="shorthand for trainer.accelerator (cpu, gpu, auto)")
    p.add_argument("--devices", help="shorthand for trainer.devices (a count, a list or auto)")
    p.add_argument("--strategy", help="shorthand for trainer.strategy (auto, ddp, ddp_spawn, ...)")
    p.add_argument("--precision", help="shorthand for trainer.precision (32-true, 16-mixed, bf16-mixed)")
    p.add_argument("--max-epochs", type=int, help="shorthand for trainer.max_epochs")
    p.add_argument(
        "--resume",
        metavar="PATH|auto",
        help="continue from a Lightning checkpoint; 'auto' = <output_dir>/checkpoints/last.ckpt if present",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh in an output_dir that already holds checkpoints/logs (deletes them)",
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    return p


def evaluate_parser() -> argparse.ArgumentParser:
    """The ``evaluate`` argument parser (its program name from :func:`~gridify.training.cli.program_name`)."""
    p = argparse.ArgumentParser(
        prog=program_name("evaluate.py"),
        description="Evaluate a trained gridified network on a dataset split, or on scan files with --scan.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--ckpt", help="Lightning .ckpt or exported model.pt")
    which.add_argument("--model", help="a shipped model by name (with --scan), e.g. semantickitti")
    p.add_argument(
        "--scan",
        nargs="+",
        metavar="PATH",
        help="score these scans (files, or folders of scan files) against their ground truth instead of a "
        "dataset split: per-class IoU over all their points (segmentation models)",
    )
    p.add_argument(
        "--labels",
        help="with one --scan file: its ground truth (.label, .npy or .txt; default: found beside the scan, "
        "SemanticKITTI labels/<stem>.label or Pointcept segment.npy, else the file's own label field)",
    )
    p.add_argument(
        "--config", help="config (a shipped name or a YAML file) whose sections update the one stored in the checkpoint"
    )
    p.add_argument("--data-root", help="shorthand for data.root=... (where the dataset is)")
    p.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides (YAML values)")
    p.add_argument("--split", default="test", choices=("test", "val", "train"), help="split to evaluate")
    p.add_argument(
        "--device", default="auto", type=types.device_or_auto, help="cpu, cuda, cuda:1, ... (auto: cuda when available)"
    )
    p.add_argument("--batch-size", type=types.positive_int, help="evaluation batch size (default: the config's)")
    p.add_argument("--num-workers", type=types.workers, help="DataLoader workers (default: the config's)")
    p.add_argument("--threads", type=types.threads, help="torch CPU threads")
    p.add_argument(
        "--output",
        type=types.output_file(),
        help="metrics JSON path (default: <ckpt>.test_metrics.json beside the checkpoint)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--precision",
        default="fp32",
        choices=EVAL_PRECISIONS,
        help="fp32, or bf16/fp16 autocast (a device that cannot run it natively falls back to fp32 "
        "with a warning; gridify.precision)",
    )
    p.add_argument(
        "--votes",
        type=types.positive_int,
        default=1,
        help="test-time voting: average the softmax over this many views of every cloud (the first "
        "as it is, the others with random per-axis scales in [0.85, 1.15]; scene_segmentation: rotated "
        "about the vertical axis; default 1 = none)",
    )
    p.add_argument(
        "--voxel-size",
        type=types.voxel_size,
        default=None,
        help="scene_segmentation: the fragments' voxel edge in metres (default: the run's data.voxel_size)",
    )
    p.add_argument(
        "--max-points",
        type=types.positive_int,
        default=None,
        help="scene_segmentation: the largest crop (default: the run's data.max_points)",
    )
    return p
