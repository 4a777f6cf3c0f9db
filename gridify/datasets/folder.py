"""Your own labelled folders as a dataset: :class:`PointFolder` (``data.name: folder`` in a config).

Classification (``task="classification"``): one folder per class, the class names from
``root/classes.txt`` (one per line, in label order) or else the folder names, sorted::

    root/chair/train/a.ply        root/<class>/<split>/<file>
    root/chair/test/b.ply         (or root/<split>/<class>/<file>, or root/<class>/<file>)

Segmentation (``task="segmentation"``): one file per sample with one label per point, the part
names from ``root/classes.txt`` or else ``part0 .. part<K-1>`` (``K = num_classes``, or one
more than the largest label of all the files)::

    root/train/scan1.ply          root/<split>/<sample>.<ext> (or root/<sample>.<ext>)
    root/train/scan1.labels       optional: one integer per point (or scan1.npy, an [N] array)

The labels of a sample come from its sibling ``<sample>.labels`` / ``<sample>.npy`` file, else
from the file itself: a PLY/PCD property (``label``, ``class``, ``scalar_label``, ...) or the
label column of a text/``.npy`` table (the 4th of 4 columns, the 7th of 7; other layouts name
their columns with ``columns=[x, y, z, _, label]``).

Splits: the lists ``root/{train,val,test}.txt`` (relative paths, e.g. ``chair/a.ply``) when
present, else the split folders, else one pool of files. A split that is not given is carved
(seeded; stratified by class for classification, :func:`~._common.stratified_split`: ``round(f *
n_c)`` files of class ``c`` held out): ``val`` from ``train`` with ``val_fraction``, ``test``
from the pool with ``test_fraction`` (only when asked). ``trainval`` is ``train`` + ``val``.

Files: every extension :func:`gridify.io.read_points` reads, asked at construction
(:func:`gridify.io.supported_extensions`, so formats registered later count); meshes are
surface-sampled into ``mesh_samples`` points (seeded per file). Every file must hold the same
fields as the first file: normals, colours and (classification) a label column or property;
segmentation labels may come from sibling files or the files themselves. Problems raise
:class:`~._common.DatasetError` naming the file or folder: an empty class folder, no files at
all, a listed file that is missing, a file in two split lists (or twice in one), labels whose
count differs from the points, label ids outside the class list (or, without ``classes.txt``,
ids beyond ``max(MAX_PARTS, labelled points)``), mixed columns, an unreadable file. Rows that
read_points drops from a file (NaN/Inf coordinates, with a warning) lose their labels in the
sibling label file too (:func:`~._common.align_labels`). Text files (lists, ``classes.txt``,
labels) are decoded as every text file is (:func:`gridify.io.source.decode_text`).

Shapes:
    pos ``[N, 3]``, normal ``[N, 3]``, ``y`` ``[]`` (class id) or ``[N]`` (part ids), ``category``
    ``[]`` (always 0: one category, segmentation only).
"""

from __future__ import annotations

import os
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Set, Tuple, Union

import numpy as np

from .._checks import check_alloc, check_choice, check_int, check_probability
from ..io import PointCloud, read_labels, read_points, reader_takes, supported_extensions
from ..io.source import read_text_file
from ..registry import DATASETS
from ._common import DatasetError, PathLike, PointCloudDataset, Transform, align_labels, check_split, stratified_split
from .download import DatasetNotFoundError

__all__ = ["PointFolder", "FOLDER_SPLITS", "CLASSES_FILE", "LABEL_SUFFIXES", "read_name_list"]

#: the split names of folders and list files
FOLDER_SPLITS = ("train", "val", "test")
#: the file naming the classes (or parts), one per line, in label order
CLASSES_FILE = "classes.txt"
#: sibling label files of a segmentation sample, looked for in this order
LABEL_SUFFIXES = (".labels", ".npy")
#: without classes.txt, label ids up to this many parts are accepted whatever the number of labelled points
MAX_PARTS = 1 << 16
_RESERVED = {CLASSES_FILE, *(f"{s}.txt" for s in FOLDER_SPLITS)}
#: (file, class name or "", split or "")
Entry = Tuple[Path, str, str]


def _fail(msg: str) -> NoReturn:
    raise DatasetError(msg)


