"""Inference on your own point clouds: :func:`load` a trained model, :meth:`Predictor.predict`.

    import gridify
    model = gridify.load("outputs/procedural/checkpoints/model.pt")   # or a Lightning .ckpt
    pred = model.predict("scan.ply")               # a path, an [N, 3] array/tensor or a PointCloud
    pred.labels, pred.probabilities, pred.names    # [N] / [N, K] (segmentation) or [] / [K]

What :meth:`Predictor.predict` does to a cloud of ``N`` points (any ``N >= 1``):

1. **Normalization, as in training.** The whole cloud is centred on its centroid and scaled into
   the unit sphere (``p' = (p - mean(p)) / max_j |p_j - mean(p)|``, the datasets' default
   :class:`gridify.transforms.Normalize`), unless the checkpoint's config says
   ``data.normalize: false``. Normals are unchanged by this.
2. **Any N.** Models are trained on clouds of ``n = num_points`` points (from the checkpoint's
   data config). The points are first put in a canonical order that depends only on their
   content (a lexicographic sort of ``[xyz, normals]``), so the result does not depend on the
   input order (exactly, for clouds without duplicate points).

   * classification: ``N == n``: one pass over the cloud. Otherwise ``num_votes`` subsets of
     ``n`` points are drawn with a seeded generator (without replacement when ``N > n``; when
     ``N < n`` every point is kept and ``n - N`` are repeated, like the training sampler), and
     their softmax probabilities are averaged.
   * segmentation: every point is labelled. A seeded permutation splits the cloud into
     ``ceil(N / n)`` chunks of nearly equal size (at most ``n`` points each; one chunk when
     ``N <= n``), each chunk is segmented as one cloud of the batch, and the per-point
     labels/probabilities are scattered back to the input order.
   * scene segmentation (``scene_segmenter`` checkpoints, clouds in metres): nothing is normalized
     (large-offset coordinates, UTM metres, are only moved in float64 so that their bounding box is
     centred on the origin, :func:`gridify.io.centre_large_offset`, as the datasets move them); the
     features the model was trained with (``xyz``, ``color``, ``normal``, ``strength`` =
     the file's ``intensity``, ``height`` = ``z`` above the scene's 1st percentile of z) are built from the file (or passed as
     ``features=``), and :func:`gridify.scene_inference.predict_scene` scores every point through
     fragments and crops of the training ``voxel_size`` and ``max_points`` (memory bounded by one
     batch of crops; ``progress=`` reports the crops done).
3. Segmentation models trained with object categories (ShapeNet-Part style) need
   ``category=`` (a name or an index); the argmax is then restricted to that category's parts
   (as the ShapeNet-Part metric does), and those parts' probabilities sum to 1.

:func:`gridify` is the functional form of the gridification layer for custom clouds.

Input conversion never loses what matters: coordinates are centred and scaled in float64 before
they are cast to float32 (UTM coordinates ~5e5 m keep their centimetres; 1e300 normalizes like
1), ragged lists, unsupported dtypes and values beyond float32 are refused with a message
naming them, and every size argument (``num_votes``, ``batch_size``) is checked against the
allocation limit before anything is allocated. A call that fails leaves the model as it was
(train/eval flags, buffers, caches: :func:`gridify.nn.state.all_or_nothing`).

This module needs only PyTorch and NumPy (and :mod:`gridify.io` for files).
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn

from ._checks import check_alloc, check_batch, check_int, check_positive_int, fail
from ._pretrained import PRETRAINED, pretrained_file
from .checkpoint import CheckpointError, build_model_from_checkpoint, load_checkpoint
from .io import PointCloud, centre_large_offset, read_points, reader_takes
from .nn.state import all_or_nothing, evaluating
from .registry import TASKS
from .tasks import get_task, task_names
from .transforms import centre_and_scale, check_up_axis, to_z_up

__all__ = [
    "load",
    "PRETRAINED",
    "pretrained_path",
    "Predictor",
    "Prediction",
    "gridify",
    "normalize_cloud",
    "DEFAULT_NUM_POINTS",
]

#: points per training cloud of each dataset when the config does not say (the constructors' defaults)
DEFAULT_NUM_POINTS = {"procedural": 1024, "modelnet": 1024, "modelnet10": 1024, "modelnet40": 1024, "shapenet": 2048}

PointsLike = Union[np.ndarray, Tensor, PointCloud, str, "os.PathLike[str]"]


# --------------------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------------------
def _to_numpy(a: Any, name: str, where: str) -> np.ndarray:
    """``a`` (array, tensor, nested list) as a numeric numpy array, without losing precision."""
    if isinstance(a, Tensor):
        if a.device.type == "meta":
            raise ValueError(f"{where}: {name} is a meta tensor (shapes only, no values); pass real values")
        t = a.detach().cpu()
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16; float32 holds it exactly
            t = t.float()
        if t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{where}: {name} must hold real numbers, got dtype {t.dtype}")
        a = t.numpy()
    if not isinstance(a, np.ndarray):
        if not isinstance(a, (list, tuple)):
            raise TypeError(
                f"{where}: {name} must be a numpy array, a torch tensor, a gridify.io.PointCloud "
                f"or a file path, got {type(a).__name__}"
            )
        try:
            a = np.asarray(a)
        except ValueError:
            raise ValueError(
                f"{where}: {name} is a ragged nested list (rows of different lengths); give every "
                f"point the same number of coordinates"
            ) from None
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{where}: {name} must hold numbers, got dtype {a.dtype}")
    return a


def _as_float32(a: np.ndarray, name: str, where: str) -> np.ndarray:
    """``a`` in float32, refusing values that only overflow in float32 (finite before the cast)."""
    with np.errstate(over="ignore"):
        out = a.astype(np.float32)
    if not np.isfinite(out).all():
        bad = int((~np.isfinite(out)).reshape(len(out), -1).any(1).sum())
        raise ValueError(
            f"{where}: {name} hold values beyond float32's range (|v| > 3.4e38) in {bad} of "
            f"{len(out)} points; scale them (normalize=True centres and scales in float64 first)"
        )
    return out


def _read_cloud(points: PointsLike, normals: Any, where: str) -> Tuple[np.ndarray, Optional[np.ndarray], str]:
    """``(points [N, 3] float64, normals [N, 3] float32 or None, source)`` from any supported input.

    The points stay in float64 until they are normalized (see :meth:`Predictor.prepare`).
    """
    source = ""
    if isinstance(points, (str, os.PathLike)):
        points = read_points(points)
    if isinstance(points, PointCloud):
        source = points.source
        if normals is None:
            normals = points.normals
        points = points.points
    pos = _to_numpy(points, "points", where)
    if pos.ndim != 2 or pos.shape[-1] != 3:
        hint = " (pass normals separately: normals=...)" if pos.ndim == 2 and pos.shape[-1] == 6 else ""
        raise ValueError(f"{where}: points must have shape [N, 3], got {tuple(pos.shape)}{hint}")
    if pos.shape[0] == 0:
        raise ValueError(f"{where}: the cloud is empty (0 points)")
    pos = pos.astype(np.float64)
    if not np.isfinite(pos).all():
        bad = int((~np.isfinite(pos)).any(1).sum())
        raise ValueError(f"{where}: points contain NaN/Inf values ({bad} of {len(pos)} points); drop them first")
    if normals is not None:
        nrm = _to_numpy(normals, "normals", where)
        if nrm.shape != pos.shape:
            raise ValueError(f"{where}: normals must have shape {list(pos.shape)} like points, got {tuple(nrm.shape)}")
        if not np.isfinite(nrm).all():
            raise ValueError(f"{where}: normals contain NaN/Inf values")
        normals = _as_float32(nrm, "normals", where)
    return pos, normals, source


def normalize_cloud(pos: np.ndarray) -> Tuple[np.ndarray, np.ndarray, float]:
    """Centre on the centroid and scale into the unit sphere: ``(p - c) / s``.

    Returns ``(normalized [N, 3] float32, c [3], s)`` with ``s = max_j |p_j - c|``; the
    original points are ``normalized * s + c``. Computed in float64 (the input is not cast to
    float32 first) and without overflow (:func:`gridify.transforms.centre_and_scale`). Raises
    ValueError for a zero-extent cloud.
    """
    try:
        q, c, s = centre_and_scale(pos)
    except ValueError as exc:
        raise ValueError(f"normalize_cloud: {exc}") from None
    return q.astype(np.float32), c, s


def canonical_order(pos: np.ndarray, normals: Optional[np.ndarray] = None) -> np.ndarray:
    """A permutation that depends only on the rows' content: lexicographic by ``[x, y, z, normals]``."""
    cols = [pos[:, 2], pos[:, 1], pos[:, 0]]
    if normals is not None:
        cols = [normals[:, 2], normals[:, 1], normals[:, 0]] + cols
    return np.lexsort(cols)  # the last key is the primary one


