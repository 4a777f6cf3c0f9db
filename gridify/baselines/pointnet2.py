"""PointNet++ (single-scale grouping) baselines on PyG ``PointNetConv`` with gridify's own ops.

The architecture follows the PointNet++ paper (Qi et al., 2017) in the configuration of the PyG
examples ``pointnet2_classification.py`` / ``pointnet2_segmentation.py``. Sampling and grouping
use :func:`gridify.ops.fps`, :func:`gridify.ops.radius` and :func:`gridify.ops.knn` (PyG 2.8 routes
its own versions through pyg-lib, which has no wheels). Differences from the PyG example, all
deliberate:

* the ball query keeps the *nearest* ``max_num_neighbors`` points within ``r`` (torch-cluster
  keeps the first ones by index), and in eval mode farthest point sampling starts at the point
  farthest from the cloud's centroid (a random point in training). Both make the eval-mode
  output independent of the order of the points;
* ``PointNetConv(add_self_loops=False)``: the query point is already its own neighbour (distance
  0), and PyG's self loops on a bipartite graph would join source ``i`` to target ``i``, which
  are different points;
* point features ``x`` are optional (``x=None`` uses the coordinates, so ``in_channels=3``).

Distances (ball queries, farthest point sampling, the centroid of the eval-mode start point and
the interpolation weights) are computed in the working frame of :mod:`gridify.ops.distance`, so
float16 models and wide clouds sample and interpolate as float64 would. A model validates its
inputs once and runs its modules trusted; a module called directly validates its own.

Shapes:
    classifier: pos [N, 3], x [N, F], batch [N] -> [B, num_classes]; segmenter: -> [N, num_classes]
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from .._checks import (
    check_batch,
    check_finite,
    check_float,
    check_fraction,
    check_int,
    check_number,
    check_parameters,
    check_points,
    check_probability,
    check_tensor,
    checked_forward,
    fail,
    trusted_inputs,
)
from ..nn.inputs import category_onehot, check_same_dtype, parse_points
from ..ops.distance import distance_frame
from ..ops.knn import check_knn_inputs, check_knn_size, knn_unchecked
from ..ops.sampling import check_fps_size, fps_unchecked, radius_unchecked
from ..ops.scatter import scatter_unchecked
from ..registry import MODELS

__all__ = ["SAModule", "GlobalSAModule", "FPModule", "knn_interpolate", "PointNet2Classifier", "PointNet2Segmenter"]


# ---------------------------------------------------------------------------- shared helpers
def prepare_points(
    where: str, pos, x, batch, in_channels: int, dtype: torch.dtype, neighbours: int = 0
) -> Tuple[Tensor, Tensor, Tensor, int, Optional[Tuple[int, int]]]:
    """Validate PyG-style or dense inputs once: ``(pos [N,3], x [N,F], batch [N], num_clouds, dense_shape)``.

    Shapes, dtypes, the batch vector and NaN/Inf in ``pos`` and ``x`` are checked here, and the
    sizes of the searches the model runs: farthest point sampling, and at most ``neighbours``
    neighbours for each of at most ``N`` queries among ``N`` points (the largest ball query or
    kNN of any level); the modules of the model then run the unchecked ops.
    """
    pos, x, batch, dense_shape = parse_points(where, pos, x, batch, in_channels, dtype)
    batch, num_clouds, counts = check_batch(where, "batch", batch, pos.size(0), device=pos.device)
    check_fps_size(where, pos, counts)
    check_knn_size(where, pos.size(0), pos.size(0), neighbours, pos.device)
    check_finite(where, "pos", pos, batch)
    if x is not pos:
        check_finite(where, "x", x, batch)
    return pos, x, batch, num_clouds, dense_shape


def check_point_module_input(
    module: nn.Module, x: Tensor, pos: Tensor, batch: Tensor, num_clouds: object = None
) -> Tensor:
    """Inputs of a PointNet++ module called directly: ``x [N, F]`` and ``pos [N, 3]`` finite, of the
    module's dtype, and a valid sorted ``batch [N]`` (the number of clouds, when given, may be larger).
    Returns the points per cloud."""
    where = type(module).__name__
    pos = check_points(where, "pos", pos)
    x = check_tensor(where, "x", x)
    if x.dim() != 2 or x.size(0) != pos.size(0):
        fail(where, f"x must have shape [{pos.size(0)}, F] to match pos, got {tuple(x.shape)}")
    ref = next(module.parameters())
    for name, t in (("x", x), ("pos", pos)):
        check_same_dtype(where, name, t, ref)
    batch, _, counts = check_batch(where, "batch", batch, pos.size(0), num_clouds, pos.device)
    check_finite(where, "pos", pos, batch)
    check_finite(where, "x", x, batch)
    return counts


def check_sa_input(module: nn.Module, x: Tensor, pos: Tensor, batch: Tensor, num_clouds: object = None) -> None:
    """Inputs of :class:`SAModule` called directly, as :func:`check_point_module_input`, and the sizes of
    its searches (the sampling's padded tables, the ball query's result)."""
    counts = check_point_module_input(module, x, pos, batch, num_clouds)
    where = type(module).__name__
    if counts.numel():
        check_fps_size(where, pos, counts)
    check_knn_size(where, pos.size(0), pos.size(0), module.max_num_neighbors, pos.device)


def check_fp_input(
    module: nn.Module,
    x: Tensor,
    pos: Tensor,
    batch: Tensor,
    x_skip: Optional[Tensor],
    pos_skip: Tensor,
    batch_skip: Tensor,
) -> None:
    """Inputs of :class:`FPModule` called directly: the coarse level as :func:`check_point_module_input`,
    the fine level likewise (``x_skip`` may be None), with no fine cloud missing from the coarse one."""
    where = type(module).__name__
    check_point_module_input(module, x, pos, batch)
    check_point_module_input(module, pos_skip if x_skip is None else x_skip, pos_skip, batch_skip)
    check_knn_size(where, pos_skip.size(0), pos.size(0), module.k, pos.device)
    coarse = int(batch.max()) + 1 if batch.numel() else 0
    if batch_skip.numel() and int(batch_skip.max()) + 1 > coarse:
        fail(where, f"batch_skip refers to cloud {int(batch_skip.max())} but the coarse level has {coarse} clouds")


def _mlp(channels: Sequence[int], **kwargs) -> nn.Module:
    from torch_geometric.nn import MLP

    return MLP(list(channels), **kwargs)


def _fps_start(pos: Tensor, batch: Tensor, num_clouds: int) -> Tensor:
    """Per cloud, the local index of the point farthest from the centroid (order independent).

    In the working frame (float32/float64, exactly rescaled): a float16 centroid sum overflows.
    """
    (pos,), _ = distance_frame(pos)
    centroid = scatter_unchecked(pos, batch, num_clouds, "mean")
    d = (pos - centroid[batch]).square().sum(-1)
    far = scatter_unchecked(d, batch, num_clouds, "max")
    counts = torch.bincount(batch, minlength=num_clouds)
    ptr = torch.cumsum(counts, 0) - counts
    local = torch.arange(pos.size(0), device=pos.device) - ptr[batch]
    cand = torch.where(d == far[batch], local, torch.full_like(local, pos.size(0)))
    return scatter_unchecked(cand, batch, num_clouds, "min")


# ---------------------------------------------------------------------------- modules
class SAModule(nn.Module):
    r"""Set abstraction: sample centroids, group a ball around each, run a PointNet on it.

        idx = FPS(P, ratio),   N(i) = {j : ||p_j - p_i|| <= r}  (at most max_num_neighbors, nearest)
        x'_i = max_{j in N(i)} h_theta([x_j, p_j - p_i]),     i in idx

    Shapes:
        x [N, F], pos [N, 3], batch [N] -> x' [M, C_out], pos [M, 3], batch [M], M = sum ceil(ratio n_b)
    """

    def __init__(self, ratio: float, r: float, local_nn: nn.Module, max_num_neighbors: int = 64) -> None:
        super().__init__()
        from torch_geometric.nn import PointNetConv

        check_fraction("SAModule", "ratio", ratio)
        check_number("SAModule", "r", r)
        check_int("SAModule", "max_num_neighbors", max_num_neighbors, as_bound=True)
        self.ratio, self.r, self.max_num_neighbors = float(ratio), float(r), int(max_num_neighbors)
        self.conv = PointNetConv(local_nn, add_self_loops=False)

    @checked_forward(check_sa_input)
    def forward(self, x: Tensor, pos: Tensor, batch: Tensor, num_clouds: int) -> Tuple[Tensor, Tensor, Tensor]:
        """Inputs as the model passes them (validated once at the model's entry: finite ``pos``,
        sorted int64 ``batch`` with every cloud non-empty); validated here when called directly."""
        p = pos.detach()
        counts = torch.bincount(batch, minlength=num_clouds)
        start = None if self.training else _fps_start(p, batch, num_clouds)
        idx = fps_unchecked(p, batch, counts, self.ratio, random_start=self.training, start=start)
        row, col = radius_unchecked(p, p[idx], self.r, batch, batch[idx], counts, self.max_num_neighbors)
        edge_index = torch.stack([col, row], dim=0)  # source = neighbour, target = centroid
        x = self.conv((x, x[idx]), (pos, pos[idx]), edge_index)
        return x, pos[idx], batch[idx]


class GlobalSAModule(nn.Module):
    r"""Global set abstraction: one PointNet over every cloud, ``x'_b = max_{j in b} h([x_j, p_j])``.

    Shapes:
        x [N, F], pos [N, 3], batch [N] -> x' [B, C_out], pos [B, 3] (zeros), batch [B]
    """

    def __init__(self, nn_module: nn.Module) -> None:
        super().__init__()
        self.nn = nn_module

    @checked_forward(check_point_module_input)
    def forward(self, x: Tensor, pos: Tensor, batch: Tensor, num_clouds: int) -> Tuple[Tensor, Tensor, Tensor]:
        h = self.nn(torch.cat([x, pos], dim=1))
        h = scatter_unchecked(h, batch, num_clouds, "max")
        return h, pos.new_zeros(num_clouds, 3), torch.arange(num_clouds, device=pos.device)


def knn_interpolate(
    x: Tensor,
    pos_x: Tensor,
    pos_y: Tensor,
    batch_x: Optional[Tensor] = None,
    batch_y: Optional[Tensor] = None,
    k: int = 3,
) -> Tensor:
    r"""Inverse-squared-distance interpolation from the ``k`` nearest source points.

        y_i = sum_{j in kNN(i)} w_ij x_j / sum_j w_ij,     w_ij = 1 / max(||p_j - p_i||^2, 1e-16 s^2)

    (``s`` the scale of the working frame, so the weights do not depend on the units and never
    overflow). ``pos_x``/``pos_y``/batches are validated by :func:`gridify.ops.knn`; ``x`` must be
    ``[N, C]`` floating and finite.

    Shapes:
        x [N, C], pos_x [N, 3], pos_y [M, 3], batch_x [N], batch_y [M] -> [M, C]
    """
    where = "knn_interpolate"
    pos_x, pos_y, k, bx, by, counts = check_knn_inputs(
        pos_x, pos_y, k, batch_x, batch_y, where=where, names=("pos_x", "pos_y")
    )
    x = check_tensor(where, "x", x)
    if x.dim() != 2 or x.size(0) != pos_x.size(0):
        fail(where, f"x must have shape [N, C] with one row per point of pos_x ({pos_x.size(0)}), got {tuple(x.shape)}")
    check_float(where, "x", x)
    check_finite(where, "x", x, bx)
    with torch.no_grad():
        row, col = knn_unchecked(pos_x, pos_y, k, bx, by, counts)
    return _interpolate(x, pos_x, pos_y, row, col)


def _interpolate(x: Tensor, pos_x: Tensor, pos_y: Tensor, row: Tensor, col: Tensor) -> Tensor:
    """The weighted average of :func:`knn_interpolate` over given kNN edges (query ``row``, source ``col``)."""
    with torch.no_grad():
        (pos_x, pos_y), _ = distance_frame(pos_x, pos_y)
        d2 = (pos_x[col] - pos_y[row]).square().sum(-1, keepdim=True)
        w = 1.0 / d2.clamp_min(1e-16)
        w = w / scatter_unchecked(w, row, pos_y.size(0), "sum")[row]  # normalized weights, each <= 1
    return scatter_unchecked(x[col] * w.to(x.dtype), row, pos_y.size(0), "sum")


class FPModule(nn.Module):
    r"""Feature propagation: interpolate coarse features to the finer level and fuse the skip.

        x'_i = h_theta([knn_interpolate(x)_i, x^skip_i])

    Shapes:
        coarse x [N_c, C], fine pos [N_f, 3], skip [N_f, C_s] -> [N_f, C_out]
    """

    def __init__(self, k: int, nn_module: nn.Module) -> None:
        super().__init__()
        check_int("FPModule", "k", k, as_bound=True)
        self.k = int(k)
        self.nn = nn_module

    @checked_forward(check_fp_input)
    def forward(
        self, x: Tensor, pos: Tensor, batch: Tensor, x_skip: Optional[Tensor], pos_skip: Tensor, batch_skip: Tensor
    ) -> Tuple[Tensor, Tensor, Tensor]:
        counts = torch.bincount(batch, minlength=int(batch_skip[-1]) + 1 if batch_skip.numel() else 0)
        with torch.no_grad():
            row, col = knn_unchecked(pos.detach(), pos_skip.detach(), self.k, batch, batch_skip, counts)
        x = _interpolate(x, pos, pos_skip, row, col)
        if x_skip is not None:
            x = torch.cat([x, x_skip], dim=1)
        return self.nn(x), pos_skip, batch_skip


# ---------------------------------------------------------------------------- models
class _PointNet2Base(nn.Module):
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def kernel_l2(self) -> Tensor:
        """No generated kernels: zero (for the training loop's optional kernel regularizer)."""
        return next(self.parameters()).new_zeros(())

    def _dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype


@MODELS.register("pointnet2_classifier")
class PointNet2Classifier(_PointNet2Base):
    r"""PointNet++ SSG classifier (PyG example sizes).

        SA(ratio_1, r_1, [F+3, 64, 64, 128]) -> SA(ratio_2, r_2, [128+3, 128, 128, 256])
        -> GlobalSA([256+3, 256, 512, 1024]) -> MLP([1024, 512, 256, num_classes], dropout)

    (every PointNet MLP: Linear-BatchNorm-ReLU, last layer plain; see :class:`SAModule`.)

    Args:
        in_channels: point features ``F`` (3 when ``x`` is None: the coordinates are used).
        num_classes: number of classes.
        ratios: FPS ratios of the two set-abstraction levels.
        radii: ball-query radii of the two levels (in the units of ``pos``; clouds in the unit ball).
        max_num_neighbors: ball-query cap per centroid.
        dropout: dropout of the classification head.

    Shapes:
        pos [N, 3], x [N, F] or None, batch [N] (or dense [B, N, 3]) -> logits [B, num_classes]
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        ratios: Sequence[float] = (0.5, 0.25),
        radii: Sequence[float] = (0.2, 0.4),
        max_num_neighbors: int = 64,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        for name, v in (("in_channels", in_channels), ("num_classes", num_classes)):
            check_int(where, name, v, as_bound=True)
        check_probability(where, "dropout", dropout)
        check_parameters(
            where, f"in_channels={in_channels}, num_classes={num_classes}", 256 * (num_classes + in_channels)
        )
        if len(ratios) != 2 or len(radii) != 2:
            raise ValueError(
                f"{where}: ratios and radii must have two entries each (two SA levels), "
                f"got {list(ratios)} and {list(radii)}"
            )
        self.in_channels, self.num_classes = in_channels, num_classes
        self.sa1 = SAModule(ratios[0], radii[0], _mlp([in_channels + 3, 64, 64, 128]), max_num_neighbors)
        self.sa2 = SAModule(ratios[1], radii[1], _mlp([128 + 3, 128, 128, 256]), max_num_neighbors)
        self.sa3 = GlobalSAModule(_mlp([256 + 3, 256, 512, 1024]))
        self.head = _mlp([1024, 512, 256, num_classes], dropout=dropout, norm=None)

    def forward(self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None) -> Tensor:
        pos, x, batch, nb, _ = prepare_points(
            type(self).__name__, pos, x, batch, self.in_channels, self._dtype(), self.sa1.max_num_neighbors
        )
        with trusted_inputs():
            out = (x, pos, batch)
            out = self.sa1(*out, nb)
            out = self.sa2(*out, nb)
            h, _, _ = self.sa3(*out, nb)
            return self.head(h)


@MODELS.register("pointnet2_segmenter")
class PointNet2Segmenter(_PointNet2Base):
    r"""PointNet++ SSG segmenter with feature propagation (PyG example sizes).

        SA(0.2, 0.2, [F+3, 64, 64, 128]) -> SA(0.25, 0.4, [128+3, 128, 128, 256]) -> GlobalSA([259, 256, 512, 1024])
        FP(k=1, [1024+256, 256, 256]) -> FP(k=3, [256+128, 256, 128]) -> FP(k=3, [128+F, 128, 128, 128])
        logits_j = MLP([128 + num_categories, 128, 128, num_classes], dropout)([f_j, onehot(category)])

    Shapes:
        pos [N, 3], x [N, F] or None, batch [N], category [B] -> logits [N, num_classes]
        (dense [B, N, 3] inputs give [B, N, num_classes])
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        num_categories: int = 0,
        ratios: Sequence[float] = (0.2, 0.25),
        radii: Sequence[float] = (0.2, 0.4),
        max_num_neighbors: int = 64,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        for name, v in (("in_channels", in_channels), ("num_classes", num_classes)):
            check_int(where, name, v, as_bound=True)
        check_int(where, "num_categories", num_categories, 0, as_bound=True)
        check_probability(where, "dropout", dropout)
        check_parameters(
            where,
            f"in_channels={in_channels}, num_classes={num_classes}, num_categories={num_categories}",
            256 * (num_classes + in_channels + num_categories),
        )
        if len(ratios) != 2 or len(radii) != 2:
            raise ValueError(
                f"{where}: ratios and radii must have two entries each (two SA levels), "
                f"got {list(ratios)} and {list(radii)}"
            )
        self.in_channels, self.num_classes, self.num_categories = in_channels, num_classes, num_categories
        self.sa1 = SAModule(ratios[0], radii[0], _mlp([in_channels + 3, 64, 64, 128]), max_num_neighbors)
        self.sa2 = SAModule(ratios[1], radii[1], _mlp([128 + 3, 128, 128, 256]), max_num_neighbors)
        self.sa3 = GlobalSAModule(_mlp([256 + 3, 256, 512, 1024]))
        self.fp3 = FPModule(1, _mlp([1024 + 256, 256, 256]))
        self.fp2 = FPModule(3, _mlp([256 + 128, 256, 128]))
        self.fp1 = FPModule(3, _mlp([128 + in_channels, 128, 128, 128]))
        self.head = _mlp([128 + num_categories, 128, 128, num_classes], dropout=dropout, norm=None)

    def forward(
        self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None, category: Optional[Tensor] = None
    ) -> Tensor:
        where = type(self).__name__
        pos, x, batch, nb, dense = prepare_points(
            where, pos, x, batch, self.in_channels, self._dtype(), max(self.sa1.max_num_neighbors, self.fp1.k)
        )
        onehot = category_onehot(where, category, self.num_categories, nb, x.dtype, pos.device)
        with trusted_inputs():
            s0 = (x, pos, batch)
            s1 = self.sa1(*s0, nb)
            s2 = self.sa2(*s1, nb)
            s3 = self.sa3(*s2, nb)
            h = self.fp3(*s3, *s2)
            h = self.fp2(*h, *s1)
            h, _, _ = self.fp1(*h, *s0)
            if onehot is not None:
                h = torch.cat([h, onehot[batch]], dim=1)
            logits = self.head(h)
        return logits.view(*dense, -1) if dense is not None else logits
