"""Regression tests of hardening round two (issue 17), one section per failure class.

1. Every tensor argument of every public entry is validated (type, dtype, shape, device,
   NaN/Inf, index ranges), once, at the outermost entry.
2. No precision is lost and nothing overflows silently: float16 clouds with a wide spread,
   coordinates at 1e160, float64 offsets (UTM coordinates, Unix timestamps).
3. Index and size arguments are checked; sizes against the allocation limit before anything
   is allocated (``GRIDIFY_MAX_ALLOC_BYTES``).
5. Messages name the real cause (checkpoint structure, ragged lists, unsupported dtypes).

And a failed call leaves no half-done state (BatchNorm statistics, resolutions, first-forward
initialisation, predictor mode and caches, metric states).
"""
import math
import time
import warnings

import numpy as np
import pytest
import torch

import gridify
from gridify import _checks
from gridify.api import Predictor, estimate_normals, normalize_cloud
from gridify.backbones import CCNN, ResNet3d, UNet3d
from gridify.baselines import PointNet2Classifier, PointSepCKConv, knn_interpolate
from gridify.checkpoint import CheckpointError, build_model_from_checkpoint, load_checkpoint
from gridify.metrics import OverallAccuracy, ShapeNetPartIoU
from gridify.models import GridifiedClassifier, GridifiedSegmenter, TemporalGridifiedClassifier
from gridify.models.temporal import timespans_from_times
from gridify.nn import (MAGNet, BipartiteConv, CfC, CfCCell, ChannelLayerNorm, Degridification, DeltaTGRU,
                        Gridification, MRConv3d,
                        RandomFourierField, SepFlexConv3d, SIRENField, recalibrate_batchnorm, reparameterize_model)
from gridify.ops import fps, grid_knn, grid_positions, knn, knn_reference, radius, radius_reference, scatter
from gridify.ops.sampling import fps_reference
from gridify.transforms import Normalize, RandomJitter, RandomRotateZ, rotation_matrix

NAN = float("nan")


def _grid(b=2, c=3, r=4, seed=0):
    return torch.randn(b, c, r, r, r, generator=torch.Generator().manual_seed(seed))


def _with(t, index, value=NAN):
    t = t.clone()
    t[index] = value
    return t