def read_name_list(path: Path) -> List[str]:
    """The entries of a list file: its non-blank lines, without ``#`` comments (decoded as every text
    file is, :func:`gridify.io.source.decode_text`: a byte-order mark is not part of the first name)."""
    try:
        text = read_text_file(Path(path))
    except (OSError, ValueError) as exc:
        _fail(str(exc) if str(path) in str(exc) else f"{path}: cannot read the list ({exc})")
    return [s for s in (ln.split("#", 1)[0].strip() for ln in text.splitlines()) if s]


def _subdirs(folder: Path) -> List[Path]:
    return [d for d in sorted(folder.iterdir()) if d.is_dir() and not d.name.startswith((".", "__"))]


def _samples_in(folder: Path, exts: Set[str]) -> List[Path]:
    """The sample files directly in ``folder``; ``x.npy`` beside ``x.ply`` holds x's labels, not a sample."""
    files = [
        f
        for f in sorted(folder.iterdir())
        if f.is_file() and not f.name.startswith(".") and f.suffix.lower() in exts and f.name not in _RESERVED
    ]
    others = {f.stem for f in files if f.suffix.lower() != ".npy"}
    return [f for f in files if f.suffix.lower() != ".npy" or f.stem not in others]


def _listed(root: Path, exts: Set[str], by_class: bool) -> List[Entry]:
    """The entries of the split lists ``root/<split>.txt`` (paths relative to ``root``)."""
    entries: List[Entry] = []
    seen: Dict[Path, Tuple[Path, str]] = {}  # resolved file -> (its list, the line naming it)
    for split in FOLDER_SPLITS:
        listing = root / f"{split}.txt"
        if not listing.is_file():
            continue
        for line in read_name_list(listing):
            _check_listed_once(root, listing, line, seen)
            path, rel = root / line, Path(line)
            if not path.is_file():
                _fail(f"{listing}: listed file {line!r} not found ({path})")
            if path.suffix.lower() not in exts:
                _fail(f"{listing}: {line!r} is not a point-cloud file (readable: {' '.join(sorted(exts))})")
            if by_class and len(rel.parts) < 2:
                _fail(f"{listing}: {line!r} must start with its class folder (e.g. chair/{line})")
            entries.append((path, rel.parts[0] if by_class else "", split))
    return entries


def _check_listed_once(root: Path, listing: Path, line: str, seen: Dict[Path, Tuple[Path, str]]) -> None:
    """A file may be listed once in all the split lists together: a file in ``train.txt`` and
    ``test.txt`` would be trained on and tested on."""
    key = Path(os.path.normpath(root / line))
    try:
        key = key.resolve()
    except (OSError, RuntimeError):
        pass
    first = seen.get(key)
    if first is None:
        seen[key] = (listing, line)
        return
    where = (
        f"twice in {listing}" if first[0] == listing else f"in both {first[0]} ({first[1]!r}) and {listing} ({line!r})"
    )
    _fail(
        f"{root / line}: listed {where}; the split lists must not overlap (a file in two splits is "
        f"trained and evaluated on)"
    )


def _scanned_classes(root: Path, exts: Set[str]) -> Tuple[List[Entry], List[str]]:
    """``(entries, class folders)`` of ``root/<class>/[<split>/]<file>`` or ``root/<split>/<class>/<file>``."""
    dirs = _subdirs(root)
    if dirs and all(d.name in FOLDER_SPLITS for d in dirs):
        pairs = [(s, c) for s in dirs for c in _subdirs(s)]
        return [(f, c.name, s.name) for s, c in pairs for f in _samples_in(c, exts)], sorted({c.name for _, c in pairs})
    entries: List[Entry] = []
    for c in dirs:
        entries += [(f, c.name, "") for f in _samples_in(c, exts)]
        entries += [(f, c.name, s.name) for s in _subdirs(c) if s.name in FOLDER_SPLITS for f in _samples_in(s, exts)]
    return entries, [d.name for d in dirs]


def _scanned_samples(root: Path, exts: Set[str]) -> List[Entry]:
    """The entries of ``root/<split>/<sample>`` and ``root/<sample>``."""
    splits = [root / s for s in FOLDER_SPLITS if (root / s).is_dir()]
    return [(f, "", s.name) for s in splits for f in _samples_in(s, exts)] + [
        (f, "", "") for f in _samples_in(root, exts)
    ]


def _names_file(root: Path) -> Optional[List[str]]:
    """The names of ``root/classes.txt``, or None without one."""
    path = root / CLASSES_FILE
    if not path.is_file():
        return None
    names = read_name_list(path)
    twice = [n for n, k in Counter(names).items() if k > 1]
    if not names or twice:
        _fail(f"{path}: " + (f"{twice[0]!r} is listed twice" if twice else "lists no names"))
    return names


