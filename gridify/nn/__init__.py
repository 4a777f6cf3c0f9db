"""Neural-network modules: the grid, bilateral kNN, (de-)gridification, fields, kernels."""
from .connectivity import BipartiteGraph, bilateral_knn
from .fields import RandomFourierField, SIRENField
from .grid import RegularGrid
from .norm import ChannelLayerNorm, recalibrate_batchnorm
from .gridification import BipartiteConv, Degridification, Gridification

__all__ = ["RegularGrid", "BipartiteGraph", "bilateral_knn", "BipartiteConv", "Gridification",
           "Degridification", "RandomFourierField", "SIRENField", "ChannelLayerNorm", "recalibrate_batchnorm"]
