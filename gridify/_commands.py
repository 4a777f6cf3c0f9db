"""The argument parsers of ``gridify train``, ``gridify evaluate`` and ``gridify bench`` (its ``--recipe`` and
``--scenes`` modes too), importable without PyTorch.

``gridify train --help``, ``gridify evaluate --help``, ``gridify bench --help`` and their argument errors answer before
anything heavy is imported: :func:`gridify.cli.main` parses with these first, then hands the
arguments to :func:`gridify.training.main` / :func:`gridify.evaluation.main`, which build their
parsers from here too (one definition). The few library values they show are plain literals,
held equal to the library's by ``tests/cli/test_startup.py``.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import _cliargs as types

__all__ = [
    "program_name",
    "shipped_config_names",
    "check_config_name",
    "check_overrides",
    "train_parser",
    "evaluate_parser",
    "bench_parser",
    "bench_recipe_parser",
    "bench_scenes_parser",
    "bench_command",
    "bench_command_parser",
    "check_bench_mode",
    "BENCH_MODES",
    "CONFIG_SECTIONS",
    "EVAL_PRECISIONS",
    "BENCH_MODELS",
    "BENCH_MAX_POINTS_PER_BATCH",
    "REL_CI_HELP",
    "BENCH_DESCRIPTION",
    "BENCH_RECIPE_DESCRIPTION",
    "BENCH_SCENES_DESCRIPTION",
    "BENCH_SCENES_MODELS",
    "BENCH_SCENES_NUM_POINTS",
    "BENCH_SCENES_QUICK_NUM_POINTS",
]

#: :data:`gridify.training.config.SECTIONS` (the top-level keys of a config)
CONFIG_SECTIONS = ("seed", "task", "output_dir", "init_weights", "data", "model", "optim", "trainer")
#: :data:`gridify.precision.PRECISIONS`
EVAL_PRECISIONS = ("fp32", "bf16", "fp16")
#: :data:`gridify.bench.synthetic.DEFAULT_MODELS` (and :data:`gridify.bench.recipe.DEFAULT_MODELS`)
BENCH_MODELS = ("gridified", "pointnet2", "point_ckconv")
#: :data:`gridify.bench.synthetic.DEFAULT_MAX_POINTS_PER_BATCH`: batches of 32 clouds up to N = 2,048, one at 65,536
BENCH_MAX_POINTS_PER_BATCH = 1 << 16
#: the help of ``--rel-ci`` (``gridify bench`` and its ``--scenes`` mode)
REL_CI_HELP = (
    "target precision of every timed figure: repeats go on until the 95 %% confidence interval of the median "
    "is within +- this fraction of it (default %(default)s: +- 5 %%), or the time budget is spent"
)
#: the first paragraph of :mod:`gridify.bench.synthetic`'s docstring
BENCH_DESCRIPTION = "Speed and memory benchmark: gridified classifier vs native point-cloud baselines."
#: the first paragraph of :mod:`gridify.bench.recipe`'s docstring
BENCH_RECIPE_DESCRIPTION = "Real training steps of a named recipe on real data: ``gridify bench --recipe NAME``."
#: the first paragraph of :mod:`gridify.bench.scenes`'s docstring
BENCH_SCENES_DESCRIPTION = (
    "Speed and memory of scene segmentation at scene scale, in one run, on a named CPU: ``gridify bench --scenes``."
)
#: :data:`gridify.bench.scenes.DEFAULT_MODELS`, ``DEFAULT_NUM_POINTS`` and ``QUICK_NUM_POINTS``
BENCH_SCENES_MODELS = ("scene_segmenter", "pointnet2_segmenter", "point_ckconv_segmenter")
BENCH_SCENES_NUM_POINTS = (16384, 65536, 262144)
BENCH_SCENES_QUICK_NUM_POINTS = (2048, 4096)
#: the files ``gridify bench --scenes`` writes to ``--out``
BENCH_SCENES_FILES = ("results.json", "results.csv", "bench_scenes.png")


#: the folder of the configs shipped with gridify (package data; found by name)
CONFIG_DIR = Path(__file__).resolve().parent / "configs"
#: a dotted override key's parts (:func:`gridify.training.config.parse_override`)
OVERRIDE_KEY_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")


def shipped_config_names() -> List[str]:
    """The names of the configs in :data:`CONFIG_DIR` (read without PyTorch), then those in its sub-folders by
    their relative name (``temporal/dynamic_shapes``); :func:`gridify.training.config.shipped_configs` too."""
    top = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    nested = sorted(p.relative_to(CONFIG_DIR).with_suffix("").as_posix() for p in CONFIG_DIR.glob("*/*.yaml"))
    return top + nested


def check_config_name(text: Optional[str], prog: str, flag: str = "--config") -> None:
    """Exit with one line when ``text`` names neither a path (with or without ``.yaml``) nor a shipped config,
    before PyTorch loads (:func:`gridify.training.config.find_config` says the rest: a folder, bad YAML)."""
    if not text:
        return
    given = Path(text).expanduser()
    for base in (given, CONFIG_DIR / given):
        if any(os.path.lexists(c) for c in (base, base.with_name(base.name + ".yaml"))):
            return
    names = shipped_config_names()
    close = difflib.get_close_matches(text.removesuffix(".yaml"), names, n=1)
    raise SystemExit(
        f"{prog}: error: {flag} {text}: no such file, and no shipped config of that name"
        + (f"; did you mean {close[0]}?" if close else " (gridify list configs names them)")
    )


def check_overrides(overrides: Sequence[str], prog: str) -> None:
    """Exit with one line on an override that is not ``section.key=value`` (the syntax only; the keys and
    values are checked against the schema once the config loads), before PyTorch loads."""
    for text in overrides:
        key = text.split("=", 1)[0].strip()
        if "=" not in text:
            hint = " (options start with --)" if text.startswith(("[", "-")) else ""
            raise SystemExit(
                f"{prog}: error: malformed override {text!r}: expected section.key=value "
                f"(e.g. trainer.max_epochs=2){hint}"
            )
        if not key or not all(OVERRIDE_KEY_PART.fullmatch(part) for part in key.split(".")):
            raise SystemExit(
                f"{prog}: error: malformed override {text!r}: the key {key!r} must be dot-separated names "
                "(e.g. model.resolution=13)"
            )


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
    p = types.Parser(
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
    p.add_argument("--max-epochs", type=types.positive_int, help="shorthand for trainer.max_epochs")
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
    p = types.Parser(
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
        help="metrics JSON path (default: <ckpt stem>.<split>_metrics.json beside the checkpoint; with --scan "
        "<ckpt stem>.scan_metrics.json beside it, or <model>.scan_metrics.json in the current folder for --model)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--precision",
        default="fp32",
        choices=EVAL_PRECISIONS,
        help="fp32, or bf16/fp16 autocast (a device that cannot run it natively falls back to fp32 "
        "with a warning; gridify.precision)",
    )
    types.add_scene_run_arguments(
        p,
        "other models on a dataset split: test-time voting, the softmax averaged over this many views of every "
        "cloud (the first as it is, the others with random per-axis scales in [0.85, 1.15]; default 1 = none); ",
    )
    types.add_pred_argument(
        p, "; several scans: a folder holding <scan name>.<ext> per scan (a Pointcept scene: its folder's name)"
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


def check_evaluate_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """The ``evaluate`` flags that only go together (``--model`` and ``--labels`` with ``--scan``; ``--labels``
    with one scan), checked on the light parser's result too, so that the error comes before PyTorch loads."""
    if args.scan is None and args.model is not None:
        raise SystemExit(f"{parser.prog}: error: --model takes a shipped model to --scan files; give --scan PATH")
    if args.scan is None and args.labels is not None:
        parser.error("--labels goes with --scan")
    if args.labels is not None and len(args.scan) != 1:
        raise SystemExit(f"{parser.prog}: error: --labels goes with a single --scan file")
    if args.scan is not None and args.pred is not None and not os.path.exists(args.pred):
        raise SystemExit(f"{parser.prog}: error: --pred {args.pred}: no such file or folder")
    for text in args.scan or ():  # --scan takes every word after it: an override there was taken for a scan
        key = text.split("=", 1)[0]
        if "=" in text and not os.path.lexists(text) and all(OVERRIDE_KEY_PART.fullmatch(k) for k in key.split(".")):
            raise types.UsageExit(
                f"{parser.prog}: error: --scan {text}: no such file; a section.key=value override is only read on a "
                "dataset split (without --scan); leave it out"
            )
    try:
        types.check_ckpt(args.ckpt)  # a missing checkpoint is named now, not after PyTorch has loaded
    except ValueError as exc:
        raise SystemExit(f"{parser.prog}: error: {exc}") from None
    check_overrides(args.overrides, parser.prog)


