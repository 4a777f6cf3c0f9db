"""A cloud's up axis, and the rotation that takes it to z up.

A cloud whose "up" direction is one of :data:`UP_AXES` (in its own coordinates) is brought to z up by
the proper rotation ``R`` (det ``+1``: never a mirror) with ``R a = +z``, ``a`` the unit vector of the
up axis: ``p_z_up = R p``. A y-up cloud (glTF, ``modelnet40_normal_resampled``) becomes
``(x, -z, y)``, a rotation of +90 degrees about x, not a swap of y and z.

Shapes:
    points, normals ``[N, 3]`` -> ``[N, 3]``; the rotation ``3 x 3``.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

__all__ = ["UP_AXES", "check_up_axis", "up_axis_rotation", "to_z_up"]

#: the up axes a cloud may have (``--up-axis``, ``up_axis=``): its "up" direction in its own coordinates
UP_AXES = ("z", "y", "x", "-z", "-y", "-x")

#: up axis -> the proper rotation (det +1, no mirror) taking that direction onto +z
_UP_ROTATIONS = {
    "z": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    "-z": ((1, 0, 0), (0, -1, 0), (0, 0, -1)),  # 180 degrees about x
    "y": ((1, 0, 0), (0, 0, -1), (0, 1, 0)),  # +90 degrees about x: (x, y, z) -> (x, -z, y)
    "-y": ((1, 0, 0), (0, 0, 1), (0, -1, 0)),  # -90 degrees about x: (x, y, z) -> (x, z, -y)
    "x": ((0, 0, -1), (0, 1, 0), (1, 0, 0)),  # -90 degrees about y: (x, y, z) -> (-z, y, x)
    "-x": ((0, 0, 1), (0, 1, 0), (-1, 0, 0)),  # +90 degrees about y: (x, y, z) -> (z, y, -x)
}


def check_up_axis(where: str, up_axis: Any) -> str:
    """``up_axis`` as one of :data:`UP_AXES` (case and surrounding spaces ignored), else a ValueError naming it."""
    value = up_axis.strip().lower() if isinstance(up_axis, str) else up_axis
    if value not in UP_AXES:
        raise ValueError(
            f"{where}: up_axis must be one of {', '.join(UP_AXES)} (the cloud's up direction), got {up_axis!r}"
        )
    return value


def up_axis_rotation(up_axis: str) -> np.ndarray:
    """The ``3 x 3`` proper rotation that takes a cloud whose up direction is ``up_axis`` to z up
    (``p_z_up = R p``); the identity for ``"z"``. A y-up cloud (glTF, ``modelnet40_normal_resampled``)
    becomes ``(x, -z, y)``: a rotation of +90 degrees about x, not a swap of y and z (a mirror)."""
    return np.array(_UP_ROTATIONS[check_up_axis("up_axis_rotation", up_axis)], dtype=np.float64)


def to_z_up(points: np.ndarray, up_axis: str, normals: Optional[np.ndarray] = None) -> Tuple[Any, Any]:
    """``points`` (and ``normals``) ``[N, 3]`` rotated from ``up_axis`` up to z up (:func:`up_axis_rotation`),
    in their own dtype; unchanged (the same arrays) for ``"z"``."""
    if check_up_axis("to_z_up", up_axis) == "z":
        return points, normals
    r = up_axis_rotation(up_axis)

    def rot(a: Optional[np.ndarray]) -> Optional[np.ndarray]:
        return None if a is None else (np.asarray(a, np.float64) @ r.T).astype(np.asarray(a).dtype, copy=False)

    return rot(points), rot(normals)
