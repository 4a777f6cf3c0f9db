"""Reader of raw LiDAR scans in the KITTI / SemanticKITTI ``.bin`` format.

Layout: no header; ``N`` rows of four little-endian float32 values ``x y z intensity`` (16 bytes
per point; KITTI's ``velodyne/NNNNNN.bin``, also nuScenes-style exports with the same row), so

    N = size / 16         (a size that is not a multiple of 16 is refused, naming the file)

The coordinates are metres in the sensor frame. The ``intensity`` column (SemanticKITTI's
"remission", in [0, 1]) is a per-point field: ``fields=["intensity"]`` or ``"all"`` keeps it in
:attr:`~gridify.io.PointCloud.fields`. The labels of a SemanticKITTI scan live in a separate
``.label`` file (:func:`gridify.datasets.scene_layouts.read_semantickitti_scan` reads both).

Shapes:
    points ``[N, 3]`` float32; fields ``intensity`` ``[N]`` float32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from .cloud import PointCloud
from .fields import pick_fields
from .source import read_file_bytes

__all__ = ["read_kitti_bin", "KITTI_ROW"]

#: bytes per point: float32 x, y, z, intensity
KITTI_ROW = 16


def read_kitti_bin(
    p: Path, fields: Union[None, str, Sequence[str]] = None, labels_from: Optional[str] = None
) -> PointCloud:
    """Read the KITTI ``.bin`` scan ``p`` (see the module docstring)."""
    p = Path(p)
    data = read_file_bytes(p)
    if len(data) == 0:
        raise ValueError(f"{p}: empty file (a KITTI .bin scan holds 16-byte rows of float32 x y z intensity)")
    if len(data) % KITTI_ROW:
        raise ValueError(
            f"{p}: {len(data)} bytes is not a whole number of 16-byte rows (float32 x y z intensity); "
            f"not a KITTI .bin scan, or a truncated one"
        )
    rows = np.frombuffer(data, dtype="<f4").reshape(-1, 4)
    labels, kept = pick_fields(p, {"intensity": rows[:, 3]}, fields, labels_from)
    return PointCloud(
        points=np.ascontiguousarray(rows[:, :3], dtype=np.float32),
        labels=labels,
        source=str(p),
        fields={k: np.array(v, dtype=np.float32) for k, v in kept.items()},
    )
