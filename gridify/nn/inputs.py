"""Input conventions shared by the point-cloud modules (gridification and the point baselines).

Point clouds come PyG-style (``pos [N, 3]``, features ``x [N, F]``, a sorted ``batch [N]``), as a
PyG ``Data``/``Batch`` object with those attributes, or dense (``pos [B, N, 3]``, ``x [B, N, F]``).
Dense clouds are flattened for the sparse path; on the fixed-shape path
(:func:`gridify.nn.dense.fixed_shapes`) they keep their layout, unchecked (its caller validated them).

Also the checks of the other tensors that flow into these modules: :func:`category_onehot`
(object categories), :func:`check_message_passing_inputs` (the inputs of
:class:`gridify.nn.BipartiteConv`) and :func:`check_grid_tensor` (dense grids given to backbones
and grid layers).

Shapes:
    parse_points: any of the above -> ``pos [N, 3]``, ``x [N, F]``, ``batch [N]`` (or None), and
    ``dense_shape = (B, N)`` for dense input. category_onehot: ``[B]`` -> ``[B, num_categories]``.
    check_message_passing_inputs: x_src ``[S, F]``, edge_src/edge_dst ``[E]``, offset ``[E, D]``.
    check_grid_tensor: ``[B, C, R, R, R]``.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import torch
from torch import Tensor, nn

from .._checks import (
    check_alloc,
    check_device,
    check_finite,
    check_float,
    check_index,
    check_int,
    check_tensor,
    fail,
    validating,
)
from ..ops.grid import check_resolution
from .dense import fixed_shape_settings

__all__ = [
    "category_onehot",
    "module_dtype",
    "parse_points",
    "check_message_passing_inputs",
    "check_grid_tensor",
    "check_same_dtype",
    "check_grid_input",
    "check_grid_module_input",
    "check_pointwise_input",
    "check_flexconv_input",
    "check_channel_input",
    "check_coordinates",
]


def module_dtype(module: nn.Module) -> torch.dtype:
    """The floating dtype of a module's first parameter (inputs are cast to it)."""
    return next(module.parameters()).dtype


def parse_points(
    where: str, pos: Any, x: Any, batch: Any, in_channels: Optional[int], dtype: torch.dtype
) -> Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tuple[int, int]]]:
    """Accept PyG-style ``pos [N,3], x [N,F], batch [N]``, a PyG ``Data``/``Batch`` object, or dense
    ``pos [B,N,3], x [B,N,F]``; return ``(pos [N,3], x [N,F], batch or None, dense_shape)``.

    Checks types, shapes, dtypes, devices and the feature count (metadata only: no values are
    read, so nothing synchronises with a GPU); ``x=None`` uses the coordinates. ``batch`` is
    returned as given (validate it with :func:`gridify._checks.check_batch`); dense input gives
    ``dense_shape = (B, N)`` and a generated batch vector. Both tensors are cast to ``dtype``. On the
    fixed-shape path dense clouds come back as they are: ``(pos [B, N, 3], x [B, N, F], None, None)``.
    """
    if fixed_shape_settings() is not None and isinstance(pos, Tensor) and pos.dim() == 3:
        return pos, (pos if x is None else x), None, None
    if not isinstance(pos, Tensor) and isinstance(getattr(pos, "pos", None), Tensor):  # PyG Data / Batch
        if x is not None or batch is not None:
            fail(where, "pass either a PyG Data/Batch object or tensors pos, x, batch, not both")
        data = pos
        pos, x, batch = data.pos, getattr(data, "x", None), getattr(data, "batch", None)
    pos = check_tensor(where, "pos", pos)
    check_float(where, "pos", pos)
    dense_shape = None
    if pos.dim() == 3:
        if batch is not None:
            fail(where, "batch must be None when pos is dense [B, N, 3]")
        if pos.size(-1) != 3:
            fail(where, f"pos must have shape [N, 3] or [B, N, 3], got {tuple(pos.shape)}")
        B, N = pos.shape[:2]
        if B == 0 or N == 0:
            fail(where, f"pos holds no points (shape {tuple(pos.shape)}); every cloud needs at least one point")
        dense_shape = (B, N)
        batch = torch.arange(B, device=pos.device).repeat_interleave(N)
        pos = pos.reshape(B * N, 3)
        if x is not None:
            x = check_tensor(where, "x", x)
            if x.dim() != 3 or tuple(x.shape[:2]) != (B, N):
                fail(where, f"x must have shape [{B}, {N}, F] to match pos, got {tuple(x.shape)}")
            x = x.reshape(B * N, x.size(-1))
    elif pos.dim() == 2:
        if pos.size(-1) != 3:
            fail(where, f"pos must have shape [N, 3] or [B, N, 3], got {tuple(pos.shape)}")
        if pos.size(0) == 0:
            fail(where, "pos holds no points; every cloud needs at least one point")
        if x is not None:
            x = check_tensor(where, "x", x)
            if x.dim() != 2 or x.size(0) != pos.size(0):
                fail(where, f"x must have shape [{pos.size(0)}, F] to match pos, got {tuple(x.shape)}")
    else:
        fail(where, f"pos must have shape [N, 3] or [B, N, 3], got {tuple(pos.shape)}")
    if x is None:
        x = pos
    check_float(where, "x", x)
    if batch is not None and isinstance(batch, Tensor):
        check_device(where, "batch", batch, pos.device)
    if x.device != pos.device:
        fail(where, f"x is on {x.device} but pos is on {pos.device}")
    if in_channels is not None and x.size(-1) != in_channels:
        fail(
            where,
            f"x has {x.size(-1)} features per point but the module was built with "
            f"in_channels={in_channels}" + (" (x=None uses the 3 coordinates)" if x is pos else ""),
        )
    return pos.to(dtype), x.to(dtype), batch, dense_shape


