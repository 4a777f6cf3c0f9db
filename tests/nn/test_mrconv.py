"""Tests of MRConv3d (gridify.nn.mrconv): multi-resolution depthwise conv + reparameterization."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from gridify.backbones import MRConvNet, build_backbone
from gridify.checkpoint import reparameterize_model
from gridify.nn import MRConv3d

CONFIGS = [
    dict(kernel_type="dilated"),
    dict(kernel_type="fourier"),
    dict(kernel_type="fourier", modes=3, sparse_taps=6),
    dict(kernel_type="dilated", kernel_size=5),
]


def _warm_stats(layer: torch.nn.Module, r: int, steps: int = 3) -> None:
    """A few train-mode forwards on shifted, scaled inputs: non-trivial BatchNorm running stats."""
    layer.train()
    with torch.no_grad():
        for s in range(steps):
            layer(torch.randn(3, layer.channels, r, r, r, dtype=torch.float64) * (1.5 + s) + 0.7)
        for bn in layer.norms:  # also non-trivial affine parameters
            bn.weight.uniform_(0.5, 2.0)
            bn.bias.normal_()
        layer.alpha.normal_()


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("r", [3, 5, 9, 13])
def test_shapes(cfg, r):
    layer = MRConv3d(4, **cfg)
    y = layer(torch.randn(2, 4, r, r, r))
    assert y.shape == (2, 4, r, r, r) and torch.isfinite(y).all()
    assert int(layer.last_resolution) == r


def test_branch_supports_grow_to_global():
    layer = MRConv3d(2, num_branches=4, kernel_size=3)
    assert layer.branch_supports(9) == [3, 5, 9, 17]
    assert layer.branch_supports(13) == [3, 5, 9, 25]
    assert layer.branch_supports(4) == [3, 5, 7, 7]  # capped at the global 2R - 1
    assert layer.branch_supports(2) == [3, 3, 3, 3]
    assert MRConv3d(2, num_branches=3, global_kernel=False).branch_supports(13) == [3, 5, 9]


def test_parameter_count_is_fixed_per_branch():
    c = 5
    dil = MRConv3d(c, num_branches=4, kernel_size=3)
    assert dil.weight.shape == (4, c, 3, 3, 3)
    four = MRConv3d(c, num_branches=4, kernel_type="fourier", modes=2, sparse_taps=4)
    assert four.spectrum.shape == (4, c, 3, 3, 2, 2) and four.sparse_weight.shape == (4, c, 4)
    # the same parameters at any resolution
    n = sum(p.numel() for p in four.parameters())
    four(torch.randn(1, c, 5, 5, 5))
    four(torch.randn(1, c, 11, 11, 11))
    assert sum(p.numel() for p in four.parameters()) == n


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("r", [2, 4, 5, 9, pytest.param(13, marks=pytest.mark.slow)])  # 13: 15-20 s a config
def test_reparameterized_equals_branch_sum(cfg, r):
    torch.manual_seed(r)
    layer = MRConv3d(6, **cfg).double()
    _warm_stats(layer, r)
    layer.eval()
    x = torch.randn(2, 6, r, r, r, dtype=torch.float64)
    with torch.no_grad():
        ref = layer(x)
        folded = copy.deepcopy(layer).reparameterize()
        out = folded(x)
    assert folded.reparameterized and not hasattr(folded, "norms") and not hasattr(folded, "alpha")
    assert (
        folded.rep_weight.shape
        == (
            6,
            1,
            max(layer.branch_supports(r)),
        )
        + (max(layer.branch_supports(r)),) * 2
    )
    assert ((out - ref).norm() / ref.norm()).item() < 1e-4
    # float32 as well (FFT and direct paths)
    layer32, folded32 = copy.deepcopy(layer).float(), copy.deepcopy(folded).float()
    with torch.no_grad():
        ref32, out32 = layer32(x.float()), folded32(x.float())
    assert ((out32 - ref32).norm() / ref32.norm()).item() < 1e-4


def test_fft_direct_and_matmul_backends_agree():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 7, 7, dtype=torch.float64)
    layers = {}
    for fft in (True, False, "auto"):
        torch.manual_seed(1)
        layers[fft] = MRConv3d(3, kernel_type="fourier", fft=fft).double().eval()
    with torch.no_grad():
        ref = layers[False](x)
        assert torch.allclose(layers[True](x), ref, atol=1e-10)
        assert torch.allclose(layers["auto"](x), ref, atol=1e-10)
        for layer in layers.values():
            layer.reparameterize()
        for fft, layer in layers.items():  # FFT, direct, cached Toeplitz matmul ("auto", no grad)
            assert torch.allclose(layer(x), ref, atol=1e-10), fft
        auto = layers["auto"]
        assert getattr(auto, "_toeplitz_cache", None) is not None
        assert torch.allclose(auto(x[:, :, :5, :5, :5]), layers[False](x[:, :, :5, :5, :5]), atol=1e-10)
        # new weights invalidate the cached matrices
        auto.load_state_dict({k: v * 2 if k == "rep_weight" else v for k, v in auto.state_dict().items()})
        assert torch.allclose(
            auto(x) - auto.rep_bias.view(1, -1, 1, 1, 1), 2 * (ref - auto.rep_bias.view(1, -1, 1, 1, 1)), atol=1e-10
        )


def test_fourier_kernel_matches_the_mode_sum():
    """k(o) = s^{-3/2} sum over the Hermitian spectrum of c_f exp(2 pi i f.o / s), centred at offset 0."""
    torch.manual_seed(0)
    layer = MRConv3d(2, kernel_type="fourier", modes=2).double()
    m, s = 2, 9
    k = layer.branch_kernel(2, s)
    spec = torch.view_as_complex(layer.spectrum[2])  # [C, 3, 3, 2]
    o = torch.arange(s, dtype=torch.float64) - (s - 1) / 2
    ref = torch.zeros(2, s, s, s, dtype=torch.float64)
    for i in range(3):
        for j in range(3):
            for l in range(m):
                f = torch.tensor([i - 1, j - 1, l], dtype=torch.float64)
                if l == 0:  # Hermitian f3 = 0 plane: (c_f + conj(c_-f)) / 2
                    c = 0.5 * (spec[:, i, j, 0] + spec[:, 2 - i, 2 - j, 0].conj())
                else:
                    c = spec[:, i, j, l]
                phase = 2 * math.pi * (f[0] * o[:, None, None] + f[1] * o[None, :, None] + f[2] * o[None, None, :]) / s
                term = c[:, None, None, None] * torch.exp(1j * phase)[None]
                ref += (1.0 if l == 0 else 2.0) * term.real
    ref /= s**1.5
    assert torch.allclose(k, ref, atol=1e-12)


def test_dilated_kernel_matches_dilated_conv():
    torch.manual_seed(0)
    layer = MRConv3d(3, kernel_size=3).double()
    x = torch.randn(1, 3, 9, 9, 9, dtype=torch.float64)
    dense = layer.branch_kernel(2, 9)  # dilation 4
    assert int((dense != 0).sum()) == 3 * 27
    y_dense = F.conv3d(x, dense.unsqueeze(1), padding=4, groups=3)
    y_dil = F.conv3d(x, layer.weight[2].unsqueeze(1), padding=4, dilation=4, groups=3)
    assert torch.allclose(y_dense, y_dil, atol=1e-12)


def test_reparameterize_is_idempotent_and_needs_a_resolution():
    layer = MRConv3d(3)
    layer.eval()
    with pytest.raises(RuntimeError, match="placeholder"):
        copy.deepcopy(layer).reparameterize()(torch.randn(1, 3, 5, 5, 5))
    layer(torch.randn(1, 3, 7, 7, 7))  # remembers R = 7
    layer.reparameterize()
    w = layer.rep_weight.clone()
    assert layer.rep_weight.shape[-1] == 13 and int(layer.folded_resolution) == 7
    assert layer.reparameterize() is layer and torch.equal(layer.rep_weight, w)
    # explicit resolution wins
    other = MRConv3d(3, resolution=5).eval()
    other(torch.randn(1, 3, 7, 7, 7))
    assert other.reparameterize().rep_weight.shape[-1] == 9
    # the folded layer still runs at other resolutions (cropped kernel)
    assert layer(torch.randn(1, 3, 4, 4, 4)).shape == (1, 3, 4, 4, 4)


def test_training_a_folded_layer_raises():
    layer = MRConv3d(3)
    layer(torch.randn(2, 3, 5, 5, 5))
    reparameterize_model(layer)
    assert layer.reparameterized and not layer.training
    layer.train()
    with pytest.raises(RuntimeError, match="cannot be trained"):
        layer(torch.randn(2, 3, 5, 5, 5))
    with torch.no_grad():  # e.g. BatchNorm recalibration of the rest of a model: allowed
        assert layer(torch.randn(2, 3, 5, 5, 5)).shape == (2, 3, 5, 5, 5)
    with pytest.raises(RuntimeError, match="reparameterize"):
        layer.branch_kernel(0, 3)


def test_folded_state_dict_loads_into_fresh_folded_layer():
    torch.manual_seed(0)
    a = MRConv3d(4, kernel_type="fourier", sparse_taps=3)
    a(torch.randn(3, 4, 9, 9, 9))
    a.eval().reparameterize()
    b = MRConv3d(4, kernel_type="fourier", sparse_taps=3).reparameterize()  # placeholder
    b.load_state_dict(a.state_dict())
    b.eval()
    x = torch.randn(2, 4, 9, 9, 9)
    assert torch.equal(a(x), b(x))


def test_gradients_reach_every_branch_and_alpha():
    for cfg in CONFIGS:
        torch.manual_seed(0)
        layer = MRConv3d(4, num_branches=4, **cfg)
        layer(torch.randn(2, 4, 9, 9, 9)).square().mean().backward()
        kernel_params = [layer.weight] if cfg["kernel_type"] == "dilated" else [layer.spectrum]
        if cfg.get("sparse_taps"):
            kernel_params.append(layer.sparse_weight)
        for p in kernel_params + [layer.alpha]:
            assert p.grad is not None and torch.isfinite(p.grad).all()
            for i in range(4):
                assert p.grad[i].abs().sum() > 0, (cfg, i)
        for bn in layer.norms:
            assert bn.weight.grad.abs().sum() > 0 and bn.bias.grad.abs().sum() > 0


@pytest.mark.parametrize("kernel_type", ["dilated", "fourier"])
def test_initial_output_std_is_order_one(kernel_type):
    torch.manual_seed(0)
    x = torch.randn(4, 16, 9, 9, 9)
    layer = MRConv3d(16, kernel_type=kernel_type)
    with torch.no_grad():
        std_train = layer(x).std().item()
        std_eval = layer.eval()(x).std().item()
    assert 0.3 < std_train < 3.0 and 0.3 < std_eval < 3.0, (std_train, std_eval)
    net = MRConvNet(in_channels=16, out_channels=16, hidden_channels=32, depth=3, kernel_type=kernel_type)
    with torch.no_grad():
        std_net = net(x).std().item()
    assert 0.2 < std_net < 5.0, std_net
    # alpha starts as the normalized kernel decay
    a = layer.alpha[:, 0]
    assert torch.allclose(a / a[0], 0.5 ** torch.arange(4.0)) and torch.isclose(a.square().sum(), torch.tensor(1.0))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(channels=0), "channels must be a positive integer"),
        (dict(channels=3, num_branches=0), "num_branches must be a positive integer"),
        (dict(channels=3, kernel_size=4), "kernel_size must be an odd integer >= 3"),
        (dict(channels=3, kernel_size=1), "kernel_size must be an odd integer >= 3"),
        (dict(channels=3, kernel_type="gaussian"), "kernel_type must be one of"),
        (dict(channels=3, modes=0), "modes must be a positive integer"),
        (dict(channels=3, sparse_taps=-1, kernel_type="fourier"), "sparse_taps must be a non-negative integer"),
        (dict(channels=3, sparse_taps=4), "sparse_taps=4 needs kernel_type='fourier'"),
        (dict(channels=3, decay=0.0), r"decay must be a number in \(0, 1\]"),
        (dict(channels=3, resolution=0), "resolution must be None or a positive integer"),
        (dict(channels=3, fft="yes"), "fft must be 'auto', True or False"),
        (dict(channels=3, global_kernel="yes"), "global_kernel must be a bool"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MRConv3d(**kwargs)


def test_bad_inputs():
    layer = MRConv3d(3)
    with pytest.raises(ValueError, match="expected 3 input channels"):
        layer(torch.randn(1, 4, 5, 5, 5))
    with pytest.raises(ValueError, match="5-dim input"):
        layer(torch.randn(3, 5, 5, 5))
    with pytest.raises(ValueError, match="cubic grid"):
        layer(torch.randn(1, 3, 5, 5, 4))
    with pytest.raises(ValueError, match="resolution must be a positive integer"):
        layer.reparameterize(resolution=0)
    with pytest.raises(ValueError, match="kernel_size must be an odd integer"):
        build_backbone("mrconv", in_channels=3, out_channels=2, kernel_size="global")
