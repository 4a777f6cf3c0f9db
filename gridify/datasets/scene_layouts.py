"""Scene data in the field's layouts: finding and reading scenes through the layout registry, class lists, and the
ground truth of one scan.

Each layout is a module of :mod:`gridify.datasets.layouts` registering a
``SceneLayout`` in ``LAYOUTS``; this module asks them and holds no
layout's knowledge of its own (a layout's constants, class lists, label maps and reader are importable from here
as before). The layouts only discover files (which files make a scene, the splits) and map labels: every file
format is read by :mod:`gridify.io` (:func:`gridify.io.kitti.read_kitti_rows` /
:func:`~gridify.io.kitti.read_kitti_labels`, :func:`gridify.io.text.read_text_rows`,
:func:`gridify.io.ply.read_ply_vertices`, :func:`gridify.io.raw.read_raw_rows`,
:func:`gridify.io.npy.read_npy_array`, :func:`gridify.io.read_labels`), whose errors become :class:`DatasetError`
with the same message.

Every reader returns a *scene*: a dict of numpy arrays in the common (Pointcept) vocabulary,

* ``coord`` ``[N, 3]`` float32 (metres), always; float64 when the file's float64 coordinates have a large
  offset (UTM metres: the rule of :mod:`gridify.io.cloud`), which the datasets centre in float64 before
  the cast (:func:`gridify.io.centre_large_offset`);
* ``color`` ``[N, 3]`` float32 in ``[0, 255]`` (one rule for every layout, ``layout_colors``: the scale is
  decided from the whole scene's values, 16-bit colours, whole numbers up to 65535, are brought to 0-255, and
  values that are no colours are refused), ``normal`` ``[N, 3]`` float32, ``strength`` ``[N, 1]`` float32
  (LiDAR remission; integers go to the unit scale by :func:`gridify.io.cloud.unit_scaled`), when the layout
  has them;
* ``segment`` ``[N]`` int64: the official training ids ``0..C-1``, ``IGNORE_INDEX`` (-1)
  for unlabelled / ignored points (a scene without labels is all -1).

Layouts (``LAYOUTS``; :func:`find_scenes` lists a split's scenes, :func:`read_scene` reads one):

* ``pointcept`` (:mod:`~gridify.datasets.layouts.pointcept`): ``<root>/<split>/<scene>/coord.npy`` (+
  ``color.npy``, ``normal.npy``, ``strength.npy``, ``segment.npy``, ``instance.npy``); the common format, see
  ``read_pointcept_scene``. A split is a folder name; ``train``/``val``/``test`` fall back to the S3DIS
  convention (``Area_N`` folders, ``test_area`` held out) when no such folder exists.
* ``s3dis`` (:mod:`~gridify.datasets.layouts.s3dis`): ``<root>/Area_N/<room>/Annotations/<class>_<i>.txt`` (rows
  ``x y z r g b``), 13 classes (``S3DIS_CLASSES``), Area 5 held out (``val`` = ``test`` = the test area).
* ``scannet`` (:mod:`~gridify.datasets.layouts.scannet`): ``<root>/scans/<scene>/<scene>_vh_clean_2.ply`` +
  ``<scene>_vh_clean_2.labels.ply`` (vertex ``label`` = NYU40 id -> the 20 benchmark classes,
  ``SCANNET20_NYU40_IDS``); ``train``/``val`` are filtered by the official lists
  ``<root>/scannetv2_{train,val}.txt``, ``test`` is ``<root>/scans_test`` (no labels). ``<root>`` may hold the
  scene folders directly.
* ``semantickitti`` (:mod:`~gridify.datasets.layouts.semantickitti`): ``<root>/sequences/NN/velodyne/NNNNNN.bin``
  (float32 x y z remission) + ``labels/NNNNNN.label`` (uint32; semantic id in the low 16 bits) -> 19 classes by
  the official learning map (``SEMANTICKITTI_LEARNING_MAP``); train 00-07, 09, 10; val 08; test 11-21.
* ``mmdet3d_scannet`` / ``mmdet3d_s3dis`` (:mod:`~gridify.datasets.layouts.mmdet3d`): mmdetection3d's processed
  layout, ``<root>/points/<scene>.bin`` (float32 ``x y z r g b``) + ``semantic_mask/<scene>.bin`` (int64:
  NYU40 ids for ScanNet, 0..12 for S3DIS); ``mmdet3d_scannet_instance``: the older
  ``<root>/scannet_train_instance_data/<scene>_vert[_all].npy`` ``[N, 6]`` + ``_sem_label[_all].npy``
  (NYU40; the ``_all`` files are the full scans and are preferred). mmdetection3d's SemanticKITTI
  test data is the ``semantickitti`` layout.

Every split also accepts ``"all"`` (every scene found). Errors are :class:`DatasetError` naming the
file (and line, for S3DIS text) or the scene; sizes are checked against the file sizes before
anything is allocated (a ``.label`` whose count differs from its ``.bin``'s names both files, a
PLY vertex count below its data names both counts); label values go through one check,
``integer_labels`` (a fractional label is refused naming the file and the row, in every layout, the datasets'
scenes and the converter's output too). A class list given for a layout whose labels are fixed ids (every layout
but those whose ids are positions in the list, ``s3dis``, and those without official classes, ``pointcept``), or
beside a root's ``classes.txt``, must name exactly those ids (:func:`check_layout_classes`: a longer list holds a
class no point can have). An official split list (``scannetv2_<split>.txt``) naming a scene that is not under the
root is refused, naming the list, the missing scenes and what the root holds, unless ``skip_missing``
(``data.skip_missing``) asks to use the scenes there.

One scan alone (``gridify evaluate --scan``, ``gridify show --labels``): :func:`scan_label_path` asks the layouts
where its ground truth is, :func:`read_scan_labels` reads it (:func:`gridify.io.read_labels`) as the model's ids,
:func:`folder_scan` / :func:`scan_folder_note` / :func:`scan_name` answer for a folder given as a scan.

Shapes:
    coord ``[N, 3]`` float32 (float64 for large offsets), color / normal ``[N, 3]`` float32, strength
    ``[N, 1]`` float32, segment ``[N]`` int64.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..io.labels import read_labels
from ._common import DatasetError, PathLike, align_labels
from .layouts import LAYOUTS, SceneLayout, SceneRef, get_layout, registered_layouts
from .layouts.base import IGNORE_INDEX, integer_labels, layout_colors, layout_error, read_text_lines, read_with
from .layouts.mmdet3d import read_mmdet3d_scene
from .layouts.pointcept import POINTCEPT_FILES, read_pointcept_scene
from .layouts.s3dis import S3DIS_CLASSES, S3DIS_TEST_AREA, check_unknown, read_s3dis_room, s3dis_room_classes
from .layouts.scannet import (
    SCANNET20_CLASSES,
    SCANNET20_NYU40_IDS,
    map_nyu40_to_scannet20,
    read_ply_vertices,
    read_scannet_scene,
)
from .layouts.semantickitti import (
    SEMANTICKITTI_CLASSES,
    SEMANTICKITTI_LEARNING_MAP,
    SEMANTICKITTI_SPLITS,
    map_semantickitti_labels,
    read_semantickitti_scan,
)

__all__ = [
    "IGNORE_INDEX",
    "S3DIS_CLASSES",
    "S3DIS_TEST_AREA",
    "SCANNET20_CLASSES",
    "SCANNET20_NYU40_IDS",
    "SEMANTICKITTI_CLASSES",
    "SEMANTICKITTI_LEARNING_MAP",
    "SEMANTICKITTI_SPLITS",
    "LAYOUTS",
    "SceneLayout",
    "get_layout",
    "listed_layouts",
    "SceneRef",
    "find_scenes",
    "read_scene",
    "read_s3dis_room",
    "read_scannet_scene",
    "read_ply_vertices",
    "read_semantickitti_scan",
    "read_pointcept_scene",
    "read_mmdet3d_scene",
    "map_nyu40_to_scannet20",
    "map_semantickitti_labels",
    "POINTCEPT_FILES",
    "scan_label_path",
    "read_scan_labels",
    "check_scan_labels",
    "folder_scan",
    "scan_folder_note",
    "scan_name",
    "read_text_lines",
    "integer_labels",
    "s3dis_room_classes",
    "check_unknown",
    "layout_colors",
    "check_layout_classes",
    "check_scene_selection",
    "nested_root_hint",
]

#: the splits of a layout whose splits are not folder names (``SceneLayout.named_splits``)
SCENE_SPLITS = ("train", "val", "test", "all")


def listed_layouts() -> List[str]:
    """The layouts whose splits are official lists of scene names (``scannetv2_<split>.txt``): the ones
    ``skip_missing`` applies to (``SceneLayout.split_lists``)."""
    return [layout.name for layout in registered_layouts() if layout.split_lists]


def _declared_classes(root: Path) -> Optional[Tuple[int, Path]]:
    """``(number of ids, the file declaring them)`` of the root of a layout without official classes
    (``pointcept``): the classes its conversion recorded (``conversion.json``), else its ``classes.txt``; None
    when it has neither."""
    record = root / "conversion.json"
    try:
        data = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else None
    except (OSError, ValueError):
        data = None  # an unreadable record: the converter names it; the list file still declares the ids
    if isinstance(data, dict) and isinstance(data.get("classes"), list) and data["classes"]:
        return len(data["classes"]), record
    listed = root / "classes.txt"
    return (len(read_text_lines(listed)), listed) if listed.is_file() else None


def check_layout_classes(
    where: str, layout: str, classes: Sequence[str], root: Optional[PathLike] = None, source: str = "classes"
) -> None:
    """Refuse a class list that does not name the training ids of ``layout``'s labels, naming the list, its length
    and the ids: a name given twice (the second is never labelled); for a layout whose labels are fixed ids (every
    layout with official classes whose ids are not positions in the list: not ``s3dis``) a list of another length
    than its official classes; for the ``root`` of a layout without official classes (``pointcept``), one of
    another length than the classes its conversion recorded (``conversion.json``) or its ``classes.txt`` declares.
    A longer list holds a class no point can have (a phantom class: a zero in every count, a NaN or zero IoU in the
    mean); a shorter one leaves ids without a name. ``source``: what the list is in messages (``"classes"``: the
    argument; a ``classes.txt`` path)."""
    names = [str(c) for c in classes]
    seen: Dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise layout_error(
                where,
                f"{source} names {name!r} twice (positions {seen[name]} and {i}): the second "
                f"would never be labelled (a phantom class); give each class once "
                f"(data.classes)",
            )
        seen[name] = i
    info = get_layout(layout)
    fixed = None if info.ids_from_class_list else info.classes
    m = len(fixed) if fixed else None
    said = f"{layout}'s labels are the {m} ids 0..{(m or 0) - 1} of its own classes"
    if info.classes is None and root is not None:
        found = _declared_classes(Path(root))
        if found is not None and str(found[1]) != source:
            m, said = found[0], f"{found[1]} declares {found[0]} (the ids 0..{found[0] - 1} of its scenes' labels)"
    if m is None or m == len(names):
        return
    why = (
        "a class beyond them is one no point can have (a phantom class)"
        if len(names) > m
        else "ids beyond the list would have no class"
    )
    fix = (
        f"give {m} names, or leave classes out (data.classes)"
        if source == "classes"
        else f"write its {m} class names there, one per line (gridify convert does)"
    )
    raise layout_error(
        where, f"{source} names {len(names)} classes, but {said} (classes renames them only): {why}; {fix}"
    )


def check_scene_selection(
    where: str, *, test_area: Any = S3DIS_TEST_AREA, sequences: Any = None, scenes: Any = None
) -> None:
    """Refuse, naming the argument, a ``test_area`` that is not an integer Area 1-6 (``"5"`` or None put the
    held-out Area into the training split), and ``sequences`` / ``scenes`` that are not lists of names (a
    string would be read character by character: ``sequences="05"`` as sequences 0 and 5)."""
    if isinstance(test_area, bool) or not isinstance(test_area, (int, np.integer)) or not 1 <= int(test_area) <= 6:
        raise DatasetError(
            f"{where}: test_area must be an integer Area 1..6 (the S3DIS Area held out), got {test_area!r}"
        )
    for name, value in (("sequences", sequences), ("scenes", scenes)):
        if value is None:
            continue
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            example = "['08']" if name == "sequences" else "['08_000000']"
            raise DatasetError(f"{where}: {name} must be a list of names, e.g. {example}, got {value!r}")
        odd = [v for v in value if isinstance(v, bool) or not isinstance(v, (str, int, np.integer))]
        if odd:
            raise DatasetError(f"{where}: {name} must hold names (strings or integers), got {odd[0]!r}")


def find_scenes(
    root: PathLike,
    layout: str,
    split: str = "train",
    *,
    test_area: int = S3DIS_TEST_AREA,
    sequences: Optional[Sequence[str]] = None,
    skip_missing: bool = False,
) -> List[SceneRef]:
    """The scenes of ``split`` under ``root`` in ``layout`` (see the module docstring), sorted by name.

    Args:
        root: the layout's root folder.
        layout: a name of ``LAYOUTS``.
        split: ``train``, ``val``, ``test`` or ``all`` (a layout of folder-name splits, ``pointcept``: also any
            folder name under ``root``).
        test_area: the S3DIS Area held out (``val`` and ``test`` are that Area; ``train`` the others).
        sequences: SemanticKITTI sequences to read instead of the split's official ones.
        skip_missing: an official split list (``scannetv2_<split>.txt``) naming scenes that are not under the
            root: use the others, with a warning (default: refuse, naming the list and the scenes).
    """
    root = Path(root)
    check_scene_selection("find_scenes", test_area=test_area, sequences=sequences)
    if layout not in LAYOUTS.names():
        raise ValueError(f"find_scenes: unknown layout {layout!r}; known: {sorted(LAYOUTS)}")
    if not get_layout(layout).named_splits and split not in SCENE_SPLITS:
        raise ValueError(f"find_scenes: split must be 'train', 'val', 'test' or 'all', got {split!r}")
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "no such folder"
        raise layout_error(root, f"{what} (the {layout} root)")
    try:
        return _layout_scenes(root, layout, split, test_area, sequences, skip_missing)
    except DatasetError as exc:
        hint = nested_root_hint(root, layout, split, test_area=test_area, sequences=sequences)
        if hint:
            raise DatasetError(f"{exc}; {hint}") from None
        raise


def nested_root_hint(
    root: PathLike,
    layout: str,
    split: str,
    *,
    test_area: int = S3DIS_TEST_AREA,
    sequences: Optional[Sequence[str]] = None,
) -> str:
    """When ``root`` has no scenes of ``split`` but one of its subfolders has (``semantickitti_mini`` given for
    ``semantickitti_mini/dataset``), the sentence naming that folder as the root to give; else ``""``."""
    root = Path(root)
    try:
        children = sorted(c for c in root.iterdir() if c.is_dir())[:_HINT_FOLDERS]
    except OSError:
        return ""
    for child in children:
        try:
            if _layout_scenes(child, layout, split, test_area, sequences):
                return f"its subfolder {child.name!r} holds them: give root={str(child)!r}"
        except (DatasetError, OSError, ValueError):
            continue
    return ""


#: subfolders of a root without scenes that :func:`nested_root_hint` looks into
_HINT_FOLDERS = 16


def _layout_scenes(
    root: Path, layout: str, split: str, test_area: int, sequences: Optional[Sequence[str]], skip_missing: bool = False
) -> List[SceneRef]:
    """:func:`find_scenes` of a checked, existing ``root``: the layout's own."""
    return get_layout(layout).find(root, split, test_area=test_area, sequences=sequences, skip_missing=skip_missing)


