"""Kernel networks: small neural fields that map a relative position to kernel values.

A continuous convolution kernel is a function ``k: R^D -> R^C`` of the offset between an
output location and an input location. The networks here are evaluated on a lattice of
offsets (see :class:`gridify.nn.flexconv.SepFlexConv3d`) and return one kernel value per
channel, so a depthwise kernel of ``C`` channels is a network with ``out_channels = C``.

Coordinates are expected in normalised kernel units: the kernel's support is ``[-1, 1]^D``.

Three parameterisations are provided, registered in :data:`gridify.registry.KERNELS`:

* ``"magnet"`` -- :class:`MAGNet`, a multiplicative anisotropic Gabor network (FlexConv / CCNN
  default).
* ``"siren"`` -- :class:`SIRENKernel`, an MLP with sine activations.
* ``"rff"`` -- :class:`RFFKernel`, random Fourier features followed by a GELU MLP.

All three share the interface of :class:`KernelNet`: ``forward(coords [..., D]) -> [..., C]``,
``reset_parameters()``, and ``rescale_output(factor)`` which multiplies the last linear layer
(weights and bias, per output channel if ``factor`` is a vector). ``rescale_output`` is the hook
used by the CCNN initialisation, which rescales the last layer so that the *generated kernel*
has the variance a discrete kernel of the same size would have.

All ``omega0`` arguments are angular frequencies in radians per unit of the normalised kernel
coordinate, i.e. a first-layer unit computes ``sin(w . u + b)`` with ``|w_a| <= omega0``.

A kernel network called directly validates its coordinates (shape ``[..., D]``, the network's
dtype and device, finite); called by a layer that produced them (a lattice of offsets) it does
not re-validate (:func:`gridify._checks.checked_forward`). Widths whose parameters would exceed
the allocation limit are refused at construction.

Shapes:
    coords ``[..., D]`` -> kernel values ``[..., C]``
"""

from __future__ import annotations

import math
from typing import Union

import torch
from torch import Tensor, nn

from .._checks import check_frequency_scale, check_number, check_parameters, check_positive_int, checked_forward
from ..registry import KERNELS
from .inputs import check_coordinates

__all__ = ["KernelNet", "MAGNet", "SIRENKernel", "RFFKernel", "GaborFilter"]


