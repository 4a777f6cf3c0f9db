"""Robust point-cloud and mesh file readers, and a PLY writer.

:func:`read_points` reads one file into a :class:`PointCloud` (numpy arrays, float32 points).
Supported extensions (case-insensitive):

==========================  ===============================================================
``.pcd``                    PCL point cloud, ``DATA ascii`` / ``binary`` / ``binary_compressed``
``.ply``                    ascii / binary little- and big-endian; a PLY with faces or
                            triangle strips is a mesh and is surface-sampled
``.xyz .txt .pts .csv``     text, whitespace- or comma-separated columns (see below)
``.xyzn .xyzrgb``           text with explicit ``x y z nx ny nz`` / ``x y z r g b`` columns
``.npy``                    ``[N, C]`` array (``allow_pickle=False``, always)
``.npz``                    arrays under keys such as ``pos``/``points``, ``normal``,
                            ``color``, ``label``/``part_label`` (``allow_pickle=False``)
``.off``                    OFF mesh (also ``OFF490 518 0``: counts on the ``OFF`` line)
``.obj .stl``               meshes, loaded with trimesh
==========================  ===============================================================

Text and ``.npy`` columns are interpreted by count unless ``columns=`` names them: 3 = xyz;
4 = xyz + label (when the 4th column is integral, otherwise ignored, e.g. LiDAR intensity);
6 = xyz + normals (when the extra columns have unit norm) or xyz + colours (values in
[0, 1] or [0, 255]); 7 = the same plus a label column.

Meshes are surface-sampled (area-weighted, seeded) into ``num_samples`` points with face
normals; use :func:`read_mesh` to get the raw ``(vertices, faces)``.

Every corrupt, truncated, empty or unsupported file raises :class:`ValueError` whose message
names the file and the problem; a missing file raises :class:`FileNotFoundError`.
"""
from __future__ import annotations

import io
import os
import re
import tempfile
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "PointCloud",
    "read_points",
    "read_mesh",
    "sample_mesh",
    "write_ply",
    "repair_normals",
    "SUPPORTED_EXTENSIONS",
    "MESH_EXTENSIONS",
]

MESH_EXTENSIONS = (".off", ".obj", ".stl")
TEXT_EXTENSIONS = (".xyz", ".txt", ".pts", ".csv", ".xyzn", ".xyzrgb")
SUPPORTED_EXTENSIONS = (".pcd", ".ply", ".npy", ".npz") + TEXT_EXTENSIONS + MESH_EXTENSIONS


# --------------------------------------------------------------------------------------
# the container
# --------------------------------------------------------------------------------------
@dataclass
class PointCloud:
    """One point cloud read from a file.

    Shapes:
        points: ``[N, 3]`` float32.
        normals: ``[N, 3]`` float32 or None.
        colors: ``[N, 3]`` float32 in ``[0, 1]`` or None.
        labels: ``[N]`` int64 or None.
    """

    points: np.ndarray
    normals: Optional[np.ndarray] = None
    colors: Optional[np.ndarray] = None
    labels: Optional[np.ndarray] = None
    source: str = ""

    def __post_init__(self) -> None:
        where = self.source or "PointCloud"
        pts = np.asarray(self.points)
        if pts.ndim != 2 or pts.shape[1] != 3:
            raise ValueError(f"{where}: points must have shape [N, 3], got {pts.shape}")
        with np.errstate(over="ignore"):  # beyond float32 becomes Inf, which the readers drop/refuse
            self.points = np.ascontiguousarray(pts, dtype=np.float32)
        n = len(self.points)
        for name in ("normals", "colors"):
            arr = getattr(self, name)
            if arr is None:
                continue
            arr = np.asarray(arr)
            if arr.shape != (n, 3):
                raise ValueError(f"{where}: {name} must have shape [{n}, 3], got {arr.shape}")
            setattr(self, name, np.ascontiguousarray(arr, dtype=np.float32))
        if self.labels is not None:
            lab = np.asarray(self.labels).reshape(-1)
            if lab.shape != (n,):
                raise ValueError(f"{where}: labels must have shape [{n}], got {lab.shape}")
            self.labels = lab.astype(np.int64)

    def __len__(self) -> int:
        return int(self.points.shape[0])

    @property
    def num_points(self) -> int:
        return len(self)

    def select(self, index: np.ndarray) -> "PointCloud":
        """The sub-cloud of the rows in ``index`` (a boolean mask or integer indices)."""
        take = lambda a: None if a is None else a[index]  # noqa: E731
        return PointCloud(self.points[index], take(self.normals), take(self.colors),
                          take(self.labels), self.source)


