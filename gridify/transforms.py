"""Seeded point-cloud transforms acting on sample dicts.

A sample is a dict holding ``pos`` (``[N, 3]``) and optionally ``normal`` (``[N, 3]``) and any
other per-point arrays (``x``, per-point part labels ``y``, ``color``...). Values may be numpy
arrays or torch tensors; a transform returns a new dict of the same kinds (inputs are never
modified in place).

* Geometric transforms (:class:`Normalize`, :class:`RandomRotateZ`, :class:`RandomScale`,
  :class:`RandomJitter`) change ``pos`` and keep ``normal`` consistent with it. They do not
  touch ``x``: the datasets of :mod:`gridify.datasets` build ``x`` from ``pos``/``normal``
  after the transform has run.
* :class:`RandomResample` draws a new sampling of the same surface: point ``i`` moves to
  ``p_i + u_i (p_n(i) - p_i)``, ``n(i)`` one of its ``k`` nearest points, ``u_i ~ U(0, max_step)``.
* :class:`RandomDropStrength` zeroes a sample's LiDAR intensity (and sets ``has_strength`` to 0) with
  probability ``p``: a training crop then looks like a scan without intensity.
* :class:`FixedPoints` subsamples every per-point entry (an array whose first dimension is
  ``N``) with the same indices; scalars such as a 0-d class label ``y`` are kept.
* Scenes: :class:`GridSample` keeps one point per occupied voxel of edge ``voxel_size``
  (:func:`voxel_ids`: voxel of ``p`` = ``floor(p / voxel_size)``); :class:`SceneCrop` keeps the
  ``max_points`` points nearest in xy to a random centre point (:func:`crop_xy`);
  :class:`SceneSampler` chains them (and ``num_points``) on one generator for the scene datasets.
  :func:`mix_scenes` mixes two LiDAR scans in their sensor frames (:data:`SCENE_MIXES`): ``lasermix``
  keeps scan ``a`` in alternate bands of inclination ``phi = atan2(z, hypot(x, y))`` (3-6 equal bands over
  the 0.5-99.5 % range of both scans' ``phi``, read from every 8th point) and scan ``b`` in the others (LaserMix, Kong et al. 2023);
  ``polarmix`` replaces ``a``'s points of a random half-turn of azimuth ``theta = atan2(y, x)`` by ``b``'s
  (PolarMix's scene swap, Xiao et al. 2022); ``paste`` keeps all of ``a`` and adds two copies of ``b``'s points of
  the ``paste_labels`` classes (the objects: cars, people, ...), rotated about the sensor's vertical axis by
  ``omega_1 ~ U(0, 2 pi / 3)`` and ``omega_2 ~ U(2 pi / 3, 4 pi / 3)`` (PolarMix's instance rotate-paste).

Every transform validates its parameters when built and its sample once when called: a dict
with a floating ``pos [N, 3]`` (torch: float16/bfloat16/float32/float64) without NaN/Inf; when present,
a ``normal`` of the same kind (floating ``[N, 3]``, finite), ``x``/``color``/``colors``/``rgb``
arrays with ``N`` rows and ``y``/``label``/``labels`` arrays with ``N`` rows (per-point labels) or
a single row (a per-sample label; scalars are fine). Bad input raises a ``ValueError`` naming
the transform, the argument or entry and the problem; so does a parameter that would make the
result overflow its dtype (the results of :class:`RandomRotate`, :class:`RandomScale` and
:class:`RandomJitter` are checked to be finite). :func:`centre_and_scale` is the
normalization shared with :func:`gridify.api.normalize_cloud`; it works in float64 and never
overflows (coordinates of 1e300 normalize like coordinates of 1).

Randomness: every random transform owns a ``numpy.random.Generator`` seeded from ``seed``
(or uses the ``generator`` passed in), so two runs with the same seed see the same
augmentations. Inside a ``torch.utils.data.DataLoader`` worker the generator is re-seeded from
``(seed, worker seed)`` so workers do not repeat each other's augmentations; worker seeds come
from torch's RNG, so runs stay reproducible under ``torch.manual_seed``.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Iterable as _IterableABC
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ._checks import (
    SUPPORTED_FLOATS,
    check_alloc,
    check_bool,
    check_choice,
    check_int,
    check_number,
    fail,
    is_int,
    is_real,
)

Sample = Dict[str, Any]

__all__ = [
    "Compose",
    "Normalize",
    "FixedPoints",
    "RandomRotateZ",
    "RandomRotate",
    "RandomScale",
    "RandomFlip",
    "RandomJitter",
    "RandomPointDropout",
    "RandomDropStrength",
    "STRENGTH_KEYS",
    "RandomResample",
    "RandomTransform",
    "point_keys",
    "rotation_matrix",
    "UP_AXES",
    "check_up_axis",
    "up_axis_rotation",
    "to_z_up",
    "centre_and_scale",
    "NORMALIZATIONS",
    "normalization_name",
    "normalization_record",
    "normalization_of_record",
    "GridSample",
    "SceneCrop",
    "SceneSampler",
    "voxel_ids",
    "voxel_order",
    "crop_xy",
    "crop_centre",
    "CROP_CENTRES",
    "crop_xy_unchecked",
    "content_rng",
    "SCENE_MIXES",
    "mix_scenes",
    "mix_scenes_unchecked",
]

#: keys never treated as per-point even when their first dimension happens to equal N
_NON_POINT_KEYS = frozenset({"category", "index", "idx", "class_names"})


def _n_points(sample: Sample, where: str) -> int:
    if not isinstance(sample, dict):
        raise ValueError(f"{where}: a sample must be a dict with a 'pos' entry, got {type(sample).__name__}")
    if "pos" not in sample:
        raise ValueError(f"{where}: the sample has no 'pos' entry (keys: {sorted(sample)})")
    pos = sample["pos"]
    if not isinstance(pos, (np.ndarray, torch.Tensor)) or pos.ndim != 2 or pos.shape[1] != 3:
        raise ValueError(
            f"{where}: 'pos' must be an array or tensor of shape [N, 3], got "
            f"{tuple(getattr(pos, 'shape', ())) or type(pos).__name__}"
        )
    return int(pos.shape[0])


#: per-point entries that must have one row per point when present as arrays
_ROW_KEYS = ("x", "color", "colors", "rgb")
#: label entries: per point (``[N]``, segmentation) or per sample (a scalar or a single row, classification)
_LABEL_KEYS = ("y", "label", "labels")


def _all_finite(a: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return bool(torch.isfinite(a).all())
    with np.errstate(invalid="ignore"):
        return bool(np.isfinite(a).all())


def _dtype_name(a: Any) -> str:
    return str(a.dtype).replace("torch.", "")


def _check_float_array(a: Any, name: str, what: str, where: str) -> None:
    """``a`` (an array or tensor) holds finite floating-point values of a supported dtype."""
    if isinstance(a, torch.Tensor):
        if not a.is_floating_point():
            fail(where, f"'{name}' must hold floating-point {what}, got dtype {a.dtype}")
        if a.dtype not in SUPPORTED_FLOATS:
            fail(where, f"'{name}' has the unsupported dtype {a.dtype}; use float16, bfloat16, float32 or float64")
        if a.device.type == "meta":
            fail(where, f"'{name}' is a meta tensor (it holds no data)")
    elif a.dtype.kind != "f":
        fail(where, f"'{name}' must hold floating-point {what}, got dtype {a.dtype}")
    if not _all_finite(a):
        fail(where, f"'{name}' contains NaN/Inf {what}")


def _check_sample(sample: Sample, where: str) -> int:
    """Validate a sample once, at a transform's public entry; returns ``N``.

    ``pos``: a floating ``[N, 3]`` array or tensor without NaN/Inf; ``normal`` (when present): the
    same, ``[N, 3]``; ``x``/``color``/``colors``/``rgb`` arrays: ``N`` rows; ``y``/``label``/``labels``
    arrays: ``N`` rows, or a scalar / a single row (a per-sample class label).
    """
    n = _n_points(sample, where)
    _check_float_array(sample["pos"], "pos", "coordinates", where)
    normal = sample.get("normal")
    if normal is not None:
        if not isinstance(normal, (np.ndarray, torch.Tensor)) or tuple(normal.shape) != (n, 3):
            raise ValueError(
                f"{where}: 'normal' must have shape [{n}, 3] like 'pos', got "
                f"{tuple(getattr(normal, 'shape', ())) or type(normal).__name__}"
            )
        _check_float_array(normal, "normal", "components", where)
    for key, v in sample.items():
        if not isinstance(v, (np.ndarray, torch.Tensor)) or v.ndim == 0:
            continue
        rows = int(v.shape[0])
        if key in _ROW_KEYS and rows != n:
            fail(where, f"'{key}' has {rows} rows but 'pos' has {n} points; per-point entries need one row per point")
        if key in _LABEL_KEYS and rows not in (1, n):
            fail(
                where,
                f"'{key}' has {rows} rows but 'pos' has {n} points; per-point labels need one row per "
                f"point (a per-sample label is a scalar or a single row)",
            )
    return n


def _check_result(a: Any, where: str, name: str, cause: Union[str, Callable[[], str]]) -> None:
    """Raise if a transform's output ``a`` overflowed (its finite input was checked on entry);
    ``cause`` (or ``cause()``, built only on failure) names the argument or input responsible."""
    if not _all_finite(a):
        why = cause() if callable(cause) else cause
        fail(where, f"{why} makes '{name}' overflow {_dtype_name(a)} (NaN/Inf in the result)")


def _as_real_cloud(pos: Any) -> np.ndarray:
    """``pos`` as a float64 numpy array; complex, boolean and non-numeric input is refused."""
    if isinstance(pos, torch.Tensor):
        if pos.is_complex() or pos.dtype == torch.bool:
            raise ValueError(
                f"pos must hold real coordinates, got dtype {pos.dtype}"
                + (" (the imaginary part would be dropped)" if pos.is_complex() else "")
            )
        if pos.device.type == "meta":
            raise ValueError("pos is a meta tensor (it holds no data)")
        return pos.detach().cpu().double().numpy()
    try:
        a = np.asarray(pos)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"pos must be an [N, D] array of real numbers ({exc})") from None
    if a.dtype.kind in "fiu":
        with np.errstate(over="ignore", invalid="ignore"):
            p = a.astype(np.float64, copy=False)
            if a.dtype.itemsize > 8 and np.isfinite(a).all() and not np.isfinite(p).all():
                raise ValueError(f"pos has {a.dtype} coordinates beyond the float64 range")
        return p
    if a.dtype.kind == "O":
        try:
            return a.astype(np.float64)
        except (ValueError, TypeError, OverflowError):
            pass
    raise ValueError(
        f"pos must hold real coordinates, got dtype {a.dtype}"
        + (" (the imaginary part would be dropped)" if a.dtype.kind == "c" else "")
    )


def centre_and_scale(pos: Any, center: str = "mean", scale: str = "sphere") -> Tuple[np.ndarray, np.ndarray, float]:
    """``(q, c, s)`` with ``q = (p - c) / s`` in float64, ``c`` the centroid (``center="mean"``) or
    bounding-box centre (``center="bbox"``) and ``s = max_j |p_j - c|`` (``scale="sphere"``: ``q`` lies in
    the unit sphere) or ``s = max_j max_d |p_jd - c_d|`` (``scale="cube"``: ``q`` lies in the cube
    ``[-1, 1]^D``, which with ``center="bbox"`` the cloud's longest side spans); ``p = q * s + c``.

    Computed on ``p / 2^e`` (``2^e ~ max |p|``, an exact scaling), so neither the mean nor the squares
    overflow for any finite coordinates; the result equals the direct formula whenever that does
    not overflow. Raises ValueError for an empty cloud, complex, boolean or non-numeric input
    (real ints and floats are accepted), NaN/Inf coordinates, an unknown ``center`` or a zero
    extent (all points identical to float64 precision). The messages name the argument but not
    the function: callers (:class:`Normalize`, :func:`gridify.api.normalize_cloud`) prefix their own name.
    """
    if not (isinstance(center, str) and center in ("mean", "bbox")):
        raise ValueError(f"center must be one of ('mean', 'bbox'), got {center!r}")
    if not (isinstance(scale, str) and scale in ("sphere", "cube")):
        raise ValueError(f"scale must be one of ('sphere', 'cube'), got {scale!r}")
    p = _as_real_cloud(pos)
    if p.ndim != 2 or p.shape[0] == 0 or p.shape[1] == 0:
        raise ValueError(f"expected a non-empty [N, D] cloud, got shape {p.shape}")
    if not np.isfinite(p).all():
        raise ValueError("pos contains NaN/Inf coordinates")
    top = float(np.abs(p).max())
    m = math.ldexp(1.0, math.frexp(top)[1] - 1) if top > 0 else 1.0  # max |u| in [1, 2)
    u = p / m
    cu = u.mean(0) if center == "mean" else (u.min(0) + u.max(0)) / 2
    q = u - cu
    su = float(np.sqrt((q * q).sum(1).max())) if scale == "sphere" else float(np.abs(q).max())
    if not su > 1e-12 * float(np.abs(u).max()):
        raise ValueError(
            f"all {len(p)} points are identical (zero extent); cannot scale the cloud into the unit {scale}"
        )
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
    with np.errstate(over="ignore", invalid="ignore"):
        return (a @ m.T).astype(dtype, copy=False)


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


class RandomTransform:
    """Base class owning a seeded generator (re-seeded per DataLoader worker).

    Args:
        seed: seed of the generator (a non-negative integer); ``None`` draws one from numpy's
            entropy (not reproducible).
        generator: use this ``numpy.random.Generator`` instead (the caller owns its state;
            no per-worker re-seeding then).
    """

    def __init__(self, *, seed: Optional[int] = 0, generator: Optional[np.random.Generator] = None) -> None:
        if generator is not None and not isinstance(generator, np.random.Generator):
            raise ValueError(
                f"{type(self).__name__}: generator must be a numpy.random.Generator, got {type(generator).__name__}"
            )
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
        """Restart the generator from ``seed`` (a non-negative integer or None)."""
        check_int(f"{type(self).__name__}.reseed", "seed", seed, 0, allow_none=True)
        self.seed = seed
        self._rng = None
        self._rng_key = ("unset",)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed})"


class Compose:
    """Apply transforms in order.

    Args:
        transforms: a sequence (list, tuple, iterable) of callables taking and returning a sample.

    Raises:
        ValueError: ``transforms`` is not a sequence (e.g. a single transform, a string or a
            number), or one of its items is not callable.
    """

    def __init__(self, transforms: Iterable[Callable[[Sample], Sample]]) -> None:
        bad = isinstance(transforms, (str, bytes, dict, set, frozenset)) or not isinstance(transforms, _IterableABC)
        if bad:
            hint = " (wrap a single transform in a list)" if callable(transforms) else ""
            fail("Compose", f"transforms must be a sequence of callables, got {type(transforms).__name__}{hint}")
        self.transforms = list(transforms)
        for i, t in enumerate(self.transforms):
            if not callable(t):
                fail("Compose", f"transforms[{i}] = {t!r} is not callable")

    def __call__(self, sample: Sample) -> Sample:
        for t in self.transforms:
            sample = t(sample)
        return sample

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose([{inner}])"


class Normalize:
    """Centre the cloud and scale it into the unit sphere (max distance to centre = 1) or the cube
    ``[-1, 1]^3`` (max coordinate = 1): ``p' = (p - c) / s`` (:func:`centre_and_scale`).

    Args:
        center: ``"mean"`` (centroid) or ``"bbox"`` (bounding-box centre).
        scale: ``"sphere"`` (``s = max_j |p_j - c|``) or ``"cube"`` (``s = max_j max_d |p_jd - c_d|``:
            with ``center="bbox"`` the cloud's longest side spans ``[-1, 1]``, the whole grid box).

    Raises:
        ValueError: a bad sample (see the module docstring), an empty cloud or a zero extent
            (all points identical).

    Shapes:
        pos: ``[N, 3]``; normals are unchanged (translation and uniform scaling).
    """

    def __init__(self, center: str = "mean", scale: str = "sphere") -> None:
        check_choice("Normalize", "center", center, ("mean", "bbox"))
        check_choice("Normalize", "scale", scale, ("sphere", "cube"))
        self.center, self.scale = center, scale

    def __call__(self, sample: Sample) -> Sample:
        n = _check_sample(sample, "Normalize")
        if n == 0:
            raise ValueError("Normalize: the cloud is empty (0 points)")
        pos = sample["pos"]
        is_t = isinstance(pos, torch.Tensor)
        p = pos.detach().double().cpu().numpy() if is_t else np.asarray(pos, dtype=np.float64)
        try:
            q, _, _ = centre_and_scale(p, self.center, self.scale)
        except ValueError as exc:
            raise ValueError(f"Normalize: {exc}") from None
        out = dict(sample)
        out["pos"] = torch.as_tensor(q, dtype=pos.dtype, device=pos.device) if is_t else q.astype(pos.dtype)
        return out

    def __repr__(self) -> str:
        return f"Normalize(center={self.center!r}, scale={self.scale!r})"


#: the named normalizations (``data.normalize``, ``Predictor(normalize=...)``): name -> ``(center, scale)`` of
#: :class:`Normalize`. ``"sphere"`` (what ``normalize=True`` means): the centroid at 0, the farthest point at
#: distance 1. ``"cube"``: the bounding box centred, its longest side spanning ``[-1, 1]``, so the cloud fills
#: as much of a ``[-1, 1]^3`` grid as its aspect ratio allows.
NORMALIZATIONS: Dict[str, Tuple[str, str]] = {"sphere": ("mean", "sphere"), "cube": ("bbox", "cube")}

#: name -> the ``info["normalization"]`` record a checkpoint stores (the sphere one predates the cube)
_RECORDS: Dict[str, Dict[str, str]] = {
    "sphere": {"center": "mean", "scale": "unit_sphere"},
    "cube": {"center": "bbox", "scale": "unit_cube"},
}


def normalization_name(where: str, normalize: Any) -> Optional[str]:
    """The named normalization of a ``normalize`` argument: True -> ``"sphere"``, False / None -> None (none),
    a name of :data:`NORMALIZATIONS` -> itself; anything else is a ValueError naming ``where``."""
    if normalize is None or normalize is False:
        return None
    if normalize is True:
        return "sphere"
    if isinstance(normalize, str) and normalize in NORMALIZATIONS:
        return normalize
    raise ValueError(f"{where}: normalize must be true, false or one of {tuple(NORMALIZATIONS)}, got {normalize!r}")


def normalization_record(name: Optional[str]) -> Optional[Dict[str, str]]:
    """The checkpoint record (``info["normalization"]``) of a named normalization (None: no normalization)."""
    return None if name is None else dict(_RECORDS[name])


def normalization_of_record(record: Any) -> Optional[str]:
    """The named normalization of a checkpoint record (None -> None); ValueError for a record no name has."""
    if record is None:
        return None
    for name, rec in _RECORDS.items():
        if isinstance(record, dict) and all(record.get(k) == v for k, v in rec.items()):
            return name
    raise ValueError(f"unknown normalization record {record!r} (known: {list(_RECORDS.values())})")


class FixedPoints(RandomTransform):
    """Subsample (or pad) the cloud to exactly ``n`` points.

    Without replacement whenever ``N >= n``. When ``N < n`` every point is kept once and the
    remaining ``n - N`` are drawn with replacement. ``replace=True`` always draws with
    replacement. All per-point entries are indexed alike.

    Args:
        n: number of points to keep (a positive integer).
        replace: always sample with replacement (True or False).
        deterministic: evaluation mode (True or False): the indices depend only on ``seed`` and
            the content of ``pos`` (the same input always gives the same output), not on how many
            samples were drawn before.
        seed, generator: see :class:`RandomTransform`.

    Raises:
        ValueError: bad arguments, a bad sample (see the module docstring) or an empty cloud.

    Shapes:
        every per-point ``[N, ...]`` entry becomes ``[n, ...]``.
    """

    def __init__(
        self,
        n: int,
        *,
        replace: bool = False,
        deterministic: bool = False,
        seed: Optional[int] = 0,
        generator: Optional[np.random.Generator] = None,
    ) -> None:
        super().__init__(seed=seed, generator=generator)
        check_int("FixedPoints", "n", n)
        check_alloc("FixedPoints", f"n={n} (the row indices)", 8 * n)
        self.n = int(n)
        self.replace = check_bool("FixedPoints", "replace", replace)
        self.deterministic = check_bool("FixedPoints", "deterministic", deterministic)

    def indices(self, sample: Sample) -> np.ndarray:
        """The row indices this call would take (advances the generator unless deterministic)."""
        return self._indices(sample, _check_sample(sample, "FixedPoints"))

    def _indices(self, sample: Sample, num: int) -> np.ndarray:
        if num == 0:
            raise ValueError("FixedPoints: the cloud is empty (0 points)")
        rng = content_rng(self.seed, sample["pos"], num) if self.deterministic else self.rng
        if self.replace:
            return rng.integers(0, num, size=self.n)
        if num >= self.n:
            if num == self.n:
                return np.arange(num)
            return np.sort(rng.choice(num, size=self.n, replace=False))
        extra = rng.integers(0, num, size=self.n - num)
        return np.concatenate([np.arange(num), extra])

    def __call__(self, sample: Sample) -> Sample:
        num = _check_sample(sample, "FixedPoints")
        keys = point_keys(sample)
        row = sum(
            sample[k][:1].numel() * sample[k].element_size()
            if isinstance(sample[k], torch.Tensor)
            else sample[k][:1].nbytes
            for k in keys
        )
        check_alloc("FixedPoints", f"n={self.n} (rows of {row} bytes over {len(keys)} per-point entries)", self.n * row)
        idx = self._indices(sample, num)
        out = dict(sample)
        for k in keys:
            v = sample[k]
            out[k] = v[torch.as_tensor(idx, device=v.device)] if isinstance(v, torch.Tensor) else v[idx]
        return out

    def __repr__(self) -> str:
        return f"FixedPoints(n={self.n}, replace={self.replace}, deterministic={self.deterministic}, seed={self.seed})"


def content_rng(seed: Optional[int], pos: Any, num: int, salt: int = 0) -> np.random.Generator:
    """A generator seeded from ``(seed, crc32 of the bytes of pos, num)`` (and ``salt`` when not 0: another
    stream for the same cloud): the same cloud always draws the same numbers, however many clouds were
    drawn before (the deterministic mode of the samplers)."""
    # raw bytes (a uint8 view: bfloat16 has no numpy dtype)
    buf = (
        pos.detach().cpu().contiguous().view(torch.uint8).numpy()
        if isinstance(pos, torch.Tensor)
        else np.ascontiguousarray(pos)
    ).tobytes()
    key = [0 if seed is None else int(seed), zlib.crc32(buf), int(num)]
    return np.random.default_rng(key + [int(salt)] if salt else key)


def _take(sample: Sample, idx: np.ndarray) -> Sample:
    """Every per-point entry of ``sample`` indexed by ``idx`` (the other entries kept)."""
    out = dict(sample)
    for k in point_keys(sample):
        v = sample[k]
        out[k] = v[torch.as_tensor(idx, device=v.device)] if isinstance(v, torch.Tensor) else np.asarray(v)[idx]
    return out


#: largest |integer voxel coordinate| :func:`voxel_ids` accepts (floor(p / voxel_size) must fit int64)
MAX_VOXEL_COORD = 2**52


def voxel_ids(pos: Any, voxel_size: float, where: str = "voxel_ids") -> Tuple[np.ndarray, int]:
    """``(inverse, V)``: the voxel of every point, ``inverse[j]`` in ``0..V-1``, for the cubic voxels of
    edge ``voxel_size`` (point ``p`` is in voxel ``floor(p / voxel_size)``); voxel ids follow the
    lexicographic order of the integer voxel coordinates, so they do not depend on the point order.

    Shapes:
        pos ``[N, 3]`` (array or tensor) -> inverse ``[N]`` int64.
    """
    voxel_size = check_number(where, "voxel_size", voxel_size)
    p = _as_real_cloud(pos)
    if p.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), 0
    with np.errstate(over="ignore", invalid="ignore"):
        f = np.floor(p / voxel_size)
    if not np.isfinite(f).all() or float(np.abs(f).max()) > MAX_VOXEL_COORD:
        fail(
            where,
            f"voxel_size={voxel_size:g} is too small for coordinates up to {float(np.abs(p).max()):.3g} "
            f"(more than 2^52 voxels along an axis)",
        )
    q = f.astype(np.int64)
    q -= q.min(0)
    dims = [int(d) + 1 for d in q.max(0)]
    if dims[0] * dims[1] * dims[2] < 2**62:  # one int64 key per voxel, in the same lexicographic order
        key = (q[:, 0] * dims[1] + q[:, 1]) * dims[2] + q[:, 2]
        _, inverse = np.unique(key, return_inverse=True)
    else:
        _, inverse = np.unique(q, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1).astype(np.int64)
    return inverse, int(inverse.max()) + 1


def voxel_order(
    inverse: np.ndarray, num_voxels: int, rng: Optional[np.random.Generator] = None
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, start, count)``: the points grouped by voxel (``order[start[v]:start[v] + count[v]]``
    are the points of voxel ``v``), in index order within a voxel, or in a random order drawn from
    ``rng``.

    Shapes:
        inverse ``[N]`` -> order ``[N]``, start ``[V]``, count ``[V]`` (int64).
    """
    if rng is None:
        order = np.argsort(inverse, kind="stable")
    else:
        order = np.lexsort((rng.random(len(inverse)), inverse))
    count = np.bincount(inverse, minlength=num_voxels).astype(np.int64)
    start = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    return order.astype(np.int64), start, count


class GridSample(RandomTransform):
    """Keep one point per occupied voxel (grid subsampling; every per-point entry alike).

    The voxels are cubes of edge ``voxel_size`` (in the units of ``pos``: metres for scenes);
    ``mode="first"`` keeps the lowest-index point of every voxel, ``"random"`` a random one. The
    kept points stay in their original order.

    Args:
        voxel_size: the voxel edge (a positive finite number).
        mode: ``"random"`` or ``"first"``.
        deterministic: draw from :func:`content_rng` (the same cloud always gives the same points).
        seed, generator: see :class:`RandomTransform`.

    Shapes:
        every per-point ``[N, ...]`` entry becomes ``[V, ...]`` (V occupied voxels).
    """

    def __init__(
        self,
        voxel_size: float,
        mode: str = "random",
        *,
        deterministic: bool = False,
        seed: Optional[int] = 0,
        generator: Optional[np.random.Generator] = None,
    ) -> None:
        super().__init__(seed=seed, generator=generator)
        self.voxel_size = check_number("GridSample", "voxel_size", voxel_size)
        self.mode = check_choice("GridSample", "mode", mode, ("random", "first"))
        self.deterministic = check_bool("GridSample", "deterministic", deterministic)

    def indices(self, sample: Sample) -> np.ndarray:
        """The sorted row indices this call would keep (advances the generator in random mode)."""
        num = _check_sample(sample, "GridSample")
        rng = content_rng(self.seed, sample["pos"], num) if self.deterministic else self.rng
        return self._indices(sample, rng)

    def _indices(self, sample: Sample, rng: np.random.Generator) -> np.ndarray:
        inverse, v = voxel_ids(sample["pos"], self.voxel_size, "GridSample")
        order, start, _ = voxel_order(inverse, v, rng if self.mode == "random" else None)
        return np.sort(order[start])

    def __call__(self, sample: Sample) -> Sample:
        return _take(sample, self.indices(sample))

    def __repr__(self) -> str:
        return f"GridSample(voxel_size={self.voxel_size}, mode={self.mode!r}, seed={self.seed})"


def crop_xy(pos: Any, centre: int, max_points: int) -> np.ndarray:
    """The sorted indices of the ``max_points`` points nearest (in xy) to point ``centre``; ties at the
    last distance go to the lowest indices. Every point when there are at most ``max_points``.

    Shapes:
        pos ``[N, 3]`` -> ``[min(N, max_points)]`` int64.
    """
    return crop_xy_unchecked(_as_real_cloud(pos), centre, max_points)


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
        num = _check_sample(sample, "SceneCrop")
        rng = content_rng(self.seed, sample["pos"], num) if self.deterministic else self.rng
        return self._indices(sample, num, rng)

    def _indices(self, sample: Sample, num: int, rng: np.random.Generator) -> np.ndarray:
        if num <= self.max_points:
            return np.arange(num)
        centre = crop_centre(sample.get("y"), num, self.centre, rng)
        return crop_xy(sample["pos"], centre, self.max_points)

    def __call__(self, sample: Sample) -> Sample:
        return _take(sample, self.indices(sample))

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
        num = _check_sample(sample, "SceneSampler")
        rng = self.generator(sample["pos"])
        if self.grid is not None:
            sample = _take(sample, self.grid._indices(sample, rng))
            num = int(sample["pos"].shape[0])
        if self.crop is not None:
            sample = _take(sample, self.crop._indices(sample, num, rng))
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
        per_point = isinstance(v, np.ndarray) and v.ndim and len(v) == na and k not in _NON_POINT_KEYS
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
        if isinstance(v, np.ndarray) and v.ndim and len(v) == na and k not in _NON_POINT_KEYS:
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


#: the up axes a cloud may have (``--up-axis``, ``up_axis=``): its "up" direction in its own coordinates
UP_AXES = ("z", "y", "x", "-z", "-y", "-x")

#: up axis -> the proper rotation (det +1, no mirror) taking that direction onto +z
_UP_ROTATIONS = {
    "z": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    "-z": ((1, 0, 0), (0, -1, 0), (0, 0, -1)),  # 180 degrees about x
    "y": ((1, 0, 0), (0, 0, -1), (0, 1, 0)),  # +90 degrees about x: (x, y, z) -> (x, -z, y)
    "-y": ((1, 0, 0), (0, 0, 1), (0, -1, 0)),  # -90 degrees about x: (x, y, z) -> (x, z, -y)
    "x": ((0, 0, -1), (0, 1, 0), (1, 0, 0)),  # -90 degrees about y: (x, y, z) -> (-z, y, x)
    "-x": ((0, 0, 1), (0, 1, 0), (-1, 0, 0)),  # +90 degrees about y: (x, y, z) -> (z, y, -x)
}


def check_up_axis(where: str, up_axis: Any) -> str:
    """``up_axis`` as one of :data:`UP_AXES` (case and surrounding spaces ignored), else a ValueError naming it."""
    value = up_axis.strip().lower() if isinstance(up_axis, str) else up_axis
    if value not in UP_AXES:
        raise ValueError(
            f"{where}: up_axis must be one of {', '.join(UP_AXES)} (the cloud's up direction), got {up_axis!r}"
        )
    return value


def up_axis_rotation(up_axis: str) -> np.ndarray:
    """The ``3 x 3`` proper rotation that takes a cloud whose up direction is ``up_axis`` to z up
    (``p_z_up = R p``); the identity for ``"z"``. A y-up cloud (glTF, ``modelnet40_normal_resampled``)
    becomes ``(x, -z, y)``: a rotation of +90 degrees about x, not a swap of y and z (a mirror)."""
    return np.array(_UP_ROTATIONS[check_up_axis("up_axis_rotation", up_axis)], dtype=np.float64)


def to_z_up(points: np.ndarray, up_axis: str, normals: Optional[np.ndarray] = None) -> Tuple[Any, Any]:
    """``points`` (and ``normals``) ``[N, 3]`` rotated from ``up_axis`` up to z up (:func:`up_axis_rotation`),
    in their own dtype; unchanged (the same arrays) for ``"z"``."""
    if check_up_axis("to_z_up", up_axis) == "z":
        return points, normals
    r = up_axis_rotation(up_axis)

    def rot(a: Optional[np.ndarray]) -> Optional[np.ndarray]:
        return None if a is None else (np.asarray(a, np.float64) @ r.T).astype(np.asarray(a).dtype, copy=False)

    return rot(points), rot(normals)


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
        ValueError: bad arguments, a bad sample (see the module docstring), or coordinates so
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
        _check_sample(sample, where)
        m = self.matrix()
        out = dict(sample)
        for key in ("pos", "normal"):
            if sample.get(key) is not None:
                out[key] = _apply_matrix(sample[key], m)
                _check_result(
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
        ValueError: bad arguments, a bad sample (see the module docstring), or a factor that makes
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
        _check_sample(sample, "RandomScale")
        s = self.rng.uniform(self.low, self.high, size=3 if self.anisotropic else 1)
        s = np.broadcast_to(s, (3,)).astype(np.float64)
        out = dict(sample)
        out["pos"] = _apply_matrix(sample["pos"], np.diag(s))
        _check_result(out["pos"], "RandomScale", "pos", f"scaling by a factor up to high={self.high:g}")
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
        ValueError: bad arguments or a bad sample (see the module docstring).

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
        _check_sample(sample, "RandomFlip")
        s = np.ones(3)
        flips = self.rng.random(len(self.axes)) < self.p
        for a, f in zip(self.axes, flips):
            if f:
                s[a] = -1.0
        out = dict(sample)
        for key in ("pos", "normal"):
            if sample.get(key) is not None:
                out[key] = _apply_matrix(sample[key], np.diag(s))
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
        ValueError: bad arguments, a bad sample (see the module docstring), or noise so large
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
        n = _check_sample(sample, "RandomJitter")
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
        _check_result(out["pos"], "RandomJitter", "pos", f"the noise (sigma={self.sigma:g}, clip={self.clip})")
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
        ValueError: a bad ``max_ratio`` or a bad sample (see the module docstring).

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
        n = _check_sample(sample, "RandomPointDropout")
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
        ValueError: a bad ``p`` or a bad sample (see the module docstring).

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
        n = _check_sample(sample, "RandomDropStrength")
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


#: distances computed at once by :meth:`RandomResample.neighbours` (a block of query rows x every point)
_RESAMPLE_BLOCK = 1 << 22


class RandomResample(RandomTransform):
    """A new sampling of the same surface: every point moves toward one of its nearest neighbours.

    Point ``i`` becomes ``p_i + u_i (p_n(i) - p_i)`` with ``n(i)`` drawn uniformly among its ``k``
    nearest other points and ``u_i ~ U(0, max_step)``. On a surface sampled densely enough the
    segment to a near neighbour lies on (or within the chord error of) the surface, so the result
    is another sampling of the same shape: a classifier trained on a release with a fixed set of
    points per shape (the 1,024 of ModelNet40's) otherwise learns each shape's particular points.
    Normals and every other per-point entry stay with their point (the displacement is smaller
    than the neighbour spacing).

    The ``k`` nearest neighbours of a cloud are computed once (``O(N^2)`` distances, in blocks of
    ``2^22``) and kept per cloud, keyed by a 128-bit digest of its coordinates, for at most
    ``cache_size`` clouds: put this transform first in a training pipeline, where every epoch reads
    the same points of a shape.

    Args:
        k: neighbours to choose from (a positive integer; clouds with ``N <= k`` use ``N - 1``).
        max_step: largest fraction of the way to the neighbour, in ``[0, 1]``.
        cache_size: clouds whose neighbours are kept (0: recompute every call).
        seed, generator: see :class:`RandomTransform`.

    Raises:
        ValueError: bad arguments or a bad sample (see the module docstring).

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
        # its own small search: transforms sit beside gridify.ops in the layers and may not import it
        p = torch.as_tensor(np.asarray(pos, dtype=np.float32))
        n = p.shape[0]
        k = min(self.k, n - 1)
        check_alloc("RandomResample", f"k={k} neighbours of {n} points", 8 * n * k)
        rows = max(1, min(n, _RESAMPLE_BLOCK // n))  # query rows per block: memory O(rows x N), not O(N^2)
        idx = np.empty((n, k), dtype=np.uint16 if n <= 65536 else np.int64)
        for start in range(0, n, rows):
            d = torch.cdist(p[start : start + rows], p)
            d[torch.arange(d.shape[0]), torch.arange(start, start + d.shape[0])] = float("inf")
            idx[start : start + rows] = torch.topk(d, k, dim=1, largest=False, sorted=True).indices.numpy()
        if self.cache_size > 0:
            if len(self._cache) >= self.cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = idx
        return idx

    def __call__(self, sample: Sample) -> Sample:
        n = _check_sample(sample, "RandomResample")
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
