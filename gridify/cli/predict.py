"""``gridify predict``: a model's labels of the points of a file; and what ``predict`` and ``show`` share: the
model's options (:func:`add_common_model_args`), loading it (:func:`load_model`), reading the file as the model's
task reads it (:func:`read_file`, :meth:`gridify.api.task_predictors.TaskPredictor.read`) and the options of ``predict`` /
``inspect`` the flags give (:func:`model_options`, asked of the task's predictor)."""

from __future__ import annotations

import argparse
from typing import Any, Dict, Optional

from .. import _cliargs as types
from .._commands import check_command_route
from .._paths import PREDICTION_FORMATS, check_input_file
from .._pretrained import PRETRAINED

__all__ = [
    "add_common_model_args",
    "add_predict_parser",
    "load_model",
    "read_file",
    "model_options",
    "model_facts",
    "check_given_files",
    "cmd_predict",
]


def add_common_model_args(p: argparse.ArgumentParser) -> None:
    """The options of ``predict`` and ``show``: the model's device and input, a classifier's subsets and a scene
    segmenter's views and fragments (:func:`gridify._cliargs.add_scene_run_arguments`, as ``evaluate`` takes them)."""
    p.add_argument("--device", default="cpu", type=types.device, help="cpu, cuda, cuda:1, ... (default: cpu)")
    p.add_argument("--threads", type=types.threads, help="torch CPU threads")
    p.add_argument("--category", help="object category (name or index) for segmentation models that need one")
    p.add_argument(
        "--seed", type=types.nonnegative_int, default=0, help="seed of the point subsets / chunks (default 0)"
    )
    p.add_argument(
        "--estimate-normals",
        action="store_true",
        help="estimate normals from the points (local PCA of the 30 nearest) when the model needs them and the file has none",
    )
    p.add_argument(
        "--num-samples", type=types.positive_int, default=10_000, help="points sampled from a mesh file (default 10000)"
    )
    p.add_argument(
        "--columns",
        nargs="+",
        metavar="NAME",
        help="the meaning of each column of a text or .npy file, e.g. --columns x y z intensity (names: x y z nx "
        "ny nz r g b label intensity, _ to skip one; default: inferred from the column count)",
    )
    p.add_argument(
        "--up-axis",
        default=None,
        type=types.up_axis,
        help="the file's up direction: z (default, what the shipped models expect), y (e.g. "
        "modelnet40_normal_resampled, glTF), x, -z, -y or -x; rotated to z up before the model. Not given, a "
        "classifier also reads the cloud y up and prints a hint when that reading is clearly more confident",
    )
    types.add_scene_run_arguments(
        p, "classifiers: random subsets averaged when N differs from the training N (default 4); "
    )


def add_predict_parser(sub: Any) -> None:
    """The ``predict`` sub-command."""
    from .._clinames import SUPPORTED_EXTENSIONS

    q = sub.add_parser(
        "predict",
        help="label the points of a file with a trained model",
        description="Classify a cloud, or segment every point of it, with a trained model. Any "
        f"file gridify.io.read_points reads ({' '.join(SUPPORTED_EXTENSIONS)}; meshes "
        "are surface-sampled) and any number of points.",
    )
    q.add_argument("file", help="point cloud or mesh file")
    which = q.add_mutually_exclusive_group(required=True)
    which.add_argument("--ckpt", help="exported model.pt or Lightning .ckpt")
    which.add_argument(
        "--model",
        choices=sorted(PRETRAINED),
        help="a model shipped with gridify (modelnet10, modelnet40: ModelNet classifiers; semantickitti: a LiDAR "
        "scene segmenter; model cards in docs/guides/prediction.md)",
    )
    q.add_argument(
        "--out",
        type=types.output_file(PREDICTION_FORMATS),
        help="write the labels: .txt (one per line), .npy, .ply (points coloured by label, "
        "with a label property) or .json (labels, names, probabilities)",
    )
    q.add_argument("--no-progress", action="store_true", help="no progress bar (scene segmenters)")
    add_common_model_args(q)
    q.set_defaults(func=cmd_predict)


