"""One epoch numbering (from 1) for the log, checkpoint names, reports, logs and plots; older runs' names and logs
(counted from 0) still read right (gridify.training.epochs)."""

import json
import os
import time
from types import SimpleNamespace

import pytest

from gridify.training import epochs as E


def test_a_run_shows_lightnings_epoch_index_counted_from_one():
    assert E.EPOCH_BASE == 1 and E.shown_epoch(0) == 1 and E.shown_epoch(24) == 25
    assert E.epoch_of(SimpleNamespace(current_epoch=0, max_epochs=25)) == "1/25"
    assert E.epoch_of(SimpleNamespace(current_epoch=3, max_epochs=-1)) == "4/?"
    assert E.BEST_NAME.format(epoch=E.shown_epoch(17)) == "best-epoch018"


def test_log_rows_count_from_one_and_the_test_rows_keep_the_epochs_trained():
    assert E.logged_epoch({"epoch": 0, "val_oa": 0.5}) == {"epoch": 1, "val_oa": 0.5}
    assert E.logged_epoch({"epoch": 24, "train_loss": 1.0}) == {"epoch": 25, "train_loss": 1.0}
    # logged after the fit, when Lightning's counter is the number of epochs trained (= the last one's number)
    assert E.logged_epoch({"epoch": 25, "test_oa": 0.9}) == {"epoch": 25, "test_oa": 0.9}
    assert E.logged_epoch({"lr-AdamW": 1e-3}) == {"lr-AdamW": 1e-3}
    assert E.read_epoch({"epoch": 3.0}, E.EPOCH_BASE) == {"epoch": 3.0}
    assert E.read_epoch({"epoch": 3.0}, E.LEGACY_EPOCH_BASE) == {"epoch": 4}


@pytest.mark.parametrize(
    "name, base, epoch",
    [
        ("best-epoch018.ckpt", 1, 18),
        ("best-epoch017.ckpt", 0, 18),  # a run written before: the 18th epoch
        ("epoch018-step0004986.ckpt", 1, 18),
        ("epoch017-step0004986.ckpt", 0, 18),
        ("epoch017-step0004986-v1.ckpt", 0, 18),
        ("epoch=17-step=4986.ckpt", 1, 18),  # Lightning's own names count from 0 whatever the run's base
        ("epoch=17-step=4986.ckpt", 0, 18),
        ("last.ckpt", 1, None),
        ("model.pt", 1, None),
    ],
)
def test_checkpoint_names_are_read_with_the_numbering_they_were_written_with(name, base, epoch):
    assert E.checkpoint_epoch(name, base) == epoch


def test_a_run_resumed_by_a_newer_gridify_is_read_session_by_session(tmp_path):
    def stamp(text):
        return time.mktime(time.strptime(text, "%Y-%m-%d %H:%M:%S"))

    old = {"started": "2026-11-01 10:00:00", "sessions": [{"started": "2026-11-01 10:00:00", "resumed_from": None}]}
    assert E.session_epoch_base(old) == 0 and E.session_epoch_base({}, stamp("2026-11-01 11:00:00")) == 0
    resumed = dict(
        old,
        epoch_base=1,
        sessions=old["sessions"] + [{"started": "2026-11-02 09:00:00", "resumed_from": "last.ckpt", "epoch_base": 1}],
    )
    assert E.session_epoch_base(resumed, stamp("2026-11-01 12:00:00")) == 0  # written by the first session
    assert E.session_epoch_base(resumed, stamp("2026-11-02 10:00:00")) == 1
    assert E.session_epoch_base(resumed) == 1


def test_a_log_folder_says_its_numbering(tmp_path):
    assert E.log_epoch_base(tmp_path) == 0  # no hparams.yaml: an older run
    (tmp_path / "hparams.yaml").write_text("config:\n  seed: 0\nepoch_base: 1\n")
    assert E.log_epoch_base(tmp_path) == 1


def _csv(folder, rows, marked):
    folder.mkdir(parents=True)
    keys = sorted({k for r in rows for k in r})
    lines = [",".join(keys)] + [",".join(str(r.get(k, "")) for k in keys) for r in rows]
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")
    if marked:
        (folder / "hparams.yaml").write_text("epoch_base: 1\n")


def test_read_metric_logs_counts_from_one_for_old_new_and_mixed_logs(tmp_path):
    from gridify.training import read_metric_logs

    # an older session (from 0), then a session of this gridify (from 1) resuming at step 4
    _csv(
        tmp_path / "version_0", [{"epoch": 0, "step": 1, "val_oa": 0.2}, {"epoch": 1, "step": 3, "val_oa": 0.3}], False
    )
    _csv(
        tmp_path / "version_1",
        [{"epoch": 3, "step": 5, "val_oa": 0.4}, {"epoch": 3, "step": 6, "test_oa": 0.5}],
        True,
    )
    assert [(r["epoch"], r["step"]) for r in read_metric_logs(tmp_path)] == [(1, 1), (2, 3), (3, 5), (3, 6)]


def test_checkpoint_names_count_from_one_and_keep_their_saved_state_key(tmp_path):
    pytest.importorskip("lightning")
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    from gridify.training.callbacks import EpochCheckpoint, NamedCheckpoint, best_checkpoint

    best = best_checkpoint(tmp_path, "val_oa")
    metrics = {"epoch": torch.tensor(17), "step": torch.tensor(4986)}
    assert os.path.basename(best.format_checkpoint_name(metrics)) == "best-epoch018.ckpt"
    kept = NamedCheckpoint(dirpath=tmp_path, filename=E.KEPT_NAME, save_top_k=-1, auto_insert_metric_name=False)
    assert os.path.basename(kept.format_checkpoint_name(metrics)) == "epoch018-step0004986.ckpt"
    assert metrics["epoch"] == 17  # the trainer's own candidates are left alone
    # checkpoints written before keep their callbacks' states (the best score): the same keys as Lightning's
    plain = ModelCheckpoint(dirpath=tmp_path, filename="last", monitor=None, every_n_epochs=1)
    assert (
        EpochCheckpoint(dirpath=tmp_path, filename="last", monitor=None, every_n_epochs=1).state_key == plain.state_key
    )
    assert kept.state_key.startswith("NamedCheckpoint{")


def test_a_run_info_records_its_numbering(tmp_path):
    from gridify.training.report import RunRecord, write_run_files

    cfg = {"output_dir": str(tmp_path)}
    record = RunRecord(cfg, {}, "m", {}, 1, run_info={"started": "2026-12-01 10:00:00", "resumed_from": None})
    write_run_files(record)
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["epoch_base"] == 1 and info["sessions"][-1]["epoch_base"] == 1
