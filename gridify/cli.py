"""The gridify command line: train, evaluate, predict, show, export, bench, download, convert, list.

    gridify train --config procedural [section.key=value ...]
    gridify evaluate --ckpt outputs/procedural/checkpoints/model.pt
    gridify predict scan.ply --ckpt model.pt [--category chair] [--out labels.ply]
    gridify predict scan.ply --model modelnet10          (the ModelNet10 classifier shipped with gridify)
    gridify show scan.ply [--ckpt model.pt] [--layers points,grid,edges] [--out view.png]
    gridify export model.pt --format onnx [--num-points N] [--batch B] --out model.onnx
    gridify bench [...]                                (--recipe NAME: a training recipe; --scenes: scene scale)
    gridify download modelnet10 [--root datasets]      # or --config modelnet10, or --list
    gridify convert RAW_ROOT --layout s3dis --out datasets/s3dis_pointcept   (scenes -> the common layout)
    gridify list [configs|models|datasets]             (what gridify ships and knows by name)

``train``, ``evaluate`` and ``bench`` hand their arguments to :func:`gridify.training.main`,
:func:`gridify.evaluation.main` and :func:`gridify.bench.main` (imported only when used).

Every sub-command parses its numbers, devices and paths with the shared types of
:mod:`gridify._cliargs`, checks its output paths before it works (:mod:`gridify._paths`) and ends
every error, an ``OSError`` while writing included, with one line naming the flag or the file.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from . import _cliargs as types
from ._paths import PREDICTION_FORMATS, check_input_file, check_output_dir, one_line_errors
from ._pretrained import PRETRAINED, closest_shipped, shipped_name

if TYPE_CHECKING:  # numpy and torch are imported by the commands that run, never while parsing
    import numpy as np

DELEGATED = {
    "train": ("gridify.training", "train and test a model from a YAML config (Lightning)"),
    "evaluate": ("gridify.evaluation", "evaluate a checkpoint on a dataset split"),
    "bench": ("gridify.bench", "speed / memory benchmarks"),
}


@contextmanager
def _prog(name: str, label: Optional[str] = None):
    """Make the delegated command print ``label`` (default ``gridify <name>``) as its program name.

    Through the environment variable ``GRIDIFY_PROG`` (read by
    :func:`gridify.training.cli.program_name` and the benchmark), not by rewriting ``sys.argv[0]``:
    launchers that re-execute ``sys.argv`` (Lightning's DDP) must still find the program.
    """
    saved = os.environ.get("GRIDIFY_PROG")
    os.environ["GRIDIFY_PROG"] = label or f"gridify {name}"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("GRIDIFY_PROG", None)
        else:
            os.environ["GRIDIFY_PROG"] = saved


#: the delegated commands whose arguments are parsed before their module (and PyTorch) is imported
LIGHT_PARSERS = {"train": "train_parser", "evaluate": "evaluate_parser", "bench": "bench_parser"}


def _delegate(name: str, argv: List[str], label: Optional[str] = None) -> int:
    """Run the delegated command ``name`` (its module's ``main(argv)``) under the program name ``label``
    (default ``gridify <name>``): ``--help`` and argument errors answer from the light parser first."""
    import importlib

    label = label or f"gridify {name}"

    if name in LIGHT_PARSERS:  # --help and argument errors answer before anything heavy is imported
        from . import _commands

        command = _commands.bench_command(argv) if name == "bench" else name  # each mode of bench: its own parser
        with _prog(name, label):
            parser = (
                _commands.bench_command_parser(command)
                if name == "bench"
                else getattr(_commands, LIGHT_PARSERS[name])()
            )
            parsed = parser.parse_args(argv) if name == "bench" else parser.parse_intermixed_args(argv)
            if name == "evaluate":
                _commands.check_evaluate_args(parsed, parser)
            elif name == "train":  # a misspelt config or override is named now, not after PyTorch has loaded
                _commands.check_config_name(parsed.config, parser.prog)
                _commands.check_overrides(parsed.overrides, parser.prog)
            elif command == "bench --recipe":
                _commands.check_config_name(parsed.recipe, parser.prog, "--recipe")
                _commands.check_overrides(parsed.override, parser.prog)
            elif command == "bench":
                _commands.check_bench_mode(parsed, parser.prog)
            given = types.given_options(parser, argv, intermixed=name != "bench")
            _commands.check_route(parser.prog, command, given, *_commands.light_route(command, parsed))
    module_name = DELEGATED[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise SystemExit(f"{label}: {module_name} is not available in this installation of gridify")
        raise SystemExit(
            f"{label}: missing dependency {exc.name!r}; install the script extras: pip install 'gridify[scripts]'"
        )
    with _prog(name, label), one_line_errors(label):
        status = module.main(argv)
    return status if isinstance(status, int) and not isinstance(status, bool) else 0  # evaluate returns its report


def script_main(name: str, prog: str, argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``scripts/<prog>`` (``train.py``, ``evaluate.py``): the command ``gridify
    <name>`` under the script's own program name, with its ``--help`` and argument errors answered before
    PyTorch is imported. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with _encodable_output(), _last_resort(prog):
        return _delegate(name, argv, prog)


def _add_common_model_args(p: argparse.ArgumentParser) -> None:
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


def _add_show_parser(sub: Any) -> None:
    s = sub.add_parser(
        "show",
        help="look at a cloud (and a model's labels, grid and kNN edges) in Open3D",
        description="Show a cloud in an Open3D window, or render it headless to a PNG with --out. "
        "With --ckpt the points are coloured by the predicted class/part (with a legend) "
        "and the grid layer is the model's learned gridification; without it the file's "
        "colours/labels are used and the grid comes from a freshly initialised "
        "(seeded) Gridification at --resolution / --k. The grid layer draws the nodes "
        "the cloud touches, the edges layer the bilateral kNN edges of a few nodes "
        "spread over the cloud, and the camera looks along the cloud's axis of least "
        "variance.",
    )
    s.add_argument("file", help="point cloud or mesh file")
    s.add_argument("--ckpt", help="model whose predictions colour the points")
    s.add_argument(
        "--labels",
        default="auto",
        help="ground truth drawn beside a segmentation model's prediction: a .label/.npy/.txt file, 'auto' "
        "(default: SemanticKITTI labels/<stem>.label or segment.npy beside the scan, else the file's label "
        "field) or 'none'",
    )
    s.add_argument(
        "--model", choices=sorted(PRETRAINED), help="a shipped model instead of --ckpt (gridify list models)"
    )
    s.add_argument(
        "--out", type=types.output_file([".png"]), help="PNG path: render headless instead of opening a window"
    )
    s.add_argument(
        "--layers",
        default=None,
        help="comma-separated layers to show: points, grid, edges (default: points; with --ckpt in a "
        "window all three, toggleable)",
    )
    s.add_argument(
        "--grid-color",
        choices=("norm", "pca"),
        default="pca",
        help="colour grid nodes by feature norm or by a PCA of the features (default pca)",
    )
    s.add_argument(
        "--resolution", type=types.positive_int, default=9, help="grid resolution without --ckpt (default 9)"
    )
    s.add_argument("--k", type=types.positive_int, default=9, help="kNN neighbours without --ckpt (default 9)")
    s.add_argument("--width", type=types.positive_int, default=800, help="image width (default 800)")
    s.add_argument("--height", type=types.positive_int, default=600, help="image height (default 600)")
    s.add_argument("--point-size", type=types.positive_float, default=3.0, help="point size in pixels (default 3)")
    _add_show_edge_arguments(s)
    _add_show_view_arguments(s)
    s.add_argument(
        "--hide",
        default=None,
        metavar="CLASS,...",
        help="with a scene model: leave out the points predicted as these classes, from both panels when the "
        "ground truth is drawn beside (default: ceiling, so a room is seen from above; 'none' hides nothing)",
    )
    s.add_argument("--no-progress", action="store_true", help="no progress bar (scene segmenters)")
    types.add_pred_argument(s)
    _add_common_model_args(s)
    s.set_defaults(func=cmd_show)


def _add_show_edge_arguments(s: argparse.ArgumentParser) -> None:
    """The ``show`` options choosing the grid nodes and the kNN edges drawn."""
    from ._clinames import DEFAULT_EDGE_NODES, DEFAULT_MAX_EDGES, GRID_NODES

    s.add_argument(
        "--grid-nodes",
        choices=GRID_NODES,
        default=GRID_NODES[0],
        help="grid nodes drawn: those nearest to a point of the cloud, or the whole R^3 lattice (default touched)",
    )
    s.add_argument(
        "--edge-nodes",
        default=str(DEFAULT_EDGE_NODES),
        metavar="N|all",
        help="draw the kNN edges of N grid nodes spread over the cloud (farthest point sampling), each "
        f"in its own colour, or of every node with 'all' (default {DEFAULT_EDGE_NODES})",
    )
    s.add_argument(
        "--edge-node-ids",
        metavar="I,J,...",
        help="draw the edges of these grid nodes (indices a*R*R + b*R + c) instead",
    )
    s.add_argument(
        "--max-edges",
        type=types.nonnegative_int,
        default=DEFAULT_MAX_EDGES,
        help=f"edges drawn at most, a seeded random subset beyond that (default {DEFAULT_MAX_EDGES})",
    )


def _add_show_view_arguments(s: argparse.ArgumentParser) -> None:
    """The ``show`` options placing the camera."""
    s.add_argument(
        "--view",
        default="pca",
        metavar="pca|iso|X,Y,Z",
        help="camera: along the cloud's axis of least variance (pca), the fixed diagonal view (iso), "
        "or from this direction (default pca)",
    )
    s.add_argument("--up", metavar="X,Y,Z", help="camera up vector (default: z, or y for a view from above)")
    s.add_argument(
        "--azimuth",
        type=float,
        default=0.0,
        help="then turn the camera by this many degrees about the up vector (default 0)",
    )
    s.add_argument(
        "--elevation", type=float, default=0.0, help="and raise it by this many degrees, e.g. 20 (default 0)"
    )


def build_parser() -> argparse.ArgumentParser:
    from ._version import __version__

    p = types.Parser(
        prog="gridify",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'gridify <command> --help' for the options of a command.",
    )
    p.add_argument("--version", action="version", version=f"gridify {__version__}")
    sub = p.add_subparsers(dest="command", metavar="command")
    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, help=text, add_help=False)
    _add_predict_parser(sub)
    _add_show_parser(sub)
    _add_export_parser(sub)
    _add_download_parser(sub)
    _add_convert_parser(sub)
    _add_list_parser(sub)
    return p


LIST_KINDS = ("configs", "models", "datasets")


def _add_list_parser(sub: Any) -> None:
    """The ``list`` sub-command."""
    li = sub.add_parser(
        "list",
        help="list the shipped configs, the shipped and registered models and the datasets",
        description="List what gridify ships and knows by name: the training configs (gridify train --config "
        "NAME), the shipped models (--model NAME, gridify.load(NAME)) and the model architectures of the "
        "registry (model.name), the datasets (data.name). Generated from the package's registries.",
    )
    li.add_argument(
        "what",
        nargs="?",
        choices=(*LIST_KINDS, "keys", "all"),
        default="all",
        help="what to list (default all: configs, models and datasets; keys: every config key, its type, range "
        "and default)",
    )
    li.set_defaults(func=cmd_list)


def _config_summary(path: Path) -> str:
    """The first sentence of a config file's header comment (its description, whole: the header's lines up to
    an indented example line or the first full stop), or ''."""
    import re

    words: List[str] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        text = line.strip()
        if not text.startswith("#") or text.startswith("#  ") or not text.lstrip("# "):
            break  # the header ends, or its examples (indented) begin
        words.append(text.lstrip("# "))
    header = " ".join(words)
    end = re.search(r"(?<!\be\.g)(?<!\bi\.e)\.(?=\s|$)", header)
    return (header[: end.end()] if end else header).strip().rstrip(":")


#: the width ``gridify list`` wraps its descriptions to (they were cut with "..." at 90 characters)
LIST_WIDTH = 118


def _listed(name: str, text: str, column: int = 34) -> str:
    """``  name  description``, the description wrapped under itself (never cut)."""
    import textwrap

    head = f"  {name:{column}s} "
    if not text:
        return head.rstrip()
    return textwrap.fill(
        text, width=max(LIST_WIDTH, len(head) + 40), initial_indent=head, subsequent_indent=" " * len(head)
    )


def cmd_list(args: argparse.Namespace) -> int:
    """Print what gridify ships and knows by name from the package's files and the parser's literals alone
    (``gridify._clinames``, held equal to the registries by ``tests/cli/test_startup.py``): no PyTorch, well
    under a second (about 3 s when it read the registries)."""
    from ._clinames import DATASET_NAMES, KEY_ROWS, MODEL_NAMES

    if args.what == "keys":  # the rows of docs/config_keys.md (gridify.training.schema.print_keys)
        for key, rule, default, doc in KEY_ROWS:
            print(f"{key:34} {rule}" + (f"  [default {default}]" if default else "") + (f"  - {doc}" if doc else ""))
        return 0
    kinds = LIST_KINDS if args.what == "all" else (args.what,)
    if "configs" in kinds:  # read from the files alone
        from ._commands import CONFIG_DIR, shipped_config_names

        print("configs (gridify train --config NAME):")
        for name in shipped_config_names():
            print(_listed(name, _config_summary(CONFIG_DIR / f"{name}.yaml")))
    if "models" in kinds:
        print("shipped models (--model NAME, gridify.load(NAME); model cards: docs/guides/prediction.md):")
        for name in sorted(PRETRAINED):
            print(f"  {name}")
        print(f"model architectures (model.name): {', '.join(MODEL_NAMES)}")
    if "datasets" in kinds:
        print(f"datasets (data.name): {', '.join(DATASET_NAMES)}")
    return 0


def _add_predict_parser(sub: Any) -> None:
    """The ``predict`` sub-command."""
    from ._clinames import SUPPORTED_EXTENSIONS

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
    _add_common_model_args(q)
    q.set_defaults(func=cmd_predict)


def _add_export_parser(sub: Any) -> None:
    """The ``export`` sub-command."""
    from ._clinames import EXPORT_FORMATS, EXPORT_HINT

    e = sub.add_parser(
        "export",
        help="export a trained classifier or segmenter for deployment (ONNX, runs without gridify)",
        description="Write a self-contained ONNX file of a trained gridified model. A classifier: "
        "points [B, N, 3] (+ normals [B, N, 3] for models trained with normals) -> logits "
        "[B, K]; a part segmenter: points (+ normals, + category [B]) -> per-point logits "
        "[B, N, K]; a scene segmenter: one crop's points [B, N, 3] in metres (+ features "
        "[B, N, F]) -> per-point logits [B, N, K]. The bilateral kNN graph is built inside "
        "the file (the same neighbours as in PyTorch); clouds are normalized inside it as gridify predict does "
        "(unless the checkpoint says otherwise). The file runs the network once on exactly "
        "the points given (gridify predict resamples a classifier's cloud to the training "
        "size and averages votes, and covers a scene with crops). The file is checked with "
        f"onnxruntime against PyTorch before it is written. Needs: {EXPORT_HINT}.",
    )
    e.add_argument(
        "model",
        nargs="?",
        help="exported model.pt or Lightning .ckpt, or the name of a shipped model (e.g. modelnet10); or give it "
        "as --ckpt / --model, as predict and show take it",
    )
    e.add_argument("--ckpt", help="exported model.pt or Lightning .ckpt (instead of the positional model)")
    e.add_argument(
        "--model",
        dest="shipped",
        choices=sorted(PRETRAINED),
        help="a model shipped with gridify, by name (instead of the positional model)",
    )
    e.add_argument("--format", choices=EXPORT_FORMATS, default="onnx", help="export format (default onnx)")
    e.add_argument("--out", required=True, help="file to write, e.g. model.onnx")
    e.add_argument(
        "--num-points", type=types.positive_int, help="fixed points per cloud N (default: a dynamic axis, any N >= k)"
    )
    e.add_argument("--batch", type=types.positive_int, help="fixed clouds per batch B (default: a dynamic axis)")
    e.add_argument("--no-verify", action="store_true", help="skip the onnxruntime check against PyTorch")
    e.add_argument(
        "--up-axis",
        default="z",
        type=types.up_axis,
        help="the up direction of the clouds the file will get: z (default, what the shipped models expect), "
        "y, x, -z, -y or -x; rotated to z up inside the file",
    )
    e.add_argument("--threads", type=types.threads, help="torch CPU threads")
    e.set_defaults(func=cmd_export)


def _add_download_parser(sub: Any) -> None:
    """The ``download`` sub-command."""
    d = sub.add_parser(
        "download",
        help="download and extract a dataset archive",
        description="Fetch a known dataset archive (resumable, verified) and extract it under --root. "
        "Names in any case (modelnet10 = ModelNet10) or a config's dataset (shapenet). "
        "Without network access it says where to put the file by hand.",
    )
    d.add_argument("name", nargs="?", help="archive name (see --list)")
    d.add_argument("--config", help="fetch what this config (a shipped name or a YAML file) needs")
    d.add_argument(
        "--root",
        type=types.output_dir,
        help="data root (default: $GRIDIFY_DATA, else the repository's datasets/ or ./datasets)",
    )
    d.add_argument("--list", action="store_true", help="list the known archives and the configs that need them")
    d.add_argument("--instructions", action="store_true", help="only print the by-hand download instructions")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=cmd_download)


def _add_convert_parser(sub: Any) -> None:
    from ._clinames import LAYOUTS, S3DIS_TEST_AREA

    c = sub.add_parser(
        "convert",
        help="convert a raw scene dataset to the common (Pointcept) layout",
        description="Convert S3DIS, ScanNet v2, SemanticKITTI or mmdetection3d scene folders into "
        "<out>/<split>/<scene>/{coord,color,normal,strength,segment,instance}.npy plus "
        "<out>/classes.txt, read back with data.name: scene, layout: pointcept. The files are written "
        "to .<out>.partial beside --out and moved into --out when every scene is converted: a failed run "
        "leaves --out as it was. A rerun resumes: scenes already converted (in --out, or staged by an "
        "interrupted or failed run) are kept unless --overwrite. A run with other "
        "classes, --unknown or --layout than the scenes already in --out is refused (they would keep "
        "their old labels): --overwrite rewrites them.",
    )
    c.add_argument("root", help="the raw dataset's root folder")
    c.add_argument("--layout", required=True, choices=sorted(set(LAYOUTS) - {"pointcept"}), help="source layout")
    c.add_argument("--out", required=True, type=types.output_dir, help="output root of the common layout")
    c.add_argument(
        "--splits",
        nargs="+",
        default=["all"],
        choices=["train", "val", "test", "all"],
        help="source splits to convert (default: all)",
    )
    c.add_argument(
        "--test-area",
        type=types.int_range(1, 6, "S3DIS area"),
        default=None,
        help=f"S3DIS: the Area held out as test (default {S3DIS_TEST_AREA})",
    )
    c.add_argument(
        "--sequences",
        nargs="+",
        default=None,
        help="SemanticKITTI: the sequences to convert (default: those of --splits)",
    )
    c.add_argument(
        "--classes",
        nargs="+",
        default=None,
        help="S3DIS layout: class names (file-name prefixes) instead of the 13 S3DIS classes",
    )
    c.add_argument(
        "--unknown",
        default=None,
        help="S3DIS layout: what another class becomes: ignore (default), error or a class name",
    )
    c.add_argument("--overwrite", action="store_true", help="rewrite scenes already converted")
    c.add_argument("--quiet", action="store_true", help="no line per scene")
    c.set_defaults(func=cmd_convert)


# --------------------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------------------
def _load(args: argparse.Namespace):
    import torch

    from .api import load, pretrained_path
    from .checkpoint import CheckpointError

    if args.threads:
        torch.set_num_threads(int(args.threads))
    if getattr(args, "model", None) and args.ckpt:
        raise SystemExit(f"gridify {args.command}: error: give --ckpt or --model, not both")
    types.check_ckpt(args.ckpt)  # missing, a folder or a FIFO: named with the flag
    try:
        return load(args.ckpt if args.ckpt else pretrained_path(args.model), device=args.device)
    except (CheckpointError, ValueError) as exc:
        raise SystemExit(f"gridify {args.command}: error: {exc}")


def _read(args: argparse.Namespace, model: Any = None):
    """The cloud of ``args.file`` as the model's task reads it (:meth:`~gridify.api.task_predictors.TaskPredictor.read`: a scene
    segmenter's with the file's per-point fields, intensity); without a model :func:`gridify.io.read_points`."""
    from .io import read_points

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


def _model_options(args: argparse.Namespace, model: Any, entry: str) -> Dict[str, Any]:
    """The options of ``model.predict`` / ``inspect`` (``entry``) the flags give, None where not given (the task's
    predictor leaves out another task's option given None, and refuses one given a value: the route has refused
    its flag before); a progress bar labelled by the command where the task's predictor takes ``progress``."""
    progress = None
    if not args.no_progress and model.task_predictor.takes("progress", entry):
        from ._progress import stderr_bar

        progress = stderr_bar(args.command)
    return dict(
        category=args.category,
        seed=args.seed,
        estimate_normals=args.estimate_normals,
        num_votes=args.votes,
        max_fragments=args.max_fragments,
        progress=progress,
    )


