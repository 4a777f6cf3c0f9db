"""Data and model for a run: datasets from the config, augmentations, samplers, loaders, the model.

Everything random about the training data is a function of ``(seed, epoch)`` only, so a resumed
run (even mid-epoch), another worker count or another access order sees exactly the same
batches: :class:`EpochAugment` seeds the augmentations from (seed, epoch, sample content),
:class:`ShardSampler` draws each process's indices from (seed, epoch), and
:class:`EpochDataLoader` sets the epoch before any index is drawn and can skip the batches a
mid-epoch checkpoint had already consumed. No Lightning import.

Quick runs: ``trainer.limit_{val,test}_batches = L`` evaluates a seeded, class-stratified subset
(:func:`eval_subset`) of ``m = L * batch_size * processes`` samples (``m = round(L * n)`` for a
fraction ``L <= 1``) instead of the first ``L`` batches of a split sorted by class.

Shapes:
    a batch: pos ``[sum N_i, 3]``, x ``[sum N_i, F]``, batch ``[sum N_i]``, y ``[B]`` or ``[sum N_i]``.
"""

from __future__ import annotations

import math
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from gridify.datasets import DatasetError, DatasetNotFoundError, fit_box, stratified_subset
from gridify.models import build_model
from gridify.registry import DATASETS, MODELS, UnknownNameError
from gridify.tasks import class_weights, get_task, task_of_dataset
from gridify.transforms import FixedPoints, SceneSampler, normalization_name, normalization_record

from .config import AUGMENTATIONS, DATA_LOADER_KEYS, DATASET_ALIASES, ConfigError
from .config_errors import constructor_keys, dataset_message, model_error

__all__ = [
    "REPO_ROOT",
    "fit_box",
    "EpochAugment",
    "resolve_root",
    "dataset_kwargs",
    "build_dataset",
    "dataset_info",
    "inference_info",
    "train_class_weights",
    "fill_model_kwargs",
    "make_model",
    "config_archives",
    "eval_subset",
    "ShardSampler",
    "EpochDataLoader",
    "set_train_epoch",
    "GraphCollate",
    "ModelGraphBuilder",
    "graph_builder_of",
]

#: the repository (or source tree) root: relative data roots are also looked up here
REPO_ROOT = Path(__file__).resolve().parents[2]


class EpochAugment:
    """Training augmentations whose randomness depends only on (seed, epoch, sample content).

    Every call builds the transforms around a generator seeded from the run seed, the epoch and
    a checksum of the points, so a resumed run, another worker count or another access order
    sees exactly the same augmented samples. ``fit``: shrink an augmented cloud that leaves
    ``[-1, 1]^3`` back into it (:func:`fit_box`, the unit-box tasks); False: leave the points
    where the augmentations put them (scenes, in metres: :attr:`gridify.tasks.Task.normalized`).
    """

    def __init__(self, specs: List[Tuple[str, Dict[str, Any]]], seed: int, fit: bool = True) -> None:
        self.specs, self.seed, self.epoch, self.fit = specs, int(seed), 0, bool(fit)

    def __call__(self, sample: Dict[str, Any]) -> Dict[str, Any]:
        pos = sample["pos"]
        buf = (pos.detach().cpu().numpy() if isinstance(pos, torch.Tensor) else np.ascontiguousarray(pos)).tobytes()
        rng = np.random.default_rng([self.seed, self.epoch, zlib.crc32(buf)])
        for name, kwargs in self.specs:
            sample = AUGMENTATIONS[name](**kwargs, generator=rng)(sample)
        return fit_box(sample) if self.fit else sample

    def __setstate__(self, state: Dict[str, Any]) -> None:  # pickled before ``fit`` existed: fitted
        self.__dict__.update({"fit": True, **state})

    def __repr__(self) -> str:
        return f"EpochAugment({[n for n, _ in self.specs]}, seed={self.seed}{'' if self.fit else ', fit=False'})"


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
    if name in DATASETS and "task" in constructor_keys(DATASETS.get(name))[0]:  # a dataset of several tasks
        kwargs.setdefault("task", cfg["task"])
    if name == "folder" and kwargs.get("root") is None:
        raise ConfigError("data.name=folder needs the folder: pass --data-root path/to/folder (or set data.root)")
    if DATASET_ALIASES.get(name, name) == "modelnet":
        # ModelNet's own ``name`` ("10"/"40") is spelled data.version here (data.name is the dataset)
        version = kwargs.pop("version", None)
        if name != "modelnet":
            if version is not None and str(version) != name[8:]:
                raise ConfigError(f"data.name={name} but data.version={version!r}")
            version = name[8:]
        kwargs["name"] = str(version if version is not None else "40")
        name = "modelnet"
    if kwargs.get("root") is not None:
        kwargs["root"] = resolve_root(kwargs["root"])
    return name, kwargs


