"""Readers of NumPy files: ``.npy`` (one array) and ``.npz`` (named arrays), never unpickling.

Layout: a ``.npy`` holds an ``[N, C]`` numeric table, interpreted like text columns by
:func:`~gridify.io.columns.table_to_cloud`, or a structured array with ``x y z`` (and optional
``nx ny nz``, ``label``/``class``) fields. A ``.npz`` (a zip archive of ``.npy`` members) holds
the points under a key such as ``pos``/``points`` (``[N, >=3]``) and optional normals, colours
and per-point labels under keys such as ``normal``, ``color``, ``label``/``part_label``.

Nothing is unpickled: an object array (which only pickle can load, and unpickling can run
code) or a file that is a pickle is refused, saying so. The ``.npy`` header is parsed here,
not by ``np.load``, and its sizes are checked before anything is allocated:

    prod(shape) x itemsize  <=  bytes after the header          (.npy, and each .npz member)
    bytes after the header  <  prod(shape) x itemsize + itemsize  (no values beyond the shape)
    a member's uncompressed size  <=  NPZ_MAX_EXPANSION x the archive's size   (100x)

An array is then a view of the bytes read (``np.frombuffer``); a member is decompressed only
up to the size it declares.

Shapes:
    points ``[N, 3]``; normals/colors ``[N, 3]``; labels ``[N]`` (a per-file label is dropped).
"""

from __future__ import annotations

import io
import math
import pickletools
import zipfile
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from .._files import PathLike
from .cloud import PointCloud, clip_unit_colors, color_scale
from .columns import table_to_cloud
from .source import read_file_bytes

__all__ = ["read_npy", "read_npz", "read_npy_array", "parse_npy", "NPZ_MAX_EXPANSION"]

#: an .npz member may decompress to at most this many times the archive's size
NPZ_MAX_EXPANSION = 100
_MAGIC = b"\x93NUMPY"
_PICKLED = (
    "contains pickled Python objects; refusing to load it (allow_pickle=False: unpickling can run arbitrary code)"
)


def _is_pickle(data: bytes) -> bool:
    """``data`` is one complete pickle stream (parsed opcode by opcode, nothing is executed)."""
    try:
        for op, _, pos in pickletools.genops(io.BytesIO(data)):
            if op.name == "STOP":
                return pos == len(data) - 1
    except Exception:  # noqa: BLE001 - any parse error: not a pickle
        return False
    return False


def _not_npy(p: Path, what: str, data: bytes) -> ValueError:
    if _is_pickle(data):
        return ValueError(f"{p}: {what}{_PICKLED}")
    if data.startswith(b"PK\x03\x04"):
        return ValueError(f"{p}: {what}is a zip archive (an .npz?), not a .npy file")
    return ValueError(f"{p}: {what}not a .npy file (it does not start with the \\x93NUMPY magic bytes)")


def parse_npy(p: Path, what: str, data: bytes) -> np.ndarray:
    """The array of the ``.npy`` bytes ``data`` (a view of them), its header's sizes checked first.

    ``what`` prefixes the messages (``""`` for a ``.npy`` file, ``"array 'pos': "`` for an .npz member).
    """
    fp = io.BytesIO(data)
    if not data.startswith(_MAGIC):
        raise _not_npy(p, what, data)
    try:
        version = np.lib.format.read_magic(fp)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(fp, max_header_size=100_000)
    except (ValueError, SyntaxError, TypeError, OverflowError, EOFError, MemoryError, RecursionError) as exc:
        raise ValueError(f"{p}: {what}not a valid .npy file (bad header: {exc})") from None
    if dtype.hasobject:
        raise ValueError(f"{p}: {what}{_PICKLED}")
    count = math.prod(shape)
    need, have = count * dtype.itemsize, len(data) - fp.tell()
    if need > have:
        raise ValueError(
            f"{p}: {what}truncated .npy: header declares shape {tuple(shape)} of {dtype} "
            f"({need} bytes) but only {have} bytes follow the header"
        )
    if dtype.itemsize == 0:
        raise ValueError(f"{p}: {what}the array has a zero-size dtype ({dtype})")
    if have - need >= dtype.itemsize:
        raise ValueError(
            f"{p}: {what}header declares shape {tuple(shape)} of {dtype} ({need} bytes) but {have} bytes "
            f"follow the header (room for {(have - need) // dtype.itemsize} more values); refusing "
            f"rather than dropping them"
        )
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=fp.tell())
    return flat.reshape(shape, order="F" if fortran else "C")


def read_npy_array(path: PathLike) -> np.ndarray:
    """The array of the ``.npy`` file ``path`` as it is stored (any shape and dtype; a writable copy), never
    unpickled, its header's sizes checked before anything is allocated (:func:`parse_npy`); errors name the
    file."""
    p = Path(path)
    return np.array(parse_npy(p, "", read_file_bytes(p)))


