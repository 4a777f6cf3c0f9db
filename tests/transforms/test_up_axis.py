"""A cloud's up axis to z up (gridify.transforms.up_axis)."""

import numpy as np
import pytest


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