class KernelNet(nn.Module):
    """Base class of the kernel networks ``phi_K: R^D -> R^C``.

        k(u) = W_out features(u) + b_out

    Subclasses define ``self.output_linear`` (the last :class:`torch.nn.Linear`) and implement
    ``features`` (everything before it) and ``reset_parameters``. The output layer is drawn as
    ``W ~ U(-sqrt(3/H), sqrt(3/H))`` with a zero bias and then rescaled (one scalar for all
    channels) so that the network output has root-mean-square ``output_scale`` over a fixed
    ``9^D`` lattice of ``[-1, 1]^D``. With the default ``output_scale=1`` this is the
    "variance preserving" initialisation the CCNN paper starts from (``Var(k) ~ 1``), whatever
    the hidden activations' scale (a MAGNet's products of Gabor envelopes are much smaller
    than 1); :class:`gridify.nn.flexconv.SepFlexConv3d` then applies the CCNN rescaling on top.

    Shapes:
        input ``[..., D]`` -> output ``[..., C]``
    """

    output_linear: nn.Linear

    def __init__(
        self, out_channels: int, hidden_channels: int, num_layers: int, omega0: float, dim: int, output_scale: float
    ) -> None:
        super().__init__()
        where = type(self).__name__
        check_positive_int(
            where, out_channels=out_channels, hidden_channels=hidden_channels, num_layers=num_layers, dim=dim
        )
        check_frequency_scale(where, "omega0", omega0)
        check_number(where, "output_scale", output_scale)
        check_parameters(
            where,
            f"out_channels={out_channels}, hidden_channels={hidden_channels}, num_layers={num_layers}",
            hidden_channels * (hidden_channels * num_layers + out_channels + 4 * dim + 2),
        )
        self.out_channels = out_channels
        self.hidden_channels = hidden_channels
        self.num_layers = num_layers
        self.omega0 = float(omega0)
        self.dim = dim
        self.output_scale = float(output_scale)

    def features(self, coords: Tensor) -> Tensor:  # pragma: no cover - abstract
        """Hidden representation ``[..., H]`` fed to the output layer."""
        raise NotImplementedError

    @checked_forward(check_coordinates)
    def forward(self, coords: Tensor) -> Tensor:
        self._check_coords(coords)
        return self.output_linear(self.features(coords))

    @torch.no_grad()
    def _reset_output(self) -> None:
        w = self.output_linear.weight
        bound = math.sqrt(3.0 / self.hidden_channels)
        nn.init.uniform_(w, -bound, bound)
        if self.output_linear.bias is not None:
            nn.init.zeros_(self.output_linear.bias)
        # Normalise the output RMS over a fixed reference lattice of the unit cube.
        axis = torch.linspace(-1.0, 1.0, 9, device=w.device, dtype=w.dtype)
        ref = torch.stack(torch.meshgrid(*([axis] * self.dim), indexing="ij"), dim=-1).reshape(-1, self.dim)
        rms = (self.features(ref) @ w.t()).square().mean().sqrt()
        w.mul_(self.output_scale / rms.clamp_min(1e-12))

    @torch.no_grad()
    def rescale_output(self, factor: Union[float, Tensor]) -> None:
        """Multiply the last linear layer by ``factor`` (scalar or one value per output channel).

        Because the output is linear in the last layer, this scales the generated kernel of
        channel ``c`` by ``factor[c]`` exactly.
        """
        w = self.output_linear.weight
        if isinstance(factor, Tensor):
            factor = factor.detach().to(device=w.device, dtype=w.dtype)
            if factor.dim() == 0:
                factor = factor.expand(self.out_channels)
            if factor.shape != (self.out_channels,):
                raise ValueError(
                    f"{type(self).__name__}.rescale_output: factor must be a scalar or have "
                    f"shape ({self.out_channels},), got {tuple(factor.shape)}"
                )
            if not bool(torch.isfinite(factor).all()):
                raise ValueError(f"{type(self).__name__}.rescale_output: factor must be finite")
            w.mul_(factor[:, None])
            if self.output_linear.bias is not None:
                self.output_linear.bias.mul_(factor)
        else:
            if not math.isfinite(float(factor)):
                raise ValueError(f"{type(self).__name__}.rescale_output: factor must be finite, got {factor!r}")
            w.mul_(float(factor))
            if self.output_linear.bias is not None:
                self.output_linear.bias.mul_(float(factor))

    def _check_coords(self, coords: Tensor) -> None:
        if coords.dim() < 1 or coords.shape[-1] != self.dim:
            raise ValueError(
                f"{type(self).__name__}: coordinates must have shape [..., {self.dim}], got {tuple(coords.shape)}"
            )

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, out_channels={self.out_channels}, hidden_channels={self.hidden_channels}, "
            f"num_layers={self.num_layers}, omega0={self.omega0:g}"
        )


