"""Per-axis grid resolutions (Rx, Ry, Rz): ops, RegularGrid, (de-)gridification, discrete backbones."""
import pickle

import pytest
import torch
import torch.nn.functional as F

from gridify.backbones import DepthwiseSeparableConv3d, build_backbone
from gridify.nn.connectivity import bilateral_knn
from gridify.nn.depthwise import DepthwiseConv3dFunction
from gridify.nn.flexconv import direct_depthwise_conv3d, fft_depthwise_conv3d
from gridify.nn.gridification import Degridification, Gridification
from gridify.nn.grid import RegularGrid
from gridify.ops import grid_knn, grid_positions

SHAPES = [(9, 7, 3), (32, 32, 8), (2, 5, 3), (4, 4, 4)]


def _positions_reference(shape, lower, upper):
    rows = []
    for a in range(shape[0]):
        for b in range(shape[1]):
            for c in range(shape[2]):
                rows.append([lower[i] + (upper[i] - lower[i]) * (a, b, c)[i] / (shape[i] - 1) for i in range(3)])
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("shape", SHAPES)
def test_grid_positions_per_axis_matches_loop(shape):
    lower, upper = (-1.0, -2.0, 0.0), (1.0, 2.0, 3.0)
    got = grid_positions(shape, lower, upper, dtype=torch.float64)
    assert got.shape == (shape[0] * shape[1] * shape[2], 3)
    torch.testing.assert_close(got, _positions_reference(shape, lower, upper), rtol=0, atol=1e-12)


def _brute_knn(pos, k, shape, lower, upper, batch):
    nodes = grid_positions(shape, lower, upper, dtype=torch.float64)
    d = torch.cdist(pos.double(), nodes)
    idx = torch.topk(d, k, dim=1, largest=False, sorted=True).indices
    n = nodes.size(0)
    return idx + (batch * n)[:, None]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("k", [1, 5, 9, 20])
def test_grid_knn_per_axis_matches_brute_force(shape, k):
    g = torch.Generator().manual_seed(hash((shape, k)) % 1000)
    n_nodes = shape[0] * shape[1] * shape[2]
    k = min(k, n_nodes)
    lower, upper = (-1.0, -0.5, 0.0), (1.0, 0.5, 0.25)
    lo, hi = torch.tensor(lower), torch.tensor(upper)
    pos = (lo + (hi - lo) * (torch.rand(300, 3, generator=g, dtype=torch.float64) * 1.4 - 0.2))  # some outside
    batch = torch.cat([torch.zeros(150, dtype=torch.long), torch.ones(150, dtype=torch.long)])
    got = grid_knn(pos, k, shape, lower, upper, batch)
    assert got.shape == (2, 300 * k)
    assert torch.equal(got[0], torch.arange(300).repeat_interleave(k))
    want = _brute_knn(pos, k, shape, lower, upper, batch)
    assert torch.equal(got[1].view(300, k), want)


@pytest.mark.parametrize("R", [2, 5, 9])
def test_cubic_tuple_is_the_int_resolution(R):
    pos = torch.rand(200, 3) * 2.2 - 1.1
    batch = torch.zeros(200, dtype=torch.long)
    assert torch.equal(grid_knn(pos, 7, (R, R, R), batch=batch), grid_knn(pos, 7, R, batch=batch))
    assert torch.equal(grid_positions((R, R, R)), grid_positions(R))
    grid = RegularGrid((R, R, R))
    assert grid.resolution == R and grid == RegularGrid(R) and grid.is_cubic
    torch.manual_seed(0)
    a = Gridification(3, 8, R, k=4, aggr="max", message="concat")
    torch.manual_seed(0)
    b = Gridification(3, 8, [R, R, R], k=4, aggr="max", message="concat")
    assert b.resolution == R
    inside = pos.clamp(-1, 1)
    assert torch.equal(a(inside, inside, batch), b(inside, inside, batch))


