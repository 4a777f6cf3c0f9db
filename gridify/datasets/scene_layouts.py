"""Scene data in the field's layouts: official class lists, label maps, splits and one reader per layout.

The layouts only discover files (which files make a scene, the splits) and map labels: every file format is
read by :mod:`gridify.io` (:func:`gridify.io.kitti.read_kitti_rows` / :func:`~gridify.io.kitti.read_kitti_labels`,
:func:`gridify.io.text.read_text_rows`, :func:`gridify.io.ply.read_ply_vertices`,
:func:`gridify.io.raw.read_raw_rows`, :func:`gridify.io.npy.read_npy_array`), whose errors become
:class:`DatasetError` with the same message.

Every reader returns a *scene*: a dict of numpy arrays in the common (Pointcept) vocabulary,

* ``coord`` ``[N, 3]`` float32 (metres), always; float64 when the file's float64 coordinates have a large
  offset (UTM metres: the rule of :mod:`gridify.io.cloud`), which the datasets centre in float64 before
  the cast (:func:`gridify.io.centre_large_offset`);
* ``color`` ``[N, 3]`` float32 in ``[0, 255]`` (one rule for every layout, :func:`layout_colors`: the scale is
  decided from the whole scene's values, 16-bit colours, whole numbers up to 65535, are brought to 0-255, and
  values that are no colours are refused), ``normal`` ``[N, 3]`` float32, ``strength`` ``[N, 1]`` float32
  (LiDAR remission; integers go to the unit scale by :func:`gridify.io.cloud.unit_scaled`), when the layout
  has them;
* ``segment`` ``[N]`` int64: the official training ids ``0..C-1``, :data:`IGNORE_INDEX` (-1)
  for unlabelled / ignored points (a scene without labels is all -1).

Layouts (:data:`LAYOUTS`; :func:`find_scenes` lists a split's scenes, :func:`read_scene` reads one):

* ``pointcept``: ``<root>/<split>/<scene>/coord.npy`` (+ ``color.npy``, ``normal.npy``,
  ``strength.npy``, ``segment.npy``, ``instance.npy``); the common format, see :func:`read_pointcept_scene`.
  A split is a folder name; ``train``/``val``/``test`` fall back to the S3DIS convention
  (``Area_N`` folders, ``test_area`` held out) when no such folder exists.
* ``s3dis``: ``<root>/Area_N/<room>/Annotations/<class>_<i>.txt`` (rows ``x y z r g b``), 13
  classes (:data:`S3DIS_CLASSES`), Area 5 held out (``val`` = ``test`` = the test area).
* ``scannet``: ``<root>/scans/<scene>/<scene>_vh_clean_2.ply`` + ``<scene>_vh_clean_2.labels.ply``
  (vertex ``label`` = NYU40 id -> the 20 benchmark classes, :data:`SCANNET20_NYU40_IDS`);
  ``train``/``val`` are filtered by the official lists ``<root>/scannetv2_{train,val}.txt``,
  ``test`` is ``<root>/scans_test`` (no labels). ``<root>`` may hold the scene folders directly.
* ``semantickitti``: ``<root>/sequences/NN/velodyne/NNNNNN.bin`` (float32 x y z remission) +
  ``labels/NNNNNN.label`` (uint32; semantic id in the low 16 bits) -> 19 classes by the official
  learning map (:data:`SEMANTICKITTI_LEARNING_MAP`); train 00-07, 09, 10; val 08; test 11-21.
* ``mmdet3d_scannet`` / ``mmdet3d_s3dis``: mmdetection3d's processed layout,
  ``<root>/points/<scene>.bin`` (float32 ``x y z r g b``) + ``semantic_mask/<scene>.bin`` (int64:
  NYU40 ids for ScanNet, 0..12 for S3DIS); ``mmdet3d_scannet_instance``: the older
  ``<root>/scannet_train_instance_data/<scene>_vert[_all].npy`` ``[N, 6]`` + ``_sem_label[_all].npy``
  (NYU40; the ``_all`` files are the full scans and are preferred). mmdetection3d's SemanticKITTI
  test data is the ``semantickitti`` layout.

Every split also accepts ``"all"`` (every scene found). Errors are :class:`DatasetError` naming the
file (and line, for S3DIS text) or the scene; sizes are checked against the file sizes before
anything is allocated (a ``.label`` whose count differs from its ``.bin``'s names both files, a
PLY vertex count below its data names both counts); label values go through one check,
:func:`integer_labels` (a fractional label is refused naming the file and the row, in every layout, the datasets'
scenes and the converter's output too). A class list given for a layout whose labels are fixed ids (every layout
but ``s3dis`` and ``pointcept``), or beside a ``pointcept`` root's ``classes.txt``, must name exactly those ids
(:func:`check_layout_classes`: a longer list holds a class no point can have). An official split list
(``scannetv2_<split>.txt``) naming a scene that is not under the root is refused, naming the list, the missing
scenes and what the root holds, unless ``skip_missing`` (``data.skip_missing``) asks to use the scenes there.

Shapes:
    coord ``[N, 3]`` float32 (float64 for large offsets), color / normal ``[N, 3]`` float32, strength
    ``[N, 1]`` float32, segment ``[N]`` int64.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..io.cloud import color_scale, coordinate_dtype, label_values_problem, unit_scaled
from ..io.kitti import read_kitti_labels, read_kitti_rows
from ..io.npy import read_npy_array
from ..io.ply import read_ply_vertices as io_read_ply_vertices
from ..io.raw import read_raw_rows
from ..io.source import read_text_file
from ..io.text import read_text_rows
from .._checks import warn_at_caller
from ._common import DatasetError, PathLike, align_labels

__all__ = [
    "IGNORE_INDEX", "S3DIS_CLASSES", "S3DIS_TEST_AREA", "SCANNET20_CLASSES", "SCANNET20_NYU40_IDS",
    "SEMANTICKITTI_CLASSES", "SEMANTICKITTI_LEARNING_MAP", "SEMANTICKITTI_SPLITS", "LAYOUTS", "LayoutInfo",
    "SceneRef", "find_scenes", "read_scene", "read_s3dis_room", "read_scannet_scene", "read_ply_vertices",
    "read_semantickitti_scan", "read_pointcept_scene", "read_mmdet3d_scene", "map_nyu40_to_scannet20",
    "map_semantickitti_labels", "POINTCEPT_FILES", "scan_label_path", "read_scan_labels", "check_scan_labels",
    "read_text_lines", "integer_labels", "s3dis_room_classes", "check_unknown", "layout_colors", "check_layout_classes",
]

#: label of ignored / unlabelled points in every layout's training ids
IGNORE_INDEX = -1

S3DIS_CLASSES: Tuple[str, ...] = ("ceiling", "floor", "wall", "beam", "column", "window", "door", "table",
                                  "chair", "sofa", "bookcase", "board", "clutter")
#: the Area held out by the standard S3DIS protocol
S3DIS_TEST_AREA = 5

SCANNET20_CLASSES: Tuple[str, ...] = (
    "wall", "floor", "cabinet", "bed", "chair", "sofa", "table", "door", "window", "bookshelf", "picture",
    "counter", "desk", "curtain", "refrigerator", "shower curtain", "toilet", "sink", "bathtub",
    "otherfurniture")
#: the NYU40 id of each ScanNet benchmark class (every other id is ignored)
SCANNET20_NYU40_IDS: Tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 24, 28, 33, 34, 36, 39)

SEMANTICKITTI_CLASSES: Tuple[str, ...] = (
    "car", "bicycle", "motorcycle", "truck", "other-vehicle", "person", "bicyclist", "motorcyclist", "road",
    "parking", "sidewalk", "other-ground", "building", "fence", "vegetation", "trunk", "terrain", "pole",
    "traffic-sign")
#: the official learning map (semantic-kitti.yaml), raw id -> training id 0..18 or -1 (ignore);
#: a raw id not listed is ignored too
SEMANTICKITTI_LEARNING_MAP: Dict[int, int] = {
    0: -1, 1: -1, 10: 0, 11: 1, 13: 4, 15: 2, 16: 4, 18: 3, 20: 4, 30: 5, 31: 6, 32: 7, 40: 8, 44: 9,
    48: 10, 49: 11, 50: 12, 51: 13, 52: -1, 60: 8, 70: 14, 71: 15, 72: 16, 80: 17, 81: 18, 99: -1,
    252: 0, 253: 6, 254: 5, 255: 7, 256: 4, 257: 4, 258: 3, 259: 4}
SEMANTICKITTI_SPLITS: Dict[str, Tuple[str, ...]] = {
    "train": ("00", "01", "02", "03", "04", "05", "06", "07", "09", "10"),
    "val": ("08",),
    "test": tuple(f"{i:02d}" for i in range(11, 22)),
}

#: the files of a scene folder in the Pointcept layout, and their row width (None: [N])
POINTCEPT_FILES: Dict[str, Optional[int]] = {"coord": 3, "color": 3, "normal": 3, "strength": 1, "segment": None,
                                              "instance": None}


@dataclass(frozen=True)
class LayoutInfo:
    """What a layout is: its class names (None: given by the data), the ignore index, its splits."""

    name: str
    classes: Optional[Tuple[str, ...]]
    splits: str
    features: Tuple[str, ...]
    ignore_index: int = IGNORE_INDEX


LAYOUTS: Dict[str, LayoutInfo] = {
    "pointcept": LayoutInfo("pointcept", None, "<root>/<split>/ folders (Area_N: test_area held out)",
                            ("color", "strength")),
    "s3dis": LayoutInfo("s3dis", S3DIS_CLASSES, "train: Areas 1-4, 6; val/test: Area 5", ("color",)),
    "scannet": LayoutInfo("scannet", SCANNET20_CLASSES, "scannetv2_{train,val}.txt lists; test: scans_test",
                          ("color",)),
    "semantickitti": LayoutInfo("semantickitti", SEMANTICKITTI_CLASSES,
                                "train: 00-07, 09, 10; val: 08; test: 11-21", ("strength",)),
    "mmdet3d_scannet": LayoutInfo("mmdet3d_scannet", SCANNET20_CLASSES, "scannetv2_{split}.txt lists or 'all'",
                                  ("color",)),
    "mmdet3d_scannet_instance": LayoutInfo("mmdet3d_scannet_instance", SCANNET20_CLASSES,
                                           "scannetv2_{split}.txt lists or 'all'", ("color",)),
    "mmdet3d_s3dis": LayoutInfo("mmdet3d_s3dis", S3DIS_CLASSES, "by Area, as s3dis", ("color",)),
}


@dataclass(frozen=True)
class SceneRef:
    """One scene of a layout: its name (unique in the split), the layout and the files it reads."""

    name: str
    layout: str
    path: Path
    label_path: Optional[Path] = None
    split: str = ""


def _fail(where: object, msg: str) -> DatasetError:
    return DatasetError(f"{where}: {msg}")


def _read(reader: Callable[..., Any], path: Path, *args: Any) -> Any:
    """``reader(path, *args)``, a reader of :mod:`gridify.io` (which owns the file formats), its error as a
    :class:`DatasetError` with the same message (naming the file, and the line where it has one)."""
    try:
        return reader(path, *args)
    except (ValueError, OSError) as exc:
        raise DatasetError(str(exc)) from None


def _coord(xyz: np.ndarray) -> np.ndarray:
    """Coordinates ``[N, 3]`` as float32, or float64 when float32 would round away their detail (a large offset,
    :func:`gridify.io.cloud.coordinate_dtype`): never cast before they are centred."""
    return np.ascontiguousarray(xyz, dtype=coordinate_dtype(np.asarray(xyz)))


def integer_labels(path: PathLike, values: np.ndarray, what: str = "file") -> np.ndarray:
    """Per-point label values ``[N]`` (ids or raw class codes) as int64, the one check of every layout and of
    :func:`read_scan_labels`: integers, or floats holding whole numbers (a text file, a float ``.npy`` or PLY
    property); anything else (a fractional value, NaN/Inf, a bool or non-numeric array) raises a
    :class:`DatasetError` naming the file and the first bad row, never truncated to an id. ``what``: the kind
    of ``path`` in that message (``"file"``; ``"array"`` for a scene in memory).

    Shapes:
        ``[N]`` (or ``[N, 1]``) -> ``[N]`` int64.
    """
    a = np.asarray(values)
    if a.ndim > 2 or (a.ndim == 2 and a.shape[1] != 1):
        raise _fail(path, f"labels must hold one value per point ([N] or [N, 1]), got shape {a.shape}")
    a = a.reshape(-1)
    problem = label_values_problem(a, what)
    if problem:
        raise _fail(path, problem)
    return a.astype(np.int64)


def layout_colors(where: PathLike, values: Any) -> np.ndarray:
    """A scene's colours ``[N, 3]`` on the layouts' 0-255 scale (float32), the one rule of every layout (S3DIS text,
    ScanNet PLY, Pointcept ``color.npy``, mmdetection3d binaries): the scale is decided from the finite values of
    the whole scene (:func:`gridify.io.cloud.color_scale`; the layouts' files hold 0-255 colours, so floats in
    ``[0, 1]`` are not read as unit colours): values in ``[0, 255]`` as they are; whole numbers beyond 255 up to
    65535 (16-bit colours) times 255/65535; anything else (a negative value, a fraction beyond 255, a value beyond
    65535) is no colour and raises a :class:`DatasetError` naming ``where``, the row and the value. NaN/Inf stay (the
    scene drops those rows as it is read).

    Shapes:
        ``[N, 3]`` -> ``[N, 3]`` float32.
    """
    a = np.asarray(values)
    if a.dtype.kind not in "fiu":
        raise _fail(where, f"colours must be numbers, got dtype {a.dtype}")
    scale = color_scale(a, unit_floats=False)
    if scale is None:
        with np.errstate(invalid="ignore"):
            bad = np.isfinite(a) & ((a < 0) | (a > 65535) | ((a > 255) & (a != np.round(a))))
        row = int(np.flatnonzero(bad.reshape(len(a), -1).any(1))[0])
        raise _fail(where, f"colour {float(a[bad][0])!r} (row {row}) is neither 8-bit (0-255) nor a 16-bit whole "
                           f"number (0-65535): the colours of a scene are 0-255 values, or 16-bit ones (scaled to "
                           f"0-255 when a scene holds one above 255)")
    return (a.astype(np.float64) * (255.0 / scale)).astype(np.float32)


# --------------------------------------------------------------------------------------
# label maps
# --------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _kitti_lut() -> np.ndarray:
    lut = np.full(1 << 16, IGNORE_INDEX, dtype=np.int64)
    for raw, train in SEMANTICKITTI_LEARNING_MAP.items():
        lut[raw] = train
    lut.flags.writeable = False
    return lut


@lru_cache(maxsize=None)
def _nyu_lut() -> np.ndarray:
    lut = np.full(256, IGNORE_INDEX, dtype=np.int64)
    lut[list(SCANNET20_NYU40_IDS)] = np.arange(len(SCANNET20_NYU40_IDS))
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


def map_nyu40_to_scannet20(ids: np.ndarray) -> np.ndarray:
    """NYU40 ids -> the 20 ScanNet benchmark training ids (0..19); every other id -> -1.

    Shapes:
        ``[N]`` -> ``[N]`` int64.
    """
    ids = np.asarray(ids).astype(np.int64)
    out = np.full(ids.shape, IGNORE_INDEX, dtype=np.int64)
    ok = (ids >= 0) & (ids < 256)
    out[ok] = _nyu_lut()[ids[ok]]
    return out


# --------------------------------------------------------------------------------------
# S3DIS raw text
# --------------------------------------------------------------------------------------
def _s3dis_class(p: Path, classes: Sequence[str], unknown: str) -> int:
    name = p.stem.rsplit("_", 1)[0] if "_" in p.stem else p.stem
    if name in classes:
        return list(classes).index(name)
    if unknown == "error":
        raise _fail(p, f"class {name!r} (from the file name) is not one of {list(classes)}")
    if unknown == "ignore":
        return IGNORE_INDEX
    return list(classes).index(unknown)


def check_unknown(where: str, unknown: str, classes: Sequence[str]) -> None:
    """``unknown`` (what an S3DIS file of another class becomes) must be ``"ignore"``, ``"error"`` or one of
    ``classes``: a ValueError naming it (and its config key and flag) otherwise, before any room is read."""
    if unknown not in ("ignore", "error") and unknown not in classes:
        raise ValueError(f"{where}: unknown={unknown!r} (data.unknown; gridify convert --unknown) must be 'ignore', "
                         f"'error' or one of the classes {list(classes)}")


#: the layouts with an official split list (``scannetv2_<split>.txt``): the ones ``skip_missing`` applies to
LISTED_LAYOUTS = ("scannet", "mmdet3d_scannet", "mmdet3d_scannet_instance")


def _declared_classes(root: Path) -> Optional[Tuple[int, Path]]:
    """``(number of ids, the file declaring them)`` of a ``pointcept`` root: the classes its conversion recorded
    (``conversion.json``), else its ``classes.txt``; None when it has neither."""
    record = root / "conversion.json"
    try:
        data = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else None
    except (OSError, ValueError):
        data = None  # an unreadable record: the converter names it; the list file still declares the ids
    if isinstance(data, dict) and isinstance(data.get("classes"), list) and data["classes"]:
        return len(data["classes"]), record
    listed = root / "classes.txt"
    return (len(read_text_lines(listed)), listed) if listed.is_file() else None


def check_layout_classes(where: str, layout: str, classes: Sequence[str], root: Optional[PathLike] = None,
                         source: str = "classes") -> None:
    """Refuse a class list that does not name the training ids of ``layout``'s labels, naming the list, its length
    and the ids: a name given twice (the second is never labelled); for a layout whose labels are fixed ids (every
    layout but ``s3dis``, whose ids are positions in the list, and ``pointcept``) a list of another length than its
    official classes; for a ``pointcept`` ``root``, one of another length than the classes its conversion recorded
    (``conversion.json``) or its ``classes.txt`` declares. A longer list holds a class no point can have (a phantom
    class: a zero in every count, a NaN or zero IoU in the mean); a shorter one leaves ids without a name.
    ``source``: what the list is in messages (``"classes"``: the argument; a ``classes.txt`` path)."""
    names = [str(c) for c in classes]
    seen: Dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise _fail(where, f"{source} names {name!r} twice (positions {seen[name]} and {i}): the second would "
                               f"never be labelled (a phantom class); give each class once (data.classes)")
        seen[name] = i
    fixed = LAYOUTS[layout].classes if layout not in ("s3dis", "pointcept") else None
    m = len(fixed) if fixed else None
    said = f"{layout}'s labels are the {m} ids 0..{(m or 0) - 1} of its own classes"
    if layout == "pointcept" and root is not None:
        found = _declared_classes(Path(root))
        if found is not None and str(found[1]) != source:
            m, said = found[0], f"{found[1]} declares {found[0]} (the ids 0..{found[0] - 1} of its scenes' labels)"
    if m is None or m == len(names):
        return
    why = ("a class beyond them is one no point can have (a phantom class)" if len(names) > m
           else "ids beyond the list would have no class")
    fix = (f"give {m} names, or leave classes out (data.classes)" if source == "classes"
           else f"write its {m} class names there, one per line (gridify convert does)")
    raise _fail(where, f"{source} names {len(names)} classes, but {said} (classes renames them only): {why}; {fix}")


def s3dis_room_classes(room: PathLike) -> List[str]:
    """The class names of an S3DIS room's annotation files (``Annotations/<class>_<i>.txt``), sorted, unique."""
    files = Path(room, "Annotations").glob("*.txt")
    return sorted({f.stem.rsplit("_", 1)[0] if "_" in f.stem else f.stem for f in files})


