#!/usr/bin/env python
"""Train a CfC and a Delta-t GRU on sequences of point clouds; test on regular and irregular sampling.

Both models share the same gridified per-frame encoder architecture, width, seed and training
data (:class:`gridify.datasets.DynamicShapes`, sampled as ``data.train_sampling``; ``mixed``
shows the models regular and irregular sequences, so they can learn to use the elapsed time).
After training, the encoder's BatchNorm statistics are re-estimated on the training sequences
(``train.recalibrate_bn``). Each model is evaluated on the SAME test motions observed at
regular times, at irregular times (jittered, ``data.drop_prob`` of the frames dropped) and,
unless ``data.sparse_drop_prob`` is null, "sparse": irregular with more frames dropped (larger
gaps than in training). Results: a table on stdout, ``results.json`` and
``results.csv`` in the output folder, and ``model_<rnn>.pt`` checkpoints
(:func:`gridify.checkpoint.export_model`).

    python scripts/train_temporal.py --config configs/temporal/dynamic_shapes.yaml
    python scripts/train_temporal.py --config configs/temporal/dynamic_shapes.yaml train.epochs=2 data.train_per_class=8
"""
from __future__ import annotations

import argparse
import copy
import csv
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gridify.checkpoint import export_model  # noqa: E402
from gridify.datasets.dynamic import DynamicShapes, collate_sequences  # noqa: E402
from gridify.models import build_model  # noqa: E402
from gridify.nn import recalibrate_batchnorm  # noqa: E402

DEFAULTS: Dict[str, Any] = {
    "seed": 0,
    "threads": 1,
    "output_dir": "outputs/temporal",
    "rnns": ["cfc", "gru"],
    "data": {"num_points": 128, "num_frames": 8, "train_per_class": 150, "test_per_class": 50,
             "train_sampling": "mixed", "jitter": 0.4, "drop_prob": 0.3, "sparse_drop_prob": 0.6,
             "min_frames": 3, "noise": 0.005, "resample": False, "classes": None},
    "model": {"resolution": 5, "k": 6, "hidden_channels": 32, "backbone": "ccnn", "depth": 2,
              "kernel_size": 3, "omega0": 0.5, "dropout": 0.1, "pool": "mean", "rnn_hidden": 64,
              "cfc_mode": "default", "cfc_backbone_units": 64, "cfc_backbone_layers": 1,
              "time_scale": 1.0, "first_timespan": 1.0, "frame_readout": "flatten", "readout_channels": 8,
              "frame_features": 64,
              "frame_delta": True},
    "train": {"epochs": 25, "batch_size": 16, "lr": 3.0e-3, "weight_decay": 1.0e-4, "clip_norm": 1.0,
              "recalibrate_bn": True},
}


def merge(base: Dict[str, Any], new: Dict[str, Any]) -> Dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in new.items():
        if k not in out:
            raise SystemExit(f"unknown config key {k!r}; known: {sorted(out)}")
        out[k] = merge(out[k], v) if isinstance(out[k], dict) and isinstance(v, dict) else v
    return out


def override(cfg: Dict[str, Any], text: str) -> None:
    import yaml

    if "=" not in text:
        raise SystemExit(f"override {text!r} must look like key.sub=value")
    key, value = text.split("=", 1)
    *path, last = key.split(".")
    node = cfg
    for p in path:
        if not isinstance(node.get(p), dict):
            raise SystemExit(f"unknown config section {p!r} in override {text!r}")
        node = node[p]
    if last not in node:
        raise SystemExit(f"unknown config key {key!r}; known: {sorted(node)}")
    node[last] = yaml.safe_load(value)


def load_config(path: str | None, overrides: Sequence[str]) -> Dict[str, Any]:
    import yaml

    cfg = copy.deepcopy(DEFAULTS)
    if path:
        with open(path) as fh:
            cfg = merge(cfg, yaml.safe_load(fh) or {})
    for o in overrides:
        override(cfg, o)
    return cfg


def make_split(cfg: Dict[str, Any], split: str, sampling: str, per_class: int,
               drop_prob: float | None = None) -> List[Dict[str, torch.Tensor]]:
    d = cfg["data"]
    ds = DynamicShapes(split, num_samples_per_class=per_class, num_frames=d["num_frames"],
                       num_points=d["num_points"], sampling=sampling, jitter=d["jitter"],
                       drop_prob=d["drop_prob"] if drop_prob is None else drop_prob,
                       min_frames=d["min_frames"], noise=d["noise"], resample=d["resample"],
                       classes=d["classes"], seed=cfg["seed"])
    return [ds[i] for i in range(len(ds))]


