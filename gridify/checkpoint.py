"""Checkpoint files: plain exports and safe loading (``torch.load(..., weights_only=True)``).

``model.pt`` (written by :func:`export_model`) holds the bare model's ``state_dict`` plus plain
metadata (model name and keyword arguments, task, dataset info, config, gridify version);
Lightning ``.ckpt`` files written by :mod:`gridify.training` carry the same metadata in their
``hyper_parameters``. :func:`load_checkpoint` reads either without unpickling any code.

Both record the task their network serves when they are written (the entry ``model_task``, :data:`MODEL_TASK`:
:func:`model_task` of the model written), and a reader checks the file's ``task`` against that record
(:func:`check_task`); only an older file without it has the task of its model found again from the model's class.

Every entry a loader uses is type-checked (:func:`check_payload`): a checkpoint whose
``state_dict``, ``info``, ``config``, ``model_kwargs`` or class names have the wrong type, or whose
weights hold NaN/Inf or miss parameters, raises :class:`CheckpointError` naming the entry
instead of an error from deep inside torch. Widths and resolutions in ``model_kwargs`` that
would exceed the allocation limit are refused by the model constructors before anything is
allocated.

This module needs only PyTorch and NumPy; it never imports Lightning.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

import numpy as np
import torch

from ._checks import check_choice, fail, is_int
from ._files import atomic_write
from ._pretrained import PRETRAINED, not_found_hint, pretrained_file, shipped_name
from .nn.reparam import is_reparameterizable, reparameterize_model
from .registry import TASKS as TASKS_REGISTRY
from .tasks import get_task, task_names
from .transforms import NORMALIZATIONS, normalization_name, normalization_of_record

__all__ = [
    "load_weights",
    "plain",
    "atomic_torch_save",
    "export_model",
    "check_export_meta",
    "inference_settings",
    "TASKS",
    "model_task",
    "MODEL_TASK",
    "recorded_model_task",
    "task_served",
    "check_task",
    "CheckpointError",
    "checkpoint_file",
    "pretrained_path",
    "load_checkpoint",
    "reparameterize_model",
    "build_model_from_checkpoint",
    "check_payload",
]


def plain(obj: Any) -> Any:
    """``obj`` as nested dict/list/str/int/float/bool/None (what weights_only=True accepts)."""
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot store {type(obj).__name__} ({obj!r}) in a plain checkpoint")


def atomic_torch_save(obj: Any, path: os.PathLike | str) -> None:
    """``torch.save`` that never leaves a partial file at ``path``.

    Written through :func:`gridify._files.atomic_write`: a temporary file in the same folder,
    flushed and fsynced, renamed over ``path`` (``os.replace``), then the folder fsynced. A crash
    or exception at any point leaves the previous file at ``path`` intact. The file gets the
    mode a plain ``open`` would give it (it honours the umask).
    """
    atomic_write(path, lambda fh: torch.save(obj, fh))


#: Tasks a ``model.pt`` may declare: the registered tasks (:mod:`gridify.tasks`); ``gridify.load`` (the
#: :class:`gridify.Predictor`) serves those whose :attr:`~gridify.tasks.Task.predictor` is set (not
#: ``sequence_classification``, the temporal CfC model).
TASKS = tuple(task_names())


#: the checkpoint entry recording the task the file's network serves (:func:`model_task` of it, when written)
MODEL_TASK = "model_task"


def model_task(model: Any) -> str:
    """The task (one of :data:`TASKS`) a model class or instance serves: its ``task`` attribute when
    it declares one, else the task whose :attr:`~gridify.tasks.Task.models` table names its registry
    name (every built-in model), else the guess of :func:`task_from_forward`.

    What a checkpoint records as its ``model_task`` when it is written (:func:`export_model`, the Lightning
    checkpoints of :mod:`gridify.training`); a reader takes the record (:func:`recorded_model_task`) and calls this
    only for an older file that lacks it."""
    declared = getattr(model, "task", None)
    if isinstance(declared, str) and declared in TASKS:
        return declared
    made_for = _task_of_model_class(model if isinstance(model, type) else type(model))
    if made_for is not None:
        return made_for
    return task_from_forward(model)


def task_from_forward(model: Any) -> str:
    """The task of a model guessed from its ``forward``: ``times`` -> ``sequence_classification``, a ``category``
    keyword -> ``segmentation`` (per-point logits), otherwise ``classification``.

    The old rule, kept only as the reader of older checkpoints (without a ``model_task`` record) whose model neither
    declares a task nor is listed in a task's :attr:`~gridify.tasks.Task.models` (a plugin's model): a file
    written now records the task (:func:`model_task`, :data:`MODEL_TASK`)."""
    import inspect

    forward = getattr(model, "forward", None)
    try:
        params = inspect.signature(forward).parameters if callable(forward) else {}
    except (TypeError, ValueError):  # a builtin without a signature: nothing to read
        params = {}
    if "times" in params:
        return "sequence_classification"
    return "segmentation" if "category" in params else "classification"


def _task_of_model_class(cls: type) -> Optional[str]:
    """The task whose :attr:`~gridify.tasks.Task.models` table lists a registry name of ``cls``, if any."""
    from .registry import MODELS

    names = [n for n in MODELS.names() if MODELS.get(n) is cls]
    return next((t for t in task_names() if any(n in get_task(t).models for n in names)), None)


def task_served(task: str, serves: str) -> bool:
    """Whether a model of task ``serves`` (:func:`model_task`) serves ``task``: the same task, or one of
    the task's :attr:`~gridify.tasks.Task.model_tasks` (a part segmenter without categories labels the
    points of a scene)."""
    return serves == task or (task in TASKS_REGISTRY and serves in get_task(task).model_tasks)


def recorded_model_task(payload: Mapping[str, Any], source: str = "checkpoint") -> Optional[str]:
    """The task a checkpoint's network serves as the file records it (:data:`MODEL_TASK`, written with it), or
    None for an older file without the record; a record that names no registered task is a
    :class:`CheckpointError` naming ``source``."""
    recorded = payload.get(MODEL_TASK)
    if recorded is None:
        return None
    if not isinstance(recorded, str) or recorded not in TASKS_REGISTRY:
        raise _entry_error(source, f"{MODEL_TASK!r}", f"a registered task ({', '.join(task_names())})", recorded)
    return recorded


def check_task(source: str, task: Any, model_name: Any, recorded: Optional[str] = None) -> None:
    """A checkpoint's ``task`` against the task its network serves: :class:`CheckpointError` naming the
    file (``source``), the task and the model when they disagree (a classification model whose
    file says segmentation would reach ``forward()`` with a ``category`` keyword it has not got).
    ``recorded``: the file's ``model_task`` record (:func:`recorded_model_task`); None (an older file): the
    registered model's :func:`model_task`. Unknown tasks and unregistered models are left to the checks that
    name those."""
    from . import models  # noqa: F401  (registers the models)
    from .registry import MODELS

    if task not in TASKS or not isinstance(model_name, str) or model_name not in MODELS:
        return
    serves = recorded if recorded is not None else model_task(MODELS.get(model_name))
    if not task_served(task, serves):
        raise CheckpointError(
            f"{source}: entry 'task' is {task!r} but the model {model_name!r} is a {serves} model; "
            f"the file's task and model do not match (edited or mixed-up metadata?), so it cannot "
            f"be served as {task}"
        )


def export_model(path: Path, model: torch.nn.Module, meta: Dict[str, Any], reparameterize: bool = True) -> None:
    """Write ``model.pt``: weights + what is needed to rebuild and evaluate the model.

    ``meta`` must describe the model (:func:`check_export_meta` validates it before anything is
    written): ``model_name`` (registered), ``model_kwargs`` (rebuild a model whose weights are
    exactly ``model``'s), ``task`` (one of :data:`TASKS`) and the class names
    (``info["class_names"]`` or ``class_names``, one per output). A missing ``config`` is filled
    with a minimal one (``{"task", "model": {"name", **model_kwargs}}``); other entries are
    stored as given. A meta that cannot be loaded back raises ValueError naming what is wrong.

    With ``reparameterize`` (default), a copy of the model is folded into its inference form
    (:func:`reparameterize_model`) before its weights are written, and the file records
    ``"reparameterized": True`` so :func:`build_model_from_checkpoint` rebuilds the same
    structure. Models without reparameterizable layers are written unchanged. The file is
    written to a temporary name and renamed, so an interrupted export never leaves a partial
    ``model.pt``.
    """
    import copy

    meta = check_export_meta(model, meta)
    folded = False
    if reparameterize and any(is_reparameterizable(m) for m in model.modules()):
        model = copy.deepcopy(model)
        folded = reparameterize_model(model) > 0
    payload = {"state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}}
    payload.update(meta)
    payload["reparameterized"] = folded
    problem = None
    try:
        rebuilt = build_model_from_checkpoint(payload)
    except CheckpointError as exc:
        problem = str(exc)
    if problem is not None:
        fail("export_model", f"meta does not describe the model: {problem}")
    if type(rebuilt) is not type(model):
        fail(
            "export_model",
            f"meta['model_name']={meta['model_name']!r} builds a {type(rebuilt).__name__}, "
            f"but the model is a {type(model).__name__}",
        )
    atomic_torch_save(payload, path)


def check_export_meta(model: torch.nn.Module, meta: Any) -> Dict[str, Any]:
    """Validate the metadata of :func:`export_model` and return it as plain data, with
    ``class_names`` in both ``info`` and the top level and a minimal ``config`` when none is given.

    Raises ValueError naming the missing or wrong entry (the rebuild itself is checked by
    :func:`export_model`).
    """
    from . import models  # noqa: F401  (registers the models)
    from .registry import MODELS

    where = "export_model"
    if not isinstance(meta, dict):
        fail(where, f"meta must be a dict, got {type(meta).__name__}")
    missing = [k for k in ("model_name", "model_kwargs", "task") if k not in meta]
    if missing:
        fail(
            where,
            f"meta lacks {missing}: a model.pt must name the registered model, the keyword arguments "
            f"that rebuild it and its task, or gridify.load cannot read it back",
        )
    name, kwargs, task = meta["model_name"], meta["model_kwargs"], meta["task"]
    if name not in MODELS:
        fail(where, f"meta['model_name']={name!r} is not a registered model; registered: {MODELS.names()}")
    if not isinstance(kwargs, dict):
        fail(where, f"meta['model_kwargs'] must be a dict of keyword arguments, got {type(kwargs).__name__}")
    check_choice(where, "meta['task']", task, TASKS)
    serves = model_task(model)
    if not task_served(task, serves):
        fail(
            where,
            f"meta['task']={task!r} but the model ({type(model).__name__}) is a {serves} model; gridify.load "
            f"would serve it as {task}",
        )
    info = meta.get("info", {})
    if not isinstance(info, dict):
        fail(where, f"meta['info'] must be a dict, got {type(info).__name__}")
    config = meta.get("config")
    if config is None:
        config = {"task": task, "model": {"name": name, **kwargs}}
    elif not isinstance(config, dict):
        fail(where, f"meta['config'] must be a dict (the training config), got {type(config).__name__}")
    names = _class_names(where, model, dict(meta, config=config), info)
    out = dict(meta, info=dict(info, class_names=names), class_names=names, config=config)
    out[MODEL_TASK] = serves  # the record readers check the task against (check_task)
    try:
        return plain(out)
    except TypeError as exc:
        problem = str(exc)
    fail(where, f"meta must hold only plain data (dict/list/str/int/float/bool/None): {problem}")


def _class_names(where: str, model: torch.nn.Module, meta: Dict[str, Any], info: Dict[str, Any]) -> List[str]:
    """The class names of ``meta`` (as :func:`inference_settings` reads them), checked against the model."""
    names = inference_settings(dict(meta, info=info))["class_names"]
    if names is None:
        fail(where, "meta has no class names: pass info={'class_names': [...]} (one name per output class)")
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        fail(where, f"the class names must be a non-empty list of strings, got {names!r}")
    outputs = getattr(model, "num_classes", None)
    if is_int(outputs) and len(names) != outputs:
        fail(where, f"{len(names)} class names for a model with {outputs} outputs (num_classes)")
    return [str(n) for n in names]


def inference_settings(payload: Dict[str, Any]) -> Dict[str, Any]:
    """What inference reads from a checkpoint's metadata (a :func:`load_checkpoint` payload).

    A dict: ``class_names`` (top-level ``class_names``, else ``info["class_names"]``; None when
    neither is recorded), ``in_channels`` (``model_kwargs``, else ``info``, else 3), ``normalize``
    (whether clouds are centred and scaled) and ``normalization`` (how: ``"sphere"``, ``"cube"`` or None;
    :func:`normalization_setting`) and ``num_points``
    (``info["num_points"]``, else the config's ``data.test.num_points`` / ``data.num_points``;
    None when not recorded).
    """
    info = payload.get("info") or {}
    kwargs = payload.get("model_kwargs") or {}
    data = (payload.get("config") or {}).get("data") or {}
    normalization = normalization_setting(info, data) or None
    num_points = info.get("num_points")
    for section in (data.get("test") or {}, data):
        if num_points is None and section.get("num_points") is not None:
            num_points = int(section["num_points"])
    return {
        "class_names": payload.get("class_names") or info.get("class_names"),
        "in_channels": int(kwargs.get("in_channels", info.get("in_channels", 3))),
        "normalize": normalization is not None,
        "normalization": normalization,
        "num_points": num_points,
    }


def normalization_setting(info: Dict[str, Any], data: Dict[str, Any]) -> Union[bool, str]:
    """How a checkpoint's model expects its clouds normalized: a name of
    :data:`gridify.transforms.NORMALIZATIONS` (``"sphere"``, ``"cube"``) or False (as given). From
    ``info["normalization"]`` when recorded, else the config's ``data.normalize`` (default True, the
    sphere). ValueError for a record or value no normalization has."""
    if "normalization" in info:
        return normalization_of_record(info["normalization"]) or False
    return normalization_name("config['data']['normalize']", data.get("normalize", True)) or False


class CheckpointError(RuntimeError):
    pass


def pretrained_path(name: str) -> Path:
    """The file of the shipped model ``name`` (``gridify.api.PRETRAINED``); CheckpointError when this
    installation lacks it, ValueError for an unknown name."""
    path = pretrained_file(name)
    if not path.is_file():
        raise CheckpointError(f"the pretrained model {name!r} is missing from this installation ({path})")
    return path


def checkpoint_file(path: Any, where: str = "gridify.load") -> Any:
    """What a model argument names: ``path`` itself, or the shipped model's file when ``path`` names a shipped
    model (``gridify._pretrained.shipped_name``: the name, and no *file* of that name here; a folder of that
    name does not hide it). A bare name that is neither (no folder, no extension: ``"modelnet4"``) raises
    CheckpointError naming the shipped models and the closest one; an empty string a ValueError naming
    ``where``; anything else is returned for :func:`load_checkpoint` to read (or to name as not found)."""
    if isinstance(path, str) and not path.strip():
        raise ValueError(
            f"{where}: the model path is empty ({path!r}); give a checkpoint file (model.pt / .ckpt) or the "
            f"name of a shipped model ({', '.join(sorted(PRETRAINED))})"
        )
    name = shipped_name(path)
    if name is not None:
        return pretrained_path(name)
    if isinstance(path, str) and not Path(path).exists():
        hint = not_found_hint(path)  # a bare name: the shipped models' names (a path: load_checkpoint says it)
        if hint:
            raise CheckpointError(f"checkpoint not found: {path}{hint}")
    return path


def load_checkpoint(path: os.PathLike | str) -> Dict[str, Any]:
    """Load a Lightning ``.ckpt`` or an exported ``model.pt`` safely (``weights_only=True``).

    Returns a dict with ``kind`` ("lightning" or "export"), ``state_dict`` (of the bare model),
    ``model_name``, ``model_kwargs``, ``config``, ``task``, ``model_task`` (the task of the network as the file
    records it; None in a file written before the record), ``info`` and ``class_names``.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint not found: {path}")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} is not a file")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear message
        text = str(exc)
        unsafe = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
        if unsafe:
            raise CheckpointError(
                f"refusing to load {path}: it contains a pickled Python object "
                f"({unsafe.group(1)}), not only tensors and plain containers, so it is not a "
                f"gridify checkpoint (and loading it could run code)"
            ) from None
        detail = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\n|$)", text, re.S)
        detail_text = detail.group(1).strip() if detail else (text.splitlines()[0] if text else "")
        raise CheckpointError(
            f"cannot read checkpoint {path}: the file is corrupt, truncated or not a PyTorch "
            f"checkpoint ({type(exc).__name__}: {detail_text})"
        ) from None
    if not isinstance(raw, dict) or "state_dict" not in raw:
        raise CheckpointError(f"{path} is not a gridify checkpoint (no 'state_dict' entry)")
    if not isinstance(raw["state_dict"], Mapping):
        raise CheckpointError(
            f"{path}: entry 'state_dict' must be a dict of tensors, got {type(raw['state_dict']).__name__}"
        )
    out = _lightning_payload(raw, path) if "hyper_parameters" in raw else _export_payload(raw, path)
    check_payload(out, str(path))
    return out


