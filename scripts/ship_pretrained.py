#!/usr/bin/env python
"""Package a trained model as a shipped pretrained model (``gridify/pretrained/<name>.pt``).

    python scripts/ship_pretrained.py outputs/modelnet10_fast/checkpoints/model.pt --name modelnet10

Reads an exported ``model.pt`` (as ``gridify train`` writes it), drops what only made sense on the
machine that trained it (absolute paths: the output folder, the data root, the source checkpoint; an
``init_weights`` file is kept as ``<run>/checkpoints/<file>``)
and records where the weights came from (``info["pretrained"]``: the run's name, epoch, seed and
test metrics when ``test_metrics.json`` sits beside the run, unless ``--no-test-metrics``: for a recipe whose
"test" split is its validation data, as ``semantickitti_mini``'s is). The result loads with
``gridify.load("<name>")`` and ``gridify predict FILE --model <name>``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from gridify import _cliargs as types
from gridify._files import atomic_write_bytes
from gridify._paths import check_output_file

ROOT = Path(__file__).resolve().parents[1]
PROG = "ship_pretrained.py"

#: a shipped model's name: it names ``gridify/pretrained/<name>.pt``, ``gridify.load(name)`` and ``outputs/<name>``
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def model_name(text: str) -> str:
    """``--name``: letters, digits, ``_`` and ``-``, starting with a letter or a digit, at most 64 characters (no
    folder, no dot: it is a name, not a path)."""
    if not NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"must be a model name: letters, digits, '_' and '-', starting with a letter or a digit, at most 64 "
            f"characters (it names gridify/pretrained/<name>.pt and gridify.load(name)), got {text!r}"
        )
    return text


def scrub(payload: Dict[str, Any], name: str, run: Path, test_metrics: bool = True) -> Dict[str, Any]:
    """``payload`` without machine-specific paths, with its provenance in ``info["pretrained"]`` (the run's
    ``test_metrics.json`` among it only with ``test_metrics``)."""
    out = dict(payload)
    config = json.loads(json.dumps(out.get("config") or {}))  # a deep, plain copy
    config["output_dir"] = f"outputs/{name}"
    if isinstance(config.get("data"), dict):
        config["data"]["root"] = None  # found again by name (--data-root, GRIDIFY_DATA, ./data)
    init = config.get("init_weights")
    if isinstance(init, str) and Path(init).name != init:  # a file of this machine: keep the run-relative part
        parts = Path(init).parts
        config["init_weights"] = "/".join(parts[-3:] if len(parts) >= 3 and parts[-2] == "checkpoints" else parts[-1:])
    out["config"] = config
    source = Path(str(out.get("checkpoint") or "model.pt")).name
    out["checkpoint"] = source
    provenance: Dict[str, Any] = {"name": name, "run": run.name, "from_checkpoint": source, "seed": config.get("seed")}
    if config.get("init_weights") is not None:
        provenance["init_weights"] = config["init_weights"]  # trained on from these weights (init_weights)
    val = _val_metrics(run, source)
    if val:
        provenance["val_metrics"] = val
    metrics = run / "test_metrics.json"
    if test_metrics and metrics.is_file():
        report = read_test_metrics(metrics)
        votes = report.get("votes", (config.get("trainer") or {}).get("test_votes", 1))
        provenance.update(
            test_metrics=report.get("metrics"), test_votes=votes, num_test_samples=report.get("num_samples")
        )
    info = dict(out.get("info") or {})
    info["pretrained"] = provenance
    out["info"] = info
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_test_metrics(path: Path) -> Dict[str, Any]:
    """The run's ``test_metrics.json`` (as ``gridify train`` writes it: ``{"metrics": {name: number}, "num_samples":
    int, "votes": int}``); :class:`gridify._cliargs.ScriptError` naming the file and what is wrong otherwise."""
    report = types.read_json_object(path, "'metrics'", hint="delete it or pass --no-test-metrics")
    metrics = report.get("metrics")
    if not isinstance(metrics, dict) or not all(isinstance(k, str) and _number(v) for k, v in metrics.items()):
        raise types.ScriptError(f"{path}: 'metrics' must map metric names to finite numbers, got {metrics!r:.120}")
    for key in ("num_samples", "votes"):
        value = report.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise types.ScriptError(f"{path}: {key!r} must be a whole number >= 0, got {value!r:.80}")
    return report


def _version(folder: str) -> int:
    """N of a ``version_N`` folder (-1 for another name): the last version is the newest log."""
    tail = folder[len("version_") :]
    return int(tail) if tail.isascii() and tail.isdigit() else -1


def _source_epoch(run: Path, source: str) -> Optional[int]:
    """The epoch (counted from 1) whose weights ``source`` holds: read from its name (``epochNNN-...ckpt``,
    ``best-epochNNN.ckpt``, with the numbering of the session that wrote it: :mod:`gridify.training.epochs`), else
    None (``last.ckpt``: the last epoch logged)."""
    from gridify.training.epochs import checkpoint_epoch, session_epoch_base  # noqa: PLC0415

    if checkpoint_epoch(source) is None:
        return None
    info: Dict[str, Any] = {}
    try:
        info = json.loads((run / "run_info.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        pass
    ckpt = run / "checkpoints" / source
    when = ckpt.stat().st_mtime if ckpt.is_file() else None
    return checkpoint_epoch(source, session_epoch_base(info if isinstance(info, dict) else {}, when))


def _val_metrics(run: Path, source: str) -> Dict[str, float]:
    """The validation metrics logged for the epoch of ``source`` (:func:`_source_epoch`; ``last.ckpt``: the last
    epoch with validation metrics) in the run's newest CSV log (``csv/version_*/metrics.csv``, its epochs read as
    counted from 1 whichever numbering wrote them); empty when either is missing. A log that is not a table of
    numbers is a :class:`gridify._cliargs.ScriptError` naming the file and the row."""
    from gridify.training.epochs import log_epoch_base, read_epoch  # noqa: PLC0415

    logs = sorted(run.glob("csv/version_*/metrics.csv"), key=lambda f: (_version(f.parent.name), f.parent.name))
    epoch = _source_epoch(run, source)
    if not logs or (epoch is None and source != "last.ckpt"):
        return {}
    base = log_epoch_base(logs[-1].parent)
    by_epoch: Dict[int, Dict[str, float]] = {}
    try:
        with open(logs[-1], newline="", encoding="utf-8") as f:
            for line, row in enumerate(csv.DictReader(f), start=2):
                try:
                    at = int(float(read_epoch({"epoch": float(row.get("epoch") or "nan")}, base)["epoch"]))
                except (TypeError, ValueError):
                    continue
                for k, v in row.items():
                    if isinstance(k, str) and k.startswith("val_") and v:
                        try:
                            value = float(v)
                        except ValueError:
                            value = math.nan
                        if not math.isfinite(value):
                            raise types.ScriptError(
                                f"{logs[-1]}: line {line}, column {k}: {v!r} is not a finite number"
                            )
                        by_epoch.setdefault(at, {})[k] = value
    except (UnicodeDecodeError, csv.Error) as exc:
        raise types.ScriptError(f"{logs[-1]}: not a CSV table of numbers ({exc})") from None
    if epoch is None:  # last.ckpt: the weights of the last epoch trained, the last one validated
        epoch = max(by_epoch, default=None)
    return by_epoch.get(epoch, {}) if epoch is not None else {}


@types.script_errors(PROG)
def main(argv: Optional[Sequence[str]] = None) -> None:
    p = types.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="an exported model.pt of a finished training run")
    p.add_argument("--name", required=True, type=model_name, help="the shipped model's name (gridify.load(name))")
    p.add_argument("--out", type=types.output_file(), help="default: gridify/pretrained/<name>.pt")
    p.add_argument(
        "--no-test-metrics",
        dest="test_metrics",
        action="store_false",
        help="leave the run's test_metrics.json out (a 'test' split that is the validation data)",
    )
    args = p.parse_args(argv)
    out = Path(args.out) if args.out else ROOT / "gridify" / "pretrained" / f"{args.name}.pt"
    check_output_file(out, "--out" if args.out else "--out (default)")  # before anything is read
    import torch  # noqa: PLC0415 - heavy: after --help and argument errors

    from gridify.checkpoint import CheckpointError, check_payload, load_checkpoint  # noqa: PLC0415

    src = Path(args.model).resolve()
    try:  # the library's safe reader names a missing, corrupt, unsafe or foreign file
        kind = load_checkpoint(src)["kind"]
    except CheckpointError as exc:
        p.error(str(exc))
    if kind != "export":
        p.error(f"{args.model}: a Lightning checkpoint; pass the run's exported checkpoints/model.pt")
    payload = torch.load(src, map_location="cpu", weights_only=True)
    run = src.parent.parent if src.parent.name == "checkpoints" else src.parent
    shipped = scrub(payload, args.name, run, test_metrics=args.test_metrics)
    try:
        check_payload(shipped, str(src))
    except CheckpointError as exc:
        raise types.ScriptError(str(exc)) from None
    buf = io.BytesIO()
    torch.save(shipped, buf)
    atomic_write_bytes(out, buf.getvalue())
    load_checkpoint(out)  # reads back like any checkpoint
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB) from {src}")


if __name__ == "__main__":
    sys.exit(types.run_script(main, PROG))
