"""The figures the docs quote for the shipped models are the ones recorded in the shipped files (one source of
truth: ``info["pretrained"]``, written by ``scripts/ship_pretrained.py`` from the run's own JSON and CSV)."""

import pytest
import torch

from gridify._pretrained import PRETRAINED, pretrained_file
from tests.helpers import ROOT

DOCS = {
    "README.md": ROOT / "README.md",
    "model cards": ROOT / "docs" / "guides" / "prediction.md",
    "results": ROOT / "docs" / "results.md",
}


def _pct(x):
    return f"{100 * x:.2f} %"


@pytest.mark.parametrize("name", sorted(PRETRAINED))
def test_docs_quote_the_shipped_files_own_metrics(name):
    info = torch.load(pretrained_file(name), weights_only=True, map_location="cpu")["info"]["pretrained"]
    card = DOCS["model cards"].read_text(encoding="utf-8")
    quoted = []
    if info.get("test_metrics"):
        test = info["test_metrics"]  # a segmenter's headline is its mIoU, a classifier's its OA
        quoted += [_pct(test["miou"] if "miou" in test else test["oa"])]
    val = {k.removeprefix("val_"): v for k, v in (info.get("val_metrics") or {}).items()}
    for key in ("oa", "macc", "miou"):
        if key in val:
            quoted.append(_pct(val[key]))
    assert quoted, f"{name}: the shipped file records no metrics"
    for figure in quoted:
        assert figure in card, f"the model card of {name} does not quote {figure} (the shipped file's figure)"
    readme = DOCS["README.md"].read_text(encoding="utf-8")
    headline = quoted[0] if info.get("test_metrics") else _pct(val["miou"] if "miou" in val else val["oa"])
    assert headline in readme, f"README.md does not quote {name}'s {headline}"
