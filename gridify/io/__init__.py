"""Robust point-cloud and mesh file readers, and a PLY writer.

:func:`read_points` reads one file into a :class:`PointCloud` (numpy arrays; float32 points,
or float64 when float64 coordinates have a large offset, see :mod:`gridify.io.cloud`); :func:`read_scan` reads a
scan for a scene segmenter (every per-point field its format holds: :func:`holds_fields`); :func:`read_labels`
reads a label file (``.label``, ``.npy``, text: :mod:`gridify.io.labels`).
Supported extensions (case-insensitive; the table is built from the format registry, see
:func:`describe_formats` and :func:`register_reader`):

{formats}

Text and ``.npy`` columns are interpreted by count unless ``columns=`` names them: 3 = xyz;
4 = xyz + label (when the 4th column is integral, otherwise ignored, e.g. LiDAR intensity);
6 = xyz + normals (when the extra columns have unit norm) or xyz + colours (values in
[0, 1] or [0, 255]); 7 = the same plus a label column.

Meshes are surface-sampled (area-weighted, seeded) into ``num_samples`` points with face
normals; use :func:`read_mesh` to get the raw ``(vertices, faces)``. Formats with named
per-point fields (LAS/LAZ, PLY, PCD) keep the fields named by ``fields=`` in
:attr:`PointCloud.fields`, and ``labels_from=`` picks the field the labels come from (e.g.
``labels_from="classification"`` for LiDAR).

Every corrupt, truncated, empty or unsupported file raises :class:`ValueError` whose message
names the file and the problem; so does a path that is not a readable regular file (a
directory, a FIFO, a socket or device, a permission problem); a missing file or a broken
symbolic link raises :class:`FileNotFoundError`; a missing file that the file refers to (a
``.gltf``'s buffer file, a registered reader's sidecar) raises
:class:`ReferencedFileNotFoundError`, which is both. Sizes declared in headers are checked against
the file before anything is allocated (each reader's docstring gives its bound).

``SUPPORTED_EXTENSIONS`` and ``MESH_EXTENSIONS`` are tuples read from the registry at each
access, so they include formats registered later.

Modules: :mod:`~gridify.io.read` (read_points, read_scan), :mod:`~gridify.io.labels` (read_labels),
:mod:`~gridify.io.registry` (the format registry), :mod:`~gridify.io.builtin` (the built-in formats), one module
per format family
(:mod:`~gridify.io.text`, :mod:`~gridify.io.npy`, :mod:`~gridify.io.pcd`,
:mod:`~gridify.io.ply`, :mod:`~gridify.io.las`, :mod:`~gridify.io.mesh`,
:mod:`~gridify.io.trimesh_formats`, :mod:`~gridify.io.kitti`, :mod:`~gridify.io.raw` for headerless
binary tables), :mod:`~gridify.io.source` (opening files),
:mod:`~gridify.io.tokens` (ascii numbers), :mod:`~gridify.io.columns` (column
interpretation), :mod:`~gridify.io.fields` (named fields), :mod:`~gridify.io.normals`,
:mod:`~gridify.io.writer` and :mod:`~gridify.io.cloud` (:class:`PointCloud`).

The scene layouts (:mod:`gridify.datasets.layouts`) read their files here too, through small
readers of the format modules: :func:`~gridify.io.kitti.read_kitti_rows` / ``read_kitti_labels``,
:func:`~gridify.io.raw.read_raw_rows`, :func:`~gridify.io.text.read_text_rows` (S3DIS annotation text),
:func:`~gridify.io.ply.read_ply_vertices` (a PLY's vertex properties, a label included) and
:func:`~gridify.io.npy.read_npy_array`; the layouts only discover the files and map the labels.

Shapes:
    points ``[N, 3]`` float32 (float64 for large-offset coordinates); normals/colors ``[N, 3]``
    float32; labels ``[N]`` int64; fields name -> ``[N]``.
"""

from __future__ import annotations

from typing import List, Tuple

from . import builtin  # noqa: F401  (registers the built-in formats)
from .cloud import LARGE_OFFSET, PointCloud, centre_large_offset
from .mesh import read_mesh, register_mesh_reader, sample_mesh
from .normals import repair_normals
from .pcd import lzf_decompress
from .labels import read_labels
from .read import MAX_SAMPLES, holds_fields, read_points, read_scan
from .registry import (
    READ_OPTIONS,
    ReaderFormat,
    describe_formats,
    find_format,
    formats,
    mesh_extensions,
    reader_takes,
    register_reader,
    supported_extensions,
    unregister_reader,
)
from .source import ReferencedFileNotFoundError
from .writer import write_ply

__all__ = [
    "PointCloud",
    "LARGE_OFFSET",
    "centre_large_offset",
    "MAX_SAMPLES",
    "read_points",
    "read_scan",
    "holds_fields",
    "read_labels",
    "read_mesh",
    "sample_mesh",
    "write_ply",
    "ReferencedFileNotFoundError",
    "repair_normals",
    "SUPPORTED_EXTENSIONS",
    "MESH_EXTENSIONS",
    "lzf_decompress",
    "READ_OPTIONS",
    "ReaderFormat",
    "register_reader",
    "register_mesh_reader",
    "unregister_reader",
    "find_format",
    "reader_takes",
    "formats",
    "describe_formats",
    "supported_extensions",
    "mesh_extensions",
]

if __doc__:  # None under python -OO
    __doc__ = __doc__.replace("{formats}", describe_formats())


def __getattr__(name: str) -> Tuple[str, ...]:
    """``SUPPORTED_EXTENSIONS`` and ``MESH_EXTENSIONS``, read from the format registry."""
    if name == "SUPPORTED_EXTENSIONS":
        return supported_extensions()
    if name == "MESH_EXTENSIONS":
        return mesh_extensions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | {"SUPPORTED_EXTENSIONS", "MESH_EXTENSIONS"})
