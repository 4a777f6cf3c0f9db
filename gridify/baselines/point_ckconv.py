"""Native point-cloud CCNN: separable continuous-kernel convolutions directly on the points.

The baseline that gridification is measured against (CCNN, Knigge et al. 2023, point-cloud
experiments; DESIGN.md section 2): every layer evaluates its kernel network at the relative
position of each of the ``K`` nearest neighbours of every point, so a layer costs O(N K) kernel
network evaluations. Here the kernel is computed in chunks of query points, so inference
memory is O(chunk K (C + H)) on top of the O(N C) features and the O(N K) neighbour table, never
O(N^2); in training each chunk is recomputed in the backward pass (activation checkpointing,
``checkpoint=True``) for the same bound.

Unlike the public CCNN code, whose residual block returns ``2 F(x)``, blocks here compute
``x + F(x)``.

A model validates its inputs once and runs its blocks trusted; a layer or block called directly
validates its own (``x``, ``pos`` finite, ``nbr`` indices in range). The first forward of a
:class:`PointSepCKConv` (the CCNN rescaling) is all or nothing.

Shapes:
    classifier: pos [N, 3], x [N, F], batch [N] -> [B, num_classes]; segmenter: -> [N, num_classes]
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint as _checkpoint

from .._checks import (
    check_alloc,
    check_batch,
    check_finite,
    check_index,
    check_int,
    check_number,
    check_parameters,
    check_points,
    check_probability,
    check_tensor,
    checked_forward,
    fail,
    trusted_inputs,
    validating,
)
from ..ops.knn import check_knn_size, knn_unchecked
from ..ops.scatter import scatter_unchecked
from ..registry import KERNELS, MODELS
from ..nn.inputs import category_onehot, check_same_dtype
from ..nn.state import all_or_nothing
from .pointnet2 import prepare_points

__all__ = [
    "PointSepCKConv",
    "PointCKConvBlock",
    "PointCKConvClassifier",
    "PointCKConvSegmenter",
    "PointCKConvNet",
    "knn_neighbourhoods",
    "knn_neighbourhoods_unchecked",
]

#: Elements of the per-chunk ``[chunk, K, max(C, H)]`` kernel tensors held at once.
CHUNK_ELEMENTS = 1 << 22


def _check_ints(where: str, minimum: int = 1, **values: int) -> None:
    for name, v in values.items():
        check_int(where, name, v, minimum, as_bound=True)


def knn_neighbourhoods(pos: Tensor, batch: Tensor, k: int) -> Tuple[Tensor, Optional[Tensor]]:
    """Dense kNN table of every point within its own cloud (itself included).

    Returns ``(nbr [N, k], valid [N, k] or None)``: ``nbr[i]`` are the indices of the ``k``
    nearest points of ``i``'s cloud, nearest first. A cloud with fewer than ``k`` points pads
    its rows with the query itself and marks the padding in ``valid`` (``None``: no padding).
    Validates ``pos`` (finite ``[N, 3]``), ``batch``, ``k`` and the search's size, then runs
    :func:`knn_neighbourhoods_unchecked`.
    """
    where = "knn_neighbourhoods"
    pos = check_points(where, "pos", pos)
    k = check_int(where, "k", k)
    batch, _, _ = check_batch(where, "batch", batch, pos.size(0), device=pos.device)
    if validating():
        check_finite(where, "pos", pos, batch)
    check_knn_size(where, pos.size(0), pos.size(0), k, pos.device)
    return knn_neighbourhoods_unchecked(pos, batch, k)


def knn_neighbourhoods_unchecked(pos: Tensor, batch: Tensor, k: int) -> Tuple[Tensor, Optional[Tensor]]:
    """:func:`knn_neighbourhoods` of a model's validated inputs (finite ``pos [N, 3]``, sorted int64
    ``batch`` with no empty cloud, ``k >= 1``, the search's size checked)."""
    n = pos.size(0)
    per_cloud = torch.bincount(batch)
    row, col = knn_unchecked(pos.detach(), pos.detach(), k, batch, batch, per_cloud)
    counts = torch.bincount(row, minlength=n)
    if row.numel() == n * k:
        return col.view(n, k), None
    start = torch.cumsum(counts, 0) - counts
    slot = torch.arange(row.numel(), device=pos.device) - start[row]
    nbr = torch.arange(n, device=pos.device).unsqueeze(1).repeat(1, k)
    valid = torch.zeros(n, k, dtype=torch.bool, device=pos.device)
    nbr[row, slot] = col
    valid[row, slot] = True
    return nbr, valid


