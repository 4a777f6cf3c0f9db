"""The result of :meth:`gridify.api.Predictor.predict`: :class:`Prediction` (labels, probabilities, names)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import numpy as np

from .._paths import PREDICTION_FORMATS
from ..registry import TASKS
from ..tasks import get_task

__all__ = ["Prediction", "write_prediction", "PREDICTION_FORMATS"]


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
    #: lines for the user beside the result, e.g. that the cloud reads better with another up axis
    hints: List[str] = field(default_factory=list)

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
            line = f"{src}{self.names} (p={self.probabilities[int(self.labels)]:.3f}; top: {alts})"
            return "\n".join([line] + [f"hint: {h}" for h in self.hints])
        counts = np.bincount(self.labels, minlength=len(self.class_names))
        parts = ", ".join(f"{self.class_names[i]} {counts[i]}" for i in np.flatnonzero(counts))
        cat = f" [{self.category}]" if self.category else ""
        return "\n".join([f"{src}{self.num_points} points{cat}: {parts}"] + [f"hint: {h}" for h in self.hints])


def write_prediction(path: Union[str, Path], cloud: Any, prediction: Prediction) -> Path:
    """Write ``prediction`` of ``cloud`` (a :class:`gridify.io.PointCloud`: its points and normals) by the
    extension of ``path`` (``gridify predict --out``): ``.txt`` one label per line (per point for dense tasks,
    the cloud's label otherwise), ``.npy`` the labels, ``.ply`` the points coloured by label with a ``label``
    property, ``.json`` task, class names, category, labels and probabilities. Written atomically (a failed
    write leaves no partial file). Returns the path; another extension raises ``ValueError``."""
    from .._files import atomic_write, atomic_write_text
    from ..io import write_ply
    from ..vis import label_colors

    path = Path(path)
    ext = path.suffix.lower()
    if ext not in PREDICTION_FORMATS:
        raise ValueError(f"--out {path}: unsupported extension {ext!r}; use one of {list(PREDICTION_FORMATS)}")
    labels = prediction.point_labels
    if ext == ".txt":
        rows = labels[:, None] if prediction.dense else labels[:1, None]
        atomic_write(path, lambda fh: np.savetxt(fh, rows, fmt="%d"))
    elif ext == ".npy":
        atomic_write(path, lambda fh: np.save(fh, labels if prediction.dense else np.asarray(prediction.labels)))
    elif ext == ".ply":
        colors = label_colors(labels, len(prediction.class_names)).astype(np.float32)
        write_ply(path, cloud.points, normals=cloud.normals, colors=colors, labels=labels)
    else:
        payload = {
            "task": prediction.task,
            "class_names": prediction.class_names,
            "category": prediction.category,
            "labels": np.asarray(prediction.labels).tolist(),
            "probabilities": np.round(prediction.probabilities, 6).tolist(),
        }
        atomic_write_text(path, json.dumps(payload))
    return path
