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
import io
import json
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from gridify._files import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[1]


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
        report = json.loads(metrics.read_text())
        votes = report.get("votes", (config.get("trainer") or {}).get("test_votes", 1))
        provenance.update(
            test_metrics=report.get("metrics"), test_votes=votes, num_test_samples=report.get("num_samples")
        )
    info = dict(out.get("info") or {})
    info["pretrained"] = provenance
    out["info"] = info
    return out


def _val_metrics(run: Path, source: str) -> Dict[str, float]:
    """The validation metrics logged for the epoch of ``source`` (``epochNNN-...ckpt``, ``best-epochNNN.ckpt``) in the run's
    CSV log (``csv/version_*/metrics.csv``); empty when either is missing."""
    import csv
    import re

    match = re.search(r"epoch(\d+)", source)
    logs = sorted(run.glob("csv/version_*/metrics.csv"))
    if not match or not logs:
        return {}
    epoch = int(match.group(1))
    out: Dict[str, float] = {}
    with open(logs[-1], newline="") as f:
        for row in csv.DictReader(f):
            if row.get("epoch") == str(epoch):
                out.update({k: float(v) for k, v in row.items() if k.startswith("val_") and v})
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="an exported model.pt of a finished training run")
    p.add_argument("--name", required=True, help="the shipped model's name (gridify.load(name))")
    p.add_argument("--out", help="default: gridify/pretrained/<name>.pt")
    p.add_argument(
        "--no-test-metrics",
        dest="test_metrics",
        action="store_false",
        help="leave the run's test_metrics.json out (a 'test' split that is the validation data)",
    )
    args = p.parse_args(argv)
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
    check_payload(shipped, str(src))
    buf = io.BytesIO()
    torch.save(shipped, buf)
    out = Path(args.out) if args.out else ROOT / "gridify" / "pretrained" / f"{args.name}.pt"
    atomic_write_bytes(out, buf.getvalue())
    load_checkpoint(out)  # reads back like any checkpoint
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB) from {src}")


if __name__ == "__main__":
    main()
