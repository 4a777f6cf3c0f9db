"""Sequences of point clouds observed at (ir)regular times.

* :class:`DynamicShapes`: a procedural dataset of moving/deforming shapes whose class is the
  motion, not the shape. Every sample is a random two-part object (a body - box, ellipsoid or
  elliptic cylinder - with a hinged flap at a random angle), placed with a random yaw and
  offset, that undergoes one class-specific motion:

  ==============  ======================================================================
  ``rot_z_slow``  rotation about the vertical axis at ~0.2 rad per time unit
  ``rot_z_fast``  the same at ~0.5 rad per time unit (differs from the above only in speed)
  ``rot_x``       rotation about the x axis, ~0.35 rad per time unit
  ``rot_y``       rotation about the y axis, ~0.35 rad per time unit
  ``sway_slow``   sinusoidal translation along a random horizontal direction, period ~20
  ``sway_fast``   the same, period ~8
  ``pulsate``     uniform growth and shrinking, ``s(t) = 1 + 0.2 sin(w t + phi)``, period ~10
  ``hinge``       the flap opens and closes about its hinge (articulated part), period ~10
  ==============  ======================================================================

  (speeds and periods vary by +-10 % per sample; directions and phases are random). A single
  frame does not reveal the class; the speed classes need the elapsed time between frames.

  Frames are observed at ``sampling="regular"`` times ``t_k = k * frame_interval``
  (``k < num_frames``) or ``"irregular"`` times: each ``t_k`` jittered by up to
  ``jitter * frame_interval`` and each frame dropped with probability ``drop_prob`` (at least
  ``min_frames`` kept), so the length ``T`` varies; ``"mixed"`` picks one of the two per sample.
  The motion of sample ``i`` depends only on ``(seed, split, i)``, so the regular and the
  irregular version of a split hold the same motions observed at different times. By default
  every frame samples fresh surface points (as a scanner would), ``num_points`` per frame;
  ``resample=False`` keeps the same surface points through the sequence (tracked points, an
  animated mesh), so frame-to-frame changes come from the motion only, not from resampling.

* :func:`collate_sequences`: pads items to ``[B, T_max, N, 3]`` with a ``mask``/``lengths``.

* :func:`read_sequence` / :class:`PointCloudSequence`: a generic reader for a sequence of
  point files (any format of :func:`gridify.io.read_points`) with a timestamp list.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from .._checks import check_choice, check_int, check_number
from ..io import PointCloud, read_points, supported_extensions
from ..io.source import read_text_file
from ..registry import DATASETS
from ..transforms import FixedPoints
from ..transforms import rotation_matrix
from ._common import check_num_points, check_split, item_index

__all__ = [
    "DynamicShapes",
    "DYNAMIC_CLASSES",
    "collate_sequences",
    "PointCloudSequence",
    "read_sequence",
    "TIMESTAMP_FILES",
    "FRAME_INTERVAL_RANGE",
]

PathLike = Union[str, "os.PathLike[str]"]

#: the motion classes, in label order
DYNAMIC_CLASSES: List[str] = [
    "rot_z_slow",
    "rot_z_fast",
    "rot_x",
    "rot_y",
    "sway_slow",
    "sway_fast",
    "pulsate",
    "hinge",
]
SAMPLINGS = ("regular", "irregular", "mixed")
#: the accepted ``frame_interval``: the times are float32, where 1e-300 is 0 (no frame after another) and 1e300
#: overflows
FRAME_INTERVAL_RANGE = (1e-6, 1e6)
#: file names :func:`read_sequence` looks for in a frame folder when no timestamps are given
TIMESTAMP_FILES = ("timestamps.txt", "times.txt")

_SPLIT_CODE = {"train": 0, "val": 1, "test": 2}
_RADIUS = 0.6  # canonical shapes fit in this radius; motions keep every point inside [-0.95, 0.95]^3

# angular speeds (rad per time unit) of each class's motion
_SPEED = {
    "rot_z_slow": 0.2,
    "rot_z_fast": 0.5,
    "rot_x": 0.35,
    "rot_y": 0.35,
    "sway_slow": 2 * math.pi / 20,
    "sway_fast": 2 * math.pi / 8,
    "pulsate": 2 * math.pi / 10,
    "hinge": 2 * math.pi / 10,
}


class _Shape:
    """A random body with a hinged flap; :meth:`sample` draws surface points at a flap angle."""

    def __init__(self, r: np.random.Generator) -> None:
        self.kind = ("box", "ellipsoid", "cylinder")[int(r.integers(3))]
        self.a = r.uniform([0.25, 0.18, 0.12], [0.45, 0.35, 0.30])  # body half-extents
        self.length = r.uniform(0.2, 0.35)  # flap
        self.width = 2 * self.a[1] * r.uniform(0.6, 1.0)
        self.hinge = np.array([self.a[0], 0.0, self.a[2]])
        r_max = max(float(np.linalg.norm(self.a)), float(np.linalg.norm(self.hinge)) + self.length)
        self.scale = _RADIUS / r_max * r.uniform(0.8, 1.0)
        ax, ay, az = self.a
        if self.kind == "box":
            self.area = 8 * (ax * ay + ay * az + ax * az)
        elif self.kind == "ellipsoid":  # Knud Thomsen's approximation
            p = 1.6075
            self.area = 4 * math.pi * (((ax * ay) ** p + (ax * az) ** p + (ay * az) ** p) / 3) ** (1 / p)
        else:
            rad = (ax + ay) / 2
            self.area = 2 * math.pi * rad * 2 * az + 2 * math.pi * ax * ay

    def _body(self, n: int, r: np.random.Generator) -> np.ndarray:
        a = self.a
        if self.kind == "box":
            areas = np.array([a[1] * a[2], a[0] * a[2], a[0] * a[1]])
            axis = r.choice(3, size=n, p=areas / areas.sum())
            p = r.uniform(-1, 1, size=(n, 3))
            p[np.arange(n), axis] = r.choice([-1.0, 1.0], size=n)
            return p * a
        if self.kind == "ellipsoid":
            p = r.normal(size=(n, 3))
            return p / np.linalg.norm(p, axis=1, keepdims=True).clip(1e-9) * a
        rad = (a[0] + a[1]) / 2
        side = r.random(n) < (2 * math.pi * rad * 2 * a[2]) / self.area
        phi = r.uniform(0, 2 * math.pi, n)
        rr = np.where(side, 1.0, np.sqrt(r.random(n)))
        z = np.where(side, r.uniform(-1, 1, n), r.choice([-1.0, 1.0], size=n))
        return np.stack([rr * np.cos(phi) * a[0], rr * np.sin(phi) * a[1], z * a[2]], 1)

    def sample(self, n: int, angle: float, r: np.random.Generator) -> np.ndarray:
        """``n`` surface points with the flap at ``angle`` (0: folded back over the top)."""
        flap_area = self.length * self.width
        n_flap = int(r.binomial(n, flap_area / (flap_area + self.area)))
        d = np.array([-math.cos(angle), 0.0, math.sin(angle)])
        u, w = r.random(n_flap), r.uniform(-0.5, 0.5, n_flap) * self.width
        flap = self.hinge + u[:, None] * self.length * d + w[:, None] * np.array([0.0, 1.0, 0.0])
        pts = np.concatenate([self._body(n - n_flap, r), flap])
        return pts[r.permutation(n)] * self.scale


class _Motion:
    """Class-specific motion of one sample: time -> (rotation, scale, offset, flap angle)."""

    def __init__(self, name: str, r: np.random.Generator) -> None:
        self.name = name
        self.speed = _SPEED[name] * r.uniform(0.9, 1.1) * (1 if r.random() < 0.5 else -1)
        self.phase = r.uniform(0, 2 * math.pi)
        self.yaw = r.uniform(0, 2 * math.pi)
        self.offset = r.uniform(-0.08, 0.08, size=3)
        self.flap = r.uniform(0.9, 1.6) if name == "hinge" else r.uniform(0.3, 2.2)
        phi = r.uniform(0, 2 * math.pi)
        self.direction = np.array([math.cos(phi), math.sin(phi), 0.0])

    def __call__(self, t: float) -> Tuple[np.ndarray, float, np.ndarray, float]:
        rot, scale, offset, flap = rotation_matrix(2, self.yaw), 1.0, self.offset, self.flap
        arg = self.speed * t + self.phase
        if self.name.startswith("rot_"):
            rot = rotation_matrix({"z": 2, "x": 0, "y": 1}[self.name[4]], arg) @ rot
        elif self.name.startswith("sway"):
            offset = offset + 0.2 * math.sin(arg) * self.direction
        elif self.name == "pulsate":
            scale = 1.0 + 0.2 * math.sin(arg)
        elif self.name == "hinge":
            flap = self.flap + 0.6 * math.sin(arg)
        return rot, scale, offset, flap


@DATASETS.register("dynamic_shapes")
class DynamicShapes(torch.utils.data.Dataset):
    r"""Procedural moving shapes observed at regular or irregular times (see the module docstring).

    Registered as ``dynamic_shapes``, the dataset of the ``sequence_classification`` task
    (``gridify train --config temporal/dynamic_shapes``).

    Args:
        split: ``"train"``, ``"val"`` or ``"test"`` (independent random streams).
        num_samples_per_class: sequences per class (labels interleave: sample ``i`` has class
            ``i % num_classes``).
        num_frames: frames of a regular sequence (the maximum length of an irregular one).
        num_points: points per frame.
        sampling: ``"regular"``, ``"irregular"`` or ``"mixed"``.
        frame_interval: time between regular frames, in :data:`FRAME_INTERVAL_RANGE`.
        jitter: irregular times move by up to ``jitter * frame_interval`` (``0 <= jitter < 0.5``,
            so times stay strictly increasing).
        drop_prob: irregular frames are dropped with this probability.
        min_frames: irregular sequences keep at least this many frames.
        noise: std of the Gaussian noise on the points.
        resample: draw fresh surface points in every frame (True) or move one fixed set of
            surface points with the object (False).
        classes: a subset of :data:`DYNAMIC_CLASSES` (labels follow its order); default all.
        seed: global seed; the data are a function of ``(seed, split, index)`` only.

    Shapes:
        item: ``pos [T, num_points, 3]`` (float32, inside ``[-1, 1]^3``), ``times [T]`` (float32,
        strictly increasing), ``y`` (0-d long class label), ``index`` (0-d long).
    """

    #: the task whose data this is (:func:`gridify.tasks.task_of_dataset`)
    task = "sequence_classification"
    #: point features per frame (the coordinates)
    in_channels = 3

    def __init__(
        self,
        split: str = "train",
        *,
        num_samples_per_class: int = 40,
        num_frames: int = 8,
        num_points: int = 256,
        sampling: str = "regular",
        frame_interval: float = 1.0,
        jitter: float = 0.4,
        drop_prob: float = 0.3,
        min_frames: int = 3,
        noise: float = 0.005,
        classes: Optional[Sequence[str]] = None,
        seed: int = 0,
        resample: bool = True,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        self.split = check_split(where, split, tuple(_SPLIT_CODE))
        for name, v in (
            ("num_samples_per_class", num_samples_per_class),
            ("num_frames", num_frames),
            ("num_points", num_points),
            ("min_frames", min_frames),
        ):
            check_int(where, name, v)
        check_num_points(where, num_points, num_frames)
        if min_frames > num_frames:
            raise ValueError(f"{where}: min_frames ({min_frames}) must not exceed num_frames ({num_frames})")
        check_choice(where, "sampling", sampling, SAMPLINGS)
        interval = check_number(where, "frame_interval", frame_interval)
        if not FRAME_INTERVAL_RANGE[0] <= interval <= FRAME_INTERVAL_RANGE[1]:
            raise ValueError(
                f"{where}: frame_interval must be in [{FRAME_INTERVAL_RANGE[0]:g}, "
                f"{FRAME_INTERVAL_RANGE[1]:g}] (the times are float32), got {frame_interval!r}"
            )
        if not isinstance(jitter, (int, float)) or not 0.0 <= jitter < 0.5:
            raise ValueError(f"{where}: jitter must be in [0, 0.5) (fraction of frame_interval), got {jitter!r}")
        if not isinstance(drop_prob, (int, float)) or not 0.0 <= drop_prob < 1.0:
            raise ValueError(f"{where}: drop_prob must be in [0, 1), got {drop_prob!r}")
        if not isinstance(noise, (int, float)) or not 0.0 <= noise <= 0.02:
            raise ValueError(f"{where}: noise must be in [0, 0.02], got {noise!r}")
        if not isinstance(resample, bool):
            raise TypeError(f"{where}: resample must be a bool, got {type(resample).__name__}")
        if classes is None:
            classes = list(DYNAMIC_CLASSES)
        if isinstance(classes, str) or not classes or any(c not in DYNAMIC_CLASSES for c in classes):
            raise ValueError(
                f"{where}: classes must be a non-empty list of names from {DYNAMIC_CLASSES}, got {classes!r}"
            )
        if len(set(classes)) != len(classes):
            raise ValueError(f"{where}: classes has duplicates: {list(classes)}")
        self.classes = list(classes)
        self.num_samples_per_class, self.num_frames = int(num_samples_per_class), int(num_frames)
        self.num_points, self.sampling = int(num_points), sampling
        self.frame_interval, self.jitter, self.drop_prob = float(frame_interval), float(jitter), float(drop_prob)
        self.min_frames, self.noise, self.seed = int(min_frames), float(noise), int(seed)
        self.resample = resample

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def class_names(self) -> List[str]:
        """The class of each label (``classes``)."""
        return list(self.classes)

    def __len__(self) -> int:
        return self.num_samples_per_class * self.num_classes

    def label(self, index: int) -> int:
        return index % self.num_classes

    def sample_groups(self) -> np.ndarray:
        """The label of every sample ``[len]`` (without generating it), for class-stratified subsets."""
        return np.arange(len(self), dtype=np.int64) % self.num_classes

    def _key(self, index: int, *extra: int) -> List[int]:
        return [self.seed, _SPLIT_CODE[self.split], index, *extra]

    def regime(self, index: int) -> str:
        """``"regular"`` or ``"irregular"``: how sample ``index`` is observed."""
        if self.sampling != "mixed":
            return self.sampling
        return "irregular" if np.random.default_rng(self._key(index, 7)).random() < 0.5 else "regular"

    def timestamps(self, index: int) -> np.ndarray:
        """Observation times of sample ``index`` ``[T]`` (float64, strictly increasing)."""
        k = np.arange(self.num_frames, dtype=np.float64)
        if self.regime(index) == "regular":
            return k * self.frame_interval
        r = np.random.default_rng(self._key(index, 1))
        t = (k + self.jitter + r.uniform(-self.jitter, self.jitter, self.num_frames)) * self.frame_interval
        keep = r.random(self.num_frames) >= self.drop_prob
        if keep.sum() < self.min_frames:
            extra = r.permutation(np.flatnonzero(~keep))[: self.min_frames - int(keep.sum())]
            keep[extra] = True
        return t[keep]

    def __getitem__(self, index: int) -> Dict[str, Tensor]:
        index = item_index(type(self).__name__, index, len(self), "samples")
        label = self.label(index)
        r = np.random.default_rng(self._key(index, 0))
        shape, motion = _Shape(r), _Motion(self.classes[label], r)
        times = self.timestamps(index)
        obs = np.random.default_rng(self._key(index, 2, 1 if self.regime(index) == "irregular" else 0))
        frames = []
        for t in times:
            rot, scale, offset, flap = motion(float(t))
            pts = np.random.default_rng(self._key(index, 3)) if not self.resample else obs
            p = shape.sample(self.num_points, flap, pts) @ rot.T * scale + offset
            if self.noise:
                p = p + obs.normal(scale=self.noise, size=p.shape)
            frames.append(p)
        pos = np.clip(np.stack(frames), -0.99, 0.99)
        return {
            "pos": torch.as_tensor(pos, dtype=torch.float32),
            "times": torch.as_tensor(times, dtype=torch.float32),
            "y": torch.tensor(label, dtype=torch.long),
            "index": torch.tensor(index, dtype=torch.long),
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(split={self.split!r}, n={len(self)}, classes={self.num_classes}, "
            f"sampling={self.sampling!r}, num_frames={self.num_frames}, num_points={self.num_points}, "
            f"resample={self.resample})"
        )


def collate_sequences(items: Sequence[Dict[str, Any]]) -> Dict[str, Tensor]:
    """Pad sequence items (``pos [T_i, N, 3]``, ``times [T_i]``, ...) into one batch.

    Frames beyond a sequence's length are zeros in ``pos`` and repeat its last time in
    ``times`` (so time differences there are 0); ``mask`` marks the valid frames. Other 0-d
    tensors (``y``, ``index``) are stacked. All frames must hold the same number of points.

    Shapes:
        pos ``[B, T_max, N, 3]``, times ``[B, T_max]``, mask ``[B, T_max]`` (bool),
        lengths ``[B]``, y ``[B]``, index ``[B]``; a per-frame ``x [T_i, N, F]`` pads like pos.
    """
    where = "collate_sequences"
    if not items:
        raise ValueError(f"{where}: got an empty list of items")
    for i, it in enumerate(items):
        for key in ("pos", "times"):
            if key not in it:
                raise ValueError(f"{where}: item {i} has no {key!r}")
        pos, times = it["pos"], it["times"]
        if not isinstance(pos, Tensor) or pos.dim() != 3 or pos.size(-1) != 3:
            raise ValueError(
                f"{where}: item {i} 'pos' must be a tensor [T, N, 3], got "
                f"{tuple(pos.shape) if isinstance(pos, Tensor) else type(pos).__name__}"
            )
        if not isinstance(times, Tensor) or times.dim() != 1 or times.numel() != pos.size(0):
            raise ValueError(
                f"{where}: item {i} 'times' must be a 1-D tensor with one entry per frame "
                f"({pos.size(0)}), got {tuple(times.shape) if isinstance(times, Tensor) else times!r}"
            )
        if pos.size(0) == 0:
            raise ValueError(f"{where}: item {i} has no frames")
        if pos.size(1) != items[0]["pos"].size(1):
            raise ValueError(
                f"{where}: item {i} has {pos.size(1)} points per frame but item 0 has "
                f"{items[0]['pos'].size(1)}; resample frames to a fixed count (num_points=, "
                f"data.num_points)"
            )
    lengths = torch.tensor([int(it["pos"].size(0)) for it in items], dtype=torch.long)
    b, t_max, n = len(items), int(lengths.max()), int(items[0]["pos"].size(1))
    mask = torch.arange(t_max)[None, :] < lengths[:, None]
    out: Dict[str, Tensor] = {"lengths": lengths, "mask": mask}
    out["pos"] = items[0]["pos"].new_zeros(b, t_max, n, 3)
    out["times"] = items[0]["times"].new_zeros(b, t_max)
    for i, it in enumerate(items):
        length = int(lengths[i])
        out["pos"][i, :length] = it["pos"]
        out["times"][i, :length] = it["times"]
        out["times"][i, length:] = it["times"][-1]
    if "x" in items[0]:
        f = items[0]["x"].size(-1)
        out["x"] = items[0]["x"].new_zeros(b, t_max, n, f)
        for i, it in enumerate(items):
            out["x"][i, : int(lengths[i])] = it["x"]
    for key in items[0]:
        if key in ("pos", "times", "x"):
            continue
        vals = [it.get(key) for it in items]
        if all(isinstance(v, Tensor) and v.dim() == 0 for v in vals):
            out[key] = torch.stack(vals)
    return out


# --------------------------------------------------------------------------------------
# generic sequences of point files
# --------------------------------------------------------------------------------------
@dataclass
class PointCloudSequence:
    """A sequence of point clouds with their timestamps, as read by :func:`read_sequence`.

    Shapes:
        frames: ``T`` :class:`~gridify.io.PointCloud` (``points [N_t, 3]`` each);
        times: ``[T]`` float64, strictly increasing.
    """

    frames: List[PointCloud]
    times: np.ndarray
    source: str = ""

    def __len__(self) -> int:
        return len(self.frames)

    def to_item(self, num_points: int, *, normalize: bool = True, seed: int = 0) -> Dict[str, Tensor]:
        """Model input: every frame resampled to ``num_points`` (deterministic given ``seed``).

        With ``normalize``, all frames are centred on the centroid of the whole sequence and
        scaled by one common factor into the unit sphere, so the motion between frames is kept.

        Shapes:
            pos ``[T, num_points, 3]`` float32, times ``[T]`` float32 (relative to the first frame).
        """
        check_num_points("PointCloudSequence.to_item", num_points, len(self.frames))
        sampler = FixedPoints(num_points, deterministic=True, seed=seed)
        frames = [np.asarray(f.points, dtype=np.float64) for f in self.frames]
        if normalize:
            allp = np.concatenate(frames)
            center = allp.mean(0)
            scale = float(np.sqrt(((allp - center) ** 2).sum(1).max()))
            if not scale > 0:
                raise ValueError(f"{self.source or 'sequence'}: all points are identical; cannot normalize")
            frames = [(f - center) / scale for f in frames]
        pos = np.stack([sampler({"pos": f})["pos"] for f in frames])
        return {
            "pos": torch.as_tensor(pos, dtype=torch.float32),
            "times": torch.as_tensor(self.times - self.times[0], dtype=torch.float32),
        }


def _natural_key(name: str) -> List[Any]:
    return [int(tok) if tok.isascii() and tok.isdigit() else tok.lower() for tok in re.split(r"(\d+)", name)]


def _read_timestamp_file(path: Path) -> np.ndarray:
    values = []
    for lineno, line in enumerate(read_text_file(path).splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            values.append(float(text.replace(",", " ").split()[0]))
        except ValueError:
            raise ValueError(
                f"read_sequence: {path} line {lineno}: cannot parse a time from {line.strip()!r}"
            ) from None
    return np.asarray(values, dtype=np.float64)


def _frame_paths(where: str, frames: Any) -> Tuple[Optional[Path], List[Path]]:
    """``(folder or None, frame files in order)`` from a folder or a list of files."""
    if isinstance(frames, (str, os.PathLike)):
        folder = Path(frames)
        if not folder.exists():
            raise FileNotFoundError(f"{where}: frame folder {folder} does not exist")
        if not folder.is_dir():
            raise ValueError(f"{where}: {folder} is not a folder; pass a folder or a list of files")
        known = supported_extensions()
        paths = sorted(
            (
                p
                for p in folder.iterdir()
                if p.is_file()
                and not p.name.startswith(".")
                and p.suffix.lower() in known
                and p.name.lower() not in TIMESTAMP_FILES
            ),
            key=lambda p: _natural_key(p.name),
        )
        if not paths:
            raise ValueError(f"{where}: folder {folder} holds no point files (extensions: {', '.join(known)})")
        return folder, paths
    if isinstance(frames, (list, tuple)):
        if not frames:
            raise ValueError(f"{where}: frames is an empty list")
        paths = [Path(p) for p in frames]
        for i, p in enumerate(paths):
            if not p.is_file():
                raise FileNotFoundError(f"{where}: frame {i} ({p}) does not exist or is not a file")
        return None, paths
    raise TypeError(f"{where}: frames must be a folder path or a list of file paths, got {type(frames).__name__}")


def _frame_times(where: str, timestamps: Any, folder: Optional[Path], num_frames: int) -> Tuple[np.ndarray, str]:
    """``(times, where they came from)`` for the ``timestamps`` argument of :func:`read_sequence`."""
    if timestamps is None:
        if folder is None:
            raise ValueError(
                f"{where}: timestamps is required when frames is a list of files "
                f"(a list of times, a text file, or 'index')"
            )
        found = [folder / n for n in TIMESTAMP_FILES if (folder / n).is_file()]
        if not found:
            raise FileNotFoundError(
                f"{where}: no timestamps given and none of {list(TIMESTAMP_FILES)} in {folder}; "
                f"pass timestamps=[...], a text file, or 'index'"
            )
        return _read_timestamp_file(found[0]), str(found[0])
    if isinstance(timestamps, str) and timestamps == "index":
        return np.arange(num_frames, dtype=np.float64), "index"
    if isinstance(timestamps, (str, os.PathLike)):
        tpath = Path(timestamps)
        if not tpath.is_file():
            raise FileNotFoundError(f"{where}: timestamp file {tpath} does not exist")
        return _read_timestamp_file(tpath), str(tpath)
    try:
        times = (
            timestamps.detach().cpu().double().numpy()
            if isinstance(timestamps, Tensor)
            else np.asarray(timestamps, dtype=np.float64)
        )
    except (TypeError, ValueError):
        raise TypeError(
            f"{where}: timestamps must be numbers, a file path, 'index' or None, got {type(timestamps).__name__}"
        ) from None
    if times.ndim != 1:
        raise ValueError(f"{where}: timestamps must be 1-D (one time per frame), got shape {times.shape}")
    return times, "timestamps"


def read_sequence(
    frames: Union[PathLike, Sequence[PathLike]],
    timestamps: Any = None,
    *,
    num_samples: int = 10_000,
    seed: int = 0,
    columns: Optional[Sequence[str]] = None,
) -> PointCloudSequence:
    """Read a sequence of point files (e.g. LiDAR sweeps) and their timestamps.

    Args:
        frames: a folder (its files with a supported extension, see
            :func:`gridify.io.supported_extensions`, in natural name order: ``f2`` before
            ``f10``; the timestamp files :data:`TIMESTAMP_FILES` are skipped) or a list of files.
        timestamps: one time per frame: a list/array/tensor of numbers, the path of a text file
            with one time per line (blank lines and ``#`` comments ignored), ``"index"`` for
            ``0, 1, 2, ...``, or None to read ``timestamps.txt`` / ``times.txt`` from the folder.
        num_samples, seed, columns: passed to :func:`gridify.io.read_points` for each file.

    Returns:
        A :class:`PointCloudSequence`; ``.to_item(num_points)`` gives model inputs.

    Raises:
        FileNotFoundError: the folder, a frame file or the timestamp file does not exist.
        ValueError: no frames; the counts of frames and timestamps differ; timestamps are not
            finite or not strictly increasing; a file cannot be read.
    """
    where = "read_sequence"
    folder, paths = _frame_paths(where, frames)
    times, tsource = _frame_times(where, timestamps, folder, len(paths))
    if len(times) != len(paths):
        raise ValueError(
            f"{where}: got {len(paths)} frames but {len(times)} timestamps (from {tsource}); "
            f"there must be exactly one time per frame"
        )
    if not np.isfinite(times).all():
        raise ValueError(f"{where}: timestamps (from {tsource}) contain NaN/Inf")
    if len(times) > 1 and not (np.diff(times) > 0).all():
        i = int(np.flatnonzero(np.diff(times) <= 0)[0]) + 1
        raise ValueError(
            f"{where}: timestamps (from {tsource}) must be strictly increasing; times[{i}] = "
            f"{times[i]:g} <= times[{i - 1}] = {times[i - 1]:g} (frames {paths[i - 1].name}, "
            f"{paths[i].name})"
        )
    clouds = [read_points(p, num_samples=num_samples, seed=seed, columns=columns) for p in paths]
    return PointCloudSequence(clouds, times, source=str(folder) if folder is not None else str(paths[0].parent))