_NEED = ("model_name", "model_kwargs", "task", "info", "config")


def _lightning_payload(raw: Dict[str, Any], path: Path) -> Dict[str, Any]:
    hp = raw["hyper_parameters"]
    if not isinstance(hp, Mapping):
        raise CheckpointError(f"{path}: entry 'hyper_parameters' must be a dict, got {type(hp).__name__}")
    missing = [k for k in _NEED if k not in hp]
    if missing:
        raise CheckpointError(f"{path}: Lightning checkpoint without the gridify hyper-parameters {missing}")
    # a run with optim.ema_decay > 0 keeps its model, the weights' moving average, under ema.*
    prefix = "ema." if any(isinstance(k, str) and k.startswith("ema.") for k in raw["state_dict"]) else "model."
    state = {k[len(prefix) :]: v for k, v in raw["state_dict"].items() if isinstance(k, str) and k.startswith(prefix)}
    out = {"kind": "lightning", "state_dict": state, "epoch": raw.get("epoch"), "global_step": raw.get("global_step")}
    out.update({k: hp[k] for k in _NEED})
    out[MODEL_TASK] = hp.get(MODEL_TASK)  # None: written before checkpoints recorded it
    info = hp["info"]
    out["class_names"] = info.get("class_names") if isinstance(info, Mapping) else None
    out["gridify_version"] = hp.get("gridify_version")
    return out