def read_scene(
    ref: SceneRef, *, classes: Optional[Sequence[str]] = None, unknown: str = "ignore"
) -> Dict[str, np.ndarray]:
    """Read the scene ``ref`` (a ``SceneRef`` from :func:`find_scenes`) into the common vocabulary.

    ``classes`` / ``unknown`` apply to a layout whose ids are positions in the class list (S3DIS: e.g. the forest
    plot's ``tree``, ``ground``, ``clutter``); see ``read_s3dis_room``.
    """
    return get_layout(ref.layout).read(ref, classes=classes, unknown=unknown)


# --------------------------------------------------------------------------------------
# ground truth of a single scan (gridify evaluate --scan, gridify show --labels)
# --------------------------------------------------------------------------------------
def scan_label_path(scan: PathLike) -> Optional[Path]:
    """The ground-truth file of one scan where a layout puts it, or None (the layouts asked in their registration
    order): a SemanticKITTI ``labels/<stem>.label`` beside the scan's ``velodyne/`` folder (or ``<stem>.label``
    beside the scan), a Pointcept ``segment.npy`` beside ``coord.npy`` (the scan given as that folder or its
    ``coord.npy``)."""
    p = Path(scan)
    return next((found for layout in registered_layouts() if (found := layout.scan_label_path(p)) is not None), None)


