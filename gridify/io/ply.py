"""Reader of PLY files (``.ply``): ascii, binary little-endian and binary big-endian.

Layout: a header (``ply``, ``format ...``, then ``element NAME COUNT`` lines each followed by
its ``property TYPE NAME`` / ``property list COUNT_TYPE TYPE NAME`` lines, ``end_header``),
then the elements in order. The ``vertex`` element gives the points (``x y z``; normals
``nx ny nz`` or ``normal_x``...; colours ``red green blue`` or ``r g b`` or
``diffuse_red``...; labels ``label``/``class``/...). A PLY with ``face`` polygons
(fan-triangulated) or ``tristrips`` is a mesh: :func:`read_ply` surface-samples it and
:func:`read_ply_mesh` returns it.

Sizes are checked against the file before anything is parsed: an element of ``n`` items needs
at least ``n x`` (its scalar sizes + the size of each list's length) bytes in a binary file, and
at least ``n x`` (its number of properties) values, hence ``2 n k - 1`` bytes, in an ascii
file; every list length is checked against the bytes or values left before it is read. Data
beyond the declared elements (ascii values, or binary bytes of at least one record of the last
element that are not padding) is refused: reading the declared items would drop the rest silently.

:func:`read_ply_vertices` reads the scalar properties of a PLY whose first element is ``vertex`` by name, in
their declared types (a label property included), without reading the later elements (a scanned mesh's
faces, e.g. ScanNet's ``*_vh_clean_2.ply``: the vertices are the points); a vertex count below the data (more
data lines, or whole vertex records, than the elements declare) is refused naming both counts.

Shapes:
    points ``[N, 3]``, normals/colors ``[N, 3]``, labels ``[N]``, fields ``[N]`` each; as a
    mesh: vertices ``[V, 3]`` float64, faces ``[F, 3]`` int64; :func:`read_ply_vertices`: name -> ``[V]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._files import PathLike
from .cloud import PointCloud, clip_unit_colors, color_scale
from .fields import auto_labels, pick_fields
from .mesh import polygons_to_triangles, surface_cloud
from .source import read_file_bytes
from .tokens import Ragged, ascii_floats, gather_lists, min_ascii_bytes

__all__ = ["read_ply", "read_ply_mesh", "read_ply_vertices"]

_PLY_TYPES = {
    "char": "i1",
    "int8": "i1",
    "uchar": "u1",
    "uint8": "u1",
    "short": "i2",
    "int16": "i2",
    "ushort": "u2",
    "uint16": "u2",
    "int": "i4",
    "int32": "i4",
    "uint": "u4",
    "uint32": "u4",
    "float": "f4",
    "float32": "f4",
    "double": "f8",
    "float64": "f8",
}


@dataclass
class _PlyProp:
    name: str
    dtype: str  # numpy type code of the value
    count_dtype: Optional[str] = None  # set for list properties


@dataclass
class _PlyElement:
    name: str
    count: int
    props: List[_PlyProp]


@dataclass
class _PlyHeader:
    format: str  # ascii, binary_little_endian or binary_big_endian
    elements: List[_PlyElement]
    data_start: int  # offset of the first byte after 'end_header'


class _Truncated(Exception):
    pass


# --------------------------------------------------------------------------------------
# header
# --------------------------------------------------------------------------------------
def _ply_property(p: Path, parts: List[str], line: str) -> _PlyProp:
    try:
        if parts[1] == "list":
            return _PlyProp(parts[4], _PLY_TYPES[parts[3]], _PLY_TYPES[parts[2]])
        return _PlyProp(parts[2], _PLY_TYPES[parts[1]])
    except (IndexError, KeyError):
        raise ValueError(f"{p}: malformed or unsupported PLY property line {line!r}") from None


def _parse_ply_header(p: Path, raw: bytes) -> _PlyHeader:
    if not raw.startswith(b"ply"):
        raise ValueError(f"{p}: not a PLY file (does not start with 'ply')")
    m = re.search(rb"end_header[ \t]*\r?\n", raw[: 1 << 20])
    if m is None:
        raise ValueError(f"{p}: PLY header has no 'end_header' line (truncated or corrupt)")
    fmt = None
    elements: List[_PlyElement] = []
    for line in raw[: m.start()].decode("latin-1").splitlines()[1:]:
        parts = line.split()
        if not parts or parts[0] in ("comment", "obj_info"):
            continue
        if parts[0] == "format":
            if len(parts) < 2 or parts[1] not in ("ascii", "binary_little_endian", "binary_big_endian"):
                raise ValueError(f"{p}: unsupported PLY format line {line!r}")
            fmt = parts[1]
        elif parts[0] == "element":
            try:
                elements.append(_PlyElement(parts[1], int(parts[2]), []))
            except (IndexError, ValueError):
                raise ValueError(f"{p}: malformed PLY element line {line!r}") from None
        elif parts[0] == "property":
            if not elements:
                raise ValueError(f"{p}: PLY property before any element: {line!r}")
            elements[-1].props.append(_ply_property(p, parts, line))
        else:
            raise ValueError(f"{p}: unexpected PLY header line {line!r}")
    if fmt is None:
        raise ValueError(f"{p}: PLY header has no 'format' line")
    for el in elements:
        if el.count < 0:
            raise ValueError(f"{p}: PLY header declares a negative element count")
        names = [pr.name for pr in el.props]
        twice = sorted({nm for nm in names if names.count(nm) > 1})
        if twice:
            raise ValueError(f"{p}: PLY element {el.name!r} declares property {twice[0]!r} twice")
    return _PlyHeader(fmt, elements, m.end())


def _check_ply_sizes(p: Path, hdr: _PlyHeader, available: int) -> None:
    """Fail before parsing when the elements the header declares cannot fit in ``available`` bytes."""
    if hdr.format == "ascii":  # every property of an item is at least one value (a list: its length)
        need = min_ascii_bytes(sum(el.count * len(el.props) for el in hdr.elements))
    else:
        need = sum(
            el.count * sum(np.dtype(pr.count_dtype or pr.dtype).itemsize for pr in el.props) for el in hdr.elements
        )
    if need > available:
        declared = ", ".join(f"{el.count} {el.name}" for el in hdr.elements if el.count)
        raise ValueError(
            f"{p}: truncated PLY: header declares {declared} items, at least {need} bytes "
            f"of {hdr.format} data, but only {available} bytes follow the header"
        )


# --------------------------------------------------------------------------------------
# binary elements: each returns ({property: array or list of arrays}, offset after the element)
# --------------------------------------------------------------------------------------
def _ply_binary_scalars(buf: bytes, off: int, el: _PlyElement, endian: str) -> Tuple[Dict[str, Any], int]:
    """An element without list properties: one fixed-size record per item."""
    n = el.count
    dt = np.dtype([(pr.name, endian + pr.dtype) for pr in el.props])
    need = n * dt.itemsize
    if off + need > len(buf):
        raise _Truncated(f"element {el.name!r}: {n} items need {need} bytes, {len(buf) - off} present")
    arr = np.frombuffer(buf, dtype=dt, count=n, offset=off)
    return {pr.name: arr[pr.name] for pr in el.props}, off + need


def _ply_binary_uniform_lists(
    buf: bytes, off: int, el: _PlyElement, endian: str
) -> Optional[Tuple[Dict[str, Any], int]]:
    """The common fast path: every list has the length of the first item's; else None."""
    n = el.count
    fields: List[Tuple[str, str, Tuple[int, ...]]] = []
    probe = off
    for pr in el.props:
        if pr.count_dtype is None:
            fields.append((pr.name, endian + pr.dtype, ()))
            probe += np.dtype(pr.dtype).itemsize
        else:
            cdt = np.dtype(endian + pr.count_dtype)
            if probe + cdt.itemsize > len(buf):
                raise _Truncated(f"element {el.name!r} ends inside a list length")
            length = int(np.frombuffer(buf, dtype=cdt, count=1, offset=probe)[0])
            if length < 0 or probe + cdt.itemsize + length * np.dtype(pr.dtype).itemsize > len(buf):
                return None  # the general path reports it
            fields.append((pr.name + "__len", cdt.str, ()))
            fields.append((pr.name, endian + pr.dtype, (length,)))
            probe += cdt.itemsize + length * np.dtype(pr.dtype).itemsize
    dt = np.dtype(fields)
    if off + n * dt.itemsize <= len(buf):
        arr = np.frombuffer(buf, dtype=dt, count=n, offset=off)
        if all(np.all(arr[pr.name + "__len"] == dt[pr.name].shape[0]) for pr in el.props if pr.count_dtype is not None):
            return {pr.name: arr[pr.name] for pr in el.props}, off + n * dt.itemsize
    return None


