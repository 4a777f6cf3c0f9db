r"""Whole-scene semantic segmentation: every point of a scene scored under a point budget.

A scene (a room, a LiDAR scan) has more points than one forward pass should take, and training
saw grid-subsampled crops of it. :func:`predict_scene` covers the scene with such crops and
averages the class probabilities each point received:

.. math::

    p(y \mid j) = \frac{1}{|V_j|} \sum_{c \in V_j} \operatorname{softmax}(f(c))_j

where ``V_j`` is the set of crops (over all ``votes`` views) holding point ``j`` and
``softmax(f(c))_j`` the model's class probabilities for ``j`` inside crop ``c``.

The crops (:func:`scene_fragments`):

* **Fragments.** With ``voxel_size``, the points are grouped by voxel (edge ``voxel_size``, the
  grid :class:`~gridify.transforms.GridSample` subsamples with at training time) in a seeded random
  order within each voxel; fragment ``i`` takes the ``(i mod n_v)``-th point of every voxel ``v``
  (``n_v`` points), for ``i < min(max_v n_v, max_fragments)``. Every fragment is a grid subsample
  like the training items. With ``max_fragments=None`` every point is in at least one fragment;
  with a cap (default 4: dense voxels next to a LiDAR sensor hold hundreds of points, and a
  fragment per point of the densest voxel would run the model hundreds of times over the scan),
  a point left out of every fragment takes the mean probabilities of the points of its voxel that
  were scored (fragment 0 holds one point of every voxel, so every voxel has one), the "nearest kept
  point" rule of the field. Without ``voxel_size`` the whole scene is one fragment.
* **Crops.** A fragment of more than ``max_points`` points is split into crops of the
  ``max_points`` points nearest in xy to a centre (:func:`~gridify.transforms.crop_xy`, the crop of
  :class:`~gridify.transforms.SceneCrop`); centres are drawn (seeded) among the points no crop
  holds yet, until every point of the fragment is in a crop. Without ``max_points`` a fragment is
  one crop.
* **Votes.** View 0 is the scene as given; view ``v > 0`` of ``votes`` is rotated about the vertical
  axis through the scene's xy centroid by ``2 pi v / votes`` (evenly spaced angles; ``x`` is passed
  unchanged), with its own fragments and crops.

Each crop goes through ``model(pos_crop, x_crop, batch_crop)`` (``batch_size`` crops per call,
a PyG-style batch vector) under ``torch.no_grad`` with the model in eval mode (its mode is
restored afterwards). :func:`predict_scene_reference` is the plain loop (one crop per call, one
point at a time) the tests compare against; :func:`evaluate_scenes` scores every original
point of every scene of a dataset with :class:`~gridify.metrics.SegmentationIoU`.

float64 ``pos`` whose coordinates have a large offset (UTM metres) is first moved in float64 so that its
bounding box is centred on the origin (:func:`gridify.io.centre_large_offset`): the crops keep their
millimetres whatever dtype the model runs in (the fragments then follow the moved grid).

Shapes:
    pos ``[N, 3]`` (metres), x ``[N, F]`` -> probabilities ``[N, C]`` float32 (rows sum to 1);
    a crop: pos ``[n, 3]``, x ``[n, F]``, batch ``[n]`` -> logits ``[n, C]``, ``n <= max_points``.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from ._checks import (
    check_alloc,
    check_bool,
    check_finite,
    check_int,
    check_integer,
    check_number,
    check_points,
    check_tensor,
    fail,
    format_bytes,
    is_int,
    max_alloc_bytes,
    warn_at_caller,
)
from ._progress import resolve_progress
from .io.cloud import centre_large_offset
from .transforms import MAX_VOXEL_COORD, SceneSampler, crop_xy_unchecked, rotation_matrix, voxel_ids, voxel_order

__all__ = [
    "MAX_FRAGMENTS",
    "check_max_fragments",
    "scene_defaults",
    "check_voxel_range",
    "check_scene_output",
    "check_scene_cost",
    "scene_cost",
    "SceneCost",
    "crop_forward_bytes",
    "predict_scene",
    "predict_scene_checked",
    "predict_scene_unchecked",
    "predict_scene_reference",
    "scene_fragments",
    "scene_fragments_unchecked",
    "evaluate_scenes",
]

Model = Callable[[Tensor, Tensor, Tensor], Tensor]
#: fragments per view by default (see the module docstring)
MAX_FRAGMENTS = 4


def check_max_fragments(where: str, value: Any) -> Optional[int]:
    """``max_fragments`` as every scene entry takes it: a positive integer (fragments per view at most), or
    ``None`` / ``"all"`` (as many as the densest voxel has points: every point in a fragment); else
    ValueError naming ``where``."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "all"):
        return None
    if not is_int(value) or value < 1:
        fail(where, f"max_fragments must be a positive integer, None or 'all', got {value!r}")
    return int(value)