def _check_route(args: argparse.Namespace, facts: Dict[str, Optional[str]], maybe: Sequence[str] = ()) -> None:
    """The arguments given to ``args.command`` that its route (``facts``) does not read, refused by name
    (:data:`gridify._commands.OPTION_USE`, one table for every sub-command); ``maybe``: facts not known yet."""
    from ._commands import check_route

    check_route(f"gridify {args.command}", args.command, getattr(args, "given_options", {}), facts, maybe)


def _model_facts(model: Any) -> Dict[str, Optional[str]]:
    """The facts of a loaded model for :data:`gridify._commands.OPTION_USE`: ``model`` and its kind (the task's
    :attr:`~gridify.tasks.Task.model_kind`)."""
    from .tasks import get_task

    return {"model": None, f"model:{get_task(model.task).model_kind}": f"a {model.task} model"}


def _route_reads(args: argparse.Namespace, dest: str, facts: Dict[str, Optional[str]]) -> bool:
    """Whether the route of ``facts`` reads the argument ``dest`` of ``args.command``
    (:data:`gridify._commands.OPTION_USE`): what a flag is for decides where it is used, not the model's task."""
    from ._cliargs import option_read
    from ._commands import OPTION_USE

    return option_read(OPTION_USE[args.command][dest][0], facts)


