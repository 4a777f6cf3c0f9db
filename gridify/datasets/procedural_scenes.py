"""A seeded generator of labelled scenes: indoor rooms and outdoor LiDAR scans, of any size.

* :func:`make_indoor_scene`: a room (floor, ceiling, four walls with door and window openings,
  a door leaf and a window pane recessed in them) furnished with box-built tables, chairs,
  shelves, cabinets and clutter, rotated about z; surfaces are sampled area-weighted (an RGB-D
  fusion scan is about uniform in density), with colours per object and 5 mm noise.
* :func:`make_outdoor_scan`: a street (road, sidewalks, terrain, buildings, fences, trees with
  trunks and ellipsoid crowns, bushes, parked cars, poles with traffic signs, people) scanned by a
  simulated spinning sensor (:func:`cast_rays`): ``beams`` rows at fixed elevations (HDL-64E:
  +2 to -24.8 degrees; 32 beams: +10.67 to -30.67), ``azimuth_steps`` per turn, each ray hits the
  *first* primitive on its way (so occlusion is real), foliage lets some rays through and returns
  from inside the crown, the range gets Gaussian noise ``0.01 + 0.002 r`` m, returns beyond
  ``max_range`` are lost and far ones drop out more often (``p = 0.3 (r / max_range)^2``). Point
  density therefore falls with range like a real scan's. ``strength`` is a per-class reflectivity
  attenuated with range, with noise.
* :class:`ProceduralScenes` (``data.name: scene_procedural``): ``num_scenes`` scenes of ``kind``
  ``indoor`` or ``outdoor`` with exactly ``num_points`` points each; scene ``i`` of a split is
  generated from ``SeedSequence([seed, split, i])`` (splits are disjoint), independently of access
  order.

Everything is vectorized numpy: a 100k-point outdoor scan takes a fraction of a second.

Shapes:
    coord ``[N, 3]`` float32 (metres, z up; outdoor: the sensor at ``(0, 0, sensor_height)``),
    color / normal ``[N, 3]`` float32 (indoor), strength ``[N, 1]`` float32 (outdoor), segment ``[N]``
    int64 in ``0..C-1``; rays: origin ``[3]``, directions ``[R, 3]`` -> range ``[R]``, label ``[R]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .._checks import check_alloc, check_choice, check_int, check_positive_int
from ..registry import DATASETS
from ._common import Transform, check_split
from .scene_base import SceneDatasetBase

__all__ = [
    "INDOOR_CLASSES",
    "OUTDOOR_CLASSES",
    "make_indoor_scene",
    "make_outdoor_scan",
    "ProceduralScenes",
    "Primitives",
    "cast_rays",
    "sensor_directions",
    "street_layout",
    "scan_layout",
]

INDOOR_CLASSES: Tuple[str, ...] = (
    "floor",
    "ceiling",
    "wall",
    "door",
    "window",
    "table",
    "chair",
    "shelf",
    "cabinet",
    "clutter",
)
OUTDOOR_CLASSES: Tuple[str, ...] = (
    "road",
    "sidewalk",
    "terrain",
    "building",
    "fence",
    "vegetation",
    "trunk",
    "car",
    "pole",
    "traffic-sign",
    "person",
)
_IN = {c: i for i, c in enumerate(INDOOR_CLASSES)}
_OUT = {c: i for i, c in enumerate(OUTDOOR_CLASSES)}
_SPLIT_CODE = {"train": 0, "val": 1, "test": 2}

#: base colours (0-255) of the indoor classes
_INDOOR_COLORS = np.array(
    [
        [150, 130, 110],
        [235, 235, 230],
        [205, 200, 190],
        [140, 95, 60],
        [170, 200, 225],
        [120, 80, 50],
        [60, 60, 70],
        [160, 120, 80],
        [200, 200, 205],
        [120, 150, 90],
    ],
    float,
)
#: reflectivity of the outdoor classes (LiDAR remission before range attenuation)
_REFLECTIVITY = np.array([0.25, 0.3, 0.35, 0.45, 0.4, 0.55, 0.3, 0.6, 0.5, 0.9, 0.35])


# --------------------------------------------------------------------------------------
# indoor: rectangles sampled by area
# --------------------------------------------------------------------------------------
@dataclass
class _Rects:
    """Rectangles ``origin + s u + t v`` (``s, t`` in [0, 1]), normal ``u x v``, a label and a colour each."""

    origin: List[np.ndarray] = field(default_factory=list)
    u: List[np.ndarray] = field(default_factory=list)
    v: List[np.ndarray] = field(default_factory=list)
    label: List[int] = field(default_factory=list)
    color: List[np.ndarray] = field(default_factory=list)

    def add(self, o: Any, u: Any, v: Any, label: int, color: np.ndarray) -> None:
        self.origin.append(np.asarray(o, float))
        self.u.append(np.asarray(u, float))
        self.v.append(np.asarray(v, float))
        self.label.append(label)
        self.color.append(color)

    def extend(self, other: "_Rects") -> None:
        for name in ("origin", "u", "v", "label", "color"):
            getattr(self, name).extend(getattr(other, name))


def _box_rects(lo: Sequence[float], hi: Sequence[float], label: int, color: np.ndarray, bottom: bool = False) -> _Rects:
    """The faces of an axis-aligned box, normals outward (the bottom face only when ``bottom``)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    d, eye, out = hi - lo, np.eye(3), _Rects()
    for a in range(3):
        b, c = (a + 1) % 3, (a + 2) % 3
        for side in (0, 1):
            if a == 2 and side == 0 and not bottom:
                continue
            o = lo.copy()
            o[a] = hi[a] if side else lo[a]
            u, v = d[b] * eye[b], d[c] * eye[c]
            out.add(o, u if side else v, v if side else u, label, color)
    return out