def scene_defaults(info: Optional[Mapping[str, Any]]) -> Tuple[int, Optional[int]]:
    """``(votes, max_fragments)`` of a whole-scan prediction when the caller gives neither: a checkpoint's
    ``info["votes"]`` / ``info["max_fragments"]`` where it records them (``"all"``: None, every point),
    else 1 view and :data:`MAX_FRAGMENTS` fragments. What ``Predictor.predict``, ``gridify evaluate`` and
    the exported runner use for a scene model."""
    info = info or {}
    votes, cap = info.get("votes"), info.get("max_fragments")
    votes = 1 if votes is None else check_int("scene_defaults", "info['votes']", votes)
    return votes, (MAX_FRAGMENTS if cap is None else check_max_fragments("scene_defaults", cap))


def _check_scene(where: str, model: Any, pos: Any, x: Any) -> Tuple[Tensor, Tensor]:
    """``(pos, x)`` of one scene, validated (``x`` defaults to ``pos``)."""
    if not callable(model):
        fail(where, f"model must be callable (model(pos, x, batch) -> logits), got {type(model).__name__}")
    pos = check_points(where, "pos", pos)
    if pos.size(0) == 0:
        fail(where, "pos has no points (an empty scene has nothing to predict)")
    check_finite(where, "pos", pos)
    pos = _centred(pos)
    if x is None:
        return pos, pos
    x = check_tensor(where, "x", x)
    if x.dim() != 2 or x.size(0) != pos.size(0):
        fail(where, f"x must have shape [N, F] with N={pos.size(0)} (one row per point of pos), got {tuple(x.shape)}")
    if x.device != pos.device:
        fail(where, f"x is on {x.device} but pos is on {pos.device}")
    if not x.is_floating_point():
        fail(where, f"x must be a floating-point tensor, got dtype {x.dtype}")
    check_finite(where, "x", x)
    return pos, x


def _centred(pos: Tensor) -> Tensor:
    """float64 ``pos`` with a large offset (UTM metres) moved in float64 so that its bounding box is centred on
    the origin (:func:`gridify.io.centre_large_offset`): the crops a model gets in float32 keep their
    millimetres. Any other ``pos`` as given."""
    if pos.dtype != torch.float64:
        return pos
    moved, offset = centre_large_offset(pos.detach().cpu().numpy())
    return torch.from_numpy(moved).to(pos.device) if offset.any() else pos


def _check_settings(where: str, voxel_size: Any, max_points: Any, seed: Any) -> Tuple[Optional[float], Optional[int]]:
    voxel_size = check_number(where, "voxel_size", voxel_size, allow_none=True)
    max_points = check_int(where, "max_points", max_points, allow_none=True)
    check_int(where, "seed", seed, 0)
    return voxel_size, max_points


def check_voxel_range(where: str, pos: Any, voxel_size: Optional[float], what: str = "the scene") -> None:
    """A scene whose fragments' grid of ``voxel_size`` metres has more than 2^52 voxels along an axis (coordinates
    far too large for the unit, e.g. not metres) is refused naming ``where``, the extent and the voxel size,
    rather than by the voxel step deep inside; one wider than ``MAX_PLAUSIBLE_VOXELS`` (100,000) voxels along an
    axis is labelled with a warning about its unit (``warn_off_metric_scale``)."""
    if voxel_size is None or len(pos) == 0:
        return
    p = pos.detach().abs().max() if isinstance(pos, Tensor) else np.abs(np.asarray(pos)).max()
    reach = float(p)
    if not math.isfinite(reach / voxel_size) or reach / voxel_size >= MAX_VOXEL_COORD:
        fail(
            where,
            f"coordinates up to {reach:.3g} m are too large for voxel_size={voxel_size:g} m (the scene's "
            f"fragments; more than 2^52 voxels along an axis): are they in metres?",
        )
    warn_off_metric_scale(where, pos, voxel_size, what)


#: a scene wider than this many voxels along an axis is most likely not in metres (10 km at 0.1 m voxels; a
#: 160 m LiDAR scan in millimetres spans 1.6 million voxels of 0.1 m, in centimetres 160,000)
MAX_PLAUSIBLE_VOXELS = 100_000


def warn_off_metric_scale(where: str, pos: Any, voxel_size: Optional[float], what: str = "the scene") -> None:
    """Warn, naming ``where`` and ``what`` (the scan's file), the extent and the unit to try, when a scene spans more than
    :data:`MAX_PLAUSIBLE_VOXELS` voxels of ``voxel_size`` along an axis: a scan in millimetres or centimetres
    given to a model trained in metres is labelled without any other sign (its crops hold a few points of a
    huge area). The extent is max - min, so a large offset (UTM metres) does not count, and neither do a few stray rows
    far from the rest (twice the box of the middle half of the rows, :func:`gridify.io.cloud.bulk_box`, decides)."""
    if voxel_size is None or len(pos) < 2:
        return
    if isinstance(pos, Tensor):
        p = pos.detach()
        span = (p.amax(0).double() - p.amin(0).double()).cpu().numpy()  # float16 millimetres overflow a difference
    else:
        p = np.asarray(pos)
        span = p.max(0).astype(np.float64) - p.min(0)
    widest = float(span.max())
    if widest / voxel_size <= MAX_PLAUSIBLE_VOXELS:
        return
    from .io.cloud import bulk_box  # noqa: PLC0415

    rows = p.cpu().double().numpy() if isinstance(p, Tensor) else np.asarray(p, np.float64)
    rows = rows[np.isfinite(rows).all(1)]
    if len(rows) and float((np.subtract(*bulk_box(rows)[::-1])).max()) * 2 / voxel_size <= MAX_PLAUSIBLE_VOXELS:
        return  # a few stray rows far away (a (0, 0, 0) placeholder beside a UTM scan), not a unit: read_points names them
    axis = "xyz"[int(span.argmax())]
    warn_at_caller(
        f"{where}: {what} spans {widest:.4g} along {axis}, {widest / voxel_size:.3g} voxels of the model's "
        f"voxel_size={voxel_size:g} m: scene models take metres; if the coordinates are millimetres or "
        f"centimetres, divide them by 1000 or 100 first (the crops of a scan in the wrong unit hold a few points "
        f"of a huge area and come out mislabelled)"
    )


