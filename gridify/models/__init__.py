"""Complete models: gridified classifier, segmenter and scene segmenter, registered in :data:`gridify.registry.MODELS`."""

from typing import Any

from torch import nn

from ..registry import MODELS
from .gridified import CLASSIFIER_PRESETS, GridifiedClassifier, GridifiedModel, GridifiedSegmenter
from .scene import GridifiedSceneSegmenter
from .temporal import TemporalGridifiedClassifier, TemporalOutput


def build_model(name: str, **kwargs: Any) -> nn.Module:
    """Instantiate the model registered under ``name`` with keyword arguments."""
    return MODELS.build(name, **kwargs)


__all__ = [
    "GridifiedModel",
    "GridifiedClassifier",
    "GridifiedSegmenter",
    "CLASSIFIER_PRESETS",
    "build_model",
    "GridifiedSceneSegmenter",
    "TemporalGridifiedClassifier",
    "TemporalOutput",
]