def estimate_normals(pos: np.ndarray, k: int = 30) -> np.ndarray:
    """Unit normals from the covariance of the ``k`` nearest neighbours (Open3D, imported lazily).

    Normals are oriented away from the centroid (``n . (p - mean) >= 0``), which suits closed,
    roughly star-shaped objects; open scans may get some flipped normals.
    """
    check_int("estimate_normals", "k", k)
    pos = _to_numpy(pos, "pos", "estimate_normals")
    if pos.ndim != 2 or pos.shape[1] != 3 or len(pos) == 0 or not np.isfinite(pos).all():
        raise ValueError(f"estimate_normals: pos must be a finite, non-empty [N, 3] array, got shape {pos.shape}")
    try:
        import open3d as o3d
    except ImportError as exc:  # pragma: no cover - open3d is a dependency
        raise ImportError("estimate_normals needs open3d (pip install open3d)") from exc
    pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(np.asarray(pos, dtype=np.float64)))
    pc.estimate_normals(o3d.geometry.KDTreeSearchParamKNN(int(min(k, max(len(pos) - 1, 1)))))
    n = np.asarray(pc.normals, dtype=np.float32)
    if n.shape != (len(pos), 3):
        raise ValueError(f"estimate_normals: could not estimate normals for {len(pos)} points")
    out = np.asarray(pos, dtype=np.float64) - np.asarray(pos, dtype=np.float64).mean(0)
    flip = (n * out).sum(1) < 0
    n[flip] *= -1
    return n


_estimate_normals = estimate_normals  # Predictor methods take an ``estimate_normals`` flag


def _read_scene(points: PointsLike) -> Any:
    """A file read with every per-point field its format holds (LiDAR intensity and the like), so a
    scene segmenter finds the features it was trained with; anything else is returned as given."""
    if isinstance(points, (str, os.PathLike)):
        return read_points(points, fields="all") if reader_takes(points, "fields") else read_points(points)
    return points


