"""gridify.ops.knn_dense: the fixed-shape searches between equally sized clouds and a grid's nodes, against
the loop reference of gridify.ops.knn (knn_reference) and against each other (the bucketed node -> points
search is exactly the brute force, stage by stage); argument checks."""

import pytest
import torch

from gridify.nn import RegularGrid
from gridify.nn.dense import grid_axes
from gridify.ops import knn_reference
from gridify.ops import knn_dense as D


def _cloud(kind, B, N, g):
    pos = torch.rand(B, N, 3, generator=g) * 2 - 1
    if kind == "duplicates":  # ties everywhere: every point twice
        pos[:, N - N // 2 :] = pos[:, : N // 2]
    elif kind == "identical":  # one location: every node's distances tie
        pos[:] = torch.tensor([0.3, -0.2, 0.1])
    elif kind == "plane":  # a LiDAR ground: most nodes far above every point
        pos[..., 2] = -0.9
    elif kind == "clusters":  # dense blobs and empty space
        pos = (pos * 0.05 + torch.randint(-1, 2, (B, N, 3), generator=g).float() * 0.7).clamp(-1, 1)
    elif kind == "grid":  # points on a lattice: exact ties of distance in every direction
        pos = (torch.randint(0, 5, (B, N, 3), generator=g).float() / 2 - 1).contiguous()
    return pos


def _reference(queries, points, k):
    """knn_reference of every query among ``points [N, 3]``: ``[M, k]`` neighbour indices, by (distance, index)."""
    return knn_reference(points, queries, k)[1].view(queries.size(0), k)


# --------------------------------------------------------------------------------------
# against the loop reference
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("search", ["brute", "bucketed"])
@pytest.mark.parametrize("kind", ["random", "duplicates", "grid"])
@pytest.mark.parametrize("shape,N,k", [((4, 4, 4), 40, 5), ((6, 4, 3), 9, 9), ((5, 3, 2), 120, 1)])
def test_knn_dense_is_the_reference_search(search, kind, shape, N, k):
    """Every node's k nearest points of its cloud, ties to the lowest index, as knn's loop reference orders them.
    The reference ranks in float64: on clouds of random coordinates (and their copies) the neighbours are the
    same; on a lattice of points, where sums of squares tie in exact arithmetic and float32 may split them, at
    the same squared distances."""
    g = torch.Generator().manual_seed(N + k)
    pos = _cloud(kind, 2, N, g)
    grid = RegularGrid(shape)
    nodes = grid.positions()
    got = D.knn_dense(pos, k, nodes, grid_axes(grid), node_chunk=7, search=search)
    assert got.shape == (2, grid.num_nodes, k)
    for b in range(2):
        ref = _reference(nodes, pos[b], k)
        if kind == "grid":
            d = lambda idx: (pos[b].double()[idx] - nodes.double().unsqueeze(1)).pow(2).sum(-1)  # noqa: E731
            assert torch.allclose(d(got[b]), d(ref), rtol=0, atol=1e-6)
        else:
            assert torch.equal(got[b], ref), b


@pytest.mark.parametrize("kind", ["random", "duplicates", "identical"])
@pytest.mark.parametrize("shape,k", [((5, 5, 5), 6), ((6, 4, 3), 9), ((2, 7, 3), 50), ((3, 3, 2), 1)])
def test_grid_knn_dense_is_the_reference_search(kind, shape, k):
    """Every point's k' = min(k, R) distinct nearest nodes, at the reference's squared distances (a point on a
    symmetry plane of the lattice may keep another, equally near node at its k'-th place)."""
    g = torch.Generator().manual_seed(k)
    pos = _cloud(kind, 2, 30, g)
    grid = RegularGrid(shape)
    nodes = grid.positions()
    got = D.grid_knn_dense(pos, k, grid_axes(grid))
    kk = min(k, grid.num_nodes)
    assert got.shape == (2, 30, kk)
    for b in range(2):
        ref = _reference(pos[b], nodes, kk)
        d = lambda idx: (nodes.double()[idx] - pos[b].double().unsqueeze(1)).pow(2).sum(-1).sort(-1).values  # noqa: E731
        assert torch.allclose(d(got[b]), d(ref), rtol=0, atol=1e-6)
        assert all(len(set(row.tolist())) == kk for row in got[b])


def test_the_searches_check_their_arguments():
    grid = RegularGrid(4)
    nodes, axes = grid.positions(), grid_axes(grid)
    pos = torch.rand(2, 10, 3)
    nan = pos.clone()
    nan[1, 3, 0] = float("nan")
    cases = [
        (lambda: D.knn_dense(pos[0], 3, nodes, axes), r"knn_dense: pos must have shape \[B, N, 3\]"),
        (lambda: D.knn_dense(pos, 11, nodes, axes), "every cloud needs at least k=11 points, got N=10"),
        (lambda: D.knn_dense(nan, 3, nodes, axes), "pos contains NaN values .* cloud 1 at row 13"),
        (
            lambda: D.knn_dense(pos, 3, nodes[:5], axes),
            r"nodes must be the lattice of axes, \[Rx Ry Rz, 3\] = \[64, 3\]",
        ),
        (lambda: D.knn_dense(pos, 3, nodes, axes[:2]), "axes must be three 1-D tensors"),
        (lambda: D.knn_dense(pos, 3, nodes, axes, search="kdtree"), "search must be one of"),
        (lambda: D.knn_dense(pos, 3, nodes, axes, node_chunk=0), "node_chunk must be a positive integer"),
        (
            lambda: D.grid_knn_dense(pos.double(), 3, axes),
            r"axes\[0\] \(x\) must be a non-empty 1-D tensor of pos' dtype",
        ),
        (lambda: D.grid_knn_dense(pos, 0, axes), "k must be a positive integer"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


# --------------------------------------------------------------------------------------
# the bucketed node -> points search
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["random", "duplicates", "identical", "plane", "clusters", "grid"])
@pytest.mark.parametrize("shape,N", [((5, 5, 5), 60), ((6, 4, 3), 9), ((16, 16, 4), 2500)])
def test_bucketed_search_is_the_brute_force(kind, shape, N):
    """The bucketed node -> points search gives exactly the brute force's neighbours (ties included)."""
    g = torch.Generator().manual_seed(N)
    pos = _cloud(kind, 2, N, g)
    grid = RegularGrid(shape)
    args = (pos, 6, grid.positions(), grid_axes(grid), 97)
    brute = D.knn_dense_unchecked(*args, search="brute")
    bucketed = D.knn_dense_unchecked(*args, search="bucketed")
    assert torch.equal(brute, bucketed)
    alone = D.node_points_bucketed(pos[1:], 6, grid.positions(), grid_axes(grid), 97)  # batch composition
    assert torch.equal(alone[0], bucketed[1])


@pytest.mark.parametrize("kind", ["plane", "clusters", "duplicates"])
@pytest.mark.parametrize("widened", [1, 8, 40, 10_000])
def test_every_stage_of_the_bucketed_search_is_exact(kind, widened):
    """Nodes the first look cannot prove (empty space above a plane, between clusters; ties) look in their
    ``widened`` nearest buckets, the rest in every point: the same neighbours whichever stage proves them
    (widened 1 / 8: the second look proves nothing new and the brute force takes them all; 10,000: every bucket)."""
    g = torch.Generator().manual_seed(7)
    pos = _cloud(kind, 2, 3000, g)
    grid = RegularGrid((24, 24, 6))
    nodes, axes = grid.positions(), grid_axes(grid)
    brute = D.knn_dense_unchecked(pos, 6, nodes, axes, 500, search="brute")
    got = D.node_points_bucketed(pos, 6, nodes, axes, 500, levels=6, searched=2, widened=widened)
    assert torch.equal(got, brute)


def test_the_first_look_leaves_nodes_in_empty_space_unproven():
    """What the widened look is for: over a plane (a LiDAR ground), nodes high above it are not proven by
    their nearest buckets alone (the case the second look exists for)."""
    pos = _cloud("plane", 1, 3000, torch.Generator().manual_seed(8))
    grid = RegularGrid((24, 24, 6))
    nodes, axes = grid.positions(), grid_axes(grid)
    padded, members, lo, hi = D.point_buckets(pos, 6, 8)
    bounds, nearest = torch.topk(D._bucket_bounds(lo, hi, D._node_spans(nodes, axes)), 3, dim=2, largest=False)
    cand = D._gather_rows(members, nearest[..., :2]).reshape(1, nodes.size(0), -1)
    _, proven = D._nearest_candidates(nodes[None], cand, D._gather_rows(padded, cand), bounds[..., 2], 6)
    unproven = ~proven[0]
    assert unproven.any()
    b = torch.zeros(int(unproven.sum()), dtype=torch.long)
    _, sure = D._widened_search(nodes[unproven], b, padded, members, lo, hi, 6, 40)
    assert sure.float().mean() > 0.5  # most of them proven by the second look


@pytest.mark.parametrize("kind", ["random", "plane", "clusters"])
@pytest.mark.parametrize("group_levels,groups", [(3, 6), (2, 1), (0, 3), (6, 1)])
def test_the_first_look_bound_is_below_every_point_it_did_not_look_at(kind, group_levels, groups):
    """The grouped first look (:func:`_nearest_buckets`): every point outside the buckets a node keeps is at least
    ``bound`` away from it, whatever the group size (one bucket a group, every bucket one group)."""
    pos = _cloud(kind, 2, 900, torch.Generator().manual_seed(11))
    grid = RegularGrid((12, 10, 4))
    nodes, axes = grid.positions(), grid_axes(grid)
    padded, members, lo, hi = D.point_buckets(pos, 6, 8)
    nearest, bound = D._nearest_buckets(lo, hi, D._node_spans(nodes, axes), 4, group_levels, groups)
    assert nearest.shape == (2, nodes.size(0), 4) and bound.shape == (2, nodes.size(0))
    owner = torch.empty(2, padded.size(1), dtype=torch.long)
    owner.scatter_(1, members.reshape(2, -1), torch.arange(64).repeat_interleave(members.size(2)).expand(2, -1))
    dist = D._squared_distances(nodes[None, :, None], padded[:, None])  # [2, R, Np] (padding: inf)
    looked = (owner[:, None, :, None] == nearest[:, :, None, :]).any(-1)  # [2, R, Np]
    assert (dist.masked_fill(looked, float("inf")).amin(-1) >= bound).all()
    assert torch.isfinite(bound).any()  # a bound that proves something


def test_point_buckets_partition_the_cloud():
    pos = torch.rand(2, 300, 3) * 2 - 1
    padded, members, lo, hi = D.point_buckets(pos, levels=4, min_points=8)
    assert padded.shape == (2, 304, 3) and members.shape == (2, 16, 19)  # 300 padded to 16 buckets of 19
    assert torch.equal(members.reshape(2, -1).sort(-1).values, torch.arange(304).expand(2, -1))
    pts = torch.stack([padded[b][members[b]] for b in range(2)])  # [2, 16, 19, 3]
    real = torch.isfinite(pts[..., 0])
    assert int(real.sum()) == 600 and torch.isinf(padded[:, 300:]).all()
    inside = (pts >= lo.unsqueeze(2)) & (pts <= hi.unsqueeze(2))
    assert inside.all(-1)[real].all()
    small = D.point_buckets(pos[:, :5], levels=4, min_points=8)[1]  # a tiny cloud: padded to 8 per bucket
    assert small.shape == (2, 16, 8)
