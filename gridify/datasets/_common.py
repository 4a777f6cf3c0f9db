"""Pieces shared by the datasets: data root, split carving, subsets, item assembly, caching, collation.

* :func:`default_root`: ``$GRIDIFY_DATA`` (or the older ``$GRIDIFY_DATA_ROOT``), else the
  repository's ``datasets/``, else ``./datasets``.
* :func:`stratified_split`: ``round(f * n_c)`` samples of every class ``c`` held out (seeded).
* :func:`stratified_subset`: ``m`` samples drawn class by class in proportion to the class sizes
  (seeded): sample ``i`` of class ``c`` (in a seeded order) has key ``i / n_c`` and the ``m``
  smallest keys are kept, so every class is present once ``m >= C`` and class ``c`` gets about
  ``m * n_c / n`` samples.
* :func:`fit_box`: ``pos <- pos * min(1, limit / max|pos|)``, the cloud shrunk uniformly into
  ``[-limit, limit]^3`` (gridification refuses points outside its box).
* :class:`PointCloudDataset`: ``raw -> Normalize -> FixedPoints -> transform -> fit_box -> tensors``;
  ``num_points`` passes :func:`check_num_points` (``SAMPLE_BYTES_PER_POINT x num_points`` against
  the allocation limit) at construction.
* :func:`align_labels`: a label file's labels for the points read_points kept (dropped rows lose
  their labels; another count names the dropped rows). :func:`h5_dataset`: an HDF5 dataset whose
  declared bytes are at most ``H5_MAX_RATIO`` x the bytes the file stores for it, before reading.

Shapes:
    a sample: pos ``[N, 3]``, normal ``[N, 3]``, y ``[]`` or ``[N]``; a collated batch: pos
    ``[sum N_i, 3]``, batch ``[sum N_i]``, ptr ``[B + 1]``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from .._checks import check_alloc, check_bool, check_choice, check_int, warn_at_caller
from .._files import atomic_write
from ..ops.normals import estimate_normals as ops_estimate_normals
from ..transforms import NORMALIZATIONS, FixedPoints, Normalize, normalization_name

PathLike = Union[str, "os.PathLike[str]"]
Transform = Callable[[Dict[str, Any]], Dict[str, Any]]

SPLITS = ("train", "val", "test", "trainval")
#: environment variables naming the default data root, in order of precedence
ROOT_VARIABLES = ("GRIDIFY_DATA", "GRIDIFY_DATA_ROOT")


class DatasetError(ValueError):
    """A dataset's files are unusable (unreadable file, bad labels, bad folder layout); the message
    names the file or folder and the problem."""


def default_root() -> Path:
    """The default data root: ``$GRIDIFY_DATA`` (or ``$GRIDIFY_DATA_ROOT``), else the repository's
    ``datasets/`` folder (when gridify runs from a source checkout), else ``./datasets``."""
    env = next((os.environ[v] for v in ROOT_VARIABLES if os.environ.get(v)), None)
    if env:
        return Path(env).expanduser()
    repo = Path(__file__).resolve().parents[2] / "datasets"
    if repo.is_dir():
        return repo
    return Path.cwd() / "datasets"


def check_split(where: str, split: str, allowed: Sequence[str] = SPLITS) -> str:
    return check_choice(where, "split", split, list(allowed))


#: bytes one point of a sample takes on its way through the pipeline (the resampling indices, pos
#: and normals in float64 and float32, labels, the tensors of the item): what check_num_points bounds
SAMPLE_BYTES_PER_POINT = 128


def check_num_points(where: str, num_points: Optional[int], copies: int = 1) -> Optional[int]:
    """``num_points`` as a positive int (or None), refused before anything is allocated when ``copies``
    samples (the frames of a sequence) of that many points would exceed the allocation limit."""
    n = check_int(where, "num_points", num_points, allow_none=True)
    if n is not None:
        check_alloc(
            where,
            f"num_points={n} ({copies} x {n} points of {SAMPLE_BYTES_PER_POINT} bytes on their way "
            f"through the pipeline)",
            SAMPLE_BYTES_PER_POINT * n * copies,
        )
    return n


def stratified_split(labels: Sequence[int], fraction: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Split indices into ``(keep, held_out)`` with ``round(fraction * n_c)`` held out per class.

    Deterministic given ``seed``; every class with at least 2 members keeps at least one
    member and (for ``fraction > 0``) holds out at least one. Both index arrays are sorted.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {fraction!r}")
    labels = np.asarray(labels, dtype=np.int64)
    rng = np.random.default_rng(int(seed))
    held: List[np.ndarray] = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        k = int(round(fraction * len(members)))
        if fraction > 0 and len(members) >= 2:
            k = min(max(k, 1), len(members) - 1)
        else:
            k = min(k, max(len(members) - 1, 0))
        if k:
            held.append(rng.permutation(members)[:k])
    held_idx = np.sort(np.concatenate(held)) if held else np.zeros(0, np.int64)
    keep = np.setdiff1d(np.arange(len(labels)), held_idx)
    return keep, held_idx


def stratified_subset(labels: Sequence[int], size: int, seed: int) -> np.ndarray:
    """The sorted indices of ``size`` samples drawn in proportion to the classes (see the module docstring).

    Deterministic given ``seed``; every class is represented once ``size`` reaches the number of
    classes; ``size >= len(labels)`` keeps everything.
    """
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    if size >= len(labels):
        return np.arange(len(labels))
    rng = np.random.default_rng(int(seed))
    keys = np.empty(len(labels), dtype=np.float64)
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        keys[members] = np.arange(len(members)) / len(members)
    tie = rng.random(len(labels))  # classes at the same key are taken in a seeded order
    return np.sort(np.lexsort((tie, keys))[: max(0, int(size))])


def fit_box(sample: Dict[str, Any], limit: float = 1.0) -> Dict[str, Any]:
    """Shrink the cloud uniformly into ``[-limit, limit]^3`` when it sticks out (else unchanged).

    Gridification rejects points outside its box and the gridified models do not expose its
    ``outside``/``bounds`` options, so scaled-up or jittered clouds are pulled back in. A uniform
    scale leaves normals unchanged. ``pos`` may be a numpy array or a tensor.
    """
    pos = sample["pos"]
    extent = float(pos.abs().max()) if isinstance(pos, Tensor) else float(np.abs(pos).max())
    if extent <= limit:
        return sample
    out = dict(sample)
    out["pos"] = pos * (limit / extent)
    return out


#: an HDF5 dataset may hold at most this many times the bytes the file stores for it (gzip's bound
#: is about 1032x); a larger ratio is a corrupt or forged header (a shape with no data behind it)
H5_MAX_RATIO = 1100


def h5_dataset(path: Path, h: Any, name: str, where: str) -> Any:
    """The dataset ``name`` of the open HDF5 file ``h``, its declared size checked before it is read.

    Refused (ValueError naming ``path`` and ``name``): not a dataset, or a shape whose bytes exceed
    ``H5_MAX_RATIO`` x the bytes the file stores for it (+ 4 KiB), or the allocation limit.
    """
    ds = h.get(name)
    if ds is None or not hasattr(ds, "id") or not hasattr(ds.id, "get_storage_size") or ds.shape is None:
        raise ValueError(f"{path}: HDF5 entry {name!r} is not a dataset of numbers")
    declared = int(np.prod(ds.shape, dtype=np.float64)) * int(ds.dtype.itemsize)
    stored = int(ds.id.get_storage_size())
    if declared > H5_MAX_RATIO * stored + 4096:
        raise ValueError(
            f"{path}: HDF5 dataset {name!r} declares shape {tuple(ds.shape)} {ds.dtype} ({declared} "
            f"bytes) but the file stores {stored} bytes for it (at most {H5_MAX_RATIO}x that "
            f"decompressed); the file is corrupt or truncated"
        )
    check_alloc(where, f"{path}: HDF5 dataset {name!r} of shape {tuple(ds.shape)}", declared)
    return ds


def align_labels(labels: np.ndarray, source: Path, cloud: Any, path: Path) -> np.ndarray:
    """The labels of ``source`` (one per row of the file ``path``) for the points of ``cloud`` (what
    read_points returned for ``path``): the rows read_points dropped (NaN/Inf coordinates,
    ``cloud.dropped``) lose their labels too; any other count is a :class:`DatasetError` that says
    which rows were dropped.

    Shapes:
        labels ``[R]`` (R rows of the file) -> ``[N]`` (the N points of the cloud).
    """
    if len(labels) == len(cloud):
        return labels
    note = cloud.dropped_note()
    if note and len(labels) == cloud.rows_in_file:
        keep = np.ones(cloud.rows_in_file, dtype=bool)
        keep[cloud.dropped] = False
        return labels[keep]
    rows = (
        f"{len(cloud)} points of {path} ({note}: the file has {cloud.rows_in_file} rows)"
        if note
        else f"{len(cloud)} points of {path}"
    )
    raise DatasetError(f"{source}: {len(labels)} labels for the {rows}")


def writable_dir(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=str(path), prefix=".probe", delete=True)
        probe.close()
        return True
    except OSError:
        return False


def save_npz_atomic(path: Path, **arrays: np.ndarray) -> None:
    """Write an ``.npz`` through a temporary file + rename, so readers never see half a file."""
    atomic_write(path, lambda fh: np.savez(fh, **arrays))


def load_npz(path: Path) -> Optional[Dict[str, np.ndarray]]:
    """Load a cache file; None (and a warning) when it is unreadable."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as exc:  # a corrupt cache entry is regenerated, never fatal
        warn_at_caller(f"ignoring unreadable cache file {path} ({exc})")
        return None


