"""Separable flexible-size continuous kernel convolution on dense 3D grids (SepFlexConv3d).

A depthwise kernel ``k_c(o)`` is a neural field of the offset ``o`` (a kernel network from
:mod:`gridify.nn.kernels`) times a learnable Gaussian mask, sampled on the lattice of grid
offsets, followed by a pointwise (1x1x1) linear layer. Because the kernel is a function of
physical position, the same layer can be applied to grids of another resolution by sampling
the kernel at the new spacing (resolution transfer).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import (
    check_choice,
    check_int,
    check_number,
    check_parameters,
    check_positive_int,
    checked_forward,
    fail,
    is_int,
)
from ..ops.grid import check_resolution
from ..registry import KERNELS
from . import kernels as _kernels  # noqa: F401  (registers "magnet", "siren", "rff")
from .depthwise import DepthwiseConv3dFunction, depthwise_conv3d_direct, next_fast_len
from .inputs import check_flexconv_input, check_grid_input, check_kernel_resolution, check_pointwise_input
from .state import all_or_nothing

__all__ = [
    "SepFlexConv3d",
    "PointwiseConv3d",
    "check_grid_input",
    "fft_depthwise_conv3d",
    "direct_depthwise_conv3d",
    "use_fft_conv",
    "next_fast_len",
    "DEFAULT_FFT_THRESHOLD",
    "DEFAULT_FFT_THRESHOLD_INFERENCE",
]

#: Default ``fft_threshold`` per device type when ``fft_threshold=None``: the FFT path is used
#: when the sampled kernel has at least this many taps per axis; ``None``: "auto" never picks it.
#: On CPU the direct path wins everywhere since its backward runs through
#: :class:`gridify.nn.depthwise.DepthwiseConv3dFunction`: measured (2 cores, AMD EPYC, torch
#: 2.13, 128 channels, batch 32, forward + backward) direct vs FFT 218 vs 562 ms at R = 10 with
#: 9 taps, 91 vs 168 ms with 5 taps, 763 vs 1240 ms at R = 13, 7.6 vs 9.2 s at R = 32; with the
#: larger kernels of MRConv 744 vs 1456 ms (R = 10, 19 taps), on par at R = 13 with 13 taps. The
#: CUDA value is a guess that has not been measured.
DEFAULT_FFT_THRESHOLD: Dict[str, Optional[int]] = {"cpu": None, "cuda": 11}

#: The same thresholds when no gradient is needed (inference). The direct grouped ``conv3d``
#: (oneDNN on CPU, in the channels-last layout the gridified models use) beats the FFT: measured
#: (2 cores, 128 channels, batch 32) 48 vs 333 ms at R = 9 with 9 taps, 72 vs 613 ms with 17 taps,
#: 138 vs 510 ms at R = 13, 115 vs 268 ms at R = 20 (batch 8).
DEFAULT_FFT_THRESHOLD_INFERENCE: Dict[str, Optional[int]] = {"cpu": None, "cuda": 11}


def use_fft_conv(
    fft: Union[str, bool], k: int, device: torch.device, threshold: Optional[int], needs_grad: bool
) -> bool:
    """Whether a depthwise convolution with ``k`` taps per axis should run through the FFT.

    ``fft=True``/``False`` force the choice; ``"auto"`` compares ``k`` with ``threshold`` or, when
    that is ``None``, with the per-device default for training (:data:`DEFAULT_FFT_THRESHOLD`)
    or, when no gradient is needed, for inference (:data:`DEFAULT_FFT_THRESHOLD_INFERENCE`).
    """
    if fft is True:
        return True
    if fft is False or k <= 1:
        return False
    if threshold is None:
        table = DEFAULT_FFT_THRESHOLD if needs_grad else DEFAULT_FFT_THRESHOLD_INFERENCE
        threshold = table.get(device.type, table["cuda"])
    return threshold is not None and k >= threshold


def direct_depthwise_conv3d(x: Tensor, kernel: Tensor) -> Tensor:
    r"""Depthwise cross-correlation with zero padding, same output size.

        y[b, c, i] = sum_o kernel[c, 0, o + P] x[b, c, i + o],   o in [-P, P]^3,  P = (K - 1) / 2

    Computed by the direct grouped ``conv3d``; when a gradient is needed, through
    :class:`gridify.nn.depthwise.DepthwiseConv3dFunction` (the same forward, a fast backward).

    Shapes:
        x ``[B, C, R, R, R]``, kernel ``[C, 1, K, K, K]`` (K odd) -> ``[B, C, R, R, R]``
    """
    if torch.is_grad_enabled() and (x.requires_grad or kernel.requires_grad):
        return DepthwiseConv3dFunction.apply(x, kernel)
    return depthwise_conv3d_direct(x, kernel)


def fft_depthwise_conv3d(x: Tensor, kernel: Tensor) -> Tensor:
    r"""The same depthwise cross-correlation as :func:`direct_depthwise_conv3d`, via FFT.

    Cross-correlation is convolution with the flipped kernel. Both signals are zero padded to
    ``N >= R + P`` per axis (rounded up to a 2-3-5-smooth size): the full linear convolution has
    length ``R + K - 1 = R + 2P`` and the wrapped-around tail of a length-``N`` circular
    convolution only lands on the first ``P`` samples, which are discarded, so the kept window
    ``[P, P + R)`` equals the linear (not circular) result exactly. Low-precision inputs are
    computed in float32.

    Shapes:
        x ``[B, C, R, R, R]``, kernel ``[C, 1, K, K, K]`` (K odd, K <= 2R - 1) -> ``[B, C, R, R, R]``;
        per axis: x ``[B, C, Rx, Ry, Rz]``, kernel ``[C, 1, Kx, Ky, Kz]`` (``K_a <= 2 R_a - 1``).
    """
    rs, ks = tuple(x.shape[-3:]), tuple(kernel.shape[-3:])
    ps = tuple((k - 1) // 2 for k in ks)
    for r, k, p in zip(rs, ks, ps):
        if p > r - 1:
            raise ValueError(f"fft_depthwise_conv3d: kernel size {k} exceeds 2R - 1 = {2 * r - 1}; crop it first")
    dtype = x.dtype
    work = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    size = tuple(next_fast_len(r + p) for r, p in zip(rs, ps))
    dims = (-3, -2, -1)
    xf = torch.fft.rfftn(x.to(work), s=size, dim=dims)
    kf = torch.fft.rfftn(torch.flip(kernel[:, 0].to(work), dims=dims), s=size, dim=dims)
    z = torch.fft.irfftn(xf * kf, s=size, dim=dims)
    (px, py, pz), (rx, ry, rz) = ps, rs
    return z[..., px : px + rx, py : py + ry, pz : pz + rz].to(dtype)


class PointwiseConv3d(nn.Conv3d):
    r"""A 1x1x1 convolution computed as a matrix product over the channel axis.

        y[b, :, p] = W x[b, :, p] + bias        (every grid node p)

    Same parameters (``weight [C_out, C_in, 1, 1, 1]``, ``bias [C_out]``) and the same result
    as :class:`torch.nn.Conv3d` with ``kernel_size=1``, but it runs as one GEMM on the
    channels-last view of the grid instead of a convolution kernel: on CPU a channels-last
    input otherwise falls back to the slow reference 3D convolution. Input in the channels-last
    layout (what :meth:`gridify.nn.RegularGrid.to_dense` returns) costs no copy, and the output
    is channels-last too.

    Shapes:
        input ``[B, C_in, R1, R2, R3]`` -> output ``[B, C_out, R1, R2, R3]``
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True) -> None:
        super().__init__(in_channels, out_channels, kernel_size=1, bias=bias)

    @checked_forward(check_pointwise_input)
    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 5 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"{type(self).__name__}: expected input [B, {self.in_channels}, R, R, R], got {tuple(x.shape)}"
            )
        w = self.weight.view(self.out_channels, self.in_channels)
        return F.linear(x.movedim(1, -1), w, self.bias).movedim(-1, 1)