def _small_classifier(**kw):
    args = dict(resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    args.update(kw)
    return GridifiedClassifier(3, 3, **args)


def _clouds(b=2, n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, n, 3, generator=g) * 1.6 - 0.8


# ------------------------------------------------------------------------------------------
# 1. every tensor argument
# ------------------------------------------------------------------------------------------
def _bipartite_call(**bad):
    torch.manual_seed(0)
    conv = BipartiteConv(2, 4, 8)
    args = dict(x_src=torch.randn(5, 2), edge_src=torch.tensor([0, 1, 4]), edge_dst=torch.tensor([0, 2, 1]),
                offset=torch.randn(3, 3), num_dst=3)
    args.update(bad)
    return conv(**args)


NESTED_INPUTS = [
    (lambda: RandomFourierField(3, 8)(_with(torch.randn(6, 3), (2, 1)) * 0.1),
     r"RandomFourierField: offset contains NaN values \(1 entry affected\); first at row 2"),
    (lambda: SIRENField(3, 8)(_with(torch.randn(6, 3), (4, 0), float("inf"))), "SIRENField: offset contains Inf"),
    (lambda: SIRENField(3, 8)(offset=_with(torch.randn(6, 3), (1, 0))), "SIRENField: offset contains NaN"),
    (lambda: MAGNet(4)(coords=torch.rand(5, 2)), r"MAGNet: coords must have shape \[\.\.\., 3\]"),
    (lambda: MAGNet(4)(_with(torch.rand(5, 3), (1, 2))), "MAGNet: coords contains NaN"),
    (lambda: MAGNet(4)(torch.rand(5, 3).double()), "coords has dtype torch.float64, which does not match"),
    (lambda: SepFlexConv3d(3, 3, kernel_size=3)(_with(_grid(), (1, 2, 0, 1, 3))),
     "SepFlexConv3d: x contains NaN values .* first at cloud 1, channel 2, x 0, y 1, z 3"),
    (lambda: MRConv3d(3)(_with(_grid(), (0, 1, 1, 1, 1))), "MRConv3d: x contains NaN"),
    (lambda: ChannelLayerNorm(3)(_with(_grid(), (0, 0, 0, 0, 0), -float("inf"))), "ChannelLayerNorm: x contains Inf"),
    (lambda: ChannelLayerNorm(3)(_grid(c=4)), r"ChannelLayerNorm: x must have shape \[B, 3, \.\.\.\]"),
    (lambda: CCNN(3, 3, hidden_channels=4, depth=1, kernel_size=3)(_with(_grid(), (1, 0, 3, 3, 3))),
     "CCNN: x contains NaN values .* cloud 1"),
    (lambda: ResNet3d(3, 3, hidden_channels=4, depth=1, kernel_size=3)(_with(_grid(), (0, 0, 0, 0, 0))),
     "ResNet3d: x contains NaN"),
    (lambda: UNet3d(3, 3, hidden_channels=4, depth=2, kernel_size=3)(_grid().double()),
     "UNet3d: x has dtype torch.float64, which does not match the layer's dtype torch.float32"),
    (lambda: CCNN(3, 3, hidden_channels=4, depth=1, kernel_size=3)(_grid().to("meta")),
     "CCNN: x is on meta but the module's parameters are on cpu"),
    (lambda: _bipartite_call(x_src=_with(torch.randn(5, 2), (3, 1))), "BipartiteConv: x_src contains NaN .* row 3"),
    (lambda: _bipartite_call(offset=_with(torch.randn(3, 3), (2, 2))), "BipartiteConv: offset contains NaN .* edge 2"),
    (lambda: _bipartite_call(edge_src=torch.tensor([0, 1, 5])), r"edge_src values must lie in \[0, 5\), got 5"),
    (lambda: _bipartite_call(edge_dst=torch.tensor([0, -1, 1])), r"edge_dst values must lie in \[0, 3\), got -1"),
    (lambda: _bipartite_call(edge_dst=torch.tensor([0.0, 1.0, 1.0])), "edge_dst must be an integer tensor"),
    (lambda: _bipartite_call(num_dst=-1), "num_dst must be a non-negative integer"),
    (lambda: CfC(3, 4)(_with(torch.randn(2, 5, 3), (1, 0, 2))), "CfC: input contains NaN .* sequence 1, step 0"),
    (lambda: CfC(3, 4)(torch.randn(2, 5, 3), hx=_with(torch.zeros(2, 4), (0, 3))), "CfC: hx contains NaN"),
    (lambda: CfC(3, 4)(torch.randn(2, 5, 3), torch.ones(2, 5, dtype=torch.bool)), "timespans must hold real"),
    (lambda: CfCCell(3, 4)(torch.randn(2, 3), timespans=torch.tensor([1.0, NAN])), "timespans contains NaN/Inf"),
    (lambda: CfCCell(3, 4)(torch.randn(2, 3), timespans=torch.tensor([1.0, -2.0])), "must be non-negative"),
    (lambda: CfCCell(3, 4)(_with(torch.randn(2, 3), (1, 1))), "CfCCell: input contains NaN"),
    (lambda: DeltaTGRU(3, 4)(torch.randn(2, 5, 3), mask=torch.ones(2, 5)), "mask must be a boolean"),
    (lambda: DeltaTGRU(3, 4)(torch.randn(2, 5, 3), lengths=torch.tensor([2.0, 3.0])), "lengths must be an integer"),
    (lambda: CfC(3, 4).half()(torch.randn(2, 5, 3, dtype=torch.float16), torch.full((2, 5), 1e5)),
     "timespans up to 1e\\+05 overflow torch.float16"),
    (lambda: knn_interpolate(_with(torch.randn(6, 2), (5, 0)), torch.rand(6, 3), torch.rand(2, 3)),
     "knn_interpolate: x contains NaN .* at row 5"),
    (lambda: PointSepCKConv(2, 2)(torch.randn(4, 2), torch.rand(4, 3), torch.tensor([[0, 1]] * 3 + [[3, 4]])),
     r"nbr values must lie in \[0, 4\), got 4"),
    (lambda: OverallAccuracy().update(_with(torch.randn(3, 4), (1, 1)), torch.tensor([0, 1, 2])),
     "OverallAccuracy: preds contains NaN .* sample 1, class 1"),
    (lambda: OverallAccuracy().update(torch.tensor([0, 1]), torch.tensor([True, False])),
     "target must hold integer class ids, got dtype torch.bool"),
    (lambda: fps(torch.rand(6, 3), torch.tensor([0, 0, 0, 1, 1, 1]), start=torch.tensor([True, False])),
     "start must be an integer tensor, got dtype torch.bool"),
    (lambda: fps(torch.rand(6, 3), random_start="yes"), "random_start must be a bool"),
    (lambda: knn(torch.rand(4, 3), torch.rand(4, 3).to("meta"), 2), "x is on cpu but y is on meta"),
    (lambda: knn(torch.rand(4, 3).to(torch.float8_e4m3fn), torch.rand(4, 3), 2),
     "x has the unsupported dtype torch.float8_e4m3fn; use float16, bfloat16, float32 or float64"),
    (lambda: grid_knn(torch.rand(4, 3), 2, 3, lower=NAN), r"grid_knn: lower must be finite"),
    (lambda: grid_knn(torch.rand(4, 3), 2, 3, lower=[-1.0, -1.0]), "lower must be a number or one number per axis"),
    (lambda: grid_knn(torch.rand(4, 3), 2, 3, lower="left"), "lower must be a number or one number per axis"),
    (lambda: grid_knn(torch.rand(4, 3), 2, 3, lower=-1e308, upper=1e308), "extent upper - lower overflows"),
    (lambda: RandomRotateZ()({"pos": _with(torch.rand(5, 3), (2, 2))}), "RandomRotateZ: 'pos' contains NaN/Inf"),
    (lambda: RandomRotateZ()({"pos": torch.rand(5, 3), "normal": torch.rand(4, 3)}), r"'normal' must have shape \[5, 3\]"),
    (lambda: RandomJitter(sigma=NAN), "sigma must be a non-negative finite number"),
    (lambda: RandomJitter()({"pos": np.arange(15).reshape(5, 3)}), "'pos' must hold floating-point coordinates"),
    (lambda: rotation_matrix(3, 0.5), "rotation_matrix: axis must be 0, 1 or 2, got 3"),
    (lambda: rotation_matrix(2, NAN), "rotation_matrix: angle must be a finite number"),
    (lambda: _small_classifier().pool_grid(torch.rand(2, 8, 4)), r"pool_grid: z must be backbone features \[B, 8"),
    (lambda: MRConv3d(2, num_branches=2).branch_kernel(2, 5), r"index must be a branch in \[0, 2\), got 2"),
    (lambda: MRConv3d(2).branch_kernel(0, 4), "support must be odd"),
    (lambda: reparameterize_model("model"), "reparameterize_model: model must be a torch.nn.Module, got str"),
    (lambda: estimate_normals(np.zeros((4, 2))), r"estimate_normals: pos must be a finite, non-empty \[N, 3\]"),
    (lambda: estimate_normals(np.random.rand(9, 3), k=0), "k must be a positive integer, got 0"),
]


@pytest.mark.parametrize("call, match", NESTED_INPUTS)
def test_every_tensor_argument_is_validated(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_scatter_validates_src():
    with pytest.raises(ValueError, match=r"scatter: src contains NaN values \(1 entry affected\); first at row 1"):
        scatter(torch.tensor([[0.0], [NAN]]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="src must be a floating-point or integer tensor, got dtype torch.bool"):
        scatter(torch.ones(2, dtype=torch.bool), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="reduce='mean' needs a floating-point src"):
        scatter(torch.ones(2, dtype=torch.long), torch.tensor([0, 1]), reduce="mean")
    with pytest.raises(ValueError, match="index is on meta but src is on cpu"):
        scatter(torch.ones(2, 1), torch.tensor([0, 1], device="meta"))
    assert torch.equal(scatter(torch.tensor([3, 4, 5]), torch.tensor([1, 1, 0]), 3), torch.tensor([5, 7, 0]))


def test_segmenter_checks_category_before_any_state_changes():
    m = GridifiedSegmenter(3, 5, num_categories=4, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3,
                           point_channels=4).train()
    stats = {k: v.clone() for k, v in m.state_dict().items() if "running" in k}
    pos = _clouds()
    for bad, match in ((torch.tensor([True, False]), "got dtype torch.bool"),
                       (torch.tensor([1, 4]), r"integers in \[0, 4\), got 4 for cloud 1"),
                       (torch.tensor([0, 1], device="meta"), "category is on meta")):
        with pytest.raises(ValueError, match=match):
            m(pos, category=bad)
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in stats.items())  # no BatchNorm saw a batch


def test_temporal_model_names_the_sequence_and_frame_of_bad_values():
    m = TemporalGridifiedClassifier(3, 2, resolution=4, k=4, hidden_channels=8, depth=1).eval()
    pos = torch.rand(2, 3, 16, 3) * 1.6 - 0.8
    mask = torch.tensor([[True, True, True], [True, True, False]])
    x = pos.clone()
    x[1, 2, 5, 0] = NAN  # a padded frame: ignored
    out = m(pos, mask=mask, x=x)
    assert torch.isfinite(out.logits).all()
    x[1, 1, 7, 2] = NAN
    with pytest.raises(ValueError, match="x contains NaN values at valid frames .* sequence 1, frame 1, point 7"):
        m(pos, mask=mask, x=x)
    with pytest.raises(ValueError, match=r"mask must be a boolean \(or 0/1 integer\) tensor"):
        m(pos, mask=torch.full((2, 3), 2))
    with pytest.raises(ValueError, match="times must hold real numbers"):
        m(pos, times=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="lengths is on meta"):
        m(pos, lengths=torch.tensor([1, 2], device="meta"))


def test_degridification_validates_a_graph_given_from_outside():
    torch.manual_seed(0)
    grid, graph = Gridification(3, 4, 3, k=3)(_clouds()[0], return_graph=True)
    graph.edge_index = graph.edge_index.clone()
    graph.edge_index[1, 5] = 27  # beyond the 27 nodes of the one cloud
    with pytest.raises(ValueError, match=r"graph.edge_index\[1\] \(grid nodes\) values must lie in \[0, 27\)"):
        Degridification(4, 2)(grid.detach(), graph)


def test_public_grid_and_box_helpers_validate():
    with pytest.raises(ValueError, match="grid_positions: resolution must be an integer >= 2"):
        grid_positions(1)
    with pytest.raises(ValueError, match="dtype has the unsupported dtype"):
        grid_positions(3, dtype=torch.float8_e5m2)
    with pytest.raises(ValueError, match=r"RegularGrid.contains: pos must have shape \[N, 3\]"):
        Gridification(3, 4, 3).grid.contains(torch.rand(4, 2))
    with pytest.raises(ValueError, match="Gridification: bounds must be a pair"):
        Gridification(3, 4, 3, bounds=1.0)


# ------------------------------------------------------------------------------------------
# 2. precision
# ------------------------------------------------------------------------------------------
def _wide(n=200, spread=300.0, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(n, 3, generator=g) * 2 - 1) * spread).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fps_of_a_wide_half_precision_cloud_equals_float64(dtype):
    p = _wide(dtype=dtype)
    assert torch.equal(fps(p, random_start=False, ratio=0.3), fps_reference(p.double(), ratio=0.3))


@pytest.mark.parametrize("backend", ["torch", "kdtree"])
def test_radius_of_a_wide_half_precision_cloud_equals_float64(backend):
    p = _wide()
    out = radius(p, p[:20], 290.0, max_num_neighbors=500, backend=backend)  # r^2 = 84100 > float16's 65504
    ref = radius_reference(p.double(), p[:20].double(), 290.0, max_num_neighbors=500)
    assert set(map(tuple, out.t().tolist())) == set(map(tuple, ref.t().tolist()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_grid_knn_in_a_wide_box_is_exact(dtype):
    p = _wide(dtype=dtype, n=60, spread=2000.0)  # node spacing 1000: squared distances beyond float16's range
    out = grid_knn(p, 6, 3, -2000.0, 2000.0)
    nodes = grid_positions(3, -2000.0, 2000.0, dtype=torch.float64)
    d = (p.double()[:, None] - nodes[None]).pow(2).sum(-1)
    torch.testing.assert_close(d.gather(1, out[1].view(-1, 6)).sort(1).values, d.sort(1).values[:, :6])


def test_grid_knn_and_radius_at_1e160():
    p = _wide(dtype=torch.float64, n=50) * 1e158
    out = grid_knn(p, 4, 5, -3e160, 3e160)
    nodes = grid_positions(5, -3e160, 3e160, dtype=torch.float64) / 1e160
    d = (p[:, None] / 1e160 - nodes[None]).pow(2).sum(-1)
    torch.testing.assert_close(d.gather(1, out[1].view(-1, 4)).sort(1).values, d.sort(1).values[:, :4])
    for backend in ("torch", "kdtree"):
        got = radius(p, p[:5], 1e160, max_num_neighbors=100, backend=backend)
        ref = radius_reference(p / 1e160, p[:5] / 1e160, 1.0, max_num_neighbors=100)
        assert torch.equal(got, ref)


@pytest.mark.parametrize("scale, dtype", [(1e160, torch.float64), (1e-30, torch.float32), (300.0, torch.float16)])
@pytest.mark.parametrize("backend", ["torch", "kdtree"])
def test_knn_ranks_extreme_coordinates_exactly(scale, dtype, backend):
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(40, 3, generator=g, dtype=torch.float64) * scale).to(dtype)
    out = knn(x, x, 4, backend=backend)
    ref = knn_reference(x, x, 4)
    assert torch.equal(out, ref)


def test_scatter_accumulates_half_precision_in_float32():
    idx = torch.zeros(2000, dtype=torch.long)
    assert scatter(torch.full((2000, 1), 40.0, dtype=torch.float16), idx, reduce="mean").item() == 40.0
    ones = torch.ones(1001, 1, dtype=torch.bfloat16)
    assert scatter(ones * 3, idx[:1001], reduce="mean").item() == 3.0
    assert scatter(ones, idx[:1001], reduce="sum").item() == 1000.0  # 1001 rounds to 1000 in bfloat16 once


def test_knn_interpolate_of_a_wide_half_precision_cloud():
    p = _wide(n=80)
    x = torch.randn(80, 2).half()
    out = knn_interpolate(x, p, p[:10] + 1)
    ref = knn_interpolate(x.double(), p.double(), p[:10].double() + 1)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)


def test_pointnet2_half_precision_start_point_on_an_unnormalized_cloud():
    torch.manual_seed(0)
    m = PointNet2Classifier(3, 2, radii=(20.0, 40.0)).eval()
    pos = (100 + torch.rand(2000, 3) * 30).half()  # a float16 centroid sum overflows (2000 x 115 > 65504)
    batch = torch.zeros(2000, dtype=torch.long)
    # the eval-mode start point is the point farthest from the centroid, in float16 as in float64
    _, ref, _ = m.double().sa1(pos.double(), pos.double(), batch, 1)
    _, out, _ = m.half().sa1(pos, pos, batch, 1)
    assert torch.equal(out.double(), ref)
    assert torch.isfinite(m(pos)).all()


@pytest.mark.parametrize("fn", [lambda p: normalize_cloud(p)[0], lambda p: Normalize()({"pos": p})["pos"]])
def test_normalization_of_extreme_coordinates(fn):
    rng = np.random.default_rng(0)
    p = rng.uniform(-1, 1, (30, 3))
    ref = normalize_cloud(p)[0]
    for scale in (1e160, 1e300, 1e-300):
        np.testing.assert_allclose(fn(p * scale), ref, rtol=1e-6, atol=1e-6)


def test_gridify_keeps_utm_precision():
    pts = np.random.default_rng(0).uniform(-1, 1, (100, 3))
    ref = gridify.gridify(pts)
    for offset in (5e5, 4e6, 1e9):
        torch.testing.assert_close(gridify.gridify(pts + offset), ref, rtol=1e-4, atol=1e-5)


def test_predictor_keeps_utm_precision():
    torch.manual_seed(0)
    pred = Predictor(_small_classifier(), task="classification", class_names=["a", "b", "c"], num_points=50,
                     in_channels=3)
    pts = np.random.default_rng(1).uniform(-1, 1, (80, 3))
    ref = pred.predict(pts).probabilities
    np.testing.assert_allclose(pred.predict(pts + np.array([5e5, 4e6, 120.0])).probabilities, ref, atol=1e-5)
    np.testing.assert_allclose(pred.predict(torch.from_numpy(pts).bfloat16()).probabilities.sum(), 1, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_temporal_times_are_differenced_in_float64(dtype):
    torch.manual_seed(0)
    m = TemporalGridifiedClassifier(3, 2, resolution=4, k=4, hidden_channels=8, depth=1).to(dtype).eval()
    pos = (torch.rand(1, 4, 20, 3) * 1.6 - 0.8).to(dtype)
    t = torch.tensor([[0.0, 0.5, 1.1, 2.0]], dtype=torch.float64)
    ref = m(pos, t).logits
    torch.testing.assert_close(m(pos, t + 1.7e9).logits, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m(pos, (t * 1000).long() + 1_700_000_000_000, ).logits.shape, ref.shape)
    spans = timespans_from_times(t + 1.7e9, torch.ones(1, 4, dtype=torch.bool), first=0.0)
    torch.testing.assert_close(spans, torch.tensor([[0.0, 0.5, 0.6, 0.9]], dtype=torch.float64))


# ------------------------------------------------------------------------------------------
# 3. index and size arguments, allocation limit
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, match", [
    (dict(index=torch.tensor([0, -1, 1])), "index values must be non-negative bucket numbers, got -1 at position 1"),
    (dict(index=torch.zeros(0, dtype=torch.long), dim_size=-3), "dim_size must be a non-negative integer, got -3"),
    (dict(dim_size=2.5), "dim_size must be a non-negative integer, got 2.5"),
    (dict(dim_size=True), "dim_size must be a non-negative integer, got True"),
    (dict(dim_size=10 ** 13), r"dim_size=10000000000000 \(an output of \[10000000000000, 2\] torch.float32\) would "
                              r"need .* more than the allocation limit"),
])
def test_scatter_index_and_size_arguments(kwargs, match):
    args = dict(src=torch.ones(3, 2), index=torch.tensor([0, 1, 1]))
    if "index" in kwargs:
        args["src"] = torch.ones(kwargs["index"].numel(), 2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        scatter(**args)


def test_allocation_limit_comes_from_the_environment(monkeypatch):
    limit, source = _checks.max_alloc_bytes()
    assert source == "the physical memory" and limit == _checks.physical_memory() > 0
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", "1e6")
    assert _checks.max_alloc_bytes() == (1_000_000, "GRIDIFY_MAX_ALLOC_BYTES")
    with pytest.raises(ValueError, match=r"more than the allocation limit of 976.6 KiB \(GRIDIFY_MAX_ALLOC_BYTES"):
        scatter(torch.ones(3, 2), torch.tensor([0, 1, 1]), dim_size=200_000)
    with pytest.raises(ValueError, match=r"grid_positions: resolution=64 .* would need 6.0 MiB"):
        grid_positions(64)
    with pytest.raises(ValueError, match=r"fps: batch \(padded to 100 clouds x 2001 points"):
        fps(torch.rand(2100, 3), torch.cat([torch.zeros(2001, dtype=torch.long), torch.arange(1, 100)]))
    with pytest.raises(ValueError, match=r"knn: k=2000 for 2000 queries among 2000 points"):
        knn(torch.rand(2000, 3), torch.rand(2000, 3), 2000)
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", "lots")
    with pytest.raises(ValueError, match="GRIDIFY_MAX_ALLOC_BYTES must be a positive number of bytes, got 'lots'"):
        scatter(torch.ones(3, 2), torch.tensor([0, 1, 1]))


def _payload(**model_kwargs):
    kwargs = dict(in_channels=3, num_classes=3, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    kwargs.update(model_kwargs)
    return {"state_dict": {}, "model_name": "gridified_classifier", "model_kwargs": kwargs,
            "task": "classification", "info": {}, "config": {}}


@pytest.mark.parametrize("kwargs, match", [
    (dict(resolution=100000), r"resolution=100000 with 8 channels .* would need"),
    (dict(hidden_channels=10 ** 9), r"hidden_channels=1000000000, depth=1 .* would need"),
    (dict(backbone="unet", depth=60), r"channel_multiplier=2, depth=60 .* would need"),
    (dict(num_classes=10 ** 13, backbone="resnet"), r"would need"),
])
def test_checkpoint_sizes_are_refused_before_anything_is_allocated(kwargs, match):
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=match):
        build_model_from_checkpoint(_payload(**kwargs))
    assert time.perf_counter() - start < 5


def test_batch_and_cloud_counts_are_checked_before_allocating():
    pos = torch.rand(4, 3) * 0.5
    with pytest.raises(ValueError, match="num_clouds=1000000000000 asks for 1000000000000 clouds but there are only "
                                         "4 points"):
        Gridification(3, 4, 3, k=2)(pos, num_clouds=10 ** 12)
    with pytest.raises(ValueError, match="num_clouds must be a non-negative integer"):
        Gridification(3, 4, 3, k=2)(pos, num_clouds=2.5)
    with pytest.raises(ValueError, match=r"batch \(it refers to cloud 999999999999\) asks for"):
        Gridification(3, 4, 3, k=2)(pos, batch=torch.tensor([0, 0, 0, 10 ** 12 - 1]))
    with pytest.raises(ValueError, match=r"batch_y with 1000000000001 clouds .* would need"):
        knn(torch.rand(2, 3), torch.rand(2, 3), 1, batch_y=torch.tensor([0, 10 ** 12]))


def test_predictor_size_and_seed_arguments(monkeypatch):
    pred = Predictor(_small_classifier(), task="classification", class_names=["a", "b", "c"], num_points=50,
                     in_channels=3)
    pts = np.random.default_rng(0).uniform(-1, 1, (70, 3))
    with pytest.raises(ValueError, match=r"Predictor.predict: num_votes=1000000000 \(subsets of 50 points\) would need"):
        pred.predict(pts, num_votes=10 ** 9)
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -1"):
        pred.predict(pts, seed=-1)
    with pytest.raises(ValueError, match="Predictor.embed: num_votes must be a positive integer, got 0"):
        pred.embed(pts, num_votes=0)
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 2.5"):
        pred.embed(pts, batch_size=2.5)
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", "2e6")
    with pytest.raises(ValueError, match=r"batch_size=64 \(up to 64 clouds of 50 points per forward pass\)"):
        pred.predict(pts, num_votes=64, batch_size=64)


def test_resolution_changes_are_checked_and_all_or_nothing(monkeypatch):
    m = _small_classifier()
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", "1e6")
    with pytest.raises(ValueError, match=r"Gridification.set_resolution: resolution=100 with 8 channels"):
        m.set_resolution(100)
    assert m.resolution == 4
    with pytest.raises(ValueError, match="MRConv3d.branch_supports: resolution=200"):
        MRConv3d(4).branch_supports(200)
    with pytest.raises(ValueError, match=r"SepFlexConv3d.kernel: resolution=100 \(a kernel of 199\^3 taps"):
        SepFlexConv3d(4, 4, base_resolution=5).kernel(100)


# ------------------------------------------------------------------------------------------
# 5. messages that name the cause
# ------------------------------------------------------------------------------------------
def _export(tmp_path, **entries):
    torch.manual_seed(0)
    model = _small_classifier()
    raw = {"state_dict": model.state_dict(), "model_name": "gridified_classifier",
           "model_kwargs": dict(in_channels=3, num_classes=3, resolution=4, k=4, hidden_channels=8, depth=1,
                                kernel_size=3),
           "task": "classification", "info": {"class_names": ["a", "b", "c"], "num_points": 50},
           "config": {"data": {"normalize": True}}}
    raw.update(entries)
    path = tmp_path / "model.pt"
    torch.save(raw, path)
    return path


@pytest.mark.parametrize("entries, match", [
    (dict(state_dict="weights"), "entry 'state_dict' must be a dict of tensors, got str"),
    (dict(state_dict={"gridify.x": [1, 2]}), r"entry state_dict\['gridify.x'\] must be a tensor"),
    (dict(info="nothing"), "entry 'info' must be a dict, got str"),
    (dict(model_kwargs=[1, 2]), "entry 'model_kwargs' must be a dict of keyword arguments, got list"),
    (dict(model_name=7), "entry 'model_name' must be a string, got int"),
    (dict(task="regression"), "entry 'task' is 'regression'; gridify.load serves the models of the tasks \\['classification', 'segmentation'"),
    (dict(task=3), "entry 'task' must be a string, got int"),
    (dict(class_names="abc"), "entry 'class_names' must be a list of strings or None"),
    (dict(config={"data": {"num_points": "1024"}}), r"entry config\['data'\]\['num_points'\] must be an integer"),
    (dict(info={"category_to_parts": [[0, -1]]}), r"entry info\['category_to_parts'\] must be a list of lists"),
    (dict(reparameterized="yes"), "entry 'reparameterized' must be a bool"),
])
def test_checkpoint_entries_of_the_wrong_type_are_named(tmp_path, entries, match):
    with pytest.raises(CheckpointError, match=match):
        gridify.load(_export(tmp_path, **entries))


def test_lightning_checkpoint_with_a_bad_info_entry(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"model_name": "gridified_classifier", "model_kwargs": {},
                                                      "task": "classification", "info": "x", "config": {}}}, path)
    with pytest.raises(CheckpointError, match="entry 'info' must be a dict, got str"):
        load_checkpoint(path)
    torch.save({"state_dict": {}, "hyper_parameters": "x"}, path)
    with pytest.raises(CheckpointError, match="entry 'hyper_parameters' must be a dict, got str"):
        load_checkpoint(path)


