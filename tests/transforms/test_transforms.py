"""Seeded transforms of gridify.transforms."""

import numpy as np
import pytest
import torch

from gridify.api import normalize_cloud
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
from gridify.transforms import RandomPointDropout, RandomResample, centre_and_scale, rotation_matrix  # noqa: E402


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


@pytest.mark.parametrize(
    "fn,match",
    [
        (
            lambda p: centre_and_scale(p.astype(complex)),
            "pos must hold real coordinates, got dtype complex128 "
            r"\(the imaginary part would be dropped\)",
        ),
        (lambda p: centre_and_scale(torch.tensor(p).to(torch.complex64)), "got dtype torch.complex64"),
        (lambda p: centre_and_scale(np.ones((3, 3), bool)), "pos must hold real coordinates, got dtype bool"),
        (lambda p: centre_and_scale("abc"), "pos must hold real coordinates"),
        (lambda p: centre_and_scale([[1, 2, 3], [1]]), r"pos must be an \[N, D\] array of real numbers"),
        (lambda p: centre_and_scale(p, center="x"), r"center must be one of \('mean', 'bbox'\), got 'x'"),
        (lambda p: centre_and_scale(p, center=None), r"center must be one of \('mean', 'bbox'\), got None"),
        (lambda p: centre_and_scale(np.zeros((3, 0))), r"expected a non-empty \[N, D\] cloud"),
    ],
)
def test_centre_and_scale_refuses_bad_input(fn, match):
    p, _ = _cloud()
    with pytest.raises(ValueError, match=match):
        fn(p)


def test_centre_and_scale_accepts_real_input_kinds():
    p, _ = _cloud()
    ref = centre_and_scale(p)[0]
    np.testing.assert_allclose(centre_and_scale(p.tolist())[0], ref, atol=1e-12)
    np.testing.assert_allclose(centre_and_scale(torch.tensor(p))[0], ref, atol=1e-12)
    q, c, s = centre_and_scale(np.arange(9).reshape(3, 3), center="bbox")
    np.testing.assert_allclose(q * s + c, np.arange(9).reshape(3, 3), atol=1e-12)


@pytest.mark.parametrize("fn", [lambda p: normalize_cloud(p)[0], lambda p: Normalize()({"pos": p})["pos"]])
def test_normalization_of_extreme_coordinates(fn):
    rng = np.random.default_rng(0)
    p = rng.uniform(-1, 1, (30, 3))
    ref = normalize_cloud(p)[0]
    for scale in (1e160, 1e300, 1e-300):
        np.testing.assert_allclose(fn(p * scale), ref, rtol=1e-6, atol=1e-6)


def test_up_axis_rotations_are_proper_and_take_the_axis_to_z():
    from gridify import _cliargs
    from gridify.transforms import UP_AXES, check_up_axis, to_z_up, up_axis_rotation

    assert _cliargs.UP_AXES == UP_AXES  # the CLI's copy (no torch import while parsing) stays the same
    basis = {"x": [1, 0, 0], "y": [0, 1, 0], "z": [0, 0, 1]}
    for axis in UP_AXES:
        r = up_axis_rotation(axis)
        v = np.array(basis[axis[-1]], float) * (-1 if axis.startswith("-") else 1)
        assert np.allclose(r @ v, [0, 0, 1]) and np.allclose(r @ r.T, np.eye(3)) and np.isclose(np.linalg.det(r), 1)
    p = np.array([[1.0, 2.0, 3.0]], np.float32)
    q, n = to_z_up(p, "y", p * 2)
    assert q.dtype == np.float32 and np.array_equal(q, [[1.0, -3.0, 2.0]]) and np.array_equal(n, [[2.0, -6.0, 4.0]])
    same, none = to_z_up(p, "z")
    assert same is p and none is None
    assert check_up_axis("w", " Y ") == "y"
    with pytest.raises(ValueError, match=r"w: up_axis must be one of z, y, x, -z, -y, -x .*got 'up'"):
        check_up_axis("w", "up")


# ---------------------------------------------------------------------------------------------
# RandomResample: a new sampling of the same surface
# ---------------------------------------------------------------------------------------------
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
    import gridify.transforms as T

    p, _ = _cloud(300, seed=7)
    whole = RandomResample(k=4).neighbours(p)
    monkeypatch.setattr(T, "_RESAMPLE_BLOCK", 300 * 7)  # 7 query rows a block, the last one short
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