def _ply_binary_variable_lists(buf: bytes, off: int, el: _PlyElement, endian: str) -> Tuple[Dict[str, Any], int]:
    """The general path: variable-length lists, one item at a time."""
    out: Dict[str, List[Any]] = {pr.name: [] for pr in el.props}
    for _ in range(el.count):
        for pr in el.props:
            if pr.count_dtype is None:
                vdt = np.dtype(endian + pr.dtype)
                if off + vdt.itemsize > len(buf):
                    raise _Truncated(f"element {el.name!r} is cut short")
                out[pr.name].append(np.frombuffer(buf, vdt, 1, off)[0])
                off += vdt.itemsize
            else:
                cdt = np.dtype(endian + pr.count_dtype)
                vdt = np.dtype(endian + pr.dtype)
                if off + cdt.itemsize > len(buf):
                    raise _Truncated(f"element {el.name!r} is cut short")
                length = int(np.frombuffer(buf, cdt, 1, off)[0])
                off += cdt.itemsize
                if length < 0 or off + length * vdt.itemsize > len(buf):
                    raise _Truncated(f"element {el.name!r} is cut short")
                out[pr.name].append(np.frombuffer(buf, vdt, length, off))
                off += length * vdt.itemsize
    return out, off


def _ply_binary_element(buf: bytes, off: int, el: _PlyElement, endian: str) -> Tuple[Dict[str, Any], int]:
    """Parse one binary element; returns ``({prop: array or list of arrays}, new_offset)``."""
    if all(pr.count_dtype is None for pr in el.props):
        return _ply_binary_scalars(buf, off, el, endian)
    if el.count == 0:
        return {pr.name: [] for pr in el.props}, off
    uniform = _ply_binary_uniform_lists(buf, off, el, endian)
    return uniform if uniform is not None else _ply_binary_variable_lists(buf, off, el, endian)