def test_checkpoint_weights_are_checked_before_loading(tmp_path):
    torch.manual_seed(0)
    state = _small_classifier().state_dict()
    bad = dict(state)
    key = next(k for k, v in state.items() if v.is_floating_point())
    bad[key] = _with(state[key], (0,) * state[key].dim())
    with pytest.raises(CheckpointError, match=rf"entry state_dict\['{key}'\] holds NaN/Inf values"):
        gridify.load(_export(tmp_path, state_dict=bad))
    missing = {k: v for k, v in state.items() if k != key}
    with pytest.raises(CheckpointError, match=rf"missing \['{key}'\]"):
        gridify.load(_export(tmp_path, state_dict=missing))
    wide = dict(state, **{key: torch.zeros(3, *state[key].shape)})
    with pytest.raises(CheckpointError, match=rf"entry state_dict\['{key}'\] has shape \(3, "):
        gridify.load(_export(tmp_path, state_dict=wide))
    ints = dict(state, **{key: state[key].long()})
    with pytest.raises(CheckpointError, match=rf"entry state_dict\['{key}'\] has dtype torch.int64"):
        gridify.load(_export(tmp_path, state_dict=ints))
    with pytest.raises(CheckpointError, match="class_names names 2 classes but the model has 3 outputs"):
        gridify.load(_export(tmp_path, info={"class_names": ["a", "b"]}))
    with pytest.raises(ValueError, match="gridify.load: device must be a torch.device or a name"):
        gridify.load(_export(tmp_path), device="gpu9")
    assert gridify.load(_export(tmp_path)).predict(np.random.rand(50, 3)).probabilities.shape == (3,)


