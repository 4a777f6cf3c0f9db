"""The container every reader returns: :class:`PointCloud`, one point cloud read from a file.

Shapes:
    points ``[N, 3]`` float32; normals ``[N, 3]`` float32 or None; colors ``[N, 3]`` float32 in
    ``[0, 1]`` or None; labels ``[N]`` int64 or None.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = ["PointCloud"]


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