def _export_payload(raw: Dict[str, Any], path: Path) -> Dict[str, Any]:
    missing = [k for k in _NEED if k not in raw]
    if missing:
        raise CheckpointError(f"{path}: exported model without the entries {missing}")
    out = {k: raw[k] for k in _NEED}
    out.update(
        kind="export",
        state_dict=raw["state_dict"],
        class_names=raw.get("class_names"),
        gridify_version=raw.get("gridify_version"),
        reparameterized=raw.get("reparameterized", False),
    )
    out[MODEL_TASK] = raw.get(MODEL_TASK)  # None: written before checkpoints recorded it
    return out


def _entry_error(source: str, entry: str, want: str, value: Any) -> CheckpointError:
    return CheckpointError(f"{source}: entry {entry} must be {want}, got {type(value).__name__} ({value!r:.80})")


def _check_type(source: str, entry: str, value: Any, types: tuple, want: str, optional: bool = False) -> None:
    wrong_bool = isinstance(value, bool) and bool not in types  # True is an int, but not a count
    ok = (value is None and optional) or (isinstance(value, types) and not wrong_bool)
    if not ok:
        raise _entry_error(source, entry, want + (" or None" if optional else ""), value)


def _check_names(source: str, entry: str, value: Any, optional: bool = True) -> None:
    if value is None and optional:
        return
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise _entry_error(source, entry, "a list of strings" + (" or None" if optional else ""), value)


