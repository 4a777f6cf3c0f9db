"""Neural-network modules: the grid, bilateral kNN, (de-)gridification, fields, kernels."""

from .connectivity import BipartiteGraph, GraphBuilder, bilateral_knn
from .fields import RandomFourierField, SIRENField
from .flexconv import SepFlexConv3d
from .mrconv import MRConv3d, MRConvSeparable3d
from .kernels import MAGNet, RFFKernel, SIRENKernel
from .grid import RegularGrid
from .norm import ChannelLayerNorm, recalibrate_batchnorm
from .gridification import BipartiteConv, Degridification, Gridification
from .cfc import CfC, CfCCell, DeltaTGRU
from .reparam import is_reparameterizable, reparameterize_model

__all__ = [
    "RegularGrid",
    "BipartiteGraph",
    "GraphBuilder",
    "bilateral_knn",
    "BipartiteConv",
    "Gridification",
    "Degridification",
    "RandomFourierField",
    "SIRENField",
    "ChannelLayerNorm",
    "recalibrate_batchnorm",
    "SepFlexConv3d",
    "MAGNet",
    "SIRENKernel",
    "RFFKernel",
    "CfCCell",
    "CfC",
    "DeltaTGRU",
    "MRConv3d",
    "MRConvSeparable3d",
    "is_reparameterizable",
    "reparameterize_model",
]
