"""Tests of the grid backbones (ccnn, resnet, unet): shapes, init, gradients, overfitting, transfer."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from gridify.backbones import CCNN, ResNet3d, UNet3d, build_backbone
from gridify.backbones.blocks import DepthwiseSeparableConv3d, ResidualBlock3d
from gridify.nn.flexconv import SepFlexConv3d
from gridify.registry import BACKBONES

NAMES = ["ccnn", "resnet", "unet"]


def _small(name: str, **kwargs) -> torch.nn.Module:
    args = dict(in_channels=3, out_channels=2, hidden_channels=8, depth=3, dropout=0.0, kernel_size=5)
    args.update(kwargs)
    return build_backbone(name, **args)


def test_registry_and_build():
    for name, cls in (("ccnn", CCNN), ("resnet", ResNet3d), ("unet", UNet3d)):
        assert name in BACKBONES and BACKBONES.get(name) is cls
        assert isinstance(_small(name), cls)
    with pytest.raises(KeyError, match="unknown backbone"):
        build_backbone("transformer", in_channels=3, out_channels=2)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("r", [3, 9, 13])
def test_output_shapes(name, r):
    torch.manual_seed(0)
    net = _small(name, kernel_size=9)
    for b in (1, 3):
        y = net(torch.randn(b, 3, r, r, r))
        assert y.shape == (b, 2, r, r, r)
        assert torch.isfinite(y).all()


@pytest.mark.parametrize("r, levels", [(2, 1), (3, 2), (4, 2), (5, 3), (9, 3), (13, 3), (7, 3)])
def test_unet_odd_sizes_and_levels(r, levels):
    torch.manual_seed(0)
    net = _small("unet", kernel_size=3)
    assert net.levels_used(r) == levels
    assert net(torch.randn(2, 3, r, r, r)).shape == (2, 2, r, r, r)


def test_residual_block_is_x_plus_f():
    torch.manual_seed(0)
    block = ResidualBlock3d(4, DepthwiseSeparableConv3d(4, 4, 3), dropout=0.0)
    x = torch.randn(2, 4, 5, 5, 5)
    f = F.gelu(block.linear(F.gelu(block.spatial(block.norm(x)))))
    assert torch.allclose(block(x), x + f, atol=1e-6)
    with torch.no_grad():  # a zero residual branch leaves the input untouched (not 2 F(x), not 0)
        block.linear.weight.zero_()
    assert torch.equal(block(x), x)


def _init_std(kernel_init: str, seed: int) -> float:
    torch.manual_seed(seed)
    net = CCNN(
        in_channels=16,
        out_channels=16,
        hidden_channels=32,
        depth=3,
        kernel_size=9,
        base_resolution=9,
        kernel_init=kernel_init,
    )
    with torch.no_grad():
        return net(torch.randn(4, 16, 9, 9, 9)).std().item()


def test_ccnn_initialisation_keeps_outputs_of_order_one():
    for seed in (0, 1):
        std = _init_std("ccnn", seed)
        std_raw = _init_std("none", seed)  # kernel network with Var(k) ~ 1, no CCNN rescaling
        assert 0.2 < std < 5.0, std
        assert std_raw > 5 * std, (std, std_raw)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_every_parameter(name):
    torch.manual_seed(0)
    net = _small(name, dropout=0.1)
    x = torch.randn(2, 3, 9, 9, 9)
    loss = net(x).square().mean() + 1e-3 * net.kernel_l2()
    loss.backward()
    missing = [n for n, p in net.named_parameters() if p.grad is None or not (p.grad.abs().sum() > 0)]
    assert not missing, missing
    assert all(torch.isfinite(p.grad).all() for p in net.parameters())


@pytest.mark.parametrize("name", NAMES)
def test_overfits_a_tiny_batch(name):
    """Dense regression of a fixed nonlinear function of the input on 4 grids at R=5."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5, 5)
    smooth = F.avg_pool3d(x, 3, stride=1, padding=1, count_include_pad=False)
    target = torch.stack([torch.tanh(2 * smooth[:, 0] * smooth[:, 1]), smooth[:, 2] ** 2 - x[:, 0]], dim=1)
    net = _small(name, depth=2, kernel_size=3 if name != "ccnn" else 5)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(200):
        opt.zero_grad()
        loss = F.mse_loss(net(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert min(losses[-10:]) < 0.1 * losses[0], (losses[0], losses[-10:])


def _smooth_field(r: int) -> torch.Tensor:
    g = torch.linspace(-1.0, 1.0, r, dtype=torch.float64)
    x, y, z = torch.meshgrid(g, g, g, indexing="ij")
    f1 = torch.sin(1.5 * x + 0.3) * torch.cos(1.1 * y - 0.2) + 0.5 * z**2
    f2 = torch.exp(-((x - 0.2) ** 2 + (y + 0.1) ** 2 + (z - 0.3) ** 2) / 0.5)
    return torch.stack([f1, f2, torch.cos(2 * z + x)])[None]


def test_ccnn_resolution_transfer():
    """A CCNN built at R=9 runs at R=13 and agrees at shared nodes; fixed-size kernels do not."""
    torch.manual_seed(0)
    net = (
        CCNN(in_channels=3, out_channels=4, hidden_channels=8, depth=2, kernel_size=9, base_resolution=9, dropout=0.0)
        .double()
        .eval()
    )
    naive = copy.deepcopy(net)
    for m in naive.modules():
        if isinstance(m, SepFlexConv3d):
            m.base_res.fill_(13)  # same taps and values per cell: the kernels shrink physically
    s13 = slice(0, 13, 3)
    with torch.no_grad():
        y9 = net(_smooth_field(9))[..., ::2, ::2, ::2]
        y13 = net(_smooth_field(13))[..., s13, s13, s13]
        y13_naive = naive(_smooth_field(13))[..., s13, s13, s13]
    err = ((y13 - y9).norm() / y9.norm()).item()
    err_naive = ((y13_naive - y9).norm() / y9.norm()).item()
    assert err < 0.05, err
    assert err_naive > 5 * err, (err, err_naive)


def test_ccnn_takes_base_resolution_from_first_input():
    torch.manual_seed(0)
    net = _small("ccnn")
    net(torch.randn(2, 3, 7, 7, 7))
    assert all(m.base_resolution == 7 for m in net.modules() if isinstance(m, SepFlexConv3d))
    assert net(torch.randn(1, 3, 11, 11, 11)).shape == (1, 2, 11, 11, 11)


def test_kernel_l2():
    torch.manual_seed(0)
    ccnn = _small("ccnn", base_resolution=9)
    layers = [m for m in ccnn.modules() if isinstance(m, SepFlexConv3d)]
    assert len(layers) == 3
    expected = sum(m.kernel_l2() for m in layers)
    assert ccnn.kernel_l2().item() == pytest.approx(expected.item(), rel=1e-6) and expected.item() > 0
    for name in ("resnet", "unet"):
        assert _small(name).kernel_l2().item() == 0.0


def test_parameter_counts():
    ccnn = CCNN(in_channels=128, out_channels=128, hidden_channels=128, depth=3, kernel_size=9)
    # 2 projections (128^2 + 128 each) + 3 blocks x (BN 256 + MAGNet 7296 + mask 3 + 2 pointwise 16512)
    assert ccnn.num_parameters() == 2 * 16512 + 3 * (256 + 7296 + 3 + 2 * 16512)
    resnet = ResNet3d(in_channels=128, out_channels=128, hidden_channels=128, depth=3, kernel_size=9)
    assert resnet.num_parameters() == 2 * 16512 + 3 * (256 + 128 * 729 + 2 * 16512)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(hidden_channels=0), "hidden_channels"),
        (dict(depth=0), "depth"),
        (dict(in_channels=-1), "in_channels"),
        (dict(dropout=1.0), "dropout"),
        (dict(kernel_size=4), "kernel_size must be odd"),
    ],
)
def test_bad_arguments(name, kwargs, match):
    args = dict(in_channels=3, out_channels=2, hidden_channels=8, depth=1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        build_backbone(name, **args)


@pytest.mark.parametrize("name", NAMES)
def test_bad_inputs(name):
    net = _small(name, depth=1)
    with pytest.raises(ValueError, match="expected 3 input channels"):
        net(torch.randn(1, 4, 5, 5, 5))
    with pytest.raises(ValueError, match="5-dim"):
        net(torch.randn(3, 5, 5, 5))
    with pytest.raises(ValueError, match="cubic"):
        net(torch.randn(1, 3, 5, 5, 4))


class _Identity(torch.nn.Module):
    def forward(self, x):
        return x


@pytest.mark.parametrize("spatial", ["separable", "identity"])
def test_residual_block_inference_path_matches_autograd_path_and_keeps_input(spatial):
    # without autograd the block works in place on its own temporaries; it must give the same
    # values and never write into its input, even when the spatial layer returns the input itself
    torch.manual_seed(1)
    conv = DepthwiseSeparableConv3d(4, 4, 3) if spatial == "separable" else _Identity()
    block = ResidualBlock3d(4, conv, dropout=0.0).eval()
    x = torch.randn(2, 4, 5, 5, 5).contiguous(memory_format=torch.channels_last_3d)
    ref = block(x)
    keep = x.clone()
    with torch.no_grad():
        out = block(x)
    with torch.inference_mode():
        out_inf = block(x)
    assert torch.equal(x, keep)
    torch.testing.assert_close(out, ref.detach(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out_inf, ref.detach(), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("layout", ["channels_last", "contiguous", "strided"])
def test_grid_gelu_equals_gelu_in_every_layout(layout):
    from gridify.backbones.blocks import grid_gelu

    x = torch.randn(2, 6, 4, 4, 4) * 8
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last_3d)
    elif layout == "strided":
        x = x[:, :, ::2]
    # torch's vectorized and scalar GELU kernels differ in the last bits (up to ~1e-6 here)
    ref = F.gelu(x.double()).float()
    torch.testing.assert_close(grid_gelu(x), ref, atol=2e-6, rtol=1e-5)
    y = x.clone()
    out = grid_gelu(y, inplace=True)
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)
    assert torch.equal(y, out)  # in place: the caller's tensor holds the result
    assert out.stride() == y.stride()
    g = x.clone().requires_grad_(True)
    grid_gelu(g).sum().backward()
    g2 = x.clone().requires_grad_(True)
    F.gelu(g2).sum().backward()
    torch.testing.assert_close(g.grad, g2.grad)


def test_mask_dropout_keeps_the_expected_fraction_and_scale_and_is_seeded():
    from gridify.backbones.blocks import MaskDropout

    drop = MaskDropout(0.25)
    x = torch.ones(200_000)
    torch.manual_seed(3)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.005
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.75))
    torch.manual_seed(3)
    assert torch.equal(drop(x), y)
    xg = torch.randn(1000, requires_grad=True)
    torch.manual_seed(4)
    out = drop(xg)
    out.sum().backward()
    torch.testing.assert_close(xg.grad, (out.detach() != 0).float() / 0.75)
    assert torch.equal(drop.eval()(xg), xg)
    assert torch.equal(MaskDropout(1.0)(torch.ones(7)), torch.zeros(7))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_mask_dropout_rate_is_p_for_odd_sizes_and_shapes(p):
    from gridify.backbones.blocks import MaskDropout

    torch.manual_seed(5)
    x = torch.ones(3, 7, 11, 13, 17)  # 51,051 values: not a multiple of the 4 draws per random word
    y = MaskDropout(p)(x)
    assert y.shape == x.shape
    kept = (y != 0).float()
    assert abs(kept.mean().item() - (1 - p)) < 4 * (p * (1 - p) / x.numel()) ** 0.5 + 1e-4
    # no lane of the 64-bit words is biased: every 4th element keeps the same fraction
    for lane in range(4):
        frac = kept.flatten()[lane::4].mean().item()
        assert abs(frac - (1 - p)) < 5 * (p * (1 - p) * 4 / x.numel()) ** 0.5


