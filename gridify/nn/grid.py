"""The regular grid that point clouds are gridified onto."""
from __future__ import annotations

from typing import Sequence, Union

import torch
from torch import Tensor

from .._checks import check_float, check_int, check_number, check_tensor, fail
from ..ops.distance import working_dtype
from ..ops.grid import box_tensors, check_box, grid_positions

Bound = Union[float, Sequence[float]]


class RegularGrid:
    r"""A regular lattice of ``R`` nodes per axis over the box ``[lower, upper]^3``.

    Node ``(a, b, c)`` sits at ``lower + (a, b, c) * h`` with ``h = (upper - lower) / (R - 1)``
    (``linspace(lower, upper, R)`` per axis, both ends included). Nodes are flattened as
    ``a * R^2 + b * R + c``; the dense layout ``[B, C, R, R, R]`` has axes (C, x, y, z).

    Args:
        resolution: nodes per axis ``R`` (>= 2).
        lower, upper: box corners, scalars or one value per axis (default ``[-1, 1]^3``).

    A grid allocates nothing itself; :meth:`positions` refuses tables beyond the allocation
    limit (:func:`gridify.ops.grid_positions`).

    Shapes:
        :meth:`positions`: ``[R^3, 3]``; :meth:`to_dense`: ``[B * R^3, C] -> [B, C, R, R, R]``;
        :meth:`from_dense`: the inverse.
    """

    def __init__(self, resolution: int, lower: Bound = -1.0, upper: Bound = 1.0) -> None:
        resolution = check_int("RegularGrid", "resolution", resolution, 2)
        lo, hi = check_box("RegularGrid", lower, upper)
        self.resolution = resolution
        self.lower = tuple(float(v) for v in lo)
        self.upper = tuple(float(v) for v in hi)

    @property
    def num_nodes(self) -> int:
        return self.resolution ** 3

    @property
    def spacing(self) -> tuple:
        return tuple((u - l) / (self.resolution - 1) for l, u in zip(self.lower, self.upper))

    def positions(self, device=None, dtype=torch.float32) -> Tensor:
        return grid_positions(self.resolution, self.lower, self.upper, device=device, dtype=dtype)

    def contains(self, pos: Tensor, rtol: float = 1e-5) -> Tensor:
        """Boolean mask of points inside the box (with a relative tolerance ``rtol`` of its extent). [N]

        Compared in the working dtype of ``pos`` (float32 for half precision), so the box corners
        are not rounded to float16. NaN rows are outside.
        """
        where = "RegularGrid.contains"
        pos = check_tensor(pos, "pos", where)
        if pos.dim() != 2 or pos.size(-1) != 3:
            fail(where, f"pos must have shape [N, 3], got {tuple(pos.shape)}")
        check_float(pos, "pos", where)
        check_number(where, "rtol", rtol, strict=False)
        lo, hi = box_tensors(self.lower, self.upper, pos.device, working_dtype(pos.dtype))
        tol = rtol * (hi - lo)
        return ((pos >= lo - tol) & (pos <= hi + tol)).all(-1)

    def to_dense(self, x: Tensor, num_clouds: int) -> Tensor:
        R = self.resolution
        check_tensor(x, "x", "RegularGrid.to_dense")
        num_clouds = check_int("RegularGrid.to_dense", "num_clouds", num_clouds, 0)
        if x.dim() != 2 or x.size(0) != num_clouds * R ** 3:
            raise ValueError(f"RegularGrid.to_dense: expected [{num_clouds} * {R}^3, C] node features, "
                             f"got {tuple(x.shape)}")
        # a permuted view, no copy: the result is in the channels-last (``torch.channels_last_3d``)
        # layout, which the grid backbones keep (their direct convolutions are fastest in it)
        return x.view(num_clouds, R, R, R, -1).permute(0, 4, 1, 2, 3)

    def from_dense(self, x: Tensor) -> Tensor:
        R = self.resolution
        check_tensor(x, "x", "RegularGrid.from_dense")
        if x.dim() != 5 or tuple(x.shape[2:]) != (R, R, R):
            raise ValueError(f"RegularGrid.from_dense: expected [B, C, {R}, {R}, {R}], got {tuple(x.shape)}")
        return x.permute(0, 2, 3, 4, 1).reshape(-1, x.size(1))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, RegularGrid) and self.resolution == other.resolution
                and self.lower == other.lower and self.upper == other.upper)

    def __repr__(self) -> str:
        return f"RegularGrid(resolution={self.resolution}, lower={self.lower}, upper={self.upper})"
