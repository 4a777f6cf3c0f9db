"""The common (Pointcept) layout: ``<root>/<split>/<scene>/coord.npy`` (+ ``color.npy``, ``normal.npy``,
``strength.npy``, ``segment.npy``, ``instance.npy``: :data:`POINTCEPT_FILES`).

The layout :func:`gridify.datasets.convert_to_pointcept` writes (with ``<root>/classes.txt`` and
``conversion.json``) and :class:`gridify.datasets.SceneDataset` reads by default. A split is a folder name;
``train``/``val``/``test`` fall back to the S3DIS convention (``Area_N`` folders, ``test_area`` held out) when no
such folder exists. The class list is the root's ``classes.txt`` (no official one). One scene folder alone
(``gridify evaluate --scan``) is one scan, its ``coord.npy``, with its ground truth ``segment.npy`` beside it.

Shapes:
    a scene: coord ``[N, 3]`` float32 (float64 for large offsets), color / normal ``[N, 3]`` float32,
    strength ``[N, 1]`` float32, segment / instance ``[N]`` int64.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...io.cloud import unit_scaled
from .._common import PathLike
from .base import (
    IGNORE_INDEX,
    LAYOUTS,
    SceneLayout,
    SceneRef,
    coord_array,
    integer_labels,
    layout_colors,
    layout_error,
    load_npy,
)
from .s3dis import area_of, area_split

__all__ = ["POINTCEPT_FILES", "PointceptLayout", "read_pointcept_scene"]

#: the files of a scene folder in the Pointcept layout, and their row width (None: [N])
POINTCEPT_FILES: Dict[str, Optional[int]] = {
    "coord": 3,
    "color": 3,
    "normal": 3,
    "strength": 1,
    "segment": None,
    "instance": None,
}


def read_pointcept_scene(scene_dir: PathLike) -> Dict[str, np.ndarray]:
    """A scene folder of the common layout: ``coord.npy`` and the optional files of :data:`POINTCEPT_FILES`.

    A missing ``segment.npy`` means every point is ignored (-1); Pointcept's ScanNet release names it
    ``segment20.npy`` (the 20 benchmark classes), which is read in its place. Each array must have one
    row per point of ``coord.npy``; the error names the file.
    """
    d = Path(scene_dir)
    if not (d / "coord.npy").is_file():
        raise layout_error(d, "scene folder has no coord.npy")
    scene: Dict[str, np.ndarray] = {}
    for key, width in POINTCEPT_FILES.items():
        f = d / f"{key}.npy"
        if key == "segment" and not f.is_file() and (d / "segment20.npy").is_file():
            f = d / "segment20.npy"  # Pointcept's ScanNet release: segment20 / segment200
        if not f.is_file():
            continue
        a = load_npy(f)
        if a.dtype.kind not in "fiub":
            raise layout_error(f, f"expected a numeric array, got {a.dtype}")
        if width is None:
            a = a.reshape(-1) if a.ndim == 2 and a.shape[1] == 1 else a
            ok = a.ndim == 1
        else:
            a = a.reshape(-1, 1) if width == 1 and a.ndim == 1 else a
            ok = a.ndim == 2 and a.shape[1] == width
        n = len(scene["coord"]) if scene else len(a)
        if key == "coord" and ok and n == 0:
            raise layout_error(f, "holds no point (shape [0, 3]): a scene needs at least one")
        if not ok or len(a) != n:
            want = f"[{n}]" if width is None else f"[{n}, {width}]"
            raise layout_error(
                f, f"expected {want} {'integers' if width is None else 'values'}, got {a.dtype} {a.shape}"
            )
        if key == "color":
            a = layout_colors(f, a)  # 8-bit or 16-bit, decided by the scene's values
        elif key == "strength":
            a = unit_scaled(a)  # integer intensities on the unit scale, as every reader puts them
        scene[key] = (
            integer_labels(f, a) if width is None else (coord_array(a) if key == "coord" else a.astype(np.float32))
        )
    scene.setdefault("segment", np.full(len(scene["coord"]), IGNORE_INDEX, dtype=np.int64))
    return scene


@LAYOUTS.register("pointcept")
class PointceptLayout(SceneLayout):
    """The common layout: one folder of ``.npy`` arrays per scene, the class list in the root's ``classes.txt``."""

    splits = "<root>/<split>/ folders (Area_N: test_area held out)"
    features = ("color", "strength")
    named_splits = True
    convertible = False
    scan_order = 20  # after semantickitti's (SceneLayout.scan_order)

    def find(
        self, root: Path, split: str, *, test_area: int, sequences: Optional[Sequence[str]], skip_missing: bool
    ) -> List[SceneRef]:
        if split == "all":
            folders = sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
        elif (root / split).is_dir():
            folders = [root / split]
        else:  # S3DIS convention: Area_N folders, test_area held out
            folders = sorted(
                (d for d in root.glob("Area_*") if d.is_dir() and area_split(area_of(d.name), split, test_area)),
                key=lambda q: (area_of(q.name) or 0, q.name),
            )
        refs = []
        for folder in folders:
            for d in sorted(folder.iterdir()):
                if (d / "coord.npy").is_file():
                    name = d.name if len(folders) == 1 and split != "all" else f"{folder.name}/{d.name}"
                    refs.append(SceneRef(name, self.name, d, split=folder.name))
        return refs

    def read(
        self, ref: SceneRef, *, classes: Optional[Sequence[str]] = None, unknown: str = "ignore"
    ) -> Dict[str, np.ndarray]:
        return read_pointcept_scene(ref.path)

    def default_features(self, refs: Sequence[SceneRef]) -> Tuple[str, ...]:
        """What the first scene has of ``color`` and ``strength`` (normals on request)."""
        return tuple(f for f in ("color", "strength") if (refs[0].path / f"{f}.npy").is_file())

    def scan_label_path(self, scan: Path) -> Optional[Path]:
        """``segment.npy`` of a scene folder given as the folder or its ``coord.npy``."""
        if scan.is_dir():
            return scan / "segment.npy" if (scan / "segment.npy").is_file() else None
        found = scan.parent / "segment.npy"
        return found if scan.name == "coord.npy" and found.is_file() else None

    def folder_scan(self, folder: Path) -> Optional[Path]:
        return folder / "coord.npy" if (folder / "coord.npy").is_file() else None

    def scan_name(self, scan: Path) -> Optional[str]:
        """The scene folder's name for its ``coord.npy``."""
        return scan.parent.name if scan.name == "coord.npy" else None
