r"""How :meth:`gridify.api.Predictor.predict` runs the models of each task: one :class:`TaskPredictor` per task.

A task (:mod:`gridify.tasks`) names its predictor: :data:`PREDICTORS` holds them by name, and the
Predictor runs ``PREDICTORS[task.predicted_by or task.name]`` (:func:`predictor_for`), so a new task
that predicts like an existing one sets ``predicted_by`` in ``gridify/tasks.py`` and nothing else, and
one with a way of its own registers a :class:`TaskPredictor` under its name (beside the task, in the
api layer or in the plugin that adds both)::

    @PREDICTORS.register("my_task")
    class MyTaskPredictor(TaskPredictor):
        options = (*SHARED_OPTIONS, "num_votes")  # the keyword options its predict takes

        def predict(self, predictor, points, normals=None, *, up_axis="z", where="Predictor.predict",
                    num_votes=None, seed=0, batch_size=8, estimate_normals=False):
            ...  # a gridify.api.Prediction

Each predictor declares the options it takes (:attr:`TaskPredictor.options`, :attr:`TaskPredictor.inspect_options`):
:meth:`gridify.api.Predictor.predict` hands ``predict(points, normals, up_axis=..., **options)`` to the task's
predictor after :meth:`TaskPredictor.check_options`, which refuses an option of another task by name (``num_votes``
given to a part segmenter: "... (num_votes is an option of classification and scene_segmentation models, not of
segmentation models)"). The command line asks the predictor too: how a file is read (:meth:`TaskPredictor.read`),
whether it takes a progress bar (:meth:`TaskPredictor.takes`), whether ``inspect`` has one grid to draw
(:attr:`TaskPredictor.one_grid`).

Built-in predictors (the procedures in detail: the :mod:`gridify.api` docstring):

* ``classification`` (:class:`ClassificationPredictor`): one label per cloud, the softmax averaged
  over ``num_votes`` seeded subsets of the training ``num_points`` ``n`` (one pass when ``N == n``).
* ``segmentation`` (:class:`PartSegmentationPredictor`): a label per point; the cloud split into
  ``ceil(N / n)`` seeded chunks, the argmax restricted to the parts of a ``category``.
* ``scene_segmentation`` (:class:`ScenePredictor`): a label per point of a metric scene, through
  fragments and crops (:func:`gridify.scene_inference.predict_scene_unchecked`, after one validation).

Shapes:
    a cloud of ``N`` points -> labels ``[]`` / ``[N]`` and probabilities ``[K]`` / ``[N, K]``
    (:class:`gridify.api.Prediction`).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from .._checks import check_alloc, check_int, check_positive_int, fail, is_int
from .._progress import resolve_progress
from ..checkpoint import CheckpointError
from ..io import PointCloud, centre_large_offset, read_points, read_scan
from ..nn.state import all_or_nothing, evaluating
from ..registry import TASKS, Registry
from ..scene_inference import check_max_fragments, scene_defaults
from ..tasks import get_task, task_names
from ..transforms import to_z_up
from .inputs import as_float32, canonical_order, check_xyz, read_cloud, to_numpy
from .inputs import estimate_normals as estimate_unit_normals
from .prediction import Prediction

__all__ = [
    "PREDICTORS",
    "TaskPredictor",
    "Option",
    "OPTIONS",
    "SHARED_OPTIONS",
    "entry_options",
    "option_refusal",
    "CloudPredictor",
    "ClassificationPredictor",
    "PartSegmentationPredictor",
    "ScenePredictor",
    "predictor_for",
    "served_tasks",
    "is_served",
    "check_predict_arguments",
    "check_batch_sizes",
    "category_index",
    "vote_subsets",
    "chunks",
    "pooled",
    "scene_points",
]


@functools.lru_cache(maxsize=None)
def _instance(cls: type) -> "TaskPredictor":
    return cls()


def _predictor_name(task: str) -> str:
    return get_task(task).predicted_by or task.lower()


def served_tasks() -> List[str]:
    """The registered tasks whose models ``gridify.load`` serves: :attr:`gridify.tasks.Task.predictor`
    set and a predictor registered in :data:`PREDICTORS`."""
    return [n for n in task_names() if get_task(n).predictor and _predictor_name(n) in PREDICTORS]


def is_served(task: Any) -> bool:
    """Whether ``task`` (a name) is one of :func:`served_tasks` (case-insensitive, as the registry)."""
    return isinstance(task, str) and task in TASKS and task.lower() in served_tasks()


def predictor_for(task: str) -> "TaskPredictor":
    """The predictor of the task named ``task`` (one shared instance per predictor class); a ValueError
    naming the served tasks when there is none."""
    if not is_served(task):
        raise ValueError(f"no predictor serves the task {task!r}; served tasks: {served_tasks()}")
    return _instance(PREDICTORS.get(_predictor_name(task)))


# --------------------------------------------------------------------------------------
# shared checks and sampling
# --------------------------------------------------------------------------------------
def check_predict_arguments(
    where: str, num_votes: Any, batch_size: Any, seed: Any, estimate_normals: Any = False
) -> None:
    """The scalar arguments of ``predict`` / ``embed`` / ``inspect``."""
    check_positive_int(where, num_votes=num_votes, batch_size=batch_size)
    check_int(where, "seed", seed, 0)
    if not isinstance(estimate_normals, bool):
        fail(where, f"estimate_normals must be a bool, got {estimate_normals!r}")


def check_batch_sizes(predictor: Any, where: str, n_in: int, num_votes: int, batch_size: int, count: int) -> None:
    """Refuse vote tables and forward batches beyond the allocation limit, before allocating.

    Votes: one int64 index per point of each of the ``count`` subsets (chunks); a forward:
    ``min(batch_size, count)`` clouds of ``n`` points, each with a grid of ``R^3 x C`` features and
    its activations (an estimate: 16 grid-sized float32 tensors per cloud).
    """
    n = predictor.num_points or n_in
    check_alloc(where, f"num_votes={num_votes} (subsets of {n} points)", 8 * n * count)
    model = predictor.model
    R = getattr(model, "resolution", 0) or 0
    nodes = math.prod(int(r) for r in R) if isinstance(R, (tuple, list)) else int(R) ** 3  # per-axis grids too
    C = int(getattr(getattr(model, "gridify", None), "out_channels", 0) or 0)
    per_cloud = n * (4 * predictor.in_channels + 64) + 16 * 4 * C * nodes
    check_alloc(
        where,
        f"batch_size={batch_size} (up to {min(batch_size, count)} clouds of {n} points per forward pass)",
        min(batch_size, count) * per_cloud,
    )


def category_index(predictor: Any, category: Any, where: str) -> Optional[int]:
    """The index of ``category`` (a name, case-insensitive, or an index) for a part segmenter trained with
    object categories; None for other models (which refuse a category)."""
    num = predictor.num_categories
    if num == 0:  # only part segmenters trained with object categories have some
        if category is not None:
            raise ValueError(
                f"{where}: category is only used by segmentation models trained with object "
                f"categories; this model does not take one"
            )
        return None
    names = predictor.category_names or [str(i) for i in range(num)]
    if category is None:
        raise ValueError(
            f"{where}: this segmentation model needs the object category: pass category= (gridify "
            f"predict / show: --category) one of {names} (or its index)"
        )
    if isinstance(category, str):
        low = [n.lower() for n in names]
        if category.lower() in low:
            return low.index(category.lower())
        if category.isascii() and category.isdigit():  # "²".isdigit() is True but int() refuses it
            category = int(category)
        else:
            raise ValueError(f"{where}: unknown category {category!r}; known: {names}")
    if isinstance(category, bool) or not isinstance(category, (int, np.integer)) or not 0 <= int(category) < num:
        raise ValueError(f"{where}: category must be a name or an index in [0, {num}), got {category!r}")
    return int(category)


#: how much more confident (top probability) a classifier's y-up reading must be than its z-up one for
#: :meth:`ClassificationPredictor.up_axis_hint` to speak (measured: docs/guides/prediction.md, "Another up axis")
UP_AXIS_HINT_MARGIN = 0.2


def vote_subsets(n: Optional[int], order: np.ndarray, num_votes: int, seed: int) -> List[np.ndarray]:
    """``num_votes`` seeded subsets of ``n`` of the points ``order`` (without replacement when there are
    more; all of them and ``n - N`` repeated when fewer); ``[order]`` when ``n`` is None or ``N == n``."""
    n_in = len(order)
    if n is None or n_in == n:
        return [order]
    rng = np.random.default_rng(int(seed))
    out = []
    for _ in range(num_votes):
        if n_in > n:
            idx = np.sort(rng.choice(n_in, size=n, replace=False))
        else:
            idx = np.concatenate([np.arange(n_in), rng.integers(0, n_in, size=n - n_in)])
        out.append(order[idx])
    return out


def chunks(n: Optional[int], cloud: Dict[str, Any], seed: int) -> List[np.ndarray]:
    """The prepared ``cloud`` split by a seeded permutation into ``ceil(N / n)`` chunks of nearly equal
    size (one chunk, in canonical order, when ``N <= n`` or ``n`` is None)."""
    n_in = len(cloud["pos"])
    order = canonical_order(cloud["pos"], cloud["normals"])
    if n is None or n_in <= n:
        return [order]
    perm = order[np.random.default_rng(int(seed)).permutation(n_in)]
    return np.array_split(perm, math.ceil(n_in / n))


def subset_features(cloud: Dict[str, Any], idx: np.ndarray) -> np.ndarray:
    """The model features ``[n, F]`` of the points ``idx`` of a prepared ``cloud``.

    For a model trained on normals estimated from its training files (``cloud["normals_k"]`` set by
    :meth:`gridify.api.Predictor.prepare`), a strict subset of a larger cloud gets normals estimated
    again from the subset's own points with the same ``k``: the training files held about
    ``num_points`` points, so this is the neighbourhood scale the model learnt (on all points of a
    10,000-point file the 30 nearest cover a tenth of the area). Otherwise ``cloud["x"][idx]``.
    """
    k = cloud.get("normals_k")
    if k is None or len(np.unique(idx)) >= len(cloud["pos"]):
        return np.ascontiguousarray(cloud["x"][idx])
    pos = cloud["pos"][idx]
    return np.concatenate([pos, estimate_unit_normals(pos, k)], 1)


def pooled(
    predictor: Any,
    cloud: Dict[str, Any],
    num_votes: int,
    seed: int,
    batch_size: int,
    fn: Callable[[Tensor, Tensor], Tensor],
) -> np.ndarray:
    """The mean of ``fn(pos [V, n, 3], x [V, n, F]) -> [V, D]`` over the :func:`vote_subsets` of the
    prepared ``cloud`` (``batch_size`` subsets per call), as a ``[D]`` array."""
    order = canonical_order(cloud["pos"], cloud["normals"])
    subsets = vote_subsets(predictor.num_points, order, num_votes, seed)
    dev = predictor.device
    outs = []
    for s in range(0, len(subsets), batch_size):
        group = subsets[s : s + batch_size]
        pos = torch.from_numpy(np.stack([cloud["pos"][i] for i in group])).to(dev)  # [V, n, 3]
        x = torch.from_numpy(np.stack([subset_features(cloud, i) for i in group])).to(dev)  # [V, n, F]
        outs.append(fn(pos, x).float())
    return torch.cat(outs).mean(0).cpu().numpy()


# --------------------------------------------------------------------------------------
# options
# --------------------------------------------------------------------------------------
#: the options every built-in predictor's ``predict`` takes: the seed of the subsets / chunks / views, the clouds
#: (chunks, crops) per forward pass, normals estimated where the cloud has none (``inspect``: the seed and the normals)
SHARED_OPTIONS: Tuple[str, ...] = ("seed", "batch_size", "estimate_normals")


@dataclass(frozen=True)
class Option:
    """How a refusal names an option of ``predict`` / ``inspect``: ``words`` (the keyword, with its command-line flag
    where it has one) and ``used_by`` (the models it is for; the options of one entry with the same words are named
    together)."""

    words: str
    used_by: str = ""


#: The built-in options, in the order refusals name them (an option a plugin adds is named by its keyword alone).
OPTIONS: Dict[str, Option] = {
    "seed": Option("seed=", "for every model"),
    "batch_size": Option("batch_size=", "for every model"),
    "estimate_normals": Option("estimate_normals= (--estimate-normals)", "for every model"),
    "num_votes": Option(
        "num_votes= (--votes)", "for classifiers (random subsets) and scene segmenters (rotated views)"
    ),
    "category": Option("category (--category)", "only used by part segmenters"),
    "features": Option("features=", "for scene segmenters"),
    "progress": Option("progress=", "for scene segmenters"),
    "max_fragments": Option(
        "max_fragments= (--max-fragments)", "for scene segmenters, which cover a scan with fragments"
    ),
}


def _option(name: str) -> Option:
    return OPTIONS.get(name) or Option(f"{name}=")


def entry_options(entry: str = "predict") -> List[str]:
    """Every option of ``entry`` (``"predict"`` / ``"inspect"``) some served task's predictor takes, in the order of
    :data:`OPTIONS` (then those plugins add)."""
    taken = [n for t in served_tasks() for n in predictor_for(t).option_names(entry)]
    return [n for n in OPTIONS if n in taken] + [n for n in dict.fromkeys(taken) if n not in OPTIONS]


def option_refusal(name: str, task: str, takes: Tuple[str, ...], entry: str = "predict") -> str:
    """Why an option of another task is refused for a ``task`` model (whose predictor takes ``takes``): what it is
    for, named with the other options of ``entry`` for the same models that this one does not take, and the tasks
    whose predictors take it (``num_votes= (--votes) is for classifiers ...; this is a segmentation model (num_votes
    is an option of classification and scene_segmentation models, not of segmentation models)``)."""
    about = _option(name).used_by
    group = [n for n in entry_options(entry) if n not in takes and about and _option(n).used_by == about] or [name]
    owners = [t for t in served_tasks() if name in predictor_for(t).option_names(entry)]
    whose = f"{name} is an option of {' and '.join(owners)} models, not of {task} models"
    subject = " and ".join(_option(n).words for n in group)
    if not about:
        return f"{subject} is not an option of {task} models ({whose})"
    return f"{subject} {'are' if len(group) > 1 else 'is'} {about}; this is a {task} model ({whose})"


# --------------------------------------------------------------------------------------
# predictors
# --------------------------------------------------------------------------------------
class TaskPredictor:
    """How :meth:`gridify.api.Predictor.predict` (and ``inspect``) run the models of a task.

    Subclasses implement :meth:`predict` (and :meth:`inspect`) and declare the keyword options those take
    (:attr:`options`, :attr:`inspect_options`); they are registered in :data:`PREDICTORS` and found through the
    task (:func:`predictor_for`). One instance serves every Predictor of its task: the state lives on the
    Predictor passed in.

    Attributes:
        min_in_channels: the fewest input features per point a model of the task takes.
        options / inspect_options: the keyword options :meth:`predict` / :meth:`inspect` take besides the cloud,
            its ``normals`` and ``up_axis`` (every task's); :meth:`check_options` refuses the others.
        one_grid: :meth:`inspect` returns one grid (and its graph) for the cloud, what ``gridify show`` draws as its
            grid and edges layers (a scene segmenter's crops have a grid each: False).
    """

    min_in_channels: int = 1
    options: Tuple[str, ...] = SHARED_OPTIONS
    inspect_options: Tuple[str, ...] = ("seed", "estimate_normals")
    one_grid: bool = True

    #: whether :meth:`gridify.api.Predictor.predict` without ``up_axis`` also reads the cloud y up and
    #: asks :meth:`up_axis_hint` whether to say so
    hints_up_axis: bool = False

    def option_names(self, entry: str = "predict") -> Tuple[str, ...]:
        """:attr:`options` (``entry="predict"``) or :attr:`inspect_options` (``"inspect"``)."""
        return self.inspect_options if entry == "inspect" else self.options

    def takes(self, name: str, entry: str = "predict") -> bool:
        """Whether :meth:`predict` (``entry="inspect"``: :meth:`inspect`) takes the option ``name``."""
        return name in self.option_names(entry)

    def check_options(self, task: str, options: Dict[str, Any], entry: str, where: str) -> Dict[str, Any]:
        """The ``options`` given to ``entry`` (``"predict"`` / ``"inspect"``) of a ``task`` model that this predictor
        takes. An option of another task's predictor given a value is refused naming who takes it
        (:func:`option_refusal`, a ValueError naming ``where``); given None it is left out (None is every such
        option's default); a name no predictor takes is a TypeError, as Python's for an unknown keyword."""
        takes = self.option_names(entry)
        known = entry_options(entry)
        out: Dict[str, Any] = {}
        for name, value in options.items():
            if name in takes:
                out[name] = value
            elif name not in known:
                raise TypeError(
                    f"{where}() got an unexpected keyword argument {name!r} (a {task} model takes "
                    f"{', '.join(takes) or 'no option'} besides normals and up_axis)"
                )
            elif value is not None:
                fail(where, option_refusal(name, task, takes, entry))
        return out

    def read(self, path: Any, **options: Any) -> PointCloud:
        """A file as this task's models read it (:func:`gridify.io.read_points`; ``options`` are its keyword
        arguments): what ``gridify predict`` / ``show`` and ``evaluate --scan`` load."""
        return read_points(path, **options)

    def up_axis_hint(self, z_up: Prediction, y_up: Prediction) -> Optional[str]:
        """A line for the user when the cloud read y up (``y_up``) is clearly better explained than read z
        up (``z_up``, the result returned), else None."""
        return None

    def check_entries(self, path: Any, info: Dict[str, Any], data: Dict[str, Any], width: int) -> None:
        """Check the task's own checkpoint entries when the file is loaded (a
        :class:`gridify.checkpoint.CheckpointError` naming ``path`` and the entry); none by default."""

    def predict(
        self,
        predictor: Any,
        points: Any,
        normals: Any = None,
        *,
        up_axis: str = "z",
        where: str = "Predictor.predict",
        **options: Any,
    ) -> Prediction:
        """:meth:`gridify.api.Predictor.predict` of ``predictor``'s model on one cloud (``up_axis`` checked;
        ``options``: those of :attr:`options` given, passed by keyword)."""
        raise NotImplementedError

    def inspect(
        self,
        predictor: Any,
        points: Any,
        normals: Any = None,
        *,
        up_axis: str = "z",
        where: str = "Predictor.inspect",
        **options: Any,
    ) -> Dict[str, Any]:
        """:meth:`gridify.api.Predictor.inspect` (``options``: those of :attr:`inspect_options` given)."""
        fail(where, f"the {type(self).__name__} of this {predictor.task} model has nothing to inspect")


#: Predictors by name (a task's ``predicted_by``, else its name): :class:`TaskPredictor` subclasses (anything else
#: is refused when it is registered, naming the name and what was given).
PREDICTORS: Registry[Callable[..., Any]] = Registry("predictor", base=TaskPredictor)


class CloudPredictor(TaskPredictor):
    """Clouds normalized as in training (:meth:`gridify.api.Predictor.prepare`) and run in subsets or
    chunks of the training ``num_points``: subclasses give :meth:`probabilities`, :meth:`check_sizes`
    and :meth:`first_subset`. ``category``: an option of both, taken by a part segmenter trained with object
    categories (:func:`category_index` refuses it for another model)."""

    options = (*SHARED_OPTIONS, "category")
    inspect_options = ("seed", "estimate_normals", "category")

    #: votes of ``predict`` when ``num_votes`` is None (and of ``inspect``'s prediction)
    default_votes: int = 4

    def predict(
        self,
        predictor: Any,
        points: Any,
        normals: Any = None,
        *,
        up_axis: str = "z",
        where: str = "Predictor.predict",
        category: Any = None,
        num_votes: Optional[int] = None,
        seed: int = 0,
        batch_size: int = 8,
        estimate_normals: bool = False,
    ) -> Prediction:
        num_votes = self.default_votes if num_votes is None else num_votes
        check_predict_arguments(where, num_votes, batch_size, seed, estimate_normals)
        cat = category_index(predictor, category, where)
        cloud = predictor.prepare(points, normals, estimate_normals=estimate_normals, up_axis=up_axis, where=where)
        return self.predict_cloud(predictor, cloud, cat, num_votes, seed, batch_size, where)

    def predict_cloud(
        self,
        predictor: Any,
        cloud: Dict[str, Any],
        cat: Optional[int],
        num_votes: int,
        seed: int,
        batch_size: int,
        where: str,
    ) -> Prediction:
        """``predict`` of a cloud already read and normalized (``prepare``) and a checked category."""
        model = predictor.model
        with evaluating(model), all_or_nothing(model):
            self.check_sizes(predictor, where, len(cloud["pos"]), num_votes, batch_size)
            probs = self.probabilities(predictor, cloud, cat, num_votes, seed, batch_size)
        labels = probs.argmax(-1).astype(np.int64)
        cat_name = None
        if cat is not None:
            cat_name = (predictor.category_names or [str(i) for i in range(predictor.num_categories)])[cat]
        return Prediction(
            labels=np.asarray(labels),
            probabilities=probs,
            class_names=list(predictor.class_names),
            task=predictor.task,
            num_points=int(len(cloud["pos"])),
            category=cat_name,
            source=cloud["source"],
        )

    def check_sizes(self, predictor: Any, where: str, n_in: int, num_votes: int, batch_size: int) -> None:
        """:func:`check_batch_sizes` for the forward passes :meth:`probabilities` will run."""
        raise NotImplementedError

    def probabilities(
        self, predictor: Any, cloud: Dict[str, Any], cat: Optional[int], num_votes: int, seed: int, batch_size: int
    ) -> np.ndarray:
        """Class probabilities ``[K]`` of the cloud, or ``[N, K]`` of its points."""
        raise NotImplementedError

    def first_subset(self, predictor: Any, cloud: Dict[str, Any], seed: int) -> np.ndarray:
        """The indices of the first subset / chunk of ``num_points`` points (what ``inspect`` draws)."""
        raise NotImplementedError

    def inspect(
        self,
        predictor: Any,
        points: Any,
        normals: Any = None,
        *,
        up_axis: str = "z",
        where: str = "Predictor.inspect",
        category: Any = None,
        num_votes: Optional[int] = None,
        seed: int = 0,
        estimate_normals: bool = False,
    ) -> Dict[str, Any]:
        votes = self.default_votes if num_votes is None else num_votes  # predict's defaults
        check_predict_arguments(where, votes, 8, seed, estimate_normals)
        model = predictor.model
        if not callable(getattr(model, "gridify", None)):
            fail(where, f"the model ({type(model).__name__}) has no gridification to inspect")
        cat = category_index(predictor, category, where)
        cloud = predictor.prepare(points, normals, estimate_normals=estimate_normals, up_axis=up_axis, where=where)
        pred = self.predict_cloud(predictor, cloud, cat, votes, seed, 8, where)
        sub = self.first_subset(predictor, cloud, seed)
        dev = predictor.device
        pos = torch.from_numpy(cloud["pos"][sub]).to(dev)
        x = torch.from_numpy(subset_features(cloud, sub)).to(dev)
        with evaluating(model), all_or_nothing(model):
            grid, graph = model.gridify(pos, x, return_graph=True)
        return {
            "pos": cloud["pos"],
            "prediction": pred,
            "grid": grid[0].cpu(),
            "graph": graph,
            "subset": sub,
            "center": cloud["center"],
            "scale": cloud["scale"],
        }


@PREDICTORS.register("classification")
class ClassificationPredictor(CloudPredictor):
    """One label per cloud: the softmax averaged over ``num_votes`` seeded subsets of ``num_points``."""

    options = (*CloudPredictor.options, "num_votes")
    inspect_options = (*CloudPredictor.inspect_options, "num_votes")
    hints_up_axis = True

    def check_sizes(self, predictor: Any, where: str, n_in: int, num_votes: int, batch_size: int) -> None:
        check_batch_sizes(predictor, where, n_in, num_votes, batch_size, count=num_votes)

    def up_axis_hint(self, z_up: Prediction, y_up: Prediction) -> Optional[str]:
        """A hint when the y-up reading names another class with a top probability at least
        :data:`UP_AXIS_HINT_MARGIN` above the z-up reading's (a y-up file read z up lies on its side: the
        model is then often confident and wrong, e.g. a bed read as a bookshelf with p = 0.89)."""
        pz, py = float(z_up.probabilities.max()), float(y_up.probabilities.max())
        if int(y_up.labels) == int(z_up.labels) or py < pz + UP_AXIS_HINT_MARGIN:
            return None
        return (
            f"read y up this cloud is {y_up.names} (p={py:.3f} against {pz:.3f} read z up): if the file is "
            f"y up (glTF, modelnet40_normal_resampled), pass up_axis='y' (--up-axis y); up_axis='z' states z up "
            f"and skips this check"
        )

    def probabilities(
        self, predictor: Any, cloud: Dict[str, Any], cat: Optional[int], num_votes: int, seed: int, batch_size: int
    ) -> np.ndarray:
        model = predictor.model
        return pooled(
            predictor, cloud, num_votes, seed, batch_size, lambda pos, x: torch.softmax(model(pos, x).float(), -1)
        )

    def first_subset(self, predictor: Any, cloud: Dict[str, Any], seed: int) -> np.ndarray:
        order = canonical_order(cloud["pos"], cloud["normals"])
        return vote_subsets(predictor.num_points, order, 1, seed)[0]


@PREDICTORS.register("segmentation")
class PartSegmentationPredictor(CloudPredictor):
    """A label per point: the cloud in seeded chunks of at most ``num_points``, each segmented as one
    cloud of a batch (every point once: no ``num_votes``); with a ``category``, the argmax restricted to its
    parts."""

    def check_sizes(self, predictor: Any, where: str, n_in: int, num_votes: int, batch_size: int) -> None:
        n = predictor.num_points or n_in
        check_batch_sizes(predictor, where, n_in, 1, batch_size, count=math.ceil(n_in / n))

    def probabilities(
        self, predictor: Any, cloud: Dict[str, Any], cat: Optional[int], num_votes: int, seed: int, batch_size: int
    ) -> np.ndarray:
        groups = chunks(predictor.num_points, cloud, seed)
        dev = predictor.device
        pos_all = torch.from_numpy(cloud["pos"]).to(dev)
        K = len(predictor.class_names)
        probs = torch.zeros(len(pos_all), K)
        mask = None
        if cat is not None and predictor.category_to_parts is not None:
            mask = torch.full((K,), float("-inf"))
            mask[predictor.category_to_parts[cat]] = 0.0
        for s in range(0, len(groups), batch_size):
            group = groups[s : s + batch_size]
            idx = torch.from_numpy(np.concatenate(group)).to(dev)
            x = torch.from_numpy(np.concatenate([subset_features(cloud, g) for g in group])).to(dev)
            batch = torch.repeat_interleave(
                torch.arange(len(group), device=dev), torch.tensor([len(g) for g in group], device=dev)
            )
            category = None if cat is None else torch.full((len(group),), cat, dtype=torch.long, device=dev)
            logits = predictor(pos_all[idx], x, batch, category).float().cpu()
            if mask is not None:
                logits = logits + mask
            probs[idx.cpu()] = torch.softmax(logits, -1)
        return probs.numpy()

    def first_subset(self, predictor: Any, cloud: Dict[str, Any], seed: int) -> np.ndarray:
        return chunks(predictor.num_points, cloud, seed)[0]


def scene_points(points: Any, up_axis: str = "z", where: str = "scene_points") -> np.ndarray:
    """A metric scene's points as :meth:`gridify.api.Predictor.inspect` of a scene segmenter returns them (what
    ``gridify show`` draws, with ``--pred`` too): z up (``up_axis`` as in :meth:`~gridify.api.Predictor.predict`),
    a large offset (UTM metres) centred.

    Shapes:
        any input :meth:`~gridify.api.Predictor.predict` takes (``[N, 3]``, a PointCloud, a file) -> ``[N, 3]``
        float32.
    """
    pos, _, _ = read_cloud(points, None, where)
    pos, _ = to_z_up(pos, up_axis)
    return centre_large_offset(pos)[0].astype(np.float32)


@PREDICTORS.register("scene_segmentation")
class ScenePredictor(TaskPredictor):
    """A label per point of a metric scene: nothing normalized (a large offset only centred in float64),
    the training features built from the file (or given), every point scored through fragments and
    crops of the training ``voxel_size`` / ``max_points``
    (:func:`gridify.scene_inference.predict_scene_unchecked`, after one validation here)."""

    min_in_channels = 0  # a scene segmenter may take no features beside its coordinates
    options = (*SHARED_OPTIONS, "num_votes", "features", "progress", "max_fragments")
    inspect_options = ("seed", "estimate_normals", "num_votes", "progress", "max_fragments")
    one_grid = False  # each crop has a grid box of its own

    def read(self, path: Any, **options: Any) -> PointCloud:
        """A scan with every per-point field its format holds (:func:`gridify.io.read_scan`: the features a model was
        trained with, LiDAR intensity); a text or ``.npy`` file read with named ``columns`` as named."""
        return read_points(path, **options) if "columns" in options else read_scan(path, **options)

    def check_entries(self, path: Any, info: Dict[str, Any], data: Dict[str, Any], width: int) -> None:
        """The inference entries (``voxel_size``, ``max_points``, ``features``) of the right type, checked
        when the file is loaded: a CheckpointError naming the file and the entry, never a failure later."""
        from ..datasets.scene_base import SCENE_FEATURES  # noqa: PLC0415 (datasets sit beside api's layer)

        for key in ("votes", "max_fragments"):  # the inference defaults a scene checkpoint may record
            v = info.get(key)
            if v is not None and not (is_int(v) and v >= 1) and not (key == "max_fragments" and v == "all"):
                what = "a positive integer" + (" or 'all'" if key == "max_fragments" else "")
                raise CheckpointError(f"{path}: entry info['{key}'] must be null or {what}, got {v!r}")
        for key in ("voxel_size", "max_points"):
            v = info.get(key, data.get(key))
            ok = v is None or (
                not isinstance(v, bool)
                and isinstance(v, (int, float))
                and math.isfinite(v)
                and v > 0
                and (key == "voxel_size" or float(v).is_integer())
            )
            if not ok:
                kind = "a positive number of metres" if key == "voxel_size" else "a positive integer"
                raise CheckpointError(f"{path}: entry info['{key}'] must be null or {kind}, got {v!r}")
        names = info.get("features", data.get("features"))
        if names is None:
            return
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n in SCENE_FEATURES for n in names):
            raise CheckpointError(
                f"{path}: entry info['features'] must be a list of the scene feature names {list(SCENE_FEATURES)}, "
                f"got {names!r}"
            )
        if sum(SCENE_FEATURES[n] for n in names) != width:
            raise CheckpointError(
                f"{path}: entry info['features'] {list(names)} gives {sum(SCENE_FEATURES[n] for n in names)} columns "
                f"but the model takes {width}"
            )

    def predict(
        self,
        predictor: Any,
        points: Any,
        normals: Any = None,
        *,
        up_axis: str = "z",
        where: str = "Predictor.predict",
        num_votes: Optional[int] = None,
        seed: int = 0,
        batch_size: int = 8,
        estimate_normals: bool = False,
        features: Any = None,
        progress: Any = None,
        max_fragments: Any = None,
    ) -> Prediction:
        from ..scene_inference import check_scene_output  # noqa: PLC0415

        votes_default, fragments_default = scene_defaults(predictor.meta.get("info"))
        num_votes = votes_default if num_votes is None else num_votes
        check_predict_arguments(where, num_votes, batch_size, seed, estimate_normals)
        max_fragments = fragments_default if max_fragments is None else check_max_fragments(where, max_fragments)
        progress = resolve_progress(where, progress)
        self.check_normals_used(predictor, normals, estimate_normals, features, where)
        points = self.read(points) if isinstance(points, (str, os.PathLike)) else points  # every field: intensity
        cloud = (
            points
            if isinstance(points, PointCloud)
            else PointCloud(points=check_xyz(to_numpy(points, "points", where), where, scene=True))
        )
        pos, nrm, source = read_cloud(cloud, normals, where)  # finite, non-empty [N, 3]
        pos, nrm = to_z_up(pos, up_axis, nrm)
        if nrm is not None:
            cloud = PointCloud(
                points=cloud.points, normals=nrm, colors=cloud.colors, fields=cloud.fields, source=cloud.source
            )
        pos = as_float32(centre_large_offset(pos)[0], "points", where)  # UTM metres: centred in float64 first
        x = self.point_features(predictor, cloud, pos, features, estimate_normals, source, where)  # finite [N, F]
        probs = self.scores(
            predictor, pos, x, int(num_votes), int(seed), int(batch_size), max_fragments, progress, source, where
        )
        check_scene_output(where, probs, pos, x, list(predictor.scene_features), source)
        probs_np = probs.float().cpu().numpy()
        return Prediction(
            labels=probs_np.argmax(-1).astype(np.int64),
            probabilities=probs_np,
            class_names=list(predictor.class_names),
            task=predictor.task,
            num_points=int(len(pos)),
            source=source,
        )

    @staticmethod
    def scores(
        predictor: Any,
        pos: np.ndarray,
        x: np.ndarray,
        num_votes: int,
        seed: int,
        batch_size: int,
        max_fragments: Optional[int],
        progress: Any,
        source: str,
        where: str = "Predictor.predict",
    ) -> Tensor:
        """The probabilities ``[N, C]`` of a checked scene (z up, centred float32 ``pos``, its features ``x``):
        the voxel range and the cost of the run (:func:`gridify.scene_inference.check_scene_cost`: the views' work
        and the peak memory) checked, then every point scored by the model's crops."""
        from ..scene_inference import check_scene_cost, check_voxel_range, predict_scene_unchecked  # noqa: PLC0415

        info = predictor.meta.get("info") or {}  # voxel_size / max_points checked at load (check_entries)
        voxel_size, max_points = info.get("voxel_size"), info.get("max_points")
        voxel_size = None if voxel_size is None else float(voxel_size)
        max_points = None if max_points is None else int(max_points)
        check_voxel_range(where, pos, voxel_size, source or "the scene")
        model, dev = predictor.model, predictor.device
        pos_t = torch.from_numpy(pos).to(dev)
        batch_size = check_scene_cost(  # the work of the views and the peak memory, before any crop runs
            where,
            model,
            pos_t,
            x.shape[1],
            voxel_size,
            max_points,
            int(num_votes),
            int(batch_size),
            max_fragments,
            classes=len(predictor.class_names),
            source=source or None,
            votes_arg="num_votes",
        )
        with evaluating(model), all_or_nothing(model):
            probs = predict_scene_unchecked(
                model,
                pos_t,
                torch.from_numpy(x).to(dev),
                voxel_size,
                max_points,
                int(num_votes),
                int(seed),
                batch_size,
                max_fragments,
                progress,
            )
        return probs

    @staticmethod
    def check_normals_used(predictor: Any, normals: Any, estimate_normals: bool, features: Any, where: str) -> None:
        """``normals=`` / ``estimate_normals=True`` only for a scene model that takes normals and no given
        ``features=`` (which are the model's whole input): ValueError otherwise, rather than ignoring them."""
        if normals is None and not estimate_normals:
            return
        what = "normals=" if normals is not None else "estimate_normals=True (--estimate-normals)"
        if features is not None:
            fail(where, f"{what} is not used when features= is given (features= is the model's whole input)")
        names = predictor.scene_features
        if "normal" not in names:
            fail(
                where,
                f"{what} is not used by this model: it was trained with the scene features {list(names)}, without "
                f"normals; leave it out",
            )

    def point_features(
        self,
        predictor: Any,
        cloud: PointCloud,
        pos: np.ndarray,
        features: Any,
        estimate_normals: bool,
        source: str,
        where: str,
    ) -> np.ndarray:
        """The model's float32 input features ``[N, F]``: ``features`` as given or built from the cloud."""
        width = predictor.in_channels
        if features is not None:
            x = to_numpy(features, "features", where)
            if x.ndim != 2 or x.shape[0] != len(pos) or x.shape[1] != width:
                fail(
                    where,
                    f"features must have shape [N, F] = [{len(pos)}, {width}] (one row per point, "
                    f"the model's in_channels), got {tuple(x.shape)}",
                )
            if not np.isfinite(x).all():
                bad = int(np.flatnonzero(~np.isfinite(x).all(1))[0])
                fail(where, f"features contain NaN/Inf values (row {bad})")
            return as_float32(x, "features", where)
        names = predictor.scene_features
        x = self.built_features(names, cloud, pos, estimate_normals, where)
        if x.shape[1] != width:
            fail(where, f"the scene features {list(names)} give {x.shape[1]} columns but the model takes {width}")
        if not np.isfinite(x).all():
            bad = int(np.flatnonzero(~np.isfinite(x).all(1))[0])
            file_rows = cloud.dropped is not None and len(cloud.dropped) > 0  # rows of the file, as it is read
            row = (lambda i: f"row {cloud.file_row(i)} of the file") if file_rows else (lambda i: f"row {i}")
            culprits = [
                f"its field {name!r} holds NaN/Inf ({row(int(np.flatnonzero(~np.isfinite(v))[0]))})"
                for name, v in cloud.fields.items()
                if v.dtype.kind == "f" and not np.isfinite(v).all()
            ]
            why = f"; {', '.join(culprits)}: drop or fill those rows" if culprits else ""
            fail(where, f"the features {list(names)} of {source or 'the cloud'} hold NaN/Inf ({row(bad)}){why}")
        return x

    def built_features(
        self, names: Any, cloud: PointCloud, pos: np.ndarray, estimate_normals: bool, where: str
    ) -> np.ndarray:
        """The features ``names`` (the model's :attr:`gridify.api.Predictor.scene_features`) of a metric scene,
        read from the cloud by the datasets' own :func:`gridify.datasets.scene_base.cloud_scene_features` (normals
        estimated first when asked and the cloud has none)."""
        from ..datasets._common import DatasetError  # noqa: PLC0415 (datasets sit beside api's layer)
        from ..datasets.scene_base import cloud_scene_features  # noqa: PLC0415

        nrm = cloud.normals
        if "normal" in names and nrm is None and estimate_normals:
            nrm = estimate_unit_normals(pos)
        try:
            return cloud_scene_features(names, cloud, pos=pos, normal=nrm, instead="in Python pass features=")
        except DatasetError as exc:
            fail(where, str(exc))

    def inspect(
        self,
        predictor: Any,
        points: Any,
        normals: Any = None,
        *,
        up_axis: str = "z",
        where: str = "Predictor.inspect",
        max_fragments: Any = None,
        **options: Any,
    ) -> Dict[str, Any]:
        """Metric points, every one labelled (:meth:`predict` with these options); no single grid frame to draw
        (each crop has its own box)."""
        if max_fragments is not None:
            check_max_fragments(where, max_fragments)  # named as inspect's, before the scan is read
        if isinstance(points, (str, os.PathLike)):  # read once, with the fields the features may need
            points = self.read(points)
        if max_fragments is not None:
            options["max_fragments"] = max_fragments
        pred = self.predict(predictor, points, normals, up_axis=up_axis, where=where, **options)
        return {
            "pos": scene_points(points, up_axis, where),
            "prediction": pred,
            "grid": None,
            "graph": None,
            "subset": None,
            "center": np.zeros(3),
            "scale": 1.0,
        }
