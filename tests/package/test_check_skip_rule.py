"""One rule for value checks: :func:`gridify._checks.validating` is False while a graph is traced or
compiled (``torch.compile`` here), True eagerly; a compiled gridified classifier runs and matches the
eager one, and eager shape / value checks still raise."""

import pytest
import torch

from gridify import _checks
from gridify.models import GridifiedClassifier


def _flag(x: torch.Tensor) -> torch.Tensor:
    return x + 1.0 if _checks.validating() else x - 1.0


def test_validating_false_inside_compiled_region_true_eagerly():
    torch._dynamo.reset()
    x = torch.zeros(2)
    assert _checks.validating()
    assert torch.equal(_flag(x), torch.ones(2))
    compiled = torch.compile(_flag, backend="eager", fullgraph=True)
    assert torch.equal(compiled(x), -torch.ones(2))
    assert _checks.validating()  # the compiled call leaves the eager rule as it was
    with _checks.trusted_inputs():
        assert not _checks.validating()
    assert _checks.validating()


@pytest.mark.slow  # torch.compile: about 10 s
@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace")
def test_compiled_classifier_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = GridifiedClassifier(3, 4, resolution=5, k=6, hidden_channels=12, depth=1, kernel_size=3).eval()
    pos = torch.rand(2, 40, 3, generator=torch.Generator().manual_seed(1)) * 2 - 1
    with torch.no_grad():
        eager = model(pos)
        compiled = torch.compile(model, backend="eager")(pos)
    assert compiled.shape == eager.shape == (2, 4)
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=0)
    # eagerly the checks still run: a NaN and a wrong shape are refused with the model's name
    bad = pos.clone()
    bad[1, 3, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        model(bad)
    with pytest.raises(ValueError, match="GridifiedClassifier|Gridification"):
        model(pos[..., :2])