def load_model(args: argparse.Namespace):
    import torch

    from ..api import load, pretrained_path
    from ..checkpoint import CheckpointError

    if args.threads:
        torch.set_num_threads(int(args.threads))
    if getattr(args, "model", None) and args.ckpt:
        raise SystemExit(f"gridify {args.command}: error: give --ckpt or --model, not both")
    types.check_ckpt(args.ckpt)  # missing, a folder or a FIFO: named with the flag
    try:
        return load(args.ckpt if args.ckpt else pretrained_path(args.model), device=args.device)
    except (CheckpointError, ValueError) as exc:
        raise SystemExit(f"gridify {args.command}: error: {exc}")


def read_file(args: argparse.Namespace, model: Any = None):
    """The cloud of ``args.file`` as the model's task reads it (:meth:`~gridify.api.task_predictors.TaskPredictor.read`: a scene
    segmenter's with the file's per-point fields, intensity); without a model :func:`gridify.io.read_points`."""
    from ..io import read_points

    kw: Dict[str, Any] = {"num_samples": args.num_samples}
    if getattr(args, "columns", None):
        kw["columns"] = args.columns  # a format without columns refuses them (read_points)
    read = read_points if model is None else model.task_predictor.read
    try:
        return read(args.file, **kw)
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(f"gridify {args.command}: error: {_flag_words(str(exc))}")


#: the reader's keyword arguments as the flags of ``predict`` / ``show`` that give them (a shell user read
#: ``read_points option columns= does not apply`` for the ``--columns`` they typed)
_READ_FLAGS = (
    ("read_points option columns=", "--columns"),
    ("read_points(columns=...)", "--columns NAME ..."),
    ("columns=", "--columns"),
    ("read_points option num_samples=", "--num-samples"),
    ("num_samples=", "--num-samples"),
)


def _flag_words(text: str) -> str:
    """A reader's message in the words of the command line: its keyword arguments named as the flags."""
    for python, flag in _READ_FLAGS:
        text = text.replace(python, flag)
    return text


def model_options(args: argparse.Namespace, model: Any, entry: str) -> Dict[str, Any]:
    """The options of ``model.predict`` / ``inspect`` (``entry``) the flags give, None where not given (the task's
    predictor leaves out another task's option given None, and refuses one given a value: the route has refused
    its flag before); a progress bar labelled by the command where the task's predictor takes ``progress``."""
    progress = None
    if not args.no_progress and model.task_predictor.takes("progress", entry):
        from .._progress import stderr_bar

        progress = stderr_bar(args.command)
    return dict(
        category=args.category,
        seed=args.seed,
        estimate_normals=args.estimate_normals,
        num_votes=args.votes,
        max_fragments=args.max_fragments,
        progress=progress,
    )


def model_facts(model: Any) -> Dict[str, Optional[str]]:
    """The facts of a loaded model for ``gridify._commands.OPTION_USE``: ``model`` and its kind (the task's
    :attr:`~gridify.tasks.Task.model_kind`)."""
    from ..tasks import get_task

    return {"model": None, f"model:{get_task(model.task).model_kind}": f"a {model.task} model"}


def check_given_files(args: argparse.Namespace) -> None:
    """The cloud file and ``--ckpt`` exist as readable files, checked before PyTorch loads (seconds): a
    :class:`~gridify._paths.PathError` naming them."""
    types.check_ckpt(args.ckpt)  # missing, a folder or a FIFO: named with the flag
    check_input_file(args.file)


def cmd_predict(args: argparse.Namespace) -> int:
    from .._commands import MODEL_KINDS, file_facts

    check_given_files(args)
    check_command_route(args, file_facts(args.file), maybe=MODEL_KINDS)  # before the model loads, as far as known
    from ..api.prediction import write_prediction

    model = load_model(args)
    check_command_route(args, {**file_facts(args.file), **model_facts(model)})
    cloud = read_file(args, model)
    try:
        pred = model.predict(cloud, up_axis=args.up_axis, **model_options(args, model, "predict"))
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"gridify predict: error: {exc}")
    print(pred.summary())
    if args.out:
        path = write_prediction(args.out, cloud, pred)
        print(f"labels written to {path}")
    return 0