class GaborFilter(nn.Module):
    r"""Anisotropic Gabor basis of one MAGNet layer.

        g_i(u) = exp(-1/2 sum_a (gamma_{i,a} (u_a - mu_{i,a}))^2) * sin(w_i . u + b_i)

    Initialisation (layer index ``l`` counted from 1): ``gamma_{i,a} = sqrt(G)`` with
    ``G ~ Gamma(alpha / l, beta)`` (so ``gamma^2`` is an inverse variance drawn as in
    multiplicative filter networks, with the per-layer ``alpha / l`` of MAGNet, giving wider
    envelopes in deeper layers), ``mu ~ U(-1, 1)^D``, ``w ~ omega0 * U(-1, 1)^D``,
    ``b ~ U(-pi, pi)``. All four are learnable.

    Shapes:
        input ``[..., D]`` -> output ``[..., H]``
    """

    def __init__(
        self, dim: int, hidden_channels: int, layer_index: int, omega0: float, alpha: float, beta: float
    ) -> None:
        super().__init__()
        self.dim, self.hidden_channels, self.layer_index = dim, hidden_channels, layer_index
        self.omega0, self.alpha, self.beta = omega0, alpha, beta
        self.linear = nn.Linear(dim, hidden_channels)
        self.gamma = nn.Parameter(torch.empty(hidden_channels, dim))
        self.mu = nn.Parameter(torch.empty(hidden_channels, dim))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        nn.init.uniform_(self.linear.weight, -self.omega0, self.omega0)
        nn.init.uniform_(self.linear.bias, -math.pi, math.pi)
        rate = torch.full_like(self.gamma, self.beta)
        conc = torch.full_like(self.gamma, self.alpha / self.layer_index)
        # Sample on the CPU in float64 (the Gamma sampler does not support every dtype/device).
        sample = torch.distributions.Gamma(conc.double().cpu(), rate.double().cpu()).sample()
        self.gamma.copy_(sample.sqrt().to(self.gamma))
        nn.init.uniform_(self.mu, -1.0, 1.0)

    def forward(self, u: Tensor) -> Tensor:
        # sum_a gamma_a^2 (u_a - mu_a)^2 expanded into two matrix products (no [..., H, D] tensor).
        g2 = self.gamma.square()  # [H, D]
        quad = (u * u) @ g2.t() - 2.0 * (u @ (g2 * self.mu).t()) + (g2 * self.mu.square()).sum(-1)
        envelope = torch.exp(-0.5 * quad.clamp_min(0.0))
        return envelope * torch.sin(self.linear(u))