def _class_index(root: Path, exts: Set[str]) -> Tuple[List[str], List[Entry]]:
    """``(class names, entries)`` of a classification folder, with its layout checked."""
    entries = _listed(root, exts, by_class=True)
    folders = [d.name for d in _subdirs(root)]
    if not entries:
        entries, folders = _scanned_classes(root, exts)
    names = _names_file(root) or sorted(set(folders) | {c for _, c, _ in entries})
    if not entries:
        _fail(
            f"{root}: no point-cloud files found (expected <class>/<split>/<file> with a readable extension: "
            f"{' '.join(sorted(exts))})"
        )
    unknown = next((e for e in entries if e[1] not in names), None)
    if unknown is not None:
        _fail(f"{unknown[0]}: class {unknown[1]!r} is not listed in {root / CLASSES_FILE}")
    counts = Counter(c for _, c, _ in entries)
    empty = next((c for c in names if not counts[c]), None)
    if empty is not None:
        _fail(f"{root / empty}: empty class folder: no point-cloud files of class {empty!r}")
    return names, entries


def _chosen(
    entries: Sequence[Entry],
    labels: np.ndarray,
    split: str,
    val_fraction: float,
    test_fraction: Optional[float],
    seed: int,
    root: Path,
) -> np.ndarray:
    """The indices of ``entries`` in ``split``, carving ``val`` (and, when asked, ``test``) as the module says."""
    of = np.asarray([e[2] for e in entries])
    given = set(of.tolist()) - {""}
    loose = next((e[0] for e in entries if e[2] == ""), None)
    if given and loose is not None:
        _fail(f"{loose}: outside the {'/'.join(sorted(given))} folders of the other files; use one layout")
    pool = np.flatnonzero(of == "train") if given else np.arange(len(entries))
    if test_fraction:
        if "test" in given:
            _fail(f"{root}: test_fraction is set but the folder has its own test split")
        keep, held = stratified_split(labels[pool], test_fraction, seed + 1)
        test, pool = pool[held], pool[keep]
    else:
        test = np.flatnonzero(of == "test")
    if "val" in given:
        train, val = pool, np.flatnonzero(of == "val")
    else:
        keep, held = stratified_split(labels[pool], val_fraction, seed)
        train, val = pool[keep], pool[held]
    chosen = {"train": train, "val": val, "test": test, "trainval": np.sort(np.concatenate([train, val]))}[split]
    if len(chosen) == 0:
        carved = {
            "val": ("val_fraction", val_fraction, None if "val" in given else pool),
            "test": ("test_fraction", test_fraction, None if "test" in given else pool),
        }.get(split)
        _fail(f"{root}: no {split} files ({_empty_split_hint(split, carved, labels)})")
    return chosen


def _empty_split_hint(
    split: str, carved: Optional[Tuple[str, Optional[float], Optional[np.ndarray]]], labels: np.ndarray
) -> str:
    """Why ``split`` came out empty and what to do: no such split, or a fraction that carves nothing."""
    if carved is None:
        return "add train folders or a train.txt list"
    name, fraction, pool = carved
    if pool is None:
        return f"the {split} folders or {split}.txt list hold no files"
    if fraction:
        sizes = Counter(labels[pool].tolist())
        if sizes and max(sizes.values()) < 2:
            return (
                f"{name}={fraction} holds out files of a class only when it has at least 2 (one stays in "
                f"train), and each of the {len(sizes)} class(es) has {max(sizes.values())} file(s); "
                f"add files, or add {split} folders or a {split}.txt list"
            )
        return (
            f"{name}={fraction} of {len(pool)} files rounds to none; raise it, or add {split} folders or a "
            f"{split}.txt list"
        )
    if split == "test":
        return "add test folders or a test.txt list, or set test_fraction to carve one"
    return "add val folders or a val.txt list, or set val_fraction > 0"


