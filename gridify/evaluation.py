"""Evaluate a trained gridified network on the test split.

    python scripts/evaluate.py --ckpt outputs/procedural/checkpoints/model.pt
    python scripts/evaluate.py --ckpt outputs/procedural/checkpoints/last.ckpt data.batch_size=32
    gridify evaluate --ckpt model.pt --data-root /data              # the same dataset, found under another root
    gridify evaluate --ckpt model.pt --config modelnet10 --data-root /data

``--ckpt`` takes a Lightning checkpoint written by ``scripts/train.py`` or the exported
``model.pt``; both are read with ``torch.load(..., weights_only=True)`` (tensors and plain
containers only, no pickled code). The model is rebuilt from the hyper-parameters stored in
the file; the dataset comes from the config stored there too, updated by ``--config`` (a shipped
config's name or a YAML file), ``--data-root`` and ``section.key=value`` overrides.

The metrics (OA and mAcc for classification; instance and class mIoU for segmentation, with the
IoU of every category by name; for a task whose clouds are whole scenes
(:attr:`gridify.tasks.Task.whole_scenes`, ``task: scene_segmentation``) mIoU, OA and mAcc over EVERY
original point of every scene of the split, by :func:`gridify.scene_inference.evaluate_scenes`
with the run's ``data.voxel_size`` / ``data.max_points`` (``--voxel-size`` / ``--max-points`` or
the keyword arguments of :func:`evaluate` override them), with the IoU of every class by name and
the confusion matrix) are printed and written as JSON to ``--output`` (default:
``<ckpt name>.test_metrics.json`` beside the checkpoint). The checkpoint and the output path are
checked before anything is evaluated; numbers and devices are parsed by the shared types of
:mod:`gridify._cliargs`. Errors are one line (:func:`gridify.training.cli.error_line`; an
``OSError`` while writing: :func:`gridify._paths.one_line_errors`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import DataLoader

from gridify._commands import (
    check_evaluate_args,
    check_route,
    evaluate_facts,
    evaluate_parser,
    light_route,
)
from gridify._paths import check_input_file, check_output_file, one_line_errors
from gridify._cliargs import Interrupted, check_ckpt, given_options
from gridify._version import __version__
from gridify.checkpoint import CheckpointError, build_model_from_checkpoint, inference_settings, load_checkpoint
from gridify.datasets import DatasetError, DatasetNotFoundError, DownloadError
from gridify.precision import autocast, resolve_precision
from gridify.scene_inference import check_max_fragments, evaluate_scenes, scene_defaults
from gridify.tasks import get_task
from gridify.training.cli import error_line
from gridify.training.config import DEFAULTS, ConfigError, check_config, deep_merge, resolve_config
from gridify.training.data import build_dataset
from gridify.training.metrics import evaluate_model, format_metrics
from gridify.training.report import write_json


build_parser = evaluate_parser  # the parser lives in gridify._commands (no torch while parsing)


#: a keyword argument of :func:`evaluate` left to the config (and the command line)
FROM_CONFIG: Any = object()


def output_path(args: argparse.Namespace) -> Path:
    """Where the metrics go: ``--output``, else ``<ckpt stem>.<split>_metrics.json`` beside the checkpoint (with
    ``--scan``: ``<ckpt stem>.scan_metrics.json`` beside it, or ``<model>.scan_metrics.json`` in the current folder
    for a shipped ``--model``)."""
    if args.output:
        return Path(args.output)
    kind = "scan" if getattr(args, "scan", None) is not None else args.split
    if not args.ckpt:
        return Path(f"{args.model}.{kind}_metrics.json")
    ckpt = Path(args.ckpt)
    return ckpt.with_name(f"{ckpt.stem}.{kind}_metrics.json")


def _check_output(args: argparse.Namespace) -> Path:
    """:func:`output_path`, checked before anything is loaded (a PathError naming the flag or the default)."""
    out = output_path(args)
    check_output_file(out, "--output" if args.output else "metrics file (pass --output to choose another)")
    return out


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Evaluate from the command line ``argv`` (default ``sys.argv[1:]``); returns the report.

    The checkpoint and the metrics path are checked before anything is loaded or evaluated; every
    error, an ``OSError`` while writing included, ends the command with one line."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_intermixed_args(argv)
    # what was typed: an argument the route does not read is refused (gridify._commands.OPTION_USE)
    args.given_options = given_options(parser, argv, intermixed=True)
    with one_line_errors(parser.prog):
        check_evaluate_args(args, parser)
        check_route(parser.prog, "evaluate", args.given_options, *light_route("evaluate", args))
        check_ckpt(args.ckpt)  # missing, a folder or a FIFO: named with the flag
        _check_output(args)
        if args.threads:
            torch.set_num_threads(args.threads)
        if args.scan is not None:
            return evaluate_scans(args, parser.prog)
        return evaluate(args, parser.prog)


def scene_settings(
    cfg: Dict[str, Any], args: argparse.Namespace, voxel_size: Any = FROM_CONFIG, max_points: Any = FROM_CONFIG
) -> Dict[str, Any]:
    """``voxel_size`` / ``max_points`` of a scene evaluation: the keyword argument, else the command
    line (``--voxel-size`` / ``--max-points``), else the run's ``data`` section (None: not set)."""
    out = {}
    for key, given in (("voxel_size", voxel_size), ("max_points", max_points)):
        flag = getattr(args, key, None)
        out[key] = given if given is not FROM_CONFIG else (flag if flag is not None else cfg["data"].get(key))
    return out


