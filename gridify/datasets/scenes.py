"""Scene segmentation datasets over the field's layouts, and converters to the common (Pointcept) layout.

* :class:`~gridify.datasets.scene_base.SceneDatasetBase` (re-exported): the item format every
  scene dataset shares, also the generated :class:`~gridify.datasets.procedural_scenes.ProceduralScenes`
  (re-exported here, ``data.name: scene_procedural``).
* :class:`SceneDataset` (``data.name: scene``): any layout of
  :mod:`~gridify.datasets.scene_layouts` (``layout=``); :class:`S3DIS` (``s3dis``),
  :class:`ScanNet` (``scannet``) and :class:`SemanticKITTI` (``semantickitti``) fix the layout,
  its class list and its default root under the data root.
* :func:`convert_to_pointcept`: a raw layout -> ``<out>/<split>/<scene>/{coord,color,normal,
  strength,segment,instance}.npy`` (S3DIS rooms go to ``<out>/Area_N/<room>``, SemanticKITTI scans
  to the official split of their sequence), plus ``<out>/classes.txt`` and ``<out>/conversion.json`` (the
  settings the labels depend on: a later run with other classes into the same ``out`` is refused
  rather than mixed); read back with ``SceneDataset(out, layout="pointcept")``.
  :func:`write_pointcept_scene` writes one scene.

Scenes are not normalized by default (``normalize=False``: coordinates stay in metres). At ``train``,
``voxel_size`` grid-subsamples a scene and ``max_points`` crops it to a budget around a random centre
(see :mod:`~gridify.datasets.scene_base`); the other splits give whole scenes. ``num_points``
subsamples each scene to a fixed size (random at ``train``, deterministic otherwise), None keeps
every point.

Shapes:
    an item: pos ``[N, 3]`` float32, x ``[N, F]`` float32, y ``[N]`` int64 (-1 = ignore),
    index ``[]``, scene (a str); a collated batch: pos ``[sum N_i, 3]``, batch ``[sum N_i]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .._checks import check_bool, check_choice, warn_at_caller
from .._files import atomic_write, atomic_write_text, commit_staged, staging_dir
from ..io.cloud import coordinate_dtype
from ..registry import DATASETS
from ._common import DatasetError, PathLike, Transform, default_root
from .procedural_scenes import INDOOR_CLASSES, OUTDOOR_CLASSES, ProceduralScenes, make_indoor_scene, make_outdoor_scan
from .scene_base import SCENE_FEATURES, SceneDatasetBase, check_features, scene_features
from .scene_layouts import (
    IGNORE_INDEX,
    LAYOUTS,
    POINTCEPT_FILES,
    S3DIS_TEST_AREA,
    SCENE_SPLITS,
    SceneRef,
    check_layout_classes,
    check_scene_selection,
    check_unknown,
    find_scenes,
    get_layout,
    integer_labels,
    listed_layouts,
    nested_root_hint,
    read_scene,
    read_text_lines,
)

__all__ = [
    "SceneDatasetBase",
    "SceneDataset",
    "S3DIS",
    "ScanNet",
    "SemanticKITTI",
    "SCENE_FEATURES",
    "convert_to_pointcept",
    "write_pointcept_scene",
    "scene_features",
    "ProceduralScenes",
    "make_indoor_scene",
    "make_outdoor_scan",
    "INDOOR_CLASSES",
    "OUTDOOR_CLASSES",
]


def _check_layout_split(where: str, layout: str, split: str) -> None:
    """``layout`` a registered layout, and ``split`` one of :data:`~.scene_layouts.SCENE_SPLITS` unless the
    layout's splits are folder names."""
    check_choice(where, "layout", layout, sorted(LAYOUTS))
    if not get_layout(layout).named_splits:
        check_choice(where, "split", split, list(SCENE_SPLITS))


