r"""Fused per-edge message passing for training: chunked forward, recomputing backward.

The message passing of :class:`gridify.nn.BipartiteConv` with a random-Fourier-feature field
(:class:`gridify.nn.RandomFourierField`) and mean, sum or max aggregation,

    z_e = B o_e,   f_e = [cos z_e, sin z_e],   a_e = W_1 f_e + b_1,   p_e = W_2 GELU(a_e) + b_2
    m_e = h_{s(e)} * p_e                                  (message="product")
    m_e = W_o GELU(h_{s(e)} + p_e) + b_o                  (message="concat", A phi_node folded into h)
    y_d = c_d sum_{e : t(e) = d} m_e                      (c_d = 1 / deg(d) for mean, 1 for sum)
    y_dc = max_{e : t(e) = d} m_ec,  w_dc = the edge holding it      (max; targets without edges 0)

(``f_e`` is computed as ``sin([B; B] o_e + [pi/2, 0])``: one matrix product and one sine per chunk, no
concatenation; for concat messages ``u_e = h_{s(e)} + p_e`` as ``(h + b_2)_{s(e)} + W_2 GELU(a_e)``,
the product accumulated into the gathered rows; for max ``y_dc = max_e (W_o GELU(u_e))_c + b_oc``:
rounding is monotone, so this is exactly the maximum of the messages rounded as
``(W_o GELU(u_e)) + b_o``) is computed by :class:`FusedEdgeMessages`, a ``torch.autograd.Function``
that walks the edges in chunks of :data:`EDGE_CHUNK_ELEMENTS` values in the forward pass and keeps
nothing per edge for the backward: it saves only its inputs (``h``, the offsets, the edge lists and
the weights) and the winners of a max, and recomputes each chunk's ``z, f, a, p`` in the backward
pass, where

    dL/dh_s   += sum_{e: s(e)=s} g_e * p_e             g_e = c_{t(e)} dL/dy_{t(e)}      (product)
    dL/dp_e    = g_e * h_{s(e)}
    dL/dW_2   += dL/dp_e GELU(a_e)^T,   dL/da_e = (W_2^T dL/dp_e) * GELU'(a_e)
    dL/dW_1   += dL/da_e f_e^T,         dL/dz_e = [(W_1^T dL/da_e)_sin * cos z_e - (W_1^T dL/da_e)_cos * sin z_e]
    dL/dB     += dL/dz_e o_e^T

with ``g_e = dL/dy_{t(e)} * [e = w_{t(e)}]`` for max, channel by channel: the forward pass keeps
the winning edge ``w [num_dst, H]`` of every target channel (one of tied edges, e.g. the copies of
a duplicated point: one valid subgradient, where the plain path's ``ScatterExtreme`` shares it
equally among them; for tied copies of one edge the weights' gradients are the same; float32
messages fold value and edge as one packed key per channel, ``_PackedMax``); an edge that
holds no target channel's maximum has ``g_e = 0``, and the backward pass recomputes only the edges
that hold one (in the scene segmenter at 65k points a tenth of the gridification's edges)
(concat: ``dL/dW_o += g_e GELU(u_e)^T``, ``dL/du_e = (W_o^T g_e) * GELU'(u_e)``, which is both
``dL/dh`` (scattered to the sources) and ``dL/dp_e``, so ``dL/db_2 = sum_s dL/dh_s``; for max
``dL/db_o`` the sum of ``dL/dy_dc`` over the target channels that have edges). Plain autograd
instead stores about five ``E x H`` tensors for the backward pass: for a batch of 32 clouds of 1,024
points that is more than a gigabyte of activations written and read again, which on a CPU costs more
than the recomputed matrix products (on a GPU it does not: there ``"auto"`` keeps the plain path,
which measured faster).
Gradients agree with plain autograd to float rounding (tested in float64).

:func:`use_fused_messages` decides when the fused path applies (backend choice kept apart from
the backends, as :func:`gridify.nn.flexconv.use_fft_conv` does for convolutions).

Shapes:
    h [S, H], offset [E, D], edge_src [E], edge_dst [E] (int64), scale [num_dst] or None -> [num_dst, H]
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch.nn import functional as F

from ..ops.scatter import accumulation_dtype

__all__ = ["FusedEdgeMessages", "fused_edge_messages", "use_fused_messages", "EDGE_CHUNK_ELEMENTS"]

#: Per-edge values (edges x hidden channels) processed at once by the fused path.
EDGE_CHUNK_ELEMENTS = 1 << 18

_gelu_backward = torch.ops.aten.gelu_backward
_gelu_ = torch.ops.aten.gelu_


def use_fused_messages(mode: Union[str, bool], *, field: Any, aggr: str, needs_grad: bool, offset: Tensor) -> bool:
    """Whether :class:`FusedEdgeMessages` should compute a message-passing step.

    ``mode=True``/``False`` forces the choice (``True`` raises where the fused path cannot run);
    ``"auto"`` uses it whenever it applies: a gradient is needed, the field is a
    :class:`~gridify.nn.RandomFourierField` (any aggregation: mean, sum or max), the offsets need
    no gradient, the tensors are on the CPU, and autocast is off. On a GPU the plain path measured
    faster (it stores more but recomputes nothing), as it did in mixed precision, whose stored
    activations are half the size; ``True`` still runs the fused path there, e.g. to save a GPU's
    memory at large N.
    """
    from .fields import RandomFourierField

    if mode is False or not needs_grad:
        return False
    why = None
    if not isinstance(field, RandomFourierField):
        why = f"the positional field is a {type(field).__name__}, not a RandomFourierField"
    elif aggr not in ("mean", "sum", "max"):
        why = f"aggr={aggr!r} (the fused path does mean, sum and max)"
    elif offset.requires_grad:
        why = "the edge offsets require a gradient"
    if why is None and mode == "auto" and offset.device.type != "cpu":
        # measured (NVIDIA H200, fp32, scene segmenter training step, max aggregation): fused 0.087 / 0.19 /
        # 0.70 s against plain 0.053 / 0.078 / 0.27 s at 16k / 65k / 262k points (peak 1.1 against 3.5 GiB
        # at 262k): recomputing the messages costs the GPU more than storing them
        return False
    if why is None and mode == "auto" and torch.is_autocast_enabled(offset.device.type):
        # measured (2 cores, AMD EPYC, bf16 autocast, batch 32 x 1,024 points): the plain path, which
        # keeps its activations in bf16, 52-64 ms per cloud against 65-84 ms recomputing them
        return False
    if why is not None and mode is True:
        raise ValueError(f"fused_messages=True cannot be used: {why}")
    return why is None


def _chunks(num_edges: int, width: int) -> Sequence[Tuple[int, int]]:
    step = max(256, EDGE_CHUNK_ELEMENTS // max(1, width))
    return [(s, min(s + step, num_edges)) for s in range(0, num_edges, step)]


def _phases(B: Tensor) -> Tuple[Tensor, Tensor]:
    """``([B; B], [pi/2 .. pi/2, 0 .. 0])``: ``sin([B; B] o + shift) = [cos z, sin z]`` in one pass."""
    shift = torch.zeros(2 * B.size(0), dtype=B.dtype, device=B.device)
    shift[: B.size(0)] = math.pi / 2
    return torch.cat([B, B]).t(), shift


def _hidden(o: Tensor, BB: Tuple[Tensor, Tensor], W1: Tensor, b1: Tensor) -> Tuple[Tensor, Tensor]:
    """One chunk's ``(f, a)``: the Fourier features ``f = [cos z, sin z]`` in the offsets' precision and
    ``a = W_1 f + b_1`` in ``W1``'s."""
    f = torch.addmm(BB[1], o, BB[0]).sin_()
    return f, torch.addmm(b1, f.to(W1.dtype), W1.t())