@KERNELS.register("magnet")
class MAGNet(KernelNet):
    r"""Multiplicative Anisotropic Gabor Network (Romero et al., FlexConv; used by CCNN).

        h^(1) = g^(1)(u)
        h^(l) = (A^(l) h^(l-1) + c^(l)) * g^(l)(u),      l = 2..L
        k(u)  = W_out h^(L) + b_out

    with ``g^(l)`` the anisotropic Gabor bases of :class:`GaborFilter`
    (``exp(-1/2 ||gamma (u - mu)||^2) sin(W u + b)``, ``gamma^2 ~ Gamma(alpha / l, beta)``,
    ``W`` scaled by ``omega0``). ``num_layers = L`` counts the Gabor layers; there are
    ``L - 1`` hidden linear maps ``A^(l)`` (init ``U(-1/sqrt(H), 1/sqrt(H))``) and one output
    layer. A multiplicative network is a linear combination of products of Gabor functions, so
    its frequency content is controlled by ``omega0`` and the envelopes.

    Args:
        out_channels: number of kernel values per position ``C``.
        hidden_channels: width ``H`` (32 in CCNN_{4,140}).
        num_layers: number of Gabor layers ``L`` (3 in CCNN).
        omega0: frequency scale of the sine bases (radians per normalised kernel unit).
        alpha, beta: Gamma distribution parameters of the envelope widths.
        dim: dimension ``D`` of the coordinates.
        output_scale: root-mean-square of the output over ``[-1, 1]^D`` at initialisation.

    Shapes:
        input ``[..., D]`` -> output ``[..., C]``
    """

    def __init__(
        self,
        out_channels: int,
        hidden_channels: int = 32,
        num_layers: int = 3,
        omega0: float = 3.0,
        alpha: float = 6.0,
        beta: float = 1.0,
        dim: int = 3,
        output_scale: float = 1.0,
    ) -> None:
        super().__init__(out_channels, hidden_channels, num_layers, omega0, dim, output_scale)
        check_number("MAGNet", "alpha", alpha)
        check_number("MAGNet", "beta", beta)
        self.alpha, self.beta = float(alpha), float(beta)
        self.filters = nn.ModuleList(
            GaborFilter(dim, hidden_channels, l + 1, self.omega0, self.alpha, self.beta) for l in range(num_layers)
        )
        self.linears = nn.ModuleList(nn.Linear(hidden_channels, hidden_channels) for _ in range(num_layers - 1))
        self.output_linear = nn.Linear(hidden_channels, out_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for f in self.filters:
            f.reset_parameters()
        bound = 1.0 / math.sqrt(self.hidden_channels)
        for lin in self.linears:
            nn.init.uniform_(lin.weight, -bound, bound)
            nn.init.uniform_(lin.bias, -bound, bound)
        self._reset_output()

    def features(self, coords: Tensor) -> Tensor:
        h = self.filters[0](coords)
        for lin, filt in zip(self.linears, self.filters[1:]):
            h = lin(h) * filt(coords)
        return h


@KERNELS.register("siren")
class SIRENKernel(KernelNet):
    r"""SIREN kernel network (CKConv): an MLP with sine activations.

        h^(1) = sin(W^(1) u + b^(1)),            W^(1) ~ omega0 * U(-1, 1)
        h^(l) = sin(W^(l) h^(l-1) + b^(l)),      W^(l) ~ U(-sqrt(6/H), sqrt(6/H)),  l = 2..L
        k(u)  = W_out h^(L) + b_out

    The ``omega0`` factor is folded into the first layer's initial weights (not applied in the
    forward pass). ``num_layers = L`` counts the sine layers.

    Shapes:
        input ``[..., D]`` -> output ``[..., C]``
    """

    def __init__(
        self,
        out_channels: int,
        hidden_channels: int = 32,
        num_layers: int = 3,
        omega0: float = 3.0,
        dim: int = 3,
        output_scale: float = 1.0,
    ) -> None:
        super().__init__(out_channels, hidden_channels, num_layers, omega0, dim, output_scale)
        self.layers = nn.ModuleList(
            nn.Linear(dim if l == 0 else hidden_channels, hidden_channels) for l in range(num_layers)
        )
        self.output_linear = nn.Linear(hidden_channels, out_channels)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        first = self.layers[0]
        nn.init.uniform_(first.weight, -self.omega0, self.omega0)
        nn.init.uniform_(first.bias, -math.pi, math.pi)
        bound = math.sqrt(6.0 / self.hidden_channels)
        for lin in self.layers[1:]:
            nn.init.uniform_(lin.weight, -bound, bound)
            nn.init.uniform_(lin.bias, -1.0 / math.sqrt(self.hidden_channels), 1.0 / math.sqrt(self.hidden_channels))
        self._reset_output()

    def features(self, coords: Tensor) -> Tensor:
        h = coords
        for lin in self.layers:
            h = torch.sin(lin(h))
        return h


@KERNELS.register("rff")
class RFFKernel(KernelNet):
    r"""Random-Fourier-feature kernel network.

        z      = B u,  B in R^{H/2 x D},  B_ij ~ N(0, omega0^2)
        h^(1)  = [cos z, sin z]
        h^(l)  = GELU(W^(l) h^(l-1) + b^(l)),    l = 2..L
        k(u)   = W_out h^(L) + b_out

    ``num_layers = L`` counts the Fourier-feature layer plus the ``L - 1`` GELU layers. The
    frequencies ``B`` are fixed (a buffer) unless ``learnable_frequencies=True``.

    Shapes:
        input ``[..., D]`` -> output ``[..., C]``
    """

    def __init__(
        self,
        out_channels: int,
        hidden_channels: int = 32,
        num_layers: int = 3,
        omega0: float = 3.0,
        dim: int = 3,
        output_scale: float = 1.0,
        learnable_frequencies: bool = False,
    ) -> None:
        super().__init__(out_channels, hidden_channels, num_layers, omega0, dim, output_scale)
        if hidden_channels % 2 != 0:
            raise ValueError(f"RFFKernel: hidden_channels must be even (cos and sin halves), got {hidden_channels}")
        freqs = torch.empty(hidden_channels // 2, dim)
        self.learnable_frequencies = bool(learnable_frequencies)
        if self.learnable_frequencies:
            self.freqs = nn.Parameter(freqs)
        else:
            self.register_buffer("freqs", freqs)
        self.linears = nn.ModuleList(nn.Linear(hidden_channels, hidden_channels) for _ in range(num_layers - 1))
        self.output_linear = nn.Linear(hidden_channels, out_channels)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        self.freqs.normal_(0.0, self.omega0)
        for lin in self.linears:
            lin.reset_parameters()
        self._reset_output()

    def features(self, coords: Tensor) -> Tensor:
        z = coords @ self.freqs.t()
        h = torch.cat([torch.cos(z), torch.sin(z)], dim=-1)
        for lin in self.linears:
            h = torch.nn.functional.gelu(lin(h))
        return h