@DATASETS.register("scene")
class SceneDataset(SceneDatasetBase):
    """Labelled scenes of one layout (``pointcept``, ``s3dis``, ``scannet``, ``semantickitti``,
    ``mmdet3d_scannet``, ``mmdet3d_scannet_instance``, ``mmdet3d_s3dis``).

    Args:
        root: the layout's root folder (see :mod:`~gridify.datasets.scene_layouts`).
        layout: the layout name.
        split: ``train``, ``val``, ``test`` or ``all`` (``pointcept``: also a folder name).
        features: the columns of ``x`` (see :func:`scene_features`); default the layout's
            own features (colour indoors, remission for SemanticKITTI; ``pointcept``: ``color``
            and ``strength`` when the first scene has them).
        num_points: subsample every scene to this many points (None: every point).
        voxel_size, max_points, crops_per_scene, mix, mix_prob, crop_centre: training grid subsampling, crop budget,
            crops per scene and epoch, scan mixing (``lasermix`` / ``polarmix``) and its share of items
            (see :class:`~gridify.datasets.scene_base.SceneDatasetBase`).
        scenes: read only these scene names (as :func:`find_scenes` names them).
        sequences: SemanticKITTI sequences instead of the split's official ones.
        test_area: the S3DIS Area held out.
        classes: class names; the layout's official list by default (``pointcept``: the
            ``classes.txt`` a conversion wrote, if any). For the S3DIS layout, ids are positions
            in this list and ``unknown`` says what another class becomes (``ignore``, ``error``
            or a class name); for the others it renames the layout's ids and must name as many
            (:func:`~gridify.datasets.scene_layouts.check_layout_classes`: a longer list is refused).
        skip_missing: the layouts with official split lists (``scannet``, ``mmdet3d_scannet``,
            ``mmdet3d_scannet_instance``): a list naming scenes that are not under ``root`` gives the
            others, with a warning, instead of an error naming the list and the scenes.
        transform, seed, normalize: as for every dataset (``normalize`` is off: metres).
        cache: keep scenes in memory once read.

    Items: ``pos`` ``[N, 3]``, ``x`` ``[N, F]``, ``y`` ``[N]`` (-1 = ignore), the raw ``color`` /
    ``normal`` / ``strength`` it has, ``index``, ``scene`` (name).
    """

    def __init__(
        self,
        root: Optional[PathLike] = None,
        layout: str = "pointcept",
        split: str = "train",
        *,
        features: Optional[Sequence[str]] = None,
        num_points: Optional[int] = None,
        voxel_size: Optional[float] = None,
        max_points: Optional[int] = None,
        crops_per_scene: int = 1,
        mix: Optional[str] = None,
        mix_prob: float = 0.5,
        crop_centre: str = "random",
        scenes: Optional[Sequence[str]] = None,
        sequences: Optional[Sequence[str]] = None,
        test_area: int = S3DIS_TEST_AREA,
        classes: Optional[Sequence[str]] = None,
        unknown: str = "ignore",
        transform: Optional[Transform] = None,
        seed: int = 0,
        normalize: bool = False,
        cache: bool = False,
        skip_missing: bool = False,
    ) -> None:
        where = type(self).__name__
        _check_layout_split(where, layout, split)
        check_scene_selection(where, test_area=test_area, sequences=sequences, scenes=scenes)
        check_bool(where, "skip_missing", skip_missing)
        info = get_layout(layout)
        if skip_missing and not info.split_lists:
            raise DatasetError(
                f"{where}: skip_missing (data.skip_missing) is only read for the layouts with official "
                f"split lists ({', '.join(listed_layouts())}), not {layout}: leave it out"
            )
        if classes is not None:  # a fixed layout's ids, names given twice: before any file is looked at
            check_layout_classes(where, layout, classes)
        if features is not None:
            features = check_features(where, features)
        self.root = Path(root) if root is not None else self.default_root(layout)
        self.layout = layout
        refs = self._find_refs(where, split, scenes, test_area, sequences, skip_missing)
        self.refs: List[SceneRef] = refs
        names, source = (classes, "classes") if classes is not None else info.default_classes(self.root)
        if not names:
            raise DatasetError(
                f"{where}: no class list for {self.root} ({layout}): write its class names, one per "
                f"line, to {self.root / 'classes.txt'} (gridify convert does), or pass them "
                f"(data.classes / classes=)"
            )
        check_layout_classes(where, layout, names, self.root, source)
        if info.ids_from_class_list:
            check_unknown(where, unknown, names)
        self._read_classes = None if classes is None or not info.ids_from_class_list else tuple(classes)
        self.unknown = unknown
        feats = info.default_features(refs) if features is None else features
        super().__init__(
            split=split,
            class_names=names,
            features=feats,
            num_points=num_points,
            transform=transform,
            seed=seed,
            normalize=normalize,
            cache=cache,
            voxel_size=voxel_size,
            max_points=max_points,
            crops_per_scene=crops_per_scene,
            mix=mix,
            mix_prob=mix_prob,
            crop_centre=crop_centre,
        )

    def _find_refs(
        self,
        where: str,
        split: str,
        scenes: Optional[Sequence[str]],
        test_area: int,
        sequences: Optional[Sequence[str]],
        skip_missing: bool,
    ) -> List[SceneRef]:
        """The scenes of ``split`` under ``self.root`` (only ``scenes`` when given, each of which must be there);
        none raises, with a hint when the data sits one folder deeper."""
        root, layout = self.root, self.layout
        refs = find_scenes(root, layout, split, test_area=test_area, sequences=sequences, skip_missing=skip_missing)
        if scenes is not None:
            wanted = [str(s) for s in scenes]
            missing = sorted(set(wanted) - {r.name for r in refs})
            if missing:
                raise DatasetError(f"{where}: scenes {missing[:5]} not found in {root} ({layout}, split {split!r})")
            refs = [r for r in refs if r.name in set(wanted)]
        if not refs:
            hint = nested_root_hint(root, layout, split, test_area=test_area, sequences=sequences)
            raise DatasetError(
                f"{where}: no {layout} scenes for split {split!r} under {root} "
                f"(expected: {get_layout(layout).splits}; see datasets/README.md)" + (f"; {hint}" if hint else "")
            )
        return refs

    @staticmethod
    def default_root(layout: str) -> Path:
        """``<data root>/<folder>``, the layout's folder (``folder``:
        ``s3dis/Stanford3dDataset_v1.2_Aligned_Version``, ``scannet``, ``semantickitti/dataset``), else
        ``<data root>/<layout>``."""
        return default_root() / (get_layout(layout).folder or layout)

    def scene_count(self) -> int:
        return len(self.refs)

    def scene_name(self, index: int) -> str:
        return self.refs[index].name

    def describe(self, index: int) -> str:
        ref = self.refs[index]
        return f"{type(self).__name__} {self.layout} scene {ref.name!r} ({ref.path})"

    def load_scene(self, index: int) -> Dict[str, np.ndarray]:
        return read_scene(self.refs[index], classes=self._read_classes, unknown=self.unknown)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(root={str(self.root)!r}, layout={self.layout!r}, split={self.split!r}, "
            f"scenes={len(self)}, classes={self.num_classes}, features={list(self.features)})"
        )


