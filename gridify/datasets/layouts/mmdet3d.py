"""mmdetection3d's processed layouts of ScanNet and S3DIS (one family, three layouts).

* ``mmdet3d_scannet`` / ``mmdet3d_s3dis``: ``<root>/points/<scene>.bin`` (float32 ``x y z r g b``) +
  ``semantic_mask/<scene>.bin`` (int64: NYU40 ids for ScanNet, mapped to the 20 benchmark classes; 0..12 for
  S3DIS, others ignored); ScanNet's splits are the official lists ``scannetv2_<split>.txt``, S3DIS's the Areas.
* ``mmdet3d_scannet_instance``: the older ``<root>/scannet_train_instance_data/<scene>_vert[_all].npy``
  ``[N, 6]`` + ``_sem_label[_all].npy`` (NYU40; the ``_all`` files are the full scans and are preferred).

mmdetection3d's SemanticKITTI test data is the ``semantickitti`` layout.

Shapes:
    a scene: coord ``[N, 3]`` float32 (float64 for large offsets), color ``[N, 3]`` float32, segment ``[N]``
    int64.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...io.raw import read_raw_rows
from .base import (
    IGNORE_INDEX,
    LAYOUTS,
    SceneLayout,
    SceneRef,
    coord_array,
    get_layout,
    integer_labels,
    layout_colors,
    layout_error,
    load_npy,
    read_with,
)
from .s3dis import S3DIS_CLASSES, area_of, area_place, area_split
from .scannet import SCANNET20_CLASSES, listed_scenes, map_nyu40_to_scannet20, official_split_list

__all__ = [
    "Mmdet3dLayout",
    "Mmdet3dScanNetLayout",
    "Mmdet3dScanNetInstanceLayout",
    "Mmdet3dS3DISLayout",
    "read_mmdet3d_scene",
]


def read_mmdet3d_scene(ref: SceneRef) -> Dict[str, np.ndarray]:
    """A scene of mmdetection3d's processed layouts (see the module docstring)."""
    return get_layout(ref.layout).read(ref)


class Mmdet3dLayout(SceneLayout):
    """What mmdetection3d's layouts share: ``points/<scene>.bin`` scenes (+ ``semantic_mask/<scene>.bin``) and
    their reading; a subclass says which scenes a split holds (:meth:`selected`) and maps the label ids
    (:meth:`segment`)."""

    features = ("color",)
    scan_order = 50

    def selected(
        self, root: Path, split: str, names: Sequence[str], *, test_area: int, skip_missing: bool
    ) -> Optional[set]:
        """The scenes of ``split`` among ``names`` (found under ``root``); None: every one."""
        return None

    def find(
        self, root: Path, split: str, *, test_area: int, sequences: Optional[Sequence[str]], skip_missing: bool
    ) -> List[SceneRef]:
        points = sorted((root / "points").glob("*.bin"))
        keep = self.selected(root, split, [f.stem for f in points], test_area=test_area, skip_missing=skip_missing)
        refs = []
        for f in points:
            if keep is None or f.stem in keep:
                lab = root / "semantic_mask" / f.name
                refs.append(SceneRef(f.stem, self.name, f, lab if lab.is_file() else None, split=split))
        return refs

    def points(self, ref: SceneRef) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """``(rows [N, >= 6] x y z r g b, labels or None)`` of the scene ``ref``, the label count unchecked."""
        pts = read_with(read_raw_rows, ref.path, "<f4", 6)
        if ref.label_path is None:
            return pts, None
        if ref.label_path.stat().st_size != 8 * len(pts):
            raise layout_error(
                ref.label_path,
                f"{ref.label_path.stat().st_size} bytes, but {ref.path} holds "
                f"{len(pts)} points (int64 labels: {8 * len(pts)} bytes)",
            )
        return pts, read_with(read_raw_rows, ref.label_path, "<i8", 1)[:, 0]

    def segment(self, labels: np.ndarray) -> np.ndarray:
        """The training ids ``[N]`` of the file's label values ``[N]`` (NYU40 ids -> the 20 ScanNet classes)."""
        return map_nyu40_to_scannet20(labels)

    def read(
        self, ref: SceneRef, *, classes: Optional[Sequence[str]] = None, unknown: str = "ignore"
    ) -> Dict[str, np.ndarray]:
        pts, labels = self.points(ref)
        scene = {"coord": coord_array(pts[:, :3]), "color": layout_colors(ref.path, pts[:, 3:6])}
        if labels is None:
            scene["segment"] = np.full(len(pts), IGNORE_INDEX, dtype=np.int64)
        elif labels.reshape(-1).shape[0] != len(pts):
            raise layout_error(ref.label_path, f"{labels.size} labels but {ref.path} holds {len(pts)} points")
        else:
            scene["segment"] = self.segment(labels.reshape(-1))
        return scene