def category_onehot(
    where: str,
    category,
    num_categories: int,
    num_clouds: int,
    dtype: torch.dtype,
    device: Optional[torch.device] = None,
) -> Optional[Tensor]:
    """One-hot ``[B, num_categories]`` of the object category (None when the model has none).

    ``category`` must be given exactly when ``num_categories > 0``: a 1-D integer tensor (not
    ``bool``) with one entry per cloud, each in ``[0, num_categories)``, on ``device``.
    """
    if num_categories:
        if category is None:
            raise ValueError(
                f"{where}: built with num_categories={num_categories}, so category "
                f"([B] object category per cloud) is required"
            )
        if not isinstance(category, Tensor) or category.dim() != 1 or category.numel() != num_clouds:
            raise ValueError(
                f"{where}: category must be a 1-D tensor with one entry per cloud "
                f"({num_clouds}), got {getattr(category, 'shape', type(category))}"
            )
        if category.is_floating_point() or category.dtype == torch.bool or category.is_complex():
            raise ValueError(
                f"{where}: category must hold integers in [0, {num_categories}), got dtype {category.dtype}"
            )
        if device is not None:
            check_device(where, "category", category, device)
        bad = ((category < 0) | (category >= num_categories)).nonzero().flatten() if validating() else None
        if bad is not None and bad.numel():
            raise ValueError(
                f"{where}: category must hold integers in [0, {num_categories}), got "
                f"{int(category[bad[0]])} for cloud {int(bad[0])}"
            )
        return nn.functional.one_hot(category.long(), num_categories).to(dtype)
    if category is not None:
        raise ValueError(f"{where}: got category but the model was built with num_categories=0")
    return None


def check_message_passing_inputs(
    conv: nn.Module, x_src: Tensor, edge_src: Tensor, edge_dst: Tensor, offset: Tensor, num_dst: int
) -> None:
    """Validate the inputs of :class:`gridify.nn.BipartiteConv` (called at its outermost entry).

    ``x_src [S, in_channels]`` and ``offset [E, D]`` finite, of the module's dtype and device;
    ``edge_src``/``edge_dst`` ``[E]`` integers in ``[0, S)`` / ``[0, num_dst)``; ``num_dst`` a
    non-negative integer whose ``[num_dst, H]`` aggregation fits the allocation limit.
    """
    where = type(conv).__name__
    ref = next(conv.parameters())
    x_src = check_tensor(where, "x_src", x_src)
    if x_src.dim() != 2 or x_src.size(1) != conv.in_channels:
        fail(where, f"x_src must have shape [S, {conv.in_channels}], got {tuple(x_src.shape)}")
    offset = check_tensor(where, "offset", offset)
    dim = conv.phi_pos.in_features
    if offset.dim() != 2 or offset.size(1) != dim:
        fail(where, f"offset must have shape [E, {dim}], got {tuple(offset.shape)}")
    for name, t in (("x_src", x_src), ("offset", offset)):
        check_float(where, name, t)
        check_same_dtype(where, name, t, ref)
    num_dst = check_int(where, "num_dst", num_dst, 0)
    edges = offset.size(0)
    check_alloc(
        where,
        f"num_dst={num_dst} with {edges} edges ([num_dst, H] aggregates and [E, H] messages)",
        (num_dst + edges) * conv.hidden_channels * ref.element_size() * 2,
        ref.device,
    )
    check_index(where, "edge_src", edge_src, x_src.size(0), device=ref.device, length=edges, other="x_src")
    check_index(where, "edge_dst", edge_dst, num_dst, device=ref.device, length=edges, other="x_src")
    check_finite(where, "x_src", x_src, dims=("row",))
    check_finite(where, "offset", offset, dims=("edge",))