def read_s3dis_room(room: PathLike, classes: Sequence[str] = S3DIS_CLASSES, unknown: str = "ignore"
                    ) -> Dict[str, np.ndarray]:
    """One S3DIS room from ``<room>/Annotations/<class>_<i>.txt`` (the class is the file-name prefix).

    Args:
        room: the room folder (``Area_N/<room>``).
        classes: the class list (ids are positions in it); default the 13 S3DIS classes.
        unknown: what a file whose class is not in ``classes`` becomes: ``"ignore"`` (-1),
            ``"error"``, or the name of a class in ``classes`` (Pointcept maps ``stairs`` to
            ``clutter``).

    Returns:
        a scene (see the module docstring) with ``coord``, ``color``, ``segment`` and ``instance``.
    """
    room = Path(room)
    check_unknown("read_s3dis_room", unknown, classes)
    files = sorted((room / "Annotations").glob("*.txt"))
    if not files:
        raise _fail(room, "no Annotations/<class>_<i>.txt files (S3DIS raw layout)")
    rows, seg, inst = [], [], []
    for i, f in enumerate(files):
        block = _read(read_text_rows, f, 6, "x y z r g b")
        layout_colors(f, block[:, 3:6])  # a value that is no colour: named with its file and row
        rows.append(block)
        seg.append(np.full(len(block), _s3dis_class(f, classes, unknown), dtype=np.int64))
        inst.append(np.full(len(block), i, dtype=np.int64))
    data = np.concatenate(rows)  # float64: coordinates cast only after the scene is centred (_coord)
    return {"coord": _coord(data[:, :3]), "color": layout_colors(room, data[:, 3:6]),  # the room decides the scale
            "segment": np.concatenate(seg), "instance": np.concatenate(inst)}