# --------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------
def read_points(path: PathLike, *, num_samples: int = 10_000, seed: int = 0,
                columns: Optional[Sequence[str]] = None, drop_invalid: bool = True) -> PointCloud:
    """Read a point cloud (or surface-sample a mesh) from ``path``.

    Args:
        path: the file; its extension picks the reader (see the module docstring).
        num_samples: number of surface points drawn from a mesh file (OFF/OBJ/STL, or a
            PLY with faces). Ignored for point-cloud files.
        seed: seed of the mesh surface sampling; the same seed gives the same points.
        columns: for text and ``.npy`` files, the meaning of each column, e.g.
            ``("x", "y", "z", "r", "g", "b", "label")``; names are ``x y z nx ny nz r g b
            label`` and ``_`` (ignored). ``None`` infers it from the column count.
        drop_invalid: drop points whose coordinates are NaN/Inf (organised PCD scans mark
            missing returns that way) with a warning; when False such a file raises.

    Returns:
        A :class:`PointCloud`; ``source`` is the path as a string.

    Shapes:
        points ``[N, 3]``; normals/colors ``[N, 3]``; labels ``[N]``.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is empty, truncated, corrupt, or has an unsupported extension.
    """
    p = _check_file(path)
    ext = p.suffix.lower()
    if num_samples is None or int(num_samples) < 1:
        raise ValueError(f"read_points: num_samples must be a positive integer, got {num_samples!r}")
    try:
        if ext == ".pcd":
            cloud = _read_pcd(p)
        elif ext == ".ply":
            cloud = _read_ply(p, num_samples=int(num_samples), seed=seed)
        elif ext in TEXT_EXTENSIONS:
            cloud = _read_text(p, columns=columns)
        elif ext == ".npy":
            cloud = _read_npy(p, columns=columns)
        elif ext == ".npz":
            cloud = _read_npz(p)
        elif ext in MESH_EXTENSIONS:
            vertices, faces = read_mesh(p)
            if len(faces) == 0:  # e.g. an OBJ holding only 'v' lines: a point cloud
                cloud = PointCloud(vertices, source=str(p))
            else:
                pts, nrm = sample_mesh((vertices, faces), int(num_samples), seed=seed)
                cloud = PointCloud(pts, normals=nrm, source=str(p))
        else:
            raise ValueError(f"{p}: unsupported file extension {p.suffix!r}; supported: "
                             f"{', '.join(SUPPORTED_EXTENSIONS)}")
    except FileNotFoundError:
        raise
    except ValueError as exc:
        if str(p) in str(exc):
            raise
        # a ValueError from numpy/trimesh or a helper (sample_mesh...): name the file
        raise ValueError(f"{p}: could not read {ext} file ({exc})") from exc
    except MemoryError as exc:
        raise ValueError(f"{p}: file is too large or its header is corrupt ({exc})") from exc
    except Exception as exc:  # anything from numpy/trimesh/zipfile becomes a named ValueError
        raise ValueError(f"{p}: could not read {ext} file ({type(exc).__name__}: {exc})") from exc
    return _finalize(cloud, p, drop_invalid)


def _check_file(path: PathLike) -> Path:
    if path is None:
        raise ValueError("path must be a file path, got None")
    p = Path(os.fspath(path))
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file")
    if p.is_dir():
        raise ValueError(f"{p}: is a directory, expected a point-cloud or mesh file")
    if p.stat().st_size == 0:
        raise ValueError(f"{p}: file is empty (0 bytes)")
    return p