def check_grid_input(where: str, x: Tensor, channels: int, min_resolution: int = 1, cubic: bool = True) -> int:
    """Validate a dense cubic grid ``[B, C, R, R, R]`` and return ``R`` (with ``cubic=False`` any
    ``[B, C, Rx, Ry, Rz]``, each axis at least ``min_resolution``; returns ``Rx``).

    Raises:
        ValueError: naming the problem (not a tensor, wrong rank, wrong channel count,
            non-cubic grid, too small a grid, non-floating dtype).
    """
    dims = "R, R, R" if cubic else "Rx, Ry, Rz"
    if not isinstance(x, Tensor):
        raise ValueError(f"{where}: expected a tensor of shape [B, C, {dims}], got {type(x).__name__}")
    if x.dim() != 5:
        raise ValueError(
            f"{where}: expected a 5-dim input [B, C, {dims}], got a {x.dim()}-dim tensor of shape {tuple(x.shape)}"
        )
    if x.shape[1] != channels:
        raise ValueError(
            f"{where}: expected {channels} input channels (dim 1 of [B, C, {dims}]), got "
            f"{x.shape[1]} (input shape {tuple(x.shape)})"
        )
    r = x.shape[2]
    if cubic and (x.shape[3] != r or x.shape[4] != r):
        raise ValueError(f"{where}: expected a cubic grid [B, C, R, R, R], got spatial shape {tuple(x.shape[2:])}")
    if min(x.shape[2:]) < min_resolution:
        what = "R" if cubic else "every axis"
        raise ValueError(
            f"{where}: grid resolution {what} must be at least {min_resolution}, got "
            f"{'R=' + str(r) if cubic else tuple(x.shape[2:])}"
        )
    if not x.is_floating_point():
        raise ValueError(f"{where}: expected a floating-point input, got dtype {x.dtype}")
    return r


def check_grid_tensor(
    where: str,
    name: str,
    x: Tensor,
    channels: int,
    ref: Optional[Tensor] = None,
    *,
    cubic: bool = True,
    half_ok: bool = False,
) -> int:
    """A dense grid ``[B, channels, R, R, R]`` (any ``[B, channels, R1, R2, R3]`` without ``cubic``)
    of a supported floating dtype, on ``ref``'s device and of its dtype (float16/bfloat16 also
    accepted for a float32/float64 ``ref`` with ``half_ok``: such layers cast the input up),
    finite when :func:`gridify._checks.validating`; returns ``R`` (the first spatial size)."""
    if cubic:
        check_grid_input(where, x, channels)
    else:
        x = check_tensor(where, name, x)
        if x.dim() != 5 or x.size(1) != channels:
            fail(where, f"{name} must be a grid [B, {channels}, R1, R2, R3], got {tuple(x.shape)}")
    check_float(where, name, x)
    if ref is not None:
        check_same_dtype(where, name, x, ref, half_ok)
    if validating():
        check_finite(where, name, x, dims=("cloud", "channel", "x", "y", "z"))
    return x.size(2)


def check_same_dtype(where: str, name: str, x: Tensor, ref: Tensor, half_ok: bool = False) -> None:
    """``x`` on ``ref``'s device with ``ref``'s dtype (float16/bfloat16 for float32/float64 with ``half_ok``)."""
    check_device(where, name, x, ref.device, "the module's parameters")
    low = x.dtype in (torch.float16, torch.bfloat16) and ref.dtype in (torch.float32, torch.float64)
    if x.dtype != ref.dtype and not (half_ok and low):
        fail(
            where,
            f"{name} has dtype {x.dtype}, which does not match the layer's dtype {ref.dtype} (its "
            f"parameters); convert the module (module.to(dtype)) or the input",
        )


def _channels(module: nn.Module) -> int:
    for attr in ("in_channels", "channels"):
        value = getattr(module, attr, None)
        if isinstance(value, int):
            return value
    raise AttributeError(f"{type(module).__name__} has no in_channels/channels attribute")  # pragma: no cover