def _check_flex_kernel_size(where: str, kernel_size: Union[int, str]) -> Union[int, str]:
    """An odd positive number of taps, or ``"global"`` (any case)."""
    if isinstance(kernel_size, str):
        if kernel_size.lower() != "global":
            fail(where, f"kernel_size must be an odd positive integer or 'global', got {kernel_size!r}")
        return "global"
    if not is_int(kernel_size) or kernel_size < 1:
        fail(where, f"kernel_size must be an odd positive integer or 'global', got {kernel_size!r}")
    if kernel_size % 2 == 0:
        fail(where, f"kernel_size must be odd (a centred lattice of offsets), got {kernel_size}")
    return int(kernel_size)


class SepFlexConv3d(nn.Module):
    r"""Separable FlexConv on a dense cubic grid: continuous depthwise kernel + pointwise linear.

        k_c(u) = phi_K(u)_c * m(u) * 1[||u||_inf <= 1],   m(u) = exp(-1/2 sum_a (u_a / sigma_a)^2)
        z_c(p) = s * sum_o k_c(o / rho) q(p + o) x_c(p + o)   (depthwise cross-correlation, zero padding)
        y(p)   = W z(p) + b                                   (pointwise 1x1x1 linear, C_in -> C_out)

    **Geometry.** The grid spans ``[-1, 1]^3`` with ``R`` nodes per axis, spacing
    ``h = 2 / (R - 1)``. A kernel of ``kernel_size = K`` built for the base resolution ``R0``
    covers physical offsets ``|o_a| <= rho = (K - 1) / 2 * h0``; the kernel network sees the
    normalised offset ``u = o / rho in [-1, 1]^3``. ``kernel_size="global"`` means ``K = 2 R0 - 1``
    (``rho = 2``: every node sees the whole grid). Taps beyond ``2R - 1`` (which could never
    touch the input) are cropped.

    **Resolution transfer.** On an input of resolution ``R != R0`` the kernel is re-sampled at
    the new spacing ``h``: ``K' = `` nearest odd integer to ``(K - 1)(R - 1)/(R0 - 1) + 1``
    (cropped to ``2R - 1``), taps at ``u = j h / rho``, and values multiplied by
    ``s = (h / h0)^3`` so that the sum approximates the same integral
    ``int k(o) x(p + o) do / h0^3``. At the base resolution ``s = 1``. (``K = 1`` is a pure
    per-channel scale and is not rescaled.) ``base_resolution=None`` takes ``R0`` from the first
    input; it is stored in a buffer, so it travels with the ``state_dict``.

    **Per-axis grids.** Built with ``cubic=False`` the layer also takes a non-cubic grid
    ``[B, C, Rx, Ry, Rz]`` (a flat scene). The kernel stays one function on the normalised box
    ``[-1, 1]^3`` with the same ``rho`` on every axis; each axis is sampled at its own spacing
    ``h_a = 2 / (R_a - 1)``: ``P_a = round(P0 (R_a - 1) / (R0 - 1))`` (at most ``R_a - 1``), so
    ``kernel_size="global"`` gives ``2 R_a - 1`` taps per axis, and the values are multiplied by
    ``s = prod_a h_a / h0``. A first input that is not cubic sets ``R0`` to its largest axis
    (``kernel_size`` taps along it); the CCNN rescaling is calibrated on the cubic base lattice.
    With the default ``cubic=True`` a non-cubic input is refused.

    **Quadrature.** The grid nodes include the domain's faces (``linspace(-1, 1, R)``), and a face
    node only stands for half a cell of the domain. ``quadrature="trapezoid"`` (default) weights
    the input nodes by ``q(p) = prod_a q_a`` with ``q_a = 1/2`` on the two faces of axis ``a`` and 1
    inside (trapezoidal rule), making the sum an O(h^2) instead of O(h) approximation of the
    integral; in the resolution-transfer test this cuts the R=9 vs R=13 mismatch about 5-fold.
    ``"rectangle"`` (``q = 1``) is the plain discrete convolution.

    **CCNN initialisation.** A kernel network initialised the usual way produces kernel values of
    variance ~1, so each convolution multiplies the activation variance by the number of taps it
    sums over (the paper measures logits ~1e19 without a fix). The CCNN paper rescales the last
    layer of the kernel network so the generated kernel has variance ``g^2 / (C_in |Omega|)``,
    the He/LeCun fan-in of a dense convolution. Here the convolution is *depthwise*: every
    output channel sums over ``|Omega|`` taps of one input channel, so the fan-in is ``|Omega|``
    (not ``C_in |Omega|``; the channel mixing is the separately initialised pointwise layer with
    ``W ~ N(0, 1/C_in)``). ``|Omega|`` is made exact for the actual layer: with zero padding and
    the quadrature weights, tap ``j`` (offset in cells) contributes with mean squared weight
    ``w(j) = mean_p q(p + j)^2 1[p + j inside]`` over the output nodes ``p`` (for
    ``"rectangle"``: ``prod_a (R0 - |j_a|) / R0``), and the mask scales the taps, so
    ``kernel_init="ccnn"`` rescales the last layer of ``phi_K`` per channel such that

        sum_j w(j) k_c(j)^2 = gain^2      for every channel c,

    i.e. ``E[k^2] = gain^2 / |Omega_eff|`` with ``|Omega_eff| = sum_j w(j)`` for an unmasked,
    position-independent kernel. A unit-variance white-noise input then gives depthwise outputs
    of unit variance (averaged over positions) and, after the pointwise layer, unit variance
    again. The calibration is exact for spatially uncorrelated inputs; a smooth (correlated)
    input is amplified by up to the kernel's low-frequency gain ``(sum_j k(j))^2``, which is
    large for smooth kernels (small ``omega0``, wide mask): a 3-block CCNN (``K = 9``, ``R = 9``)
    on white noise ends with an output std of about 2-2.5 (vs ~30 without the rescaling). The
    rescaling needs ``R0``; with ``base_resolution=None`` it happens on the first forward pass
    (in place, under ``no_grad``). ``kernel_init="none"`` keeps the kernel network's
    own variance-preserving (``Var(k) ~ 1``) initialisation, for comparison.

    **Convolution backend.** ``fft=True`` uses :func:`fft_depthwise_conv3d`, ``False`` uses
    ``F.conv3d(groups=C)``; ``"auto"`` uses the FFT once the sampled kernel has at least
    ``fft_threshold`` taps per axis (default per device: :data:`DEFAULT_FFT_THRESHOLD`). Both
    compute the same cross-correlation (``y(p) = sum_o k(o) x(p + o)``).

    Args:
        in_channels: ``C_in`` (also the number of depthwise kernels).
        out_channels: ``C_out`` of the pointwise layer.
        kernel_size: odd number of taps per axis at the base resolution, or ``"global"``.
        kernel_net: registry name of the kernel network (``"magnet"``, ``"siren"``, ``"rff"``).
        kernel_hidden: hidden width of the kernel network.
        kernel_layers: number of layers of the kernel network.
        omega0: frequency scale of the kernel network (radians per normalised kernel unit).
        mask: use the learnable Gaussian mask (FlexConv).
        mask_init: initial mask width ``sigma`` (all axes) in normalised kernel units.
        fft: ``"auto"``, ``True`` or ``False``.
        fft_threshold: taps per axis from which ``"auto"`` uses the FFT (``None``: per device).
        base_resolution: resolution ``R0`` the layer is built for (``None``: first input).
        bias: add a bias in the pointwise layer.
        kernel_init: ``"ccnn"`` (default) or ``"none"``.
        gain: target gain ``g`` of the CCNN initialisation.
        quadrature: ``"trapezoid"`` (default) or ``"rectangle"`` input-node weights.
        cubic: True (default) accepts only cubic grids; False any ``[B, C, Rx, Ry, Rz]``.

    Shapes:
        input ``[B, C_in, R, R, R]`` (any ``R >= 2``) -> output ``[B, C_out, R, R, R]``;
        with ``cubic=False``: ``[B, C_in, Rx, Ry, Rz]`` -> ``[B, C_out, Rx, Ry, Rz]`` (each ``R_a >= 2``)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Union[int, str] = 9,
        kernel_net: str = "magnet",
        kernel_hidden: int = 32,
        kernel_layers: int = 3,
        omega0: float = 3.0,
        mask: bool = True,
        mask_init: float = 0.5,
        fft: Union[str, bool] = "auto",
        fft_threshold: Optional[int] = None,
        base_resolution: Optional[int] = None,
        bias: bool = True,
        kernel_init: str = "ccnn",
        gain: float = 1.0,
        quadrature: str = "trapezoid",
        cubic: bool = True,
    ) -> None:
        super().__init__()
        where = "SepFlexConv3d"
        check_positive_int(where, in_channels=in_channels, out_channels=out_channels)
        check_parameters(where, f"in_channels={in_channels}, out_channels={out_channels}", in_channels * out_channels)
        kernel_size = _check_flex_kernel_size(where, kernel_size)
        if not isinstance(kernel_net, str):
            fail(where, f"kernel_net must be a registry name such as 'magnet', got {kernel_net!r}")
        for name, v in (("mask_init", mask_init), ("gain", gain), ("omega0", omega0)):
            check_number(where, name, v)
        check_choice(where, "fft", fft, ("auto", True, False))
        check_int(where, "fft_threshold", fft_threshold, 1, allow_none=True)
        check_int(where, "base_resolution", base_resolution, 2, allow_none=True)
        check_choice(where, "kernel_init", kernel_init, ("ccnn", "none"))
        check_choice(where, "quadrature", quadrature, ("trapezoid", "rectangle"))
        check_choice(where, "cubic", cubic, (True, False))
        self.cubic = cubic

        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size: Union[int, str] = kernel_size
        self.kernel_net_name = kernel_net.lower()
        self.use_mask = bool(mask)
        self.mask_init = float(mask_init)
        self.fft = fft
        self.fft_threshold = fft_threshold
        self.kernel_init = kernel_init
        self.gain = float(gain)
        self.quadrature = quadrature

        self.kernel_net = KERNELS.build(
            kernel_net,
            out_channels=in_channels,
            hidden_channels=kernel_hidden,
            num_layers=kernel_layers,
            omega0=float(omega0),
            dim=3,
        )
        if self.use_mask:
            self.mask_log_sigma = nn.Parameter(torch.empty(3))
        else:
            self.register_parameter("mask_log_sigma", None)
        self.pointwise = PointwiseConv3d(in_channels, out_channels, bias=bias)
        # 0 = not known yet; persistent so a loaded model keeps its geometry and init.
        self.register_buffer("base_res", torch.tensor(int(base_resolution or 0), dtype=torch.long))
        self._lattice_cache: Dict[Tuple, Tuple[Tensor, Tensor, int, float]] = {}
        self._weight_cache: Dict[Tuple, Tensor] = {}
        self.reset_parameters()

    # ------------------------------------------------------------------ properties / geometry
    @property
    def base_resolution(self) -> Optional[int]:
        """The resolution ``R0`` the kernel's physical extent is defined at (``None`` until known)."""
        r = int(self.base_res)
        return r if r > 0 else None

    def _half_extent_cells(self) -> int:
        """Half-width ``P0`` of the base kernel in base cells (``rho = P0 * h0``)."""
        if self.kernel_size == "global":
            r0 = self.base_resolution
            if r0 is None:
                raise RuntimeError(
                    "SepFlexConv3d: kernel_size='global' needs the base resolution; pass "
                    "base_resolution=... or run a forward pass first"
                )
            return r0 - 1
        return (int(self.kernel_size) - 1) // 2

    def kernel_geometry(self, resolution: Optional[Union[int, Sequence[int]]] = None) -> Tuple[Any, Any, float]:
        """``(P, ratio, scale)`` for sampling at ``resolution`` (default: the base resolution).

        ``P`` is the half-width in cells of the sampled kernel (``K' = 2P + 1``), ``ratio`` the
        normalised-coordinate step ``h / rho`` and ``scale = (h / h0)^3`` the value rescaling.
        For a non-cubic ``(Rx, Ry, Rz)``: ``P`` and ``ratio`` per axis (tuples) and
        ``scale = prod_a h_a / h0`` (a cubic triple gives the int's values).
        """
        if isinstance(resolution, (tuple, list)):
            if resolution[0] == resolution[1] == resolution[2]:
                return self.kernel_geometry(int(resolution[0]))
            axes = [self.kernel_geometry(int(r)) for r in resolution]
            r0 = self.base_resolution
            scale = 1.0
            if r0 is not None and self._half_extent_cells() > 0:
                scale = math.prod((r0 - 1) / (int(r) - 1) for r in resolution)
            return tuple(g[0] for g in axes), tuple(g[1] for g in axes), scale
        p0 = self._half_extent_cells()
        r0 = self.base_resolution
        if resolution is None:
            resolution = r0
        if p0 == 0:
            return 0, 0.0, 1.0
        if resolution is None or r0 is None:  # integer kernel, geometry not yet known: base lattice
            return p0, 1.0 / p0, 1.0
        spacing_ratio = (r0 - 1) / (resolution - 1)  # h / h0
        p = int(math.floor(p0 / spacing_ratio + 0.5))  # nearest odd K' = 2p + 1
        p = max(0, min(p, resolution - 1))
        return p, spacing_ratio / p0, spacing_ratio**3

    def _lattice(
        self, resolution: Optional[Union[int, Sequence[int]]], device: torch.device, dtype: torch.dtype
    ) -> Tuple[Tensor, Tensor, Any, float]:
        p, step, scale = self.kernel_geometry(resolution)
        key = (p, step, str(device), dtype)
        hit = self._lattice_cache.get(key)
        if hit is not None:
            return hit
        ps, steps = (p, step) if isinstance(p, tuple) else ((p,) * 3, (step,) * 3)
        axes = [torch.arange(-q, q + 1, device=device, dtype=torch.float64) * t for q, t in zip(ps, steps)]
        coords = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)  # [Kx, Ky, Kz, 3]
        support = (coords.abs() <= 1.0 + 1e-9).all(-1)
        out = (coords.to(dtype), support.to(dtype), p, scale)
        if not torch.is_inference_mode_enabled():  # inference tensors cannot be reused under autograd
            if len(self._lattice_cache) > 16:
                self._lattice_cache.clear()
            self._lattice_cache[key] = out
        return out

    def node_weights(self, resolution: int) -> Tensor:
        """Per-axis quadrature weights ``q_a`` of the input nodes, shape ``[R]`` (float64)."""
        q = torch.ones(resolution, dtype=torch.float64)
        if self.quadrature == "trapezoid":
            q[0] = q[-1] = 0.5
        return q

    def _node_weights_3d(
        self, resolution: Union[int, Tuple[int, int, int]], device: torch.device, dtype: torch.dtype
    ) -> Tensor:
        key = (resolution, str(device), dtype)
        hit = self._weight_cache.get(key)
        if hit is None:
            if isinstance(resolution, tuple):
                qx, qy, qz = (self.node_weights(r) for r in resolution)
            else:
                qx = qy = qz = self.node_weights(resolution)
            hit = (qx[:, None, None] * qy[None, :, None] * qz[None, None, :]).to(device=device, dtype=dtype)
            if not torch.is_inference_mode_enabled():
                if len(self._weight_cache) > 16:
                    self._weight_cache.clear()
                self._weight_cache[key] = hit
        return hit

    def mask_values(self, coords: Tensor) -> Tensor:
        """Gaussian mask ``m(u)`` at normalised coordinates ``[..., 3]`` (ones without a mask)."""
        if self.mask_log_sigma is None:
            return torch.ones(coords.shape[:-1], device=coords.device, dtype=coords.dtype)
        inv_sigma = torch.exp(-self.mask_log_sigma).to(coords.dtype)
        return torch.exp(-0.5 * (coords * inv_sigma).square().sum(-1))

    @checked_forward(check_kernel_resolution)
    def kernel(self, resolution: Optional[Union[int, Sequence[int]]] = None) -> Tensor:
        """The sampled depthwise kernel ``[C_in, 1, K', K', K']`` for a grid of ``resolution``
        (``[C_in, 1, Kx, Ky, Kz]`` for a per-axis ``(Rx, Ry, Rz)``).

        Includes the mask, the support cut and the resolution rescaling ``(h / h0)^3``.
        Defaults to the base resolution.
        """
        if isinstance(resolution, (tuple, list)):
            resolution = check_resolution("SepFlexConv3d.kernel", resolution)
        else:
            check_int("SepFlexConv3d.kernel", "resolution", resolution, 2, allow_none=True)
        ref = self.pointwise.weight
        coords, support, p, scale = self._lattice(resolution, ref.device, ref.dtype)
        kx, ky, kz = (2 * q + 1 for q in p) if isinstance(p, tuple) else (2 * p + 1,) * 3
        values = self.kernel_net(coords.reshape(-1, 3))  # [K^3, C]
        weight = self.mask_values(coords).reshape(-1) * support.reshape(-1)
        if scale != 1.0:
            weight = weight * scale
        values = values * weight[:, None]
        return values.t().reshape(self.in_channels, 1, kx, ky, kz)

    # ------------------------------------------------------------------ init
    def reset_parameters(self) -> None:
        self.kernel_net.reset_parameters()
        if self.mask_log_sigma is not None:
            with torch.no_grad():
                self.mask_log_sigma.fill_(math.log(self.mask_init))
        nn.init.normal_(self.pointwise.weight, 0.0, 1.0 / math.sqrt(self.in_channels))
        if self.pointwise.bias is not None:
            nn.init.zeros_(self.pointwise.bias)
        if self.kernel_init == "ccnn" and self.base_resolution is not None:
            self._ccnn_rescale()

    def effective_fan_in(self) -> Tensor:
        """``w(j) = mean_p q(p + j)^2 1[p + j inside]`` on the base lattice, shape ``[K, K, K]``.

        The mean squared quadrature weight with which tap ``j`` reaches the input, averaged over
        the output nodes ``p`` (for ``"rectangle"``, the fraction of output nodes for which the
        tap falls inside the zero-padded grid). ``w.sum()`` is the effective fan-in.
        """
        r0 = self.base_resolution
        if r0 is None:
            raise RuntimeError("SepFlexConv3d.effective_fan_in: the base resolution is not known yet")
        p, _, _ = self.kernel_geometry(r0)
        q2 = self.node_weights(r0).square()
        w1 = torch.stack([q2[max(0, j) : r0 + min(0, j)].sum() / r0 for j in range(-p, p + 1)])
        return w1[:, None, None] * w1[None, :, None] * w1[None, None, :]

    @torch.no_grad()
    def _ccnn_rescale(self) -> None:
        """Rescale the kernel network's last layer so ``sum_j w(j) k_c(j)^2 = gain^2`` per channel."""
        k = self.kernel(self.base_resolution).double()  # [C, 1, K, K, K]
        w = self.effective_fan_in().to(k.device)
        energy = (k[:, 0].square() * w).flatten(1).sum(1)  # [C]
        factor = self.gain / energy.clamp_min(1e-30).sqrt()
        self.kernel_net.rescale_output(factor)

    # ------------------------------------------------------------------ forward
    def _use_fft(self, k: int, device: torch.device, needs_grad: bool = True) -> bool:
        return use_fft_conv(self.fft, k, device, self.fft_threshold, needs_grad)

    def _inference_kernel(self, r: Union[int, Tuple[int, int, int]]) -> Tensor:
        """The sampled kernel at resolution ``r``, cached while no parameter changes (inference).

        Used only when autograd is off and the module is in eval mode. The cache key holds every
        parameter's version counter, so an optimizer step, ``load_state_dict`` or any other
        in-place update of the weights invalidates it.
        """
        ref = self.pointwise.weight
        key = (
            r,
            ref.device,
            ref.dtype,
            tuple(p._version for p in self.parameters()),
            tuple(b._version for b in self.buffers()),
        )
        cache = getattr(self, "_kernel_cache", None)
        if cache is None or cache[0] != key:
            cache = (key, self.kernel(r))
            self._kernel_cache = cache
        return cache[1]

    def train(self, mode: bool = True) -> "SepFlexConv3d":
        self._kernel_cache = None
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):  # .to(), .cuda(), .double(): drop the cached kernel
        self._kernel_cache = None
        return super()._apply(fn, *args, **kwargs)

    @checked_forward(check_flexconv_input)
    def forward(self, x: Tensor) -> Tensor:
        r = check_grid_input("SepFlexConv3d", x, self.in_channels, 2, self.cubic)
        if not (x.shape[-3] == x.shape[-2] == x.shape[-1]):
            r = tuple(int(v) for v in x.shape[-3:])  # a per-axis grid (cubic=False)
        if self.base_resolution is None:  # the first forward fixes R0 and rescales: all or nothing
            with all_or_nothing(self, parameters=True):
                self.base_res.fill_(max(r) if isinstance(r, tuple) else r)
                if self.kernel_init == "ccnn":
                    self._ccnn_rescale()
                return self.forward(x)
        # Mixed precision: the kernel network and the depthwise (FFT) convolution run in the layer's
        # own precision with autocast off; the pointwise layer runs under autocast as usual.
        with torch.autocast(device_type=x.device.type, enabled=False):
            z = self._depthwise(x, r)
        return self.pointwise(z)

    def _depthwise(self, x: Tensor, r: Union[int, Tuple[int, int, int]]) -> Tensor:
        needs_grad = torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in self.parameters()))
        if not needs_grad and not self.training:
            kernel = self._inference_kernel(r)
        else:
            kernel = self.kernel(r)
        if x.dtype in (torch.float16, torch.bfloat16) and kernel.dtype in (torch.float32, torch.float64):
            x = x.to(kernel.dtype)
        if kernel.dtype != x.dtype:
            raise ValueError(
                f"SepFlexConv3d: input dtype {x.dtype} does not match the layer's dtype "
                f"{kernel.dtype}; convert the module with .to(dtype)"
            )
        if self.quadrature == "trapezoid":
            x = x * self._node_weights_3d(r, x.device, x.dtype)
        k = max(kernel.shape[-3:])
        if self._use_fft(k, x.device, needs_grad):
            return fft_depthwise_conv3d(x, kernel)
        return direct_depthwise_conv3d(x, kernel)

    def kernel_l2(self) -> Tensor:
        """Squared L2 norm of the generated depthwise kernels at the base resolution.

        ``sum_{c, j} k_c(j)^2`` -- the CCNN regulariser penalises the generated kernel rather
        than the kernel network's weights. Differentiable.
        """
        return self.kernel(self.base_resolution).square().sum()

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"kernel_net={self.kernel_net_name!r}, mask={self.use_mask}, fft={self.fft!r}, "
            f"base_resolution={self.base_resolution}, kernel_init={self.kernel_init!r}, "
            f"quadrature={self.quadrature!r}"
        )