# --------------------------------------------------------------------------------------
# PLY vertices (ScanNet meshes: the vertices are the points)
# --------------------------------------------------------------------------------------
def read_ply_vertices(path: PathLike) -> Dict[str, np.ndarray]:
    """The scalar properties of the ``vertex`` element of a PLY file (the first element), by name: ScanNet's
    ``*_vh_clean_2.ply`` meshes are scanned vertices, which are the points (:func:`gridify.io.ply.read_ply_vertices`;
    a truncated file or a vertex count below the data is a :class:`DatasetError` naming the file and both counts).

    Shapes:
        property name -> ``[V]``.
    """
    return _read(io_read_ply_vertices, Path(path))


def _ply_xyz(p: Path, verts: Mapping[str, np.ndarray]) -> np.ndarray:
    if not {"x", "y", "z"} <= set(verts):
        raise _fail(p, "PLY vertices have no x y z properties")
    return _coord(np.stack([verts["x"], verts["y"], verts["z"]], 1))


def read_scannet_scene(scene_dir: PathLike, name: Optional[str] = None) -> Dict[str, np.ndarray]:
    """A ScanNet v2 scene folder: ``<name>_vh_clean_2.ply`` (+ ``<name>_vh_clean_2.labels.ply``).

    The points are the mesh vertices with their colours; the labels file's vertex ``label`` (NYU40)
    is mapped to the 20 benchmark ids (others -1); without a labels file every point is -1.
    """
    d = Path(scene_dir)
    name = name or d.name
    mesh, labels = d / f"{name}_vh_clean_2.ply", d / f"{name}_vh_clean_2.labels.ply"
    if not mesh.is_file():
        raise _fail(d, f"scene {name!r} has no {mesh.name}")
    verts = read_ply_vertices(mesh)
    coord = _ply_xyz(mesh, verts)
    scene = {"coord": coord}
    if {"red", "green", "blue"} <= set(verts):
        scene["color"] = layout_colors(mesh, np.stack([verts["red"], verts["green"], verts["blue"]], 1))
    segment = np.full(len(coord), IGNORE_INDEX, dtype=np.int64)
    if labels.is_file():
        lv = read_ply_vertices(labels)
        if "label" not in lv:
            raise _fail(labels, "PLY vertices have no 'label' property (NYU40 ids)")
        if len(lv["label"]) != len(coord):
            raise _fail(labels, f"{len(lv['label'])} labelled vertices but {mesh} has {len(coord)}")
        segment = map_nyu40_to_scannet20(integer_labels(labels, lv["label"]))
    scene["segment"] = segment
    return scene