def _check_given_files(args: argparse.Namespace) -> None:
    """The cloud file and ``--ckpt`` exist as readable files, checked before PyTorch loads (seconds): a
    :class:`~gridify._paths.PathError` naming them."""
    types.check_ckpt(args.ckpt)  # missing, a folder or a FIFO: named with the flag
    check_input_file(args.file)


def cmd_predict(args: argparse.Namespace) -> int:
    from ._commands import MODEL_KINDS, file_facts

    _check_given_files(args)
    _check_route(args, file_facts(args.file), maybe=MODEL_KINDS)  # before the model loads, as far as known
    from .api.prediction import write_prediction

    model = _load(args)
    _check_route(args, {**file_facts(args.file), **_model_facts(model)})
    cloud = _read(args, model)
    try:
        pred = model.predict(cloud, up_axis=args.up_axis, **_model_options(args, model, "predict"))
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"gridify predict: error: {exc}")
    print(pred.summary())
    if args.out:
        path = write_prediction(args.out, cloud, pred)
        print(f"labels written to {path}")
    return 0


def _vector_arg(flag: str, text: str) -> List[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 3:
        raise SystemExit(f"gridify show: error: {flag} must be three comma-separated numbers, got {text!r}")
    return values


def _show_options(args: argparse.Namespace) -> dict:
    """The vis.show keyword arguments of the --edge-nodes, --edge-node-ids, --view and --up options."""
    if args.edge_node_ids:
        try:
            edge_nodes: Any = [int(v) for v in args.edge_node_ids.split(",") if v.strip()]
        except ValueError:
            raise SystemExit(
                f"gridify show: error: --edge-node-ids must be comma-separated integers, got {args.edge_node_ids!r}"
            )
    elif args.edge_nodes == "all":
        edge_nodes = "all"
    elif args.edge_nodes.isascii() and args.edge_nodes.isdigit():
        edge_nodes = int(args.edge_nodes)
    else:
        raise SystemExit(
            f"gridify show: error: --edge-nodes must be a positive integer or 'all', got {args.edge_nodes!r}"
        )
    view = args.view if args.view in ("pca", "iso") else _vector_arg("--view", args.view)
    up = None if args.up is None else _vector_arg("--up", args.up)
    return dict(
        grid_color=args.grid_color,
        grid_nodes=args.grid_nodes,
        edge_nodes=edge_nodes,
        max_edges=args.max_edges,
        view=view,
        up=up,
        azimuth=args.azimuth,
        elevation=args.elevation,
        width=args.width,
        height=args.height,
        point_size=args.point_size,
        seed=args.seed,
    )


def _show_route(args: argparse.Namespace, model: Any = None) -> Tuple[Dict[str, Optional[str]], List[str]]:
    """``(facts, maybe)`` of a ``show`` call for :data:`gridify._commands.OPTION_USE`: the file, the model (its
    kind once loaded) and the layers drawn (``--layers``, else the default: points, and with a model in a window
    all three unless it is a scene model)."""
    from ._clinames import VIS_LAYERS
    from ._commands import MODEL_KINDS, file_facts, pred_facts

    facts, maybe = file_facts(args.file), []
    named = bool(args.ckpt or args.model)
    if model is not None:
        facts.update(_model_facts(model))
    elif named:
        facts["model"], maybe = None, list(MODEL_KINDS)
    else:
        facts["model:none"] = "no model (--ckpt / --model)"
    facts.update(pred_facts(args))
    layers = None if args.layers is None else [x.strip() for x in args.layers.split(",") if x.strip()]
    if layers is None:
        window = named and not args.out
        if window and model is None:
            maybe += ["layers:grid", "layers:edges"]
        one_grid = model is not None and model.task_predictor.one_grid  # a scene's crops have a grid each
        layers = list(VIS_LAYERS) if window and one_grid else ["points"]
    facts["layers"] = f"--layers {','.join(layers)}"
    facts.update({f"layers:{name}": None for name in layers if name in ("grid", "edges")})
    return facts, maybe


def cmd_show(args: argparse.Namespace) -> int:
    from ._clinames import VIS_LAYERS

    _check_given_files(args)
    if args.pred is not None:
        check_input_file(args.pred, "--pred")
    layers = None if args.layers is None else [x.strip() for x in args.layers.split(",") if x.strip()]
    bad = [x for x in (layers or ()) if x not in VIS_LAYERS]
    if bad:
        raise SystemExit(f"gridify show: error: unknown layer(s) {bad}; layers are {list(VIS_LAYERS)}")
    _check_route(args, *_show_route(args))  # before anything loads, as far as the route is known
    from . import vis
    from .api import gridify as gridify_fn

    options = _show_options(args)
    model = _load(args) if (args.ckpt or args.model) else None
    want = set(layers or ())
    if model is not None and not model.task_predictor.one_grid and want & {"grid", "edges"}:
        raise SystemExit(  # each crop of a scene has a grid of its own
            f"gridify show: error: --layers: a {model.task} model has no single grid or edges to draw; use points"
        )
    facts = _show_route(args, model)[0]
    if model is not None:
        _check_route(args, facts)
    hide = model is not None and _route_reads(args, "hide", facts)  # a scene model (--hide, default ceiling)
    if hide:
        _hide_names(args, list(model.class_names))  # an unknown class fails now, not after the scan is labelled
    cloud = _read(args, model)
    # a bad --labels file fails now, not after the model has labelled every point (minutes for a scan)
    truth = _ground_truth(args, cloud, model) if model is not None and _route_reads(args, "labels", facts) else None
    try:
        if model is not None:
            res = _show_labelled(args, model, cloud)
            if layers is None:
                layers = ["points"] if args.out or res["grid"] is None else list(vis.LAYERS)
            pos, labels, names = res["pos"], res["labels"], res["class_names"]
            if hide:  # both panels lose the points predicted as a hidden class
                pos, labels, truth = _hide_classes(args, pos, labels, names, truth)
            if truth is not None:
                img = _show_truth_beside(args, pos, truth, labels, names, options)
                if args.out:
                    print(f"wrote {args.out} ({img.shape[1]}x{img.shape[0]}: ground truth | prediction)")
                return 0
            kw = dict(
                points=pos,
                labels=labels,
                class_names=names,
                grid=res["grid"],
                edges=res["graph"],
                title=f"{Path(args.file).name}: {res['title']}",
            )
        else:
            if layers is None:
                layers = ["points"]
            grid = graph = None
            if want & {"grid", "edges"}:
                grid, graph = gridify_fn(
                    cloud.points, resolution=args.resolution, k=args.k, seed=args.seed, return_graph=True
                )
            from .api import normalize_cloud

            pos = normalize_cloud(cloud.points)[0] if grid is not None else cloud.points
            kw = dict(
                points=pos, labels=cloud.labels, colors=cloud.colors, grid=grid, edges=graph, title=Path(args.file).name
            )
        img = vis.show(**kw, layers=layers, out=args.out, **options)
    except (vis.RenderError, ValueError) as exc:
        raise SystemExit(f"gridify show: error: {exc}")
    if args.out:
        print(f"wrote {args.out} ({img.shape[1]}x{img.shape[0]}, layers {', '.join(layers)})")
    return 0


def _show_labelled(args: argparse.Namespace, model: Any, cloud: Any) -> Dict[str, Any]:
    """What ``show`` draws of a model's labels: ``pos``, ``labels`` (one per point), ``class_names``, ``grid``,
    ``graph`` and ``title``; from :meth:`~gridify.api.Predictor.inspect` (a summary line printed), or with
    ``--pred`` the labels read from that file (:func:`gridify.api.read_prediction`) without running the model."""
    if args.pred is not None:  # a scene segmenter's labels written before (the route allows no other model)
        from .api.prediction import label_counts, read_prediction
        from .api.task_predictors import scene_points

        names = list(model.class_names)
        try:
            labels = read_prediction(args.pred, len(cloud), names, scan=args.file)
            pos = scene_points(cloud, args.up_axis or "z", "gridify show")
        except ValueError as exc:
            raise SystemExit(f"gridify show: error: {exc}")
        print(f"{args.pred}: {len(labels)} points: {label_counts(labels, names)}")
        return dict(pos=pos, labels=labels, class_names=names, grid=None, graph=None, title=model.task)
    try:
        res = model.inspect(cloud, up_axis=args.up_axis or "z", **_model_options(args, model, "inspect"))
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"gridify show: error: {exc}")
    pred = res["prediction"]
    print(pred.summary())
    title = pred.task if pred.dense else pred.names
    return dict(
        pos=res["pos"],
        labels=pred.point_labels,
        class_names=pred.class_names,
        grid=res["grid"],
        graph=res["graph"],
        title=title,
    )


