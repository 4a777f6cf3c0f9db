"""The regular grid that point clouds are gridified onto: ``R`` nodes per axis (a cube) or a
per-axis ``(Rx, Ry, Rz)`` (a flat room or LiDAR scan), flattened ``a * Ry * Rz + b * Rz + c``.

Shapes:
    positions: [Rx Ry Rz, 3]; to_dense: [B Rx Ry Rz, C] -> [B, C, Rx, Ry, Rz]; from_dense: the inverse.
"""

from __future__ import annotations

import math
from typing import Sequence, Tuple, Union

import torch
from torch import Tensor

from .._checks import check_float, check_int, check_number, check_tensor, fail
from ..ops.distance import working_dtype
from ..ops.grid import (
    Resolution,
    box_tensors,
    check_box,
    check_resolution,
    grid_positions,
    grid_positions_unchecked,
    resolution_value,
)

Bound = Union[float, Sequence[float]]


class RegularGrid:
    r"""A regular lattice of ``R_a`` nodes along axis ``a`` over the box ``[lower, upper]``.

    Node ``(a, b, c)`` sits at ``lower + (a, b, c) * h`` with ``h_a = (upper_a - lower_a) / (R_a - 1)``
    (``linspace(lower_a, upper_a, R_a)`` per axis, both ends included). Nodes are flattened as
    ``a * Ry * Rz + b * Rz + c`` (``a * R^2 + b * R + c`` for a cube); the dense layout
    ``[B, C, Rx, Ry, Rz]`` has axes (C, x, y, z).

    Args:
        resolution: nodes per axis, an int ``R`` (>= 2) for a cube or a triple ``(Rx, Ry, Rz)``
            (each >= 2); a triple of equal values is the same grid as the int. ``resolution``
            reads back as the int for a cube, the triple otherwise; ``shape`` is always the triple.
        lower, upper: box corners, scalars or one value per axis (default ``[-1, 1]^3``).

    A grid allocates nothing itself; :meth:`positions` refuses tables beyond the allocation
    limit (:func:`gridify.ops.grid_positions`).

    Shapes:
        :meth:`positions`: ``[Rx Ry Rz, 3]``; :meth:`to_dense`: ``[B * Rx Ry Rz, C] -> [B, C, Rx, Ry, Rz]``;
        :meth:`from_dense`: the inverse.
    """

    def __init__(self, resolution: Resolution, lower: Bound = -1.0, upper: Bound = 1.0) -> None:
        self.shape: Tuple[int, int, int] = check_resolution("RegularGrid", resolution)
        lo, hi = check_box("RegularGrid", lower, upper)
        self.lower = tuple(float(v) for v in lo)
        self.upper = tuple(float(v) for v in hi)

    @property
    def resolution(self) -> Resolution:
        """``R`` of a cube, else ``(Rx, Ry, Rz)``."""
        return resolution_value(self.shape)

    @property
    def is_cubic(self) -> bool:
        return self.shape[0] == self.shape[1] == self.shape[2]

    @property
    def num_nodes(self) -> int:
        return math.prod(self.shape)

    @property
    def spacing(self) -> tuple:
        return tuple((u - l) / (r - 1) for l, u, r in zip(self.lower, self.upper, self.shape))

    def describe(self) -> str:
        """``"R^3"`` or ``"Rx x Ry x Rz"`` (for messages)."""
        return f"{self.shape[0]}^3" if self.is_cubic else " x ".join(str(r) for r in self.shape)

    def positions(self, device=None, dtype=torch.float32) -> Tensor:
        """Node coordinates ``[Rx Ry Rz, 3]`` (``dtype`` and the table's size checked)."""
        return grid_positions(self.shape, self.lower, self.upper, device=device, dtype=dtype)

    def positions_unchecked(self, device=None, dtype=torch.float32) -> Tensor:
        """:meth:`positions` for library code that checked the size (a floating ``dtype``)."""
        return grid_positions_unchecked(self.shape, self.lower, self.upper, device, dtype)

    def contains(self, pos: Tensor, rtol: float = 1e-5) -> Tensor:
        """Boolean mask of points inside the box (with a relative tolerance ``rtol`` of its extent). [N]

        Compared in the working dtype of ``pos`` (float32 for half precision), so the box corners
        are not rounded to float16. NaN rows are outside.
        """
        where = "RegularGrid.contains"
        pos = check_tensor(where, "pos", pos)
        if pos.dim() != 2 or pos.size(-1) != 3:
            fail(where, f"pos must have shape [N, 3], got {tuple(pos.shape)}")
        check_float(where, "pos", pos)
        check_number(where, "rtol", rtol, strict=False)
        return self.contains_unchecked(pos, rtol)

    def contains_unchecked(self, pos: Tensor, rtol: float = 1e-5) -> Tensor:
        """:meth:`contains` of a floating ``pos [N, 3]`` and ``rtol >= 0`` (not checked)."""
        lo, hi = box_tensors(self.lower, self.upper, pos.device, working_dtype(pos.dtype))
        tol = rtol * (hi - lo)
        return ((pos >= lo - tol) & (pos <= hi + tol)).all(-1)

    def to_dense(self, x: Tensor, num_clouds: int) -> Tensor:
        check_tensor("RegularGrid.to_dense", "x", x)
        num_clouds = check_int("RegularGrid.to_dense", "num_clouds", num_clouds, 0)
        if x.dim() != 2 or x.size(0) != num_clouds * self.num_nodes:
            raise ValueError(
                f"RegularGrid.to_dense: expected [{num_clouds} * {self.describe()}, C] node features, "
                f"got {tuple(x.shape)}"
            )
        return self.to_dense_unchecked(x, num_clouds)

    def to_dense_unchecked(self, x: Tensor, num_clouds: int) -> Tensor:
        """:meth:`to_dense` of node features known to be ``[num_clouds * Rx Ry Rz, C]``."""
        # a permuted view, no copy: the result is in the channels-last (``torch.channels_last_3d``)
        # layout, which the grid backbones keep (their direct convolutions are fastest in it)
        return x.view(num_clouds, *self.shape, -1).permute(0, 4, 1, 2, 3)

    def from_dense(self, x: Tensor) -> Tensor:
        check_tensor("RegularGrid.from_dense", "x", x)
        if x.dim() != 5 or tuple(x.shape[2:]) != self.shape:
            raise ValueError(
                f"RegularGrid.from_dense: expected [B, C, {', '.join(str(r) for r in self.shape)}], "
                f"got {tuple(x.shape)}"
            )
        return self.from_dense_unchecked(x)

    def from_dense_unchecked(self, x: Tensor) -> Tensor:
        """:meth:`from_dense` of a grid known to be ``[B, C, Rx, Ry, Rz]``."""
        return x.permute(0, 2, 3, 4, 1).reshape(-1, x.size(1))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, RegularGrid)
            and self.shape == other.shape
            and self.lower == other.lower
            and self.upper == other.upper
        )

    def __setstate__(self, state: dict) -> None:  # a grid pickled before per-axis resolutions
        if "shape" not in state and "resolution" in state:
            r = int(state.pop("resolution"))
            state["shape"] = (r, r, r)
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"RegularGrid(resolution={self.resolution}, lower={self.lower}, upper={self.upper})"