def _check_info(source: str, info: Mapping[str, Any], kwargs: Mapping[str, Any]) -> None:
    """The ``info`` / ``model_kwargs`` entries :func:`gridify.load` reads."""
    for key in ("in_channels", "num_outputs", "num_points"):
        _check_type(source, f"info[{key!r}]", info.get(key), (int,), "an integer", optional=True)
    for key in ("in_channels", "num_classes"):
        _check_type(source, f"model_kwargs[{key!r}]", kwargs.get(key), (int,), "an integer", optional=True)
    _check_names(source, "info['class_names']", info.get("class_names"))
    if "normalization" in info:
        try:
            normalization_of_record(info["normalization"])
        except ValueError:
            raise _entry_error(
                source, "info['normalization']", "a normalization record or None", info["normalization"]
            ) from None
    _check_names(source, "info['category_names']", info.get("category_names"))
    parts = info.get("category_to_parts")
    if parts is not None and not (
        isinstance(parts, (list, tuple))
        and all(
            isinstance(p, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in p)
            for p in parts
        )
    ):
        raise _entry_error(source, "info['category_to_parts']", "a list of lists of part ids (or None)", parts)


def _check_config(source: str, config: Any) -> None:
    """The ``config['data']`` entries :func:`gridify.load` reads."""
    _check_type(source, "'config'", config, (Mapping,), "a dict", optional=True)
    data = (config or {}).get("data")
    _check_type(source, "config['data']", data, (Mapping,), "a dict", optional=True)
    data = data or {}
    _check_type(source, "config['data']['test']", data.get("test"), (Mapping,), "a dict", optional=True)
    for section, name in ((data, "config['data']"), (data.get("test") or {}, "config['data']['test']")):
        _check_type(source, f"{name}['num_points']", section.get("num_points"), (int,), "an integer", optional=True)
    norm = data.get("normalize")
    if norm is not None and not isinstance(norm, bool) and not (isinstance(norm, str) and norm in NORMALIZATIONS):
        raise _entry_error(
            source, "config['data']['normalize']", f"a bool, one of {list(NORMALIZATIONS)} or None", norm
        )
    _check_type(source, "config['data']['name']", data.get("name"), (str,), "a string", optional=True)


