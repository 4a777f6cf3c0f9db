"""The declared type and range of every config key: one table for the check, the key listing and the docs.

:data:`SCHEMA` mirrors :data:`DEFAULTS` (the top-level keys and the sections ``data``, ``optim``,
``trainer``): every key has a :class:`Spec`, a small declarative type (:class:`Int`, :class:`Num`,
:class:`Bool`, :class:`Choice`, :class:`Str`, :class:`ListOf`, :class:`AnyOf`, :class:`Mapping`) that
says what it accepts and in words (``a positive integer``, ``a finite number > 0``, ``one of [...]``).
The dataset arguments of ``data`` (and ``data.train/val/test``) and the model arguments of ``model``
are free-form keyword arguments of the chosen dataset / model: their names are checked against its
constructor's signature, and their values against :data:`DATASET_KEYS` / :data:`MODEL_KEYS`.

Rules: numbers are finite (``.nan`` / ``.inf`` are refused everywhere), booleans are strict
(``'false'`` is an error, not True), integers are ``int`` (``2.0`` and ``true`` are refused).
A bad value raises :class:`ConfigError` ``<key> must be <rule>, got <value>``.

From the same table: :func:`key_rows` (the key listing, ``python -m gridify.training.schema``),
:func:`markdown_table` (``docs/config_keys.md``, ``python -m gridify.training.schema --markdown``)
and :func:`annotated_yaml` (a resolved config with each key's rule as a comment). Errors of a model
constructor (:func:`model_error`), of the optimizer (:func:`optimizer_error`) and of the trainer
(:func:`trainer_error`) become :class:`ConfigError` naming the config key; a dataset's message names the
keys a user sets (:func:`dataset_message`: ``use_normals=False`` reads ``data.use_normals=false``). No
Lightning import.
"""

from __future__ import annotations

import ast
import inspect
import math
import re
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import yaml

import gridify.baselines  # noqa: F401  (registers the baseline models)
import gridify.datasets  # noqa: F401  (registers the datasets data.name may name)
import gridify.models  # noqa: F401  (registers the models model.name may name)
from gridify._checks import is_real
from gridify._clinames import MIN_VOXEL_SIZE
from gridify.models.gridified import POOLS
from gridify.models.temporal import READOUTS, RNNS, TIME_SCALE_RANGE
from gridify.nn.cfc import CFC_ACTIVATIONS, CFC_MODES
from gridify.nn.gridification import AGGREGATIONS, MESSAGES
from gridify.datasets.dynamic import FRAME_INTERVAL_RANGE, SAMPLINGS
from gridify.datasets.scene_base import SCENE_FEATURES
from gridify.datasets.scene_layouts import LAYOUTS
from gridify.transforms import CROP_CENTRES
from gridify.registry import BACKBONES, DATASETS, KERNELS, MODELS, POS_EMBEDDINGS
from gridify.tasks import CLASS_WEIGHTS, task_names

__all__ = [
    "ConfigError",
    "Spec",
    "Int",
    "Num",
    "Bool",
    "Choice",
    "Str",
    "ListOf",
    "AnyOf",
    "PerAxis",
    "Mapping",
    "Devices",
    "DEFAULTS",
    "TASKS",
    "DATASET_ALIASES",
    "SCHEMA",
    "DATASET_KEYS",
    "RUN_DATA_KEYS",
    "MODEL_KEYS",
    "FORWARDED_KWARGS",
    "PRECISIONS",
    "STRATEGIES",
    "ACCELERATORS",
    "SCHEDULES",
    "INT64_MAX",
    "dataset_names",
    "check_values",
    "constructor_keys",
    "model_keys",
    "dataset_keys",
    "check_model_section",
    "check_dataset_section",
    "model_error",
    "dataset_message",
    "optimizer_error",
    "trainer_error",
    "declared_keys",
    "key_rows",
    "markdown_table",
    "annotated_yaml",
    "main",
]