@DATASETS.register("folder")
class PointFolder(PointCloudDataset):
    """Point clouds (or meshes) in your own folders, labelled by folder (classification) or per point
    (segmentation); see the module docstring for the layouts.

    Args:
        root: the folder.
        split: ``"train"``, ``"val"``, ``"test"`` or ``"trainval"``.
        task: ``"classification"`` or ``"segmentation"``.
        num_points: points per sample (random subset at train, deterministic otherwise, repeats when
            a file has fewer); ``None`` keeps every point.
        use_normals: ``x`` = xyz + normals (every file must have normals) or xyz.
        columns: names of the columns of text / ``.npy`` files (``x y z nx ny nz r g b label _``).
        num_classes: segmentation without ``classes.txt``: the number of parts (else found by reading
            every file once).
        val_fraction: fraction of every class of ``train`` held out as ``val`` when no val split is given.
        test_fraction: fraction of every class held out as ``test`` when no test split is given.
        mesh_samples: points sampled from a mesh file.
        transform: applied to the sample dict after normalization and subsampling.
        seed: seed of the carved splits, the subsampling and the mesh sampling.
        normalize: centre each cloud and scale it into the unit sphere (True or ``"sphere"``) or
            the cube ``[-1, 1]^3`` (``"cube"``: the bounding box centred, its longest side spanning the grid box); False: as read.
        estimate_normals: ``k``: the normals estimated from the points (:func:`gridify.ops.estimate_normals`,
            ``k`` neighbours), replacing any the files hold; ``None``: the files' own.
        keep_in_memory: keep every sample in memory once read and normalized (later epochs skip the files;
            about ``N x 4 x (3 + 3)`` bytes a sample with normals).

    Attributes:
        class_names (classes, or parts), num_classes, files, labels (class per file; 0 for segmentation),
        source_format (``"folder"``); segmentation: part_names, num_parts, category_names,
        category_to_parts (one category holding every part).
    """

    source_format = "folder"
    group_attribute = "labels"

    def __init__(
        self,
        root: PathLike,
        split: str = "train",
        *,
        task: str = "classification",
        num_points: Optional[int] = 1024,
        use_normals: bool = False,
        columns: Optional[Sequence[str]] = None,
        num_classes: Optional[int] = None,
        val_fraction: float = 0.1,
        test_fraction: Optional[float] = None,
        mesh_samples: int = 10_000,
        transform: Optional[Transform] = None,
        seed: int = 0,
        normalize: Union[bool, str] = True,
        estimate_normals: Optional[int] = None,
        keep_in_memory: bool = False,
    ) -> None:
        where = "PointFolder"
        check_split(where, split)
        self.task = check_choice(where, "task", task, ("classification", "segmentation"))
        check_probability(where, "val_fraction", val_fraction)
        if test_fraction is not None:
            check_probability(where, "test_fraction", test_fraction)
        self.mesh_samples = int(check_int(where, "mesh_samples", mesh_samples))
        check_int(where, "num_classes", num_classes, allow_none=True)
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
        self.root = Path(root).expanduser()
        if not self.root.is_dir():
            raise DatasetNotFoundError(f"PointFolder: data folder {self.root} not found", root=self.root)
        self.columns = None if columns is None else tuple(str(c) for c in columns)
        exts = set(supported_extensions())
        if self.task == "classification":
            names, entries = _class_index(self.root, exts)
            labels = np.asarray([names.index(e[1]) for e in entries], dtype=np.int64)
        else:
            entries = _listed(self.root, exts, by_class=False) or _scanned_samples(self.root, exts)
            if not entries:
                _fail(
                    f"{self.root}: no point-cloud files found (expected <split>/<sample> with a readable "
                    f"extension: {' '.join(sorted(exts))})"
                )
            labels = np.zeros(len(entries), dtype=np.int64)
        chosen = _chosen(entries, labels, split, float(val_fraction), test_fraction, self.seed, self.root)
        self.files: List[Path] = [entries[i][0] for i in chosen]
        self.labels = labels[chosen]
        self._reference = self._fields_of(entries[0][0])
        self.class_names: List[str] = (
            names if self.task == "classification" else self._part_names(num_classes, [e[0] for e in entries])
        )

    # ----------------------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def part_names(self) -> List[str]:
        return self.class_names

    @property
    def num_parts(self) -> int:
        return len(self.class_names)

    @property
    def category_names(self) -> List[str]:
        return [self.root.name or "all"]

    @property
    def category_to_parts(self) -> List[List[int]]:
        return [list(range(self.num_parts))]

    def __len__(self) -> int:
        return len(self.files)

    def __repr__(self) -> str:
        return (
            f"PointFolder(root='{self.root}', split={self.split!r}, task={self.task!r}, "
            f"classes={self.num_classes}, samples={len(self)}, num_points={self.num_points})"
        )

    # ----------------------------------------------------------------------------------
    def _read(self, path: Path) -> PointCloud:
        """The cloud of one file; every reading problem is a :class:`DatasetError` naming it."""
        rel = path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else str(path)
        seed = int(np.random.SeedSequence([self.seed, zlib.crc32(rel.encode())]).generate_state(1)[0])
        try:
            # data.columns names the columns of the text / npy files; the other formats name their own
            columns = self.columns if reader_takes(path, "columns") else None
            return read_points(path, num_samples=self.mesh_samples, seed=seed, columns=columns)
        except (ValueError, OSError) as exc:
            _fail(str(exc) if str(path) in str(exc) else f"{path}: {exc}")

    def _fields(self, cloud: PointCloud) -> Tuple[str, ...]:
        """The fields a file holds besides xyz (a segmentation file's labels may live beside it instead)."""
        names = ("normals", "colors", "labels") if self.task == "classification" else ("normals", "colors")
        return tuple(n for n in names if getattr(cloud, n) is not None)

    def _fields_of(self, path: Path) -> Tuple[Path, Tuple[str, ...]]:
        return path, self._fields(self._read(path))

    def _check_fields(self, path: Path, cloud: PointCloud) -> None:
        first, fields = self._reference
        mine = self._fields(cloud)
        if mine != fields:
            show = lambda f: "xyz + " + ", ".join(f) if f else "xyz only"  # noqa: E731
            _fail(
                f"{path}: holds {show(mine)} but {first} (the first file) holds {show(fields)}; every file of "
                f"a folder dataset must have the same columns"
            )

    def _point_labels(self, path: Path, cloud: PointCloud) -> Tuple[np.ndarray, Path]:
        """``(labels [N], the file they come from)``: a sibling label file, else the file's own labels."""
        sibling = next((s for s in (path.with_suffix(x) for x in LABEL_SUFFIXES) if s != path and s.is_file()), None)
        if sibling is not None:
            try:
                labels = read_labels(sibling)
            except (ValueError, OSError) as exc:
                _fail(str(exc))
        elif cloud.labels is not None:
            return cloud.labels, path
        else:
            why = cloud.ignored.get("labels")
            _fail(
                f"{path}: no per-point labels: no {path.stem}.labels or {path.stem}.npy beside it and "
                + (f"the file's {why}" if why else "no label column or property in it")
                + " (name text/npy columns with columns: [x, y, z, _, label])"
            )
        return align_labels(labels, sibling, cloud, path), sibling

    def _part_names(self, num_classes: Optional[int], files: Sequence[Path]) -> List[str]:
        """``classes.txt``, else ``part0 .. part<K-1>`` with ``K = num_classes`` or the largest label + 1."""
        names = _names_file(self.root)
        if names is None:
            count = num_classes or self._largest_label(files) + 1
            check_alloc("PointFolder", f"num_classes={count} (a list of part names)", 64 * count)
            names = [f"part{i}" for i in range(count)]
        return names

    def _largest_label(self, files: Sequence[Path]) -> int:
        """The largest label id of all the files; the parts are numbered up to it, so it may not exceed
        ``max(MAX_PARTS, labelled points)`` (ids far beyond the labels present are corrupt data)."""
        top, total, where = -1, 0, None
        for f in files:
            labels, source = self._point_labels(f, self._read(f))
            total += len(labels)
            if len(labels) and int(labels.max()) > top:
                top, where = int(labels.max()), source
        if top >= max(MAX_PARTS, total):
            _fail(
                f"{where}: label id {top} would number {top + 1} parts (part0 .. part{top}) for the {total} "
                f"labelled points of {self.root}; ids must be 0 .. K-1: write {self.root / CLASSES_FILE} "
                f"or set the count (data.num_classes / num_classes=)"
            )
        return top

    def raw(self, index: int) -> Dict[str, Any]:
        path = self.files[index]
        cloud = self._read(path)
        self._check_fields(path, cloud)
        sample: Dict[str, Any] = {"pos": cloud.points}
        if cloud.normals is not None:
            sample["normal"] = cloud.normals
        if self.task == "classification":
            sample["y"] = np.int64(self.labels[index])
            return sample
        labels, source = self._point_labels(path, cloud)
        bad = labels[(labels < 0) | (labels >= self.num_parts)]
        if bad.size:
            _fail(
                f"{source}: unknown label id {int(bad[0])}: the {self.num_parts} parts of {self.root} are "
                f"0..{self.num_parts - 1} ({CLASSES_FILE if (self.root / CLASSES_FILE).is_file() else 'numbered'})"
            )
        sample["y"] = labels
        sample["category"] = np.int64(0)
        return sample
