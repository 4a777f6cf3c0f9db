"""Seeded transforms of gridify.transforms."""

import numpy as np
import pytest
import torch

from gridify.transforms import (
    Compose,
    FixedPoints,
    Normalize,
    RandomFlip,
    RandomJitter,
    RandomRotate,
    RandomRotateZ,
    RandomScale,
    point_keys,
)


def _sample(n=64, seed=0, torch_=False):
    r = np.random.default_rng(seed)
    pos = (r.normal(size=(n, 3)) * [2.0, 1.0, 0.5] + [5.0, -1.0, 2.0]).astype(np.float32)
    nrm = r.normal(size=(n, 3))
    nrm = (nrm / np.linalg.norm(nrm, axis=1, keepdims=True)).astype(np.float32)
    s = {"pos": pos, "normal": nrm, "y": np.arange(n) % 4, "category": np.int64(2)}
    if torch_:
        s = {k: torch.as_tensor(v) for k, v in s.items()}
    return s


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


def test_flip_mirrors_the_chosen_axes_with_their_normals():
    s = _sample(50)
    seen = set()
    for seed in range(40):
        out = RandomFlip(seed=seed)(s)
        sign = np.sign(out["pos"][0] / s["pos"][0])
        seen.add(tuple(sign))
        np.testing.assert_allclose(np.abs(out["pos"]), np.abs(s["pos"]))
        np.testing.assert_allclose(out["pos"] / s["pos"], np.broadcast_to(sign, s["pos"].shape))
        np.testing.assert_allclose(out["normal"], s["normal"] * sign)  # mirrored normals stay unit and on the surface
        np.testing.assert_array_equal(out["y"], s["y"])
    # z (the up axis) never flips by default; x and y each do about half the time, so all four sign pairs occur
    assert seen == {(a, b, 1.0) for a in (-1.0, 1.0) for b in (-1.0, 1.0)}
    assert RandomFlip(axes=[2], p=1.0, seed=0)(s)["pos"][:, 2].tolist() == (-s["pos"][:, 2]).tolist()
    np.testing.assert_array_equal(RandomFlip(p=0.0)(s)["pos"], s["pos"])
    t = _sample(20, torch_=True)
    out = RandomFlip(axes=(0,), p=1.0)(t)
    assert isinstance(out["pos"], torch.Tensor) and out["pos"].dtype == t["pos"].dtype
    torch.testing.assert_close(out["pos"][:, 0], -t["pos"][:, 0])
    np.testing.assert_array_equal(RandomFlip(seed=3)(s)["pos"], RandomFlip(seed=3)(s)["pos"])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"axes": []}, "axes must be a non-empty list"),
        ({"axes": [0, 0]}, "distinct"),
        ({"axes": [3]}, "among 0, 1, 2"),
        ({"axes": "xy"}, "axes must be"),
        ({"p": 1.5}, "p must be a probability"),
        ({"p": float("nan")}, "p must be a probability"),
    ],
)
def test_flip_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RandomFlip(**kwargs)