def check_payload(payload: Mapping[str, Any], source: str = "checkpoint") -> None:
    """Check the type of every entry of a :func:`load_checkpoint` payload that the loaders use.

    ``state_dict`` (names -> tensors), ``model_name``, ``model_kwargs`` (a dict of keyword
    arguments), ``task`` (against the ``model_task`` record, or for an older file the model's task),
    ``info``, ``config``, ``class_names``, ``gridify_version``, ``reparameterized``, and the
    ``info``/``config`` entries :func:`gridify.load` reads.
    Raises :class:`CheckpointError` naming the first wrong entry.
    """
    if not isinstance(payload, Mapping):
        raise CheckpointError(f"{source}: a checkpoint payload must be a dict, got {type(payload).__name__}")
    missing = [k for k in ("state_dict",) + _NEED if k not in payload]
    if missing:
        raise CheckpointError(f"{source}: the payload has no entries {missing}")
    state = payload["state_dict"]
    _check_type(source, "'state_dict'", state, (Mapping,), "a dict of tensors")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise _entry_error(source, f"state_dict[{key!r}]", "a tensor under a string name", value)
    _check_type(source, "'model_name'", payload["model_name"], (str,), "a string")
    kwargs = payload["model_kwargs"]
    _check_type(source, "'model_kwargs'", kwargs, (Mapping,), "a dict of keyword arguments")
    if not all(isinstance(k, str) for k in kwargs):
        raise _entry_error(source, "'model_kwargs'", "a dict with string keys", kwargs)
    _check_type(source, "'task'", payload["task"], (str,), "a string")
    check_task(source, payload["task"], payload["model_name"], recorded_model_task(payload, source))
    _check_type(source, "'info'", payload["info"], (Mapping,), "a dict")
    _check_config(source, payload["config"])
    _check_names(source, "'class_names'", payload.get("class_names"))
    _check_type(source, "'gridify_version'", payload.get("gridify_version"), (str,), "a string", optional=True)
    _check_type(source, "'reparameterized'", payload.get("reparameterized", False), (bool,), "a bool")
    _check_info(source, payload["info"], kwargs)


