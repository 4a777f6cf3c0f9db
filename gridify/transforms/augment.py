r"""Augmentations: seeded random changes of a sample that keep its meaning.

* Geometric: :class:`RandomRotate` / :class:`RandomRotateZ` (``p' = R p``, ``R`` :func:`rotation_matrix`
  of an angle ``~ U(low, high)``), :class:`RandomScale` (``p' = diag(s) p``, ``s ~ U(low, high)``, one
  factor or one per axis), :class:`RandomFlip` (``p' = diag(s) p``, ``s_a = -1`` with probability ``p``)
  and :class:`RandomJitter` (``p' = p + clip(eps, -clip, clip)``, ``eps ~ N(0, sigma^2)``) change ``pos``
  and keep ``normal`` consistent with it (rotated and mirrored alike; under an anisotropic scaling,
  ``n' ~ diag(1 / s) n``, renormalized). They do not touch ``x``: the datasets of
  :mod:`gridify.datasets` build ``x`` from ``pos``/``normal`` after the transform has run.
* :class:`RandomPointDropout` replaces ``floor(r N)`` random points (``r ~ U(0, max_ratio)``) by copies
  of kept ones; :class:`RandomDropStrength` zeroes a sample's LiDAR intensity (and sets ``has_strength``
  to 0) with probability ``p``: a training crop then looks like a scan without intensity.
* :class:`RandomResample` draws a new sampling of the same surface: point ``i`` moves to
  ``p_i + u_i (p_n(i) - p_i)``, ``n(i)`` one of its ``k`` nearest other points (found by
  :func:`gridify.ops.knn`), ``u_i ~ U(0, max_step)``.

The results of :class:`RandomRotate`, :class:`RandomScale` and :class:`RandomJitter` are checked to be
finite (a parameter that makes them overflow their dtype is refused, naming it).

Shapes:
    pos, normal ``[N, 3]`` -> ``[N, 3]``; every other per-point entry ``[N, ...]`` keeps its shape.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .._checks import check_alloc, check_bool, check_int, check_number, fail, is_int, is_real
from ..ops.knn import knn_bytes, knn_unchecked
from .base import RandomTransform, Sample, apply_matrix, check_result, check_sample, point_keys

__all__ = [
    "rotation_matrix",
    "MAX_DEGREES",
    "RandomRotate",
    "RandomRotateZ",
    "RandomScale",
    "RandomFlip",
    "RandomJitter",
    "RandomPointDropout",
    "STRENGTH_KEYS",
    "RandomDropStrength",
    "RandomResample",
]


def _scaled_normals(normal: Any, s: np.ndarray) -> Any:
    """Unit normals of a surface scaled by ``diag(s)``: rows of ``normal @ diag(1 / s)``, renormalized.

    Computed in float64 on ``normal`` divided by each row's largest component, times ``min(s) / s``
    (``<= 1``): the same directions as ``normal / s`` without any overflow; cast back to the input's
    kind and dtype. Zero rows stay zero.
    """
    w = float(s.min()) / s
    if isinstance(normal, torch.Tensor):
        a = normal.double()
        a = a / a.abs().amax(dim=1, keepdim=True).clamp_min(1e-300)
        a = a * torch.as_tensor(w, dtype=torch.float64, device=a.device)
        return (a / a.norm(dim=1, keepdim=True).clamp_min(1e-300)).to(normal.dtype)
    a = np.asarray(normal, dtype=np.float64)
    a = a / np.maximum(np.abs(a).max(axis=1, keepdims=True), 1e-300) * w
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-300)
    return a.astype(normal.dtype, copy=False)


def rotation_matrix(axis: int, angle: float) -> np.ndarray:
    """The ``3 x 3`` matrix of a right-handed rotation by ``angle`` radians about axis 0, 1 or 2 (x, y, z).

    ``axis`` must be the integer 0, 1 or 2 (not a bool or a float); ``angle`` a finite real number.
    """
    if not is_int(axis) or axis not in (0, 1, 2):
        raise ValueError(f"rotation_matrix: axis must be 0, 1 or 2, got {axis!r}")
    if not (is_real(angle) and math.isfinite(angle)):
        fail("rotation_matrix", f"angle must be a finite number (radians), got {angle!r}")
    angle = float(angle)
    c, s = math.cos(angle), math.sin(angle)
    i, j = [(1, 2), (2, 0), (0, 1)][int(axis)]
    m = np.eye(3)
    m[i, i], m[i, j], m[j, i], m[j, j] = c, -s, s, c
    return m


#: largest |angle| in degrees :class:`RandomRotate` accepts (a full turn)
MAX_DEGREES = 360.0


class RandomRotate(RandomTransform):
    """Rotate ``pos`` and ``normal`` about a coordinate axis by a random angle.

    Args:
        degrees: the angle is uniform in ``[-degrees, degrees]`` (a number in ``[0, 360]``) or
            in ``[low, high]`` (a pair of numbers in ``[-360, 360]`` with ``low <= high``).
        axis: the integer 0 (x), 1 (y) or 2 (z).
        seed, generator: see :class:`RandomTransform`.

    Raises:
        ValueError: bad arguments, a bad sample (see :mod:`gridify.transforms`), or coordinates so
            close to their dtype's largest value that the rotated ones overflow it.

    Shapes:
        pos, normal: ``[N, 3]``.
    """

    def __init__(
        self,
        degrees: Union[float, Tuple[float, float]] = 180.0,
        *,
        axis: int = 2,
        seed: Optional[int] = 0,
        generator: Optional[np.random.Generator] = None,
    ) -> None:
        super().__init__(seed=seed, generator=generator)
        where = type(self).__name__
        if not is_int(axis) or axis not in (0, 1, 2):
            raise ValueError(f"{where}: axis must be 0, 1 or 2, got {axis!r}")
        if is_real(degrees):
            if not (math.isfinite(degrees) and 0 <= degrees <= MAX_DEGREES):
                fail(
                    where,
                    f"degrees must be a number in [0, {MAX_DEGREES:g}] (the angle is drawn from "
                    f"[-degrees, degrees]) or a (low, high) pair, got {degrees!r}",
                )
            pair: tuple = (-float(degrees), float(degrees))
        else:
            pair = tuple(degrees) if isinstance(degrees, (tuple, list)) else ()
        if len(pair) != 2:
            raise ValueError(f"{where}: degrees must be a number or a (low, high) pair, got {degrees!r}")
        for v in pair:
            if not (is_real(v) and math.isfinite(v) and -MAX_DEGREES <= v <= MAX_DEGREES):
                fail(
                    where,
                    f"degrees bounds must be finite numbers in [-{MAX_DEGREES:g}, {MAX_DEGREES:g}], got "
                    f"{v!r} in {degrees!r}",
                )
        lo, hi = float(pair[0]), float(pair[1])
        if not hi >= lo:
            raise ValueError(f"{type(self).__name__}: degrees range must have low <= high, got {degrees!r}")
        self.degrees = (lo, hi)
        self.axis = int(axis)

    def matrix(self) -> np.ndarray:
        """Draw the next rotation matrix."""
        angle = math.radians(self.rng.uniform(*self.degrees))
        return rotation_matrix(self.axis, angle)

    def __call__(self, sample: Sample) -> Sample:
        where = type(self).__name__
        check_sample(sample, where)
        m = self.matrix()
        out = dict(sample)
        for key in ("pos", "normal"):
            if sample.get(key) is not None:
                out[key] = apply_matrix(sample[key], m)
                check_result(
                    out[key],
                    where,
                    key,
                    lambda k=key: (
                        f"rotating values up to |{float(abs(sample[k]).max()):.3g}| "
                        f"(too close to the dtype's largest value)"
                    ),
                )
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(degrees={self.degrees}, axis={self.axis}, seed={self.seed})"


class RandomRotateZ(RandomRotate):
    """Rotate about the z (up) axis by a random angle (default: any angle).

    Shapes:
        pos, normal: ``[N, 3]``.
    """

    def __init__(
        self,
        degrees: Union[float, Tuple[float, float]] = 180.0,
        *,
        seed: Optional[int] = 0,
        generator: Optional[np.random.Generator] = None,
    ) -> None:
        super().__init__(degrees, axis=2, seed=seed, generator=generator)


class RandomScale(RandomTransform):
    """Scale ``pos`` by a random factor in ``[low, high]``.

    Args:
        low, high: range of the factor (finite, ``0 < low <= high``).
        anisotropic: draw one factor per axis (True or False); normals are then transformed by
            the inverse scale and renormalized so they stay perpendicular to the surface (``1 / low``
            must then be finite).
        seed, generator: see :class:`RandomTransform`.

    Raises:
        ValueError: bad arguments, a bad sample (see :mod:`gridify.transforms`), or a factor that makes
            the scaled coordinates overflow their dtype (NaN/Inf in the result).

    Shapes:
        pos, normal: ``[N, 3]``.
    """

    def __init__(
        self,
        low: float = 0.8,
        high: float = 1.25,
        *,
        anisotropic: bool = False,
        seed: Optional[int] = 0,
        generator: Optional[np.random.Generator] = None,
    ) -> None:
        super().__init__(seed=seed, generator=generator)
        check_number("RandomScale", "low", low)
        check_number("RandomScale", "high", high)
        if not (0 < low <= high):
            raise ValueError(f"RandomScale: need 0 < low <= high, got low={low}, high={high}")
        anisotropic = check_bool("RandomScale", "anisotropic", anisotropic)
        if anisotropic and not math.isfinite(1.0 / float(low)):
            fail(
                "RandomScale",
                f"low={low!r} is too small for anisotropic scaling: the normals are scaled by "
                f"1 / low, which overflows float64",
            )
        self.low, self.high, self.anisotropic = float(low), float(high), anisotropic

    def __call__(self, sample: Sample) -> Sample:
        check_sample(sample, "RandomScale")
        s = self.rng.uniform(self.low, self.high, size=3 if self.anisotropic else 1)
        s = np.broadcast_to(s, (3,)).astype(np.float64)
        out = dict(sample)
        out["pos"] = apply_matrix(sample["pos"], np.diag(s))
        check_result(out["pos"], "RandomScale", "pos", f"scaling by a factor up to high={self.high:g}")
        if self.anisotropic and sample.get("normal") is not None:
            out["normal"] = _scaled_normals(sample["normal"], s)
        return out

    def __repr__(self) -> str:
        return f"RandomScale(low={self.low}, high={self.high}, anisotropic={self.anisotropic}, seed={self.seed})"


class RandomFlip(RandomTransform):
    """Mirror ``pos`` (and ``normal``) across coordinate planes, each axis with probability ``p``.

        pos' = pos diag(s),   s_a = -1 with probability p (independently per axis in ``axes``), else 1

    A mirror image is not reachable by rotations, so it adds shapes of the other handedness (the
    LiDAR recipes of the field flip x and y with p = 0.5). Normals are mirrored the same way.

    Args:
        axes: the axes that may flip (a non-empty sequence of distinct 0, 1, 2; default x and y).
        p: probability of each axis' flip, in ``[0, 1]``.
        seed, generator: see :class:`RandomTransform`.

    Raises:
        ValueError: bad arguments or a bad sample (see :mod:`gridify.transforms`).

    Shapes:
        pos, normal: ``[N, 3]``.
    """

    def __init__(
        self,
        axes: Sequence[int] = (0, 1),
        p: float = 0.5,
        *,
        seed: Optional[int] = 0,
        generator: Optional[np.random.Generator] = None,
    ) -> None:
        super().__init__(seed=seed, generator=generator)
        where = type(self).__name__
        items = list(axes) if isinstance(axes, (list, tuple)) else None
        if not items or any(not is_int(a) or a not in (0, 1, 2) for a in items) or len(set(items)) != len(items):
            fail(where, f"axes must be a non-empty list of distinct axes among 0, 1, 2, got {axes!r}")
        if not (is_real(p) and 0.0 <= float(p) <= 1.0):
            fail(where, f"p must be a probability in [0, 1], got {p!r}")
        self.axes, self.p = tuple(int(a) for a in items), float(p)

    def __call__(self, sample: Sample) -> Sample:
        check_sample(sample, "RandomFlip")
        s = np.ones(3)
        flips = self.rng.random(len(self.axes)) < self.p
        for a, f in zip(self.axes, flips):
            if f:
                s[a] = -1.0
        out = dict(sample)
        for key in ("pos", "normal"):
            if sample.get(key) is not None:
                out[key] = apply_matrix(sample[key], np.diag(s))
        return out

    def __repr__(self) -> str:
        return f"RandomFlip(axes={list(self.axes)}, p={self.p}, seed={self.seed})"


class RandomJitter(RandomTransform):
    """Add clipped Gaussian noise to ``pos`` (normals are left unchanged).

    Args:
        sigma: standard deviation of the noise (a non-negative finite number).
        clip: noise is clipped to ``[-clip, clip]`` per coordinate (a non-negative finite number;
            ``None``: no clipping).
        seed, generator: see :class:`RandomTransform`.

    Raises:
        ValueError: bad arguments, a bad sample (see :mod:`gridify.transforms`), or noise so large
            that the jittered coordinates overflow their dtype (NaN/Inf in the result).

    Shapes:
        pos: ``[N, 3]``.
    """

    def __init__(
        self,
        sigma: float = 0.01,
        clip: Optional[float] = 0.05,
        *,
        seed: Optional[int] = 0,
        generator: Optional[np.random.Generator] = None,
    ) -> None:
        super().__init__(seed=seed, generator=generator)
        sigma = check_number("RandomJitter", "sigma", sigma, strict=False)
        clip = check_number("RandomJitter", "clip", clip, strict=False, allow_none=True)
        self.sigma, self.clip = sigma, clip

    def __call__(self, sample: Sample) -> Sample:
        n = check_sample(sample, "RandomJitter")
        with np.errstate(over="ignore", invalid="ignore"):
            noise = self.rng.normal(0.0, self.sigma, size=(n, 3))
            if self.clip is not None:
                noise = np.clip(noise, -self.clip, self.clip)
            pos = sample["pos"]
            out = dict(sample)
            if isinstance(pos, torch.Tensor):
                out["pos"] = pos + torch.as_tensor(noise, dtype=pos.dtype, device=pos.device)
            else:
                out["pos"] = (np.asarray(pos) + noise).astype(np.asarray(pos).dtype, copy=False)
        check_result(out["pos"], "RandomJitter", "pos", f"the noise (sigma={self.sigma:g}, clip={self.clip})")
        return out

    def __repr__(self) -> str:
        return f"RandomJitter(sigma={self.sigma}, clip={self.clip}, seed={self.seed})"


class RandomPointDropout(RandomTransform):
    """Drop a random fraction of the points and refill the cloud with copies of kept ones.

    A ratio ``r ~ U(0, max_ratio)`` is drawn per call; ``floor(r N)`` points chosen at random are
    replaced by copies of points drawn from the kept ones, so the cloud keeps its ``N`` points (and
    every per-point entry, e.g. part labels, follows its point). It imitates occlusion and uneven
    sampling density (PointNet++ drops points the same way, but refills with the first point,
    which would pile them onto one grid node here).

    Args:
        max_ratio: largest fraction dropped, in ``[0, 1)``.
        seed, generator: see :class:`RandomTransform`.

    Raises:
        ValueError: a bad ``max_ratio`` or a bad sample (see :mod:`gridify.transforms`).

    Shapes:
        every per-point ``[N, ...]`` entry keeps its shape.
    """

    def __init__(
        self, max_ratio: float = 0.5, *, seed: Optional[int] = 0, generator: Optional[np.random.Generator] = None
    ) -> None:
        super().__init__(seed=seed, generator=generator)
        if not is_real(max_ratio) or not (math.isfinite(max_ratio) and 0.0 <= max_ratio < 1.0):
            raise ValueError(f"RandomPointDropout: max_ratio must be a number in [0, 1), got {max_ratio!r}")
        self.max_ratio = float(max_ratio)

    def __call__(self, sample: Sample) -> Sample:
        n = check_sample(sample, "RandomPointDropout")
        dropped = int(self.rng.uniform(0.0, self.max_ratio) * n)
        if dropped == 0 or dropped >= n:
            return dict(sample)
        index = np.arange(n)
        drop = self.rng.choice(n, size=dropped, replace=False)
        keep = np.setdiff1d(index, drop, assume_unique=True)
        index[drop] = keep[self.rng.integers(0, len(keep), size=dropped)]
        out = dict(sample)
        for key in point_keys(sample):
            v = sample[key]
            out[key] = (
                v[torch.as_tensor(index, device=v.device)] if isinstance(v, torch.Tensor) else np.asarray(v)[index]
            )
        return out

    def __repr__(self) -> str:
        return f"RandomPointDropout(max_ratio={self.max_ratio}, seed={self.seed})"


#: the per-point intensity entries :class:`RandomDropStrength` zeroes (raw and per-scan normalised)
STRENGTH_KEYS = ("strength", "intensity", "strength_scan")


class RandomDropStrength(RandomTransform):
    """With probability ``p``, the sample's LiDAR intensity is dropped for the whole sample (a training crop):
    its :data:`STRENGTH_KEYS` entries (``strength``, ``intensity``, ``strength_scan``) are zeroed and
    ``has_strength`` is set to 0 for every point (added when missing); otherwise the sample is kept as it is.
    A crop so dropped reaches the model as a scan without intensity does (the scene features of
    :func:`gridify.datasets.scene_base.build_scene_features`: strength 0, has_strength 0), so one model
    trained with ``has_strength`` among its features labels scans with and without intensity.

    Args:
        p: the probability of a drop, in ``[0, 1]``.
        seed, generator: see :class:`RandomTransform`.

    Raises:
        ValueError: a bad ``p`` or a bad sample (see :mod:`gridify.transforms`).

    Shapes:
        every entry keeps its shape; ``has_strength`` ``[N]`` float32 (a tensor when ``pos`` is one).
    """

    def __init__(
        self, p: float = 0.3, *, seed: Optional[int] = 0, generator: Optional[np.random.Generator] = None
    ) -> None:
        super().__init__(seed=seed, generator=generator)
        if not is_real(p) or not (math.isfinite(p) and 0.0 <= p <= 1.0):
            raise ValueError(f"RandomDropStrength: p must be a probability in [0, 1], got {p!r}")
        self.p = float(p)

    def __call__(self, sample: Sample) -> Sample:
        n = check_sample(sample, "RandomDropStrength")
        if self.rng.random() >= self.p:  # one draw per call, dropped or not: the stream does not depend on p
            return dict(sample)
        out = dict(sample)
        for key in STRENGTH_KEYS:
            v = sample.get(key)
            if isinstance(v, torch.Tensor):
                out[key] = torch.zeros_like(v)
            elif isinstance(v, np.ndarray):
                out[key] = np.zeros_like(v)
        pos = sample["pos"]
        out["has_strength"] = (
            torch.zeros(n, dtype=torch.float32, device=pos.device)
            if isinstance(pos, torch.Tensor)
            else np.zeros(n, np.float32)
        )
        return out

    def __repr__(self) -> str:
        return f"RandomDropStrength(p={self.p}, seed={self.seed})"


class RandomResample(RandomTransform):
    """A new sampling of the same surface: every point moves toward one of its nearest neighbours.

    Point ``i`` becomes ``p_i + u_i (p_n(i) - p_i)`` with ``n(i)`` drawn uniformly among its ``k``
    nearest other points and ``u_i ~ U(0, max_step)``. On a surface sampled densely enough the
    segment to a near neighbour lies on (or within the chord error of) the surface, so the result
    is another sampling of the same shape: a classifier trained on a release with a fixed set of
    points per shape (the 1,024 of ModelNet40's) otherwise learns each shape's particular points.
    Normals and every other per-point entry stay with their point (the displacement is smaller
    than the neighbour spacing).

    The ``k`` nearest neighbours of a cloud are computed once, by :func:`gridify.ops.knn` on the
    float32 coordinates (exact distances, ties to the lowest index; the KD-tree for large clouds),
    and kept per cloud, keyed by a 128-bit digest of its coordinates, for at most ``cache_size``
    clouds: put this transform first in a training pipeline, where every epoch reads the same points
    of a shape.

    Args:
        k: neighbours to choose from (a positive integer; clouds with ``N <= k`` use ``N - 1``).
        max_step: largest fraction of the way to the neighbour, in ``[0, 1]``.
        cache_size: clouds whose neighbours are kept (0: recompute every call).
        seed, generator: see :class:`RandomTransform`.

    Raises:
        ValueError: bad arguments or a bad sample (see :mod:`gridify.transforms`).

    Shapes:
        pos: ``[N, 3]``; every other entry keeps its shape.
    """

    def __init__(
        self,
        k: int = 8,
        max_step: float = 0.5,
        *,
        cache_size: int = 20000,
        seed: Optional[int] = 0,
        generator: Optional[np.random.Generator] = None,
    ) -> None:
        super().__init__(seed=seed, generator=generator)
        check_int("RandomResample", "k", k)
        if not is_real(max_step) or not (math.isfinite(max_step) and 0.0 <= max_step <= 1.0):
            raise ValueError(f"RandomResample: max_step must be a number in [0, 1], got {max_step!r}")
        check_int("RandomResample", "cache_size", cache_size, 0)
        self.k, self.max_step, self.cache_size = int(k), float(max_step), int(cache_size)
        self._cache: Dict[Tuple[int, bytes], np.ndarray] = {}

    def neighbours(self, pos: np.ndarray) -> np.ndarray:
        """``[N, min(k, N - 1)]`` indices of every point's nearest other points, nearest first."""
        # a 128-bit digest: a crc32 would collide within a dataset of ~10^4 clouds about once in 100
        key = (
            pos.shape[0],
            hashlib.blake2b(np.ascontiguousarray(pos, dtype=np.float32).tobytes(), digest_size=16).digest(),
        )
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        p = torch.as_tensor(np.asarray(pos, dtype=np.float32)).double()  # exact distances of the float32 cloud
        n = p.shape[0]
        k = max(0, min(self.k, n - 1))
        check_alloc("RandomResample", f"k={k} neighbours of {n} points", knn_bytes(n, n, k + 1))
        idx = np.empty((n, k), dtype=np.uint16 if n <= 65536 else np.int64)
        if k > 0:  # the k + 1 nearest, the point itself among them (ties to the lowest index), less itself
            zeros = torch.zeros(n, dtype=torch.long)
            nb = knn_unchecked(p, p, k + 1, zeros, zeros, torch.tensor([n]))[1].view(n, k + 1)
            keep = nb != torch.arange(n).unsqueeze(1)
            keep[:, -1] &= ~keep.all(1)  # a point with k + 1 copies of lower index: its last neighbour goes
            idx[:] = nb[keep].view(n, k).numpy()
        if self.cache_size > 0:
            if len(self._cache) >= self.cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = idx
        return idx

    def __call__(self, sample: Sample) -> Sample:
        n = check_sample(sample, "RandomResample")
        out = dict(sample)
        if n < 2 or self.max_step == 0.0:
            return out
        pos = sample["pos"]
        p = pos.detach().cpu().to(torch.float64).numpy() if isinstance(pos, torch.Tensor) else np.asarray(pos)
        nb = self.neighbours(p)
        pick = nb[np.arange(n), self.rng.integers(0, nb.shape[1], size=n)].astype(np.int64)
        u = self.rng.uniform(0.0, self.max_step, size=(n, 1))
        new = p.astype(np.float64) + u * (p[pick].astype(np.float64) - p)
        if isinstance(pos, torch.Tensor):
            out["pos"] = torch.as_tensor(new, dtype=pos.dtype, device=pos.device)
        else:
            out["pos"] = new.astype(p.dtype, copy=False)
        return out

    def __repr__(self) -> str:
        return f"RandomResample(k={self.k}, max_step={self.max_step}, seed={self.seed})"
