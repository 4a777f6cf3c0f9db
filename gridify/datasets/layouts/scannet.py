"""The ScanNet v2 layout: ``<root>/scans/<scene>/<scene>_vh_clean_2.ply`` + ``<scene>_vh_clean_2.labels.ply``.

The points are the mesh vertices with their colours; the labels file's vertex ``label`` (NYU40 id) is mapped to
the 20 benchmark classes (:data:`SCANNET20_CLASSES`, :data:`SCANNET20_NYU40_IDS`; every other id -1).
``train``/``val`` are filtered by the official lists ``<root>/scannetv2_{train,val}.txt`` (:func:`official_split_list`,
:func:`listed_scenes`: a listed scene that is not under the root is refused, naming the list, unless
``skip_missing``), ``test`` is ``<root>/scans_test`` (no labels). ``<root>`` may hold the scene folders directly.

Shapes:
    a scene: coord ``[N, 3]`` float32 (float64 for large offsets), color ``[N, 3]`` float32, segment ``[N]``
    int64.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..._checks import warn_at_caller
from ...io.ply import read_ply_vertices as io_read_ply_vertices
from .._common import DatasetError, PathLike
from .base import (
    IGNORE_INDEX,
    LAYOUTS,
    SceneLayout,
    SceneRef,
    coord_array,
    integer_labels,
    layout_colors,
    layout_error,
    read_text_lines,
    read_with,
)

__all__ = [
    "SCANNET20_CLASSES",
    "SCANNET20_NYU40_IDS",
    "ScanNetLayout",
    "map_nyu40_to_scannet20",
    "read_ply_vertices",
    "read_scannet_scene",
    "official_split_list",
    "listed_scenes",
]

SCANNET20_CLASSES: Tuple[str, ...] = (
    "wall",
    "floor",
    "cabinet",
    "bed",
    "chair",
    "sofa",
    "table",
    "door",
    "window",
    "bookshelf",
    "picture",
    "counter",
    "desk",
    "curtain",
    "refrigerator",
    "shower curtain",
    "toilet",
    "sink",
    "bathtub",
    "otherfurniture",
)
#: the NYU40 id of each ScanNet benchmark class (every other id is ignored)
SCANNET20_NYU40_IDS: Tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16, 24, 28, 33, 34, 36, 39)


@lru_cache(maxsize=None)
def _nyu_lut() -> np.ndarray:
    lut = np.full(256, IGNORE_INDEX, dtype=np.int64)
    lut[list(SCANNET20_NYU40_IDS)] = np.arange(len(SCANNET20_NYU40_IDS))
    lut.flags.writeable = False
    return lut


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


def read_ply_vertices(path: PathLike) -> Dict[str, np.ndarray]:
    """The scalar properties of the ``vertex`` element of a PLY file (the first element), by name: ScanNet's
    ``*_vh_clean_2.ply`` meshes are scanned vertices, which are the points (:func:`gridify.io.ply.read_ply_vertices`;
    a truncated file or a vertex count below the data is a :class:`DatasetError` naming the file and both counts).

    Shapes:
        property name -> ``[V]``.
    """
    return read_with(io_read_ply_vertices, Path(path))


def _ply_xyz(p: Path, verts: Mapping[str, np.ndarray]) -> np.ndarray:
    if not {"x", "y", "z"} <= set(verts):
        raise layout_error(p, "PLY vertices have no x y z properties")
    return coord_array(np.stack([verts["x"], verts["y"], verts["z"]], 1))


def read_scannet_scene(scene_dir: PathLike, name: Optional[str] = None) -> Dict[str, np.ndarray]:
    """A ScanNet v2 scene folder: ``<name>_vh_clean_2.ply`` (+ ``<name>_vh_clean_2.labels.ply``).

    The points are the mesh vertices with their colours; the labels file's vertex ``label`` (NYU40)
    is mapped to the 20 benchmark ids (others -1); without a labels file every point is -1.
    """
    d = Path(scene_dir)
    name = name or d.name
    mesh, labels = d / f"{name}_vh_clean_2.ply", d / f"{name}_vh_clean_2.labels.ply"
    if not mesh.is_file():
        raise layout_error(d, f"scene {name!r} has no {mesh.name}")
    verts = read_ply_vertices(mesh)
    coord = _ply_xyz(mesh, verts)
    scene = {"coord": coord}
    if {"red", "green", "blue"} <= set(verts):
        scene["color"] = layout_colors(mesh, np.stack([verts["red"], verts["green"], verts["blue"]], 1))
    segment = np.full(len(coord), IGNORE_INDEX, dtype=np.int64)
    if labels.is_file():
        lv = read_ply_vertices(labels)
        if "label" not in lv:
            raise layout_error(labels, "PLY vertices have no 'label' property (NYU40 ids)")
        if len(lv["label"]) != len(coord):
            raise layout_error(labels, f"{len(lv['label'])} labelled vertices but {mesh} has {len(coord)}")
        segment = map_nyu40_to_scannet20(integer_labels(labels, lv["label"]))
    scene["segment"] = segment
    return scene


# --------------------------------------------------------------------------------------
# official split lists (scannetv2_<split>.txt), also read by mmdetection3d's ScanNet layouts
# --------------------------------------------------------------------------------------
def official_split_list(root: Path, split: str, layout: str) -> Optional[Tuple[List[str], Path]]:
    """``(the scene names, the file)`` of the official list of ``split`` (None for ``all``)."""
    if split == "all":
        return None
    for f in (root / f"scannetv2_{split}.txt", root.parent / f"scannetv2_{split}.txt"):
        if f.is_file():
            return read_text_lines(f), f
    raise layout_error(
        root,
        f"{layout} split {split!r} needs the official list scannetv2_{split}.txt in this folder "
        f"(from the ScanNet repository's Tasks/Benchmark/); use split='all' or scenes=[...] "
        f"without it (in a config: data.<split>.scenes)",
    )


def listed_scenes(
    listing: Optional[Tuple[List[str], Path]], present: Sequence[str], base: Path, split: str, skip_missing: bool
) -> Optional[set]:
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
        holds = f"{len(held)} scene(s): {', '.join(held[:3])}{', ...' if len(held) > 3 else ''}" if held else "no scene"
        msg = (
            f"{f}: {len(missing)} of the {len(set(names))} scenes it lists for split {split!r} are not under {base} "
            f"(first: {', '.join(missing[:5])}); that folder holds {holds}"
        )
        if not skip_missing:
            raise DatasetError(
                f"{msg}: complete the download, or use the scenes that are there with "
                f"skip_missing=True (data.skip_missing: true) or split 'all' (gridify convert --splits "
                f"all)"
            )
        warn_at_caller(f"{msg}; the split holds the {len(set(names)) - len(missing)} others (skip_missing)")
    return set(names)


@LAYOUTS.register("scannet")
class ScanNetLayout(SceneLayout):
    """ScanNet v2 raw scene folders, the 20 benchmark classes (official split lists)."""

    classes = SCANNET20_CLASSES
    splits = "scannetv2_{train,val}.txt lists; test: scans_test"
    features = ("color",)
    folder = "scannet"
    split_lists = True
    scan_order = 40

    def find(
        self, root: Path, split: str, *, test_area: int, sequences: Optional[Sequence[str]], skip_missing: bool
    ) -> List[SceneRef]:
        if split == "test":
            base, listing = (root / "scans_test"), None
        else:
            base = root / "scans" if (root / "scans").is_dir() else root
            listing = official_split_list(root, split, self.name)
        found = [
            d for d in (sorted(base.iterdir()) if base.is_dir() else []) if (d / f"{d.name}_vh_clean_2.ply").is_file()
        ]
        keep = listed_scenes(listing, [d.name for d in found], base, split, skip_missing)
        return [
            SceneRef(d.name, self.name, d, d / f"{d.name}_vh_clean_2.labels.ply", split=split)
            for d in found
            if keep is None or d.name in keep
        ]

    def read(
        self, ref: SceneRef, *, classes: Optional[Sequence[str]] = None, unknown: str = "ignore"
    ) -> Dict[str, np.ndarray]:
        return read_scannet_scene(ref.path)
