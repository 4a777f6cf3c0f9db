"""Native point-cloud baselines that gridified models are compared against.

* :class:`PointCKConvClassifier` / :class:`PointCKConvSegmenter` (``PointCKConvNet``): the native
  continuous-kernel network of CCNN, convolving the raw points over kNN neighbourhoods
  (registered as ``"point_ckconv_classifier"``, ``"point_ckconv_segmenter"``).
* :class:`PointNet2Classifier` / :class:`PointNet2Segmenter`: PointNet++ single-scale grouping
  on PyG ``PointNetConv`` with gridify's fps / radius / knn (``"pointnet2_classifier"``,
  ``"pointnet2_segmenter"``).

All take ``(pos, x, batch)`` (and ``category`` for segmentation) like the gridified models and
are built with :func:`gridify.models.build_model`.
"""

from .point_ckconv import (
    PointCKConvBlock,
    PointCKConvClassifier,
    PointCKConvNet,
    PointCKConvSegmenter,
    PointSepCKConv,
    knn_neighbourhoods,
)
from .pointnet2 import FPModule, GlobalSAModule, PointNet2Classifier, PointNet2Segmenter, SAModule, knn_interpolate

__all__ = [
    "PointCKConvNet",
    "PointCKConvClassifier",
    "PointCKConvSegmenter",
    "PointCKConvBlock",
    "PointSepCKConv",
    "knn_neighbourhoods",
    "PointNet2Classifier",
    "PointNet2Segmenter",
    "SAModule",
    "GlobalSAModule",
    "FPModule",
    "knn_interpolate",
]