def test_api_input_conversion_names_the_problem():
    with pytest.raises(ValueError, match="points is a ragged nested list"):
        gridify.gridify([[0.0, 0.0, 0.0], [1.0, 2.0]])
    with pytest.raises(TypeError, match="points must hold real numbers, got dtype torch.complex64"):
        gridify.gridify(torch.zeros(5, 3, dtype=torch.complex64))
    with pytest.raises(ValueError, match="points hold values beyond float32's range"):
        gridify.gridify(np.random.rand(20, 3) * 1e300, normalize=False)
    assert gridify.gridify(np.random.rand(20, 3) * 1e300, resolution=3, k=2).shape == (16, 3, 3, 3)
    with pytest.raises(ValueError, match="features hold values beyond float32's range"):
        gridify.gridify(np.random.rand(20, 3), np.full((20, 2), 1e200))
    with pytest.raises(ValueError, match="channels must be a positive integer, got 2.5"):
        gridify.gridify(np.random.rand(20, 3), channels=2.5)
    assert gridify.gridify(torch.rand(30, 3, dtype=torch.bfloat16), resolution=3, k=2).shape == (16, 3, 3, 3)


# ------------------------------------------------------------------------------------------
# no half-done state
# ------------------------------------------------------------------------------------------
def _bn_state(model):
    return {k: v.clone() for k, v in model.state_dict().items() if "running" in k or "num_batches" in k}