# --------------------------------------------------------------------------------------
# SemanticKITTI, Pointcept, mmdetection3d binaries
# --------------------------------------------------------------------------------------
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
            raise _fail(lab, f"{nl // 4} labels but {b} holds {nb // 16} points")
    scan = _read(read_kitti_rows, b)
    scene = {"coord": np.ascontiguousarray(scan[:, :3]), "strength": np.ascontiguousarray(scan[:, 3:4])}
    if lab is not None and lab.is_file():
        scene["segment"] = map_semantickitti_labels(_read(read_kitti_labels, lab), str(lab))
    else:
        scene["segment"] = np.full(len(scan), IGNORE_INDEX, dtype=np.int64)
    return scene


def _load_npy(p: Path) -> np.ndarray:
    """A ``.npy`` array (:func:`gridify.io.npy.read_npy_array`: never unpickled, sizes checked first)."""
    try:
        return read_npy_array(p)
    except (ValueError, OSError) as exc:
        raise _fail(p, f"not a readable .npy array ({str(exc).removeprefix(f'{p}: ')})") from None


def read_pointcept_scene(scene_dir: PathLike) -> Dict[str, np.ndarray]:
    """A scene folder of the common layout: ``coord.npy`` and the optional files of :data:`POINTCEPT_FILES`.

    A missing ``segment.npy`` means every point is ignored (-1); Pointcept's ScanNet release names it
    ``segment20.npy`` (the 20 benchmark classes), which is read in its place. Each array must have one
    row per point of ``coord.npy``; the error names the file.
    """
    d = Path(scene_dir)
    if not (d / "coord.npy").is_file():
        raise _fail(d, "scene folder has no coord.npy")
    scene: Dict[str, np.ndarray] = {}
    for key, width in POINTCEPT_FILES.items():
        f = d / f"{key}.npy"
        if key == "segment" and not f.is_file() and (d / "segment20.npy").is_file():
            f = d / "segment20.npy"  # Pointcept's ScanNet release: segment20 / segment200
        if not f.is_file():
            continue
        a = _load_npy(f)
        if a.dtype.kind not in "fiub":
            raise _fail(f, f"expected a numeric array, got {a.dtype}")
        if width is None:
            a = a.reshape(-1) if a.ndim == 2 and a.shape[1] == 1 else a
            ok = a.ndim == 1
        else:
            a = a.reshape(-1, 1) if width == 1 and a.ndim == 1 else a
            ok = a.ndim == 2 and a.shape[1] == width
        n = len(scene["coord"]) if scene else len(a)
        if key == "coord" and ok and n == 0:
            raise _fail(f, "holds no point (shape [0, 3]): a scene needs at least one")
        if not ok or len(a) != n:
            want = f"[{n}]" if width is None else f"[{n}, {width}]"
            raise _fail(f, f"expected {want} {'integers' if width is None else 'values'}, got {a.dtype} {a.shape}")
        if key == "color":
            a = layout_colors(f, a)  # 8-bit or 16-bit, decided by the scene's values
        elif key == "strength":
            a = unit_scaled(a)  # integer intensities on the unit scale, as every reader puts them
        scene[key] = integer_labels(f, a) if width is None else (_coord(a) if key == "coord" else a.astype(np.float32))
    scene.setdefault("segment", np.full(len(scene["coord"]), IGNORE_INDEX, dtype=np.int64))
    return scene


