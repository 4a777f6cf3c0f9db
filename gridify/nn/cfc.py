"""Closed-form continuous-depth (CfC) recurrent cells for irregularly timed sequences.

A CfC cell (Hasani et al., "Closed-form continuous-time neural networks", eq. 10) updates its
state with an explicit function of the time elapsed since the previous input, so sequences
observed at irregular times need no ODE solver:

    z    = Backbone([I_t, x_{t-1}])                                 (shared layers)
    f    = W_f z + b_f,   g = tanh(W_g z + b_g),   h = tanh(W_h z + b_h)
    x_t  = sigma(-f * dt) * g + (1 - sigma(-f * dt)) * h             ("default")
    x_t  = sigma(-f * dt) * g + h                                    ("no_gate")

``dt`` is the elapsed time of step ``t``. At ``dt = 0`` the gate is ``sigma(0) = 1/2`` and the
state is the midpoint ``(g + h) / 2`` (``g / 2 + h`` without the gate); as ``dt`` grows the
state moves towards ``h`` where ``f > 0`` and towards ``g`` where ``f < 0``.

:class:`CfC` runs a cell over padded batches ``[B, T, F]`` with per-step elapsed times and a
mask; :class:`DeltaTGRU` is the matching baseline (a GRU that receives ``dt`` as an extra
input feature) with the same interface.

Padded (masked) steps are set to 0 first (:func:`mask_padding`): padding is not data, so a NaN
there is neither refused nor used. Every tensor argument is validated at the outermost call
(inputs finite at valid steps and states finite, both of the module's dtype and device, elapsed
times finite and non-negative at valid steps, and still finite in the input's dtype, masks
boolean or 0/1, lengths integers in range); a model that validated them calls these modules
trusted (:func:`gridify._checks.trusted_inputs`).

Shapes:
    CfCCell: input [B, F], hx [B, H], timespans [B] -> [B, H];
    CfC / DeltaTGRU: input [B, T, F], timespans [B, T], mask [B, T] -> ([B, T, H], [B, H])
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from .._checks import (
    check_choice,
    check_device,
    check_finite,
    check_int,
    check_integer,
    check_number,
    check_parameters,
    check_positive_int,
    check_probability,
    check_tensor,
    fail,
    validating,
)
from .inputs import check_same_dtype

__all__ = ["CfCCell", "CfC", "DeltaTGRU", "CFC_MODES", "CFC_ACTIVATIONS"]

CFC_MODES = ("default", "no_gate")


class LeCunTanh(nn.Module):
    """``1.7159 * tanh(2/3 * x)`` (LeCun's scaled tanh, unit-variance preserving)."""

    def forward(self, x: Tensor) -> Tensor:
        return 1.7159 * torch.tanh(0.666 * x)


CFC_ACTIVATIONS: Dict[str, Callable[[], nn.Module]] = {
    "lecun_tanh": LeCunTanh,
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
}


class CfCCell(nn.Module):
    r"""One closed-form continuous-depth step (paper eq. 10), see the module docstring.

        z = Backbone([I, x]),  f = W_f z,  g = tanh(W_g z),  h = tanh(W_h z)
        x' = sigma(-f dt) * g + (1 - sigma(-f dt)) * h        (mode "default")
        x' = sigma(-f dt) * g + h                             (mode "no_gate")

    The backbone is ``backbone_layers`` x (Linear -> activation -> Dropout) of width
    ``backbone_units``; ``backbone_layers=0`` feeds ``[I, x]`` to the heads directly.

    Args:
        input_size: features ``F`` of the input ``I``.
        hidden_size: state size ``H``.
        backbone_units, backbone_layers, backbone_activation, backbone_dropout: the shared
            backbone (activations: ``"lecun_tanh"``, ``"tanh"``, ``"relu"``, ``"silu"``, ``"gelu"``).
        mode: ``"default"`` (gated, eq. 10) or ``"no_gate"`` (CfC-noGate: no ``1 - sigma`` on h).

    Shapes:
        input [B, F], hx [B, H], timespans [B] (or [B, 1], or a scalar) -> [B, H]
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        backbone_units: int = 64,
        backbone_layers: int = 1,
        backbone_activation: str = "lecun_tanh",
        backbone_dropout: float = 0.0,
        mode: str = "default",
    ) -> None:
        super().__init__()
        where = type(self).__name__
        check_positive_int(where, input_size=input_size, hidden_size=hidden_size, backbone_units=backbone_units)
        check_int(where, "backbone_layers", backbone_layers, 0)
        check_choice(where, "backbone_activation", backbone_activation, sorted(CFC_ACTIVATIONS))
        check_probability(where, "backbone_dropout", backbone_dropout)
        check_choice(where, "mode", mode, CFC_MODES)
        width = input_size + hidden_size
        check_parameters(
            where,
            f"input_size={input_size}, hidden_size={hidden_size}, backbone_units={backbone_units}",
            backbone_units * (width + backbone_units * backbone_layers) + 3 * hidden_size * max(width, backbone_units),
        )
        self.input_size, self.hidden_size, self.mode = input_size, hidden_size, mode
        layers = []
        width = input_size + hidden_size
        for _ in range(backbone_layers):
            layers += [nn.Linear(width, backbone_units), CFC_ACTIVATIONS[backbone_activation]()]
            if backbone_dropout > 0:
                layers.append(nn.Dropout(float(backbone_dropout)))
            width = backbone_units
        self.backbone = nn.Sequential(*layers)
        self.f = nn.Linear(width, hidden_size)
        self.g = nn.Linear(width, hidden_size)
        self.h = nn.Linear(width, hidden_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform weights and zero biases (as the reference implementation)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def heads(self, input: Tensor, hx: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """The three heads ``(f, g, h)``, each ``[B, H]``, before the time gate."""
        z = self.backbone(torch.cat([input, hx], -1))
        return self.f(z), torch.tanh(self.g(z)), torch.tanh(self.h(z))

    def forward(
        self, input: Tensor, hx: Optional[Tensor] = None, timespans: Union[Tensor, float, None] = None
    ) -> Tensor:
        where = type(self).__name__
        if not isinstance(input, Tensor) or input.dim() != 2 or input.size(-1) != self.input_size:
            fail(
                where,
                f"input must be a tensor of shape [B, {self.input_size}], "
                f"got {tuple(input.shape) if isinstance(input, Tensor) else type(input).__name__}",
            )
        if not input.is_floating_point():
            fail(where, f"input must be a floating-point tensor, got dtype {input.dtype}")
        check_same_dtype(where, "input", input, self.f.weight)
        b = input.size(0)
        if hx is None:
            hx = input.new_zeros(b, self.hidden_size)
        elif not isinstance(hx, Tensor) or tuple(hx.shape) != (b, self.hidden_size):
            fail(
                where,
                f"hx must have shape [{b}, {self.hidden_size}], "
                f"got {tuple(hx.shape) if isinstance(hx, Tensor) else type(hx).__name__}",
            )
        else:
            check_same_dtype(where, "hx", hx, self.f.weight)
        ts = _cell_timespans(where, timespans, b, input)
        if validating():
            check_finite(where, "input", input, dims=("sequence", "feature"))
            check_finite(where, "hx", hx, dims=("sequence", "unit"))
            check_timespans(where, ts[:, 0], None)
        return self._step(input, hx, ts)

    def _step(self, input: Tensor, hx: Tensor, ts: Tensor) -> Tensor:
        """The update without input checks; ``ts`` is ``[B, 1]``."""
        f, g, h = self.heads(input, hx)
        gate = torch.sigmoid(-f * ts)
        if self.mode == "no_gate":
            return gate * g + h
        return gate * g + (1.0 - gate) * h

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, mode={self.mode!r}"


def _cell_timespans(where: str, timespans: Union[Tensor, float, None], b: int, ref: Tensor) -> Tensor:
    if timespans is None:
        return ref.new_ones(b, 1)
    if isinstance(timespans, (int, float)) and not isinstance(timespans, bool):
        return ref.new_full((b, 1), float(timespans))
    if not isinstance(timespans, Tensor):
        fail(where, f"timespans must be a tensor or a number, got {type(timespans).__name__}")
    if timespans.dtype == torch.bool or timespans.is_complex():
        fail(where, f"timespans must hold real numbers, got dtype {timespans.dtype}")
    check_device(where, "timespans", timespans, ref.device, "the inputs")
    if timespans.dim() == 0:
        return timespans.to(ref.dtype).expand(b).unsqueeze(-1)
    if timespans.dim() == 2 and timespans.size(-1) == 1:
        timespans = timespans.squeeze(-1)
    if timespans.dim() != 1 or timespans.numel() != b:
        fail(where, f"timespans must have shape [B] = [{b}] (or [B, 1]), got {tuple(timespans.shape)}")
    return timespans.to(ref.dtype).unsqueeze(-1)


def check_padding(
    where: str,
    mask: Optional[Tensor],
    lengths: Optional[Tensor],
    b: int,
    t: int,
    device: torch.device,
    min_length: int = 0,
) -> Tensor:
    """The valid steps ``[B, T]`` (bool) from ``mask`` (bool, or 0/1 integers) or ``lengths``
    (integers in ``[min_length, T]``, a valid prefix); all steps when both are None."""
    if mask is not None and lengths is not None:
        fail(where, "pass either mask or lengths, not both")
    if lengths is not None:
        if not isinstance(lengths, Tensor) or lengths.dim() != 1 or lengths.numel() != b:
            fail(
                where,
                f"lengths must be a 1-D tensor with one entry per sequence ({b}), got "
                f"{tuple(lengths.shape) if isinstance(lengths, Tensor) else type(lengths).__name__}",
            )
        check_integer(where, "lengths", lengths)
        check_device(where, "lengths", lengths, device, "the inputs")
        if b and (int(lengths.min()) < min_length or int(lengths.max()) > t):
            fail(
                where,
                f"lengths must lie in [{min_length}, T={t}], got min {int(lengths.min())} max {int(lengths.max())}",
            )
        return torch.arange(t, device=device)[None, :] < lengths[:, None]
    if mask is None:
        return torch.ones(b, t, dtype=torch.bool, device=device)
    if not isinstance(mask, Tensor) or tuple(mask.shape) != (b, t):
        fail(
            where,
            f"mask must have shape [B, T] = [{b}, {t}], got "
            f"{tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__}",
        )
    check_device(where, "mask", mask, device, "the inputs")
    if mask.dtype != torch.bool:
        if mask.is_floating_point() or mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
            fail(where, f"mask must be a boolean (or 0/1 integer) tensor, got dtype {mask.dtype}")
        mask = mask.bool()
    return mask


def check_timespans(where: str, timespans: Tensor, mask: Optional[Tensor], dtype: Optional[torch.dtype] = None) -> None:
    """Elapsed times at the valid steps: finite, non-negative and (in ``dtype``) still finite."""
    valid = timespans if mask is None else timespans[mask]
    if valid.numel() and not bool(torch.isfinite(valid).all()):
        fail(where, "timespans contains NaN/Inf at valid (unmasked) steps")
    if valid.numel() and bool((valid < 0).any()):
        if mask is None:
            fail(
                where,
                f"timespans must be non-negative (elapsed time since the previous step); sequence "
                f"{int((timespans < 0).nonzero()[0])} has {float(valid.min()):.4g}",
            )
        bad = ((timespans < 0) & mask).nonzero()[0].tolist()
        fail(
            where,
            f"timespans must be non-negative (elapsed time since the previous step); sequence "
            f"{bad[0]} step {bad[1]} has {float(timespans[bad[0], bad[1]]):.4g}",
        )
    if dtype is not None and valid.numel() and not bool(torch.isfinite(valid.to(dtype)).all()):
        fail(where, f"timespans up to {float(valid.max()):.4g} overflow {dtype} (the input's dtype); rescale the times")


def check_sequence_inputs(
    where: str,
    input: Tensor,
    input_size: int,
    timespans: Optional[Tensor],
    mask: Optional[Tensor],
    lengths: Optional[Tensor],
    hx: Optional[Tensor],
    hidden_size: int,
    ref: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Validate ``[B, T, F]`` inputs; return ``(input, timespans [B, T] in input's dtype, mask [B, T]
    bool, hx [B, H])``, ``input`` and ``timespans`` with their padded steps set to 0 (:func:`mask_padding`).

    ``ref`` (a parameter of the module) fixes the dtype and device ``input`` and ``hx`` must have.
    Values (NaN/Inf, negative times) are checked unless :func:`gridify._checks.validating` is off.
    """
    input = check_tensor(where, "input", input)
    if input.dim() != 3 or input.size(-1) != input_size:
        fail(where, f"input must have shape [B, T, {input_size}], got {tuple(input.shape)}")
    if not input.is_floating_point():
        fail(where, f"input must be a floating-point tensor, got dtype {input.dtype}")
    if ref is not None:
        check_same_dtype(where, "input", input, ref)
    b, t, _ = input.shape
    if timespans is None:
        timespans = input.new_ones(b, t)
    else:
        if not isinstance(timespans, Tensor):
            fail(where, f"timespans must be a torch.Tensor [B, T], got {type(timespans).__name__}")
        if timespans.dim() == 3 and timespans.size(-1) == 1:
            timespans = timespans.squeeze(-1)
        if tuple(timespans.shape) != (b, t):
            fail(
                where,
                f"timespans must have shape [B, T] = [{b}, {t}] (elapsed time since the previous "
                f"step), got {tuple(timespans.shape)}",
            )
        if timespans.dtype == torch.bool or timespans.is_complex():
            fail(where, f"timespans must hold real numbers, got dtype {timespans.dtype}")
        check_device(where, "timespans", timespans, input.device, "the inputs")
    mask = check_padding(where, mask, lengths, b, t, input.device)
    if hx is None:
        hx = input.new_zeros(b, hidden_size)
    elif not isinstance(hx, Tensor) or tuple(hx.shape) != (b, hidden_size):
        fail(
            where,
            f"hx must have shape [B, H] = [{b}, {hidden_size}], got "
            f"{tuple(hx.shape) if isinstance(hx, Tensor) else type(hx).__name__}",
        )
    else:
        check_same_dtype(where, "hx", hx, input)
    input, timespans = mask_padding(input, timespans, mask)  # padding is not data: never checked, never used
    if validating():
        check_timespans(where, timespans, mask, input.dtype)
        check_finite(where, "input", input, dims=("sequence", "step", "feature"))
        check_finite(where, "hx", hx, dims=("sequence", "unit"))
    return input, timespans.to(input.dtype), mask, hx


def mask_padding(input: Tensor, timespans: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
    """``input [B, T, F]`` and ``timespans [B, T]`` with their padded steps (``~mask``) set to 0.

    Padding is not data: whatever a padded step holds (NaN, Inf, garbage) is replaced before the
    finiteness checks, which so judge the real steps only, and before the cell runs, so a NaN
    there cannot reach a state or, through ``0 * NaN``, a gradient. (Always a copy: testing the mask
    first would cost a host synchronisation per call.)
    """
    return input.masked_fill(~mask[..., None], 0), timespans.masked_fill(~mask, 0)


def run_masked(
    step: Callable[[Tensor, Tensor, Tensor], Tensor], input: Tensor, timespans: Tensor, mask: Tensor, hx: Tensor
) -> Tuple[Tensor, Tensor]:
    """Unroll ``hx <- step(input_t, hx, timespans_t)`` over T; masked steps keep ``hx`` unchanged.

    Returns ``(states [B, T, H], last [B, H])``: ``states[:, t]`` is the state after step ``t``
    (the carried state at masked steps) and ``last`` the state after the last valid step
    (``hx`` itself for a sequence with no valid step).
    """
    states = []
    for t in range(input.size(1)):
        new = step(input[:, t], hx, timespans[:, t])
        hx = torch.where(mask[:, t, None], new, hx)
        states.append(hx)
    out = torch.stack(states, 1) if states else input.new_zeros(input.size(0), 0, hx.size(-1))
    return out, hx


class CfC(nn.Module):
    r"""A :class:`CfCCell` unrolled over padded, irregularly timed sequences.

        x_t = CfCCell(I_t, x_{t-1}, dt_t)  if mask[b, t]  else  x_{t-1}

    ``timespans[b, t]`` is the elapsed time since the previous (valid) step of sequence ``b``;
    ``None`` means regular unit steps. Padding is given by ``mask`` (True = valid) or ``lengths``
    (valid prefix); padded steps leave the state unchanged, so a sequence padded to any length
    gives the same states as the unpadded sequence and the result of a sequence does not depend
    on the other sequences in the batch.

    Args: those of :class:`CfCCell`.

    Shapes:
        input [B, T, F], timespans [B, T], mask [B, T] or lengths [B], hx [B, H]
        -> (states [B, T, H], last [B, H])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        backbone_units: int = 64,
        backbone_layers: int = 1,
        backbone_activation: str = "lecun_tanh",
        backbone_dropout: float = 0.0,
        mode: str = "default",
    ) -> None:
        super().__init__()
        self.cell = CfCCell(
            input_size,
            hidden_size,
            backbone_units=backbone_units,
            backbone_layers=backbone_layers,
            backbone_activation=backbone_activation,
            backbone_dropout=backbone_dropout,
            mode=mode,
        )
        self.input_size, self.hidden_size = input_size, hidden_size

    def reset_parameters(self) -> None:
        self.cell.reset_parameters()

    def forward(
        self,
        input: Tensor,
        timespans: Optional[Tensor] = None,
        mask: Optional[Tensor] = None,
        lengths: Optional[Tensor] = None,
        hx: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Tensor]:
        input, timespans, mask, hx = check_sequence_inputs(
            type(self).__name__,
            input,
            self.input_size,
            timespans,
            mask,
            lengths,
            hx,
            self.hidden_size,
            self.cell.f.weight,
        )
        cell = self.cell

        def step(i: Tensor, h: Tensor, dt: Tensor) -> Tensor:
            return cell._step(i, h, dt.unsqueeze(-1))

        return run_masked(step, input, timespans, mask, hx)


class DeltaTGRU(nn.Module):
    r"""GRU baseline for irregular sequences: the elapsed time is one more input feature.

        x_t = GRUCell([I_t, dt_t * time_scale], x_{t-1})  if mask[b, t]  else  x_{t-1}

    Same interface and masking semantics as :class:`CfC`.

    Shapes:
        input [B, T, F], timespans [B, T], mask [B, T] or lengths [B], hx [B, H]
        -> (states [B, T, H], last [B, H])
    """

    def __init__(self, input_size: int, hidden_size: int, time_scale: float = 1.0) -> None:
        super().__init__()
        check_positive_int(type(self).__name__, input_size=input_size, hidden_size=hidden_size)
        check_number(type(self).__name__, "time_scale", time_scale)
        check_parameters(
            type(self).__name__,
            f"input_size={input_size}, hidden_size={hidden_size}",
            3 * hidden_size * (input_size + hidden_size + 3),
        )
        self.cell = nn.GRUCell(input_size + 1, hidden_size)
        self.input_size, self.hidden_size, self.time_scale = input_size, hidden_size, float(time_scale)

    def reset_parameters(self) -> None:
        self.cell.reset_parameters()

    def forward(
        self,
        input: Tensor,
        timespans: Optional[Tensor] = None,
        mask: Optional[Tensor] = None,
        lengths: Optional[Tensor] = None,
        hx: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Tensor]:
        input, timespans, mask, hx = check_sequence_inputs(
            type(self).__name__,
            input,
            self.input_size,
            timespans,
            mask,
            lengths,
            hx,
            self.hidden_size,
            self.cell.weight_ih,
        )
        scale = self.time_scale

        def step(i: Tensor, h: Tensor, dt: Tensor) -> Tensor:
            return self.cell(torch.cat([i, (dt * scale).unsqueeze(-1).to(i.dtype)], -1), h)

        return run_masked(step, input, timespans, mask, hx)
