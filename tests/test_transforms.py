"""Seeded transforms of gridify.transforms."""
import numpy as np
import pytest
import torch

from gridify.transforms import (Compose, FixedPoints, Normalize, RandomJitter, RandomRotate, RandomRotateZ,
                                RandomScale, point_keys)


def _sample(n=64, seed=0, torch_=False):
    r = np.random.default_rng(seed)
    pos = (r.normal(size=(n, 3)) * [2.0, 1.0, 0.5] + [5.0, -1.0, 2.0]).astype(np.float32)
    nrm = r.normal(size=(n, 3))
    nrm = (nrm / np.linalg.norm(nrm, axis=1, keepdims=True)).astype(np.float32)
    s = {"pos": pos, "normal": nrm, "y": np.arange(n) % 4, "category": np.int64(2)}
    if torch_:
        s = {k: torch.as_tensor(v) for k, v in s.items()}
    return s


@pytest.mark.parametrize("torch_", [False, True])
def test_normalize_unit_sphere(torch_):
    s = _sample(torch_=torch_)
    out = Normalize()(s)
    pos = np.asarray(out["pos"])
    assert type(out["pos"]) is type(s["pos"])
    np.testing.assert_allclose(pos.mean(0), 0, atol=1e-5)
    assert abs(np.linalg.norm(pos, axis=1).max() - 1.0) < 1e-5
    assert out["normal"] is s["normal"]  # untouched by translation + uniform scale
    assert not np.allclose(np.asarray(s["pos"]), pos)  # the input was not modified in place


def test_normalize_zero_extent_raises():
    s = {"pos": np.tile([[1.0, 2.0, 3.0]], (10, 1))}
    with pytest.raises(ValueError, match=r"Normalize: all 10 points are identical \(zero extent\)"):
        Normalize()(s)
    with pytest.raises(ValueError, match="no 'pos'"):
        Normalize()({"x": np.zeros((3, 3))})


def test_fixed_points_without_replacement_when_possible():
    s = _sample(100)
    out = FixedPoints(60, seed=0)(s)
    assert out["pos"].shape == (60, 3) and out["normal"].shape == (60, 3) and out["y"].shape == (60,)
    assert len(np.unique(out["pos"], axis=0)) == 60  # no repeats
    # rows stay aligned across per-point keys; scalars are kept
    idx = [int(np.flatnonzero((s["pos"] == p).all(1))[0]) for p in out["pos"]]
    np.testing.assert_array_equal(out["normal"], s["normal"][idx])
    np.testing.assert_array_equal(out["y"], s["y"][idx])
    assert out["category"] == 2
    assert sorted(point_keys(s)) == ["normal", "pos", "y"]


def test_fixed_points_pads_with_all_points_when_too_few():
    s = _sample(10)
    out = FixedPoints(25, seed=1)(s)
    assert out["pos"].shape == (25, 3)
    assert len(np.unique(out["pos"], axis=0)) == 10  # every original point appears
    rep = FixedPoints(8, replace=True, seed=1)(_sample(100))
    assert rep["pos"].shape == (8, 3)


def test_fixed_points_seeded_and_deterministic():
    s = _sample(200)
    a = FixedPoints(50, seed=3)
    b = FixedPoints(50, seed=3)
    first_a, first_b = a(s)["pos"], b(s)["pos"]
    np.testing.assert_array_equal(first_a, first_b)  # same seed, same sequence
    assert not np.array_equal(first_a, a(s)["pos"])  # the training stream moves on
    ev = FixedPoints(50, deterministic=True, seed=3)
    e1 = ev(s)["pos"]
    np.testing.assert_array_equal(e1, ev(s)["pos"])  # evaluation: same input -> same points
    np.testing.assert_array_equal(e1, FixedPoints(50, deterministic=True, seed=3)(s)["pos"])
    assert not np.array_equal(e1, FixedPoints(50, deterministic=True, seed=4)(s)["pos"])
    assert not np.array_equal(e1, ev(_sample(200, seed=9))["pos"])
    with pytest.raises(ValueError, match="n must be a positive integer"):
        FixedPoints(0)


def test_fixed_points_torch_and_worker_reseeding(monkeypatch):
    s = _sample(100, torch_=True)
    out = FixedPoints(30, seed=0)(s)
    assert isinstance(out["pos"], torch.Tensor) and out["pos"].shape == (30, 3)

    class Info:
        def __init__(self, seed):
            self.seed = seed

    t = FixedPoints(30, seed=0)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: Info(1234))
    w1 = t.indices(s)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: Info(5678))
    w2 = t.indices(s)
    assert not np.array_equal(w1, w2)  # different DataLoader workers draw different subsets
    t2 = FixedPoints(30, seed=0)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: Info(1234))
    np.testing.assert_array_equal(w1, t2.indices(s))  # ...reproducibly


