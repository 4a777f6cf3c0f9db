"""Structural reparameterization: fold training-time layers into their inference form.

A layer opts in by defining ``reparameterize()`` (in place, idempotent) and a boolean attribute
``reparameterized``; the multi-resolution :class:`gridify.nn.MRConv3d` does, merging its branches,
their BatchNorms and the weights ``alpha`` into one depthwise convolution

    W = sum_i alpha_i * gamma_i / sqrt(var_i + eps) * W_i,    b = sum_i alpha_i * (beta_i - gamma_i mu_i / sqrt(var_i + eps))

so that the folded layer gives the branch sum's output in eval mode. :func:`reparameterize_model`
folds every such layer of a model; ``gridify.checkpoint.export_model`` calls it.
"""

from __future__ import annotations

import torch

__all__ = ["is_reparameterizable", "reparameterize_model"]


def is_reparameterizable(module: torch.nn.Module) -> bool:
    """Whether ``module`` has a ``reparameterize()`` method and a ``reparameterized`` flag."""
    return callable(getattr(module, "reparameterize", None)) and hasattr(module, "reparameterized")


def reparameterize_model(model: torch.nn.Module) -> int:
    """Fold every reparameterizable layer of ``model`` into its inference form, in place.

    A layer opts in by defining ``reparameterize()`` (in place, idempotent) and a boolean
    attribute ``reparameterized`` (e.g. the multi-resolution MRConv layers, whose branches,
    BatchNorms and weights merge into one convolution). The walk calls the outermost such
    layers and does not descend into them; ``model`` itself is folded only when none of its
    sub-modules is foldable. The model is put in eval mode first: folding uses the BatchNorm
    running statistics. Layers built without a resolution that have seen no input yet fold for
    ``model.resolution`` when the model has one (a grid model's own resolution). Returns the
    number of layers folded (0 for models with none, and on a second call).
    """
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"reparameterize_model: model must be a torch.nn.Module, got {type(model).__name__}")
    model.eval()
    # a layer built without a resolution that has seen no input yet (a freshly built or loaded
    # model) folds for the model's own grid resolution instead of a placeholder kernel
    own = getattr(model, "resolution", None)
    default_resolution = own if isinstance(own, int) and not isinstance(own, bool) and own > 0 else None

    def fold(layer: torch.nn.Module) -> None:
        unseen = getattr(layer, "resolution", 0) is None and int(getattr(layer, "last_resolution", 1)) == 0
        if default_resolution is not None and unseen:
            layer.reparameterize(resolution=default_resolution)
        else:
            layer.reparameterize()

    def walk(m: torch.nn.Module) -> int:
        n = 0
        for child in m.children():
            if is_reparameterizable(child):
                if not child.reparameterized:
                    fold(child)
                    n += 1
            else:
                n += walk(child)
        return n

    count = walk(model)
    if count == 0 and is_reparameterizable(model) and not model.reparameterized:
        fold(model)
        count = 1
    return count
