"""The PLY writer: :func:`write_ply`, a point cloud (and its normals, colours, labels) to one file.

Layout written: a ``vertex`` element with ``float x y z``, optional ``float nx ny nz``,
``uchar red green blue`` and ``int label`` properties; binary little-endian (default) or ascii.
The file is written with :func:`gridify._files.atomic_write`: readers never see half a file.

Shapes:
    points ``[N, 3]``; normals/colors ``[N, 3]``; labels ``[N]``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any, Dict, List, Tuple

import numpy as np

from .._files import PathLike, atomic_write

__all__ = ["write_ply"]

_PLY_NAMES = {"<f4": "float", "u1": "uchar", "<i4": "int"}  # numpy type -> PLY type written


def _as_numpy(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):  # torch tensor, without importing torch here
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def _vertex_columns(
    p: Path, points: Any, normals: Any, colors: Any, labels: Any
) -> Tuple[List[Tuple[str, str]], Dict[str, np.ndarray]]:
    """``([(property, numpy type)], {property: [N] column})``, checking every shape."""
    pts = _as_numpy(points)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"write_ply({p}): points must have shape [N, 3], got {pts.shape}")
    n = len(pts)
    fields: List[Tuple[str, str]] = [("x", "<f4"), ("y", "<f4"), ("z", "<f4")]
    cols: Dict[str, np.ndarray] = {"x": pts[:, 0], "y": pts[:, 1], "z": pts[:, 2]}
    if normals is not None:
        nrm = _as_numpy(normals)
        if nrm.shape != (n, 3):
            raise ValueError(f"write_ply({p}): normals must have shape [{n}, 3], got {nrm.shape}")
        fields += [("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4")]
        cols.update(nx=nrm[:, 0], ny=nrm[:, 1], nz=nrm[:, 2])
    if colors is not None:
        col = _as_numpy(colors)
        if col.shape != (n, 3):
            raise ValueError(f"write_ply({p}): colors must have shape [{n}, 3], got {col.shape}")
        if col.dtype.kind == "f":
            col = np.clip(np.round(col * 255.0), 0, 255)
        col = col.astype(np.uint8)
        fields += [("red", "u1"), ("green", "u1"), ("blue", "u1")]
        cols.update(red=col[:, 0], green=col[:, 1], blue=col[:, 2])
    if labels is not None:
        lab = _as_numpy(labels).reshape(-1)
        if lab.shape != (n,):
            raise ValueError(f"write_ply({p}): labels must have shape [{n}], got {lab.shape}")
        fields.append(("label", "<i4"))
        cols["label"] = lab.astype(np.int32)
    return fields, cols


def write_ply(
    path: PathLike, points: Any, normals: Any = None, colors: Any = None, *, labels: Any = None, binary: bool = True
) -> Path:
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
    fields, cols = _vertex_columns(p, points, normals, colors, labels)
    n = len(cols["x"])
    header = [
        "ply",
        f"format {'binary_little_endian' if binary else 'ascii'} 1.0",
        "comment written by gridify",
        f"element vertex {n}",
    ]
    header += [f"property {_PLY_NAMES[t]} {nm}" for nm, t in fields]
    header.append("end_header")
    arr = np.empty(n, dtype=np.dtype(fields))
    for nm, _ in fields:
        arr[nm] = cols[nm]

    def write(fh: IO[bytes]) -> None:
        fh.write(("\n".join(header) + "\n").encode("ascii"))
        if binary:
            fh.write(arr.tobytes())
        else:
            fmt = " ".join("%d" if t != "<f4" else "%.9g" for _, t in fields)
            for row in arr.tolist():
                fh.write((fmt % tuple(row) + "\n").encode("ascii"))

    return atomic_write(p, write)
