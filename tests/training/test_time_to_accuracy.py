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
