"""Checkpoints written by gridify before the package restructure still load and give the same logits.

The files in ``tests/fixtures/pre_restructure/`` were written by the main branch at commit d333618
(tiny procedural models: a classifier as ``model.pt`` and Lightning ``last.ckpt``, a part segmenter,
and an MRConv classifier exported folded), together with their logits on fixed inputs.
"""

import json
from pathlib import Path

import pytest
import torch

import gridify
from gridify.checkpoint import build_model_from_checkpoint, load_checkpoint

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pre_restructure"
EXPECTED = json.loads((FIXTURES / "expected_logits.json").read_text())
POS = torch.tensor(EXPECTED["pos"])
X = torch.tensor(EXPECTED["x"])


def _logits(model, task):
    with torch.no_grad():
        if task == "segmentation":
            return model(POS, X, category=torch.tensor([0, 1]) if model.num_categories else None)
        return model(POS, X)


@pytest.mark.parametrize("name", ["cls_model.pt", "cls_last.ckpt", "seg_model.pt", "mrconv_model.pt"])
def test_old_checkpoints_rebuild_with_identical_logits(name):
    payload = load_checkpoint(FIXTURES / name)
    model = build_model_from_checkpoint(payload)
    torch.testing.assert_close(_logits(model, payload["task"]), torch.tensor(EXPECTED[name]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["cls_model.pt", "cls_last.ckpt", "seg_model.pt", "mrconv_model.pt"])
def test_old_checkpoints_load_through_the_api(name):
    predictor = gridify.load(FIXTURES / name)
    assert predictor.task in ("classification", "segmentation")
    torch.testing.assert_close(
        _logits(predictor.model, predictor.task), torch.tensor(EXPECTED[name]), rtol=1e-5, atol=1e-5
    )