def folder_scan(folder: PathLike) -> Optional[Path]:
    """The scan file of a folder that is one scene of a layout (a Pointcept scene folder: its ``coord.npy``), else
    None."""
    p = Path(folder)
    return next((found for layout in registered_layouts() if (found := layout.folder_scan(p)) is not None), None)


def scan_folder_note(folder: PathLike) -> Optional[Tuple[str, Path]]:
    """For a folder holding a layout's scans below it (a SemanticKITTI sequence or dataset root): ``(what it is
    and where its scans are, in words; the folder of scan files to give instead)``, else None."""
    p = Path(folder)
    return next((note for layout in registered_layouts() if (note := layout.scan_folder_note(p)) is not None), None)


def scan_name(scan: PathLike) -> str:
    """The name of one scan: its stem, or what its layout calls it (a Pointcept scene folder's name for its
    ``coord.npy``)."""
    p = Path(scan)
    return next((name for layout in registered_layouts() if (name := layout.scan_name(p)) is not None), p.stem)


#: the label files of a scan's ground truth: SemanticKITTI ``.label``, ``.npy``, text
SCAN_LABEL_SUFFIXES = (".label", ".npy", ".txt")


def read_scan_labels(path: PathLike, num_points: Any, class_names: Sequence[str]) -> np.ndarray:
    """Training ids ``[N]`` (``-1`` = ignore) of one scan's ground truth for a model with ``class_names``, read by
    the one label reader (:func:`gridify.io.read_labels`).

    ``.label`` (SemanticKITTI uint32): mapped to the 19 classes (``map_semantickitti_labels``) when the
    model's classes are SemanticKITTI's, else the low 16 bits taken as ids; ``.npy`` / ``.txt`` (integers, e.g.
    Pointcept ``segment.npy``, one per line in a text file): ids as they are. ``num_points``: the scan's point count,
    or the :class:`gridify.io.PointCloud` read from it, whose rows dropped by the reader (NaN/Inf coordinates)
    lose their labels too (:func:`~._common.align_labels`). Another count, a non-integer value or an id outside
    ``-1..K-1`` raises a :class:`DatasetError` naming the file.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in SCAN_LABEL_SUFFIXES:
        raise layout_error(p, f"unknown label file type {suffix!r}; use a SemanticKITTI .label, a .npy or a .txt")
    ids = read_with(read_labels, p)
    if suffix == ".label":
        kitti = tuple(c.lower() for c in class_names) == SEMANTICKITTI_CLASSES
        ids = map_semantickitti_labels(ids, str(p)) if kitti else ids & 0xFFFF
    cloud = None if isinstance(num_points, (int, np.integer)) else num_points  # or the cloud read from the scan
    n = int(num_points) if cloud is None else len(cloud)
    note = "" if cloud is None else cloud.dropped_note()
    if note and len(ids) != n and len(ids) == cloud.rows_in_file:  # one label per row of the file
        ids = align_labels(ids, p, cloud, Path(cloud.source or "the scan"))
    elif len(ids) != n:
        rows = f" ({note}: the file has {cloud.rows_in_file} rows)" if note else ""
        raise layout_error(p, f"{len(ids)} labels for a scan of {n} points{rows}")
    return check_scan_labels(p, ids, class_names)


def check_scan_labels(path: PathLike, ids: np.ndarray, class_names: Sequence[str]) -> np.ndarray:
    """``ids`` ``[N]`` (int64, one scan's ground truth from the file ``path``: a label file, or the scan's own
    label field) when every one is in ``-1..K-1`` for a model with the ``K`` classes ``class_names``; else a
    :class:`DatasetError` naming the file, the first bad label and its row (a fractional one too:
    ``integer_labels``)."""
    ids = integer_labels(path, ids)
    bad = np.flatnonzero((ids < IGNORE_INDEX) | (ids >= len(class_names)))
    if bad.size:
        raise layout_error(
            path,
            f"label {int(ids[bad[0]])} (row {int(bad[0])}) outside -1..{len(class_names) - 1} "
            f"({len(class_names)} classes of the model)",
        )
    return ids
