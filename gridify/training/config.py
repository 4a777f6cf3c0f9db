"""The run config: defaults, shipped configs by name, ``_base_`` inheritance, overrides and validation.

A config is a mapping of the sections in :data:`DEFAULTS`. :func:`resolve_config` starts from the
defaults, merges a YAML file on top (:func:`deep_merge`), applies command-line overrides
(:func:`apply_override`, values parsed as YAML) and validates the result (:func:`check_config`) against
the declared type and range of every key (:mod:`.schema`: defaults, types, ranges, the dataset and model
arguments) and the rules between keys (``optim.min_lr <= optim.lr``, the Lovász weight for scene tasks only,
the columns of every split's ``data.features`` and ``model.in_channels`` alike), raising :class:`ConfigError`
with a message that names the offending key. Merging is
``merge(a, b)[k] = merge(a[k], b[k])`` when both are mappings, else ``b[k]`` (lists replace); a
``model`` section that names another model than the one below it replaces that section whole.

A config is named by a path or by the name of a config shipped in ``gridify/configs``
(:func:`find_config`: ``procedural``, ``modelnet10_fast``, ``temporal/dynamic_shapes``). A file
may start from others: ``_base_: [a, b.yaml]`` (a name or a list, each a path relative to the
file or a shipped name) gives ``cfg = merge(merge(merge(DEFAULTS, a), b), file)``, then the
overrides (:func:`load_config_file`); a cycle or a missing base is a :class:`ConfigError`, and so is a
config or base path that is a folder or a FIFO (said as such; a FIFO is never opened).

``data.augmentations`` is parsed here too (:func:`parse_augmentations`): the entries are checked
by building each transform once. No Lightning import.
"""

from __future__ import annotations

import copy
import inspect
import os
import re
import stat
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import yaml

from gridify._commands import CONFIG_DIR, OVERRIDE_KEY_PART, shipped_config_names
from gridify.datasets.scene_base import SCENE_FEATURES, check_features
from gridify.registry import DATASETS
from gridify.tasks import get_task, task_names
from gridify.transforms import (
    RandomDropStrength,
    RandomFlip,
    RandomJitter,
    RandomPointDropout,
    RandomResample,
    RandomRotate,
    RandomRotateZ,
    RandomScale,
)

from .config_errors import check_dataset_section, check_model_section, check_values, dataset_keys
from .config_keys import DATASET_ALIASES, DEFAULTS, SCHEMA, TASKS, dataset_names
from .specs import ConfigError

__all__ = [
    "ConfigError",
    "DEFAULTS",
    "SECTIONS",
    "TASKS",
    "DATASETS",
    "DATASET_ALIASES",
    "DATA_LOADER_KEYS",
    "CLOSED_SECTIONS",
    "PRIMARY_METRIC",
    "AUGMENTATIONS",
    "CONFIG_DIR",
    "BASE_KEY",
    "yaml_value",
    "load_yaml",
    "shipped_configs",
    "find_config",
    "load_config_file",
    "deep_merge",
    "merge_configs",
    "parse_override",
    "apply_override",
    "parse_augmentations",
    "dataset_names",
    "check_config",
    "feature_width",
    "resolve_config",
]


