import importlib
import math
import warnings

import pytest
import torch

import gridify
from gridify.ops import fps, fps_reference, radius, radius_reference, scatter

from tests.helpers import ragged_batch

SAMPLING = importlib.import_module("gridify.ops.sampling")


def _wide(n=200, spread=300.0, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(n, 3, generator=g) * 2 - 1) * spread).to(dtype)


# ----------------------------------------------------------------------------- fps
@pytest.mark.parametrize("ratio", [0.1, 0.25, 0.5, 1.0])
def test_fps_matches_reference_with_fixed_start(ratio):
    pos, batch = ragged_batch([40, 17, 3, 60], seed=1)
    out = fps(pos, batch, ratio=ratio, random_start=False)
    ref = fps_reference(pos, batch, ratio=ratio)
    assert torch.equal(out, ref)
    counts = torch.bincount(batch)
    expected = torch.tensor([min(int(n), max(1, math.ceil(int(n) * ratio))) for n in counts])
    assert torch.equal(torch.bincount(batch[out], minlength=4), expected)


def test_fps_explicit_start_matches_reference():
    pos, batch = ragged_batch([30, 25, 12], seed=2)
    start = torch.tensor([7, 0, 11])
    out = fps(pos, batch, ratio=0.3, start=start)
    assert torch.equal(out, fps_reference(pos, batch, ratio=0.3, start=start))
    assert torch.equal(out[[0, 9, 17]], torch.tensor([7, 30, 55 + 11]))  # each cloud starts at its start


def test_fps_batch_composition_invariance():
    pos, batch = ragged_batch([50, 33, 71], seed=3)
    joint = fps(pos, batch, ratio=0.4, random_start=False)
    offset = 0
    parts = []
    for b, n in enumerate([50, 33, 71]):
        alone = fps(pos[offset : offset + n], None, ratio=0.4, random_start=False)
        parts.append(alone + offset)
        offset += n
    assert torch.equal(joint, torch.cat(parts))


def test_fps_random_start_samples_distinct_points_of_their_own_cloud():
    pos, batch = ragged_batch([64, 20], seed=4)
    g = torch.Generator().manual_seed(0)
    out = fps(pos, batch, ratio=0.5, generator=g)
    again = fps(pos, batch, ratio=0.5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    assert out.unique().numel() == out.numel()
    assert torch.equal(batch[out], torch.tensor([0] * 32 + [1] * 10))
    # greedy property: every new sample is the farthest from the previous ones
    sel = out[:32]
    for t in range(1, 32):
        d = torch.cdist(pos[:64], pos[sel[:t]]).min(1).values
        assert d[sel[t]] >= d.max() - 1e-6


def test_fps_ratio_one_returns_every_point():
    pos, batch = ragged_batch([9, 5], seed=5)
    out = fps(pos, batch, ratio=1.0)
    assert torch.equal(out.sort().values, torch.arange(14))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(ratio=0.0), "ratio must be a number in \\(0, 1\\]"),
        (dict(ratio=1.5), "ratio must be"),
        (dict(start=torch.tensor([0])), "start must be a 1-D integer tensor with one entry per cloud"),
        (dict(start=torch.tensor([0, 99])), "start holds an index outside its cloud"),
    ],
)
def test_fps_bad_arguments(kwargs, match):
    pos, batch = ragged_batch([5, 6], seed=0)
    with pytest.raises(ValueError, match=match):
        fps(pos, batch, **kwargs)


def test_fps_bad_inputs():
    with pytest.raises(ValueError, match="fps: pos must have shape"):
        fps(torch.rand(5), None)
    bad = torch.rand(6, 3)
    bad[4, 1] = float("nan")
    with pytest.raises(ValueError, match="pos contains NaN"):
        fps(bad, None)
    with pytest.raises(ValueError, match="batch must be sorted"):
        fps(torch.rand(4, 3), torch.tensor([0, 1, 0, 1]))
    with pytest.raises(ValueError, match="pos must be a floating-point"):
        fps(torch.ones(4, 3, dtype=torch.long), None)


# ----------------------------------------------------------------------------- radius
def _edge_sets(ei):
    out = {}
    for q, j in ei.t().tolist():
        out.setdefault(q, set()).add(j)
    return out


