"""gridify.ops.grid: grid positions and the exact grid kNN (cubic and per-axis grids)."""

import pytest
import torch

from gridify.ops import grid_knn, grid_positions, knn, radius, radius_reference

from tests.helpers import ragged_batch


def _dists(x, y, ei):
    return (y[ei[0]] - x[ei[1]]).pow(2).sum(-1)


SHAPES = [(9, 7, 3), (32, 32, 8), (2, 5, 3), (4, 4, 4)]


def _positions_reference(shape, lower, upper):
    rows = []
    for a in range(shape[0]):
        for b in range(shape[1]):
            for c in range(shape[2]):
                rows.append([lower[i] + (upper[i] - lower[i]) * (a, b, c)[i] / (shape[i] - 1) for i in range(3)])
    return torch.tensor(rows, dtype=torch.float64)


def _brute_knn(pos, k, shape, lower, upper, batch):
    nodes = grid_positions(shape, lower, upper, dtype=torch.float64)
    d = torch.cdist(pos.double(), nodes)
    idx = torch.topk(d, k, dim=1, largest=False, sorted=True).indices
    n = nodes.size(0)
    return idx + (batch * n)[:, None]


def _wide(n=200, spread=300.0, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(n, 3, generator=g) * 2 - 1) * spread).to(dtype)


@pytest.mark.parametrize("R, k", [(2, 1), (3, 9), (5, 9), (9, 9), (6, 27), (4, 64)])
def test_grid_knn_exact_against_brute_force(R, k):
    pos, batch = ragged_batch([100, 37, 1], seed=R)
    B = 3
    nodes = grid_positions(R).repeat(B, 1)
    nb = torch.arange(B).repeat_interleave(R**3)
    ref = knn(nodes, pos, k, nb, batch, backend="torch")
    out = grid_knn(pos, k, R, batch=batch)
    assert torch.equal(out[0], ref[0])
    torch.testing.assert_close(_dists(nodes, pos, out), _dists(nodes, pos, ref))
    assert torch.equal(out[1] // R**3, batch[out[0]])  # never another cloud's grid


def test_grid_knn_points_outside_box_and_anisotropic_box():
    pos = torch.randn(300, 3) * 3  # many far outside [-1, 1]^3: the window search must retry
    lo, hi = (-1.0, -2.0, 0.0), (1.0, 2.0, 0.5)
    nodes = grid_positions(6, lo, hi)
    out = grid_knn(pos, 8, 6, lo, hi)
    ref = knn(nodes, pos, 8, backend="torch")
    torch.testing.assert_close(_dists(nodes, pos, out), _dists(nodes, pos, ref))


def test_grid_knn_errors():
    with pytest.raises(ValueError, match="resolution must be an integer >= 2"):
        grid_knn(torch.rand(4, 3), 1, 1)
    with pytest.raises(ValueError, match="exceeds the number of grid nodes"):
        grid_knn(torch.rand(4, 3), 9, 2)
    with pytest.raises(ValueError, match=r"shape \[N, 3\]"):
        grid_knn(torch.rand(4, 2), 1, 3)
    with pytest.raises(ValueError, match="upper > lower"):
        grid_knn(torch.rand(4, 3), 1, 3, lower=1.0, upper=-1.0)


@pytest.mark.parametrize("shape", SHAPES)
def test_grid_positions_per_axis_matches_loop(shape):
    lower, upper = (-1.0, -2.0, 0.0), (1.0, 2.0, 3.0)
    got = grid_positions(shape, lower, upper, dtype=torch.float64)
    assert got.shape == (shape[0] * shape[1] * shape[2], 3)
    torch.testing.assert_close(got, _positions_reference(shape, lower, upper), rtol=0, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("k", [1, 5, 9, 20])
def test_grid_knn_per_axis_matches_brute_force(shape, k):
    g = torch.Generator().manual_seed(hash((shape, k)) % 1000)
    n_nodes = shape[0] * shape[1] * shape[2]
    k = min(k, n_nodes)
    lower, upper = (-1.0, -0.5, 0.0), (1.0, 0.5, 0.25)
    lo, hi = torch.tensor(lower), torch.tensor(upper)
    pos = lo + (hi - lo) * (torch.rand(300, 3, generator=g, dtype=torch.float64) * 1.4 - 0.2)  # some outside
    batch = torch.cat([torch.zeros(150, dtype=torch.long), torch.ones(150, dtype=torch.long)])
    got = grid_knn(pos, k, shape, lower, upper, batch)
    assert got.shape == (2, 300 * k)
    assert torch.equal(got[0], torch.arange(300).repeat_interleave(k))
    want = _brute_knn(pos, k, shape, lower, upper, batch)
    assert torch.equal(got[1].view(300, k), want)


def test_grid_knn_refuses_k_beyond_the_per_axis_node_count():
    with pytest.raises(ValueError, match=r"k=13 exceeds the number of grid nodes Rx Ry Rz=12"):
        grid_knn(torch.zeros(3, 3), 13, (3, 2, 2))


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