def scene_views(args: argparse.Namespace, info: Optional[Dict[str, Any]], prog: str) -> Dict[str, Any]:
    """``{"votes", "max_fragments"}`` of a whole-scene evaluation: ``--votes`` / ``--max-fragments`` where
    given, else the checkpoint's recorded defaults (:func:`gridify.scene_inference.scene_defaults`)."""
    votes, cap = scene_defaults(info)
    given = getattr(args, "max_fragments", None)
    return {
        "votes": votes if getattr(args, "votes", None) is None else args.votes,
        "max_fragments": cap if given is None else check_max_fragments(prog, given),
    }


#: the ``evaluate`` flags of whole-scene scoring and their argument names
SCENE_FLAGS = (("--voxel-size", "voxel_size"), ("--max-points", "max_points"), ("--max-fragments", "max_fragments"))


def check_scene_flags(args: argparse.Namespace, task: str, prog: str, scan: bool = False) -> None:
    """The arguments given that a route of ``evaluate`` with a model of ``task`` does not read (``--voxel-size``
    for a classifier, ``--config`` with ``--scan``, ...), refused by name (``gridify._commands.OPTION_USE``).
    Without the typed arguments (``args.given_options``, set by :func:`main`), the scene flags that hold a
    value count as given."""
    given = getattr(args, "given_options", None)
    if given is None:
        given = {key: flag for flag, key in SCENE_FLAGS if getattr(args, key, None) is not None}
    facts = evaluate_facts(args, scan)
    facts[f"model:{get_task(task).model_kind}"] = f"a {task} checkpoint"
    check_route(prog, "evaluate", given, facts)