@pytest.mark.parametrize("backend", ["torch", "kdtree"])
@pytest.mark.parametrize("r, kmax", [(0.3, 64), (0.6, 5), (2.0, 1)])
def test_radius_matches_reference(backend, r, kmax):
    x, bx = ragged_batch([40, 17, 3, 60], seed=6)
    y, by = ragged_batch([10, 25, 4, 8], seed=7)
    out = radius(x, y, r, bx, by, max_num_neighbors=kmax, backend=backend)
    ref = radius_reference(x, y, r, bx, by, max_num_neighbors=kmax)
    assert _edge_sets(out) == _edge_sets(ref)
    assert torch.equal(out[0], ref[0])  # grouped by query, same counts
    d = (y[out[0]] - x[out[1]]).norm(dim=-1)
    assert bool((d <= r + 1e-6).all())
    assert torch.equal(bx[out[1]], by[out[0]]), "an edge crosses clouds"


def test_radius_keeps_the_nearest_when_capped():
    x = torch.tensor([[0.0, 0, 0], [0.1, 0, 0], [0.2, 0, 0], [0.3, 0, 0], [0.05, 0, 0]])
    y = torch.zeros(1, 3)
    out = radius(x, y, 1.0, max_num_neighbors=3, backend="torch")
    assert out[1].tolist() == [0, 4, 1]


def test_radius_chunked_path_equals_unchunked(monkeypatch):
    x, bx = ragged_batch([300, 200], seed=8)
    y, by = ragged_batch([50, 70], seed=9)
    full = radius(x, y, 0.4, bx, by, backend="torch")
    monkeypatch.setattr(SAMPLING, "CHUNK_ELEMENTS", 1000)
    chunked = radius(x, y, 0.4, bx, by, backend="torch")
    assert torch.equal(full, chunked)


def test_radius_query_of_an_empty_neighbourhood_gets_no_edges():
    x = torch.zeros(3, 3)
    y = torch.tensor([[5.0, 5.0, 5.0]])
    assert radius(x, y, 0.5).shape == (2, 0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(r=0.0), "r must be a positive finite number"),
        (dict(r=float("inf")), "r must be a positive finite number"),
        (dict(r=0.5, max_num_neighbors=0), "max_num_neighbors must be a positive integer"),
        (dict(r=0.5, backend="gpu"), "unknown backend"),
    ],
)
def test_radius_bad_arguments(kwargs, match):
    x = torch.rand(5, 3)
    with pytest.raises(ValueError, match=match):
        radius(x, x, **kwargs)


def test_radius_bad_inputs():
    with pytest.raises(ValueError, match="x and y must have the same dimension"):
        radius(torch.rand(5, 3), torch.rand(2, 2), 0.5)
    with pytest.raises(ValueError, match="batch_y refers to cloud 1 but x has points for only 1 clouds"):
        radius(torch.rand(5, 3), torch.rand(2, 3), 0.5, None, torch.tensor([0, 1]))


def test_radius_with_sparse_cloud_ids_allocates_by_the_points_not_the_ids(monkeypatch):
    """Cloud ids up to 5e7 made tables of 5e7 counts (1.1 GB); ids are renumbered by the clouds present."""
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", str(64 << 20))  # a table per id would be refused
    x = torch.rand(6, 3, dtype=torch.float64)
    y = x[[0, 3, 5]].clone()
    bx = torch.tensor([0, 0, 7, 7, 49_999_999, 49_999_999])
    by = torch.tensor([0, 7, 49_999_999])
    out = radius(x, y, 10.0, bx, by, max_num_neighbors=8)
    dense = radius(x, y, 10.0, torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([0, 1, 2]), max_num_neighbors=8)
    assert torch.equal(out, dense) and out.shape == (2, 6)
    assert torch.equal(radius(x, y, 10.0, bx, by, backend="kdtree"), dense)
    with pytest.raises(
        ValueError,
        match=r"radius: batch_y refers to cloud 60000000 but x has points for clouds up "
        r"to 49999999",
    ):
        radius(x, y, 1.0, bx, torch.tensor([0, 7, 60_000_000]))


@pytest.mark.parametrize("backend", ["torch", "kdtree"])
def test_radius_larger_than_any_distance_takes_every_pair(backend):
    x = torch.rand(20, 3)
    for r in (1e155, 1e300):
        edges = gridify.ops.radius(x, x, r, backend=backend, max_num_neighbors=64)
        assert edges.shape == (2, 400)


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