def _ground_truth(args: argparse.Namespace, cloud: Any, model: Any) -> Optional[np.ndarray]:
    """The training ids of ``--labels`` (a file, or found beside the scan / in the file with ``auto``), or None."""
    from .datasets import DatasetError
    from .datasets.scene_layouts import check_scan_labels, read_scan_labels, scan_label_path

    if args.labels.strip().lower() == "none":
        return None
    auto = args.labels.strip().lower() == "auto"
    path = scan_label_path(args.file) if auto else Path(args.labels)
    if path is not None and not path.is_file():
        raise SystemExit(f"gridify show: error: --labels {args.labels}: no such file")
    try:
        if path is None:  # the file's own label field: ids of the model's classes, as a label file's are
            truth = None if cloud.labels is None else check_scan_labels(args.file, cloud.labels, model.class_names)
        else:
            truth = read_scan_labels(path, cloud, list(model.class_names))
    except DatasetError as exc:
        raise SystemExit(f"gridify show: error: {exc}")
    if truth is not None and not (truth >= 0).any():  # a panel of nothing but unlabelled points: nothing to compare
        what = path if path is not None else f"{args.file}'s label field"
        raise SystemExit(
            f"gridify show: error: {what}: every point is unlabelled (-1, the ignore index; SemanticKITTI's unlabeled "
            "and outlier classes map to it): no ground truth to draw beside the prediction; --labels none draws the "
            "prediction alone"
        )
    return truth