# ---------------------------------------------------------------------------------------------
# what a whole-scene prediction will cost, sized before it starts
# ---------------------------------------------------------------------------------------------
#: bytes per point of a scene that a whole-scene prediction holds besides its crops' forward passes (float64
#: coordinates of a view for its fragments, voxel ids and their sort, a rotated view, counts), and per point and
#: class (the float32 sums, the means, the output and its check)
SCAN_BYTES_PER_POINT, SCAN_BYTES_PER_CLASS = 160, 13
#: bytes per point of a view's fragments (an int64 index per point in a crop: numpy and torch copies, crops
#: overlapping about 2-3x, the allocator's share)
CROP_ROW_BYTES = 192
#: float32 tensors of the grid's size (nodes x grid channels) live at once in a crop's forward pass
GRID_TENSORS = 12


def _model_widths(model: Any) -> Tuple[int, int, int, int]:
    """``(classes, grid nodes, grid channels, k)`` of a scene model, read from its attributes (0 where it has none:
    a plain callable, an exported file)."""

    def whole(v: Any) -> int:
        return int(v) if is_int(v) and v > 0 else 0

    classes = whole(getattr(model, "num_classes", None)) or len(getattr(model, "class_names", None) or [])
    r = getattr(model, "resolution", None)
    nodes = math.prod(whole(v) for v in r) if isinstance(r, (tuple, list)) else whole(r) ** 3
    layer = getattr(model, "gridify", None)
    return classes, nodes, whole(getattr(layer, "out_channels", None)), whole(getattr(layer, "k", None))


def crop_forward_bytes(model: Any, points: int, width: int) -> int:
    """Bytes one crop of ``points`` points (``width`` features) takes through ``model`` at the peak of its forward
    pass (no gradients): :data:`GRID_TENSORS` grid-sized float32 tensors and, per point, the messages of its ``k``
    grid edges and its features and logits. Calibrated on the shipped ``semantickitti`` model (a 64 x 64 x 8 grid of
    64 channels, k = 6): it measured 74, 80, 126 and 206 MiB for crops of 4,096, 16,384, 65,536 and 131,072 points
    (peak RSS over a warm process, one thread per core of an AMD EPYC); this gives 104, 126, 218 and 341 MiB."""
    classes, nodes, channels, k = _model_widths(model)
    return 4 * (GRID_TENSORS * nodes * channels + points * (k * channels + 64 + 2 * (width + classes) + 3))


def _fragment_counts(pos: Any, voxel_size: Optional[float], max_fragments: Optional[int]) -> Tuple[int, int]:
    """``(fragments per view, voxels)`` of a scene: each fragment holds one point of every voxel, so a view's
    fragments hold ``fragments x voxels`` points (one fragment of the whole scene without ``voxel_size``)."""
    n = int(pos.shape[0])
    if voxel_size is None or n == 0:
        return 1, n
    p = pos.detach().cpu().double().numpy() if isinstance(pos, Tensor) else np.asarray(pos, np.float64)
    inverse, v = voxel_ids(p, voxel_size, "scene_fragments")
    densest = int(np.bincount(inverse).max()) if v else 0
    return (densest if max_fragments is None else min(densest, max_fragments)), int(v)


class SceneCost(NamedTuple):
    """What a whole-scene prediction holds (:func:`scene_cost`): ``fragments`` per view of ``voxels`` voxels (a view's
    fragments hold ``rows = fragments x voxels`` points), crops of up to ``crop`` points, about ``crops`` per view;
    ``scan_bytes`` for the scene's own arrays and ``forward_bytes`` per crop in a model call."""

    points: int
    fragments: int
    voxels: int
    crop: int
    crops: int
    scan_bytes: int
    forward_bytes: int

    @property
    def rows(self) -> int:
        return self.fragments * self.voxels

    def peak(self, clouds: int) -> int:
        """The estimated peak bytes with ``clouds`` crops per model call."""
        return self.scan_bytes + clouds * self.forward_bytes


