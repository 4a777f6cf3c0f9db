"""What a scene layout is, and the registry that finds one by name: :class:`SceneLayout`, :data:`LAYOUTS`.

A layout is a folder convention of scene data: which files make a scene, the splits, the class list and the label
map. Each one is a :class:`SceneLayout` subclass in its own module of :mod:`gridify.datasets.layouts`, registered
under its name (a plugin registers one the same way, from its own module)::

    @LAYOUTS.register("mylayout")
    class MyLayout(SceneLayout):
        classes = ("ground", "tree")
        splits = "train: ...; val: ..."
        features = ("color",)

        def find(self, root, split, *, test_area, sequences, skip_missing): ...   # -> [SceneRef]
        def read(self, ref, *, classes=None, unknown="ignore"): ...               # -> a scene

Everything that works on scenes (:func:`gridify.datasets.scene_layouts.find_scenes` / ``read_scene``, the scene
datasets, the converter to the common layout, the ground truth of one scan for ``gridify evaluate --scan`` and
``gridify show --labels``) asks the layout (:func:`get_layout`) and never compares a layout's name.

A layout's reader returns a *scene*: a dict of numpy arrays in the common (Pointcept) vocabulary (see
:mod:`gridify.datasets.scene_layouts`). Its files are read by :mod:`gridify.io`, whose errors become
:class:`~gridify.datasets.DatasetError` with the same message (:func:`read_with`). The helpers every layout shares
live here: :func:`integer_labels` (the one check of label values), :func:`layout_colors` (the one colour rule),
:func:`coord_array`, :func:`load_npy`, :func:`read_text_lines`.

Shapes:
    coord ``[N, 3]`` float32 (float64 for large offsets), color / normal ``[N, 3]`` float32, strength
    ``[N, 1]`` float32, segment ``[N]`` int64.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...io.cloud import color_scale, coordinate_dtype
from ...io.labels import label_ids
from ...io.npy import read_npy_array
from ...io.source import read_text_file
from ...registry import Registry
from .._common import DatasetError, PathLike

__all__ = [
    "IGNORE_INDEX",
    "DEFAULT_SCAN_ORDER",
    "SceneRef",
    "SceneLayout",
    "LAYOUTS",
    "get_layout",
    "registered_layouts",
    "layout_error",
    "read_with",
    "coord_array",
    "load_npy",
    "integer_labels",
    "layout_colors",
    "read_text_lines",
]

#: label of ignored / unlabelled points in every layout's training ids
IGNORE_INDEX = -1
#: :attr:`SceneLayout.scan_order` of a layout that sets none: after the built-in ones (10 to 50)
DEFAULT_SCAN_ORDER = 100


@dataclass(frozen=True)
class SceneRef:
    """One scene of a layout: its name (unique in the split), the layout and the files it reads."""

    name: str
    layout: str
    path: Path
    label_path: Optional[Path] = None
    split: str = ""


class SceneLayout:
    """A scene layout: what it is (class attributes) and how its scenes are found and read (methods).

    Attributes:
        classes: the official class names, whose ids the labels are; None: given by the data (a root's
            ``classes.txt``, as :func:`gridify.datasets.convert_to_pointcept` writes it).
        splits: the splits in words (for messages).
        features: the default columns of ``x`` (:data:`gridify.datasets.scene_base.SCENE_FEATURES`).
        ignore_index: the label of ignored points.
        folder: the layout's root under the data root (None: the layout's name).
        split_lists: the splits are official lists of scene names (``scannetv2_<split>.txt``): ``skip_missing``
            applies.
        named_splits: a split may be any folder name under the root (not only ``train``, ``val``, ``test``,
            ``all``).
        ids_from_class_list: the labels are positions in the class list the reader is given (``classes=``, and
            ``unknown=`` for a class outside it), not fixed ids: a longer or shorter list is no error.
        convertible: :func:`gridify.datasets.convert_to_pointcept` converts it (False: the common layout itself).
        scan_order: its place in :func:`registered_layouts` (lower first; equal ones in registration order): the
            order in which the single-scan questions (:meth:`scan_label_path`, :meth:`folder_scan`,
            :meth:`scan_folder_note`, :meth:`scan_name`) are asked, the first answer winning (SemanticKITTI's
            ``labels/`` before Pointcept's ``segment.npy``), and the order layouts are listed in messages. The
            built-in layouts take 10 to 50; the default, :data:`DEFAULT_SCAN_ORDER`, puts a plugin's after them.
    """

    classes: Optional[Tuple[str, ...]] = None
    splits: str = ""
    features: Tuple[str, ...] = ()
    ignore_index: int = IGNORE_INDEX
    folder: Optional[str] = None
    split_lists: bool = False
    named_splits: bool = False
    ids_from_class_list: bool = False
    convertible: bool = True
    scan_order: int = DEFAULT_SCAN_ORDER

    def __init__(self, name: str) -> None:
        self.name = name

    # -------------------------------------------------------------- the scenes of a root
    def find(
        self, root: Path, split: str, *, test_area: int, sequences: Optional[Sequence[str]], skip_missing: bool
    ) -> List[SceneRef]:
        """The scenes of ``split`` under the existing folder ``root``, sorted by name (``test_area``: the S3DIS
        Area held out; ``sequences``: SemanticKITTI sequences instead of the split's; ``skip_missing``: use the
        scenes of an official split list that are there)."""
        raise NotImplementedError(f"scene layout {self.name!r} does not define find()")

    def read(
        self, ref: SceneRef, *, classes: Optional[Sequence[str]] = None, unknown: str = "ignore"
    ) -> Dict[str, np.ndarray]:
        """The scene ``ref`` in the common vocabulary (``classes`` / ``unknown``: read only by a layout whose
        ids come from the class list, :attr:`ids_from_class_list`)."""
        raise NotImplementedError(f"scene layout {self.name!r} does not define read()")

    def default_features(self, refs: Sequence[SceneRef]) -> Tuple[str, ...]:
        """The columns of ``x`` when none are given (the scenes ``refs`` found, the first one at least)."""
        return tuple(self.features)

    def default_classes(self, root: Path) -> Tuple[List[str], str]:
        """``(class names, what they are in messages)`` when none are given: the official ones (``"classes"``),
        else the lines of ``<root>/classes.txt`` (none when it is missing) and that file."""
        if self.classes:
            return list(self.classes), "classes"
        listed = Path(root) / "classes.txt"
        return (read_text_lines(listed) if listed.is_file() else []), str(listed)

    # -------------------------------------------------------------- conversion to the common layout
    def converted_place(self, ref: SceneRef, split: str) -> Tuple[str, str]:
        """``(split folder, scene folder)`` of ``ref`` (read for ``split``) in the common layout."""
        return split, ref.name

    def file_classes(self, ref: SceneRef) -> List[str]:
        """The class names the files of ``ref`` declare (S3DIS annotation files), for the converter's warning
        about points outside the class list; none for a layout of fixed ids."""
        return []

    # -------------------------------------------------------------- one scan (gridify evaluate --scan, show)
    def scan_label_path(self, scan: Path) -> Optional[Path]:
        """The ground-truth file of the single scan ``scan`` where this layout puts it, or None."""
        return None

    def folder_scan(self, folder: Path) -> Optional[Path]:
        """The scan file of ``folder`` when the folder is one scene of this layout (one scan), else None."""
        return None

    def scan_folder_note(self, folder: Path) -> Optional[Tuple[str, Path]]:
        """When ``folder`` holds this layout's scans below it rather than being one: ``(what it is and where its
        scans are, in words; the folder of scan files to give instead)``, else None."""
        return None

    def scan_name(self, scan: Path) -> Optional[str]:
        """The name of the scan file ``scan`` when this layout names it otherwise than by its stem, else None."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


