"""``scripts/time_to_accuracy.py`` checks its arguments and run folders before it evaluates anything, and reads
gridify's and Lightning's per-epoch checkpoint names."""

import importlib.util
import json

import pytest

from tests.helpers import ROOT


def _script():
    spec = importlib.util.spec_from_file_location("time_to_accuracy", ROOT / "scripts" / "time_to_accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bad_runs_and_values_are_named_before_any_evaluation(tmp_path, monkeypatch):
    tta = _script()
    calls = []
    monkeypatch.setattr(tta, "evaluate", lambda argv: calls.append(argv))
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "run_info.json").write_text(json.dumps({"started": "2026-11-27 10:00:00"}))
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        ([str(tmp_path / "missing")], "missing: no such run folder"),
        ([str(afile)], "afile: not a folder"),
        ([str(tmp_path)], "no run_info.json"),
        ([str(run)], r"no per-epoch checkpoints \(checkpoints/epochNNN-stepNNNNNNN.ckpt\); train with"),
        ([str(run), "--target", "high"], "--target must be a number or 'none', got 'high'"),
        ([str(run), "--minutes", "nan"], "--minutes must be a finite number or 'none'"),
        ([str(run), "--out", str(afile)], "afile"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit, match=message):
            tta.main(argv)
    assert calls == []  # nothing was evaluated
    # Lightning's default names and gridify's both count, by epoch
    for name in ("epoch=1-step=20.ckpt", "epoch000-step0000010.ckpt", "epoch=2-step=30-v1.ckpt", "last.ckpt"):
        (run / "checkpoints" / name).write_bytes(b"")
    assert [c.name for c in tta.epoch_checkpoints(run)] == [
        "epoch000-step0000010.ckpt",
        "epoch=1-step=20.ckpt",
        "epoch=2-step=30-v1.ckpt",
    ]


def _logged_run(root, rows, name="run"):
    run = root / name
    (run / "csv" / "version_0").mkdir(parents=True)
    (run / "run_info.json").write_text(json.dumps({"started": "2026-11-27 10:00:00"}))
    keys = sorted({k for r in rows for k in r})
    lines = [",".join(keys)] + [",".join(str(r.get(k, "")) for k in keys) for r in rows]
    (run / "csv" / "version_0" / "metrics.csv").write_text("\n".join(lines) + "\n")
    return run


def test_logged_curve_reads_validation_and_training_time_without_evaluating(tmp_path, monkeypatch):
    tta = _script()
    monkeypatch.setattr(tta, "evaluate", lambda argv: pytest.fail("--logged must not evaluate"))
    rows = [
        {"epoch": 0, "step": 3, "train_seconds": 60.0},
        {"epoch": 1, "step": 7, "val_miou": 0.1, "val_oa": 0.5},
        {"epoch": 1, "step": 7, "train_seconds": 125.0},
        {"epoch": 2, "step": 11, "train_seconds": 180.0},
        {"epoch": 3, "step": 15, "val_miou": 0.25, "val_oa": 0.6},
        {"epoch": 3, "step": 15, "train_seconds": 240.0},
    ]
    grid = _logged_run(tmp_path, rows, "grid")
    peer = _logged_run(tmp_path, [{"epoch": 1, "step": 7, "val_miou": 0.2, "train_seconds": 600.0}], "peer")
    out = tmp_path / "out"
    tta.main([str(grid), str(peer), "--logged", "--target", "none", "--out", str(out)])
    points = json.loads((out / "time_to_accuracy.json").read_text())
    assert [(p["run"], p["epoch"], p["minutes"], p["value"]) for p in points] == [
        ("grid", 2, 125.0 / 60, 0.1),
        ("grid", 4, 4.0, 0.25),
        ("peer", 2, 10.0, 0.2),
    ]
    assert points[0]["split"] == "val" and points[0]["metric"] == "miou" and points[0]["val_oa"] == 0.5
    summary = json.loads((out / "time_to_accuracy_summary.json").read_text())
    grid_vs_peer = next(s for s in summary if s["run"] == "grid")
    assert grid_vs_peer["minutes"] == 4.0 and grid_vs_peer["ratio"] == pytest.approx(0.4)
    assert (out / "time_to_accuracy.png").stat().st_size > 1000