@DATASETS.register("s3dis")
class S3DIS(SceneDataset):
    """S3DIS rooms (raw ``Area_N/<room>/Annotations`` layout), 13 classes, Area 5 held out.

    Arguments as for :class:`SceneDataset` (without ``layout`` and ``sequences``).
    """

    def __init__(
        self,
        root: Optional[PathLike] = None,
        split: str = "train",
        *,
        features: Optional[Sequence[str]] = None,
        num_points: Optional[int] = None,
        voxel_size: Optional[float] = None,
        max_points: Optional[int] = None,
        crops_per_scene: int = 1,
        mix: Optional[str] = None,
        mix_prob: float = 0.5,
        crop_centre: str = "random",
        scenes: Optional[Sequence[str]] = None,
        test_area: int = S3DIS_TEST_AREA,
        classes: Optional[Sequence[str]] = None,
        unknown: str = "ignore",
        transform: Optional[Transform] = None,
        seed: int = 0,
        normalize: bool = False,
        cache: bool = False,
    ) -> None:
        super().__init__(
            root,
            "s3dis",
            split,
            features=features,
            num_points=num_points,
            voxel_size=voxel_size,
            max_points=max_points,
            crops_per_scene=crops_per_scene,
            mix=mix,
            mix_prob=mix_prob,
            crop_centre=crop_centre,
            scenes=scenes,
            test_area=test_area,
            classes=classes,
            unknown=unknown,
            transform=transform,
            seed=seed,
            normalize=normalize,
            cache=cache,
        )


