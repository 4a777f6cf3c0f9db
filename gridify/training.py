"""Train and test a gridified network from a YAML config, with PyTorch Lightning.

    python scripts/train.py --config configs/procedural.yaml
    python scripts/train.py --config configs/procedural.yaml model.resolution=7 trainer.max_epochs=2
    python scripts/train.py --config configs/modelnet10.yaml --accelerator gpu --precision bf16-mixed
    python scripts/train.py --config configs/procedural.yaml --devices 2 --strategy ddp --accelerator cpu
    torchrun --nproc_per_node 2 scripts/train.py --config configs/procedural.yaml
    python scripts/train.py --config configs/procedural.yaml --resume auto      # continue last.ckpt

Positional ``section.key=value`` arguments override the config; values are parsed as YAML
(``trainer.max_epochs=2``, ``data.augmentations=[rotate_z]``, ``optim.lr=1e-3``).

Everything a run produces goes to ``output_dir``::

    config.yaml            the resolved config (defaults + file + overrides + filled model kwargs)
    run_info.json          gridify version, dataset source format, parameter count, sizes, command
    checkpoints/last.ckpt  latest state (weights, optimizer, scheduler, loops) for --resume
    checkpoints/best-*.ckpt  best epoch by the validation metric
    checkpoints/model.pt   plain export of the tested weights (loads with weights_only=True)
    test_metrics.json      test metrics (OA/mAcc or instance/class mIoU)
    csv/version_*/metrics.csv, tensorboard/version_*/   logs
    plots/loss.png, plots/metrics.png, plots/confusion_matrix.png (classification)

Lightning and matplotlib are used here (and by the CLI) only: ``import gridify`` never imports
this module.  ``scripts/train.py`` is a thin wrapper around :func:`main`.
"""
from __future__ import annotations

import argparse
import copy
import csv
import functools
import json
import math
import os
import re
import shutil
import sys
import time
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import yaml
from torch.utils.data import DataLoader, Sampler

import gridify
from gridify.checkpoint import CheckpointError, atomic_torch_save, export_model, load_checkpoint, plain  # noqa: F401
from gridify.datasets import (DatasetNotFoundError, DownloadError, ModelNet, ProceduralShapes, ShapeNetPart,
                              collate_points)
from gridify.metrics import MeanClassAccuracy, OverallAccuracy, ShapeNetPartIoU
from gridify.models import build_model
from gridify.transforms import FixedPoints, RandomJitter, RandomRotate, RandomRotateZ, RandomScale

REPO_ROOT = Path(__file__).resolve().parents[1]


# ======================================================================================
# configuration
# ======================================================================================
class ConfigError(ValueError):
    """A problem with the config file or a command-line override."""


#: the defaults every config starts from; files and overrides are merged on top
DEFAULTS: Dict[str, Any] = {
    "seed": 0,
    "task": "classification",
    "output_dir": "outputs/run",
    "data": {
        "name": "procedural",
        "batch_size": 16,
        "eval_batch_size": None,
        "num_workers": 0,
        "drop_last": False,
        "augmentations": [],
        "train": {},
        "val": {},
        "test": {},
    },
    "model": {"name": "gridified_classifier"},
    "optim": {
        "lr": 1e-3,
        "weight_decay": 0.0,
        "betas": [0.9, 0.999],
        "warmup_epochs": 0,
        "min_lr": 0.0,
        "kernel_l2": 0.0,
    },
    "trainer": {
        "max_epochs": 10,
        "max_steps": -1,
        "accelerator": "auto",
        "devices": 1,
        "num_nodes": 1,
        "strategy": "auto",
        "precision": "32-true",
        "log_every_n_steps": 10,
        "limit_train_batches": None,
        "limit_val_batches": None,
        "limit_test_batches": None,
        "check_val_every_n_epoch": 1,
        "num_sanity_val_steps": 0,
        "gradient_clip_val": None,
        "accumulate_grad_batches": 1,
        "deterministic": False,
        "progress_bar": True,
        "num_threads": None,
        "checkpoint": {"every_n_epochs": 1, "every_n_train_steps": None, "keep_all": False},
        "test_ckpt": "best",
        "stop_after_epochs": None,
        "plots": True,
    },
}

SECTIONS = tuple(DEFAULTS)
TASKS = ("classification", "segmentation")
DATASETS = ("procedural", "modelnet", "modelnet10", "modelnet40", "shapenet")
#: keys of ``data`` that configure loading rather than the dataset constructor
DATA_LOADER_KEYS = ("name", "batch_size", "eval_batch_size", "num_workers", "drop_last", "augmentations",
                    "train", "val", "test")
#: sections whose keys are checked against the defaults (the others are free-form kwargs)
CLOSED_SECTIONS = ("optim", "trainer")
PRIMARY_METRIC = {"classification": "oa", "segmentation": "instance_miou"}


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also reads ``1e-3`` (no dot) as a float, as people write it."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def yaml_value(text: str) -> Any:
    """Parse one scalar/list/dict written in YAML (the value side of an override)."""
    return yaml.load(text, Loader=_Loader)