def _structured(p: Path, arr: np.ndarray) -> PointCloud:
    names = {nm.lower(): nm for nm in arr.dtype.names}
    if not {"x", "y", "z"} <= names.keys():
        raise ValueError(f"{p}: structured array without x, y, z fields (has {arr.dtype.names})")
    get = lambda ks: (
        np.stack([arr[names[k]] for k in ks], 1).astype(np.float64)  # noqa: E731
        if set(ks) <= names.keys()
        else None
    )
    labels = next((arr[names[k]] for k in ("label", "class") if k in names), None)
    return PointCloud(get("xyz"), get(("nx", "ny", "nz")), None, labels, str(p))


def read_npy(p: Path, columns: Optional[Sequence[str]] = None) -> PointCloud:
    """Read the ``.npy`` file ``p``: a numeric table (``columns`` names its columns) or a structured array."""
    arr = parse_npy(p, "", read_file_bytes(p))
    if arr.dtype.names:  # structured array with named fields
        return _structured(p, arr)
    if arr.dtype.kind not in "fiub":
        raise ValueError(f"{p}: expected a numeric array, got dtype {arr.dtype}")
    return table_to_cloud(arr, p, columns)


_NPZ_POINTS = ("pos", "points", "point", "xyz", "vertices", "verts", "coords", "data", "pc", "cloud")
_NPZ_NORMALS = ("normal", "normals", "norm", "norms", "nxyz")
_NPZ_COLORS = ("color", "colors", "colour", "colours", "rgb")
_NPZ_LABELS = (
    "label",
    "labels",
    "part_label",
    "part_labels",
    "seg",
    "seg_label",
    "sem_label",
    "semantic_label",
    "pid",
    "y",
    "target",
)


class _Archive:
    """The members of an ``.npz`` (a zip of ``.npy`` files), each read with its size checked first."""

    def __init__(self, p: Path, data: bytes) -> None:
        self.p, self.size = p, len(data)
        try:
            self.zf = zipfile.ZipFile(io.BytesIO(data))
            infos = self.zf.infolist()
        except Exception as exc:  # noqa: BLE001 - BadZipFile, struct errors, bad sizes...
            raise ValueError(f"{p}: corrupt or truncated numpy file (not a valid .npz zip archive: {exc})") from None
        self.members: Dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            self.members.setdefault(key, info)
        self.keys = {k.lower(): k for k in self.members}

    def load(self, key: str) -> np.ndarray:
        info, what = self.members[key], f"array {key!r}: "
        if info.file_size > NPZ_MAX_EXPANSION * self.size:
            raise ValueError(
                f"{self.p}: {what}declares {info.file_size} bytes uncompressed, more than "
                f"{NPZ_MAX_EXPANSION}x the archive's {self.size} bytes (a zip bomb?); refusing"
            )
        try:
            with self.zf.open(info) as fh:
                raw = fh.read(info.file_size)  # never decompresses past the declared size
        except Exception as exc:  # noqa: BLE001 - zlib errors, bad CRC, encryption, unknown method...
            raise ValueError(f"{self.p}: corrupt or truncated numpy file ({what}{type(exc).__name__}: {exc})") from None
        return np.asarray(parse_npy(self.p, what, raw))

    def find(self, candidates: Sequence[str]) -> Tuple[Optional[str], Optional[np.ndarray]]:
        for c in candidates:
            if c in self.keys:
                return self.keys[c], self.load(self.keys[c])
        return None, None


def read_npz(p: Path) -> PointCloud:
    """Read the ``.npz`` file ``p``: points, normals, colours and labels found by key (module docstring)."""
    archive = _Archive(p, read_file_bytes(p))
    pk, pts = archive.find(_NPZ_POINTS)
    if pts is None:
        raise ValueError(
            f"{p}: no point array found; expected one of the keys {list(_NPZ_POINTS)}, file has {list(archive.members)}"
        )
    if pts.ndim != 2 or pts.shape[1] < 3 or pts.dtype.kind not in "fiub":
        raise ValueError(f"{p}: array {pk!r} must be numeric with shape [N, >=3], got {pts.shape} {pts.dtype}")
    n = len(pts)
    _, normals = archive.find(_NPZ_NORMALS)
    _, colors = archive.find(_NPZ_COLORS)
    _, labels = archive.find(_NPZ_LABELS)
    if pts.shape[1] > 3 and normals is None and colors is None:
        base = table_to_cloud(pts, p)
        normals, colors = base.normals, base.colors
        labels = labels if labels is not None else base.labels
    if colors is not None:
        colors = clip_unit_colors(colors.astype(np.float64) / (color_scale(colors) or 255.0))
    if labels is not None and labels.reshape(-1).shape[0] != n:
        labels = None  # e.g. one class label per file, not per point
    return PointCloud(pts[:, :3], normals, colors, labels, str(p))