def test_logged_curve_refuses_runs_without_logged_time_or_validation(tmp_path, capsys):
    tta = _script()
    old = _logged_run(tmp_path, [{"epoch": 0, "step": 3, "val_miou": 0.1}], "old")
    blind = _logged_run(tmp_path, [{"epoch": 0, "step": 3, "train_seconds": 5.0}], "blind")
    cases = [
        ([str(old), "--logged"], "old: no train_seconds in its logs"),
        ([str(blind), "--logged"], r"blind: no logged validation \(val_\*"),
        ([str(blind), "--logged", "--metric", "oa"], r"blind: no logged validation"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit, match=message):
            tta.main(argv + ["--out", str(tmp_path / "out")])
    for argv, message in [
        (["--split", "test"], "--logged plots the logged validation: give --split val"),
        (["--votes", "3"], "--votes does not apply"),
    ]:
        with pytest.raises(SystemExit):
            tta.main([str(old), "--logged", *argv])
        assert message in capsys.readouterr().err
    good = _logged_run(tmp_path, [{"epoch": 0, "step": 3, "val_oa": 0.5, "train_seconds": 5.0}], "good")
    with pytest.raises(SystemExit, match=r"good: no logged val_miou; it logged \['oa'\]"):
        tta.main([str(good), "--logged", "--metric", "miou", "--out", str(tmp_path / "out")])


def _stamp(text):
    import time

    return time.mktime(time.strptime(text, "%Y-%m-%d %H:%M:%S"))


def test_checkpoint_names_of_new_old_and_resumed_runs_give_the_same_epochs(tmp_path, monkeypatch):
    """A run of this gridify names the checkpoint ending epoch 1 ``epoch001-...``; a run written before named it
    ``epoch000-...`` (run_info.json without epoch_base); a run begun before and resumed now has both, told apart
    by the session that wrote each file; Lightning's ``epoch=N`` counts from 0. Every one is read as epoch 1, 2, 3."""
    import os

    tta = _script()
    scored = []

    def evaluate(argv):
        scored.append(argv[1])
        return {"metrics": {"oa": 0.5}}

    monkeypatch.setattr(tta, "evaluate", evaluate)
    first, second = "2026-11-01 10:00:00", "2026-11-02 10:00:00"
    layouts = {
        "new": (
            {"epoch_base": 1},
            [(f, first) for f in ("epoch001-step0000010", "epoch002-step0000020", "epoch003-step0000030")],
        ),
        "old": ({}, [(f, first) for f in ("epoch000-step0000010", "epoch001-step0000020", "epoch002-step0000030")]),
        "resumed": (
            {"epoch_base": 1, "sessions": [{"started": first}, {"started": second, "epoch_base": 1}]},
            [("epoch000-step0000010", first), ("epoch001-step0000020", first), ("epoch003-step0000030", second)],
        ),
        "lightning": ({}, [(f, first) for f in ("epoch=0-step=10", "epoch=1-step=20", "epoch=2-step=30")]),
    }
    for name, (info, files) in layouts.items():
        run = tmp_path / name
        (run / "checkpoints").mkdir(parents=True)
        (run / "run_info.json").write_text(json.dumps({"started": first, **info}))
        for i, (stem, session) in enumerate(files):
            ckpt = run / "checkpoints" / f"{stem}.ckpt"
            ckpt.write_bytes(b"")
            os.utime(ckpt, (_stamp(session) + 60 * (i + 1),) * 2)
        ckpts = tta.epoch_checkpoints(run)
        assert [c.stem for c in ckpts] == [f for f, _ in files]
        assert list(tta.checkpoint_epochs(run, ckpts).values()) == [1, 2, 3], name
        assert [c.stem for c in tta.every_nth(ckpts, 2)] == [files[1][0], files[2][0]]  # epoch 2, and the last
    out = tmp_path / "out"
    tta.main([str(tmp_path / n) for n in layouts] + ["--target", "none", "--out", str(out)])
    points = json.loads((out / "time_to_accuracy.json").read_text())
    assert {(p["run"], p["epoch"]) for p in points} == {(n, e) for n in layouts for e in (1, 2, 3)}


def test_the_logged_curve_of_a_run_of_this_gridify_counts_its_epochs_as_logged(tmp_path):
    """Its log says epoch 2 (``hparams.yaml``: epoch_base 1) where an older run's said 1: the same point."""
    tta = _script()
    rows = [{"epoch": 2, "step": 7, "val_oa": 0.5, "train_seconds": 60.0}]
    run = _logged_run(tmp_path, rows, "new")
    (run / "csv" / "version_0" / "hparams.yaml").write_text("epoch_base: 1\n")
    old = _logged_run(tmp_path, [dict(rows[0], epoch=1)], "old")
    out = tmp_path / "out"
    tta.main([str(run), str(old), "--logged", "--target", "none", "--out", str(out)])
    points = json.loads((out / "time_to_accuracy.json").read_text())
    assert [(p["run"], p["epoch"]) for p in points] == [("new", 2), ("old", 2)]


def test_scores_are_kept_beside_the_run_and_a_corrupt_one_is_scored_again(tmp_path, monkeypatch):
    import time

    from gridify._files import atomic_write_text

    tta = _script()
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - 120))
    (run / "run_info.json").write_text(json.dumps({"started": started}))
    for name in ("epoch000-step0000010.ckpt", "epoch001-step0000020.ckpt"):
        (run / "checkpoints" / name).write_bytes(b"")
    calls = []

    def evaluate(argv):
        calls.append(argv[argv.index("--ckpt") + 1])
        report = {"metrics": {"oa": 0.5 + 0.1 * len(calls)}}
        atomic_write_text(argv[argv.index("--output") + 1], json.dumps(report))
        return report

    monkeypatch.setattr(tta, "evaluate", evaluate)
    out = tmp_path / "out"
    tta.main([str(run), "--target", "none", "--out", str(out)])
    assert len(calls) == 2 and len(json.loads((out / "time_to_accuracy.json").read_text())) == 2
    tta.main([str(run), "--target", "none", "--out", str(out)])
    assert len(calls) == 2  # scored before: read back
    (run / "time_to_accuracy" / "epoch001-step0000020.test.votes1.json").write_text("{trunc")
    tta.main([str(run), "--target", "none", "--out", str(out)])
    assert calls[2:] == [str(run / "checkpoints" / "epoch001-step0000020.ckpt")]  # only the corrupt one again
