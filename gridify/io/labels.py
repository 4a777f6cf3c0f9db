"""Label files: the per-point labels kept beside a cloud or a scan, read by one function, :func:`read_labels`.

Formats, by the file's suffix:

* ``.label``: SemanticKITTI, headerless little-endian uint32 (the semantic id in the low 16 bits, the instance in
  the high 16: :func:`gridify.io.kitti.read_kitti_labels`), read as the raw values (the layouts map them);
* ``.npy``: an ``[N]`` or ``[N, 1]`` array (never unpickled, its sizes checked before anything is allocated:
  :func:`gridify.io.npy.read_npy_array`);
* anything else is text (``.labels``, ``.seg``, ``.txt``): whitespace-separated numbers, one label per line or
  several, ``#`` comments (:func:`gridify.io.text.read_text_values`).

Every value must be an integer, or a float holding a whole number (a text file, a float ``.npy``):
:func:`label_ids`, the one check of label values (the scene layouts' too), refuses a fractional value, NaN/Inf, a
bool or non-numeric array naming the file and the first bad row, never truncating it to an id. Errors are
ValueErrors naming the file (FileNotFoundError for a missing one); matching the labels to the points is the
caller's (:func:`gridify.datasets.scene_layouts.read_scan_labels` for a scan's ground truth,
``align_labels`` of the datasets).

Shapes:
    a file of ``N`` labels -> ``[N]`` int64.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .._files import PathLike
from .cloud import label_values_problem
from .kitti import read_kitti_labels
from .npy import read_npy_array
from .text import read_text_values

__all__ = ["read_labels", "label_ids"]


def label_ids(where: Any, values: Any, what: str = "file") -> np.ndarray:
    """``values`` (one label per point: ``[N]`` or ``[N, 1]``) as int64 ids ``[N]`` when they are integers, or
    floats holding whole numbers; else a ValueError ``"<where>: ..."`` naming the first bad row
    (:func:`gridify.io.cloud.label_values_problem`; ``what``: the kind of ``where`` in it, ``"file"`` or
    ``"array"``).

    Shapes:
        ``[N]`` (or ``[N, 1]``) -> ``[N]`` int64.
    """
    a = np.asarray(values)
    if a.ndim > 2 or (a.ndim == 2 and a.shape[1] != 1):
        raise ValueError(f"{where}: labels must hold one value per point ([N] or [N, 1]), got shape {a.shape}")
    a = a.reshape(-1)
    problem = label_values_problem(a, what)
    if problem:
        raise ValueError(f"{where}: {problem}")
    return a.astype(np.int64)


def read_labels(path: PathLike) -> np.ndarray:
    """The labels of the label file ``path`` as int64 ``[N]`` (see the module docstring for the formats): the
    one reader of label files (the folder and ShapeNet datasets' files beside the clouds, a scan's ground truth).

    Raises:
        ValueError: an unreadable or empty file, or a value that is no integer label, naming the file.
        FileNotFoundError: no such file.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".label":
        values = read_kitti_labels(p)
    elif suffix == ".npy":
        try:
            values = read_npy_array(p)
        except ValueError as exc:
            raise ValueError(f"{p}: not a readable .npy array ({str(exc).removeprefix(f'{p}: ')})") from None
    else:
        values = read_text_values(p, "labels")
    ids = label_ids(p, values)
    if ids.size == 0:
        raise ValueError(f"{p}: empty label file (no label)")
    return ids