def scene_cost(
    model: Any,
    pos: Any,
    width: int,
    voxel_size: Optional[float],
    max_points: Optional[int],
    max_fragments: Optional[int],
    classes: Optional[int] = None,
) -> SceneCost:
    """The :class:`SceneCost` of a whole-scene prediction of ``pos [N, 3]`` (``width`` features, ``classes`` outputs:
    read from the model when None): the scene's arrays (:data:`SCAN_BYTES_PER_POINT`, :data:`SCAN_BYTES_PER_CLASS`
    per class, :data:`CROP_ROW_BYTES` per point of a view's fragments) and a crop's forward pass
    (:func:`crop_forward_bytes`). Measured against it: the shipped ``semantickitti`` model on the 124,668-point
    SemanticKITTI scan of mmdetection3d (60,152 voxels of 0.1 m; peak RSS over ``Predictor.predict`` in a warm
    process, 2 threads of an AMD EPYC, two runs where given), its defaults (4 views, 1 fragment, 8 crops per call):
    781 and 822 MiB, estimated 1.05 GiB; 1 view of 4 fragments, 8 crops per call: 809 MiB (1.08 GiB); 1 crop per
    call: 147 and 194 MiB (219 MiB); 1 view, 1 fragment, 1 crop per call: 116 MiB (186 MiB)."""
    n = int(pos.shape[0])
    classes = _model_widths(model)[0] if classes is None else classes
    fragments, voxels = _fragment_counts(pos, voxel_size, max_fragments)
    crop = min(voxels, n if max_points is None else max_points)  # a fragment holds one point per voxel
    rows = fragments * voxels
    return SceneCost(
        points=n,
        fragments=fragments,
        voxels=voxels,
        crop=crop,
        crops=max(fragments, math.ceil(3 * rows / max(crop, 1))),  # a view's crops (overlapping 2-3x)
        scan_bytes=n * (SCAN_BYTES_PER_POINT + SCAN_BYTES_PER_CLASS * classes) + CROP_ROW_BYTES * rows,
        forward_bytes=crop_forward_bytes(model, crop, width),
    )


def check_scene_cost(
    where: str,
    model: Any,
    pos: Any,
    width: int,
    voxel_size: Optional[float],
    max_points: Optional[int],
    votes: int,
    batch_size: int,
    max_fragments: Optional[int],
    *,
    classes: Optional[int] = None,
    source: Optional[str] = None,
    votes_arg: str = "votes",
) -> int:
    """Size a whole-scene prediction before it starts (:func:`scene_cost`) and refuse, naming ``where``, what exceeds
    the allocation limit (:func:`gridify._checks.check_alloc`: ``GRIDIFY_MAX_ALLOC_BYTES``, else the memory granted),
    with the figure and the settings that lower it. Returns the crops per model call to use: ``batch_size``, or
    fewer where a batch of that many would not fit (the crops are independent: the same probabilities).

    * the work: every view's fragments run through the model, ``votes x fragments x voxels`` crop points, sized as an
      int64 index each (as a classifier's vote subsets are): a huge ``votes`` is refused before the first view;
    * the peak: the scene's own arrays and one batch of crops through the model."""
    cost = scene_cost(model, pos, width, voxel_size, max_points, max_fragments, classes)
    what = source or "the scene"
    cap = "'all'" if max_fragments is None else str(max_fragments)
    frag_words = (
        f"{cost.fragments} fragment(s) of {cost.voxels:,} voxels of {voxel_size:g} m (max_fragments={cap}, "
        f"--max-fragments)"
        if voxel_size is not None
        else f"the whole scene of {cost.points:,} points"
    )
    device = pos.device if isinstance(pos, Tensor) else None
    check_alloc(
        where,
        f"{votes_arg}={votes} (--votes) views x {frag_words} of {what} ({float(votes) * cost.rows:.3g} crop points "
        f"to run through the model, an int64 index each)",
        8 * votes * cost.rows,
        device,
        hint="lower --votes or --max-fragments",
    )
    room = (max_alloc_bytes(device)[0] - cost.scan_bytes) // max(cost.forward_bytes, 1)
    fits = max(1, min(batch_size, cost.crops, room))
    coarser = f", or a coarser voxel size (now {voxel_size:g} m; evaluate: --voxel-size)" if voxel_size else ""
    check_alloc(
        where,
        f"a whole-scene prediction of the {cost.points:,} points of {what} ({format_bytes(cost.scan_bytes)} for the "
        f"scene's sums and {frag_words}, and {fits} crop(s) of up to {cost.crop:,} points through the model at a "
        f"time, {format_bytes(cost.forward_bytes)} each)",
        cost.peak(fits),
        device,
        hint=f"lower it with fewer fragments per view (--max-fragments, max_fragments=){coarser}; --votes sets the "
        f"time, not the peak (one view at a time)",
    )
    return int(fits)


def scene_fragments(
    pos: Tensor,
    voxel_size: Optional[float] = None,
    max_points: Optional[int] = None,
    seed: int = 0,
    max_fragments: Optional[int] = None,
) -> List[Tensor]:
    """The crops of one scene (see the module docstring): index tensors into ``pos``, each of at
    most ``max_points`` points, together covering every point (with ``max_fragments=None``; a cap
    covers every voxel).

    Shapes:
        pos ``[N, 3]`` -> a list of ``[n_i]`` int64 tensors (sorted, on ``pos``'s device).
    """
    where = "scene_fragments"
    pos = check_points(where, "pos", pos)
    check_finite(where, "pos", pos)
    voxel_size, max_points = _check_settings(where, voxel_size, max_points, seed)
    max_fragments = check_max_fragments(where, max_fragments)
    check_voxel_range(where, pos, voxel_size)
    return scene_fragments_unchecked(pos, voxel_size, max_points, np.random.default_rng([int(seed)]), max_fragments)


