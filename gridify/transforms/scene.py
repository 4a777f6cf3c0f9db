"""Scenes: crops of a points budget, the training sampler, and two LiDAR scans mixed into one.

* :func:`crop_xy` keeps the ``max_points`` points nearest in xy to a centre point (a vertical
  column: ``|p_xy - c_xy|^2`` smallest, ties at the last distance to the lowest indices);
  :func:`crop_centre` draws that centre (a random point, or a random point of a class drawn uniformly
  among those present: ``"class_balanced"``); :class:`SceneCrop` is the transform.
* :class:`SceneSampler` chains :class:`~gridify.transforms.sampling.GridSample` (``voxel_size``),
  :class:`SceneCrop` (``max_points``) and :class:`~gridify.transforms.sampling.FixedPoints`
  (``num_points``) on one generator for the scene datasets.
* :func:`mix_scenes` mixes two LiDAR scans in their sensor frames (:data:`SCENE_MIXES`): ``lasermix``
  keeps scan ``a`` in alternate bands of inclination ``phi = atan2(z, hypot(x, y))`` (3-6 equal bands over
  the 0.5-99.5 % range of both scans' ``phi``, read from every 8th point) and scan ``b`` in the others
  (LaserMix, Kong et al. 2023); ``polarmix`` replaces ``a``'s points of a random half-turn of azimuth
  ``theta = atan2(y, x)`` by ``b``'s (PolarMix's scene swap, Xiao et al. 2022); ``paste`` keeps all of ``a``
  and adds two copies of ``b``'s points of the ``paste_labels`` classes (the objects: cars, people, ...),
  rotated about the sensor's vertical axis by ``omega_1 ~ U(0, 2 pi / 3)`` and
  ``omega_2 ~ U(2 pi / 3, 4 pi / 3)`` (PolarMix's instance rotate-paste).

Shapes:
    :func:`crop_xy`: pos ``[N, 3]`` -> ``[min(N, max_points)]`` int64; :class:`SceneCrop` /
    :class:`SceneSampler`: ``[N, ...]`` -> ``[M, ...]``; :func:`mix_scenes`: ``[N_a, ...]``, ``[N_b, ...]``
    -> ``[M, ...]``.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from .._checks import check_alloc, check_bool, check_choice, check_int, fail
from .augment import rotation_matrix
from .base import NON_POINT_KEYS, RandomTransform, Sample, as_real_cloud, check_sample, content_rng, take_rows
from .sampling import FixedPoints, GridSample

__all__ = [
    "crop_xy",
    "crop_xy_unchecked",
    "CROP_CENTRES",
    "crop_centre",
    "SceneCrop",
    "SceneSampler",
    "SCENE_MIXES",
    "PASTE_CLASS_NAMES",
    "mix_scenes",
    "mix_scenes_unchecked",
]


def crop_xy(pos: Any, centre: int, max_points: int) -> np.ndarray:
    """The sorted indices of the ``max_points`` points nearest (in xy) to point ``centre``; ties at the
    last distance go to the lowest indices. Every point when there are at most ``max_points``.

    Shapes:
        pos ``[N, 3]`` -> ``[min(N, max_points)]`` int64.
    """
    return crop_xy_unchecked(as_real_cloud(pos), centre, max_points)


def crop_xy_unchecked(p: np.ndarray, centre: int, max_points: int) -> np.ndarray:
    """:func:`crop_xy` of a float64 ``[N, D]`` array (D >= 2): a partition, O(N), not a sort."""
    if len(p) <= max_points:
        return np.arange(len(p))
    d = ((p[:, :2] - p[centre, :2]) ** 2).sum(1)
    kth = np.partition(d, max_points - 1)[max_points - 1]
    below = np.flatnonzero(d < kth)
    ties = np.flatnonzero(d == kth)[: max_points - len(below)]  # the lowest indices at the last distance
    return np.sort(np.concatenate([below, ties]))


#: how :class:`SceneCrop` draws its centre point
CROP_CENTRES = ("random", "class_balanced")


def crop_centre(labels: Optional[np.ndarray], num: int, mode: str, rng: np.random.Generator) -> int:
    """The centre point of a crop: ``random`` draws a point uniformly (so a crop lands where the points are
    dense, next to a LiDAR sensor); ``class_balanced`` first draws a class uniformly among those the cloud's
    ``labels`` hold (negative ids, ignored points, left out), then one of its points (KPConv's class-balanced
    sampling: a rare class is the centre as often as a frequent one). Without labels, or with none kept,
    ``class_balanced`` falls back to ``random``.

    Shapes:
        labels ``[N]`` integers or None -> an index in ``[0, N)``.
    """
    if mode == "class_balanced" and labels is not None:
        y = np.asarray(labels).reshape(-1)
        if len(y) != num:
            raise ValueError(f"crop_centre: labels must hold one id per point ({num}), got {len(y)}")
        present = np.unique(y[y >= 0])
        if len(present):
            rows = np.flatnonzero(y == present[int(rng.integers(len(present)))])
            return int(rows[int(rng.integers(len(rows)))])
    return int(rng.integers(num))


class SceneCrop(RandomTransform):
    """Keep the ``max_points`` points nearest, in xy, to a centre point of the cloud (a vertical
    column around it: the points budget of a scene); a cloud of at most ``max_points`` points is
    returned whole. Every per-point entry follows its points; the kept points stay in order.
    The centre is :func:`crop_centre`'s: a random point, or (``centre="class_balanced"``) a random point of
    a class drawn uniformly among the labels ``y`` present.

    Args:
        max_points: the budget (a positive integer).
        centre: ``"random"`` (default) or ``"class_balanced"`` (:data:`CROP_CENTRES`).
        deterministic: draw from :func:`content_rng` (the same cloud always gives the same crop).
        seed, generator: see :class:`RandomTransform`.

    Shapes:
        every per-point ``[N, ...]`` entry becomes ``[min(N, max_points), ...]``.
    """

    def __init__(
        self,
        max_points: int,
        *,
        centre: str = "random",
        deterministic: bool = False,
        seed: Optional[int] = 0,
        generator: Optional[np.random.Generator] = None,
    ) -> None:
        super().__init__(seed=seed, generator=generator)
        check_int("SceneCrop", "max_points", max_points)
        check_alloc("SceneCrop", f"max_points={max_points} (the row indices)", 8 * max_points)
        self.max_points = int(max_points)
        self.centre = check_choice("SceneCrop", "centre", centre, CROP_CENTRES)
        self.deterministic = check_bool("SceneCrop", "deterministic", deterministic)

    def indices(self, sample: Sample) -> np.ndarray:
        """The sorted row indices this call would keep (advances the generator unless deterministic)."""
        num = check_sample(sample, "SceneCrop")
        rng = content_rng(self.seed, sample["pos"], num) if self.deterministic else self.rng
        return self._indices(sample, num, rng)

    def _indices(self, sample: Sample, num: int, rng: np.random.Generator) -> np.ndarray:
        if num <= self.max_points:
            return np.arange(num)
        centre = crop_centre(sample.get("y"), num, self.centre, rng)
        return crop_xy(sample["pos"], centre, self.max_points)

    def __call__(self, sample: Sample) -> Sample:
        return take_rows(sample, self.indices(sample))

    def __repr__(self) -> str:
        return f"SceneCrop(max_points={self.max_points}, centre={self.centre!r}, seed={self.seed})"


class SceneSampler(RandomTransform):
    """The training sampler of scene datasets: :class:`GridSample` (``voxel_size``, random mode), then
    :class:`SceneCrop` (``max_points``, its centre drawn as ``crop_centre`` says), then :class:`FixedPoints`
    (``num_points``), each step skipped when its argument is None, all drawing from one generator.

    Like :class:`FixedPoints` it has a ``deterministic`` mode (every draw from
    :func:`content_rng` of the scene: the same scene gives the same crop for a given ``seed``)
    and :meth:`~RandomTransform.reseed`, so a training run can make its crops a function of
    (seed, epoch, scene) and a resumed run sees the crops an uninterrupted one would.

    Shapes:
        every per-point ``[N, ...]`` entry becomes ``[M, ...]``, ``M <= max_points`` (``num_points``
        when given).
    """

    def __init__(
        self,
        voxel_size: Optional[float] = None,
        max_points: Optional[int] = None,
        num_points: Optional[int] = None,
        *,
        crop_centre: str = "random",
        deterministic: bool = False,
        seed: Optional[int] = 0,
        generator: Optional[np.random.Generator] = None,
    ) -> None:
        super().__init__(seed=seed, generator=generator)
        where = "SceneSampler"
        crop_centre = check_choice(where, "crop_centre", crop_centre, CROP_CENTRES)
        self.grid = None if voxel_size is None else GridSample(voxel_size, "random")
        self.crop = None if max_points is None else SceneCrop(max_points, centre=crop_centre)
        self.num_points = check_int(where, "num_points", num_points, allow_none=True)
        self.deterministic = check_bool(where, "deterministic", deterministic)
        #: another deterministic stream for the same scene (its copies in an epoch: ``crops_per_scene``)
        self.salt = 0

    def generator(self, pos: Any, salt: int = 0) -> np.random.Generator:
        """The generator a draw for the scene ``pos`` uses: :func:`content_rng` of it (another stream per
        ``salt``) in the deterministic mode, else the sampler's own."""
        if not self.deterministic:
            return self.rng
        return content_rng(self.seed, pos, len(pos), getattr(self, "salt", 0) + salt)

    def __call__(self, sample: Sample) -> Sample:
        num = check_sample(sample, "SceneSampler")
        rng = self.generator(sample["pos"])
        if self.grid is not None:
            sample = take_rows(sample, self.grid._indices(sample, rng))
            num = int(sample["pos"].shape[0])
        if self.crop is not None:
            sample = take_rows(sample, self.crop._indices(sample, num, rng))
        if self.num_points is not None:
            sample = FixedPoints(self.num_points, generator=rng)(sample)
        return sample

    def __repr__(self) -> str:
        return (
            f"SceneSampler(voxel_size={getattr(self.grid, 'voxel_size', None)}, "
            f"max_points={getattr(self.crop, 'max_points', None)}, "
            f"crop_centre={getattr(self.crop, 'centre', 'random')!r}, num_points={self.num_points}, "
            f"deterministic={self.deterministic}, seed={self.seed})"
        )


