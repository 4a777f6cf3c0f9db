"""``init_weights``: a fresh run starts from trained weights (fine-tuning), a shipped model's name or a file;
what does not fit is refused before training with a message naming ``init_weights``."""

import json

import pytest
import torch

pytest.importorskip("lightning")
pytest.importorskip("yaml")

from gridify import training as T  # noqa: E402
from gridify.checkpoint import load_checkpoint  # noqa: E402

TINY = [
    "task=classification",
    "data.name=procedural",
    "data.num_points=64",
    "data.num_samples_per_class=2",
    "data.classes=[box, sphere]",
    "data.val={num_samples_per_class: 1}",
    "data.batch_size=2",
    "model.name=gridified_classifier",
    "model.resolution=4",
    "model.k=4",
    "model.hidden_channels=8",
    "model.depth=1",
    "model.kernel_size=3",
    "optim.lr=5e-3",
    "trainer.num_threads=1",
    "trainer.progress_bar=false",
    "trainer.plots=false",
    "trainer.limit_test_batches=0",
]


def _run(out, *extra):
    cfg = T.resolve_config(None, [*TINY, f"output_dir={out}", *extra])
    return T.run(cfg)


def _weights(path):
    return load_checkpoint(path)["state_dict"]


def test_fine_tuning_starts_from_the_given_weights(tmp_path):
    _run(tmp_path / "a", "trainer.max_epochs=1")
    source = tmp_path / "a" / "checkpoints" / "model.pt"
    # lr 1e-12: the fine-tuned run's weights stay the source's (the BatchNorm statistics move in training mode)
    _run(tmp_path / "b", "trainer.max_epochs=1", f"init_weights={source}", "optim.lr=1e-12")
    theirs, ours = _weights(source), _weights(tmp_path / "b" / "checkpoints" / "model.pt")
    params = [k for k in theirs if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
    assert params and all(torch.allclose(theirs[k], ours[k], atol=1e-8) for k in params)
    info = json.loads((tmp_path / "b" / "run_info.json").read_text())
    assert info["init_weights"] == str(source)
    # without init_weights the same run starts elsewhere
    _run(tmp_path / "c", "trainer.max_epochs=1", "optim.lr=1e-12", "seed=1")
    fresh = _weights(tmp_path / "c" / "checkpoints" / "model.pt")
    assert any(not torch.allclose(theirs[k], fresh[k], atol=1e-3) for k in params)


def test_init_weights_that_do_not_fit_are_refused_before_training(tmp_path):
    _run(tmp_path / "a", "trainer.max_epochs=1")
    source = tmp_path / "a" / "checkpoints" / "model.pt"
    with pytest.raises(T.CheckpointError, match=r"init_weights .*model\.pt.*shape"):
        _run(tmp_path / "b", f"init_weights={source}", "model.hidden_channels=16")
    assert not (tmp_path / "b" / "checkpoints" / "last.ckpt").exists()
    with pytest.raises(T.CheckpointError, match=r"init_weights .*no such file and not a shipped model"):
        _run(tmp_path / "c", f"init_weights={tmp_path / 'missing.pt'}")
    with pytest.raises(
        T.CheckpointError,
        match=r"init_weights modelnet10 holds a 'gridified_classifier'.*"
        r"|init_weights modelnet10: .*do not fit",
    ):
        _run(tmp_path / "d", "init_weights=modelnet10")
    with pytest.raises(T.ConfigError, match="init_weights"):
        T.resolve_config(None, [*TINY, "init_weights=3"])