def check_point_conv_input(
    module: nn.Module, x: Tensor, pos: Tensor, nbr: Tensor, valid: Optional[Tensor] = None, *args: object
) -> None:
    """Inputs of :class:`PointSepCKConv` / :class:`PointCKConvBlock` called directly: ``x [N, C]`` and
    ``pos [N, 3]`` finite, of the module's dtype; ``nbr [N, K]`` int64 in ``[0, N)``; ``valid [N, K]`` bool."""
    where = type(module).__name__
    pos = check_points(where, "pos", pos)
    x = check_tensor(where, "x", x)
    ref = next(module.parameters())
    for name, t in (("x", x), ("pos", pos)):
        check_same_dtype(where, name, t, ref)
    nbr = check_tensor(where, "nbr", nbr)
    if nbr.dim() != 2 or nbr.size(0) != pos.size(0):
        fail(where, f"nbr must have shape [{pos.size(0)}, K], got {tuple(nbr.shape)}")
    check_index(where, "nbr", nbr.reshape(-1), pos.size(0), device=pos.device)
    if valid is not None and (not isinstance(valid, Tensor) or valid.dtype != torch.bool or valid.shape != nbr.shape):
        fail(where, f"valid must be None or a bool tensor of shape {tuple(nbr.shape)}")
    check_finite(where, "pos", pos)
    check_finite(where, "x", x)