INT64_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A problem with the config file or a command-line override."""


class Spec:
    """What one key accepts. ``nullable``: null is accepted too; ``doc``: what the key does; ``text``:
    the rule in words (default: :meth:`describe`)."""

    def __init__(self, nullable: bool = False, doc: str = "", text: Optional[str] = None) -> None:
        self.nullable, self.doc, self._text = nullable, doc, text

    def accepts(self, value: Any) -> bool:  # pragma: no cover - every spec overrides it
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - every spec overrides it
        raise NotImplementedError

    def samples(self) -> List[Tuple[str, Any]]:
        """Values this spec refuses, each tagged ``"type"`` (a wrong type) or ``"range"`` (out of range)."""
        return []

    def rule(self) -> str:
        """The rule in words, e.g. ``null or a positive integer``."""
        text = self._text or self.describe()
        return f"null or {text}" if self.nullable and not text.startswith("null") else text

    def ok(self, value: Any) -> bool:
        return (value is None and self.nullable) or (value is not None and self.accepts(value))

    def check(self, key: str, value: Any) -> None:
        """Raise :class:`ConfigError` ``<key> must be <rule>, got <value>`` unless the value is accepted."""
        if not self.ok(value):
            raise ConfigError(f"{key} must be {self.rule()}, got {value!r}")

    def bad_values(self) -> List[Tuple[str, Any]]:
        """:meth:`samples` plus null where it is not accepted, without any value the spec accepts."""
        out = list(self.samples()) + ([] if self.nullable else [("type", None)])
        return [(kind, v) for kind, v in out if not self.ok(v)]


class Int(Spec):
    """An ``int`` (not a bool, not ``2.0``) in ``[min, max]``; ``odd``: odd only; ``also``: extra accepted values."""

    def __init__(
        self,
        min: Optional[int] = None,
        max: Optional[int] = None,
        odd: bool = False,
        also: Sequence[int] = (),
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.min, self.max, self.odd, self.also = min, max, odd, tuple(also)

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        if value in self.also:
            return True
        return (
            (self.min is None or value >= self.min)
            and value <= (INT64_MAX if self.max is None else self.max)
            and (not self.odd or value % 2 == 1)
        )

    def describe(self) -> str:
        what = "an odd integer" if self.odd else "an integer"
        if self.max is not None:
            text = f"{what} in [{self.min}, {self.max}]"
        elif self.min == 1:
            text = f"{'an odd' if self.odd else 'a'} positive integer"
        elif self.min == 0:
            text = f"a non-negative {'odd ' if self.odd else ''}integer"
        else:
            text = f"{what} >= {self.min}" if self.min is not None else what
        return text + "".join(f" or {a}" for a in self.also)

    def samples(self) -> List[Tuple[str, Any]]:
        out: List[Tuple[str, Any]] = [("type", "3"), ("type", 2.5), ("type", True)]
        if self.min is not None:
            out.append(("range", self.min - 1 if self.min - 1 not in self.also else min(self.also) - 1))
        out.append(("range", (self.max if self.max is not None else INT64_MAX) + 1))
        if self.odd:
            out.append(("range", 4))
        return out


class Num(Spec):
    """A finite ``int`` or ``float`` (not a bool, not NaN/Inf) within the bounds (``*_open``: bound excluded)."""

    def __init__(
        self,
        min: Optional[float] = None,
        max: Optional[float] = None,
        min_open: bool = False,
        max_open: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.min, self.max, self.min_open, self.max_open = min, max, min_open, max_open

    def accepts(self, value: Any) -> bool:
        if not is_real(value) or not math.isfinite(value):
            return False
        low = self.min is None or (value > self.min if self.min_open else value >= self.min)
        high = self.max is None or (value < self.max if self.max_open else value <= self.max)
        return low and high

    def describe(self) -> str:
        if self.min is not None and self.max is not None:
            return (
                f"a number in {'(' if self.min_open else '['}{self.min:g}, {self.max:g}{')' if self.max_open else ']'}"
            )
        if self.min is not None:
            return f"a finite number {'>' if self.min_open else '>='} {self.min:g}"
        if self.max is not None:
            return f"a finite number {'<' if self.max_open else '<='} {self.max:g}"
        return "a finite number"

    def samples(self) -> List[Tuple[str, Any]]:
        out: List[Tuple[str, Any]] = [
            ("type", "0.5"),
            ("type", True),
            ("range", math.nan),
            ("range", math.inf),
            ("range", -math.inf),
        ]
        if self.min is not None:
            out.append(("range", self.min if self.min_open else self.min - 1))
        if self.max is not None:
            out.append(("range", self.max if self.max_open else self.max + 1))
        return out


class Bool(Spec):
    """``true`` or ``false`` only (``'false'``, ``0`` and ``'yes'`` are refused); ``also``: extra accepted values."""

    def __init__(self, also: Sequence[Any] = (), **kw: Any) -> None:
        super().__init__(**kw)
        self.also = tuple(also)

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool) or (isinstance(value, str) and value in self.also)

    def describe(self) -> str:
        return "true or false" + "".join(f" or {a!r}" for a in self.also)

    def samples(self) -> List[Tuple[str, Any]]:
        return [("type", "false"), ("type", "true"), ("type", 1), ("type", 0), ("range", "maybe")]


class Choice(Spec):
    """One of ``options`` (a sequence, or a function returning one, e.g. a registry's names)."""

    def __init__(self, options: Union[Sequence[Any], Callable[[], Sequence[Any]]], **kw: Any) -> None:
        super().__init__(**kw)
        self._options = options

    @property
    def options(self) -> List[Any]:
        return list(self._options() if callable(self._options) else self._options)

    def accepts(self, value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, (str, int)) and value in self.options

    def describe(self) -> str:
        return f"one of {self.options}"

    def samples(self) -> List[Tuple[str, Any]]:
        return [("type", 3.5), ("type", ["x"]), ("type", True), ("range", "bogus_choice")]


class Str(Spec):
    """A non-empty string."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value != "" and "\0" not in value

    def describe(self) -> str:
        return "a non-empty string"

    def samples(self) -> List[Tuple[str, Any]]:
        return [("type", 5), ("type", ["a"]), ("range", "")]


class ListOf(Spec):
    """A list (or tuple) of items accepted by ``item``; ``length``: exactly that many; ``min_len``: at least."""

    def __init__(self, item: Spec, length: Optional[int] = None, min_len: int = 0, **kw: Any) -> None:
        super().__init__(**kw)
        self.item, self.length, self.min_len = item, length, min_len

    def accepts(self, value: Any) -> bool:
        if not isinstance(value, (list, tuple)):
            return False
        if (self.length is not None and len(value) != self.length) or len(value) < self.min_len:
            return False
        return all(self.item.ok(v) for v in value)

    def describe(self) -> str:
        count = f"{self.length} " if self.length is not None else ("1 or more " if self.min_len == 1 else "")
        return f"a list of {count}items, each {self.item.rule()}"

    def samples(self) -> List[Tuple[str, Any]]:
        good = self.good_item()
        n = self.length if self.length is not None else max(1, self.min_len)
        out: List[Tuple[str, Any]] = [("type", "a"), ("type", 7)]
        out += [("range", [bad] + [good] * (n - 1)) for _, bad in self.item.bad_values()[:2]]
        if self.length is not None:
            out.append(("range", [good] * (self.length + 1)))
        if self.min_len:
            out.append(("range", []))
        return out

    def good_item(self) -> Any:
        """An item the list accepts (for the generated bad lists)."""
        for cand in (0.5, 1, "a", "mean", True):
            if self.item.ok(cand):
                return cand
        return self.item.options[0] if isinstance(self.item, Choice) else None


class AnyOf(Spec):
    """Anything one of ``specs`` accepts (``text`` should say the rule in words)."""

    def __init__(self, *specs: Spec, **kw: Any) -> None:
        super().__init__(**kw)
        self.specs = specs

    def accepts(self, value: Any) -> bool:
        return any(s.ok(value) for s in self.specs)

    def describe(self) -> str:
        return " or ".join(s.rule() for s in self.specs)

    def samples(self) -> List[Tuple[str, Any]]:
        return [s for spec in self.specs for s in spec.samples()]


class PerAxis(Spec):
    """A value ``item`` accepts, or a list of 3 of them (one per axis); a refusal states the rule of the
    form given (``an integer >= 2`` for a scalar, ``a list of 3 items, each ...`` for a list)."""

    def __init__(self, item: Spec, **kw: Any) -> None:
        super().__init__(**kw)
        self.item, self.axes = item, ListOf(item, length=3)

    def accepts(self, value: Any) -> bool:
        return self.item.ok(value) or self.axes.ok(value)

    def describe(self) -> str:
        return f"{self.item.rule()} or a list of 3 of them"

    def check(self, key: str, value: Any) -> None:
        if not self.ok(value):
            rule = self.axes.rule() if isinstance(value, (list, tuple)) else self.item.rule()
            raise ConfigError(f"{key} must be {'null or ' if self.nullable else ''}{rule}, got {value!r}")

    def samples(self) -> List[Tuple[str, Any]]:
        return self.item.samples() + [("range", [2, 2]), ("range", [1, 2, 2])]


class Mapping(Spec):
    """A mapping (its keys are checked elsewhere, e.g. by the component it configures)."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, dict)

    def describe(self) -> str:
        return "a mapping"

    def samples(self) -> List[Tuple[str, Any]]:
        return [("type", [1, 2]), ("type", "a: 1")]


class Devices(Spec):
    """``trainer.devices``: a count, -1 (all), ``auto``, a list of device indices or a string such as ``0,1``."""

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return value >= 1 or value == -1
        if isinstance(value, (list, tuple)):
            return (
                len(value) > 0
                and len(set(value)) == len(value)
                and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
            )
        if isinstance(value, str):
            text = value.strip()
            return (
                text in ("auto", "-1")
                or bool(re.fullmatch(r"[0-9]+(\s*,\s*[0-9]+)*\s*,?", text))
                and ("," in text or int(text) >= 1)
            )
        return False

    def describe(self) -> str:
        return "a positive count, -1 (all), 'auto', a list of device indices or a string such as '0,1'"

    def samples(self) -> List[Tuple[str, Any]]:
        return [
            ("type", 2.5),
            ("type", True),
            ("type", {"a": 1}),
            ("range", 0),
            ("range", -2),
            ("range", "0"),
            ("range", "gpu7"),
            ("range", []),
            ("range", [0, 0]),
            ("range", [-1]),
        ]


#: the defaults every config starts from; files and overrides are merged on top
DEFAULTS: Dict[str, Any] = {
    "seed": 0,
    "task": "classification",
    "output_dir": "outputs/run",
    "init_weights": None,
    "data": {
        "name": "procedural",
        "batch_size": 16,
        "eval_batch_size": None,
        "num_workers": 0,
        "drop_last": False,
        "prefetch_graph": "auto",
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
        "label_smoothing": 0.0,
        "lovasz_weight": 0.0,
        "ema_decay": 0.0,
        "class_weights": "none",
        "schedule": "warmup_cosine",
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
        "test_votes": 1,
        "stop_after_epochs": None,
        "plots": True,
        "recalibrate_bn": False,
    },
}

#: the registered tasks (:mod:`gridify.tasks`) a config's ``task`` may name
TASKS = tuple(task_names())
#: ``data.name`` spellings that are not registry names: the dataset they mean
DATASET_ALIASES: Dict[str, str] = {"modelnet10": "modelnet", "modelnet40": "modelnet"}
#: ``trainer.precision`` values Lightning accepts (with the legacy spellings 32, 16, 64, "bf16")
PRECISIONS = (
    "32-true",
    "16-mixed",
    "bf16-mixed",
    "16-true",
    "bf16-true",
    "64-true",
    32,
    16,
    64,
    "32",
    "16",
    "64",
    "bf16",
)
#: ``trainer.strategy`` values (Lightning's registry names a config may use; ``auto`` picks one)
STRATEGIES = (
    "auto",
    "ddp",
    "ddp_spawn",
    "ddp_fork",
    "ddp_notebook",
    "ddp_find_unused_parameters_true",
    "ddp_find_unused_parameters_false",
    "ddp_spawn_find_unused_parameters_true",
    "ddp_spawn_find_unused_parameters_false",
    "ddp_fork_find_unused_parameters_true",
    "ddp_fork_find_unused_parameters_false",
    "fsdp",
    "fsdp_cpu_offload",
    "deepspeed",
    "deepspeed_stage_1",
    "deepspeed_stage_2",
    "deepspeed_stage_3",
)
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
#: ``optim.schedule`` values (:mod:`gridify.training.schedule`)
SCHEDULES = ("warmup_cosine", "one_cycle")


def dataset_names() -> List[str]:
    """Every ``data.name`` a config may use: the registered datasets and :data:`DATASET_ALIASES`."""
    return sorted(set(DATASETS.names()) | set(DATASET_ALIASES))


_LIMIT = AnyOf(
    Int(min=0),
    Num(min=0.0, max=1.0),
    nullable=True,
    text="null, a number of batches (integer >= 0) or a fraction in [0, 1]",
    doc="batches per epoch (validation / test: a seeded, class-stratified subset of that many batches)",
)

#: the declared keys of the top level and of the sections data (its loader keys), optim and trainer
SCHEMA: Dict[str, Any] = {
    "seed": Int(min=0, max=2**32 - 1, text="an integer in [0, 2**32 - 1]", doc="seed of everything random"),
    "task": Choice(
        task_names,
        doc="what the model predicts (gridify/tasks.py): one label per cloud "
        "(classification), per point of a shape (segmentation), per point of a scene in metres "
        "(scene_segmentation) or per sequence of clouds observed at (irregular) times "
        "(sequence_classification)",
    ),
    "output_dir": Str(doc="the run folder (checkpoints, logs, metrics, plots)"),
    "init_weights": Str(
        nullable=True,
        doc="start from trained weights (fine-tuning): a shipped model's name or a model.pt / .ckpt file of the "
        "same model and arguments; only the weights are taken (null: random initialization)",
    ),
    "data": {
        "name": Choice(dataset_names, doc="the dataset (a registry name or modelnet10 / modelnet40)"),
        "batch_size": Int(min=1, doc="clouds per training batch (per process)"),
        "eval_batch_size": Int(min=1, nullable=True, doc="clouds per validation / test batch (null: batch_size)"),
        "num_workers": Int(min=0, doc="DataLoader worker processes"),
        "drop_last": Bool(doc="drop the last incomplete training batch"),
        "prefetch_graph": Bool(
            also=("auto",),
            doc="build a gridified model's training graphs in the DataLoader "
            "workers (num_workers > 0), overlapping the step; auto: when training on a GPU",
        ),
        "augmentations": ListOf(
            AnyOf(Str(), Mapping()),
            nullable=True,
            text="a list of augmentations (names or mappings with 'name')",
            doc="training augmentations: rotate_z, rotate, scale, flip, "
            "jitter, point_dropout, resample, drop_strength (scenes: with probability p, a crop's intensity "
            "zeroed and has_strength 0), each a name or {name: ..., arguments}",
        ),
        "archive": Str(
            nullable=True,
            doc="the archive gridify download --config fetches for this config (gridify download --list), for a "
            "folder layout it unpacks into (the ModelNet40 recipes on data.name=folder: ModelNet40, the official "
            "OFF meshes in <class>/{train,test}/); null: the dataset's own",
        ),
        "train": Mapping(nullable=True, doc="dataset arguments for the train split only"),
        "val": Mapping(nullable=True, doc="dataset arguments for the validation split only"),
        "test": Mapping(nullable=True, doc="dataset arguments for the test split only"),
    },
    "optim": {
        "lr": Num(min=0.0, min_open=True, doc="AdamW learning rate (peak of the warm-up + cosine schedule)"),
        "weight_decay": Num(min=0.0, doc="AdamW weight decay"),
        "betas": ListOf(Num(min=0.0, max=1.0, max_open=True), length=2, doc="AdamW betas"),
        "warmup_epochs": Num(min=0.0, doc="epochs of linear warm-up (fractions allowed)"),
        "min_lr": Num(min=0.0, doc="learning rate at the end of the cosine (<= lr)"),
        "kernel_l2": Num(min=0.0, doc="weight of the kernel L2 penalty"),
        "label_smoothing": Num(min=0.0, max=1.0, max_open=True, doc="label smoothing of the cross-entropy"),
        "lovasz_weight": Num(
            min=0.0,
            max=1e6,
            doc="weight of the Lovász-softmax loss added to the cross-entropy (scene_segmentation only; 0: none)",
        ),
        "ema_decay": Num(
            min=0.0,
            max=1.0,
            max_open=True,
            doc="decay d of an exponential moving average of the weights (0: none): after step s, "
            "ema <- d_s * ema + (1 - d_s) * weights with d_s = min(d, (1 + s) / (10 + s)); the average "
            "validates, tests and is the run's model.pt",
        ),
        "class_weights": Choice(
            CLASS_WEIGHTS,
            doc="class weights of the cross-entropy from the training labels' "
            "counts n_c (datasets with label_counts(): scenes): inverse 1/n_c, inverse_sqrt "
            "1/sqrt(n_c), normalized to mean 1 over the classes with points (0 for the others)",
        ),
        "schedule": Choice(
            SCHEDULES,
            doc="the learning-rate schedule per step: warmup_cosine (linear warm-up over "
            "warmup_epochs, cosine down to min_lr) or one_cycle (torch's OneCycleLR: cosine from lr/25 "
            "up to lr over warmup_epochs, then down to lr/25e4; AdamW's beta1 cycles 0.95 -> 0.85 -> "
            "0.95; min_lr unused)",
        ),
    },
    "trainer": {
        "max_epochs": Int(min=1, doc="epochs to train"),
        "max_steps": Int(min=1, also=(-1,), doc="optimizer steps to train (-1: max_epochs decides)"),
        "accelerator": Choice(ACCELERATORS, doc="Lightning accelerator"),
        "devices": Devices(doc="devices per node (Lightning's devices)"),
        "num_nodes": Int(min=1, doc="machines"),
        "strategy": Choice(STRATEGIES, doc="Lightning strategy (ddp_spawn runs the whole run in each process)"),
        "precision": Choice(PRECISIONS, doc="Lightning precision (bf16-mixed: bf16 autocast)"),
        "log_every_n_steps": Int(
            min=1,
            doc="steps between logged training losses (CSV, TensorBoard) and console lines (also every 20 s; "
            "the plots draw every step)",
        ),
        "limit_train_batches": _LIMIT,
        "limit_val_batches": _LIMIT,
        "limit_test_batches": _LIMIT,
        "check_val_every_n_epoch": Int(min=1, doc="epochs between validations"),
        "num_sanity_val_steps": Int(min=-1, doc="validation batches run before training (-1: all)"),
        "gradient_clip_val": Num(min=0.0, nullable=True, doc="gradient norm clip (null: none)"),
        "accumulate_grad_batches": Int(min=1, doc="batches per optimizer step"),
        "deterministic": Bool(also=("warn",), doc="deterministic algorithms (Lightning's deterministic)"),
        "progress_bar": Bool(doc="progress bars in a terminal (lines otherwise; false: neither)"),
        "num_threads": Int(min=1, nullable=True, doc="torch CPU threads (null: torch's default)"),
        "checkpoint": {
            "every_n_epochs": Int(min=0, nullable=True, doc="epochs between last.ckpt saves"),
            "every_n_train_steps": Int(min=0, nullable=True, doc="steps between last.ckpt saves (null: none)"),
            "keep_all": Bool(doc="also keep one checkpoint per epoch"),
        },
        "test_ckpt": Choice(("best", "last"), doc="the checkpoint tested after training"),
        "test_votes": Int(min=1, doc="test-time views averaged per cloud"),
        "stop_after_epochs": Int(min=1, nullable=True, doc="stop this process after that many epochs (resumable)"),
        "plots": Bool(doc="write plots/*.png"),
        "recalibrate_bn": Bool(
            doc="re-estimate the BatchNorm running statistics on the training data (no "
            "gradient) before each validation and the test, so eval mode uses statistics of the "
            "current weights (those of the saved checkpoints too)"
        ),
    },
}

_PROB = dict(min=0.0, max=1.0, max_open=True)
#: the declared dataset arguments (``data.<key>`` and ``data.<split>.<key>``) of the registered datasets
DATASET_KEYS: Dict[str, Spec] = {
    "root": Str(nullable=True, doc="data root (default: --data-root, $GRIDIFY_DATA, datasets/)"),
    "seed": Int(min=0, max=2**32 - 1, text="an integer in [0, 2**32 - 1]", doc="dataset seed (default: seed)"),
    "version": Choice(("10", "40", 10, 40), doc="modelnet: 10 or 40 (modelnet10 / modelnet40 set it)"),
    "source": Str(doc="which release of the dataset to read (see the dataset)"),
    "num_points": Int(min=1, nullable=True, doc="points per cloud (null: every point)"),
    "use_normals": Bool(doc="features x = xyz + normals"),
    "estimate_normals": Int(
        min=1,
        nullable=True,
        doc="estimate the normals from xyz with this many neighbours (local PCA, "
        "gridify.ops.estimate_normals) instead of reading them (null: the files' own); needs use_normals",
    ),
    "normalize": Bool(
        also=("sphere", "cube"),
        doc="centre and scale each cloud: true or sphere (the centroid at 0, into the unit sphere), cube (the bounding "
        "box centred, its longest side spanning the grid box [-1, 1]^3); false: as read",
    ),
    "val_fraction": Num(min=0.0, max=1.0, max_open=True, doc="share of each class of train held out for validation"),
    "test_fraction": Num(
        min=0.0, max=1.0, min_open=True, max_open=True, nullable=True, doc="folder: share carved out as the test split"
    ),
    "columns": ListOf(Str(), min_len=1, nullable=True, doc="folder: column names of text / npy files"),
    "num_classes": Int(min=1, nullable=True, doc="folder: number of classes / parts"),
    "mesh_samples": Int(min=1, doc="points sampled from each mesh"),
    "num_samples_per_class": Int(min=1, doc="procedural: shapes per class; dynamic_shapes: sequences per class"),
    "classes": ListOf(
        Str(),
        min_len=1,
        nullable=True,
        doc="procedural: the shape classes (null: all); "
        "dynamic_shapes: the motion classes (null: all); scenes: the class names (null: the layout's)",
    ),
    "categories": ListOf(Str(), min_len=1, nullable=True, doc="shapenet: the categories (null: all)"),
    "noise_std": Num(min=0.0, doc="procedural: Gaussian noise on the points"),
    "cache": Bool(doc="modelnet: cache sampled meshes; scenes: keep the scenes read in memory"),
    "keep_in_memory": Bool(
        doc="modelnet, folder: keep every sample in memory once read and normalized (later epochs skip the files; "
        "each DataLoader worker keeps its own)"
    ),
    "cache_dir": Str(nullable=True, doc="modelnet: cache folder"),
    "align_up_axis": Bool(doc="modelnet: rotate so z is up"),
    "download": Bool(doc="fetch the archive when missing"),
    "skip_missing": Bool(doc="skip files listed but missing"),
    "layout": Choice(lambda: sorted(LAYOUTS), doc="scene: the folder layout of the scenes"),
    "features": AnyOf(
        Choice(lambda: list(SCENE_FEATURES)),
        ListOf(Choice(lambda: list(SCENE_FEATURES))),
        nullable=True,
        text=f"null, a feature name or a list of them ({', '.join(SCENE_FEATURES)})",
        doc="scenes: the columns of x (null: the dataset's own): xyz, color, normal, strength (alias intensity), "
        "height (z above the scene's 1st percentile of z), strength_scan (intensity minus the scan's median over its "
        "p90 - p10), ground_height (z above the local ground), verticality and planarity (local PCA of the 16 "
        "nearest 0.1 m voxels), has_strength (1 where the scan has intensity, 0 where it has none: strength 0 "
        "then; with the drop_strength augmentation one model labels both); the scene-level ones are computed on "
        "the whole scan, before any crop",
    ),
    "scenes": ListOf(Str(), min_len=1, nullable=True, doc="scenes: read only these scene names (null: all)"),
    "sequences": ListOf(
        AnyOf(Str(), Int(min=0), text="a name or a number"),
        min_len=1,
        nullable=True,
        doc="semantickitti: the sequences to read instead of the split's official ones",
    ),
    "test_area": Int(min=1, max=6, doc="s3dis: the Area held out for val / test"),
    "unknown": Str(doc="s3dis: what another class becomes (ignore, error or a class name)"),
    "voxel_size": Num(
        min=MIN_VOXEL_SIZE,
        nullable=True,
        doc="scenes: grid subsampling voxel edge in metres "
        "before cropping (train; null: none); whole-scene evaluation uses it too; at least 1e-6 (a micrometre: "
        "finer voxels overflow the voxel coordinates of a scene)",
    ),
    "max_points": Int(
        min=1,
        nullable=True,
        doc="scenes: points of a training crop around a random centre (null: "
        "the whole scene); whole-scene evaluation cuts larger fragments into crops of it",
    ),
    "crop_centre": Choice(
        CROP_CENTRES,
        doc="scenes: how a training crop's centre is drawn: random (a point drawn uniformly: crops land "
        "where the points are dense) or class_balanced (a class drawn uniformly among the scene's, then one of "
        "its points)",
    ),
    "num_scenes": Int(min=1, doc="scene_procedural: scenes in the split"),
    "kind": Choice(("indoor", "outdoor"), doc="scene_procedural: rooms or LiDAR scans"),
    "beams": Int(min=1, doc="scene_procedural: beams of the outdoor sensor"),
    "max_range": Num(min=0.0, min_open=True, doc="scene_procedural: range of the outdoor sensor (metres)"),
    "num_frames": Int(min=1, doc="dynamic_shapes: frames of a regular sequence (the most of an irregular one)"),
    "sampling": Choice(
        SAMPLINGS,
        doc="dynamic_shapes: observation times: regular, irregular (jittered, frames "
        "dropped) or mixed (one of the two per sequence)",
    ),
    "frame_interval": Num(
        min=FRAME_INTERVAL_RANGE[0],
        max=FRAME_INTERVAL_RANGE[1],
        doc="dynamic_shapes: time between regular frames (1e-6 to 1e6: the times are float32, where a "
        "finer or coarser interval underflows to 0 or overflows)",
    ),
    "jitter": Num(
        min=0.0, max=0.5, max_open=True, doc="dynamic_shapes: irregular times move by up to jitter * frame_interval"
    ),
    "drop_prob": Num(**_PROB, doc="dynamic_shapes: probability that an irregular frame is dropped"),
    "min_frames": Int(min=1, doc="dynamic_shapes: frames an irregular sequence keeps at least"),
    "noise": Num(min=0.0, max=0.02, doc="dynamic_shapes: Gaussian noise on the points"),
    "resample": Bool(doc="dynamic_shapes: fresh surface points in every frame (false: one set moves with the object)"),
}
#: dataset arguments the run sets itself, with what to do instead
RUN_DATA_KEYS = {
    "split": "the run reads each split itself (set per-split arguments in data.train/val/test)",
    "task": "it follows the top-level task",
    "transform": "use data.augmentations",
}

#: the declared model arguments (``model.<key>``) of the registered models
MODEL_KEYS: Dict[str, Spec] = {
    "in_channels": Int(min=1, doc="point features (default: from the data)"),
    "num_classes": Int(min=1, doc="classes / parts (default: from the data)"),
    "num_categories": Int(min=0, doc="object categories of a segmenter (default: from the data)"),
    "resolution": PerAxis(Int(min=2), doc="grid resolution R (R^3 nodes; scene segmenter: also per axis)"),
    "extent": ListOf(
        Num(min=0.0, min_open=True),
        length=3,
        nullable=True,
        doc="scene segmenter: per-axis grid box size in metres (null: fit each cloud's box)",
    ),
    "box_trim": Num(
        min=0.0,
        max=0.5,
        max_open=True,
        doc="scene segmenter: share of a crop's points left beyond each end of every axis of its box (0: bounds)",
    ),
    "scale_input": Bool(doc="scene segmenter: every point also gets its crop's box size log(s / 10 m) (3 inputs)"),
    "k": Int(min=1, doc="neighbours per grid node / point"),
    "hidden_channels": Int(min=1, doc="width C"),
    "backbone": Choice(BACKBONES.names, doc="grid backbone"),
    "depth": Int(min=1, doc="blocks"),
    "dropout": Num(**_PROB, doc="dropout probability"),
    "kernel_size": AnyOf(
        Int(min=1, odd=True),
        Choice(("global",)),
        text="an odd positive integer or 'global'",
        doc="backbone kernel size",
    ),
    "omega0": Num(min=0.0, max=1e4, min_open=True, doc="frequency scale of the positional field / kernels"),
    "aggr": Choice(AGGREGATIONS, doc="gridification aggregation"),
    "message": Choice(MESSAGES, doc="gridification message"),
    "pos_embedding": Choice(POS_EMBEDDINGS.names, doc="positional field"),
    "pool": Choice(POOLS, doc="global pooling over the grid"),
    "backbone_kwargs": Mapping(nullable=True, doc="extra backbone arguments"),
    "bounds": ListOf(
        AnyOf(Num(), ListOf(Num(), length=3), text="a number or 3 numbers"), length=2, doc="grid box (lower, upper)"
    ),
    "outside": Choice(("error", "allow"), doc="points outside the grid box"),
    "message_channels": Int(min=1, nullable=True, doc="width of the per-edge messages"),
    "pos_hidden_channels": Int(min=1, nullable=True, doc="hidden width of the positional field"),
    "point_channels": Int(min=1, doc="segmenter: point branch width"),
    "kernel_net": Choice(KERNELS.names, doc="point CCNN: kernel network"),
    "kernel_hidden": Int(min=1, doc="point CCNN: kernel network width"),
    "kernel_layers": Int(min=1, doc="point CCNN: kernel network layers"),
    "radius": Num(min=0.0, min_open=True, doc="point CCNN: neighbourhood radius"),
    "learnable_radius": Bool(doc="point CCNN: learn the radius"),
    "mask": Bool(doc="point CCNN: Gaussian mask"),
    "mask_init": Num(min=0.0, min_open=True, doc="point CCNN: initial mask width"),
    "chunk_size": Int(min=1, nullable=True, doc="point CCNN: points per chunk"),
    "checkpoint": Bool(doc="point CCNN: activation checkpointing"),
    "ratios": ListOf(Num(min=0.0, max=1.0, min_open=True), min_len=1, doc="PointNet++: sampling ratios"),
    "radii": ListOf(Num(min=0.0, min_open=True), min_len=1, doc="PointNet++: ball radii"),
    "max_num_neighbors": Int(min=1, doc="PointNet++: neighbours per ball"),
    "rnn": Choice(RNNS, doc="temporal: recurrent cell"),
    "rnn_hidden": Int(min=1, doc="temporal: RNN state size"),
    "cfc_mode": Choice(CFC_MODES, doc="temporal: CfC mode"),
    "cfc_backbone_units": Int(min=1, doc="temporal: CfC backbone width"),
    "cfc_backbone_layers": Int(min=0, doc="temporal: CfC backbone layers"),
    "cfc_backbone_activation": Choice(lambda: sorted(CFC_ACTIVATIONS), doc="temporal: CfC backbone activation"),
    "cfc_backbone_dropout": Num(**_PROB, doc="temporal: CfC backbone dropout"),
    "time_scale": Num(
        min=TIME_SCALE_RANGE[0],
        max=TIME_SCALE_RANGE[1],
        doc="temporal: multiplies the elapsed times (1e-12 to 1e12: the scaled times are float32)",
    ),
    "first_timespan": Num(
        min=0.0, max=TIME_SCALE_RANGE[1], doc="temporal: elapsed time of the first frame (float32: at most 1e12)"
    ),
    "frame_readout": Choice(READOUTS, doc="temporal: per-frame readout"),
    "readout_channels": Int(min=1, doc="temporal: channels of the flatten readout"),
    "frame_features": Int(min=1, doc="temporal: frame embedding size"),
    "frame_delta": Bool(doc="temporal: also feed the change of the embedding"),
}
#: models that forward their other keyword arguments to another model's constructor
FORWARDED_KWARGS = {"temporal_cfc": "gridified_classifier"}


def check_values(prefix: str, values: Dict[str, Any], specs: Dict[str, Any]) -> None:
    """Check the keys of ``values`` (a section, ``prefix`` its dotted name) against ``specs``: unknown keys,
    sub-sections, then each value."""
    for key, value in values.items():
        name = f"{prefix}.{key}" if prefix else key
        if key not in specs:
            raise ConfigError(f"unknown key {name}; known keys of {prefix or 'the config'}: {', '.join(sorted(specs))}")
        spec = specs[key]
        if isinstance(spec, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{name} must be a mapping, got {value!r}")
            check_values(name, value, spec)
        else:
            spec.check(name, value)


def constructor_keys(cls: Any, skip: Iterable[str] = ("self",)) -> Tuple[List[str], bool]:
    """The keyword argument names of ``cls``'s constructor and whether it takes ``**kwargs`` too."""
    params = inspect.signature(cls).parameters.values()
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip]
    return names, any(p.kind == p.VAR_KEYWORD for p in params)


def model_keys(name: str) -> List[str]:
    """The ``model.*`` keys model ``name`` takes (with those it forwards, :data:`FORWARDED_KWARGS`)."""
    keys, _ = constructor_keys(MODELS.get(name))
    if name in FORWARDED_KWARGS:
        keys += [k for k in model_keys(FORWARDED_KWARGS[name]) if k not in keys]
    return keys


def check_model_section(model: Dict[str, Any]) -> None:
    """``model``: a registered ``name`` and the keyword arguments its constructor takes, each within its
    declared type and range (:data:`MODEL_KEYS`)."""
    name = model.get("name")
    if name not in MODELS:
        raise ConfigError(f"model.name: unknown model {name!r}; known models: {', '.join(MODELS.names())}")
    known = model_keys(name)
    for key, value in model.items():
        if key == "name":
            continue
        if key not in known:
            raise ConfigError(f"unknown key model.{key} for model {name}; its keys: {', '.join(sorted(known))}")
        if key in MODEL_KEYS:
            MODEL_KEYS[key].check(f"model.{key}", value)


def dataset_keys(name: str) -> List[str]:
    """The dataset arguments ``data.*`` takes for dataset ``name`` (ModelNet's ``name`` spelled ``version``)."""
    cls_name = DATASET_ALIASES.get(name, name)
    keys, _ = constructor_keys(DATASETS.get(cls_name))
    if cls_name == "modelnet":  # ModelNet's own "name" (10 / 40) is spelled data.version
        keys = [k for k in keys if k != "name"] + ["version"]
    return keys


def check_dataset_section(data: Dict[str, Any], loader_keys: Sequence[str]) -> None:
    """The dataset arguments of ``data`` and of ``data.train/val/test``: keys the dataset ``data.name`` takes,
    each within its declared type and range (:data:`DATASET_KEYS`)."""
    name = data["name"]
    known = dataset_keys(name)
    sections = [("data", {k: v for k, v in data.items() if k not in loader_keys})]
    sections += [(f"data.{s}", data.get(s) or {}) for s in ("train", "val", "test")]
    for prefix, values in sections:
        for key, value in values.items():
            if key in RUN_DATA_KEYS:
                raise ConfigError(f"{prefix}.{key} is set by the run: {RUN_DATA_KEYS[key]}")
            if key not in known:
                raise ConfigError(
                    f"unknown key {prefix}.{key} for dataset {name}; its keys: "
                    f"{', '.join(sorted(set(known) - set(RUN_DATA_KEYS)))}"
                )
            if key in DATASET_KEYS:
                DATASET_KEYS[key].check(f"{prefix}.{key}", value)


def _named_key(message: str, keys: Iterable[str]) -> Optional[str]:
    """The key a constructor's message is about: ``Where: <key> must ...``, else the first key it names."""
    keys = list(keys)
    m = re.match(r"^[\w.]+: (\w+) must\b", message)
    if m and m.group(1) in keys:
        return m.group(1)
    for key in sorted(keys, key=len, reverse=True):
        if re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message):
            return key
    return None


