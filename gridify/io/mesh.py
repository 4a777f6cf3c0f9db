"""Triangle meshes: the OFF reader, OBJ/STL through trimesh, :func:`read_mesh` and :func:`sample_mesh`.

Layout of OFF: an ``OFF`` line (ModelNet also writes the counts on it: ``OFF490 518 0``), the
line ``V F E``, ``V`` lines ``x y z [...]`` and ``F`` lines ``k i1 ... ik``; ``#`` starts a
comment. Polygons are fan-triangulated. OBJ and STL are parsed by trimesh, imported only when
such a file is read. A mesh format's point cloud is ``num_samples`` points drawn on its surface
(area-weighted, seeded) with their face normals, or its vertices when it has no faces;
:func:`register_mesh_reader` registers a new mesh format that way.

Shapes:
    vertices ``[V, 3]`` float64, faces ``[F, 3]`` int64; samples: points ``[n, 3]`` float32,
    normals ``[n, 3]`` float32, face index ``[n]`` int64.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple, Union

import numpy as np

from .._files import PathLike
from .cloud import PointCloud
from .read import check_file
from .registry import Extensions, MeshReader, find_format, mesh_reader_extensions, register_reader

__all__ = ["polygons_to_triangles", "read_off", "read_trimesh", "read_mesh", "sample_mesh",
           "register_mesh_reader"]


def polygons_to_triangles(polys: Any) -> np.ndarray:
    """Fan-triangulate a list (or ``[F, k]`` array) of vertex-index polygons."""
    if isinstance(polys, np.ndarray) and polys.ndim == 2:
        k = polys.shape[1]
        if k < 3:
            return np.zeros((0, 3), np.int64)
        tris = [np.stack([polys[:, 0], polys[:, i], polys[:, i + 1]], 1) for i in range(1, k - 1)]
        return np.concatenate(tris).astype(np.int64)
    out: List[Tuple[int, int, int]] = []
    for poly in polys:
        poly = np.asarray(poly).astype(np.int64)
        for i in range(1, len(poly) - 1):
            out.append((poly[0], poly[i], poly[i + 1]))
    return np.asarray(out, dtype=np.int64).reshape(-1, 3)


# --------------------------------------------------------------------------------------
# OFF
# --------------------------------------------------------------------------------------
def _off_counts(p: Path, lines: List[str]) -> Tuple[int, int, int]:
    """``(vertex count, face count, index of the first vertex line)`` from the OFF header."""
    if not lines:
        raise ValueError(f"{p}: OFF file contains no data")
    head = lines[0]
    if not head.upper().startswith("OFF"):
        raise ValueError(f"{p}: not an OFF file (first line {head[:40]!r} does not start with 'OFF')")
    rest = head[3:].strip()  # ModelNet quirk: 'OFF490 518 0'
    i = 1
    if not rest:
        if len(lines) < 2:
            raise ValueError(f"{p}: truncated OFF file (no vertex/face counts)")
        rest = lines[1]
        i = 2
    try:
        counts = [int(t) for t in rest.split()[:3]]
        nv, nf = counts[0], counts[1]
    except (ValueError, IndexError):
        raise ValueError(f"{p}: malformed OFF counts line {rest[:40]!r}") from None
    if nv < 0 or nf < 0:
        raise ValueError(f"{p}: OFF counts must be non-negative, got {nv} vertices, {nf} faces")
    if len(lines) < i + nv + nf:
        raise ValueError(f"{p}: truncated OFF file: header declares {nv} vertices and {nf} faces "
                         f"but only {len(lines) - i} data lines follow")
    return nv, nf, i


def _off_faces(p: Path, fblock: List[str]) -> np.ndarray:
    """Triangles ``[F', 3]`` from the OFF face lines ``k i1 ... ik`` (extra colour columns ignored)."""
    ftok = " ".join(fblock).split()
    if len(ftok) == 4 * len(fblock):  # fast path: all triangles without colours
        try:
            arr = np.array(ftok, dtype=np.int64).reshape(len(fblock), 4)
            if np.all(arr[:, 0] == 3):
                return arr[:, 1:]
        except ValueError:
            pass
    try:
        polys = []
        for ln in fblock:
            r = ln.split()
            k = int(r[0])
            if k < 0 or len(r) < k + 1:
                raise ValueError
            polys.append([int(t) for t in r[1:k + 1]])
        return polygons_to_triangles(polys)
    except (ValueError, IndexError):
        raise ValueError(f"{p}: malformed OFF face lines (expected 'k i1 ... ik')") from None


def read_off(p: Path) -> Tuple[np.ndarray, np.ndarray]:
    """``(vertices, faces)`` of the OFF file ``p`` (see the module docstring)."""
    text = p.read_bytes().decode("latin-1")
    lines = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    nv, nf, i = _off_counts(p, lines)
    vblock = lines[i:i + nv]
    try:
        vtok = " ".join(vblock).split()
        if len(vtok) == 3 * nv:  # fast path: exactly x y z per line
            vertices = np.array(vtok, dtype=np.float64).reshape(nv, 3)
        else:  # extra per-vertex columns (colours...): keep the first three
            vertices = np.array([ln.split()[:3] for ln in vblock], dtype=np.float64).reshape(nv, 3)
    except ValueError:
        raise ValueError(f"{p}: OFF vertex lines are not three numbers each") from None
    faces = _off_faces(p, lines[i + nv:i + nv + nf]).reshape(-1, 3)
    if len(faces) and (faces.min() < 0 or faces.max() >= nv):
        raise ValueError(f"{p}: OFF faces index vertices outside 0..{nv - 1}")
    return vertices, faces


# --------------------------------------------------------------------------------------
# OBJ / STL
# --------------------------------------------------------------------------------------
def read_trimesh(p: Path) -> Tuple[np.ndarray, np.ndarray]:
    """``(vertices, faces)`` of an ``.obj`` / ``.stl`` file, parsed by trimesh (multi-object files merged)."""
    import trimesh  # light and always installed, but only needed here

    ext = p.suffix.lower()
    try:
        loaded = trimesh.load(str(p), file_type=ext[1:], force="mesh", process=False)
    except Exception as exc:
        raise ValueError(f"{p}: could not parse {ext} mesh ({type(exc).__name__}: {exc})") from None
    vertices = np.asarray(getattr(loaded, "vertices", np.zeros((0, 3))), dtype=np.float64)
    faces = np.asarray(getattr(loaded, "faces", np.zeros((0, 3))), dtype=np.int64).reshape(-1, 3)
    if len(vertices) == 0:
        raise ValueError(f"{p}: {ext} file contains no vertices (corrupt or not a mesh)")
    return vertices, faces


# --------------------------------------------------------------------------------------
# any mesh
# --------------------------------------------------------------------------------------
def read_mesh(path: PathLike) -> Tuple[np.ndarray, np.ndarray]:
    """Read a triangle mesh (``.off``, ``.obj``, ``.stl``, or a ``.ply`` with faces).

    Polygons are fan-triangulated; multi-object files are merged. The reader is the
    ``mesh_reader`` the format registry holds for the extension.

    Returns:
        ``(vertices, faces)``.

    Shapes:
        vertices: ``[V, 3]`` float64; faces: ``[F, 3]`` int64 (``F`` may be 0 for an OBJ
        holding only vertices).
    """
    p = check_file(path)
    fmt = find_format(p.suffix)
    if fmt is None or fmt.mesh_reader is None:
        raise ValueError(f"{p}: unsupported mesh extension {p.suffix!r}; supported: "
                         f"{' '.join(mesh_reader_extensions())}")
    return fmt.mesh_reader(p)


def sample_mesh(mesh: Any, n: int, seed: Union[int, np.random.Generator, None] = 0, *,
                return_faces: bool = False) -> Tuple[np.ndarray, ...]:
    """Sample ``n`` points uniformly (area-weighted) on a triangle mesh's surface.

    Args:
        mesh: a ``trimesh.Trimesh`` or a ``(vertices, faces)`` pair.
        n: number of points.
        seed: an int seed or a ``numpy.random.Generator``; the same seed gives the same points.
        return_faces: also return the index of the face each point was drawn from.

    Returns:
        ``(points, normals)``: the sampled points and the unit normals of the faces they lie
        on (orientation follows the face winding); plus ``face_index`` when ``return_faces``.

    Shapes:
        points: ``[n, 3]`` float32; normals: ``[n, 3]`` float32; face_index: ``[n]`` int64.
    """
    if isinstance(mesh, (tuple, list)) and len(mesh) == 2:
        vertices, faces = mesh
    elif hasattr(mesh, "vertices") and hasattr(mesh, "faces"):
        vertices, faces = mesh.vertices, mesh.faces
    else:
        raise ValueError(f"sample_mesh: mesh must be a trimesh.Trimesh or (vertices, faces), "
                         f"got {type(mesh).__name__}")
    vertices = np.asarray(vertices, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.int64)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"sample_mesh: n must be a positive integer, got {n!r}")
    if vertices.ndim != 2 or vertices.shape[1] != 3:
        raise ValueError(f"sample_mesh: vertices must have shape [V, 3], got {vertices.shape}")
    if faces.ndim != 2 or faces.shape[1] != 3 or len(faces) == 0:
        raise ValueError(f"sample_mesh: faces must have shape [F, 3] with F > 0, got {faces.shape}")
    if faces.min() < 0 or faces.max() >= len(vertices):
        raise ValueError(f"sample_mesh: faces index vertices outside 0..{len(vertices) - 1}")
    a, b, c = vertices[faces[:, 0]], vertices[faces[:, 1]], vertices[faces[:, 2]]
    cross = np.cross(b - a, c - a)
    double_area = np.linalg.norm(cross, axis=1)
    double_area[~np.isfinite(double_area)] = 0.0
    total = double_area.sum()
    if not total > 0:
        raise ValueError("sample_mesh: the mesh has zero surface area (all faces degenerate)")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    cdf = np.cumsum(double_area)
    idx = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    idx = np.minimum(idx, len(faces) - 1)
    r1 = np.sqrt(rng.random(n))
    r2 = rng.random(n)
    u = 1.0 - r1
    v = r1 * (1.0 - r2)
    w = r1 * r2
    pts = u[:, None] * a[idx] + v[:, None] * b[idx] + w[:, None] * c[idx]
    normals = cross[idx] / double_area[idx, None]
    if return_faces:
        return pts.astype(np.float32), normals.astype(np.float32), idx.astype(np.int64)
    return pts.astype(np.float32), normals.astype(np.float32)


