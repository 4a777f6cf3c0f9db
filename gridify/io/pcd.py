"""Reader of PCL point clouds (``.pcd``), with ``DATA ascii``, ``binary`` and ``binary_compressed``.

Layout: an ascii header of ``KEY value...`` lines (``FIELDS``, ``SIZE``, ``TYPE``, ``COUNT``,
``WIDTH``, ``HEIGHT``, ``POINTS``, ...) ending with the ``DATA`` line, then the points: ascii
rows, packed binary records (one per point, little-endian), or an LZF-compressed block
(``<u4`` compressed size, ``<u4`` uncompressed size, then the data stored field by field).
Reading is three steps: the header is parsed into a ``_PcdHeader`` record, one decoder per
``DATA`` kind turns the data into a structured array, and the fields are mapped to a
:class:`PointCloud` (``x y z``; normals ``normal_x``... or ``nx``...; colours packed in
``rgb``/``rgba`` or as ``r g b``; labels ``label``/``class``/...).

Sizes are checked against the file before anything is allocated: ``binary`` needs
``N x record`` bytes after the header; ``ascii`` needs ``N x sum(COUNT)`` values, hence at least
``2 N sum(COUNT) - 1`` bytes; ``binary_compressed`` needs an uncompressed size of exactly
``N x record`` bytes, at most ``LZF_MAX_RATIO = 88`` times the compressed size (an LZF back
reference of 3 bytes yields at most 264: ``264 / 3 = 88``; literal runs never expand). Data
beyond the declared points (more ascii values, or at least one more binary record that is not
padding) is refused: reading the declared points only would drop the rest silently.

Shapes:
    points ``[N, 3]`` (``N`` = ``POINTS``, or ``WIDTH * HEIGHT``); normals/colors ``[N, 3]``;
    labels ``[N]``; fields ``[N]`` each (the ``fields`` option).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .cloud import PointCloud, clip_unit_colors, color_scale
from .fields import auto_labels, pick_fields
from .source import read_file_bytes
from .tokens import ascii_floats, min_ascii_bytes

__all__ = ["lzf_decompress", "read_pcd", "LZF_MAX_RATIO"]

#: the most an LZF stream can expand: a 3-byte back reference yields at most 264 bytes
LZF_MAX_RATIO = 88

_PCD_TYPES = {
    ("F", 4): "f4",
    ("F", 8): "f8",
    ("I", 1): "i1",
    ("I", 2): "i2",
    ("I", 4): "i4",
    ("I", 8): "i8",
    ("U", 1): "u1",
    ("U", 2): "u2",
    ("U", 4): "u4",
    ("U", 8): "u8",
}


@dataclass
class _PcdHeader:
    """The parsed header of a PCD file.

    Attributes:
        fields: the ``FIELDS`` names as written (padding ``_`` may repeat).
        counts: the ``COUNT`` of each field.
        num_points: ``POINTS`` (or ``WIDTH * HEIGHT``).
        data_kind: ``ascii``, ``binary`` or ``binary_compressed`` (lower case, not yet checked).
        dtype: one point's record; repeated field names get ``__1``, ``__2``... suffixes.
        data_start: offset of the first byte after the ``DATA`` line.
    """

    fields: List[str]
    counts: List[int]
    num_points: int
    data_kind: str
    dtype: np.dtype
    data_start: int


def lzf_decompress(data: bytes, out_len: int) -> bytes:
    """Decompress an LZF stream (the codec of PCD ``binary_compressed``) of known output size.

    ``out_len`` may be at most ``LZF_MAX_RATIO * len(data)`` (88x, LZF's largest expansion): a
    larger one is refused before anything is allocated.

    Raises:
        ValueError: bad arguments, an impossible ``out_len``, or a corrupt stream.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"lzf_decompress: data must be bytes, got {type(data).__name__}")
    if isinstance(out_len, bool) or not isinstance(out_len, (int, np.integer)) or out_len < 0:
        raise ValueError(f"lzf_decompress: out_len must be a non-negative integer, got {out_len!r}")
    data, out_len = bytes(data), int(out_len)
    if out_len > LZF_MAX_RATIO * len(data):
        raise ValueError(
            f"lzf_decompress: {len(data)} compressed bytes cannot decode to {out_len} bytes "
            f"(LZF expands at most {LZF_MAX_RATIO}x)"
        )
    return _lzf_unchecked(data, out_len)


