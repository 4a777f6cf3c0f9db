"""Neural fields for the positional embedding phi_pos of (de-)gridification.

ReLU MLPs are biased towards smooth functions; the thesis (requirement vi) asks for a field
that represents high frequencies, so phi_pos is a random-Fourier-feature field (default) or a
SIREN. Both map a relative position (offset) in R^D to an embedding in R^H.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from .._checks import check_frequency_scale, check_parameters, check_positive_int, checked_forward
from ..registry import POS_EMBEDDINGS
from .inputs import check_coordinates


@POS_EMBEDDINGS.register("rff")
class RandomFourierField(nn.Module):
    r"""Random-Fourier-feature field.

        z = B o,  B in R^{H/2 x D},  B_ij ~ N(0, (2 pi omega0)^2)  (trainable)
        phi(o) = W_2 GELU(W_1 [cos z, sin z] + b_1) + b_2

    ``omega0`` sets the frequency scale of the field (0.1 for ModelNet, 1.0 for ShapeNet).

    Args:
        in_features: dimension D of the offsets (3).
        out_features: embedding width H.
        hidden_features: width of the Fourier features and the hidden layer (default H; even).
        omega0: standard deviation of the frequencies in cycles per unit length.

    Shapes:
        input ``[*, D]`` -> output ``[*, H]``
    """

    def __init__(
        self, in_features: int = 3, out_features: int = 64, hidden_features: int | None = None, omega0: float = 0.1
    ) -> None:
        super().__init__()
        hidden_features = out_features if hidden_features is None else hidden_features
        check_positive_int(
            "RandomFourierField", in_features=in_features, out_features=out_features, hidden_features=hidden_features
        )
        check_frequency_scale("RandomFourierField", "omega0", omega0)
        check_parameters(
            "RandomFourierField",
            f"hidden_features={hidden_features}, out_features={out_features}",
            hidden_features * (in_features + 2 * hidden_features + out_features + 2),
        )
        self.in_features, self.out_features, self.omega0 = in_features, out_features, float(omega0)
        n_freq = max(1, hidden_features // 2)
        self.freqs = nn.Linear(in_features, n_freq, bias=False)
        self.lin1 = nn.Linear(2 * n_freq, hidden_features)
        self.lin2 = nn.Linear(hidden_features, out_features)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.freqs.weight, 0.0, 2 * math.pi * self.omega0)
        self.lin1.reset_parameters()
        self.lin2.reset_parameters()

    def fourier(self, offset: Tensor) -> Tensor:
        z = self.freqs(offset)
        return torch.cat([torch.cos(z), torch.sin(z)], -1)

    @checked_forward(check_coordinates)
    def forward(self, offset: Tensor) -> Tensor:
        return self.lin2(nn.functional.gelu(self.lin1(self.fourier(offset))))

    def inference_fn(self) -> Callable[[Tensor], Tensor]:
        r"""This field as a function for use without autograd, with fewer passes over memory.

        The same function as :meth:`forward`: ``[cos z, sin z] = sin([z + pi/2, z])`` comes from
        one matrix product with a phase bias and one in-place ``sin``, and the GELU runs in
        place. Agrees with :meth:`forward` to float rounding. Build it once per batch (it
        captures the current weights); the per-edge loop of gridification calls it per chunk.
        """
        w = self.freqs.weight  # [F, D]
        n_freq = w.size(0)
        w2 = torch.cat([w, w], 0).t()  # [D, 2F]
        phase = torch.cat([w.new_full((n_freq,), math.pi / 2), w.new_zeros(n_freq)])
        w1, b1 = self.lin1.weight.t(), self.lin1.bias
        wo, bo = self.lin2.weight.t(), self.lin2.bias

        def phi(offset: Tensor) -> Tensor:
            if offset.dtype != w.dtype:
                return self.forward(offset)
            f = torch.addmm(phase, offset, w2).sin_()
            hidden = torch.ops.aten.gelu_(torch.addmm(b1, f, w1))
            return torch.addmm(bo, hidden, wo)

        return phi


class _Sine(nn.Module):
    """``sin(W x + b)``; the first layer draws W with std ``2 pi omega0``, later ones the SIREN
    init ``U(-sqrt(6/n), sqrt(6/n))``."""

    def __init__(self, in_f: int, out_f: int, omega0: float, first: bool) -> None:
        super().__init__()
        self.linear = nn.Linear(in_f, out_f)
        self.omega0, self.first = omega0, first
        self.reset_parameters()

    def reset_parameters(self) -> None:
        n = self.linear.in_features
        bound = 2 * math.pi * self.omega0 * math.sqrt(3.0) if self.first else math.sqrt(6.0 / n)
        nn.init.uniform_(self.linear.weight, -bound, bound)
        nn.init.uniform_(self.linear.bias, -math.pi, math.pi)

    def forward(self, x: Tensor) -> Tensor:
        return torch.sin(self.linear(x))


@POS_EMBEDDINGS.register("siren")
class SIRENField(nn.Module):
    r"""SIREN field (Sitzmann et al. 2020).

        h_1 = sin(W_1 o + b_1),  h_l = sin(W_l h_{l-1} + b_l),  phi(o) = W_L h_{L-1} + b_L

    ``omega0`` has the same meaning as in :class:`RandomFourierField`: the first layer's weights
    have standard deviation ``2 pi omega0`` (frequencies in cycles per unit length); later layers
    use the SIREN initialization ``U(-sqrt(6/n), sqrt(6/n))``.

    Shapes:
        input ``[*, D]`` -> output ``[*, H]``
    """

    def __init__(
        self,
        in_features: int = 3,
        out_features: int = 64,
        hidden_features: int | None = None,
        omega0: float = 0.1,
        num_layers: int = 2,
    ) -> None:
        super().__init__()
        hidden_features = out_features if hidden_features is None else hidden_features
        check_positive_int(
            "SIRENField",
            in_features=in_features,
            out_features=out_features,
            hidden_features=hidden_features,
            num_layers=num_layers,
        )
        check_frequency_scale("SIRENField", "omega0", omega0)
        check_parameters(
            "SIRENField",
            f"hidden_features={hidden_features}, num_layers={num_layers}",
            hidden_features * (in_features + hidden_features * num_layers + out_features + 2),
        )
        self.in_features, self.out_features, self.omega0 = in_features, out_features, float(omega0)
        layers = [_Sine(in_features, hidden_features, float(omega0), True)]
        layers += [_Sine(hidden_features, hidden_features, float(omega0), False) for _ in range(num_layers - 1)]
        self.body = nn.Sequential(*layers)
        self.out = nn.Linear(hidden_features, out_features)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for layer in self.body:
            layer.reset_parameters()
        self.out.reset_parameters()

    @checked_forward(check_coordinates)
    def forward(self, offset: Tensor) -> Tensor:
        return self.out(self.body(offset))