def _read_mesh_points(p: Path, *, num_samples: int, seed: int) -> PointCloud:
    """The reader of mesh formats: surface samples with face normals, or the bare vertices."""
    vertices, faces = read_mesh(p)
    if len(faces) == 0:  # e.g. an OBJ holding only 'v' lines: a point cloud
        return PointCloud(vertices, source=str(p))
    pts, nrm = sample_mesh((vertices, faces), num_samples, seed=seed)
    return PointCloud(pts, normals=nrm, source=str(p))


def register_mesh_reader(extensions: Extensions, description: str, mesh_reader: Optional[MeshReader] = None, *,
                         replace: bool = False) -> Callable[..., Any]:
    """Register a mesh format: ``mesh_reader(path) -> (vertices, faces)``; a decorator when omitted.

    :func:`read_mesh` returns what ``mesh_reader`` returns; :func:`~gridify.io.read_points`
    surface-samples it (``num_samples``, ``seed``), and the extensions join ``MESH_EXTENSIONS``.
    See :func:`~gridify.io.register_reader` for ``extensions``, ``description`` and ``replace``.

    Returns:
        ``mesh_reader`` (the decorated function, unchanged).
    """

    def add(fn: MeshReader) -> MeshReader:
        register_reader(extensions, description, _read_mesh_points, options=("num_samples", "seed"),
                        is_mesh=True, mesh_reader=fn, replace=replace)
        return fn

    return add if mesh_reader is None else add(mesh_reader)
