"""Seeded point-cloud transforms acting on sample dicts.

A sample is a dict holding ``pos`` (``[N, 3]``) and optionally ``normal`` (``[N, 3]``) and any
other per-point arrays (``x``, per-point part labels ``y``, ``color``...). Values may be numpy
arrays or torch tensors; a transform returns a new dict of the same kinds (inputs are never
modified in place).

* Geometric transforms (:class:`Normalize`, :class:`RandomRotateZ`, :class:`RandomScale`,
  :class:`RandomJitter`) change ``pos`` and keep ``normal`` consistent with it. They do not
  touch ``x``: the datasets of :mod:`gridify.datasets` build ``x`` from ``pos``/``normal``
  after the transform has run.
* :class:`FixedPoints` subsamples every per-point entry (an array whose first dimension is
  ``N``) with the same indices; scalars such as a 0-d class label ``y`` are kept.

Every transform validates its parameters when built and its sample when called (a dict with a
floating ``pos [N, 3]`` without NaN/Inf, a ``normal [N, 3]`` when present): bad input raises a
``ValueError`` naming the transform and the problem. :func:`centre_and_scale` is the
normalization shared with :func:`gridify.api.normalize_cloud`; it works in float64 and never
overflows (coordinates of 1e300 normalize like coordinates of 1).

Randomness: every random transform owns a ``numpy.random.Generator`` seeded from ``seed``
(or uses the ``generator`` passed in), so two runs with the same seed see the same
augmentations. Inside a ``torch.utils.data.DataLoader`` worker the generator is re-seeded from
``(seed, worker seed)`` so workers do not repeat each other's augmentations; worker seeds come
from torch's RNG, so runs stay reproducible under ``torch.manual_seed``.
"""
from __future__ import annotations

import math
import zlib
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import numpy as np
import torch

from ._checks import check_alloc, check_choice, check_int, check_number

Sample = Dict[str, Any]

__all__ = ["Compose", "Normalize", "FixedPoints", "RandomRotateZ", "RandomRotate", "RandomScale",
           "RandomJitter", "RandomPointDropout", "RandomTransform", "point_keys", "rotation_matrix", "centre_and_scale"]

#: keys never treated as per-point even when their first dimension happens to equal N
_NON_POINT_KEYS = frozenset({"category", "index", "idx", "class_names"})


def _n_points(sample: Sample, where: str) -> int:
    if not isinstance(sample, dict):
        raise ValueError(f"{where}: a sample must be a dict with a 'pos' entry, got {type(sample).__name__}")
    if "pos" not in sample:
        raise ValueError(f"{where}: the sample has no 'pos' entry (keys: {sorted(sample)})")
    pos = sample["pos"]
    if not isinstance(pos, (np.ndarray, torch.Tensor)) or pos.ndim != 2 or pos.shape[1] != 3:
        raise ValueError(f"{where}: 'pos' must be an array or tensor of shape [N, 3], got "
                         f"{tuple(getattr(pos, 'shape', ())) or type(pos).__name__}")
    return int(pos.shape[0])


def _check_geometry(sample: Sample, where: str) -> int:
    """``pos`` floating and finite; ``normal`` (when present) ``[N, 3]``; returns ``N``."""
    n = _n_points(sample, where)
    pos = sample["pos"]
    floating = pos.is_floating_point() if isinstance(pos, torch.Tensor) else pos.dtype.kind == "f"
    if not floating:
        raise ValueError(f"{where}: 'pos' must hold floating-point coordinates, got dtype {pos.dtype}")
    finite = bool(torch.isfinite(pos).all()) if isinstance(pos, torch.Tensor) else bool(np.isfinite(pos).all())
    if not finite:
        raise ValueError(f"{where}: 'pos' contains NaN/Inf coordinates")
    normal = sample.get("normal")
    if normal is not None and (getattr(normal, "shape", None) is None or tuple(normal.shape) != (n, 3)):
        raise ValueError(f"{where}: 'normal' must have shape [{n}, 3] like 'pos', got "
                         f"{tuple(getattr(normal, 'shape', ())) or type(normal).__name__}")
    return n