def batches(items: List[Dict[str, torch.Tensor]], batch_size: int, rng: np.random.Generator | None):
    order = rng.permutation(len(items)) if rng is not None else np.arange(len(items))
    for s in range(0, len(items), batch_size):
        yield collate_sequences([items[i] for i in order[s:s + batch_size]])


@torch.no_grad()
def evaluate(model: nn.Module, items, batch_size: int, num_classes: int) -> Dict[str, Any]:
    model.eval()
    preds, labels = [], []
    for b in batches(items, batch_size, None):
        preds.append(forward_batch(model, b).logits.argmax(-1))
        labels.append(b["y"])
    p, y = torch.cat(preds), torch.cat(labels)
    per_class = [float((p[y == c] == c).float().mean()) if bool((y == c).any()) else float("nan")
                 for c in range(num_classes)]
    return {"acc": float((p == y).float().mean()), "per_class": per_class, "n": int(y.numel())}


def forward_batch(model: nn.Module, b: Dict[str, torch.Tensor]):
    return model(b["pos"], b["times"], mask=b["mask"])


def recalibrate(model: nn.Module, items, batch_size: int) -> int:
    """Re-estimate the encoder's BatchNorm statistics on ``items`` with the final weights.

    The running averages collected during a short training lag behind the weights (eval-mode
    accuracy can stay near chance while train-mode accuracy is high); this recomputes them in
    one pass without gradients and without touching any weight.
    """
    with torch.no_grad():
        return recalibrate_batchnorm(model, batches(items, batch_size, None), forward=forward_batch)


def train_one(rnn: str, cfg: Dict[str, Any], train_items, num_classes: int, log) -> nn.Module:
    tcfg = cfg["train"]
    torch.manual_seed(cfg["seed"])
    kwargs = dict(in_channels=3, num_classes=num_classes, rnn=rnn, **cfg["model"])
    model = build_model("temporal_cfc", **kwargs)
    model.model_kwargs = kwargs  # for the export
    opt = torch.optim.AdamW(model.parameters(), lr=tcfg["lr"], weight_decay=tcfg["weight_decay"])
    steps = tcfg["epochs"] * math.ceil(len(train_items) / tcfg["batch_size"])
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=tcfg["lr"], total_steps=max(steps, 1), pct_start=0.15)
    rng = np.random.default_rng(cfg["seed"])
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(tcfg["epochs"]):
        model.train()
        t0, total, correct, seen = time.time(), 0.0, 0, 0
        for b in batches(train_items, tcfg["batch_size"], rng):
            out = forward_batch(model, b)
            loss = loss_fn(out.logits, b["y"])
            opt.zero_grad()
            loss.backward()
            if tcfg["clip_norm"]:
                nn.utils.clip_grad_norm_(model.parameters(), tcfg["clip_norm"])
            opt.step()
            sched.step()
            total += float(loss.detach()) * b["y"].numel()
            correct += int((out.logits.argmax(-1) == b["y"]).sum())
            seen += b["y"].numel()
        log(f"[{rnn}] epoch {epoch + 1}/{tcfg['epochs']} loss {total / seen:.4f} train acc {correct / seen:.3f} "
            f"({time.time() - t0:.1f}s)")
    return model