# --------------------------------------------------------------------------------------
# ascii elements
# --------------------------------------------------------------------------------------
def _list_length(value: float, el: _PlyElement, left: int) -> int:
    """An ascii list length: a non-negative integer no larger than the ``left`` values after it."""
    if not (np.isfinite(value) and value >= 0 and value == int(value)):
        raise ValueError(f"element {el.name!r} has a list length that is not a non-negative integer ({float(value)!r})")
    if value > left:
        raise _Truncated(f"element {el.name!r}: a list of {int(value)} values, only {left} values left")
    return int(value)


def _ply_ascii_uniform(vals: np.ndarray, off: int, el: _PlyElement) -> Optional[Tuple[Dict[str, Any], int]]:
    """The common fast path: every list has the length of the first item's (e.g. all triangles); else None."""
    layout: List[Tuple[_PlyProp, int, Optional[int]]] = []
    width = 0
    for pr in el.props:
        if pr.count_dtype is None:
            layout.append((pr, width, None))
            width += 1
            continue
        if off + width >= len(vals) or not (
            np.isfinite(vals[off + width]) and vals[off + width] >= 0 and vals[off + width] == int(vals[off + width])
        ):
            return None
        length = int(vals[off + width])
        layout.append((pr, width, length))
        width += 1 + length
    if off + el.count * width > len(vals):
        return None
    block = vals[off : off + el.count * width].reshape(el.count, width)
    if any(ln is not None and not np.all(block[:, c] == ln) for _, c, ln in layout):
        return None
    out = {pr.name: block[:, c] if ln is None else block[:, c + 1 : c + 1 + ln] for pr, c, ln in layout}
    return out, off + el.count * width


def _ply_ascii_element(vals: np.ndarray, off: int, el: _PlyElement) -> Tuple[Dict[str, Any], int]:
    """Parse one ascii element from the values ``vals[off:]``; returns ``({prop: values}, new_offset)``."""
    n = el.count
    if all(pr.count_dtype is None for pr in el.props):
        k = len(el.props)
        if off + n * k > len(vals):
            raise _Truncated(f"element {el.name!r}: {n} items x {k} values, only {len(vals) - off} values left")
        block = vals[off : off + n * k].reshape(n, k)
        with np.errstate(invalid="ignore", over="ignore"):  # the declared types, as a binary file holds them
            return {pr.name: block[:, i].astype(pr.dtype) for i, pr in enumerate(el.props)}, off + n * k
    uniform = _ply_ascii_uniform(vals, off, el) if n else None
    if uniform is not None:
        return uniform
    # the general path: where each value / list starts (8 bytes per item, no object per list)
    starts = {pr.name: np.empty(n, np.int64) for pr in el.props}
    lengths = {pr.name: np.empty(n, np.int64) for pr in el.props if pr.count_dtype is not None}
    for i in range(n):
        for pr in el.props:
            if off >= len(vals):
                raise _Truncated(f"element {el.name!r} is cut short")
            if pr.count_dtype is None:
                starts[pr.name][i] = off
                off += 1
            else:
                length = _list_length(vals[off], el, len(vals) - off - 1)
                starts[pr.name][i], lengths[pr.name][i] = off + 1, length
                off += 1 + length
    out = {
        pr.name: vals[starts[pr.name]]
        if pr.count_dtype is None
        else gather_lists(vals, starts[pr.name], lengths[pr.name])
        for pr in el.props
    }
    return out, off