def read_mmdet3d_scene(ref: SceneRef) -> Dict[str, np.ndarray]:
    """A scene of mmdetection3d's processed layouts (see the module docstring)."""
    if ref.layout == "mmdet3d_scannet_instance":
        pts = _load_npy(ref.path)
        if pts.ndim != 2 or pts.shape[1] < 6:
            raise _fail(ref.path, f"expected [N, 6] x y z r g b, got {pts.shape}")
        labels = integer_labels(ref.label_path, _load_npy(ref.label_path)) if ref.label_path is not None else None
    else:
        pts = _read(read_raw_rows, ref.path, "<f4", 6)
        labels = None
        if ref.label_path is not None:
            if ref.label_path.stat().st_size != 8 * len(pts):
                raise _fail(ref.label_path, f"{ref.label_path.stat().st_size} bytes, but {ref.path} holds "
                                            f"{len(pts)} points (int64 labels: {8 * len(pts)} bytes)")
            labels = _read(read_raw_rows, ref.label_path, "<i8", 1)[:, 0]
    scene = {"coord": _coord(pts[:, :3]), "color": layout_colors(ref.path, pts[:, 3:6])}
    if labels is None:
        scene["segment"] = np.full(len(pts), IGNORE_INDEX, dtype=np.int64)
    elif labels.reshape(-1).shape[0] != len(pts):
        raise _fail(ref.label_path, f"{labels.size} labels but {ref.path} holds {len(pts)} points")
    elif ref.layout == "mmdet3d_s3dis":
        seg = labels.reshape(-1).astype(np.int64)
        seg[(seg < 0) | (seg >= len(S3DIS_CLASSES))] = IGNORE_INDEX
        scene["segment"] = seg
    else:
        scene["segment"] = map_nyu40_to_scannet20(labels.reshape(-1))
    return scene


