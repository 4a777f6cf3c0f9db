"""gridify.nn.grid.RegularGrid: cubic and per-axis (Rx, Ry, Rz) grids, layout, pickling, validation."""

import pickle

import pytest
import torch

from gridify.nn.grid import RegularGrid
from gridify.nn.gridification import Gridification
from gridify.ops import grid_knn, grid_positions


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


@pytest.mark.parametrize(
    "bad, match",
    [
        ((8, 8), r"one per axis \(Rx, Ry, Rz\), got 2 values"),
        ((8, 8, 1), r"resolution\[2\] \(z\) must be an integer >= 2"),
        ((8, 2.5, 4), r"resolution\[1\] \(y\)"),
        (1, "resolution must be an integer >= 2"),
    ],
)
def test_bad_resolutions_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        RegularGrid(bad)
    with pytest.raises(ValueError, match=match):
        grid_positions(bad)
    with pytest.raises(ValueError, match=match):
        grid_knn(torch.zeros(3, 3), 1, bad)


def test_public_grid_and_box_helpers_validate():
    with pytest.raises(ValueError, match="grid_positions: resolution must be an integer >= 2"):
        grid_positions(1)
    with pytest.raises(ValueError, match="dtype has the unsupported dtype"):
        grid_positions(3, dtype=torch.float8_e5m2)
    with pytest.raises(ValueError, match=r"RegularGrid.contains: pos must have shape \[N, 3\]"):
        Gridification(3, 4, 3).grid.contains(torch.rand(4, 2))
    with pytest.raises(ValueError, match="Gridification: bounds must be a pair"):
        Gridification(3, 4, 3, bounds=1.0)