def build_dataset(cfg: Dict[str, Any], split: str, augment: Optional[EpochAugment] = None) -> Any:
    """The dataset of ``split`` described by ``cfg["data"]``, with ``augment`` as its transform."""
    name, kwargs = dataset_kwargs(cfg, split)
    cls = DATASETS.get(name)
    if augment is not None:
        if "transform" not in constructor_keys(cls)[0]:
            raise ConfigError(
                f"data.augmentations: the dataset {name} takes no augmentations (it has no "
                f"transform); set data.augmentations: []"
            )
        kwargs["transform"] = augment
    holds = task_of_dataset(name, cls)
    if holds is not None and cfg["task"] != holds:
        raise ConfigError(f"data.name={name} is a {holds} dataset; set task: {holds}")
    keys, per_split = constructor_keys(cls)[0], list(cfg["data"].get(split) or {})
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"data ({name}, split {split!r}): bad dataset arguments {sorted(kwargs)}: {exc}") from None
    except (DatasetError, DatasetNotFoundError) as exc:  # the files: the same error, its advice in config keys
        exc.args = (dataset_message(name, split, keys, exc, per_split, where=False), *exc.args[1:])
        raise
    except ValueError as exc:  # an argument the dataset refuses (a bad source, category, class list, ...)
        raise ConfigError(dataset_message(name, split, keys, exc, per_split)) from None


def config_archives(cfg: Dict[str, Any]) -> List[str]:
    """The archives (:data:`gridify.datasets.ARCHIVES` keys) ``gridify download`` fetches for ``cfg``'s data:
    ``data.archive`` when the config names one (a folder layout the archive unpacks into), else the dataset's."""
    if cfg["data"].get("archive"):
        from gridify.datasets.download import resolve_archive  # noqa: PLC0415

        try:
            return [resolve_archive(cfg["data"]["archive"])]
        except ValueError as exc:
            raise ConfigError(f"data.archive: {exc}") from None
    name, kwargs = dataset_kwargs(cfg, "train")
    return list(getattr(DATASETS.get(name), "archives", lambda **_: [])(**kwargs))


def eval_subset(ds: Any, limit: Any, batch_size: int, world_size: int, seed: int) -> Optional[Dict[str, Any]]:
    """The samples ``trainer.limit_{val,test}_batches = limit`` evaluates, when not all of them.

    ``{"indices", "size", "of", "stratified"}``: a seeded subset of ``limit * batch_size *
    world_size`` samples (``round(limit * len(ds))`` for a fraction), stratified by the classes
    (or categories) of :meth:`~gridify.datasets.PointCloudDataset.sample_groups` when the dataset
    knows them, else drawn at random. None: every sample (no limit, a limit of 0 or one that
    covers the split).
    """
    n = len(ds)
    if limit is None or limit == 0 or (isinstance(limit, float) and limit >= 1.0):
        return None
    size = int(round(limit * n)) if isinstance(limit, float) else int(limit) * int(batch_size) * int(world_size)
    if size >= n:
        return None
    groups = ds.sample_groups() if hasattr(ds, "sample_groups") else None
    indices = stratified_subset(np.zeros(n, np.int64) if groups is None else groups, max(1, size), seed)
    return {"indices": indices.tolist(), "size": int(len(indices)), "of": n, "stratified": groups is not None}


