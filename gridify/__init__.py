"""gridify: learned gridification for fast deep learning on point clouds.

A point cloud of N points is mapped by one bilateral-kNN message-passing layer onto a dense
regular grid of about N nodes (:class:`gridify.nn.Gridification`), regular 3D networks work on
that grid, and :class:`gridify.nn.Degridification` maps grid features back to the points.

``gridify.load(checkpoint)`` returns a :class:`Predictor` for new point clouds;
``gridify.gridify(points, ...)`` is the functional gridification of one cloud.
"""

from ._version import __version__  # noqa: E402,F401

from . import ops, nn, backbones, models, io, transforms, datasets  # noqa: E402,F401
from . import baselines  # noqa: E402,F401  (registers the baseline models)
from . import runtime  # noqa: E402,F401  (opt-in process settings; nothing runs on import)
from .registry import BACKBONES, DATASETS, KERNELS, MODELS, POS_EMBEDDINGS, Registry  # noqa: E402,F401

# ``gridify.gridify`` is the function (no submodule has that name)
from .api import Prediction, Predictor, gridify, load  # noqa: E402,F401

__all__ = [
    "__version__",
    "ops",
    "nn",
    "backbones",
    "models",
    "io",
    "transforms",
    "datasets",
    "baselines",
    "runtime",
    "Registry",
    "BACKBONES",
    "DATASETS",
    "KERNELS",
    "MODELS",
    "POS_EMBEDDINGS",
    "load",
    "gridify",
    "Predictor",
    "Prediction",
]
