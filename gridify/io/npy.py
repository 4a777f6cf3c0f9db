"""Readers of NumPy files: ``.npy`` (one array) and ``.npz`` (named arrays), never unpickling.

Layout: a ``.npy`` holds an ``[N, C]`` numeric table, interpreted like text columns by
:func:`~gridify.io.columns.table_to_cloud`, or a structured array with ``x y z`` (and optional
``nx ny nz``, ``label``/``class``) fields. A ``.npz`` holds the points under a key such as
``pos``/``points`` (``[N, >=3]``) and optional normals, colours and per-point labels under keys
such as ``normal``, ``color``, ``label``/``part_label``. Both are loaded with
``allow_pickle=False``: a pickled object array is refused, since unpickling can run code.

Shapes:
    points ``[N, 3]``; normals/colors ``[N, 3]``; labels ``[N]`` (a per-file label is dropped).
"""
from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from .cloud import PointCloud
from .columns import table_to_cloud

__all__ = ["read_npy", "read_npz"]


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


def read_npy(p: Path, columns: Optional[Sequence[str]] = None) -> PointCloud:
    """Read the ``.npy`` file ``p``: a numeric table (``columns`` names its columns) or a structured array."""
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
    return table_to_cloud(np.asarray(arr), p, columns)


_NPZ_POINTS = ("pos", "points", "point", "xyz", "vertices", "verts", "coords", "data", "pc", "cloud")
_NPZ_NORMALS = ("normal", "normals", "norm", "norms", "nxyz")
_NPZ_COLORS = ("color", "colors", "colour", "colours", "rgb")
_NPZ_LABELS = ("label", "labels", "part_label", "part_labels", "seg", "seg_label", "sem_label",
               "semantic_label", "pid", "y", "target")


def read_npz(p: Path) -> PointCloud:
    """Read the ``.npz`` file ``p``: points, normals, colours and labels found by key (module docstring)."""
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
            base = table_to_cloud(pts, p)
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
