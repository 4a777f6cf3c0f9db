"""Reader of LiDAR point clouds: ``.las`` and ``.laz`` (ASPRS LAS 1.0-1.4), through laspy.

laspy (and, for ``.laz``, its ``lazrs`` decompressor) is the optional extra
``pip install 'gridify[las]'``; without it the reader raises a ValueError naming that command.

Coordinates are stored as scaled integers, ``x = X * scale_x + offset_x`` (the same for y, z),
computed in float64; they usually carry a large offset (UTM metres), so they stay float64 by
the rule of :mod:`gridify.io.cloud`. Colours (point formats with ``red green blue``) are
16-bit: ``rgb / 65535`` (``/ 255`` when no value exceeds 255, as some writers store 8-bit
values). Every other dimension (``intensity``, ``return_number``, ``number_of_returns``,
``classification``, ``scan_angle``, ``user_data``, ``point_source_id``, ``gps_time``, extra
bytes...) can be kept in :attr:`~gridify.io.PointCloud.fields` (read option ``fields=``), and
``labels_from="classification"`` takes the labels from the classification.

Sizes are checked before laspy / lazrs see them (laspy loops over every VLR a header declares,
lazrs allocates the chunk table a LAZ declares and aborts the process when it cannot, and
divides by the chunk size and the item sizes of the laszip VLR): the
header block, ``number_of_vlrs x 54`` bytes of VLRs between the header and the point data,
``number_of_evlrs x 60`` bytes of EVLRs, and a LAZ chunk table of at most one chunk per
compressed byte must fit in the file; the laszip VLR must declare a chunk size > 0 and items
whose sizes add up to the point record; ``.las`` needs ``point_count x record_length`` bytes of
point data, and no more than that plus less than one record (a header count below the records
is refused rather than dropping points); scales must be finite and non-zero, offsets finite;
``.laz`` may decompress to at most ``LAZ_MAX_RATIO = 100`` times its point data
(real LiDAR compresses 4-15x; a larger ratio is a corrupt header or a decompression bomb).

Shapes:
    points ``[N, 3]`` float64 (large offset) or float32; colors ``[N, 3]``; labels ``[N]``;
    fields ``[N]`` each.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from .cloud import PointCloud
from .fields import pick_fields
from .source import read_file_bytes

__all__ = ["read_las", "LAZ_MAX_RATIO", "INSTALL_HINT"]

#: a .laz file may decompress to at most this many times its compressed point data
LAZ_MAX_RATIO = 100
#: what to run when laspy / lazrs are missing
INSTALL_HINT = "pip install 'gridify[las]'"


def _laspy(p: Path, compressed: bool) -> Any:
    """The laspy module (with a LAZ backend when ``compressed``), else a ValueError naming the install."""
    try:
        import laspy
    except ImportError:
        raise ValueError(
            f"{p}: reading {p.suffix.lower()} files needs the optional package laspy: {INSTALL_HINT}"
        ) from None
    if compressed and not laspy.LazBackend.Lazrs.is_available():
        raise ValueError(f"{p}: reading compressed LAS (.laz) needs the optional package lazrs: {INSTALL_HINT}")
    return laspy


def _check_layout(p: Path, data: bytes) -> None:
    """The header block, VLRs and EVLRs the fixed header declares must fit in ``data`` (checked before laspy)."""
    if len(data) < 227:
        raise ValueError(f"{p}: truncated LAS: {len(data)} bytes, the header alone takes 227")
    if data[:4] != b"LASF":
        raise ValueError(f"{p}: not a LAS file (does not start with 'LASF')")
    header_size, offset, nvlr = struct.unpack_from("<HII", data, 94)
    if not 227 <= header_size <= len(data) or not header_size <= offset <= len(data):
        raise ValueError(
            f"{p}: corrupt LAS header: header size {header_size} / point data offset {offset} "
            f"do not fit a {len(data)}-byte file"
        )
    if nvlr * 54 > offset - header_size:
        raise ValueError(
            f"{p}: corrupt LAS header: {nvlr} VLRs (at least 54 bytes each) declared in the "
            f"{offset - header_size} bytes between the header and the point data"
        )
    if data[25] >= 4 and header_size >= 375:  # LAS 1.4: extended VLRs
        start, nevlr = struct.unpack_from("<QI", data, 235)
        if nevlr and not (offset <= start and nevlr * 60 <= len(data) - start):
            raise ValueError(
                f"{p}: corrupt LAS header: {nevlr} EVLRs (at least 60 bytes each) declared at "
                f"offset {start} of a {len(data)}-byte file"
            )


def _laszip_problem(record: bytes, point_size: int) -> Optional[str]:
    """What is wrong with a laszip VLR's record (lazrs panics or divides by zero on it), or None."""
    if len(record) < 34:
        return f"the laszip VLR holds {len(record)} bytes, fewer than 34"
    if struct.unpack_from("<I", record, 12)[0] == 0:
        return "the laszip VLR declares a chunk size of 0"
    items = struct.unpack_from("<H", record, 32)[0]
    if len(record) < 34 + 6 * items:
        return f"the laszip VLR declares {items} items but holds only {(len(record) - 34) // 6}"
    sizes = [struct.unpack_from("<H", record, 36 + 6 * i)[0] for i in range(items)]
    if not sizes or 0 in sizes or sum(sizes) != point_size:
        return f"the laszip VLR's item sizes {sizes} do not add up to the {point_size}-byte point record"
    return None