def centre_and_scale(pos: Any, center: str = "mean") -> Tuple[np.ndarray, np.ndarray, float]:
    """``(q, c, s)`` with ``q = (p - c) / s`` in float64, ``c`` the centroid (or bounding-box centre)
    and ``s = max_j |p_j - c|``, so ``q`` lies in the unit sphere; ``p = q * s + c``.

    Computed on ``p / 2^e`` (``2^e ~ max |p|``, an exact scaling), so neither the mean nor the squares
    overflow for any finite coordinates; the result equals the direct formula whenever that does
    not overflow. Raises ValueError for NaN/Inf coordinates or a zero extent (all points identical
    to float64 precision).
    """
    p = np.asarray(pos, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] == 0:
        raise ValueError(f"expected a non-empty [N, D] cloud, got shape {p.shape}")
    if not np.isfinite(p).all():
        raise ValueError("pos contains NaN/Inf coordinates")
    top = float(np.abs(p).max())
    m = math.ldexp(1.0, math.frexp(top)[1] - 1) if top > 0 else 1.0  # max |u| in [1, 2)
    u = p / m
    cu = u.mean(0) if center == "mean" else (u.min(0) + u.max(0)) / 2
    q = u - cu
    su = float(np.sqrt((q * q).sum(1).max()))
    if not su > 1e-12 * float(np.abs(u).max()):
        raise ValueError(f"all {len(p)} points are identical (zero extent); cannot scale the cloud into the "
                         f"unit sphere")
    return q / su, cu * m, su * m


def point_keys(sample: Sample) -> List[str]:
    """Keys of the per-point entries: arrays/tensors whose first dimension is ``N``."""
    n = _n_points(sample, "point_keys")
    keys = []
    for k, v in sample.items():
        if k in _NON_POINT_KEYS or not isinstance(v, (np.ndarray, torch.Tensor)):
            continue
        if v.ndim >= 1 and v.shape[0] == n:
            keys.append(k)
    return keys


def _apply_matrix(a: Any, m: np.ndarray) -> Any:
    """``a @ m.T`` for a numpy array or a torch tensor, keeping its kind and dtype."""
    if isinstance(a, torch.Tensor):
        return a @ torch.as_tensor(m.T, dtype=a.dtype, device=a.device)
    a = np.asarray(a)
    dtype = a.dtype if a.dtype.kind == "f" else np.float64
    return (a @ m.T).astype(dtype, copy=False)


def _normalize_rows(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return a / a.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


class RandomTransform:
    """Base class owning a seeded generator (re-seeded per DataLoader worker).

    Args:
        seed: seed of the generator; ``None`` draws one from numpy's entropy (not reproducible).
        generator: use this ``numpy.random.Generator`` instead (the caller owns its state;
            no per-worker re-seeding then).
    """

    def __init__(self, *, seed: Optional[int] = 0, generator: Optional[np.random.Generator] = None) -> None:
        if generator is not None and not isinstance(generator, np.random.Generator):
            raise ValueError(f"{type(self).__name__}: generator must be a numpy.random.Generator, "
                             f"got {type(generator).__name__}")
        check_int(type(self).__name__, "seed", seed, 0, allow_none=True)
        self.seed = seed
        self._external = generator
        self._rng: Optional[np.random.Generator] = None
        self._rng_key: Any = ("unset",)

    @property
    def rng(self) -> np.random.Generator:
        if self._external is not None:
            return self._external
        info = torch.utils.data.get_worker_info()
        key = None if info is None else int(info.seed)
        if self._rng is None or key != self._rng_key:
            entropy = [] if self.seed is None else [int(self.seed)]
            if key is not None:
                entropy.append(key & 0xFFFFFFFFFFFF)
            self._rng = np.random.default_rng(entropy if entropy else None)
            self._rng_key = key
        return self._rng

    def reseed(self, seed: Optional[int]) -> None:
        """Restart the generator from ``seed``."""
        self.seed = seed
        self._rng = None
        self._rng_key = ("unset",)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed})"