#: the scene layouts by name (``data.layout``, ``gridify convert --layout``): :class:`SceneLayout` subclasses
LAYOUTS: Registry[type] = Registry("scene layout", base=SceneLayout)


def get_layout(name: str) -> SceneLayout:
    """The layout registered under ``name`` (:class:`~gridify.registry.UnknownNameError` naming the known ones)."""
    return LAYOUTS.get(name)(name.lower())


def registered_layouts() -> List[SceneLayout]:
    """Every registered layout, by :attr:`SceneLayout.scan_order` (lower first; equal ones in the order they were
    registered): the order in which the single-scan questions are asked.

    Raises:
        TypeError: a layout's ``scan_order`` is not an integer (naming the layout and its class).
    """
    layouts = [get_layout(name) for name in LAYOUTS.registered()]
    for layout in layouts:
        order = layout.scan_order
        if isinstance(order, bool) or not isinstance(order, int):
            raise TypeError(
                f"scene layout {layout.name!r} ({type(layout).__qualname__}): scan_order must be an integer, "
                f"got {type(order).__name__} {order!r}"
            )
    return sorted(layouts, key=lambda layout: layout.scan_order)  # sorted() is stable: ties keep registration order


# --------------------------------------------------------------------------------------
# helpers of every layout's reader
# --------------------------------------------------------------------------------------
def layout_error(where: object, msg: str) -> DatasetError:
    """The :class:`DatasetError` ``"<where>: <msg>"`` (``where``: the file, folder or scene)."""
    return DatasetError(f"{where}: {msg}")


