"""RandomResample (gridify.transforms.augment): a new sampling of the same surface; its neighbours are
gridify.ops.knn's, the same as those of the search it held before (compared on fixed seeds)."""

import importlib

import numpy as np
import pytest
import torch

from gridify.transforms import RandomResample
from tests.transforms.test_transforms import _cloud


def _knn_loop(p, k):
    """Loop reference: every point's k nearest other points, nearest first."""
    out = []
    for i in range(len(p)):
        d = [(float(np.sum((p[j] - p[i]) ** 2)), j) for j in range(len(p)) if j != i]
        out.append([j for _, j in sorted(d)[:k]])
    return np.array(out)


def test_resample_neighbours_equal_the_loop_reference():
    p, _ = _cloud(60, seed=4)
    t = RandomResample(k=5)
    np.testing.assert_array_equal(t.neighbours(p), _knn_loop(p.astype(np.float64), 5))
    np.testing.assert_array_equal(RandomResample(k=100).neighbours(p[:7]), _knn_loop(p[:7].astype(np.float64), 6))


def test_resample_neighbours_in_blocks_and_the_allocation_limit(monkeypatch):
    K = importlib.import_module("gridify.ops.knn")  # the module (gridify.ops.knn is also the function)

    p, _ = _cloud(300, seed=7)
    whole = RandomResample(k=4).neighbours(p)
    monkeypatch.setattr(K, "CHUNK_ELEMENTS", 300 * 7)  # ops.knn's search: 7 query rows a block, the last one short
    np.testing.assert_array_equal(RandomResample(k=4).neighbours(p), whole)
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", "1000")
    with pytest.raises(ValueError, match="RandomResample: k=4 neighbours of 300 points would need"):
        RandomResample(k=4)({"pos": p})


@pytest.mark.parametrize("torch_", [False, True])
def test_resample_moves_every_point_toward_one_of_its_neighbours(torch_):
    p, n = _cloud(80, seed=5)
    s = {"pos": p, "normal": n, "y": np.arange(80), "category": np.int64(2)}
    if torch_:
        s = {k: torch.as_tensor(v) for k, v in s.items()}
    out = RandomResample(k=4, max_step=0.5, seed=1)(s)
    new = np.asarray(out["pos"], dtype=np.float64)
    assert new.shape == (80, 3) and (out["pos"].dtype == (torch.float32 if torch_ else np.float32))
    assert isinstance(out["pos"], torch.Tensor) == torch_
    nb = _knn_loop(p.astype(np.float64), 4)
    for i in range(80):  # new_i = p_i + u (p_j - p_i), j among the 4 nearest, 0 <= u <= 0.5
        fits = []
        for j in nb[i]:
            d = p[j].astype(np.float64) - p[i]
            u = float(np.dot(new[i] - p[i], d) / np.dot(d, d))
            fits.append((np.linalg.norm(p[i] + u * d - new[i]), u))
        err, u = min(fits)
        assert err < 1e-5 and -1e-6 <= u <= 0.5 + 1e-6
    assert np.abs(new - p).max() > 0  # the points moved
    np.testing.assert_array_equal(np.asarray(out["normal"]), n)  # other entries stay with their point
    np.testing.assert_array_equal(np.asarray(out["y"]), np.arange(80))
    assert int(out["category"]) == 2


