"""Subsampling: a fixed number of points, and one point per voxel.

* :class:`FixedPoints` draws exactly ``n`` rows: without replacement when ``N >= n``, else every row
  once and ``n - N`` more with replacement (``replace=True``: always with replacement); its
  ``deterministic`` mode draws from :func:`~gridify.transforms.base.content_rng`, so a cloud always
  gives the same points.
* :func:`voxel_ids` puts point ``p`` in the cubic voxel ``floor(p / voxel_size)`` and numbers the
  occupied voxels in the lexicographic order of their integer coordinates (independent of the
  point order); :func:`voxel_order` groups the points by voxel; :class:`GridSample` keeps one point
  per occupied voxel (the first, or a random one).

Every per-point entry is indexed alike; scalars such as a 0-d class label ``y`` are kept.

Shapes:
    :class:`FixedPoints`: ``[N, ...]`` -> ``[n, ...]``; :class:`GridSample`: ``[N, ...]`` -> ``[V, ...]``
    (``V`` occupied voxels); :func:`voxel_ids`: pos ``[N, 3]`` -> inverse ``[N]`` int64.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np
import torch

from .._checks import check_alloc, check_bool, check_choice, check_int, check_number, fail
from .base import RandomTransform, Sample, as_real_cloud, check_sample, content_rng, point_keys, take_rows

__all__ = ["FixedPoints", "MAX_VOXEL_COORD", "voxel_ids", "voxel_order", "GridSample"]


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
        ValueError: bad arguments, a bad sample (see :mod:`gridify.transforms`) or an empty cloud.

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
        return self._indices(sample, check_sample(sample, "FixedPoints"))

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
        num = check_sample(sample, "FixedPoints")
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
    p = as_real_cloud(pos)
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
        num = check_sample(sample, "GridSample")
        rng = content_rng(self.seed, sample["pos"], num) if self.deterministic else self.rng
        return self._indices(sample, rng)

    def _indices(self, sample: Sample, rng: np.random.Generator) -> np.ndarray:
        inverse, v = voxel_ids(sample["pos"], self.voxel_size, "GridSample")
        order, start, _ = voxel_order(inverse, v, rng if self.mode == "random" else None)
        return np.sort(order[start])

    def __call__(self, sample: Sample) -> Sample:
        return take_rows(sample, self.indices(sample))

    def __repr__(self) -> str:
        return f"GridSample(voxel_size={self.voxel_size}, mode={self.mode!r}, seed={self.seed})"