def _assert_same(a, b):
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_recalibration_failing_on_the_third_batch_restores_everything():
    torch.manual_seed(0)
    m = _small_classifier().eval()
    m(_clouds())  # nothing changes in eval mode
    before = _bn_state(m)
    momenta = [mod.momentum for mod in m.modules() if isinstance(mod, torch.nn.BatchNorm3d)]
    bad = _clouds(seed=3)
    bad[0, 0, 0] = NAN

    def batches():
        yield (_clouds(seed=1),)
        yield (_clouds(seed=2),)
        yield (bad,)

    with pytest.raises(ValueError, match="pos contains NaN"):
        recalibrate_batchnorm(m, batches())
    _assert_same(before, _bn_state(m))
    assert not m.training and [mod.momentum for mod in m.modules() if isinstance(mod, torch.nn.BatchNorm3d)] == momenta
    with pytest.raises(ValueError, match="batches was empty"):
        recalibrate_batchnorm(m, [])
    _assert_same(before, _bn_state(m))
    with pytest.raises(ValueError, match="pos contains NaN"):
        m.set_resolution(6, calibration_batches=[(_clouds(seed=1),), (bad,)])
    assert m.resolution == 4
    _assert_same(before, _bn_state(m))
    m.set_resolution(6, calibration_batches=[(_clouds(seed=1),)])
    assert m.resolution == 6 and not all(torch.equal(v, _bn_state(m)[k]) for k, v in before.items())


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


