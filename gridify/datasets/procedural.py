"""A built-in procedural shape dataset: no download, deterministic, fast.

Twelve categories of parametric shapes built from trimesh primitives and their compositions
(box, sphere, cylinder, cone, capsule, torus, table, chair, lamp, mug, L-shape, dumbbell).
Each sample draws its sizes and proportions from a seeded generator, assembles the parts as
triangle meshes, and surface-samples ``num_points`` points (area-weighted) with their face
normals and part labels. Parts carry GLOBAL ids like ShapeNet-Part
(:data:`PROCEDURAL_CATEGORY_TO_PARTS`), so the same segmentation code and metrics apply.

Shapes are upright (z up). Sample ``i`` of a split is generated from
``SeedSequence([seed, split, i])``, independently of access order, and cached in memory.
About 1,000 samples generate in a couple of seconds on one core.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._checks import check_choice, check_number, check_positive_int
from ..io import sample_mesh
from ..registry import DATASETS
from ._common import PointCloudDataset, Transform, check_split

__all__ = ["ProceduralShapes", "PROCEDURAL_CLASSES", "PROCEDURAL_PARTS", "PROCEDURAL_CATEGORY_TO_PARTS", "make_shape"]

Mesh = Tuple[np.ndarray, np.ndarray]  # (vertices [V, 3], faces [F, 3])
Part = Tuple[np.ndarray, np.ndarray, int]  # (vertices, faces, local part index)

#: category -> names of its parts (local order)
PROCEDURAL_PARTS: Dict[str, List[str]] = {
    "box": ["body"],
    "sphere": ["body"],
    "cylinder": ["side", "cap"],
    "cone": ["side", "base"],
    "capsule": ["body", "cap"],
    "torus": ["ring"],
    "table": ["top", "leg"],
    "chair": ["seat", "back", "leg"],
    "lamp": ["base", "pole", "shade"],
    "mug": ["body", "handle"],
    "l_shape": ["long_arm", "short_arm"],
    "dumbbell": ["bar", "weight"],
}
PROCEDURAL_CLASSES: List[str] = list(PROCEDURAL_PARTS)
_offsets = np.concatenate([[0], np.cumsum([len(v) for v in PROCEDURAL_PARTS.values()])[:-1]]).tolist()
#: category id -> global part ids
PROCEDURAL_CATEGORY_TO_PARTS: List[List[int]] = [
    list(range(o, o + len(parts))) for o, parts in zip(_offsets, PROCEDURAL_PARTS.values())
]
#: global part names, ``"<category>/<part>"``
PROCEDURAL_PART_NAMES: List[str] = [f"{c}/{p}" for c, parts in PROCEDURAL_PARTS.items() for p in parts]

_SPLIT_CODE = {"train": 0, "val": 1, "test": 2}


# --------------------------------------------------------------------------------------
# unit primitives (built once)
# --------------------------------------------------------------------------------------
def _tm(mesh: Any) -> Mesh:
    return np.asarray(mesh.vertices, dtype=np.float64), np.asarray(mesh.faces, dtype=np.int64)


def _face_normals(v: np.ndarray, f: np.ndarray) -> np.ndarray:
    n = np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])
    return n / np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-12)


def _subset(mesh: Mesh, keep: np.ndarray) -> Mesh:
    v, f = mesh
    return v, f[keep]


@lru_cache(maxsize=None)
def _unit(kind: str) -> Mesh:
    import trimesh

    if kind == "box":  # [-0.5, 0.5]^3
        return _tm(trimesh.creation.box(extents=(1.0, 1.0, 1.0)))
    if kind == "sphere":  # radius 1
        return _tm(trimesh.creation.icosphere(subdivisions=2))
    if kind in ("cylinder", "tube", "disk"):  # radius 1, z in [-0.5, 0.5]
        v, f = _tm(trimesh.creation.cylinder(radius=1.0, height=1.0, sections=32))
        nz = _face_normals(v, f)[:, 2]
        if kind == "tube":
            return _subset((v, f), np.abs(nz) < 0.5)
        if kind == "disk":
            return _subset((v, f), np.abs(nz) >= 0.5)
        return v, f
    if kind == "cone":  # base radius 1 at z=0, apex at z=1
        return _tm(trimesh.creation.cone(radius=1.0, height=1.0, sections=32))
    if kind in ("hemisphere_top", "hemisphere_bottom"):
        v, f = _unit("sphere")
        cz = v[f].mean(axis=1)[:, 2]
        return _subset((v, f), cz >= 0 if kind == "hemisphere_top" else cz < 0)
    raise KeyError(kind)


def _place(mesh: Mesh, scale: Sequence[float], offset: Sequence[float] = (0.0, 0.0, 0.0)) -> Mesh:
    v, f = mesh
    return v * np.asarray(scale, dtype=np.float64) + np.asarray(offset, dtype=np.float64), f


def _box(lo: Sequence[float], hi: Sequence[float]) -> Mesh:
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    return _place(_unit("box"), hi - lo, (lo + hi) / 2)


def _torus(major: float, minor: float) -> Mesh:
    import trimesh

    return _tm(trimesh.creation.torus(major_radius=major, minor_radius=minor, major_sections=32, minor_sections=12))


# --------------------------------------------------------------------------------------
# shape builders: rng -> list of (vertices, faces, local part)
# --------------------------------------------------------------------------------------
def _split_by_normal(mesh: Mesh, axis: int = 2, thresh: float = 0.5) -> Tuple[Mesh, Mesh]:
    v, f = mesh
    n = np.abs(_face_normals(v, f)[:, axis])
    return (v, f[n < thresh]), (v, f[n >= thresh])


def _build_box(r: np.random.Generator) -> List[Part]:
    e = r.uniform(0.4, 1.0, size=3)
    return [(*_place(_unit("box"), e), 0)]


def _build_sphere(r: np.random.Generator) -> List[Part]:
    return [(*_place(_unit("sphere"), [r.uniform(0.5, 1.0)] * 3), 0)]


def _build_cylinder(r: np.random.Generator) -> List[Part]:
    rad, h = r.uniform(0.25, 0.6), r.uniform(0.6, 1.6)
    mesh = _place(_unit("cylinder"), (rad, rad, h))
    side, caps = _split_by_normal(mesh)
    return [(*side, 0), (*caps, 1)]


def _build_cone(r: np.random.Generator) -> List[Part]:
    rad, h = r.uniform(0.3, 0.7), r.uniform(0.6, 1.5)
    v, f = _place(_unit("cone"), (rad, rad, h), (0, 0, -h / 2))
    nz = _face_normals(v, f)[:, 2]
    return [(v, f[nz > -0.99], 0), (v, f[nz <= -0.99], 1)]


def _build_capsule(r: np.random.Generator) -> List[Part]:
    rad, h = r.uniform(0.2, 0.45), r.uniform(0.5, 1.4)
    body = _place(_unit("tube"), (rad, rad, h))
    top = _place(_unit("hemisphere_top"), (rad, rad, rad), (0, 0, h / 2))
    bottom = _place(_unit("hemisphere_bottom"), (rad, rad, rad), (0, 0, -h / 2))
    return [(*body, 0), (*top, 1), (*bottom, 1)]


def _build_torus(r: np.random.Generator) -> List[Part]:
    major = r.uniform(0.6, 1.0)
    minor = major * r.uniform(0.15, 0.4)
    return [(*_torus(major, minor), 0)]


def _build_table(r: np.random.Generator) -> List[Part]:
    w, d, h = r.uniform(0.8, 1.6), r.uniform(0.5, 1.0), r.uniform(0.5, 0.9)
    t, leg = r.uniform(0.04, 0.1), r.uniform(0.04, 0.09)
    parts: List[Part] = [(*_box((-w / 2, -d / 2, h - t), (w / 2, d / 2, h)), 0)]
    inset = r.uniform(0.0, 0.1)
    for sx in (-1, 1):
        for sy in (-1, 1):
            cx = sx * (w / 2 - inset * w / 2 - leg / 2)
            cy = sy * (d / 2 - inset * d / 2 - leg / 2)
            parts.append((*_box((cx - leg / 2, cy - leg / 2, 0), (cx + leg / 2, cy + leg / 2, h - t)), 1))
    return parts


def _build_chair(r: np.random.Generator) -> List[Part]:
    w, d, sh = r.uniform(0.45, 0.7), r.uniform(0.45, 0.7), r.uniform(0.4, 0.55)
    t, leg, bh = r.uniform(0.04, 0.08), r.uniform(0.035, 0.07), r.uniform(0.4, 0.8)
    parts: List[Part] = [
        (*_box((-w / 2, -d / 2, sh - t), (w / 2, d / 2, sh)), 0),
        (*_box((-w / 2, d / 2 - t, sh), (w / 2, d / 2, sh + bh)), 1),
    ]
    for sx in (-1, 1):
        for sy in (-1, 1):
            cx, cy = sx * (w / 2 - leg / 2), sy * (d / 2 - leg / 2)
            parts.append((*_box((cx - leg / 2, cy - leg / 2, 0), (cx + leg / 2, cy + leg / 2, sh - t)), 2))
    return parts


def _build_lamp(r: np.random.Generator) -> List[Part]:
    br, bh = r.uniform(0.2, 0.4), r.uniform(0.04, 0.1)
    pr, ph = r.uniform(0.02, 0.05), r.uniform(0.6, 1.2)
    sr, sh = r.uniform(0.2, 0.45), r.uniform(0.2, 0.4)
    base = _place(_unit("cylinder"), (br, br, bh), (0, 0, bh / 2))
    pole = _place(_unit("tube"), (pr, pr, ph), (0, 0, bh + ph / 2))
    shade = _place(_unit("cone"), (sr, sr, sh), (0, 0, bh + ph - sh * 0.3))
    return [(*base, 0), (*pole, 1), (*shade, 2)]


def _build_mug(r: np.random.Generator) -> List[Part]:
    rad, h = r.uniform(0.3, 0.5), r.uniform(0.6, 1.1)
    v, f = _place(_unit("cylinder"), (rad, rad, h), (0, 0, h / 2))
    nz = _face_normals(v, f)[:, 2]
    body = (v, f[nz < 0.99])  # side + bottom; the top is open
    major = h * r.uniform(0.25, 0.35)
    minor = major * r.uniform(0.15, 0.3)
    tv, tf = _torus(major, minor)
    tv = tv[:, [0, 2, 1]]  # ring in the x-z plane
    tf = tf[:, [0, 2, 1]]  # keep outward winding after swapping two axes
    tv = tv + np.array([rad, 0.0, h / 2])
    keep = tv[tf].mean(axis=1)[:, 0] > rad  # the half outside the body
    return [(*body, 0), (tv, tf[keep], 1)]


def _build_l_shape(r: np.random.Generator) -> List[Part]:
    long_len, short_len = r.uniform(0.9, 1.5), r.uniform(0.4, 0.8)
    w, t = r.uniform(0.2, 0.4), r.uniform(0.15, 0.4)
    return [(*_box((0, 0, 0), (long_len, w, t)), 0), (*_box((0, w, 0), (w, w + short_len, t)), 1)]


def _build_dumbbell(r: np.random.Generator) -> List[Part]:
    bar_r, bar_len = r.uniform(0.05, 0.1), r.uniform(0.8, 1.4)
    wr = r.uniform(0.2, 0.35)
    bar = _place(_unit("tube"), (bar_r, bar_r, bar_len))
    bar = (bar[0][:, [2, 1, 0]], bar[1][:, [0, 2, 1]])  # along x
    parts: List[Part] = [(*bar, 0)]
    for sx in (-1, 1):
        parts.append((*_place(_unit("sphere"), (wr, wr, wr), (sx * bar_len / 2, 0, 0)), 1))
    return parts


_BUILDERS: Dict[str, Callable[[np.random.Generator], List[Part]]] = {
    "box": _build_box,
    "sphere": _build_sphere,
    "cylinder": _build_cylinder,
    "cone": _build_cone,
    "capsule": _build_capsule,
    "torus": _build_torus,
    "table": _build_table,
    "chair": _build_chair,
    "lamp": _build_lamp,
    "mug": _build_mug,
    "l_shape": _build_l_shape,
    "dumbbell": _build_dumbbell,
}


def make_shape(category: str, num_points: int, rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Generate one shape of ``category`` and sample its surface.

    Returns:
        ``(pos, normal, part)`` with GLOBAL part ids.

    Shapes:
        pos ``[num_points, 3]`` float32, normal ``[num_points, 3]`` float32, part ``[num_points]`` int64.
    """
    if category not in _BUILDERS:
        raise ValueError(f"make_shape: unknown category {category!r}; known: {PROCEDURAL_CLASSES}")
    parts = _BUILDERS[category](rng)
    verts, faces, labels = [], [], []
    base = 0
    for v, f, local in parts:
        if len(f) == 0:
            continue
        verts.append(v)
        faces.append(f + base)
        labels.append(np.full(len(f), local, dtype=np.int64))
        base += len(v)
    v = np.concatenate(verts)
    f = np.concatenate(faces)
    face_part = np.concatenate(labels)
    pos, normal, idx = sample_mesh((v, f), int(num_points), seed=rng, return_faces=True)
    cat = PROCEDURAL_CLASSES.index(category)
    part = np.asarray(PROCEDURAL_CATEGORY_TO_PARTS[cat], dtype=np.int64)[face_part[idx]]
    return pos, normal, part


