"""Tests of the gridify.training package itself: what it writes and how (the end-to-end runs are in test_train.py)."""
import json
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("yaml")

from gridify.training import report as R  # noqa: E402
from gridify.training.config import resolve_config  # noqa: E402


def _umask_mode():
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def test_run_files_are_written_atomically(tmp_path, monkeypatch):
    """config.yaml, run_info.json, test_metrics.json and the plots go through the atomic writer."""
    pytest.importorskip("matplotlib")
    import gridify._files

    written = []
    real_write = gridify._files.atomic_write

    def spy(path, write):
        written.append(Path(path).name)
        return real_write(path, write)

    monkeypatch.setattr(gridify._files, "atomic_write", spy)
    monkeypatch.setattr("gridify.checkpoint.atomic_write", spy)
    monkeypatch.setattr("gridify.training.plots.atomic_write", spy)
    cfg = resolve_config(None, [f"output_dir={tmp_path / 'run'}"])
    info = {"source_format": "procedural", "class_names": ["a", "b"]}
    record = R.RunRecord(cfg, info, "linear", {}, 6, run_info={"started": "now"})
    R.write_run_files(record)
    results = {"metrics": {"loss": 0.5, "oa": 1.0, "macc": 1.0}, "num_scored": 2, "confusion_matrix": [[1, 0], [0, 1]]}
    report = R.test_report(record, results, num_samples=2, checkpoint=None, epoch=1, global_step=2, train_seconds=3.0)
    R.write_test_outputs(record, report, torch.nn.Linear(2, 2), 3.0)
    assert written == ["config.yaml", "run_info.json", "test_metrics.json", "model.pt", "run_info.json",
                       "loss.png", "metrics.png", "confusion_matrix.png"]
    out = tmp_path / "run"
    assert json.loads((out / "test_metrics.json").read_text())["checkpoint"] == "final weights"
    assert json.loads((out / "run_info.json").read_text())["test_metrics"] == results["metrics"]
    for name in ("config.yaml", "run_info.json", "test_metrics.json", "checkpoints/model.pt"):
        assert (out / name).stat().st_mode & 0o777 == _umask_mode(), name  # not mkstemp's 0600
    assert not list(out.rglob(".*.tmp"))