class PointSepCKConv(nn.Module):
    r"""Separable point continuous convolution over kNN neighbourhoods (point CCNN layer).

        u_ij   = (p_j - p_i) / rho                                  (relative position, kernel units)
        k_c(u) = phi_K(u)_c * m(u),    m(u) = exp(-1/2 sum_a (u_a / sigma_a)^2)    (Gaussian mask)
        z_ic   = sum_{j in kNN_K(i)} k_c(u_ij) x_jc                                 (depthwise)
        y_i    = W z_i + b                                                          (pointwise)

    ``phi_K`` is a kernel network from :data:`gridify.registry.KERNELS` (MAGNet by default),
    ``rho`` the kernel radius (fixed, or learnable with ``learnable_radius=True``), ``sigma`` the
    learnable mask widths (FlexConv).

    **CCNN initialisation** (``kernel_init="ccnn"``, the point analogue of
    :class:`gridify.nn.flexconv.SepFlexConv3d`'s): on the first forward pass the kernel network's
    last layer is rescaled per channel so that ``mean_i sum_j k_c(u_ij)^2 = gain^2`` on that
    input's neighbourhoods; with independent unit-variance inputs ``z`` then has variance
    ``gain^2`` whatever ``K`` and the neighbourhood geometry. The pointwise layer is drawn with
    variance ``1 / C_in``. The flag ``initialized`` is a persistent buffer, so loaded models are
    not re-initialised.

    Args:
        in_channels, out_channels: ``C_in`` (also the number of depthwise kernels) and ``C_out``.
        kernel_net, kernel_hidden, kernel_layers, omega0: of the kernel network.
        radius: kernel radius ``rho`` in the units of ``pos``.
        learnable_radius: learn ``log rho``.
        mask, mask_init: use the Gaussian mask, initial ``sigma`` (kernel units).
        bias: bias of the pointwise layer.
        kernel_init: ``"ccnn"`` or ``"none"``; gain: target gain of the CCNN init.
        chunk_size: query points per chunk (``None``: from :data:`CHUNK_ELEMENTS`).
        checkpoint: recompute each chunk in the backward pass (memory O(chunk K C) in training).

    Shapes:
        x [N, C_in], pos [N, 3], nbr [N, K], valid [N, K] or None -> [N, C_out]
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_net: str = "magnet",
        kernel_hidden: int = 8,
        kernel_layers: int = 3,
        omega0: float = 3.0,
        radius: float = 1.0,
        learnable_radius: bool = False,
        mask: bool = True,
        mask_init: float = 0.5,
        bias: bool = True,
        kernel_init: str = "ccnn",
        gain: float = 1.0,
        chunk_size: Optional[int] = None,
        checkpoint: bool = True,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        _check_ints(where, in_channels=in_channels, out_channels=out_channels)
        for name, v in (("radius", radius), ("mask_init", mask_init), ("gain", gain), ("omega0", omega0)):
            check_number(where, name, v)
        if kernel_init not in ("ccnn", "none"):
            raise ValueError(f"{where}: kernel_init must be 'ccnn' or 'none', got {kernel_init!r}")
        if chunk_size is not None:
            _check_ints(where, chunk_size=chunk_size)
        if not isinstance(kernel_net, str):
            raise ValueError(f"{where}: kernel_net must be a registry name such as 'magnet', got {kernel_net!r}")
        check_parameters(where, f"in_channels={in_channels}, out_channels={out_channels}", in_channels * out_channels)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_init, self.gain = kernel_init, float(gain)
        self.mask_init, self.radius_init = float(mask_init), float(radius)
        self.chunk_size, self.checkpoint = chunk_size, bool(checkpoint)
        self.kernel_net = KERNELS.build(
            kernel_net,
            out_channels=in_channels,
            hidden_channels=kernel_hidden,
            num_layers=kernel_layers,
            omega0=float(omega0),
            dim=3,
        )
        if learnable_radius:
            self.log_radius = nn.Parameter(torch.empty(()))
        else:
            self.register_buffer("log_radius", torch.empty(()))
        self.mask_log_sigma = nn.Parameter(torch.empty(3)) if mask else None
        self.pointwise = nn.Linear(in_channels, out_channels, bias=bias)
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.kernel_net.reset_parameters()
        with torch.no_grad():
            self.log_radius.fill_(math.log(self.radius_init))
            if self.mask_log_sigma is not None:
                self.mask_log_sigma.fill_(math.log(self.mask_init))
            self.initialized.fill_(False)
        nn.init.normal_(self.pointwise.weight, 0.0, 1.0 / math.sqrt(self.in_channels))
        if self.pointwise.bias is not None:
            nn.init.zeros_(self.pointwise.bias)

    def kernel_values(self, u: Tensor) -> Tensor:
        """Masked kernel ``k(u) = phi_K(u) * m(u)`` at kernel-unit offsets ``[..., 3]`` -> ``[..., C_in]``."""
        values = self.kernel_net(u)
        if self.mask_log_sigma is not None:
            inv_sigma = torch.exp(-self.mask_log_sigma).to(u.dtype)
            values = values * torch.exp(-0.5 * (u * inv_sigma).square().sum(-1, keepdim=True))
        return values

    def _chunk(self, x: Tensor, pos: Tensor, nbr: Tensor, valid: Optional[Tensor], start: int, end: int) -> Tensor:
        idx = nbr[start:end]  # [c, K]
        u = (pos[idx] - pos[start:end].unsqueeze(1)) * torch.exp(-self.log_radius).to(pos.dtype)
        with trusted_inputs():  # also when recomputed in the backward pass (checkpointing)
            k = self.kernel_values(u)  # [c, K, C]
        if valid is not None:
            k = k * valid[start:end].unsqueeze(-1).to(k.dtype)
        return (k * x[idx]).sum(1)

    def _chunk_size(self, k: int) -> int:
        if self.chunk_size is not None:
            return self.chunk_size
        width = max(self.in_channels, self.kernel_net.hidden_channels)
        return max(1, CHUNK_ELEMENTS // (k * width))

    @torch.no_grad()
    def _ccnn_rescale(self, pos: Tensor, nbr: Tensor, valid: Optional[Tensor]) -> None:
        n = pos.size(0)
        sel = torch.arange(n, device=pos.device)
        if n > 4096:  # an evenly spread subsample of the queries is enough for the statistic
            sel = torch.linspace(0, n - 1, 4096, device=pos.device).long()
        idx = nbr[sel]
        u = (pos[idx] - pos[sel].unsqueeze(1)) * torch.exp(-self.log_radius).to(pos.dtype)
        k = self.kernel_values(u).double()
        if valid is not None:
            k = k * valid[sel].unsqueeze(-1).double()
        energy = k.square().sum(1).mean(0)  # [C]
        self.kernel_net.rescale_output(self.gain / energy.clamp_min(1e-30).sqrt())
        self.initialized.fill_(True)

    @checked_forward(check_point_conv_input)
    def forward(self, x: Tensor, pos: Tensor, nbr: Tensor, valid: Optional[Tensor] = None) -> Tensor:
        where = type(self).__name__
        if x.dim() != 2 or x.size(1) != self.in_channels:
            raise ValueError(f"{where}: x must have shape [N, {self.in_channels}], got {tuple(x.shape)}")
        if pos.dim() != 2 or pos.size(1) != 3 or pos.size(0) != x.size(0):
            raise ValueError(f"{where}: pos must have shape [{x.size(0)}, 3], got {tuple(pos.shape)}")
        if nbr.dim() != 2 or nbr.size(0) != x.size(0) or nbr.dtype != torch.long:
            raise ValueError(
                f"{where}: nbr must be an int64 tensor of shape [{x.size(0)}, K], got {tuple(nbr.shape)} {nbr.dtype}"
            )
        if self.kernel_init == "ccnn" and not bool(self.initialized):  # the first forward: all or nothing
            with all_or_nothing(self, parameters=True):
                self._ccnn_rescale(pos, nbr, valid)
                return self.forward(x, pos, nbr, valid)
        n, k = nbr.shape
        step = self._chunk_size(k)
        use_ckpt = self.checkpoint and torch.is_grad_enabled() and n > step
        parts = []
        for start in range(0, n, step):
            end = min(n, start + step)
            if use_ckpt:
                parts.append(_checkpoint(self._chunk, x, pos, nbr, valid, start, end, use_reentrant=False))
            else:
                parts.append(self._chunk(x, pos, nbr, valid, start, end))
        z = parts[0] if len(parts) == 1 else torch.cat(parts, 0)
        return self.pointwise(z)

    def kernel_l2(self, resolution: int = 9) -> Tensor:
        """Mean squared generated kernel on a ``resolution^3`` lattice of ``[-1, 1]^3`` (differentiable).

        Point neighbourhoods are data dependent, so the CCNN regulariser of the *generated*
        kernel is evaluated on a fixed lattice of the kernel domain.
        """
        where = f"{type(self).__name__}.kernel_l2"
        check_int(where, "resolution", resolution, 2)
        check_alloc(
            where, f"resolution={resolution} (a lattice of R^3 points)", resolution**3 * 8 * (self.in_channels + 3)
        )
        ref = self.pointwise.weight
        axis = torch.linspace(-1.0, 1.0, resolution, device=ref.device, dtype=ref.dtype)
        u = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
        return self.kernel_values(u).square().mean()

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, radius={self.radius_init:g}, "
            f"mask={self.mask_log_sigma is not None}, kernel_init={self.kernel_init!r}"
        )


class PointCKConvBlock(nn.Module):
    r"""Residual point CCNN block.

        F(x) = W_out Dropout(GELU(PointSepCKConv(BN(x))))
        y    = x + F(x)

    Zeroing ``W_out`` (the block's last layer, ``self.out``) makes the block the identity.

    Shapes:
        x [N, C], pos [N, 3], nbr [N, K], valid [N, K] or None -> [N, C]
    """

    def __init__(self, channels: int, dropout: float = 0.0, **conv_kwargs) -> None:
        super().__init__()
        check_probability(type(self).__name__, "dropout", dropout)
        self.norm = nn.BatchNorm1d(channels)
        self.conv = PointSepCKConv(channels, channels, **conv_kwargs)
        self.act = nn.GELU()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(channels, channels)

    def residual(self, x: Tensor, pos: Tensor, nbr: Tensor, valid: Optional[Tensor] = None) -> Tensor:
        """``F(x)``."""
        return self.out(self.dropout(self.act(self.conv(self.norm(x), pos, nbr, valid))))

    @checked_forward(check_point_conv_input)
    def forward(self, x: Tensor, pos: Tensor, nbr: Tensor, valid: Optional[Tensor] = None) -> Tensor:
        return x + self.residual(x, pos, nbr, valid)


class _PointCKConvBase(nn.Module):
    def _build_trunk(
        self,
        in_channels: int,
        hidden_channels: int,
        depth: int,
        k: int,
        dropout: float,
        kernel_net: str,
        kernel_hidden: int,
        kernel_layers: int,
        omega0: float,
        radius: float,
        learnable_radius: bool,
        mask: bool,
        mask_init: float,
        chunk_size: Optional[int],
        checkpoint: bool,
    ) -> None:
        where = type(self).__name__
        _check_ints(where, in_channels=in_channels, hidden_channels=hidden_channels, depth=depth, k=k)
        check_probability(where, "dropout", dropout)
        check_parameters(
            where,
            f"hidden_channels={hidden_channels}, depth={depth}",
            hidden_channels * (hidden_channels * (2 * depth + 2) + in_channels),
        )
        self.in_channels, self.hidden_channels, self.depth, self.k = in_channels, hidden_channels, depth, k
        self.lift = nn.Linear(in_channels, hidden_channels)
        self.blocks = nn.ModuleList(
            PointCKConvBlock(
                hidden_channels,
                dropout,
                kernel_net=kernel_net,
                kernel_hidden=kernel_hidden,
                kernel_layers=kernel_layers,
                omega0=omega0,
                radius=radius,
                learnable_radius=learnable_radius,
                mask=mask,
                mask_init=mask_init,
                chunk_size=chunk_size,
                checkpoint=checkpoint,
            )
            for _ in range(depth)
        )
        self.out_norm = nn.BatchNorm1d(hidden_channels)

    def _trunk(self, pos: Tensor, x: Tensor, batch: Tensor) -> Tensor:
        nbr, valid = knn_neighbourhoods_unchecked(pos, batch, self.k)
        h = self.lift(x)
        for block in self.blocks:
            h = block(h, pos, nbr, valid)
        return self.out_norm(h)

    def _dtype(self) -> torch.dtype:
        return self.lift.weight.dtype

    def kernel_l2(self) -> Tensor:
        """Sum over layers of the mean squared generated kernel (see :meth:`PointSepCKConv.kernel_l2`)."""
        return torch.stack([b.conv.kernel_l2() for b in self.blocks]).sum()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


@MODELS.register("point_ckconv_classifier")
class PointCKConvClassifier(_PointCKConvBase):
    r"""Native point CCNN classifier.

        h^0 = W_lift x,   h^l = h^{l-1} + F_l(h^{l-1})   (:class:`PointCKConvBlock`, kNN_K neighbourhoods)
        logits_b = W_head Dropout(mean_{i in b} BN(h^L)_i)

    Defaults are the paper's tiny CCNN_{4,32} (4 blocks of 32 channels, MAGNet kernel nets of
    width 8, ~14k parameters; its best point-cloud models have 6k-48k) with ``K = 64`` neighbours.

    Args:
        in_channels: point features ``F`` (3 when ``x`` is None: the coordinates are used).
        num_classes: number of classes.
        hidden_channels, depth: width ``C`` and number of residual blocks.
        k: neighbours per point ``K``.
        dropout: dropout in the blocks and before the head.
        kernel_net, kernel_hidden, kernel_layers, omega0, radius, learnable_radius, mask, mask_init,
        chunk_size, checkpoint: of every :class:`PointSepCKConv`.

    Shapes:
        pos [N, 3], x [N, F] or None, batch [N] (or dense [B, N, 3]) -> logits [B, num_classes]
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        hidden_channels: int = 32,
        depth: int = 4,
        k: int = 64,
        dropout: float = 0.1,
        kernel_net: str = "magnet",
        kernel_hidden: int = 8,
        kernel_layers: int = 3,
        omega0: float = 3.0,
        radius: float = 1.0,
        learnable_radius: bool = False,
        mask: bool = True,
        mask_init: float = 0.5,
        chunk_size: Optional[int] = None,
        checkpoint: bool = True,
    ) -> None:
        super().__init__()
        _check_ints(type(self).__name__, num_classes=num_classes)
        self._build_trunk(
            in_channels,
            hidden_channels,
            depth,
            k,
            dropout,
            kernel_net,
            kernel_hidden,
            kernel_layers,
            omega0,
            radius,
            learnable_radius,
            mask,
            mask_init,
            chunk_size,
            checkpoint,
        )
        self.num_classes = num_classes
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden_channels, num_classes))

    def forward(self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None) -> Tensor:
        pos, x, batch, nb, _ = prepare_points(
            type(self).__name__, pos, x, batch, self.in_channels, self._dtype(), self.k
        )
        with trusted_inputs():
            h = self._trunk(pos, x, batch)
            return self.head(scatter_unchecked(h, batch, nb, "mean"))


