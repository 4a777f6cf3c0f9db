"""The mrconv backbone (gridify.backbones.mrconv): registry, folding, a folded classifier's round trip, overfitting."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gridify.backbones import MRConvNet, build_backbone
from gridify.checkpoint import build_model_from_checkpoint, export_model, load_checkpoint, reparameterize_model
from gridify.models import GridifiedClassifier
from gridify.nn import MRConv3d, MRConvSeparable3d
from gridify.registry import BACKBONES


def test_backbone_registry_and_folding():
    assert BACKBONES.get("mrconv") is MRConvNet
    torch.manual_seed(0)
    net = build_backbone(
        "mrconv",
        in_channels=3,
        out_channels=2,
        hidden_channels=8,
        depth=2,
        dropout=0.0,
        kernel_size=3,
        kernel_type="fourier",
    )
    assert isinstance(net.blocks[0].spatial, MRConvSeparable3d)
    assert not hasattr(net, "reparameterized") and not hasattr(net.blocks[0].spatial, "reparameterized")
    x = torch.randn(2, 3, 7, 7, 7)
    with torch.no_grad():
        for _ in range(2):
            net(x * 2 + 1)
    net.eval()
    with torch.no_grad():
        ref = net(x)
        assert net.reparameterize() == 2 and net.reparameterize() == 0
        out = net(x)
    assert ((out - ref).norm() / ref.norm()).item() < 1e-4
    layers = [m for m in net.modules() if isinstance(m, MRConv3d)]
    assert len(layers) == 2 and all(m.reparameterized and m.rep_weight.shape == (8, 1, 13, 13, 13) for m in layers)


def test_export_round_trip_of_folded_classifier(tmp_path):
    torch.manual_seed(0)
    kwargs = dict(
        in_channels=3,
        num_classes=4,
        resolution=5,
        k=4,
        hidden_channels=8,
        backbone="mrconv",
        depth=1,
        kernel_size=3,
        dropout=0.0,
    )
    model = GridifiedClassifier(**kwargs)
    pos = torch.rand(3, 40, 3) * 2 - 1
    model.train()
    with torch.no_grad():
        model(pos, pos)
    model.eval()
    with torch.no_grad():
        ref = model(pos, pos)
    meta = dict(
        model_name="gridified_classifier",
        model_kwargs=kwargs,
        task="classification",
        info={"class_names": ["a", "b", "c", "d"]},
        config={},
    )
    export_model(tmp_path / "model.pt", model, meta)
    assert not any(getattr(m, "reparameterized", False) for m in model.modules())  # the original is untouched
    payload = load_checkpoint(tmp_path / "model.pt")
    assert payload["reparameterized"] is True
    assert any(k.endswith("rep_weight") for k in payload["state_dict"])
    rebuilt = build_model_from_checkpoint(payload)
    layers = [m for m in rebuilt.modules() if isinstance(m, MRConv3d)]
    assert layers and all(m.reparameterized and m.rep_weight.shape[-1] == 9 for m in layers)
    with torch.no_grad():
        out = rebuilt(pos, pos)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4)
    # folding the rebuilt model again changes nothing
    assert reparameterize_model(rebuilt) == 0


def test_overfits_a_tiny_batch():
    """Dense regression of a fixed nonlinear function of the input on 4 grids at R=5."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5, 5)
    smooth = F.avg_pool3d(x, 3, stride=1, padding=1, count_include_pad=False)
    target = torch.stack([torch.tanh(2 * smooth[:, 0] * smooth[:, 1]), smooth[:, 2] ** 2 - x[:, 0]], dim=1)
    net = build_backbone(
        "mrconv", in_channels=3, out_channels=2, hidden_channels=8, depth=2, dropout=0.0, kernel_size=3, num_branches=3
    )
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = F.mse_loss(net(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert min(losses[-5:]) < 0.1 * losses[0], (losses[0], losses[-5:])