def _check_weights(state: Mapping[str, torch.Tensor], model: torch.nn.Module, name: str, kwargs: Any) -> None:
    """Names, shapes, kinds (floating or not) and values (finite) of the checkpoint's weights against
    ``model``, all checked before anything is copied, so a mismatch never leaves a half-loaded model."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise CheckpointError(
            f"the checkpoint's weights do not fit {name!r} {kwargs}: missing {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}"
            f"{' ...' if len(unexpected) > 5 else ''}"
        )
    for key, value in state.items():
        # a folded MRConv3d resizes its merged kernel on load (its size follows the folding resolution)
        if value.shape != own[key].shape and not key.endswith("rep_weight"):
            raise CheckpointError(
                f"the checkpoint's weights do not fit {name!r} {kwargs}: entry state_dict[{key!r}] "
                f"has shape {tuple(value.shape)}, the model's {tuple(own[key].shape)}"
            )
        if own[key].is_floating_point() != value.is_floating_point():
            raise CheckpointError(
                f"the checkpoint's entry state_dict[{key!r}] has dtype {value.dtype} but the model's "
                f"is {own[key].dtype}"
            )
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(
                f"the checkpoint's entry state_dict[{key!r}] holds NaN/Inf values (a diverged "
                f"training run?); refusing to load it"
            )


def load_weights(model: torch.nn.Module, payload: Dict[str, Any], source: str) -> None:
    """Copy the weights of a :func:`load_checkpoint` payload into ``model`` (built by the caller), all
    checked first (names, shapes, kinds, finite values): fine-tuning starts from them. Folded
    (reparameterized) weights are refused: they are an inference form, not a trainable one.
    Errors (:class:`CheckpointError`) start with ``source``."""
    if payload.get("reparameterized"):
        raise CheckpointError(
            f"{source}: the file holds folded (reparameterized) weights, an inference form that cannot be "
            f"trained; start from the run's checkpoints/last.ckpt or a model.pt saved without folding"
        )
    adapt = getattr(model, "adapt_init_weights", None)
    if callable(adapt):  # e.g. a scene segmenter with scale_input from one without: the new inputs start at zero
        payload = adapt(payload)
    try:
        _copy_weights(model, payload)
    except CheckpointError as exc:
        raise CheckpointError(f"{source}: {exc}") from None


def _copy_weights(model: torch.nn.Module, payload: Dict[str, Any]) -> None:
    """Check the payload's weights against ``model`` (:func:`_check_weights`, before anything is copied), then
    load them strictly; a mismatch is a :class:`CheckpointError` naming the payload's model and arguments."""
    name, kwargs = payload["model_name"], dict(payload["model_kwargs"])
    _check_weights(payload["state_dict"], model, name, kwargs)
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as exc:
        raise CheckpointError(
            f"the checkpoint's weights do not fit {name!r} {kwargs}: {str(exc).splitlines()[0]}"
        ) from None


