"""ShapeNet-Part (16 categories, 50 parts) part segmentation.

Source formats (``source=``), with the layout expected under ``root``:

``"normal_txt"``
    ``shapenetcore_partanno_segmentation_benchmark_v0_normal/<synset>/<id>.txt`` with rows
    ``x y z nx ny nz part`` (GLOBAL part ids 0-49) and
    ``train_test_split/shuffled_{train,val,test}_file_list.json``.
``"hdf5"``
    ``hdf5_data/ply_data_{train,val,test}N.h5`` (``data`` ``[B, 2048, 3]``, ``label`` ``[B, 1]``
    category, ``pid`` ``[B, 2048]`` global part ids, optionally ``normal``).
``"v0_points"``
    ``shapenetcore_partanno_segmentation_benchmark_v0/`` (the v0 benchmark release; also found as
    ``shapenetcore_partanno_v0/``) with ``<synset>/points/<id>.pts`` + ``<synset>/points_label/<id>.seg``
    (LOCAL part ids starting at 1, mapped to global ids here) and the same split JSONs in
    ``train_test_split/``.

The split JSONs list entries like ``shape_data/<synset>/<id>``; ``"trainval"`` is train + val.
Part ``i`` is named :data:`~gridify.datasets.SHAPENET_PART_NAMES` ``[i]`` (``"Airplane/body"`` ...
``"Table/drawer"``).
Guide: ``docs/guides/shapenet-part.md``.
Shapes keep ShapeNet's y-up orientation (rotate about ``axis=1`` for augmentation).

The official evaluation protocol scores every point of every test shape: use
``num_points=None`` with a batch size of 1 or :func:`~gridify.datasets.collate_points`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._checks import check_choice, warn_at_caller
from ..io import read_labels, read_points, repair_normals
from ..io.source import read_text_file
from ..registry import DATASETS
from ._common import PathLike, PointCloudDataset, Transform, align_labels, check_split, default_root, h5_dataset
from .download import DatasetNotFoundError, download_archive, manual_instructions

__all__ = [
    "ShapeNetPart",
    "SHAPENET_CATEGORIES",
    "SHAPENET_SYNSETS",
    "SHAPENET_NUM_PARTS",
    "SHAPENET_PARTS",
    "SHAPENET_PART_NAMES",
    "SHAPENET_CATEGORY_TO_PARTS",
    "SHAPENET_PART_TO_CATEGORY",
]

#: the 16 categories, in the order of their ids 0-15
SHAPENET_CATEGORIES: List[str] = [
    "Airplane",
    "Bag",
    "Cap",
    "Car",
    "Chair",
    "Earphone",
    "Guitar",
    "Knife",
    "Lamp",
    "Laptop",
    "Motorbike",
    "Mug",
    "Pistol",
    "Rocket",
    "Skateboard",
    "Table",
]
#: category name -> ShapeNetCore synset id
SHAPENET_SYNSETS: Dict[str, str] = {
    "Airplane": "02691156",
    "Bag": "02773838",
    "Cap": "02954340",
    "Car": "02958343",
    "Chair": "03001627",
    "Earphone": "03261776",
    "Guitar": "03467517",
    "Knife": "03624134",
    "Lamp": "03636649",
    "Laptop": "03642806",
    "Motorbike": "03790512",
    "Mug": "03797390",
    "Pistol": "03948459",
    "Rocket": "04099429",
    "Skateboard": "04225987",
    "Table": "04379243",
}
#: category -> names of its parts, in the order of the release's part ids (local ids 1, 2, ... of the
#: v0 ``.seg`` files; global ids 0-49 in this order over the categories): the part labels usually listed
#: for the release, shortened ("leg or support" -> "leg", "belt for foot" -> "foot strap"); the order is
#: checked against the labelled points of real shapes (tests/datasets/test_datasets.py)
SHAPENET_PARTS: Dict[str, List[str]] = {
    "Airplane": ["body", "wing", "tail", "engine"],
    "Bag": ["handle", "body"],
    "Cap": ["crown", "visor"],
    "Car": ["roof", "hood", "wheel", "body"],
    "Chair": ["back", "seat", "leg", "arm"],
    "Earphone": ["earcup", "headband", "cord"],
    "Guitar": ["head", "neck", "body"],
    "Knife": ["blade", "handle"],
    "Lamp": ["base", "shade", "canopy", "tube"],
    "Laptop": ["keyboard", "screen"],
    "Motorbike": ["gas tank", "seat", "wheel", "handlebar", "light", "frame"],
    "Mug": ["handle", "body"],
    "Pistol": ["barrel", "grip", "trigger"],
    "Rocket": ["body", "fin", "nose"],
    "Skateboard": ["wheel", "deck", "foot strap"],
    "Table": ["top", "leg", "drawer"],
}
_PART_COUNTS = [len(SHAPENET_PARTS[c]) for c in SHAPENET_CATEGORIES]  # 4, 2, 2, 4, 4, 3, 3, 2, 4, 2, 6, 2, 3, 3, 3, 3
SHAPENET_NUM_PARTS = sum(_PART_COUNTS)  # 50
#: global part id -> ``"<Category>/<part>"`` (``"Airplane/body"`` ... ``"Table/drawer"``): the class names of
#: a model trained on ShapeNet-Part (predictions, ``gridify show`` legends, ONNX metadata)
SHAPENET_PART_NAMES: List[str] = [f"{c}/{p}" for c in SHAPENET_CATEGORIES for p in SHAPENET_PARTS[c]]
_OFFSETS = np.concatenate([[0], np.cumsum(_PART_COUNTS)[:-1]]).tolist()
#: category id -> its global part ids (Airplane 0-3, Bag 4-5, ..., Table 47-49)
SHAPENET_CATEGORY_TO_PARTS: List[List[int]] = [list(range(o, o + k)) for o, k in zip(_OFFSETS, _PART_COUNTS)]
#: global part id -> category id
SHAPENET_PART_TO_CATEGORY: List[int] = [c for c, parts in enumerate(SHAPENET_CATEGORY_TO_PARTS) for _ in parts]
_SYNSET_TO_CAT = {s: SHAPENET_CATEGORIES.index(c) for c, s in SHAPENET_SYNSETS.items()}

SOURCES = ("normal_txt", "hdf5", "v0_points")
#: the archive ``gridify download`` fetches for each release
SOURCE_ARCHIVES = {
    "normal_txt": "shapenetcore_partanno_segmentation_benchmark_v0_normal",
    "hdf5": "shapenet_part_seg_hdf5_data",
    "v0_points": "shapenetcore_partanno_v0",
}
_SPLIT_FILES = {"train": ["train"], "val": ["val"], "test": ["test"], "trainval": ["train", "val"]}


@DATASETS.register("shapenet")
class ShapeNetPart(PointCloudDataset):
    """ShapeNet-Part segmentation.

    Args:
        root: data root holding the release folder (or the release folder itself).
        split: ``"train"``, ``"val"``, ``"test"`` or ``"trainval"`` (official lists).
        source: ``"normal_txt"``, ``"hdf5"`` or ``"v0_points"``.
        num_points: points per shape (random subset at train, deterministic otherwise,
            padded with repeats when a shape has fewer); ``None`` keeps every point.
        categories: restrict to these category names (ids stay global).
        use_normals: ``x`` = xyz + normals (True) or xyz. ``"v0_points"`` has no normals.
        transform: applied to the sample dict after normalization and subsampling.
        seed: seed of the subsampling.
        normalize: centre each shape and scale it into the unit sphere (True or ``"sphere"``) or
            the cube ``[-1, 1]^3`` (``"cube"``: the bounding box centred, its longest side spanning the grid box); False: as read.
        download: try to download the release when it is missing.
        skip_missing: drop split entries whose files are missing (with a warning) instead
            of raising.

    Items (dicts of tensors):
        ``pos`` ``[N, 3]``, ``x`` ``[N, 3 or 6]``, ``normal`` ``[N, 3]`` (with normals),
        ``y`` ``[N]`` global part ids (0-49), ``category`` (0-d, 0-15), ``index`` (0-d).

    Attributes:
        category_names, category_to_parts, part_names (``"Airplane/body"``, ...:
        :data:`~gridify.datasets.SHAPENET_PART_NAMES`), num_parts, source_format, data_dir, files.
    """

    category_names = SHAPENET_CATEGORIES
    group_attribute = "category_ids"
    category_to_parts = SHAPENET_CATEGORY_TO_PARTS
    part_names = SHAPENET_PART_NAMES
    num_parts = SHAPENET_NUM_PARTS
    num_categories = len(SHAPENET_CATEGORIES)

    def __init__(
        self,
        root: Optional[PathLike] = None,
        split: str = "train",
        *,
        source: str = "normal_txt",
        num_points: Optional[int] = 2048,
        categories: Optional[Sequence[str]] = None,
        use_normals: bool = True,
        transform: Optional[Transform] = None,
        seed: int = 0,
        normalize: Union[bool, str] = True,
        download: bool = False,
        skip_missing: bool = False,
    ) -> None:
        check_split("ShapeNetPart", split)
        check_choice("ShapeNetPart", "source", source, list(SOURCES))
        if source == "v0_points" and use_normals:
            raise ValueError("ShapeNetPart: source='v0_points' has no normals; set use_normals=False")
        super().__init__(
            split=split,
            num_points=num_points,
            use_normals=use_normals,
            transform=transform,
            seed=seed,
            normalize=normalize,
        )
        self.root = Path(root) if root is not None else default_root()
        self.source_format = source
        self.skip_missing = bool(skip_missing)
        if categories is not None:
            lookup = {c.lower(): c for c in SHAPENET_CATEGORIES}
            bad = [c for c in categories if str(c).lower() not in lookup]
            if bad:
                raise ValueError(
                    f"ShapeNetPart: categories must be ShapeNet-Part categories (any case), "
                    f"{', '.join(SHAPENET_CATEGORIES)}; unknown: {', '.join(map(str, bad))}"
                )
            self.categories = [lookup[str(c).lower()] for c in categories]
        else:
            self.categories = list(SHAPENET_CATEGORIES)
        wanted = {SHAPENET_CATEGORIES.index(c) for c in self.categories}
        self._h5: Dict[str, Any] = {}
        self.data_dir = self._locate(download)
        entries, cats = self._list(split)
        keep = [i for i, c in enumerate(cats) if c in wanted]
        self.entries = [entries[i] for i in keep]
        self.category_ids = np.asarray([cats[i] for i in keep], dtype=np.int64)
        if not self.entries:
            raise ValueError(
                f"ShapeNetPart ({source}): the {split} split has no shapes of "
                f"categories={self.categories} under {self.data_dir}"
            )

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def files(self) -> List[str]:
        return [e[0] if isinstance(e[1], str) or e[1] is None else f"{e[0]}[{e[1]}]" for e in self.entries]

    def __repr__(self) -> str:
        return (
            f"ShapeNetPart(split={self.split!r}, source={self.source_format!r}, samples={len(self)}, "
            f"num_points={self.num_points}, data_dir='{self.data_dir}')"
        )

    # ----------------------------------------------------------------------------------
    def _candidates(self) -> List[Path]:
        r = self.root
        if self.source_format == "normal_txt":
            return [r / "shapenetcore_partanno_segmentation_benchmark_v0_normal", r]
        if self.source_format == "hdf5":
            return [r / "hdf5_data", r / "shapenet_part_seg_hdf5_data", r]
        return [
            r / "shapenetcore_partanno_segmentation_benchmark_v0",
            r / "shapenetcore_partanno_v0",
            r / "PartAnnotation",
            r,
        ]

    def _looks_right(self, d: Path) -> bool:
        if not d.is_dir():
            return False
        if self.source_format == "hdf5":
            return any(d.glob("ply_data_*.h5"))
        return (d / "train_test_split").is_dir()

    @classmethod
    def archives(cls, source: str = "normal_txt", **_: Any) -> List[str]:
        """The archive ``gridify download`` fetches for this release."""
        return [SOURCE_ARCHIVES[source]] if source in SOURCE_ARCHIVES else []

    def _locate(self, download: bool) -> Path:
        for d in self._candidates():
            if self._looks_right(d):
                return d
        key = SOURCE_ARCHIVES[self.source_format]
        if download:
            download_archive(key, self.root)
            for d in self._candidates():
                if self._looks_right(d):
                    return d
        how = {
            "normal_txt": "<synset>/<id>.txt and train_test_split/shuffled_*_file_list.json",
            "hdf5": "ply_data_{train,val,test}*.h5",
            "v0_points": "<synset>/points/*.pts, <synset>/points_label/*.seg and train_test_split/",
        }
        raise DatasetNotFoundError(
            f"ShapeNetPart ({self.source_format}) not found under {self.root}: expected {self._candidates()[0]} "
            f"holding {how[self.source_format]}.\nPass download=True to fetch it, or:\n"
            + manual_instructions(key, self.root)
            + "\n(then unzip it there, or let download=True extract it)",
            archive=key,
            root=self.root,
        )

    def _split_entries(self, split: str) -> List[Tuple[str, str]]:
        out: List[Tuple[str, str]] = []
        seen = set()
        dups = 0
        for part in _SPLIT_FILES[split]:
            f = self.data_dir / "train_test_split" / f"shuffled_{part}_file_list.json"
            if not f.is_file():
                raise DatasetNotFoundError(
                    f"ShapeNetPart ({self.source_format}): the {part} split list {f} is missing (the official "
                    f"release ships train_test_split/shuffled_{{train,val,test}}_file_list.json)",
                    root=self.root,
                )
            try:
                items = json.loads(read_text_file(f))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ValueError(f"{f}: not valid JSON ({exc})") from None
            if not isinstance(items, list):
                raise ValueError(f"{f}: expected a JSON list of 'shape_data/<synset>/<id>' strings")
            for s in items:
                m = re.fullmatch(r"(?:.*/)?(\d{8})/([^/]+)", str(s))
                if m is None:
                    raise ValueError(f"{f}: malformed entry {s!r} (expected 'shape_data/<synset>/<id>')")
                key = (m.group(1), m.group(2))
                if key in seen:
                    dups += 1
                    continue
                seen.add(key)
                out.append(key)
        if dups:
            warn_at_caller(f"ShapeNetPart: {dups} duplicate entries in the {split} split lists were dropped")
        return out

    def _list(self, split: str) -> Tuple[List[Tuple[str, Any]], List[int]]:
        d = self.data_dir
        entries: List[Tuple[str, Any]] = []
        cats: List[int] = []
        if self.source_format == "hdf5":
            import h5py

            parts = _SPLIT_FILES[split]

            def order(p: Path) -> Tuple[int, int]:
                m = re.search(r"ply_data_([a-z]+)(\d*)\.h5$", p.name)
                return (
                    parts.index(m.group(1)) if m and m.group(1) in parts else 99,
                    int(m.group(2)) if m and m.group(2) else 0,
                )

            files = sorted((f for p in parts for f in d.glob(f"ply_data_{p}*.h5")), key=order)
            if not files:
                raise DatasetNotFoundError(f"{d}: no ply_data_{{{','.join(parts)}}}*.h5 files")
            for f in files:
                try:
                    with h5py.File(f, "r") as h:
                        missing = [k for k in ("data", "label", "pid") if k not in h]
                        if missing:
                            raise ValueError(f"{f}: HDF5 file lacks datasets {missing} (has {list(h)})")
                        if self.use_normals and "normal" not in h:
                            raise ValueError(
                                f"{f}: use_normals=True but the file has no 'normal' dataset; set use_normals=False"
                            )
                        data, pid = (h5_dataset(f, h, k, "ShapeNetPart") for k in ("data", "pid"))
                        label = h5_dataset(f, h, "label", "ShapeNetPart")
                        if label.size != data.shape[0] or pid.shape[:2] != data.shape[:2]:
                            raise ValueError(
                                f"{f}: 'data' {tuple(data.shape)}, 'label' {tuple(label.shape)} and "
                                f"'pid' {tuple(pid.shape)} disagree in size"
                            )
                        lab = np.asarray(label).reshape(-1).astype(np.int64)
                except OSError as exc:
                    raise ValueError(f"{f}: cannot read HDF5 file ({exc})") from None
                if len(lab) and (lab.min() < 0 or lab.max() >= len(SHAPENET_CATEGORIES)):
                    raise ValueError(f"{f}: category labels outside 0..15")
                entries.extend((str(f), i) for i in range(len(lab)))
                cats.extend(lab.tolist())
            return entries, cats
        missing: List[str] = []
        listed = self._split_entries(split)
        for synset, shape in listed:
            if synset not in _SYNSET_TO_CAT:
                raise ValueError(f"{d}: split lists unknown synset {synset!r}")
            if self.source_format == "normal_txt":
                f = d / synset / f"{shape}.txt"
                ok = f.is_file()
                entry: Tuple[str, Any] = (str(f), None)
            else:
                f = d / synset / "points" / f"{shape}.pts"
                seg = d / synset / "points_label" / f"{shape}.seg"
                ok = f.is_file() and seg.is_file()
                entry = (str(f), str(seg))
            if not ok:
                missing.append(str(f))
                continue
            entries.append(entry)
            cats.append(_SYNSET_TO_CAT[synset])
        if missing:
            msg = (
                f"ShapeNetPart: {len(missing)} of {len(listed)} shapes listed in the {split} split are "
                f"missing under {d} (first: {missing[0]})"
            )
            if not self.skip_missing:
                raise ValueError(msg + "; the release is incomplete (set skip_missing=True to use what is there)")
            warn_at_caller(msg + "; skipped")
        return entries, cats

    # ----------------------------------------------------------------------------------
    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_h5"] = {}
        return state

    def _check_parts(self, labels: np.ndarray, cat: int, where: str) -> None:
        allowed = SHAPENET_CATEGORY_TO_PARTS[cat]
        if len(labels) and (labels.min() < allowed[0] or labels.max() > allowed[-1]):
            raise ValueError(
                f"{where}: part labels {sorted(set(labels.tolist()))[:8]} outside the "
                f"{SHAPENET_CATEGORIES[cat]} parts {allowed}"
            )

    def raw(self, index: int) -> Dict[str, Any]:
        path, extra = self.entries[index]
        cat = int(self.category_ids[index])
        normal = None
        if self.source_format == "normal_txt":
            cloud = read_points(path, columns=("x", "y", "z", "nx", "ny", "nz", "label"))
            pos, labels = cloud.points, cloud.labels
            if self.use_normals:
                normal = repair_normals(cloud.points, cloud.normals)
        elif self.source_format == "v0_points":
            cloud = read_points(path, columns=("x", "y", "z"))
            pos = cloud.points
            local = align_labels(read_labels(Path(extra)), Path(extra), cloud, Path(path))
            k = len(SHAPENET_CATEGORY_TO_PARTS[cat])
            if len(local) and (local.min() < 1 or local.max() > k):
                raise ValueError(
                    f"{extra}: local part ids must be 1..{k} for {SHAPENET_CATEGORIES[cat]}, "
                    f"found {sorted(set(local.tolist()))}"
                )
            labels = local - 1 + SHAPENET_CATEGORY_TO_PARTS[cat][0]
        else:
            if getattr(self, "_h5_pid", None) != os.getpid():  # h5py handles must not cross a fork
                self._h5, self._h5_pid = {}, os.getpid()
            h = self._h5.get(path)
            if h is None:
                import h5py

                h = self._h5[path] = h5py.File(path, "r")
            pos = np.asarray(h["data"][extra], dtype=np.float32)
            labels = np.asarray(h["pid"][extra]).astype(np.int64)
            if self.use_normals:
                normal = np.asarray(h["normal"][extra], dtype=np.float32)
        labels = np.asarray(labels, dtype=np.int64)
        self._check_parts(labels, cat, self.describe(index))
        sample: Dict[str, Any] = {"pos": pos, "y": labels, "category": np.int64(cat)}
        if normal is not None:
            sample["normal"] = normal
        return sample
