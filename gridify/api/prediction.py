"""The result of :meth:`gridify.api.Predictor.predict`: :class:`Prediction` (labels, probabilities, names), and
its files: :func:`write_prediction` (``gridify predict --out``) and :func:`read_prediction`, which reads a dense
prediction back for the scan it labels (``gridify show --pred``, ``gridify evaluate --scan ... --pred``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from .._paths import PREDICTION_FORMATS

__all__ = ["Prediction", "write_prediction", "read_prediction", "label_counts", "PREDICTION_FORMATS"]


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
        """One label per point (``labels`` ``[N]``: segmentation, scene segmentation, as the task's predictor made
        them, :attr:`gridify.tasks.Task.dense`), else one per cloud (``labels`` ``[]``)."""
        return np.ndim(self.labels) > 0

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
        return self.labels if self.dense else np.full(self.num_points, int(self.labels), dtype=np.int64)

    def summary(self, top: int = 5) -> str:
        """A few human-readable lines."""
        src = f"{self.source}: " if self.source else ""
        if not self.dense:
            order = np.argsort(-self.probabilities)[:top]
            alts = ", ".join(f"{self.class_names[i]} {self.probabilities[i]:.3f}" for i in order)
            line = f"{src}{self.names} (p={self.probabilities[int(self.labels)]:.3f}; top: {alts})"
        else:
            cat = f" [{self.category}]" if self.category else ""
            line = f"{src}{self.num_points} points{cat}: {label_counts(self.labels, self.class_names)}"
        return "\n".join([line] + [f"hint: {h}" for h in self.hints])


def label_counts(labels: np.ndarray, class_names: Sequence[str]) -> str:
    """``"ground 412, car 30"``: the points of each class present in ``labels`` (ids ``[N]`` in ``0..K-1``)."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=len(class_names))
    return ", ".join(f"{class_names[i]} {counts[i]}" for i in np.flatnonzero(counts))


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
    if ext == ".txt":  # a label per point, or the cloud's one
        atomic_write(path, lambda fh: np.savetxt(fh, np.atleast_1d(prediction.labels)[:, None], fmt="%d"))
    elif ext == ".npy":
        atomic_write(path, lambda fh: np.save(fh, np.asarray(prediction.labels)))
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


def read_prediction(
    path: Union[str, Path], num_points: int, class_names: Sequence[str], *, scan: Union[str, Path] = "the scan"
) -> np.ndarray:
    """The per-point labels :func:`write_prediction` wrote to ``path`` (``gridify predict --out``), checked for the
    scan ``scan`` of ``num_points`` points (as read: the rows a reader dropped have no label there either) and a
    model of the classes ``class_names``: ``.txt`` one label per line, ``.npy`` the labels, ``.ply`` its ``label``
    property, ``.json`` its ``labels`` (its ``class_names`` must be the model's, in the same order).

    Shapes:
        -> ``[num_points]`` int64, every id in ``0..K-1`` (``K = len(class_names)``).

    Raises:
        ValueError: naming ``path``: another extension, an unreadable file, one label for the whole cloud
            (a classifier's), non-integer labels (the first bad row), another count than ``num_points``
            (naming ``scan`` and both counts), an id outside ``0..K-1`` (its row), other class names.
        OSError: the file cannot be read.
    """
    from ..io import read_points
    from ..io.cloud import label_values_problem
    from ..io.npy import read_npy_array
    from ..io.source import read_text_file
    from ..io.text import read_text_rows

    p = Path(path)
    ext = p.suffix.lower()
    if ext not in PREDICTION_FORMATS:
        raise ValueError(
            f"{p}: unsupported extension {ext!r} for a prediction; gridify predict --out writes "
            f"{', '.join(PREDICTION_FORMATS)}"
        )
    if ext == ".txt":
        values: Any = read_text_rows(p, 1, "one label per line")
    elif ext == ".npy":
        values = read_npy_array(p)
    elif ext == ".ply":
        cloud = read_points(p)
        if cloud.labels is None:
            why = cloud.ignored.get("labels")
            raise ValueError(f"{p}: no label property{f' ({why})' if why else ''}: not a prediction of predict --out")
        values = cloud.labels
    else:
        try:
            payload = json.loads(read_text_file(p))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}: not JSON ({exc})") from None
        if not isinstance(payload, dict) or "labels" not in payload:
            raise ValueError(f"{p}: no 'labels' entry: not a prediction of predict --out")
        names = payload.get("class_names")
        if names is not None and [str(n) for n in names] != [str(n) for n in class_names]:
            raise ValueError(
                f"{p}: its class names {list(names)} are not the model's {list(class_names)}: the labels would be read "
                "as other classes; give the model that wrote them"
            )
        try:
            values = np.asarray(payload["labels"])
        except ValueError:
            raise ValueError(f"{p}: 'labels' must be a list of integers, one per point") from None
    values = np.asarray(values)
    if values.ndim == 0:
        raise ValueError(f"{p}: one label for the whole cloud (a classifier's prediction), not one per point")
    if values.ndim > 2 or (values.ndim == 2 and values.shape[1] != 1):
        raise ValueError(f"{p}: labels must hold one value per point ([N] or [N, 1]), got shape {values.shape}")
    values = values.reshape(-1)
    problem = label_values_problem(values)
    if problem:
        raise ValueError(f"{p}: {problem}")
    if len(values) != int(num_points):
        raise ValueError(f"{p}: {len(values)} labels for the {int(num_points)} points of {scan}")
    ids = values.astype(np.int64)
    bad = np.flatnonzero((ids < 0) | (ids >= len(class_names)))
    if bad.size:
        raise ValueError(
            f"{p}: label {int(ids[bad[0]])} (row {int(bad[0])}) outside 0..{len(class_names) - 1} "
            f"({len(class_names)} classes of the model)"
        )
    return ids