def _bench_timing_options(p: argparse.ArgumentParser) -> None:
    """The options of ``gridify bench`` that say what a cell measures and how long (the batch, the repeats, the
    precision target, the warm-up and the time budget: :class:`gridify.bench.harness.MedianTimer`)."""
    p.add_argument(
        "--batch-size",
        type=types.positive_int,
        default=32,
        help="clouds per batch at most (default 32); the batch of a cell is the largest that also keeps "
        "batch x N <= --max-points-per-batch (never chosen by a timing)",
    )
    p.add_argument(
        "--max-points-per-batch",
        type=types.positive_int,
        default=BENCH_MAX_POINTS_PER_BATCH,
        help=f"points per batch at most (default {BENCH_MAX_POINTS_PER_BATCH}: batch 32 up to N = 2048, 1 at 65536)",
    )
    p.add_argument(
        "--repeats",
        type=types.positive_int,
        default=6,
        help="timed runs per measurement at least, whatever the budget (default 6: the fewest whose "
        "median has a 95 %% interval)",
    )
    p.add_argument("--rel-ci", type=types.rel_ci, default=0.05, help=REL_CI_HELP)
    p.add_argument(
        "--warmup",
        type=types.positive_int,
        default=1,
        help="untimed runs first, at the batch then timed (at least 1, default 1): a cold call is never a figure",
    )
    p.add_argument(
        "--time-budget",
        type=types.positive_float,
        default=20.0,
        help="seconds of timed runs per measurement (default 20): no further repeat starts once the next would "
        "pass it; it caps the repeats beyond --repeats, never the batch",
    )