def _check_laz(p: Path, header: Any, data: bytes) -> None:
    """A LAZ needs a consistent laszip VLR (:func:`_laszip_problem`) and a chunk table of at most one
    chunk per compressed byte (lazrs allocates the table as declared)."""
    laszip = next((v for v in header.vlrs if v.user_id == "laszip encoded" and v.record_id == 22204), None)
    problem = _laszip_problem(bytes(getattr(laszip, "record_data", b"") or b""), int(header.point_format.size))
    if laszip is None or problem:
        raise ValueError(f"{p}: corrupt LAZ: {problem if laszip is not None else 'no laszip VLR'}")
    start = int(header.offset_to_point_data)
    if start + 8 > len(data):
        raise ValueError(f"{p}: truncated LAZ: no chunk table offset after the header")
    table = struct.unpack_from("<q", data, start)[0]
    if table == -1 and len(data) >= 8:  # written at the end of the file instead
        table = struct.unpack_from("<q", data, len(data) - 8)[0]
    if not start + 8 <= table <= len(data) - 8:
        raise ValueError(f"{p}: corrupt LAZ: chunk table offset {table} outside the {len(data)}-byte file")
    chunks = struct.unpack_from("<I", data, table + 4)[0]
    if chunks > table - start - 8:
        raise ValueError(
            f"{p}: corrupt LAZ: chunk table declares {chunks} chunks for {table - start - 8} bytes of compressed points"
        )


def _check_point_sizes(p: Path, header: Any, size: int) -> None:
    """Fail before reading when the header declares more point data than the file can hold."""
    count, record = int(header.point_count), int(header.point_format.size)
    start = int(header.offset_to_point_data)
    evlr = int(getattr(header, "start_of_first_evlr", 0) or 0)
    end = evlr if start < evlr <= size else size
    have = max(0, end - start)
    need = count * record
    if header.are_points_compressed:
        if need > LAZ_MAX_RATIO * have:
            raise ValueError(
                f"{p}: corrupt LAZ: header declares {count} points of {record} bytes "
                f"({need} bytes) but {have} bytes of compressed data decompress to at most "
                f"{LAZ_MAX_RATIO * have} (limit {LAZ_MAX_RATIO}x)"
            )
    elif need > have:
        raise ValueError(
            f"{p}: truncated LAS: header declares {count} points of {record} bytes ({need} "
            f"bytes) but only {have} bytes of point data follow the header"
        )
    elif have - need >= record:
        raise ValueError(
            f"{p}: corrupt LAS header: it declares {count} points but {have // record} records of "
            f"{record} bytes follow it ({have} bytes of point data); refusing rather than dropping "
            f"{have // record - count} points (fix the header's point count)"
        )


def _check_scales(p: Path, header: Any) -> None:
    """A scale of 0 (or a non-finite scale / offset) would collapse every coordinate to the offset."""
    scales, offsets = np.asarray(header.scales, np.float64), np.asarray(header.offsets, np.float64)
    for axis, scale, offset in zip("xyz", scales, offsets):
        if not (np.isfinite(scale) and scale != 0 and np.isfinite(offset)):
            raise ValueError(
                f"{p}: corrupt LAS header: {axis} scale {scale!r} / offset {offset!r}; coordinates are "
                f"X * scale + offset, so a zero or non-finite scale (or offset) makes every {axis} "
                f"the same (or NaN)"
            )


def _colors(las: Any, names: Sequence[str]) -> Optional[np.ndarray]:
    if not {"red", "green", "blue"} <= set(names):
        return None
    # integers: PointCloud puts them on the unit scale (by 255, or by 65535 when a value exceeds 255)
    return np.stack([np.asarray(las[c]) for c in ("red", "green", "blue")], 1)


def read_las(p: Path, fields: Union[None, str, Sequence[str]] = None, labels_from: Optional[str] = None) -> PointCloud:
    """Read the LAS / LAZ file ``p`` (see the module docstring); ``fields`` / ``labels_from`` as in read_points."""
    data = read_file_bytes(p)
    laspy = _laspy(p, compressed=False)
    _check_layout(p, data)
    try:
        # lazrs' single-threaded decoder: the parallel one allocates a whole chunk (a size the file
        # declares) per thread and aborts the process when that fails
        reader = laspy.open(io.BytesIO(data), laz_backend=laspy.LazBackend.Lazrs)
    except Exception as exc:
        raise ValueError(f"{p}: not a valid LAS file ({type(exc).__name__}: {exc})") from None
    with reader:
        header = reader.header
        _check_point_sizes(p, header, len(data))
        _check_scales(p, header)
        if header.are_points_compressed:
            _laspy(p, compressed=True)
            _check_laz(p, header, data)
        try:
            las = reader.read()
        except Exception as exc:
            kind = "LAZ" if header.are_points_compressed else "LAS"
            raise ValueError(f"{p}: corrupt or truncated {kind} point data ({type(exc).__name__}: {exc})") from None
    if len(las.points) != int(header.point_count):
        raise ValueError(
            f"{p}: truncated LAS: header declares {int(header.point_count)} points, the file holds {len(las.points)}"
        )
    names = list(las.point_format.dimension_names)
    scalars = {n: np.asarray(las[n]) for n in names if n not in ("X", "Y", "Z")}
    labels, extra = pick_fields(p, scalars, fields, labels_from, skip=("red", "green", "blue"))
    pts = np.stack([np.asarray(las.x), np.asarray(las.y), np.asarray(las.z)], 1).astype(np.float64)
    return PointCloud(pts, colors=_colors(las, names), labels=labels, source=str(p), fields=extra)