@MODELS.register("point_ckconv_segmenter")
class PointCKConvSegmenter(_PointCKConvBase):
    r"""Native point CCNN segmenter.

        h = trunk as in :class:`PointCKConvClassifier`
        logits_i = W_2 Dropout(GELU(W_1 [BN(h^L)_i, onehot(category_b(i))]))

    Shapes:
        pos [N, 3], x [N, F] or None, batch [N], category [B] -> logits [N, num_classes]
        (dense [B, N, 3] inputs give [B, N, num_classes])
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        num_categories: int = 0,
        hidden_channels: int = 32,
        depth: int = 4,
        k: int = 64,
        dropout: float = 0.1,
        kernel_net: str = "magnet",
        kernel_hidden: int = 8,
        kernel_layers: int = 3,
        omega0: float = 3.0,
        radius: float = 1.0,
        learnable_radius: bool = False,
        mask: bool = True,
        mask_init: float = 0.5,
        chunk_size: Optional[int] = None,
        checkpoint: bool = True,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        _check_ints(where, num_classes=num_classes)
        _check_ints(where, 0, num_categories=num_categories)
        self._build_trunk(
            in_channels,
            hidden_channels,
            depth,
            k,
            dropout,
            kernel_net,
            kernel_hidden,
            kernel_layers,
            omega0,
            radius,
            learnable_radius,
            mask,
            mask_init,
            chunk_size,
            checkpoint,
        )
        self.num_classes, self.num_categories = num_classes, num_categories
        self.head = nn.Sequential(
            nn.Linear(hidden_channels + num_categories, hidden_channels),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_channels, num_classes),
        )

    def forward(
        self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None, category: Optional[Tensor] = None
    ) -> Tensor:
        where = type(self).__name__
        pos, x, batch, nb, dense = prepare_points(where, pos, x, batch, self.in_channels, self._dtype(), self.k)
        onehot = category_onehot(where, category, self.num_categories, nb, x.dtype, pos.device)
        with trusted_inputs():
            h = self._trunk(pos, x, batch)
            if onehot is not None:
                h = torch.cat([h, onehot[batch]], 1)
            logits = self.head(h)
        return logits.view(*dense, -1) if dense is not None else logits


#: The native point CCNN classifier under the name used in the benchmark and the docs.
PointCKConvNet = PointCKConvClassifier
