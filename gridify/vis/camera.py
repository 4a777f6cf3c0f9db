"""The camera of :mod:`gridify.vis`: the view direction, the up vector, and the eye that fits the scene.

``view="pca"`` looks along the cloud's axis of least variance (the eigenvector of the smallest
eigenvalue of its covariance), on the side of ``ISO_DIRECTION``; ``"iso"`` along
``ISO_DIRECTION``; or along a given direction vector. ``up`` is the z axis (the y axis for views
within 26 degrees of vertical) or a given vector, projected on the image plane; ``azimuth`` and
``elevation`` then turn the eye (see the package docstring for the formulas). :func:`fit_camera`
places the eye at the smallest distance that keeps every drawn point in the field of view. The
checks of ``view``, ``up`` and the angles (:func:`check_view`, :func:`check_angles`,
:func:`check_camera`) run once at the public entries; :func:`view_unchecked` takes their results.

Shapes:
    :func:`view_direction` ``[N, 3] -> ([3], [3])`` (unit direction from the centre to the eye,
    unit up); :func:`fit_camera` ``[M, 3] -> ([3], [3])`` (centre, eye).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np

from .._checks import check_choice, fail, is_real
from .checks import check_cloud

#: named camera directions (or pass a direction vector)
VIEWS = ("pca", "iso")
ISO_DIRECTION = (1.0, -1.4, 0.9)


def _check_vector(where: str, name: str, value: Any) -> np.ndarray:
    v = np.asarray(value, dtype=object).reshape(-1)
    ok = v.size == 3 and all(
        isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in v
    )
    v = v.astype(np.float64) if ok else v
    if not ok or not np.isfinite(v).all() or not np.linalg.norm(v) > 0:
        fail(where, f"{name} must be three finite numbers, not all zero, got {value!r}")
    return v / np.linalg.norm(v)


def check_view(where: str, view: Any, up: Any) -> Tuple[Union[str, np.ndarray], Optional[np.ndarray]]:
    """``(view, up)``: a name of ``VIEWS`` or a unit direction, and None or a unit up not parallel to it."""
    if isinstance(view, str):
        check_choice(where, "view", view, VIEWS)
    else:
        view = _check_vector(where, "view", view)
    up = None if up is None else _check_vector(where, "up", up)
    if up is not None and not isinstance(view, str) and abs(float(up @ view)) > 1 - 1e-9:
        fail(where, f"up {up.round(3).tolist()} is parallel to the view direction {view.round(3).tolist()}")
    return view, up


def check_angles(where: str, azimuth: Any, elevation: Any) -> Tuple[float, float]:
    """Camera angles in degrees: azimuth in (-360, 360), elevation in (-90, 90)."""
    out = []
    for name, value, limit in (("azimuth", azimuth, 360), ("elevation", elevation, 90)):
        ok = is_real(value) and bool(np.isfinite(value)) and abs(value) < limit
        if not ok:
            fail(where, f"{name} must be a number of degrees in (-{limit}, {limit}), got {value!r}")
        out.append(float(value))
    return out[0], out[1]


def check_camera(
    where: str, view: Any, up: Any, azimuth: Any, elevation: Any
) -> Tuple[Union[str, np.ndarray], Optional[np.ndarray], float, float]:
    """``(view, up, azimuth, elevation)`` checked, as :func:`view_unchecked` takes them after the points."""
    view, up = check_view(where, view, up)
    return (view, up, *check_angles(where, azimuth, elevation))


def view_unchecked(
    where: str,
    pos: np.ndarray,
    view: Union[str, np.ndarray],
    up: Optional[np.ndarray],
    azimuth: float = 0.0,
    elevation: float = 0.0,
) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`view_direction` on validated arguments."""
    iso = np.asarray(ISO_DIRECTION) / np.linalg.norm(ISO_DIRECTION)
    if isinstance(view, str) and view == "pca":
        q = pos - pos.mean(0)
        d = np.linalg.eigh(q.T @ q / len(q))[1][:, 0]  # eigenvalues ascending: least variance first
        d = -d if d @ iso < 0 else d
    else:
        d = iso if isinstance(view, str) else view
    u = up if up is not None else (np.array([0.0, 0.0, 1.0]) if abs(d[2]) < 0.9 else np.array([0.0, 1.0, 0.0]))
    u = u - (u @ d) * d
    if not np.linalg.norm(u) > 1e-9:
        fail(where, f"up {up.round(3).tolist()} is parallel to the view direction {d.round(3).tolist()}")
    u = u / np.linalg.norm(u)
    a, e = np.radians(azimuth), np.radians(elevation)
    d = np.cos(a) * d + np.sin(a) * np.cross(u, d)  # turn about up (the eye moves right), then raise it
    return np.cos(e) * d + np.sin(e) * u, np.cos(e) * u - np.sin(e) * d


def view_direction(
    points: Any, view: Any = "pca", up: Any = None, azimuth: float = 0.0, elevation: float = 0.0
) -> Tuple[np.ndarray, np.ndarray]:
    """The camera of :func:`show` for a cloud: unit ``direction`` (from the centre to the eye) and ``up``.

    ``view="pca"``: along the axis of least variance (see the module docstring); ``"iso"``: the
    fixed direction ``(1, -1.4, 0.9)``; or a direction vector. ``up`` (a vector) replaces the
    automatic up (z, or y for views within 26 degrees of vertical), projected on the image plane.
    ``azimuth`` then turns the eye about the up vector and ``elevation`` raises it toward up
    (degrees; e.g. 30 and 20 for a three-quarter view). ``[N, 3] -> ([3], [3])``
    """
    where = "view_direction"
    pos = check_cloud(where, points)
    view, up = check_view(where, view, up)
    return view_unchecked(where, pos, view, up, *check_angles(where, azimuth, elevation))


def fit_camera(
    pts: np.ndarray, d: np.ndarray, up: np.ndarray, fov: float, aspect: float
) -> Tuple[np.ndarray, np.ndarray]:
    """``(centre, eye)``: the eye on ``centre + t d`` at the smallest ``t`` that keeps every point of
    ``pts`` in a ``fov`` (vertical, degrees) view of width/height ``aspect``, with a 6 % margin."""
    right = np.cross(up, d)  # the image's right: the camera looks along -d
    c0 = pts.mean(0)
    q = pts - c0
    x, y, z = q @ right, q @ up, q @ d
    cx, cy = (x.max() + x.min()) / 2, (y.max() + y.min()) / 2
    tan_v = np.tan(np.radians(fov) / 2)
    reach = 1.06 * np.maximum(np.abs(x - cx) / (tan_v * aspect), np.abs(y - cy) / tan_v)
    size = max(float(np.ptp(q, 0).max()), 1e-6)
    t = max(float((z + reach).max()), float(z.max()) + 0.05 * size)
    centre = c0 + cx * right + cy * up
    return centre, centre + t * d
