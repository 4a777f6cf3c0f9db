"""The built-in formats: one registry entry per format family, in the order of ``SUPPORTED_EXTENSIONS``.

This is the one table the dispatch of :func:`~gridify.io.read_points` /
:func:`~gridify.io.read_mesh`, the extension lists and the format table of the package
docstring are read from (see :mod:`gridify.io.registry`); importing the package runs it.
The command line's extension lists are read from this source without importing it
(``gridify._clinames.reader_extensions``): every built-in format is registered here, each
registration starting a line and spelling its extensions and ``options`` as literals.

Shapes:
    no arrays; each reader's shapes are in its module.
"""

from __future__ import annotations

from .kitti import read_kitti_bin
from .las import read_las
from .mesh import read_off, register_mesh_reader
from .npy import read_npy, read_npz
from .pcd import read_pcd
from .ply import read_ply, read_ply_mesh
from .registry import register_reader
from .text import read_text
from .trimesh_formats import read_gltf, read_trimesh

__all__: list = []

register_reader(
    ".pcd",
    "PCL point cloud, ``DATA ascii`` / ``binary`` / ``binary_compressed``",
    read_pcd,
    options=("fields", "labels_from"),
)
register_reader(
    ".ply",
    "ascii / binary little- and big-endian; a PLY with faces or triangle strips is a mesh and is surface-sampled",
    read_ply,
    options=("num_samples", "seed", "fields", "labels_from"),
    mesh_reader=read_ply_mesh,
)
register_reader(".npy", "``[N, C]`` array (``allow_pickle=False``, always)", read_npy, options=("columns",))
register_reader(
    ".npz",
    "arrays under keys such as ``pos``/``points``, ``normal``, ``color``, "
    "``label``/``part_label`` (``allow_pickle=False``)",
    read_npz,
)
register_reader(
    (".xyz", ".txt", ".pts", ".csv"),
    "text, whitespace- or comma-separated columns (see below)",
    read_text,
    options=("columns",),
)
register_reader(
    (".xyzn", ".xyzrgb"),
    "text with explicit ``x y z nx ny nz`` / ``x y z r g b`` columns",
    read_text,
    options=("columns",),
)
register_reader(
    (".las", ".laz"),
    "LiDAR (ASPRS LAS 1.0-1.4; ``.laz`` compressed) through laspy / lazrs, the "
    "optional extra ``pip install 'gridify[las]'``; dimensions such as ``intensity`` on request",
    read_las,
    options=("fields", "labels_from"),
)
register_reader(
    ".bin",
    "KITTI / SemanticKITTI LiDAR scan: headerless float32 ``x y z intensity`` rows; ``intensity`` on request",
    read_kitti_bin,
    options=("fields", "labels_from"),
)
register_mesh_reader(".off", "OFF mesh (also ``OFF490 518 0``: counts on the ``OFF`` line)", read_off)
register_mesh_reader((".obj", ".stl"), "meshes, loaded with trimesh", read_trimesh)
register_mesh_reader(
    (".glb", ".gltf"),
    "glTF 2.0 scenes (binary ``.glb``, or ``.gltf`` with embedded or "
    "beside-the-file buffers), loaded with trimesh; nodes flattened",
    read_gltf,
)
