"""Loading a trained model: :func:`load` (a checkpoint file or a shipped model's name) -> :class:`gridify.api.Predictor`.

The file is read safely (:func:`gridify.checkpoint.load_checkpoint`, ``weights_only=True``); its
metadata gives the task, the class / part / category names, the training ``num_points`` and the
normalization, and the task's predictor checks the entries of its own
(:meth:`gridify.api.task_predictors.TaskPredictor.check_entries`).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

import torch
from torch import nn

from .._pretrained import PRETRAINED
from ..checkpoint import (
    CheckpointError,
    build_model_from_checkpoint,
    checkpoint_file,
    load_checkpoint,
    normalization_setting,
    pretrained_path,
)
from .predictor import Predictor, names_problem
from .task_predictors import is_served, predictor_for, served_tasks

__all__ = ["load", "pretrained_path", "PRETRAINED", "DEFAULT_NUM_POINTS"]

#: points per training cloud of each dataset when the config does not say (the constructors' defaults)
DEFAULT_NUM_POINTS = {"procedural": 1024, "modelnet": 1024, "modelnet10": 1024, "modelnet40": 1024, "shapenet": 2048}


def _num_points_of(config: Dict[str, Any]) -> Optional[int]:
    data = config.get("data") or {}
    for section in (data.get("test") or {}, data):
        if "num_points" in section:
            v = section["num_points"]
            return None if v is None else int(v)
    return DEFAULT_NUM_POINTS.get(str(data.get("name", "procedural")), 1024)


def load(
    path: Union[str, "os.PathLike[str]"], device: Union[str, torch.device] = "cpu", reparameterize: bool = True
) -> Predictor:
    """Load a trained model (exported ``model.pt``, Lightning ``.ckpt``, or a shipped model by name).

    The file is read with ``torch.load(..., weights_only=True)`` (no code is unpickled). The
    checkpoint's metadata gives the task, class/part/category names, the training
    ``num_points`` and normalization (from the stored data config) and the gridify version.

    Args:
        path: the checkpoint file, or the name of a model shipped with the package
            (``gridify.api.PRETRAINED``: ``"modelnet10"``, ``"modelnet40"``, ``"semantickitti"``) when no file
            of that name exists (a folder of that name does not hide it: the one rule of every entry,
            ``gridify._pretrained.shipped_name``); a bare name that is neither is refused naming the
            shipped ones, an empty path with a ValueError.
        device: where to put the model (``"cpu"``, ``"cuda"``, ...).
        reparameterize: fold reparameterizable layers into their inference form (faster, same
            outputs up to float rounding).

    Raises:
        gridify.checkpoint.CheckpointError: missing, corrupt, unsafe or foreign files, or entries of
            the wrong type (named). ValueError: an empty ``path``, a bad ``device`` or ``reparameterize``.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"gridify.load: path must be a str or os.PathLike, got {type(path).__name__}")
    path = checkpoint_file(path, "gridify.load")
    device = _check_device("gridify.load", device)
    if not isinstance(reparameterize, bool):
        raise ValueError(f"gridify.load: reparameterize must be a bool, got {reparameterize!r}")
    payload = load_checkpoint(path)
    if not is_served(payload["task"]):  # sequences: build_model_from_checkpoint
        raise CheckpointError(
            f"{path}: entry 'task' is {payload['task']!r}; gridify.load serves the models of the tasks {served_tasks()}"
        )
    model = build_model_from_checkpoint(payload, reparameterize=reparameterize)
    return _predictor_from_payload(path, payload, model).to(device)


def _predictor_from_payload(path: Any, payload: Dict[str, Any], model: nn.Module) -> Predictor:
    """A :class:`Predictor` for ``model`` from its checkpoint's metadata (checked, errors naming ``path``)."""
    info = payload.get("info") or {}
    config = payload.get("config") or {}
    kwargs = payload.get("model_kwargs") or {}
    data = config.get("data") or {}
    in_channels = int(kwargs.get("in_channels", info.get("in_channels", 3)))
    class_names = payload.get("class_names") or info.get("class_names")
    if not class_names:
        n = int(kwargs.get("num_classes", info.get("num_outputs", 0)))
        if n < 1:
            raise CheckpointError(f"{path}: the checkpoint records neither class names nor the number of classes")
        class_names = [f"class{i}" for i in range(n)]
    problem = names_problem(model, class_names, info.get("category_names"), info.get("category_to_parts"))
    if problem is not None:  # one class name per output, one category name per category (else an IndexError later)
        raise CheckpointError(f"{path}: entry {problem}")
    meta = {
        "info": info,
        "config": config,
        "model_name": payload.get("model_name"),
        "model_kwargs": kwargs,
        "path": str(path),
        "kind": payload.get("kind"),
    }
    num_points = info["num_points"] if info.get("num_points") is not None else _num_points_of(config)
    if num_points is not None and num_points < 1:
        raise CheckpointError(f"{path}: entry num_points must be a positive integer, got {num_points}")
    predictor_for(str(payload["task"])).check_entries(path, info, data, in_channels)
    try:
        normalize = normalization_setting(info, data)
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    return Predictor(
        model,
        task=str(payload["task"]),
        class_names=class_names,
        num_points=num_points,
        in_channels=in_channels,
        normalize=normalize,
        category_names=info.get("category_names"),
        category_to_parts=info.get("category_to_parts"),
        gridify_version=payload.get("gridify_version"),
        meta=meta,
        estimated_normals=_estimated_normals(path, data, in_channels),
    )


def _estimated_normals(path: Any, data: Dict[str, Any], in_channels: int) -> Optional[int]:
    """``data.estimate_normals`` of the training config (the neighbours of the normals the model learnt
    from) when the model takes normals; a value that is not a positive integer names the checkpoint."""
    k = data.get("estimate_normals")
    if k is None or in_channels != 6:
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise CheckpointError(f"{path}: entry config['data']['estimate_normals'] must be a positive integer, got {k!r}")
    return k


def _check_device(where: str, device: Any) -> torch.device:
    """``device`` as a torch.device that exists on this machine."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"{where}: device must be a torch.device or a name such as 'cpu' or 'cuda:0', got {device!r}"
        ) from None
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ValueError(
            f"{where}: device {device!r} is not available on this machine (CUDA available: "
            f"{torch.cuda.is_available()}, devices: {torch.cuda.device_count()})"
        )
    if dev.type not in ("cpu", "cuda"):
        backend = getattr(torch, dev.type, None) if dev.type == "xpu" else getattr(torch.backends, dev.type, None)
        available = dev.type in ("mps", "xpu") and bool(getattr(backend, "is_available", lambda: False)())
        if not available:
            why = (
                "meta tensors hold no data"
                if dev.type == "meta"
                else f"this torch build has no usable {dev.type!r} backend on this machine"
            )
            raise ValueError(
                f"{where}: device {device!r} cannot run gridify ({why}); use 'cpu' or an available 'cuda' device"
            )
    return dev
