"""ModelNet10 / ModelNet40 shape classification from any of the four common releases.

Source formats (``source=``), with the layout expected under ``root``:

``"off"``
    the original meshes, ``ModelNet40/<class>/{train,test}/<class>_NNNN.off`` (from
    ``ModelNet40.zip`` / ``ModelNet10.zip``). Each mesh is surface-sampled once (area-weighted,
    seeded per file) into ``mesh_samples`` points with face normals and cached as ``.npz`` under
    ``cache_dir`` (default ``<dataset>/.cache``).
``"normal_resampled"``
    the PointNet++ release ``modelnet40_normal_resampled/<class>/<shape>.txt`` (10,000 rows of
    ``x,y,z,nx,ny,nz``) with ``modelnet{10,40}_{train,test}.txt`` and
    ``modelnet{10,40}_shape_names.txt``. Its y and z axes are swapped relative to the meshes;
    with ``align_up_axis=True`` they are swapped back so every source has z up. The few rows
    with placeholder normals ``(1, 1, 1)`` get the normal of their nearest valid neighbour.
``"hdf5"``
    the PointNet release ``modelnet40_ply_hdf5_2048/ply_data_{train,test}N.h5`` (``data``
    ``[B, 2048, 3]``, ``label`` ``[B, 1]``, optionally ``normal``); ModelNet40 only; y-up,
    realigned like ``normal_resampled``.
``"pcd"``
    ``ModelNet10/pcd/<class>/{train,test}/*.pcd`` point clouds (xyz only, original units).
``"auto"``
    the first of ``normal_resampled``, ``off``, ``hdf5`` (ModelNet40) and ``pcd`` found under
    ``root`` (``source_format`` then names it); ``download=True`` fetches the official OFF
    meshes when none is there.

Splits: ``"train"`` and ``"val"`` are carved from the official TRAIN split (deterministic,
seeded, stratified per class, ``val_fraction`` of every class held out); ``"trainval"`` is the
whole official train split; ``"test"`` is the official test split, never used for validation.

Labels follow the official alphabetical class lists (:data:`MODELNET40_CLASSES`,
:data:`MODELNET10_CLASSES`) for every source, so ids agree across formats.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from .._checks import check_choice, warn_at_caller
from ..io import read_mesh, read_points, repair_normals, sample_mesh
from ..io.source import read_text_file
from ..registry import DATASETS
from ._common import (
    PathLike,
    PointCloudDataset,
    Transform,
    check_split,
    default_root,
    h5_dataset,
    load_npz,
    save_npz_atomic,
    stratified_split,
    writable_dir,
)
from .download import DatasetNotFoundError, download_archive, manual_instructions

__all__ = ["ModelNet", "MODELNET40_CLASSES", "MODELNET10_CLASSES"]

MODELNET40_CLASSES: List[str] = [
    "airplane",
    "bathtub",
    "bed",
    "bench",
    "bookshelf",
    "bottle",
    "bowl",
    "car",
    "chair",
    "cone",
    "cup",
    "curtain",
    "desk",
    "door",
    "dresser",
    "flower_pot",
    "glass_box",
    "guitar",
    "keyboard",
    "lamp",
    "laptop",
    "mantel",
    "monitor",
    "night_stand",
    "person",
    "piano",
    "plant",
    "radio",
    "range_hood",
    "sink",
    "sofa",
    "stairs",
    "stool",
    "table",
    "tent",
    "toilet",
    "tv_stand",
    "vase",
    "wardrobe",
    "xbox",
]
MODELNET10_CLASSES: List[str] = [
    "bathtub",
    "bed",
    "chair",
    "desk",
    "dresser",
    "monitor",
    "night_stand",
    "sofa",
    "table",
    "toilet",
]

SOURCES = ("off", "normal_resampled", "hdf5", "pcd")
#: the releases ``source="auto"`` looks for, in order
AUTO_ORDER = ("normal_resampled", "off", "hdf5", "pcd")
#: the archive ``gridify download`` fetches for each release (``{name}``: 10 or 40; pcd has none)
SOURCE_ARCHIVES = {
    "off": "ModelNet{name}",
    "normal_resampled": "modelnet40_normal_resampled",
    "hdf5": "modelnet40_ply_hdf5_2048",
    "auto": "ModelNet{name}",
}


def _shape_class(shape: str) -> str:
    """``night_stand_0012`` -> ``night_stand``."""
    return shape.rsplit("_", 1)[0]


@DATASETS.register("modelnet")
class ModelNet(PointCloudDataset):
    """ModelNet10/40 classification.

    Args:
        root: data root holding the release folder (or the release folder itself);
            default :func:`~gridify.datasets._common.default_root`.
        name: ``"40"`` or ``"10"``.
        split: ``"train"``, ``"val"``, ``"test"`` or ``"trainval"`` (see module docstring).
        source: ``"off"``, ``"normal_resampled"``, ``"hdf5"``, ``"pcd"`` or ``"auto"``.
        num_points: points per sample (random subset at train, deterministic otherwise;
            ``None`` keeps all).
        use_normals: ``x`` = xyz + normals (True) or xyz (False). ``"pcd"`` has no normals.
        transform: applied to the sample dict after normalization and subsampling.
        val_fraction: fraction of each class of the official train split held out as ``val``.
        seed: seed of the val carving, the subsampling and the mesh sampling.
        cache: cache sampled OFF meshes as ``.npz``.
        cache_dir: where the cache goes (default ``<dataset folder>/.cache``); when not
            writable the cache is disabled with a warning.
        mesh_samples: surface points sampled per OFF mesh (before ``num_points`` subsampling).
        normalize: centre each shape and scale it into the unit sphere (True or ``"sphere"``) or
            the cube ``[-1, 1]^3`` (``"cube"``: the bounding box centred, its longest side spanning the grid box); False: as read.
        align_up_axis: swap y/z of the y-up releases (``normal_resampled``, ``hdf5``) so z is up.
        download: try to download the release when it is missing.
        skip_missing: drop split-file entries whose file is missing (with a warning) instead
            of raising.
        estimate_normals: ``k``: the normals estimated from the points (:func:`gridify.ops.estimate_normals`,
            ``k`` neighbours; any source, ``"pcd"`` too) instead of the release's; ``None``: the release's.
        keep_in_memory: keep every sample in memory once read and normalized (later epochs skip the files).

    Items (dicts of tensors):
        ``pos`` ``[N, 3]``, ``x`` ``[N, 3 or 6]``, ``normal`` ``[N, 3]`` (when ``use_normals``),
        ``y`` (0-d int64 class id), ``index`` (0-d).

    Attributes:
        class_names, num_classes, source_format, data_dir, files (per sample).
    """

    group_attribute = "labels"

    @property
    def _file_normals(self) -> bool:
        """Whether the normals come from the files (``use_normals`` without ``estimate_normals``)."""
        return self.use_normals and self.estimate_normals is None

    def __init__(
        self,
        root: Optional[PathLike] = None,
        name: str = "40",
        split: str = "train",
        *,
        source: str = "off",
        num_points: Optional[int] = 1024,
        use_normals: bool = True,
        transform: Optional[Transform] = None,
        val_fraction: float = 0.1,
        seed: int = 0,
        cache: bool = True,
        cache_dir: Optional[PathLike] = None,
        mesh_samples: int = 10_000,
        normalize: Union[bool, str] = True,
        align_up_axis: bool = True,
        download: bool = False,
        skip_missing: bool = False,
        estimate_normals: Optional[int] = None,
        keep_in_memory: bool = False,
    ) -> None:
        name = str(name)
        if name not in ("10", "40"):
            raise ValueError(f"ModelNet: name must be '10' or '40', got {name!r}")
        check_split("ModelNet", split)
        check_choice("ModelNet", "source", source, [*SOURCES, "auto"])
        self._check_source(source, name, use_normals and estimate_normals is None)
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"ModelNet: val_fraction must be in [0, 1), got {val_fraction!r}")
        if int(mesh_samples) < 1:
            raise ValueError(f"ModelNet: mesh_samples must be positive, got {mesh_samples!r}")
        super().__init__(
            split=split,
            num_points=num_points,
            use_normals=use_normals,
            transform=transform,
            seed=seed,
            normalize=normalize,
            estimate_normals=estimate_normals,
            keep_in_memory=keep_in_memory,
        )
        self.name = name
        self.root = Path(root) if root is not None else default_root()
        self.source_format = source
        self.class_names = list(MODELNET40_CLASSES if name == "40" else MODELNET10_CLASSES)
        self.val_fraction = float(val_fraction)
        self.mesh_samples = int(mesh_samples)
        self.align_up_axis = bool(align_up_axis)
        self.skip_missing = bool(skip_missing)
        self._h5: Dict[str, Any] = {}

        self.data_dir = self._locate(download)
        self._check_source(self.source_format, name, self._file_normals)
        official = "test" if split == "test" else "train"
        entries, labels = self._list(official)
        if not entries:
            raise ValueError(
                f"ModelNet{name} ({source}): no samples found for the official {official!r} split under {self.data_dir}"
            )
        labels_arr = np.asarray(labels, dtype=np.int64)
        if split in ("train", "val"):
            keep, held = stratified_split(labels_arr, self.val_fraction, self.seed)
            chosen = keep if split == "train" else held
            if len(chosen) == 0:
                raise ValueError(
                    f"ModelNet{name}: split {split!r} is empty (val_fraction={val_fraction}, "
                    f"{len(entries)} official train samples)"
                )
        else:
            chosen = np.arange(len(entries))
        self.entries = [entries[i] for i in chosen]
        self.labels = labels_arr[chosen]
        self._init_cache(bool(cache) and source == "off", cache_dir)

    def _init_cache(self, cache: bool, cache_dir: Optional[PathLike]) -> None:
        """``cache`` and ``cache_dir``: the cache of sampled OFF meshes in
        ``<cache_dir or data_dir/.cache>/off_n<mesh_samples>_seed<seed>``, off (with a warning) when that folder
        is not writable."""
        self.cache = cache
        self.cache_dir: Optional[Path] = None
        if self.cache:
            base = Path(cache_dir) if cache_dir is not None else self.data_dir / ".cache"
            target = base / f"off_n{self.mesh_samples}_seed{self.seed}"
            if writable_dir(target):
                self.cache_dir = target
            else:
                warn_at_caller(
                    f"ModelNet: cache folder {target} is not writable; sampled meshes will not "
                    f"be cached (data.cache_dir / cache_dir=: a writable folder)"
                )
                self.cache = False

    # ----------------------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def files(self) -> List[str]:
        return [e if isinstance(e, str) else f"{e[0]}[{e[1]}]" for e in self.entries]

    def __len__(self) -> int:
        return len(self.entries)

    def display_name(self) -> str:
        return f"ModelNet{self.name}"

    def __repr__(self) -> str:
        return (
            f"ModelNet(name={self.name!r}, split={self.split!r}, source={self.source_format!r}, "
            f"samples={len(self)}, num_points={self.num_points}, data_dir='{self.data_dir}')"
        )

    @classmethod
    def archives(cls, name: str = "40", source: str = "off", **_: Any) -> List[str]:
        """The archive ``gridify download`` fetches for this release (none for ``pcd``)."""
        key = SOURCE_ARCHIVES.get(str(source), "")
        return [key.format(name=name)] if key else []

    # ----------------------------------------------------------------------------------
    @staticmethod
    def _check_source(source: str, name: str, use_normals: bool) -> None:
        if source == "pcd" and use_normals:
            raise ValueError("ModelNet: source='pcd' has no normals; set use_normals=False")
        if source == "hdf5" and name == "10":
            raise ValueError("ModelNet: the hdf5 release (modelnet40_ply_hdf5_2048) only exists for ModelNet40")

    def _candidates(self) -> List[Path]:
        r = self.root
        if self.source_format == "off":
            return [r / f"ModelNet{self.name}", r]
        if self.source_format == "pcd":
            return [r / f"ModelNet{self.name}" / "pcd", r / "pcd", r]
        if self.source_format == "normal_resampled":
            return [r / "modelnet40_normal_resampled", r]
        return [r / "modelnet40_ply_hdf5_2048", r]

    def _looks_right(self, d: Path) -> bool:
        if not d.is_dir():
            return False
        if self.source_format in ("off", "pcd"):
            ext = f"*.{self.source_format}"
            return any(
                next((d / c / s).glob(ext), None) is not None for c in self.class_names for s in ("train", "test")
            )
        if self.source_format == "normal_resampled":
            return (d / f"modelnet{self.name}_train.txt").is_file() or (d / f"modelnet{self.name}_test.txt").is_file()
        return any(d.glob("ply_data_*.h5"))

    def _find(self) -> Optional[Path]:
        """The release folder of ``source_format`` under the root; with ``auto``, of the first release
        found (``source_format`` is set to it)."""
        if self.source_format != "auto":
            return next((d for d in self._candidates() if self._looks_right(d)), None)
        for source in AUTO_ORDER:
            if source == "hdf5" and self.name == "10":
                continue
            self.source_format = source
            found = self._find()
            if found is not None:
                return found
        self.source_format = "auto"
        return None

    def _locate(self, download: bool) -> Path:
        found = self._find()
        if found is not None:
            return found
        keys = self.archives(self.name, self.source_format)
        if download and keys:
            download_archive(keys[0], self.root)
            self.source_format = "off" if self.source_format == "auto" else self.source_format
            found = self._find()
            if found is not None:
                return found
        raise self._not_found(keys[0] if keys else "")

    def _not_found(self, key: str) -> DatasetNotFoundError:
        if self.source_format == "auto":
            msg = (
                f"ModelNet{self.name} not found under {self.root}: expected one of the releases "
                f"{', '.join(s for s in AUTO_ORDER if s != 'hdf5' or self.name == '40')} "
                f"(e.g. {self.root / f'ModelNet{self.name}'} holding <class>/{{train,test}}/*.off, or "
                f"{self.root / f'ModelNet{self.name}' / 'pcd'} holding <class>/{{train,test}}/*.pcd)."
            )
            return self._with_hint(msg, key)
        expected = self._candidates()[0]
        how = {
            "off": f"<class>/{{train,test}}/*.off for the {self.num_classes} classes",
            "pcd": "<class>/{train,test}/*.pcd",
            "normal_resampled": f"modelnet{self.name}_{{train,test}}.txt, modelnet{self.name}_shape_names.txt "
            f"and <class>/<shape>.txt",
            "hdf5": "ply_data_train*.h5, ply_data_test*.h5 and shape_names.txt",
        }[self.source_format]
        msg = (
            f"ModelNet{self.name} ({self.source_format}) not found under {self.root}: expected {expected} "
            f"holding {how}."
        )
        return self._with_hint(msg, key)

    def _with_hint(self, msg: str, key: str) -> DatasetNotFoundError:
        if key:
            msg += (
                "\nPass download=True to fetch it, or:\n"
                + manual_instructions(key, self.root)
                + "\n(then unzip it there, or let download=True extract it)"
            )
        return DatasetNotFoundError(msg, archive=key or None, root=self.root)

    def _label_of(self, cls: str, where: str) -> int:
        try:
            return self.class_names.index(cls)
        except ValueError:
            raise ValueError(f"{where}: class {cls!r} is not a ModelNet{self.name} class") from None

    def _list(self, official: str) -> Tuple[List[Any], List[int]]:
        """``(entries, labels)`` of the official ``train``/``test`` split of this release."""
        if self.source_format in ("off", "pcd"):
            return self._list_folders(official)
        if self.source_format == "normal_resampled":
            return self._list_normal_resampled(official)
        return self._list_hdf5(official)

    def _list_folders(self, official: str) -> Tuple[List[Any], List[int]]:
        d = self.data_dir
        entries: List[Any] = []
        labels: List[int] = []
        ext = "*.off" if self.source_format == "off" else "*.pcd"
        present = [c for c in self.class_names if (d / c).is_dir()]
        unknown = sorted(
            p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in self.class_names
        )
        if unknown and self.source_format == "off":
            raise ValueError(
                f"{d}: folders {unknown[:5]} are not ModelNet{self.name} classes (wrong name= or wrong folder?)"
            )
        if len(present) < len(self.class_names):
            missing = [c for c in self.class_names if c not in present]
            warn_at_caller(
                f"ModelNet{self.name}: only {len(present)} of {len(self.class_names)} class "
                f"folders found under {d} (missing: {missing[:5]}...)"
            )
        for c in present:
            for f in sorted((d / c / official).glob(ext), key=lambda p: p.name):
                entries.append(str(f))
                labels.append(self.class_names.index(c))
        return entries, labels

    def _list_normal_resampled(self, official: str) -> Tuple[List[Any], List[int]]:
        d = self.data_dir
        entries: List[Any] = []
        labels: List[int] = []
        names_file = d / f"modelnet{self.name}_shape_names.txt"
        if names_file.is_file():
            listed = [ln.strip() for ln in read_text_file(names_file).splitlines() if ln.strip()]
            if listed != self.class_names:
                raise ValueError(f"{names_file}: class list differs from the official ModelNet{self.name} list")
        split_file = d / f"modelnet{self.name}_{official}.txt"
        if not split_file.is_file():
            raise DatasetNotFoundError(
                f"{split_file}: split file missing (the release ships "
                f"modelnet{self.name}_train.txt and modelnet{self.name}_test.txt)"
            )
        shapes = [ln.strip() for ln in read_text_file(split_file).splitlines() if ln.strip()]
        missing = []
        for s in shapes:
            cls = _shape_class(s)
            f = d / cls / f"{s}.txt"
            if not f.is_file():
                missing.append(str(f))
                continue
            entries.append(str(f))
            labels.append(self._label_of(cls, str(split_file)))
        if missing:
            msg = f"{split_file}: {len(missing)} of {len(shapes)} listed shapes are missing (first: {missing[0]})"
            if not self.skip_missing:
                raise ValueError(msg + "; the release is incomplete (set skip_missing=True to use what is there)")
            warn_at_caller(msg + "; skipped")
        return entries, labels

    def _list_hdf5(self, official: str) -> Tuple[List[Any], List[int]]:
        import h5py

        d = self.data_dir
        entries: List[Any] = []
        labels: List[int] = []

        def order(p: Path) -> int:
            m = re.search(r"(\d+)\.h5$", p.name)
            return int(m.group(1)) if m else 0

        files = sorted(d.glob(f"ply_data_{official}*.h5"), key=order)
        names_file = d / "shape_names.txt"
        if names_file.is_file():
            listed = [ln.strip() for ln in read_text_file(names_file).splitlines() if ln.strip()]
            if listed != self.class_names:
                raise ValueError(f"{names_file}: class list differs from the official ModelNet40 list")
        for f in files:
            try:
                with h5py.File(f, "r") as h:
                    if "data" not in h or "label" not in h:
                        raise ValueError(f"{f}: HDF5 file lacks a 'data' or 'label' dataset (has {list(h)})")
                    n = h5_dataset(f, h, "data", "ModelNet").shape[0]
                    label = h5_dataset(f, h, "label", "ModelNet")
                    if label.size != n:
                        raise ValueError(f"{f}: {label.size} labels for {n} shapes")
                    lab = np.asarray(label).reshape(-1).astype(np.int64)
                    if self._file_normals and "normal" not in h:
                        raise ValueError(
                            f"{f}: use_normals=True but the file has no 'normal' dataset; set use_normals=False"
                        )
            except OSError as exc:
                raise ValueError(f"{f}: cannot read HDF5 file ({exc})") from None
            if len(lab) != n:
                raise ValueError(f"{f}: {len(lab)} labels for {n} shapes")
            if len(lab) and (lab.min() < 0 or lab.max() >= self.num_classes):
                raise ValueError(f"{f}: labels outside 0..{self.num_classes - 1}")
            entries.extend((str(f), i) for i in range(n))
            labels.extend(lab.tolist())
        return entries, labels

    # ----------------------------------------------------------------------------------
    def _sample_seed(self, rel: str) -> List[int]:
        return [self.seed, zlib.crc32(rel.encode("utf-8"))]

    def _load_off(self, path: Path, label: int) -> Tuple[np.ndarray, np.ndarray]:
        rel = f"{self.class_names[label]}/{path.parent.name}/{path.stem}"
        cache_file = None if self.cache_dir is None else self.cache_dir / f"{rel}.npz"
        if cache_file is not None and cache_file.is_file():
            data = load_npz(cache_file)
            if (
                data is not None
                and data.get("pos") is not None
                and data["pos"].shape == (self.mesh_samples, 3)
                and int(data.get("src_size", -1)) == path.stat().st_size
            ):
                return data["pos"], data["normal"]
        vertices, faces = read_mesh(path)
        if len(faces) == 0:
            raise ValueError(f"{path}: mesh has no faces")
        pts, nrm = sample_mesh((vertices, faces), self.mesh_samples, seed=np.random.default_rng(self._sample_seed(rel)))
        if cache_file is not None:
            try:
                save_npz_atomic(cache_file, pos=pts, normal=nrm, src_size=np.int64(path.stat().st_size))
            except OSError as exc:
                warn_at_caller(f"ModelNet: could not write cache file {cache_file} ({exc})")
        return pts, nrm

    def _h5_file(self, path: str) -> Any:
        if getattr(self, "_h5_pid", None) != os.getpid():  # h5py handles must not cross a fork
            self._h5, self._h5_pid = {}, os.getpid()
        h = self._h5.get(path)
        if h is None:
            import h5py

            h = h5py.File(path, "r")
            self._h5[path] = h
        return h

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_h5"] = {}  # h5py handles are per process
        return state

    def raw(self, index: int) -> Dict[str, Any]:
        entry = self.entries[index]
        label = int(self.labels[index])
        normal: Optional[np.ndarray] = None
        if self.source_format == "off":
            pos, normal = self._load_off(Path(entry), label)
        elif self.source_format == "pcd":
            pos = read_points(entry).points
        elif self.source_format == "normal_resampled":
            cloud = read_points(entry, columns=("x", "y", "z", "nx", "ny", "nz"))
            pos = cloud.points
            if self._file_normals:
                normal = repair_normals(cloud.points, cloud.normals)
        else:
            path, row = entry
            h = self._h5_file(path)
            pos = np.asarray(h["data"][row], dtype=np.float32)
            if self._file_normals:
                normal = np.asarray(h["normal"][row], dtype=np.float32)
        if self.align_up_axis and self.source_format in ("normal_resampled", "hdf5"):
            pos = pos[:, [0, 2, 1]]
            normal = None if normal is None else normal[:, [0, 2, 1]]
        sample: Dict[str, Any] = {"pos": np.ascontiguousarray(pos, dtype=np.float32), "y": np.int64(label)}
        if normal is not None and self._file_normals:
            sample["normal"] = np.ascontiguousarray(normal, dtype=np.float32)
        return sample

    def warm_cache(self, progress: bool = True) -> None:
        """Sample and cache every OFF mesh of this split now (otherwise done on first access)."""
        if self.source_format != "off":
            return
        it = range(len(self))
        if progress:
            try:
                from tqdm.auto import tqdm

                it = tqdm(it, desc=f"sampling ModelNet{self.name} {self.split} meshes")
            except ImportError:
                pass
        for i in it:
            self._load_off(Path(self.entries[i]), int(self.labels[i]))