# --------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------
# the predictor
# --------------------------------------------------------------------------------------
class Predictor(nn.Module):
    """A trained gridified model plus what is needed to run it on new clouds.

    Build it with :func:`load`. ``forward`` is the bare model's forward (normalized, PyG-style
    inputs); :meth:`predict` and :meth:`embed` take raw clouds of any size (see the module
    docstring for the exact procedure).

    Attributes:
        model: the network (eval mode). task: a registered task (:mod:`gridify.tasks`); ``dense``:
            it labels every point (segmentation, scene_segmentation) rather than the cloud.
        class_names: names of the outputs (classes, or parts for segmentation).
        category_names / category_to_parts: object categories of a segmentation model (or None).
        num_points: points per training cloud ``n``. normalize: whether clouds are normalized.
        in_channels / use_normals: point features the model takes (6 = xyz + normals).
        gridify_version: the version that trained the model. meta: the checkpoint's info/config.

    Shapes:
        forward: pos ``[N, 3]``, x ``[N, F]``, batch ``[N]`` -> logits ``[B, K]`` or ``[N, K]``.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        task: str,
        class_names: Sequence[str],
        num_points: Optional[int],
        in_channels: int,
        normalize: bool = True,
        category_names: Optional[Sequence[str]] = None,
        category_to_parts: Optional[Sequence[Sequence[int]]] = None,
        gridify_version: Optional[str] = None,
        meta: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise ValueError(f"Predictor: model must be a torch.nn.Module, got {type(model).__name__}")
        if task not in TASKS or not get_task(task).predictor:
            raise ValueError(
                f"Predictor: task must be one of {[n for n in task_names() if get_task(n).predictor]}, got {task!r}"
            )
        check_int("Predictor", "num_points", num_points, 1, allow_none=True)
        # a scene segmenter may take no features beside its coordinates (in_channels=0)
        check_int("Predictor", "in_channels", in_channels, 0 if get_task(task).whole_scenes else 1)
        if isinstance(class_names, str) or not class_names:
            raise ValueError(f"Predictor: class_names must be a non-empty list of names, got {class_names!r}")
        self.model = model.eval()
        self.task = task
        self.class_names = [str(c) for c in class_names]
        self.num_points = None if num_points is None else int(num_points)
        self.in_channels = int(in_channels)
        self.use_normals = self.in_channels == 6
        self.normalize = bool(normalize)
        self.category_names = None if category_names is None else [str(c) for c in category_names]
        self.category_to_parts = None if category_to_parts is None else [list(map(int, p)) for p in category_to_parts]
        self.num_categories = int(getattr(model, "num_categories", 0) or 0)
        self.gridify_version = gridify_version
        self.meta = dict(meta or {})
        self.eval()

    # ---- plumbing ----------------------------------------------------------------------
    @property
    def dense(self) -> bool:
        """Whether :meth:`predict` labels every point (``labels`` ``[N]``) rather than the cloud (``[]``):
        the task's :attr:`gridify.tasks.Task.dense`."""
        return get_task(self.task).dense

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def resolution(self) -> Union[int, Tuple[int, ...]]:
        """The model's grid resolution ``R`` (a per-axis tuple for a scene segmenter's grid)."""
        r = self.model.resolution
        return tuple(int(v) for v in r) if isinstance(r, (tuple, list)) else int(r)

    def forward(
        self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None, category: Optional[Tensor] = None
    ) -> Tensor:
        if self.num_categories or category is not None:  # a part segmenter trained with object categories
            return self.model(pos, x, batch, category=category)
        return self.model(pos, x, batch)

    def extra_repr(self) -> str:
        return (
            f"task={self.task}, classes={len(self.class_names)}, num_points={self.num_points}, "
            f"in_channels={self.in_channels}, normalize={self.normalize}, version={self.gridify_version}"
        )

    def prepare(
        self,
        points: PointsLike,
        normals: Any = None,
        *,
        estimate_normals: bool = False,
        up_axis: str = "z",
        where: str = "Predictor.prepare",
    ) -> Dict[str, Any]:
        """Validate and normalize one cloud: a dict with ``pos`` ``[N, 3]`` (normalized, z up), ``x``
        ``[N, F]`` (model features), ``center`` ``[3]``, ``scale``, ``normals`` and ``source``.
        ``up_axis``: the cloud's up direction (:data:`gridify.transforms.UP_AXES`), rotated to z first."""
        up_axis = check_up_axis(where, up_axis)
        pos, nrm, source = _read_cloud(points, normals, where)
        pos, nrm = to_z_up(pos, up_axis, nrm)
        if self.use_normals and nrm is None:
            if not estimate_normals:
                raise ValueError(
                    f"{where}: the model was trained with normals (in_channels=6) but the cloud has "
                    f"none; pass normals=..., a file with normals (or a mesh), or estimate them (estimate_normals=True; "
                    f"gridify predict/show: --estimate-normals)"
                )
            nrm = _estimate_normals(pos)
        center, scale = np.zeros(3), 1.0
        if self.normalize:
            try:
                pos, center, scale = normalize_cloud(pos)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
        else:
            pos = _as_float32(pos, "points", where)
        x = np.concatenate([pos, nrm], 1) if self.use_normals else pos
        if x.shape[1] != self.in_channels:
            raise ValueError(
                f"{where}: the model takes {self.in_channels} features per point, but the cloud gives {x.shape[1]}"
            )
        return {"pos": pos, "x": x, "normals": nrm, "center": center, "scale": scale, "source": source}

    def _category(self, category: Any, where: str) -> Optional[int]:
        if self.num_categories == 0:  # only part segmenters trained with object categories have some
            if category is not None:
                raise ValueError(
                    f"{where}: category is only used by segmentation models trained with object "
                    f"categories; this model does not take one"
                )
            return None
        names = self.category_names or [str(i) for i in range(self.num_categories)]
        if category is None:
            raise ValueError(
                f"{where}: this segmentation model needs the object category: pass category= (gridify "
                f"predict / show: --category) one of {names} (or its index)"
            )
        if isinstance(category, str):
            low = [n.lower() for n in names]
            if category.lower() in low:
                return low.index(category.lower())
            if category.isascii() and category.isdigit():  # "²".isdigit() is True but int() refuses it
                category = int(category)
            else:
                raise ValueError(f"{where}: unknown category {category!r}; known: {names}")
        if (
            isinstance(category, bool)
            or not isinstance(category, (int, np.integer))
            or not 0 <= int(category) < self.num_categories
        ):
            raise ValueError(
                f"{where}: category must be a name or an index in [0, {self.num_categories}), got {category!r}"
            )
        return int(category)

    # ---- prediction ----------------------------------------------------------------------
    @torch.no_grad()
    def predict(
        self,
        points: PointsLike,
        normals: Any = None,
        category: Any = None,
        *,
        num_votes: Optional[int] = None,
        seed: int = 0,
        batch_size: int = 8,
        estimate_normals: bool = False,
        features: Any = None,
        progress: Optional[Callable[[int, int], None]] = None,
        up_axis: str = "z",
    ) -> Prediction:
        """Labels and probabilities for one cloud of any size (see the module docstring).

        Args:
            points: ``[N, 3]`` numpy array or tensor, a :class:`gridify.io.PointCloud`, or a file
                path (read with :func:`gridify.io.read_points`; its normals are used).
            normals: ``[N, 3]`` normals (required when the model was trained with normals,
                unless the file/PointCloud has them or ``estimate_normals=True``).
            category: object category (name or index) for segmentation models that need one.
            num_votes: random subsets averaged by a classifier when ``N != num_points`` (default 4);
                views (rotations about z) averaged by a scene segmenter (default 1).
            seed: seed of the subsets / chunks (the result is a function of the cloud and seed).
            batch_size: subsets, chunks or scene crops per forward pass (bounds the memory).
            estimate_normals: estimate missing normals with Open3D (see :func:`estimate_normals`).
            features: scene segmenters only: the model's per-point features ``[N, F]`` (the columns
                of its training ``features``), instead of building them from the file.
            progress: scene segmenters only: ``progress(crops_done, crops_total)`` after every pass.
            up_axis: the cloud's up direction, ``"z"`` (default; what the shipped models expect),
                ``"y"`` (e.g. ``modelnet40_normal_resampled``, glTF), ``"x"`` or their negatives: the
                points (and normals) are rotated to z up before anything else (a proper rotation,
                :func:`gridify.transforms.up_axis_rotation`); labels keep the input order.

        Returns:
            A :class:`Prediction`.

        Raises:
            ValueError: empty cloud, wrong shapes, NaN/Inf, missing normals, missing/unknown
                category. TypeError: unsupported input type.
        """
        where = f"{type(self).__name__}.predict"
        up_axis = check_up_axis(where, up_axis)
        if self.whole_scenes:
            return self._predict_scene(
                points,
                normals,
                category,
                1 if num_votes is None else num_votes,
                seed,
                batch_size,
                estimate_normals,
                features,
                progress,
                where,
                up_axis,
            )
        if features is not None or progress is not None:
            fail(where, f"features= and progress= are for scene segmenters; this is a {self.task} model")
        num_votes = 4 if num_votes is None else num_votes
        self._check_run(where, num_votes, batch_size, seed, estimate_normals)
        cat = self._category(category, where)
        cloud = self.prepare(points, normals, estimate_normals=estimate_normals, up_axis=up_axis, where=where)
        return self._predict_cloud(cloud, cat, num_votes, seed, batch_size, where)

    def _predict_cloud(
        self, cloud: Dict[str, Any], cat: Optional[int], num_votes: int, seed: int, batch_size: int, where: str
    ) -> Prediction:
        """:meth:`predict` of a cloud already read and normalized (:meth:`prepare`) and a checked category."""
        with evaluating(self.model), all_or_nothing(self.model):
            if not self.dense:
                self._check_batch_sizes(where, len(cloud["pos"]), num_votes, batch_size)
                probs = self._classify(cloud, num_votes, seed, batch_size, "probs")
            else:
                self._check_batch_sizes(where, len(cloud["pos"]), 1, batch_size)
                probs = self._segment(cloud, cat, seed, batch_size)
        labels = probs.argmax(-1).astype(np.int64)
        cat_name = None
        if cat is not None:
            cat_name = (self.category_names or [str(i) for i in range(self.num_categories)])[cat]
        return Prediction(
            labels=np.asarray(labels),
            probabilities=probs,
            class_names=list(self.class_names),
            task=self.task,
            num_points=int(len(cloud["pos"])),
            category=cat_name,
            source=cloud["source"],
        )

    @property
    def whole_scenes(self) -> bool:
        """Whether the model labels metric scenes (:attr:`gridify.tasks.Task.whole_scenes`)."""
        return get_task(self.task).whole_scenes

    @property
    def scene_features(self) -> Tuple[str, ...]:
        """The names of the per-point features a scene segmenter was trained with (``x``'s columns)."""
        info = self.meta.get("info") or {}
        names = info.get("features")
        if names is None:
            names = ((self.meta.get("config") or {}).get("data") or {}).get("features")
        if names is None:
            names = () if self.in_channels == 0 else None
        if names is None:
            fail(
                "Predictor",
                f"the checkpoint does not record the scene features of its x ({self.in_channels} "
                f"columns, data.features); in Python, pass features=[N, {self.in_channels}] to predict (gridify "
                f"predict builds them from the recorded names only)",
            )
        return tuple([names] if isinstance(names, str) else names)

    def _scene_x(self, cloud: PointCloud, pos: np.ndarray, estimate_normals: bool, where: str) -> np.ndarray:
        """The model's features of a metric scene (:attr:`scene_features`), built by the datasets' own
        :func:`gridify.datasets.scene_base.build_scene_features` from what the cloud has."""
        from .datasets._common import DatasetError  # noqa: PLC0415 (datasets sit beside api's layer)
        from .datasets.scene_base import build_scene_features  # noqa: PLC0415

        names = self.scene_features
        what = cloud.source or "the cloud"
        fields = {k.lower(): v for k, v in (cloud.fields or {}).items()}
        if "color" in names and cloud.colors is None:
            fail(
                where,
                f"the model was trained with colours (features {list(names)}) but {what} has none; use a model "
                f"trained without them (data.features without color: the shipped scene_pointcept recipe trains on "
                f"height only), read a file with colours, or in Python pass features=",
            )
        nrm = cloud.normals
        if "normal" in names and nrm is None:
            if not estimate_normals:
                fail(
                    where,
                    f"the model was trained with normals (features {list(names)}) but {what} has none; pass "
                    f"estimate_normals=True (--estimate-normals)",
                )
            nrm = _estimate_normals(pos)
        strength = None
        if {"strength", "intensity"} & set(names):
            key = next((k for k in ("intensity", "strength", "remission", "reflectance") if k in fields), None)
            if key is None:
                fail(
                    where,
                    f"the model was trained with LiDAR intensity (features {list(names)}) but {what} has no "
                    f"intensity field (fields: {sorted(fields) or 'none'}); read a file that has one (.bin, .las, "
                    f".ply/.pcd with an intensity property) or in Python pass features=",
                )
            strength = fields[key]
        try:
            return build_scene_features(names, pos, color=cloud.colors, normal=nrm, strength=strength, where=what)
        except DatasetError as exc:
            fail(where, str(exc))

    def _predict_scene(
        self,
        points: PointsLike,
        normals: Any,
        category: Any,
        num_votes: Any,
        seed: Any,
        batch_size: Any,
        estimate_normals: Any,
        features: Any,
        progress: Any,
        where: str,
        up_axis: str = "z",
    ) -> Prediction:
        from .scene_inference import predict_scene  # noqa: PLC0415

        self._check_run(where, num_votes, batch_size, seed, estimate_normals)
        if category is not None:
            fail(where, "category (--category) is only used by part segmenters; a scene segmenter takes none")
        if progress is not None and not callable(progress):
            fail(where, f"progress must be None or callable as progress(done, total), got {type(progress).__name__}")
        points = _read_scene(points)
        cloud = points if isinstance(points, PointCloud) else PointCloud(points=_to_numpy(points, "points", where))
        pos, nrm, source = _read_cloud(cloud, normals, where)
        pos, nrm = to_z_up(pos, up_axis, nrm)
        if nrm is not None:
            cloud = PointCloud(
                points=cloud.points, normals=nrm, colors=cloud.colors, fields=cloud.fields, source=cloud.source
            )
        pos = _as_float32(centre_large_offset(pos)[0], "points", where)  # UTM metres: centred in float64 first
        x = self._scene_point_features(cloud, pos, features, estimate_normals, source, where)
        info = self.meta.get("info") or {}
        dev = self.device
        with evaluating(self.model), all_or_nothing(self.model):
            probs = predict_scene(
                self.model,
                torch.from_numpy(pos).to(dev),
                torch.from_numpy(x).to(dev),
                voxel_size=info.get("voxel_size"),
                max_points=info.get("max_points"),
                votes=num_votes,
                seed=seed,
                batch_size=batch_size,
                progress=progress,
            )
        probs_np = probs.float().cpu().numpy()
        return Prediction(
            labels=probs_np.argmax(-1).astype(np.int64),
            probabilities=probs_np,
            class_names=list(self.class_names),
            task=self.task,
            num_points=int(len(pos)),
            source=source,
        )

    def _scene_point_features(
        self, cloud: PointCloud, pos: np.ndarray, features: Any, estimate_normals: bool, source: str, where: str
    ) -> np.ndarray:
        """The scene model's float32 input features ``[N, F]``: ``features`` as given or built from the cloud."""
        if features is not None:
            x = _to_numpy(features, "features", where)
            if x.ndim != 2 or x.shape[0] != len(pos) or x.shape[1] != self.in_channels:
                fail(
                    where,
                    f"features must have shape [N, F] = [{len(pos)}, {self.in_channels}] (one row per point, "
                    f"the model's in_channels), got {tuple(x.shape)}",
                )
            if not np.isfinite(x).all():
                bad = int(np.flatnonzero(~np.isfinite(x).all(1))[0])
                fail(where, f"features contain NaN/Inf values (row {bad})")
            return _as_float32(x, "features", where)
        x = self._scene_x(cloud, pos, estimate_normals, where)
        if x.shape[1] != self.in_channels:
            fail(
                where,
                f"the scene features {list(self.scene_features)} give {x.shape[1]} columns but the model "
                f"takes {self.in_channels}",
            )
        if not np.isfinite(x).all():
            bad = int(np.flatnonzero(~np.isfinite(x).all(1))[0])
            fail(where, f"the features {list(self.scene_features)} of {source or 'the cloud'} hold NaN/Inf (row {bad})")
        return x

    def _check_run(self, where: str, num_votes: Any, batch_size: Any, seed: Any, estimate_normals: Any = False) -> None:
        """The scalar arguments of :meth:`predict` / :meth:`embed` / :meth:`inspect`."""
        check_positive_int(where, num_votes=num_votes, batch_size=batch_size)
        check_int(where, "seed", seed, 0)
        if not isinstance(estimate_normals, bool):
            fail(where, f"estimate_normals must be a bool, got {estimate_normals!r}")

    def _check_batch_sizes(self, where: str, n_in: int, num_votes: int, batch_size: int) -> None:
        """Refuse vote tables and forward batches beyond the allocation limit, before allocating.

        Votes: one int64 index per point of every subset; a forward: ``min(batch_size, count)``
        clouds of ``n`` points, each with a grid of ``R^3 x C`` features and its activations (an
        estimate: 16 grid-sized float32 tensors per cloud).
        """
        n = self.num_points or n_in
        count = math.ceil(n_in / n) if self.dense else num_votes
        check_alloc(where, f"num_votes={num_votes} (subsets of {n} points)", 8 * n * count)
        R = getattr(self.model, "resolution", 0) or 0
        nodes = math.prod(int(r) for r in R) if isinstance(R, (tuple, list)) else int(R) ** 3  # per-axis grids too
        C = int(getattr(getattr(self.model, "gridify", None), "out_channels", 0) or 0)
        per_cloud = n * (4 * self.in_channels + 64) + 16 * 4 * C * nodes
        check_alloc(
            where,
            f"batch_size={batch_size} (up to {min(batch_size, count)} clouds of {n} points per forward pass)",
            min(batch_size, count) * per_cloud,
        )

    def _subsets(self, n_in: int, order: np.ndarray, num_votes: int, seed: int) -> List[np.ndarray]:
        n = self.num_points
        if n is None or n_in == n:
            return [order]
        rng = np.random.default_rng(int(seed))
        out = []
        for _ in range(num_votes):
            if n_in > n:
                idx = np.sort(rng.choice(n_in, size=n, replace=False))
            else:
                idx = np.concatenate([np.arange(n_in), rng.integers(0, n_in, size=n - n_in)])
            out.append(order[idx])
        return out

    def _classify(self, cloud: Dict[str, Any], num_votes: int, seed: int, batch_size: int, what: str) -> np.ndarray:
        order = canonical_order(cloud["pos"], cloud["normals"])
        subsets = self._subsets(len(order), order, num_votes, seed)
        dev = self.device
        pos_all = torch.from_numpy(cloud["pos"]).to(dev)
        x_all = torch.from_numpy(np.ascontiguousarray(cloud["x"])).to(dev)
        outs = []
        for s in range(0, len(subsets), batch_size):
            idx = torch.from_numpy(np.stack(subsets[s : s + batch_size])).to(dev)  # [V, n]
            pos, x = pos_all[idx], x_all[idx]
            if what == "probs":
                outs.append(torch.softmax(self.model(pos, x).float(), -1))
            else:
                outs.append(self._embed_dense(pos, x).float())
        return torch.cat(outs).mean(0).cpu().numpy()

    def _chunks(self, cloud: Dict[str, Any], seed: int) -> List[np.ndarray]:
        n_in = len(cloud["pos"])
        order = canonical_order(cloud["pos"], cloud["normals"])
        n = self.num_points
        if n is None or n_in <= n:
            return [order]
        perm = order[np.random.default_rng(int(seed)).permutation(n_in)]
        return np.array_split(perm, math.ceil(n_in / n))

    def _segment(self, cloud: Dict[str, Any], cat: Optional[int], seed: int, batch_size: int) -> np.ndarray:
        chunks = self._chunks(cloud, seed)
        dev = self.device
        pos_all = torch.from_numpy(cloud["pos"]).to(dev)
        x_all = torch.from_numpy(np.ascontiguousarray(cloud["x"])).to(dev)
        K = len(self.class_names)
        probs = torch.zeros(len(pos_all), K)
        mask = None
        if cat is not None and self.category_to_parts is not None:
            mask = torch.full((K,), float("-inf"))
            mask[self.category_to_parts[cat]] = 0.0
        for s in range(0, len(chunks), batch_size):
            group = chunks[s : s + batch_size]
            idx = torch.from_numpy(np.concatenate(group)).to(dev)
            batch = torch.repeat_interleave(
                torch.arange(len(group), device=dev), torch.tensor([len(g) for g in group], device=dev)
            )
            category = None if cat is None else torch.full((len(group),), cat, dtype=torch.long, device=dev)
            logits = self(pos_all[idx], x_all[idx], batch, category).float().cpu()
            if mask is not None:
                logits = logits + mask
            probs[idx.cpu()] = torch.softmax(logits, -1)
        return probs.numpy()

    # ---- features ----------------------------------------------------------------------
    def _embed_dense(self, pos: Tensor, x: Tensor) -> Tensor:
        embed = getattr(self.model, "embed", None)
        if callable(embed):
            return embed(pos, x)
        return self.model.trunk(pos, x).flatten(2).mean(-1)

    @torch.no_grad()
    def embed(
        self,
        points: PointsLike,
        normals: Any = None,
        *,
        num_votes: int = 4,
        seed: int = 0,
        batch_size: int = 8,
        estimate_normals: bool = False,
    ) -> np.ndarray:
        """One descriptor per cloud: the pooled backbone grid features ``[C]``.

        For a classifier this is ``model.embed`` (the input of its MLP head, ``[2C]`` with
        ``pool="meanmax"``); for a segmenter the mean of its backbone grid. Subsets are drawn
        and averaged exactly as :meth:`predict` does for a classifier.
        """
        where = f"{type(self).__name__}.embed"
        self._check_run(where, num_votes, batch_size, seed, estimate_normals)
        cloud = self.prepare(points, normals, estimate_normals=estimate_normals, where=where)
        with evaluating(self.model), all_or_nothing(self.model):
            self._check_batch_sizes(where, len(cloud["pos"]), num_votes, batch_size)
            return self._classify(cloud, num_votes, seed, batch_size, "embed")

    @torch.no_grad()
    def inspect(
        self,
        points: PointsLike,
        normals: Any = None,
        category: Any = None,
        *,
        seed: int = 0,
        estimate_normals: bool = False,
        up_axis: str = "z",
    ) -> Dict[str, Any]:
        """Everything :func:`gridify.vis.show` draws, in the normalized frame (z up: ``up_axis`` as in
        :meth:`predict`).

        Returns a dict: ``pos`` ``[N, 3]`` (all points, normalized), ``prediction``
        (:class:`Prediction`), ``grid`` ``[C, R, R, R]`` (the *gridification* output, i.e. the
        learned grid before the backbone) and ``graph`` (its :class:`BipartiteGraph`), both for
        one canonical subset/chunk of ``num_points`` points (the whole cloud when smaller).
        A scene segmenter: ``pos`` in metres, every point labelled, ``grid`` and ``graph`` None
        (each crop has its own grid box).
        """
        where = f"{type(self).__name__}.inspect"
        self._check_run(where, 1, 1, seed, estimate_normals)
        up_axis = check_up_axis(where, up_axis)
        if self.whole_scenes:  # metric points, every one labelled; no single grid frame to draw
            points = _read_scene(points)  # read once, with the fields the features may need
            pred = self.predict(
                points, normals, category, seed=seed, estimate_normals=estimate_normals, up_axis=up_axis
            )
            pos, _, _ = _read_cloud(points, normals, where)
            pos, _ = to_z_up(pos, up_axis)
            return {
                "pos": centre_large_offset(pos)[0].astype(np.float32),
                "prediction": pred,
                "grid": None,
                "graph": None,
                "subset": None,
                "center": np.zeros(3),
                "scale": 1.0,
            }
        if not callable(getattr(self.model, "gridify", None)):
            fail(where, f"the model ({type(self.model).__name__}) has no gridification to inspect")
        cat = self._category(category, where)
        cloud = self.prepare(points, normals, estimate_normals=estimate_normals, up_axis=up_axis, where=where)
        pred = self._predict_cloud(cloud, cat, 4, seed, 8, where)  # predict's default votes and batch size
        sub = (
            self._chunks(cloud, seed)[0]
            if self.dense
            else self._subsets(len(cloud["pos"]), canonical_order(cloud["pos"], cloud["normals"]), 1, seed)[0]
        )
        dev = self.device
        pos = torch.from_numpy(cloud["pos"][sub]).to(dev)
        x = torch.from_numpy(np.ascontiguousarray(cloud["x"][sub])).to(dev)
        with evaluating(self.model), all_or_nothing(self.model):
            grid, graph = self.model.gridify(pos, x, return_graph=True)
        return {
            "pos": cloud["pos"],
            "prediction": pred,
            "grid": grid[0].cpu(),
            "graph": graph,
            "subset": sub,
            "center": cloud["center"],
            "scale": cloud["scale"],
        }