@DATASETS.register("procedural")
class ProceduralShapes(PointCloudDataset):
    """Procedurally generated shapes for classification or part segmentation.

    Args:
        split: ``"train"``, ``"val"`` or ``"test"`` (disjoint seeds).
        num_points: points sampled per shape.
        num_samples_per_class: shapes per category in this split.
        seed: base seed; the same seed gives the same dataset.
        task: ``"classification"`` (``y`` = category id) or ``"segmentation"`` (``y`` =
            per-point global part ids, plus ``category``).
        classes: restrict to these category names (ids follow :data:`PROCEDURAL_CLASSES`
            order of the kept classes, i.e. they are re-indexed 0..C-1).
        use_normals: ``x`` = xyz + normals (True) or xyz.
        transform: applied to the sample dict after normalization.
        normalize: centre each shape and scale it into the unit sphere (True or ``"sphere"``) or
            the cube ``[-1, 1]^3`` (``"cube"``: the bounding box centred, its longest side spanning the grid box); False: as read.
        noise_std: Gaussian noise added to the sampled points (0: exact surface points).

    Items (dicts of tensors):
        ``pos`` ``[N, 3]``, ``x`` ``[N, 3 or 6]``, ``normal`` ``[N, 3]``, ``y`` (0-d class id or
        ``[N]`` part ids), ``category`` (0-d, segmentation only), ``index`` (0-d).

    Attributes:
        class_names, num_classes, category_to_parts, part_names, num_parts.
    """

    source_format = "procedural"

    def __init__(
        self,
        split: str = "train",
        num_points: int = 1024,
        num_samples_per_class: int = 50,
        seed: int = 0,
        task: str = "classification",
        *,
        classes: Optional[Sequence[str]] = None,
        use_normals: bool = True,
        transform: Optional[Transform] = None,
        normalize: Union[bool, str] = True,
        noise_std: float = 0.0,
    ) -> None:
        check_split("ProceduralShapes", split, ("train", "val", "test"))
        where = "ProceduralShapes"
        check_choice(where, "task", task, ("classification", "segmentation"))
        check_positive_int(where, num_points=num_points, num_samples_per_class=num_samples_per_class)
        check_number(where, "noise_std", noise_std, strict=False)
        super().__init__(
            split=split,
            num_points=int(num_points),
            use_normals=use_normals,
            transform=transform,
            seed=seed,
            normalize=normalize,
        )
        if classes is None:
            names = list(PROCEDURAL_CLASSES)
        else:
            bad = [c for c in classes if c not in PROCEDURAL_PARTS]
            if bad or not classes:
                raise ValueError(
                    f"ProceduralShapes: unknown or empty classes {bad or classes}; known: {PROCEDURAL_CLASSES}"
                )
            names = [c for c in PROCEDURAL_CLASSES if c in set(classes)]
        self.class_names = names
        self.task = task
        self.per_class = int(num_samples_per_class)
        self.noise_std = float(noise_std)
        self._cache: Dict[int, Dict[str, np.ndarray]] = {}

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def category_to_parts(self) -> List[List[int]]:
        """Global part ids of each (kept) class, indexed by class id."""
        return [PROCEDURAL_CATEGORY_TO_PARTS[PROCEDURAL_CLASSES.index(c)] for c in self.class_names]

    part_names = PROCEDURAL_PART_NAMES
    num_parts = len(PROCEDURAL_PART_NAMES)

    def __len__(self) -> int:
        return self.per_class * len(self.class_names)

    def describe(self, index: int) -> str:
        return f"ProceduralShapes {self.split}[{index}] ({self.class_names[index // self.per_class]})"

    def sample_groups(self) -> np.ndarray:
        return np.arange(len(self), dtype=np.int64) // self.per_class

    def __repr__(self) -> str:
        return (
            f"ProceduralShapes(split={self.split!r}, task={self.task!r}, classes={self.num_classes}, "
            f"samples={len(self)}, num_points={self.num_points}, seed={self.seed})"
        )

    def raw(self, index: int) -> Dict[str, Any]:
        cached = self._cache.get(index)
        if cached is None:
            label = index // self.per_class
            name = self.class_names[label]
            rng = np.random.default_rng(
                [self.seed, _SPLIT_CODE[self.split], PROCEDURAL_CLASSES.index(name), index % self.per_class]
            )
            pos, normal, part = make_shape(name, self.num_points, rng)  # type: ignore[arg-type]
            if self.noise_std > 0:
                pos = (pos + rng.normal(0.0, self.noise_std, size=pos.shape)).astype(np.float32)
            cached = {"pos": pos, "normal": normal, "part": part, "label": np.int64(label)}
            self._cache[index] = cached
        sample: Dict[str, Any] = {"pos": cached["pos"], "normal": cached["normal"]}
        if self.task == "classification":
            sample["y"] = cached["label"]
        else:
            sample["y"] = cached["part"]
            sample["category"] = cached["label"]
        return sample
