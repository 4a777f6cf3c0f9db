"""``scripts/ship_pretrained.py`` records a run's provenance, leaves its test metrics out on request and names a
bad input file instead of failing inside ``torch.load``."""

import importlib.util
import json
import re
import shutil

import pytest
import torch

from gridify.checkpoint import load_checkpoint
from tests.helpers import ROOT


def _script():
    spec = importlib.util.spec_from_file_location("ship_pretrained", ROOT / "scripts" / "ship_pretrained.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "myrun"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(ROOT / "gridify" / "pretrained" / "modelnet10.pt", run / "checkpoints" / "model.pt")
    (run / "test_metrics.json").write_text(json.dumps({"metrics": {"test_oa": 0.5}, "num_samples": 7, "votes": 1}))
    return run


@pytest.mark.parametrize("flag, kept", [([], True), (["--no-test-metrics"], False)])
def test_test_metrics_are_stored_unless_left_out(run, tmp_path, flag, kept):
    out = tmp_path / "shipped.pt"
    _script().main([str(run / "checkpoints" / "model.pt"), "--name", "mine", "--out", str(out), *flag])
    info = torch.load(out, map_location="cpu", weights_only=True)["info"]["pretrained"]
    assert info["name"] == "mine" and info["run"] == "myrun"
    assert ("test_metrics" in info) is kept
    if kept:
        assert info["test_metrics"] == {"test_oa": 0.5} and info["num_test_samples"] == 7
    load_checkpoint(out)


def test_bad_model_files_are_named(tmp_path, capsys):
    ship = _script()
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    listed = tmp_path / "list.pt"
    torch.save([1, 2], listed)
    raw = torch.load(ROOT / "gridify" / "pretrained" / "modelnet10.pt", weights_only=True)
    lightning = tmp_path / "last.ckpt"  # the same model as Lightning stores it
    hp = {k: raw[k] for k in ("model_name", "model_kwargs", "task", "info", "config")}
    torch.save(
        {"state_dict": {f"model.{k}": v for k, v in raw["state_dict"].items()}, "hyper_parameters": hp}, lightning
    )
    cases = [
        (tmp_path / "missing.pt", "checkpoint not found: .*missing.pt"),
        (junk, "cannot read checkpoint .*junk.pt: the file is corrupt, truncated or not a PyTorch checkpoint"),
        (listed, "list.pt is not a gridify checkpoint"),
        (lightning, "last.ckpt: a Lightning checkpoint; pass the run's exported checkpoints/model.pt"),
    ]
    for path, message in cases:
        with pytest.raises(SystemExit) as exc:
            ship.main([str(path), "--name", "x", "--out", str(tmp_path / "o.pt")])
        assert exc.value.code == 2
        assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "o.pt").exists()


@pytest.mark.parametrize(
    "source, base, log, expected",
    [
        # a run of this gridify: names and logs count from 1
        ("best-epoch002.ckpt", 1, "epoch,step,val_oa\n1,3,0.25\n2,6,0.5\n", 0.5),
        # a run written before: best-epoch001 held the 2nd epoch, its log said 1
        ("best-epoch001.ckpt", 0, "epoch,step,val_oa\n0,3,0.25\n1,6,0.5\n", 0.5),
        # the last epoch's weights (trainer.test_ckpt: last): the last epoch validated
        ("last.ckpt", 0, "epoch,step,val_oa\n0,3,0.25\n1,6,0.75\n", 0.75),
        ("last.ckpt", 1, "epoch,step,val_oa\n1,3,0.25\n2,6,0.75\n", 0.75),
    ],
)
def test_the_validation_of_the_shipped_epoch_is_recorded_in_either_numbering(
    run, tmp_path, source, base, log, expected
):
    """One epoch numbering (``gridify.training.epochs``): the metrics of the epoch the weights come from, whether
    the run counted from 0 (older) or from 1, and for ``last.ckpt`` those of the last epoch."""
    (run / "csv" / "version_0").mkdir(parents=True)
    (run / "csv" / "version_0" / "metrics.csv").write_text(log)
    if base == 1:
        (run / "csv" / "version_0" / "hparams.yaml").write_text("epoch_base: 1\n")
        (run / "run_info.json").write_text(json.dumps({"started": "2026-12-06 10:00:00", "epoch_base": 1}))
    payload = torch.load(run / "checkpoints" / "model.pt", map_location="cpu", weights_only=True)
    payload["checkpoint"] = source
    torch.save(payload, run / "checkpoints" / "model.pt")
    out = tmp_path / "shipped.pt"
    _script().main([str(run / "checkpoints" / "model.pt"), "--name", "mine", "--out", str(out)])
    info = torch.load(out, map_location="cpu", weights_only=True)["info"]["pretrained"]
    assert info["from_checkpoint"] == source
    assert info["val_metrics"] == {"val_oa": expected}