def bench_parser() -> argparse.ArgumentParser:
    """The parser of ``gridify bench`` (the synthetic sweep of :mod:`gridify.bench.synthetic`; ``--recipe``: ``bench_recipe_parser``)."""
    # "gridify bench" through the console script (which names the sub-command in GRIDIFY_PROG)
    p = types.Parser(
        prog=os.environ.get("GRIDIFY_PROG") or None,
        description=BENCH_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--models", nargs="+", default=None, help=f"models (default: {' '.join(BENCH_MODELS)})")
    p.add_argument("--num-points", nargs="+", type=types.int_range(8), default=None, help="N values of the N sweep")
    p.add_argument(
        "--k", nargs="*", type=types.positive_int, default=None, help="k values of the k sweep (none: no k sweep)"
    )
    p.add_argument("--k-num-points", type=types.positive_int, default=1024, help="N of the k sweep")
    _bench_timing_options(p)
    p.add_argument("--threads", type=types.threads, default=None, help="torch threads (default: torch's)")
    p.add_argument("--device", default="auto", type=types.device_or_auto, help="auto, cpu, cuda, cuda:1, ...")
    p.add_argument("--train-step", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--precision",
        choices=EVAL_PRECISIONS,
        default="fp32",
        help="fp32, or bf16/fp16 autocast for every model alike (a CPU without native bf16 falls back "
        "to fp32 with a warning)",
    )
    p.add_argument(
        "--reference", default=None, help="model the ratio columns compare with (default: the first gridified model)"
    )
    p.add_argument(
        "--flops", action=argparse.BooleanOptionalAction, default=True, help="count the gridified forward's FLOPs"
    )
    p.add_argument(
        "--isolation",
        choices=("subprocess", "inprocess"),
        default="subprocess",
        help="fresh process per measurement (honest CPU peak memory) or all in this process",
    )
    p.add_argument(
        "--matmul-size", type=types.int_range(16), default=2048, help="matrix size of the matmul-peak measurement"
    )
    p.add_argument(
        "--malloc",
        choices=("default", "tuned"),
        default="default",
        help="CPU allocator settings of the measuring processes: glibc's defaults, or "
        "gridify.runtime.tune_cpu_allocator() (freed memory is reused: no page faults "
        "for every new temporary); applies to every model alike. Tuned peak-memory "
        "figures are lower bounds (memory freed during warm-up is reused)",
    )
    p.add_argument("--plots", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", default="outputs/benchmark", type=types.output_dir)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: N in {512, 1024}, k in {8, 16}, batch 4, 2 repeats, 5 s budget (spreads marked *)",
    )
    p.add_argument(
        "--recipe",
        default=None,
        metavar="NAME",
        help="instead of the synthetic sweep, time real training steps of a training recipe on real "
        "data (data loading, graph building, forward, backward, optimizer, cores used): "
        "--recipe modelnet10_fast --data-root DIR [--steps 200]; see --recipe NAME --help",
    )
    p.add_argument(
        "--scenes",
        action="store_true",
        help="instead of the synthetic sweep, time scene segmentation at scene scale (an N sweep on one "
        "LiDAR-like cloud, real scans, a scan file end to end); see --scenes --help",
    )
    p.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    return p


def bench_recipe_parser() -> argparse.ArgumentParser:
    """The parser of ``gridify bench --recipe`` (real training steps of a recipe, :mod:`gridify.bench.recipe`)."""
    prog = os.environ.get("GRIDIFY_PROG") or None
    p = types.Parser(
        prog=prog, description=BENCH_RECIPE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--recipe",
        required=True,
        help="a training config by name (modelnet10_fast, procedural, ...) or a YAML path, as gridify train --config",
    )
    p.add_argument("--data-root", default=None, help="the data root, as gridify train --data-root")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="section.key=value",
        help="config override as in gridify train (repeatable): --override data.batch_size=8",
    )
    p.add_argument("--steps", type=types.positive_int, default=200, help="timed training steps per model")
    p.add_argument(
        "--warmup", type=types.positive_int, default=5, help="untimed training steps before them (at least 1)"
    )
    p.add_argument(
        "--rel-ci",
        type=types.rel_ci,
        default=0.05,
        help="target precision of the median step: whether its 95 %% interval is within +- this fraction of it "
        "is recorded (the steps are --steps; default %(default)s)",
    )
    p.add_argument(
        "--infer-steps",
        type=types.nonnegative_int,
        default=None,
        help="timed inference batches (default min(steps, 50))",
    )
    p.add_argument(
        "--synthetic-steps", type=types.nonnegative_int, default=10, help="timed steps on synthetic clouds (0: skip)"
    )
    p.add_argument(
        "--models",
        nargs="+",
        default=None,
        help=f"models, comma- or space-separated (default {','.join(BENCH_MODELS)})",
    )
    p.add_argument(
        "--threads",
        type=types.threads,
        default=None,
        help="torch threads (default: the recipe's trainer.num_threads, else torch's)",
    )
    p.add_argument("--device", type=types.device_or_auto, default="cpu", help="cpu, cuda, cuda:N or auto")
    p.add_argument(
        "--isolation",
        choices=("subprocess", "inprocess"),
        default="subprocess",
        help="each model in a fresh process (no allocator or cache state carried from one model to the next), or "
        "all in this process",
    )
    p.add_argument("--out", default="outputs/benchmark_recipe", type=types.output_dir, help="output folder")
    p.add_argument("--_worker", default=None, help=argparse.SUPPRESS)  # internal: measure one model, print its row
    return p


