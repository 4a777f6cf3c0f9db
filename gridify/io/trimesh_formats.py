"""Mesh formats parsed by trimesh: OBJ, STL and glTF 2.0 (``.glb`` binary, ``.gltf`` JSON).

trimesh is given the file's bytes, never its path: it cannot open other files on its own (an
OBJ's ``mtllib``, a glTF's ``uri``), and materials and textures are not loaded (no image is
decoded). A ``.gltf`` may keep its buffers in files beside it (``"uri": "model.bin"``, a plain
file name); any other reference (a folder, ``..``, a URL) is refused, and a missing one raises
:class:`~gridify.io.source.ReferencedFileNotFoundError` (a FileNotFoundError and a ValueError). The scene is flattened
into one mesh: every node that holds a mesh contributes its vertices moved by the node's
transform, ``v' = R v + t``; glTF point primitives give a point cloud.

Sizes are checked before trimesh allocates: a glTF accessor of ``count`` items of ``k``
components of ``s`` bytes needs ``count k s`` bytes, which must not exceed the bytes the file
(and its buffer files) hold; the flattened scene may hold at most
``INSTANCE_EXPANSION x`` those bytes (+ 1 MiB) of vertices and faces (24 bytes per vertex and
per face), which bounds what instancing one mesh at many nodes can make the reader allocate.

Shapes:
    vertices ``[V, 3]`` float64, faces ``[F, 3]`` int64 (``F = 0`` for a point cloud).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import re
import struct
from pathlib import Path
from typing import Any, Dict, List, Tuple
from urllib.parse import unquote

import numpy as np

from .source import ReferencedFileNotFoundError, check_file, read_file_bytes

__all__ = ["read_trimesh", "read_gltf", "INSTANCE_EXPANSION"]

#: the flattened scene may hold at most this many times the input's bytes (+ 1 MiB)
INSTANCE_EXPANSION = 64

_COMPONENTS = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT2": 4, "MAT3": 9, "MAT4": 16}
_COMPONENT_BYTES = {5120: 1, 5121: 1, 5122: 2, 5123: 2, 5125: 4, 5126: 4}
_GLB_MAGIC, _JSON_CHUNK = 0x46546C67, 0x4E4F534A


def _load_scene(p: Path, data: bytes, file_type: str, resolver: Dict[str, bytes]) -> Any:
    import trimesh  # light and always installed, but only needed here

    try:
        return trimesh.load_scene(
            io.BytesIO(data), file_type=file_type, resolver=resolver, skip_materials=True, process=False
        )
    except Exception as exc:
        raise ValueError(f"{p}: could not parse {p.suffix.lower()} mesh ({type(exc).__name__}: {exc})") from None


def _flatten(p: Path, scene: Any, budget: int) -> Tuple[np.ndarray, np.ndarray]:
    """One ``(vertices, faces)`` from every mesh (or point cloud) instance of ``scene``, at most ``budget`` bytes."""
    import trimesh

    items: List[Tuple[np.ndarray, Any]] = []
    total = 0
    for node in scene.graph.nodes_geometry:
        transform, name = scene.graph[node]
        geom = scene.geometry.get(name)
        if not isinstance(geom, (trimesh.Trimesh, trimesh.PointCloud)):
            continue  # lines, paths: no surface, no points
        faces = geom.faces if isinstance(geom, trimesh.Trimesh) else np.zeros((0, 3), np.int64)
        total += 24 * (len(geom.vertices) + len(faces))
        if total > budget:
            raise ValueError(
                f"{p}: the scene places its meshes at {len(scene.graph.nodes_geometry)} nodes: "
                f"flattened it would hold more than {budget} bytes of vertices and faces "
                f"({INSTANCE_EXPANSION}x the file's size); refusing"
            )
        items.append((np.asarray(transform, dtype=np.float64), geom))
    meshes = [it for it in items if isinstance(it[1], trimesh.Trimesh) and len(it[1].faces)]
    use = meshes or items
    vertices, faces, base = [], [], 0
    for transform, geom in use:
        v = np.asarray(geom.vertices, dtype=np.float64)
        if v.ndim != 2 or v.shape[1] != 3:
            raise ValueError(f"{p}: vertices must have shape [V, 3], got {v.shape}")
        vertices.append(v @ transform[:3, :3].T + transform[:3, 3])
        if meshes:
            faces.append(np.asarray(geom.faces, dtype=np.int64).reshape(-1, 3) + base)
        base += len(v)
    if not vertices:
        raise ValueError(f"{p}: {p.suffix.lower()} file contains no vertices (corrupt or not a mesh)")
    return np.concatenate(vertices), (np.concatenate(faces) if faces else np.zeros((0, 3), np.int64))


def _mesh(
    p: Path, data: bytes, file_type: str, resolver: Dict[str, bytes], available: int
) -> Tuple[np.ndarray, np.ndarray]:
    scene = _load_scene(p, data, file_type, resolver)
    return _flatten(p, scene, INSTANCE_EXPANSION * available + (1 << 20))


def read_trimesh(p: Path) -> Tuple[np.ndarray, np.ndarray]:
    """``(vertices, faces)`` of an ``.obj`` / ``.stl`` file, parsed by trimesh (multi-object files merged)."""
    data = read_file_bytes(p)
    return _mesh(p, data, p.suffix.lower()[1:], {}, len(data))


# --------------------------------------------------------------------------------------
# glTF
# --------------------------------------------------------------------------------------
def _glb_json(p: Path, data: bytes) -> Any:
    """The JSON chunk of a ``.glb`` file, parsed."""
    if len(data) < 20:
        raise ValueError(f"{p}: truncated GLB ({len(data)} bytes; the header alone is 20)")
    magic, version, _length, chunk_length, chunk_type = struct.unpack_from("<5I", data)
    if magic != _GLB_MAGIC:
        raise ValueError(f"{p}: not a GLB file (does not start with 'glTF')")
    if version != 2:
        raise ValueError(f"{p}: GLB version {version}; only glTF 2.0 is supported")
    if chunk_type != _JSON_CHUNK:
        raise ValueError(f"{p}: corrupt GLB (the first chunk is not JSON)")
    if 20 + chunk_length > len(data):
        raise ValueError(
            f"{p}: truncated GLB: the JSON chunk declares {chunk_length} bytes but only "
            f"{len(data) - 20} follow the header"
        )
    return _json(p, data[20 : 20 + chunk_length])


def _json(p: Path, text: bytes) -> Dict[str, Any]:
    try:
        tree = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{p}: corrupt glTF JSON ({exc})") from None
    if not isinstance(tree, dict):
        raise ValueError(f"{p}: not a glTF file (its JSON is a {type(tree).__name__}, not an object)")
    return tree


def _sidecars(p: Path, tree: Dict[str, Any]) -> Dict[str, bytes]:
    """The buffer files a ``.gltf`` names, read from its folder (plain file names only)."""
    out: Dict[str, bytes] = {}
    buffers = tree.get("buffers", [])
    for i, buf in enumerate(buffers if isinstance(buffers, list) else []):
        uri = buf.get("uri") if isinstance(buf, dict) else None
        if not isinstance(uri, str) or "base64," in uri or uri in out:
            continue
        name = unquote(uri)
        if re.search(r"[/\\:]", name) or name in ("", ".", "..") or name.startswith("."):
            raise ValueError(
                f"{p}: glTF buffer {i} refers to {uri!r}; only files in the same folder as "
                f"the .gltf (a plain file name) are read"
            )
        try:
            out[uri] = read_file_bytes(check_file(os.path.join(os.path.dirname(str(p)), name)))
        except FileNotFoundError as exc:
            raise ReferencedFileNotFoundError(
                f"{p}: glTF buffer {i} refers to {uri!r}, which is missing ({exc})"
            ) from None
    return out


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _buffer_sizes(p: Path, tree: Dict[str, Any], data: bytes, sidecars: Dict[str, bytes]) -> List[Any]:
    """The bytes each glTF buffer holds (``None`` where trimesh decides alone), decoding data URIs as trimesh does."""
    buffers = tree.get("buffers", [])
    sizes: List[Any] = []
    for i, buf in enumerate(buffers if isinstance(buffers, list) else []):
        uri = buf.get("uri") if isinstance(buf, dict) else None
        if isinstance(uri, str) and "base64," in uri:
            try:  # trimesh decodes whatever follows "base64," with the lenient decoder
                sizes.append(len(base64.b64decode(uri[uri.find("base64,") + 7 :])))
            except (binascii.Error, ValueError) as exc:
                raise ValueError(f"{p}: glTF buffer {i} has corrupt base64 data in its URI ({exc})") from None
        elif isinstance(uri, str):
            sizes.append(len(sidecars[uri]) if uri in sidecars else None)
        elif i == 0 and p.suffix.lower() == ".glb":  # the GLB's BIN chunk, cut where the file ends
            start = 20 + struct.unpack_from("<I", data, 12)[0]
            length = struct.unpack_from("<I", data, start)[0] if start + 8 <= len(data) else 0
            sizes.append(max(0, min(length, len(data) - start - 8)))
        else:
            sizes.append(None)
    return sizes


def _check_buffer_views(p: Path, tree: Dict[str, Any], sizes: List[Any]) -> None:
    """Every bufferView must name a buffer and lie inside the bytes that buffer holds."""
    views = tree.get("bufferViews", [])
    for i, view in enumerate(views if isinstance(views, list) else []):
        if not isinstance(view, dict):
            raise ValueError(f"{p}: glTF bufferView {i} is not an object")
        buf, offset, length = view.get("buffer"), view.get("byteOffset", 0), view.get("byteLength")
        if not _int(buf) or buf >= len(sizes):
            raise ValueError(f"{p}: glTF bufferView {i} names buffer {buf!r}, but the file has {len(sizes)} buffer(s)")
        if not _int(offset) or not _int(length):
            raise ValueError(f"{p}: glTF bufferView {i} has an invalid byteOffset {offset!r} / byteLength {length!r}")
        if sizes[buf] is not None and offset + length > sizes[buf]:
            raise ValueError(
                f"{p}: glTF bufferView {i} spans bytes [{offset}, {offset + length}) of buffer "
                f"{buf}, which holds {sizes[buf]} bytes"
            )


def _check_accessors(p: Path, tree: Dict[str, Any], available: int) -> None:
    """Every accessor must fit in the ``available`` bytes of buffer data (before trimesh allocates it)."""
    accessors = tree.get("accessors", [])
    for i, acc in enumerate(accessors if isinstance(accessors, list) else []):
        if not isinstance(acc, dict):
            raise ValueError(f"{p}: glTF accessor {i} is not an object")
        count, kind, ctype = acc.get("count"), acc.get("type"), acc.get("componentType")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{p}: glTF accessor {i} has an invalid count {count!r}")
        if kind not in _COMPONENTS or ctype not in _COMPONENT_BYTES:
            raise ValueError(f"{p}: glTF accessor {i} has an unknown type {kind!r} / componentType {ctype!r}")
        need = count * _COMPONENTS[kind] * _COMPONENT_BYTES[ctype]
        if need > available:
            raise ValueError(
                f"{p}: glTF accessor {i} declares {count} items ({need} bytes), more than the "
                f"{available} bytes of data the file holds"
            )


def read_gltf(p: Path) -> Tuple[np.ndarray, np.ndarray]:
    """``(vertices, faces)`` of a ``.glb`` / ``.gltf`` file (see the module docstring)."""
    data = read_file_bytes(p)
    if p.suffix.lower() == ".glb":
        tree, sidecars = _glb_json(p, data), {}
    else:
        tree = _json(p, data)
        sidecars = _sidecars(p, tree)
    available = len(data) + sum(len(b) for b in sidecars.values())
    _check_buffer_views(p, tree, _buffer_sizes(p, tree, data, sidecars))
    _check_accessors(p, tree, available)
    return _mesh(p, data, p.suffix.lower()[1:], sidecars, available)