@DATASETS.register("scannet")
class ScanNet(SceneDataset):
    """ScanNet v2 raw scene folders, the 20 benchmark classes (official split lists).

    Arguments as for :class:`SceneDataset` (without ``layout``, ``sequences``, ``test_area``, ``classes``).
    """

    def __init__(
        self,
        root: Optional[PathLike] = None,
        split: str = "train",
        *,
        features: Optional[Sequence[str]] = None,
        num_points: Optional[int] = None,
        voxel_size: Optional[float] = None,
        max_points: Optional[int] = None,
        crops_per_scene: int = 1,
        mix: Optional[str] = None,
        mix_prob: float = 0.5,
        crop_centre: str = "random",
        scenes: Optional[Sequence[str]] = None,
        transform: Optional[Transform] = None,
        seed: int = 0,
        normalize: bool = False,
        cache: bool = False,
        skip_missing: bool = False,
    ) -> None:
        super().__init__(
            root,
            "scannet",
            split,
            features=features,
            num_points=num_points,
            voxel_size=voxel_size,
            max_points=max_points,
            crops_per_scene=crops_per_scene,
            mix=mix,
            mix_prob=mix_prob,
            crop_centre=crop_centre,
            scenes=scenes,
            transform=transform,
            seed=seed,
            normalize=normalize,
            cache=cache,
            skip_missing=skip_missing,
        )


@DATASETS.register("semantickitti")
class SemanticKITTI(SceneDataset):
    """SemanticKITTI scans, 19 classes; train 00-07, 09, 10, val 08 (``sequences=`` to choose).

    Arguments as for :class:`SceneDataset` (without ``layout``, ``test_area``, ``classes``).
    """

    def __init__(
        self,
        root: Optional[PathLike] = None,
        split: str = "train",
        *,
        features: Optional[Sequence[str]] = None,
        num_points: Optional[int] = None,
        voxel_size: Optional[float] = None,
        max_points: Optional[int] = None,
        crops_per_scene: int = 1,
        mix: Optional[str] = None,
        mix_prob: float = 0.5,
        crop_centre: str = "random",
        scenes: Optional[Sequence[str]] = None,
        sequences: Optional[Sequence[str]] = None,
        transform: Optional[Transform] = None,
        seed: int = 0,
        normalize: bool = False,
        cache: bool = False,
    ) -> None:
        super().__init__(
            root,
            "semantickitti",
            split,
            features=features,
            num_points=num_points,
            voxel_size=voxel_size,
            max_points=max_points,
            crops_per_scene=crops_per_scene,
            mix=mix,
            mix_prob=mix_prob,
            crop_centre=crop_centre,
            scenes=scenes,
            sequences=sequences,
            transform=transform,
            seed=seed,
            normalize=normalize,
            cache=cache,
        )


# --------------------------------------------------------------------------------------
# conversion to the common layout
# --------------------------------------------------------------------------------------
def write_pointcept_scene(folder: PathLike, scene: Dict[str, np.ndarray]) -> Path:
    """Write a scene (common vocabulary) as ``folder/{coord,color,normal,strength,segment,instance}.npy``.

    ``coord`` float32 (float64 when its float64 values have a large offset, which float32 would round:
    :func:`gridify.io.cloud.coordinate_dtype`), ``color`` uint8 when its values are integers in 0..255
    (else float32), ``normal`` / ``strength`` float32, ``segment`` / ``instance`` int16 when they fit (else int32),
    as Pointcept stores them; ids that are not whole numbers (``segment`` / ``instance`` of 1.5) are refused
    (``integer_labels``) before any file is written. Each file is written
    atomically, ``coord.npy`` last (a folder with a ``coord.npy`` is complete).
    """
    d = Path(folder)
    if "coord" not in scene:
        raise ValueError(f"write_pointcept_scene({d}): the scene has no 'coord'")
    arrays = {}  # every array converted (and its ids checked) before the first file is written
    for key in sorted(POINTCEPT_FILES, key=lambda k: k == "coord"):
        width, a = POINTCEPT_FILES[key], scene.get(key)
        if a is None:
            continue
        a = np.asarray(a)
        if width is None:  # ids: whole numbers only, never truncated (the readers' one check)
            a = integer_labels(f"write_pointcept_scene({d}): {key}", a, "array")
            small = a.size == 0 or (a.min() >= -32768 and a.max() <= 32767)
            a = a.astype(np.int16 if small else np.int32)
        elif key == "color" and a.size and a.min() >= 0 and a.max() <= 255 and np.all(a == np.round(a)):
            a = a.astype(np.uint8)
        elif key == "coord":
            a = a.astype(coordinate_dtype(a))
        else:
            a = a.astype(np.float32)
        arrays[key] = a
    for key, a in arrays.items():  # coord.npy last
        atomic_write(d / f"{key}.npy", lambda fh, a=a: np.save(fh, np.ascontiguousarray(a)))
    return d