def _rotate_z(rects: _Rects, centre: np.ndarray, angle: float) -> _Rects:
    c, s = math.cos(angle), math.sin(angle)
    rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    out = _Rects()
    for o, u, v, lab, col in zip(rects.origin, rects.u, rects.v, rects.label, rects.color):
        out.add(rot @ (o - centre) + centre, rot @ u, rot @ v, lab, col)
    return out


def _tint(rng: np.random.Generator, label: int) -> np.ndarray:
    return np.clip(_INDOOR_COLORS[label] * rng.uniform(0.75, 1.2) + rng.normal(0, 12, 3), 0, 255)


def _furniture(rng: np.random.Generator, kind: str, x: float, y: float) -> Tuple[_Rects, float]:
    """One piece of furniture at ``(x, y)`` (before rotation), and its footprint radius."""
    lab, col = _IN[kind], _tint(rng, _IN[kind])
    r = _Rects()
    if kind == "table":
        w, d, h, t = rng.uniform(0.8, 1.8), rng.uniform(0.6, 1.0), rng.uniform(0.7, 0.78), 0.04
        r.extend(_box_rects((x - w / 2, y - d / 2, h - t), (x + w / 2, y + d / 2, h), lab, col, bottom=True))
        for sx in (-1, 1):
            for sy in (-1, 1):
                lx, ly = x + sx * (w / 2 - 0.05), y + sy * (d / 2 - 0.05)
                r.extend(_box_rects((lx - 0.03, ly - 0.03, 0), (lx + 0.03, ly + 0.03, h - t), lab, col))
        return r, math.hypot(w, d) / 2
    if kind == "chair":
        s, h = rng.uniform(0.4, 0.5), rng.uniform(0.42, 0.48)
        r.extend(_box_rects((x - s / 2, y - s / 2, h - 0.04), (x + s / 2, y + s / 2, h), lab, col, bottom=True))
        r.extend(
            _box_rects((x - s / 2, y + s / 2 - 0.04, h), (x + s / 2, y + s / 2, h + rng.uniform(0.35, 0.5)), lab, col)
        )
        for sx in (-1, 1):
            for sy in (-1, 1):
                lx, ly = x + sx * (s / 2 - 0.03), y + sy * (s / 2 - 0.03)
                r.extend(_box_rects((lx - 0.02, ly - 0.02, 0), (lx + 0.02, ly + 0.02, h - 0.04), lab, col))
        return r, s * 0.75
    if kind == "shelf":
        w, d, h = rng.uniform(0.8, 1.6), rng.uniform(0.3, 0.45), rng.uniform(1.6, 2.2)
        for sx in (-1, 1):
            r.extend(_box_rects((x + sx * w / 2 - 0.02, y - d / 2, 0), (x + sx * w / 2 + 0.02, y + d / 2, h), lab, col))
        r.extend(_box_rects((x - w / 2, y + d / 2 - 0.02, 0), (x + w / 2, y + d / 2, h), lab, col))
        for z in np.linspace(0.05, h, int(rng.integers(4, 7))):
            r.extend(_box_rects((x - w / 2, y - d / 2, z - 0.02), (x + w / 2, y + d / 2, z), lab, col, bottom=True))
        return r, math.hypot(w, d) / 2
    if kind == "cabinet":
        w, d, h = rng.uniform(0.5, 1.2), rng.uniform(0.4, 0.6), rng.uniform(0.8, 1.3)
        r.extend(_box_rects((x - w / 2, y - d / 2, 0), (x + w / 2, y + d / 2, h), lab, col))
        return r, math.hypot(w, d) / 2
    s = rng.uniform(0.15, 0.5, 3)  # clutter: a box on the floor
    r.extend(_box_rects((x - s[0] / 2, y - s[1] / 2, 0), (x + s[0] / 2, y + s[1] / 2, s[2]), lab, col))
    return r, math.hypot(s[0], s[1]) / 2


