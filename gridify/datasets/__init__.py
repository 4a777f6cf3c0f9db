"""Datasets: ModelNet10/40, ShapeNet-Part, your own folders, a built-in procedural set, and download helpers.

Every dataset returns dicts of tensors (``pos``, ``x``, ``y``, ...) and batches with
:func:`collate_points` into PyG-style flat tensors with a ``batch`` vector::

    from torch.utils.data import DataLoader
    from gridify.datasets import ProceduralShapes, collate_points

    ds = ProceduralShapes("train", num_points=1024, num_samples_per_class=50)
    loader = DataLoader(ds, batch_size=16, shuffle=True, collate_fn=collate_points)

Real datasets live under a data root (default: ``$GRIDIFY_DATA``, else the repository's
``datasets/`` folder); see ``datasets/README.md`` for the expected layouts. Your own files:
:class:`PointFolder` (one folder per class, or one file per sample with per-point labels).

Shapes:
    an item: ``pos`` ``[N, 3]``, ``x`` ``[N, F]``, ``y`` ``[]`` or ``[N]``; a batch: ``pos``
    ``[sum N_i, 3]``, ``batch`` ``[sum N_i]``, ``ptr`` ``[B + 1]``.
"""

from ..io.labels import read_labels  # the one reader of label files (.label, .npy, text), re-exported
from ._common import (
    DatasetError,
    PointCloudDataset,
    collate_points,
    default_root,
    fit_box,
    stratified_split,
    stratified_subset,
)
from .dynamic import DYNAMIC_CLASSES, DynamicShapes, PointCloudSequence, collate_sequences, read_sequence
from .download import (
    ARCHIVES,
    DatasetNotFoundError,
    DownloadError,
    download_and_extract,
    extract_archive,
    resolve_archive,
)
from .folder import PointFolder
from .modelnet import MODELNET10_CLASSES, MODELNET40_CLASSES, ModelNet
from .procedural import PROCEDURAL_CATEGORY_TO_PARTS, PROCEDURAL_CLASSES, PROCEDURAL_PARTS, ProceduralShapes, make_shape
from .scenes import ProceduralScenes, S3DIS, SceneDataset, ScanNet, SemanticKITTI, convert_to_pointcept  # noqa: F401
from .shapenet import (
    SHAPENET_CATEGORIES,
    SHAPENET_CATEGORY_TO_PARTS,
    SHAPENET_NUM_PARTS,
    SHAPENET_PART_NAMES,
    SHAPENET_PARTS,
    SHAPENET_SYNSETS,
    ShapeNetPart,
)

__all__ = [
    "ModelNet",
    "ShapeNetPart",
    "ProceduralShapes",
    "PointFolder",
    "PointCloudDataset",
    "collate_points",
    "default_root",
    "stratified_split",
    "stratified_subset",
    "fit_box",
    "read_labels",
    "make_shape",
    "download_and_extract",
    "extract_archive",
    "resolve_archive",
    "DownloadError",
    "DatasetNotFoundError",
    "DatasetError",
    "ARCHIVES",
    "MODELNET10_CLASSES",
    "MODELNET40_CLASSES",
    "SHAPENET_CATEGORIES",
    "SHAPENET_SYNSETS",
    "SHAPENET_CATEGORY_TO_PARTS",
    "SHAPENET_NUM_PARTS",
    "SHAPENET_PARTS",
    "SHAPENET_PART_NAMES",
    "PROCEDURAL_CLASSES",
    "PROCEDURAL_PARTS",
    "PROCEDURAL_CATEGORY_TO_PARTS",
    "DynamicShapes",
    "DYNAMIC_CLASSES",
    "collate_sequences",
    "PointCloudSequence",
    "read_sequence",
]
