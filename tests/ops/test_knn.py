"""gridify.ops.knn: against the brute-force reference, ties, backends, errors."""

import importlib

import pytest
import torch

from gridify import _optional
from gridify.ops import knn, knn_reference

from tests.helpers import ragged_batch

KNN_MODULE = importlib.import_module("gridify.ops.knn")
BACKENDS = ["torch", "kdtree"] + (["torch_cluster"] if _optional.WITH_TORCH_CLUSTER else [])


def _dists(x, y, ei):
    return (y[ei[0]] - x[ei[1]]).pow(2).sum(-1)


def _duplicated_cloud(g, B, n, frac, lattice):
    """B clouds of n points where a fraction ``frac`` are copies of other points of the same cloud
    (as RandomPointDropout refills), optionally on a half-unit lattice (many equal distances)."""
    x = torch.randn(B, n, 3, generator=g)
    if lattice:
        x = torch.round(x * 2) / 2
    src = torch.randint(0, n, (B, n), generator=g)
    copy = torch.rand(B, n, 1, generator=g) < frac
    x = torch.where(copy, torch.gather(x, 1, src[..., None].expand(-1, -1, 3)), x)
    return x.reshape(-1, 3), torch.arange(B).repeat_interleave(n)


def _sphere_of_ties():
    """30 distinct points exactly 5 from the origin ((3, 4, 0) and (5, 0, 0) with every sign and
    axis order), 10 farther ones."""
    import itertools

    pts = set()
    for base in ((3.0, 4.0, 0.0), (5.0, 0.0, 0.0)):
        for perm in itertools.permutations(base):
            for signs in itertools.product((1, -1), repeat=3):
                pts.add(tuple(a * b for a, b in zip(perm, signs)))
    far = torch.rand(10, 3, generator=torch.Generator().manual_seed(5)) + 6
    return torch.cat([torch.tensor(sorted(pts)), far])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1, 5, 16])
def test_knn_matches_reference_on_ragged_batches(backend, k):
    # cloud 2 has fewer points (3) than k=5/16: its queries get all 3 points, never another cloud's
    x, bx = ragged_batch([40, 17, 3, 60], seed=1)
    y, by = ragged_batch([10, 25, 4, 8], seed=2)
    ref = knn_reference(x, y, k, bx, by)
    out = knn(x, y, k, bx, by, backend=backend)
    assert out.shape == ref.shape
    assert torch.equal(out[0], ref[0])  # same number of neighbours per query, same order
    # same neighbour distances (indices may differ only on exact ties)
    torch.testing.assert_close(_dists(x, y, out), _dists(x, y, ref))
    assert torch.equal(bx[out[1]], by[out[0]]), "an edge crosses clouds"
    counts = torch.bincount(out[0], minlength=y.size(0))
    expected = torch.bincount(bx)[by].clamp(max=k)
    assert torch.equal(counts, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_knn_chunked_path_equals_unchunked(backend, monkeypatch):
    x, bx = ragged_batch([300, 200], seed=3)
    y, by = ragged_batch([50, 70], seed=4)
    full = knn(x, y, 7, bx, by, backend="torch")
    monkeypatch.setattr(KNN_MODULE, "CHUNK_ELEMENTS", 64)  # force many tiny chunks
    chunked = knn(x, y, 7, bx, by, backend="torch")
    assert torch.equal(full, chunked)
    assert torch.equal(knn(x, y, 7, bx, by, backend=backend)[0], full[0])


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch_cluster"])
def test_knn_exact_ties_go_to_the_lowest_indices(backend):
    """Equidistant candidates at the k-th distance: the lowest indices win, on every backend, so a
    cloud's neighbours are the same alone and batched behind another cloud."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(5, 3, generator=g), torch.rand(2, 3, generator=g)
    cloud = torch.cat([a[torch.randint(0, 5, (30,), generator=g)], b.repeat(5, 1)])  # duplicates
    query = torch.cat([a, b, torch.zeros(1, 3)])
    want = knn_reference(cloud, query, 4)
    other = torch.rand(13, 3, generator=g)
    x = torch.cat([other, cloud])
    bx = torch.cat([torch.zeros(13, dtype=torch.long), torch.ones(cloud.size(0), dtype=torch.long)])
    by = torch.ones(query.size(0), dtype=torch.long)
    assert torch.equal(knn(cloud, query, 4, backend=backend), want)
    batched = knn(x, query, 4, bx, by, backend=backend)
    assert torch.equal(batched - torch.tensor([[0], [13]]), want)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "torch_cluster"])
@pytest.mark.parametrize("frac,lattice", [(0.1, False), (0.5, False), (0.3, True), (0.9, True)])
def test_knn_duplicates_equal_the_reference_exactly(backend, frac, lattice):
    """Duplicated points tie at the k-th distance in groups: every backend returns exactly the
    reference's (distance, index) selection and order, also for the rows the KD-tree re-queries."""
    g = torch.Generator().manual_seed(int(frac * 10) + lattice)
    x, bx = _duplicated_cloud(g, 3, 70, frac, lattice)
    y, by = _duplicated_cloud(g, 3, 40, 0.2, True)
    for k in (1, 4, 9):
        assert torch.equal(knn(x, y, k, bx, by, backend=backend), knn_reference(x, y, k, bx, by))


@pytest.mark.parametrize("copies", [False, True])
def test_knn_kdtree_large_tie_groups_fall_back_to_the_brute_force(monkeypatch, copies):
    """40 identical points are one distinct point with 40 copies: no re-query. Distinct points
    tied in a group larger than TIE_QUERY_MAX (30 at one distance) leave the doubling re-query for
    the brute force; every path gives the reference's lowest indices."""
    x = _sphere_of_ties()
    if copies:
        x = torch.cat([x, x[:7], torch.zeros(40, 3) + 9])  # duplicates: the distinct-point search
    y = torch.cat([torch.zeros(2, 3), torch.full((1, 3), 9.0)])
    want = knn_reference(x, y, 5)
    calls = []
    orig = KNN_MODULE._brute_force_rows
    monkeypatch.setattr(KNN_MODULE, "_brute_force_rows", lambda *a: calls.append(1) or orig(*a))
    assert torch.equal(knn(x, y, 5, backend="kdtree"), want) and calls == []  # doubling: 6/12, 24, 48
    monkeypatch.setattr(KNN_MODULE, "TIE_QUERY_MAX", 8)
    assert torch.equal(knn(x, y, 5, backend="kdtree"), want) and calls == [1]


def test_knn_auto_uses_kdtree_for_large_cpu_inputs(monkeypatch):
    calls = []
    m = KNN_MODULE
    orig = m._knn_kdtree
    monkeypatch.setattr(m, "_knn_kdtree", lambda *a: calls.append(1) or orig(*a))
    monkeypatch.setattr(m, "KDTREE_MIN_PAIRS", 10)
    if not _optional.WITH_TORCH_CLUSTER:
        knn(torch.rand(20, 3), torch.rand(20, 3), 3)
        assert calls == [1]


def test_knn_float64_and_noncontiguous():
    x = torch.rand(3, 50, dtype=torch.float64).t()  # non-contiguous [50, 3]
    y = torch.rand(20, 3, dtype=torch.float64)
    for backend in BACKENDS:
        assert torch.equal(knn(x, y, 4, backend=backend)[0], knn_reference(x, y, 4)[0])


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(k=0), "k must be a positive integer"),
        (dict(k=2.5), "k must be a positive integer"),
        (dict(backend="faiss"), "unknown backend"),
        (dict(x=torch.rand(10, 2)), "same dimension"),
        (dict(x=torch.randint(0, 3, (10, 3))), "floating-point"),
        (dict(y=torch.rand(4)), r"shape \[num_points, dim\]"),
        (
            dict(batch_x=torch.tensor([0] * 5 + [1] * 5), batch_y=torch.tensor([0, 2, 2, 2])),
            "batch_y refers to cloud 2",
        ),
        (dict(batch_x=torch.tensor([1] * 5 + [0] * 5)), "must be sorted"),
        (dict(batch_x=torch.tensor([0] * 5 + [2] * 5)), "cloud 1 is empty"),
        (dict(batch_x=torch.zeros(9, dtype=torch.long)), "one entry per point"),
        (dict(batch_x=torch.zeros(10)), "integer tensor"),
    ],
)
def test_knn_errors(bad, match):
    args = dict(x=torch.rand(10, 3), y=torch.rand(4, 3), k=3, batch_x=None, batch_y=None, backend="auto")
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        knn(**args)