class Compose:
    """Apply transforms in order."""

    def __init__(self, transforms: Iterable[Callable[[Sample], Sample]]) -> None:
        self.transforms = list(transforms)
        for t in self.transforms:
            if not callable(t):
                raise ValueError(f"Compose: {t!r} is not callable")

    def __call__(self, sample: Sample) -> Sample:
        for t in self.transforms:
            sample = t(sample)
        return sample

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose([{inner}])"


class Normalize:
    """Centre the cloud and scale it into the unit sphere (max distance to centre = 1).

    Args:
        center: ``"mean"`` (centroid) or ``"bbox"`` (bounding-box centre).

    Raises:
        ValueError: the cloud is empty or has zero extent (all points identical).

    Shapes:
        pos: ``[N, 3]``; normals are unchanged (translation and uniform scaling).
    """

    def __init__(self, center: str = "mean") -> None:
        check_choice("Normalize", "center", center, ("mean", "bbox"))
        self.center = center

    def __call__(self, sample: Sample) -> Sample:
        n = _n_points(sample, "Normalize")
        if n == 0:
            raise ValueError("Normalize: the cloud is empty (0 points)")
        _check_geometry(sample, "Normalize")
        pos = sample["pos"]
        is_t = isinstance(pos, torch.Tensor)
        p = pos.detach().double().cpu().numpy() if is_t else np.asarray(pos, dtype=np.float64)
        try:
            q, _, _ = centre_and_scale(p, self.center)
        except ValueError as exc:
            raise ValueError(f"Normalize: {exc}") from None
        out = dict(sample)
        out["pos"] = torch.as_tensor(q, dtype=pos.dtype, device=pos.device) if is_t else q.astype(pos.dtype)
        return out

    def __repr__(self) -> str:
        return f"Normalize(center={self.center!r})"


class FixedPoints(RandomTransform):
    """Subsample (or pad) the cloud to exactly ``n`` points.

    Without replacement whenever ``N >= n``. When ``N < n`` every point is kept once and the
    remaining ``n - N`` are drawn with replacement. ``replace=True`` always draws with
    replacement. All per-point entries are indexed alike.

    Args:
        n: number of points to keep.
        replace: always sample with replacement.
        deterministic: evaluation mode: the indices depend only on ``seed`` and the content
            of ``pos`` (the same input always gives the same output), not on how many samples
            were drawn before.
        seed, generator: see :class:`RandomTransform`.

    Shapes:
        every per-point ``[N, ...]`` entry becomes ``[n, ...]``.
    """

    def __init__(self, n: int, *, replace: bool = False, deterministic: bool = False,
                 seed: Optional[int] = 0, generator: Optional[np.random.Generator] = None) -> None:
        super().__init__(seed=seed, generator=generator)
        check_int("FixedPoints", "n", n)
        check_alloc("FixedPoints", f"n={n} (the row indices)", 8 * n)
        self.n = int(n)
        self.replace = bool(replace)
        self.deterministic = bool(deterministic)

    def indices(self, sample: Sample) -> np.ndarray:
        """The row indices this call would take (advances the generator unless deterministic)."""
        num = _n_points(sample, "FixedPoints")
        if num == 0:
            raise ValueError("FixedPoints: the cloud is empty (0 points)")
        if self.deterministic:
            pos = sample["pos"]
            buf = (pos.detach().cpu().numpy() if isinstance(pos, torch.Tensor) else np.asarray(pos)).tobytes()
            rng = np.random.default_rng([0 if self.seed is None else int(self.seed), zlib.crc32(buf), num])
        else:
            rng = self.rng
        if self.replace:
            return rng.integers(0, num, size=self.n)
        if num >= self.n:
            if num == self.n:
                return np.arange(num)
            return np.sort(rng.choice(num, size=self.n, replace=False))
        extra = rng.integers(0, num, size=self.n - num)
        return np.concatenate([np.arange(num), extra])

    def __call__(self, sample: Sample) -> Sample:
        keys = point_keys(sample)
        row = sum(sample[k][:1].numel() * sample[k].element_size() if isinstance(sample[k], torch.Tensor)
                  else sample[k][:1].nbytes for k in keys)
        check_alloc("FixedPoints", f"n={self.n} (rows of {row} bytes over {len(keys)} per-point entries)", self.n * row)
        idx = self.indices(sample)
        out = dict(sample)
        for k in keys:
            v = sample[k]
            out[k] = v[torch.as_tensor(idx, device=v.device)] if isinstance(v, torch.Tensor) else v[idx]
        return out

    def __repr__(self) -> str:
        return (f"FixedPoints(n={self.n}, replace={self.replace}, deterministic={self.deterministic}, "
                f"seed={self.seed})")


