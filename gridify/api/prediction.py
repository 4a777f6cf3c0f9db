"""The result of :meth:`gridify.api.Predictor.predict`: :class:`Prediction` (labels, probabilities, names)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

import numpy as np

from ..registry import TASKS
from ..tasks import get_task

__all__ = ["Prediction"]


@dataclass
class Prediction:
    """The result of :meth:`Predictor.predict`.

    Shapes:
        dense tasks (segmentation, scene_segmentation; ``dense``): labels ``[N]`` int64 and
        probabilities ``[N, K]`` in the input order.
        classification: labels ``[]`` (0-d) int64 and probabilities ``[K]``.
        ``K = len(class_names)``; probabilities sum to 1 over the classes (over the category's
        parts when a category restricted them).
    """

    labels: np.ndarray
    probabilities: np.ndarray
    class_names: List[str]
    task: str
    num_points: int
    category: Optional[str] = None
    source: str = ""
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def dense(self) -> bool:
        """One label per point (segmentation, scene segmentation), else one per cloud (:attr:`gridify.tasks.Task.dense`)."""
        return self.task in TASKS and get_task(self.task).dense

    @property
    def label(self) -> int:
        """The class id of a classification (the majority part id for segmentation)."""
        if not self.dense:
            return int(self.labels)
        return int(np.bincount(self.labels, minlength=len(self.class_names)).argmax())

    @property
    def names(self) -> Union[str, List[str]]:
        """Class name (classification) or one part name per point (segmentation)."""
        if not self.dense:
            return self.class_names[int(self.labels)]
        return [self.class_names[i] for i in self.labels.tolist()]

    @property
    def point_labels(self) -> np.ndarray:
        """One label per input point ``[N]`` (a classification's class repeated)."""
        if not self.dense:
            return np.full(self.num_points, int(self.labels), dtype=np.int64)
        return self.labels

    def summary(self, top: int = 5) -> str:
        """A few human-readable lines."""
        src = f"{self.source}: " if self.source else ""
        if not self.dense:
            order = np.argsort(-self.probabilities)[:top]
            alts = ", ".join(f"{self.class_names[i]} {self.probabilities[i]:.3f}" for i in order)
            return f"{src}{self.names} (p={self.probabilities[int(self.labels)]:.3f}; top: {alts})"
        counts = np.bincount(self.labels, minlength=len(self.class_names))
        parts = ", ".join(f"{self.class_names[i]} {counts[i]}" for i in np.flatnonzero(counts))
        cat = f" [{self.category}]" if self.category else ""
        return f"{src}{self.num_points} points{cat}: {parts}"
