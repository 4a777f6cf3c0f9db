"""Property-based tests (hypothesis) of gridify.ops, gridify.nn and gridify.io on adversarial inputs.

Clouds are drawn from families that break naive code: exact duplicates, collinear and coplanar
points, a single point, fewer points than ``k``, tiny (1e-12) and huge (1e12) coordinates,
float32/float64 (and float16 where supported), non-contiguous tensors. Each input either works
and agrees with the reference path, or raises a ``ValueError`` naming the problem.

Extreme magnitudes and every floating dtype (squares that would overflow or underflow the input
dtype) are covered by ``tests/properties/test_dtypes_and_bad_values.py``.
"""

import math
import warnings

import numpy as np
import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gridify.io import read_points, write_ply  # noqa: E402
from gridify.nn import Degridification, Gridification, RegularGrid, bilateral_knn  # noqa: E402
from gridify.ops import grid_knn, grid_positions, knn, knn_reference, scatter, scatter_reference  # noqa: E402

FAST = settings(
    max_examples=30,
    deadline=4000,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
SLOWER = settings(FAST, max_examples=15)
KNN_BACKENDS = ["torch", "kdtree"]


# --------------------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------------------
KINDS = ("random", "duplicates", "collinear", "coplanar", "lattice", "single")


@st.composite
def clouds(draw, min_n=1, max_n=24, scales=(1e-12, 1e-3, 1.0, 1e3, 1e12)):
    """``[N, 3]`` float64 numpy points of an adversarial kind, and the kind."""
    kind = draw(st.sampled_from(KINDS))
    n = 1 if kind == "single" else draw(st.integers(min_n, max_n))
    seed = draw(st.integers(0, 2**16))
    scale = draw(st.sampled_from(scales))
    rng = np.random.default_rng(seed)
    if kind == "random" or kind == "single":
        pts = rng.uniform(-1, 1, (n, 3))
    elif kind == "duplicates":  # a few distinct points, each repeated
        base = rng.uniform(-1, 1, (max(1, n // 4), 3))
        pts = base[rng.integers(0, len(base), n)]
    elif kind == "collinear":
        d = rng.normal(size=3)
        pts = rng.uniform(-1, 1, (n, 1)) * d / np.linalg.norm(d) + rng.uniform(-0.1, 0.1, 3)
    elif kind == "coplanar":
        a, b = rng.normal(size=(2, 3))
        t = rng.uniform(-1, 1, (n, 2))
        pts = t[:, :1] * a / np.linalg.norm(a) + t[:, 1:] * b / np.linalg.norm(b)
    else:  # integer lattice points: many exactly equal distances
        pts = rng.integers(-2, 3, (n, 3)).astype(np.float64) / 2
    return pts * scale, kind


def as_tensor(pts, dtype=torch.float32, noncontig=False):
    t = torch.as_tensor(pts, dtype=dtype)
    if noncontig:
        t = t.t().contiguous().t()  # same values, transposed strides
        assert not t.is_contiguous() or t.size(0) <= 1
    return t


def _d64(x, y, ei):
    x64, y64 = x.double(), y.double()
    return (y64[ei[0]] - x64[ei[1]]).pow(2).sum(-1)


def _sorted_dists_per_query(x, y, ei, m):
    d = _d64(x, y, ei)
    return [sorted(d[ei[0] == i].tolist()) for i in range(m)]


# --------------------------------------------------------------------------------------
# ops.knn
# --------------------------------------------------------------------------------------
@FAST
@given(
    a=clouds(),
    b=clouds(max_n=10),
    k=st.integers(1, 9),
    backend=st.sampled_from(KNN_BACKENDS),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    noncontig=st.booleans(),
)
def test_knn_agrees_with_reference(a, b, k, backend, dtype, noncontig):
    (xp, _), (yp, _) = a, b
    x, y = as_tensor(xp, dtype, noncontig), as_tensor(yp, dtype)
    out = knn(x, y, k, backend=backend)
    ref = knn_reference(x.double(), y.double(), k)
    assert out.dtype == torch.long and out.shape == ref.shape  # min(k, N) neighbours per query
    assert torch.equal(out[0], ref[0])
    assert out[1].min() >= 0 and out[1].max() < x.size(0)
    # same neighbour distances (indices may differ only on ties or within rounding)
    got, want = _sorted_dists_per_query(x, y, out, y.size(0)), _sorted_dists_per_query(x, y, ref, y.size(0))
    scale = float(max(np.abs(xp).max(), np.abs(yp).max(), 1e-300)) ** 2
    tol = (1e-5 if dtype == torch.float32 else 1e-12) * scale
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=tol)
    # no duplicate neighbour for a query
    pairs = set(zip(out[0].tolist(), out[1].tolist()))
    assert len(pairs) == out.size(1)


@FAST
@given(a=clouds(max_n=12), b=clouds(max_n=12), k=st.integers(1, 6), backend=st.sampled_from(KNN_BACKENDS))
def test_knn_never_crosses_clouds_and_is_batch_composable(a, b, k, backend):
    (pa, _), (pb, _) = a, b
    x = torch.cat([as_tensor(pa), as_tensor(pb)])
    bx = torch.cat([torch.zeros(len(pa), dtype=torch.long), torch.ones(len(pb), dtype=torch.long)])
    out = knn(x, x, k, bx, bx, backend=backend)
    assert torch.equal(bx[out[0]], bx[out[1]])
    counts = torch.bincount(out[0], minlength=x.size(0))
    assert torch.equal(counts, torch.bincount(bx)[bx].clamp(max=k))
    alone = knn(as_tensor(pb), as_tensor(pb), k, backend=backend)  # cloud 1 alone == cloud 1 in the batch
    in_batch = out[:, bx[out[0]] == 1] - len(pa)
    torch.testing.assert_close(
        _d64(as_tensor(pb), as_tensor(pb), in_batch), _d64(as_tensor(pb), as_tensor(pb), alone), rtol=1e-5, atol=1e-30
    )


def test_knn_float16_matches_float32_on_small_extents():
    x = torch.rand(30, 3) * 10
    out16 = knn(x.half(), x.half(), 4, backend="torch")
    out32 = knn(x.half().float(), x.half().float(), 4, backend="torch")
    assert out16.shape == out32.shape
    torch.testing.assert_close(_d64(x.half(), x.half(), out16), _d64(x.half(), x.half(), out32), rtol=2e-2, atol=1e-3)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda x: knn(x, x, 0), "k must be a positive integer"),
        (lambda x: knn(x, x, 2.5), "k must be a positive integer"),
        (lambda x: knn(x.long(), x, 2), "x must be a floating-point tensor"),
        (lambda x: knn(x[:, :2], x, 2), "same dimension"),
        (lambda x: knn(x, x, 2, backend="faiss"), "unknown backend 'faiss'"),
        (lambda x: knn(torch.cat([x, x.new_tensor([[float("nan")] * 3])]), x, 2), "x contains NaN"),
        (lambda x: knn(x, x, 2, batch_x=torch.arange(x.size(0)).flip(0)), "batch_x must be sorted"),
        (lambda x: knn(x, x, 2, batch_x=torch.zeros(3, dtype=torch.long)), "one entry per point"),
    ],
)
def test_knn_bad_inputs_raise_clear_errors(bad, message):
    with pytest.raises(ValueError, match=message):
        bad(torch.rand(8, 3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU for mixed devices")
def test_knn_mixed_devices_raise():
    with pytest.raises(ValueError, match="is on"):
        knn(torch.rand(5, 3), torch.rand(5, 3, device="cuda"), 2)


# --------------------------------------------------------------------------------------
# ops.scatter
# --------------------------------------------------------------------------------------
@FAST
@given(
    n=st.integers(0, 30),
    dim_size=st.integers(1, 8),
    feat=st.integers(1, 4),
    reduce=st.sampled_from(["sum", "mean", "max", "min"]),
    dtype=st.sampled_from([torch.float16, torch.float32, torch.float64]),
    scale=st.sampled_from([1e-6, 1.0, 1e4]),
    noncontig=st.booleans(),
    seed=st.integers(0, 999),
)
def test_scatter_agrees_with_reference(n, dim_size, feat, reduce, dtype, scale, noncontig, seed):
    g = torch.Generator().manual_seed(seed)
    src = ((torch.rand(n, feat, generator=g) * 2 - 1) * scale).to(dtype)
    if noncontig:
        src = src.t().contiguous().t()
    index = torch.randint(0, dim_size, (n,), generator=g)
    out = scatter(src, index, dim_size, reduce)
    ref = scatter_reference(src, index, dim_size, reduce)
    assert out.shape == (dim_size, feat) and out.dtype == dtype
    tol = {torch.float16: 2e-2, torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(out.double(), ref.double(), rtol=tol, atol=tol * scale * max(n, 1))
    empty = torch.bincount(index, minlength=dim_size) == 0
    assert (out[empty] == 0).all()  # empty buckets are zero for every reduction


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda: scatter(torch.rand(4, 2), torch.tensor([0, 1, 2])), "src has 4 rows but index has 3"),
        (lambda: scatter(torch.rand(4, 2), torch.tensor([0, 1, 2, 5]), 3), r"index values must lie in \[0, 3\)"),
        (lambda: scatter(torch.rand(4, 2), torch.tensor([0, -1, 2, 1]), 3), r"index values must lie in"),
        (lambda: scatter(torch.rand(4, 2), torch.tensor([0.0, 1, 2, 1])), "index must be a 1-D integer tensor"),
        (lambda: scatter(torch.rand(4, 2), torch.tensor([0, 1, 2, 1]), reduce="median"), "unknown reduce 'median'"),
    ],
)
def test_scatter_bad_inputs_raise_clear_errors(bad, message):
    with pytest.raises(ValueError, match=message):
        bad()