def rotation_matrix(axis: int, angle: float) -> np.ndarray:
    """The ``3 x 3`` matrix of a right-handed rotation by ``angle`` radians about axis 0, 1 or 2 (x, y, z)."""
    if isinstance(axis, bool) or axis not in (0, 1, 2):
        raise ValueError(f"rotation_matrix: axis must be 0, 1 or 2, got {axis!r}")
    angle = check_number("rotation_matrix", "angle", angle, -math.inf)
    c, s = math.cos(angle), math.sin(angle)
    i, j = [(1, 2), (2, 0), (0, 1)][axis]
    m = np.eye(3)
    m[i, i], m[i, j], m[j, i], m[j, j] = c, -s, s, c
    return m


class RandomRotate(RandomTransform):
    """Rotate ``pos`` and ``normal`` about a coordinate axis by a random angle.

    Args:
        degrees: the angle is uniform in ``[-degrees, degrees]`` (a float) or in
            ``[low, high]`` (a pair).
        axis: 0 (x), 1 (y) or 2 (z).
        seed, generator: see :class:`RandomTransform`.

    Shapes:
        pos, normal: ``[N, 3]``.
    """

    def __init__(self, degrees: Union[float, Tuple[float, float]] = 180.0, *, axis: int = 2,
                 seed: Optional[int] = 0, generator: Optional[np.random.Generator] = None) -> None:
        super().__init__(seed=seed, generator=generator)
        where = type(self).__name__
        if isinstance(axis, bool) or axis not in (0, 1, 2):
            raise ValueError(f"{where}: axis must be 0, 1 or 2, got {axis!r}")
        if np.isscalar(degrees):
            pair: tuple = (-degrees, degrees)
        else:
            pair = tuple(degrees) if isinstance(degrees, (tuple, list)) else ()
        if len(pair) != 2:
            raise ValueError(f"{where}: degrees must be a number or a (low, high) pair, got {degrees!r}")
        lo, hi = (check_number(where, "degrees", v, -math.inf) for v in pair)
        if not hi >= lo:
            raise ValueError(f"{type(self).__name__}: degrees range must have low <= high, got {degrees!r}")
        self.degrees = (lo, hi)
        self.axis = axis

    def matrix(self) -> np.ndarray:
        """Draw the next rotation matrix."""
        angle = math.radians(self.rng.uniform(*self.degrees))
        return rotation_matrix(self.axis, angle)

    def __call__(self, sample: Sample) -> Sample:
        _check_geometry(sample, type(self).__name__)
        m = self.matrix()
        out = dict(sample)
        out["pos"] = _apply_matrix(sample["pos"], m)
        if sample.get("normal") is not None:
            out["normal"] = _apply_matrix(sample["normal"], m)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(degrees={self.degrees}, axis={self.axis}, seed={self.seed})"


class RandomRotateZ(RandomRotate):
    """Rotate about the z (up) axis by a random angle (default: any angle).

    Shapes:
        pos, normal: ``[N, 3]``.
    """

    def __init__(self, degrees: Union[float, Tuple[float, float]] = 180.0, *, seed: Optional[int] = 0,
                 generator: Optional[np.random.Generator] = None) -> None:
        super().__init__(degrees, axis=2, seed=seed, generator=generator)


