r"""How the exporter traces a model: the model's state while traced, and the traced forms of two operations.

* :func:`tracing_mode` (and :func:`eval_mode`): eval mode, gradient-free parameters under autograd
  (the layers' traceable, not in-place, paths), integer buffers as constants, trusted inputs.
* :class:`DepthwiseConv3dAs2d`: while active, every same-size depthwise ``F.conv3d`` runs as
  :func:`depthwise_conv3d_as_2d`, a sum of ``K`` depthwise 2D convolutions

      y[b, c, i] = sum_{d < K} conv2d(x_pad[b, c, i + d], w[c, 0, d])        (zero padding, P = K // 2)

  which onnxruntime runs ~8x faster than its grouped 3D convolution. It lives here, not beside
  :mod:`gridify.nn.depthwise`: no layer calls it, it only replaces ``F.conv3d`` while the exporter
  traces (the layers compute the same values with ``F.conv3d`` / the direct kernels).
* The models themselves are traced through their own ``forward`` on the layers' fixed-shape path, which
  the wrappers (:mod:`gridify.export.wrappers`) turn on with :func:`gridify.nn.dense.fixed_shapes` (the
  switch in the layers, as this module's are switches around them).
* :func:`scatter_reduce_rows`: the ONNX translation of ``aten.scatter_reduce.two`` (``ScatterND`` on
  whole rows, the max aggregation of :func:`gridify.ops.scatter_fixed`).

Shapes:
    depthwise_conv3d_as_2d: x ``[B, C, D, H, W]``, weight ``[C, 1, K, K, K]``, bias ``[C]`` -> ``[B, C, D, H, W]``
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from .._checks import check_float, check_tensor, fail, trusted_inputs

__all__ = ["DepthwiseConv3dAs2d", "depthwise_conv3d_as_2d", "eval_mode", "scatter_reduce_rows", "tracing_mode"]


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode for the duration; afterwards every module gets its own mode back
    through ``train(mode)`` (parents first), which also drops caches filled meanwhile."""
    if not isinstance(model, nn.Module):
        fail("eval_mode", f"model must be a torch.nn.Module, got {type(model).__name__}")
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.train(mode)


@contextlib.contextmanager
def tracing_mode(model: nn.Module) -> Iterator[None]:
    """Put ``model`` in the state the exporter traces, and restore it afterwards.

    * eval mode (:func:`eval_mode`: dropout off, BatchNorm running statistics);
    * parameters with ``requires_grad=False`` under autograd: layers take their gradient-free
      inference paths (direct depthwise convolutions, no FFT) but not the in-place ones, which
      an exporter cannot trace;
    * every 0-dim integer buffer (a layer's recorded resolution, BatchNorm's step counter) becomes
      a plain constant for the duration, since layers read them with ``int()`` to choose their
      geometry and a traced buffer has no value;
    * nested modules trust their inputs (:func:`gridify._checks.trusted_inputs`): a value check is
      a data-dependent branch, which a graph cannot hold.
    """
    if not isinstance(model, nn.Module):
        fail("tracing_mode", f"model must be a torch.nn.Module, got {type(model).__name__}")
    flags = [(p, p.requires_grad) for p in model.parameters()]
    saved = []
    for module in model.modules():
        scalars = [
            n for n, b in module._buffers.items() if b is not None and b.dim() == 0 and not b.is_floating_point()
        ]
        if scalars:
            saved.append((module, dict(module._buffers)))
            for name in scalars:
                module.__dict__[name] = module._buffers.pop(name).clone()
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        with eval_mode(model), torch.enable_grad(), trusted_inputs():  # no data-dependent checks in a graph
            yield
    finally:
        for module, buffers in saved:  # the same buffers, in their original order
            for name in buffers:
                module.__dict__.pop(name, None)
            module._buffers.clear()
            module._buffers.update(buffers)
        for p, flag in flags:
            p.requires_grad_(flag)