# --------------------------------------------------------------------------------------
# faces and points
# --------------------------------------------------------------------------------------
def _strips_to_triangles(strips: Any) -> np.ndarray:
    """Decode triangle strips (``-1`` restarts a strip), alternating the winding."""
    out: List[np.ndarray] = []
    for strip in strips.split() if isinstance(strips, Ragged) else strips:
        s = np.asarray(strip).astype(np.int64).reshape(-1)
        if len(s) < 3:
            continue
        # position of every entry inside its sub-strip (restarts after each -1)
        idx = np.arange(len(s))
        last_cut = np.maximum.accumulate(np.where(s < 0, idx, -1))
        local = idx - last_cut - 1
        a, b, c = s[:-2], s[1:-1], s[2:]
        valid = (a >= 0) & (b >= 0) & (c >= 0)
        odd = (local[:-2] % 2) == 1
        tri = np.stack([a, np.where(odd, c, b), np.where(odd, b, c)], 1)[valid]
        keep = (tri[:, 0] != tri[:, 1]) & (tri[:, 1] != tri[:, 2]) & (tri[:, 0] != tri[:, 2])
        out.append(tri[keep])
    return np.concatenate(out) if out else np.zeros((0, 3), np.int64)


def _ply_faces(p: Path, hdr: _PlyHeader, parsed: Dict[str, Dict[str, Any]], num_vertices: int) -> Optional[np.ndarray]:
    """Triangles ``[F, 3]`` of the ``face`` and ``tristrips`` elements, or None when there are none."""
    tris: List[np.ndarray] = []
    for el in hdr.elements:
        if el.name == "face" and el.count > 0:
            key = next(
                (
                    pr.name
                    for pr in el.props
                    if pr.count_dtype is not None and pr.name in ("vertex_indices", "vertex_index")
                ),
                None,
            )
            if key is not None:
                tris.append(polygons_to_triangles(parsed["face"][key]))
        elif el.name == "tristrips" and el.count > 0:
            key = next((pr.name for pr in el.props if pr.count_dtype is not None), None)
            if key is not None:
                tris.append(_strips_to_triangles(parsed["tristrips"][key]))
    faces = np.concatenate(tris) if tris else None
    if faces is not None and len(faces) and (faces.min() < 0 or faces.max() >= num_vertices):
        raise ValueError(f"{p}: PLY faces index vertices outside 0..{num_vertices - 1}")
    return faces


def _check_ply_surplus(p: Path, hdr: _PlyHeader, raw: bytes, vals: Optional[np.ndarray], off: int) -> None:
    """Data beyond the elements the header declares (a vertex count below the data lines) is refused:
    reading the declared items only would drop the rest silently."""
    declared = ", ".join(f"{el.count} {el.name}" for el in hdr.elements)
    if vals is not None:
        if off < len(vals):
            lines = sum(1 for ln in raw[hdr.data_start :].splitlines() if ln.strip())
            raise ValueError(
                f"{p}: PLY header declares {declared} items ({sum(el.count for el in hdr.elements)} "
                f"data lines) but the data holds {lines} lines, {len(vals) - off} values more than the "
                f"elements take; refusing rather than dropping them (fix the element counts)"
            )
        return
    last = hdr.elements[-1] if hdr.elements else None
    record = (
        sum(np.dtype(pr.dtype).itemsize for pr in last.props)
        if last is not None and all(pr.count_dtype is None for pr in last.props)
        else 1
    )
    rest = raw[off:]
    if len(rest) >= max(record, 1) and rest.strip(b"\0 \t\r\n"):
        raise ValueError(
            f"{p}: PLY header declares {declared} items but {len(rest)} bytes of data follow the last "
            f"one"
            + (f" (room for {len(rest) // record} more {last.name} records)" if record > 1 else "")
            + "; refusing rather than dropping them (fix the element counts)"
        )