class _RunningMax:
    """The running maxima ``[num_dst, H]`` of a max aggregation fed chunk by chunk, with the edge
    that holds each one: the last of tied edges (edge ids grow chunk by chunk). Each chunk folds its
    values (``scatter_reduce_`` amax), then the ids of its edges that reached the new maxima. The
    general fold (any float dtype); ``_PackedMax`` is the faster one for float32 messages.
    """

    def __init__(self, num_dst: int, width: int, dtype: torch.dtype, device: torch.device):
        self.out = torch.full((num_dst, width), float("-inf"), dtype=dtype, device=device)
        # edge ids as float64 (exact below 2^53): torch's CPU scatter_reduce_ amax is about 5-10x
        # slower on int64 than on floating point values (no fast path for an expanded index)
        self.winner = torch.full((num_dst, width), -1.0, dtype=torch.float64, device=device)

    def fold(self, m: Tensor, dst: Tensor, first: int) -> None:
        """Take the messages ``m [E_c, H]`` of the edges ``first, first + 1, ...`` into targets ``dst``."""
        idx = dst[:, None].expand_as(m)
        self.out.scatter_reduce_(0, idx, m, reduce="amax", include_self=True)
        ids = torch.arange(first, first + m.size(0), dtype=torch.float64, device=m.device)[:, None].expand_as(m)
        won = torch.where(self.out.index_select(0, dst) == m, ids, -1.0)
        self.winner.scatter_reduce_(0, idx, won, reduce="amax", include_self=True)

    def result(self) -> Tuple[Tensor, Tensor, Tensor]:
        """``(maxima, winning edges, empty)``: 0 and -1 for targets without edges (as ``scatter()`` gives),
        which ``empty`` marks."""
        empty = self.out == float("-inf")
        return self.out.masked_fill_(empty, 0.0), self.winner.long(), empty