# --------------------------------------------------------------------------------------
# ops.grid_knn
# --------------------------------------------------------------------------------------
@FAST
@given(
    a=clouds(max_n=16, scales=(1e-9, 0.5, 1.0, 3.0)),
    R=st.integers(2, 5),
    k=st.integers(1, 10),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_grid_knn_is_exact(a, R, k, dtype):
    pts, _ = a
    k = min(k, R**3)
    pos = as_tensor(pts, dtype)
    out = grid_knn(pos, k, R)
    assert out.shape == (2, pos.size(0) * k)
    nodes = grid_positions(R, dtype=torch.float64)
    d = (pos.double()[:, None] - nodes[None]).pow(2).sum(-1)  # [N, R^3] brute force
    want = d.sort(1).values[:, :k]
    got = d.gather(1, out[1].view(-1, k)).sort(1).values
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert all(len(set(r)) == k for r in out[1].view(-1, k).tolist())  # k distinct nodes per point


# --------------------------------------------------------------------------------------
# nn: bilateral kNN, Gridification, Degridification
# --------------------------------------------------------------------------------------
def _in_box(pts):
    """Map a cloud into [-0.9, 0.9]^3 (keeps duplicates, collinearity, coplanarity)."""
    pts = pts - pts.mean(0)
    ext = np.abs(pts).max()
    return pts * (0.9 / ext) if ext > 0 else pts


@FAST
@given(a=clouds(max_n=20), b=clouds(max_n=20), R=st.integers(2, 4), k=st.integers(1, 6))
def test_bilateral_knn_covers_every_point_and_node(a, b, R, k):
    pa, pb = _in_box(a[0]), _in_box(b[0])
    pos = torch.cat([as_tensor(pa), as_tensor(pb)])
    batch = torch.cat([torch.zeros(len(pa), dtype=torch.long), torch.ones(len(pb), dtype=torch.long)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # clouds with fewer than k points warn
        g = bilateral_knn(pos, RegularGrid(R), k, batch)
    point, node = g.edge_index
    assert torch.equal(batch[point], node // R**3), "an edge crosses clouds"
    assert (torch.bincount(point, minlength=pos.size(0)) >= 1).all(), "a point without edges"
    per_node = torch.bincount(node, minlength=2 * R**3)
    need = torch.bincount(batch).clamp(max=k).repeat_interleave(R**3)
    assert (per_node >= need).all(), "a node without its k nearest points"
    assert g.edge_index.unique(dim=1).size(1) == g.edge_index.size(1), "duplicate edges"


def _tied_between_distinct(pos, k=3, resolution=3):
    """Whether some grid node's k-th nearest distance is shared by points at different positions
    beyond the k (then the node's neighbours depend on the points' order, by design: ties are
    broken by index). Distances as the search computes them (float32, summed over axes)."""
    nodes = grid_positions(resolution)
    d = torch.zeros(nodes.size(0), pos.size(0))
    for c in range(3):
        d += (nodes[:, c, None] - pos[None, :, c]).pow(2)
    kth = d.sort(1).values[:, min(k, pos.size(0)) - 1 : min(k, pos.size(0))]
    for row, t in zip(d, kth):
        if int((row <= t).sum()) > k and len({tuple(p) for p in pos[row == t].tolist()}) > 1:
            return True
    return False


def _grid_model(seed=0, aggr="mean"):
    torch.manual_seed(seed)
    return Gridification(3, 4, resolution=3, k=3, hidden_channels=8, aggr=aggr).eval()


@SLOWER
@given(a=clouds(min_n=2, max_n=20), aggr=st.sampled_from(["mean", "max", "sum"]), seed=st.integers(0, 99))
def test_gridification_point_order_invariance(a, aggr, seed):
    pts, kind = a
    assume(kind != "lattice")  # equidistant distinct points: kNN tie-breaks by index, by design
    pos = as_tensor(_in_box(pts))
    assume(bool(torch.isfinite(pos).all()))
    assume(not _tied_between_distinct(pos))  # e.g. two clusters mirrored through a node
    model = _grid_model(aggr=aggr)
    perm = torch.randperm(pos.size(0), generator=torch.Generator().manual_seed(seed))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        # ties between distinct points at equal distance are broken by index: allow them to differ
        # only where such a tie exists, which random, collinear and coplanar clouds avoid almost surely
        out, out_p = model(pos), model(pos[perm])
    assert out.shape == (1, 4, 3, 3, 3) and torch.isfinite(out).all()
    torch.testing.assert_close(out_p, out, rtol=1e-4, atol=1e-5)


@SLOWER
@given(a=clouds(max_n=16), b=clouds(max_n=16))
def test_gridification_batch_composition_invariance(a, b):
    pa, pb = as_tensor(_in_box(a[0])), as_tensor(_in_box(b[0]))
    model = _grid_model()
    pos = torch.cat([pa, pb])
    batch = torch.cat([torch.zeros(len(pa), dtype=torch.long), torch.ones(len(pb), dtype=torch.long)])
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        both = model(pos, batch=batch)
        alone = torch.cat([model(pa), model(pb)])
    torch.testing.assert_close(both, alone, rtol=1e-4, atol=1e-5)


@SLOWER
@given(a=clouds(max_n=20), noncontig=st.booleans())
def test_gridification_dtypes_and_layouts_agree(a, noncontig):
    pts = _in_box(a[0])
    model = _grid_model()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        ref = model(as_tensor(pts))
        out = model(as_tensor(pts, noncontig=noncontig))
        out64 = _grid_model().double()(as_tensor(pts, torch.float64))
    torch.testing.assert_close(out, ref)
    assert out64.dtype == torch.float64
    torch.testing.assert_close(out64.float(), ref, rtol=1e-3, atol=1e-4)


def test_gridification_float16_module_runs_and_is_close():
    pos = torch.rand(40, 3) * 1.8 - 0.9
    model = _grid_model()
    with torch.no_grad():
        ref = model(pos)
        half = _grid_model().half()(pos.half())
    assert half.dtype == torch.float16 and torch.isfinite(half).all()
    torch.testing.assert_close(half.float(), ref, rtol=5e-2, atol=5e-2)


@SLOWER
@given(a=clouds(max_n=20), k=st.integers(1, 8))
def test_degridification_roundtrip_shapes_and_finiteness(a, k):
    pos = as_tensor(_in_box(a[0]))
    torch.manual_seed(0)
    grid_m = Gridification(3, 4, resolution=3, k=k, hidden_channels=8)
    degrid = Degridification(4, 5, hidden_channels=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grid, graph = grid_m(pos, return_graph=True)
    out = degrid(grid, graph)
    assert out.shape == (pos.size(0), 5) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in grid_m.parameters() if p.requires_grad)
    # (duplicate points do NOT always get identical outputs: a node's k nearest points are
    # chosen among exact ties by index, so one copy may receive more node -> point edges)


def test_fewer_points_than_k_warns_and_works():
    model = _grid_model()
    with pytest.warns(UserWarning, match=r"cloud 0 has 1 points, fewer than k=3"):
        out = model(torch.zeros(1, 3))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(
    "pos, kwargs, message",
    [
        (torch.tensor([[0.0, 0.0, 2.0]]), {}, "cloud 0 has points outside the grid box"),
        (torch.tensor([[0.0, 0.0, float("nan")]]), {}, "pos contains NaN values"),
        (torch.tensor([[0.0, 0.0, float("inf")]]), {}, "pos contains Inf values"),
        (torch.zeros(0, 3), {}, "pos holds no points"),
        (torch.zeros(4, 2), {}, r"pos must have shape \[N, 3\]"),
        (torch.zeros(4, 3, dtype=torch.long), {}, "pos must be a floating-point tensor"),
        (torch.zeros(4, 3), {"batch": torch.tensor([0, 1, 0, 1])}, "batch must be sorted"),
        (torch.zeros(4, 3), {"batch": torch.tensor([0, 0, 2, 2])}, "cloud 1 is empty"),
        (
            torch.zeros(4, 3),
            {"x": torch.zeros(4, 5)},
            "x has 5 features per point but the module was built with in_channels=3",
        ),
        (torch.zeros(4, 3), {"x": torch.full((4, 3), float("inf"))}, "x contains Inf values"),
    ],
)
def test_gridification_bad_inputs_raise_clear_errors(pos, kwargs, message):
    with pytest.raises(ValueError, match=message):
        _grid_model()(pos, **kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU for mixed devices")
def test_gridification_mixed_devices_raise():
    with pytest.raises(ValueError, match="is on"):
        _grid_model()(torch.rand(5, 3) * 0.5, x=torch.rand(5, 3, device="cuda"))


# --------------------------------------------------------------------------------------
# io: round trips of adversarial clouds
# --------------------------------------------------------------------------------------
@FAST
@given(
    a=clouds(max_n=30, scales=(1e-30, 1e-3, 1.0, 1e6, 1e30)),
    binary=st.booleans(),
    with_normals=st.booleans(),
    with_colors=st.booleans(),
    with_labels=st.booleans(),
    seed=st.integers(0, 99),
)
def test_ply_roundtrip(tmp_path_factory, a, binary, with_normals, with_colors, with_labels, seed):
    pts = a[0].astype(np.float32)
    assume(np.isfinite(pts).all())
    rng = np.random.default_rng(seed)
    n = len(pts)
    nrm = rng.normal(size=(n, 3)).astype(np.float32) if with_normals else None
    col = rng.integers(0, 256, (n, 3)).astype(np.uint8) if with_colors else None
    lab = rng.integers(-5, 50, n) if with_labels else None
    path = tmp_path_factory.mktemp("ply") / "c.ply"
    write_ply(path, pts, nrm, col, labels=lab, binary=binary)
    cloud = read_points(path)
    np.testing.assert_array_equal(cloud.points, pts)  # float32 survives ascii too (%.9g)
    if with_normals:
        np.testing.assert_array_equal(cloud.normals, nrm)
    if with_colors:
        np.testing.assert_allclose(cloud.colors * 255, col, atol=1e-3)
    if with_labels:
        np.testing.assert_array_equal(cloud.labels, lab)


@FAST
@given(
    a=clouds(max_n=30, scales=(1e-30, 1e-3, 1.0, 1e6, 1e30)),
    fmt=st.sampled_from([".xyz", ".txt", ".npy", ".npz"]),
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
)
def test_text_and_numpy_roundtrip(tmp_path_factory, a, fmt, dtype):
    with np.errstate(over="ignore"):
        pts = a[0].astype(dtype)
    assume(np.isfinite(pts).all())
    path = tmp_path_factory.mktemp("rt") / f"c{fmt}"
    if fmt == ".npy":
        np.save(path, pts)
    elif fmt == ".npz":
        np.savez(path, points=pts)
    else:
        np.savetxt(path, pts.astype(np.float64), fmt="%.17g", delimiter="," if fmt == ".txt" else " ")
    cloud = read_points(path)
    np.testing.assert_array_equal(cloud.points, pts.astype(np.float32))
    assert cloud.points.dtype == np.float32 and cloud.points.flags.c_contiguous


def test_huge_float64_coordinates_beyond_float32_are_dropped_or_refused(tmp_path):
    path = tmp_path / "big.npy"
    np.save(path, np.array([[1e300, 0, 0], [1.0, 2.0, 3.0]]))
    with pytest.warns(UserWarning, match="dropped 1 of 2 points with NaN/Inf"):
        cloud = read_points(path)
    np.testing.assert_array_equal(cloud.points, [[1, 2, 3]])
    with pytest.raises(ValueError, match=r"big.npy: 1 of 2 points have NaN/Inf coordinates"):
        read_points(path, drop_invalid=False)
    with np.errstate(over="ignore"):
        assert math.isinf(np.float32(1e300))  # why: float32 cannot hold it
