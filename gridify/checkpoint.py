"""Checkpoint files: plain exports and safe loading (``torch.load(..., weights_only=True)``).

``model.pt`` (written by :func:`export_model`) holds the bare model's ``state_dict`` plus plain
metadata (model name and keyword arguments, task, dataset info, config, gridify version);
Lightning ``.ckpt`` files written by :mod:`gridify.training` carry the same metadata in their
``hyper_parameters``. :func:`load_checkpoint` reads either without unpickling any code.

This module needs only PyTorch and NumPy; it never imports Lightning.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Dict

import numpy as np
import torch

from ._files import atomic_write
from .nn.reparam import is_reparameterizable, reparameterize_model

__all__ = ["plain", "atomic_torch_save", "export_model", "CheckpointError", "load_checkpoint", "reparameterize_model",
           "build_model_from_checkpoint"]


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


def export_model(path: Path, model: torch.nn.Module, meta: Dict[str, Any], reparameterize: bool = True) -> None:
    """Write ``model.pt``: weights + what is needed to rebuild and evaluate the model.

    With ``reparameterize`` (default), a copy of the model is folded into its inference form
    (:func:`reparameterize_model`) before its weights are written, and the file records
    ``"reparameterized": True`` so :func:`build_model_from_checkpoint` rebuilds the same
    structure. Models without reparameterizable layers are written unchanged. The file is
    written to a temporary name and renamed, so an interrupted export never leaves a partial
    ``model.pt``.
    """
    import copy

    folded = False
    if reparameterize and any(is_reparameterizable(m) for m in model.modules()):
        model = copy.deepcopy(model)
        folded = reparameterize_model(model) > 0
    payload = {"state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}}
    payload.update(plain(meta))
    payload["reparameterized"] = folded
    atomic_torch_save(payload, path)


class CheckpointError(RuntimeError):
    pass


def load_checkpoint(path: os.PathLike | str) -> Dict[str, Any]:
    """Load a Lightning ``.ckpt`` or an exported ``model.pt`` safely (``weights_only=True``).

    Returns a dict with ``kind`` ("lightning" or "export"), ``state_dict`` (of the bare model),
    ``model_name``, ``model_kwargs``, ``config``, ``task``, ``info`` and ``class_names``.
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
            raise CheckpointError(f"refusing to load {path}: it contains a pickled Python object "
                                  f"({unsafe.group(1)}), not only tensors and plain containers, so it is not a "
                                  f"gridify checkpoint (and loading it could run code)") from None
        detail = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\n|$)", text, re.S)
        detail_text = detail.group(1).strip() if detail else (text.splitlines()[0] if text else "")
        raise CheckpointError(f"cannot read checkpoint {path}: the file is corrupt, truncated or not a PyTorch "
                              f"checkpoint ({type(exc).__name__}: {detail_text})") from None
    if not isinstance(raw, dict) or "state_dict" not in raw:
        raise CheckpointError(f"{path} is not a gridify checkpoint (no 'state_dict' entry)")
    if "hyper_parameters" in raw:
        hp = raw["hyper_parameters"]
        need = ("model_name", "model_kwargs", "task", "info", "config")
        missing = [k for k in need if k not in hp]
        if missing:
            raise CheckpointError(f"{path}: Lightning checkpoint without the gridify hyper-parameters {missing}")
        state = {k[len("model."):]: v for k, v in raw["state_dict"].items() if k.startswith("model.")}
        out = {"kind": "lightning", "state_dict": state, "epoch": raw.get("epoch"),
               "global_step": raw.get("global_step")}
        out.update({k: hp[k] for k in need})
        out["class_names"] = hp["info"].get("class_names")
        out["gridify_version"] = hp.get("gridify_version")
        return out
    need = ("model_name", "model_kwargs", "task", "info", "config")
    missing = [k for k in need if k not in raw]
    if missing:
        raise CheckpointError(f"{path}: exported model without the entries {missing}")
    out = {k: raw[k] for k in need}
    out.update(kind="export", state_dict=raw["state_dict"], class_names=raw.get("class_names"),
               gridify_version=raw.get("gridify_version"), reparameterized=bool(raw.get("reparameterized", False)))
    return out


def build_model_from_checkpoint(payload: Dict[str, Any], *, reparameterize: bool = False) -> torch.nn.Module:
    """Rebuild the model described by a :func:`load_checkpoint` payload and load its weights.

    The model is built from the registered ``model_name`` and ``model_kwargs``; when the file
    holds folded (reparameterized) weights the fresh model is folded first so the structures
    match. ``reparameterize=True`` also folds models saved unfolded (inference only). The model
    is returned in eval mode. Mismatched weights raise :class:`CheckpointError`.
    """
    from .models import build_model

    name, kwargs = payload["model_name"], payload["model_kwargs"]
    try:
        model = build_model(name, **kwargs)
    except KeyError as exc:
        raise CheckpointError(f"the checkpoint's model {name!r} is not registered "
                              f"({exc.args[0] if exc.args else exc})") from None
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"cannot rebuild {name!r} from the checkpoint's arguments {kwargs}: {exc}") from None
    folded = bool(payload.get("reparameterized", False))
    if folded:
        reparameterize_model(model)
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"the checkpoint's weights do not fit {name!r} {kwargs}: "
                              f"{str(exc).splitlines()[0]}") from None
    if reparameterize and not folded:
        reparameterize_model(model)
    return model.eval()
