"""Reader of headerless binary tables: fixed-width rows of one numeric type, nothing else in the file.

Layout: ``N`` rows of ``width`` values of ``dtype`` (e.g. SemanticKITTI ``.label``: uint32, width 1;
mmdetection3d ``points/*.bin``: float32 ``x y z r g b``, width 6; ``semantic_mask/*.bin``: int64, width 1),
so

    N = size / (itemsize x width)      (an empty file or a size that does not divide evenly is refused,
                                        naming the file)

Shapes:
    ``[N, width]`` of ``dtype``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np

from .._files import PathLike
from .source import read_file_bytes

__all__ = ["read_raw_rows"]


def read_raw_rows(path: PathLike, dtype: Union[str, np.dtype], width: int) -> np.ndarray:
    """The ``[N, width]`` values of the headerless binary file ``path`` (see the module docstring), a read-only
    view of its bytes.

    Raises:
        ValueError: the file is empty, its size is not a whole number of rows, or it cannot be read (naming it).
        FileNotFoundError: there is no such file.
    """
    p = Path(path)
    dt = np.dtype(dtype)
    data = read_file_bytes(p)
    row = dt.itemsize * width
    if len(data) == 0 or len(data) % row:
        raise ValueError(
            f"{p}: {len(data)} bytes is not a whole number of {width}-value rows of {dt.name} ({row} bytes each)"
        )
    return np.frombuffer(data, dtype=dt).reshape(-1, width)
