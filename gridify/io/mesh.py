"""Triangle meshes: the OFF reader, :func:`read_mesh`, :func:`sample_mesh` and :func:`register_mesh_reader`.

Layout of OFF: an ``OFF`` line (ModelNet also writes the counts on it: ``OFF490 518 0``), the
line ``V F E``, ``V`` lines ``x y z [...]`` and ``F`` lines ``k i1 ... ik``; ``#`` starts a
comment. Polygons are fan-triangulated: ``(i1, i_j, i_j+1)`` for ``j = 2 .. k-1``. The counts
are checked against the lines present before anything is parsed: fewer lines is a truncated
file, more is refused too (reading the declared ones would drop the rest silently). OBJ, STL and glTF are parsed
by trimesh (:mod:`gridify.io.trimesh_formats`).

A mesh format's point cloud is ``num_samples`` points drawn on its surface, or its vertices
when it has no faces: a face is chosen with probability proportional to its area, then a point
``u a + v b + w c`` with ``u = 1 - sqrt(r1)``, ``v = sqrt(r1) (1 - r2)``, ``w = sqrt(r1) r2``
(``r1, r2 ~ U(0, 1)``, seeded), with the face's unit normal. At most
:data:`~gridify.io.read.MAX_SAMPLES` points are drawn, refused before anything is allocated.
Samples of a float64 mesh with a large offset stay float64 (the rule of :mod:`gridify.io.cloud`).

Shapes:
    vertices ``[V, 3]`` float64, faces ``[F, 3]`` int64; samples: points ``[n, 3]`` float32,
    normals ``[n, 3]`` float32, face index ``[n]`` int64.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple, Union

import numpy as np

from .._files import PathLike
from .cloud import PointCloud, coordinate_dtype
from .read import MAX_SAMPLES, run_reader
from .registry import Extensions, MeshReader, find_format, mesh_reader_extensions, register_reader
from .source import check_file, read_file_bytes
from .tokens import Ragged, ascii_floats, gather_lists, min_ascii_bytes

__all__ = [
    "polygons_to_triangles",
    "fan_triangles",
    "read_off",
    "read_mesh",
    "sample_mesh",
    "sample_mesh_unchecked",
    "surface_cloud",
    "register_mesh_reader",
]


def fan_triangles(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Fan-triangulate ragged polygons: ``values`` holds them one after the other, ``lengths`` their sizes.

    Shapes:
        values ``[sum(lengths)]``, lengths ``[P]`` -> triangles ``[sum(max(lengths - 2, 0)), 3]`` int64.
    """
    values = np.asarray(values).astype(np.int64).reshape(-1)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    starts = np.cumsum(lengths) - lengths
    per = np.maximum(lengths - 2, 0)  # triangles of each polygon
    poly = np.repeat(np.arange(len(lengths)), per)
    j = np.arange(len(poly)) - np.repeat(np.cumsum(per) - per, per) + 1  # 1 .. k-2 within a polygon
    first = starts[poly]
    return np.stack([values[first], values[first + j], values[first + j + 1]], 1).reshape(-1, 3)


def polygons_to_triangles(polys: Any) -> np.ndarray:
    """Fan-triangulate vertex-index polygons: a list of them, an ``[F, k]`` array or a :class:`Ragged`."""
    if isinstance(polys, Ragged):
        with np.errstate(invalid="ignore"):  # NaN indices become out-of-range ones, refused later
            return fan_triangles(polys.values, polys.lengths)
    if isinstance(polys, np.ndarray) and polys.ndim == 2:
        k = polys.shape[1]
        if k < 3:
            return np.zeros((0, 3), np.int64)
        with np.errstate(invalid="ignore"):  # NaN indices become out-of-range ones, refused later
            tris = [np.stack([polys[:, 0], polys[:, i], polys[:, i + 1]], 1) for i in range(1, k - 1)]
            return np.concatenate(tris).astype(np.int64)
    polys = [np.asarray(poly).reshape(-1) for poly in polys]
    if not polys:
        return np.zeros((0, 3), np.int64)
    with np.errstate(invalid="ignore"):
        return fan_triangles(np.concatenate(polys), np.array([len(poly) for poly in polys]))


