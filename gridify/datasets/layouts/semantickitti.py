"""The SemanticKITTI layout: ``<root>/sequences/NN/velodyne/NNNNNN.bin`` + ``labels/NNNNNN.label``.

A scan is a ``.bin`` (float32 ``x y z remission``) and its ``.label`` (uint32; the semantic id in the low 16 bits),
mapped to the 19 classes (:data:`SEMANTICKITTI_CLASSES`) by the official learning map
(:data:`SEMANTICKITTI_LEARNING_MAP`). Splits (:data:`SEMANTICKITTI_SPLITS`): train 00-07, 09, 10; val 08; test
11-21 (``sequences=`` reads others). mmdetection3d's SemanticKITTI test data is this layout. One scan alone
(``gridify evaluate --scan``) finds its ground truth in ``labels/`` beside its ``velodyne/`` folder (or as
``<stem>.label`` beside it).

Shapes:
    a scan: coord ``[N, 3]`` float32, strength ``[N, 1]`` float32, segment ``[N]`` int64.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..._checks import warn_at_caller
from ...io.kitti import read_kitti_labels, read_kitti_rows
from .._common import PathLike
from .base import IGNORE_INDEX, LAYOUTS, SceneLayout, SceneRef, layout_error, read_with

__all__ = [
    "SEMANTICKITTI_CLASSES",
    "SEMANTICKITTI_LEARNING_MAP",
    "SEMANTICKITTI_SPLITS",
    "SemanticKITTILayout",
    "map_semantickitti_labels",
    "read_semantickitti_scan",
]

SEMANTICKITTI_CLASSES: Tuple[str, ...] = (
    "car",
    "bicycle",
    "motorcycle",
    "truck",
    "other-vehicle",
    "person",
    "bicyclist",
    "motorcyclist",
    "road",
    "parking",
    "sidewalk",
    "other-ground",
    "building",
    "fence",
    "vegetation",
    "trunk",
    "terrain",
    "pole",
    "traffic-sign",
)
#: the official learning map (semantic-kitti.yaml), raw id -> training id 0..18 or -1 (ignore);
#: a raw id not listed is ignored too
SEMANTICKITTI_LEARNING_MAP: Dict[int, int] = {
    0: -1,
    1: -1,
    10: 0,
    11: 1,
    13: 4,
    15: 2,
    16: 4,
    18: 3,
    20: 4,
    30: 5,
    31: 6,
    32: 7,
    40: 8,
    44: 9,
    48: 10,
    49: 11,
    50: 12,
    51: 13,
    52: -1,
    60: 8,
    70: 14,
    71: 15,
    72: 16,
    80: 17,
    81: 18,
    99: -1,
    252: 0,
    253: 6,
    254: 5,
    255: 7,
    256: 4,
    257: 4,
    258: 3,
    259: 4,
}
SEMANTICKITTI_SPLITS: Dict[str, Tuple[str, ...]] = {
    "train": ("00", "01", "02", "03", "04", "05", "06", "07", "09", "10"),
    "val": ("08",),
    "test": tuple(f"{i:02d}" for i in range(11, 22)),
}


@lru_cache(maxsize=None)
def _kitti_lut() -> np.ndarray:
    lut = np.full(1 << 16, IGNORE_INDEX, dtype=np.int64)
    for raw, train in SEMANTICKITTI_LEARNING_MAP.items():
        lut[raw] = train
    lut.flags.writeable = False
    return lut


def map_semantickitti_labels(raw: np.ndarray, where: Optional[str] = None) -> np.ndarray:
    """SemanticKITTI ``.label`` values (uint32, semantic id in the low 16 bits) -> training ids 0..18 / -1.

    A semantic id outside the learning map (:data:`SEMANTICKITTI_LEARNING_MAP`) becomes -1 as the official
    tools do; with ``where`` (the file) that is warned, naming the count, the first row and value: ids 0-18
    written to a ``.label`` file (training ids, not raw ones) would otherwise be scored as mostly unlabelled.

    Shapes:
        ``[N]`` -> ``[N]`` int64.
    """
    sem = np.asarray(raw).astype(np.uint32) & 0xFFFF
    if where is not None and sem.size:
        unknown = ~np.isin(sem, np.fromiter(SEMANTICKITTI_LEARNING_MAP, np.uint32))
        if unknown.any():
            row = int(np.flatnonzero(unknown)[0])
            warn_at_caller(
                f"{where}: {int(unknown.sum())} of {sem.size} labels hold semantic ids that SemanticKITTI does not "
                f"define (first: {int(sem[row])} at row {row}; defined: {sorted(SEMANTICKITTI_LEARNING_MAP)}): "
                f"read as unlabelled (-1). Training ids 0-18 are not .label values: save them as .npy or .txt"
            )
    return _kitti_lut()[sem]


def read_semantickitti_scan(bin_path: PathLike, label_path: Optional[PathLike] = None) -> Dict[str, np.ndarray]:
    """One scan: ``.bin`` (float32 x y z remission) and its ``.label`` (uint32), mapped to 19 classes.

    Without ``label_path`` (or when it does not exist) every point is -1. A ``.label`` whose count
    differs from the scan's points raises a :class:`DatasetError` naming both files (checked from
    the file sizes, before reading).
    """
    b = Path(bin_path)
    lab = Path(label_path) if label_path is not None else None
    if lab is not None and lab.is_file() and b.is_file():
        nb, nl = b.stat().st_size, lab.stat().st_size
        if nb % 16 == 0 and nl % 4 == 0 and nb // 16 != nl // 4:
            raise layout_error(lab, f"{nl // 4} labels but {b} holds {nb // 16} points")
    scan = read_with(read_kitti_rows, b)
    scene = {"coord": np.ascontiguousarray(scan[:, :3]), "strength": np.ascontiguousarray(scan[:, 3:4])}
    if lab is not None and lab.is_file():
        scene["segment"] = map_semantickitti_labels(read_with(read_kitti_labels, lab), str(lab))
    else:
        scene["segment"] = np.full(len(scan), IGNORE_INDEX, dtype=np.int64)
    return scene


@LAYOUTS.register("semantickitti")
class SemanticKITTILayout(SceneLayout):
    """SemanticKITTI scans, 19 classes; train 00-07, 09, 10, val 08 (``sequences=`` to choose)."""

    classes = SEMANTICKITTI_CLASSES
    splits = "train: 00-07, 09, 10; val: 08; test: 11-21"
    features = ("strength",)
    folder = "semantickitti/dataset"
    scan_order = 10  # a scan's labels/<stem>.label is asked for first, before Pointcept's segment.npy

    def find(
        self, root: Path, split: str, *, test_area: int, sequences: Optional[Sequence[str]], skip_missing: bool
    ) -> List[SceneRef]:
        seq_root = root / "sequences" if (root / "sequences").is_dir() else root
        if sequences is not None:
            wanted = [f"{int(s):02d}" if str(s).isdigit() else str(s) for s in sequences]
        elif split == "all":
            wanted = (
                sorted(d.name for d in seq_root.iterdir() if (d / "velodyne").is_dir()) if seq_root.is_dir() else []
            )
        else:
            wanted = list(SEMANTICKITTI_SPLITS[split])
        missing = [seq for seq in wanted if not (seq_root / seq / "velodyne").is_dir()]
        if sequences is not None and missing:  # sequences the user named: say which are not there
            have = sorted(d.name for d in seq_root.iterdir() if (d / "velodyne").is_dir()) if seq_root.is_dir() else []
            raise layout_error(
                seq_root,
                f"sequence(s) {missing} not found (no <sequence>/velodyne/ folder); this "
                f"root has {have or 'none'} (data.sequences / sequences=)",
            )
        refs = []
        for seq in wanted:
            for b in sorted((seq_root / seq / "velodyne").glob("*.bin")):
                refs.append(
                    SceneRef(
                        f"{seq}_{b.stem}", self.name, b, seq_root / seq / "labels" / f"{b.stem}.label", split=split
                    )
                )
        return refs

    def read(
        self, ref: SceneRef, *, classes: Optional[Sequence[str]] = None, unknown: str = "ignore"
    ) -> Dict[str, np.ndarray]:
        return read_semantickitti_scan(ref.path, ref.label_path)

    def converted_place(self, ref: SceneRef, split: str) -> Tuple[str, str]:
        """The official split of the scan's sequence (the split read, for a sequence in none)."""
        seq = ref.name.split("_")[0]
        official = next((s for s, seqs in SEMANTICKITTI_SPLITS.items() if seq in seqs), split)
        return official, ref.name

    def scan_label_path(self, scan: Path) -> Optional[Path]:
        """``labels/<stem>.label`` beside the scan's ``velodyne/`` folder, else ``<stem>.label`` beside the scan."""
        if scan.is_dir():
            return None
        candidates = (scan.parent.parent / "labels" / f"{scan.stem}.label", scan.with_suffix(".label"))
        return next((c for c in candidates if c.is_file()), None)

    def scan_folder_note(self, folder: Path) -> Optional[Tuple[str, Path]]:
        """A sequence folder (``velodyne/`` in it) or a dataset root (``sequences/`` in it)."""
        if (folder / "velodyne").is_dir():
            what, scans = "a SemanticKITTI sequence", folder / "velodyne"
        elif (folder / "sequences").is_dir():
            what, scans = "a SemanticKITTI dataset root", folder / "sequences" / "NN" / "velodyne"
        else:
            return None
        return (
            f"{what} folder; its scans are the .bin files of {scans}/ (their labels are found in labels/ beside it)"
        ), scans