def scene_fragments_unchecked(
    pos: Tensor,
    voxel_size: Optional[float],
    max_points: Optional[int],
    rng: np.random.Generator,
    max_fragments: Optional[int] = None,
) -> List[Tensor]:
    """:func:`scene_fragments` on validated inputs, drawing from ``rng``."""
    p = pos.detach().cpu().double().numpy()
    if voxel_size is None:
        fragments = [np.arange(len(p))]
    else:
        inverse, v = voxel_ids(p, voxel_size, "scene_fragments")
        order, start, count = voxel_order(inverse, v, rng)
        num = int(count.max()) if v else 0
        num = num if max_fragments is None else min(num, max_fragments)
        fragments = [np.sort(order[start + i % count]) for i in range(num)]
    crops: List[np.ndarray] = []
    for frag in fragments:
        crops += _split_fragment(p, frag, max_points, rng)
    return [torch.as_tensor(c, dtype=torch.long, device=pos.device) for c in crops]


def _split_fragment(
    p: np.ndarray, frag: np.ndarray, max_points: Optional[int], rng: np.random.Generator
) -> List[np.ndarray]:
    """Crops of ``max_points`` points nearest in xy to centres drawn among the uncovered points."""
    if max_points is None or len(frag) <= max_points:
        return [frag]
    q = p[frag]
    covered = np.zeros(len(frag), dtype=bool)
    candidates = rng.permutation(len(frag))
    crops, at = [], 0
    while at < len(candidates):
        centre = int(candidates[at])
        at += 1
        if covered[centre]:
            continue
        sel = crop_xy_unchecked(q, centre, max_points)
        covered[sel] = True
        crops.append(frag[sel])
    return crops


def _view(pos: Tensor, vote: int, votes: int) -> Tensor:
    """View ``vote`` of ``votes``: the scene as given (0), else rotated about z through the xy centroid by
    ``2 pi vote / votes`` (evenly spaced angles)."""
    if vote == 0:
        return pos
    m = torch.as_tensor(rotation_matrix(2, 2.0 * math.pi * vote / votes), dtype=torch.float64, device=pos.device)
    centre = pos.double().mean(0)
    centre[2] = 0.0
    return ((pos.double() - centre) @ m.T + centre).to(pos.dtype)


def predict_scene(
    model: Model,
    pos: Tensor,
    x: Optional[Tensor] = None,
    *,
    voxel_size: Optional[float] = None,
    max_points: Optional[int] = None,
    votes: int = 1,
    seed: int = 0,
    batch_size: int = 1,
    max_fragments: Optional[int] = MAX_FRAGMENTS,
    progress: Any = None,
) -> Tensor:
    """Mean softmax probabilities of every point of one scene (see the module docstring).

    Args:
        model: ``model(pos [n, 3], x [n, F], batch [n]) -> logits [n, C]`` (a ``torch.nn.Module``
            is put in eval mode for the call and restored after).
        pos: the scene's points (metres); x: their features (default: ``pos``).
        voxel_size: the fragments' grid (None: one fragment, the whole scene).
        max_points: the largest crop (None: a fragment is one crop).
        votes: views (the first as given, view ``v`` rotated about z by ``2 pi v / votes``).
        seed: seeds the fragments and crops.
        batch_size: crops per model call.
        max_fragments: fragments per view at most (default 4; ``None`` or ``"all"``: as many as the densest
            voxel has points; with a cap the points left out take their voxel's mean, see the module
            docstring). 1 makes about a quarter of the model calls of 4 on a LiDAR scan.
        progress: called as ``progress(crops_done, crops_total)`` after every model call; ``True``: a bar
            on stderr; ``None`` / ``False``: silent.

    Memory: the scene's ``[N, C]`` sums, the crops' indices (about ``min(max_fragments, max_v n_v)``
    x ``N`` int64 per view) and one batch of crops at a time. Both the work of the views (``votes x fragments x
    voxels`` crop points) and the peak are sized before the first crop (:func:`check_scene_cost`): beyond the
    allocation limit (``GRIDIFY_MAX_ALLOC_BYTES``, else the memory granted) the call is refused with the figure,
    and a ``batch_size`` whose crops would not fit runs fewer crops per call (the same probabilities).

    Shapes:
        pos ``[N, 3]``, x ``[N, F]`` -> ``[N, C]`` float32 on ``pos``'s device.
    """
    return predict_scene_checked(
        "predict_scene", model, pos, x, voxel_size, max_points, votes, seed, batch_size, max_fragments, progress
    )


