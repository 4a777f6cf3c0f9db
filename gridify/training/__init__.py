"""Train and test a gridified network from a YAML config, with PyTorch Lightning.

    gridify train --config procedural                        # a config shipped in gridify/configs, by name
    gridify train --config procedural model.resolution=7 trainer.max_epochs=2
    gridify train --config folder_classification --data-root my_data   # your own folders
    python -m gridify.training --config procedural --resume auto    # continue last.ckpt
    python scripts/train.py --config configs/procedural.yaml       # paths work too

Everything a run produces goes to ``output_dir``::

    config.yaml            the resolved config (defaults + file + overrides + filled model kwargs)
    run_info.json          gridify version, dataset source format, parameter count, sizes, command
    checkpoints/last.ckpt  latest state (weights, optimizer, scheduler, loops) for --resume
    checkpoints/best-epochNNN.ckpt  best epoch by the validation metric (NNN: the epoch, counted from 1 as the
                           log counts it, everywhere: gridify.training.epochs)
    checkpoints/model.pt   plain export of the tested weights (loads with weights_only=True)
    test_metrics.json      test metrics (OA/mAcc or instance/class mIoU, IoU per category by name), the subset
                           scored when trainer.limit_test_batches chose one
    csv/version_*/metrics.csv, tensorboard/version_*/   logs (TensorBoard: curves, the test confusion
                           matrix, hparams/ with the hyper-parameters and the test metrics)
    csv/train_steps.csv    every training step's loss and learning rate (the plots' per-step curves)
    plots/loss.png, plots/metrics.png, plots/confusion_matrix.png (classification); an interrupted or
                           failed run writes its curves too

Every file gets the mode ``0666 & ~umask``. A run says what it does from its start (reading the data, the
sanity check, the plan of the training) and never stays silent for more than half a minute; in a terminal,
progress bars; without one, a line at the first step, then every ``trainer.log_every_n_steps`` steps or 20 s,
and one per epoch.

The package, one concern per module:

    schema      every config key's declared type, range and default (the check, the key listing, docs/config_keys.md),
                re-exported from: specs (the value specs, ConfigError), config_keys (the declared keys),
                config_errors (the section checks, errors in the config's words), config_docs (listing, docs)
    config      shipped configs by name, _base_ inheritance, overrides, validation (ConfigError)
    data        datasets, augmentations, samplers and loaders, the model from the config
    schedule    steps per epoch and the warm-up + cosine learning-rate factor
    ema         the exponential moving average of the weights (optim.ema_decay)
    metrics     forward pass, metrics, a plain evaluation loop
    plots       loss/metric curves and the confusion matrix (matplotlib)
    report      the files a run writes about itself
    module      the Lightning modules (PointCloudTask, PointCloudData)
    epochs      the one numbering of epochs (from 1) of the log, file names, reports, logs and plots
    progress    the console: the run's voice (never a silent minute), lines or progress bars
    callbacks   checkpoints, atomic checkpoint I/O, loggers, StopAfterEpochs, TrainingClock, StepCurves
    runner      run(): one run, step by step
    cli         the command line (main)

``import gridify`` never imports this package, and importing it (or its config, data, schedule,
metrics, plots, report and cli modules) does not import Lightning or torchmetrics: the Lightning-dependent
names (:class:`PointCloudTask`, :func:`run`, :func:`atomic_checkpoint_io`, ...) and the metric classes
re-exported from :mod:`gridify.metrics` are loaded on first access. ``scripts/train.py`` is a thin wrapper
around :func:`main`.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List

# names the former single-module gridify.training imported from the library, still importable from here
from gridify.checkpoint import CheckpointError, atomic_torch_save, export_model, load_checkpoint, plain  # noqa: F401
from gridify.datasets import (  # noqa: F401
    DatasetNotFoundError,  # noqa: F401
    DownloadError,  # noqa: F401
    ModelNet,  # noqa: F401
    ProceduralShapes,  # noqa: F401
    ShapeNetPart,  # noqa: F401
    collate_points,  # noqa: F401
)
from gridify.models import build_model  # noqa: F401
from gridify.transforms import FixedPoints, RandomJitter, RandomRotate, RandomRotateZ, RandomScale  # noqa: F401

from .cli import build_parser, config_from_args, error_line, main, program_name
from .config import (
    AUGMENTATIONS,
    BASE_KEY,
    CLOSED_SECTIONS,
    CONFIG_DIR,
    DATA_LOADER_KEYS,
    DATASET_ALIASES,
    DATASETS,
    DEFAULTS,
    PRIMARY_METRIC,
    SECTIONS,
    TASKS,
    ConfigError,
    apply_override,
    check_config,
    dataset_names,
    deep_merge,
    find_config,
    load_config_file,
    load_yaml,
    parse_augmentations,
    parse_override,
    resolve_config,
    shipped_configs,
    yaml_value,
)
from .data import (
    REPO_ROOT,
    EpochAugment,
    EpochDataLoader,
    ShardSampler,
    build_dataset,
    config_archives,
    dataset_info,
    dataset_kwargs,
    eval_subset,
    fill_model_kwargs,
    fit_box,
    inference_info,
    make_model,
    resolve_root,
    set_train_epoch,
)
from .metrics import compute_metrics, evaluate_model, format_metrics, forward_batch, make_metrics, update_metrics
from .plots import confusion_figure, metrics_figure, plot_confusion, plot_curves, read_metric_logs, read_steps
from .schedule import steps_per_epoch, warmup_cosine, world_size_guess

#: Lightning- or torchmetrics-dependent names -> the module defining them (a bare name: a submodule of this
#: package), imported on first access (PEP 562)
_LAZY: Dict[str, str] = {
    "PointCloudTask": "module",
    "PointCloudData": "module",
    "lightning_classes": "module",
    "StopAfterEpochs": "callbacks",
    "TrainingClock": "callbacks",
    "AtomicCheckpointIO": "callbacks",
    "atomic_checkpoint_io": "callbacks",
    "checkpoint_callbacks": "callbacks",
    "make_loggers": "callbacks",
    "LineProgress": "callbacks",
    "StepCurves": "callbacks",
    "RunVoice": "progress",
    "run": "runner",
    # torchmetrics (and the scipy it imports, about 3 s): only when a metric object is asked for, so that
    # `gridify list keys` and the config checks start fast
    "MeanClassAccuracy": "gridify.metrics",
    "OverallAccuracy": "gridify.metrics",
    "ShapeNetPartIoU": "gridify.metrics",
}

__all__ = [
    "AUGMENTATIONS",
    "BASE_KEY",
    "CLOSED_SECTIONS",
    "CONFIG_DIR",
    "DATA_LOADER_KEYS",
    "DATASET_ALIASES",
    "DATASETS",
    "DEFAULTS",
    "PRIMARY_METRIC",
    "SECTIONS",
    "TASKS",
    "ConfigError",
    "apply_override",
    "check_config",
    "dataset_names",
    "deep_merge",
    "find_config",
    "load_config_file",
    "load_yaml",
    "parse_augmentations",
    "parse_override",
    "resolve_config",
    "shipped_configs",
    "yaml_value",
    "REPO_ROOT",
    "EpochAugment",
    "EpochDataLoader",
    "ShardSampler",
    "build_dataset",
    "config_archives",
    "dataset_info",
    "dataset_kwargs",
    "eval_subset",
    "fill_model_kwargs",
    "fit_box",
    "inference_info",
    "make_model",
    "resolve_root",
    "set_train_epoch",
    "steps_per_epoch",
    "warmup_cosine",
    "world_size_guess",
    "compute_metrics",
    "evaluate_model",
    "format_metrics",
    "forward_batch",
    "make_metrics",
    "update_metrics",
    "confusion_figure",
    "metrics_figure",
    "plot_confusion",
    "plot_curves",
    "read_metric_logs",
    "read_steps",
    "build_parser",
    "config_from_args",
    "error_line",
    "main",
    "program_name",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = _LAZY[name]
        value = getattr(importlib.import_module(module if "." in module else f".{module}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))