SECTIONS = tuple(DEFAULTS)
#: the key of a config file that names the configs it starts from
BASE_KEY = "_base_"
#: keys of ``data`` that configure loading rather than the dataset constructor
DATA_LOADER_KEYS = (
    "name",
    "batch_size",
    "eval_batch_size",
    "num_workers",
    "drop_last",
    "prefetch_graph",
    "augmentations",
    "archive",
    "train",
    "val",
    "test",
)
#: sections whose keys are checked against the defaults (the others are free-form kwargs)
CLOSED_SECTIONS = ("optim", "trainer")
#: task -> its primary validation metric (:attr:`gridify.tasks.Task.primary_metric`; a view of the tasks)
PRIMARY_METRIC = {name: get_task(name).primary_metric for name in task_names()}
#: the training augmentations ``data.augmentations`` may name, with their transforms
AUGMENTATIONS: Dict[str, Callable[..., Any]] = {
    "rotate_z": RandomRotateZ,
    "rotate": RandomRotate,
    "scale": RandomScale,
    "flip": RandomFlip,
    "jitter": RandomJitter,
    "point_dropout": RandomPointDropout,
    "drop_strength": RandomDropStrength,
    "resample": RandomResample,
}


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also reads ``1e-3`` (no dot) as a float, as people write it."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def yaml_value(text: str) -> Any:
    """Parse one scalar/list/dict written in YAML (the value side of an override)."""
    return yaml.load(text, Loader=_Loader)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """``line 3, column 7: mapping values are not allowed here`` (PyYAML's message spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else str(problem)


def _not_a_file(path: Path) -> Optional[str]:
    """What ``path`` is when it exists but is not a regular file (``is a folder, not a config file``), else None.
    Only ``stat`` is used: a FIFO is never opened (that would block)."""
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a config file"
    kinds = (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    kind = next((name for test, name in kinds if test(mode)), "something else")
    return f"is not a regular file but {kind}, not a config file"


def load_yaml(path: os.PathLike | str) -> Dict[str, Any]:
    """The mapping in a YAML config file (``{}`` for an empty file)."""
    path = Path(path)
    if not path.is_file():
        what = _not_a_file(path)
        raise ConfigError(f"{path} {what}" if what else f"config file not found: {path}")
    try:
        data = yaml.load(path.read_text(), Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({_yaml_problem(exc)})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def shipped_configs() -> List[str]:
    """The names of the training configs shipped in ``CONFIG_DIR`` (``procedural``, ``modelnet10``, ...,
    then those in sub-folders by their relative name: ``temporal/dynamic_shapes``)."""
    return shipped_config_names()


def find_config(name: os.PathLike | str, relative_to: Optional[Path] = None) -> Path:
    """The config file ``name`` means: a path (relative to the folder ``relative_to``, else to the working
    directory), the same with ``.yaml`` added, else the shipped config of that name (``procedural``,
    ``modelnet10.yaml``)."""
    text = os.fspath(name)
    if not text:
        raise ConfigError("the config name is empty")
    given = Path(text).expanduser()
    local = given if given.is_absolute() or relative_to is None else relative_to / given
    others = []  # candidates that exist but are not regular files
    for base in (local, CONFIG_DIR / given):
        for cand in (base, base.with_name(base.name + ".yaml")):
            if cand.is_file():
                return cand
            what = _not_a_file(cand)
            if what:
                others.append(f"{cand} {what}")
    if others:
        raise ConfigError(f"config {text!r}: {others[0]}")
    raise ConfigError(
        f"config {text!r} not found: no such file, and no shipped config of that name "
        f"(shipped: {', '.join(shipped_configs())})"
    )


def _base_names(data: Dict[str, Any], path: Path) -> List[str]:
    """The ``_base_`` entries of a config file, as a list of names (checked)."""
    bases = data.pop(BASE_KEY, None)
    if bases is None:
        return []
    bases = [bases] if isinstance(bases, str) else bases
    if not isinstance(bases, list) or not all(isinstance(b, str) and b for b in bases):
        raise ConfigError(f"{path}: {BASE_KEY} must be a config name or a list of them, got {bases!r}")
    return bases


def load_config_file(
    name: os.PathLike | str, relative_to: Optional[Path] = None, _chain: Tuple[Path, ...] = ()
) -> Dict[str, Any]:
    """The mapping of config ``name`` (see :func:`find_config`) with its ``_base_`` configs merged in:
    the bases in order, then the file itself. ``_chain`` holds the files that include it (cycle check)."""
    try:
        path = find_config(name, relative_to)
    except ConfigError as exc:
        if not _chain:
            raise
        raise ConfigError(f"{_chain[-1]}: {BASE_KEY} {os.fspath(name)!r}: {exc}") from None
    key = path.resolve()
    if key in _chain:
        cycle = " -> ".join(p.name for p in (*_chain[_chain.index(key) :], key))
        raise ConfigError(f"{_chain[-1]}: {BASE_KEY} cycle: {cycle}")
    data = load_yaml(path)
    merged: Dict[str, Any] = {}
    for base in _base_names(data, path):
        merged = merge_configs(merged, load_config_file(base, path.parent, (*_chain, key)))
    return merge_configs(merged, data)


def merge_configs(base: Dict[str, Any], update: Dict[str, Any]) -> Dict[str, Any]:
    """:func:`deep_merge` of two config files, except that a ``model`` section naming another model
    than ``base``'s replaces it (the arguments of one model mean nothing to another: a config may start
    from a scene recipe and swap in a peer model)."""
    out = deep_merge(base, update)
    new, old = update.get("model"), base.get("model")
    if (
        isinstance(new, dict)
        and isinstance(old, dict)
        and "name" in new
        and "name" in old
        and new["name"] != old["name"]
    ):
        out["model"] = copy.deepcopy(new)
    return out


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
    if not key or any(not OVERRIDE_KEY_PART.fullmatch(p) for p in parts):
        raise ConfigError(
            f"malformed override {text!r}: the key {key!r} must be dot-separated names (e.g. model.resolution=13)"
        )
    try:
        value = yaml_value(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"malformed override {text!r}: the value is not valid YAML ({exc})") from None
    return parts, value


def apply_override(cfg: Dict[str, Any], text: str) -> None:
    """Set the key named by the override ``text`` in ``cfg`` (in place), creating missing sub-sections."""
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


def _check_data(data: Dict[str, Any]) -> None:
    """``data``: the loader keys (:data:`~.schema.SCHEMA`), the augmentations, then the dataset arguments of the
    dataset ``data.name`` (and of ``data.train/val/test``)."""
    SCHEMA["data"]["name"].check("data.name", data.get("name"))
    check_values("data", {k: v for k, v in data.items() if k in DATA_LOADER_KEYS}, SCHEMA["data"])
    parse_augmentations(data.get("augmentations"))
    check_dataset_section(data, DATA_LOADER_KEYS)


def feature_width(features: Any) -> int:
    """The columns of ``x`` that scene ``features`` (a name or a list of names) give: their widths, or the
    3 of ``xyz`` when there are none (the scene datasets' ``in_channels``)."""
    names = [features] if isinstance(features, str) else list(features)
    return sum(SCENE_FEATURES[f] for f in names) or 3


def _check_feature_widths(cfg: Dict[str, Any]) -> None:
    """``data.features`` of every split and ``model.in_channels`` must give the model the same number of
    columns (a mismatch failed at the first forward pass of validation or test, inside the model)."""
    data = cfg["data"]
    if "features" not in dataset_keys(data["name"]):
        return
    split_features = {s: (data.get(s) or {}).get("features", data.get("features")) for s in ("train", "val", "test")}
    key = {s: f"data.{s}.features" if "features" in (data.get(s) or {}) else "data.features" for s in split_features}
    known = {s: f for s, f in split_features.items() if f is not None}
    for s, f in known.items():  # a name given twice (or with its alias) would add the same column twice
        try:
            check_features(key[s], f)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    widths = {s: feature_width(f) for s, f in known.items()}
    for s in known:
        if s != "train" and "train" in known and widths[s] != widths["train"]:
            raise ConfigError(
                f"{key[s]}: {known[s]} gives {widths[s]} column(s) per point but {key['train']} {known['train']} "
                f"gives the model {widths['train']} (train); every split must give the model the same columns"
            )
    given = cfg["model"].get("in_channels")
    if given is not None and "train" in known and given != widths["train"]:
        raise ConfigError(
            f"{key['train']}: {known['train']} gives {widths['train']} column(s) per point but model.in_channels is "
            f"{given}: give the features the model takes (a trained model's: its checkpoint's data.features), or "
            f"leave model.in_channels out when training (it follows the data)"
        )


def check_config(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """Validate a merged config against :data:`~.schema.SCHEMA` (every key's type and range, the dataset and
    model arguments against their constructors); raises :class:`ConfigError` naming the offending key."""
    unknown = [k for k in cfg if k not in SECTIONS]
    if unknown:
        raise ConfigError(f"unknown config section(s) {unknown}; known sections: {', '.join(SECTIONS)}")
    for sec in ("data", "model", "optim", "trainer"):
        if not isinstance(cfg.get(sec), dict):
            raise ConfigError(f"config section {sec!r} must be a mapping, got {cfg.get(sec)!r}")
    for key in ("seed", "task", "output_dir", "init_weights"):
        SCHEMA[key].check(key, cfg.get(key))
    _check_data(cfg["data"])
    check_model_section(cfg["model"])
    _check_feature_widths(cfg)
    for sec in CLOSED_SECTIONS:
        check_values(sec, cfg[sec], SCHEMA[sec])
    optim = cfg["optim"]
    if optim.get("min_lr", 0.0) > optim.get("lr", DEFAULTS["optim"]["lr"]):
        raise ConfigError(f"optim.min_lr must be at most optim.lr ({optim['lr']!r}), got {optim['min_lr']!r}")
    if optim.get("lovasz_weight", 0.0) > 0 and "lovasz" not in inspect.signature(get_task(cfg["task"]).loss).parameters:
        raise ConfigError(
            f"optim.lovasz_weight: the Lovász-softmax loss is for scene_segmentation, not task {cfg['task']}; "
            f"set optim.lovasz_weight: 0"
        )
    return cfg


def resolve_config(
    config_path: Optional[str], overrides: Sequence[str] = (), base: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """Defaults (or ``base``) <- config (a path or a shipped name, with its ``_base_`` configs) <- overrides,
    validated."""
    cfg = copy.deepcopy(DEFAULTS if base is None else base)
    if config_path:
        file_cfg = load_config_file(config_path)
        unknown = [k for k in file_cfg if k not in SECTIONS]
        if unknown:
            raise ConfigError(
                f"{config_path}: unknown config section(s) {unknown}; known sections: {', '.join(SECTIONS)}"
            )
        cfg = merge_configs(cfg, file_cfg)
    for text in overrides:
        apply_override(cfg, text)
    return check_config(cfg)