# --------------------------------------------------------------------------------------
# OFF
# --------------------------------------------------------------------------------------
def _off_counts(p: Path, lines: List[bytes], check_lines: bool = True) -> Tuple[int, int, int]:
    """``(vertex count, face count, index of the first vertex line)`` from the OFF header.

    With ``check_lines``, ``lines`` (the non-empty lines) must hold the ``V + F`` declared lines.
    """
    if not lines:
        raise ValueError(f"{p}: OFF file contains no data")
    head = lines[0].decode("latin-1")
    if not head.upper().startswith("OFF"):
        raise ValueError(f"{p}: not an OFF file (first line {head[:40]!r} does not start with 'OFF')")
    rest = head[3:].strip()  # ModelNet quirk: 'OFF490 518 0'
    i = 1
    if not rest:
        if len(lines) < 2:
            raise ValueError(f"{p}: truncated OFF file (no vertex/face counts)")
        rest = lines[1].decode("latin-1")
        i = 2
    try:
        counts = [int(t) for t in rest.split()[:3]]
        nv, nf = counts[0], counts[1]
    except (ValueError, IndexError):
        raise ValueError(f"{p}: malformed OFF counts line {rest[:40]!r}") from None
    if nv < 0 or nf < 0:
        raise ValueError(f"{p}: OFF counts must be non-negative, got {nv} vertices, {nf} faces")
    if check_lines and len(lines) < i + nv + nf:
        raise ValueError(
            f"{p}: truncated OFF file: header declares {nv} vertices and {nf} faces "
            f"but only {len(lines) - i} data lines follow"
        )
    return nv, nf, i


