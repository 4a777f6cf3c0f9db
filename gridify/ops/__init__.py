"""Low-level ops: neighbour search and scatter aggregation with automatic backends.

Optional accelerators (torch-cluster, torch-scatter) are used when installed; every op has a
native PyTorch path, and the CPU neighbour search has a KD-tree path for large inputs.

Every op is a checked public entry (``knn``, ``grid_knn``, ``scatter``, ``fps``, ``radius``, ``estimate_normals``,
``local_pca``:
arguments validated, ValueError naming the problem) over an unchecked implementation of the
same name with ``_unchecked`` appended, which library code calls once its inputs are validated.
An unchecked implementation checks nothing, sizes included: the entry that calls it checks the
allocation bounds (``check_knn_size``, ``check_grid_knn_size``, ``check_fps_size``,
``check_radius_size``) and the backend's device (``check_knn_backend``) once.
Each has a loop-based ``*_reference`` used by the tests. Their fixed-shape (traceable) forms, which the
exported files run, live beside them and are tested against the same references: ``scatter_fixed``
(:mod:`gridify.ops.scatter`) and the kNN searches between equally sized clouds and a grid's nodes,
:mod:`gridify.ops.knn_dense` (``knn_dense``, ``grid_knn_dense``).
"""

from .grid import grid_knn, grid_knn_unchecked, grid_positions
from .knn import knn, knn_reference, knn_unchecked
from .scatter import (
    accumulation_dtype,
    scatter,
    scatter_fixed,
    scatter_fixed_unchecked,
    scatter_reference,
    scatter_unchecked,
)
from .normals import (
    estimate_normals,
    estimate_normals_reference,
    estimate_normals_unchecked,
    local_pca,
    local_pca_unchecked,
)
from .sampling import fps, fps_reference, fps_unchecked, radius, radius_reference, radius_unchecked

__all__ = [
    "knn",
    "knn_unchecked",
    "knn_reference",
    "grid_knn",
    "grid_knn_unchecked",
    "grid_positions",
    "scatter",
    "scatter_unchecked",
    "scatter_reference",
    "scatter_fixed",
    "scatter_fixed_unchecked",
    "accumulation_dtype",
    "fps",
    "fps_unchecked",
    "fps_reference",
    "radius",
    "radius_unchecked",
    "radius_reference",
    "estimate_normals",
    "estimate_normals_unchecked",
    "estimate_normals_reference",
    "local_pca",
    "local_pca_unchecked",
]