def check_grid_module_input(module: nn.Module, x: Tensor) -> None:
    """:func:`checked_forward <gridify._checks.checked_forward>` check of a grid layer or backbone:
    ``x`` a cubic ``[B, C_in, R, R, R]`` grid (any ``[B, C_in, Rx, Ry, Rz]`` when the module's
    ``cubic`` attribute is False) of the module's dtype and device, finite."""
    where = type(module).__name__
    if getattr(module, "cubic", True):
        check_grid_tensor(where, "x", x, _channels(module), next(module.parameters(), None))
    else:
        check_grid_input(where, x, _channels(module), cubic=False)
        check_grid_tensor(where, "x", x, _channels(module), next(module.parameters(), None), cubic=False)


def check_pointwise_input(module: nn.Module, x: Tensor) -> None:
    """As :func:`check_grid_module_input` for a 1x1x1 layer: any ``[B, C_in, R1, R2, R3]``."""
    check_grid_tensor(type(module).__name__, "x", x, _channels(module), next(module.parameters(), None), cubic=False)


def check_flexconv_input(module: nn.Module, x: Tensor) -> None:
    """As :func:`check_grid_module_input`, with ``R >= 2`` (every axis) and float16/bfloat16 input
    accepted (cast up)."""
    where = type(module).__name__
    cubic = getattr(module, "cubic", True)
    if not cubic:
        check_grid_input(where, x, _channels(module), cubic=False)
    r = check_grid_tensor(where, "x", x, _channels(module), next(module.parameters(), None), cubic=cubic, half_ok=True)
    if cubic and r < 2:
        fail(where, f"grid resolution R must be at least 2, got R={r}")
    if not cubic and min(x.shape[2:]) < 2:
        fail(where, f"grid resolution must be at least 2 on every axis, got {tuple(x.shape[2:])}")


def check_channel_input(module: nn.Module, x: Tensor) -> None:
    """``x [B, C, ...]`` (C the normalized channels) of the module's dtype and device, finite."""
    where = type(module).__name__
    channels = module.norm.normalized_shape[0]
    x = check_tensor(where, "x", x)
    if x.dim() < 2 or x.size(1) != channels:
        fail(where, f"x must have shape [B, {channels}, ...] (channels on dim 1), got {tuple(x.shape)}")
    check_float(where, "x", x)
    check_same_dtype(where, "x", x, next(module.parameters()))
    check_finite(where, "x", x, dims=("cloud", "channel", "x", "y", "z"))


def check_kernel_resolution(module: nn.Module, resolution: Optional[int] = None) -> None:
    """``resolution`` of a sampled continuous kernel (a :class:`gridify.nn.SepFlexConv3d`): None
    or an integer >= 2 whose lattice of ``K^3`` taps (``K <= 2R - 1``) x ``C`` channels fits the
    allocation limit."""
    where = f"{type(module).__name__}.kernel"
    if isinstance(resolution, (tuple, list)):
        resolution = check_resolution(where, resolution)
    else:
        resolution = check_int(where, "resolution", resolution, 2, allow_none=True)
    p, _, _ = module.kernel_geometry(resolution)
    sizes = [2 * q + 1 for q in p] if isinstance(p, tuple) else [2 * p + 1] * 3
    taps = math.prod(sizes)
    what = f"resolution={resolution}" if resolution is not None else f"kernel_size={module.kernel_size}"
    lattice = f"{sizes[0]}^3" if len(set(sizes)) == 1 else " x ".join(str(k) for k in sizes)
    check_alloc(
        where, f"{what} (a kernel of {lattice} taps x {_channels(module)} channels)", taps * (_channels(module) + 4) * 8
    )


def check_coordinates(module: nn.Module, *args: Any, **kwargs: Any) -> None:
    """Input of a field (``offset``) or kernel network (``coords``), given by position or name:
    ``[..., D]`` (``D`` = ``module.in_features`` or ``module.dim``) of the module's dtype and
    device, finite."""
    where = type(module).__name__
    dim = getattr(module, "in_features", None) or module.dim
    name = "offset" if hasattr(module, "in_features") else "coords"
    coords = args[0] if args else kwargs.get(name)
    coords = check_tensor(where, name, coords)
    if coords.dim() < 1 or coords.size(-1) != dim:
        fail(where, f"{name} must have shape [..., {dim}], got {tuple(coords.shape)}")
    check_float(where, name, coords)
    check_same_dtype(where, name, coords, next(module.parameters()))
    check_finite(where, name, coords.reshape(-1, dim), dims=("row",))
