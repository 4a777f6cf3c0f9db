"""The item format every scene dataset shares: :class:`SceneDatasetBase` and :func:`scene_features`.

An item holds ``pos`` in metres (unless ``normalize``; large-offset coordinates, UTM metres read as
float64, are first moved in float64 so that the scene's bounding box is centred on the origin:
:func:`gridify.io.centre_large_offset`), ``x`` = the chosen ``features``
(:data:`SCENE_FEATURES`: ``xyz``, ``color`` scaled to ``[0, 1]``, ``normal``, ``strength``
(alias ``intensity``), ``height`` = z - the scene's 1st percentile of z (:func:`scene_height`), the whole-scan
features of :mod:`~gridify.datasets.scene_geometry` (``strength_scan``, ``ground_height``, ``verticality``,
``planarity``) and ``has_strength`` (1 where the scene has intensity, 0 where it has none: its strength columns are
then 0); none: ``x = pos``), ``y`` the per-point training ids
with -1 for ignored points, the raw ``color`` / ``normal`` / ``strength`` the scene has, ``index``
and the ``scene`` name. The scene-level features (``height`` and those of
:mod:`~gridify.datasets.scene_geometry`) are computed on the whole scene before any crop, as prediction computes
them on the whole scan; ``strength_scan``, ``ground_height``, ``verticality`` and ``planarity`` once per scene
(before a scan mix, each scan on its own), kept in memory (4 bytes a point each). The pipeline is
:class:`~gridify.datasets.PointCloudDataset`'s, with its
sampling step at split ``train`` replaced by :class:`~gridify.transforms.SceneSampler` when
``voxel_size`` or ``max_points`` is given: grid subsampling (one random point per voxel of edge
``voxel_size``, in the units of ``pos``: metres), then a crop of the ``max_points`` points nearest
in xy to a centre point (random, or ``crop_centre="class_balanced"``: a point of a class drawn uniformly
among the scene's; a scene at or under the budget stays whole), then ``num_points``,
all from the dataset's seeded generator. At every other split an item is the whole scene (every
original point, so an evaluation scores all of them; ``num_points`` still subsamples when set).
:meth:`SceneDatasetBase.label_counts` is the histogram of the split's labels (ignored points left
out), e.g. for class weights.

Shapes:
    an item: pos ``[N, 3]`` float32, x ``[N, F]`` float32, y ``[N]`` int64, index ``[]``, scene str.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from .._checks import check_alloc, check_choice, check_int, check_number, fail, warn_at_caller
from ..io.cloud import centre_large_offset, unit_scaled
from ..transforms import CROP_CENTRES, PASTE_CLASS_NAMES, SCENE_MIXES, SceneSampler, mix_scenes_unchecked
from ._common import SAMPLE_BYTES_PER_POINT, DatasetError, PointCloudDataset, Transform, item_index
from .scene_geometry import SCENE_LEVEL_FEATURES, scene_level_features
from .scene_layouts import IGNORE_INDEX, integer_labels

__all__ = [
    "SCENE_FEATURES",
    "SceneDatasetBase",
    "scene_features",
    "build_scene_features",
    "cloud_scene_features",
    "INTENSITY_FIELDS",
    "scale_unit",
    "check_features",
    "scene_height",
    "HEIGHT_FLOOR_PERCENTILE",
    "SCENE_INPUT_KEYS",
]
#: feature name -> its width in ``x``
SCENE_FEATURES: Dict[str, int] = {
    "xyz": 3,
    "color": 3,
    "normal": 3,
    "strength": 1,
    "intensity": 1,
    "height": 1,
    "strength_scan": 1,
    "ground_height": 1,
    "verticality": 1,
    "planarity": 1,
    "has_strength": 1,
}

#: the features that read the scan's intensity (0 for a scan without one when ``has_strength`` is a feature)
_STRENGTH_FEATURES = ("strength", "intensity", "strength_scan")

#: the entries of a scene sample that only build ``x`` (whole-scene features, the intensity flag): not item keys
SCENE_INPUT_KEYS = ("height", "has_strength") + SCENE_LEVEL_FEATURES

#: ``height`` is measured from this percentile of the scene's z, not from its minimum: a LiDAR scan holds
#: stray returns metres below the ground (multipath: SemanticKITTI's minima lie 2.7 to 28.7 m below the
#: sensor while the ground lies about 1.7-3 m below), which would shift one scan's heights by tens of metres
#: against another's
HEIGHT_FLOOR_PERCENTILE = 1.0


def scene_height(z: Any) -> np.ndarray:
    """The ``height`` feature of a whole scene: ``z - floor``, ``floor`` the :data:`HEIGHT_FLOOR_PERCENTILE`-th
    percentile of ``z`` (robust to stray points below the floor or ground; the lowest 1 % get small negative
    heights). Computed on the whole scene, before any crop, so that crops and whole-scene prediction agree.

    Shapes:
        z ``[N]`` -> ``[N]`` float32 (empty stays empty)
    """
    z = np.asarray(z, np.float32)
    if z.size == 0:
        return z.copy()
    return (z - np.float32(np.percentile(z, HEIGHT_FLOOR_PERCENTILE))).astype(np.float32, copy=False)


#: keys of a raw scene sample that travel with the points (subsampled, transformed alike)
_POINT_KEYS = ("color", "normal", "strength")

#: the salt of the mix's draws (:meth:`SceneDatasetBase.mixed_scene`), apart from the crop's stream
_MIX_SALT = 7919


def check_features(where: str, features: Any) -> Tuple[str, ...]:
    """``features`` as a tuple of names of :data:`SCENE_FEATURES` (a single name is accepted); a name given
    twice (``intensity`` is ``strength``'s alias) is refused: it would add the same column twice."""
    if isinstance(features, str):
        features = (features,)
    if not isinstance(features, (list, tuple)):
        fail(where, f"features must be a list of names from {list(SCENE_FEATURES)}, got {type(features).__name__}")
    seen: Dict[str, str] = {}
    for f in features:
        check_choice(where, "features", f, list(SCENE_FEATURES))
        key = "strength" if f == "intensity" else f
        if key in seen:
            same = "is listed twice" if seen[key] == f else f"and {seen[key]!r} are the same feature"
            fail(where, f"features={list(features)}: {f!r} {same}; give each feature once")
        seen[key] = f
    return tuple(features)


def scale_unit(values: Any, what: str, where: str) -> np.ndarray:
    """Colours or intensities as float32 on their unit scale: an integer array by the readers' one rule
    (:func:`gridify.io.cloud.unit_scaled`: divided by 255 when its values lie in 0..255, by 65535 when they lie
    in 0..65535, whatever integer type holds them: LAS ``uint16`` intensity, a PLY ``uchar`` / ``int`` / ``uint``
    property; values beyond 16 bits or negative by the type's maximum), a float array taken as already scaled
    (``.bin`` remission and :class:`gridify.io.PointCloud` colours lie in ``[0, 1]``)."""
    a = np.asarray(values)
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        raise DatasetError(f"{where}: {what} must be numbers, got dtype {a.dtype}")
    if np.issubdtype(a.dtype, np.integer):
        return unit_scaled(a).astype(np.float32)
    return a.astype(np.float32, copy=False)


def warn_off_unit_scale(values: Any, what: str, where: str) -> None:
    """Warn, naming ``where``, the row and the value, when float ``values`` (colours, intensity) lie outside
    ``[0, 1]``: a model trained on that scale (SemanticKITTI remission, the readers' colours) sees 0-255 floats
    as they are and labels them wrongly without a sign. Integers are scaled (:func:`scale_unit`); NaN/Inf are
    the callers' to name."""
    a = np.asarray(values)
    if a.dtype.kind != "f" or a.size == 0:
        return
    with np.errstate(invalid="ignore"):
        off = np.isfinite(a) & ((a < 0) | (a > 1.0 + 1e-6))
    if off.any():
        row = int(np.flatnonzero(off.reshape(len(a), -1).any(1))[0])
        name = "intensity" if what == "strength" else what
        warn_at_caller(
            f"{where}: {int(off.sum())} {name} value(s) outside [0, 1], the scale the shipped models "
            f"were trained on (first: {float(a[off].reshape(-1)[0]):g} at row {row}): divide 8-bit "
            f"values by 255 and 16-bit ones by 65535 (or give them as uint8 / uint16, which are scaled), "
            f"unless the model was trained on this scale"
        )


def _missing_feature_error(where: str, feature: str, need: str, given: Dict[str, Any]) -> DatasetError:
    """The error of a requested ``feature`` whose source ``need`` (``color``, ``normal`` or ``strength``) the
    scene lacks: what it has (the non-None of ``given``) and the ways out."""
    have = sorted(k for k, v in given.items() if v is not None)
    more = ""
    if need == "strength":
        more = (
            " or add has_strength to data.features (a scene without intensity then gets strength 0 and has_strength 0)"
        )
    return DatasetError(
        f"{where}: feature {feature!r} requested but the scene has no {need} (it has: {have}); "
        f"set data.features without it (e.g. [height]: the scene_pointcept recipe){more}, "
        f"or use scenes that have it"
    )


def build_scene_features(
    names: Sequence[str],
    pos: Any,
    *,
    color: Any = None,
    normal: Any = None,
    strength: Any = None,
    height: Any = None,
    strength_scan: Any = None,
    ground_height: Any = None,
    verticality: Any = None,
    planarity: Any = None,
    has_strength: Any = None,
    where: str = "scene",
) -> np.ndarray:
    """The model input ``x [N, F]`` (float32) of a scene from its feature ``names`` (:data:`SCENE_FEATURES`):
    the one builder of the datasets, :meth:`gridify.Predictor.predict` and the exported scene runner
    (:meth:`gridify.export.OnnxSceneModel.features_of`; both read a scan's fields with
    :func:`cloud_scene_features`), so that training and prediction see the same columns.

    ``xyz`` = ``pos``; ``color`` in ``[0, 1]`` and ``strength`` (alias ``intensity``) on its unit scale
    (integer arrays divided by 255 or 65535, by their values: :func:`scale_unit`); ``normal`` as given;
    ``height`` = :func:`scene_height` of ``pos``'s z unless ``height`` (the whole scene's, computed before a crop)
    is given; likewise ``strength_scan``, ``ground_height``, ``verticality`` and ``planarity``
    (:mod:`~gridify.datasets.scene_geometry`, of ``pos`` and ``strength``) unless given. ``has_strength`` = the
    given column, else 1 where ``strength`` is given and 0 where it is None; with ``has_strength`` among the
    names, a scene without ``strength`` gets 0 in its strength columns (``strength``, ``strength_scan``) instead
    of an error. No names: ``x = pos``. Large-offset float64 ``pos`` is centred in float64 before the cast
    (:func:`gridify.io.centre_large_offset`), as the datasets and ``predict`` centre it. A feature the scene
    lacks raises a DatasetError naming ``where``.

    Shapes:
        pos ``[N, 3]``, color / normal ``[N, 3]``, strength and the scene-level features ``[N]`` or ``[N, 1]``
        -> ``[N, F]``
    """
    p = centre_large_offset(np.asarray(pos))[0].astype(np.float32, copy=False)  # float64 UTM: centred first
    n = len(p)
    given = {"color": color, "normal": normal, "strength": strength}
    zero_strength = strength is None and "has_strength" in names
    uses_strength = strength is not None and bool(set(_STRENGTH_FEATURES) & set(names))
    scaled = scale_unit(strength, "strength", where) if uses_strength else None  # read only when a column takes it
    level = {
        "strength_scan": strength_scan,
        "ground_height": ground_height,
        "verticality": verticality,
        "planarity": planarity,
    }
    missing = [f for f in names if level.get(f, 0) is None]  # scene-level features to compute on the whole scene
    if missing:
        level.update(scene_level_features(missing, p, strength=scaled, where=where))
    cols: List[np.ndarray] = []
    for f in names:
        key = "strength" if f == "intensity" else f
        if key == "xyz":
            cols.append(p)
        elif key == "height":
            h = np.asarray(height, np.float32) if height is not None else scene_height(p[:, 2])
            cols.append(h.reshape(n, 1))
        elif key == "has_strength":
            flag = np.full(n, float(strength is not None), np.float32) if has_strength is None else has_strength
            cols.append(np.asarray(flag, np.float32).reshape(n, 1))
        elif key in _STRENGTH_FEATURES and zero_strength:
            cols.append(np.zeros((n, 1), np.float32))
        elif key in given or key == "strength_scan":
            need = "strength" if key == "strength_scan" else key
            if given[need] is None:
                raise _missing_feature_error(where, f, need, given)
            if key == "strength_scan":
                v = level[key]
            elif key == "strength":
                v = scaled
            else:  # colours on the unit scale, normals as given
                v = given[key] if key == "normal" else scale_unit(given[key], key, where)
            cols.append(np.asarray(v, np.float32).reshape(n, -1))
        elif key in level:
            cols.append(np.asarray(level[key], np.float32).reshape(n, 1))
        else:
            raise DatasetError(f"{where}: unknown scene feature {f!r}; known: {list(SCENE_FEATURES)}")
    return np.concatenate(cols, 1).astype(np.float32, copy=False) if cols else p.copy()


#: the per-point field names read as LiDAR intensity (``strength``), first found first
INTENSITY_FIELDS = ("intensity", "strength", "remission", "reflectance")


def _unread_fields_hint(source: Any) -> str:
    """For a cloud read from a file whose format has named fields (a KITTI ``.bin``, LAS, PLY, PCD): that
    ``read_points`` keeps a file's fields only when asked, and how to ask (``''`` for anything else)."""
    from pathlib import Path  # noqa: PLC0415

    from ..io import holds_fields  # noqa: PLC0415

    if not isinstance(source, str) or not Path(source).is_file() or not holds_fields(source):
        return ""
    return (
        "read_points keeps a file's fields only when asked: read it with gridify.io.read_points(path, "
        "fields='all') (or fields=['intensity']), or give the path itself to predict; otherwise "
    )


def cloud_scene_features(
    names: Sequence[str], cloud: Any, *, pos: Any = None, normal: Any = None, instead: str = ""
) -> np.ndarray:
    """The model input ``x [N, F]`` of a read scan (a :class:`gridify.io.PointCloud`) from the feature ``names``:
    :func:`build_scene_features` of its coordinates (or ``pos``, the same rows as given: z-up, metric), colours,
    ``normal`` (else the cloud's) and intensity (the first field of :data:`INTENSITY_FIELDS`, warned when off the
    unit scale: :func:`warn_off_unit_scale`). The one reader of a scan's features for
    :meth:`gridify.Predictor.predict` and :meth:`gridify.export.OnnxSceneModel.features_of`. The scene-level
    features (``height``, ``strength_scan``, ``ground_height``, ``verticality``, ``planarity``) are computed on the
    whole cloud.

    A feature the cloud lacks raises a DatasetError naming the cloud, the features and where to get it, ending
    with ``instead`` (the caller's other way to give features, e.g. ``"in Python pass features="``); except
    intensity for a model with ``has_strength`` among its features: a cloud without one gets strength 0 and
    has_strength 0, as the ``drop_strength`` augmentation showed it in training.

    Shapes:
        cloud.points ``[N, 3]`` -> ``[N, F]``
    """
    what = getattr(cloud, "source", None) or "the cloud"
    fields = {str(k).lower(): v for k, v in (getattr(cloud, "fields", None) or {}).items()}
    normal = cloud.normals if normal is None else normal
    alt = f" or {instead}" if instead else ""
    if "color" in names and cloud.colors is None:
        raise DatasetError(
            f"the model was trained with colours (features {list(names)}) but {what} has none; use a "
            f"model trained without them (data.features without color: the shipped scene_pointcept "
            f"recipe trains on height only), read a file with colours{alt}"
        )
    if "normal" in names and normal is None:
        raise DatasetError(
            f"the model was trained with normals (features {list(names)}) but {what} has none; pass "
            f"estimate_normals=True (--estimate-normals) to Predictor.predict, or give normals "
            f"(PointCloud(normals=...)){alt}"
        )
    strength = None
    if set(_STRENGTH_FEATURES + ("has_strength",)) & set(names):
        key = next((k for k in INTENSITY_FIELDS if k in fields), None)
        if key is None and "has_strength" not in names and set(_STRENGTH_FEATURES) & set(names):
            raise DatasetError(
                f"the model was trained with LiDAR intensity (features {list(names)}) but {what} has no intensity "
                f"field (fields: {sorted(fields) or 'none'}); {_unread_fields_hint(what)}read a file that has one "
                f"(.bin, .las, .ply/.pcd with an intensity property; a text or .npy table: name its column, --columns "
                f"x y z intensity, in Python read_points(path, columns=['x', 'y', 'z', 'intensity'])){alt}, or use a "
                f"model trained with has_strength among its features (data.features, with the drop_strength "
                f"augmentation), which labels scans without intensity too"
            )
        if key is not None:
            strength = fields[key]
            warn_off_unit_scale(strength, "strength", f"{what}: its field {key!r}")
    return build_scene_features(
        names, cloud.points if pos is None else pos, color=cloud.colors, normal=normal, strength=strength, where=what
    )


def scene_features(sample: Dict[str, Any], features: Sequence[str], where: str) -> Tensor:
    """``x`` of a scene sample (a dataset's, colours 0-255): :func:`build_scene_features` of its entries,
    as a tensor. ``height`` is ``sample["height"]`` when present (the whole scene's :func:`scene_height`, which a
    dataset computes before cropping so that training crops and whole-scene evaluation agree); so are the other
    entries of :data:`SCENE_INPUT_KEYS` (``has_strength``: 0 after the ``drop_strength`` augmentation)."""

    def arr(key: str) -> Any:
        v = sample.get(key)
        return v.detach().cpu().numpy() if isinstance(v, Tensor) else v

    color = arr("color")
    if color is not None:  # the layouts' 0-255 colours (float or integer) on the unit scale
        color = np.asarray(color, np.float32) / 255.0
    x = build_scene_features(
        features,
        arr("pos"),
        color=color,
        normal=arr("normal"),
        strength=arr("strength"),
        height=arr("height"),
        strength_scan=arr("strength_scan"),
        ground_height=arr("ground_height"),
        verticality=arr("verticality"),
        planarity=arr("planarity"),
        has_strength=arr("has_strength"),
        where=where,
    )
    return torch.from_numpy(x)


#: per-point entries of a scene (common vocabulary) whose NaN/Inf rows are dropped with the points
_ROW_KEYS = ("coord", "color", "normal", "strength", "segment", "instance")


def drop_nonfinite_rows(scene: Dict[str, np.ndarray], where: str) -> Dict[str, np.ndarray]:
    """``scene`` without the points whose coordinates or features (colour, normal, strength) hold NaN/Inf,
    with a warning naming ``where`` (the scene) and the count, as :func:`gridify.io.read_points` does for
    files; every per-point entry loses the same rows. All points invalid: a DatasetError.

    Shapes:
        every per-point entry ``[N, ...]`` -> ``[M, ...]``, ``M <= N``
    """
    coord = np.asarray(scene["coord"])
    n = len(coord)
    ok = np.ones(n, dtype=bool)
    for key in ("coord", "color", "normal", "strength"):
        v = scene.get(key)
        if v is not None and np.issubdtype(np.asarray(v).dtype, np.floating):
            ok &= np.isfinite(np.asarray(v).reshape(n, -1)).all(1)
    if ok.all():
        return scene
    bad = int((~ok).sum())
    if bad == n:
        raise DatasetError(f"{where}: all {n} points have NaN/Inf coordinates or features")
    first = int(np.flatnonzero(~ok)[0])
    warn_at_caller(f"{where}: dropped {bad} of {n} points with NaN/Inf coordinates or features (first: row {first})")
    out = dict(scene)
    for key in _ROW_KEYS:
        v = scene.get(key)
        if v is not None and len(np.asarray(v)) == n:
            out[key] = np.asarray(v)[ok]
    return out


def _check_label_range(scene: Dict[str, np.ndarray], num_classes: int, ignore: int, where: str) -> None:
    """A DatasetError naming ``where``, the row and the value when a label is neither a class id
    ``0..num_classes - 1`` nor ``ignore`` (such labels reached the items, the loss and the metrics as they were)."""
    seg = scene.get("segment")
    if seg is None:
        return
    seg = np.asarray(seg).reshape(-1)
    bad = (seg != ignore) & ((seg < 0) | (seg >= num_classes))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DatasetError(
            f"{where}: label {int(seg[row])} (row {row}) outside 0..{num_classes - 1} ({num_classes} classes) and "
            f"not the ignore label {ignore}; {int(bad.sum())} such label(s): map unlabelled points "
            f"(e.g. 255) to {ignore}, or give the dataset all its classes (classes.txt / data.classes)"
        )


def _warn_unlabelled(scene: Dict[str, np.ndarray], split: str, where: str) -> None:
    """Warn when a scene of a labelled split (train, val) has no labelled point: it adds nothing to the loss
    or the metrics, which is a missing label file or labels outside the class map more often than intent."""
    segment = scene.get("segment")
    if split in ("train", "val") and segment is not None and len(segment) and not (np.asarray(segment) >= 0).any():
        warn_at_caller(
            f"{where}: none of its {len(segment)} points is labelled (a missing label file, or label values "
            f"outside the dataset's class map): the scene adds nothing to the {split} loss or metrics"
        )


class SceneDatasetBase(PointCloudDataset):
    """The item format of scene datasets (see the module docstring); subclasses implement
    :meth:`load_scene` (index -> scene dict in the common vocabulary), :meth:`scene_name`, ``__len__``.

    Args (besides the dataset's own):
        voxel_size: grid subsampling voxel edge (metres) before cropping, at ``train`` only; None: none.
        max_points: the point budget of a ``train`` item (a random crop around a random centre
            point); None: the whole scene. Other splits always give the whole scene.
        crops_per_scene: at ``train`` with a crop or subsampling, every scene appears this many
            times per epoch, each copy its own crop (``len = scenes x crops_per_scene``; item ``i``
            is scene ``i mod scenes``); ignored at the other splits (one whole scene per item).
        mix: at ``train`` with a crop or subsampling, mix scans before the crop
            (:func:`gridify.transforms.mix_scenes`: ``"lasermix"``, ``"polarmix"`` or ``"paste"``, for LiDAR
            scans in their sensor frames; ``"paste"`` copies the classes of
            :data:`~gridify.transforms.PASTE_CLASS_NAMES` the dataset has): with probability ``mix_prob`` an item's scene is mixed with another
            scene of the split drawn by the sampler's generator; None (default): no mixing. Ignored at the
            other splits, which score the scenes as they are.
        mix_prob: the share of items mixed, in ``[0, 1]``.
        crop_centre: how a ``train`` crop's centre point is drawn (:func:`gridify.transforms.crop_centre`):
            ``"random"`` (default: a point drawn uniformly, so crops land where the points are dense) or
            ``"class_balanced"`` (a class drawn uniformly among the scene's labelled ones, then one of its points).

    Attributes:
        class_names, num_classes, ignore_index, features, in_channels (width of ``x``), voxel_size,
        max_points.
    """

    def __init__(
        self,
        *,
        split: str,
        class_names: Sequence[str],
        features: Sequence[str],
        num_points: Optional[int],
        transform: Optional[Transform],
        seed: int,
        normalize: bool,
        cache: bool,
        voxel_size: Optional[float] = None,
        max_points: Optional[int] = None,
        crops_per_scene: int = 1,
        mix: Optional[str] = None,
        mix_prob: float = 0.5,
        crop_centre: str = "random",
    ) -> None:
        where = type(self).__name__
        check_int(where, "crops_per_scene", crops_per_scene, 1)
        self.crop_centre = check_choice(where, "crop_centre", crop_centre, CROP_CENTRES)
        mix = None if mix is None else check_choice(where, "mix", mix, SCENE_MIXES)
        mix_prob = check_number(where, "mix_prob", mix_prob, 0.0, strict=False)
        if mix_prob > 1:
            raise ValueError(f"{where}: mix_prob must be a probability in [0, 1], got {mix_prob}")
        features = check_features(where, features)
        self.voxel_size = check_number(where, "voxel_size", voxel_size, allow_none=True)
        self.max_points = check_int(where, "max_points", max_points, allow_none=True)
        if self.max_points is not None:
            check_alloc(
                where,
                f"max_points={self.max_points} (points of {SAMPLE_BYTES_PER_POINT} bytes on their way "
                f"through the pipeline)",
                SAMPLE_BYTES_PER_POINT * self.max_points,
            )
        super().__init__(
            split=split, num_points=num_points, use_normals=False, transform=transform, seed=seed, normalize=normalize
        )
        if split == "train" and (self.voxel_size is not None or self.max_points is not None):
            self.sampler = SceneSampler(
                self.voxel_size, self.max_points, self.num_points, crop_centre=self.crop_centre, seed=self.seed
            )
        #: copies of every scene per epoch (train crops only; 1 elsewhere)
        self.crops_per_scene = int(crops_per_scene) if isinstance(self.sampler, SceneSampler) else 1
        #: the scan mix of training items (None: none; always None at the other splits)
        self.mix = mix if isinstance(self.sampler, SceneSampler) else None
        self.mix_prob = float(mix_prob)
        self._label_counts: Optional[np.ndarray] = None
        self.class_names = list(class_names)
        #: the classes ``mix="paste"`` copies (:data:`~gridify.transforms.PASTE_CLASS_NAMES` this dataset has)
        self.paste_labels = tuple(i for i, c in enumerate(self.class_names) if c in PASTE_CLASS_NAMES)
        if self.mix == "paste" and not self.paste_labels:
            raise ValueError(
                f"{where}: mix='paste' copies the classes {', '.join(PASTE_CLASS_NAMES)}, and this "
                f"dataset has none of them (classes: {', '.join(self.class_names)})"
            )
        self.features = tuple(features)
        self.ignore_index = IGNORE_INDEX
        self.cache = bool(cache)
        self._cache: Dict[int, Dict[str, np.ndarray]] = {}
        #: the whole-scene features of :mod:`~gridify.datasets.scene_geometry` per scene, computed once
        self._scene_level: Dict[int, Dict[str, np.ndarray]] = {}

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def in_channels(self) -> int:
        return sum(SCENE_FEATURES[f] for f in self.features) or 3

    def scene_count(self) -> int:  # pragma: no cover - abstract
        """The number of scenes (items per epoch: this times :attr:`crops_per_scene`)."""
        raise NotImplementedError

    def __len__(self) -> int:
        return self.scene_count() * self.crops_per_scene

    def __getitem__(self, index: int) -> Dict[str, Tensor]:
        """Item ``index``: scene ``index mod scene_count()``; copy ``index // scene_count()`` draws its own crop."""
        index, scenes = item_index(type(self).__name__, index, len(self)), self.scene_count()
        if self.crops_per_scene == 1:
            return super().__getitem__(index)
        self.sampler.salt = index // scenes
        try:
            return super().__getitem__(index % scenes)
        finally:
            self.sampler.salt = 0

    def label_counts(self) -> np.ndarray:
        """The number of points of every class over the scenes of this split (ignored points left
        out; every scene is read once, the result is kept).

        Shapes:
            ``[num_classes]`` int64.
        """
        if self._label_counts is None:
            counts = np.zeros(self.num_classes, dtype=np.int64)
            for i in range(self.scene_count()):
                seg = np.asarray(self.scene(i)["segment"]).reshape(-1).astype(np.int64)
                seg = seg[seg != self.ignore_index]  # in -1..num_classes - 1: checked as the scene was read
                counts += np.bincount(seg, minlength=self.num_classes)
            self._label_counts = counts
        return self._label_counts.copy()

    def load_scene(self, index: int) -> Dict[str, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def scene_name(self, index: int) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self, index: int) -> str:
        return f"{type(self).__name__} {self.split} scene {self.scene_name(index)!r}"

    def scene(self, index: int) -> Dict[str, np.ndarray]:
        """The full scene ``index`` as read (common vocabulary, before subsampling and transforms)."""
        scene = self._cache.get(index)
        if scene is None:
            try:
                scene = self.load_scene(index)
            except DatasetError as exc:  # the reader named the file (and line): name the scene too
                raise DatasetError(f"{self.describe(index)}: {exc}") from None
            if scene.get("segment") is not None:  # a subclass's own scenes too: ids never truncated
                scene = {**scene, "segment": integer_labels(self.describe(index), scene["segment"], "array")}
            scene = drop_nonfinite_rows(scene, self.describe(index))
            _check_label_range(scene, self.num_classes, self.ignore_index, self.describe(index))
            _warn_unlabelled(scene, self.split, self.describe(index))
            if self.cache:
                self._cache[index] = scene
        return scene

    def scene_inputs(self, index: int) -> Dict[str, np.ndarray]:
        """:meth:`scene` with the whole-scene features of :mod:`~gridify.datasets.scene_geometry` the dataset's
        ``features`` name (``strength_scan``, ``ground_height``, ``verticality``, ``planarity``: ``[N]`` float32
        each), computed on the scene's points as the items give them (centred when far from the origin, float32)
        once, and kept."""
        scene = self.scene(index)
        wanted = [f for f in self.features if f in SCENE_LEVEL_FEATURES]
        if not wanted:
            return scene
        level = self._scene_level.get(index)
        if level is None:
            pos = centre_large_offset(np.asarray(scene["coord"]))[0].astype(np.float32, copy=False)
            strength = scene.get("strength")
            strength = None if strength is None else scale_unit(strength, "strength", self.describe(index))
            try:
                level = scene_level_features(wanted, pos, strength=strength, where=self.describe(index))
            except ValueError as exc:  # a scene too wide for the grids: named
                raise DatasetError(str(exc)) from None
            self._scene_level[index] = level
        return {**scene, **level}

    def mixed_scene(self, index: int) -> Dict[str, np.ndarray]:
        """Scene ``index`` (:meth:`scene_inputs`), mixed with another scene of the split when :attr:`mix` is set and
        the sampler's generator draws it (probability ``mix_prob``; the partner drawn from the same generator)."""
        scene = self.scene_inputs(index)
        count = self.scene_count()
        if self.mix is None or count < 2:
            return scene
        rng = self.sampler.generator(np.asarray(scene["coord"]), salt=_MIX_SALT)
        if rng.random() >= self.mix_prob:
            return scene
        other = int(rng.integers(count - 1))
        other += other >= index
        return mix_scenes_unchecked(
            scene,
            self.scene_inputs(other),
            self.mix,
            rng,
            pos_key="coord",
            label_key="segment",
            paste_labels=self.paste_labels,
        )

    def raw(self, index: int) -> Dict[str, Any]:
        scene = self.mixed_scene(index)
        # large-offset (UTM) coordinates arrive float64: centred in float64, then float32 (see module docstring)
        pos = centre_large_offset(np.asarray(scene["coord"]))[0].astype(np.float32, copy=False)
        sample: Dict[str, Any] = {"pos": pos, "y": scene["segment"]}
        for k in _POINT_KEYS:
            if scene.get(k) is not None:
                sample[k] = scene[k]
        if "height" in self.features:  # scene-relative, before any crop (see scene_features)
            sample["height"] = scene_height(pos[:, 2])
        for k in SCENE_LEVEL_FEATURES:  # each scan's own, before the mix and the crop (scene_inputs)
            if k in self.features and scene.get(k) is not None:
                sample[k] = scene[k]
        if "has_strength" in self.features:  # 0 after the drop_strength augmentation
            sample["has_strength"] = np.full(len(pos), float(scene.get("strength") is not None), np.float32)
        return sample

    def to_item(self, sample: Dict[str, Any], index: int) -> Dict[str, Any]:
        where = self.describe(index)
        item: Dict[str, Any] = {}
        for k, v in sample.items():
            if isinstance(v, (str, bytes)) or v is None or k in SCENE_INPUT_KEYS:
                continue
            item[k] = torch.as_tensor(np.asarray(v) if not isinstance(v, Tensor) else v)
        item["pos"] = item["pos"].float()
        item["x"] = scene_features(sample, self.features, where)
        item["y"] = item["y"].long()
        for k in _POINT_KEYS:
            if k in item:
                item[k] = item[k].float()
        item["index"] = torch.tensor(index, dtype=torch.long)
        item["scene"] = self.scene_name(index)
        return item
