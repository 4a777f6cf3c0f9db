"""The container every reader returns: :class:`PointCloud`, one point cloud read from a file.

Precision of the coordinates: ``points`` are float32, except that coordinates with a large
offset (LiDAR / UTM coordinates in metres, x ~ 5e5 with an extent of 100 m) stay float64,
since float32 would round away the detail users care about. With ``P`` the rows of finite
coordinates that float32 can represent (the rows a reader keeps) and

    extent = max over the axes of (max_P p_a - min_P p_a)      (the longest side of the box)
    offset = max over P and the axes of |p_a|

the points are **float64** when the coordinates came as float64 (PCD/PLY doubles, float64 or
wide-integer ``.npy``/``.npz``, text, LAS/LAZ scaled integers), float32 cannot hold them
exactly, ``extent > 0`` and ``offset > LARGE_OFFSET * extent`` (``LARGE_OFFSET = 1000``: a
float32 of magnitude ``offset`` is spaced ``offset * 2**-23 > 1.2e-4 * extent`` apart, so
float32 would keep less than about ``1e-4`` of the extent); otherwise they are **float32**. The rule is
applied to the bounding box of ``P`` and, failing that, to its *bulk box* (:func:`bulk_box`: the middle
half of the rows on every axis), so that a few stray rows (a ``(0, 0, 0)`` placeholder beside a UTM scan)
do not decide for the rest: with the full box such a cloud's extent is the offset itself, and float32
would round every other point to half a metre.
Consumers centre a float64 cloud in float64 before casting to float32 (the metric scene paths, which do
not normalize, through :func:`centre_large_offset`: the datasets, ``predict`` and the ONNX scene runner),
on the centre of the box that decided; a cloud whose points all coincide (extent 0) has no shape to keep
(centred, it is all zeros), so it is float32.

Colours and intensities stored as integers (or as whole numbers in a text file) go to the unit scale by
one rule, :func:`integer_scale`: divided by 255 when every value lies in 0..255 (8-bit), by 65535 when
they lie in 0..65535 (16-bit: LAS, 16-bit PLY / PCD / S3DIS text), whatever type holds them (a PLY
``int`` property holding 0-255 values is 8-bit data, not a fraction of 2^31); :func:`color_scale` adds the
floats already in ``[0, 1]``.

Shapes:
    points ``[N, 3]`` float32 (float64 by the rule above); normals ``[N, 3]`` float32 or None;
    colors ``[N, 3]`` float32 in ``[0, 1]`` or None; labels ``[N]`` int64 or None; fields:
    name -> ``[N]`` array (as stored in the file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

__all__ = [
    "PointCloud",
    "LARGE_OFFSET",
    "FLOAT32_MAX",
    "coordinate_dtype",
    "representable_rows",
    "centre_large_offset",
    "bulk_box",
    "stray_rows",
    "integer_scale",
    "unit_scaled",
    "color_scale",
    "label_values_problem",
    "clip_unit_colors",
]

#: points keep float64 when max|p| > LARGE_OFFSET x the extent (and float32 is not exact)
LARGE_OFFSET = 1000.0
#: the largest finite float32; a coordinate beyond it is invalid (dropped or refused by read_points)
FLOAT32_MAX = float(np.finfo(np.float32).max)


def representable_rows(points: np.ndarray) -> np.ndarray:
    """``[N]`` bool: the rows whose coordinates are finite and within the float32 range (NaN compares False)."""
    with np.errstate(invalid="ignore"):
        return ((points >= -FLOAT32_MAX) & (points <= FLOAT32_MAX)).all(axis=1)


#: the share of the rows at each end of every axis that the bulk box leaves out (:func:`bulk_box`)
BULK_SHARE = 0.25
#: the bulk box of a larger cloud is taken from this many of its rows, evenly spaced
BULK_SAMPLE = 65536


def bulk_box(rows: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` ``[3]`` each: the box of the middle rows of ``rows`` ``[N, 3]`` (finite) on every axis, from the
    :data:`BULK_SHARE` to the ``1 - BULK_SHARE`` order statistic (the middle half; the whole box below 5 rows),
    over at most :data:`BULK_SAMPLE` evenly spaced rows: what most of the cloud spans, whatever a few stray rows
    hold."""
    rows = rows[:: max(1, len(rows) // BULK_SAMPLE)]
    n = len(rows)
    lo_k, hi_k = int(np.floor(BULK_SHARE * (n - 1))), int(np.ceil((1 - BULK_SHARE) * (n - 1)))
    cols = np.array(rows, dtype=np.float64).T  # [3, n], a copy: each axis contiguous for the partition
    part = np.partition(cols, (lo_k, hi_k), axis=1) if lo_k < hi_k else cols
    return part[:, lo_k], part[:, hi_k]


def _large(lo: np.ndarray, hi: np.ndarray) -> bool:
    """The rule of the module docstring on the box ``lo..hi``: ``extent > 0`` and ``offset > LARGE_OFFSET x extent``."""
    extent = float((hi - lo).max())
    offset = float(np.maximum(np.abs(lo), np.abs(hi)).max())
    return 0 < extent and offset > LARGE_OFFSET * extent


def _offset_box(points: np.ndarray) -> Optional[Tuple[np.ndarray, np.ndarray, bool]]:
    """``(lo, hi, bulk)``: the box that gives ``points`` a large offset (the bounding box of the representable
    rows, else their bulk box, then ``bulk`` is True), or None when float32 keeps them (see the module docstring)."""
    if points.dtype == np.float32 or points.dtype.kind not in "fiu" or points.ndim != 2 or points.size == 0:
        return None
    p64 = points.astype(np.float64, copy=False)
    keep = representable_rows(p64)
    rows = p64 if keep.all() else p64[keep]
    if len(rows) == 0 or np.array_equal(rows, rows.astype(np.float32)):
        return None  # nothing to keep, or float32 holds every value exactly
    lo, hi = rows.min(axis=0), rows.max(axis=0)
    if _large(lo, hi):
        return lo, hi, False
    lo, hi = bulk_box(rows)
    return (lo, hi, True) if _large(lo, hi) else None


def coordinate_dtype(points: np.ndarray) -> np.dtype:
    """float64 or float32 for the ``[N, 3]`` coordinates ``points``, by the rule of the module docstring."""
    return np.dtype(np.float32 if _offset_box(np.asarray(points)) is None else np.float64)


def stray_rows(points: np.ndarray) -> np.ndarray:
    """``[S]`` int64: the rows of ``points`` ``[N, 3]`` whose large offset only the bulk box shows (see the module
    docstring) that lie more than ``LARGE_OFFSET`` times the bulk's extent outside it (a ``(0, 0, 0)`` placeholder
    beside a UTM scan); empty for every other cloud. The readers warn of them (:func:`gridify.io.read_points`)."""
    box = _offset_box(np.asarray(points))
    if box is None or not box[2]:
        return np.zeros(0, np.int64)
    lo, hi, _ = box
    p64 = np.asarray(points, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = np.maximum(lo - p64, p64 - hi).max(axis=1)
        return np.flatnonzero(out > LARGE_OFFSET * float((hi - lo).max())).astype(np.int64)


def label_values_problem(values: np.ndarray, what: str = "file") -> str:
    """Why ``values`` (one label per point, flat) are not integer labels, in words after the culprit's name
    (``"labels must be integers, got dtype bool"``), or ``""``: integers, or floats holding whole numbers
    (a text file, a float ``.npy`` or PLY property); a fractional value, NaN/Inf, a bool or non-numeric
    array is named with its first row, never truncated to an id. ``what``: the kind of the culprit
    (``"file"``, ``"array"``) in the message about float values."""
    a = np.asarray(values)
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        return f"labels must be integers, got dtype {a.dtype}"
    if np.issubdtype(a.dtype, np.floating):
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(a) | (a != np.round(a)) | (np.abs(a) >= 2.0**63)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            return (
                f"labels must be integers, row {row} holds {float(a[row])!r} (a {a.dtype} {what}: "
                f"non-integer labels are refused, not truncated)"
            )
    elif a.dtype == np.uint64 and a.size and int(a.max()) >= 2**63:
        row = int(np.argmax(a))
        return f"label {int(a[row])} (row {row}) does not fit an int64"
    return ""


def _real_numbers(where: str, name: str, arr: np.ndarray, bools: bool = False) -> None:
    """Refuse an array that does not hold real numbers (strings, objects, complex; bools unless ``bools``),
    naming ``name`` and its dtype, before numpy's cast raises or silently makes 0/1 coordinates."""
    kinds = "iuf" + ("b" if bools else "")
    if arr.dtype.kind not in kinds:
        raise ValueError(f"{where}: {name} must hold real numbers, got dtype {arr.dtype}")


def clip_unit_colors(colors: np.ndarray) -> np.ndarray:
    """A reader's colours ``[N, 3]`` (already divided by their scale) put into ``[0, 1]`` whatever the file holds:
    NaN 0, above 1 (or +Inf) 1, below 0 0. Readers call it before building the :class:`PointCloud`, which
    refuses float colours outside ``[0, 1]`` (a hand-built cloud's 0-255 floats are a mistake, a file's are data)."""
    return np.clip(np.nan_to_num(colors, nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)


def _unit_colors(where: str, colors: np.ndarray) -> np.ndarray:
    """``colors`` on the unit scale :class:`PointCloud` holds them in: integers (8-bit 0-255, or 16-bit up to 65535,
    as LAS stores them) divided by 255 or 65535; floats must already lie in ``[0, 1]``: 0-255 floats would reach a
    model trained on ``[0, 1]`` colours 255 times too bright, so they are refused, naming the largest value."""
    if colors.size == 0:
        return colors
    if colors.dtype.kind in "iu":
        scale = integer_scale(colors)
        if scale is None:
            lo, hi = int(colors.min()), int(colors.max())
            raise ValueError(f"{where}: integer colors must lie in 0..255 or 0..65535, got {lo}..{hi}")
        return colors.astype(np.float64) / scale
    with np.errstate(invalid="ignore"):
        bad = (colors < 0) | (colors > 1.0 + 1e-6)
    if bad.any():
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ValueError(
            f"{where}: float colors must lie in [0, 1], got {float(colors[bad][0])!r} (row {row}, values up to "
            f"{float(np.nanmax(colors)):g}): divide 0-255 colours by 255, or pass them as uint8"
        )
    return colors


def centre_large_offset(points: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(points - offset, offset)``: coordinates with a large offset (:func:`coordinate_dtype` float64, UTM
    metres) moved, in float64, so that the box that decided (their bounding box, or the bulk box when only that
    shows the offset: a few stray rows stay where they are relative to the rest) is centred on the origin, and that
    centre ``[3]`` (float64); any other coordinates as given, with a zero offset. Cast the result to float32
    afterwards: its rounding is then relative to the extent (micrometres for a 100 m tile), not to the offset
    (0.25 m at 4e6 m). A translation only: metric scenes keep their metres, and ``points - offset + offset`` is
    the input to float64 rounding.

    Shapes:
        points ``[N, 3]`` -> ``[N, 3]`` (float64 when moved, else as given), offset ``[3]``.
    """
    a = np.asarray(points)
    box = _offset_box(a)
    if box is None:
        return a, np.zeros(3)
    offset = (box[0] + box[1]) / 2.0
    return a.astype(np.float64, copy=False) - offset, offset


def integer_scale(values: np.ndarray) -> Optional[float]:
    """The divisor that puts whole-number colours or intensities on the unit scale, the one rule of every reader,
    the scene layouts and the scene features: 255 when the finite ``values`` lie in 0..255 (8-bit), 65535 when
    they lie in 0..65535 (16-bit), whatever type holds them (``uint8``, ``uint16``, a PLY ``int`` / ``uint``
    property, ``int64``, a text file's numbers); None when they do not (a negative or fractional value, or one
    beyond 16 bits). No finite value: 255."""
    a = np.asarray(values)
    if a.dtype.kind == "f":
        a = a[np.isfinite(a)]
    if a.size == 0:
        return 255.0
    lo, hi = a.min(), a.max()
    if lo < 0 or hi > 65535 or (a.dtype.kind == "f" and not np.array_equal(a, np.round(a))):
        return None
    return 255.0 if hi <= 255 else 65535.0


def unit_scaled(values: np.ndarray) -> np.ndarray:
    """Intensities (or any per-point magnitude) on the unit scale, float64. An 8- or 16-bit integer array is divided
    by its type's maximum (255, 65535: the same divisor for every scan of a sensor, whatever its brightest point; a LAS
    ``uint16`` intensity); a wider integer array, whose type says nothing of the range (a PLY ``int`` / ``uint``
    property, ``int64``), by :func:`integer_scale` of its values (255 for 8-bit values, 65535 for 16-bit ones; beyond
    16 bits or negative: its type's maximum); a float array as it is (already scaled: KITTI remission lies in
    ``[0, 1]``)."""
    a = np.asarray(values)
    if a.dtype.kind in "iu":
        if a.dtype.itemsize <= 2:
            return a.astype(np.float64) / float(np.iinfo(a.dtype).max)
        return a.astype(np.float64) / (integer_scale(a) or float(np.iinfo(a.dtype).max))
    return a.astype(np.float64, copy=False)


def color_scale(values: np.ndarray, unit_floats: bool = True) -> Optional[float]:
    """The divisor that puts colours (``[N, 3]``, any numeric type) on the unit scale, decided from the finite values
    of the whole cloud or scene: 1 for floats already in ``[0, 1]`` (with ``unit_floats``), else
    :func:`integer_scale` (255 for 8-bit values, 65535 for 16-bit ones), or 255 for fractional values in
    ``[0, 255]``; None when the values are no colours (negative, fractional beyond 255, beyond 65535)."""
    a = np.asarray(values)
    if a.dtype.kind == "f":
        a = a[np.isfinite(a)]
        if a.size and unit_floats and a.min() >= 0 and a.max() <= 1.0:
            return 1.0
    scale = integer_scale(a)
    if scale is None and a.dtype.kind == "f" and a.min() >= 0 and a.max() <= 255.0:
        return 255.0
    return scale


@dataclass
class PointCloud:
    """One point cloud read from a file.

    ``points`` are float32, or float64 when the file's float64 coordinates have a large offset
    relative to the cloud's extent (``max |p| > 1000 x`` the longest side of the bounding box, or of the box of
    its middle half when a few stray rows widen the first, which is not 0, and float32 cannot hold them exactly;
    see :mod:`gridify.io.cloud`). ``fields`` holds extra
    per-point scalar fields a reader was asked to keep (``read_points(..., fields=...)``, e.g.
    LiDAR ``intensity``, ``return_number``), by name, as stored in the file.

    Shapes:
        points: ``[N, 3]`` float32 or float64.
        normals: ``[N, 3]`` float32 or None.
        colors: ``[N, 3]`` float32 in ``[0, 1]`` or None (integer colours given are divided by 255, or 65535
            when a value exceeds 255; float colours outside ``[0, 1]`` are refused).
        labels: ``[N]`` int64 or None.
        fields: name -> ``[N]`` array.
        dropped: ``[D]`` int64, the rows of the file (0-based, in file order) that read_points
            dropped (NaN/Inf coordinates), or None when it dropped none; a table that holds a
            value per row of the file (labels beside it) loses the same rows.
        ignored: what the reader found but left out, and why (``{"labels": "column 4 holds
            non-integer values (row 3: 0.5)"}``), for messages about a missing column.
    """

    points: np.ndarray
    normals: Optional[np.ndarray] = None
    colors: Optional[np.ndarray] = None
    labels: Optional[np.ndarray] = None
    source: str = ""
    fields: Dict[str, np.ndarray] = field(default_factory=dict)
    dropped: Optional[np.ndarray] = None
    ignored: Dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = self.source or "PointCloud"
        pts = np.asarray(self.points)
        if pts.ndim != 2 or pts.shape[1] != 3:
            raise ValueError(f"{where}: points must have shape [N, 3], got {pts.shape}")
        _real_numbers(where, "points", pts)
        with np.errstate(over="ignore"):  # beyond float32 becomes Inf, which the readers drop/refuse
            self.points = np.ascontiguousarray(pts, dtype=coordinate_dtype(pts))
        n = len(self.points)
        for name in ("normals", "colors"):
            arr = getattr(self, name)
            if arr is None:
                continue
            arr = np.asarray(arr)
            if arr.shape != (n, 3):
                raise ValueError(f"{where}: {name} must have shape [{n}, 3], got {arr.shape}")
            _real_numbers(where, name, arr)
            if name == "colors":
                arr = _unit_colors(where, arr)
            with np.errstate(over="ignore"):
                setattr(self, name, np.ascontiguousarray(arr, dtype=np.float32))
        if self.labels is not None:
            lab = np.asarray(self.labels).reshape(-1)
            if lab.shape != (n,):
                raise ValueError(f"{where}: labels must have shape [{n}], got {lab.shape}")
            problem = label_values_problem(lab, "array")
            if problem:
                raise ValueError(f"{where}: {problem}")
            self.labels = lab.astype(np.int64)
        if self.dropped is not None:
            self.dropped = np.asarray(self.dropped, dtype=np.int64).reshape(-1)
        self.ignored = {str(k): str(v) for k, v in dict(self.ignored or {}).items()}
        extra = {}
        if self.fields is not None and not isinstance(self.fields, Mapping):
            raise ValueError(
                f"{where}: fields must be a dict of name -> [N] array (e.g. {{'intensity': a[:, 3]}}), "
                f"got {type(self.fields).__name__}"
            )
        for name, arr in dict(self.fields or {}).items():
            arr = np.asarray(arr)
            if arr.shape != (n,):
                raise ValueError(f"{where}: field {name!r} must have shape [{n}], got {arr.shape}")
            _real_numbers(where, f"field {name!r}", arr, bools=True)
            extra[str(name)] = arr
        self.fields = extra

    def __len__(self) -> int:
        return int(self.points.shape[0])

    @property
    def rows_in_file(self) -> int:
        """The data rows of the file: the points plus the rows read_points dropped."""
        return len(self) + (0 if self.dropped is None else len(self.dropped))

    def file_row(self, index: int) -> int:
        """The row of the file that point ``index`` was read from (rows read_points dropped counted)."""
        if self.dropped is None or not len(self.dropped):
            return int(index)
        return int(np.delete(np.arange(self.rows_in_file), self.dropped)[int(index)])

    def dropped_note(self) -> str:
        """``""``, or what read_points dropped in words: ``"read_points dropped 1 row with NaN/Inf
        coordinates (row 17)"``, for messages about counts."""
        if self.dropped is None or not len(self.dropped):
            return ""
        d = len(self.dropped)
        rows = ", ".join(str(int(r)) for r in self.dropped[:5]) + (", ..." if d > 5 else "")
        return (
            f"read_points dropped {d} of its {self.rows_in_file} rows with NaN/Inf coordinates "
            f"(row{'s' if d > 1 else ''} {rows}, 0-based)"
        )

    @property
    def num_points(self) -> int:
        return len(self)

    def select(self, index: np.ndarray) -> "PointCloud":
        """The sub-cloud of the rows in ``index`` (a boolean mask or integer indices)."""
        take = lambda a: None if a is None else a[index]  # noqa: E731
        return PointCloud(
            self.points[index],
            take(self.normals),
            take(self.colors),
            take(self.labels),
            self.source,
            {k: v[index] for k, v in self.fields.items()},
            ignored=dict(self.ignored),
        )