def _finalize(cloud: PointCloud, p: Path, drop_invalid: bool) -> PointCloud:
    cloud.source = str(p)
    if len(cloud) == 0:
        raise ValueError(f"{p}: file contains no points")
    if cloud.colors is not None:  # the documented range, whatever the file holds
        cloud.colors = np.clip(np.nan_to_num(cloud.colors, nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
    bad = ~np.isfinite(cloud.points).all(axis=1)
    if bad.any():
        if not drop_invalid:
            raise ValueError(f"{p}: {int(bad.sum())} of {len(cloud)} points have NaN/Inf coordinates")
        if bad.all():
            raise ValueError(f"{p}: all {len(cloud)} points have NaN/Inf coordinates")
        warnings.warn(f"{p}: dropped {int(bad.sum())} of {len(cloud)} points with NaN/Inf coordinates",
                      stacklevel=3)
        cloud = cloud.select(~bad)
        cloud.source = str(p)
    return cloud


# --------------------------------------------------------------------------------------
# column interpretation shared by text and .npy
# --------------------------------------------------------------------------------------
_COLUMN_NAMES = {"x", "y", "z", "nx", "ny", "nz", "r", "g", "b", "label", "_"}


def _is_integral(col: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(col)) and np.all(np.abs(col - np.round(col)) < 1e-6))


def _looks_like_normals(block: np.ndarray) -> bool:
    norms = np.linalg.norm(block, axis=1)
    ok = np.isfinite(norms)
    if not ok.any():
        return False
    # the official normal_resampled files mark a few rows with (1, 1, 1): use the median
    return bool(np.median(np.abs(norms[ok] - 1.0)) < 0.05)


def _color_scale(block: np.ndarray) -> Optional[float]:
    """1.0 or 255.0 when ``block`` looks like colours, else None."""
    if block.size == 0:
        return 1.0
    if not np.all(np.isfinite(block)) or block.min() < 0:
        return None
    top = float(block.max())
    if top <= 1.0:
        return 1.0
    if top <= 255.0:
        return 255.0
    return None


def _table_to_cloud(table: np.ndarray, p: Path, columns: Optional[Sequence[str]] = None) -> PointCloud:
    """Split an ``[N, C]`` numeric table into a cloud (see the module docstring)."""
    if table.ndim == 1 and table.size in (3, 4, 6, 7):  # a single row
        table = table.reshape(1, -1)
    if table.ndim != 2:
        raise ValueError(f"{p}: expected a 2-D [N, C] table of numbers, got shape {table.shape}")
    n, c = table.shape
    if n == 0:
        raise ValueError(f"{p}: file contains no points")
    table = table.astype(np.float64, copy=False)
    if columns is not None:
        names = [str(s).lower() for s in columns]
        unknown = sorted(set(names) - _COLUMN_NAMES)
        if unknown:
            raise ValueError(f"{p}: unknown column names {unknown}; use {sorted(_COLUMN_NAMES)}")
        if len(names) != c:
            raise ValueError(f"{p}: columns= names {len(names)} columns but the file has {c}")
        idx = {nm: i for i, nm in enumerate(names) if nm != "_"}
        if not {"x", "y", "z"} <= idx.keys():
            raise ValueError(f"{p}: columns= must include x, y and z")
        pick = lambda keys: table[:, [idx[k] for k in keys]] if set(keys) <= idx.keys() else None  # noqa: E731
        colors = pick(("r", "g", "b"))
        if colors is not None:
            scale = _color_scale(colors) or 255.0
            colors = np.clip(colors / scale, 0.0, 1.0)
        labels = table[:, idx["label"]] if "label" in idx else None
        if labels is not None and not _is_integral(labels):
            raise ValueError(f"{p}: the label column holds non-integer values")
        return PointCloud(pick(("x", "y", "z")), pick(("nx", "ny", "nz")), colors,
                          None if labels is None else labels.astype(np.int64), str(p))
    if c < 3:
        raise ValueError(f"{p}: expected at least 3 columns (x y z), found {c}")
    pts = table[:, :3]
    normals = colors = labels = None
    extra = table[:, 3:]
    if c in (6, 7):
        block = extra[:, :3]
        if _looks_like_normals(block):
            normals = block
        else:
            scale = _color_scale(block)
            if scale is not None:
                colors = block / scale
            else:
                warnings.warn(f"{p}: columns 4-6 are neither unit normals nor colours; ignored",
                              stacklevel=4)
        if c == 7:
            if _is_integral(extra[:, 3]):
                labels = extra[:, 3].astype(np.int64)
            else:
                warnings.warn(f"{p}: column 7 is not an integer label; ignored", stacklevel=4)
    elif c == 4:
        if _is_integral(extra[:, 0]):
            labels = extra[:, 0].astype(np.int64)
    elif c > 3:
        warnings.warn(f"{p}: {c} columns; only x y z (the first 3) are used; pass columns= to "
                      f"name the others", stacklevel=4)
    return PointCloud(pts, normals, colors, labels, str(p))


# --------------------------------------------------------------------------------------
# text
# --------------------------------------------------------------------------------------
def _read_text(p: Path, columns: Optional[Sequence[str]] = None) -> PointCloud:
    ext = p.suffix.lower()
    if columns is None and ext == ".xyzn":
        columns = ("x", "y", "z", "nx", "ny", "nz")
    elif columns is None and ext == ".xyzrgb":
        columns = ("x", "y", "z", "r", "g", "b")
    raw = p.read_bytes()
    if b"\x00" in raw[:4096]:
        raise ValueError(f"{p}: looks like a binary file, expected text with one point per line")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")

    # look at the first two data lines only: separator and an optional point-count header
    head: List[Tuple[int, str]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        s = line.split("#", 1)[0].strip()
        if s:
            head.append((lineno, s))
            if len(head) == 2:
                break
    if not head:
        raise ValueError(f"{p}: file contains no points (only blank or comment lines)")
    comma = any("," in s for _, s in head)

    def split(s: str) -> List[str]:
        return [t for t in re.split(r"[,\s;]+", s) if t] if comma else s.split()

    skip = head[0][0] - 1  # physical lines before the first data line
    first = split(head[0][1])
    if len(first) == 1 and len(head) == 2 and re.fullmatch(r"\d+", first[0]):
        skip = head[1][0] - 1  # a .pts-style header holding only the point count
        first = split(head[1][1])
    ncol = len(first)
    # fast path: numpy's C parser; on any failure the careful path below names the bad line
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. "input contained no data"
            table = np.loadtxt(io.StringIO(text), delimiter="," if comma else None, comments="#",
                               skiprows=skip, ndmin=2, dtype=np.float64)
        if table.shape[1] == ncol:
            return _table_to_cloud(table, p, columns)
    except (ValueError, UserWarning):
        pass
    lines: List[Tuple[int, str]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        s = line.split("#", 1)[0].strip()
        if s and lineno > skip:
            lines.append((lineno, s))
    tokens: List[str] = []
    for lineno, s in lines:
        toks = split(s)
        if len(toks) != ncol:
            raise ValueError(f"{p}: line {lineno} has {len(toks)} columns but the first data line "
                             f"has {ncol} (truncated or corrupt file?)")
        tokens.extend(toks)
    try:
        table = np.array(tokens, dtype=np.float64).reshape(len(lines), ncol)
    except ValueError:
        for lineno, s in lines:  # find the offending line for the message
            try:
                np.array(split(s), dtype=np.float64)
            except ValueError:
                raise ValueError(f"{p}: line {lineno} is not numeric: {s[:80]!r}") from None
        raise
    return _table_to_cloud(table, p, columns)


# --------------------------------------------------------------------------------------
# numpy
# --------------------------------------------------------------------------------------
def _np_load(p: Path) -> Any:
    try:
        return np.load(p, allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise ValueError(f"{p}: contains pickled Python objects; refusing to load it "
                             f"(allow_pickle=False: unpickling can run arbitrary code)") from None
        raise ValueError(f"{p}: not a valid numpy file ({exc})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{p}: corrupt or truncated numpy file ({exc})") from None


def _read_npy(p: Path, columns: Optional[Sequence[str]] = None) -> PointCloud:
    arr = _np_load(p)
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{p}: expected a single array in a .npy file")
    if arr.dtype.names:  # structured array with named fields
        names = {nm.lower(): nm for nm in arr.dtype.names}
        if not {"x", "y", "z"} <= names.keys():
            raise ValueError(f"{p}: structured array without x, y, z fields (has {arr.dtype.names})")
        get = lambda ks: (np.stack([arr[names[k]] for k in ks], 1).astype(np.float64)  # noqa: E731
                          if set(ks) <= names.keys() else None)
        labels = next((arr[names[k]] for k in ("label", "class") if k in names), None)
        return PointCloud(get("xyz"), get(("nx", "ny", "nz")), None, labels, str(p))
    if arr.dtype.kind not in "fiub":
        raise ValueError(f"{p}: expected a numeric array, got dtype {arr.dtype}")
    return _table_to_cloud(np.asarray(arr), p, columns)


_NPZ_POINTS = ("pos", "points", "point", "xyz", "vertices", "verts", "coords", "data", "pc", "cloud")
_NPZ_NORMALS = ("normal", "normals", "norm", "norms", "nxyz")
_NPZ_COLORS = ("color", "colors", "colour", "colours", "rgb")
_NPZ_LABELS = ("label", "labels", "part_label", "part_labels", "seg", "seg_label", "sem_label",
               "semantic_label", "pid", "y", "target")


def _read_npz(p: Path) -> PointCloud:
    data = _np_load(p)
    try:
        keys = {k.lower(): k for k in data.files}

        def get(cands: Sequence[str]) -> Tuple[Optional[str], Optional[np.ndarray]]:
            for c in cands:
                if c in keys:
                    try:
                        return keys[c], np.asarray(data[keys[c]])
                    except ValueError as exc:
                        if "pickle" in str(exc).lower():
                            raise ValueError(f"{p}: array {keys[c]!r} contains pickled Python objects; "
                                             f"refusing to load it (allow_pickle=False)") from None
                        raise
            return None, None

        pk, pts = get(_NPZ_POINTS)
        if pts is None:
            raise ValueError(f"{p}: no point array found; expected one of the keys "
                             f"{list(_NPZ_POINTS)}, file has {list(data.files)}")
        if pts.ndim != 2 or pts.shape[1] < 3:
            raise ValueError(f"{p}: array {pk!r} must have shape [N, >=3], got {pts.shape}")
        n = len(pts)
        _, normals = get(_NPZ_NORMALS)
        _, colors = get(_NPZ_COLORS)
        lk, labels = get(_NPZ_LABELS)
        if pts.shape[1] > 3 and normals is None and colors is None:
            base = _table_to_cloud(pts, p)
            normals, colors = base.normals, base.colors
            labels = labels if labels is not None else base.labels
        if colors is not None:
            colors = colors.astype(np.float64)
            colors = colors / (255.0 if colors.size and colors.max() > 1.0 else 1.0)
        if labels is not None and labels.reshape(-1).shape[0] != n:
            labels = None  # e.g. one class label per file, not per point
        return PointCloud(pts[:, :3], normals, colors, labels, str(p))
    finally:
        data.close()


# --------------------------------------------------------------------------------------
# PCD
# --------------------------------------------------------------------------------------
_PCD_TYPES = {("F", 4): "f4", ("F", 8): "f8", ("I", 1): "i1", ("I", 2): "i2", ("I", 4): "i4",
              ("I", 8): "i8", ("U", 1): "u1", ("U", 2): "u2", ("U", 4): "u4", ("U", 8): "u8"}


def lzf_decompress(data: bytes, out_len: int) -> bytes:
    """Decompress an LZF stream (the codec of PCD ``binary_compressed``) of known output size."""
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
            out[op:op + ln] = data[ip:ip + ln]
            ip += ln
            op += ln
        else:  # back reference
            ln = ctrl >> 5
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
                out[op:op + ln] = out[ref:ref + ln]
            else:  # overlapping copy repeats the pattern byte by byte
                for k in range(ln):
                    out[op + k] = out[ref + k]
            op += ln
    if op != out_len:
        raise ValueError(f"LZF stream decoded to {op} bytes, expected {out_len}")
    return bytes(out)


def _read_pcd(p: Path) -> PointCloud:
    raw = p.read_bytes()
    header: Dict[str, List[str]] = {}
    pos = 0
    data_kind = None
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
            data_kind = parts[1].lower()
            break
        if not re.fullmatch(r"[A-Z_]+", key):
            raise ValueError(f"{p}: not a PCD file (unexpected header line {line[:60]!r})")
        header[key] = parts[1:]
    if data_kind is None:
        raise ValueError(f"{p}: PCD header has no 'DATA' line (truncated or not a PCD file)")
    fields = header.get("FIELDS") or header.get("COLUMNS")
    if not fields:
        raise ValueError(f"{p}: PCD header has no FIELDS line")
    nf = len(fields)
    sizes = header.get("SIZE", ["4"] * nf)
    types = header.get("TYPE", ["F"] * nf)
    counts = header.get("COUNT", ["1"] * nf)
    if not (len(sizes) == len(types) == len(counts) == nf):
        raise ValueError(f"{p}: PCD header FIELDS/SIZE/TYPE/COUNT have different lengths "
                         f"({nf}/{len(sizes)}/{len(types)}/{len(counts)})")
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
    dtypes = []
    seen: Dict[str, int] = {}
    for name, t, s, c in zip(fields, types, sizes_i, counts_i):
        key = (t.upper(), s)
        if key not in _PCD_TYPES:
            raise ValueError(f"{p}: unsupported PCD field type {t}{s} for field {name!r}")
        k = seen.get(name, 0)
        seen[name] = k + 1
        fname = name if k == 0 else f"{name}__{k}"  # padding fields '_' repeat
        dtypes.append((fname, "<" + _PCD_TYPES[key], (c,) if c > 1 else ()))
    try:
        dt = np.dtype(dtypes)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"{p}: PCD header declares an impossible field layout (COUNT {counts}: {exc})") from None
    body = raw[pos:]
    if data_kind == "ascii":
        text = body.decode("latin-1")
        toks = text.split()
        per = int(sum(counts_i))
        if len(toks) < npts * per:
            raise ValueError(f"{p}: truncated PCD: header declares {npts} points x {per} values, "
                             f"found only {len(toks)} values")
        try:
            vals = np.array(toks[:npts * per], dtype=np.float64).reshape(npts, per)
        except ValueError:
            raise ValueError(f"{p}: PCD ascii data contains non-numeric values") from None
        arr = np.zeros(npts, dtype=dt)
        col = 0
        for (fname, _, _), c in zip(dtypes, counts_i):
            arr[fname] = vals[:, col:col + c].reshape(arr[fname].shape)
            col += c
    elif data_kind == "binary":
        need = npts * dt.itemsize
        if len(body) < need:
            raise ValueError(f"{p}: truncated PCD: header declares {npts} points ({need} bytes of "
                             f"binary data) but only {len(body)} bytes follow the header")
        arr = np.frombuffer(body, dtype=dt, count=npts)
    elif data_kind == "binary_compressed":
        if len(body) < 8:
            raise ValueError(f"{p}: truncated PCD: binary_compressed data has no size header")
        csize, usize = np.frombuffer(body[:8], dtype="<u4")
        need = npts * dt.itemsize
        if int(usize) != need:
            raise ValueError(f"{p}: corrupt PCD: uncompressed size {int(usize)} does not match "
                             f"{npts} points x {dt.itemsize} bytes")
        if len(body) < 8 + int(csize):
            raise ValueError(f"{p}: truncated PCD: compressed block of {int(csize)} bytes but only "
                             f"{len(body) - 8} bytes present")
        try:
            flat = lzf_decompress(body[8:8 + int(csize)], int(usize))
        except ValueError as exc:
            raise ValueError(f"{p}: corrupt PCD binary_compressed data ({exc})") from None
        # compressed data is stored field by field (all x, then all y, ...)
        arr = np.zeros(npts, dtype=dt)
        off = 0
        for fname in dt.names:
            sub = dt[fname]
            nbytes = sub.itemsize * npts
            arr[fname] = np.frombuffer(flat[off:off + nbytes], dtype=sub.base).reshape(arr[fname].shape)
            off += nbytes
    else:
        raise ValueError(f"{p}: unsupported PCD DATA kind {data_kind!r} (ascii, binary, "
                         f"binary_compressed)")
    names = set(arr.dtype.names)
    if not {"x", "y", "z"} <= names:
        raise ValueError(f"{p}: PCD has no x y z fields (fields: {fields})")
    pts = np.stack([arr["x"], arr["y"], arr["z"]], axis=1).astype(np.float32)
    normals = None
    for trio in (("normal_x", "normal_y", "normal_z"), ("nx", "ny", "nz")):
        if set(trio) <= names:
            normals = np.stack([arr[k] for k in trio], axis=1)
            break
    colors = None
    for ck in ("rgb", "rgba"):
        if ck in names:
            packed = np.ascontiguousarray(arr[ck]).reshape(-1)
            packed = packed.view(np.uint32) if packed.dtype.itemsize == 4 else packed.astype(np.uint32)
            colors = np.stack([(packed >> 16) & 255, (packed >> 8) & 255, packed & 255], 1) / 255.0
            break
    if colors is None and {"r", "g", "b"} <= names:
        block = np.stack([arr["r"], arr["g"], arr["b"]], 1).astype(np.float64)
        colors = block / (_color_scale(block) or 255.0)
    labels = None
    for lk in ("label", "labels", "class", "object", "semantic"):
        if lk in names:
            labels = np.asarray(arr[lk]).reshape(npts, -1)[:, 0].astype(np.int64)
            break
    return PointCloud(pts, normals, colors, labels, str(p))


# --------------------------------------------------------------------------------------
# PLY
# --------------------------------------------------------------------------------------
_PLY_TYPES = {"char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
              "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4",
              "uint32": "u4", "float": "f4", "float32": "f4", "double": "f8", "float64": "f8"}


@dataclass
class _PlyProp:
    name: str
    dtype: str                       # numpy type code of the value
    count_dtype: Optional[str] = None  # set for list properties


@dataclass
class _PlyElement:
    name: str
    count: int
    props: List[_PlyProp]


def _parse_ply_header(p: Path, raw: bytes) -> Tuple[str, List[_PlyElement], int]:
    if not raw.startswith(b"ply"):
        raise ValueError(f"{p}: not a PLY file (does not start with 'ply')")
    m = re.search(rb"end_header[ \t]*\r?\n", raw[:1 << 20])
    if m is None:
        raise ValueError(f"{p}: PLY header has no 'end_header' line (truncated or corrupt)")
    fmt = None
    elements: List[_PlyElement] = []
    for line in raw[:m.start()].decode("latin-1").splitlines()[1:]:
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
            try:
                if parts[1] == "list":
                    prop = _PlyProp(parts[4], _PLY_TYPES[parts[3]], _PLY_TYPES[parts[2]])
                else:
                    prop = _PlyProp(parts[2], _PLY_TYPES[parts[1]])
            except (IndexError, KeyError):
                raise ValueError(f"{p}: malformed or unsupported PLY property line {line!r}") from None
            elements[-1].props.append(prop)
        else:
            raise ValueError(f"{p}: unexpected PLY header line {line!r}")
    if fmt is None:
        raise ValueError(f"{p}: PLY header has no 'format' line")
    if any(e.count < 0 for e in elements):
        raise ValueError(f"{p}: PLY header declares a negative element count")
    return fmt, elements, m.end()


class _Truncated(Exception):
    pass


def _ply_binary_element(buf: bytes, off: int, el: _PlyElement, endian: str
                        ) -> Tuple[Dict[str, Any], int]:
    """Parse one binary element; returns ``({prop: array or list of arrays}, new_offset)``."""
    n = el.count
    if all(pr.count_dtype is None for pr in el.props):
        dt = np.dtype([(pr.name, endian + pr.dtype) for pr in el.props])
        need = n * dt.itemsize
        if off + need > len(buf):
            raise _Truncated(f"element {el.name!r}: {n} items need {need} bytes, "
                             f"{len(buf) - off} present")
        arr = np.frombuffer(buf, dtype=dt, count=n, offset=off)
        return {pr.name: arr[pr.name] for pr in el.props}, off + need
    if n == 0:
        return {pr.name: [] for pr in el.props}, off
    # try the common fast path: every list has the length of the first item's list
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
            fields.append((pr.name + "__len", cdt.str, ()))
            fields.append((pr.name, endian + pr.dtype, (length,)))
            probe += cdt.itemsize + length * np.dtype(pr.dtype).itemsize
    dt = np.dtype(fields)
    if off + n * dt.itemsize <= len(buf):
        arr = np.frombuffer(buf, dtype=dt, count=n, offset=off)
        if all(np.all(arr[pr.name + "__len"] == dt[pr.name].shape[0])
               for pr in el.props if pr.count_dtype is not None):
            return {pr.name: arr[pr.name] for pr in el.props}, off + n * dt.itemsize
    # general path: variable-length lists, one item at a time
    out: Dict[str, List[Any]] = {pr.name: [] for pr in el.props}
    for _ in range(n):
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


def _ply_ascii_element(toks: List[str], off: int, el: _PlyElement) -> Tuple[Dict[str, Any], int]:
    n = el.count
    if all(pr.count_dtype is None for pr in el.props):
        k = len(el.props)
        if off + n * k > len(toks):
            raise _Truncated(f"element {el.name!r}: {n} items x {k} values, "
                             f"only {len(toks) - off} values left")
        vals = np.array(toks[off:off + n * k], dtype=np.float64).reshape(n, k)
        return {pr.name: vals[:, i] for i, pr in enumerate(el.props)}, off + n * k
    out: Dict[str, List[Any]] = {pr.name: [] for pr in el.props}
    for _ in range(n):
        for pr in el.props:
            if off >= len(toks):
                raise _Truncated(f"element {el.name!r} is cut short")
            if pr.count_dtype is None:
                out[pr.name].append(float(toks[off]))
                off += 1
            else:
                length = int(float(toks[off]))
                off += 1
                if length < 0 or off + length > len(toks):
                    raise _Truncated(f"element {el.name!r} is cut short")
                out[pr.name].append(np.array(toks[off:off + length], dtype=np.float64).astype(np.int64))
                off += length
    return out, off


def _polygons_to_triangles(polys: Any) -> np.ndarray:
    """Fan-triangulate a list (or ``[F, k]`` array) of vertex-index polygons."""
    if isinstance(polys, np.ndarray) and polys.ndim == 2:
        k = polys.shape[1]
        if k < 3:
            return np.zeros((0, 3), np.int64)
        tris = [np.stack([polys[:, 0], polys[:, i], polys[:, i + 1]], 1) for i in range(1, k - 1)]
        return np.concatenate(tris).astype(np.int64)
    out: List[Tuple[int, int, int]] = []
    for poly in polys:
        poly = np.asarray(poly).astype(np.int64)
        for i in range(1, len(poly) - 1):
            out.append((poly[0], poly[i], poly[i + 1]))
    return np.asarray(out, dtype=np.int64).reshape(-1, 3)


def _strips_to_triangles(strips: Any) -> np.ndarray:
    """Decode triangle strips (``-1`` restarts a strip), alternating the winding."""
    out: List[np.ndarray] = []
    for strip in strips:
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


def _read_ply_raw(p: Path) -> Tuple[Dict[str, np.ndarray], Optional[np.ndarray]]:
    """``({vertex property: [V] array}, faces [F, 3] or None)``."""
    raw = p.read_bytes()
    fmt, elements, start = _parse_ply_header(p, raw)
    vertex = next((e for e in elements if e.name == "vertex"), None)
    if vertex is None:
        raise ValueError(f"{p}: PLY has no 'vertex' element")
    parsed: Dict[str, Dict[str, Any]] = {}
    try:
        if fmt == "ascii":
            toks = raw[start:].decode("latin-1").split()
            off = 0
            for el in elements:
                parsed[el.name], off = _ply_ascii_element(toks, off, el)
        else:
            endian = "<" if fmt == "binary_little_endian" else ">"
            off = start
            for el in elements:
                parsed[el.name], off = _ply_binary_element(raw, off, el, endian)
    except _Truncated as exc:
        raise ValueError(f"{p}: truncated PLY ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"{p}: corrupt PLY data ({exc})") from None
    verts = {k: np.asarray(v) for k, v in parsed["vertex"].items()}
    tris: List[np.ndarray] = []
    for el in elements:
        if el.name == "face" and el.count > 0:
            key = next((pr.name for pr in el.props
                        if pr.count_dtype is not None and pr.name in ("vertex_indices", "vertex_index")),
                       None)
            if key is not None:
                tris.append(_polygons_to_triangles(parsed["face"][key]))
        elif el.name == "tristrips" and el.count > 0:
            key = next((pr.name for pr in el.props if pr.count_dtype is not None), None)
            if key is not None:
                tris.append(_strips_to_triangles(parsed["tristrips"][key]))
    faces = np.concatenate(tris) if tris else None
    if faces is not None and len(faces) and (faces.min() < 0 or faces.max() >= vertex.count):
        raise ValueError(f"{p}: PLY faces index vertices outside 0..{vertex.count - 1}")
    return verts, faces


def _read_ply(p: Path, num_samples: int, seed: int) -> PointCloud:
    verts, faces = _read_ply_raw(p)
    if not {"x", "y", "z"} <= verts.keys():
        raise ValueError(f"{p}: PLY vertex element has no x y z properties")
    pts = np.stack([verts["x"], verts["y"], verts["z"]], 1).astype(np.float64)
    if faces is not None and len(faces) > 0:
        sp, sn = sample_mesh((pts, faces), num_samples, seed=seed)
        return PointCloud(sp, sn, source=str(p))
    normals = None
    for trio in (("nx", "ny", "nz"), ("normal_x", "normal_y", "normal_z")):
        if set(trio) <= verts.keys():
            normals = np.stack([verts[k] for k in trio], 1)
            break
    colors = None
    for trio in (("red", "green", "blue"), ("r", "g", "b"), ("diffuse_red", "diffuse_green", "diffuse_blue")):
        if set(trio) <= verts.keys():
            block = np.stack([verts[k] for k in trio], 1)
            scale = 255.0 if block.dtype.kind in "ui" else (_color_scale(block.astype(np.float64)) or 255.0)
            colors = np.clip(block.astype(np.float64) / scale, 0.0, 1.0)
            break
    labels = None
    for lk in ("label", "labels", "class", "scalar_label", "semantic", "part", "segment"):
        if lk in verts:
            labels = np.asarray(verts[lk]).astype(np.int64)
            break
    return PointCloud(pts, normals, colors, labels, str(p))


# --------------------------------------------------------------------------------------
# meshes
# --------------------------------------------------------------------------------------
def _read_off(p: Path) -> Tuple[np.ndarray, np.ndarray]:
    text = p.read_bytes().decode("latin-1")
    lines = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    if not lines:
        raise ValueError(f"{p}: OFF file contains no data")
    head = lines[0]
    if not head.upper().startswith("OFF"):
        raise ValueError(f"{p}: not an OFF file (first line {head[:40]!r} does not start with 'OFF')")
    rest = head[3:].strip()  # ModelNet quirk: 'OFF490 518 0'
    i = 1
    if not rest:
        if len(lines) < 2:
            raise ValueError(f"{p}: truncated OFF file (no vertex/face counts)")
        rest = lines[1]
        i = 2
    try:
        counts = [int(t) for t in rest.split()[:3]]
        nv, nf = counts[0], counts[1]
    except (ValueError, IndexError):
        raise ValueError(f"{p}: malformed OFF counts line {rest[:40]!r}") from None
    if nv < 0 or nf < 0:
        raise ValueError(f"{p}: OFF counts must be non-negative, got {nv} vertices, {nf} faces")
    if len(lines) < i + nv + nf:
        raise ValueError(f"{p}: truncated OFF file: header declares {nv} vertices and {nf} faces "
                         f"but only {len(lines) - i} data lines follow")
    vblock = lines[i:i + nv]
    try:
        vtok = " ".join(vblock).split()
        if len(vtok) == 3 * nv:  # fast path: exactly x y z per line
            vertices = np.array(vtok, dtype=np.float64).reshape(nv, 3)
        else:  # extra per-vertex columns (colours...): keep the first three
            vertices = np.array([ln.split()[:3] for ln in vblock], dtype=np.float64).reshape(nv, 3)
    except ValueError:
        raise ValueError(f"{p}: OFF vertex lines are not three numbers each") from None
    fblock = lines[i + nv:i + nv + nf]
    faces = None
    ftok = " ".join(fblock).split()
    if len(ftok) == 4 * nf:  # fast path: all triangles without colours
        try:
            arr = np.array(ftok, dtype=np.int64).reshape(nf, 4)
            if np.all(arr[:, 0] == 3):
                faces = arr[:, 1:]
        except ValueError:
            faces = None
    if faces is None:
        try:
            polys = []
            for ln in fblock:
                r = ln.split()
                k = int(r[0])
                if k < 0 or len(r) < k + 1:
                    raise ValueError
                polys.append([int(t) for t in r[1:k + 1]])
            faces = _polygons_to_triangles(polys)
        except (ValueError, IndexError):
            raise ValueError(f"{p}: malformed OFF face lines (expected 'k i1 ... ik')") from None
    faces = faces.reshape(-1, 3)
    if len(faces) and (faces.min() < 0 or faces.max() >= nv):
        raise ValueError(f"{p}: OFF faces index vertices outside 0..{nv - 1}")
    return vertices, faces


def read_mesh(path: PathLike) -> Tuple[np.ndarray, np.ndarray]:
    """Read a triangle mesh (``.off``, ``.obj``, ``.stl``, or a ``.ply`` with faces).

    Polygons are fan-triangulated; multi-object files are merged.

    Returns:
        ``(vertices, faces)``.

    Shapes:
        vertices: ``[V, 3]`` float64; faces: ``[F, 3]`` int64 (``F`` may be 0 for an OBJ
        holding only vertices).
    """
    p = _check_file(path)
    ext = p.suffix.lower()
    if ext == ".off":
        return _read_off(p)
    if ext == ".ply":
        verts, faces = _read_ply_raw(p)
        if not {"x", "y", "z"} <= verts.keys():
            raise ValueError(f"{p}: PLY vertex element has no x y z properties")
        pts = np.stack([verts["x"], verts["y"], verts["z"]], 1).astype(np.float64)
        return pts, (faces if faces is not None else np.zeros((0, 3), np.int64))
    if ext in (".obj", ".stl"):
        import trimesh  # light and always installed, but only needed here

        try:
            loaded = trimesh.load(str(p), file_type=ext[1:], force="mesh", process=False)
        except Exception as exc:
            raise ValueError(f"{p}: could not parse {ext} mesh ({type(exc).__name__}: {exc})") from None
        vertices = np.asarray(getattr(loaded, "vertices", np.zeros((0, 3))), dtype=np.float64)
        faces = np.asarray(getattr(loaded, "faces", np.zeros((0, 3))), dtype=np.int64).reshape(-1, 3)
        if len(vertices) == 0:
            raise ValueError(f"{p}: {ext} file contains no vertices (corrupt or not a mesh)")
        return vertices, faces
    raise ValueError(f"{p}: unsupported mesh extension {p.suffix!r}; supported: .off .obj .stl .ply")


def sample_mesh(mesh: Any, n: int, seed: Union[int, np.random.Generator, None] = 0, *,
                return_faces: bool = False) -> Tuple[np.ndarray, ...]:
    """Sample ``n`` points uniformly (area-weighted) on a triangle mesh's surface.

    Args:
        mesh: a ``trimesh.Trimesh`` or a ``(vertices, faces)`` pair.
        n: number of points.
        seed: an int seed or a ``numpy.random.Generator``; the same seed gives the same points.
        return_faces: also return the index of the face each point was drawn from.

    Returns:
        ``(points, normals)``: the sampled points and the unit normals of the faces they lie
        on (orientation follows the face winding); plus ``face_index`` when ``return_faces``.

    Shapes:
        points: ``[n, 3]`` float32; normals: ``[n, 3]`` float32; face_index: ``[n]`` int64.
    """
    if isinstance(mesh, (tuple, list)) and len(mesh) == 2:
        vertices, faces = mesh
    elif hasattr(mesh, "vertices") and hasattr(mesh, "faces"):
        vertices, faces = mesh.vertices, mesh.faces
    else:
        raise ValueError(f"sample_mesh: mesh must be a trimesh.Trimesh or (vertices, faces), "
                         f"got {type(mesh).__name__}")
    vertices = np.asarray(vertices, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.int64)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"sample_mesh: n must be a positive integer, got {n!r}")
    if vertices.ndim != 2 or vertices.shape[1] != 3:
        raise ValueError(f"sample_mesh: vertices must have shape [V, 3], got {vertices.shape}")
    if faces.ndim != 2 or faces.shape[1] != 3 or len(faces) == 0:
        raise ValueError(f"sample_mesh: faces must have shape [F, 3] with F > 0, got {faces.shape}")
    if faces.min() < 0 or faces.max() >= len(vertices):
        raise ValueError(f"sample_mesh: faces index vertices outside 0..{len(vertices) - 1}")
    a, b, c = vertices[faces[:, 0]], vertices[faces[:, 1]], vertices[faces[:, 2]]
    cross = np.cross(b - a, c - a)
    double_area = np.linalg.norm(cross, axis=1)
    double_area[~np.isfinite(double_area)] = 0.0
    total = double_area.sum()
    if not total > 0:
        raise ValueError("sample_mesh: the mesh has zero surface area (all faces degenerate)")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    cdf = np.cumsum(double_area)
    idx = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    idx = np.minimum(idx, len(faces) - 1)
    r1 = np.sqrt(rng.random(n))
    r2 = rng.random(n)
    u = 1.0 - r1
    v = r1 * (1.0 - r2)
    w = r1 * r2
    pts = u[:, None] * a[idx] + v[:, None] * b[idx] + w[:, None] * c[idx]
    normals = cross[idx] / double_area[idx, None]
    if return_faces:
        return pts.astype(np.float32), normals.astype(np.float32), idx.astype(np.int64)
    return pts.astype(np.float32), normals.astype(np.float32)


def repair_normals(points: np.ndarray, normals: np.ndarray, tol: float = 0.1) -> np.ndarray:
    """Replace invalid normals with the normal of the nearest point whose normal is valid.

    A normal is invalid when it is not finite or its norm differs from 1 by more than
    ``tol`` (e.g. the ``(1, 1, 1)`` placeholders of ``modelnet40_normal_resampled``).
    Valid normals are renormalized to unit length.

    Shapes:
        points: ``[N, 3]``; normals: ``[N, 3]``; returns ``[N, 3]`` float32.
    """
    normals = np.asarray(normals, dtype=np.float64)
    norm = np.linalg.norm(normals, axis=1)
    good = np.isfinite(norm) & (np.abs(norm - 1.0) <= tol)
    out = np.zeros_like(normals)
    out[good] = normals[good] / norm[good, None]
    if not good.all():
        if not good.any():
            raise ValueError("repair_normals: no valid normal to copy from (all are invalid)")
        from scipy.spatial import cKDTree

        tree = cKDTree(np.asarray(points, dtype=np.float64)[good])
        _, nn = tree.query(np.asarray(points, dtype=np.float64)[~good], k=1)
        out[~good] = out[good][nn]
    return out.astype(np.float32)


# --------------------------------------------------------------------------------------
# writer
# --------------------------------------------------------------------------------------
def _as_numpy(a: Any, name: str) -> np.ndarray:
    if hasattr(a, "detach"):  # torch tensor, without importing torch here
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def write_ply(path: PathLike, points: Any, normals: Any = None, colors: Any = None, *,
              labels: Any = None, binary: bool = True) -> Path:
    """Write a point cloud to a PLY file (binary little-endian by default), atomically.

    Args:
        path: output file; parent folders are created.
        points: coordinates (numpy array or torch tensor).
        normals: optional normals.
        colors: optional colours, floats in ``[0, 1]`` or integers in ``[0, 255]``.
        labels: optional integer labels (written as an ``int label`` property).
        binary: binary little-endian (True) or ascii (False).

    Shapes:
        points ``[N, 3]``; normals/colors ``[N, 3]``; labels ``[N]``.
    """
    p = Path(os.fspath(path))
    pts = _as_numpy(points, "points")
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"write_ply({p}): points must have shape [N, 3], got {pts.shape}")
    n = len(pts)
    fields: List[Tuple[str, str]] = [("x", "<f4"), ("y", "<f4"), ("z", "<f4")]
    cols: Dict[str, np.ndarray] = {"x": pts[:, 0], "y": pts[:, 1], "z": pts[:, 2]}
    if normals is not None:
        nrm = _as_numpy(normals, "normals")
        if nrm.shape != (n, 3):
            raise ValueError(f"write_ply({p}): normals must have shape [{n}, 3], got {nrm.shape}")
        fields += [("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4")]
        cols.update(nx=nrm[:, 0], ny=nrm[:, 1], nz=nrm[:, 2])
    if colors is not None:
        col = _as_numpy(colors, "colors")
        if col.shape != (n, 3):
            raise ValueError(f"write_ply({p}): colors must have shape [{n}, 3], got {col.shape}")
        if col.dtype.kind == "f":
            col = np.clip(np.round(col * 255.0), 0, 255)
        col = col.astype(np.uint8)
        fields += [("red", "u1"), ("green", "u1"), ("blue", "u1")]
        cols.update(red=col[:, 0], green=col[:, 1], blue=col[:, 2])
    if labels is not None:
        lab = _as_numpy(labels, "labels").reshape(-1)
        if lab.shape != (n,):
            raise ValueError(f"write_ply({p}): labels must have shape [{n}], got {lab.shape}")
        fields.append(("label", "<i4"))
        cols["label"] = lab.astype(np.int32)
    ply_names = {"<f4": "float", "u1": "uchar", "<i4": "int"}
    header = ["ply", f"format {'binary_little_endian' if binary else 'ascii'} 1.0",
              "comment written by gridify", f"element vertex {n}"]
    header += [f"property {ply_names[t]} {nm}" for nm, t in fields]
    header.append("end_header")
    arr = np.empty(n, dtype=np.dtype(fields))
    for nm, _ in fields:
        arr[nm] = cols[nm]
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(("\n".join(header) + "\n").encode("ascii"))
            if binary:
                fh.write(arr.tobytes())
            else:
                fmt = " ".join("%d" if t != "<f4" else "%.9g" for _, t in fields)
                for row in arr.tolist():
                    fh.write((fmt % tuple(row) + "\n").encode("ascii"))
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return p