class _PackedMax:
    """:class:`_RunningMax` for float32 messages in one ``scatter_reduce_`` per chunk: each message
    ``m_ec`` and its edge are packed into one float64 key, the value converted exactly (a float32 in
    float64 leaves the low 29 bits of the mantissa zero) and ``e + 1`` written into those bits. Keys
    order as their values (the id moves a key by less than one float32 step), so the largest key of a
    target channel holds its maximum and one edge holding it: among tied edges the last for a
    non-negative maximum (``+0`` above ``-0``), the first for a negative one (the id adds to the
    magnitude). Masking the low bits off gives the value back exactly, the low bits the edge.

    A non-finite message makes a NaN key (the exponent of an infinity with a nonzero mantissa), which
    ``scatter_reduce_`` propagates: :meth:`result` then returns None and the caller folds again with
    :class:`_RunningMax`. Edge ids must stay below :data:`_PACKED_MAX_EDGES`.
    """

    def __init__(self, num_dst: int, width: int, device: torch.device):
        self.key = torch.full((num_dst, width), float("-inf"), dtype=torch.float64, device=device)

    def fold(self, m: Tensor, dst: Tensor, first: int) -> None:
        """Take the float32 messages ``m [E_c, H]`` of the edges ``first, first + 1, ...`` into targets ``dst``."""
        key = m.to(torch.float64)
        ids = torch.arange(first + 1, first + 1 + m.size(0), device=m.device)
        key.view(torch.int64).bitwise_or_(ids[:, None])
        self.key.scatter_reduce_(0, dst[:, None].expand_as(key), key, reduce="amax", include_self=True)

    def result(self) -> Optional[Tuple[Tensor, Tensor, Tensor]]:
        """``(maxima float32, winning edges int64, empty)`` as :meth:`_RunningMax.result`; None after a
        non-finite message."""
        if bool(self.key.isnan().any()):
            return None
        bits = self.key.view(torch.int64)
        winner = (bits & _PACKED_ID_MASK).sub_(1)  # -1 where no edge came (the key stayed -inf)
        out = bits.bitwise_and_(~_PACKED_ID_MASK).view(torch.float64).to(torch.float32)
        empty = winner < 0
        return out.masked_fill_(empty, 0.0), winner, empty


#: the low mantissa bits of a float64 that a float32 value leaves zero (52 - 23), which ``_PackedMax`` fills
_PACKED_ID_BITS = 29
_PACKED_ID_MASK = (1 << _PACKED_ID_BITS) - 1
#: ``_PackedMax`` packs edge ids ``e + 1`` below ``2^29``; more edges fold with :class:`_RunningMax`
_PACKED_MAX_EDGES = _PACKED_ID_MASK - 1


def _new_running_max(num_dst: int, width: int, dtype: torch.dtype, device: torch.device, num_edges: int) -> Any:
    """The fold of a max aggregation: ``_PackedMax`` for float32 messages, else :class:`_RunningMax`."""
    if dtype == torch.float32 and num_edges <= _PACKED_MAX_EDGES:
        return _PackedMax(num_dst, width, device)
    return _RunningMax(num_dst, width, dtype, device)