def test_knn_names_cloud_with_nan():
    x, bx = ragged_batch([5, 5, 5])
    x[12, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN.*cloud 2 at row 12"):
        knn(x, x, 2, bx, bx)
    x[12, 1] = float("inf")
    with pytest.raises(ValueError, match="Inf.*cloud 2"):
        knn(x, x, 2, bx, bx)


# regressions found by the property tests (tests/properties/test_adversarial_clouds.py): the torch backend used to
# square half-precision offsets in float16 (overflow beyond a spread of ~250) and to mark other-cloud
# candidates with +inf, so overflowing real neighbours were silently dropped
@pytest.mark.parametrize("scale, dtype", [(1000.0, torch.float16), (1e20, torch.float32)])
def test_knn_torch_backend_keeps_every_neighbour_of_wide_clouds(scale, dtype):
    x = (torch.rand(50, 3, generator=torch.Generator().manual_seed(0)) * scale).to(dtype)
    batch = torch.tensor([0] * 20 + [1] * 30)
    out = knn(x, x, 4, batch, batch, backend="torch")
    assert out.size(1) == 50 * 4
    ref = knn(x, x, 4, batch, batch, backend="kdtree")
    assert {tuple(e) for e in out.t().tolist()} == {tuple(e) for e in ref.t().tolist()}


def test_knn_kdtree_copies_split_by_hash_collisions_still_equal_the_reference(monkeypatch):
    """A hash that collides everywhere (all multipliers 0) leaves copies of a point in separate
    runs unless they are neighbours in index order: they then tie as distinct points, and the
    (distance, index) selection still equals the reference's."""
    import numpy as np

    monkeypatch.setattr(KNN_MODULE, "_HASH", np.zeros(4, dtype=np.uint64))
    g = torch.Generator().manual_seed(11)
    x, bx = _duplicated_cloud(g, 2, 80, 0.4, False)
    x[1::7] = x[0::7][: x[1::7].size(0)]  # some copies right after their original too
    y, by = _duplicated_cloud(g, 2, 30, 0.0, True)
    for k in (3, 8):
        assert torch.equal(knn(x, y, k, bx, by, backend="kdtree"), knn_reference(x, y, k, bx, by))


@pytest.mark.parametrize("scale, dtype", [(1e160, torch.float64), (1e-30, torch.float32), (300.0, torch.float16)])
@pytest.mark.parametrize("backend", ["torch", "kdtree"])
def test_knn_ranks_extreme_coordinates_exactly(scale, dtype, backend):
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(40, 3, generator=g, dtype=torch.float64) * scale).to(dtype)
    out = knn(x, x, 4, backend=backend)
    ref = knn_reference(x, x, 4)
    assert torch.equal(out, ref)