#: the ways :func:`mix_scenes` mixes two scans
SCENE_MIXES = ("lasermix", "polarmix", "paste")

#: the classes whose points ``paste`` copies when a dataset has them (PolarMix's instance classes of SemanticKITTI)
PASTE_CLASS_NAMES = ("car", "bicycle", "motorcycle", "truck", "other-vehicle", "person", "bicyclist", "motorcyclist")


def _mix_keep(pa: np.ndarray, pb: np.ndarray, mode: str, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """Which points of ``a`` and of ``b`` the mix keeps (boolean ``[N_a]``, ``[N_b]``)."""
    if mode == "lasermix":
        bands = int(rng.integers(3, 7))
        phi_a = np.arctan2(pa[:, 2], np.hypot(pa[:, 0], pa[:, 1]))
        phi_b = np.arctan2(pb[:, 2], np.hypot(pb[:, 0], pb[:, 1]))
        lo, hi = np.percentile(np.concatenate([phi_a[::8], phi_b[::8]]), [0.5, 99.5])  # every 8th: the range
        scale = bands / max(float(hi - lo), 1e-12)
        first = int(rng.integers(2))
        band_a = np.clip(np.floor((phi_a - lo) * scale), 0, bands - 1).astype(np.int64)
        band_b = np.clip(np.floor((phi_b - lo) * scale), 0, bands - 1).astype(np.int64)
        return band_a % 2 == first, band_b % 2 != first
    start = rng.uniform(-math.pi, math.pi)
    inside_a = np.mod(np.arctan2(pa[:, 1], pa[:, 0]) - start, 2 * math.pi) < math.pi
    inside_b = np.mod(np.arctan2(pb[:, 1], pb[:, 0]) - start, 2 * math.pi) < math.pi
    return ~inside_a, inside_b


def _paste_parts(
    b: Sample, pos_key: str, label_key: str, paste_labels: Sequence[int], rng: np.random.Generator
) -> Tuple[np.ndarray, Tuple[float, float]]:
    """``b``'s rows of the ``paste_labels`` classes and the two rotations of them ``paste`` adds."""
    labels = np.asarray(b[label_key]).reshape(len(b[pos_key]), -1)[:, 0]
    rows = np.flatnonzero(np.isin(labels, np.asarray(list(paste_labels), dtype=np.int64)))
    angles = (rng.uniform(0, 2 * math.pi / 3), rng.uniform(2 * math.pi / 3, 4 * math.pi / 3))
    return rows, angles


def mix_scenes_unchecked(
    a: Sample,
    b: Sample,
    mode: str,
    rng: np.random.Generator,
    pos_key: str = "pos",
    label_key: str = "y",
    paste_labels: Sequence[int] = (),
) -> Sample:
    """:func:`mix_scenes` without the checks: numpy arrays, the per-point keys of both scans alike."""
    na, nb = len(a[pos_key]), len(b[pos_key])
    if mode == "paste":
        rows, angles = _paste_parts(b, pos_key, label_key, paste_labels, rng)
        keep_a, takes = np.ones(na, dtype=bool), [(rows, angle) for angle in angles]
    else:
        keep_a, keep_b = _mix_keep(np.asarray(a[pos_key]), np.asarray(b[pos_key]), mode, rng)  # angles: float32 will do
        takes = [(np.flatnonzero(keep_b), None)]
    out: Sample = {}
    for k, v in a.items():
        w = b.get(k)
        per_point = isinstance(v, np.ndarray) and v.ndim and len(v) == na and k not in NON_POINT_KEYS
        if per_point and isinstance(w, np.ndarray) and w.ndim and len(w) == nb:
            w = w.astype(v.dtype, copy=False)
            parts = [  # the positions of a pasted copy turned about z through the origin (the sensor)
                w[r] if angle is None or k != pos_key else (w[r] @ rotation_matrix(2, angle).T).astype(w.dtype)
                for r, angle in takes
            ]
            out[k] = np.concatenate([v[keep_a]] + parts)
        elif not per_point:
            out[k] = v
    return out


def mix_scenes(
    a: Sample,
    b: Sample,
    mode: str,
    rng: np.random.Generator,
    pos_key: str = "pos",
    label_key: str = "y",
    paste_labels: Sequence[int] = (),
) -> Sample:
    """Two scans mixed into one (see the module docstring): the points ``a`` keeps, then those taken from ``b``.

    ``a`` and ``b``: dicts of numpy arrays in the sensor frame (the origin at the scanner, z up), ``pos_key``
    ``[N, 3]`` and the same per-point entries (an entry of ``a`` that ``b`` lacks is refused, naming it); entries
    that are not per-point are ``a``'s. ``rng`` draws the bands, the sector or the two angles. ``paste`` reads the
    classes of ``b``'s points from ``b[label_key]`` and copies those whose class is in ``paste_labels``.

    Shapes:
        ``a[k]`` ``[N_a, ...]``, ``b[k]`` ``[N_b, ...]`` -> ``[M, ...]``, ``M <= N_a + N_b``
        (``paste``: ``M = N_a + 2 P``, ``P`` the pasted points of ``b``).
    """
    where = "mix_scenes"
    mode = check_choice(where, "mode", mode, SCENE_MIXES)
    if not isinstance(rng, np.random.Generator):
        fail(where, f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    for name, s in (("a", a), ("b", b)):
        if not isinstance(s, dict) or pos_key not in s:
            fail(where, f"{name} must be a dict holding {pos_key!r}, got {type(s).__name__}")
        p = s[pos_key]
        if not isinstance(p, np.ndarray) or p.ndim != 2 or p.shape[1] != 3 or not np.issubdtype(p.dtype, np.floating):
            fail(
                where,
                f"{name}[{pos_key!r}] must be a float numpy array [N, 3], got "
                f"{getattr(p, 'dtype', type(p).__name__)} {getattr(p, 'shape', '')}",
            )
        if not np.isfinite(p).all():
            fail(where, f"{name}[{pos_key!r}] contains NaN/Inf values")
    if mode == "paste":
        _check_paste(where, b, pos_key, label_key, paste_labels)
    na = len(a[pos_key])
    for k, v in a.items():
        if isinstance(v, np.ndarray) and v.ndim and len(v) == na and k not in NON_POINT_KEYS:
            w = b.get(k)
            if not (isinstance(w, np.ndarray) and w.ndim and len(w) == len(b[pos_key]) and w.shape[1:] == v.shape[1:]):
                fail(
                    where,
                    f"a has the per-point entry {k!r} {v.shape[1:]} but b has "
                    f"{'none' if w is None else getattr(w, 'shape', type(w).__name__)} (both scans need it)",
                )
    return mix_scenes_unchecked(a, b, mode, rng, pos_key, label_key, paste_labels)


def _check_paste(where: str, b: Sample, pos_key: str, label_key: str, paste_labels: Sequence[int]) -> None:
    """``paste`` needs ``b``'s labels (one per point) and at least one class to copy, given as integers."""
    labels = b.get(label_key)
    if not isinstance(labels, np.ndarray) or labels.ndim not in (1, 2) or len(labels) != len(b[pos_key]):
        fail(
            where,
            f"mode 'paste' needs b[{label_key!r}], one label per point of b, got "
            f"{getattr(labels, 'shape', type(labels).__name__)}",
        )
    if isinstance(paste_labels, (str, bytes)) or not isinstance(paste_labels, (Sequence, np.ndarray)):
        fail(where, f"paste_labels must be a sequence of class indices, got {type(paste_labels).__name__}")
    if len(paste_labels) == 0 or not all(
        isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in paste_labels
    ):
        fail(
            where, f"mode 'paste' needs paste_labels, a non-empty sequence of class indices, got {list(paste_labels)!r}"
        )