def _num_points_of(config: Dict[str, Any]) -> Optional[int]:
    data = config.get("data") or {}
    for section in (data.get("test") or {}, data):
        if "num_points" in section:
            v = section["num_points"]
            return None if v is None else int(v)
    return DEFAULT_NUM_POINTS.get(str(data.get("name", "procedural")), 1024)


#: Models shipped with the package (``gridify/pretrained/<file>``), loadable by name.
#: shipped model name -> its file in ``gridify/pretrained/`` (model cards: docs/guides/prediction.md)
def pretrained_path(name: str) -> Path:
    """The file of the shipped model ``name`` (see ``gridify.api.PRETRAINED``)."""
    path = pretrained_file(name)
    if not path.is_file():
        raise CheckpointError(f"the pretrained model {name!r} is missing from this installation ({path})")
    return path


def load(
    path: Union[str, "os.PathLike[str]"], device: Union[str, torch.device] = "cpu", reparameterize: bool = True
) -> Predictor:
    """Load a trained model (exported ``model.pt``, Lightning ``.ckpt``, or a shipped model by name).

    The file is read with ``torch.load(..., weights_only=True)`` (no code is unpickled). The
    checkpoint's metadata gives the task, class/part/category names, the training
    ``num_points`` and normalization (from the stored data config) and the gridify version.

    Args:
        path: the checkpoint file, or the name of a model shipped with the package
            (``gridify.api.PRETRAINED``: ``"modelnet10"``, ``"modelnet40"``) when no file of that name exists.
        device: where to put the model (``"cpu"``, ``"cuda"``, ...).
        reparameterize: fold reparameterizable layers into their inference form (faster, same
            outputs up to float rounding).

    Raises:
        gridify.checkpoint.CheckpointError: missing, corrupt, unsafe or foreign files, or entries of
            the wrong type (named). ValueError: a bad ``device`` or ``reparameterize``.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"gridify.load: path must be a str or os.PathLike, got {type(path).__name__}")
    if isinstance(path, str) and path in PRETRAINED and not Path(path).exists():
        path = pretrained_path(path)
    device = _check_device("gridify.load", device)
    if not isinstance(reparameterize, bool):
        raise ValueError(f"gridify.load: reparameterize must be a bool, got {reparameterize!r}")
    payload = load_checkpoint(path)
    if (
        payload["task"] not in TASKS or not get_task(payload["task"]).predictor
    ):  # sequences: build_model_from_checkpoint
        raise CheckpointError(
            f"{path}: entry 'task' is {payload['task']!r}; gridify.load serves the models of the "
            f"tasks {[n for n in task_names() if get_task(n).predictor]}"
        )
    model = build_model_from_checkpoint(payload, reparameterize=reparameterize)
    return _predictor_from_payload(path, payload, model).to(device)


def _check_scene_entries(
    path: Any, info: Dict[str, Any], data: Dict[str, Any], payload: Dict[str, Any], width: int
) -> None:
    """A scene segmenter's inference entries (``voxel_size``, ``max_points``, ``features``) of the right type,
    checked when the file is loaded: a CheckpointError naming the file and the entry, never a failure later."""
    if not get_task(str(payload.get("task"))).whole_scenes:
        return
    from .datasets.scene_base import SCENE_FEATURES  # noqa: PLC0415 (datasets sit beside api's layer)

    for key in ("voxel_size", "max_points"):
        v = info.get(key, data.get(key))
        ok = v is None or (
            not isinstance(v, bool)
            and isinstance(v, (int, float))
            and math.isfinite(v)
            and v > 0
            and (key == "voxel_size" or float(v).is_integer())
        )
        if not ok:
            kind = "a positive number of metres" if key == "voxel_size" else "a positive integer"
            raise CheckpointError(f"{path}: entry info['{key}'] must be null or {kind}, got {v!r}")
    names = info.get("features", data.get("features"))
    if names is None:
        return
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n in SCENE_FEATURES for n in names):
        raise CheckpointError(
            f"{path}: entry info['features'] must be a list of the scene feature names {list(SCENE_FEATURES)}, "
            f"got {names!r}"
        )
    if sum(SCENE_FEATURES[n] for n in names) != width:
        raise CheckpointError(
            f"{path}: entry info['features'] {list(names)} gives {sum(SCENE_FEATURES[n] for n in names)} columns but "
            f"the model takes {width}"
        )


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
    outputs = getattr(model, "num_classes", None)
    if isinstance(outputs, int) and len(class_names) != outputs:
        raise CheckpointError(
            f"{path}: entry class_names names {len(class_names)} classes but the model has {outputs} outputs"
        )
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
    parts = info.get("category_to_parts") or []
    if any(p >= len(class_names) for group in parts for p in group):
        raise CheckpointError(
            f"{path}: entry info['category_to_parts'] names parts beyond the {len(class_names)} classes"
        )
    _check_scene_entries(path, info, data, payload, in_channels)
    normalize = (info["normalization"] is not None) if "normalization" in info else bool(data.get("normalize", True))
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
    )


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


# --------------------------------------------------------------------------------------
# functional gridification
# --------------------------------------------------------------------------------------
@contextlib.contextmanager
def _seeded(seed: Optional[int]):
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def gridify(
    points: Any,
    features: Any = None,
    resolution: Optional[int] = None,
    k: Optional[int] = None,
    *,
    batch: Any = None,
    channels: int = 16,
    module: Optional[nn.Module] = None,
    seed: Optional[int] = 0,
    normalize: bool = True,
    return_graph: bool = False,
    **kwargs: Any,
):
    r"""Gridify a custom cloud onto a dense ``R^3`` grid (no training needed).

    Computes one :class:`gridify.nn.Gridification` layer,

        x_i^G = phi_upd( AGG_{j -> i} phi_msg( phi_node(f_j), phi_pos(c_i^G - p_j) ) ),

    over the bilateral kNN edges between the points ``p_j`` and the ``R^3`` nodes ``c_i^G`` of
    the grid over ``[-1, 1]^3`` (each node takes its ``k`` nearest points and each point
    sends to its ``k`` nearest nodes). ``f_j`` are ``features`` (the coordinates when None).

    * ``module=None``: the networks are a *freshly initialised* Gridification with
      ``channels`` outputs, created under ``torch.manual_seed(seed)`` (the global RNG is left
      untouched), so the result is a deterministic random-feature gridification of the
      cloud: useful to inspect the connectivity and as untrained grid features.
    * ``module=``: a given (e.g. trained) Gridification, such as ``predictor.model.gridify``;
      its ``resolution`` and ``k`` are used (passing different ones raises ValueError).

    With ``normalize`` (default) each cloud is first centred and scaled into the unit sphere
    (as the datasets do), so any cloud fits in the grid box; otherwise it must already lie in
    the module's box. Runs without gradients. A NaN / Inf in a batch is named by its cloud and
    its row within that cloud, whatever the form of the batch.

    Args:
        points: one cloud ``[N, 3]`` (array/tensor/nested list), a PointCloud or a file path;
            or a batch: dense ``[B, N, 3]``, a list of clouds (any of the one-cloud forms, of
            any sizes ``N_b``), or ``[M, 3]`` with ``batch``.
        features: ``[N, F]`` / ``[B, N, F]`` point features (a list of ``[N_b, F]`` for a list
            of clouds, ``[M, F]`` with ``batch``), or None.
        resolution: grid nodes per axis ``R`` (default 9). k: neighbours (default 9).
        batch: a PyG-style batch vector ``[M]`` (sorted cloud ids ``0..B-1``, every cloud
            non-empty) for ``points [M, 3]``.
        channels: output channels ``C`` of a fresh module. seed: its initialisation seed.
        kwargs: further :class:`Gridification` arguments for a fresh module (``omega0``,
            ``aggr``, ``message``, ``pos_embedding``, ...).
        return_graph: also return the :class:`gridify.nn.connectivity.BipartiteGraph`.

    Returns:
        ``[C, R, R, R]`` for one cloud, ``[B, C, R, R, R]`` for a batch (float32, CPU unless
        the module lives elsewhere); with ``return_graph`` a ``(grid, graph)`` pair.
    """
    where = "gridify.gridify"
    for name, flag in (("normalize", normalize), ("return_graph", return_graph)):
        if not isinstance(flag, bool):
            raise ValueError(f"{where}: {name} must be a bool, got {flag!r}")
    check_int(where, "seed", seed, 0, allow_none=True)
    if seed is not None and seed >= 1 << 64:
        raise ValueError(f"{where}: seed must be below 2**64 (torch.manual_seed's range), got {seed!r}")
    clouds, form, counts = _points_batch(points, batch, where)
    feats = _features_batch(features, [len(c) for c in clouds], form, counts is not None, where)
    pos_list = _cloud_positions(clouds, form, normalize, where)
    in_channels = 3 if feats is None else feats[0].shape[-1]
    module = _gridification_module(module, in_channels, feats is None, resolution, k, channels, seed, kwargs, where)
    grid, graph = _run_gridification(module, pos_list, feats, form)
    return (grid, graph) if return_graph else grid


def _cloud_positions(clouds: List[np.ndarray], form: str, normalize: bool, where: str) -> List[np.ndarray]:
    """The clouds' float32 coordinates, each normalized (``normalize``) or only cast (range checked)."""
    pos_list = []
    for i, p in enumerate(clouds):  # in float64, before the cast to float32: large offsets keep small steps
        at = f"{where}: " if form == "single" else f"{where}: cloud {i}: "
        if normalize:
            try:
                pos_list.append(normalize_cloud(p)[0])
            except ValueError as exc:
                raise ValueError(f"{at}{exc}") from None
        else:
            pos_list.append(_as_float32(p, "points", at[:-2]))
    return pos_list