def _read_ply_raw(p: Path) -> Tuple[Dict[str, np.ndarray], Optional[np.ndarray]]:
    """``({scalar vertex property: [V] array}, faces [F, 3] or None)``."""
    raw = read_file_bytes(p)
    hdr = _parse_ply_header(p, raw)
    vertex = next((e for e in hdr.elements if e.name == "vertex"), None)
    if vertex is None:
        raise ValueError(f"{p}: PLY has no 'vertex' element")
    _check_ply_sizes(p, hdr, len(raw) - hdr.data_start)
    parsed: Dict[str, Dict[str, Any]] = {}
    vals: Optional[np.ndarray] = None
    try:
        if hdr.format == "ascii":
            vals = ascii_floats(p, "PLY ascii data", raw[hdr.data_start :])
            off = 0
            for el in hdr.elements:
                parsed[el.name], off = _ply_ascii_element(vals, off, el)
        else:
            endian = "<" if hdr.format == "binary_little_endian" else ">"
            off = hdr.data_start
            for el in hdr.elements:
                parsed[el.name], off = _ply_binary_element(raw, off, el, endian)
    except _Truncated as exc:
        raise ValueError(f"{p}: truncated PLY ({exc})") from None
    except ValueError as exc:
        if str(p) in str(exc):
            raise
        raise ValueError(f"{p}: corrupt PLY data ({exc})") from None
    _check_ply_surplus(p, hdr, raw, vals, off)
    verts = {pr.name: np.asarray(parsed["vertex"][pr.name]) for pr in vertex.props if pr.count_dtype is None}
    return verts, _ply_faces(p, hdr, parsed, vertex.count)


def _ply_points(p: Path, verts: Dict[str, np.ndarray]) -> np.ndarray:
    """The ``x y z`` vertex properties as ``[V, 3]`` float64."""
    if not {"x", "y", "z"} <= verts.keys():
        raise ValueError(f"{p}: PLY vertex element has no x y z properties")
    return np.stack([verts["x"], verts["y"], verts["z"]], 1).astype(np.float64)


def read_ply_mesh(p: Path) -> Tuple[np.ndarray, np.ndarray]:
    """``(vertices, faces)`` of the PLY file ``p``; ``faces`` is ``[0, 3]`` for a point cloud."""
    verts, faces = _read_ply_raw(p)
    pts = _ply_points(p, verts)
    return pts, (faces if faces is not None else np.zeros((0, 3), np.int64))


def _ply_colors(verts: Dict[str, np.ndarray]) -> Optional[np.ndarray]:
    """Colours in ``[0, 1]`` from ``red green blue`` (or ``r g b``, ``diffuse_*``) properties, or None."""
    for trio in (("red", "green", "blue"), ("r", "g", "b"), ("diffuse_red", "diffuse_green", "diffuse_blue")):
        if set(trio) <= verts.keys():
            block = np.stack([verts[k] for k in trio], 1)
            return clip_unit_colors(block.astype(np.float64) / (color_scale(block) or 255.0))
    return None


# vertex properties that are already points, normals or colours: fields="all" leaves them out
_NOT_FIELDS = (
    "x",
    "y",
    "z",
    "nx",
    "ny",
    "nz",
    "normal_x",
    "normal_y",
    "normal_z",
    "red",
    "green",
    "blue",
    "r",
    "g",
    "b",
    "diffuse_red",
    "diffuse_green",
    "diffuse_blue",
)