def load_yaml(path: os.PathLike | str) -> Dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.load(path.read_text(), Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def deep_merge(base: Dict[str, Any], update: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of ``base`` with ``update`` merged in (nested mappings merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> Tuple[List[str], Any]:
    """``"model.resolution=13"`` -> ``(["model", "resolution"], 13)``."""
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError(f"malformed override {text!r}: expected section.key=value (e.g. trainer.max_epochs=2)")
    key, raw = text.split("=", 1)
    key = key.strip()
    parts = key.split(".")
    if not key or any(not p or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", p) for p in parts):
        raise ConfigError(f"malformed override {text!r}: the key {key!r} must be dot-separated names "
                          f"(e.g. model.resolution=13)")
    try:
        value = yaml_value(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"malformed override {text!r}: the value is not valid YAML ({exc})") from None
    return parts, value


def apply_override(cfg: Dict[str, Any], text: str) -> None:
    parts, value = parse_override(text)
    if parts[0] not in SECTIONS:
        raise ConfigError(f"override {text!r}: unknown section {parts[0]!r}; known sections: {', '.join(SECTIONS)}")
    node = cfg
    for i, p in enumerate(parts[:-1]):
        child = node.get(p)
        if child is None:
            child = node[p] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise ConfigError(f"override {text!r}: {where} is a {type(child).__name__} ({child!r}), not a section")
        node = child
    node[parts[-1]] = value


def _check_keys(section: str, given: Dict[str, Any], known: Dict[str, Any]) -> None:
    for key, value in given.items():
        if key not in known:
            raise ConfigError(f"unknown key {section}.{key}; known keys of {section}: {', '.join(sorted(known))}")
        if isinstance(known[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{section}.{key} must be a mapping, got {value!r}")
            _check_keys(f"{section}.{key}", value, known[key])


def _positive_int(name: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def check_config(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """Validate a merged config; raises :class:`ConfigError` naming the offending key."""
    unknown = [k for k in cfg if k not in SECTIONS]
    if unknown:
        raise ConfigError(f"unknown config section(s) {unknown}; known sections: {', '.join(SECTIONS)}")
    for sec in ("data", "model", "optim", "trainer"):
        if not isinstance(cfg.get(sec), dict):
            raise ConfigError(f"config section {sec!r} must be a mapping, got {cfg.get(sec)!r}")
    for sec in CLOSED_SECTIONS:
        _check_keys(sec, cfg[sec], DEFAULTS[sec])
    if cfg["task"] not in TASKS:
        raise ConfigError(f"task must be one of {list(TASKS)}, got {cfg['task']!r}")
    if isinstance(cfg["seed"], bool) or not isinstance(cfg["seed"], int):
        raise ConfigError(f"seed must be an integer, got {cfg['seed']!r}")
    if not isinstance(cfg["output_dir"], str) or not cfg["output_dir"]:
        raise ConfigError(f"output_dir must be a non-empty path, got {cfg['output_dir']!r}")
    data = cfg["data"]
    if data.get("name") not in DATASETS:
        raise ConfigError(f"data.name must be one of {list(DATASETS)}, got {data.get('name')!r}")
    _positive_int("data.batch_size", data.get("batch_size"))
    _positive_int("data.eval_batch_size", data.get("eval_batch_size"), allow_none=True)
    nw = data.get("num_workers")
    if isinstance(nw, bool) or not isinstance(nw, int) or nw < 0:
        raise ConfigError(f"data.num_workers must be a non-negative integer, got {nw!r}")
    for split in ("train", "val", "test"):
        if not isinstance(data.get(split) or {}, dict):
            raise ConfigError(f"data.{split} must be a mapping of per-split dataset arguments, got {data.get(split)!r}")
    parse_augmentations(data.get("augmentations"))
    if not isinstance(cfg["model"].get("name"), str):
        raise ConfigError("model.name must name a registered model (e.g. gridified_classifier)")
    optim = cfg["optim"]
    for key in ("lr", "weight_decay", "warmup_epochs", "min_lr", "kernel_l2"):
        v = optim[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ConfigError(f"optim.{key} must be a non-negative number, got {v!r}")
    if optim["lr"] <= 0:
        raise ConfigError(f"optim.lr must be positive, got {optim['lr']!r}")
    tr = cfg["trainer"]
    if tr["test_ckpt"] not in ("best", "last"):
        raise ConfigError(f"trainer.test_ckpt must be 'best' or 'last', got {tr['test_ckpt']!r}")
    _positive_int("trainer.max_epochs", tr["max_epochs"])
    _positive_int("trainer.stop_after_epochs", tr["stop_after_epochs"], allow_none=True)
    _positive_int("trainer.num_threads", tr["num_threads"], allow_none=True)
    ck = tr["checkpoint"]
    for key in ("every_n_epochs", "every_n_train_steps"):
        v = ck.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ConfigError(f"trainer.checkpoint.{key} must be a non-negative integer or null, got {v!r}")
    return cfg


def resolve_config(config_path: Optional[str], overrides: Sequence[str] = (),
                   base: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Defaults (or ``base``) <- config file <- overrides, validated."""
    cfg = copy.deepcopy(DEFAULTS if base is None else base)
    if config_path:
        file_cfg = load_yaml(config_path)
        unknown = [k for k in file_cfg if k not in SECTIONS]
        if unknown:
            raise ConfigError(f"{config_path}: unknown config section(s) {unknown}; known sections: "
                              f"{', '.join(SECTIONS)}")
        cfg = deep_merge(cfg, file_cfg)
    for text in overrides:
        apply_override(cfg, text)
    return check_config(cfg)


# ======================================================================================
# data
# ======================================================================================
AUGMENTATIONS: Dict[str, Callable[..., Any]] = {
    "rotate_z": RandomRotateZ, "rotate": RandomRotate, "scale": RandomScale, "jitter": RandomJitter}


def parse_augmentations(specs: Any) -> List[Tuple[str, Dict[str, Any]]]:
    """``[rotate_z, {name: scale, low: 0.8}]`` -> ``[("rotate_z", {}), ("scale", {"low": 0.8})]``."""
    if specs is None:
        return []
    if not isinstance(specs, list):
        raise ConfigError(f"data.augmentations must be a list, got {specs!r}")
    out = []
    for spec in specs:
        if isinstance(spec, str):
            name, kwargs = spec, {}
        elif isinstance(spec, dict) and isinstance(spec.get("name"), str):
            kwargs = {k: v for k, v in spec.items() if k != "name"}
            name = spec["name"]
        else:
            raise ConfigError(f"data.augmentations: each entry is a name or a mapping with 'name', got {spec!r}")
        if name not in AUGMENTATIONS:
            raise ConfigError(f"data.augmentations: unknown augmentation {name!r}; known: {', '.join(AUGMENTATIONS)}")
        if "seed" in kwargs or "generator" in kwargs:
            raise ConfigError(f"data.augmentations: {name}: seeds come from the run's seed; remove 'seed'/'generator'")
        try:
            AUGMENTATIONS[name](**kwargs)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"data.augmentations: {name}: {exc}") from None
        out.append((name, kwargs))
    return out


def fit_box(sample: Dict[str, Any], limit: float = 1.0) -> Dict[str, Any]:
    """Shrink the cloud uniformly into ``[-limit, limit]^3`` when it sticks out (else unchanged).

    Gridification rejects points outside its box and the gridified models do not expose its
    ``outside``/``bounds`` options, so scaled-up or jittered training clouds are pulled back in.
    A uniform scale leaves normals unchanged.
    """
    pos = sample["pos"]
    extent = float(pos.abs().max()) if isinstance(pos, torch.Tensor) else float(np.abs(pos).max())
    if extent <= limit:
        return sample
    out = dict(sample)
    out["pos"] = pos * (limit / extent)
    return out


class EpochAugment:
    """Training augmentations whose randomness depends only on (seed, epoch, sample content).

    Every call builds the transforms around a generator seeded from the run seed, the epoch and
    a checksum of the points, so a resumed run, another worker count or another access order
    sees exactly the same augmented samples.
    """

    def __init__(self, specs: List[Tuple[str, Dict[str, Any]]], seed: int) -> None:
        self.specs, self.seed, self.epoch = specs, int(seed), 0

    def __call__(self, sample: Dict[str, Any]) -> Dict[str, Any]:
        pos = sample["pos"]
        buf = (pos.detach().cpu().numpy() if isinstance(pos, torch.Tensor) else np.ascontiguousarray(pos)).tobytes()
        rng = np.random.default_rng([self.seed, self.epoch, zlib.crc32(buf)])
        for name, kwargs in self.specs:
            sample = AUGMENTATIONS[name](**kwargs, generator=rng)(sample)
        return fit_box(sample)

    def __repr__(self) -> str:
        return f"EpochAugment({[n for n, _ in self.specs]}, seed={self.seed})"


def resolve_root(root: Any) -> Any:
    """Relative data roots are taken from the working directory, else from the repository root."""
    if root is None:
        return None
    p = Path(str(root)).expanduser()
    if p.is_absolute() or p.exists():
        return str(p)
    alt = REPO_ROOT / p
    return str(alt) if alt.exists() else str(p)


def dataset_kwargs(cfg: Dict[str, Any], split: str) -> Tuple[str, Dict[str, Any]]:
    """The dataset name and its constructor arguments for ``split`` (train/val/test)."""
    data = cfg["data"]
    kwargs = {k: v for k, v in data.items() if k not in DATA_LOADER_KEYS}
    kwargs.update(data.get(split) or {})
    kwargs.setdefault("split", split)
    kwargs.setdefault("seed", cfg["seed"])
    name = data["name"]
    if name == "procedural":
        kwargs.setdefault("task", cfg["task"])
    if name.startswith("modelnet"):
        # ModelNet's own ``name`` ("10"/"40") is spelled data.version here (data.name is the dataset)
        version = kwargs.pop("version", None)
        if name != "modelnet":
            if version is not None and str(version) != name[8:]:
                raise ConfigError(f"data.name={name} but data.version={version!r}")
            version = name[8:]
        kwargs["name"] = str(version if version is not None else "40")
        name = "modelnet"
    if "root" in kwargs:
        kwargs["root"] = resolve_root(kwargs["root"])
    return name, kwargs


def build_dataset(cfg: Dict[str, Any], split: str, augment: Optional[EpochAugment] = None):
    name, kwargs = dataset_kwargs(cfg, split)
    if augment is not None:
        kwargs["transform"] = augment
    cls = {"procedural": ProceduralShapes, "modelnet": ModelNet, "shapenet": ShapeNetPart}[name]
    if name == "shapenet" and cfg["task"] != "segmentation":
        raise ConfigError("data.name=shapenet is a segmentation dataset; set task: segmentation")
    if name == "modelnet" and cfg["task"] != "classification":
        raise ConfigError("data.name=modelnet is a classification dataset; set task: classification")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"data ({name}, split {split!r}): bad dataset arguments {sorted(kwargs)}: {exc}") from None


def dataset_info(ds: Any, task: str) -> Dict[str, Any]:
    """What the model and the metrics need to know about a dataset (plain Python values)."""
    first = ds[0]
    info: Dict[str, Any] = {
        "in_channels": int(first["x"].shape[-1]),
        "source_format": str(getattr(ds, "source_format", type(ds).__name__)),
    }
    if task == "classification":
        names = [str(c) for c in ds.class_names]
        info.update(num_outputs=len(names), class_names=names)
    else:
        parts = [list(map(int, p)) for p in ds.category_to_parts]
        cat_names = [str(c) for c in (getattr(ds, "category_names", None) or getattr(ds, "class_names"))]
        num_parts = int(getattr(ds, "num_parts", max(max(p) for p in parts) + 1))
        part_names = getattr(ds, "part_names", None)
        part_names = [str(p) for p in part_names] if part_names is not None else [f"part{i}" for i in range(num_parts)]
        info.update(num_outputs=num_parts, class_names=part_names, category_names=cat_names,
                    category_to_parts=parts, num_categories=len(parts))
    return info


def fill_model_kwargs(cfg: Dict[str, Any], info: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """Model name and constructor kwargs, with in_channels/num_classes/num_categories from the data."""
    kwargs = {k: v for k, v in cfg["model"].items() if k != "name"}
    kwargs.setdefault("in_channels", info["in_channels"])
    kwargs.setdefault("num_classes", info["num_outputs"])
    if cfg["task"] == "segmentation":
        kwargs.setdefault("num_categories", info["num_categories"])
    return cfg["model"]["name"], kwargs


def full_precision_flexconvs(model: torch.nn.Module) -> int:
    """Run every SepFlexConv3d of ``model`` in float32 with autocast off (mixed-precision workaround).

    Under ``torch.autocast`` the grid tensors reach SepFlexConv3d in bf16/fp16 while it generates
    its kernel in float32, and the layer rejects the mismatch. Until the library handles
    autocast itself, those layers (only them) run in full precision; their outputs go back into
    the autocast region. Returns the number of wrapped layers.
    """
    from gridify.nn.flexconv import SepFlexConv3d

    count = 0
    for module in model.modules():
        if isinstance(module, SepFlexConv3d) and not getattr(module, "_fp32_wrapped", False):
            inner = module.forward

            def forward(x: torch.Tensor, _inner: Callable[..., torch.Tensor] = inner) -> torch.Tensor:
                with torch.autocast(device_type=x.device.type, enabled=False):
                    return _inner(x.float())

            module.forward = forward
            module._fp32_wrapped = True
            count += 1
    return count


def make_model(name: str, kwargs: Dict[str, Any]) -> torch.nn.Module:
    try:
        return build_model(name, **kwargs)
    except KeyError as exc:
        raise ConfigError(f"model.name: {exc.args[0] if exc.args else exc}") from None
    except TypeError as exc:
        raise ConfigError(f"model {name!r}: bad arguments ({exc})") from None


class ShardSampler(Sampler):
    """Indices of one process's share of a dataset; the order depends only on (seed, epoch).

    ``shuffle``: a new permutation per epoch. ``pad``: repeat indices so every rank gets the
    same count (needed for training under DDP); evaluation uses ``pad=False`` so every sample
    is scored exactly once.
    """

    def __init__(self, size: int, *, shuffle: bool, seed: int = 0, rank: int = 0, world_size: int = 1,
                 pad: bool = False) -> None:
        self.size, self.shuffle, self.seed = int(size), bool(shuffle), int(seed)
        self.rank, self.world_size, self.pad = int(rank), int(world_size), bool(pad)
        self.epoch = 0
        self._skip = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def skip_next(self, count: int) -> None:
        """Make the next iteration (only) start after the first ``count`` indices of this epoch's order.

        Used to resume mid-epoch: the remaining indices are exactly those an uninterrupted run
        would still draw. ``len()`` is unchanged (Lightning counts the skipped batches as done).
        """
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"ShardSampler.skip_next: count must be a non-negative integer, got {count!r}")
        self._skip = count

    def _order(self) -> List[int]:
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(self.size, generator=g).tolist()
        else:
            order = list(range(self.size))
        if self.pad and self.world_size > 1 and self.size % self.world_size:
            total = math.ceil(self.size / self.world_size) * self.world_size
            order = (order * math.ceil(total / max(self.size, 1)))[:total]
        return order[self.rank::self.world_size]

    def __iter__(self):
        skip, self._skip = self._skip, 0
        return iter(self._order()[skip:])

    def __len__(self) -> int:
        if self.pad:
            return math.ceil(self.size / self.world_size)
        return len(range(self.rank, self.size, self.world_size))


class EpochDataLoader(DataLoader):
    """A DataLoader that sets the epoch of its sampler and augmentations when it is iterated.

    Lightning may create a train iterator before it calls ``sampler.set_epoch`` (first epoch,
    and right after resuming), so the epoch is read from ``epoch_fn`` here, before any worker
    starts or any index is drawn.

    It is also resumable mid-epoch (Lightning's ``state_dict``/``load_state_dict`` protocol for
    dataloaders): :meth:`state_dict` records ``(epoch, batches consumed)`` with the consumed
    count read from ``progress_fn``; after :meth:`load_state_dict`, the next iteration of that
    same epoch skips the consumed batches (through :meth:`ShardSampler.skip_next`), so a run
    resumed from a mid-epoch checkpoint sees exactly the batches an uninterrupted run would.
    """

    def __init__(self, *args: Any, epoch_fn: Optional[Callable[[], int]] = None,
                 on_epoch: Optional[Callable[[int], None]] = None,
                 progress_fn: Optional[Callable[[], int]] = None, **kwargs: Any) -> None:
        self.epoch_fn, self.on_epoch, self.progress_fn = epoch_fn, on_epoch, progress_fn
        self._resume_at: Optional[Tuple[int, int]] = None
        super().__init__(*args, **kwargs)

    def state_dict(self) -> Dict[str, int]:
        epoch = int(self.epoch_fn()) if self.epoch_fn is not None else 0
        batches = int(self.progress_fn()) if self.progress_fn is not None else 0
        return {"epoch": epoch, "batches": batches}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        try:
            self._resume_at = (int(state["epoch"]), int(state["batches"]))
        except (KeyError, TypeError, ValueError):
            warnings.warn(f"ignoring a malformed train dataloader state in the checkpoint: {state!r}")
            self._resume_at = None

    def __iter__(self):
        epoch = int(self.epoch_fn()) if self.epoch_fn is not None else None
        if epoch is not None:
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
            if self.on_epoch is not None:
                self.on_epoch(epoch)
        resume, self._resume_at = self._resume_at, None
        if resume is not None and resume[0] == epoch and hasattr(self.sampler, "skip_next"):
            batches = resume[1]
            if 0 < batches < len(self):  # a checkpoint from inside this epoch: skip what it consumed
                self.sampler.skip_next(batches * int(self.batch_size or 1))
        return super().__iter__()


def set_train_epoch(ds: Any, augment: Optional[EpochAugment], seed: int, epoch: int) -> None:
    """Make the train split's random subsampling and augmentations a function of (seed, epoch)."""
    if augment is not None:
        augment.epoch = epoch
    sampler = getattr(ds, "sampler", None)
    if isinstance(sampler, FixedPoints):
        # per-sample seeding (seed, epoch, content) instead of one stream in access order
        sampler.deterministic = True
        sampler.reseed(int(np.random.SeedSequence([seed, epoch, 7]).generate_state(1)[0]))


def steps_per_epoch(num_samples: int, batch_size: int, world_size: int, drop_last: bool,
                    limit: Any, accumulate: int) -> int:
    """Optimizer steps per epoch, computed the way Lightning counts batches."""
    per_rank = math.ceil(num_samples / world_size)
    batches = per_rank // batch_size if drop_last else math.ceil(per_rank / batch_size)
    if limit is not None:
        if isinstance(limit, float) and limit <= 1.0:
            batches = int(batches * limit)
        else:
            batches = min(batches, int(limit))
    return max(1, math.ceil(batches / max(1, int(accumulate))))


def warmup_cosine(step: int, *, warmup: int, total: int, floor: float) -> float:
    """LR factor: linear warm-up over ``warmup`` steps, then cosine from 1 down to ``floor``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    t = min(1.0, (step - warmup) / span)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * t))


def forward_batch(model: torch.nn.Module, batch: Dict[str, Any], task: str) -> torch.Tensor:
    """Logits of a collated batch: ``[B, classes]`` or ``[N, parts]``."""
    x = batch.get("x")
    if task == "segmentation" and getattr(model, "num_categories", 0):
        return model(batch["pos"], x, batch["batch"], category=batch["category"])
    return model(batch["pos"], x, batch["batch"])


def make_metrics(task: str, info: Dict[str, Any], confusion: bool = False) -> torch.nn.ModuleDict:
    from torchmetrics import MeanMetric, SumMetric

    metrics: Dict[str, Any] = {"loss": MeanMetric(), "count": SumMetric()}
    if task == "classification":
        n = int(info["num_outputs"])
        metrics.update(oa=OverallAccuracy(), macc=MeanClassAccuracy(n))
        if confusion:
            from torchmetrics.classification import MulticlassConfusionMatrix

            metrics["confusion"] = MulticlassConfusionMatrix(num_classes=n)
    else:
        metrics["iou"] = ShapeNetPartIoU(info["category_to_parts"])
    return torch.nn.ModuleDict(metrics)


def update_metrics(metrics: torch.nn.ModuleDict, task: str, logits: torch.Tensor, batch: Dict[str, Any],
                   loss: torch.Tensor) -> None:
    y = batch["y"]
    metrics["loss"].update(loss.detach().float(), weight=y.numel())
    metrics["count"].update(float(batch["ptr"].numel() - 1 if "ptr" in batch else int(batch["batch"].max()) + 1))
    logits = logits.detach().float()
    if task == "classification":
        metrics["oa"].update(logits, y)
        metrics["macc"].update(logits, y)
        if "confusion" in metrics:
            metrics["confusion"].update(logits.argmax(1), y)
    else:
        # the metric restricts the argmax to the parts of each shape's category
        metrics["iou"].update(logits, y, batch["category"], batch["batch"])


def compute_metrics(metrics: torch.nn.ModuleDict, task: str) -> Tuple[Dict[str, float], Dict[str, Any]]:
    """(scalar metrics, extras such as the confusion matrix / per-category IoU); resets the metrics."""
    out: Dict[str, float] = {"loss": float(metrics["loss"].compute())}
    extra: Dict[str, Any] = {"num_scored": int(metrics["count"].compute())}  # clouds, over all processes
    if task == "classification":
        out["oa"] = float(metrics["oa"].compute())
        out["macc"] = float(metrics["macc"].compute())
        if "confusion" in metrics:
            extra["confusion_matrix"] = metrics["confusion"].compute().cpu().long().tolist()
    else:
        res = metrics["iou"].compute()
        out["instance_miou"] = float(res["instance_miou"])
        out["class_miou"] = float(res["class_miou"])
        extra["per_category_iou"] = [None if math.isnan(v) else float(v) for v in res["per_category"].tolist()]
    for m in metrics.values():
        m.reset()
    return out, extra


@torch.no_grad()
def evaluate_model(model: torch.nn.Module, loader: Any, task: str, info: Dict[str, Any],
                   device: torch.device | str = "cpu", progress: bool = False) -> Tuple[Dict[str, float], Dict[str, Any]]:
    """Plain evaluation loop (no Lightning): the metrics of ``model`` over ``loader``."""
    import torch.nn.functional as F

    model.eval().to(device)
    metrics = make_metrics(task, info, confusion=(task == "classification")).to(device)
    it = loader
    if progress:
        try:
            from tqdm.auto import tqdm

            it = tqdm(loader, desc="evaluating", leave=False)
        except ImportError:
            pass
    for batch in it:
        batch = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
        logits = forward_batch(model, batch, task)
        loss = F.cross_entropy(logits.float(), batch["y"])
        update_metrics(metrics, task, logits, batch, loss)
    return compute_metrics(metrics, task)


def format_metrics(task: str, metrics: Dict[str, float]) -> str:
    if task == "classification":
        return f"OA {100 * metrics['oa']:.2f} %, mAcc {100 * metrics['macc']:.2f} %"
    return f"instance mIoU {100 * metrics['instance_miou']:.2f}, class mIoU {100 * metrics['class_miou']:.2f}"


# ======================================================================================
# checkpoints and exports (no Lightning needed)
# ======================================================================================
# ======================================================================================
# plots
# ======================================================================================
def read_metric_logs(csv_root: Path) -> List[Dict[str, float]]:
    """Rows of every ``csv/version_*/metrics.csv`` (resumed runs continue the step axis)."""
    rows: List[Dict[str, float]] = []
    versions = sorted(csv_root.glob("version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[-1]))
    for f in versions:
        with open(f, newline="") as fh:
            part = []
            for r in csv.DictReader(fh):
                part.append({k: float(v) for k, v in r.items() if v not in ("", None)})
        if part:  # a resumed run replaces anything logged at or after its first step
            first = min(r.get("step", 0.0) for r in part)
            rows = [r for r in rows if r.get("step", -1.0) < first] + part
    return rows


def plot_curves(rows: List[Dict[str, float]], out_dir: Path, task: str) -> List[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def series(key: str, x: str) -> Tuple[List[float], List[float]]:
        pts = sorted((r[x], r[key]) for r in rows if key in r and x in r)
        return [p[0] for p in pts], [p[1] for p in pts]

    fig, ax = plt.subplots(figsize=(6, 4))
    xs, ys = series("train_loss", "step")
    if xs:
        ax.plot(xs, ys, alpha=0.35, lw=0.8, label="train (step)")
    # epoch curves are drawn at the step where the epoch ended
    for key, label in (("train_loss_epoch", "train (epoch)"), ("val_loss", "val")):
        xs, ys = series(key, "step")
        if xs:
            ax.plot(xs, ys, marker="o", label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_title("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    p = out_dir / "loss.png"
    fig.savefig(p, dpi=120)
    plt.close(fig)
    written.append(p)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    keys = ["val_oa", "val_macc"] if task == "classification" else ["val_instance_miou", "val_class_miou"]
    for key in keys:
        xs, ys = series(key, "epoch")
        if xs:
            axes[0].plot(xs, [100 * v for v in ys], marker="o", label=key[4:])
    axes[0].set_xlabel("epoch")
    axes[0].set_ylabel("%")
    axes[0].set_title("validation")
    axes[0].grid(alpha=0.3)
    if axes[0].lines:
        axes[0].legend()
    lr_key = next((k for r in rows for k in r if k.startswith("lr")), None)
    if lr_key:
        xs, ys = series(lr_key, "step")
        axes[1].plot(xs, ys)
    axes[1].set_xlabel("step")
    axes[1].set_title("learning rate")
    axes[1].grid(alpha=0.3)
    fig.tight_layout()
    p = out_dir / "metrics.png"
    fig.savefig(p, dpi=120)
    plt.close(fig)
    written.append(p)
    return written


def plot_confusion(matrix: List[List[int]], names: Sequence[str], path: Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cm = np.asarray(matrix, dtype=np.float64)
    norm = cm / np.maximum(cm.sum(1, keepdims=True), 1)
    n = len(names)
    size = max(4.5, 0.32 * n + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(norm, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xticklabels(names, rotation=90, fontsize=7 if n > 15 else 9)
    ax.set_yticklabels(names, fontsize=7 if n > 15 else 9)
    if n <= 15:
        for i in range(n):
            for j in range(n):
                if cm[i, j]:
                    ax.text(j, i, int(cm[i, j]), ha="center", va="center", fontsize=8,
                            color="white" if norm[i, j] > 0.5 else "black")
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title or "confusion matrix (rows normalized)")
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ======================================================================================
# Lightning parts (imported lazily so the helpers above work without Lightning)
# ======================================================================================
def lightning_classes():
    import lightning.pytorch as pl
    import torch.nn.functional as F

    class PointCloudTask(pl.LightningModule):
        """Wraps a gridify model: cross-entropy training, metrics, AdamW + warm-up/cosine."""

        def __init__(self, model_name: str, model_kwargs: Dict[str, Any], task: str, optim: Dict[str, Any],
                     info: Dict[str, Any], config: Dict[str, Any], seed: int = 0,
                     steps_per_epoch: int = 1, gridify_version: str = "") -> None:
            super().__init__()
            self.save_hyperparameters()
            self.task = task
            self.model = make_model(model_name, model_kwargs)
            from torchmetrics import MeanMetric

            self.train_loss = MeanMetric()
            self.val_metrics = make_metrics(task, info)
            self.test_metrics = make_metrics(task, info, confusion=(task == "classification"))
            self.test_results: Dict[str, Any] = {}

        def forward(self, batch: Dict[str, Any]) -> torch.Tensor:
            return forward_batch(self.model, batch, self.task)

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            # dropout randomness as a function of (seed, step, rank): identical after a resume
            s = np.random.SeedSequence([self.hparams.seed, self.global_step, self.global_rank]).generate_state(2)
            torch.manual_seed(int(s[0]) << 31 ^ int(s[1]))

        def training_step(self, batch: Dict[str, Any], batch_idx: int) -> torch.Tensor:
            logits = self(batch)
            ce = F.cross_entropy(logits.float(), batch["y"])
            loss = ce
            weight = float(self.hparams.optim.get("kernel_l2", 0.0))
            if weight > 0:
                reg = self.model.kernel_l2()
                loss = loss + weight * reg
                self.log("train_kernel_l2", reg.detach(), on_step=True, on_epoch=False)
            n = int(batch["y"].numel())
            self.log("train_loss", ce.detach(), on_step=True, on_epoch=False, prog_bar=True, batch_size=n)
            self.train_loss.update(ce.detach(), weight=n)
            self.log("train_loss_epoch", self.train_loss, on_step=False, on_epoch=True)
            return loss

        def validation_step(self, batch: Dict[str, Any], batch_idx: int) -> None:
            logits = self(batch)
            update_metrics(self.val_metrics, self.task, logits, batch, F.cross_entropy(logits.float(), batch["y"]))

        def on_validation_epoch_end(self) -> None:
            values, _ = compute_metrics(self.val_metrics, self.task)
            primary = PRIMARY_METRIC[self.task]
            for k, v in values.items():
                # already reduced over processes by torchmetrics; sync_dist only keeps Lightning quiet
                self.log(f"val_{k}", v, prog_bar=(k == primary), sync_dist=True)

        def test_step(self, batch: Dict[str, Any], batch_idx: int) -> None:
            logits = self(batch)
            update_metrics(self.test_metrics, self.task, logits, batch, F.cross_entropy(logits.float(), batch["y"]))

        def on_test_epoch_end(self) -> None:
            values, extra = compute_metrics(self.test_metrics, self.task)
            for k, v in values.items():
                self.log(f"test_{k}", v, sync_dist=True)
            self.test_results = {"metrics": values, **extra}

        def configure_optimizers(self):
            o = self.hparams.optim
            opt = torch.optim.AdamW(self.parameters(), lr=float(o["lr"]), weight_decay=float(o["weight_decay"]),
                                    betas=tuple(float(b) for b in o.get("betas", (0.9, 0.999))))
            spe = int(self.hparams.steps_per_epoch)
            max_steps = self.trainer.max_steps
            total = max_steps if max_steps and max_steps > 0 else spe * int(self.trainer.max_epochs)
            warmup = int(round(float(o["warmup_epochs"]) * spe))
            floor = float(o.get("min_lr", 0.0)) / float(o["lr"])
            # a partial object: LambdaLR saves no state for it, so a resumed run uses the config's schedule
            fn = functools.partial(warmup_cosine, warmup=warmup, total=total, floor=floor)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, fn)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 1}}

    class PointCloudData(pl.LightningDataModule):
        """Train/val/test loaders with epoch-seeded, rank-sharded samplers (no Lightning sampler injection)."""

        def __init__(self, cfg: Dict[str, Any], train_set: Any, val_set: Any, augment: Optional[EpochAugment]):
            super().__init__()
            self.cfg, self.train_set, self.val_set, self.augment = cfg, train_set, val_set, augment
            self.test_set = None

        def _loader(self, ds: Any, train: bool) -> DataLoader:
            d = self.cfg["data"]
            world, rank = self.trainer.world_size, self.trainer.global_rank
            seed = self.cfg["seed"]
            sampler = ShardSampler(len(ds), shuffle=train, seed=seed, rank=rank, world_size=world, pad=train)
            nw = int(d["num_workers"])
            common = dict(collate_fn=collate_points, num_workers=nw, pin_memory=False,
                          persistent_workers=False)
            if train:
                fit_loop = self.trainer.fit_loop
                return EpochDataLoader(
                    ds, batch_size=int(d["batch_size"]), sampler=sampler, drop_last=bool(d.get("drop_last")),
                    epoch_fn=lambda: fit_loop.epoch_progress.current.processed,
                    on_epoch=lambda e: set_train_epoch(ds, self.augment, seed, e),
                    progress_fn=lambda: fit_loop.epoch_loop.batch_progress.current.processed, **common)
            return DataLoader(ds, batch_size=int(d.get("eval_batch_size") or d["batch_size"]), sampler=sampler,
                              **common)

        def train_dataloader(self) -> DataLoader:
            return self._loader(self.train_set, True)

        def val_dataloader(self) -> DataLoader:
            return self._loader(self.val_set, False)

        def test_dataloader(self) -> DataLoader:
            if self.test_set is None:
                self.test_set = build_dataset(self.cfg, "test")
            return self._loader(self.test_set, False)

    class StopAfterEpochs(pl.Callback):
        """Stop (as an interruption would) after ``n`` epochs; resume later with --resume."""

        def __init__(self, n: int) -> None:
            self.n = int(n)

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.current_epoch + 1 >= self.n:
                trainer.should_stop = True

    return pl, PointCloudTask, PointCloudData, StopAfterEpochs


def atomic_checkpoint_io():
    """A Lightning ``CheckpointIO`` that writes checkpoints atomically and loads them safely.

    Saving goes through :func:`atomic_torch_save` (temporary file in the same directory, fsync,
    ``os.replace``), so a run killed while writing ``last.ckpt`` keeps the previous one;
    loading always uses ``torch.load(..., weights_only=True)`` (tensors and plain containers,
    no unpickled code), whatever the caller asks for.
    """
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

    class AtomicCheckpointIO(TorchCheckpointIO):
        def save_checkpoint(self, checkpoint: Dict[str, Any], path: Any, storage_options: Optional[Any] = None) -> None:
            if storage_options is not None:
                raise TypeError("AtomicCheckpointIO.save_checkpoint does not take storage_options")
            atomic_torch_save(checkpoint, path)

        def load_checkpoint(self, path: Any, map_location: Optional[Any] = None,
                            weights_only: Optional[bool] = None) -> Dict[str, Any]:
            if not Path(path).is_file():
                raise FileNotFoundError(f"Checkpoint file not found: {path}")
            return torch.load(path, map_location=map_location if map_location is not None else "cpu",
                              weights_only=True)

    return AtomicCheckpointIO()


# ======================================================================================
# main
# ======================================================================================
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
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


def _env_rank() -> int:
    """Rank of this process before Lightning starts (torchrun sets RANK, Lightning's launcher LOCAL_RANK)."""
    for var in ("RANK", "LOCAL_RANK"):
        if os.environ.get(var) not in (None, ""):
            return int(os.environ[var])
    return 0


def _apply_torchrun(tr: Dict[str, Any]) -> None:
    """Under torchrun, size the Lightning trainer from the launcher's environment."""
    if "LOCAL_WORLD_SIZE" not in os.environ or "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    local = int(os.environ["LOCAL_WORLD_SIZE"])
    world = int(os.environ.get("WORLD_SIZE", local))
    if tr["devices"] in (1, "1", "auto", None):
        tr["devices"] = local
    tr["num_nodes"] = max(1, world // max(1, local))
    if tr["strategy"] == "auto" and world > 1:
        tr["strategy"] = "ddp"


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    args = build_parser().parse_intermixed_args(argv)
    try:
        cfg = config_from_args(args)
    except ConfigError as exc:
        raise SystemExit(f"train.py: config error: {exc}")
    if args.print_config:
        print(yaml.safe_dump(cfg, sort_keys=False))
        return {"config": cfg}
    try:
        return run(cfg, resume=args.resume, overwrite=args.overwrite, argv=list(argv or sys.argv[1:]))
    except (ConfigError, CheckpointError, DatasetNotFoundError, DownloadError) as exc:
        raise SystemExit(f"train.py: error: {exc}")


def run(cfg: Dict[str, Any], resume: Optional[str] = None, overwrite: bool = False,
        argv: Sequence[str] = ()) -> Dict[str, Any]:
    tr = cfg["trainer"]
    _apply_torchrun(tr)
    if tr["num_threads"]:
        torch.set_num_threads(int(tr["num_threads"]))
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
    import logging

    logging.getLogger("lightning.pytorch.trainer.connectors.logger_connector").setLevel(logging.WARNING)
    pl, PointCloudTask, PointCloudData, StopAfterEpochs = lightning_classes()
    from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    out = Path(cfg["output_dir"])
    ckpt_dir = out / "checkpoints"
    rank0 = _env_rank() == 0

    # ---- resume / fresh start --------------------------------------------------------
    ckpt_path: Optional[str] = None
    if resume:
        if resume == "auto":
            last = ckpt_dir / "last.ckpt"
            ckpt_path = str(last) if last.is_file() else None
            if rank0:
                print(f"[train] --resume auto: {'resuming from ' + ckpt_path if ckpt_path else 'no ' + str(last) + ', starting afresh'}")
        else:
            if not Path(resume).is_file():
                raise CheckpointError(f"--resume: checkpoint not found: {resume}")
            ckpt_path = resume
        if ckpt_path:
            load_checkpoint(ckpt_path)  # fail early, with a clear message, on a bad file
    if ckpt_path is None and rank0:
        existing = [d for d in ("checkpoints", "csv", "tensorboard", "plots") if (out / d).exists()]
        if existing and (ckpt_dir / "last.ckpt").exists() and not overwrite:
            raise ConfigError(f"output_dir {out} already holds a run ({', '.join(existing)}); pass --resume auto "
                              f"to continue it, --overwrite to replace it, or choose another output_dir")
        if overwrite:
            for d in existing:
                shutil.rmtree(out / d)

    pl.seed_everything(cfg["seed"], workers=True, verbose=False)

    # ---- data and model --------------------------------------------------------------
    specs = parse_augmentations(cfg["data"].get("augmentations"))
    augment = EpochAugment(specs, cfg["seed"]) if specs else None
    train_set = build_dataset(cfg, "train", augment)
    val_set = build_dataset(cfg, "val")
    info = dataset_info(train_set, cfg["task"])
    # what inference on new clouds needs (gridify.load / Predictor.predict): the training cloud size
    # and the normalization every dataset applies (centre at the mean, scale into the unit sphere)
    test_section = cfg["data"].get("test") or {}
    info["num_points"] = test_section.get("num_points", cfg["data"].get("num_points"))
    info["normalization"] = ({"center": "mean", "scale": "unit_sphere"} if cfg["data"].get("normalize", True)
                             else None)
    model_name, model_kwargs = fill_model_kwargs(cfg, info)
    cfg["model"] = {"name": model_name, **model_kwargs}

    devices = tr["devices"]
    world = _world_size_guess(devices, tr["num_nodes"], tr["accelerator"])
    spe = steps_per_epoch(len(train_set), int(cfg["data"]["batch_size"]), world, bool(cfg["data"].get("drop_last")),
                          tr["limit_train_batches"], int(tr["accumulate_grad_batches"]))
    module = PointCloudTask(model_name=model_name, model_kwargs=plain(model_kwargs), task=cfg["task"],
                            optim=plain(cfg["optim"]), info=plain(info), config=plain(cfg), seed=cfg["seed"],
                            steps_per_epoch=spe, gridify_version=gridify.__version__)
    if "mixed" in str(tr["precision"]) or str(tr["precision"]) in ("16", "bf16"):
        full_precision_flexconvs(module.model)
    num_params = module.model.num_parameters() if hasattr(module.model, "num_parameters") else sum(
        p.numel() for p in module.model.parameters())
    datamodule = PointCloudData(cfg, train_set, val_set, augment)

    run_info = {
        "gridify_version": gridify.__version__,
        "torch_version": torch.__version__,
        "lightning_version": pl.__version__,
        "dataset": cfg["data"]["name"],
        "source_format": info["source_format"],
        "num_parameters": int(num_params),
        "model": model_name,
        "task": cfg["task"],
        "num_train": len(train_set),
        "num_val": len(val_set),
        "steps_per_epoch": spe,
        "resumed_from": ckpt_path,
        "command": [sys.executable, sys.argv[0], *argv],
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if rank0:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(yaml.safe_dump(plain(cfg), sort_keys=False))
        (out / "run_info.json").write_text(json.dumps(run_info, indent=2))
        print(f"[train] gridify {gridify.__version__} | {cfg['data']['name']} ({info['source_format']}): "
              f"{len(train_set)} train / {len(val_set)} val | {model_name}: {num_params:,} parameters | "
              f"output {out}")

    # ---- trainer ---------------------------------------------------------------------
    primary = f"val_{PRIMARY_METRIC[cfg['task']]}"
    validate = tr["limit_val_batches"] != 0 and len(val_set) > 0
    callbacks: List[Any] = []
    best_cb = None
    if validate:
        best_cb = ModelCheckpoint(dirpath=ckpt_dir, filename="best-epoch{epoch:03d}", monitor=primary, mode="max",
                                  save_top_k=1, auto_insert_metric_name=False, save_last=False)
        callbacks.append(best_cb)
    ck = tr["checkpoint"]
    every_epochs = int(ck.get("every_n_epochs") or 0)
    every_steps = int(ck.get("every_n_train_steps") or 0)
    if every_epochs or not every_steps:
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, filename="last", save_top_k=1, monitor=None,
                                         every_n_epochs=max(1, every_epochs), enable_version_counter=False))
    if every_steps:
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, filename="last", save_top_k=1, monitor=None,
                                         every_n_train_steps=every_steps, enable_version_counter=False))
    if ck.get("keep_all"):
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, filename="epoch{epoch:03d}-step{step:07d}",
                                         save_top_k=-1, monitor=None, every_n_epochs=max(1, every_epochs),
                                         auto_insert_metric_name=False))
    callbacks.append(LearningRateMonitor(logging_interval="step"))
    if tr["stop_after_epochs"]:
        callbacks.append(StopAfterEpochs(int(tr["stop_after_epochs"])))
    loggers = [CSVLogger(str(out), name="csv"), TensorBoardLogger(str(out), name="tensorboard", default_hp_metric=False)]

    limits = {k: tr[k] for k in ("limit_train_batches", "limit_val_batches", "limit_test_batches") if tr[k] is not None}
    trainer = pl.Trainer(
        accelerator=tr["accelerator"], devices=devices, num_nodes=int(tr["num_nodes"]), strategy=tr["strategy"],
        precision=tr["precision"], max_epochs=int(tr["max_epochs"]), max_steps=int(tr["max_steps"]),
        log_every_n_steps=int(tr["log_every_n_steps"]), check_val_every_n_epoch=int(tr["check_val_every_n_epoch"]),
        num_sanity_val_steps=int(tr["num_sanity_val_steps"]), gradient_clip_val=tr["gradient_clip_val"],
        accumulate_grad_batches=int(tr["accumulate_grad_batches"]), deterministic=tr["deterministic"],
        enable_progress_bar=bool(tr["progress_bar"]), enable_model_summary=rank0 and bool(tr["progress_bar"]),
        callbacks=callbacks, logger=loggers, use_distributed_sampler=False, default_root_dir=str(out),
        plugins=[atomic_checkpoint_io()], **limits)
    if trainer.world_size != world and rank0:
        warnings.warn(f"steps per epoch were computed for {world} processes but the trainer runs "
                      f"{trainer.world_size}; the LR schedule length may be off")

    t0 = time.time()
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    train_seconds = time.time() - t0

    # ---- test ------------------------------------------------------------------------
    test_ckpt: Optional[str] = None
    if tr["test_ckpt"] == "best" and best_cb is not None and best_cb.best_model_path:
        test_ckpt = best_cb.best_model_path
    else:
        last = ckpt_dir / "last.ckpt"
        test_ckpt = str(last) if last.is_file() else None
    trainer.test(module, datamodule=datamodule, ckpt_path=test_ckpt, verbose=False)
    results = dict(module.test_results)
    summary: Dict[str, Any] = {"config": cfg, "output_dir": str(out), "train_seconds": train_seconds}
    if trainer.is_global_zero:
        metrics = results.get("metrics", {})
        report = {
            "task": cfg["task"], "split": "test", "metrics": metrics,
            "num_samples": len(datamodule.test_set) if datamodule.test_set is not None else None,
            "checkpoint": test_ckpt or "final weights", "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
            "dataset": cfg["data"]["name"], "source_format": info["source_format"],
            "gridify_version": gridify.__version__, "num_parameters": int(num_params),
            "train_seconds": round(train_seconds, 1),
        }
        report.update({k: v for k, v in results.items() if k != "metrics"})
        (out / "test_metrics.json").write_text(json.dumps(report, indent=2))
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        export_model(ckpt_dir / "model.pt", module.model, {
            "model_name": model_name, "model_kwargs": model_kwargs, "class_names": info["class_names"],
            "gridify_version": gridify.__version__, "task": cfg["task"], "info": info, "config": cfg,
            "source_format": info["source_format"], "num_parameters": int(num_params),
            "checkpoint": test_ckpt or "final weights"})
        run_info.update(train_seconds=round(train_seconds, 1), test_metrics=metrics, finished=time.strftime("%Y-%m-%d %H:%M:%S"))
        (out / "run_info.json").write_text(json.dumps(run_info, indent=2))
        if tr["plots"]:
            plots = out / "plots"
            plots.mkdir(exist_ok=True)
            try:
                plot_curves(read_metric_logs(out / "csv"), plots, cfg["task"])
                if "confusion_matrix" in results:
                    plot_confusion(results["confusion_matrix"], info["class_names"], plots / "confusion_matrix.png",
                                   title=f"test confusion ({format_metrics(cfg['task'], metrics)})")
            except Exception as exc:  # noqa: BLE001 - plotting never fails a finished run
                warnings.warn(f"plotting failed: {exc}")
        print(f"[train] test ({report.get('num_scored')} of {report['num_samples']} samples, {report['checkpoint']}): "
              f"{format_metrics(cfg['task'], metrics)} | trained {train_seconds:.0f} s | {out / 'test_metrics.json'}")
        summary.update(report)
    return summary


def _world_size_guess(devices: Any, num_nodes: int, accelerator: str) -> int:
    """Number of processes the trainer will run (for the LR schedule length, before the trainer exists)."""
    if isinstance(devices, int):
        n = devices
    elif isinstance(devices, (list, tuple)):
        n = len(devices)
    elif isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        n = int(devices)
    elif isinstance(devices, str) and "," in devices:
        n = len([d for d in devices.split(",") if d.strip()])
    else:  # "auto" / -1: every visible accelerator
        if accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available():
            n = torch.cuda.device_count()
        else:
            n = 1
    if n == -1:
        n = torch.cuda.device_count() if torch.cuda.is_available() and accelerator != "cpu" else 1
    return max(1, n) * max(1, int(num_nodes))


if __name__ == "__main__":
    main()
