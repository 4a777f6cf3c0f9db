"""Inference on your own point clouds: :func:`load` a trained model, :meth:`Predictor.predict`.

    import gridify
    model = gridify.load("outputs/procedural/checkpoints/model.pt")   # or a Lightning .ckpt
    pred = model.predict("scan.ply")               # a path, an [N, 3] array/tensor or a PointCloud
    pred.labels, pred.probabilities, pred.names    # [N] / [N, K] (segmentation) or [] / [K]

What :meth:`Predictor.predict` does to a cloud of ``N`` points (any ``N >= 1``):

1. **Normalization, as in training.** The whole cloud is centred on its centroid and scaled into
   the unit sphere (``p' = (p - mean(p)) / max_j |p_j - mean(p)|``, the datasets' default
   :class:`gridify.transforms.Normalize`), unless the checkpoint's config says
   ``data.normalize: false``. Normals are unchanged by this.
2. **Any N.** Models are trained on clouds of ``n = num_points`` points (from the checkpoint's
   data config). The points are first put in a canonical order that depends only on their
   content (a lexicographic sort of ``[xyz, normals]``), so the result does not depend on the
   input order (exactly, for clouds without duplicate points).

   * classification: ``N == n``: one pass over the cloud. Otherwise ``num_votes`` subsets of
     ``n`` points are drawn with a seeded generator (without replacement when ``N > n``; when
     ``N < n`` every point is kept and ``n - N`` are repeated, like the training sampler), and
     their softmax probabilities are averaged.
   * segmentation: every point is labelled. A seeded permutation splits the cloud into
     ``ceil(N / n)`` chunks of nearly equal size (at most ``n`` points each; one chunk when
     ``N <= n``), each chunk is segmented as one cloud of the batch, and the per-point
     labels/probabilities are scattered back to the input order.
   * scene segmentation (``scene_segmenter`` checkpoints, clouds in metres): nothing is normalized
     (large-offset coordinates, UTM metres, are only moved in float64 so that their bounding box is
     centred on the origin, :func:`gridify.io.centre_large_offset`, as the datasets move them); the
     features the model was trained with (``xyz``, ``color``, ``normal``, ``strength`` =
     the file's ``intensity``, ``height`` = ``z`` above the scene's 1st percentile of z, the whole-scan features of
     :mod:`gridify.datasets.scene_geometry`, ``has_strength``: a model with it labels a file without intensity too,
     with strength 0) are built from the file (or passed as ``features=``), and :func:`gridify.scene_inference.predict_scene` scores every point through
     fragments and crops of the training ``voxel_size`` and ``max_points`` (memory bounded by one
     batch of crops; ``progress=`` reports the crops done).
3. Segmentation models trained with object categories (ShapeNet-Part style) need
   ``category=`` (a name or an index); the argmax is then restricted to that category's parts
   (as the ShapeNet-Part metric does), and those parts' probabilities sum to 1.

:func:`gridify` is the functional form of the gridification layer for custom clouds.

Input conversion never loses what matters: coordinates are centred and scaled in float64 before
they are cast to float32 (UTM coordinates ~5e5 m keep their centimetres; 1e300 normalizes like
1), ragged lists, unsupported dtypes and values beyond float32 are refused with a message
naming them, and every size argument (``num_votes``, ``batch_size``) is checked against the
allocation limit before anything is allocated. A call that fails leaves the model as it was
(train/eval flags, buffers, caches: :func:`gridify.nn.state.all_or_nothing`).

The package, by concern: :mod:`gridify.api.inputs` (input coercion, normalization, canonical order,
normals), :mod:`gridify.api.prediction` (:class:`Prediction`), :mod:`gridify.api.predictor`
(:class:`Predictor`), :mod:`gridify.api.task_predictors` (what ``predict`` does for each task, found
through the task: :data:`~gridify.api.task_predictors.PREDICTORS`; each takes options of its own, e.g.
``num_votes`` a classifier's and a scene segmenter's, ``max_fragments`` a scene segmenter's, and refuses another
task's by name), :mod:`gridify.api.loading`
(:func:`load`) and :mod:`gridify.api.functional` (:func:`gridify`); every public name is importable
from ``gridify.api``.

This package needs only PyTorch and NumPy (and :mod:`gridify.io` for files).
"""

from __future__ import annotations

from .._pretrained import PRETRAINED
from .functional import gridify
from .inputs import PointsLike as PointsLike  # importable here as before (documented in api.inputs)
from .inputs import canonical_order, estimate_normals, normalize_cloud
from .loading import DEFAULT_NUM_POINTS, load, pretrained_path
from .prediction import PREDICTION_FORMATS, Prediction, read_prediction, write_prediction
from .predictor import Predictor
from .task_predictors import PREDICTORS, TaskPredictor, predictor_for

gridify.__module__ = __name__  # the function's public home: ``gridify.gridify`` is ``gridify.api.gridify``

__all__ = [
    "load",
    "PRETRAINED",
    "pretrained_path",
    "Predictor",
    "Prediction",
    "write_prediction",
    "read_prediction",
    "PREDICTION_FORMATS",
    "gridify",
    "normalize_cloud",
    "DEFAULT_NUM_POINTS",
    "canonical_order",
    "estimate_normals",
    "PREDICTORS",
    "TaskPredictor",
    "predictor_for",
]