def read_ply(
    p: Path,
    num_samples: int,
    seed: int,
    fields: Union[None, str, Sequence[str]] = None,
    labels_from: Optional[str] = None,
) -> PointCloud:
    """The points of the PLY file ``p``, or ``num_samples`` surface samples when it is a mesh.

    ``fields`` / ``labels_from`` (read_points options) pick vertex properties of a point cloud.
    """
    verts, faces = _read_ply_raw(p)
    pts = _ply_points(p, verts)
    if faces is not None and len(faces) > 0:
        if fields is not None or labels_from is not None:
            raise ValueError(
                f"{p}: this PLY is a mesh: its surface samples have no per-point fields "
                f"(fields= / labels_from= apply to PLY point clouds)"
            )
        return surface_cloud(p, pts, faces, num_samples, seed)
    normals = None
    for trio in (("nx", "ny", "nz"), ("normal_x", "normal_y", "normal_z")):
        if set(trio) <= verts.keys():
            normals = np.stack([verts[k] for k in trio], 1)
            break
    labels, extra = pick_fields(p, verts, fields, labels_from, skip=_NOT_FIELDS)
    ignored: Dict[str, str] = {}
    if labels_from is None:  # a non-integer 'label' / 'class' property is ignored, named, never truncated
        labels, ignored = auto_labels(
            p, verts, ("label", "labels", "class", "scalar_label", "semantic", "part", "segment")
        )
    return PointCloud(pts, normals, _ply_colors(verts), labels, str(p), extra, ignored=ignored)


# --------------------------------------------------------------------------------------
# the vertex element alone (scanned meshes: the vertices are the points)
# --------------------------------------------------------------------------------------
def _vertex_surplus(p: Path, count: int, found: int, what: str) -> ValueError:
    return ValueError(
        f"{p}: PLY header declares {count} vertices but the data holds {found} {what}; refusing rather "
        f"than reading {count} of them (fix the element count)"
    )


def _ascii_vertices(p: Path, raw: bytes, hdr: _PlyHeader, later: int) -> Dict[str, np.ndarray]:
    """The vertex rows of an ascii PLY: one line per item, the vertices first."""
    vertex = hdr.elements[0]
    count, k = vertex.count, len(vertex.props)
    rows = [line for line in raw[hdr.data_start :].split(b"\n") if line.strip()]
    if len(rows) > count + later:  # every item of an ascii PLY is one line
        extra = f" besides {later} later items" if later else ""
        raise _vertex_surplus(p, count, len(rows) - later, "data lines" + extra)
    try:
        vals = np.array(b" ".join(rows[:count]).split(), dtype=np.float64).reshape(count, k)
    except ValueError:
        raise ValueError(f"{p}: malformed ascii PLY vertex rows") from None
    return {pr.name: vals[:, i].astype(pr.dtype) for i, pr in enumerate(vertex.props)}


def _binary_vertices(p: Path, raw: bytes, hdr: _PlyHeader, later: int) -> Dict[str, np.ndarray]:
    """The vertex records of a binary PLY (native byte order), the vertices first."""
    vertex = hdr.elements[0]
    endian = "<" if hdr.format == "binary_little_endian" else ">"
    dtype = np.dtype([(pr.name, endian + pr.dtype) for pr in vertex.props])
    rest = len(raw) - hdr.data_start
    if not later and rest >= (vertex.count + 1) * dtype.itemsize:  # vertices only: whole records beyond them
        raise _vertex_surplus(p, vertex.count, rest // dtype.itemsize, f"records of {dtype.itemsize} bytes")
    arr = np.frombuffer(raw, dtype=dtype, count=vertex.count, offset=hdr.data_start)
    return {pr.name: arr[pr.name].astype(arr[pr.name].dtype.newbyteorder("=")) for pr in vertex.props}


def read_ply_vertices(path: PathLike) -> Dict[str, np.ndarray]:
    """The scalar properties of the ``vertex`` element (the first element) of the PLY file ``path``, by name,
    in their declared types (see the module docstring).

    The element sizes are checked against the file before anything is parsed; later elements (a mesh's faces)
    are counted, not read.

    Raises:
        ValueError: not a PLY, a first element other than ``vertex`` or one with a list property, a truncated
            file or a vertex count below the data, naming the file.

    Shapes:
        property name -> ``[V]``.
    """
    p = Path(path)
    raw = read_file_bytes(p)
    hdr = _parse_ply_header(p, raw)
    if not hdr.elements or hdr.elements[0].name != "vertex":
        first = hdr.elements[0].name if hdr.elements else None
        raise ValueError(f"{p}: the first PLY element is {first!r}, not 'vertex'")
    vertex = hdr.elements[0]
    if not vertex.props or any(pr.count_dtype is not None for pr in vertex.props):
        raise ValueError(f"{p}: unsupported PLY vertex element (it needs scalar properties and no list)")
    _check_ply_sizes(p, hdr, len(raw) - hdr.data_start)
    later = sum(el.count for el in hdr.elements[1:])
    read = _ascii_vertices if hdr.format == "ascii" else _binary_vertices
    return read(p, raw, hdr, later)