def test_regular_grid_per_axis_layout_and_round_trip():
    grid = RegularGrid((4, 3, 2), (-1.0, -1.0, 0.0), (1.0, 3.0, 1.0))
    assert grid.shape == (4, 3, 2) and grid.resolution == (4, 3, 2) and not grid.is_cubic
    assert grid.num_nodes == 24
    assert grid.spacing == pytest.approx((2 / 3, 2.0, 1.0))
    flat = torch.randn(2 * 24, 5)
    dense = grid.to_dense(flat, 2)
    assert dense.shape == (2, 5, 4, 3, 2)
    for b, a, y, c in [(0, 0, 0, 0), (1, 3, 2, 1), (0, 2, 1, 0), (1, 1, 0, 1)]:
        torch.testing.assert_close(dense[b, :, a, y, c], flat[b * 24 + a * 6 + y * 2 + c])
    assert torch.equal(grid.from_dense(dense), flat)
    # the positions table follows the same flattening
    pos = grid.positions(dtype=torch.float64)
    torch.testing.assert_close(pos[1 * 6 + 2 * 2 + 1], torch.tensor([-1 + 2 / 3, 3.0, 1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"expected \[B, C, 4, 3, 2\]"):
        grid.from_dense(torch.randn(1, 5, 4, 4, 4))
    with pytest.raises(ValueError, match=r"4 x 3 x 2"):
        grid.to_dense(torch.randn(10, 5), 2)
    assert pickle.loads(pickle.dumps(grid)) == grid
    assert grid != RegularGrid((4, 3, 3), (-1.0, -1.0, 0.0), (1.0, 3.0, 1.0))


def test_regular_grid_unpickles_a_grid_from_before_per_axis():
    grid = RegularGrid.__new__(RegularGrid)
    grid.__setstate__({"resolution": 5, "lower": (-1.0,) * 3, "upper": (1.0,) * 3})
    assert grid == RegularGrid(5) and grid.shape == (5, 5, 5)


@pytest.mark.parametrize("bad, match", [
    ((8, 8), r"one per axis \(Rx, Ry, Rz\), got 2 values"),
    ((8, 8, 1), r"resolution\[2\] \(z\) must be an integer >= 2"),
    ((8, 2.5, 4), r"resolution\[1\] \(y\)"),
    (1, "resolution must be an integer >= 2"),
])
def test_bad_resolutions_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        RegularGrid(bad)
    with pytest.raises(ValueError, match=match):
        grid_positions(bad)
    with pytest.raises(ValueError, match=match):
        grid_knn(torch.zeros(3, 3), 1, bad)


def test_grid_knn_refuses_k_beyond_the_per_axis_node_count():
    with pytest.raises(ValueError, match=r"k=13 exceeds the number of grid nodes Rx Ry Rz=12"):
        grid_knn(torch.zeros(3, 3), 13, (3, 2, 2))


def test_bilateral_knn_per_axis_covers_points_and_nodes():
    grid = RegularGrid((8, 6, 3))
    pos = torch.rand(400, 3) * 2 - 1
    pos[:, 2] *= 0.1  # a flat cloud
    batch = torch.arange(2).repeat_interleave(200)
    graph = bilateral_knn(pos, grid, 4, batch)
    point_deg, node_deg = graph.degree()
    assert bool((point_deg > 0).all()) and bool((node_deg > 0).all())
    assert graph.num_nodes == 2 * 144
    # every point's 4 nearest grid nodes are among its edges
    p2g = grid_knn(pos, 4, grid.shape, grid.lower, grid.upper, batch)
    keys = set((graph.edge_index[0] * graph.num_nodes + graph.edge_index[1]).tolist())
    assert set((p2g[0] * graph.num_nodes + p2g[1]).tolist()) <= keys
    # nodes of cloud b only connect to points of cloud b
    assert torch.equal(graph.edge_index[1] // 144, batch[graph.edge_index[0]])


def test_gridification_per_axis_shape_point_order_and_degridification():
    torch.manual_seed(0)
    grid_mod = Gridification(3, 6, (8, 6, 3), k=4, aggr="max", message="concat").eval()
    degrid = Degridification(6, 5, aggr="max", message="concat").eval()
    pos = torch.rand(300, 3) * 2 - 1
    batch = torch.arange(2).repeat_interleave(150)
    x = torch.randn(300, 3)
    g, graph = grid_mod(pos, x, batch, return_graph=True)
    assert g.shape == (2, 6, 8, 6, 3)
    out = degrid(g, graph)
    assert out.shape == (300, 5)
    perm = torch.cat([torch.randperm(150), 150 + torch.randperm(150)])
    g2, graph2 = grid_mod(pos[perm], x[perm], batch, return_graph=True)
    torch.testing.assert_close(g2, g, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(degrid(g2, graph2), out[perm], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"grid must have shape \[2, 6, 8, 6, 3\]"):
        degrid(torch.randn(2, 6, 8, 8, 8), graph)
    with pytest.raises(ValueError, match=r"\[B, C, Rx, Ry, Rz\] or \[B \* Rx Ry Rz, C\]"):
        degrid(torch.randn(2, 6, 8), graph)


def test_set_resolution_to_a_per_axis_grid():
    mod = Gridification(3, 4, 5, k=3)
    mod.set_resolution((6, 6, 2))
    assert mod.resolution == (6, 6, 2)
    assert mod(torch.rand(50, 3) * 2 - 1).shape == (1, 4, 6, 6, 2)


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
    net = build_backbone(name, in_channels=3, out_channels=2, hidden_channels=8, depth=3, kernel_size=5,
                         dropout=0.0, cubic=False)
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
        b = build_backbone(name, in_channels=3, out_channels=2, hidden_channels=8, depth=2, kernel_size=5,
                           cubic=False).eval()
        torch.testing.assert_close(a(x), b(x))


def test_unet_down_sampling_per_axis():
    net = build_backbone("unet", in_channels=3, out_channels=2, hidden_channels=4, depth=4, kernel_size=3,
                         cubic=False)
    assert net.levels_used((32, 32, 8)) == 4  # z: 8 -> 4 -> 2 -> 2, x/y keep halving
    assert net.levels_used((2, 2, 2)) == 1
    assert net.levels_used((2, 2, 3)) == 2
    assert net.levels_used(9) == 4


@pytest.mark.parametrize("kernel_size", [5, "global"])
def test_ccnn_runs_on_per_axis_grids(kernel_size):
    torch.manual_seed(0)
    net = build_backbone("ccnn", in_channels=3, out_channels=2, hidden_channels=8, depth=2, kernel_size=kernel_size,
                         dropout=0.0, cubic=False)
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
