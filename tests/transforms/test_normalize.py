"""The normalization (gridify.transforms.normalize): ``centre_and_scale`` and the
:class:`~gridify.transforms.Normalize` transform."""

import numpy as np
import pytest
import torch

from gridify.api import normalize_cloud
from gridify.transforms import Normalize, centre_and_scale
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