def _show_truth_beside(args: argparse.Namespace, pos: Any, truth: Any, labels: Any, names: List[str], options: dict):
    """Ground truth and prediction side by side (:func:`gridify.vis.show_comparison`)."""
    from . import vis

    keep = {k: options[k] for k in ("view", "up", "azimuth", "elevation", "width", "height", "point_size")}
    try:
        return vis.show_comparison(pos, truth, labels, names, out=args.out, title=Path(args.file).name, **keep)
    except (vis.RenderError, ValueError) as exc:
        raise SystemExit(f"gridify show: error: {exc}")


def _hide_names(args: argparse.Namespace, class_names: List[str]) -> List[str]:
    """The lower-case classes ``--hide`` names (default: the ceiling, when the model has one: a room seen from
    any side above is hidden by its ceiling); an unknown class exits naming the model's classes."""
    lower = [c.lower() for c in class_names]
    if args.hide is None:
        return ["ceiling"] if "ceiling" in lower else []
    if args.hide.strip().lower() == "none":
        return []
    names = [n.strip().lower() for n in args.hide.split(",") if n.strip()]
    unknown = [n for n in names if n not in lower]
    if unknown:
        raise SystemExit(
            f"gridify show: error: --hide: unknown class(es) {unknown}; the model's classes: {', '.join(class_names)}"
        )
    return names


