"""Reader of raw LiDAR scans in the KITTI / SemanticKITTI ``.bin`` format.

Layout: no header; ``N`` rows of four little-endian float32 values ``x y z intensity`` (16 bytes
per point; KITTI's ``velodyne/NNNNNN.bin``, also nuScenes-style exports with the same row), so

    N = size / 16         (a size that is not a multiple of 16 is refused, naming the file)

The coordinates are metres in the sensor frame. The ``intensity`` column (SemanticKITTI's
"remission", in [0, 1]) is a per-point field: ``fields=["intensity"]`` or ``"all"`` keeps it in
:attr:`~gridify.io.PointCloud.fields`. The labels of a SemanticKITTI scan live in a separate
``.label`` file (uint32, the semantic id in the low 16 bits; :func:`read_kitti_labels`);
``gridify.datasets.layouts.semantickitti.read_semantickitti_scan`` reads both.

Shapes:
    points ``[N, 3]`` float32; fields ``intensity`` ``[N]`` float32; :func:`read_kitti_rows` ``[N, 4]``
    float32; :func:`read_kitti_labels` ``[N]`` uint32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from .cloud import PointCloud
from .._files import PathLike
from .fields import pick_fields
from .raw import read_raw_rows
from .source import read_file_bytes

__all__ = ["read_kitti_bin", "read_kitti_rows", "read_kitti_labels", "KITTI_ROW"]

#: bytes per point: float32 x, y, z, intensity
KITTI_ROW = 16


def read_kitti_rows(path: PathLike) -> np.ndarray:
    """The rows ``x y z intensity`` of the KITTI ``.bin`` scan ``path`` as ``[N, 4]`` float32 (a read-only view
    of its bytes); an empty file or a size that is not a whole number of 16-byte rows is refused, naming it."""
    p = Path(path)
    data = read_file_bytes(p)
    if len(data) == 0:
        raise ValueError(f"{p}: empty file (a KITTI .bin scan holds 16-byte rows of float32 x y z intensity)")
    if len(data) % KITTI_ROW:
        raise ValueError(
            f"{p}: {len(data)} bytes is not a whole number of 16-byte rows (float32 x y z intensity); "
            f"not a KITTI .bin scan, or a truncated one"
        )
    return np.frombuffer(data, dtype="<f4").reshape(-1, 4)


def read_kitti_labels(path: PathLike) -> np.ndarray:
    """The raw values of the SemanticKITTI ``.label`` file ``path`` as ``[N]`` uint32 (semantic id in the low 16
    bits, instance in the high 16); a size that is not a whole number of 4-byte values is refused, naming it."""
    return read_raw_rows(path, "<u4", 1)[:, 0]


def read_kitti_bin(
    p: Path, fields: Union[None, str, Sequence[str]] = None, labels_from: Optional[str] = None
) -> PointCloud:
    """Read the KITTI ``.bin`` scan ``p`` (see the module docstring)."""
    p = Path(p)
    rows = read_kitti_rows(p)
    labels, kept = pick_fields(p, {"intensity": rows[:, 3]}, fields, labels_from)
    return PointCloud(
        points=np.ascontiguousarray(rows[:, :3], dtype=np.float32),
        labels=labels,
        source=str(p),
        fields={k: np.array(v, dtype=np.float32) for k, v in kept.items()},
    )