def scene_dataset_config(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """``cfg`` with the training crop settings of the data section cleared, so that every split's items
    are whole scenes (evaluation scores every original point, the train split included)."""
    data = dict(cfg["data"])
    for key in ("voxel_size", "max_points"):
        if data.get(key) is not None:
            data[key] = None
        for split in ("train", "val", "test"):
            if isinstance(data.get(split), dict) and data[split].get(key) is not None:
                data[split] = {**data[split], key: None}
    return {**cfg, "data": data}


def _evaluate_scenes(
    model: torch.nn.Module,
    ds: Any,
    settings: Dict[str, Any],
    device: torch.device,
    args: argparse.Namespace,
    prog: str = "gridify evaluate",
) -> Tuple[Dict[str, float], Dict[str, Any]]:
    """Whole-scene scores of ``ds`` (every original point) with the scene settings."""
    model.eval().to(device)
    try:
        metrics, extra = evaluate_scenes(
            model,
            ds,
            voxel_size=settings["voxel_size"],
            max_points=settings["max_points"],
            votes=settings["votes"],
            progress=not args.no_progress,
            max_fragments=settings["max_fragments"],
        )
    except ValueError as exc:  # a scene, its labels or a setting: named by evaluate_scenes (scene index too)
        raise SystemExit(f"{prog}: error: {error_line(exc)}")
    extra = {**extra, "num_scored": extra["num_scenes"], **settings}
    extra["max_fragments"] = "all" if settings["max_fragments"] is None else settings["max_fragments"]
    return metrics, extra


def _evaluation_config(payload: Dict[str, Any], args: argparse.Namespace, prog: str) -> Dict[str, Any]:
    """The checkpoint's stored config updated by ``--config``, ``--data-root``, the overrides and the batch flags."""
    try:
        stored = check_config(deep_merge(DEFAULTS, payload["config"]))
        root = [] if args.data_root is None else [f"data.root={json.dumps(args.data_root)}"]
        cfg = resolve_config(args.config, [*args.overrides, *root], base=stored)
    except ConfigError as exc:
        raise SystemExit(f"{prog}: config error: {error_line(exc)}")
    if cfg["task"] != payload["task"]:
        raise SystemExit(
            f"{prog}: config error: the checkpoint is a {payload['task']} model but the config says task: {cfg['task']}"
        )
    if args.batch_size:
        cfg["data"]["eval_batch_size"] = args.batch_size
    if args.num_workers is not None:
        cfg["data"]["num_workers"] = args.num_workers
    return cfg


def _evaluation_dataset(cfg: Dict[str, Any], split: str, scenes: bool, prog: str) -> Any:
    """The ``split`` of the config's dataset (whole scenes for a scene task); errors are ``SystemExit`` lines."""
    try:
        return build_dataset(scene_dataset_config(cfg) if scenes else cfg, split)
    except ConfigError as exc:
        raise SystemExit(f"{prog}: config error: {error_line(exc)}")
    except (DatasetNotFoundError, DownloadError, DatasetError) as exc:
        raise SystemExit(f"{prog}: error: {error_line(exc)}")


def _evaluation_loader(ds: Any, cfg: Dict[str, Any]) -> DataLoader:
    """An unshuffled loader of ``ds`` with the config's evaluation batch size, workers and the task's collate."""
    return DataLoader(
        ds,
        batch_size=int(cfg["data"].get("eval_batch_size") or cfg["data"]["batch_size"]),
        shuffle=False,
        num_workers=int(cfg["data"]["num_workers"]),
        collate_fn=get_task(cfg["task"]).collate,
    )


def _check_input_width(ds: Any, payload: Dict[str, Any], scenes: bool, prog: str) -> None:
    """The dataset's columns per point against the model's ``in_channels``, before anything runs (a
    ``data.features`` override of another width failed inside the model's first forward pass)."""
    want, have = inference_settings(payload)["in_channels"], getattr(ds, "in_channels", None)
    if not isinstance(have, int) or have == want:
        return
    if scenes:
        trained = (payload.get("info") or {}).get("features")
        raise SystemExit(
            f"{prog}: config error: data.features: {list(getattr(ds, 'features', ()))} give {have} column(s) per "
            f"point but the model takes {want}"
            + (f"; evaluate with the features it was trained with (data.features={list(trained)})" if trained else "")
        )
    raise SystemExit(
        f"{prog}: config error: data: the dataset gives {have} input channel(s) per point (data.use_normals, "
        f"data.columns) but the model takes {want}"
    )


#: what a dataset must say as the checkpoint recorded it (the keys of :meth:`gridify.tasks.Task.dataset_info`),
#: and how a message names each: features in another order feed the model wrong columns, classes in another
#: order or of other names score its outputs against the wrong labels
MATCHED_INFO = (
    ("features", "data.features"),
    ("num_outputs", "the number of classes"),
    ("class_names", "the class names"),
    ("category_names", "the category names"),
    ("category_to_parts", "the parts of each category"),
)


def _check_dataset_matches(ds: Any, payload: Dict[str, Any], task: str, prog: str) -> None:
    """The dataset's features, classes and categories as the checkpoint records them (same names, same order),
    before anything runs: a config error naming the key and both values (``data.features: [height, strength]``
    on a model trained with ``[strength, height]`` ran and reported the metrics of a wrongly fed model)."""
    recorded = payload.get("info") or {}
    try:
        now = get_task(task).dataset_info(ds)
    except (AttributeError, TypeError, ValueError):  # a dataset that cannot say: nothing to compare
        return
    for key, words in MATCHED_INFO:
        want, have = recorded.get(key), now.get(key)
        if want is None or have is None or _plain(want) == _plain(have):
            continue
        same = isinstance(want, (list, tuple)) and sorted(map(str, want)) == sorted(map(str, have))
        fix = f"; evaluate with data.features={list(want)}" if key == "features" else ""
        raise SystemExit(
            f"{prog}: config error: {words}: the dataset gives {_plain(have)} but the model was trained with "
            f"{_plain(want)}" + (" (the same names in another order)" if same else "") + fix
        )


def _plain(value: Any) -> Any:
    """``value`` with tuples as lists and numbers as Python numbers (a checkpoint stores lists)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def evaluate(
    args: argparse.Namespace, prog: str, *, voxel_size: Any = FROM_CONFIG, max_points: Any = FROM_CONFIG
) -> Dict[str, Any]:
    """The evaluation of :func:`main` with parsed arguments; errors are ``SystemExit`` lines prefixed ``prog``.

    ``voxel_size`` / ``max_points``: a scene evaluation's settings instead of the config's (see
    :func:`scene_settings`); the other tasks ignore them."""
    try:
        payload = load_checkpoint(args.ckpt)
    except CheckpointError as exc:
        raise SystemExit(f"{prog}: error: {exc}")
    cfg = _evaluation_config(payload, args, prog)
    check_scene_flags(args, cfg["task"], prog)  # an argument this checkpoint's route does not read

    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else ("cpu" if args.device == "auto" else args.device)
    )
    try:
        model = build_model_from_checkpoint(payload, reparameterize=True)
    except CheckpointError as exc:
        raise SystemExit(f"{prog}: error: {args.ckpt}: {exc}")

    scenes = get_task(cfg["task"]).whole_scenes  # scored whole (every original point), not item by item
    ds = _evaluation_dataset(cfg, args.split, scenes, prog)
    _check_input_width(ds, payload, scenes, prog)
    _check_dataset_matches(ds, payload, cfg["task"], prog)
    info = payload["info"]
    loader = _evaluation_loader(ds, cfg)
    precision = resolve_precision(args.precision, device, where=prog)
    t0 = time.time()
    try:
        with autocast(precision, device):
            if scenes:
                settings = {**scene_settings(cfg, args, voxel_size, max_points), **scene_views(args, info, prog)}
                metrics, extra = _evaluate_scenes(model, ds, settings, device, args, prog)
            else:
                votes = 1 if args.votes is None else args.votes
                metrics, extra = evaluate_model(
                    model, loader, cfg["task"], info, device, progress=not args.no_progress, votes=votes
                )
                extra = {**extra, "votes": votes}
    except DatasetError as exc:
        raise SystemExit(f"{prog}: error: {error_line(exc)}")
    seconds = time.time() - t0
    nothing = get_task(cfg["task"]).scored_nothing(metrics, extra)
    if nothing:  # exit 0 with mIoU 0.00 / NaN said the model scored 0 %, not that nothing was measured
        raise SystemExit(
            f"{prog}: error: {nothing} on the {args.split} split of {cfg['data']['name']} ({len(ds)} samples): "
            "nothing was measured (no metrics written)"
        )

    report: Dict[str, Any] = {
        "task": cfg["task"],
        "split": args.split,
        "metrics": metrics,
        "num_samples": len(ds),
        "checkpoint": str(args.ckpt),
        "checkpoint_kind": payload["kind"],
        "dataset": cfg["data"]["name"],
        "source_format": str(getattr(ds, "source_format", type(ds).__name__)),
        "gridify_version": __version__,
        "trained_with_gridify": payload.get("gridify_version"),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "eval_seconds": round(seconds, 2),
        "precision": precision,
    }
    report.update(extra)
    out = output_path(args)
    write_json(out, report)
    print(
        f"[evaluate] {args.ckpt} on {cfg['data']['name']} {args.split} ({extra['num_scored']} samples): "
        f"{format_metrics(cfg['task'], metrics)} -> {out}"
    )
    return report


def _scan_files(paths: Sequence[str], prog: str) -> list:
    """The scan files of ``--scan``: files as given, folders' readable point files (sorted, not recursive); a
    folder that is one scene of a layout is one scan (a Pointcept scene folder: its ``coord.npy``,
    :func:`~gridify.datasets.scene_layouts.folder_scan`). A folder holding a layout's scans below it (a
    SemanticKITTI sequence folder or the dataset root above it) is refused naming the folder that holds the scans
    (:func:`~gridify.datasets.scene_layouts.scan_folder_note`: a sequence's ``calib.txt`` / ``poses.txt`` /
    ``times.txt`` were read as point files)."""
    from gridify.datasets.scene_layouts import folder_scan, scan_folder_note
    from gridify.io import SUPPORTED_EXTENSIONS

    files = []
    for text in paths:
        p = Path(text)
        scan = folder_scan(p) if p.is_dir() else None
        note = scan_folder_note(p) if p.is_dir() and scan is None else None
        if scan is not None:  # one scene of a layout: one scan, its ground truth beside it
            files.append(scan)
        elif note is not None:
            raise SystemExit(f"{prog}: error: --scan {text}: {note[0]}: give --scan {note[1]}")
        elif p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file() and q.suffix.lower() in SUPPORTED_EXTENSIONS)
            if not found:
                raise SystemExit(f"{prog}: error: --scan {text}: no point-cloud files in this folder")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise SystemExit(f"{prog}: error: --scan {text}: no such file or folder")
    return files


def _scan_and_truth(
    path: Path, args: argparse.Namespace, model: Any, names: Sequence[str], prog: str
) -> Tuple[Any, Any, Path]:
    """``(cloud, target labels, label file)`` of one ``--scan`` file (a scene segmenter's read with its per-point
    fields: :func:`gridify.io.read_scan`, as the task's predictor reads a file); a bad file or label ends the command
    naming it."""
    from gridify.datasets.scene_layouts import check_scan_labels, read_scan_labels, scan_label_path

    try:
        cloud = model.task_predictor.read(path)
        label_file = Path(args.labels) if args.labels else scan_label_path(path)
        if label_file is not None:
            return cloud, read_scan_labels(label_file, cloud, list(names)), label_file
        if cloud.labels is not None:  # the file's own label field: ids of the model's classes too
            return cloud, check_scan_labels(path, cloud.labels, names), path
    except (DatasetError, ValueError, OSError) as exc:
        raise SystemExit(f"{prog}: error: {error_line(exc)}")
    why = cloud.ignored.get("labels")
    raise SystemExit(
        f"{prog}: error: {path}: no ground truth found (no labels/{path.stem}.label, "
        f"{path.stem}.label or label field{f'; its {why}' if why else ''}); pass --labels"
    )


def _scan_model(args: argparse.Namespace, prog: str) -> Any:
    """The model of ``evaluate --scan`` on ``--device``: a segmentation model without categories, and no
    argument given that its route does not read (:func:`check_scene_flags`)."""
    from gridify.api import load, pretrained_path

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        model = load(args.ckpt if args.ckpt else pretrained_path(args.model), device=device)
    except (CheckpointError, ValueError) as exc:
        raise SystemExit(f"{prog}: error: {exc}")
    if not model.dense or model.num_categories:
        raise SystemExit(
            f"{prog}: error: --scan scores per-point labels of a scene or segmentation model without "
            f"categories; this is a {model.task} model"
        )
    check_scene_flags(args, model.task, prog, scan=True)
    return model


def _scan_views(args: argparse.Namespace, model: Any, prog: str) -> Dict[str, Any]:
    """The options of ``predict`` for every scan that the model's task predictor takes
    (:meth:`~gridify.api.task_predictors.TaskPredictor.takes`): a scene model's views and fragments (the flags, else the checkpoint's
    defaults, what predict uses) and progress; a part segmenter takes none of them (one pass over every point)."""
    votes, cap = scene_views(args, model.meta.get("info"), prog).values()
    options = {"num_votes": votes, "max_fragments": "all" if cap is None else cap, "progress": not args.no_progress}
    return {key: value for key, value in options.items() if model.task_predictor.takes(key)}


def _scan_name(path: Path) -> str:
    """The name of a ``--scan`` file: its stem, or what its layout calls it (the folder's name of a Pointcept
    scene for its ``coord.npy``: :func:`~gridify.datasets.scene_layouts.scan_name`)."""
    from gridify.datasets.scene_layouts import scan_name

    return scan_name(path)


def _prediction_files(files: Sequence[Path], pred: Optional[str], prog: str) -> Optional[List[Path]]:
    """The ``--pred`` file of every scan (None without ``--pred``): the file given, for one scan; in a folder,
    ``<scan name>.<ext>`` per scan (:func:`_scan_name`; one of the extensions ``gridify predict --out`` writes).
    A scan without one, or with two, ends the command naming it, before anything is scored."""
    from gridify._paths import PREDICTION_FORMATS

    if pred is None:
        return None
    folder = Path(pred)
    if not folder.is_dir():
        check_input_file(folder, "--pred")
        if len(files) != 1:
            raise SystemExit(
                f"{prog}: error: --pred {pred}: one file for {len(files)} scans; give a folder holding "
                f"<scan name>.<ext> per scan ({', '.join(PREDICTION_FORMATS)}, as gridify predict --out writes)"
            )
        return [folder]
    found = []
    for scan in files:
        name = _scan_name(scan)
        here = [folder / f"{name}{ext}" for ext in PREDICTION_FORMATS]
        here = [c for c in here if c.is_file() and c.resolve() != scan.resolve()]
        if len(here) != 1:
            what = f"two predictions of it, {here[0].name} and {here[1].name}; keep one" if here else "none"
            raise SystemExit(
                f"{prog}: error: --pred {pred}: the labels of the scan {scan} are {name}.txt, .npy, .ply or .json "
                f"in this folder (as gridify predict --out writes them); found {what}"
            )
        found.append(here[0])
    return found


def _read_predicted(path: Path, cloud: Any, scan: Path, names: Sequence[str], prog: str) -> Any:
    """The labels ``[N]`` of ``scan`` read from its ``--pred`` file (:func:`gridify.api.read_prediction`)."""
    from gridify.api.prediction import read_prediction

    try:
        return read_prediction(path, len(cloud), names, scan=scan)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"{prog}: error: {error_line(exc)}")


def _nan_none(value: Any) -> Optional[float]:
    """A score as a JSON number, None where it is undefined (NaN: nothing of it was labelled)."""
    value = float(value)
    return None if value != value else value


def _percent(value: Optional[float]) -> str:
    return "-" if value is None else f"{100 * value:.2f} %"


def _score_scans(
    files: Sequence[Path],
    args: argparse.Namespace,
    model: Any,
    names: Sequence[str],
    prog: str,
    preds: Optional[Sequence[Path]],
    done: List[Tuple[Dict[str, Any], Any]],
) -> None:
    """Score every scan, appending ``(row, confusion [K, K])`` to ``done`` as each one finishes (so that an
    interruption keeps the scans scored) and printing its line: name, points, mIoU, OA, seconds. Every scan and its
    labels (and ``--pred`` labels) are read and checked before the first is labelled."""
    from gridify.metrics import SegmentationIoU

    labelled = None
    if len(files) > 1:
        labelled = 0
        for i, path in enumerate(files):
            cloud, target, _ = _scan_and_truth(path, args, model, names, prog)
            labelled += int((target >= 0).sum())
            if preds is not None:
                _read_predicted(preds[i], cloud, path, names, prog)
    kw = _scan_views(args, model, prog) if preds is None else {}
    for i, path in enumerate(files):
        t0 = time.time()
        cloud, target, label_file = _scan_and_truth(path, args, model, names, prog)
        if (int((target >= 0).sum()) if labelled is None else labelled) == 0:
            what = f"{label_file}: every point" if labelled is None else f"every point of the {len(files)} scans"
            raise SystemExit(
                f"{prog}: error: {what} is unlabelled (-1, the ignore index; SemanticKITTI's unlabeled and outlier "
                f"classes map to it): nothing to score"
            )
        if preds is not None:  # labels written by predict --out: the model is not run
            labels = _read_predicted(preds[i], cloud, path, names, prog)
        else:
            if kw.get("progress"):  # a bar per scan, named by it
                from gridify._progress import stderr_bar

                kw["progress"] = stderr_bar(f"evaluate {path.name}")
            try:
                labels = model.predict(cloud, **kw).labels  # a scene model's crops: a progress bar
            except (DatasetError, ValueError, OSError) as exc:
                raise SystemExit(f"{prog}: error: {error_line(exc)}")
        one = SegmentationIoU(len(names))
        one.update(torch.from_numpy(labels), torch.from_numpy(target))
        res = one.compute()
        row = {
            "scan": str(path),
            "labels": str(label_file),
            **({} if preds is None else {"prediction": str(preds[i])}),
            "points": len(target),
            "miou": _nan_none(res["miou"]),
            "oa": _nan_none(res["oa"]),
            "seconds": round(time.time() - t0, 2),
        }
        done.append((row, res["confusion"]))
        source = "" if preds is None else f", prediction {preds[i]}"
        print(
            f"[evaluate] scan {i + 1}/{len(files)} {path}: mIoU {_percent(row['miou'])}, OA {_percent(row['oa'])} "
            f"({row['points']} points, labels {label_file}{source}, {row['seconds']:.1f} s)",
            flush=True,
        )


def _scan_report(
    done: Sequence[Tuple[Dict[str, Any], Any]],
    total: int,
    args: argparse.Namespace,
    model: Any,
    names: Sequence[str],
    prog: str,
) -> Dict[str, Any]:
    """The summary of the scans in ``done`` (out of ``total``), printed (per-class IoU over all their points,
    :func:`gridify.metrics.confusion_scores`; mIoU, OA, mAcc) and returned as the report; ``partial`` when fewer
    than ``total`` were scored (an interruption)."""
    import numpy as np

    from gridify.metrics import confusion_scores

    res = confusion_scores(sum(confusion for _, confusion in done))
    ious = {n: (None if np.isnan(v) else float(v)) for n, v in zip(names, res["iou"].tolist())}
    width = max(len(n) for n in names)
    for n, v in ious.items():
        print(f"  {n:<{width}}  {'  absent' if v is None else f'{100 * v:6.2f} %'}")
    partial = len(done) < total
    scans = f"{len(done)} of {total} scan(s) (interrupted)" if partial else f"{total} scan(s)"
    print(
        f"[evaluate] {scans}: mIoU {100 * float(res['miou']):.2f} % over the {sum(v is not None for v in ious.values())} "
        f"classes present, OA {100 * float(res['oa']):.2f} %, mAcc {100 * float(res['macc']):.2f} %"
    )
    views = _scan_views(args, model, prog) if args.pred is None else {}
    return {
        "task": model.task,
        "partial": partial,
        "scans_finished": len(done),
        "scans_total": total,
        "scans": [row for row, _ in done],
        "metrics": {"miou": float(res["miou"]), "oa": float(res["oa"]), "macc": float(res["macc"])},
        "iou": ious,
        "confusion": res["confusion"].tolist(),
        "class_names": list(names),
        "checkpoint": str(args.ckpt or args.model),
        "labelled_by": "model" if args.pred is None else f"--pred {args.pred}",
        "votes": views.get("num_votes", 1 if args.pred is None else None),  # a model without views: one pass
        "max_fragments": views.get("max_fragments"),
        "gridify_version": __version__,
    }


def evaluate_scans(args: argparse.Namespace, prog: str) -> Dict[str, Any]:
    """``gridify evaluate --scan``: a segmentation model on scan files with ground truth; prints a line per scan as
    it is scored (mIoU, OA, points, seconds), then the per-class IoU over all points of all scans
    (:class:`gridify.metrics.SegmentationIoU`), and writes the report to ``--output`` (default: :func:`output_path`).
    ``--pred``: the labels ``gridify predict --out`` wrote (a file, or a folder of one per scan) are scored instead
    of running the model. Ctrl-C: the summary of the scans finished is printed and written (``"partial": true``),
    then the command ends with status 130 (:class:`gridify._cliargs.Interrupted`)."""
    out = _check_output(args)
    files = _scan_files(args.scan, prog)
    if args.labels is not None and (len(files) != 1 or not Path(args.labels).is_file()):
        raise SystemExit(f"{prog}: error: --labels {args.labels}: give one existing label file for one scan file")
    preds = _prediction_files(files, args.pred, prog)
    check_ckpt(args.ckpt)
    model = _scan_model(args, prog)
    names = list(model.class_names)
    done: List[Tuple[Dict[str, Any], Any]] = []
    try:
        _score_scans(files, args, model, names, prog, preds, done)
    except KeyboardInterrupt:
        if sys.stderr.isatty():
            print(file=sys.stderr)  # after a progress bar drawn in place
        if not done:
            raise Interrupted(
                f"{prog}: interrupted before the first of {len(files)} scan(s) was scored; nothing written"
            )
        report = _scan_report(done, len(files), args, model, names, prog)
        write_json(out, report)
        raise Interrupted(
            f"{prog}: interrupted after {len(done)} of {len(files)} scan(s); their summary is in {out} (partial)"
        ) from None
    report = _scan_report(done, len(files), args, model, names, prog)
    write_json(out, report)
    print(f"[evaluate] metrics written to {out}")
    return report


if __name__ == "__main__":
    main()