def test_depthwise_separable_crops_taps_per_axis():
    torch.manual_seed(0)
    layer = DepthwiseSeparableConv3d(3, 4, kernel_size=7, cubic=False).double()
    x = torch.randn(2, 3, 8, 5, 2, dtype=torch.float64)
    w = layer.depthwise.weight
    ref = layer.pointwise(F.conv3d(x, w, padding=3, groups=3))
    torch.testing.assert_close(layer(x), ref)
    with pytest.raises(ValueError, match="cubic"):
        DepthwiseSeparableConv3d(3, 4, kernel_size=7)(x)
    with pytest.raises(ValueError, match="cubic must be True or False"):
        DepthwiseSeparableConv3d(3, 4, cubic="no")


@pytest.mark.parametrize("name", ["resnet", "unet"])
@pytest.mark.parametrize("shape", [(32, 32, 8), (9, 7, 2), (5, 5, 5), (3, 1, 4)])
def test_discrete_backbones_run_on_per_axis_grids(name, shape):
    torch.manual_seed(0)
    net = build_backbone(
        name, in_channels=3, out_channels=2, hidden_channels=8, depth=3, kernel_size=5, dropout=0.0, cubic=False
    )
    x = torch.randn(2, 3, *shape, requires_grad=True)
    y = net(x)
    assert y.shape == (2, 2, *shape)
    y.square().mean().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())
    with pytest.raises(ValueError, match="cubic"):  # the default keeps refusing non-cubic grids
        build_backbone(name, in_channels=3, out_channels=2, hidden_channels=8, depth=1)(torch.randn(1, 3, 5, 5, 4))