def _line_values(p: Path, lines: List[bytes], what: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(every value of lines [T] float64, where each line starts [L], its value count [L])``."""
    counts = np.fromiter((len(ln.split()) for ln in lines), np.int64, len(lines))
    try:
        vals = ascii_floats(p, what, b"\n".join(lines))
    except ValueError:
        vals = np.zeros(0)
    if len(vals) != counts.sum():
        raise ValueError(f"{p}: {what} hold values that are not numbers")
    return vals, np.cumsum(counts) - counts, counts


def _off_vertices(p: Path, vblock: List[bytes]) -> np.ndarray:
    """``[V, 3]`` from the OFF vertex lines ``x y z [...]`` (extra columns, e.g. colours, ignored)."""
    vals, starts, counts = _line_values(p, vblock, "OFF vertex lines")
    if len(vblock) and counts.min() < 3:
        raise ValueError(f"{p}: OFF vertex lines are not three numbers each")
    return vals[starts[:, None] + np.arange(3)].reshape(-1, 3)


def _off_faces(p: Path, fblock: List[bytes]) -> np.ndarray:
    """Triangles ``[F', 3]`` from the OFF face lines ``k i1 ... ik`` (extra colour columns ignored)."""
    vals, starts, counts = _line_values(p, fblock, "OFF face lines")
    k = vals[starts] if len(fblock) else np.zeros(0)
    ok = np.isfinite(k) & (k >= 0) & (k <= counts - 1) & (k == np.round(k))
    polygons = gather_lists(vals, starts + 1, k.astype(np.int64) * ok) if ok.all() else None
    if polygons is None or not np.all(polygons.values == np.round(polygons.values)):
        raise ValueError(f"{p}: malformed OFF face lines (expected 'k i1 ... ik')")
    return polygons_to_triangles(polygons)


def _off_fast(p: Path, raw: bytes) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """The common layout (no comments, ``x y z`` vertices, ``3 a b c`` faces, nothing else) at once; else None.

    Parses the values after the counts with NumPy (8 bytes per value, no object per line).
    """
    if b"#" in raw:
        return None
    head: List[bytes] = []
    pos = 0
    while len(head) < 2 and pos < len(raw):  # the OFF line and, unless on it, the counts line
        end = raw.find(b"\n", pos)
        end = len(raw) if end < 0 else end
        if raw[pos:end].strip():
            head.append(raw[pos:end].strip())
        pos = end + 1
        if head and len(head[0]) > 3 and head[0][:3].upper() == b"OFF":
            break  # counts on the OFF line
    nv, nf, _ = _off_counts(p, head, check_lines=False)
    body = raw[pos:]  # the header lines are all in head
    if len(body) < min_ascii_bytes(3 * nv + 4 * nf):  # the line-by-line path reports the truncation
        return None
    try:
        vals = ascii_floats(p, "OFF data", body)
    except ValueError:
        return None
    if len(vals) != 3 * nv + 4 * nf:
        return None
    faces = vals[3 * nv :].reshape(nf, 4)
    if not np.all(faces[:, 0] == 3) or not np.all(faces == np.round(faces)):
        return None
    return vals[: 3 * nv].reshape(nv, 3), faces[:, 1:].astype(np.int64)


def read_off(p: Path) -> Tuple[np.ndarray, np.ndarray]:
    """``(vertices, faces)`` of the OFF file ``p`` (see the module docstring)."""
    raw = read_file_bytes(p)
    fast = _off_fast(p, raw)
    if fast is not None:
        vertices, faces = fast
        nv = len(vertices)
    else:  # line by line: comments, extra columns, polygons; errors name the problem
        lines = [s for s in (ln.split(b"#", 1)[0].strip() for ln in io.BytesIO(raw)) if s]
        nv, nf, i = _off_counts(p, lines)
        if len(lines) > i + nv + nf:
            raise ValueError(
                f"{p}: OFF header declares {nv} vertices and {nf} faces but {len(lines) - i} data lines "
                f"follow ({len(lines) - i - nv - nf} more); refusing rather than dropping them (fix the "
                f"counts line)"
            )
        vertices = _off_vertices(p, lines[i : i + nv])
        faces = _off_faces(p, lines[i + nv : i + nv + nf])
    if len(faces) and (faces.min() < 0 or faces.max() >= nv):
        raise ValueError(f"{p}: OFF faces index vertices outside 0..{nv - 1}")
    return vertices, faces


# --------------------------------------------------------------------------------------
# any mesh
# --------------------------------------------------------------------------------------
def read_mesh(path: PathLike) -> Tuple[np.ndarray, np.ndarray]:
    """Read a triangle mesh (``.off``, ``.obj``, ``.stl``, ``.glb``, ``.gltf``, or a ``.ply`` with faces).

    Polygons are fan-triangulated; multi-object files are merged. The reader is the
    ``mesh_reader`` the format registry holds for the extension. Errors are those of
    :func:`~gridify.io.read_points`.

    Returns:
        ``(vertices, faces)``.

    Shapes:
        vertices: ``[V, 3]`` float64; faces: ``[F, 3]`` int64 (``F`` may be 0 for an OBJ
        holding only vertices).
    """
    p = check_file(path)
    fmt = find_format(p.suffix)
    if fmt is None or fmt.mesh_reader is None:
        raise ValueError(
            f"{p}: unsupported mesh extension {p.suffix!r}; supported: {' '.join(mesh_reader_extensions())}"
        )
    return run_reader(p, fmt.mesh_reader)


def _mesh_arrays(mesh: Any) -> Tuple[np.ndarray, np.ndarray]:
    """``(vertices [V, 3] float64, faces [F > 0, 3] int64)`` of ``mesh``, checked for sample_mesh."""
    if isinstance(mesh, (tuple, list)) and len(mesh) == 2:
        vertices, faces = mesh
    elif hasattr(mesh, "vertices") and hasattr(mesh, "faces"):
        vertices, faces = mesh.vertices, mesh.faces
    else:
        raise ValueError(f"sample_mesh: mesh must be a trimesh.Trimesh or (vertices, faces), got {type(mesh).__name__}")
    vertices = np.asarray(vertices, dtype=np.float64)
    faces = np.asarray(faces, dtype=np.int64)
    if vertices.ndim != 2 or vertices.shape[1] != 3:
        raise ValueError(f"sample_mesh: vertices must have shape [V, 3], got {vertices.shape}")
    if faces.ndim != 2 or faces.shape[1] != 3 or len(faces) == 0:
        raise ValueError(f"sample_mesh: faces must have shape [F, 3] with F > 0, got {faces.shape}")
    if faces.min() < 0 or faces.max() >= len(vertices):
        raise ValueError(f"sample_mesh: faces index vertices outside 0..{len(vertices) - 1}")
    bad = ~np.isfinite(vertices).all(axis=1)
    if bad.any():
        used = bad[faces].any(axis=1)
        if used.any():
            face = int(np.flatnonzero(used)[0])
            vertex = int(faces[face][bad[faces[face]]][0])
            raise ValueError(
                f"sample_mesh: vertex {vertex} (0-based) has NaN/Inf coordinates "
                f"{vertices[vertex].tolist()} and face {face} uses it ({int(used.sum())} of "
                f"{len(faces)} faces use such vertices); a face with a NaN corner has no area"
            )
    return vertices, faces


def sample_mesh(
    mesh: Any, n: int, seed: Union[int, np.random.Generator, None] = 0, *, return_faces: bool = False
) -> Tuple[np.ndarray, ...]:
    """Sample ``n`` points uniformly (area-weighted) on a triangle mesh's surface.

    Args:
        mesh: a ``trimesh.Trimesh`` or a ``(vertices, faces)`` pair.
        n: number of points, at most ``MAX_SAMPLES`` (2**24).
        seed: an int seed or a ``numpy.random.Generator``; the same seed gives the same points.
        return_faces: also return the index of the face each point was drawn from.

    Returns:
        ``(points, normals)``: the sampled points and the unit normals of the faces they lie
        on (orientation follows the face winding); plus ``face_index`` when ``return_faces``.

    Shapes:
        points: ``[n, 3]`` float32; normals: ``[n, 3]`` float32; face_index: ``[n]`` int64.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"sample_mesh: n must be a positive integer, got {n!r}")
    if n > MAX_SAMPLES:
        raise ValueError(
            f"sample_mesh: n must be at most {MAX_SAMPLES:,} (about 130 bytes of temporaries per point), got {int(n):,}"
        )
    vertices, faces = _mesh_arrays(mesh)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    pts, normals, idx = sample_mesh_unchecked(vertices, faces, int(n), rng)
    if return_faces:
        return pts.astype(np.float32), normals.astype(np.float32), idx
    return pts.astype(np.float32), normals.astype(np.float32)


def sample_mesh_unchecked(
    vertices: np.ndarray, faces: np.ndarray, n: int, rng: np.random.Generator
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sample_mesh` without the checks, in float64: ``(points [n, 3], normals [n, 3], face index [n])``."""
    a = vertices[faces[:, 0]]  # per-face temporaries kept few: 24 bytes each per face
    cross = np.cross(vertices[faces[:, 1]] - a, vertices[faces[:, 2]] - a)
    double_area = np.linalg.norm(cross, axis=1)
    double_area[~np.isfinite(double_area)] = 0.0
    total = double_area.sum()
    if not total > 0:
        raise ValueError(
            "sample_mesh: the mesh has zero surface area (all faces degenerate, or their areas overflow float64)"
        )
    cdf = np.cumsum(double_area)
    idx = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    idx = np.minimum(idx, len(faces) - 1)
    r1 = np.sqrt(rng.random(n))
    r2 = rng.random(n)
    u = 1.0 - r1
    v = r1 * (1.0 - r2)
    w = r1 * r2
    pts = u[:, None] * a[idx] + v[:, None] * vertices[faces[idx, 1]] + w[:, None] * vertices[faces[idx, 2]]
    normals = cross[idx] / double_area[idx, None]
    return pts, normals, idx.astype(np.int64)


def surface_cloud(p: Path, vertices: np.ndarray, faces: np.ndarray, num_samples: int, seed: int) -> PointCloud:
    """``num_samples`` seeded surface samples of a mesh read from ``p``, with their face normals.

    The points stay float64 only when the vertices themselves would (see :mod:`gridify.io.cloud`).
    """
    vertices, faces = _mesh_arrays((vertices, faces))
    pts, normals, _ = sample_mesh_unchecked(vertices, faces, num_samples, np.random.default_rng(seed))
    if coordinate_dtype(vertices) != np.float64:
        pts = pts.astype(np.float32)
    return PointCloud(pts, normals=normals, source=str(p))


def _read_mesh_points(p: Path, *, num_samples: int, seed: int) -> PointCloud:
    """The reader of mesh formats: surface samples with face normals, or the bare vertices."""
    fmt = find_format(p.suffix)
    vertices, faces = fmt.mesh_reader(p)
    if len(faces) == 0:  # e.g. an OBJ holding only 'v' lines: a point cloud
        return PointCloud(vertices, source=str(p))
    return surface_cloud(p, vertices, faces, num_samples, seed)


def register_mesh_reader(
    extensions: Extensions, description: str, mesh_reader: Optional[MeshReader] = None, *, replace: bool = False
) -> Callable[..., Any]:
    """Register a mesh format: ``mesh_reader(path) -> (vertices, faces)``; a decorator when omitted.

    :func:`read_mesh` returns what ``mesh_reader`` returns; :func:`~gridify.io.read_points`
    surface-samples it (``num_samples``, ``seed``), and the extensions join ``MESH_EXTENSIONS``.
    See :func:`~gridify.io.register_reader` for ``extensions``, ``description`` and ``replace``.

    Returns:
        ``mesh_reader`` (the decorated function, unchanged).
    """

    def add(fn: MeshReader) -> MeshReader:
        register_reader(
            extensions,
            description,
            _read_mesh_points,
            options=("num_samples", "seed"),
            is_mesh=True,
            mesh_reader=fn,
            replace=replace,
        )
        return fn

    return add if mesh_reader is None else add(mesh_reader)