def test_first_forward_of_point_sepckconv_is_all_or_nothing(monkeypatch):
    torch.manual_seed(0)
    conv = PointSepCKConv(2, 2)
    weights = {k: v.clone() for k, v in conv.state_dict().items()}
    nbr = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0]])
    monkeypatch.setattr(conv, "_chunk", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        conv(torch.randn(4, 2), torch.rand(4, 3), nbr)
    assert not bool(conv.initialized)
    _assert_same(weights, conv.state_dict())


def test_predictor_failing_halfway_leaves_mode_buffers_and_caches(monkeypatch):
    torch.manual_seed(0)
    pred = Predictor(_small_classifier(), task="classification", class_names=["a", "b", "c"], num_points=50,
                     in_channels=3)
    pts = np.random.default_rng(0).uniform(-1, 1, (70, 3))
    ref = pred.predict(pts, num_votes=3, batch_size=1).probabilities
    pred.model.train()  # a user's setting: predict runs in eval mode and restores it
    np.testing.assert_allclose(pred.predict(pts, num_votes=3, batch_size=1).probabilities, ref, atol=1e-6)
    assert all(m.training for m in pred.model.modules())
    pred.model.eval()
    fresh = Gridification(3, 8, 4, k=4)
    conv = next(m for m in pred.model.modules() if isinstance(m, SepFlexConv3d))
    cache = getattr(conv, "_kernel_cache", None)
    buffers = {k: v.clone() for k, v in pred.model.named_buffers()}
    calls = []

    def fail_second(module, args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("device lost")

    handle = pred.model.register_forward_pre_hook(fail_second)
    pred.model.gridify.grid = fresh.grid  # an attribute that the call must not change
    with pytest.raises(RuntimeError, match="device lost"):
        pred.predict(pts, num_votes=3, batch_size=1)
    handle.remove()
    assert not any(m.training for m in pred.model.modules())
    assert getattr(conv, "_kernel_cache", None) is cache and pred.model.gridify.grid is fresh.grid
    _assert_same(buffers, dict(pred.model.named_buffers()))


def test_failed_metric_update_leaves_the_state():
    metric = ShapeNetPartIoU([[0, 1], [2, 3]])
    metric.update(torch.randn(1, 5, 4), torch.tensor([[0, 1, 0, 1, 1]]), torch.tensor([0]))
    before = (metric.iou_sum.clone(), metric.shape_count.clone())
    logits = torch.randn(2, 5, 4)
    logits[1, 2, 3] = NAN
    with pytest.raises(ValueError, match=r"ShapeNetPartIoU: preds contains NaN .* shape 1, point 2, part 3"):
        metric.update(logits, torch.tensor([[0, 1, 0, 1, 1], [2, 3, 2, 2, 3]]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="category must be an integer tensor"):
        metric.update(torch.randn(1, 5, 4), torch.tensor([[0, 1, 0, 1, 1]]), torch.tensor([0.0]))
    assert torch.equal(metric.iou_sum, before[0]) and torch.equal(metric.shape_count, before[1])


def test_unchecked_fast_paths_still_agree_with_their_references():
    """The working-frame rewrite of the distance computations keeps the existing results."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(300, 3, generator=g)
    batch = torch.arange(3).repeat_interleave(100)
    assert torch.equal(fps(x, batch, 0.2, random_start=False), fps_reference(x, batch, 0.2))
    r = radius(x, x[::7], 0.3, batch, batch[::7], 32)
    assert torch.equal(r, radius_reference(x, x[::7], 0.3, batch, batch[::7], 32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isfinite(float(scatter(x, batch, reduce="mean").sum()))
