"""The entry point :func:`read_points`: check the file, pick its reader, check the cloud it returns.

The reader is the one the format registry (:mod:`gridify.io.registry`) holds for the file's
extension; :func:`check_file` and :func:`finalize` are the checks every read goes through
(:func:`~gridify.io.read_mesh` uses check_file too).

Shapes:
    points ``[N, 3]`` float32; normals/colors ``[N, 3]`` float32; labels ``[N]`` int64.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .._files import PathLike
from .cloud import PointCloud
from .registry import find_format, supported_extensions

__all__ = ["read_points", "check_file", "finalize"]


def read_points(path: PathLike, *, num_samples: int = 10_000, seed: int = 0,
                columns: Optional[Sequence[str]] = None, drop_invalid: bool = True) -> PointCloud:
    """Read a point cloud (or surface-sample a mesh) from ``path``.

    Args:
        path: the file; its extension picks the reader (see :func:`~gridify.io.describe_formats`).
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
    p = check_file(path)
    ext = p.suffix.lower()
    if num_samples is None or int(num_samples) < 1:
        raise ValueError(f"read_points: num_samples must be a positive integer, got {num_samples!r}")
    fmt = find_format(ext)
    if fmt is None:
        raise ValueError(f"{p}: unsupported file extension {p.suffix!r}; supported: "
                         f"{', '.join(supported_extensions())}")
    options = {"num_samples": int(num_samples), "seed": seed, "columns": columns}
    try:
        cloud = fmt.reader(p, **{k: options[k] for k in fmt.options})
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
    return finalize(cloud, p, drop_invalid)


def check_file(path: PathLike) -> Path:
    """``path`` as a :class:`~pathlib.Path` to an existing, non-empty file; else the error read_points raises."""
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


def finalize(cloud: PointCloud, p: Path, drop_invalid: bool) -> PointCloud:
    """Check what a reader returned: at least one point, colours in ``[0, 1]``, NaN/Inf points dropped.

    Call it from read_points only: the NaN/Inf warning points at read_points' caller.
    """
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