def _hide_classes(args: argparse.Namespace, pos: Any, labels: Any, class_names: List[str], truth: Any = None):
    """The points, predicted labels and ground truth (when drawn beside) of a labelled scene without the points
    predicted as the classes of ``--hide`` (:func:`_hide_names`)."""
    import numpy as np

    names = _hide_names(args, class_names)
    if not names:
        return pos, labels, truth
    lower = [c.lower() for c in class_names]
    keep = ~np.isin(labels, [lower.index(n) for n in names])
    if not keep.any():
        raise SystemExit(f"gridify show: error: --hide {','.join(names)} leaves no point to draw")
    print(f"hidden: {int((~keep).sum())} points predicted as {', '.join(names)} (--hide none shows them)")
    return pos[keep], labels[keep], None if truth is None else np.asarray(truth)[keep]


def cmd_export(args: argparse.Namespace) -> int:
    given = [v for v in (args.model, args.ckpt, args.shipped) if v]
    if len(given) != 1:
        raise SystemExit(
            "gridify export: error: give the model once: a model.pt / .ckpt file or a shipped model's name "
            f"(positional, or --ckpt FILE / --model NAME); got {len(given)}"
        )
    types.check_ckpt(args.ckpt)  # missing, a folder or a FIFO: named with the flag
    args.model = given[0]
    shipped = shipped_name(args.model) is not None  # the one rule of every entry (gridify._pretrained)
    if not shipped and not Path(args.model).exists():  # said before PyTorch loads
        close = closest_shipped(args.model)
        raise SystemExit(
            f"gridify export: error: checkpoint not found: {args.model} (give a model.pt / .ckpt file or "
            f"the name of a shipped model: {', '.join(sorted(PRETRAINED))})"
            + (f"; did you mean {close}?" if close else "")
        )
    import torch

    from .api import pretrained_path
    from .checkpoint import CheckpointError
    from .export import ExportError, export_onnx

    if shipped:
        try:
            args.model = str(pretrained_path(args.model))
        except CheckpointError as exc:
            raise SystemExit(f"gridify export: error: {exc}")
    check_input_file(args.model)  # a folder or a FIFO is said to be one
    if args.threads:
        torch.set_num_threads(int(args.threads))
    try:
        report = export_onnx(
            args.model,
            args.out,
            num_points=args.num_points,
            batch_size=args.batch,
            verify=not args.no_verify,
            progress=lambda line: print(f"[export] {line}", file=sys.stderr, flush=True),
            up_axis=args.up_axis,
        )
    except (CheckpointError, ExportError, ImportError, ValueError) as exc:
        raise SystemExit(f"gridify export: error: {exc}")
    print(f"wrote {report.summary()}")
    return 0


