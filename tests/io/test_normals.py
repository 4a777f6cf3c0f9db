"""io.repair_normals: the nearest valid point's normal (gridify.ops.knn) against the loop reference, and its errors."""

import numpy as np
import pytest

from gridify.io import repair_normals
from gridify.io.normals import repair_normals_reference


def _cloud(n, bad_fraction, seed):
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(n, 3)).astype(np.float32)
    normals = rng.normal(size=(n, 3))
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    bad = rng.random(n) < bad_fraction
    normals[bad] = 1.0  # the modelnet40_normal_resampled placeholder
    normals[np.flatnonzero(bad)[::3]] = np.nan
    return points, normals.astype(np.float32), bad


@pytest.mark.parametrize("n, bad_fraction", [(1, 0.0), (50, 0.3), (2000, 0.05), (5000, 0.9)])
def test_repair_normals_matches_the_loop_reference(n, bad_fraction):
    points, normals, bad = _cloud(n, bad_fraction, seed=n)
    fixed = repair_normals(points, normals)
    assert fixed.dtype == np.float32 and fixed.shape == (n, 3)
    np.testing.assert_array_equal(fixed, repair_normals_reference(points, normals))
    np.testing.assert_allclose(np.linalg.norm(fixed, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(fixed[~bad], normals[~bad], atol=1e-6)  # valid normals kept (renormalized)


def test_repair_normals_copies_the_nearest_valid_point_and_breaks_ties_by_index():
    points = np.array([[0, 0, 0], [2, 0, 0], [1, 0, 0], [10, 0, 0]], dtype=np.float32)
    normals = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 1], [0, 0, 2.5]], dtype=np.float32)
    fixed = repair_normals(points, normals)
    np.testing.assert_array_equal(fixed[2], [1, 0, 0])  # rows 0 and 1 are equally near: the lower index
    np.testing.assert_array_equal(fixed[3], [0, 1, 0])  # norm 2.5 is invalid too: row 1 is nearest
    np.testing.assert_array_equal(fixed, repair_normals_reference(points, normals))


def test_repair_normals_keeps_the_input_order():
    points, normals, _ = _cloud(300, 0.2, seed=7)
    perm = np.random.default_rng(1).permutation(300)
    np.testing.assert_array_equal(repair_normals(points, normals)[perm], repair_normals(points[perm], normals[perm]))


@pytest.mark.parametrize(
    "points, normals, tol, match",
    [
        (np.zeros((4, 2)), np.zeros((4, 3)), 0.1, r"points must have shape \[N, 3\], got \(4, 2\)"),
        (np.zeros((4, 3)), np.zeros((3, 3)), 0.1, r"normals must have the shape of points, \[4, 3\], got \(3, 3\)"),
        (np.array([["a", "b", "c"]]), np.ones((1, 3)), 0.1, "points must hold real numbers"),
        (np.zeros((2, 3)), np.array([[1j, 0, 0]] * 2), 0.1, "normals must hold real numbers"),
        (np.array([[0, 0, 0], [np.nan, 0, 0]]), np.eye(3)[:2], 0.1, r"points contain NaN or Inf .* row 1"),
        (np.zeros((2, 3)), np.eye(3)[:2], -0.5, "tol must be a non-negative finite number"),
        (np.zeros((2, 3)), np.ones((2, 3)), 0.1, r"no valid normal to copy from \(all are invalid\)"),
    ],
)
def test_repair_normals_refuses_bad_input_naming_it(points, normals, tol, match):
    with pytest.raises(ValueError, match="repair_normals: " + match):
        repair_normals(points, normals, tol=tol)
