r"""Centre a cloud and scale it into the unit sphere or cube: the one normalization rule.

    q = (p - c) / s,   p = q s + c

``c`` the centroid (``center="mean"``) or the bounding-box centre ``(min_j p_j + max_j p_j) / 2``
(``center="bbox"``); ``s = max_j |p_j - c|`` (``scale="sphere"``: ``q`` lies in the unit sphere) or
``s = max_j max_d |p_jd - c_d|`` (``scale="cube"``: ``q`` lies in ``[-1, 1]^D``, which with ``"bbox"``
the cloud's longest side spans). The rule is computed in float64 on ``u = p / 2^e`` (``2^e <= max |p|``,
an exact power of two), so neither the mean nor the squares overflow for any finite coordinates,
and the result equals the direct formula whenever that does not overflow. A cloud whose extent
is zero to float64 precision (``s_u <= 10^-12 max |u|``: all points identical) has no scale.

:func:`centre_and_scale_unchecked` is the rule on float64 tensors, batched and traceable (no
branch on the values: a zero-extent cloud goes to the origin with ``s = 0``; the ONNX wrappers
trace it); :func:`centre_and_scale` is its checked entry (any real ``[N, D]`` array, refusing an
empty cloud and a zero extent), which :class:`Normalize`, :func:`gridify.api.normalize_cloud`
and the Predictor call. :data:`NORMALIZATIONS` names the two variants a model is trained with,
and the ``normalization_*`` functions translate between those names, the ``normalize``
argument and the record a checkpoint stores.

Shapes:
    :func:`centre_and_scale_unchecked`: p ``[..., N, D]`` -> q ``[..., N, D]``, c ``[..., D]``, s ``[...]``;
    :func:`centre_and_scale`: pos ``[N, D]`` -> q ``[N, D]``, c ``[D]``, s a float.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from .._checks import check_choice
from .base import Sample, as_real_cloud, check_sample

__all__ = [
    "centre_and_scale",
    "centre_and_scale_unchecked",
    "Normalize",
    "NORMALIZATIONS",
    "normalization_name",
    "normalization_record",
    "normalization_of_record",
]

#: a cloud's extent counts as zero when ``s_u <= ZERO_EXTENT * max |u|`` (``u = p / 2^e``: float64 rounding)
ZERO_EXTENT = 1e-12


def centre_and_scale_unchecked(p: Tensor, center: str = "mean", scale: str = "sphere") -> Tuple[Tensor, Tensor, Tensor]:
    """``(q, c, s)`` of the rule above for every cloud of the float64 tensor ``p [..., N, D]``
    (finite, ``N >= 1``; ``center`` / ``scale`` among their two names: nothing is checked).

    The power of two is ``2^floor(log2 max |p|)`` (1 for an all-zero cloud); any power of two gives
    the same result, since scaling by one is exact. The centroid sums the points in their order, so
    the result does not depend on how a backend splits a reduction. A cloud of zero extent gets
    ``q = 0`` (the origin) and ``s = 0``; no step branches on the values, so the function traces to a
    fixed graph.
    """
    top = p.abs().amax(dim=(-2, -1), keepdim=True)  # [..., 1, 1]
    e = torch.where(top > 0, torch.floor(torch.log2(top)), torch.zeros_like(top))
    m = torch.pow(2.0, e)
    u = p / m
    if center == "mean":  # summed in point order (a cumulative sum): the bits of a numpy mean, on every backend
        cu = u.cumsum(-2)[..., -1:, :] / u.shape[-2]
    else:
        cu = (u.amin(-2, keepdim=True) + u.amax(-2, keepdim=True)) / 2
    q = u - cu
    su = q.pow(2).sum(-1).amax(-1).sqrt() if scale == "sphere" else q.abs().amax(dim=(-2, -1))
    ok = su > ZERO_EXTENT * (top / m)[..., 0, 0]
    safe = torch.where(ok, su, torch.ones_like(su))
    q = torch.where(ok[..., None, None], q / safe[..., None, None], torch.zeros_like(q))
    s = torch.where(ok, su * m[..., 0, 0], torch.zeros_like(su))
    return q, (cu * m)[..., 0, :], s


def centre_and_scale(pos: Any, center: str = "mean", scale: str = "sphere") -> Tuple[np.ndarray, np.ndarray, float]:
    """``(q, c, s)`` with ``q = (p - c) / s`` in float64, ``c`` the centroid (``center="mean"``) or
    bounding-box centre (``center="bbox"``) and ``s = max_j |p_j - c|`` (``scale="sphere"``: ``q`` lies in
    the unit sphere) or ``s = max_j max_d |p_jd - c_d|`` (``scale="cube"``: ``q`` lies in the cube
    ``[-1, 1]^D``, which with ``center="bbox"`` the cloud's longest side spans); ``p = q * s + c``.

    The checked entry of :func:`centre_and_scale_unchecked`: computed on ``p / 2^e`` (an exact
    scaling), so neither the mean nor the squares overflow for any finite coordinates; the result
    equals the direct formula whenever that does not overflow. Raises ValueError for an empty cloud,
    complex, boolean or non-numeric input (real ints and floats are accepted), NaN/Inf coordinates,
    an unknown ``center`` or a zero extent (all points identical to float64 precision). The messages
    name the argument but not the function: callers (:class:`Normalize`,
    :func:`gridify.api.normalize_cloud`) prefix their own name.
    """
    if not (isinstance(center, str) and center in ("mean", "bbox")):
        raise ValueError(f"center must be one of ('mean', 'bbox'), got {center!r}")
    if not (isinstance(scale, str) and scale in ("sphere", "cube")):
        raise ValueError(f"scale must be one of ('sphere', 'cube'), got {scale!r}")
    p = as_real_cloud(pos)
    if p.ndim != 2 or p.shape[0] == 0 or p.shape[1] == 0:
        raise ValueError(f"expected a non-empty [N, D] cloud, got shape {p.shape}")
    if not np.isfinite(p).all():
        raise ValueError("pos contains NaN/Inf coordinates")
    q, c, s = centre_and_scale_unchecked(torch.from_numpy(np.require(p, requirements=("C", "W"))), center, scale)
    if not float(s) > 0:
        raise ValueError(
            f"all {len(p)} points are identical (zero extent); cannot scale the cloud into the unit {scale}"
        )
    return q.numpy(), c.numpy(), float(s)


class Normalize:
    """Centre the cloud and scale it into the unit sphere (max distance to centre = 1) or the cube
    ``[-1, 1]^3`` (max coordinate = 1): ``p' = (p - c) / s`` (:func:`centre_and_scale`).

    Args:
        center: ``"mean"`` (centroid) or ``"bbox"`` (bounding-box centre).
        scale: ``"sphere"`` (``s = max_j |p_j - c|``) or ``"cube"`` (``s = max_j max_d |p_jd - c_d|``:
            with ``center="bbox"`` the cloud's longest side spans ``[-1, 1]``, the whole grid box).

    Raises:
        ValueError: a bad sample (see :mod:`gridify.transforms`), an empty cloud or a zero extent
            (all points identical).

    Shapes:
        pos: ``[N, 3]``; normals are unchanged (translation and uniform scaling).
    """

    def __init__(self, center: str = "mean", scale: str = "sphere") -> None:
        check_choice("Normalize", "center", center, ("mean", "bbox"))
        check_choice("Normalize", "scale", scale, ("sphere", "cube"))
        self.center, self.scale = center, scale

    def __call__(self, sample: Sample) -> Sample:
        n = check_sample(sample, "Normalize")
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