def _openings(rng: np.random.Generator, length: float) -> List[Tuple[float, float, float, float, str]]:
    """Door and window openings ``(u0, u1, z0, z1, kind)`` along a wall of ``length``, not overlapping."""
    out, u = [], rng.uniform(0.3, 1.0)
    while u < length - 1.2 and len(out) < 3:
        kind = "door" if rng.random() < 0.4 else "window"
        w = rng.uniform(0.8, 1.0) if kind == "door" else rng.uniform(0.8, 2.0)
        if u + w > length - 0.3:
            break
        z0, z1 = (0.0, rng.uniform(2.0, 2.2)) if kind == "door" else (rng.uniform(0.8, 1.0), rng.uniform(2.0, 2.4))
        if rng.random() < 0.7:
            out.append((u, u + w, z0, z1, kind))
        u += w + rng.uniform(0.5, 2.5)
    return out


def _wall(
    rng: np.random.Generator, o: np.ndarray, along: np.ndarray, length: float, height: float, inward: np.ndarray
) -> _Rects:
    """A wall from ``o`` along the unit vector ``along``, with openings filled by a recessed door leaf or pane."""
    up = np.array([0.0, 0.0, 1.0])
    flip = np.dot(np.cross(along, up), inward) < 0  # so that the normal u x v points into the room
    r, wall_col = _Rects(), _tint(rng, _IN["wall"])

    def rect(u0: float, u1: float, z0: float, z1: float, label: int, col: np.ndarray, depth: float = 0.0) -> None:
        if u1 - u0 > 1e-6 and z1 - z0 > 1e-6:
            base = o + along * u0 + up * z0 - inward * depth
            du, dz = along * (u1 - u0), up * (z1 - z0)
            r.add(base, dz if flip else du, du if flip else dz, label, col)

    u = 0.0
    for u0, u1, z0, z1, kind in _openings(rng, length):
        rect(u, u0, 0.0, height, _IN["wall"], wall_col)
        rect(u0, u1, 0.0, z0, _IN["wall"], wall_col)
        rect(u0, u1, z1, height, _IN["wall"], wall_col)
        rect(u0, u1, z0, z1, _IN[kind], _tint(rng, _IN[kind]), depth=0.05 if kind == "door" else 0.1)
        u = u1
    rect(u, length, 0.0, height, _IN["wall"], wall_col)
    return r


def _room_rects(rng: np.random.Generator) -> _Rects:
    w, d, h = rng.uniform(4.0, 10.0), rng.uniform(4.0, 10.0), rng.uniform(2.6, 3.3)
    r = _Rects()
    r.add((0, 0, 0), (w, 0, 0), (0, d, 0), _IN["floor"], _tint(rng, _IN["floor"]))
    r.add((0, 0, h), (0, d, 0), (w, 0, 0), _IN["ceiling"], _tint(rng, _IN["ceiling"]))
    corners = [
        ((0, 0, 0), (1, 0, 0), w, (0, 1, 0)),
        ((w, 0, 0), (0, 1, 0), d, (-1, 0, 0)),
        ((w, d, 0), (-1, 0, 0), w, (0, -1, 0)),
        ((0, d, 0), (0, -1, 0), d, (1, 0, 0)),
    ]
    for o, along, length, inward in corners:
        r.extend(_wall(rng, np.asarray(o, float), np.asarray(along, float), length, h, np.asarray(inward, float)))
    placed: List[Tuple[float, float, float]] = []
    for kind in rng.choice(["table", "chair", "chair", "shelf", "cabinet", "clutter"], size=int(rng.integers(4, 14))):
        for _ in range(20):  # rejection: footprints must not overlap
            x, y = rng.uniform(0.4, w - 0.4), rng.uniform(0.4, d - 0.4)
            sub = np.random.default_rng(rng.integers(1 << 62))
            obj, radius = _furniture(sub, str(kind), x, y)
            fits = radius < min(x, y, w - x, d - y) and all(
                math.hypot(x - px, y - py) > radius + pr for px, py, pr in placed
            )
            if fits:
                placed.append((x, y, radius))
                r.extend(_rotate_z(obj, np.array([x, y, 0.0]), rng.uniform(0, 2 * math.pi)))
                break
    return r