def model_error(
    name: str, kwargs: Dict[str, Any], exc: BaseException, build: Optional[Callable[[Dict[str, Any]], Any]] = None
) -> ConfigError:
    """A model constructor's ValueError/TypeError as a :class:`ConfigError` naming ``model.<key>``.

    The key is the one the message names (``Gridification: k must be ...``); when it names none
    (``RegularGrid: upper must exceed lower``), ``build(kwargs)`` is tried once without each given key
    in turn (the data-filled sizes last): the first key whose removal changes the outcome is named."""
    message = str(exc)
    key = _named_key(message, kwargs)
    if key is None and build is not None:
        key = _culprit(kwargs, message, build)
    where = f"model.{key}" if key is not None else f"model ({name})"
    return ConfigError(f"{where}: {message}")


#: a Python value as a dataset's message writes it after ``key=``: a literal, a quoted string or a list
_PY_VALUE = r"True|False|None|'[^']*'|\"[^\"]*\"|\[[^\]]*\]|[\w.+-]+"


def _yaml_spelling(text: str) -> str:
    """``text``, a Python literal (``False``, ``'v0_points'``, ``['Mug']``), as the command line's YAML writes it
    (``false``, ``v0_points``, ``[Mug]``); anything else as it is."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text

    def spell(v: Any) -> str:
        if isinstance(v, bool) or v is None:
            return {True: "true", False: "false", None: "null"}[v]
        if isinstance(v, str):
            return v if re.fullmatch(r"[\w./-]+", v) else repr(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(spell(x) for x in v) + "]"
        return str(v)

    return spell(value)


def dataset_message(
    name: str, split: str, keys: Iterable[str], exc: BaseException, per_split: Sequence[str] = (), where: bool = True
) -> str:
    """A dataset constructor's message in the words of the config.

    Every ``key=value`` of one of the dataset's arguments ``keys`` reads ``data.key=value`` in YAML spelling
    (``data.<split>.key`` when ``per_split``, the split's own section, set it); ``root=`` is ``--data-root``.
    With ``where``, a message about one argument (``ShapeNetPart: categories must ...``) starts with its key
    (``data.categories: ...``), any other with ``data (<name>, split '<split>'):`` and a space."""
    message = str(exc)
    keys = [k for k in keys if k not in ("split", "transform")]

    def key_of(k: str) -> str:
        return "--data-root" if k == "root" else (f"data.{split}.{k}" if k in per_split else f"data.{k}")

    for key in sorted(keys, key=len, reverse=True):
        pattern = rf"(?<![\w.]){re.escape(key)}=({_PY_VALUE})"
        message = re.sub(pattern, lambda m, k=key: f"{key_of(k)}={_yaml_spelling(m.group(1))}", message)
    if not where:
        return message
    m = re.match(r"^[\w.]+(?: \([^)]*\))?: (\w+) must\b", message)
    return f"{key_of(m.group(1)) if m and m.group(1) in keys else f'data ({name}, split {split!r})'}: {message}"


def _culprit(kwargs: Dict[str, Any], message: str, build: Callable[[Dict[str, Any]], Any]) -> Optional[str]:
    """The first key of ``kwargs`` without which ``build`` no longer fails with ``message``."""
    filled = ("in_channels", "num_classes", "num_categories")
    for key in sorted(kwargs, key=lambda k: k in filled):
        if key in ("in_channels", "num_classes"):
            continue
        try:
            build({k: v for k, v in kwargs.items() if k != key})
        except Exception as exc:  # noqa: BLE001 - any other outcome points at this key
            if str(exc) == message:
                continue
        return key
    return None


_OPTIMIZER_WORDS = (("learning rate", "lr"), ("beta", "betas"), ("weight_decay", "weight_decay"), ("eps", "eps"))


def optimizer_error(exc: BaseException) -> ConfigError:
    """An optimizer's ValueError as a :class:`ConfigError` naming ``optim.<key>``."""
    message = str(exc)
    key = next((k for word, k in _OPTIMIZER_WORDS if word in message.lower()), None)
    return ConfigError(f"{'optim.' + key if key else 'optim'}: {message}")


def trainer_error(tr: Dict[str, Any], exc: BaseException) -> ConfigError:
    """An error of Lightning's ``Trainer(...)`` as a :class:`ConfigError` naming the ``trainer`` key it is
    about (else the accelerator, devices, strategy and precision it was given)."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    key = _named_key(message.replace("`", " "), [k for k in tr if k != "checkpoint"])
    if key is not None:
        return ConfigError(f"trainer.{key}={tr[key]!r}: {message}")
    given = ", ".join(f"{k}={tr.get(k)!r}" for k in ("accelerator", "devices", "strategy", "precision"))
    return ConfigError(f"trainer ({given}): {message}")


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


if __name__ == "__main__":
    main()