def _run_gridification(
    module: nn.Module, pos_list: List[np.ndarray], feats: Optional[List[np.ndarray]], form: str
) -> Tuple[Tensor, Any]:
    """``(grid, graph)`` of ``module`` over the clouds, on its device, without gradients (one cloud unbatched)."""
    dev = next(module.parameters()).device
    join = np.concatenate if form == "ragged" else np.stack
    pos_t = torch.from_numpy(np.ascontiguousarray(join(pos_list))).to(dev)
    x_t = None if feats is None else torch.from_numpy(np.ascontiguousarray(join(feats))).to(dev)
    ids = (
        None
        if form != "ragged"
        else torch.arange(len(pos_list)).repeat_interleave(torch.tensor([len(c) for c in pos_list])).to(dev)
    )
    with torch.no_grad():
        grid, graph = module(pos_t, x_t, ids, return_graph=True)
    if form == "single":
        grid = grid[0]
    return grid, graph


def _is_cloud_list(points: Any) -> bool:
    """Whether ``points`` is a list of clouds (not one cloud given as a list of rows): a list or
    tuple whose items are 2-D arrays or tensors, PointClouds, paths, or lists of rows."""
    if not isinstance(points, (list, tuple)) or not points:
        return False
    first = points[0]
    if isinstance(first, (np.ndarray, Tensor)):
        return first.ndim >= 2  # a list of 1-D arrays is one cloud's rows
    return isinstance(first, (PointCloud, str, os.PathLike)) or (
        isinstance(first, (list, tuple)) and bool(first) and isinstance(first[0], (list, tuple, np.ndarray, Tensor))
    )


