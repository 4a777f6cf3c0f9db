"""``scripts/prune_edge_widths.py`` narrows a scene segmenter's per-edge widths: it keeps the units that carry
the function (pruning units whose outgoing weights are zero changes nothing), writes shapes the narrower model
loads strictly, and refuses an odd width by name."""

import importlib.util

import pytest
import torch

from gridify.models import build_model
from tests.helpers import ROOT

CONVS = ("gridify.conv", "degridify.conv")


def _script():
    spec = importlib.util.spec_from_file_location("prune_edge_widths", ROOT / "scripts" / "prune_edge_widths.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _payload(seed=0, width=8):
    torch.manual_seed(seed)
    kwargs = dict(
        in_channels=2,
        num_classes=4,
        resolution=[4, 4, 2],
        hidden_channels=8,
        point_channels=8,
        message_channels=width,
        pos_hidden_channels=width,
    )
    model = build_model("scene_segmenter", **kwargs)
    with torch.no_grad():  # non-trivial biases and norms, so that a wrong index would show
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model, {
        "model_name": "scene_segmenter",
        "model_kwargs": kwargs,
        "state_dict": model.state_dict(),
        "config": {"model": {"name": "scene_segmenter", "message_channels": width}},
    }


def _silence_half(model, mod, width, seed=1):
    """Zero the outgoing weights of a random half of the units in every hidden space (and half the
    frequencies): those units no longer reach the output, so pruning them keeps the function."""
    g = torch.Generator().manual_seed(seed)
    sd = model.state_dict()
    with torch.no_grad():
        for prefix in CONVS:
            for _, reader in mod.SPACES:
                w = sd[f"{prefix}.{reader}.weight"]
                drop = torch.randperm(w.shape[1], generator=g)[: w.shape[1] - width // 2]
                w[:, drop] = 0
            lin1 = sd[f"{prefix}.phi_pos.lin1.weight"]
            n_freq = sd[f"{prefix}.phi_pos.freqs.weight"].shape[0]
            drop = torch.randperm(n_freq, generator=g)[: n_freq - width // 4]
            lin1[:, drop] = 0
            lin1[:, drop + n_freq] = 0


def test_pruning_units_that_reach_nothing_keeps_the_logits():
    mod = _script()
    model, payload = _payload()
    _silence_half(model, mod, 8)
    payload["state_dict"] = model.state_dict()
    pruned = mod.prune(payload, 4)
    small = build_model("scene_segmenter", **pruned["model_kwargs"])
    small.load_state_dict(pruned["state_dict"], strict=True)
    assert pruned["model_kwargs"]["message_channels"] == 4 and pruned["model_kwargs"]["pos_hidden_channels"] == 4
    assert pruned["config"]["model"]["message_channels"] == 4
    assert small.state_dict()["gridify.conv.msg_out.weight"].shape == (4, 4)
    assert small.state_dict()["degridify.conv.phi_pos.freqs.weight"].shape == (2, 3)
    torch.manual_seed(3)
    pos = torch.rand(300, 3) * torch.tensor([20.0, 20.0, 2.0])
    x = torch.rand(300, 2)
    model.eval(), small.eval()
    with torch.no_grad():
        assert torch.allclose(small(pos, x), model(pos, x), atol=1e-5, rtol=1e-4)


def test_pruning_keeps_the_largest_units_and_the_full_width_is_the_same_model():
    mod = _script()
    model, payload = _payload()
    pruned = mod.prune(payload, 4)
    small = build_model("scene_segmenter", **pruned["model_kwargs"])
    small.load_state_dict(pruned["state_dict"], strict=True)
    # the kept hidden units of phi_upd are those of largest ||W_out[:, j]|| * (||W_in[j]|| + |b_j|)
    sd = payload["state_dict"]
    score = sd["gridify.conv.phi_upd.2.weight"].norm(dim=0) * (
        sd["gridify.conv.phi_upd.0.weight"].norm(dim=1) + sd["gridify.conv.phi_upd.0.bias"].abs()
    )
    keep = torch.topk(score, 4).indices.sort().values
    assert torch.equal(pruned["state_dict"]["gridify.conv.phi_upd.0.bias"], sd["gridify.conv.phi_upd.0.bias"][keep])
    # the same width is the same model
    same = mod.prune(payload, 8)
    for key, value in payload["state_dict"].items():
        assert torch.equal(same["state_dict"][key], value), key


def test_an_odd_width_is_refused_by_name(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        _script().main(["--model", "semantickitti", "--width", "15", "--out", str(tmp_path / "unused.pt")])
    assert exc.value.code == 2
    assert "argument --width: must be an even integer >= 2, got '15'" in capsys.readouterr().err


def test_an_unknown_model_is_named_with_the_closest_shipped_one(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        _script().main(["--model", "semantickiti", "--out", str(tmp_path / "out.pt")])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "argument --model: checkpoint not found: semantickiti" in err and "did you mean 'semantickitti'?" in err
    assert "Traceback" not in err and not (tmp_path / "out.pt").exists()


def test_a_model_without_concat_messages_or_a_wider_width_is_refused_by_name():
    mod = _script()
    _, payload = _payload()
    with pytest.raises(
        ValueError, match=r"--width 16 is wider than the model's per-edge widths .* allowed: even widths 2 to 8"
    ):
        mod.prune(payload, 16)
    payload["state_dict"] = {k: v for k, v in payload["state_dict"].items() if ".msg_node." not in k}
    with pytest.raises(ValueError, match=r"gridify\.conv\.msg_node\.weight not in its weights"):
        mod.prune(payload, 4)


def test_a_width_between_the_models_two_widths_is_refused_up_front(tmp_path, capsys, monkeypatch):
    """Messages 8 wide, the positional field 4: a width of 6 would narrow the messages and keep the field, and the
    narrower model (one width for both) would not load its weights. Refused naming the allowed widths, before the
    weights are touched."""
    mod = _script()
    torch.manual_seed(0)
    kwargs = dict(in_channels=2, num_classes=4, resolution=[4, 4, 2], hidden_channels=8, point_channels=8)
    model = build_model("scene_segmenter", **kwargs, message_channels=8, pos_hidden_channels=4)
    payload = {
        "model_name": "scene_segmenter",
        "model_kwargs": {**kwargs, "message_channels": 8, "pos_hidden_channels": 4},
        "state_dict": model.state_dict(),
        "config": {},
    }
    with pytest.raises(ValueError, match=r"--width 6 is between .*positional field 4.*allowed: even widths 2 to 4"):
        mod.prune(payload, 6)
    small = mod.prune(payload, 4)  # the narrowest width itself is fine
    build_model("scene_segmenter", **small["model_kwargs"]).load_state_dict(small["state_dict"], strict=True)
    # from the command line: one line, status 2, nothing written, no pruning started
    ckpt = tmp_path / "model.pt"
    torch.save(payload, ckpt)
    import gridify.checkpoint

    monkeypatch.setattr(gridify.checkpoint, "load_checkpoint", lambda path: payload)
    monkeypatch.setattr(mod, "prune_conv", lambda *a: pytest.fail("pruned before the width was checked"))
    with pytest.raises(SystemExit) as exc:
        mod.main(["--model", str(ckpt), "--width", "6", "--out", str(tmp_path / "out.pt")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("prune_edge_widths.py: error: ") and "allowed: even widths 2 to 4" in err
    assert not (tmp_path / "out.pt").exists()
