"""Low-level ops: neighbour search and scatter aggregation with automatic backends.

Optional accelerators (torch-cluster, torch-scatter) are used when installed; every op has a
native PyTorch path, and the CPU neighbour search has a KD-tree path for large inputs.
"""
from .grid import grid_knn, grid_positions
from .knn import knn, knn_reference
from .scatter import scatter, scatter_reference
from .sampling import fps, fps_reference, radius, radius_reference

__all__ = ["knn", "knn_reference", "grid_knn", "grid_positions", "scatter", "scatter_reference"]
__all__ += ["fps", "fps_reference", "radius", "radius_reference"]