def dataset_info(ds: Any, task: str) -> Dict[str, Any]:
    """What the model and the metrics need to know about a dataset (plain Python values): ``in_channels``
    (the dataset's own attribute, else the width of the first item's ``x``), ``source_format`` and the
    task's entries (:meth:`gridify.tasks.Task.dataset_info`: ``num_outputs``, ``class_names``, ...)."""
    channels = getattr(ds, "in_channels", None)
    info: Dict[str, Any] = {
        "in_channels": int(channels) if isinstance(channels, int) else int(ds[0]["x"].shape[-1]),
        "source_format": str(getattr(ds, "source_format", type(ds).__name__)),
    }
    info.update(get_task(task).dataset_info(ds))
    return info


def train_class_weights(ds: Any, mode: str) -> Optional[List[float]]:
    """``optim.class_weights`` of the training set ``ds`` (:func:`gridify.tasks.class_weights` of its
    ``label_counts()``), as a list; None for ``none``."""
    if mode == "none":
        return None
    if not callable(getattr(ds, "label_counts", None)):
        raise ConfigError(
            f"optim.class_weights={mode} needs the training labels' counts, which "
            f"{type(ds).__name__} does not give (label_counts(): the scene datasets)"
        )
    try:
        weights = class_weights(ds.label_counts(), mode, where="optim.class_weights")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return None if weights is None else [float(w) for w in weights]