# --------------------------------------------------------------------------------------
# scene lists per layout and split
# --------------------------------------------------------------------------------------
_AREA = re.compile(r"^Area_(\d+)")


def _area_of(name: str) -> Optional[int]:
    m = _AREA.match(name)
    return int(m.group(1)) if m else None


def _area_split(area: Optional[int], split: str, test_area: int) -> bool:
    if split == "all":
        return True
    if area is None:
        return False
    return (area == test_area) if split in ("val", "test") else (split == "train" and area != test_area)


def _s3dis_scenes(root: Path, split: str, test_area: int) -> List[SceneRef]:
    refs = []
    for area in sorted(root.glob("Area_*"), key=lambda q: (_area_of(q.name) or 0, q.name)):
        if not area.is_dir() or not _area_split(_area_of(area.name), split, test_area):
            continue
        for room in sorted(q for q in area.iterdir() if (q / "Annotations").is_dir()):
            refs.append(SceneRef(f"{area.name}_{room.name}", "s3dis", room, split=split))
    return refs


def _split_list(root: Path, split: str, layout: str) -> Optional[Tuple[List[str], Path]]:
    """``(the scene names, the file)`` of the official list of ``split`` (None for ``all``)."""
    if split == "all":
        return None
    for f in (root / f"scannetv2_{split}.txt", root.parent / f"scannetv2_{split}.txt"):
        if f.is_file():
            return read_text_lines(f), f
    raise _fail(root, f"{layout} split {split!r} needs the official list scannetv2_{split}.txt in this folder "
                      f"(from the ScanNet repository's Tasks/Benchmark/); use split='all' or scenes=[...] without it "
                      f"(in a config: data.<split>.scenes)")


def _listed(listing: Optional[Tuple[List[str], Path]], present: Sequence[str], base: Path, split: str,
            skip_missing: bool) -> Optional[set]:
    """The scenes of an official split list (None: no list, every scene), when each one it names is among
    ``present`` (the scenes found under ``base``); a listed scene that is not there is refused, naming the list,
    the missing scenes and what the root holds (with ``skip_missing``: warned, and the split keeps the others)."""
    if listing is None:
        return None
    names, f = listing
    have = set(present)
    missing = [n for n in dict.fromkeys(names) if n not in have]
    if missing:
        held = sorted(have)
        holds = (f"{len(held)} scene(s): {', '.join(held[:3])}{', ...' if len(held) > 3 else ''}" if held
                 else "no scene")
        msg = (f"{f}: {len(missing)} of the {len(set(names))} scenes it lists for split {split!r} are not under {base} "
               f"(first: {', '.join(missing[:5])}); that folder holds {holds}")
        if not skip_missing:
            raise DatasetError(f"{msg}: complete the download, or use the scenes that are there with "
                               f"skip_missing=True (data.skip_missing: true) or split 'all' (gridify convert --splits "
                               f"all)")
        warn_at_caller(f"{msg}; the split holds the {len(set(names)) - len(missing)} others (skip_missing)")
    return set(names)


def _scannet_scenes(root: Path, split: str, skip_missing: bool = False) -> List[SceneRef]:
    if split == "test":
        base, listing = (root / "scans_test"), None
    else:
        base = root / "scans" if (root / "scans").is_dir() else root
        listing = _split_list(root, split, "scannet")
    found = [d for d in (sorted(base.iterdir()) if base.is_dir() else []) if (d / f"{d.name}_vh_clean_2.ply").is_file()]
    keep = _listed(listing, [d.name for d in found], base, split, skip_missing)
    return [SceneRef(d.name, "scannet", d, d / f"{d.name}_vh_clean_2.labels.ply", split=split)
            for d in found if keep is None or d.name in keep]


def _kitti_scenes(root: Path, split: str, sequences: Optional[Sequence[str]]) -> List[SceneRef]:
    seq_root = root / "sequences" if (root / "sequences").is_dir() else root
    if sequences is not None:
        wanted = [f"{int(s):02d}" if str(s).isdigit() else str(s) for s in sequences]
    elif split == "all":
        wanted = sorted(d.name for d in seq_root.iterdir() if (d / "velodyne").is_dir()) if seq_root.is_dir() else []
    else:
        wanted = list(SEMANTICKITTI_SPLITS[split])
    missing = [seq for seq in wanted if not (seq_root / seq / "velodyne").is_dir()]
    if sequences is not None and missing:  # sequences the user named: say which are not there
        have = sorted(d.name for d in seq_root.iterdir() if (d / "velodyne").is_dir()) if seq_root.is_dir() else []
        raise _fail(seq_root, f"sequence(s) {missing} not found (no <sequence>/velodyne/ folder); this root has "
                              f"{have or 'none'} (data.sequences / sequences=)")
    refs = []
    for seq in wanted:
        for b in sorted((seq_root / seq / "velodyne").glob("*.bin")):
            refs.append(SceneRef(f"{seq}_{b.stem}", "semantickitti", b, seq_root / seq / "labels" / f"{b.stem}.label",
                                 split=split))
    return refs


