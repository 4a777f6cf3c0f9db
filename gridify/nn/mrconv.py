"""Multi-resolution depthwise convolution on dense 3D grids, with structural reparameterization.

MRConv (Cunningham et al., "Reparameterized Multi-Resolution Convolutions for Long Sequence
Modelling") builds a global kernel as the learnable sum of ``N`` branches whose kernels have a
growing support but the same number of parameters, each branch followed by its own BatchNorm.
The paper is 1D; :class:`MRConv3d` generalizes it to cubic grids ``[B, C, R, R, R]``. For
inference every BatchNorm and branch weight folds into the kernels and all branches merge into
ONE depthwise convolution (:meth:`MRConv3d.reparameterize`).

Validation: a layer called directly checks its grid (``[B, C, R, R, R]``, its dtype and device,
finite); called inside a backbone it does not re-validate. Kernel sizes follow the grid
(``2R - 1`` taps for a global branch), so a resolution whose kernels would exceed the
allocation limit is refused before anything is allocated, as are widths at construction.

Shapes:
    input ``[B, C, R, R, R]`` -> output ``[B, C, R, R, R]``
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import (
    check_alloc,
    check_choice,
    check_fraction,
    check_int,
    check_parameters,
    check_positive_int,
    checked_forward,
    is_int,
)
from .flexconv import DEFAULT_FFT_THRESHOLD, check_grid_input, direct_depthwise_conv3d, fft_depthwise_conv3d
from .inputs import check_grid_module_input

__all__ = ["MRConv3d", "MRConvSeparable3d", "KERNEL_TYPES", "MATMUL_MAX_BYTES"]

#: Branch kernel parameterizations of :class:`MRConv3d`.
KERNEL_TYPES = ("dilated", "fourier")

#: Largest per-layer Toeplitz matrix (``C R^6`` elements, in bytes) that a folded
#: :class:`MRConv3d` caches to run its merged kernel as one batched matrix product
#: (``fft="auto"`` only). On one CPU thread at ``R = 9, C = 64, B = 32`` this is ~10x faster
#: than the FFT for the global ``17^3`` kernel; larger layers use the direct convolution.
MATMUL_MAX_BYTES = 1 << 28
#: Taps per axis from which a folded (inference) layer runs as the cached per-channel matrix product.
MATMUL_MIN_TAPS = 5


def _pad_to(kernel: Tensor, size: int) -> Tensor:
    """Zero-pad a centred cubic kernel ``[..., s, s, s]`` (s odd) to ``[..., size, size, size]``."""
    p = (size - kernel.shape[-1]) // 2
    return F.pad(kernel, (p, p, p, p, p, p)) if p > 0 else kernel


def _crop_to(kernel: Tensor, size: int) -> Tensor:
    """Central crop of a cubic kernel ``[..., s, s, s]`` to ``[..., size, size, size]`` (size <= s, both odd)."""
    c = (kernel.shape[-1] - size) // 2
    return kernel[..., c : c + size, c : c + size, c : c + size] if c > 0 else kernel


class MRConv3d(nn.Module):
    r"""Depthwise multi-resolution convolution (MRConv) on a dense cubic grid.

    Training form (``N = num_branches`` parallel branches, ``*`` = depthwise cross-correlation
    with zero padding, ``alpha in R^{N x C}`` learnable):

        y_c = sum_{i=0}^{N-1} alpha_{i,c} BN_i( k_{i,c} * x_c )

    Inference form after :meth:`reparameterize` (BatchNorm with running statistics folded in:
    ``s_i = gamma_i / sqrt(var_i + eps)``; shorter kernels zero-padded to the largest support):

        K_c = sum_i alpha_{i,c} s_{i,c} pad(k_{i,c}),    b_c = sum_i alpha_{i,c} (beta_{i,c} - mu_{i,c} s_{i,c})
        y_c = K_c * x_c + b_c

    which equals the training form evaluated in eval mode (BatchNorm with running statistics).

    **Branch supports.** With ``K0 = kernel_size`` (odd, >= 3), branch ``i`` covers
    ``s_i = (K0 - 1) 2^i + 1`` taps per axis (3, 5, 9, 17, ... for ``K0 = 3``), capped at the
    global support ``2R - 1`` of the runtime grid ``R`` (a kernel that wide lets every node see
    the whole grid). With ``global_kernel=True`` (default) the last branch is always global:
    ``s_{N-1} = 2R - 1``. The supports are recomputed for every input, so one layer runs at any
    ``R >= 1``; ``N = log2((R - 1) / (K0 - 1)) + 2`` gives distinct supports (``N = 4`` at
    ``R = 9, K0 = 3``). On smaller grids several branches reach the global support.

    **Branch kernels** (a fixed parameter count per branch, whatever the support):

    * ``"dilated"``: ``K0^3`` taps per channel spread over the support at offsets
      ``round(linspace(-(s-1)/2, (s-1)/2, K0))`` per axis, i.e. a dilated kernel with dilation
      ``(s - 1) / (K0 - 1)`` (computed with ``conv3d(dilation=...)`` when that is an integer).
      Init ``w ~ N(0, 1 / K0^3)``.
    * ``"fourier"``: ``modes`` low frequencies per axis, ``f in {-(m-1)..m-1}^2 x {0..m-1}``
      (``(2m - 1)^2 m`` complex coefficients per channel), placed in the ``rfftn`` spectrum of
      the branch's support and transformed back, ``k = fftshift(irfftn(c, s=(s, s, s),
      norm="ortho"))``: a smooth band-limited kernel stretched over the support. The
      ``f_3 = 0`` plane is made Hermitian (``c_{-f} = conj(c_f)``) so the kernel is real;
      frequencies above a branch's Nyquist limit ``(s - 1) / 2`` are dropped. The orthonormal
      transform gives ``||k||_2 = ||c||_2`` at every support; init ``E ||k||^2 = 1``.
      ``sparse_taps = T > 0`` adds ``T`` learnable taps per channel at fixed random positions
      ``u in [-1, 1]^3`` (offset ``round(u (s - 1) / 2)``), the paper's Fourier + sparse kernel.

    Unit-energy kernels keep a white unit-variance input at unit variance per branch; ``alpha``
    starts as the kernel decay ``alpha_i = d^i / sqrt(sum_j d^{2j})`` (``d = decay``; shorter,
    local kernels weigh more, ``sum_i alpha_i^2 = 1``) and is learned.

    **Reparameterization** (:meth:`reparameterize`, in place, idempotent) needs the grid
    resolution the merged kernel is built for: ``resolution`` if given, else the resolution of
    the last input seen by ``forward`` (kept in the ``last_resolution`` buffer). The merged
    kernel has ``max_i s_i`` taps per axis (``2R - 1`` with a global branch) and runs as one
    depthwise convolution: direct, or, from ``fft_threshold`` taps per axis, FFT (as in
    :class:`gridify.backbones.blocks.DepthwiseSeparableConv3d`) or, with ``fft="auto"`` under
    ``torch.no_grad()`` when it fits in :data:`MATMUL_MAX_BYTES`, the same linear map as a cached
    per-channel ``R^3 x R^3`` Toeplitz matrix product (faster than the FFT on small grids). The
    folded layer still runs at other resolutions (the merged kernel is cropped or zero-extended)
    but equals the branch form only at the resolution it was folded for. A folded layer is inference-only: a forward pass
    in training mode with gradients enabled raises ``RuntimeError``. Its ``state_dict`` holds
    ``rep_weight [C, 1, S, S, S]``, ``rep_bias [C]`` and ``folded_resolution`` and loads into any
    folded layer of the same configuration (the kernel is resized on load).

    Args:
        channels: number of channels ``C`` (depthwise: input = output channels).
        num_branches: number of resolutions ``N``.
        kernel_size: support ``K0`` (odd, >= 3) of the first branch; also the taps per axis of
            the dilated kernels.
        kernel_type: ``"dilated"`` or ``"fourier"``.
        modes: Fourier modes per axis ``m`` (``"fourier"`` only).
        sparse_taps: extra sparse taps per channel and branch (``"fourier"`` only; 0 = none).
        global_kernel: make the last branch span the whole grid (``2R - 1`` taps).
        decay: initial kernel decay ``d in (0, 1]`` of ``alpha``.
        resolution: grid resolution to fold for (default: the last one seen).
        fft, fft_threshold: backend of the dense (non-dilated) convolutions: ``"auto"``
            (FFT from ``fft_threshold`` taps per axis, default per device), ``True``, ``False``.

    Shapes:
        input ``[B, C, R, R, R]`` -> output ``[B, C, R, R, R]``
    """

    reparameterized: bool

    def __init__(
        self,
        channels: int,
        num_branches: int = 4,
        kernel_size: int = 3,
        kernel_type: str = "dilated",
        modes: int = 2,
        sparse_taps: int = 0,
        global_kernel: bool = True,
        decay: float = 0.5,
        resolution: Optional[int] = None,
        fft: Union[str, bool] = "auto",
        fft_threshold: Optional[int] = None,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        check_positive_int(where, channels=channels, num_branches=num_branches, modes=modes)
        check_int(where, "sparse_taps", sparse_taps, 0)
        if is_int(kernel_size):
            check_parameters(
                where,
                f"channels={channels}, num_branches={num_branches}, kernel_size={kernel_size}, "
                f"modes={modes}, sparse_taps={sparse_taps}",
                num_branches * channels * (kernel_size**3 + 2 * (2 * modes - 1) ** 2 * modes + sparse_taps + 6),
            )
        if not is_int(kernel_size) or kernel_size < 3 or kernel_size % 2 == 0:
            raise ValueError(
                f"{where}: kernel_size must be an odd integer >= 3 (support of the first branch), got {kernel_size!r}"
            )
        check_choice(where, "kernel_type", kernel_type, KERNEL_TYPES)
        if sparse_taps and kernel_type != "fourier":
            raise ValueError(
                f"{where}: sparse_taps={sparse_taps} needs kernel_type='fourier' (sparse taps are "
                f"added to the Fourier kernels), got kernel_type={kernel_type!r}"
            )
        if not isinstance(global_kernel, bool):
            raise ValueError(f"{where}: global_kernel must be a bool, got {global_kernel!r}")
        check_fraction(where, "decay", decay)
        if resolution is not None and (not is_int(resolution) or resolution < 1):
            raise ValueError(f"{where}: resolution must be None or a positive integer, got {resolution!r}")
        if fft not in ("auto", True, False):
            raise ValueError(f"{where}: fft must be 'auto', True or False, got {fft!r}")
        if fft_threshold is not None:
            check_positive_int(where, fft_threshold=fft_threshold)
        self.channels, self.num_branches, self.kernel_size = channels, num_branches, kernel_size
        self.kernel_type, self.modes, self.sparse_taps = kernel_type, modes, sparse_taps
        self.global_kernel, self.decay, self.resolution = global_kernel, float(decay), resolution
        self.fft, self.fft_threshold = fft, fft_threshold
        self.reparameterized = False
        if kernel_type == "dilated":
            self.weight = nn.Parameter(torch.empty(num_branches, channels, kernel_size, kernel_size, kernel_size))
        else:
            f = 2 * modes - 1
            # real view of the complex coefficients c[i, c, f1, f2, f3] (f1, f2 centred, f3 >= 0)
            self.spectrum = nn.Parameter(torch.empty(num_branches, channels, f, f, modes, 2))
            if sparse_taps:
                self.sparse_weight = nn.Parameter(torch.empty(num_branches, channels, sparse_taps))
                self.register_buffer("sparse_pos", torch.rand(num_branches, sparse_taps, 3) * 2 - 1)
        self.alpha = nn.Parameter(torch.empty(num_branches, channels))
        self.norms = nn.ModuleList(nn.BatchNorm3d(channels) for _ in range(num_branches))
        self.register_buffer("last_resolution", torch.zeros((), dtype=torch.long))
        self.reset_parameters()

    # ------------------------------------------------------------------ parameters
    def reset_parameters(self) -> None:
        """Unit-energy branch kernels, decaying ``alpha``, fresh BatchNorms (see the class docstring)."""
        if self.reparameterized:
            raise RuntimeError(f"{type(self).__name__}: cannot reset a reparameterized (folded) layer")
        if self.kernel_type == "dilated":
            nn.init.normal_(self.weight, 0.0, 1.0 / math.sqrt(self.kernel_size**3))
        else:
            f, m = 2 * self.modes - 1, self.modes
            share = 0.5 if self.sparse_taps else 1.0
            # full-spectrum entries of a Hermitian kernel: f^3, the f3 = 0 plane counting half after symmetrization
            var = share / (f**3 - 0.5 * f**2)
            nn.init.normal_(self.spectrum, 0.0, math.sqrt(var / 2))
            with torch.no_grad():
                self.spectrum[:, :, m - 1, m - 1, 0, 1] = 0.0  # the imaginary part of the DC term has no effect
            if self.sparse_taps:
                nn.init.normal_(self.sparse_weight, 0.0, math.sqrt((1.0 - share) / self.sparse_taps))
        w = self.decay ** torch.arange(self.num_branches, dtype=torch.float64)
        w = w / w.square().sum().sqrt()
        with torch.no_grad():
            self.alpha.copy_(w[:, None].expand(-1, self.channels).to(self.alpha.dtype))
        for bn in self.norms:
            bn.reset_parameters()

    # ------------------------------------------------------------------ geometry
    def branch_supports(self, resolution: int) -> List[int]:
        """Taps per axis of every branch on a grid of ``resolution`` nodes per axis (see class docstring).

        Refuses a resolution whose dense branch kernels would exceed the allocation limit.
        """
        where = f"{type(self).__name__}.branch_supports"
        check_positive_int(where, resolution=resolution)
        cap = min(2 * resolution - 1, (self.kernel_size - 1) * 2 ** (self.num_branches - 1) + 1)
        if self.global_kernel:
            cap = 2 * resolution - 1
        check_alloc(
            where,
            f"resolution={resolution} ({self.num_branches} branch kernels of up to {cap}^3 taps x "
            f"{self.channels} channels, float64)",
            2 * self.num_branches * self.channels * cap**3 * 8,
        )
        cap = 2 * resolution - 1
        out = []
        for i in range(self.num_branches):
            s = (self.kernel_size - 1) * 2**i + 1
            if self.global_kernel and i == self.num_branches - 1:
                s = cap
            out.append(min(s, cap))
        return out

    def _dilated_offsets(self, support: int) -> Tuple[Tensor, int]:
        """Tap offsets (centred, per axis) of a dilated kernel spread over ``support`` taps, and the
        integer dilation (0 when the spread is not uniform or the kernel must be cropped)."""
        k0 = self.kernel_size
        n = max(k0, support)
        offs = torch.round(torch.linspace(-(n - 1) / 2, (n - 1) / 2, k0, dtype=torch.float64)).long()
        dilation = (n - 1) // (k0 - 1) if (n - 1) % (k0 - 1) == 0 and n == support else 0
        return offs, dilation

    def branch_kernel(self, index: int, support: int) -> Tensor:
        """The dense (unnormalized) kernel of branch ``index`` with ``support`` taps per axis.

        Shapes:
            -> ``[C, support, support, support]``
        """
        if self.reparameterized:
            raise RuntimeError(f"{type(self).__name__}: the branches were merged by reparameterize()")
        where = f"{type(self).__name__}.branch_kernel"
        check_int(where, "index", index, 0)
        if index >= self.num_branches:
            raise ValueError(f"{where}: index must be a branch in [0, {self.num_branches}), got {index}")
        check_int(where, "support", support)
        if support % 2 == 0:
            raise ValueError(f"{where}: support must be odd (a centred kernel), got {support}")
        check_alloc(
            where,
            f"support={support} ({support}^3 taps x {self.channels} channels)",
            self.channels * support**3 * 8 * 2,
        )
        s, c = support, self.channels
        if self.kernel_type == "dilated":
            offs, _ = self._dilated_offsets(s)
            idx = offs + (s - 1) // 2
            keep = (idx >= 0) & (idx < s)  # taps beyond the support (only when K0 > 2R - 1) never see the input
            idx = idx[keep].to(self.weight.device)
            keep = keep.to(self.weight.device)
            w = self.weight[index][:, keep][:, :, keep][:, :, :, keep]
            kernel = self.weight.new_zeros(c, s, s, s)
            chan = torch.arange(c, device=w.device)[:, None, None, None]
            return kernel.index_put(
                (chan, idx[None, :, None, None], idx[None, None, :, None], idx[None, None, None, :]), w
            )
        m = self.modes
        spec = torch.view_as_complex(self.spectrum[index])  # [C, 2m-1, 2m-1, m]
        plane = spec[..., 0]
        plane = 0.5 * (plane + plane.flip(-2, -1).conj())  # Hermitian f3 = 0 plane: a real kernel
        spec = torch.cat([plane[..., None], spec[..., 1:]], dim=-1)
        keep = min(m - 1, (s - 1) // 2)  # frequencies above the branch's Nyquist limit are dropped
        spec = spec[:, m - 1 - keep : m + keep, m - 1 - keep : m + keep, : keep + 1]
        dev = spec.device
        full = spec.new_zeros(c, s, s, s // 2 + 1)
        f = torch.arange(-keep, keep + 1, device=dev) % s
        full = full.index_put(
            (
                torch.arange(c, device=dev)[:, None, None, None],
                f[None, :, None, None],
                f[None, None, :, None],
                torch.arange(keep + 1, device=dev)[None, None, None, :],
            ),
            spec,
        )
        kernel = torch.fft.irfftn(full, s=(s, s, s), dim=(-3, -2, -1), norm="ortho")
        kernel = torch.fft.fftshift(kernel, dim=(-3, -2, -1))
        if self.sparse_taps:
            pos = torch.round(self.sparse_pos[index] * ((s - 1) / 2)).long() + (s - 1) // 2  # [T, 3]
            flat = kernel.permute(1, 2, 3, 0)  # [s, s, s, C]
            flat = flat.index_put((pos[:, 0], pos[:, 1], pos[:, 2]), self.sparse_weight[index].t(), accumulate=True)
            kernel = flat.permute(3, 0, 1, 2)
        return kernel

    def merged_kernel(self, resolution: int) -> Tuple[Tensor, Tensor]:
        """The single kernel and bias equivalent (in eval mode) to the branch sum at ``resolution``.

        Computed in float64 from the BatchNorm running statistics; no state changes.

        Shapes:
            -> weight ``[C, 1, S, S, S]`` (``S = max_i s_i``), bias ``[C]``
        """
        supports = self.branch_supports(resolution)
        size = max(supports)
        weight: Optional[Tensor] = None
        bias: Optional[Tensor] = None
        for i, (s, bn) in enumerate(zip(supports, self.norms)):
            assert isinstance(bn, nn.BatchNorm3d) and bn.running_var is not None and bn.running_mean is not None
            k = self.branch_kernel(i, s).double()
            scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
            shift = bn.bias.double() - bn.running_mean.double() * scale
            a = self.alpha[i].double()
            term = _pad_to(k, size) * (a * scale)[:, None, None, None]
            weight = term if weight is None else weight + term
            bias = a * shift if bias is None else bias + a * shift
        assert weight is not None and bias is not None
        dtype = self.alpha.dtype
        return weight[:, None].to(dtype), bias.to(dtype)

    # ------------------------------------------------------------------ reparameterization
    def reparameterize(self, resolution: Optional[int] = None) -> "MRConv3d":
        """Fold BatchNorms and ``alpha`` into the kernels and merge all branches into one conv (in place).

        Uses the BatchNorm running statistics (eval-mode semantics). ``resolution``: the grid
        the merged kernel is built for (default: ``self.resolution``, else the last input's).
        A layer that has seen no input and has no ``resolution`` folds to a placeholder kernel
        that only serves to load folded weights (a forward pass before that raises). Idempotent.
        """
        if self.reparameterized:
            return self
        if resolution is not None:
            check_positive_int(f"{type(self).__name__}.reparameterize", resolution=resolution)
        r = resolution or self.resolution or int(self.last_resolution)
        ref = self.alpha
        with torch.no_grad():
            if r:
                weight, bias = self.merged_kernel(r)
            else:
                weight, bias = ref.new_zeros(self.channels, 1, 1, 1, 1), ref.new_zeros(self.channels)
        for name in ("weight", "spectrum", "sparse_weight", "alpha"):
            if hasattr(self, name):
                delattr(self, name)
        if hasattr(self, "sparse_pos"):
            delattr(self, "sparse_pos")
        del self.norms
        self.rep_weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
        self.rep_bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.register_buffer("folded_resolution", torch.tensor(r, dtype=torch.long, device=ref.device))
        self.reparameterized = True
        return self

    def _load_from_state_dict(self, state_dict: Dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        key = prefix + "rep_weight"
        if self.reparameterized and key in state_dict:
            incoming = state_dict[key]
            if (
                isinstance(incoming, Tensor)
                and incoming.dim() == 5
                and incoming.shape[:2] == (self.channels, 1)
                and incoming.shape != self.rep_weight.shape
            ):
                # the merged kernel's size depends on the resolution it was folded for
                self.rep_weight = nn.Parameter(self.rep_weight.new_empty(incoming.shape), requires_grad=False)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # ------------------------------------------------------------------ forward
    def _use_fft(self, k: int, device: torch.device) -> bool:
        if self.fft is True:
            return k > 1
        if self.fft is False or k <= 1:
            return False
        threshold = self.fft_threshold or DEFAULT_FFT_THRESHOLD.get(device.type, DEFAULT_FFT_THRESHOLD["cuda"])
        return threshold is not None and k >= threshold

    def _depthwise(self, x: Tensor, kernel: Tensor) -> Tensor:
        """Same-size depthwise cross-correlation with a dense kernel ``[C, 1, k, k, k]`` (k <= 2R - 1)."""
        k = kernel.shape[-1]
        if self._use_fft(k, x.device):
            return fft_depthwise_conv3d(x, kernel)
        return direct_depthwise_conv3d(x, kernel)

    def _toeplitz(self, kernel: Tensor, r: int) -> Tensor:
        """Per-channel matrices ``T_c[p, q] = K_c[q - p + P]`` of the folded conv (cached).

        Shapes:
            kernel ``[C, 1, k, k, k]`` (k <= 2R - 1) -> ``[C, R^3, R^3]``
        """
        key = (r, kernel.shape[-1], kernel.device, kernel.dtype, self.rep_weight._version, self.rep_weight.data_ptr())
        cached = getattr(self, "_toeplitz_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        size = 2 * r - 1
        full = _pad_to(kernel[:, 0], size).reshape(self.channels, -1)
        g = torch.arange(r, device=kernel.device)
        d = g[None, :] - g[:, None] + (r - 1)  # [p, q] -> q - p + P along one axis
        idx = (
            d[:, None, None, :, None, None] * size * size
            + d[None, :, None, None, :, None] * size
            + d[None, None, :, None, None, :]
        ).reshape(r**3, r**3)
        with torch.no_grad():
            mat = full[:, idx]
        self._toeplitz_cache = (key, mat)
        return mat

    def _folded_conv(self, x: Tensor, kernel: Tensor) -> Tensor:
        b, c, r = x.shape[0], self.channels, x.shape[-1]
        k = kernel.shape[-1]
        if (
            self.fft == "auto"
            and k >= MATMUL_MIN_TAPS
            and not torch.is_grad_enabled()
            and c * r**6 * x.element_size() <= MATMUL_MAX_BYTES
        ):
            mat = self._toeplitz(kernel, r)
            flat = x.reshape(b, c, r**3).permute(1, 2, 0)  # [C, R^3, B]
            return torch.bmm(mat, flat).permute(2, 0, 1).reshape(b, c, r, r, r)
        return self._depthwise(x, kernel)

    def _branch_conv(self, x: Tensor, index: int, support: int) -> Tensor:
        if self.kernel_type == "dilated":
            _, dilation = self._dilated_offsets(support)
            if dilation:
                pad = dilation * (self.kernel_size - 1) // 2
                return F.conv3d(
                    x, self.weight[index].unsqueeze(1), padding=pad, dilation=dilation, groups=self.channels
                )
        return self._depthwise(x, self.branch_kernel(index, support).unsqueeze(1))

    @checked_forward(check_grid_module_input)
    def forward(self, x: Tensor) -> Tensor:
        where = type(self).__name__
        r = check_grid_input(where, x, self.channels)
        if self.reparameterized:
            if self.training and torch.is_grad_enabled():
                raise RuntimeError(
                    f"{where}: this layer was reparameterized (its branches are folded into one "
                    f"inference-only convolution) and cannot be trained; call .eval(), or train "
                    f"an unfolded model"
                )
            if int(self.folded_resolution) == 0:
                raise RuntimeError(
                    f"{where}: reparameterize() ran before the layer saw any input and without "
                    f"a resolution, so the merged kernel is a placeholder; load folded weights, or "
                    f"fold with reparameterize(resolution=R)"
                )
            kernel = _crop_to(self.rep_weight, min(self.rep_weight.shape[-1], 2 * r - 1))
            return self._folded_conv(x, kernel.to(x.dtype)) + self.rep_bias.to(x.dtype).view(1, -1, 1, 1, 1)
        with torch.no_grad():
            self.last_resolution.fill_(r)
        y: Optional[Tensor] = None
        for i, (s, bn) in enumerate(zip(self.branch_supports(r), self.norms)):
            term = bn(self._branch_conv(x, i, s)) * self.alpha[i].view(1, -1, 1, 1, 1)
            y = term if y is None else y + term
        assert y is not None
        return y

    def extra_repr(self) -> str:
        if self.reparameterized:
            return (
                f"{self.channels}, reparameterized=True, kernel={tuple(self.rep_weight.shape[2:])}, "
                f"folded_resolution={int(self.folded_resolution)}"
            )
        extra = f", modes={self.modes}, sparse_taps={self.sparse_taps}" if self.kernel_type == "fourier" else ""
        return (
            f"{self.channels}, num_branches={self.num_branches}, kernel_size={self.kernel_size}, "
            f"kernel_type={self.kernel_type!r}{extra}, global_kernel={self.global_kernel}"
        )


class MRConvSeparable3d(nn.Module):
    r"""Depthwise multi-resolution convolution followed by a pointwise linear layer.

        z = MRConv3d(x),   y(p) = W z(p) + b

    The spatial op of the ``mrconv`` backbone's residual blocks (``W ~ N(0, 1 / C_in)``). Only the
    inner :class:`MRConv3d` is reparameterizable; this wrapper has no ``reparameterize()``.

    Shapes:
        input ``[B, C_in, R, R, R]`` -> output ``[B, C_out, R, R, R]``
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True, **mrconv_kwargs: Any) -> None:
        super().__init__()
        check_positive_int(type(self).__name__, in_channels=in_channels, out_channels=out_channels)
        check_parameters(
            type(self).__name__, f"in_channels={in_channels}, out_channels={out_channels}", in_channels * out_channels
        )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.depthwise = MRConv3d(in_channels, **mrconv_kwargs)
        self.pointwise = nn.Conv3d(in_channels, out_channels, kernel_size=1, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.pointwise.weight, 0.0, 1.0 / math.sqrt(self.in_channels))
        if self.pointwise.bias is not None:
            nn.init.zeros_(self.pointwise.bias)

    @checked_forward(check_grid_module_input)
    def forward(self, x: Tensor) -> Tensor:
        return self.pointwise(self.depthwise(x))