def predict_scene_checked(
    where: str,
    model: Model,
    pos: Any,
    x: Any,
    voxel_size: Any,
    max_points: Any,
    votes: Any,
    seed: Any,
    batch_size: Any,
    max_fragments: Any,
    progress: Any,
) -> Tensor:
    """:func:`predict_scene` for a public entry named ``where`` (e.g. ``OnnxSceneModel.predict``): every argument
    checked with that name in the messages, then :func:`predict_scene_unchecked`."""
    pos, x = _check_scene(where, model, pos, x)
    voxel_size, max_points = _check_settings(where, voxel_size, max_points, seed)
    check_voxel_range(where, pos, voxel_size)
    votes = check_int(where, "votes", votes)
    batch_size = check_int(where, "batch_size", batch_size)
    max_fragments = check_max_fragments(where, max_fragments)
    progress = resolve_progress(where, progress, "predict_scene")
    batch_size = check_scene_cost(
        where, model, pos, x.size(1), voxel_size, max_points, votes, batch_size, max_fragments
    )
    probs = predict_scene_unchecked(
        model, pos, x, voxel_size, max_points, votes, int(seed), batch_size, max_fragments, progress
    )
    check_scene_output(where, probs, pos, x)
    return probs


def check_scene_output(
    where: str, probs: Any, pos: Any, x: Any, features: Optional[List[str]] = None, source: Optional[str] = None
) -> None:
    """Refuse, naming ``where``, the count and the first row, probabilities ``[N, C]`` holding NaN/Inf: an input
    far outside the training range overflowed inside the model, and argmax would label those points silently.
    The message gives the largest ``|feature|`` per column of ``x [N, F]`` (named by ``features``) and of ``pos``."""
    p = probs.detach().float().cpu().numpy() if isinstance(probs, Tensor) else np.asarray(probs, np.float32)
    finite = np.isfinite(p).all(1)
    if finite.all():
        return
    xs = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
    ps = pos.detach().cpu().numpy() if isinstance(pos, Tensor) else np.asarray(pos)
    span = ", ".join(f"{float(np.abs(c).max()):.3g}" for c in xs.T) if xs.ndim == 2 and xs.shape[1] else "none"
    named = f" of {list(features)}" if features else ""
    fail(
        where,
        f"the model's output is NaN/Inf for {int((~finite).sum())} of {len(finite)} points of "
        f"{source or 'the cloud'} (first: row {int(np.flatnonzero(~finite)[0])}): its input lies outside "
        f"the range the model was trained on (largest |feature| per column{named}: "
        f"{span}; coordinates up to {float(np.abs(ps).max()):.3g} m)",
    )


def _iter_vote_crops(
    pos: Tensor,
    voxel_size: Optional[float],
    max_points: Optional[int],
    votes: int,
    seed: int,
    max_fragments: Optional[int] = None,
) -> Iterator[Tuple[Tensor, List[Tensor]]]:
    """``(view pos, its crops)`` of every vote, one view at a time (the memory of one view's crop indices,
    whatever ``votes``); vote ``v`` draws from ``default_rng([seed, v])``."""
    for v in range(votes):
        rng = np.random.default_rng([seed, v])
        view = _view(pos, v, votes)
        yield view, scene_fragments_unchecked(view, voxel_size, max_points, rng, max_fragments)


def _fill_uncovered(pos: Tensor, voxel_size: Optional[float], total: Tensor, count: Tensor) -> Tensor:
    """``total / count`` per point; a point no crop held (``count == 0``, only with a fragment cap)
    takes the mean probabilities of the scored points of its voxel (of the scene as given)."""
    covered = count > 0
    if bool(covered.all()) or voxel_size is None:
        return total / count.clamp_min(1).unsqueeze(1)
    inverse, v = voxel_ids(pos.detach().cpu().double().numpy(), voxel_size, "predict_scene")
    inv = torch.as_tensor(inverse, device=total.device)
    mean = total / count.clamp_min(1).unsqueeze(1)
    vsum = torch.zeros(v, total.size(1), dtype=total.dtype, device=total.device).index_add_(
        0, inv[covered], mean[covered]
    )
    vcnt = torch.zeros(v, dtype=total.dtype, device=total.device).index_add_(
        0, inv[covered], torch.ones(int(covered.sum()), dtype=total.dtype, device=total.device)
    )
    mean[~covered] = vsum[inv[~covered]] / vcnt[inv[~covered]].clamp_min(1).unsqueeze(1)
    return mean


def _logits(model: Model, pos: Tensor, x: Tensor, batch: Tensor) -> Tensor:
    out = model(pos, x, batch)
    if not isinstance(out, Tensor) or out.dim() != 2 or out.size(0) != pos.size(0) or out.size(1) == 0:
        shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        fail(
            "predict_scene",
            f"model must return per-point logits [n, C] for a crop of n={pos.size(0)} points, got {shape}",
        )
    return out