def _archives_of_configs() -> Dict[str, List[str]]:
    """Archive key -> the shipped configs whose data it holds (empty without the training extras)."""
    try:
        from .training.config import ConfigError, resolve_config, shipped_configs
        from .training.data import config_archives
    except ImportError:
        return {}
    needs: Dict[str, List[str]] = {}
    for name in shipped_configs():
        try:
            keys = config_archives(resolve_config(name))
        except ConfigError:  # e.g. a folder config without its folder
            continue
        for key in keys:
            needs.setdefault(key, []).append(name)
    return needs


def _download_list() -> int:
    from .datasets.download import ARCHIVES

    needs = _archives_of_configs()
    for key, spec in ARCHIVES.items():
        used = f" | configs: {', '.join(needs[key])}" if key in needs else ""
        print(f"{key:56s} {spec.note}{used}")
    print(
        "\nNames are case-insensitive (gridify download modelnet10); 'shapenet' is the ShapeNet-Part release the "
        "shapenet configs use."
    )
    return 0


def _download_keys(args: argparse.Namespace) -> List[str]:
    """The archives ``gridify download`` fetches: the one named, or those the ``--config`` needs."""
    from .datasets.download import resolve_archive

    if args.config:
        from .training.cli import error_line
        from .training.config import ConfigError, resolve_config
        from .training.data import config_archives

        try:
            return config_archives(resolve_config(args.config))
        except ConfigError as exc:
            raise SystemExit(f"gridify download: config error: {error_line(exc)}")
    try:
        return [resolve_archive(args.name)]
    except ValueError as exc:
        raise SystemExit(f"gridify download: error: {exc}")


def _check_archive_name(name: Optional[str]) -> None:
    """An unknown archive name as a SystemExit line before PyTorch loads (the library's
    :func:`~gridify.datasets.download.resolve_archive` rule on the parser's literals)."""
    import difflib

    from ._clinames import ARCHIVE_ALIASES, ARCHIVE_NAMES

    if name is None or str(name).lower() in {k.lower() for k in ARCHIVE_NAMES} | set(ARCHIVE_ALIASES):
        return
    close = difflib.get_close_matches(name.lower(), [*(k.lower() for k in ARCHIVE_NAMES), *ARCHIVE_ALIASES], n=1)
    hint = f"; did you mean {close[0]}?" if close else "."
    raise SystemExit(
        f"gridify download: error: unknown archive {name!r}{hint} Known: {', '.join(ARCHIVE_NAMES)} "
        f"(any case; also {', '.join(ARCHIVE_ALIASES)}; gridify download --list)"
    )


def _download_route(args: argparse.Namespace) -> Dict[str, Optional[str]]:
    """The facts of a ``download`` call for :data:`gridify._commands.OPTION_USE`: ``--list``, else what is fetched
    (one archive by name, or a config's) and how (fetched, or ``--instructions``)."""
    if args.list:
        return {"download:list": "--list"}
    facts: Dict[str, Optional[str]] = {"download:by-config": "--config"} if args.config else {"download:by-name": None}
    facts.update({"download:instructions": "--instructions"} if args.instructions else {"download:fetch": None})
    return facts


def cmd_download(args: argparse.Namespace) -> int:
    _check_route(args, _download_route(args))  # download NAME --config X fetched X's archives, not NAME
    if not args.config:
        _check_archive_name(args.name)
    from .datasets import ARCHIVES, DownloadError, default_root
    from .datasets.download import download_archive, manual_instructions

    if args.list or not (args.name or args.config):
        _download_list()
        if not args.list:
            print("\ngridify download: give an archive name (above) or --config NAME")
            return 2
        return 0
    keys = _download_keys(args)
    if not keys:
        print(f"gridify download: config {args.config!r} needs no download")
        return 0
    root = Path(args.root) if args.root else default_root()
    if not args.instructions:
        check_output_dir(root, "--root")  # before anything is fetched
    for key in keys:
        spec = ARCHIVES[key]
        if args.instructions:
            print(manual_instructions(key, root))
            continue
        try:
            path = download_archive(key, root, progress=not args.no_progress)
        except DownloadError as exc:
            raise SystemExit(
                f"gridify download: error: {exc.summary}; download {spec.filename} by hand from "
                f"{spec.urls[0]}, put it at {root / spec.filename} and run again (--instructions lists "
                f"every mirror)"
            )
        except ValueError as exc:
            raise SystemExit(f"gridify download: error: {'; '.join(ln for ln in str(exc).splitlines() if ln)}")
        print(f"{key}: ready at {path}")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    import re

    # a flag the layout does not read (--classes with SemanticKITTI wrote a two-class classes.txt), before any work
    _check_route(args, {f"layout:{args.layout}": f"--layout {args.layout}"})
    from ._clinames import S3DIS_TEST_AREA
    from .datasets import DatasetError, convert_to_pointcept

    if not Path(args.root).is_dir():
        what = "is not a folder" if Path(args.root).exists() else "does not exist"
        raise SystemExit(f"gridify convert: error: root {args.root} {what}")
    if Path(args.out).resolve() == Path(args.root).resolve():
        raise SystemExit(
            f"gridify convert: error: --out {args.out} is the source folder; write the common layout to another folder"
        )

    def progress(done: int, total: int, name: str) -> None:
        if not args.quiet:
            print(f"[{done}/{total}] {name}", flush=True)

    try:
        written = convert_to_pointcept(
            args.root,
            args.layout,
            args.out,
            args.splits,
            test_area=S3DIS_TEST_AREA if args.test_area is None else args.test_area,
            sequences=args.sequences,
            classes=args.classes,
            unknown="ignore" if args.unknown is None else args.unknown,
            overwrite=args.overwrite,
            progress=progress,
        )
    except (DatasetError, ValueError) as exc:  # the library's keyword names in the words of this command
        text = re.sub(r"give root=('[^']*'|\S+)", r"give \1 as the root", str(exc))
        raise SystemExit(f"gridify convert: error: {text.replace('(data.sequences / sequences=)', '(--sequences)')}")
    print(f"{len(written)} scenes in {args.out} (read back with data.name: scene, layout: pointcept, root: {args.out})")
    return 0


