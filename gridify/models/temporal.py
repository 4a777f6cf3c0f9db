"""Sequence classification of point-cloud sequences: gridified per-frame encoder + CfC (or GRU).

    dt_{b,t} = time_scale * (times_{b,t} - times_{b,t'})      (t' the previous valid frame)

Elapsed times are differenced in float64 whatever the dtype of ``times`` or of the model (Unix
timestamps ~1.7e9 s keep their sub-second steps) and only then cast to the model's dtype. The
forward validates every tensor argument once (``pos``/``x`` finite at valid frames, naming the
sequence and frame; ``times``, ``mask``, ``lengths``) and runs the encoder and the RNN trusted.

Shapes:
    pos [B, T, N, 3], times [B, T], mask [B, T] -> TemporalOutput (logits [B, K], ...)
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn

from .._checks import (
    check_choice,
    check_device,
    check_float,
    check_number,
    check_parameters,
    check_positive_int,
    check_tensor,
    fail,
    trusted_inputs,
)
from ..nn.cfc import CfC, DeltaTGRU, check_padding, check_timespans
from ..nn.inputs import module_dtype
from ..registry import MODELS
from .gridified import GridifiedClassifier

__all__ = ["TemporalGridifiedClassifier", "TemporalOutput", "timespans_from_times", "TIME_SCALE_RANGE"]

#: the accepted ``time_scale`` (and, its upper end, the largest ``first_timespan``): the scaled elapsed times are
#: float32, where a scale of 1e-300 makes every step 0 and 1e300 (or 1e38 on times of 10) overflows
TIME_SCALE_RANGE = (1e-12, 1e12)

RNNS = ("cfc", "gru")
READOUTS = ("pool", "flatten")
#: the encoder's defaults here: a small gridified trunk per frame (any of them can be overridden)
ENCODER_DEFAULTS: Dict[str, Any] = dict(resolution=6, k=6, hidden_channels=32, depth=2, kernel_size=3, omega0=0.5)


class TemporalOutput(NamedTuple):
    """Outputs of :class:`TemporalGridifiedClassifier`.

    Shapes:
        logits ``[B, classes]`` (from the state after each sequence's last valid frame),
        frame_logits ``[B, T, classes]`` (from the state after each frame; at padded frames the
        carried state, to be ignored), states ``[B, T, H]``.
    """

    logits: Tensor
    frame_logits: Tensor
    states: Tensor


def timespans_from_times(times: Tensor, mask: Optional[Tensor] = None, first: float = 1.0) -> Tensor:
    """Elapsed time since the previous valid frame, ``first`` at each sequence's first valid frame.

    Padded (masked) frames get 0. The differences are taken in float64 (exact for float16/32
    times, and sub-second steps of Unix timestamps survive) and returned in ``times``' floating
    dtype (float64 for integer times). ``times`` must increase strictly over the valid frames.

    Shapes:
        times [B, T], mask [B, T] -> [B, T]
    """
    where = "timespans_from_times"
    times = check_tensor(where, "times", times)
    if times.dim() != 2 or times.dtype == torch.bool or times.is_complex():
        fail(where, f"times must be a real tensor of shape [B, T], got {tuple(times.shape)} {times.dtype}")
    mask = check_padding(where, mask, None, times.size(0), times.size(1), times.device)
    check_number(where, "first", first, strict=False)
    out_dtype = times.dtype if times.is_floating_point() else torch.float64
    return _timespans(times.double(), mask, float(first)).to(out_dtype)


def _timespans(times: Tensor, mask: Tensor, first: float) -> Tensor:
    out = torch.zeros_like(times)
    last = torch.full_like(times[:, 0], float("nan"))
    for t in range(times.size(1)):
        valid = mask[:, t]
        cur = times[:, t]
        dt = torch.where(torch.isnan(last), torch.full_like(cur, first), cur - last)
        out[:, t] = torch.where(valid, dt, torch.zeros_like(cur))
        last = torch.where(valid, cur, last)
    return out


def _delta_to_previous(seq: Tensor, mask: Tensor) -> Tensor:
    """``seq[b, t] - seq[b, t']`` with ``t'`` the previous valid frame (0 at first and padded frames).

    Shapes:
        seq [B, T, C], mask [B, T] -> [B, T, C]
    """
    out = torch.zeros_like(seq)
    prev = seq[:, 0]
    seen = torch.zeros_like(mask[:, 0])
    for t in range(seq.size(1)):
        valid = mask[:, t]
        out[:, t] = torch.where((valid & seen)[:, None], seq[:, t] - prev, torch.zeros_like(prev))
        prev = torch.where(valid[:, None], seq[:, t], prev)
        seen = seen | valid
    return out


@MODELS.register("temporal_cfc")
class TemporalGridifiedClassifier(nn.Module):
    r"""Classify sequences of point clouds observed at (irregular) times.

        z_{b,t} = Backbone(LN_c(Gridify(P_{b,t})))                (shared per-frame encoder)
        e_{b,t} = Pool(z_{b,t})                                   (frame_readout="pool")
        e_{b,t} = W vec(GELU(Conv_1x1x1(z_{b,t})))                (frame_readout="flatten")
        u_{b,t} = LN(e_{b,t})   or  [LN(e_{b,t}), LN(e_{b,t}) - LN(e_{b,t'})]   (frame_delta; t' the
                  previous valid frame, difference 0 at the first one)
        x_{b,t} = RNN(u_{b,t}, x_{b,t-1}, dt_{b,t})               (CfC or Delta-t GRU)
        frame_logits_{b,t} = Head(x_{b,t}),   logits_b = Head(x_{b,last valid t})

    ``dt`` is ``time_scale`` times the elapsed time since the previous valid frame
    (``first_timespan`` at the first one). ``rnn="cfc"`` uses :class:`gridify.nn.CfC` (the time
    enters the gate ``sigma(-f dt)``); ``rnn="gru"`` is the baseline :class:`gridify.nn.DeltaTGRU`
    (``dt`` concatenated to the frame embedding). The encoder is the trunk of a
    :class:`GridifiedClassifier` (its classification head is dropped); all valid frames of all
    sequences go through it in one batched call, padded frames are skipped.

    For motion the readout should keep the pose: ``"pool"`` (global ``pool`` over the grid after
    a convolutional backbone) is close to translation invariant, so it encodes where the object
    is only weakly; ``"flatten"`` keeps the grid layout (a 1x1x1 convolution to
    ``readout_channels`` channels, flattened, then a linear map to ``frame_features``).
    ``"flatten"`` ties the model to one ``resolution``.

    Args:
        in_channels: point features per frame (3 for xyz).
        num_classes: sequence classes.
        rnn: ``"cfc"`` or ``"gru"``.
        rnn_hidden: RNN state size ``H``.
        frame_readout: ``"pool"`` or ``"flatten"`` (see above).
        frame_delta: also feed the change of the (normalized) embedding since the previous valid
            frame, so the RNN sees the displacement directly (not divided by ``dt``: turning
            displacement into speed is still the RNN's job).
        readout_channels, frame_features: channels before flattening and the embedding size of
            the ``"flatten"`` readout (ignored for ``"pool"``).
        cfc_mode, cfc_backbone_units, cfc_backbone_layers, cfc_backbone_activation,
            cfc_backbone_dropout: of :class:`gridify.nn.CfCCell` (ignored for the GRU).
        time_scale: multiplies the elapsed times before the RNN (choose it so typical frame
            intervals are about 1), in :data:`TIME_SCALE_RANGE`.
        first_timespan: elapsed time assigned to each sequence's first frame (after scaling), at
            most ``TIME_SCALE_RANGE[1]``.
        dropout: of the encoder's backbone and of the head.
        encoder_kwargs: every other keyword argument of :class:`GridifiedClassifier` (``resolution``,
            ``k``, ``hidden_channels``, ``backbone``, ``depth``, ``kernel_size``, ``omega0``, ``aggr``,
            ``message``, ``pos_embedding``, ``pool``, ``backbone_kwargs``, ``bounds``, ``outside``),
            forwarded to the per-frame encoder; defaults :data:`ENCODER_DEFAULTS` (R = 6, k = 6,
            C = 32, 2 blocks, 3^3 kernels, omega0 = 0.5).

    Shapes:
        pos [B, T, N, 3], times [B, T], mask [B, T] or lengths [B] (default: all valid),
        x [B, T, N, F] (default: the coordinates) -> :class:`TemporalOutput`
        (logits [B, classes], frame_logits [B, T, classes], states [B, T, H]).
    """

    #: what a checkpoint of this model declares (``gridify.checkpoint.model_task``)
    task = "sequence_classification"

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        *,
        rnn: str = "cfc",
        rnn_hidden: int = 64,
        cfc_mode: str = "default",
        cfc_backbone_units: int = 64,
        cfc_backbone_layers: int = 1,
        cfc_backbone_activation: str = "lecun_tanh",
        cfc_backbone_dropout: float = 0.0,
        time_scale: float = 1.0,
        first_timespan: float = 1.0,
        frame_readout: str = "pool",
        readout_channels: int = 8,
        frame_features: int = 64,
        frame_delta: bool = False,
        dropout: float = 0.1,
        **encoder_kwargs: Any,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        self._check_args(
            where,
            in_channels,
            num_classes,
            rnn,
            rnn_hidden,
            frame_readout,
            readout_channels,
            frame_features,
            frame_delta,
            time_scale,
            first_timespan,
            encoder_kwargs,
        )
        self.encoder = GridifiedClassifier(
            in_channels, num_classes, dropout=dropout, **{**ENCODER_DEFAULTS, **encoder_kwargs}
        )
        self.encoder.head = nn.Identity()  # the trunk only: embed() per frame
        self.frame_readout = frame_readout
        feat = self._build_readout(where, frame_readout, readout_channels, frame_features)
        self.frame_norm = nn.LayerNorm(feat)
        self.frame_delta = frame_delta
        rnn_in = 2 * feat if frame_delta else feat
        if rnn == "cfc":
            self.rnn: nn.Module = CfC(
                rnn_in,
                rnn_hidden,
                backbone_units=cfc_backbone_units,
                backbone_layers=cfc_backbone_layers,
                backbone_activation=cfc_backbone_activation,
                backbone_dropout=cfc_backbone_dropout,
                mode=cfc_mode,
            )
        else:
            self.rnn = DeltaTGRU(rnn_in, rnn_hidden)
        self.head = nn.Sequential(nn.LayerNorm(rnn_hidden), nn.Dropout(dropout), nn.Linear(rnn_hidden, num_classes))
        self.rnn_type, self.time_scale, self.first_timespan = rnn, float(time_scale), float(first_timespan)
        self.in_channels, self.num_classes, self.feat_channels = in_channels, num_classes, feat

    @staticmethod
    def _check_args(
        where: str,
        in_channels: Any,
        num_classes: Any,
        rnn: Any,
        rnn_hidden: Any,
        frame_readout: Any,
        readout_channels: Any,
        frame_features: Any,
        frame_delta: Any,
        time_scale: Any,
        first_timespan: Any,
        encoder_kwargs: Dict[str, Any],
    ) -> None:
        """:meth:`__init__`'s own arguments, checked before the encoder is built."""
        check_positive_int(
            where,
            in_channels=in_channels,
            num_classes=num_classes,
            rnn_hidden=rnn_hidden,
            readout_channels=readout_channels,
            frame_features=frame_features,
        )
        check_choice(where, "frame_readout", frame_readout, READOUTS)
        if not isinstance(frame_delta, bool):
            raise TypeError(f"{where}: frame_delta must be a bool, got {type(frame_delta).__name__}")
        check_choice(where, "rnn", rnn, RNNS)
        low, high = TIME_SCALE_RANGE
        if not low <= check_number(where, "time_scale", time_scale) <= high:
            fail(
                where,
                f"time_scale must be in [{low:g}, {high:g}] (the scaled elapsed times are float32), got {time_scale!r}",
            )
        if check_number(where, "first_timespan", first_timespan, strict=False) > high:
            fail(
                where,
                f"first_timespan must be at most {high:g} (the scaled elapsed times are float32), "
                f"got {first_timespan!r}",
            )
        check_parameters(
            where,
            f"rnn_hidden={rnn_hidden}, num_classes={num_classes}",
            rnn_hidden * (3 * rnn_hidden + num_classes + 4),
        )
        if "num_classes" in encoder_kwargs or "in_channels" in encoder_kwargs:
            raise TypeError(f"{where}: in_channels/num_classes are given once, as the first two arguments")

    def _build_readout(self, where: str, frame_readout: str, readout_channels: int, frame_features: int) -> int:
        """Set ``self.readout`` (None for ``"pool"``) on the encoder's grid; returns the frame embedding size."""
        hidden_channels, resolution = self.encoder.gridify.out_channels, self.encoder.resolution
        if frame_readout == "flatten":
            check_parameters(
                where,
                f"frame_readout='flatten' with readout_channels={readout_channels}, "
                f"frame_features={frame_features} at resolution={resolution}",
                readout_channels * resolution**3 * frame_features,
            )
            self.readout: Optional[nn.Module] = nn.Sequential(
                nn.Conv3d(hidden_channels, readout_channels, 1),
                nn.GELU(),
                nn.Flatten(1),
                nn.Linear(readout_channels * resolution**3, frame_features),
            )
            return frame_features
        self.readout = None
        return hidden_channels * (2 if self.encoder.pool == "meanmax" else 1)

    def embed_frames(self, pos: Tensor, x: Optional[Tensor] = None) -> Tensor:
        """Per-frame embeddings of ``M`` frames in one batched encoder call. [M, N, 3] -> [M, C]"""
        if self.readout is None:
            return self.encoder.embed(pos, x)
        return self.readout(self.encoder.trunk(pos, x))

    def forward(
        self,
        pos: Tensor,
        times: Optional[Tensor] = None,
        mask: Optional[Tensor] = None,
        lengths: Optional[Tensor] = None,
        x: Optional[Tensor] = None,
    ) -> TemporalOutput:
        where = type(self).__name__
        pos, x, mask = self._check_frames(where, pos, x, mask, lengths)
        timespans = self._timespans(where, pos, times, mask)
        with trusted_inputs():  # everything below runs on inputs validated above
            emb = self.embed_frames(pos[mask], None if x is None else x[mask])  # [M, C], one batched call
            seq = emb.new_zeros(pos.size(0), pos.size(1), emb.size(-1))
            seq[mask] = self.frame_norm(emb)
            if self.frame_delta:
                seq = torch.cat([seq, _delta_to_previous(seq, mask)], -1)
            states, last = self.rnn(seq, timespans.to(seq.dtype), mask=mask)
            return TemporalOutput(self.head(last), self.head(states), states)

    def _check_frames(
        self, where: str, pos: Tensor, x: Optional[Tensor], mask: Optional[Tensor], lengths: Optional[Tensor]
    ) -> Tuple[Tensor, Optional[Tensor], Tensor]:
        """Validate ``pos``/``x`` (shapes, dtypes, devices, finite at valid frames) and the padding."""
        if not isinstance(pos, Tensor) or pos.dim() != 4 or pos.size(-1) != 3:
            fail(
                where,
                f"pos must be a tensor of shape [B, T, N, 3], got "
                f"{tuple(pos.shape) if isinstance(pos, Tensor) else type(pos).__name__}",
            )
        check_float(where, "pos", pos)
        b, t, n, _ = pos.shape
        if x is not None and (not isinstance(x, Tensor) or x.dim() != 4 or tuple(x.shape[:3]) != (b, t, n)):
            fail(
                where,
                f"x must have shape [B, T, N, F] = [{b}, {t}, {n}, F], got "
                f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}",
            )
        if x is not None:
            check_device(where, "x", x, pos.device)
            if x.is_floating_point():
                check_float(where, "x", x)
        mask = check_padding(where, mask, lengths, b, t, pos.device, min_length=1)
        if b and not bool(mask.any(1).all()):
            fail(where, f"sequence {int((~mask.any(1)).nonzero()[0])} has no valid frame")
        for name, value in (("pos", pos), ("x", x)):
            if value is not None and value.is_floating_point():
                _check_frames_finite(where, name, value, mask)
        self._check_frames_in_box(where, pos, mask)
        return pos, x, mask

    def _check_frames_in_box(self, where: str, pos: Tensor, mask: Tensor) -> None:
        """Points of valid frames outside the encoder's grid box, named by sequence, frame and point
        (the encoder itself would only see the flattened frames)."""
        layer = self.encoder.gridify
        if getattr(layer, "outside", "error") != "error" or pos.numel() == 0:
            return
        grid = layer.grid
        inside = grid.contains_unchecked(pos.reshape(-1, 3)).view(pos.shape[:3]) | ~mask[:, :, None]
        if not bool(inside.all()):
            b, t, p = (~inside).nonzero()[0].tolist()
            fail(
                where,
                f"pos has points outside the grid box {grid.lower}..{grid.upper} at valid frames "
                f"({int((~inside).sum())} points); first at sequence {b}, frame {t}, point {p} "
                f"{[round(v, 4) for v in pos[b, t, p].tolist()]}; normalize the frames into the box",
            )

    def _timespans(self, where: str, pos: Tensor, times: Optional[Tensor], mask: Tensor) -> Tensor:
        """``dt`` ``[B, T]`` in float64: ``first_timespan`` at first valid frames, else scaled differences."""
        b, t = mask.shape
        if times is None:
            times = torch.arange(t, dtype=torch.float64, device=pos.device).expand(b, t)
        else:
            if not isinstance(times, Tensor) or tuple(times.shape) != (b, t):
                fail(
                    where,
                    f"times must have shape [B, T] = [{b}, {t}], got "
                    f"{tuple(times.shape) if isinstance(times, Tensor) else type(times).__name__}",
                )
            if times.dtype == torch.bool or times.is_complex():
                fail(where, f"times must hold real numbers, got dtype {times.dtype}")
            check_device(where, "times", times, pos.device)
            times = times.double()  # difference first, cast later: large offsets keep small steps
            if not bool(torch.isfinite(times[mask]).all()):
                fail(where, "times contains NaN/Inf at valid frames")
        timespans = _timespans(times, mask, 0.0)
        later = mask & (torch.cumsum(mask.long(), 1) > 1)
        if bool((timespans[later] <= 0).any()):
            bi, ti = ((timespans <= 0) & later).nonzero()[0].tolist()
            fail(
                where,
                f"times must increase strictly over the valid frames of each sequence; sequence {bi} "
                f"frame {ti} is at {float(times[bi, ti]):g}, not after the previous valid frame",
            )
        first = mask & ~later
        timespans = torch.where(first, torch.full_like(timespans, self.first_timespan), timespans * self.time_scale)
        check_timespans(where, timespans, mask, module_dtype(self))
        return timespans


def _check_frames_finite(where: str, name: str, value: Tensor, mask: Tensor) -> None:
    """NaN/Inf in ``value [B, T, N, F]`` at valid frames, named by sequence, frame and point."""
    bad = ~torch.isfinite(value) & mask[:, :, None, None]
    if bool(bad.any()):
        b, t, p, _ = bad.nonzero()[0].tolist()
        what = "NaN" if bool(torch.isnan(value[b, t, p]).any()) else "Inf"
        fail(
            where,
            f"{name} contains {what} values at valid frames ({int(bad.any(-1).sum())} points affected); "
            f"first at sequence {b}, frame {t}, point {p}",
        )
