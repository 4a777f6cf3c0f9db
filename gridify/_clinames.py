"""The values the ``gridify`` command line's parser shows and checks, as plain literals.

The parser is built before anything heavy is imported (``gridify --help``, ``--version`` and
argument errors answer in well under a second, without PyTorch); each value here mirrors the
library's own, and ``tests/cli/test_startup.py`` holds every pair equal.
"""

from __future__ import annotations

#: :func:`gridify.io.supported_extensions` (the readers' registry, in its order)
SUPPORTED_EXTENSIONS = (
    ".pcd", ".ply", ".npy", ".npz", ".xyz", ".txt", ".pts", ".csv", ".xyzn", ".xyzrgb",
    ".las", ".laz", ".bin", ".off", ".obj", ".stl", ".glb", ".gltf",
)  # fmt: skip
#: :data:`gridify.export.EXPORT_FORMATS` and :data:`gridify.export.INSTALL_HINT`
EXPORT_FORMATS = ("onnx",)
EXPORT_HINT = "pip install 'gridify[export]'  (onnx, onnxscript, onnxruntime)"
#: :data:`gridify.vis.DEFAULT_EDGE_NODES`, :data:`~gridify.vis.DEFAULT_MAX_EDGES`, :data:`~gridify.vis.GRID_NODES`
DEFAULT_EDGE_NODES = 8
DEFAULT_MAX_EDGES = 1000
GRID_NODES = ("touched", "all")
#: the keys of :data:`gridify.datasets.scene_layouts.LAYOUTS` and its ``S3DIS_TEST_AREA``
LAYOUTS = (
    "pointcept", "s3dis", "scannet", "semantickitti", "mmdet3d_scannet", "mmdet3d_scannet_instance", "mmdet3d_s3dis",
)  # fmt: skip
S3DIS_TEST_AREA = 5
#: the finest voxel edge (metres) of the scene settings (``data.voxel_size``, ``gridify evaluate --voxel-size``):
#: finer voxels overflow the integer voxel coordinates of a scene (this is the value; the schema reads it)
MIN_VOXEL_SIZE = 1e-6
#: the keys of :data:`gridify.datasets.download.ARCHIVES` and :data:`~gridify.datasets.download.ARCHIVE_ALIASES`
ARCHIVE_NAMES = (
    "ModelNet40", "ModelNet10", "modelnet40_normal_resampled", "modelnet40_ply_hdf5_2048",
    "shapenetcore_partanno_segmentation_benchmark_v0_normal", "shapenet_part_seg_hdf5_data", "shapenetcore_partanno_v0",
)  # fmt: skip
ARCHIVE_ALIASES = ("shapenet", "shapenetpart", "shapenet_part")