def _out_split(ref: SceneRef, split: str) -> Tuple[str, str]:
    """``(split folder, scene folder)`` of ``ref`` in the common layout (the layout's
    :meth:`~gridify.datasets.layouts.SceneLayout.converted_place`)."""
    return get_layout(ref.layout).converted_place(ref, split)


#: the record of a conversion beside ``classes.txt``: the settings its labels depend on
CONVERSION_FILE = "conversion.json"
#: share of the converted points set to ignore (classes outside the list) above which the conversion warns
IGNORED_SHARE_WARNING = 0.2


def _conversion_settings(layout: str, names: Sequence[str], unknown: str) -> Dict[str, Any]:
    """What the labels of a conversion depend on (recorded in :data:`CONVERSION_FILE`)."""
    return {
        "layout": layout,
        "classes": list(names),
        "unknown": unknown if get_layout(layout).ids_from_class_list else None,
    }


def _previous_conversion(out: Path) -> Optional[Dict[str, Any]]:
    """The settings of the conversion already in ``out``: its record, else (older gridify) the ``classes.txt``."""
    record = out / CONVERSION_FILE
    if record.is_file():
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DatasetError(
                f"convert_to_pointcept: {record}: unreadable conversion record ({exc}); delete it "
                f"and convert again with overwrite=True (gridify convert --overwrite)"
            ) from None
        return data if isinstance(data, dict) else None
    if (out / "classes.txt").is_file():
        return {"classes": read_text_lines(out / "classes.txt")}
    return None


def _check_previous_conversion(out: Path, settings: Dict[str, Any], targets: Sequence[Path], overwrite: bool) -> bool:
    """Refuse to mix scenes of two conversions whose labels differ in one ``out``; True when this run rewrites
    scenes of another conversion (the record then says so until the run completes)."""
    previous = _previous_conversion(out)
    if previous is None:
        return False
    existing = sorted(d for d in out.glob("*/*") if (d / "coord.npy").is_file())
    changed = [k for k in settings if k in previous and previous[k] != settings[k]]
    if previous.get("rewriting") and not overwrite:
        raise DatasetError(
            f"convert_to_pointcept: an overwrite of {out} with other settings was interrupted; "
            f"its scenes mix two conversions: run it again with overwrite=True (gridify convert "
            f"--overwrite)"
        )
    if not existing or not changed:
        return bool(previous.get("rewriting"))
    said = "; ".join(f"{k} {previous[k]!r} there, {settings[k]!r} now" for k in changed)
    if not overwrite:
        raise DatasetError(
            f"convert_to_pointcept: {out} holds {len(existing)} scene(s) of a conversion with other "
            f"settings ({said}); kept, they would read back with the wrong labels: rewrite them with "
            f"overwrite=True (gridify convert --overwrite) or write to another out (--out)"
        )
    stale = [d for d in existing if d not in set(targets)]
    if stale:
        names = ", ".join(d.relative_to(out).as_posix() for d in stale[:3]) + (", ..." if len(stale) > 3 else "")
        raise DatasetError(
            f"convert_to_pointcept: overwrite rewrites the scenes of this run only, but {out} also "
            f"holds {len(stale)} scene(s) of the conversion with other settings ({said}) that this "
            f"run does not cover ({names}): convert them too (splits 'all', gridify convert "
            f"--splits all) or write to another out (--out)"
        )
    return True


