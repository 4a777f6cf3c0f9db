"""Seeded point-cloud transforms acting on sample dicts.

A sample is a dict holding ``pos`` (``[N, 3]``) and optionally ``normal`` (``[N, 3]``) and any
other per-point arrays (``x``, per-point part labels ``y``, ``color``...). Values may be numpy
arrays or torch tensors; a transform returns a new dict of the same kinds (inputs are never
modified in place).

* Geometric transforms (:class:`Normalize`, :class:`RandomRotateZ`, :class:`RandomScale`,
  :class:`RandomJitter`) change ``pos`` and keep ``normal`` consistent with it. They do not
  touch ``x``: the datasets of :mod:`gridify.datasets` build ``x`` from ``pos``/``normal``
  after the transform has run.
* :class:`RandomResample` draws a new sampling of the same surface: point ``i`` moves to
  ``p_i + u_i (p_n(i) - p_i)``, ``n(i)`` one of its ``k`` nearest points (:func:`gridify.ops.knn`),
  ``u_i ~ U(0, max_step)``.
* :class:`RandomDropStrength` zeroes a sample's LiDAR intensity (and sets ``has_strength`` to 0) with
  probability ``p``: a training crop then looks like a scan without intensity.
* :class:`FixedPoints` subsamples every per-point entry (an array whose first dimension is
  ``N``) with the same indices; scalars such as a 0-d class label ``y`` are kept.
* Scenes: :class:`GridSample` keeps one point per occupied voxel of edge ``voxel_size``
  (:func:`voxel_ids`: voxel of ``p`` = ``floor(p / voxel_size)``); :class:`SceneCrop` keeps the
  ``max_points`` points nearest in xy to a random centre point (:func:`crop_xy`);
  :class:`SceneSampler` chains them (and ``num_points``) on one generator for the scene datasets.
  :func:`mix_scenes` mixes two LiDAR scans in their sensor frames (:data:`SCENE_MIXES`: LaserMix's
  inclination bands, PolarMix's azimuth swap and its instance rotate-paste; the formulas are in
  :mod:`gridify.transforms.scene`).

Every transform validates its parameters when built and its sample once when called: a dict
with a floating ``pos [N, 3]`` (torch: float16/bfloat16/float32/float64) without NaN/Inf; when present,
a ``normal`` of the same kind (floating ``[N, 3]``, finite), ``x``/``color``/``colors``/``rgb``
arrays with ``N`` rows and ``y``/``label``/``labels`` arrays with ``N`` rows (per-point labels) or
a single row (a per-sample label; scalars are fine). Bad input raises a ``ValueError`` naming
the transform, the argument or entry and the problem; so does a parameter that would make the
result overflow its dtype (the results of :class:`RandomRotate`, :class:`RandomScale` and
:class:`RandomJitter` are checked to be finite). :func:`centre_and_scale` is the
normalization shared with :func:`gridify.api.normalize_cloud`; it works in float64 and never
overflows (coordinates of 1e300 normalize like coordinates of 1); :func:`centre_and_scale_unchecked`
is the same rule on batched float64 tensors, traceable (a zero-extent cloud goes to the origin).

Randomness: every random transform owns a ``numpy.random.Generator`` seeded from ``seed``
(or uses the ``generator`` passed in), so two runs with the same seed see the same
augmentations. Inside a ``torch.utils.data.DataLoader`` worker the generator is re-seeded from
``(seed, worker seed)`` so workers do not repeat each other's augmentations; worker seeds come
from torch's RNG, so runs stay reproducible under ``torch.manual_seed``.

Modules: :mod:`~gridify.transforms.base` (the sample, its check, :class:`RandomTransform`,
:class:`Compose`), :mod:`~gridify.transforms.normalize` (the normalization rule and its names),
:mod:`~gridify.transforms.up_axis` (a cloud's up axis to z), :mod:`~gridify.transforms.augment`
(the augmentations), :mod:`~gridify.transforms.sampling` (:class:`FixedPoints`, voxels,
:class:`GridSample`) and :mod:`~gridify.transforms.scene` (scene crops, the scene sampler, scan mixing);
every public name is importable from ``gridify.transforms``. The transforms sit above :mod:`gridify.ops`
in the layers: :class:`RandomResample`'s neighbours are :func:`gridify.ops.knn`'s.

Shapes:
    pos, normal ``[N, 3]``; every per-point entry ``[N, ...]`` (the transforms' own docstrings give
    what each returns).
"""

from __future__ import annotations

from .augment import (
    MAX_DEGREES,
    STRENGTH_KEYS,
    RandomDropStrength,
    RandomFlip,
    RandomJitter,
    RandomPointDropout,
    RandomResample,
    RandomRotate,
    RandomRotateZ,
    RandomScale,
    rotation_matrix,
)
from .base import Compose, RandomTransform, content_rng, point_keys
from .base import Sample as Sample  # documented in base (a type alias, not in __all__: as before)
from .normalize import (
    NORMALIZATIONS,
    Normalize,
    centre_and_scale,
    centre_and_scale_unchecked,
    normalization_name,
    normalization_of_record,
    normalization_record,
)
from .sampling import MAX_VOXEL_COORD, FixedPoints, GridSample, voxel_ids, voxel_order
from .scene import (
    CROP_CENTRES,
    PASTE_CLASS_NAMES,
    SCENE_MIXES,
    SceneCrop,
    SceneSampler,
    crop_centre,
    crop_xy,
    crop_xy_unchecked,
    mix_scenes,
    mix_scenes_unchecked,
)
from .up_axis import UP_AXES, check_up_axis, to_z_up, up_axis_rotation

__all__ = [
    "Compose",
    "Normalize",
    "FixedPoints",
    "RandomRotateZ",
    "RandomRotate",
    "MAX_DEGREES",
    "RandomScale",
    "RandomFlip",
    "RandomJitter",
    "RandomPointDropout",
    "RandomDropStrength",
    "STRENGTH_KEYS",
    "RandomResample",
    "RandomTransform",
    "point_keys",
    "rotation_matrix",
    "UP_AXES",
    "check_up_axis",
    "up_axis_rotation",
    "to_z_up",
    "centre_and_scale",
    "centre_and_scale_unchecked",
    "NORMALIZATIONS",
    "normalization_name",
    "normalization_record",
    "normalization_of_record",
    "GridSample",
    "SceneCrop",
    "SceneSampler",
    "voxel_ids",
    "voxel_order",
    "MAX_VOXEL_COORD",
    "crop_xy",
    "crop_centre",
    "CROP_CENTRES",
    "crop_xy_unchecked",
    "content_rng",
    "SCENE_MIXES",
    "PASTE_CLASS_NAMES",
    "mix_scenes",
    "mix_scenes_unchecked",
]