def main(argv: Sequence[str] | None = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=None, help="YAML config (see configs/temporal/dynamic_shapes.yaml)")
    ap.add_argument("--output-dir", default=None, help="overrides output_dir")
    ap.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, args.overrides)
    if args.output_dir:
        cfg["output_dir"] = args.output_dir
    torch.set_num_threads(int(cfg["threads"]))
    out_dir = Path(cfg["output_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    log_lines: List[str] = []

    def log(msg: str) -> None:
        print(msg, flush=True)
        log_lines.append(msg)

    d = cfg["data"]
    t0 = time.time()
    train_items = make_split(cfg, "train", d["train_sampling"], d["train_per_class"])
    tests = {"regular": make_split(cfg, "test", "regular", d["test_per_class"]),
             "irregular": make_split(cfg, "test", "irregular", d["test_per_class"])}
    if d["sparse_drop_prob"] is not None:  # larger gaps than in training
        tests["sparse"] = make_split(cfg, "test", "irregular", d["test_per_class"], drop_prob=d["sparse_drop_prob"])
    probe = DynamicShapes("test", num_samples_per_class=1, classes=d["classes"])
    classes, num_classes = probe.classes, probe.num_classes
    def interval_stats(items) -> Dict[str, float]:
        n = np.array([len(it["times"]) for it in items])
        dt = np.concatenate([np.diff(it["times"].numpy()) for it in items])
        return {"mean_frames": float(n.mean()), "min_frames": int(n.min()), "mean_dt": float(dt.mean()),
                "min_dt": float(dt.min()), "max_dt": float(dt.max())}

    stats = {name: interval_stats(items) for name, items in tests.items() if name != "regular"}
    stats["train"] = interval_stats(train_items)
    log(f"data: {len(train_items)} train sequences ({d['train_sampling']} sampling), {len(tests['regular'])} test "
        f"sequences x {len(tests)} samplings, {num_classes} classes, {d['num_points']} points/frame "
        f"({time.time() - t0:.1f}s)")
    for name, st in stats.items():
        log(f"{name}: frames per sequence mean {st['mean_frames']:.2f} (min {st['min_frames']}); "
            f"intervals mean {st['mean_dt']:.2f}, min {st['min_dt']:.2f}, max {st['max_dt']:.2f} (regular: 1.00)")

    results: Dict[str, Any] = {"config": cfg, "classes": classes, "models": {},
                               "sampling_stats": stats}
    for rnn in cfg["rnns"]:
        t1 = time.time()
        model = train_one(rnn, cfg, train_items, num_classes, log)
        train_s = time.time() - t1
        bs = cfg["train"]["batch_size"]
        res: Dict[str, Any] = {}
        if cfg["train"]["recalibrate_bn"]:
            # the regular test set with the running statistics left by training, for comparison
            res["regular_stale_bn"] = evaluate(model, tests["regular"], bs, num_classes)
            res["bn_batches"] = recalibrate(model, train_items, bs)
        res["train_eval"] = evaluate(model, train_items, bs, num_classes)  # eval mode, after recalibration
        res.update({name: evaluate(model, items, bs, num_classes) for name, items in tests.items()})
        res["train_seconds"] = train_s
        res["parameters"] = sum(p.numel() for p in model.parameters())
        res["rnn_parameters"] = sum(p.numel() for p in model.rnn.parameters())
        results["models"][rnn] = res
        if "regular_stale_bn" in res:
            log(f"[{rnn}] regular test acc with the BatchNorm statistics left by training: "
                f"{res['regular_stale_bn']['acc']:.3f} (recalibrated: {res['regular']['acc']:.3f})")
        log(f"[{rnn}] eval-mode train acc {res['train_eval']['acc']:.3f}; test acc "
            + " ".join(f"{name} {res[name]['acc']:.3f}" for name in tests) + f" (trained {train_s:.0f}s)")
        export_model(out_dir / f"model_{rnn}.pt", model, {
            "model_name": "temporal_cfc", "model_kwargs": model.model_kwargs, "task": "sequence_classification",
            "info": {"class_names": classes, "dataset": "dynamic_shapes"}, "config": cfg, "class_names": classes})

    names = list(tests)
    header = f"{'model':<6} {'params':>8} {'train(eval)':>11} " + " ".join(f"{n:>10}" for n in names)
    log("")
    log(f"test accuracy (train sampling: {d['train_sampling']}, seed {cfg['seed']}, "
        f"{len(tests['regular'])} test sequences per sampling)")
    log(header)
    rows = []
    for rnn, res in results["models"].items():
        accs = {n: res[n]["acc"] for n in names}
        log(f"{rnn:<6} {res['parameters']:>8} {res['train_eval']['acc']:>11.3f} "
            + " ".join(f"{accs[n]:>10.3f}" for n in names))
        rows.append({"model": rnn, "parameters": res["parameters"], "train_sampling": d["train_sampling"],
                     "acc_train_eval": res["train_eval"]["acc"], **{f"acc_{n}": accs[n] for n in names},
                     "train_seconds": round(res["train_seconds"], 1), "seed": cfg["seed"]})
        log(f"  per class ({' / '.join(names)}): " + ", ".join(
            f"{c} " + "/".join(f"{res[n]['per_class'][i]:.2f}" for n in names) for i, c in enumerate(classes)))
    results["total_seconds"] = time.time() - t0
    with open(out_dir / "results.json", "w") as fh:
        json.dump(results, fh, indent=2)
    with open(out_dir / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["model"])
        w.writeheader()
        w.writerows(rows)
    (out_dir / "log.txt").write_text("\n".join(log_lines) + "\n")
    log(f"wrote {out_dir / 'results.json'}, {out_dir / 'results.csv'} ({results['total_seconds']:.0f}s total)")
    return results


if __name__ == "__main__":
    main()
