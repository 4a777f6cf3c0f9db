"""gridify: learned gridification for fast deep learning on point clouds.

A point cloud of N points is mapped by one bilateral-kNN message-passing layer onto a dense
regular grid of about N nodes (:class:`gridify.nn.Gridification`), regular 3D networks work on
that grid, and :class:`gridify.nn.Degridification` maps grid features back to the points.

``gridify.load(checkpoint)`` returns a :class:`Predictor` for new point clouds;
``gridify.gridify(points, ...)`` is the functional gridification of one cloud.

The submodules and names below are imported on first use (PEP 562), so ``import gridify`` and the
command line's ``--help`` do not pay for PyTorch until something needs it; the registries fill
themselves with every built-in component whenever they are read (:func:`gridify.registry.load_components`).
"""

from __future__ import annotations

import importlib
from typing import Any, List

from ._version import __version__

#: the submodules ``gridify.<name>`` gives (imported on first access)
_SUBMODULES = ("ops", "nn", "backbones", "models", "io", "transforms", "datasets", "baselines", "runtime")
#: names of the package namespace -> the submodule that defines them
_NAMES = {
    "Registry": "registry",
    "BACKBONES": "registry",
    "DATASETS": "registry",
    "KERNELS": "registry",
    "MODELS": "registry",
    "POS_EMBEDDINGS": "registry",
    # ``gridify.gridify`` is the function (no submodule has that name)
    "load": "api",
    "gridify": "api",
    "Predictor": "api",
    "Prediction": "api",
}

__all__ = ["__version__", *_SUBMODULES, *_NAMES]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _NAMES:
        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gridify' has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