def _warn_ignored(layout: str, found: set, ignored: int, total: int, names: Sequence[str]) -> None:
    """One warning when a large share of the converted points of a layout whose ids come from the class list
    (S3DIS) fell outside the class list (``found``: the class names of the rooms' files)."""
    if not get_layout(layout).ids_from_class_list or total == 0 or ignored < IGNORED_SHARE_WARNING * total:
        return
    unknown = sorted(c for c in found if c not in names)
    warn_at_caller(
        f"convert_to_pointcept: {100 * ignored / total:.0f} % of the {total} points converted ({ignored}) "
        f"were set to ignore: their classes {unknown} are not in the class list {list(names)}; give the "
        f"scenes' own classes (gridify convert --classes {' '.join(sorted(found))}; classes=[...]), or "
        f"map them to a class (--unknown NAME; unknown=)"
    )


def _convert_one(ref: SceneRef, d: Path, classes: Optional[Sequence[str]], unknown: str, found: set) -> Tuple[int, int]:
    """Read ``ref``, write it to ``d``; ``(ignored points, points)``, adding the classes its files name (S3DIS) to
    ``found``."""
    layout = get_layout(ref.layout)
    scene = read_scene(ref, classes=classes if layout.ids_from_class_list else None, unknown=unknown)
    write_pointcept_scene(d, scene)
    found.update(layout.file_classes(ref))
    seg = np.asarray(scene["segment"])
    return int((seg == IGNORE_INDEX).sum()), int(seg.size)


def _scenes_to_convert(
    root: PathLike,
    layout: str,
    splits: Sequence[str],
    test_area: int,
    sequences: Optional[Sequence[str]],
    skip_missing: bool,
) -> List[Tuple[SceneRef, str]]:
    """``(scene, split)`` for every scene of ``splits`` of ``layout`` under ``root``, in order; none raises."""
    refs: List[Tuple[SceneRef, str]] = []
    for split in splits:
        _check_layout_split("convert_to_pointcept", layout, split)
        found = find_scenes(root, layout, split, test_area=test_area, sequences=sequences, skip_missing=skip_missing)
        refs += [(r, split) for r in found]
    if not refs:
        raise DatasetError(f"convert_to_pointcept: no {layout} scenes under {root} for splits {list(splits)}")
    return refs