def make_indoor_scene(rng: np.random.Generator, num_points: int) -> Dict[str, np.ndarray]:
    """A furnished room sampled into exactly ``num_points`` surface points (see the module docstring).

    Returns:
        ``coord``, ``color`` (0-255), ``normal`` (unit, pointing out of the surface), ``segment``
        (ids of :data:`INDOOR_CLASSES`).
    """
    r = _room_rects(rng)
    o, u, v = np.stack(r.origin), np.stack(r.u), np.stack(r.v)
    n = np.cross(u, v)
    area = np.linalg.norm(n, axis=1)
    n = n / np.maximum(area[:, None], 1e-12)
    idx = rng.choice(len(area), size=int(num_points), p=area / area.sum())
    st = rng.random((int(num_points), 2))
    coord = o[idx] + st[:, :1] * u[idx] + st[:, 1:] * v[idx] + rng.normal(0, 0.005, (int(num_points), 3))
    color = np.clip(np.stack(r.color)[idx] + rng.normal(0, 6, (int(num_points), 3)), 0, 255)
    return {
        "coord": coord.astype(np.float32),
        "color": np.round(color).astype(np.float32),
        "normal": n[idx].astype(np.float32),
        "segment": np.asarray(r.label, np.int64)[idx],
    }


# --------------------------------------------------------------------------------------
# outdoor: primitives and a spinning sensor
# --------------------------------------------------------------------------------------
@dataclass
class Primitives:
    """The solids of an outdoor scene, each with a label (ids of :data:`OUTDOOR_CLASSES`).

    boxes: ``[B, 7]`` centre x y z, half sizes, yaw (radians); cylinders: ``[C, 5]`` x y radius z0 z1
    (vertical); ellipsoids: ``[E, 6]`` centre, radii (foliage: see ``foliage_pass``); the ground is
    the plane z = 0, labelled by :meth:`ground_label` (road ``|y| < road``, sidewalk up to
    ``sidewalk``, terrain beyond).
    """

    boxes: np.ndarray
    box_labels: np.ndarray
    cylinders: np.ndarray
    cylinder_labels: np.ndarray
    ellipsoids: np.ndarray
    ellipsoid_labels: np.ndarray
    road: float = 4.0
    sidewalk: float = 7.0
    foliage_pass: float = 0.3

    def ground_label(self, xy: np.ndarray) -> np.ndarray:
        ay = np.abs(xy[:, 1])
        return np.where(ay < self.road, _OUT["road"], np.where(ay < self.sidewalk, _OUT["sidewalk"], _OUT["terrain"]))