def _lzf_unchecked(data: bytes, out_len: int) -> bytes:
    """The LZF decoder; ``out_len <= LZF_MAX_RATIO * len(data)`` is the caller's check."""
    out = bytearray(out_len)
    ip = op = 0
    n = len(data)
    while ip < n:
        ctrl = data[ip]
        ip += 1
        if ctrl < 32:  # literal run of ctrl + 1 bytes
            ln = ctrl + 1
            if ip + ln > n or op + ln > out_len:
                raise ValueError("LZF literal run past the end of the data")
            out[op : op + ln] = data[ip : ip + ln]
            ip += ln
            op += ln
            continue
        ln = ctrl >> 5  # back reference
        ref = op - ((ctrl & 0x1F) << 8) - 1
        if ln == 7:
            if ip >= n:
                raise ValueError("LZF stream ends inside a back reference")
            ln += data[ip]
            ip += 1
        if ip >= n:
            raise ValueError("LZF stream ends inside a back reference")
        ref -= data[ip]
        ip += 1
        ln += 2
        if ref < 0 or op + ln > out_len:
            raise ValueError("LZF back reference out of range")
        if ref + ln <= op:
            out[op : op + ln] = out[ref : ref + ln]
        else:  # an overlapping copy repeats the last op - ref bytes
            period = bytes(out[ref:op])
            out[op : op + ln] = (period * (ln // len(period) + 1))[:ln]
        op += ln
    if op != out_len:
        raise ValueError(f"LZF stream decoded to {op} bytes, expected {out_len}")
    return bytes(out)


# --------------------------------------------------------------------------------------
# header
# --------------------------------------------------------------------------------------
def _header_lines(p: Path, raw: bytes) -> Tuple[Dict[str, List[str]], str, int]:
    """``({KEY: values}, data kind, offset after the DATA line)``."""
    header: Dict[str, List[str]] = {}
    pos = 0
    while pos < len(raw):
        end = raw.find(b"\n", pos)
        if end < 0:
            end = len(raw)
        line = raw[pos:end].decode("latin-1").strip()
        pos = end + 1
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        key = parts[0].upper()
        if key == "DATA":
            if len(parts) < 2:
                raise ValueError(f"{p}: PCD 'DATA' line names no data kind")
            return header, parts[1].lower(), pos
        if not re.fullmatch(r"[A-Z_]+", key):
            raise ValueError(f"{p}: not a PCD file (unexpected header line {line[:60]!r})")
        header[key] = parts[1:]
    raise ValueError(f"{p}: PCD header has no 'DATA' line (truncated or not a PCD file)")


def _point_fields(
    p: Path, fields: List[str], types: List[str], sizes: List[int], counts: List[int]
) -> List[Tuple[str, str, Tuple[int, ...]]]:
    """One point's little-endian record, as dtype fields; repeated names get ``__k`` suffixes."""
    dtypes = []
    seen: Dict[str, int] = {}
    for name, t, s, c in zip(fields, types, sizes, counts):
        key = (t.upper(), s)
        if key not in _PCD_TYPES:
            raise ValueError(f"{p}: unsupported PCD field type {t}{s} for field {name!r}")
        k = seen.get(name, 0)
        seen[name] = k + 1
        fname = name if k == 0 else f"{name}__{k}"  # padding fields '_' repeat
        dtypes.append((fname, "<" + _PCD_TYPES[key], (c,) if c > 1 else ()))
    return dtypes


def _parse_pcd_header(p: Path, raw: bytes) -> _PcdHeader:
    """Parse and check the header of the PCD file ``p`` whose bytes are ``raw``."""
    header, data_kind, start = _header_lines(p, raw)
    fields = header.get("FIELDS") or header.get("COLUMNS")
    if not fields:
        raise ValueError(f"{p}: PCD header has no FIELDS line")
    nf = len(fields)
    sizes = header.get("SIZE", ["4"] * nf)
    types = header.get("TYPE", ["F"] * nf)
    counts = header.get("COUNT", ["1"] * nf)
    if not (len(sizes) == len(types) == len(counts) == nf):
        raise ValueError(
            f"{p}: PCD header FIELDS/SIZE/TYPE/COUNT have different lengths "
            f"({nf}/{len(sizes)}/{len(types)}/{len(counts)})"
        )
    try:
        sizes_i = [int(s) for s in sizes]
        counts_i = [int(c) for c in counts]
        if "POINTS" in header:
            npts = int(header["POINTS"][0])
        else:
            npts = int(header["WIDTH"][0]) * int(header.get("HEIGHT", ["1"])[0])
    except (ValueError, KeyError, IndexError):
        raise ValueError(f"{p}: PCD header has a malformed SIZE/COUNT/POINTS/WIDTH entry") from None
    if npts < 0:
        raise ValueError(f"{p}: PCD header declares a negative point count")
    if any(c < 1 for c in counts_i):
        raise ValueError(f"{p}: PCD header COUNT entries must be positive, got {counts}")
    spec = _point_fields(p, fields, types, sizes_i, counts_i)
    try:
        dtype = np.dtype(spec)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{p}: PCD header declares an impossible field layout (COUNT {counts}: {exc})") from None
    return _PcdHeader(fields, counts_i, npts, data_kind, dtype, start)


# --------------------------------------------------------------------------------------
# decoders: the bytes after the header -> a structured array of header.num_points records
# --------------------------------------------------------------------------------------
def _decode_ascii(p: Path, body: bytes, hdr: _PcdHeader) -> np.ndarray:
    npts = hdr.num_points
    per = int(sum(hdr.counts))
    need = npts * per
    if len(body) < min_ascii_bytes(need):  # before parsing: every value needs a character and a separator
        raise ValueError(
            f"{p}: truncated PCD: header declares {npts} points x {per} values, but the "
            f"{len(body)} bytes after the header hold fewer than {need} values"
        )
    vals = ascii_floats(p, "PCD ascii data", body)
    if len(vals) < need:
        raise ValueError(
            f"{p}: truncated PCD: header declares {npts} points x {per} values, found only {len(vals)} values"
        )
    if len(vals) > need:
        raise ValueError(
            f"{p}: PCD header declares {npts} points x {per} values but the data holds {len(vals)} "
            f"values ({(len(vals) - need) / per:g} points more); refusing rather than dropping them "
            f"(fix POINTS / WIDTH / HEIGHT)"
        )
    vals = vals.reshape(npts, per)
    arr = np.zeros(npts, dtype=hdr.dtype)
    col = 0
    for fname, c in zip(hdr.dtype.names, hdr.counts):
        with np.errstate(invalid="ignore", over="ignore"):  # e.g. NaN into an integer field
            arr[fname] = vals[:, col : col + c].reshape(arr[fname].shape)
        col += c
    return arr


def _decode_binary(p: Path, body: bytes, hdr: _PcdHeader) -> np.ndarray:
    npts = hdr.num_points
    need = npts * hdr.dtype.itemsize
    if len(body) < need:
        raise ValueError(
            f"{p}: truncated PCD: header declares {npts} points ({need} bytes of "
            f"binary data) but only {len(body)} bytes follow the header"
        )
    extra = body[need:]
    if len(extra) >= hdr.dtype.itemsize and extra.strip(b"\0 \t\r\n"):
        raise ValueError(
            f"{p}: PCD header declares {npts} points ({need} bytes of binary data) but {len(body)} bytes "
            f"follow the header (room for {len(extra) // hdr.dtype.itemsize} more points); refusing "
            f"rather than dropping them (fix POINTS / WIDTH / HEIGHT)"
        )
    return np.frombuffer(body, dtype=hdr.dtype, count=npts)


def _decode_binary_compressed(p: Path, body: bytes, hdr: _PcdHeader) -> np.ndarray:
    npts, dt = hdr.num_points, hdr.dtype
    if len(body) < 8:
        raise ValueError(f"{p}: truncated PCD: binary_compressed data has no size header")
    csize, usize = (int(v) for v in np.frombuffer(body[:8], dtype="<u4"))
    need = npts * dt.itemsize
    if usize != need:
        raise ValueError(
            f"{p}: corrupt PCD: uncompressed size {usize} does not match {npts} points x {dt.itemsize} bytes"
        )
    if len(body) < 8 + csize:
        raise ValueError(
            f"{p}: truncated PCD: compressed block of {csize} bytes but only {len(body) - 8} bytes present"
        )
    if usize > LZF_MAX_RATIO * csize:  # before allocating the output
        raise ValueError(
            f"{p}: corrupt PCD: header declares {npts} points ({usize} bytes) but a "
            f"compressed block of {csize} bytes holds at most {LZF_MAX_RATIO * csize} "
            f"(LZF expands at most {LZF_MAX_RATIO}x)"
        )
    try:
        flat = _lzf_unchecked(body[8 : 8 + csize], usize)
    except ValueError as exc:
        raise ValueError(f"{p}: corrupt PCD binary_compressed data ({exc})") from None
    # compressed data is stored field by field (all x, then all y, ...)
    arr = np.zeros(npts, dtype=dt)
    off = 0
    for fname in dt.names:
        sub = dt[fname]
        nbytes = sub.itemsize * npts
        arr[fname] = np.frombuffer(flat, dtype=sub.base, count=nbytes // max(1, sub.base.itemsize), offset=off).reshape(
            arr[fname].shape
        )
        off += nbytes
    return arr


_DECODERS: Dict[str, Callable[[Path, bytes, _PcdHeader], np.ndarray]] = {
    "ascii": _decode_ascii,
    "binary": _decode_binary,
    "binary_compressed": _decode_binary_compressed,
}


# --------------------------------------------------------------------------------------
# fields -> PointCloud
# --------------------------------------------------------------------------------------
def _pcd_colors(arr: np.ndarray) -> Optional[np.ndarray]:
    """Colours in ``[0, 1]`` from a packed ``rgb``/``rgba`` field or ``r g b`` fields, or None."""
    names = set(arr.dtype.names)
    for ck in ("rgb", "rgba"):
        if ck in names:
            packed = np.ascontiguousarray(arr[ck]).reshape(-1)
            packed = packed.view(np.uint32) if packed.dtype.itemsize == 4 else packed.astype(np.uint32)
            return np.stack([(packed >> 16) & 255, (packed >> 8) & 255, packed & 255], 1) / 255.0
    if {"r", "g", "b"} <= names:
        block = np.stack([arr["r"], arr["g"], arr["b"]], 1)
        return clip_unit_colors(block.astype(np.float64) / (color_scale(block) or 255.0))
    return None


def _pcd_to_cloud(
    p: Path, arr: np.ndarray, hdr: _PcdHeader, fields: Union[None, str, Sequence[str]], labels_from: Optional[str]
) -> PointCloud:
    """Map the fields of the decoded points to a :class:`PointCloud` (``fields``/``labels_from``: read_points)."""
    names = set(arr.dtype.names)
    if not {"x", "y", "z"} <= names:
        raise ValueError(f"{p}: PCD has no x y z fields (fields: {hdr.fields})")
    pts = np.stack([arr["x"], arr["y"], arr["z"]], axis=1)  # float64 coordinates stay float64 (cloud.py)
    normals = None
    for trio in (("normal_x", "normal_y", "normal_z"), ("nx", "ny", "nz")):
        if set(trio) <= names:
            normals = np.stack([arr[k] for k in trio], axis=1)
            break
    scalars = {k: arr[k] for k in arr.dtype.names if arr[k].ndim == 1 and not k.startswith("_")}
    labels, extra = pick_fields(
        p,
        scalars,
        fields,
        labels_from,
        skip=("x", "y", "z", "normal_x", "normal_y", "normal_z", "nx", "ny", "nz", "rgb", "rgba", "r", "g", "b"),
    )
    ignored: Dict[str, str] = {}
    if labels_from is None:  # a non-integer 'label' / 'class' field is ignored, named, never truncated
        found = {lk: np.asarray(arr[lk]).reshape(hdr.num_points, -1)[:, 0] for lk in _LABEL_NAMES if lk in names}
        labels, ignored = auto_labels(p, found, _LABEL_NAMES)
    return PointCloud(pts, normals, _pcd_colors(arr), labels, str(p), extra, ignored=ignored)


#: the PCD fields read as labels when no ``labels_from`` is given (the first present)
_LABEL_NAMES = ("label", "labels", "class", "object", "semantic")


def read_pcd(p: Path, fields: Union[None, str, Sequence[str]] = None, labels_from: Optional[str] = None) -> PointCloud:
    """Read the PCD file ``p`` (see the module docstring); ``fields`` / ``labels_from`` as in read_points."""
    raw = read_file_bytes(p)
    hdr = _parse_pcd_header(p, raw)
    decode = _DECODERS.get(hdr.data_kind)
    if decode is None:
        raise ValueError(f"{p}: unsupported PCD DATA kind {hdr.data_kind!r} (ascii, binary, binary_compressed)")
    return _pcd_to_cloud(p, decode(p, raw[hdr.data_start :], hdr), hdr, fields, labels_from)