def convert_to_pointcept(
    root: PathLike,
    layout: str,
    out: PathLike,
    splits: Sequence[str] = ("all",),
    *,
    test_area: int = S3DIS_TEST_AREA,
    sequences: Optional[Sequence[str]] = None,
    classes: Optional[Sequence[str]] = None,
    unknown: str = "ignore",
    overwrite: bool = False,
    progress: Any = None,
    skip_missing: bool = False,
) -> List[Path]:
    """Convert the scenes of ``splits`` of a raw layout under ``root`` into the common layout under ``out``.

    Args:
        root, layout: the source (see :func:`~gridify.datasets.scene_layouts.find_scenes`).
        out: the output root; scenes go to ``out/<split>/<scene>`` (S3DIS: ``out/Area_N/<room>``;
            SemanticKITTI: the official split of the sequence).
        splits: the source splits to convert (``all``: every scene found).
        test_area, sequences, classes, unknown: as for :class:`SceneDataset`.
        overwrite: rewrite scenes whose ``coord.npy`` exists in ``out`` (default: skip them, so a
            conversion resumes).
        progress: optional callable ``progress(done, total, name)``.
        skip_missing: convert the scenes of an official split list that are there, with a warning,
            when it names scenes that are not (default: refuse; see :func:`find_scenes`).

    The settings the labels depend on (layout, class list, ``unknown``) are recorded in
    ``out/conversion.json``. A run whose settings differ from those of the scenes already in ``out``
    is refused (kept, those scenes would read back with the wrong labels), and so is an ``overwrite``
    that would leave scenes of the other conversion behind. An S3DIS conversion that sets at least
    :data:`IGNORED_SHARE_WARNING` of its points to ignore warns once, naming the classes outside the list.

    Nothing is half-done in ``out``: the scenes, ``classes.txt`` and the record are written to a staging
    folder beside it (:func:`gridify._files.staging_dir`, ``.<out name>.partial``) and moved into ``out`` when
    every scene is converted (a scene folder whole). A failed run leaves ``out`` as it was (the staging folder
    is removed, or kept when it holds converted scenes, which the message says); a rerun with the same
    settings, after a failure or an interruption, resumes from the scenes staged.

    Returns:
        the scene folders written (or kept), in order.
    """
    sources = sorted(name for name in LAYOUTS if get_layout(name).convertible)
    check_choice("convert_to_pointcept", "layout", layout, sources)
    names = list(classes) if classes is not None else list(get_layout(layout).classes or ())
    if get_layout(layout).ids_from_class_list:
        check_unknown("convert_to_pointcept", unknown, names)
    check_layout_classes("convert_to_pointcept", layout, names)
    out = Path(out)
    check_bool("convert_to_pointcept", "skip_missing", skip_missing)
    refs = _scenes_to_convert(root, layout, splits, test_area, sequences, skip_missing)
    targets = [out.joinpath(*_out_split(ref, split)) for ref, split in refs]
    settings = _conversion_settings(layout, names, unknown)
    rewriting = _check_previous_conversion(out, settings, targets, overwrite)
    stage = _open_stage(out, settings)
    found: set = set()
    ignored = total = 0
    try:
        for i, ((ref, _), d) in enumerate(zip(refs, targets)):
            staged = stage / d.relative_to(out)
            if not (staged / "coord.npy").is_file() and (overwrite or not (d / "coord.npy").is_file()):
                a, b = _convert_one(ref, staged, classes, unknown, found)
                ignored, total = ignored + a, total + b
            if progress is not None:
                progress(i + 1, len(refs), ref.name)
    except (DatasetError, ValueError, OSError) as exc:
        _close_failed_stage(stage, out, exc)
        raise
    _commit_conversion(stage, out, settings, names, rewriting)
    _warn_ignored(layout, found, ignored, total, names)
    return targets


def _open_stage(out: Path, settings: Dict[str, Any]) -> Path:
    """The staging folder of a conversion into ``out`` (:func:`gridify._files.staging_dir`), holding the scenes
    an interrupted or failed run of the same settings converted (resumed), else new and empty."""
    import shutil

    stage = staging_dir(out)
    if stage.is_dir():
        try:
            same = json.loads((stage / CONVERSION_FILE).read_text(encoding="utf-8")) == settings
        except (OSError, ValueError):
            same = False
        if not same:  # a partial run of other settings: never in out, nothing to keep
            shutil.rmtree(stage)
    stage.mkdir(parents=True, exist_ok=True)
    atomic_write_text(stage / CONVERSION_FILE, json.dumps(settings, indent=1) + "\n")
    return stage


def _close_failed_stage(stage: Path, out: Path, exc: BaseException) -> None:
    """After a failed conversion: ``out`` is as it was; the staging folder is removed unless it holds converted
    scenes (a rerun resumes from them), and the error says where they wait."""
    import shutil

    kept = sorted(d for d in stage.glob("*/*") if (d / "coord.npy").is_file())
    if not kept:
        shutil.rmtree(stage, ignore_errors=True)
        return
    exc.args = (
        f"{exc}; {out} is left as it was, and the {len(kept)} scene(s) converted so far wait in "
        f"{stage} (a rerun with the same settings resumes from them)",
        *exc.args[1:],
    )


def _commit_conversion(stage: Path, out: Path, settings: Dict[str, Any], names: Sequence[str], rewriting: bool) -> None:
    """Move the staged scenes into ``out`` (each scene folder whole), then its ``classes.txt`` and record (an
    overwrite of other settings is recorded as under way while its scenes move in)."""
    record = out / CONVERSION_FILE
    if rewriting:
        atomic_write_text(record, json.dumps({**settings, "rewriting": True}, indent=1) + "\n")
    atomic_write_text(stage / CONVERSION_FILE, json.dumps({**settings, "rewriting": False}, indent=1) + "\n")
    if names:
        atomic_write_text(stage / "classes.txt", "\n".join(names) + "\n")
    commit_staged(stage, out, unit_depth=2, last=("classes.txt", CONVERSION_FILE))
