"""The training path of the depthwise convolution (direct forward, own backward) against conv3d's autograd."""

import pytest
import torch
import torch.nn.functional as F

from gridify.nn import depthwise as D
from gridify.nn.depthwise import DepthwiseConv3dFunction
from gridify.nn.flexconv import direct_depthwise_conv3d, fft_depthwise_conv3d


def _reference(x, w):
    x = x.detach().double().requires_grad_(True)
    w = w.detach().double().requires_grad_(True)
    y = F.conv3d(x, w, padding=w.shape[-1] // 2, groups=x.shape[1])
    return y, x, w


@pytest.mark.parametrize("R, K", [(2, 3), (4, 3), (5, 5), (6, 9), (9, 9), (7, 13)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_direct_path_values_and_gradients_match_conv3d_in_float64(R, K, channels_last):
    g = torch.Generator().manual_seed(R * 31 + K)
    x = torch.randn(2, 3, R, R, R, generator=g, dtype=torch.float64)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    w = torch.randn(3, 1, K, K, K, generator=g, dtype=torch.float64)
    up = torch.randn(2, 3, R, R, R, generator=g, dtype=torch.float64)
    y_ref, xr, wr = _reference(x, w)
    y_ref.backward(up)
    xg, wg = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y = direct_depthwise_conv3d(xg, wg)
    y.backward(up)
    torch.testing.assert_close(y, y_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(xg.grad, xr.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(wg.grad, wr.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("R, K", [(4, 3), (6, 5), (10, 9), (13, 9)])
def test_gemm_and_fft_weight_gradients_agree(R, K):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, R, R, R, generator=g, dtype=torch.float64)
    up = torch.randn(3, 4, R, R, R, generator=g, dtype=torch.float64)
    _, _, wr = _reference(x, torch.zeros(4, 1, K, K, K))
    y = F.conv3d(x, wr, padding=K // 2, groups=4)
    y.backward(up)
    torch.testing.assert_close(D.gemm_weight_gradient(x, up, K), wr.grad, rtol=1e-10, atol=1e-11)
    torch.testing.assert_close(D.fft_weight_gradient(x, up, K), wr.grad, rtol=1e-9, atol=1e-10)


def test_direct_and_fft_paths_agree_in_training():
    torch.manual_seed(0)
    x = torch.randn(2, 8, 6, 6, 6, requires_grad=True)
    w = (torch.randn(8, 1, 5, 5, 5) * 0.1).requires_grad_(True)
    outs = []
    for fn in (direct_depthwise_conv3d, fft_depthwise_conv3d):
        x.grad = w.grad = None
        y = fn(x, w)
        y.square().sum().backward()
        outs.append((y.detach(), x.grad.clone(), w.grad.clone()))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_function_passes_gradcheck():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 2, 4, 4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 1, 3, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(D.DepthwiseConv3dFunction.apply, (x, w))


# ---------------------------------------------------------------- discrete depthwise, backbones
@pytest.mark.parametrize("shape, kshape", [((6, 5, 3), (3, 3, 3)), ((7, 7, 2), (5, 5, 3)), ((4, 9, 2), (7, 5, 1))])
def test_depthwise_per_axis_forward_fft_and_gradients(shape, kshape):
    torch.manual_seed(0)
    x = torch.randn(2, 3, *shape, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 1, *kshape, dtype=torch.float64, requires_grad=True)
    pad = tuple(k // 2 for k in kshape)
    ref = F.conv3d(x, w, padding=pad, groups=3)
    out = DepthwiseConv3dFunction.apply(x, w)
    torch.testing.assert_close(out, ref)
    with torch.no_grad():
        torch.testing.assert_close(fft_depthwise_conv3d(x, w), ref)
        torch.testing.assert_close(direct_depthwise_conv3d(x, w), ref)
    g = torch.randn_like(ref)
    gx, gw = torch.autograd.grad(ref, (x, w), g)
    hx, hw = torch.autograd.grad(out, (x, w), g)
    torch.testing.assert_close(hx, gx)
    torch.testing.assert_close(hw, gw)