def test_discrete_backbone_per_axis_on_a_cube_equals_the_cubic_one():
    x = torch.randn(2, 3, 7, 7, 7)
    for name in ("resnet", "unet"):
        torch.manual_seed(0)
        a = build_backbone(name, in_channels=3, out_channels=2, hidden_channels=8, depth=2, kernel_size=5).eval()
        torch.manual_seed(0)
        b = build_backbone(
            name, in_channels=3, out_channels=2, hidden_channels=8, depth=2, kernel_size=5, cubic=False
        ).eval()
        torch.testing.assert_close(a(x), b(x))


def test_unet_down_sampling_per_axis():
    net = build_backbone("unet", in_channels=3, out_channels=2, hidden_channels=4, depth=4, kernel_size=3, cubic=False)
    assert net.levels_used((32, 32, 8)) == 4  # z: 8 -> 4 -> 2 -> 2, x/y keep halving
    assert net.levels_used((2, 2, 2)) == 1
    assert net.levels_used((2, 2, 3)) == 2
    assert net.levels_used(9) == 4


@pytest.mark.parametrize("kernel_size", [5, "global"])
def test_ccnn_runs_on_per_axis_grids(kernel_size):
    torch.manual_seed(0)
    net = build_backbone(
        "ccnn",
        in_channels=3,
        out_channels=2,
        hidden_channels=8,
        depth=2,
        kernel_size=kernel_size,
        dropout=0.0,
        cubic=False,
    )
    x = torch.randn(2, 3, 16, 16, 4, requires_grad=True)
    y = net(x)
    assert y.shape == (2, 2, 16, 16, 4)
    y.square().mean().backward()
    assert bool(torch.isfinite(x.grad).all())
    conv = net.blocks[0].spatial
    assert conv.base_resolution == 16  # a first per-axis input sets R0 to its largest axis
    want = (31, 31, 7) if kernel_size == "global" else (5, 5, 1)  # "global": 2 R_a - 1 taps per axis
    assert tuple(conv.kernel((16, 16, 4)).shape[-3:]) == want
    net.eval()
    with torch.no_grad():  # resolution transfer to another per-axis grid
        assert net(torch.randn(1, 3, 9, 9, 3)).shape == (1, 2, 9, 9, 3)
    with pytest.raises(ValueError, match="cubic"):  # the default keeps refusing non-cubic grids
        build_backbone("ccnn", in_channels=3, out_channels=2, hidden_channels=8, depth=1)(torch.randn(1, 3, 5, 5, 4))