def _one_line_warnings(prog: str) -> None:
    """Show warnings as ``<prog>: warning: <message> (<Category>)``: the source line Python prints by default
    (``data.py:145: UserWarning ... return cls(**kwargs)``) means nothing to a user of the command."""
    import warnings

    def fmt(message: Any, category: Any, filename: str, lineno: int, line: Optional[str] = None) -> str:
        text = " ".join(str(message).split())
        return f"{prog}: warning: {text} ({category.__name__})\n"

    warnings.formatwarning = fmt


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``gridify`` console script. Returns the exit status."""
    import warnings

    argv = list(sys.argv[1:] if argv is None else argv)
    saved = warnings.formatwarning
    if argv and not argv[0].startswith("-"):
        _one_line_warnings(f"gridify {argv[0]}")
    try:
        with _encodable_output(), _last_resort(f"gridify {argv[0]}" if argv else "gridify"):
            if argv and argv[0] in DELEGATED:
                return _delegate(argv[0], argv[1:])
            parser = build_parser()
            args, extras = parser.parse_known_args(argv)
            if extras:  # named by the sub-command's parser (its usage), not by the top-level one
                _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extras)}")
            if args.command is None:
                parser.print_help()
                return 2
            # what was typed, for the one rule of arguments a route does not read (gridify._commands.OPTION_USE)
            args.given_options = types.given_options(_command_parser(parser, args.command), argv[1:])
            with one_line_errors(f"gridify {args.command}"):
                try:
                    return int(args.func(args) or 0)
                except BrokenPipeError as exc:
                    if exc.filename is not None:  # a file of the command's own: its one line
                        raise
                    return _stdout_closed()
    finally:
        warnings.formatwarning = saved  # called from Python (tests, notebooks): leave the process as it was


def _stdout_closed() -> int:
    """The reader of the output went away (``gridify list | head``): stop quietly, as other tools do, with
    status 1 and no error line (the output is redirected to devnull so that Python's last flush says nothing)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (captured by a test, a notebook): nothing to redirect
        pass
    return 1


def _command_parser(parser: argparse.ArgumentParser, command: Optional[str]) -> argparse.ArgumentParser:
    """The parser of sub-command ``command`` (``parser`` itself when there is none)."""
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its sub-parsers only there
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:  # noqa: SLF001
            return action.choices[command]
    return parser


#: the name of the codec error handler of ``_encodable_output``
ASCII_FOLD = "gridify-ascii-fold"
#: characters without an ASCII decomposition, as a terminal without them should show them
_ASCII_SPELLING = {
    "\u2013": "-", "\u2014": "--", "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2026": "...",
    "\u00d7": "x", "\u2264": "<=", "\u2265": ">=", "\u2248": "~", "\u00b0": " deg", "\u2192": "->", "\u00b5": "u",
}  # fmt: skip


def _fold_to_ascii(exc: UnicodeError) -> tuple:
    """The codec error handler of ``_encodable_output``: a character the output cannot encode becomes its
    ASCII letters (``Lovász`` -> ``Lovasz``), a spelling of it (``≤`` -> ``<=``) or its escape (``\\u4e2d``); a
    byte a file name could not decode (``surrogateescape``) is written back as that byte."""
    import unicodedata

    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = b""
    for ch in exc.object[exc.start : exc.end]:
        if 0xDC80 <= ord(ch) <= 0xDCFF:  # surrogateescape: the undecodable byte itself
            out += bytes([ord(ch) - 0xDC00])
            continue
        folded = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode("ascii")
        text = _ASCII_SPELLING.get(ch) or folded or ch.encode("ascii", "backslashreplace").decode("ascii")
        out += text.encode("ascii")
    return out, exc.end


@contextmanager
def _encodable_output():
    """Every command's output survives a stdout / stderr that cannot encode all of it (``LANG=C``,
    ``PYTHONIOENCODING=ascii``, a Latin-1 terminal): what they cannot encode is folded to ASCII
    (:func:`_fold_to_ascii`) instead of ending the command with ``UnicodeEncodeError`` (``gridify list keys``
    names the Lovász loss). The streams' error handling is restored on the way out."""
    import codecs

    try:
        codecs.lookup_error(ASCII_FOLD)
    except LookupError:
        codecs.register_error(ASCII_FOLD, _fold_to_ascii)
    saved = []
    for stream in (sys.stdout, sys.stderr):
        errors = getattr(stream, "errors", None)
        if callable(getattr(stream, "reconfigure", None)) and errors in (
            "strict",
            "backslashreplace",
            "surrogateescape",
        ):
            try:
                stream.reconfigure(errors=ASCII_FOLD)
                saved.append((stream, errors))
            except (OSError, ValueError):  # closed, or a stream that cannot change now
                pass
    try:
        yield
    finally:
        for stream, errors in saved:
            try:
                stream.reconfigure(errors=errors)
            except (OSError, ValueError):
                pass


#: the one last resort of the commands and the scripts (``gridify._cliargs.last_resort``)
TRACEBACK_ENV = types.TRACEBACK_ENV
_last_resort = types.last_resort


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