def _points_batch(points: Any, batch: Any, where: str) -> Tuple[List[np.ndarray], str, Optional[List[int]]]:
    """``(clouds, form, counts)``: the clouds as float64 ``[N_b, 3]`` arrays (finite, checked),
    ``form`` ``"single"`` (one cloud), ``"dense"`` (equally sized clouds, run as ``[B, N, 3]``) or
    ``"ragged"`` (run as ``[M, 3]`` with a batch vector), and ``counts`` the points per cloud of a
    ``batch`` vector (None without one)."""
    if batch is not None:
        return _points_with_batch(points, batch, where)
    if _is_cloud_list(points):
        clouds = []
        for i, item in enumerate(points):
            if isinstance(item, (list, tuple)):
                item = _to_numpy(item, f"cloud {i}", where)
            clouds.append(_cloud_array(item, f"{where}: cloud {i}"))
        _check_rows_finite(where, "points", clouds)
        return clouds, ("dense" if len({len(c) for c in clouds}) == 1 else "ragged"), None
    if isinstance(points, (str, os.PathLike, PointCloud)):
        pos, _, _ = _read_cloud(points, None, where)
        return [pos], "single", None
    arr = _to_numpy(points, "points", where)
    if arr.ndim == 2:
        pos, _, _ = _read_cloud(arr, None, where)
        return [pos], "single", None
    if arr.ndim != 3 or arr.shape[-1] != 3:
        raise ValueError(
            f"{where}: points must have shape [N, 3] or [B, N, 3] (or [M, 3] with batch=, or a list "
            f"of clouds), got {tuple(arr.shape)}"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{where}: the batch holds no points (shape {tuple(arr.shape)})")
    clouds = list(arr.astype(np.float64))
    _check_rows_finite(where, "points", clouds)
    return clouds, "dense", None


def _points_with_batch(points: Any, batch: Any, where: str) -> Tuple[List[np.ndarray], str, List[int]]:
    """``points [M, 3]`` split into clouds by the PyG-style ``batch`` vector ``[M]`` (checked)."""
    if isinstance(points, (str, os.PathLike, PointCloud)) or _is_cloud_list(points):
        raise ValueError(
            f"{where}: batch= goes with points [M, 3] (an array or tensor), got "
            f"{type(points).__name__}; a list of clouds needs no batch vector"
        )
    arr = _to_numpy(points, "points", where)
    if arr.ndim != 2 or arr.shape[-1] != 3 or arr.shape[0] == 0:
        raise ValueError(f"{where}: with batch=, points must have shape [M, 3] with M >= 1, got {tuple(arr.shape)}")
    vec = batch if isinstance(batch, Tensor) else torch.as_tensor(_to_numpy(batch, "batch", where))
    _, _, counts = check_batch(where, "batch", vec, arr.shape[0])
    sizes = [int(c) for c in counts.tolist()]
    clouds = np.split(arr.astype(np.float64), np.cumsum(sizes)[:-1])
    _check_rows_finite(where, "points", clouds)
    return clouds, "ragged", sizes


def _cloud_array(points: Any, where: str) -> np.ndarray:
    """One cloud of a list as float64 ``[N, 3]`` (values not checked here), ``where`` naming it."""
    if isinstance(points, (str, os.PathLike)):
        points = read_points(points)
    if isinstance(points, PointCloud):
        points = points.points
    pos = _to_numpy(points, "points", where)
    if pos.ndim != 2 or pos.shape[-1] != 3:
        raise ValueError(f"{where}: points must have shape [N, 3], got {tuple(pos.shape)}")
    if pos.shape[0] == 0:
        raise ValueError(f"{where}: the cloud is empty (0 points)")
    return pos.astype(np.float64)


def _check_rows_finite(where: str, name: str, clouds: Sequence[np.ndarray], single: bool = False) -> None:
    """Refuse NaN / Inf in any of ``clouds`` (``[N_b, F]`` each), naming the first cloud that holds
    one (not for a ``single`` cloud), the row within that cloud and how many rows are affected in all."""
    bad = [~np.isfinite(c).all(1) for c in clouds]
    total = sum(int(b.sum()) for b in bad)
    if not total:
        return
    i = next(i for i, b in enumerate(bad) if b.any())
    row = int(np.flatnonzero(bad[i])[0])
    what = "NaN" if np.isnan(clouds[i][row]).any() else "Inf"
    raise ValueError(
        f"{where}: {name} contains {what} values ({total} {'row' if total == 1 else 'rows'} affected); "
        f"first {'' if single else f'in cloud {i} '}at row {row}"
    )


def _features_batch(features: Any, sizes: List[int], form: str, flat: bool, where: str) -> Optional[List[np.ndarray]]:
    """Point features per cloud, float32 ``[N_b, F]`` (None stays None), validated against the
    clouds' sizes: ``[N, F]`` for one cloud, ``[B, N, F]`` or a list of ``[N_b, F]`` for a
    batch, ``[M, F]`` with a batch vector (``flat``)."""
    if features is None:
        return None
    B, M = len(sizes), sum(sizes)
    if flat:
        want = f"have shape [{M}, F] (one row per point of points [M, 3])"
    elif form == "single":
        want = f"have shape [{sizes[0]}, F]"
    else:
        want = (
            f"have shape [{B}, {sizes[0]}, F] or be a list of {B} arrays [N_b, F]"
            if form == "dense"
            else f"be a list of {B} arrays [N_b, F] (N_b = {sizes})"
        )
    if isinstance(features, (list, tuple)) and form != "single" and not flat and _is_cloud_list(features):
        feats = [_to_numpy(f, f"features[{i}]", where).astype(np.float64) for i, f in enumerate(features)]
    else:
        given = _to_numpy(features, "features", where).astype(np.float64)
        if flat and given.ndim == 2 and len(given) == M:
            feats = np.split(given, np.cumsum(sizes)[:-1])
        elif form == "single" and (given.ndim == 2 or (given.ndim == 3 and len(given) == 1)):
            feats = [given if given.ndim == 2 else given[0]]
        elif form == "dense" and given.ndim == 3 and len(given) == B:
            feats = list(given)
        else:
            raise ValueError(f"{where}: features must {want} to match points, got {tuple(given.shape)}")
    if len(feats) != B or any(
        f.ndim != 2 or len(f) != n or f.shape[-1] != feats[0].shape[-1] for f, n in zip(feats, sizes)
    ):
        raise ValueError(
            f"{where}: features must {want} to match points, got "
            f"{[tuple(f.shape) for f in feats] if B > 1 else tuple(feats[0].shape)}"
        )
    if feats[0].shape[-1] == 0:
        raise ValueError(f"{where}: features have 0 channels; pass features=None to gridify the coordinates alone")
    _check_rows_finite(where, "features", feats, single=form == "single")
    return [_as_float32(f, "features", where) for f in feats]


def _gridification_module(
    module: Optional[nn.Module],
    in_channels: int,
    coords_only: bool,
    resolution: Optional[int],
    k: Optional[int],
    channels: int,
    seed: Optional[int],
    kwargs: Dict[str, Any],
    where: str,
) -> nn.Module:
    """The given Gridification (checked against the arguments) or a fresh, seeded one in eval mode."""
    from .nn.gridification import Gridification

    if module is None:
        check_positive_int(where, channels=channels)
        with _seeded(seed):
            module = Gridification(
                in_channels, channels, 9 if resolution is None else resolution, k=9 if k is None else k, **kwargs
            )
        return module.eval()
    if not isinstance(module, Gridification):
        raise TypeError(f"{where}: module must be a gridify.nn.Gridification, got {type(module).__name__}")
    if kwargs:
        raise ValueError(f"{where}: {sorted(kwargs)} only configure a fresh module; not with module=")
    for name, given, has in (("resolution", resolution, module.resolution), ("k", k, module.k)):
        if given is not None and given != has:
            raise ValueError(f"{where}: {name}={given} but the given module has {name}={has}")
    if module.in_channels != in_channels:
        raise ValueError(
            f"{where}: the module takes {module.in_channels} features per point but "
            f"{'the coordinates give 3' if coords_only else f'features has {in_channels}'}"
        )
    return module