def test_compose_reproducible_pipeline():
    def make():
        return Compose(
            [Normalize(), FixedPoints(32, seed=1), RandomRotateZ(seed=2), RandomScale(seed=3), RandomJitter(seed=4)]
        )

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
    assert np.array_equal(out["pos"][:, 0] // 3, out["y"])  # every label travels with its point
    assert 50 < len(np.unique(out["y"])) <= 100
    with pytest.raises(ValueError, match=r"max_ratio must be a number in \[0, 1\)"):
        RandomPointDropout(1.0)


# ---------------------------------------------------------------------------------------------
# input validation: every bad input gets a ValueError naming the transform, argument and problem
# ---------------------------------------------------------------------------------------------
from gridify.transforms import RandomPointDropout, RandomResample, rotation_matrix  # noqa: E402


def _cloud(n=50, seed=0):
    p = np.random.default_rng(seed).standard_normal((n, 3)).astype(np.float32)
    return p, p / np.linalg.norm(p, axis=1, keepdims=True)


_ALL_TRANSFORMS = [
    Normalize(),
    FixedPoints(20),
    FixedPoints(80, deterministic=True),
    RandomRotateZ(),
    RandomRotate(axis=0),
    RandomScale(anisotropic=True),
    RandomJitter(),
    RandomPointDropout(0.9),
    RandomResample(),
]


@pytest.mark.parametrize("t", _ALL_TRANSFORMS, ids=lambda t: type(t).__name__)
@pytest.mark.parametrize(
    "bad,match",
    [
        (lambda p, n: {"pos": p, "normal": n[:3]}, r"'normal' must have shape \[50, 3\] like 'pos', got \(3, 3\)"),
        (lambda p, n: {"pos": p, "normal": n[:20]}, r"'normal' must have shape \[50, 3\]"),
        (lambda p, n: {"pos": np.full((5, 3), np.nan)}, "'pos' contains NaN/Inf"),
        (lambda p, n: {"pos": p.astype(np.int64)}, "'pos' must hold floating-point coordinates, got dtype int64"),
        (
            lambda p, n: {"pos": p.astype(np.complex64)},
            "'pos' must hold floating-point coordinates, got dtype complex64",
        ),
        (lambda p, n: {"pos": p.astype(bool)}, "'pos' must hold floating-point coordinates, got dtype bool"),
        (
            lambda p, n: {"pos": torch.tensor(p), "normal": torch.ones(50, 3, dtype=torch.long)},
            "'normal' must hold floating-point components, got dtype torch.int64",
        ),
        (lambda p, n: {"pos": p, "normal": np.full((50, 3), np.inf, np.float32)}, "'normal' contains NaN/Inf"),
        (lambda p, n: {"pos": p, "y": np.arange(49)}, "'y' has 49 rows but 'pos' has 50 points"),
        (lambda p, n: {"pos": p, "x": np.zeros((10, 6), np.float32)}, "'x' has 10 rows but 'pos' has 50 points"),
        (lambda p, n: {"pos": torch.zeros(5, 3, device="meta")}, "'pos' is a meta tensor"),
        (lambda p, n: {"pos": torch.tensor(p).to(torch.float8_e4m3fn)}, "'pos' has the unsupported dtype"),
    ],
)
def test_every_transform_validates_its_sample_alike(t, bad, match):
    p, n = _cloud()
    with pytest.raises(ValueError, match=f"^{type(t).__name__}: {match}"):
        t(bad(p, n))


@pytest.mark.parametrize("torch_", [False, True])
@pytest.mark.parametrize(
    "make",
    [
        lambda: FixedPoints(20, seed=3),
        lambda: FixedPoints(80, seed=3),
        lambda: FixedPoints(30, deterministic=True, seed=1),
        lambda: RandomPointDropout(0.9, seed=2),
    ],
)
def test_subsampling_keeps_pos_normal_and_labels_matched(make, torch_):
    p, n = _cloud()
    s = {"pos": p, "normal": n, "y": np.arange(50), "category": np.int64(4)}
    if torch_:
        s = {k: torch.as_tensor(v) for k, v in s.items()}
    out = make()(s)
    pos, nrm, y = (np.asarray(out[k]) for k in ("pos", "normal", "y"))
    assert len(pos) == len(nrm) == len(y)
    np.testing.assert_allclose(nrm, pos / np.linalg.norm(pos, axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_array_equal(pos, p[y])  # every label travels with its point
    assert int(out["category"]) == 4


def test_fixed_points_deterministic_bfloat16_and_flags():
    p, _ = _cloud()
    out = FixedPoints(10, deterministic=True)({"pos": torch.tensor(p).bfloat16()})
    assert out["pos"].shape == (10, 3) and out["pos"].dtype == torch.bfloat16
    with pytest.raises(ValueError, match="FixedPoints: replace must be True or False, got 'no'"):
        FixedPoints(5, replace="no")
    with pytest.raises(ValueError, match="FixedPoints: deterministic must be True or False, got 1"):
        FixedPoints(5, deterministic=1)
    with pytest.raises(ValueError, match="FixedPoints.reseed: seed must be a non-negative integer or None"):
        FixedPoints(5).reseed("x")


@pytest.mark.parametrize(
    "fn,match",
    [
        (lambda: RandomRotate(axis=1.0), "RandomRotate: axis must be 0, 1 or 2, got 1.0"),
        (lambda: RandomRotate(axis=True), "RandomRotate: axis must be 0, 1 or 2, got True"),
        (lambda: rotation_matrix(1.0, 0.5), "rotation_matrix: axis must be 0, 1 or 2, got 1.0"),
        (lambda: rotation_matrix(1, "a"), r"rotation_matrix: angle must be a finite number \(radians\), got 'a'"),
        (lambda: RandomRotate("abc"), r"RandomRotate: degrees must be a number or a \(low, high\) pair, got 'abc'"),
        (lambda: RandomRotate(1e308), r"RandomRotate: degrees must be a number in \[0, 360\]"),
        (lambda: RandomRotate(float("inf")), r"RandomRotate: degrees must be a number in \[0, 360\].*got inf"),
        (lambda: RandomRotate(-5), r"RandomRotate: degrees must be a number in \[0, 360\].*got -5"),
        (lambda: RandomRotate((0, 1e9)), r"RandomRotate: degrees bounds must be finite numbers in \[-360, 360\]"),
        (lambda: RandomRotate((0, "a")), r"RandomRotate: degrees bounds must be finite numbers"),
        (lambda: RandomScale(anisotropic="x"), "RandomScale: anisotropic must be True or False, got 'x'"),
        (lambda: RandomScale(1e-320, 1.0, anisotropic=True), "RandomScale: low=1e-320 is too small for anisotropic"),
        (lambda: Compose(5), "Compose: transforms must be a sequence of callables, got int"),
        (lambda: Compose(None), "Compose: transforms must be a sequence of callables, got NoneType"),
        (lambda: Compose(Normalize()), "got Normalize \\(wrap a single transform in a list\\)"),
        (lambda: Compose([Normalize(), 3]), r"Compose: transforms\[1\] = 3 is not callable"),
        (lambda: RandomPointDropout(True), r"RandomPointDropout: max_ratio must be a number in \[0, 1\)"),
    ],
)
def test_constructor_arguments_are_validated(fn, match):
    with pytest.raises(ValueError, match=match):
        fn()


def test_valid_numpy_scalars_are_accepted():
    p, _ = _cloud()
    assert RandomPointDropout(np.float32(0.5)).max_ratio == 0.5
    assert RandomRotate(np.float64(30), axis=np.int64(1))({"pos": p})["pos"].shape == (50, 3)
    np.testing.assert_allclose(rotation_matrix(np.int32(2), np.float32(0.0)), np.eye(3))


@pytest.mark.parametrize(
    "fn,match",
    [
        (
            lambda p: RandomScale(1e308, 1e308)({"pos": p}),
            "RandomScale: scaling by a factor up to high=1e\\+308 makes 'pos' overflow float32",
        ),
        (lambda p: RandomScale(1e5, 1e5)({"pos": torch.tensor(p).half()}), "makes 'pos' overflow float16"),
        (
            lambda p: RandomJitter(1e308, clip=None)({"pos": p}),
            r"RandomJitter: the noise \(sigma=1e\+308, clip=None\) makes 'pos' overflow float32",
        ),
        (lambda p: RandomJitter(1e5, 1e5)({"pos": p.astype(np.float16)}), "makes 'pos' overflow float16"),
        (
            lambda p: RandomRotate((45, 45))({"pos": np.array([[3e38, 3e38, 0.0], [0, 0, 1]], np.float32)}),
            r"RandomRotate: rotating values up to \|3e\+38\| .* makes 'pos' overflow float32",
        ),
    ],
)
def test_overflowing_results_are_refused(fn, match):
    p, _ = _cloud()
    with pytest.raises(ValueError, match=match):
        fn(p)


def test_anisotropic_scale_normals_never_overflow():
    p, n = _cloud()
    s = {"pos": p.astype(np.float64) / 1e3, "normal": n.astype(np.float16)}
    out = RandomScale(1e-5, 1e3, anisotropic=True, seed=0)(s)["normal"]
    assert out.dtype == np.float16 and np.isfinite(out).all()
    np.testing.assert_allclose(np.linalg.norm(out.astype(np.float64), axis=1), 1.0, atol=2e-3)
    st = {"pos": torch.tensor(p), "normal": torch.tensor(n)}
    tout = RandomScale(0.5, 2.0, anisotropic=True, seed=0)(st)["normal"]
    nout = RandomScale(0.5, 2.0, anisotropic=True, seed=0)({"pos": p, "normal": n})["normal"]
    assert tout.dtype == torch.float32
    np.testing.assert_allclose(tout.numpy(), nout, atol=1e-6)
