"""The check helpers of :mod:`gridify._checks` (and the library's other ``check_*`` helpers that take an
entry point) share one argument order: ``(where, name, value, *options)``, the entry point first.
The checks a module's ``checked_forward`` runs take ``(module, *the forward's arguments)`` instead."""

import inspect

import pytest
import torch

from gridify import _checks
from gridify.datasets import _common
from gridify.nn import inputs

HELPERS = sorted(
    (module.__name__, name, fn)
    for module in (_checks, _common, inputs)
    for name, fn in vars(module).items()
    if name.startswith("check_") and inspect.isfunction(fn) and fn.__module__ == module.__name__
)


def test_helpers_found():
    names = {name for _, name, _ in HELPERS}
    assert {"check_tensor", "check_finite", "check_batch", "check_points", "check_int", "check_alloc"} <= names


@pytest.mark.parametrize(("module", "name", "fn"), HELPERS, ids=[f"{m}.{n}" for m, n, _ in HELPERS])
def test_entry_point_comes_first(module, name, fn):
    params = list(inspect.signature(fn).parameters)
    if params[0] in ("module", "conv"):  # a checked_forward check: (module, *the forward's arguments)
        assert module == "gridify.nn.inputs", f"{module}.{name}"
        return
    assert params[0] == "where", f"{module}.{name}{inspect.signature(fn)}"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: _checks.check_tensor("entry", "pos", [1.0]), "entry: pos must be a torch.Tensor"),
        (
            lambda: _checks.check_float("entry", "pos", torch.zeros(2, dtype=torch.long)),
            "entry: pos must be a floating",
        ),
        (lambda: _checks.check_integer("entry", "idx", torch.zeros(2)), "entry: idx must be an integer tensor"),
        (lambda: _checks.check_points("entry", "xyz", torch.zeros(4, 2)), "entry: xyz must have shape [N, 3]"),
        (
            lambda: _checks.check_finite("entry", "x", torch.tensor([[0.0], [float("nan")]]), torch.tensor([0, 1])),
            "entry: x contains NaN values (1 rows affected); first in cloud 1 at row 1",
        ),
        (lambda: _checks.check_batch("entry", "b", torch.tensor([1, 0]), 2), "entry: b must be sorted"),
        (
            lambda: _checks.check_point_pair("entry", ("p", "q"), torch.zeros(2, 3), torch.zeros(2, 2)),
            "entry: p and q must have the same dimension",
        ),
        (lambda: _checks.check_int("entry", "k", 0), "entry: k must be"),
    ],
)
def test_messages_name_the_entry_and_the_argument(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value).startswith(message)
