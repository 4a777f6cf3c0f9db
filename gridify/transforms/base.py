"""What every transform shares: the sample dict, its one check, the seeded generator and the pipeline.

A sample is a dict holding ``pos`` (``[N, 3]``) and optionally ``normal`` (``[N, 3]``) and any other
per-point arrays; its per-point entries (:func:`point_keys`) are the arrays or tensors whose first
dimension is ``N``. :func:`check_sample` validates a sample once, at a transform's public entry
(the rules of :mod:`gridify.transforms`); :func:`check_result` refuses an output that overflowed its
dtype. :class:`RandomTransform` owns the seeded ``numpy.random.Generator`` of a random transform
(re-seeded per DataLoader worker from ``(seed, worker seed)``); :func:`content_rng` is the
generator of the deterministic modes, seeded from ``(seed, crc32(bytes of pos), N)``.
:func:`apply_matrix` is ``a M^T`` for an array or a tensor in its own kind and dtype.

Shapes:
    pos, normal ``[N, 3]``; every per-point entry ``[N, ...]``; :func:`take_rows`: ``[N, ...]`` ->
    ``[len(idx), ...]``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable as _IterableABC
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

import numpy as np
import torch

from .._checks import SUPPORTED_FLOATS, check_int, fail

__all__ = [
    "Sample",
    "NON_POINT_KEYS",
    "point_keys",
    "check_sample",
    "check_result",
    "as_real_cloud",
    "apply_matrix",
    "take_rows",
    "content_rng",
    "RandomTransform",
    "Compose",
]

#: a sample: entry name -> numpy array, torch tensor or scalar (``pos`` ``[N, 3]`` always)
Sample = Dict[str, Any]

#: keys never treated as per-point even when their first dimension happens to equal N
NON_POINT_KEYS = frozenset({"category", "index", "idx", "class_names"})


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


def check_sample(sample: Sample, where: str) -> int:
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


def check_result(a: Any, where: str, name: str, cause: Union[str, Callable[[], str]]) -> None:
    """Raise if a transform's output ``a`` overflowed (its finite input was checked on entry);
    ``cause`` (or ``cause()``, built only on failure) names the argument or input responsible."""
    if not _all_finite(a):
        why = cause() if callable(cause) else cause
        fail(where, f"{why} makes '{name}' overflow {_dtype_name(a)} (NaN/Inf in the result)")


def as_real_cloud(pos: Any) -> np.ndarray:
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


def point_keys(sample: Sample) -> List[str]:
    """Keys of the per-point entries: arrays/tensors whose first dimension is ``N``."""
    n = _n_points(sample, "point_keys")
    keys = []
    for k, v in sample.items():
        if k in NON_POINT_KEYS or not isinstance(v, (np.ndarray, torch.Tensor)):
            continue
        if v.ndim >= 1 and v.shape[0] == n:
            keys.append(k)
    return keys


def apply_matrix(a: Any, m: np.ndarray) -> Any:
    """``a @ m.T`` for a numpy array or a torch tensor, keeping its kind and dtype."""
    if isinstance(a, torch.Tensor):
        return a @ torch.as_tensor(m.T, dtype=a.dtype, device=a.device)
    a = np.asarray(a)
    dtype = a.dtype if a.dtype.kind == "f" else np.float64
    with np.errstate(over="ignore", invalid="ignore"):
        return (a @ m.T).astype(dtype, copy=False)


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


def take_rows(sample: Sample, idx: np.ndarray) -> Sample:
    """Every per-point entry of ``sample`` indexed by ``idx`` (the other entries kept)."""
    out = dict(sample)
    for k in point_keys(sample):
        v = sample[k]
        out[k] = v[torch.as_tensor(idx, device=v.device)] if isinstance(v, torch.Tensor) else np.asarray(v)[idx]
    return out


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
