"""Named per-point fields of a file (LAS dimensions, PLY vertex properties, PCD fields): the ``fields`` and ``labels_from`` options.

:func:`pick_fields` chooses, from the ``[N]`` arrays a reader found under their names in the
file, the extra fields to keep in :attr:`~gridify.io.PointCloud.fields` (``fields=`` a list of
names, or ``"all"``) and the field that becomes the labels (``labels_from=``), with errors that
name the file, the field and the fields the file has. A name matches exactly or, failing that,
case-insensitively. Labels must be integral: ``labels = int64(field)``. :func:`auto_labels` takes the labels
from a property of a conventional name (``label``, ``class``, ...) when no ``labels_from`` is given; one that
holds non-integer values (fractions, NaN/Inf) is no label: it is ignored with a warning and the reason kept in
:attr:`~gridify.io.PointCloud.ignored`, never truncated to ids.

Shapes:
    each available field ``[N]``; labels ``[N]`` int64; kept fields ``[N]`` as stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .._checks import warn_at_caller
from .cloud import label_values_problem

__all__ = ["pick_fields", "auto_labels"]


def _lookup(p: Path, available: Mapping[str, np.ndarray], name: str, option: str) -> str:
    """The key of ``available`` that ``name`` matches, else a ValueError listing the file's fields."""
    if name in available:
        return name
    folded = [k for k in available if k.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    raise ValueError(f"{p}: {option}: the file has no per-point field {name!r}; its fields are {sorted(available)}")


def pick_fields(
    p: Path,
    available: Mapping[str, np.ndarray],
    fields: Union[None, str, Sequence[str]],
    labels_from: Optional[str],
    skip: Sequence[str] = (),
) -> Tuple[Optional[np.ndarray], Dict[str, np.ndarray]]:
    """``(labels or None, {name: [N] array})`` from the file's per-point scalar fields ``available``.

    Args:
        p: the file (for messages).
        available: the file's per-point scalar fields by name, each ``[N]``.
        fields: None (keep none), ``"all"`` (every field except ``skip``), or names to keep.
        labels_from: the field whose values become the labels, or None (no labels from here).
        skip: fields ``"all"`` leaves out (those already in points, normals or colours).
    """
    if fields is None:
        names: Sequence[str] = ()
    elif fields == "all":
        names = [k for k in available if k not in skip]
    else:
        names = [_lookup(p, available, f, "fields=") for f in fields]
    kept = {k: np.asarray(available[k]) for k in names}
    labels = None
    if labels_from is not None:
        key = _lookup(p, available, labels_from, "labels_from=")
        values = np.asarray(available[key])
        integral = values.dtype.kind != "f" or bool(
            np.all(np.isfinite(values)) and np.all(values == np.round(values)) and np.all(np.abs(values) < 2.0**62)
        )
        if not integral:
            raise ValueError(f"{p}: labels_from={labels_from!r}: the field holds non-integer values")
        if values.dtype.kind not in "fiub":
            raise ValueError(f"{p}: labels_from={labels_from!r}: the field is not numeric ({values.dtype})")
        labels = values.astype(np.int64)
    return labels, kept


def auto_labels(
    p: Path, available: Mapping[str, np.ndarray], names: Sequence[str]
) -> Tuple[Optional[np.ndarray], Dict[str, str]]:
    """``(labels [N] int64 or None, ignored)``: the first field of ``available`` named one of ``names`` (the
    conventional label names of a format) as labels, when its values are integers (or floats holding whole
    numbers); a field of another kind is ignored with a warning naming the file, the field and its first bad
    row, and ``ignored`` (for :attr:`~gridify.io.PointCloud.ignored`) says why, never truncated to ids."""
    key = next((k for k in names if k in available), None)
    if key is None:
        return None, {}
    values = np.asarray(available[key]).reshape(-1)
    problem = label_values_problem(values, "property")
    if problem:
        why = f"property {key!r} is not a label: {problem}"
        warn_at_caller(f"{p}: {why}; ignored (read it with fields=[{key!r}] to keep its values)")
        return None, {"labels": why}
    return values.astype(np.int64), {}
