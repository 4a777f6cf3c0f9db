"""Column interpretation shared by the text and ``.npy`` readers (and the colour scale of PCD/PLY).

:func:`table_to_cloud` splits a numeric table into a :class:`PointCloud`. Columns are
interpreted by count unless ``columns=`` names them: 3 = xyz; 4 = xyz + label (when the 4th
column is integral, otherwise ignored, e.g. LiDAR intensity); 6 = xyz + normals (when the extra
columns have unit norm) or xyz + colours (values in [0, 1], 0-255, or whole numbers in 0-65535: 16-bit colours;
the scale decided from the whole file, :func:`gridify.io.cloud.color_scale`); 7 = the same plus a
label column. Names are ``x y z nx ny nz r g b label``, ``_`` (ignored) and the LiDAR return strength
``intensity`` (or ``remission``, ``reflectance``, ``strength``), which is kept in :attr:`PointCloud.fields` under
its name (what a scene segmenter trained on intensity reads).

Shapes:
    table ``[N, C]`` (or one row ``[C]``) -> points ``[N, 3]``, normals/colors ``[N, 3]``,
    labels ``[N]``, fields name -> ``[N]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .._checks import warn_at_caller
from .cloud import PointCloud, clip_unit_colors, color_scale

__all__ = ["color_scale", "table_to_cloud"]

#: named columns kept as per-point scalar fields (:attr:`PointCloud.fields`) under their own name
FIELD_COLUMNS = ("intensity", "remission", "reflectance", "strength")
_COLUMN_NAMES = {"x", "y", "z", "nx", "ny", "nz", "r", "g", "b", "label", "_", *FIELD_COLUMNS}


def _is_integral(col: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(col)) and np.all(np.abs(col - np.round(col)) < 1e-6))


def _not_integral(col: np.ndarray, number: int) -> str:
    """Why column ``number`` (1-based) is not a label column: its first non-integer value and row."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(col) & (np.abs(col - np.round(col)) < 1e-6))
    row = int(np.flatnonzero(bad)[0])
    return (
        f"column {number} holds non-integer values (data row {row}: {float(col[row])!r}), so it is not a label column"
    )


def _looks_like_normals(block: np.ndarray) -> bool:
    norms = np.linalg.norm(block, axis=1)
    ok = np.isfinite(norms)
    if not ok.any():
        return False
    # the official normal_resampled files mark a few rows with (1, 1, 1): use the median
    return bool(np.median(np.abs(norms[ok] - 1.0)) < 0.05)


def _named_columns(table: np.ndarray, p: Path, columns: Sequence[str]) -> PointCloud:
    """The cloud of an ``[N, C]`` float64 table whose ``C`` columns ``columns`` names."""
    c = table.shape[1]
    names = [str(s).lower() for s in columns]
    unknown = sorted(set(names) - _COLUMN_NAMES)
    if unknown:
        raise ValueError(f"{p}: unknown column names {unknown}; use {sorted(_COLUMN_NAMES)}")
    if len(names) != c:
        raise ValueError(f"{p}: columns= names {len(names)} columns but the file has {c}")
    twice = sorted({nm for nm in names if nm != "_" and names.count(nm) > 1})
    if twice:
        raise ValueError(f"{p}: columns= names {twice} more than once")
    idx = {nm: i for i, nm in enumerate(names) if nm != "_"}
    if not {"x", "y", "z"} <= idx.keys():
        raise ValueError(f"{p}: columns= must include x, y and z")
    pick = lambda keys: table[:, [idx[k] for k in keys]] if set(keys) <= idx.keys() else None  # noqa: E731
    colors = pick(("r", "g", "b"))
    if colors is not None:
        scale = color_scale(colors) or 255.0
        colors = clip_unit_colors(colors / scale)
    labels = table[:, idx["label"]] if "label" in idx else None
    if labels is not None and not _is_integral(labels):
        raise ValueError(f"{p}: the label column holds non-integer values")
    return PointCloud(
        pick(("x", "y", "z")),
        pick(("nx", "ny", "nz")),
        colors,
        None if labels is None else labels.astype(np.int64),
        str(p),
        fields={nm: table[:, idx[nm]].astype(np.float32) for nm in FIELD_COLUMNS if nm in idx},
    )


def table_to_cloud(table: np.ndarray, p: Path, columns: Optional[Sequence[str]] = None) -> PointCloud:
    """Split an ``[N, C]`` numeric table into a cloud (see the module docstring).

    Its warnings point at the user's line, however deep the reader that calls it
    (:func:`gridify._checks.warn_at_caller`).
    """
    if table.ndim == 1 and table.size in (3, 4, 6, 7):  # a single row
        table = table.reshape(1, -1)
    if table.ndim != 2:
        raise ValueError(f"{p}: expected a 2-D [N, C] table of numbers, got shape {table.shape}")
    n, c = table.shape
    if n == 0:
        raise ValueError(f"{p}: file contains no points")
    table = table.astype(np.float64, copy=False)
    if columns is not None:
        return _named_columns(table, p, columns)
    if c < 3:
        raise ValueError(f"{p}: expected at least 3 columns (x y z), found {c}")
    pts = table[:, :3]
    normals = colors = labels = None
    ignored = {}
    extra = table[:, 3:]
    if c in (6, 7):
        block = extra[:, :3]
        if _looks_like_normals(block):
            normals = block
        else:
            scale = color_scale(block) if np.isfinite(block).all() else None
            if scale is not None:
                colors = block / scale
            else:
                ignored["normals"] = ignored["colors"] = "columns 4-6 are neither unit normals nor colours"
                warn_at_caller(f"{p}: columns 4-6 are neither unit normals nor colours; ignored")
        if c == 7:
            if _is_integral(extra[:, 3]):
                labels = extra[:, 3].astype(np.int64)
            else:
                ignored["labels"] = _not_integral(extra[:, 3], 7)
                warn_at_caller(f"{p}: column 7 is not an integer label; ignored")
    elif c == 4:
        if _is_integral(extra[:, 0]):
            labels = extra[:, 0].astype(np.int64)
        else:  # e.g. LiDAR intensity: not a label, not worth a warning
            ignored["labels"] = _not_integral(extra[:, 0], 4)
    elif c > 3:
        ignored["labels"] = f"{c} columns: only x y z (the first 3) are used without columns="
        warn_at_caller(
            f"{p}: {c} columns; only x y z (the first 3) are used; name the others with read_points(columns=...) "
            f"(a folder dataset: data.columns)"
        )
    return PointCloud(pts, normals, colors, labels, str(p), ignored=ignored)