def _aggregate(
    hb: Tensor, offset: Tensor, edge_src: Tensor, edge_dst: Tensor, weights: Tuple, acc: torch.dtype, into: Any
):
    """The forward pass's chunk loop: every chunk's messages summed into the tensor ``into`` or folded
    into the running max ``into``; returns the sums, or ``into.result()``. ``hb``: the node embeddings
    ``h`` (product), ``h + b_2`` (concat). A max aggregation's messages leave ``b_o`` out (added to the
    maxima by the caller: rounding is monotone, so ``max(m + b) = max(m) + b`` exactly)."""
    B, W1, b1, W2, b2, Wo, bo = weights
    BB, summing = _phases(B), isinstance(into, Tensor)
    for s, e in _chunks(edge_src.numel(), hb.size(1)):
        src = edge_src[s:e]
        act = _gelu_(_hidden(offset[s:e], BB, W1, b1)[1])  # a is not needed again: GELU in place
        if Wo is None:  # product: (W_2 GELU(a) + b_2) * h_s
            m = torch.addmm(b2, act, W2.t()).mul_(hb.index_select(0, src))
        else:  # concat: W_o GELU(u) (+ b_o), u = W_2 GELU(a) + (h + b_2)_s accumulated into the gathered rows
            v = _gelu_(hb.index_select(0, src).addmm_(act, W2.t()))
            m = torch.addmm(bo, v, Wo.t()) if summing else torch.mm(v, Wo.t())
        if summing:
            into.index_add_(0, edge_dst[s:e], m.to(acc))
        else:
            into.fold(m.to(acc), edge_dst[s:e], s)
    return into if summing else into.result()


def _winning_edges(winner: Tensor, num_edges: int) -> Tensor:
    """The sorted ids of the edges that hold at least one target channel's maximum (``winner [num_dst, H]``,
    -1 for targets without edges)."""
    w = winner.flatten()
    hit = torch.zeros(num_edges, dtype=torch.bool, device=winner.device)
    return hit.index_fill_(0, w[w >= 0], True).nonzero().flatten()


class FusedEdgeMessages(torch.autograd.Function):
    """See the module docstring. Inputs: ``h, offset, edge_src, edge_dst, scale, num_dst, concat,
    B, W1, b1, W2, b2, Wo, bo[, maximum]`` (``Wo``/``bo`` None for product messages; ``maximum=True``
    aggregates by max, ``scale`` then None).

    Mixed precision: ``h`` and the weights ``W1 .. bo`` may be bfloat16/float16 (the matrix
    products then run in that precision) while ``offset``, ``B`` and ``scale`` stay float32; the
    aggregation and every gradient accumulate in float32.
    """

    @staticmethod
    def forward(
        ctx: Any,
        h: Tensor,
        offset: Tensor,
        edge_src: Tensor,
        edge_dst: Tensor,
        scale: Optional[Tensor],
        num_dst: int,
        concat: bool,
        B: Tensor,
        W1: Tensor,
        b1: Tensor,
        W2: Tensor,
        b2: Tensor,
        Wo: Optional[Tensor],
        bo: Optional[Tensor],
        maximum: bool = False,
    ) -> Tensor:
        acc = torch.promote_types(h.dtype, offset.dtype)
        width, winner, num_edges = h.size(1), None, edge_src.numel()
        hb = h + b2 if concat else h
        args = (hb, offset, edge_src, edge_dst, (B, W1, b1, W2, b2, Wo, bo), acc)
        if maximum:
            result = _aggregate(*args, _new_running_max(num_dst, width, acc, h.device, num_edges))
            if result is None:  # a non-finite message: the general fold gives scatter()'s values
                result = _aggregate(*args, _RunningMax(num_dst, width, acc, h.device))
            out, winner, empty = result
            if concat:
                out.add_(bo).masked_fill_(empty, 0.0)
        else:
            out = _aggregate(*args, torch.zeros(num_dst, width, dtype=acc, device=h.device))
            if scale is not None:
                out.mul_(scale[:, None])
        ctx.concat = concat
        ctx.save_for_backward(h, offset, edge_src, edge_dst, scale, B, W1, b1, W2, b2, Wo, bo, winner)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> Tuple[Optional[Tensor], ...]:
        h, offset, edge_src, edge_dst, scale, B, W1, b1, W2, b2, Wo, bo, winner = ctx.saved_tensors
        g_dst = (grad_out * scale[:, None] if scale is not None else grad_out).to(h.dtype)
        acc = torch.promote_types(h.dtype, offset.dtype)
        grad_h = torch.zeros(h.shape, dtype=acc, device=h.device)
        gB, gW1, gb1, gW2, gb2 = (torch.zeros(t.shape, dtype=acc, device=t.device) for t in (B, W1, b1, W2, b2))
        gWo = None if Wo is None else torch.zeros(Wo.shape, dtype=acc, device=Wo.device)
        gbo = None if bo is None else torch.zeros(bo.shape, dtype=acc, device=bo.device)
        n_freq, BB = B.size(0), _phases(B)
        hb = h + b2 if ctx.concat else h
        # max: only the edges holding some target channel's maximum get a gradient; the others are skipped
        edges = None if winner is None else _winning_edges(winner, edge_src.numel())
        for s, e in _chunks(edge_src.numel() if edges is None else edges.numel(), h.size(1)):
            if edges is None:
                src, dst, o = edge_src[s:e], edge_dst[s:e], offset[s:e]
            else:
                ids = edges[s:e]
                src, dst, o = edge_src.index_select(0, ids), edge_dst.index_select(0, ids), offset.index_select(0, ids)
            f, a = _hidden(o, BB, W1, b1)
            cz, sz = f[:, :n_freq], f[:, n_freq:]
            act = F.gelu(a)
            g = g_dst.index_select(0, dst)
            if edges is not None:  # max: each target channel's gradient to the edge holding its maximum
                g = g.mul_(winner.index_select(0, dst) == ids[:, None])
            if ctx.concat:
                u = hb.index_select(0, src).addmm_(act, W2.t())
                gWo += g.t() @ F.gelu(u)
                if winner is None:
                    gbo += g.sum(0, dtype=acc)
                gp = _gelu_backward(g @ Wo, u)
                grad_h.index_add_(0, src, gp.to(acc))  # dL/db_2 = the sum of these: taken once, below
            else:
                hs = h.index_select(0, src)
                grad_h.index_add_(0, src, (g * torch.addmm(b2, act, W2.t())).to(acc))
                gp = g.mul_(hs)
                gb2 += gp.sum(0, dtype=acc)
            gW2 += gp.t() @ act
            ga = _gelu_backward(gp @ W2, a)
            gW1 += ga.t() @ f.to(W1.dtype)
            gb1 += ga.sum(0, dtype=acc)
            gf = (ga @ W1).to(cz.dtype)
            gz = gf[:, n_freq:].mul_(cz).sub_(gf[:, :n_freq].mul_(sz))
            gB.addmm_(gz.t(), o)
        if ctx.concat:
            gb2 = grad_h.sum(0)
            if winner is not None:  # b_o was added to every maximum
                gbo = torch.where(winner >= 0, g_dst, 0).sum(0, dtype=acc)
        cast = lambda grad, ref: None if grad is None else grad.to(ref.dtype)  # noqa: E731
        grads = (
            cast(grad_h, h),
            None,
            None,
            None,
            None,
            None,
            None,
            cast(gB, B),
            cast(gW1, W1),
            cast(gb1, b1),
            cast(gW2, W2),
            cast(gb2, b2),
            cast(gWo, Wo),
            cast(gbo, bo),
            None,
        )
        return grads[: len(ctx.needs_input_grad)]  # ``maximum`` may be left to its default


