"""The exponential moving average of the weights (``optim.ema_decay``, gridify.training.ema): the update
against its formula, through real training steps, checkpoints, resume, and the run's model."""

import pytest
import torch

pytest.importorskip("lightning")

from gridify import training as T  # noqa: E402
from gridify.checkpoint import load_checkpoint  # noqa: E402
from gridify.training.ema import ema_decay_at, update_ema  # noqa: E402
from tests.training.test_train import tiny  # noqa: E402

#: one optimizer step per epoch (8 training shapes, batch 8), no plots
ONE_STEP = ["data.batch_size=8", "trainer.plots=false"]


def _net():
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))


def test_update_follows_the_formula_and_copies_buffers():
    torch.manual_seed(0)
    ema, model = _net(), _net()
    model.train()(torch.randn(16, 3))  # running statistics that differ from the average's
    before = {k: v.clone() for k, v in ema.state_dict().items()}
    update_ema(ema, model, 0.9)
    for (k, e), p in zip(ema.named_parameters(), model.parameters()):
        torch.testing.assert_close(e, 0.9 * before[k] + 0.1 * p, msg=k)
    for (k, e), b in zip(ema.named_buffers(), model.buffers()):
        assert torch.equal(e, b), k
    assert not any(p.requires_grad is False for p in model.parameters())  # the trained model is untouched


def test_decay_warms_up_then_holds():
    assert ema_decay_at(0.999, 1) == pytest.approx(2 / 11)
    assert ema_decay_at(0.999, 90) == pytest.approx(91 / 100)
    assert ema_decay_at(0.5, 1) == pytest.approx(2 / 11) and ema_decay_at(0.5, 10) == 0.5
    assert ema_decay_at(0.999, 10**6) == 0.999


def test_ema_decay_is_validated():
    with pytest.raises(T.ConfigError, match=r"optim.ema_decay must be a number in \[0, 1\), got 1.0"):
        T.resolve_config(None, ["optim.ema_decay=1.0"])
    with pytest.raises(T.ConfigError, match=r"optim.ema_decay"):
        T.resolve_config(None, ["optim.ema_decay=-0.1"])


def _states(path):
    sd = torch.load(path, weights_only=True)["state_dict"]
    model = {k[len("model.") :]: v for k, v in sd.items() if k.startswith("model.")}
    ema = {k[len("ema.") :]: v for k, v in sd.items() if k.startswith("ema.")}
    return model, ema


def test_training_averages_every_step_from_the_initial_weights(tmp_path):
    """Two real steps from known weights (init_weights): e1 = d1 w0 + (1 - d1) w1, e2 = d2 e1 + (1 - d2) w2;
    buffers follow the model; validation, the tested model.pt and load_checkpoint are the average."""
    T.main(tiny(tmp_path / "init", "trainer.max_epochs=1", *ONE_STEP))
    init = tmp_path / "init" / "checkpoints" / "model.pt"
    w0 = torch.load(init, weights_only=True)["state_dict"]
    out = tmp_path / "ema"
    T.main(tiny(out, "trainer.max_epochs=2", "optim.ema_decay=0.5", f"init_weights={init}", *ONE_STEP))
    ck = out / "checkpoints"
    (first,) = [p for p in ck.glob("*.ckpt") if torch.load(p, weights_only=True)["global_step"] == 1][:1]
    w1, e1 = _states(first)
    w2, e2 = _states(ck / "last.ckpt")
    d1, d2 = ema_decay_at(0.5, 1), ema_decay_at(0.5, 2)
    floats = [k for k, v in w0.items() if v.is_floating_point() and "running" not in k]
    assert floats and set(e1) == set(w1) == set(w0)
    for k in floats:
        torch.testing.assert_close(e1[k], d1 * w0[k] + (1 - d1) * w1[k], msg=k)
        torch.testing.assert_close(e2[k], d2 * e1[k] + (1 - d2) * w2[k], msg=k)
    assert any(not torch.allclose(e2[k], w2[k]) for k in floats)  # the average is not the live weights
    for k in (k for k in w2 if "running" in k or "num_batches" in k):
        assert torch.equal(e2[k], w2[k]), k
    loaded = load_checkpoint(ck / "last.ckpt")["state_dict"]
    assert all(torch.equal(loaded[k], e2[k]) for k in e2)
    tested = torch.load(ck / "model.pt", weights_only=True)["state_dict"]
    best = [p for p in ck.glob("best-*.ckpt")]
    assert best and all(torch.equal(tested[k], _states(best[0])[1][k]) for k in tested)


def test_resume_keeps_the_average(tmp_path):
    """2 epochs in one go == 1 epoch + 1 resumed: the average too."""
    T.main(tiny(tmp_path / "full", "optim.ema_decay=0.9", *ONE_STEP))
    T.main(tiny(tmp_path / "split", "optim.ema_decay=0.9", "trainer.stop_after_epochs=1", *ONE_STEP))
    T.main(tiny(tmp_path / "split", "optim.ema_decay=0.9", *ONE_STEP, "--resume", "auto"))
    (wa, ea), (wb, eb) = (
        _states(tmp_path / "full/checkpoints/last.ckpt"),
        _states(tmp_path / "split/checkpoints/last.ckpt"),
    )
    assert ea and ea.keys() == eb.keys()
    for k in ea:
        torch.testing.assert_close(ea[k], eb[k], rtol=1e-5, atol=1e-6, msg=k)
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-5, atol=1e-6, msg=k)


def test_resume_switching_the_average_on_and_off(tmp_path):
    """A checkpoint without an average resumed with one starts it at its weights; the reverse drops it."""
    T.main(tiny(tmp_path / "on", "trainer.stop_after_epochs=1", *ONE_STEP))
    T.main(tiny(tmp_path / "on", "optim.ema_decay=0.9", *ONE_STEP, "--resume", "auto"))
    w, e = _states(tmp_path / "on/checkpoints/last.ckpt")
    assert e.keys() == w.keys()
    T.main(tiny(tmp_path / "off", "optim.ema_decay=0.9", "trainer.stop_after_epochs=1", *ONE_STEP))
    T.main(tiny(tmp_path / "off", *ONE_STEP, "--resume", "auto"))
    w, e = _states(tmp_path / "off/checkpoints/last.ckpt")
    assert w and not e