@pytest.mark.parametrize("torch_", [False, True])
def test_rotate_z_rotates_normals_consistently(torch_):
    r = np.random.default_rng(0)
    d = r.normal(size=(100, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    s = {"pos": d.astype(np.float32), "normal": d.astype(np.float32)}  # unit sphere: normal = position
    if torch_:
        s = {k: torch.as_tensor(v) for k, v in s.items()}
    out = RandomRotateZ(seed=5)(s)
    pos, nrm = np.asarray(out["pos"]), np.asarray(out["normal"])
    np.testing.assert_allclose(pos, nrm, atol=1e-6)  # still the outward normal
    np.testing.assert_allclose(pos[:, 2], np.asarray(s["pos"])[:, 2], atol=1e-6)  # z axis fixed
    np.testing.assert_allclose(np.linalg.norm(pos, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(pos, np.asarray(s["pos"]), atol=1e-3)
    np.testing.assert_allclose(np.asarray(RandomRotateZ(seed=5)(s)["pos"]), pos)  # seeded


def test_rotate_other_axis_and_range():
    s = _sample()
    out = RandomRotate(degrees=(90, 90), axis=1)(s)  # exactly +90 degrees about y
    np.testing.assert_allclose(out["pos"][:, 1], s["pos"][:, 1], atol=1e-6)
    np.testing.assert_allclose(out["pos"][:, 0], s["pos"][:, 2], atol=1e-5)
    with pytest.raises(ValueError, match="axis must be 0, 1 or 2"):
        RandomRotate(axis=3)


def test_anisotropic_scale_keeps_normals_perpendicular():
    r = np.random.default_rng(1)
    n = np.array([1.0, 2.0, 2.0]) / 3.0  # points on the plane n . p = 0.5
    u = np.cross(n, [0, 0, 1.0])
    u /= np.linalg.norm(u)
    v = np.cross(n, u)
    a, b = r.normal(size=(2, 50, 1))
    pos = 0.5 * n + a * u + b * v
    s = {"pos": pos, "normal": np.tile(n, (50, 1))}
    out = RandomScale(0.5, 2.0, anisotropic=True, seed=2)(s)
    q, m = out["pos"], out["normal"]
    diffs = q[1:] - q[0]
    np.testing.assert_allclose(diffs @ m[0], 0, atol=1e-9)  # normal still perpendicular to the surface
    np.testing.assert_allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-9)
    iso = RandomScale(0.5, 2.0, seed=2)(s)
    ratio = iso["pos"] / s["pos"]
    np.testing.assert_allclose(ratio, ratio[0, 0])
    with pytest.raises(ValueError, match="0 < low <= high"):
        RandomScale(2.0, 1.0)


def test_jitter_clipped_and_seeded():
    s = _sample(500)
    out = RandomJitter(sigma=0.1, clip=0.05, seed=0)(s)
    d = out["pos"] - s["pos"]
    assert np.abs(d).max() <= 0.05 + 1e-6 and np.abs(d).max() > 0.04
    np.testing.assert_array_equal(out["pos"], RandomJitter(sigma=0.1, clip=0.05, seed=0)(s)["pos"])
    np.testing.assert_array_equal(out["normal"], s["normal"])
    g = np.random.default_rng(11)
    t = RandomJitter(0.01, generator=g)
    assert t.rng is g


def test_compose_reproducible_pipeline():
    def make():
        return Compose([Normalize(), FixedPoints(32, seed=1), RandomRotateZ(seed=2), RandomScale(seed=3),
                        RandomJitter(seed=4)])

    s = _sample(100, torch_=True)
    a, b = make(), make()
    for _ in range(3):
        oa, ob = a(s), b(s)
        torch.testing.assert_close(oa["pos"], ob["pos"])
        torch.testing.assert_close(oa["normal"], ob["normal"])
    assert oa["pos"].shape == (32, 3) and oa["pos"].dtype == torch.float32
    assert "RandomJitter" in repr(a)
    with pytest.raises(ValueError, match="not callable"):
        Compose([1])


def test_random_point_dropout_keeps_n_and_moves_labels_with_their_points():
    import numpy as np

    from gridify.transforms import RandomPointDropout

    pos = np.arange(300, dtype=np.float64).reshape(100, 3)
    y = np.arange(100)
    out = RandomPointDropout(0.5, seed=1)({"pos": pos, "y": y, "category": 3})
    assert out["pos"].shape == (100, 3) and out["category"] == 3
    assert np.array_equal(out["pos"][:, 0] // 3, out["y"])          # every label travels with its point
    assert 50 < len(np.unique(out["y"])) <= 100
    with pytest.raises(ValueError, match=r"max_ratio must be a number in \[0, 1\)"):
        RandomPointDropout(1.0)