def inference_info(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """What inference on new clouds needs (``gridify.load`` / ``Predictor.predict``).

    The training cloud size and the normalization the datasets applied (``data.normalize``: the
    :func:`gridify.transforms.normalization_record` of its name; None for none).
    """
    data, task = cfg["data"], get_task(cfg["task"])
    test_section = data.get("test") or {}
    mode = normalization_name("data.normalize", data.get("normalize", task.normalized))
    normalized = mode is not None and task.predictor  # sequences: the frames as they are
    out = {
        "num_points": test_section.get("num_points", data.get("num_points")),
        "normalization": normalization_record(mode) if normalized else None,
    }
    if not task.normalized:  # scenes: the subsampling and point budget of whole-scene inference
        train = data.get("train") or {}
        scene = {k: data.get(k, train.get(k)) for k in ("voxel_size", "max_points")}
        out.update(num_points=scene["max_points"], **scene)
    return out


def fill_model_kwargs(cfg: Dict[str, Any], info: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """Model name and constructor kwargs, with in_channels/num_classes/num_categories from the data."""
    kwargs = {k: v for k, v in cfg["model"].items() if k != "name"}
    given = kwargs.setdefault("in_channels", info["in_channels"])
    if given != info["in_channels"]:  # what the config check could not know: the dataset's own features
        raise ConfigError(
            f"model.in_channels: {given}, but the data give {info['in_channels']} column(s) per point "
            f"({'data.features' if get_task(cfg['task']).whole_scenes else 'data.use_normals / data.columns'}); "
            f"leave model.in_channels out (it follows the data) or change the data's features"
        )
    kwargs.setdefault("num_classes", info["num_outputs"])
    for key, value in get_task(cfg["task"]).model_kwargs(info).items():
        kwargs.setdefault(key, value)
    return cfg["model"]["name"], kwargs


def make_model(name: str, kwargs: Dict[str, Any]) -> torch.nn.Module:
    """The registered model ``name`` built with ``kwargs``; a bad name or argument is a :class:`ConfigError`
    (a value the constructor refuses names its key: ``model.k: Gridification: k must be ...``)."""
    if name not in MODELS:
        known = ", ".join(MODELS.names())
        raise ConfigError(f"model.name: unknown model {name!r}; known models: {known}")
    try:
        return build_model(name, **kwargs)
    except UnknownNameError as exc:  # an unknown backbone, kernel network, ... among the arguments
        raise ConfigError(f"model {name!r}: {exc}") from None
    except TypeError as exc:
        raise ConfigError(f"model {name!r}: bad arguments ({exc})") from None
    except ValueError as exc:  # a value the constructor refuses: named as the config key (model.k: ...)
        raise model_error(name, kwargs, exc, build=lambda kw: build_model(name, **kw)) from None


class ShardSampler(Sampler):
    """Indices of one process's share of a dataset; the order depends only on (seed, epoch).

    ``shuffle``: a new permutation per epoch. ``pad``: repeat indices so every rank gets the
    same count (needed for training under DDP); evaluation uses ``pad=False`` so every sample
    is scored exactly once. ``indices``: draw from these ``size`` dataset indices (a subset)
    instead of ``range(size)``.
    """

    def __init__(
        self,
        size: int,
        *,
        shuffle: bool,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        pad: bool = False,
        indices: Optional[List[int]] = None,
    ) -> None:
        self.size, self.shuffle, self.seed = int(size), bool(shuffle), int(seed)
        self.rank, self.world_size, self.pad = int(rank), int(world_size), bool(pad)
        self.indices = None if indices is None else [int(i) for i in indices]
        if self.indices is not None and len(self.indices) != self.size:
            raise ValueError(f"ShardSampler: {len(self.indices)} indices for size {self.size}")
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
        order = order[self.rank :: self.world_size]
        return order if self.indices is None else [self.indices[i] for i in order]

    def __iter__(self) -> Iterator[int]:
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

    def __init__(
        self,
        *args: Any,
        epoch_fn: Optional[Callable[[], int]] = None,
        on_epoch: Optional[Callable[[int], None]] = None,
        progress_fn: Optional[Callable[[], int]] = None,
        **kwargs: Any,
    ) -> None:
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

    def __iter__(self) -> Iterator[Any]:
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
    if isinstance(sampler, (FixedPoints, SceneSampler)):  # a scene's voxel subsampling and crop too
        # per-sample seeding (seed, epoch, content) instead of one stream in access order
        sampler.deterministic = True
        sampler.reseed(int(np.random.SeedSequence([seed, epoch, 7]).generate_state(1)[0]))


class GraphCollate:
    """A ``collate_fn`` that also builds the batch's gridification graph (``batch["graph"]``).

    Run in the DataLoader's worker processes, it builds the next batch's bilateral kNN graph while
    the model trains on the current one (the graph is a function of the augmented points only);
    :func:`~.metrics.forward_batch` hands it to the model as ``graph=``, which checks that it
    belongs to the batch's points. Picklable (worker processes, spawn).
    """

    def __init__(self, collate: Callable[[List[Dict[str, Any]]], Dict[str, Any]], builder: Any) -> None:
        self.collate, self.builder = collate, builder

    def __call__(self, items: List[Dict[str, Any]]) -> Dict[str, Any]:
        batch = self.collate(items)
        batch["graph"] = self.builder(batch["pos"], batch["batch"], len(items))
        return batch


def graph_builder_of(model: torch.nn.Module, cfg: Dict[str, Any]) -> Optional[Any]:
    """The model's :class:`gridify.nn.GraphBuilder` when ``cfg`` builds the training graphs ahead in the
    DataLoader workers, else None: ``data.prefetch_graph`` true (or ``auto`` when training on a GPU,
    whose step the CPU workers then overlap; on a CPU whose cores the step already keeps busy a worker
    only competes with it), ``data.num_workers > 0`` and a gridified model that takes a prebuilt graph."""
    data, accelerator = cfg["data"], str(cfg["trainer"].get("accelerator", "auto"))
    wanted = data.get("prefetch_graph", "auto")
    if wanted == "auto":
        wanted = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if wanted is not True or int(data["num_workers"]) <= 0:
        return None
    own = getattr(model, "graph_builder", None)  # a model that maps its points first (the scene segmenter)
    if callable(own):
        return ModelGraphBuilder(own())
    builder = getattr(getattr(model, "gridify", None), "graph_builder", None)
    return builder() if callable(builder) else None


class ModelGraphBuilder:
    """A model's own graph builder (``builder(pos, batch)``, e.g. the scene segmenter's, which maps metric
    points into its grid box first) under :class:`GraphCollate`'s ``(pos, batch, num_clouds)`` call. Picklable."""

    def __init__(self, builder: Callable[..., Any]) -> None:
        self.builder = builder

    def __call__(self, pos: torch.Tensor, batch: torch.Tensor, num_clouds: int) -> Any:
        return self.builder(pos, batch)