def _bench_scenes_sweep_options(p: argparse.ArgumentParser) -> None:
    """The options of ``gridify bench --scenes`` that only its N sweep reads (``--parts sweep``)."""
    p.add_argument(
        "--num-points",
        type=types.positive_int,
        nargs="+",
        default=None,
        help=f"cloud sizes N of the sweep (default {' '.join(map(str, BENCH_SCENES_NUM_POINTS))}; "
        f"--quick: {' '.join(map(str, BENCH_SCENES_QUICK_NUM_POINTS))})",
    )
    p.add_argument("--models", nargs="+", default=list(BENCH_SCENES_MODELS), help="registered models of the sweep")
    p.add_argument(
        "--repeats",
        type=types.positive_int,
        default=None,
        help="timed steps per sweep cell after the warm-up at least (default 3; --quick: 1); more until --rel-ci or "
        "--time-budget",
    )
    p.add_argument("--rel-ci", type=types.rel_ci, default=0.05, help=REL_CI_HELP)
    p.add_argument(
        "--time-budget",
        type=types.positive_float,
        default=60.0,
        help="seconds of timed steps per sweep cell: no further repeat starts once the next would pass it "
        "(it caps the repeats beyond --repeats)",
    )
    p.add_argument(
        "--max-step-seconds",
        type=types.positive_float,
        default=120.0,
        help="a sweep cell whose warm-up step takes longer cannot run",
    )
    p.add_argument("--device", type=types.device, default="cpu", help="the sweep's device (cpu, cuda, cuda:N)")


