"""The S3DIS layout: ``<root>/Area_N/<room>/Annotations/<class>_<i>.txt`` (rows ``x y z r g b``).

13 classes (:data:`S3DIS_CLASSES`); the class of a point is the prefix of its file's name, its id the position of
that class in the class list (``classes=``; ``unknown=`` says what a class outside it becomes). Area 5 is held out
(:data:`S3DIS_TEST_AREA`): ``val`` = ``test`` = the test area, ``train`` the others. The Area helpers here
(:func:`area_of`, :func:`area_split`, :func:`area_place`) are the S3DIS convention the other layouts of S3DIS
data share (``pointcept``'s ``Area_N`` folders, ``mmdet3d_s3dis``).

Shapes:
    a room: coord ``[N, 3]`` float32 (float64 for large offsets), color ``[N, 3]`` float32, segment / instance
    ``[N]`` int64.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...io.text import read_text_rows
from .._common import PathLike
from .base import IGNORE_INDEX, LAYOUTS, SceneLayout, SceneRef, coord_array, layout_colors, layout_error, read_with

__all__ = [
    "S3DIS_CLASSES",
    "S3DIS_TEST_AREA",
    "S3DISLayout",
    "read_s3dis_room",
    "s3dis_room_classes",
    "check_unknown",
    "area_of",
    "area_split",
    "area_place",
]

S3DIS_CLASSES: Tuple[str, ...] = (
    "ceiling",
    "floor",
    "wall",
    "beam",
    "column",
    "window",
    "door",
    "table",
    "chair",
    "sofa",
    "bookcase",
    "board",
    "clutter",
)
#: the Area held out by the standard S3DIS protocol
S3DIS_TEST_AREA = 5

_AREA = re.compile(r"^Area_(\d+)")


def area_of(name: str) -> Optional[int]:
    """The Area number of a name starting ``Area_N`` (a folder, a scene), else None."""
    m = _AREA.match(name)
    return int(m.group(1)) if m else None


def area_split(area: Optional[int], split: str, test_area: int) -> bool:
    """Whether Area ``area`` belongs to ``split`` with ``test_area`` held out (``val`` / ``test``: that Area,
    ``train``: the others, ``all``: every one; a name without an Area belongs to ``all`` only)."""
    if split == "all":
        return True
    if area is None:
        return False
    return (area == test_area) if split in ("val", "test") else (split == "train" and area != test_area)


def area_place(ref: SceneRef, split: str) -> Tuple[str, str]:
    """``(split folder, scene folder)`` of an S3DIS room in the common layout: ``Area_N/<room>`` for a scene named
    ``Area_N_<room>``, else ``<split>/<name>``."""
    if ref.name.startswith("Area_"):
        area, _, room = ref.name.partition("_")[2].partition("_")
        return f"Area_{area}", room or ref.name
    return split, ref.name


def _s3dis_class(p: Path, classes: Sequence[str], unknown: str) -> int:
    name = p.stem.rsplit("_", 1)[0] if "_" in p.stem else p.stem
    if name in classes:
        return list(classes).index(name)
    if unknown == "error":
        raise layout_error(p, f"class {name!r} (from the file name) is not one of {list(classes)}")
    if unknown == "ignore":
        return IGNORE_INDEX
    return list(classes).index(unknown)


def check_unknown(where: str, unknown: str, classes: Sequence[str]) -> None:
    """``unknown`` (what an S3DIS file of another class becomes) must be ``"ignore"``, ``"error"`` or one of
    ``classes``: a ValueError naming it (and its config key and flag) otherwise, before any room is read."""
    if unknown not in ("ignore", "error") and unknown not in classes:
        raise ValueError(
            f"{where}: unknown={unknown!r} (data.unknown; gridify convert --unknown) must be 'ignore', "
            f"'error' or one of the classes {list(classes)}"
        )


def s3dis_room_classes(room: PathLike) -> List[str]:
    """The class names of an S3DIS room's annotation files (``Annotations/<class>_<i>.txt``), sorted, unique."""
    files = Path(room, "Annotations").glob("*.txt")
    return sorted({f.stem.rsplit("_", 1)[0] if "_" in f.stem else f.stem for f in files})


def read_s3dis_room(
    room: PathLike, classes: Sequence[str] = S3DIS_CLASSES, unknown: str = "ignore"
) -> Dict[str, np.ndarray]:
    """One S3DIS room from ``<room>/Annotations/<class>_<i>.txt`` (the class is the file-name prefix).

    Args:
        room: the room folder (``Area_N/<room>``).
        classes: the class list (ids are positions in it); default the 13 S3DIS classes.
        unknown: what a file whose class is not in ``classes`` becomes: ``"ignore"`` (-1),
            ``"error"``, or the name of a class in ``classes`` (Pointcept maps ``stairs`` to
            ``clutter``).

    Returns:
        a scene (see :mod:`gridify.datasets.scene_layouts`) with ``coord``, ``color``, ``segment`` and
        ``instance``.
    """
    room = Path(room)
    check_unknown("read_s3dis_room", unknown, classes)
    files = sorted((room / "Annotations").glob("*.txt"))
    if not files:
        raise layout_error(room, "no Annotations/<class>_<i>.txt files (S3DIS raw layout)")
    rows, seg, inst = [], [], []
    for i, f in enumerate(files):
        block = read_with(read_text_rows, f, 6, "x y z r g b")
        layout_colors(f, block[:, 3:6])  # a value that is no colour: named with its file and row
        rows.append(block)
        seg.append(np.full(len(block), _s3dis_class(f, classes, unknown), dtype=np.int64))
        inst.append(np.full(len(block), i, dtype=np.int64))
    data = np.concatenate(rows)  # float64: coordinates cast only after the scene is centred (coord_array)
    return {
        "coord": coord_array(data[:, :3]),
        "color": layout_colors(room, data[:, 3:6]),  # the room decides
        "segment": np.concatenate(seg),
        "instance": np.concatenate(inst),
    }


@LAYOUTS.register("s3dis")
class S3DISLayout(SceneLayout):
    """S3DIS rooms (raw ``Area_N/<room>/Annotations`` layout), 13 classes, Area 5 held out."""

    classes = S3DIS_CLASSES
    splits = "train: Areas 1-4, 6; val/test: Area 5"
    features = ("color",)
    folder = "s3dis/Stanford3dDataset_v1.2_Aligned_Version"
    ids_from_class_list = True
    scan_order = 30

    def find(
        self, root: Path, split: str, *, test_area: int, sequences: Optional[Sequence[str]], skip_missing: bool
    ) -> List[SceneRef]:
        refs = []
        for area in sorted(root.glob("Area_*"), key=lambda q: (area_of(q.name) or 0, q.name)):
            if not area.is_dir() or not area_split(area_of(area.name), split, test_area):
                continue
            for room in sorted(q for q in area.iterdir() if (q / "Annotations").is_dir()):
                refs.append(SceneRef(f"{area.name}_{room.name}", self.name, room, split=split))
        return refs

    def read(
        self, ref: SceneRef, *, classes: Optional[Sequence[str]] = None, unknown: str = "ignore"
    ) -> Dict[str, np.ndarray]:
        return read_s3dis_room(ref.path, S3DIS_CLASSES if classes is None else classes, unknown)

    def converted_place(self, ref: SceneRef, split: str) -> Tuple[str, str]:
        return area_place(ref, split)

    def file_classes(self, ref: SceneRef) -> List[str]:
        return s3dis_room_classes(ref.path)