def predict_scene_unchecked(
    model: Model,
    pos: Tensor,
    x: Tensor,
    voxel_size: Optional[float],
    max_points: Optional[int],
    votes: int,
    seed: int,
    batch_size: int,
    max_fragments: Optional[int] = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> Tensor:
    """:func:`predict_scene` on validated inputs."""
    n = pos.size(0)
    # one view's crops at a time (memory O(N) whatever votes); with progress reported, every view's crops are
    # counted first (cut, counted and dropped one view at a time, then cut again as they run: the same crops), so
    # that the total is exact from the first report (it was estimated from the views built so far: 28/56 crops,
    # then 36/50, then 47/54)
    todo = 0
    if progress is not None:
        todo = sum(len(crops) for _, crops in _iter_vote_crops(pos, voxel_size, max_points, votes, seed, max_fragments))
    views = _iter_vote_crops(pos, voxel_size, max_points, votes, seed, max_fragments)
    done = 0
    total: Optional[Tensor] = None
    count = torch.zeros(n, dtype=torch.float32, device=pos.device)
    training = bool(getattr(model, "training", False))
    if isinstance(model, torch.nn.Module):
        model.eval()
    try:
        with torch.no_grad():
            for view, crops in views:
                for b in range(0, len(crops), batch_size):
                    group = crops[b : b + batch_size]
                    idx = torch.cat(group)
                    sizes = torch.tensor([len(c) for c in group], device=pos.device)
                    batch = torch.repeat_interleave(torch.arange(len(group), device=pos.device), sizes)
                    prob = torch.softmax(_logits(model, view[idx], x[idx], batch).float(), dim=1)
                    if total is None:
                        total = torch.zeros(n, prob.size(1), dtype=torch.float32, device=pos.device)
                    elif prob.size(1) != total.size(1):
                        fail(
                            "predict_scene",
                            f"model returned {prob.size(1)} classes for one crop and {total.size(1)} for another",
                        )
                    total.index_add_(0, idx.to(total.device), prob.to(total.device))
                    count.index_add_(0, idx, torch.ones(len(idx), device=pos.device))
                    done += len(group)
                    if progress is not None:
                        progress(done, todo)
    finally:
        if training and isinstance(model, torch.nn.Module):
            model.train()
    assert total is not None  # every voxel has a point in a crop of every vote
    return _fill_uncovered(pos, voxel_size, total, count)


def predict_scene_reference(
    model: Model,
    pos: Tensor,
    x: Optional[Tensor] = None,
    *,
    voxel_size: Optional[float] = None,
    max_points: Optional[int] = None,
    votes: int = 1,
    seed: int = 0,
    max_fragments: Optional[int] = MAX_FRAGMENTS,
) -> Tensor:
    """Loop reference of :func:`predict_scene` (the same crops; one crop per model call, the votes
    added point by point in Python). For tests on small scenes.

    Shapes:
        pos ``[N, 3]``, x ``[N, F]`` -> ``[N, C]`` float32.
    """
    pos = _centred(pos)
    x = pos if x is None else x
    sums: Dict[int, Tensor] = {}
    counts: Dict[int, int] = {}
    training = bool(getattr(model, "training", False))
    if isinstance(model, torch.nn.Module):
        model.eval()
    with torch.no_grad():
        for view, crops in _iter_vote_crops(pos, voxel_size, max_points, votes, seed, max_fragments):
            for crop in crops:
                logits = model(view[crop], x[crop], torch.zeros(len(crop), dtype=torch.long, device=pos.device))
                prob = torch.softmax(logits.float(), dim=1)
                for k, j in enumerate(crop.tolist()):
                    sums[j] = sums[j] + prob[k] if j in sums else prob[k].clone()
                    counts[j] = counts.get(j, 0) + 1
    if training and isinstance(model, torch.nn.Module):
        model.train()
    if len(sums) == pos.size(0):
        return torch.stack([sums[j] / counts[j] for j in range(pos.size(0))])
    # a fragment cap left points out: each takes the mean over the scored points of its voxel
    inverse, _ = voxel_ids(pos.detach().cpu().double().numpy(), voxel_size, "predict_scene_reference")
    mean = {j: sums[j] / counts[j] for j in sums}
    out = []
    for j in range(pos.size(0)):
        if j in mean:
            out.append(mean[j])
        else:
            mates = [mean[i] for i in range(pos.size(0)) if inverse[i] == inverse[j] and i in mean]
            out.append(torch.stack(mates).mean(0))
    return torch.stack(out)


def _model_device(model: Any) -> torch.device:
    if isinstance(model, torch.nn.Module):
        for t in model.parameters():
            return t.device
        for t in model.buffers():
            return t.device
    return torch.device("cpu")


def _named(values: List[float], names: List[str]) -> Dict[str, Optional[float]]:
    """``{name: value}`` with NaN (a class absent from the targets) as None (valid JSON)."""
    return {name: (None if math.isnan(v) else float(v)) for name, v in zip(names, values)}


def _check_evaluation(where: str, dataset: Any) -> Tuple[int, List[str], int]:
    """``(num_classes, class names, ignore_index)`` of a dataset of whole scenes, validated: it has scenes, does
    not crop them, its class names (if any) are one per class and its ``ignore_index`` is an integer."""
    num_classes = check_int(where, "dataset.num_classes", getattr(dataset, "num_classes", None))
    if isinstance(getattr(dataset, "sampler", None), SceneSampler):
        fail(
            where,
            f"the dataset crops its items ({dataset.sampler!r}, split {getattr(dataset, 'split', '?')!r}); "
            f"build it without voxel_size / max_points, or at another split, to score whole scenes",
        )
    try:
        size = len(dataset)
    except TypeError:
        fail(where, f"dataset must be indexable with a len() (its items whole scenes), got {type(dataset).__name__}")
    if size == 0:
        fail(where, "the dataset has no scenes (nothing to score)")
    class_names = getattr(dataset, "class_names", None)
    names = [str(c) for c in class_names or range(num_classes)]
    if len(names) != num_classes:
        fail(where, f"dataset.class_names has {len(names)} names but dataset.num_classes={num_classes}")
    ignore_index = getattr(dataset, "ignore_index", -1)
    if not is_int(ignore_index):
        fail(where, f"dataset.ignore_index must be an integer, got {ignore_index!r}")
    return num_classes, names, int(ignore_index)


def _scene_item(
    where: str, item: Any, device: torch.device, num_classes: int, ignore_index: int
) -> Tuple[Tensor, Optional[Tensor], Tensor]:
    """``(pos, x or None, y [N] int64 on the CPU)`` of one dataset item (a whole scene), checked: a mapping with
    tensors ``pos`` ``[N, 3]`` and ``y`` (one id in ``0..C-1`` or ``ignore_index`` per point), ``x`` optional."""
    if not isinstance(item, Mapping) or "pos" not in item or "y" not in item:
        got = sorted(map(str, item)) if isinstance(item, Mapping) else type(item).__name__
        fail(where, f"dataset items must be dicts with tensors 'pos' [N, 3] and 'y' [N] (and 'x'), got {got}")
    pos = check_points(where, "pos", item["pos"])
    y = check_tensor(where, "y", item["y"])
    if y.dim() > 2 or y.numel() != pos.size(0) or (y.dim() == 2 and y.size(1) != 1):
        fail(where, f"y must have shape [N] with N={pos.size(0)} (one label per point of pos), got {tuple(y.shape)}")
    check_integer(where, "y", y)
    y = y.reshape(-1).long().cpu()
    bad = (y != ignore_index) & ((y < 0) | (y >= num_classes))
    if bool(bad.any()):
        row = int(bad.nonzero()[0])
        fail(
            where,
            f"y holds label {int(y[row])} at row {row}, outside 0..{num_classes - 1} and ignore_index={ignore_index}",
        )
    x = item.get("x")
    return pos.to(device), None if x is None else check_tensor(where, "x", x).to(device), y


def evaluate_scenes(
    model: Model,
    dataset: Any,
    *,
    voxel_size: Optional[float] = None,
    max_points: Optional[int] = None,
    votes: int = 1,
    seed: int = 0,
    progress: bool = False,
    max_fragments: Optional[int] = MAX_FRAGMENTS,
) -> Tuple[Dict[str, float], Dict[str, Any]]:
    """Score every original point of every scene of ``dataset`` (its items: whole scenes, as a
    scene dataset gives them at a split other than ``train``) with :func:`predict_scene` and
    :class:`~gridify.metrics.SegmentationIoU`.

    ``dataset``: indexable, ``len()``; items hold ``pos`` ``[N, 3]``, ``y`` ``[N]`` (``ignore_index``
    = ignored) and optionally ``x`` and ``scene``; it has ``num_classes`` (and ``class_names``,
    ``ignore_index``, default -1). The model runs on the device of its parameters.

    Returns:
        ``({"miou", "oa", "macc"}, {"per_class_iou": {class name: IoU or None}, "confusion_matrix":
        [C][C] (rows = target), "num_scenes", "num_points", "num_scored_points"})``.
    """
    where = "evaluate_scenes"
    num_classes, names, ignore_index = _check_evaluation(where, dataset)
    voxel_size, max_points = _check_settings(where, voxel_size, max_points, seed)
    votes = check_int(where, "votes", votes)
    max_fragments = check_max_fragments(where, max_fragments)
    progress = check_bool(where, "progress", progress)
    from .metrics import SegmentationIoU  # torchmetrics (and what it imports, about 3 s): only when scoring

    metric = SegmentationIoU(num_classes, ignore_index=ignore_index)
    device = _model_device(model)
    points = 0
    for i in range(len(dataset)):
        item = dataset[i]
        scene = f"{where}: scene {i}" + (f" ({item['scene']})" if isinstance(item, Mapping) and "scene" in item else "")
        pos, x, y = _scene_item(scene, item, device, num_classes, ignore_index)
        probs = predict_scene_checked(scene, model, pos, x, voxel_size, max_points, votes, seed, 1, max_fragments, None)
        if probs.size(1) != num_classes:
            fail(scene, f"the model gives {probs.size(1)} classes but the dataset has num_classes={num_classes}")
        metric.update(probs.cpu(), y)
        points += pos.size(0)
        if progress:
            print(
                f"[evaluate_scenes] {i + 1}/{len(dataset)} {item.get('scene', i)}: {pos.size(0)} points",
                file=sys.stderr,
                flush=True,
            )
    res = metric.compute()
    conf = res["confusion"]
    if int(conf.sum()) == 0:
        fail(
            where,
            f"every point of the {len(dataset)} scene(s) is ignored (label ignore_index={ignore_index}; a split "
            f"without ground truth?): nothing to score",
        )
    values = {k: float(res[k]) for k in ("miou", "oa", "macc")}
    extra = {
        "per_class_iou": _named(res["iou"].tolist(), names),
        "confusion_matrix": conf.tolist(),
        "num_scenes": len(dataset),
        "num_points": points,
        "num_scored_points": int(conf.sum()),
    }
    return values, extra