def bench_scenes_parser() -> argparse.ArgumentParser:
    """The parser of ``gridify bench --scenes`` (scene segmentation at scene scale, :mod:`gridify.bench.scenes`)."""
    p = types.Parser(
        prog=os.environ.get("GRIDIFY_PROG") or None,
        description=BENCH_SCENES_DESCRIPTION,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--scenes", action="store_true", help="this mode (the flag that picks it)")
    p.add_argument(
        "--parts",
        nargs="+",
        choices=("sweep", "scans", "e2e"),
        default=["sweep", "scans", "e2e"],
        help="which parts to run: the N sweep, real scans, a scan file end to end",
    )
    _bench_scenes_sweep_options(p)
    p.add_argument("--threads", type=types.threads, default=2, help="torch.set_num_threads in every child")
    p.add_argument(
        "--memory-limit-gb",
        type=types.positive_float,
        default=16.0,
        help="cells whose estimated or measured RSS passes this many GiB cannot run",
    )
    p.add_argument(
        "--max-scene-seconds",
        type=types.positive_float,
        default=1800.0,
        help="wall-time limit of one scan / end-to-end child (after its setup allowance)",
    )
    p.add_argument(
        "--ckpt",
        type=types.input_file,
        default=None,
        help="scene segmenter checkpoint for the end-to-end part (default: an untrained one)",
    )
    p.add_argument(
        "--e2e-batch-size",
        type=types.positive_int,
        default=8,
        help="crops per forward pass in Predictor.predict (8: as `gridify predict`)",
    )
    p.add_argument(
        "--data-root",
        type=types.input_dir,
        default=None,
        help="folder with semantickitti_mini/ and scans/ (default: $GRIDIFY_SHARED_DATA, else ../shared/data "
        "beside the gridify checkout)",
    )
    p.add_argument(
        "--source",
        choices=("auto", "kitti", "procedural", "random"),
        default="auto",
        help="the scan the sweep's clouds and the end-to-end scene are cut from: the KITTI scan when present "
        "(auto), a generated outdoor scan, or uniform random points",
    )
    p.add_argument(
        "--out",
        type=types.output_dir_of(files=BENCH_SCENES_FILES),
        default="outputs/bench_scenes",
        help="folder for " + ", ".join(BENCH_SCENES_FILES),
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: N = 2048 4096, 1 repeat (a 5 s budget), scans cropped to 4096 points, a ~20k tiled scene",
    )
    return p


#: the modes of ``gridify bench`` by the flag that picks them: their rows of :data:`OPTION_USE`
BENCH_MODES = {"--recipe": "bench --recipe", "--scenes": "bench --scenes"}


def bench_command(argv: Sequence[str]) -> str:
    """The mode of a ``gridify bench`` command line, as its row of :data:`OPTION_USE`: ``"bench --recipe"`` when it
    gives ``--recipe``, ``"bench --scenes"`` for ``--scenes``, else ``"bench"`` (the synthetic sweep). The flag must be
    spelt out: an abbreviation is refused by :func:`check_bench_mode`."""
    for flag, command in BENCH_MODES.items():
        if any(a == flag or a.startswith(flag + "=") for a in argv):
            return command
    return "bench"


def bench_command_parser(command: str) -> argparse.ArgumentParser:
    """The parser of a ``gridify bench`` mode (:func:`bench_command`)."""
    return {"bench": bench_parser, "bench --recipe": bench_recipe_parser, "bench --scenes": bench_scenes_parser}[
        command
    ]()


def check_bench_mode(args: argparse.Namespace, prog: str) -> None:
    """The synthetic sweep's arguments name no other mode: ``--recip`` or ``--scen`` (an abbreviation the sweep's parser
    takes) would have run the sweep instead of the mode it names."""
    for flag, dest in (("--recipe", "recipe"), ("--scenes", "scenes")):
        if getattr(args, dest, None) not in (None, False):
            raise types.UsageExit(f"{prog}: error: spell {flag} out in full: it picks the mode of gridify bench")


# --------------------------------------------------------------------------------------
# which arguments each route of a sub-command reads
# --------------------------------------------------------------------------------------
_MODEL_FILE_OPTIONS = {  # predict and show: the model and the file
    "file": ("", ""),
    "ckpt": ("", ""),
    "model": ("", ""),
    "out": ("", ""),
    "threads": ("", ""),
    "seed": ("", ""),
    "category": ("model:part-segmenter", "by a part segmenter trained with object categories"),
    "num_samples": ("file:mesh", "for a file that holds a mesh to sample (.ply .off .obj .stl .glb .gltf)"),
    "columns": ("file:columns", "for text and .npy files (.npy .xyz .txt .pts .csv .xyzn .xyzrgb)"),
    "max_fragments": ("model:scene-segmenter", "by a scene segmenter (which covers a scan with fragments)"),
    "no_progress": ("model:scene-segmenter", "with a scene segmenter (the only model with a progress bar)"),
}
_WITH_A_MODEL = "with a model (--ckpt / --model)"
_ON_A_SPLIT = "on a dataset split (without --scan)"
#: a scene segmenter that labels the scan itself (no ``--pred``)
_SCENE_RUN = "model:scene-segmenter+pred:model"
_NOT_PRED = "not with --pred, whose labels are used as they are"
_SCENE_SPLIT = "for a scene segmenter on a dataset split (with --scan the model's own settings are used)"
_SWEEP = "for the N sweep (--parts sweep)"
_E2E = "for the end-to-end part (--parts e2e)"

#: The one table of which arguments each route of every sub-command reads: ``{command: {dest: (requirement,
#: when it is read)}}``, checked in one place (:func:`check_route`) once the command's route is known (from its
#: arguments, the file and the model loaded): an argument its route does not read is refused by name, never
#: ignored. A requirement is ``""`` (always read) or facts of the route, ``"a+b|c"`` (``a`` and ``b``, or
#: ``c``), each ``group:fact``: ``model:classifier`` / ``model:part-segmenter`` / ``model:scene-segmenter`` /
#: ``model:none`` (and ``model``: one is given), ``pred:model`` / ``pred:file`` (``show`` and ``evaluate``: the model
#: labels the scan, or ``--pred`` gives the labels), ``file:columns`` / ``file:mesh`` (what the file's reader takes),
#: ``layers:grid`` / ``layers:edges`` (what ``show`` draws), ``evaluate:scan`` / ``evaluate:split``,
#: ``download:list`` / ``download:by-name`` / ``download:by-config`` / ``download:fetch`` /
#: ``download:instructions``, ``layout:<name>`` (``convert``), ``train:run`` / ``train:print-config``,
#: ``bench:k-sweep``, ``bench:sweep`` / ``bench:scans`` / ``bench:e2e`` (the parts of ``bench --scenes``).
#: A refusal names the route by the facts of the groups the argument depends on.
#: ``tests/cli/test_options.py`` walks every argument of every sub-command's parser against it.
OPTION_USE: Dict[str, Dict[str, Tuple[str, str]]] = {
    "predict": {
        **_MODEL_FILE_OPTIONS,
        "device": ("", ""),
        "estimate_normals": ("", ""),
        "up_axis": ("", ""),
        "votes": (
            "model:classifier|model:scene-segmenter",
            "by a classifier (subsets) and a scene segmenter (rotated views)",
        ),
    },
    "show": {
        **_MODEL_FILE_OPTIONS,
        "device": ("model", _WITH_A_MODEL),
        "estimate_normals": ("model+pred:model", f"{_WITH_A_MODEL} that labels the cloud ({_NOT_PRED})"),
        "up_axis": ("model", f"{_WITH_A_MODEL}, which is fed the cloud z up"),
        "labels": (
            "model:part-segmenter|model:scene-segmenter",
            "with a segmentation model (the ground truth drawn beside its prediction)",
        ),
        "hide": ("model:scene-segmenter", "with a scene segmenter (the points of a predicted class are left out)"),
        "pred": ("model:scene-segmenter", "with a scene segmenter (whose classes name the labels)"),
        "votes": (
            f"model:classifier|{_SCENE_RUN}",
            f"by a classifier (subsets) and a scene segmenter labelling the scan (rotated views; {_NOT_PRED})",
        ),
        "max_fragments": (_SCENE_RUN, f"by a scene segmenter labelling the scan (its fragments; {_NOT_PRED})"),
        "no_progress": (_SCENE_RUN, f"while a scene segmenter labels the scan ({_NOT_PRED})"),
        "layers": ("", ""),
        "grid_color": ("layers:grid", "for the grid layer (--layers grid)"),
        "grid_nodes": ("layers:grid", "for the grid layer (--layers grid)"),
        "resolution": (
            "model:none+layers:grid|model:none+layers:edges",
            "without a model, for the grid and edges layers (a model draws its own grid)",
        ),
        "k": (
            "model:none+layers:grid|model:none+layers:edges",
            "without a model, for the grid and edges layers (a model draws its own edges)",
        ),
        "edge_nodes": ("layers:edges", "for the edges layer (--layers edges)"),
        "edge_node_ids": ("layers:edges", "for the edges layer (--layers edges)"),
        "max_edges": ("layers:edges", "for the edges layer (--layers edges)"),
        **{key: ("", "") for key in ("width", "height", "point_size", "view", "up", "azimuth", "elevation")},
    },
    "export": {
        key: ("", "")
        for key in (
            "model",
            "ckpt",
            "shipped",
            "format",
            "out",
            "num_points",
            "batch",
            "no_verify",
            "up_axis",
            "threads",
        )
    },
    "download": {
        "name": ("download:by-name", "to fetch one archive (not with --config or --list)"),
        "config": ("download:by-config", "to fetch the archives of a config (not with --list)"),
        "root": ("download:fetch|download:instructions", "to fetch or explain an archive (not with --list)"),
        "list": ("", ""),
        "instructions": ("download:by-name|download:by-config", "for an archive or a config (not with --list)"),
        "no_progress": ("download:fetch", "while an archive is fetched (not with --list or --instructions)"),
    },
    "convert": {
        **{key: ("", "") for key in ("root", "layout", "out", "splits", "overwrite", "quiet")},
        "test_area": ("layout:s3dis|layout:mmdet3d_s3dis", "for --layout s3dis / mmdet3d_s3dis"),
        "sequences": ("layout:semantickitti", "for --layout semantickitti"),
        "classes": ("layout:s3dis", "for --layout s3dis (the other layouts' classes are their own)"),
        "unknown": ("layout:s3dis", "for --layout s3dis"),
    },
    "list": {"what": ("", "")},
    "train": {
        **{
            key: ("", "")
            for key in (
                "config",
                "overrides",
                "output_dir",
                "data_root",
                "accelerator",
                "devices",
                "strategy",
                "precision",
                "max_epochs",
                "print_config",
            )
        },  # fmt: skip
        "resume": ("train:run", "when a run trains (not with --print-config)"),
        "overwrite": ("train:run", "when a run trains (not with --print-config)"),
    },
    "evaluate": {
        "ckpt": ("", ""),
        "model": ("evaluate:scan", "with --scan"),
        "scan": ("", ""),
        "labels": ("evaluate:scan", "with --scan"),
        **{
            key: ("evaluate:split", _ON_A_SPLIT)
            for key in ("config", "data_root", "overrides", "split", "batch_size", "num_workers", "precision")
        },
        **{key: ("", "") for key in ("device", "threads", "output")},
        "pred": ("evaluate:scan", "with --scan"),
        "no_progress": (
            f"evaluate:split|{_SCENE_RUN}",
            f"{_ON_A_SPLIT} and while a scene segmenter labels the scans ({_NOT_PRED})",
        ),
        "votes": (
            f"evaluate:split|{_SCENE_RUN}",
            f"{_ON_A_SPLIT}, and with --scan by a scene segmenter labelling the scans (rotated views; {_NOT_PRED})",
        ),
        "voxel_size": ("evaluate:split+model:scene-segmenter", _SCENE_SPLIT),
        "max_points": ("evaluate:split+model:scene-segmenter", _SCENE_SPLIT),
        "max_fragments": (
            _SCENE_RUN,
            f"by a scene segmenter labelling the scans (which it covers with fragments; {_NOT_PRED})",
        ),
    },
    "bench": {
        **{
            key: ("", "")
            for key in (
                "models",
                "num_points",
                "k",
                "batch_size",
                "repeats",
                "rel_ci",
                "warmup",
                "time_budget",
                "max_points_per_batch",
                "threads",
                "device",
                "train_step",
                "precision",
                "reference",
                "flops",
                "isolation",
                "matmul_size",
                "malloc",
                "plots",
                "out",
                "seed",
                "quick",
                "recipe",
                "scenes",
                "_worker",
            )
        },  # fmt: skip
        "k_num_points": ("bench:k-sweep", "for the k sweep (--k with values)"),
    },
    "bench --recipe": {
        key: ("", "")
        for key in (
            "recipe",
            "data_root",
            "override",
            "steps",
            "warmup",
            "rel_ci",
            "infer_steps",
            "synthetic_steps",
            "models",
            "threads",
            "device",
            "isolation",
            "out",
            "_worker",
        )
    },  # fmt: skip
    "bench --scenes": {
        **{key: ("", "") for key in ("scenes", "parts", "threads", "memory_limit_gb", "data_root", "out", "quick")},
        **{
            key: ("bench:sweep", _SWEEP)
            for key in ("num_points", "models", "repeats", "rel_ci", "time_budget", "max_step_seconds", "device")
        },
        "source": ("bench:sweep|bench:e2e", "for the N sweep and the end-to-end part (--parts sweep / e2e)"),
        "max_scene_seconds": (
            "bench:scans|bench:e2e",
            "for the real scans and the end-to-end part (--parts scans / e2e)",
        ),
        "ckpt": ("bench:e2e", _E2E),
        "e2e_batch_size": ("bench:e2e", _E2E),
    },
}
#: the model kinds of the table's facts (a route's ``maybe`` before the model is loaded); a loaded model's is
#: ``"model:" + gridify.tasks.get_task(task).model_kind``
MODEL_KINDS = ("model:classifier", "model:part-segmenter", "model:scene-segmenter")


def file_facts(path: str) -> Dict[str, Optional[str]]:
    """The facts of a cloud file for :data:`OPTION_USE`: what its reader takes (by the extension, without
    PyTorch: :data:`gridify._clinames.COLUMN_EXTENSIONS` / ``SAMPLED_EXTENSIONS``)."""
    from ._clinames import COLUMN_EXTENSIONS, SAMPLED_EXTENSIONS

    suffix = Path(path).suffix.lower()
    facts: Dict[str, Optional[str]] = {"file": f"a {suffix} file" if suffix else "a file without an extension"}
    if suffix in COLUMN_EXTENSIONS:
        facts["file:columns"] = None
    if suffix in SAMPLED_EXTENSIONS:
        facts["file:mesh"] = None
    return facts


def check_route(
    prog: str,
    command: str,
    given: Dict[str, str],
    facts: Dict[str, Optional[str]],
    maybe: Sequence[str] = (),
) -> None:
    """:func:`gridify._cliargs.check_options` of ``command``'s row of :data:`OPTION_USE`."""
    types.check_options(prog, OPTION_USE[command], given, facts, maybe)


def check_command_route(args: argparse.Namespace, facts: Dict[str, Optional[str]], maybe: Sequence[str] = ()) -> None:
    """:func:`check_route` of a parsed ``gridify`` sub-command: the row of ``args.command``, the arguments typed
    (``args.given_options``, set by :func:`gridify.cli.main`); ``maybe``: facts not known yet."""
    check_route(f"gridify {args.command}", args.command, getattr(args, "given_options", {}), facts, maybe)


def route_reads(args: argparse.Namespace, dest: str, facts: Mapping[str, Optional[str]]) -> bool:
    """Whether the route of ``facts`` reads the argument ``dest`` of ``args.command`` (:data:`OPTION_USE`): what a
    flag is for decides where the command uses it, not the model's task."""
    return types.option_read(OPTION_USE[args.command][dest][0], facts)


def pred_facts(args: argparse.Namespace) -> Dict[str, Optional[str]]:
    """``pred:file`` (``--pred`` gives the labels) or ``pred:model`` (the model labels the scan) of a ``show`` or
    ``evaluate`` call."""
    return {"pred:file": "--pred"} if getattr(args, "pred", None) is not None else {"pred:model": None}


def evaluate_facts(args: argparse.Namespace, scan: Optional[bool] = None) -> Dict[str, Optional[str]]:
    """The facts of an ``evaluate`` call its arguments tell: ``evaluate:scan`` / ``evaluate:split`` (``scan``, else
    whether ``--scan`` was given) and :func:`pred_facts`."""
    scan = getattr(args, "scan", None) is not None if scan is None else scan
    facts: Dict[str, Optional[str]] = {"evaluate:scan": "--scan"} if scan else {"evaluate:split": "a dataset split"}
    return {**facts, **pred_facts(args)}


def light_route(command: str, args: argparse.Namespace) -> Tuple[Dict[str, Optional[str]], Sequence[str]]:
    """``(facts, maybe)`` of a ``train`` / ``evaluate`` / ``bench`` / ``bench --scenes`` call as far as its arguments
    tell, before anything heavy loads (``evaluate``'s model kind is a ``maybe`` until the checkpoint is read)."""
    if command == "train":
        return ({"train:print-config": "--print-config"} if args.print_config else {"train:run": None}), ()
    if command == "evaluate":
        return evaluate_facts(args), MODEL_KINDS
    if command == "bench":
        return ({"bench:no-k-sweep": "--k without values"} if args.k == [] else {"bench:k-sweep": None}), ()
    if command == "bench --scenes":  # the parts run (named once in a refusal)
        words = [f"--parts {' '.join(args.parts)}"] + [None] * len(args.parts)
        return {f"bench:{part}": w for part, w in zip(args.parts, words)}, ()
    return {}, ()