def _mmdet3d_scenes(root: Path, layout: str, split: str, test_area: int, skip_missing: bool = False
                    ) -> List[SceneRef]:
    refs = []
    if layout == "mmdet3d_scannet_instance":
        folder = root / "scannet_train_instance_data" if (root / "scannet_train_instance_data").is_dir() else root
        names = sorted({f.name[:-len("_vert.npy")] for f in folder.glob("*_vert.npy")})
        keep = _listed(_split_list(root, split, layout), names, folder, split, skip_missing)
        for n in names:
            full = (folder / f"{n}_vert_all.npy").is_file()
            suffix = "_all" if full else ""
            lab = folder / f"{n}_sem_label{suffix}.npy"
            if keep is None or n in keep:
                refs.append(SceneRef(n, layout, folder / f"{n}_vert{suffix}.npy", lab if lab.is_file() else None,
                                     split=split))
        return refs
    points = sorted((root / "points").glob("*.bin"))
    keep = (_listed(_split_list(root, split, layout), [f.stem for f in points], root / "points", split, skip_missing)
            if layout == "mmdet3d_scannet" else None)
    for f in points:
        n = f.stem
        if layout == "mmdet3d_s3dis" and not _area_split(_area_of(n), split, test_area):
            continue
        if keep is None or n in keep:
            lab = root / "semantic_mask" / f.name
            refs.append(SceneRef(n, layout, f, lab if lab.is_file() else None, split=split))
    return refs


def _pointcept_scenes(root: Path, split: str, test_area: int) -> List[SceneRef]:
    if split == "all":
        folders = sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
    elif (root / split).is_dir():
        folders = [root / split]
    else:  # S3DIS convention: Area_N folders, test_area held out
        folders = sorted((d for d in root.glob("Area_*") if d.is_dir() and _area_split(_area_of(d.name), split,
                                                                                          test_area)),
                         key=lambda q: (_area_of(q.name) or 0, q.name))
    refs = []
    for folder in folders:
        for d in sorted(folder.iterdir()):
            if (d / "coord.npy").is_file():
                name = d.name if len(folders) == 1 and split != "all" else f"{folder.name}/{d.name}"
                refs.append(SceneRef(name, "pointcept", d, split=folder.name))
    return refs


def check_scene_selection(where: str, *, test_area: Any = S3DIS_TEST_AREA, sequences: Any = None,
                          scenes: Any = None) -> None:
    """Refuse, naming the argument, a ``test_area`` that is not an integer Area 1-6 (``"5"`` or None put the
    held-out Area into the training split), and ``sequences`` / ``scenes`` that are not lists of names (a
    string would be read character by character: ``sequences="05"`` as sequences 0 and 5)."""
    if isinstance(test_area, bool) or not isinstance(test_area, (int, np.integer)) or not 1 <= int(test_area) <= 6:
        raise DatasetError(f"{where}: test_area must be an integer Area 1..6 (the S3DIS Area held out), "
                           f"got {test_area!r}")
    for name, value in (("sequences", sequences), ("scenes", scenes)):
        if value is None:
            continue
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            example = "['08']" if name == "sequences" else "['08_000000']"
            raise DatasetError(f"{where}: {name} must be a list of names, e.g. {example}, got {value!r}")
        odd = [v for v in value if isinstance(v, bool) or not isinstance(v, (str, int, np.integer))]
        if odd:
            raise DatasetError(f"{where}: {name} must hold names (strings or integers), got {odd[0]!r}")


def find_scenes(root: PathLike, layout: str, split: str = "train", *, test_area: int = S3DIS_TEST_AREA,
                sequences: Optional[Sequence[str]] = None, skip_missing: bool = False) -> List[SceneRef]:
    """The scenes of ``split`` under ``root`` in ``layout`` (see the module docstring), sorted by name.

    Args:
        root: the layout's root folder.
        layout: a key of :data:`LAYOUTS`.
        split: ``train``, ``val``, ``test`` or ``all`` (``pointcept``: also any folder name under ``root``).
        test_area: the S3DIS Area held out (``val`` and ``test`` are that Area; ``train`` the others).
        sequences: SemanticKITTI sequences to read instead of the split's official ones.
        skip_missing: an official split list (``scannetv2_<split>.txt``) naming scenes that are not under the
            root: use the others, with a warning (default: refuse, naming the list and the scenes).
    """
    root = Path(root)
    check_scene_selection("find_scenes", test_area=test_area, sequences=sequences)
    if layout not in LAYOUTS:
        raise ValueError(f"find_scenes: unknown layout {layout!r}; known: {sorted(LAYOUTS)}")
    if layout != "pointcept" and split not in ("train", "val", "test", "all"):
        raise ValueError(f"find_scenes: split must be 'train', 'val', 'test' or 'all', got {split!r}")
    if not root.is_dir():
        raise _fail(root, f"{'is a file, not a folder' if root.exists() else 'no such folder'} (the {layout} root)")
    try:
        return _layout_scenes(root, layout, split, test_area, sequences, skip_missing)
    except DatasetError as exc:
        hint = nested_root_hint(root, layout, split, test_area=test_area, sequences=sequences)
        if hint:
            raise DatasetError(f"{exc}; {hint}") from None
        raise


def nested_root_hint(root: PathLike, layout: str, split: str, *, test_area: int = S3DIS_TEST_AREA,
                     sequences: Optional[Sequence[str]] = None) -> str:
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