class RandomScale(RandomTransform):
    """Scale ``pos`` by a random factor in ``[low, high]``.

    Args:
        low, high: range of the factor.
        anisotropic: draw one factor per axis; normals are then transformed by the inverse
            scale and renormalized so they stay perpendicular to the surface.
        seed, generator: see :class:`RandomTransform`.

    Shapes:
        pos, normal: ``[N, 3]``.
    """

    def __init__(self, low: float = 0.8, high: float = 1.25, *, anisotropic: bool = False,
                 seed: Optional[int] = 0, generator: Optional[np.random.Generator] = None) -> None:
        super().__init__(seed=seed, generator=generator)
        check_number("RandomScale", "low", low)
        check_number("RandomScale", "high", high)
        if not (0 < low <= high):
            raise ValueError(f"RandomScale: need 0 < low <= high, got low={low}, high={high}")
        self.low, self.high, self.anisotropic = float(low), float(high), bool(anisotropic)

    def __call__(self, sample: Sample) -> Sample:
        _check_geometry(sample, "RandomScale")
        s = self.rng.uniform(self.low, self.high, size=3 if self.anisotropic else 1)
        s = np.broadcast_to(s, (3,)).astype(np.float64)
        out = dict(sample)
        out["pos"] = _apply_matrix(sample["pos"], np.diag(s))
        if self.anisotropic and sample.get("normal") is not None:
            out["normal"] = _normalize_rows(_apply_matrix(sample["normal"], np.diag(1.0 / s)))
        return out

    def __repr__(self) -> str:
        return f"RandomScale(low={self.low}, high={self.high}, anisotropic={self.anisotropic}, seed={self.seed})"


class RandomJitter(RandomTransform):
    """Add clipped Gaussian noise to ``pos`` (normals are left unchanged).

    Args:
        sigma: standard deviation of the noise.
        clip: noise is clipped to ``[-clip, clip]`` per coordinate (``None``: no clipping).
        seed, generator: see :class:`RandomTransform`.

    Shapes:
        pos: ``[N, 3]``.
    """

    def __init__(self, sigma: float = 0.01, clip: Optional[float] = 0.05, *, seed: Optional[int] = 0,
                 generator: Optional[np.random.Generator] = None) -> None:
        super().__init__(seed=seed, generator=generator)
        check_number("RandomJitter", "sigma", sigma, strict=False)
        check_number("RandomJitter", "clip", clip, strict=False, allow_none=True)
        self.sigma, self.clip = float(sigma), clip

    def __call__(self, sample: Sample) -> Sample:
        n = _check_geometry(sample, "RandomJitter")
        noise = self.rng.normal(0.0, self.sigma, size=(n, 3))
        if self.clip is not None:
            noise = np.clip(noise, -self.clip, self.clip)
        pos = sample["pos"]
        out = dict(sample)
        if isinstance(pos, torch.Tensor):
            out["pos"] = pos + torch.as_tensor(noise, dtype=pos.dtype, device=pos.device)
        else:
            out["pos"] = (np.asarray(pos) + noise).astype(np.asarray(pos).dtype, copy=False)
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

    Shapes:
        every per-point ``[N, ...]`` entry keeps its shape.
    """

    def __init__(self, max_ratio: float = 0.5, *, seed: Optional[int] = 0,
                 generator: Optional[np.random.Generator] = None) -> None:
        super().__init__(seed=seed, generator=generator)
        if isinstance(max_ratio, bool) or not isinstance(max_ratio, (int, float)) or not 0.0 <= max_ratio < 1.0:
            raise ValueError(f"RandomPointDropout: max_ratio must be a number in [0, 1), got {max_ratio!r}")
        self.max_ratio = float(max_ratio)

    def __call__(self, sample: Sample) -> Sample:
        n = _n_points(sample, "RandomPointDropout")
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
            out[key] = v[torch.as_tensor(index, device=v.device)] if isinstance(v, torch.Tensor) else np.asarray(v)[index]
        return out

    def __repr__(self) -> str:
        return f"RandomPointDropout(max_ratio={self.max_ratio}, seed={self.seed})"