def _hit_boxes(o: np.ndarray, d: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """``[R, B]`` ray parameter of the first hit on each oriented box (inf: none)."""
    if len(boxes) == 0:
        return np.full((len(d), 0), np.inf, np.float32)
    c, s = np.cos(-boxes[:, 6]), np.sin(-boxes[:, 6])
    rel = o[None, :2] - boxes[:, :2]  # [B, 2]
    ox = (c * rel[:, 0] - s * rel[:, 1])[None]
    oy = (s * rel[:, 0] + c * rel[:, 1])[None]
    oz = (o[2] - boxes[:, 2])[None]
    dx = d[:, :1] * c - d[:, 1:2] * s
    dy = d[:, :1] * s + d[:, 1:2] * c
    dz = np.broadcast_to(d[:, 2:3], dx.shape)
    tmin = np.zeros(dx.shape, np.float32)
    tmax = np.full(dx.shape, np.inf, np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        for oa, da, half in ((ox, dx, boxes[:, 3]), (oy, dy, boxes[:, 4]), (oz, dz, boxes[:, 5])):
            inv = 1.0 / da
            t1, t2 = (-half - oa) * inv, (half - oa) * inv
            lo, hi = np.minimum(t1, t2), np.maximum(t1, t2)
            lo = np.where(np.isnan(lo), -np.inf, lo)  # parallel ray inside the slab
            hi = np.where(np.isnan(hi), np.inf, hi)
            tmin, tmax = np.maximum(tmin, lo), np.minimum(tmax, hi)
    return np.where((tmax >= tmin) & (tmin > 1e-3), tmin, np.inf).astype(np.float32)


def _quadratic_first(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The two roots ``(t0 <= t1)`` of ``a t^2 + b t + c = 0`` (inf where none)."""
    disc = b * b - 4 * a * c
    ok = (disc >= 0) & (a > 0)
    sq = np.sqrt(np.where(ok, disc, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        t0 = np.where(ok, (-b - sq) / (2 * a), np.inf)
        t1 = np.where(ok, (-b + sq) / (2 * a), np.inf)
    return t0, t1


def _hit_cylinders(o: np.ndarray, d: np.ndarray, cyl: np.ndarray) -> np.ndarray:
    """``[R, C]`` first hit on the side of each vertical cylinder (inf: none)."""
    if len(cyl) == 0:
        return np.full((len(d), 0), np.inf, np.float32)
    ox, oy = (o[0] - cyl[:, 0])[None], (o[1] - cyl[:, 1])[None]
    dx, dy = d[:, :1], d[:, 1:2]
    a = dx * dx + dy * dy
    t0, _ = _quadratic_first(
        np.broadcast_to(a, (len(d), len(cyl))),
        2 * (ox * dx + oy * dy),
        np.broadcast_to(ox * ox + oy * oy - cyl[:, 2] ** 2, (len(d), len(cyl))),
    )
    z = o[2] + t0 * d[:, 2:3]
    return np.where((t0 > 1e-3) & (z >= cyl[:, 3]) & (z <= cyl[:, 4]), t0, np.inf).astype(np.float32)


def _hit_ellipsoids(
    o: np.ndarray, d: np.ndarray, ell: np.ndarray, rng: np.random.Generator, foliage_pass: float
) -> np.ndarray:
    """``[R, E]`` a return inside each ellipsoid crown: a random depth into it, or none for a passing ray."""
    if len(ell) == 0:
        return np.full((len(d), 0), np.inf, np.float32)
    oo = (o[None] - ell[:, :3]) / ell[:, 3:]  # [E, 3]
    dd = d[:, None, :] / ell[None, :, 3:]  # [R, E, 3]
    a = (dd * dd).sum(-1)
    b = 2 * (dd * oo[None]).sum(-1)
    c = np.broadcast_to((oo * oo).sum(-1)[None] - 1.0, a.shape)
    t0, t1 = _quadratic_first(a, b, c)
    u = rng.random(a.shape, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        t = t0 + 0.35 * u * (t1 - t0)  # foliage returns from a little inside the crown
    keep = (t0 > 1e-3) & np.isfinite(t0) & (rng.random(a.shape, dtype=np.float32) >= foliage_pass)
    return np.where(keep, t, np.inf).astype(np.float32)


def _angular_extent(o: np.ndarray, centre_xy: np.ndarray, radius: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Azimuth (seen from ``o``) and angular half-width of each primitive's bounding circle in xy."""
    rel = centre_xy - o[None, :2]
    dist = np.hypot(rel[:, 0], rel[:, 1])
    half = np.where(dist > radius, np.arcsin(np.clip(radius / np.maximum(dist, 1e-9), 0, 1)), math.pi)
    return np.arctan2(rel[:, 1], rel[:, 0]), half


def _sector(dd: np.ndarray) -> Tuple[float, float]:
    """The azimuth sector ``(centre, half-width)`` that a chunk of ray directions covers."""
    centre = math.atan2(float(dd[:, 1].sum()), float(dd[:, 0].sum()))
    az = np.arctan2(dd[:, 1], dd[:, 0])
    return centre, float(np.abs(np.angle(np.exp(1j * (az - centre)))).max()) if len(dd) else 0.0


def cast_rays(
    origin: np.ndarray, directions: np.ndarray, prims: Primitives, rng: np.random.Generator, chunk: int = 4096
) -> Tuple[np.ndarray, np.ndarray]:
    """The first hit of every ray on the ground plane and the primitives.

    Rays are processed in chunks; a chunk is tested only against the primitives whose bounding
    circle overlaps its azimuth sector (give the rays azimuth-major, as :func:`sensor_directions`
    does, so that chunks are narrow sectors).

    Returns:
        ``(range, label)``: ``[R]`` float32 distances along the unit ``directions`` (inf: no hit)
        and ``[R]`` int64 labels (-1: no hit).
    """
    o = np.asarray(origin, np.float64)
    t_all = np.full(len(directions), np.inf, np.float32)
    lab_all = np.full(len(directions), -1, np.int64)
    groups = [
        (
            prims.boxes,
            prims.box_labels,
            np.hypot(prims.boxes[:, 3], prims.boxes[:, 4]),
            lambda dd, sel: _hit_boxes(o, dd, sel),
        ),
        (prims.cylinders, prims.cylinder_labels, prims.cylinders[:, 2], lambda dd, sel: _hit_cylinders(o, dd, sel)),
        (
            prims.ellipsoids,
            prims.ellipsoid_labels,
            prims.ellipsoids[:, 3:5].max(1, initial=0.0),
            lambda dd, sel: _hit_ellipsoids(o, dd, sel, rng, prims.foliage_pass),
        ),
    ]
    extents = [_angular_extent(o, g[0][:, :2], g[2]) for g in groups]
    for start in range(0, len(directions), chunk):
        dd = np.asarray(directions[start : start + chunk], np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            best = np.where(dd[:, 2] < 0, -o[2] / dd[:, 2], np.inf).astype(np.float32)
        lab = np.full(len(dd), -2, np.int64)  # -2: the ground, labelled below
        centre, half = _sector(dd)
        for (prim, labels, _, hit), (az, width) in zip(groups, extents):
            sel = np.flatnonzero(np.abs(np.angle(np.exp(1j * (az - centre)))) <= width + half + 1e-3)
            if len(sel) == 0:
                continue
            t = hit(dd, prim[sel])
            j = np.argmin(t, axis=1)
            tj = t[np.arange(len(dd)), j]
            closer = tj < best
            best, lab = np.where(closer, tj, best), np.where(closer, labels[sel][j], lab)
        ground = (lab == -2) & np.isfinite(best)
        lab[ground] = prims.ground_label(o[None, :2] + best[ground, None] * dd[ground, :2])
        lab[~np.isfinite(best)] = -1
        t_all[start : start + len(dd)], lab_all[start : start + len(dd)] = best, lab
    return t_all, lab_all


def sensor_directions(
    beams: int, azimuth_steps: int, fov: Optional[Tuple[float, float]] = None, rng: Optional[np.random.Generator] = None
) -> np.ndarray:
    """Unit ray directions of one sensor turn: ``azimuth_steps`` azimuths x ``beams`` elevations (azimuth-major).

    ``fov = (up, down)`` in degrees; default: HDL-64E ``(2, -24.8)`` for 64 beams or more, HDL-32E
    ``(10.67, -30.67)`` for 32, VLP-16 ``(15, -15)`` for fewer. Each beam gets a random azimuth
    offset (as the lasers of a real head are staggered) when ``rng`` is given.

    Shapes:
        ``[beams * azimuth_steps, 3]`` float32.
    """
    if fov is None:
        fov = (2.0, -24.8) if beams >= 64 else (10.67, -30.67) if beams >= 32 else (15.0, -15.0)
    elev = np.radians(np.linspace(fov[0], fov[1], beams))
    az = np.arange(azimuth_steps) * (2 * math.pi / azimuth_steps)
    offs = rng.uniform(0, 2 * math.pi / azimuth_steps, beams) if rng is not None else np.zeros(beams)
    az = az[:, None] + offs[None, :]  # [steps, beams]
    ce = np.cos(elev)[None, :]
    d = np.stack([ce * np.cos(az), ce * np.sin(az), np.broadcast_to(np.sin(elev)[None, :], az.shape)], -1)
    return d.reshape(-1, 3).astype(np.float32)


def _street_objects(
    rng: np.random.Generator, road: float, side: float, extent: float
) -> Tuple[List[List[float]], List[int], List[List[float]], List[int], List[List[float]]]:
    boxes, box_l, cyl, cyl_l, ell = [], [], [], [], []
    for sgn in (-1, 1):
        x = -extent + rng.uniform(0, 10)
        while x < extent:  # buildings behind the sidewalk, with gaps
            w, dep, h = rng.uniform(8, 25), rng.uniform(8, 15), rng.uniform(5, 20)
            y0 = side + rng.uniform(1, 8)
            boxes.append([x + w / 2, sgn * (y0 + dep / 2), h / 2, w / 2, dep / 2, h / 2, rng.normal(0, 0.05)])
            box_l.append(_OUT["building"])
            if rng.random() < 0.4:  # a fence in front of it
                boxes.append([x + w / 2, sgn * (y0 - 0.6), 0.6, w / 2, 0.03, 0.6, 0.0])
                box_l.append(_OUT["fence"])
            x += w + rng.uniform(2, 12)
        for x in rng.uniform(-extent, extent, int(rng.integers(4, 10))):  # trees on the sidewalk edge
            r, h = rng.uniform(0.12, 0.3), rng.uniform(2.0, 3.5)
            y = sgn * (road + rng.uniform(1.0, side - road - 0.3))
            cyl.append([x, y, r, 0.0, h])
            cyl_l.append(_OUT["trunk"])
            rad = rng.uniform(1.5, 3.5)
            ell.append([x, y, h + rad * 0.7, rad, rad * rng.uniform(0.8, 1.2), rad * rng.uniform(0.6, 1.0)])
        for x in rng.uniform(-extent, extent, int(rng.integers(3, 8))):  # poles, some with a sign
            y, h = sgn * (road + 0.3), rng.uniform(4, 8)
            cyl.append([x, y, 0.08, 0.0, h])
            cyl_l.append(_OUT["pole"])
            if rng.random() < 0.5:
                boxes.append([x, y - sgn * 0.3, h - 0.4, 0.03, 0.35, 0.35, 0.0])
                box_l.append(_OUT["traffic-sign"])
        for x in rng.uniform(-extent / 2, extent / 2, int(rng.integers(2, 7))):  # parked cars
            l, wd, yaw = rng.uniform(3.8, 4.8), rng.uniform(1.7, 1.95), rng.normal(0, 0.05)
            y = sgn * (road - wd / 2 - 0.3)
            boxes += [[x, y, 0.65, l / 2, wd / 2, 0.4, yaw], [x - 0.2, y, 1.25, l / 4, wd / 2 - 0.05, 0.25, yaw]]
            box_l += [_OUT["car"], _OUT["car"]]
        for x in rng.uniform(-extent / 2, extent / 2, int(rng.integers(0, 4))):  # people
            cyl.append([x, sgn * (road + rng.uniform(0.5, side - road)), 0.25, 0.0, rng.uniform(1.55, 1.9)])
            cyl_l.append(_OUT["person"])
        for x in rng.uniform(-extent, extent, int(rng.integers(2, 8))):  # bushes
            r = rng.uniform(0.5, 1.5)
            ell.append([x, sgn * (side + rng.uniform(0.5, 3)), r * 0.5, r, r, r * 0.7])
    return boxes, box_l, cyl, cyl_l, ell


def street_layout(rng: np.random.Generator, extent: float = 60.0) -> Primitives:
    """A random street of length ``2 extent`` along x through the origin (see :class:`Primitives`)."""
    road = float(rng.uniform(3.0, 7.0))
    side = road + float(rng.uniform(1.5, 4.0))
    boxes, box_l, cyl, cyl_l, ell = _street_objects(rng, road, side, extent)
    for x in rng.uniform(-extent / 2, extent / 2, int(rng.integers(0, 3))):  # moving cars on the road
        y = float(rng.choice([-1, 1])) * road / 2
        boxes += [[x, y, 0.65, 2.2, 0.9, 0.4, 0.0], [x - 0.2, y, 1.25, 1.1, 0.85, 0.25, 0.0]]
        box_l += [_OUT["car"], _OUT["car"]]
    # keep the sensor (on the road at the origin) outside every solid
    kept = [(b, lab) for b, lab in zip(boxes, box_l) if not (abs(b[0]) < b[3] + 1.5 and abs(b[1]) < b[4] + 1.5)]
    return Primitives(
        np.asarray([b for b, _ in kept], np.float64).reshape(-1, 7),
        np.asarray([lab for _, lab in kept], np.int64),
        np.asarray(cyl, np.float64).reshape(-1, 5),
        np.asarray(cyl_l, np.int64),
        np.asarray(ell, np.float64).reshape(-1, 6),
        np.full(len(ell), _OUT["vegetation"], np.int64),
        road,
        side,
    )


def scan_layout(
    prims: Primitives,
    rng: np.random.Generator,
    *,
    beams: int = 64,
    azimuth_steps: int = 2048,
    sensor_height: float = 1.73,
    max_range: float = 80.0,
    fov: Optional[Tuple[float, float]] = None,
) -> Dict[str, np.ndarray]:
    """One turn of the simulated sensor over ``prims``: every return, with noise, drop-out and strength.

    Returns:
        ``coord``, ``strength`` ``[N, 1]`` in [0, 1], ``segment``.
    """
    d = sensor_directions(beams, azimuth_steps, fov, rng)
    origin = np.array([0.0, 0.0, sensor_height])
    t, lab = cast_rays(origin, d, prims, rng)
    keep = np.isfinite(t) & (t <= max_range) & (lab >= 0)
    keep &= rng.random(len(t)) >= 0.3 * (np.minimum(t, max_range) / max_range) ** 2
    t, lab, d = t[keep], lab[keep], d[keep]
    r = t + rng.normal(0, 1, len(t)).astype(np.float32) * (0.01 + 0.002 * t)
    coord = origin[None].astype(np.float32) + r[:, None] * d
    strength = _REFLECTIVITY[lab] * np.exp(-t / 120.0) + rng.normal(0, 0.03, len(t))
    return {
        "coord": coord.astype(np.float32),
        "strength": np.clip(strength, 0, 1).astype(np.float32)[:, None],
        "segment": lab.astype(np.int64),
    }


def make_outdoor_scan(
    rng: np.random.Generator,
    num_points: Optional[int] = 100_000,
    *,
    beams: int = 64,
    max_range: float = 80.0,
    sensor_height: float = 1.73,
    fov: Optional[Tuple[float, float]] = None,
) -> Dict[str, np.ndarray]:
    """A street scanned by the simulated sensor (see the module docstring), ``num_points`` points.

    The number of azimuth steps is chosen so that one turn returns at least ``num_points``
    (re-scanned finer when it does not), then the returns are thinned uniformly to exactly
    ``num_points`` (which keeps the density pattern). ``num_points=None``: one turn of 2048 steps,
    every return.
    """
    prims = street_layout(rng, extent=max_range)
    kw = dict(beams=beams, sensor_height=sensor_height, max_range=max_range, fov=fov)
    if num_points is None:
        return scan_layout(prims, rng, azimuth_steps=2048, **kw)
    steps = max(16, math.ceil(num_points / (beams * 0.7)))
    for _ in range(4):
        scan = scan_layout(prims, rng, azimuth_steps=steps, **kw)
        got = len(scan["segment"])
        if got >= num_points:
            keep = np.sort(rng.choice(got, size=int(num_points), replace=False))
            return {k: v[keep] for k, v in scan.items()}
        steps = math.ceil(steps * 1.1 * num_points / max(got, 1))
    raise ValueError(f"make_outdoor_scan: could not reach {num_points} returns with {beams} beams")


@DATASETS.register("scene_procedural")
class ProceduralScenes(SceneDatasetBase):
    """Generated labelled scenes: indoor rooms or outdoor LiDAR scans (see the module docstring).

    Args:
        split: ``train``, ``val`` or ``test`` (disjoint seeds).
        num_scenes: scenes in this split.
        num_points: points per scene (exact).
        kind: ``indoor`` (classes :data:`INDOOR_CLASSES`, features colour) or ``outdoor``
            (:data:`OUTDOOR_CLASSES`, feature strength).
        seed: base seed; the same seed gives the same scenes.
        beams, max_range: the sensor of outdoor scans.
        features: columns of ``x`` (default ``("color",)`` indoors, ``("strength",)`` outdoors).
        voxel_size, max_points, crops_per_scene, mix, mix_prob, crop_centre: training grid subsampling (metres), crop
            budget, crops per scene and epoch, scan mixing (outdoor scans: ``lasermix`` / ``polarmix``) and its
            share of items (see :class:`~gridify.datasets.scene_base.SceneDatasetBase`); other splits give
            whole scenes.
        transform, normalize: as for every dataset (``normalize`` off: metres).
        cache: keep generated scenes in memory (default on).

    Items: ``pos`` ``[N, 3]``, ``x`` ``[N, F]``, ``y`` ``[N]``, ``color`` + ``normal`` (indoor) or
    ``strength`` (outdoor), ``index``, ``scene``.
    """

    def __init__(
        self,
        split: str = "train",
        num_scenes: int = 16,
        num_points: int = 50_000,
        kind: str = "indoor",
        seed: int = 0,
        *,
        beams: int = 64,
        max_range: float = 80.0,
        features: Optional[Sequence[str]] = None,
        voxel_size: Optional[float] = None,
        max_points: Optional[int] = None,
        crops_per_scene: int = 1,
        mix: Optional[str] = None,
        mix_prob: float = 0.5,
        crop_centre: str = "random",
        transform: Optional[Transform] = None,
        normalize: bool = False,
        cache: bool = True,
    ) -> None:
        where = "ProceduralScenes"
        check_split(where, split, ("train", "val", "test"))
        check_choice(where, "kind", kind, ("indoor", "outdoor"))
        check_positive_int(where, num_scenes=num_scenes, num_points=num_points, beams=beams)
        check_int(where, "seed", seed, 0)
        check_alloc(where, f"num_points={num_points} (about 200 bytes per point while generating)", 200 * num_points)
        feats = features if features is not None else (("color",) if kind == "indoor" else ("strength",))
        # the generator gives exactly num_points: no FixedPoints step
        super().__init__(
            split=split,
            class_names=INDOOR_CLASSES if kind == "indoor" else OUTDOOR_CLASSES,
            features=feats,
            num_points=None,
            transform=transform,
            seed=seed,
            normalize=normalize,
            cache=cache,
            voxel_size=voxel_size,
            max_points=max_points,
            crops_per_scene=crops_per_scene,
            mix=mix,
            mix_prob=mix_prob,
            crop_centre=crop_centre,
        )
        self.num_scenes, self.points, self.kind = int(num_scenes), int(num_points), kind
        self.beams, self.max_range = int(beams), float(max_range)

    def scene_count(self) -> int:
        return self.num_scenes

    def scene_name(self, index: int) -> str:
        return f"{self.kind}_{self.split}_{index:05d}"

    def load_scene(self, index: int) -> Dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, _SPLIT_CODE[self.split], int(index)])
        if self.kind == "indoor":
            return make_indoor_scene(rng, self.points)
        return make_outdoor_scan(rng, self.points, beams=self.beams, max_range=self.max_range)

    def __repr__(self) -> str:
        return (
            f"ProceduralScenes(split={self.split!r}, kind={self.kind!r}, scenes={len(self)}, "
            f"num_points={self.points}, seed={self.seed})"
        )