def test_resample_is_seeded_cached_and_leaves_tiny_clouds():
    p, _ = _cloud(40, seed=6)
    a = RandomResample(seed=3)
    b = RandomResample(seed=3)
    first = a({"pos": p})["pos"]
    np.testing.assert_array_equal(first, b({"pos": p})["pos"])  # same seed, same sampling
    assert not np.array_equal(first, a({"pos": p})["pos"])  # every call a new one
    assert len(a._cache) == 1  # the neighbours of a cloud are computed once
    nocache = RandomResample(cache_size=0)
    nocache({"pos": p})
    assert not nocache._cache
    np.testing.assert_array_equal(RandomResample(max_step=0.0)({"pos": p})["pos"], p)
    one = np.ones((1, 3), np.float32)
    np.testing.assert_array_equal(RandomResample()({"pos": one})["pos"], one)
    out = RandomResample()({"pos": torch.tensor(p).bfloat16()})["pos"]
    assert out.dtype == torch.bfloat16 and out.shape == (40, 3)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"k": 0}, "RandomResample: k must be a positive integer, got 0"),
        ({"max_step": 1.5}, r"RandomResample: max_step must be a number in \[0, 1\], got 1.5"),
        ({"max_step": float("nan")}, r"RandomResample: max_step must be a number in \[0, 1\]"),
        ({"cache_size": -1}, "RandomResample: cache_size must be a non-negative integer, got -1"),
    ],
)
def test_resample_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RandomResample(**kwargs)


def _former_neighbours(pos, k):
    """RandomResample.neighbours before it called gridify.ops.knn: its own blocked float32 search."""
    p = torch.as_tensor(np.asarray(pos, dtype=np.float32))
    n = p.shape[0]
    k = min(k, n - 1)
    rows = max(1, min(n, (1 << 22) // n))
    idx = np.empty((n, k), dtype=np.uint16 if n <= 65536 else np.int64)
    for start in range(0, n, rows):
        d = torch.cdist(p[start : start + rows], p)
        d[torch.arange(d.shape[0]), torch.arange(start, start + d.shape[0])] = float("inf")
        idx[start : start + rows] = torch.topk(d, k, dim=1, largest=False, sorted=True).indices.numpy()
    return idx


@pytest.mark.parametrize("n,k", [(50, 8), (1024, 8), (3000, 16)])  # 3000 points: ops.knn's KD-tree
def test_resample_gives_the_former_neighbours_and_samplings(n, k):
    p, _ = _cloud(n, seed=n)
    nb = RandomResample(k=k).neighbours(p)
    assert nb.dtype == np.uint16
    nb, former = nb.astype(np.int64), _former_neighbours(p, k).astype(np.int64)
    differ = np.flatnonzero((nb != former).any(1))
    # the former float32 matrix-product distances put near-equal neighbours out of order now and then (the
    # 3000-point cloud: 1 row, two distances 3e-7 apart): the same neighbours, in the order of the exact distances
    assert len(differ) <= n // 1000
    p64 = p.astype(np.float64)
    for i in differ:
        d = ((p64[former[i]] - p64[i]) ** 2).sum(1)
        np.testing.assert_array_equal(nb[i], former[i][np.lexsort((former[i], d))])
    a, b = RandomResample(k=k, seed=5), RandomResample(k=k, seed=5)
    b.neighbours = lambda pos: _former_neighbours(pos, k)
    same = np.setdiff1d(np.arange(n), differ)
    for _ in range(2):  # the same draws: the same new points wherever the neighbours are the same
        np.testing.assert_array_equal(a({"pos": p})["pos"][same], b({"pos": p})["pos"][same])


def test_resample_neighbours_of_duplicated_points_leave_the_point_itself_out():
    p = np.repeat(_cloud(20, seed=3)[0], 3, axis=0)  # every point three times: ties at distance 0
    nb = RandomResample(k=4).neighbours(p).astype(np.int64)
    assert (nb != np.arange(60)[:, None]).all()
    copies = np.arange(60) // 3
    assert ((nb[:, :2] // 3) == copies[:, None]).all()  # its two copies first, then other points
    np.testing.assert_array_equal(
        np.sort(nb[:, :2], axis=1), [sorted(set(range(3 * c, 3 * c + 3)) - {i}) for i, c in enumerate(copies)]
    )
    six = np.zeros((6, 3), np.float32)  # more copies than k + 1: the lowest-index others, never itself
    np.testing.assert_array_equal(RandomResample(k=2).neighbours(six), [[1, 2], [0, 2], [0, 1], [0, 1], [0, 1], [0, 1]])