def read_with(reader: Callable[..., Any], path: Path, *args: Any) -> Any:
    """``reader(path, *args)``, a reader of :mod:`gridify.io` (which owns the file formats), its error as a
    :class:`DatasetError` with the same message (naming the file, and the line where it has one)."""
    try:
        return reader(path, *args)
    except (ValueError, OSError) as exc:
        raise DatasetError(str(exc)) from None


def coord_array(xyz: np.ndarray) -> np.ndarray:
    """Coordinates ``[N, 3]`` as float32, or float64 when float32 would round away their detail (a large offset,
    :func:`gridify.io.cloud.coordinate_dtype`): never cast before they are centred."""
    return np.ascontiguousarray(xyz, dtype=coordinate_dtype(np.asarray(xyz)))


def load_npy(p: Path) -> np.ndarray:
    """A ``.npy`` array (:func:`gridify.io.npy.read_npy_array`: never unpickled, sizes checked first)."""
    try:
        return read_npy_array(p)
    except (ValueError, OSError) as exc:
        raise layout_error(p, f"not a readable .npy array ({str(exc).removeprefix(f'{p}: ')})") from None


def integer_labels(path: PathLike, values: np.ndarray, what: str = "file") -> np.ndarray:
    """Per-point label values ``[N]`` (ids or raw class codes) as int64, the one check of every layout and of
    :func:`gridify.io.read_labels` (:func:`gridify.io.labels.label_ids`): integers, or floats holding whole numbers
    (a text file, a float ``.npy`` or PLY property); anything else (a fractional value, NaN/Inf, a bool or
    non-numeric array) raises a :class:`DatasetError` naming the file and the first bad row, never truncated to an
    id. ``what``: the kind of ``path`` in that message (``"file"``; ``"array"`` for a scene in memory).

    Shapes:
        ``[N]`` (or ``[N, 1]``) -> ``[N]`` int64.
    """
    try:
        return label_ids(path, values, what)
    except ValueError as exc:
        raise DatasetError(str(exc)) from None


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
        raise layout_error(where, f"colours must be numbers, got dtype {a.dtype}")
    scale = color_scale(a, unit_floats=False)
    if scale is None:
        with np.errstate(invalid="ignore"):
            bad = np.isfinite(a) & ((a < 0) | (a > 65535) | ((a > 255) & (a != np.round(a))))
        row = int(np.flatnonzero(bad.reshape(len(a), -1).any(1))[0])
        raise layout_error(
            where,
            f"colour {float(a[bad][0])!r} (row {row}) is neither 8-bit (0-255) nor a 16-bit "
            f"whole number (0-65535): the colours of a scene are 0-255 values, or 16-bit ones "
            f"(scaled to 0-255 when a scene holds one above 255)",
        )
    return (a.astype(np.float64) * (255.0 / scale)).astype(np.float32)


def read_text_lines(path: PathLike) -> List[str]:
    """The non-empty, stripped lines of a small text file (class or split list), decoded as every text file of
    gridify is (:func:`gridify.io.source.decode_text`: a UTF-8 / UTF-16 BOM is not part of the first line, UTF-16
    without a BOM is recognised, undecodable bytes are an error naming the file)."""
    text = read_with(read_text_file, Path(path))
    return [line.strip() for line in text.splitlines() if line.strip()]