def fused_edge_messages(
    h: Tensor,
    offset: Tensor,
    edge_src: Tensor,
    edge_dst: Tensor,
    num_dst: int,
    *,
    field: Any,
    aggr: str,
    msg_out: Optional[torch.nn.Linear] = None,
) -> Tensor:
    """Aggregated messages ``[num_dst, H]`` through :class:`FusedEdgeMessages` (see the module docstring).

    ``field`` is the :class:`~gridify.nn.RandomFourierField` phi_pos, ``msg_out`` the output layer of
    concat messages (None for product messages); ``aggr`` is ``"mean"``, ``"sum"`` or ``"max"``. Under
    ``torch.autocast`` the matrix products run in the autocast dtype (as ``nn.Linear`` would), the
    phases ``B o`` and the sums in float32; the result is float32.
    """
    scale = None
    acc = accumulation_dtype(h.dtype)
    if aggr == "mean":
        scale = 1.0 / torch.bincount(edge_dst, minlength=num_dst).clamp_(min=1).to(acc)
    concat = msg_out is not None
    weights = [
        field.lin1.weight,
        field.lin1.bias,
        field.lin2.weight,
        field.lin2.bias,
        msg_out.weight if concat else None,
        msg_out.bias if concat else None,
    ]
    device = h.device.type
    if torch.is_autocast_enabled(device):
        low = torch.get_autocast_dtype(device)
        h, weights = h.to(low), [None if w is None else w.to(low) for w in weights]
        with torch.autocast(device, enabled=False):
            return FusedEdgeMessages.apply(
                h,
                offset.float(),
                edge_src,
                edge_dst,
                scale,
                num_dst,
                concat,
                field.freqs.weight.float(),
                *weights,
                aggr == "max",
            )
    return FusedEdgeMessages.apply(
        h, offset.to(h.dtype), edge_src, edge_dst, scale, num_dst, concat, field.freqs.weight, *weights, aggr == "max"
    )