@LAYOUTS.register("mmdet3d_scannet")
class Mmdet3dScanNetLayout(Mmdet3dLayout):
    """mmdetection3d's ScanNet: ``points/*.bin`` + ``semantic_mask/*.bin`` (NYU40), the official split lists."""

    classes = SCANNET20_CLASSES
    splits = "scannetv2_{split}.txt lists or 'all'"
    split_lists = True

    def selected(
        self, root: Path, split: str, names: Sequence[str], *, test_area: int, skip_missing: bool
    ) -> Optional[set]:
        return listed_scenes(official_split_list(root, split, self.name), names, root / "points", split, skip_missing)


@LAYOUTS.register("mmdet3d_scannet_instance")
class Mmdet3dScanNetInstanceLayout(Mmdet3dLayout):
    """mmdetection3d's older ScanNet: ``scannet_train_instance_data/<scene>_vert[_all].npy`` (NYU40 labels)."""

    classes = SCANNET20_CLASSES
    splits = "scannetv2_{split}.txt lists or 'all'"
    split_lists = True

    def find(
        self, root: Path, split: str, *, test_area: int, sequences: Optional[Sequence[str]], skip_missing: bool
    ) -> List[SceneRef]:
        folder = root / "scannet_train_instance_data" if (root / "scannet_train_instance_data").is_dir() else root
        names = sorted({f.name[: -len("_vert.npy")] for f in folder.glob("*_vert.npy")})
        keep = listed_scenes(official_split_list(root, split, self.name), names, folder, split, skip_missing)
        refs = []
        for n in names:
            suffix = "_all" if (folder / f"{n}_vert_all.npy").is_file() else ""
            lab = folder / f"{n}_sem_label{suffix}.npy"
            if keep is None or n in keep:
                refs.append(
                    SceneRef(
                        n, self.name, folder / f"{n}_vert{suffix}.npy", lab if lab.is_file() else None, split=split
                    )
                )
        return refs

    def points(self, ref: SceneRef) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        pts = load_npy(ref.path)
        if pts.ndim != 2 or pts.shape[1] < 6:
            raise layout_error(ref.path, f"expected [N, 6] x y z r g b, got {pts.shape}")
        labels = integer_labels(ref.label_path, load_npy(ref.label_path)) if ref.label_path is not None else None
        return pts, labels


@LAYOUTS.register("mmdet3d_s3dis")
class Mmdet3dS3DISLayout(Mmdet3dLayout):
    """mmdetection3d's S3DIS: ``points/Area_N_<room>.bin`` + ``semantic_mask/*.bin`` (ids 0..12), by Area."""

    classes = S3DIS_CLASSES
    splits = "by Area, as s3dis"

    def selected(
        self, root: Path, split: str, names: Sequence[str], *, test_area: int, skip_missing: bool
    ) -> Optional[set]:
        return {n for n in names if area_split(area_of(n), split, test_area)}

    def segment(self, labels: np.ndarray) -> np.ndarray:
        """The ids 0..12 as they are, any other -1."""
        seg = labels.astype(np.int64)
        seg[(seg < 0) | (seg >= len(S3DIS_CLASSES))] = IGNORE_INDEX
        return seg

    def converted_place(self, ref: SceneRef, split: str) -> Tuple[str, str]:
        return area_place(ref, split)