def depthwise_conv3d_as_2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    r"""A same-size depthwise 3D cross-correlation as a sum of ``K`` depthwise 2D ones.

        y[b, c, i] = sum_{d < K} conv2d(x_pad[b, c, i + d], w[c, 0, d])        (zero padding, P = K // 2)

    The same values as ``F.conv3d(x, weight, bias, padding=K // 2, groups=C)`` (to float
    rounding): the depth axis is zero-padded by ``P``, its slices become a batch of 2D images,
    each of the ``K`` depth taps is one depthwise ``conv2d`` over them, and the results are
    summed with a shift of ``d``. onnxruntime's grouped 3D convolution is slow (measured, one
    thread: 45.6 ms for ``C = 128, R = 9, K = 9`` against 5.9 ms for this form and 2.3 ms for
    PyTorch's conv3d), so the ONNX export traces this form (:class:`DepthwiseConv3dAs2d`).

    Shapes:
        x ``[B, C, D, H, W]``, weight ``[C, 1, K, K, K]`` (K odd), bias ``[C]`` -> ``[B, C, D, H, W]``
    """
    where = "depthwise_conv3d_as_2d"
    x = check_tensor(where, "x", x)
    weight = check_tensor(where, "weight", weight)
    if x.dim() != 5:
        fail(where, f"x must have shape [B, C, D, H, W], got {tuple(x.shape)}")
    check_float(where, "x", x)
    C, K = x.size(1), weight.shape[-1] if weight.dim() else 0
    if tuple(weight.shape) != (C, 1, K, K, K) or K % 2 == 0:
        fail(
            where,
            f"weight must have shape [C, 1, K, K, K] with C={C} (x's channels) and K odd, got {tuple(weight.shape)}",
        )
    if bias is not None and (not isinstance(bias, Tensor) or tuple(bias.shape) != (C,)):
        fail(
            where,
            f"bias must be None or a tensor [C] = [{C}], got "
            f"{tuple(bias.shape) if isinstance(bias, Tensor) else type(bias).__name__}",
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dtype != x.dtype or t.device != x.device):
            fail(where, f"{name} must have x's dtype and device ({x.dtype} on {x.device}), got {t.dtype} on {t.device}")
    return _depthwise_conv3d_as_2d(x, weight, bias)


def _depthwise_conv3d_as_2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """:func:`depthwise_conv3d_as_2d` on validated inputs (what :class:`DepthwiseConv3dAs2d` traces)."""
    B, C, D, H, W = x.shape
    K = weight.shape[-1]
    P = K // 2
    slices = nn.functional.pad(x, (0, 0, 0, 0, P, P)).transpose(1, 2).reshape(-1, C, H, W)  # [B (D + 2P), C, H, W]
    out: Optional[Tensor] = None
    for d in range(K):
        y = nn.functional.conv2d(slices, weight[:, :, d], padding=P, groups=C).reshape(B, D + 2 * P, C, H, W)
        out = y[:, d : d + D] if out is None else out + y[:, d : d + D]
    out = out.transpose(1, 2)
    return out if bias is None else out + bias.view(1, C, 1, 1, 1)


class DepthwiseConv3dAs2d(TorchFunctionMode):
    """While active, every same-size depthwise ``F.conv3d`` (``groups = C``, weight ``[C, 1, K, K, K]``,
    K odd, stride and dilation 1, padding ``K // 2``) runs as :func:`depthwise_conv3d_as_2d`;
    every other call runs unchanged. The ONNX export traces the backbones under it."""

    NAMES = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")

    def __torch_function__(self, func: Any, types: Any, args: Tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.conv3d:  # F.conv3d is the same function
            a = dict(zip(self.NAMES, args), **kwargs)
            x, w = a["input"], a["weight"]
            K = w.shape[-1]
            same = a.get("padding", 0) in (K // 2, (K // 2,) * 3, [K // 2] * 3, "same")
            if (
                x.dim() == 5
                and tuple(w.shape[1:]) == (1, K, K, K)
                and K % 2 == 1
                and a.get("groups", 1) == w.shape[0] == x.shape[1]
                and same
                and a.get("stride", 1) in (1, (1, 1, 1), [1, 1, 1])
                and a.get("dilation", 1) in (1, (1, 1, 1), [1, 1, 1])
            ):
                return _depthwise_conv3d_as_2d(x, w, a.get("bias"))
        return func(*args, **kwargs)


def scatter_reduce_rows(self: Any, dim: int, index: Any, src: Any, reduce: str, include_self: bool = True) -> Any:
    """The ONNX of ``aten.scatter_reduce.two`` in the exported graphs: ``ScatterND`` on whole rows.

    torch's exporter writes ``ScatterElements``, which onnxruntime runs element by element (252 ms
    for 98,304 x 64 values on one thread, AMD EPYC, against 5.9 ms for ``ScatterND``: the max
    aggregation of a 16k-point crop's (de-)gridification). The exported models scatter only along
    ``dim=0`` with an index repeated along the rows (the aggregation of :func:`gridify.ops.scatter_fixed`: ``dst[:, None].expand(-1, H)``),
    so its first column is the row index ``ScatterND`` takes."""
    from onnxscript import opset18 as op  # noqa: PLC0415 - an export dependency, imported when exporting

    if dim != 0 or not include_self or reduce not in _ND_REDUCTIONS:
        raise NotImplementedError(f"scatter_reduce(dim={dim}, reduce={reduce!r}, include_self={include_self})")
    rows = op.Slice(index, op.Constant(value_ints=[0]), op.Constant(value_ints=[1]), op.Constant(value_ints=[1]))
    return op.ScatterND(self, rows, src, reduction=_ND_REDUCTIONS[reduce])


#: ``scatter_reduce``'s reductions and ``ScatterND``'s names for them
_ND_REDUCTIONS = {"amax": "max", "amin": "min", "sum": "add", "prod": "mul"}