def item_index(where: str, index: Any, n: int, what: str = "items") -> int:
    """``index`` of a dataset of ``n`` items as a non-negative int: a Python / numpy integer (or a 0-d integer
    tensor), negative counting from the end; a string or a float is a TypeError, one outside ``-n..n-1`` an
    IndexError, both naming ``where``."""
    if isinstance(index, Tensor) and index.dim() == 0 and not index.is_floating_point() and index.dtype != torch.bool:
        index = int(index)
    if not isinstance(index, (int, np.integer)) or isinstance(index, (bool, np.bool_)):
        raise TypeError(f"{where}: index must be an integer, got {type(index).__name__} {index!r}")
    if not -n <= int(index) < n:
        raise IndexError(f"{where}: index {index} out of range for {n} {what}")
    return int(index) % n


class PointCloudDataset(torch.utils.data.Dataset):
    """Base class: loads a raw sample, normalizes, subsamples, transforms, builds tensors.

    Subclasses implement :meth:`raw` returning a dict of numpy arrays (``pos`` ``[N, 3]``,
    optional ``normal`` ``[N, 3]``, ``y``: int class or ``[N]`` part labels, optional
    ``category``) and set ``self.split``.

    The pipeline of ``__getitem__``: ``raw`` -> (with ``estimate_normals=k``: ``normal`` replaced by
    :func:`gridify.ops.estimate_normals` of the points as read, ``k`` neighbours, computed once per
    sample) -> :class:`~gridify.transforms.Normalize`
    (with ``keep_in_memory``: the sample up to here is kept per index after its first read and reused, as a copy,
    by later epochs; every DataLoader worker keeps its own) (when ``normalize``: True or "sphere", or "cube", :data:`~gridify.transforms.NORMALIZATIONS`) -> :class:`~gridify.transforms.FixedPoints` (random at ``train``,
    deterministic otherwise; skipped when ``num_points`` is None) -> ``transform`` ->
    :func:`fit_box` (when ``normalize``: whatever the transform does, e.g. a
    :class:`~gridify.transforms.RandomScale` above 1, the cloud stays in the grid box) -> tensors,
    with ``x = pos`` or ``x = [pos, normal]`` built last. A ``ValueError`` or ``OSError`` while
    reading a sample becomes a :class:`DatasetError` naming the sample (:meth:`describe`).

    :meth:`sample_groups` gives the class (or category) of every sample without reading it, for
    stratified subsets; subclasses that know it override it.
    """

    split: str

    def __init__(
        self,
        *,
        split: str,
        num_points: Optional[int],
        use_normals: bool,
        transform: Optional[Transform],
        seed: int,
        normalize: Union[bool, str] = True,
        estimate_normals: Optional[int] = None,
        keep_in_memory: bool = False,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        self.keep_in_memory = check_bool(where, "keep_in_memory", keep_in_memory)
        self._kept: Dict[int, Dict[str, Any]] = {}
        self.split = split
        self.num_points = check_num_points(where, num_points)
        self.use_normals = bool(use_normals)
        self.estimate_normals = check_int(where, "estimate_normals", estimate_normals, allow_none=True)
        if self.estimate_normals is not None and not self.use_normals:
            raise ValueError(
                f"{where}: estimate_normals={self.estimate_normals} (data.estimate_normals) but "
                f"use_normals=False: the estimated normals would not reach the model; set use_normals=True "
                f"or drop estimate_normals"
            )
        self._estimated: Dict[int, np.ndarray] = {}
        if transform is not None and not callable(transform):
            raise ValueError(f"{where}: transform must be callable, got {type(transform).__name__}")
        self.transform = transform
        self.seed = int(seed)
        mode = normalization_name(where, normalize)
        self.normalize = None if mode is None else Normalize(*NORMALIZATIONS[mode])
        self.sampler = (
            None
            if self.num_points is None
            else FixedPoints(self.num_points, deterministic=(split != "train"), seed=self.seed)
        )

    def raw(self, index: int) -> Dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __len__(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def __getitem__(self, index: int) -> Dict[str, Tensor]:
        index = item_index(type(self).__name__, index, len(self), "samples")
        sample = self._read_normalized(index)
        if self.sampler is not None:
            sample = self.sampler(sample)
        if self.transform is not None:
            sample = self.transform(sample)
        if self.normalize is not None:
            sample = fit_box(sample)
        return self.to_item(sample, index)

    def _read_normalized(self, index: int) -> Dict[str, Any]:
        """Sample ``index`` read, with its estimated normals, normalized (kept with ``keep_in_memory``: a copy of
        every array is returned, so nothing downstream can change what is kept)."""
        kept = self._kept.get(index)
        if kept is None:
            try:
                kept = self.raw(index)
                if self.estimate_normals is not None:
                    kept["normal"] = self._normals_of(index, kept["pos"])
                if self.normalize is not None:
                    kept = self.normalize(kept)
            except DatasetError:
                raise
            except (ValueError, OSError) as exc:
                raise DatasetError(f"{self.describe(index)}: {exc}") from None
            if not self.keep_in_memory:
                return kept
            self._kept[index] = kept
        return {
            k: (v.copy() if isinstance(v, np.ndarray) else v.clone() if isinstance(v, Tensor) else v)
            for k, v in kept.items()
        }

    def _normals_of(self, index: int, pos: Any) -> np.ndarray:
        """The estimated normals of sample ``index`` (:func:`gridify.ops.estimate_normals` with
        ``estimate_normals`` neighbours, on the points as read), computed once and kept: ``raw`` reads
        the same points every time."""
        if (
            index not in self._estimated
        ):  # a ValueError (bad points) becomes __getitem__'s DatasetError naming the sample
            p = torch.as_tensor(np.asarray(pos, dtype=np.float64))
            self._estimated[index] = ops_estimate_normals(p, self.estimate_normals).numpy().astype(np.float32)
        return self._estimated[index]

    #: the attribute that holds every sample's class or category id (read by :meth:`sample_groups`)
    group_attribute: Optional[str] = None

    def display_name(self) -> str:
        """The dataset's name in :meth:`describe` (the class name unless a subclass says otherwise)."""
        return type(self).__name__

    def describe(self, index: int) -> str:
        """A human-readable name of sample ``index`` (its file), for error messages:
        ``"<name> <split>[index] (<file>)"`` for a dataset that lists its sample files (``files``),
        else ``"<class>[index]"``."""
        files = getattr(self, "files", None)
        if files is None:
            return f"{type(self).__name__}[{index}]"
        return f"{self.display_name()} {self.split}[{index}] ({files[index]})"

    def sample_groups(self) -> Optional[np.ndarray]:
        """The class (classification) or category (segmentation) of every sample, ``[len(self)]``
        int64 (a copy of :attr:`group_attribute`), known without reading the samples; None when the
        dataset cannot tell."""
        if self.group_attribute is None:
            return None
        return np.array(getattr(self, self.group_attribute), dtype=np.int64)

    @classmethod
    def archives(cls, **kwargs: Any) -> List[str]:
        """The :data:`~gridify.datasets.download.ARCHIVES` keys ``gridify download`` fetches for a
        dataset built with ``kwargs`` (none: the data comes from elsewhere)."""
        return []

    def to_item(self, sample: Dict[str, Any], index: int) -> Dict[str, Tensor]:
        item: Dict[str, Tensor] = {}
        for k, v in sample.items():
            if isinstance(v, (str, bytes)) or v is None:
                continue
            item[k] = torch.as_tensor(np.asarray(v) if not isinstance(v, Tensor) else v)
        item["pos"] = item["pos"].float()
        if "normal" in item:
            item["normal"] = item["normal"].float()
        if self.use_normals:
            if "normal" not in item:
                raise DatasetError(
                    f"{self.describe(index)}: use_normals=True (data.use_normals) but the sample has no normals"
                )
            item["x"] = torch.cat([item["pos"], item["normal"]], dim=1)
        else:
            item.pop("normal", None)
            item["x"] = item["pos"].clone()
        for k in ("y", "category"):
            if k in item:
                item[k] = item[k].long()
        item["index"] = torch.tensor(index, dtype=torch.long)
        return item


def collate_points(items: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Collate dataset items into one PyG-style flat batch (a DataLoader ``collate_fn``).

    Per-point tensors (first dimension equal to the item's ``pos`` length) are concatenated;
    0-d tensors (class label ``y``, ``category``, ``index``) are stacked into ``[B]``;
    ``batch`` maps each point to its item and ``ptr`` holds the item offsets. Non-tensor
    values are gathered into lists.

    Shapes:
        pos ``[sum N_i, 3]``, x ``[sum N_i, F]``, batch ``[sum N_i]``, ptr ``[B + 1]``,
        y ``[B]`` (classification) or ``[sum N_i]`` (segmentation), category ``[B]``.
    """
    if not items:
        raise ValueError("collate_points: got an empty list of items")
    keys = list(items[0].keys())
    for i, it in enumerate(items):
        if set(it.keys()) != set(keys):
            raise ValueError(f"collate_points: item {i} has keys {sorted(it)} but item 0 has {sorted(keys)}")
        if "pos" not in it:
            raise ValueError(f"collate_points: item {i} has no 'pos'")
    sizes = [int(it["pos"].shape[0]) for it in items]
    out: Dict[str, Any] = {}
    for k in keys:
        vals = [it[k] for it in items]
        if not all(isinstance(v, Tensor) for v in vals):
            out[k] = vals
            continue
        per_point = all(v.dim() >= 1 and v.shape[0] == n for v, n in zip(vals, sizes)) and k not in (
            "category",
            "index",
        )
        if per_point:
            out[k] = torch.cat(vals, dim=0)
        elif all(v.dim() == 0 for v in vals):
            out[k] = torch.stack(vals)
        elif all(v.shape == vals[0].shape for v in vals):
            out[k] = torch.stack(vals)
        else:
            raise ValueError(
                f"collate_points: cannot collate {k!r}: neither per-point nor equal shapes "
                f"({[tuple(v.shape) for v in vals][:4]}...)"
            )
    out["batch"] = torch.repeat_interleave(torch.arange(len(items)), torch.tensor(sizes))
    out["ptr"] = torch.tensor([0] + np.cumsum(sizes).tolist(), dtype=torch.long)
    return out