def _layout_scenes(root: Path, layout: str, split: str, test_area: int,
                   sequences: Optional[Sequence[str]], skip_missing: bool = False) -> List[SceneRef]:
    """:func:`find_scenes` of a checked, existing ``root``."""
    if layout == "s3dis":
        return _s3dis_scenes(root, split, test_area)
    if layout == "scannet":
        return _scannet_scenes(root, split, skip_missing)
    if layout == "semantickitti":
        return _kitti_scenes(root, split, sequences)
    if layout == "pointcept":
        return _pointcept_scenes(root, split, test_area)
    return _mmdet3d_scenes(root, layout, split, test_area, skip_missing)


def read_scene(ref: SceneRef, *, classes: Optional[Sequence[str]] = None, unknown: str = "ignore"
               ) -> Dict[str, np.ndarray]:
    """Read the scene ``ref`` (a :class:`SceneRef` from :func:`find_scenes`) into the common vocabulary.

    ``classes`` / ``unknown`` apply to the S3DIS layout (e.g. the forest plot's ``tree``, ``ground``,
    ``clutter``); see :func:`read_s3dis_room`.
    """
    if ref.layout == "s3dis":
        return read_s3dis_room(ref.path, S3DIS_CLASSES if classes is None else classes, unknown)
    if ref.layout == "scannet":
        return read_scannet_scene(ref.path)
    if ref.layout == "semantickitti":
        return read_semantickitti_scan(ref.path, ref.label_path)
    if ref.layout == "pointcept":
        return read_pointcept_scene(ref.path)
    return read_mmdet3d_scene(ref)


def read_text_lines(path: PathLike) -> List[str]:
    """The non-empty, stripped lines of a small text file (class or split list), decoded as every text file of
    gridify is (:func:`gridify.io.source.decode_text`: a UTF-8 / UTF-16 BOM is not part of the first line, UTF-16
    without a BOM is recognised, undecodable bytes are an error naming the file)."""
    text = _read(read_text_file, Path(path))
    return [line.strip() for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------------------
# ground truth of a single scan (gridify evaluate --scan, gridify show --labels)
# --------------------------------------------------------------------------------------
def scan_label_path(scan: PathLike) -> Optional[Path]:
    """The ground-truth file of one scan where the layouts put it, or None: a SemanticKITTI
    ``labels/<stem>.label`` beside the scan's ``velodyne/`` folder (or ``<stem>.label`` beside the scan),
    a Pointcept ``segment.npy`` beside ``coord.npy`` (the scan given as that folder or its ``coord.npy``)."""
    p = Path(scan)
    if p.is_dir():
        return p / "segment.npy" if (p / "segment.npy").is_file() else None
    candidates = [p.parent.parent / "labels" / f"{p.stem}.label", p.with_suffix(".label")]
    if p.name == "coord.npy":
        candidates.append(p.parent / "segment.npy")
    return next((c for c in candidates if c.is_file()), None)


def read_scan_labels(path: PathLike, num_points: Any, class_names: Sequence[str]) -> np.ndarray:
    """Training ids ``[N]`` (``-1`` = ignore) of one scan's ground truth for a model with ``class_names``.

    ``.label`` (SemanticKITTI uint32): mapped to the 19 classes (:func:`map_semantickitti_labels`) when the
    model's classes are SemanticKITTI's, else the low 16 bits taken as ids; ``.npy`` / ``.txt`` (one
    integer per point, e.g. Pointcept ``segment.npy``): ids as they are. ``num_points``: the scan's point count,
    or the :class:`gridify.io.PointCloud` read from it, whose rows dropped by the reader (NaN/Inf coordinates)
    lose their labels too (:func:`~._common.align_labels`). Another count, a non-integer value or an id outside
    ``-1..K-1`` raises a :class:`DatasetError` naming the file.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".label":
        raw = _read(read_kitti_labels, p)
        kitti = tuple(c.lower() for c in class_names) == SEMANTICKITTI_CLASSES
        ids = map_semantickitti_labels(raw, str(p)) if kitti else (raw & 0xFFFF).astype(np.int64)
    elif suffix in (".npy", ".txt"):
        values = _load_npy(p) if suffix == ".npy" else _read(read_text_rows, p, 1, "one label per line")
        ids = integer_labels(p, values)
    else:
        raise _fail(p, f"unknown label file type {suffix!r}; use a SemanticKITTI .label, a .npy or a .txt")
    cloud = None if isinstance(num_points, (int, np.integer)) else num_points  # or the cloud read from the scan
    n = int(num_points) if cloud is None else len(cloud)
    note = "" if cloud is None else cloud.dropped_note()
    if note and len(ids) != n and len(ids) == cloud.rows_in_file:  # one label per row of the file
        ids = align_labels(ids, p, cloud, Path(cloud.source or "the scan"))
    elif len(ids) != n:
        rows = f" ({note}: the file has {cloud.rows_in_file} rows)" if note else ""
        raise _fail(p, f"{len(ids)} labels for a scan of {n} points{rows}")
    return check_scan_labels(p, ids, class_names)


def check_scan_labels(path: PathLike, ids: np.ndarray, class_names: Sequence[str]) -> np.ndarray:
    """``ids`` ``[N]`` (int64, one scan's ground truth from the file ``path``: a label file, or the scan's own
    label field) when every one is in ``-1..K-1`` for a model with the ``K`` classes ``class_names``; else a
    :class:`DatasetError` naming the file, the first bad label and its row (a fractional one too:
    :func:`integer_labels`)."""
    ids = integer_labels(path, ids)
    bad = np.flatnonzero((ids < IGNORE_INDEX) | (ids >= len(class_names)))
    if bad.size:
        raise _fail(path, f"label {int(ids[bad[0]])} (row {int(bad[0])}) outside -1..{len(class_names) - 1} "
                          f"({len(class_names)} classes of the model)")
    return ids
