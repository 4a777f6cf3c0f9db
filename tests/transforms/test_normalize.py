"""The one normalization rule (gridify.transforms.normalize): ``centre_and_scale``, its traceable tensor form
``centre_and_scale_unchecked`` and the :class:`~gridify.transforms.Normalize` transform."""

import math

import numpy as np
import pytest
import torch

from gridify.api import normalize_cloud
from gridify.transforms import Normalize, centre_and_scale, centre_and_scale_unchecked
from tests.transforms.test_transforms import _cloud, _sample


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


def _former_centre_and_scale(p, center="mean", scale="sphere"):
    """gridify.transforms.centre_and_scale before the rule became a tensor function (numpy, float64)."""
    top = float(np.abs(p).max())
    m = math.ldexp(1.0, math.frexp(top)[1] - 1) if top > 0 else 1.0
    u = p / m
    cu = u.mean(0) if center == "mean" else (u.min(0) + u.max(0)) / 2
    q = u - cu
    su = float(np.sqrt((q * q).sum(1).max())) if scale == "sphere" else float(np.abs(q).max())
    assert su > 1e-12 * float(np.abs(u).max())
    return q / su, cu * m, su * m


@pytest.mark.parametrize("center,scale", [("mean", "sphere"), ("bbox", "cube"), ("mean", "cube"), ("bbox", "sphere")])
def test_centre_and_scale_gives_the_former_results(center, scale):
    rng = np.random.default_rng(0)
    for p in (
        rng.normal(size=(1000, 3)) * [3.0, 1.0, 0.5] + [10.0, -4.0, 2.0],
        rng.uniform(-1, 1, (30, 3)) * 1e300,
        rng.uniform(-1, 1, (30, 3)) * 1e-300,
        rng.normal(size=(7, 2)) + 5e5,
        np.arange(9.0).reshape(3, 3),
    ):
        q, c, s = centre_and_scale(p, center, scale)
        rq, rc, rs = _former_centre_and_scale(p, center, scale)
        assert np.array_equal(q, rq) and np.array_equal(c, rc) and s == rs  # the same bits


@pytest.mark.parametrize("center,scale", [("mean", "sphere"), ("bbox", "cube")])
def test_the_tensor_rule_is_batched_and_sends_a_zero_extent_cloud_to_the_origin(center, scale):
    rng = np.random.default_rng(1)
    clouds = np.stack([rng.normal(size=(50, 3)) * 7 + 3, rng.uniform(-1, 1, (50, 3)) * 1e300, np.full((50, 3), 0.1)])
    q, c, s = centre_and_scale_unchecked(torch.from_numpy(clouds), center, scale)
    assert q.shape == (3, 50, 3) and c.shape == (3, 3) and s.shape == (3,) and q.dtype == torch.float64
    for b in range(2):  # one cloud of a batch as the checked entry gives it alone
        rq, rc, rs = centre_and_scale(clouds[b], center, scale)
        assert np.array_equal(q[b].numpy(), rq) and np.array_equal(c[b].numpy(), rc) and float(s[b]) == rs
    assert float(s[2]) == 0.0 and torch.equal(q[2], torch.zeros(50, 3, dtype=torch.float64))  # identical points
    np.testing.assert_allclose(c[2].numpy(), 0.1, rtol=1e-15)
    with pytest.raises(ValueError, match=r"all 50 points are identical \(zero extent\)"):
        centre_and_scale(clouds[2], center, scale)
    q0, _, s0 = centre_and_scale_unchecked(torch.zeros(1, 4, 3, dtype=torch.float64), center, scale)
    assert torch.equal(q0, torch.zeros(1, 4, 3, dtype=torch.float64)) and float(s0) == 0.0  # no NaN


def test_the_tensor_rule_traces_to_one_graph_for_every_cloud():
    rng = np.random.default_rng(2)
    example = torch.from_numpy(rng.normal(size=(2, 40, 3)))
    traced = torch.jit.trace(lambda p: centre_and_scale_unchecked(p, "bbox", "cube"), (example,))
    other = torch.from_numpy(np.stack([rng.uniform(-1, 1, (40, 3)) * 1e200, np.ones((40, 3))]))
    for got, want in zip(traced(other), centre_and_scale_unchecked(other, "bbox", "cube")):
        assert torch.equal(got, want)
