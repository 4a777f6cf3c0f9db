"""``gridify export``: a trained model (a ``model.pt`` / ``.ckpt`` file or a shipped model's name) as a
self-contained ONNX file, checked with onnxruntime against PyTorch (:func:`gridify.export.export_onnx`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .. import _cliargs as types
from .._paths import check_input_file
from .._pretrained import PRETRAINED, closest_shipped, shipped_name

__all__ = ["add_export_parser", "cmd_export"]


def add_export_parser(sub: Any) -> None:
    """The ``export`` sub-command."""
    from .._clinames import EXPORT_FORMATS, EXPORT_HINT

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

    from ..api import pretrained_path
    from ..checkpoint import CheckpointError
    from ..export import ExportError, export_onnx

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