def build_model_from_checkpoint(payload: Dict[str, Any], *, reparameterize: bool = False) -> torch.nn.Module:
    """Rebuild the model described by a :func:`load_checkpoint` payload and load its weights.

    The model is built from the registered ``model_name`` and ``model_kwargs``; when the file
    holds folded (reparameterized) weights the fresh model is folded first so the structures
    match. ``reparameterize=True`` also folds models saved unfolded (inference only). The model
    is returned in eval mode. Wrong entries, missing or unexpected weights, NaN/Inf weights and
    mismatched shapes raise :class:`CheckpointError`; the half-built model is discarded.
    """
    from .models import build_model
    from .registry import MODELS

    check_payload(payload, "build_model_from_checkpoint")
    name, kwargs = payload["model_name"], dict(payload["model_kwargs"])
    if name not in MODELS:
        raise CheckpointError(
            f"the checkpoint's model {name!r} is not registered (known models: {', '.join(MODELS.names())})"
        )
    try:
        model = build_model(name, **kwargs)
    except (TypeError, ValueError, KeyError) as exc:  # an unknown backbone/kernel name is both
        raise CheckpointError(f"cannot rebuild {name!r} from the checkpoint's arguments {kwargs}: {exc}") from None
    folded = bool(payload.get("reparameterized", False))
    if folded:
        reparameterize_model(model)
    _copy_weights(model, payload)
    if reparameterize and not folded:
        reparameterize_model(model)
    return model.eval()
