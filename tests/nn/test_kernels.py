"""Tests of the kernel networks and SepFlexConv3d (FFT path, CCNN init, resolution transfer)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from gridify.nn.flexconv import SepFlexConv3d, check_grid_input, direct_depthwise_conv3d, fft_depthwise_conv3d
from gridify.nn.kernels import MAGNet, RFFKernel, SIRENKernel
from gridify.registry import KERNELS

KERNEL_CLASSES = [MAGNet, SIRENKernel, RFFKernel]


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def _lattice(n: int) -> torch.Tensor:
    axis = torch.linspace(-1.0, 1.0, n)
    return torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), dim=-1)


def _grid(b=2, c=3, r=4, seed=0):
    return torch.randn(b, c, r, r, r, generator=torch.Generator().manual_seed(seed))


def _assert_same(a, b):
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------------- kernel networks
def test_kernel_registry_names():
    for name, cls in (("magnet", MAGNet), ("siren", SIRENKernel), ("rff", RFFKernel)):
        assert KERNELS.get(name) is cls
    with pytest.raises(KeyError, match="unknown kernel network"):
        KERNELS.get("nope")


@pytest.mark.parametrize("cls", KERNEL_CLASSES)
def test_kernel_net_shapes_and_output_scale(cls):
    torch.manual_seed(0)
    net = cls(out_channels=7, hidden_channels=16, num_layers=3)
    for lead in [(5,), (2, 3), (4, 4, 4)]:
        assert net(torch.rand(*lead, 3) * 2 - 1).shape == (*lead, 7)
    # The output RMS over the reference lattice of [-1, 1]^3 is output_scale.
    rms = net(_lattice(9)).square().mean().sqrt().item()
    assert rms == pytest.approx(1.0, rel=1e-4)
    half = cls(out_channels=7, hidden_channels=16, output_scale=0.5)
    assert half(_lattice(9)).square().mean().sqrt().item() == pytest.approx(0.5, rel=1e-4)


@pytest.mark.parametrize("cls", KERNEL_CLASSES)
def test_kernel_net_rescale_output_is_exact(cls):
    torch.manual_seed(1)
    net = cls(out_channels=4, hidden_channels=8)
    with torch.no_grad():
        net.output_linear.bias.normal_()  # a non-zero bias must be scaled too
    u = torch.rand(50, 3) * 2 - 1
    before = net(u).detach()
    net.rescale_output(0.5)
    assert torch.allclose(net(u), 0.5 * before, atol=1e-6)
    factor = torch.tensor([1.0, 2.0, 3.0, 4.0])
    net.rescale_output(factor)
    assert torch.allclose(net(u), 0.5 * before * factor, atol=1e-5)
    with pytest.raises(ValueError, match="shape"):
        net.rescale_output(torch.ones(3))
    with pytest.raises(ValueError, match="finite"):
        net.rescale_output(float("inf"))


@pytest.mark.parametrize("cls", KERNEL_CLASSES)
def test_kernel_net_reset_and_gradients(cls):
    torch.manual_seed(2)
    net = cls(out_channels=3, hidden_channels=8)
    out = net(torch.rand(20, 3) * 2 - 1).square().sum()
    out.backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    first = [p.detach().clone() for p in net.parameters()]
    net.reset_parameters()
    assert any(not torch.equal(a, b) for a, b in zip(first, net.parameters()))


def test_magnet_gamma_init_follows_gamma_distribution():
    torch.manual_seed(0)
    alpha, beta = 6.0, 1.0
    net = MAGNet(out_channels=2, hidden_channels=2000, num_layers=3, alpha=alpha, beta=beta)
    for l, filt in enumerate(net.filters, start=1):
        g2 = filt.gamma.detach().double().square()  # gamma^2 ~ Gamma(alpha / l, beta)
        mean, var = alpha / l / beta, alpha / l / beta**2
        assert g2.mean().item() == pytest.approx(mean, rel=0.05)
        assert g2.var().item() == pytest.approx(var, rel=0.15)
        assert (filt.mu.abs() <= 1).all()
        assert filt.linear.weight.abs().max() <= net.omega0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(out_channels=0), "out_channels"),
        (dict(out_channels=3, hidden_channels=0), "hidden_channels"),
        (dict(out_channels=3, num_layers=0), "num_layers"),
        (dict(out_channels=3, omega0=-1.0), "omega0"),
        (dict(out_channels=3, output_scale=0.0), "output_scale"),
    ],
)
@pytest.mark.parametrize("cls", KERNEL_CLASSES)
def test_kernel_net_bad_arguments(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_kernel_net_bad_coordinates_and_odd_rff_width():
    net = MAGNet(out_channels=3, hidden_channels=8)
    with pytest.raises(ValueError, match=r"\[\.\.\., 3\]"):
        net(torch.zeros(10, 2))
    with pytest.raises(ValueError, match="even"):
        RFFKernel(out_channels=3, hidden_channels=7)


# ---------------------------------------------------------------------------- FFT vs direct
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4), (torch.float64, 1e-10)])
@pytest.mark.parametrize("r", [3, 9, 13])
@pytest.mark.parametrize("kernel_size", [1, 3, 9, "global"])
def test_fft_matches_direct_convolution(kernel_size, r, dtype, tol):
    torch.manual_seed(r)
    layer = SepFlexConv3d(3, 4, kernel_size=kernel_size, base_resolution=r).to(dtype)
    x = torch.randn(1, 3, r, r, r, dtype=dtype)
    with torch.no_grad():
        kernel = layer.kernel(r)
        assert kernel.shape[-1] <= 2 * r - 1
        layer.fft = True
        y_fft = layer(x)
        z_fft = fft_depthwise_conv3d(x, kernel)
        if kernel.shape[-1] ** 3 * r**3 > 3 * 10**6:
            # CPU grouped conv3d with a 25^3 kernel takes seconds: check the FFT result at sampled
            # nodes against the defining sum y(p) = sum_o k(o) x(p + o) instead.
            _check_against_sum(x, kernel, z_fft, tol)
            return
        layer.fft = False
        y_dir = layer(x)
        assert _rel_err(y_fft, y_dir) < tol  # the whole layer with both backends
        assert _rel_err(z_fft, direct_depthwise_conv3d(x, kernel)) < tol
        k_rand = torch.randn_like(kernel)  # an asymmetric random kernel (orientation check)
        assert _rel_err(fft_depthwise_conv3d(x, k_rand), direct_depthwise_conv3d(x, k_rand)) < tol


def _check_against_sum(x: torch.Tensor, kernel: torch.Tensor, z: torch.Tensor, tol: float) -> None:
    r, k = x.shape[-1], kernel.shape[-1]
    p = (k - 1) // 2
    xpad = torch.nn.functional.pad(x, (p,) * 6)
    gen = torch.Generator().manual_seed(0)
    nodes = torch.randint(0, r, (40, 3), generator=gen).tolist() + [[0, 0, 0], [r - 1, r - 1, r - 1]]
    ref = torch.stack(
        [(xpad[0, :, i : i + k, j : j + k, l : l + k] * kernel[:, 0]).flatten(1).sum(1) for i, j, l in nodes], dim=1
    )
    got = torch.stack([z[0, :, i, j, l] for i, j, l in nodes], dim=1)
    assert _rel_err(got, ref) < tol


def test_fft_matches_direct_gradients_and_transfer_sizes():
    torch.manual_seed(0)
    layer = SepFlexConv3d(2, 3, kernel_size=9, base_resolution=7).double()
    for r in (4, 7, 9):  # resolution transfer changes the sampled kernel size: 5, 9, 11 taps
        x = torch.randn(1, 2, r, r, r, dtype=torch.float64, requires_grad=True)
        grads = []
        for fft in (True, False):
            layer.fft = fft
            layer.zero_grad()
            x.grad = None
            layer(x).sin().sum().backward()
            grads.append([x.grad.clone()] + [p.grad.clone() for p in layer.parameters()])
        for a, b in zip(*grads):
            assert _rel_err(a, b) < 1e-8


def test_cross_correlation_orientation():
    # y(p) = sum_o k(o) x(p + o): a delta input at the centre returns the flipped kernel.
    kernel = torch.randn(1, 1, 3, 3, 3, dtype=torch.float64)
    x = torch.zeros(1, 1, 5, 5, 5, dtype=torch.float64)
    x[0, 0, 2, 2, 2] = 1.0
    expected = torch.flip(kernel[0, 0], dims=(0, 1, 2))
    for fn in (direct_depthwise_conv3d, fft_depthwise_conv3d):
        assert torch.allclose(fn(x, kernel)[0, 0, 1:4, 1:4, 1:4], expected, atol=1e-12)


def test_auto_backend_uses_threshold():
    layer = SepFlexConv3d(2, 2, kernel_size=5, fft_threshold=7)
    cpu = torch.device("cpu")
    assert not layer._use_fft(5, cpu) and layer._use_fft(7, cpu)
    layer = SepFlexConv3d(2, 2, kernel_size=5)
    # on CPU the direct path (with its own backward) was measured faster at every size: "auto" never picks the FFT
    assert not layer._use_fft(5, cpu) and not layer._use_fft(25, cpu) and not layer._use_fft(25, cpu, needs_grad=False)
    assert SepFlexConv3d(2, 2, kernel_size=5, fft=True)._use_fft(3, cpu)


# ---------------------------------------------------------------------------- kernel sampling
def test_kernel_samples_kernel_net_on_the_offset_lattice():
    torch.manual_seed(0)
    layer = SepFlexConv3d(3, 2, kernel_size=5, base_resolution=9).double()
    k = layer.kernel().detach()  # [3, 1, 5, 5, 5], u = (t - 2) / 2
    t = torch.tensor([0, 3, 4])
    u = ((t - 2) / 2.0).double()
    expected = layer.kernel_net(u) * layer.mask_values(u)
    assert torch.allclose(k[:, 0, 0, 3, 4], expected.detach(), atol=1e-12)


@pytest.mark.parametrize(
    "kernel_size, r0, r, k_expected",
    [
        (9, 9, 13, 13),
        (9, 9, 5, 5),
        (5, 9, 13, 7),
        (9, 13, 9, 7),
        (9, 5, 3, 5),
        ("global", 9, 13, 25),
        ("global", 9, 5, 9),
        (1, 9, 13, 1),
        (9, 3, 3, 5),
    ],
)
def test_resolution_transfer_geometry(kernel_size, r0, r, k_expected):
    layer = SepFlexConv3d(2, 2, kernel_size=kernel_size, base_resolution=r0)
    p, step, scale = layer.kernel_geometry(r)
    assert 2 * p + 1 == k_expected
    assert layer.kernel(r).shape == (2, 1, k_expected, k_expected, k_expected)
    if kernel_size != 1:
        assert scale == pytest.approx(((r0 - 1) / (r - 1)) ** 3)


def test_resampled_kernel_coincides_with_base_kernel_at_shared_offsets():
    torch.manual_seed(0)
    layer = SepFlexConv3d(3, 3, kernel_size=5, base_resolution=5).double()
    k5 = layer.kernel(5).detach()  # spacing h0 = 1/2, 5 taps
    k9 = layer.kernel(9).detach()  # spacing h0 / 2, 9 taps, values scaled by (1/2)^3
    assert k9.shape[-1] == 9
    assert torch.allclose(k9[..., ::2, ::2, ::2], k5 / 8.0, atol=1e-12)


def _smooth_field(r: int) -> torch.Tensor:
    g = torch.linspace(-1.0, 1.0, r, dtype=torch.float64)
    x, y, z = torch.meshgrid(g, g, g, indexing="ij")
    f1 = torch.sin(1.5 * x + 0.3) * torch.cos(1.1 * y - 0.2) + 0.5 * z**2
    f2 = torch.exp(-((x - 0.2) ** 2 + (y + 0.1) ** 2 + (z - 0.3) ** 2) / 0.5)
    return torch.stack([f1, f2, f1 * f2, torch.cos(2 * z + x)])[None]


def _transfer_errors(layer: SepFlexConv3d) -> tuple:
    """Relative mismatch of the R=13 output vs the R=9 output at their 5^3 shared nodes."""
    s13 = slice(0, 13, 3)  # nodes of linspace(-1, 1, 13) that are also in linspace(-1, 1, 5)
    naive = copy.deepcopy(layer)
    naive.base_res.fill_(13)  # same taps and values in cells: the kernel shrinks physically
    with torch.no_grad():
        y9 = layer(_smooth_field(9))[..., ::2, ::2, ::2]
        y13 = layer(_smooth_field(13))[..., s13, s13, s13]
        y13_naive = naive(_smooth_field(13))[..., s13, s13, s13]
    err = ((y13 - y9).norm() / y9.norm()).item()
    err_naive = ((y13_naive - y9).norm() / y9.norm()).item()
    return err, err_naive


@pytest.mark.parametrize("kernel_size, min_gain, seeds", [(9, 8.0, (0, 1)), ("global", 20.0, (0,))])
def test_resolution_transfer_matches_integral(kernel_size, min_gain, seeds):
    """R=9 and R=13 outputs agree at the shared nodes far better than a naive application."""
    for seed in seeds:
        torch.manual_seed(seed)
        layer = SepFlexConv3d(4, 4, kernel_size=kernel_size, base_resolution=9).double()
        err, err_naive = _transfer_errors(layer)
        assert err < 0.05, err
        assert err_naive > min_gain * err, (err, err_naive)
        # The trapezoidal node weights are what makes it O(h^2): plain sums are worse.
        layer.quadrature = "rectangle"
        err_rect, _ = _transfer_errors(layer)
        assert err_rect > 2 * err, (err, err_rect)


# ---------------------------------------------------------------------------- CCNN init
@pytest.mark.parametrize("kernel_size", [3, 9, "global"])
def test_ccnn_init_kernel_variance_matches_target(kernel_size):
    torch.manual_seed(0)
    layer = SepFlexConv3d(64, 64, kernel_size=kernel_size, base_resolution=9, mask=False)
    k = layer.kernel().detach().double()
    w = layer.effective_fan_in()
    target = 1.0 / w.sum().item()  # depthwise analogue of 1 / (C_in |Omega|): fan-in |Omega_eff|
    ratio = k.var().item() / target
    assert 0.5 < ratio < 2.0, ratio
    # Exact per-channel calibration: sum_j w(j) k_c(j)^2 = gain^2.
    energy = (k[:, 0].square() * w).flatten(1).sum(1)
    assert torch.allclose(energy, torch.ones_like(energy), rtol=1e-5)


@pytest.mark.parametrize("kernel_size, min_blowup", [(3, None), (9, 10.0), ("global", 50.0)])
def test_ccnn_init_keeps_white_noise_at_unit_variance(kernel_size, min_blowup):
    torch.manual_seed(0)
    layer = SepFlexConv3d(32, 32, kernel_size=kernel_size, base_resolution=9)  # with the mask
    raw = SepFlexConv3d(32, 32, kernel_size=kernel_size, base_resolution=9, kernel_init="none")
    x = torch.randn(4, 32, 9, 9, 9)
    with torch.no_grad():
        dw = fft_depthwise_conv3d(x, layer.kernel())
        y = layer(x)
        y_raw = raw(x)
    assert 0.5 < dw.var().item() < 2.0
    assert 0.5 < y.var().item() < 2.0
    if min_blowup is not None:  # without it, Var(k) ~ 1 sums ~|Omega_eff| (masked) unit terms
        assert y_raw.var().item() > min_blowup * y.var().item()


def test_ccnn_init_is_applied_lazily_on_first_input():
    torch.manual_seed(3)
    eager = SepFlexConv3d(4, 4, kernel_size=9, base_resolution=9)
    torch.manual_seed(3)
    lazy = SepFlexConv3d(4, 4, kernel_size=9)
    assert lazy.base_resolution is None
    lazy(torch.randn(1, 4, 9, 9, 9))
    assert lazy.base_resolution == 9
    assert torch.allclose(lazy.kernel(), eager.kernel())
    # The base resolution is part of the state dict: loading does not re-initialise.
    fresh = SepFlexConv3d(4, 4, kernel_size=9)
    fresh.load_state_dict(lazy.state_dict())
    assert fresh.base_resolution == 9 and torch.equal(fresh.kernel(), lazy.kernel())


def test_kernel_l2_is_the_generated_kernel_norm():
    torch.manual_seed(0)
    layer = SepFlexConv3d(3, 2, kernel_size=5, base_resolution=9)
    reg = layer.kernel_l2()
    assert reg.item() == pytest.approx(layer.kernel().square().sum().item(), rel=1e-6)
    reg.backward()
    assert layer.kernel_net.output_linear.weight.grad.abs().sum() > 0
    assert layer.mask_log_sigma.grad.abs().sum() > 0
    with pytest.raises(RuntimeError, match="base resolution"):
        SepFlexConv3d(3, 2, kernel_size="global").kernel_l2()


@pytest.mark.parametrize("name", ["magnet", "siren", "rff"])
def test_sepflexconv_every_kernel_net_and_gradients(name):
    torch.manual_seed(0)
    layer = SepFlexConv3d(3, 5, kernel_size=5, kernel_net=name, kernel_hidden=8)
    x = torch.randn(2, 3, 7, 7, 7)
    y = layer(x)
    assert y.shape == (2, 5, 7, 7, 7)
    (y.square().mean() + layer.kernel_l2()).backward()
    for pname, p in layer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname


# ---------------------------------------------------------------------------- bad arguments
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kernel_size=4), "kernel_size must be odd"),
        (dict(kernel_size=0), "kernel_size"),
        (dict(kernel_size="big"), "kernel_size"),
        (dict(kernel_size=True), "kernel_size"),
        (dict(in_channels=0), "in_channels"),
        (dict(out_channels=-2), "out_channels"),
        (dict(mask_init=0.0), "mask_init"),
        (dict(omega0=float("nan")), "omega0"),
        (dict(fft="sometimes"), "fft"),
        (dict(fft_threshold=0), "fft_threshold"),
        (dict(base_resolution=1), "base_resolution"),
        (dict(kernel_init="xavier"), "kernel_init"),
        (dict(kernel_net=3), "kernel_net"),
        (dict(quadrature="simpson"), "quadrature"),
    ],
)
def test_sepflexconv_bad_arguments(kwargs, match):
    args = dict(in_channels=3, out_channels=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        SepFlexConv3d(**args)


def test_sepflexconv_unknown_kernel_net():
    with pytest.raises(KeyError, match="unknown kernel network"):
        SepFlexConv3d(3, 3, kernel_net="wavelet")


@pytest.mark.parametrize(
    "shape, match",
    [
        ((2, 3, 5, 5), "5-dim"),
        ((2, 4, 5, 5, 5), "expected 3 input channels"),
        ((2, 3, 5, 5, 6), "cubic"),
        ((2, 3, 1, 1, 1), "at least 2"),
    ],
)
def test_sepflexconv_bad_inputs(shape, match):
    layer = SepFlexConv3d(3, 3, kernel_size=3)
    with pytest.raises(ValueError, match=match):
        layer(torch.randn(*shape))


def test_sepflexconv_bad_dtype_and_resolution():
    layer = SepFlexConv3d(3, 3, kernel_size=3)
    with pytest.raises(ValueError, match="floating-point"):
        layer(torch.ones(1, 3, 4, 4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="dtype"):
        layer(torch.randn(1, 3, 4, 4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="resolution"):
        layer.kernel(1)
    with pytest.raises(ValueError, match="tensor"):
        check_grid_input("where", [1, 2, 3], 3)  # type: ignore[arg-type]


def test_global_kernel_covers_the_whole_grid():
    torch.manual_seed(0)
    layer = SepFlexConv3d(2, 2, kernel_size="global", base_resolution=5, mask=False).double()
    x = torch.zeros(1, 2, 5, 5, 5, dtype=torch.float64)
    x[0, :, 0, 0, 0] = 1.0  # a corner node reaches the opposite corner
    with torch.no_grad():
        z = fft_depthwise_conv3d(x, layer.kernel())
    assert (z[0, :, 4, 4, 4].abs() > 0).all()
    assert math.isclose(layer.kernel().shape[-1], 9)


def test_sepflexconv_accepts_half_precision_input_under_autocast():
    layer = SepFlexConv3d(4, 4, kernel_size=5)
    x = torch.randn(2, 4, 6, 6, 6)
    ref = layer(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x.bfloat16())
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, atol=0.1, rtol=0.1)
    with pytest.raises(ValueError, match="does not match the layer's dtype"):
        layer(x.double())


def test_sepflexconv_per_axis_kernel_samples_each_axis_at_its_spacing():
    from gridify.nn.flexconv import SepFlexConv3d

    layer = SepFlexConv3d(2, 2, kernel_size=5, base_resolution=9, cubic=False).double()
    assert layer.kernel_geometry((9, 9, 5)) == ((2, 2, 1), (0.5, 0.5, 1.0), 2.0)
    assert layer.kernel_geometry((7, 7, 7)) == layer.kernel_geometry(7)
    with torch.no_grad():
        k = layer.kernel((9, 9, 5))  # z taps at u = -1, 0, 1 (every other tap of R = 9), scale h_z / h0 = 2
        torch.testing.assert_close(k, 2.0 * layer.kernel(9)[..., ::2])
        x = torch.randn(1, 2, 9, 9, 5, dtype=torch.float64)
        q = torch.ones(9, dtype=torch.float64)
        q[0] = q[-1] = 0.5
        qz = torch.tensor([0.5, 1, 1, 1, 0.5], dtype=torch.float64)
        ref = layer.pointwise(F.conv3d(x * (q[:, None, None] * q[None, :, None] * qz), k, padding=(2, 2, 1), groups=2))
        torch.testing.assert_close(layer(x), ref)


def test_first_forward_of_sepflexconv_is_all_or_nothing(monkeypatch):
    torch.manual_seed(0)
    layer = SepFlexConv3d(3, 3, kernel_size=3)
    weights = {k: v.clone() for k, v in layer.state_dict().items()}
    monkeypatch.setattr(layer, "_depthwise", lambda x, r: (_ for _ in ()).throw(RuntimeError("out of memory")))
    with pytest.raises(RuntimeError, match="out of memory"):
        layer(_grid())
    assert layer.base_resolution is None
    _assert_same(weights, layer.state_dict())
    monkeypatch.undo()
    torch.manual_seed(0)
    fresh = SepFlexConv3d(3, 3, kernel_size=3)
    torch.testing.assert_close(layer(_grid()), fresh(_grid()))
    assert layer.base_resolution == 4
    with pytest.raises(ValueError, match="does not match the layer's dtype"):  # refused before initialising
        SepFlexConv3d(3, 3, kernel_size=3)(_grid().double())
