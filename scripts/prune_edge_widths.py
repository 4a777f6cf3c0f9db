"""Narrow the per-edge widths of a trained scene segmenter's (de-)gridification by pruning.

The per-edge work of gridification and de-gridification grows with ``message_channels`` (H) and
``pos_hidden_channels`` (P) (docs/benchmarks.md: widths 16 instead of 32 take 0.71x the training
step and 0.77x the inference of a crop). A model with the narrower widths trained from scratch is
a run of hours; this script instead keeps, in every hidden space of each ``BipartiteConv``, the
``width`` units of largest weight magnitude and writes a ``model.pt`` of the narrower model, to be
fine-tuned with ``init_weights`` (docs/results.md, round eighteen).

A hidden unit ``j`` between the rows ``W_in[j]`` (and bias ``b[j]``) of the layers that write it and
the column ``W_out[:, j]`` of the layer that reads it scores

    s_j = ||W_out[:, j]|| * (sum over writers of ||W_in[j]|| + |b[j]|),

and a Fourier frequency ``i`` of the positional field scores ``||W_1[:, i]|| + ||W_1[:, F + i]||`` (the
columns of its cosine and its sine). The spaces of a ``BipartiteConv`` with concat messages:
``phi_node``'s hidden layer, its output (= ``msg_node``'s input), the message's hidden layer
(``msg_node``, ``phi_pos.lin2`` -> ``msg_out``), the message (``msg_out`` -> ``phi_upd``), ``phi_upd``'s
hidden layer, ``phi_pos``'s hidden layer and its frequencies.

Shapes: every ``[32, *]`` / ``[*, 32]`` per-edge weight becomes ``[width, *]`` / ``[*, width]``;
the frequencies ``[F, 3]`` become ``[width / 2, 3]``.

    python scripts/prune_edge_widths.py --model semantickitti --width 16 --out outputs/pruned16.pt
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Sequence, Tuple

from gridify import _cliargs as types

PROG = "prune_edge_widths.py"  # PyTorch and gridify's models are imported after --help and argument errors

#: the gridification's and the de-gridification's BipartiteConv
CONVS = ("gridify.conv", "degridify.conv")

#: (the layers that write it, the layer that reads it) of each hidden space of a concat-message BipartiteConv
SPACES: Tuple[Tuple[Tuple[str, ...], str], ...] = (
    (("phi_node.0",), "phi_node.2"),
    (("phi_node.2",), "msg_node"),
    (("msg_node", "phi_pos.lin2"), "msg_out"),
    (("msg_out",), "phi_upd.0"),
    (("phi_upd.0",), "phi_upd.2"),
    (("phi_pos.lin1",), "phi_pos.lin2"),
)


def _keep(scores: Any, width: int) -> Any:
    """The indices of the ``width`` largest scores, in their original order."""
    import torch  # noqa: PLC0415

    return torch.topk(scores, width).indices.sort().values


def prune_conv(sd: Dict[str, Any], prefix: str, width: int) -> Dict[str, Any]:
    """The state dict with the ``BipartiteConv`` at ``prefix`` narrowed to ``width``."""
    import torch  # noqa: PLC0415

    out = dict(sd)
    for writers, reader in SPACES:
        w_out = sd[f"{prefix}.{reader}.weight"]
        size = w_out.shape[1]
        if size <= width:
            continue
        fan_in = torch.zeros(size)
        for layer in writers:
            fan_in += sd[f"{prefix}.{layer}.weight"].norm(dim=1) + sd[f"{prefix}.{layer}.bias"].abs()
        keep = _keep(w_out.norm(dim=0) * fan_in, width)
        for layer in writers:
            out[f"{prefix}.{layer}.weight"] = out[f"{prefix}.{layer}.weight"][keep]
            out[f"{prefix}.{layer}.bias"] = out[f"{prefix}.{layer}.bias"][keep]
        out[f"{prefix}.{reader}.weight"] = out[f"{prefix}.{reader}.weight"][:, keep]
    freqs = sd[f"{prefix}.phi_pos.freqs.weight"]
    n_freq = freqs.shape[0]
    if n_freq > width // 2:
        lin1 = out[f"{prefix}.phi_pos.lin1.weight"]
        keep = _keep(lin1[:, :n_freq].norm(dim=0) + lin1[:, n_freq:].norm(dim=0), width // 2)
        out[f"{prefix}.phi_pos.freqs.weight"] = freqs[keep]
        out[f"{prefix}.phi_pos.lin1.weight"] = lin1[:, torch.cat([keep, keep + n_freq])]
    return out


def edge_widths(payload: Dict, convs: Sequence[str] = CONVS) -> Dict[str, Tuple[int, int]]:
    """The per-edge widths ``(messages H, positional field P)`` of each ``BipartiteConv`` in ``convs``; ValueError
    naming the layers a model without concat messages and a Fourier field lacks."""
    sd = payload["state_dict"]
    out = {}
    for prefix in convs:
        missing = [f"{prefix}.{layer}.weight" for layer in ("msg_node", "msg_out", "phi_pos.lin1", "phi_pos.freqs")]
        missing = [key for key in missing if key not in sd]
        if missing:
            raise ValueError(
                f"a {payload.get('model_name')!r} model without the layers of a gridification with concat messages "
                f"and a Fourier field ({', '.join(missing)} not in its weights): only such scene segmenters can be "
                f"pruned here"
            )
        out[prefix] = (int(sd[f"{prefix}.msg_out.weight"].shape[1]), int(sd[f"{prefix}.phi_pos.lin1.weight"].shape[0]))
    return out


def check_width(payload: Dict, width: int, convs: Sequence[str] = CONVS) -> None:
    """``width`` is one the narrower model can take: the pruned model has one width for the messages and the
    positional field of both convolutions, so it is at most the narrowest of them (a width between two of the
    model's widths would leave the narrower spaces as they are and not load). ValueError naming the allowed
    widths otherwise."""
    widths = edge_widths(payload, convs)
    narrowest = min(min(hp) for hp in widths.values())
    if width <= narrowest:
        return
    shown = ", ".join(f"{prefix}: messages {h}, positional field {p}" for prefix, (h, p) in widths.items())
    allowed = f"even widths 2 to {narrowest - narrowest % 2}" if narrowest >= 2 else "none"
    widest = max(max(hp) for hp in widths.values())
    where = "wider than" if width > widest else "between"
    raise ValueError(
        f"--width {width} is {where} the model's per-edge widths ({shown}); the pruned model takes one width "
        f"for all of them, so it must be at most {narrowest}: allowed: {allowed}"
    )


def prune(payload: Dict, width: int, convs: Sequence[str] = CONVS) -> Dict:
    """A ``model.pt`` payload of the same model with per-edge widths ``width``, loadable as ``init_weights``
    (:func:`check_width` first)."""
    from gridify.models import build_model  # noqa: PLC0415

    check_width(payload, width, convs)
    sd = {k: v.detach().clone() for k, v in payload["state_dict"].items()}
    for prefix in convs:
        sd = prune_conv(sd, prefix, width)
    kwargs = {**payload["model_kwargs"], "message_channels": width, "pos_hidden_channels": width}
    model = build_model(payload["model_name"], **kwargs)
    model.load_state_dict(sd, strict=True)  # every shape checked against the narrower model
    config = dict(payload.get("config") or {})
    if config.get("model"):
        config["model"] = {**config["model"], "message_channels": width, "pos_hidden_channels": width}
    return {**payload, "model_kwargs": kwargs, "state_dict": model.state_dict(), "config": config}


def even_width(text: str) -> int:
    """``--width``: an even integer >= 2."""
    value = types.int_range(2, name="even integer")(text)
    if value % 2:
        raise argparse.ArgumentTypeError(f"must be an even integer >= 2, got {text!r}")
    return value


@types.script_errors(PROG)
def main(argv: List[str] | None = None) -> None:
    parser = types.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", required=True, type=types.shipped_or_file, help="a shipped model's name or a model.pt"
    )
    parser.add_argument("--width", type=even_width, default=16, help="the new per-edge widths (even, default 16)")
    parser.add_argument("--out", required=True, type=types.output_file(), help="the model.pt to write")
    args = parser.parse_args(argv)
    from gridify.checkpoint import CheckpointError, atomic_torch_save, checkpoint_file, load_checkpoint  # noqa: PLC0415

    try:  # a shipped model's name or a file, as gridify.load and init_weights take it
        path = checkpoint_file(args.model)
        payload = load_checkpoint(path)
    except (CheckpointError, ValueError) as exc:
        raise types.ScriptError(f"--model {args.model}: {exc}") from None
    try:
        check_width(payload, args.width)
    except ValueError as exc:
        raise types.ScriptError(f"{path}: {exc}") from None
    pruned = prune(payload, args.width)
    before = sum(v.numel() for v in payload["state_dict"].values())
    after = sum(v.numel() for v in pruned["state_dict"].values())
    atomic_torch_save(pruned, args.out)
    print(f"{path} -> {args.out}: per-edge widths {args.width}, {before:,} -> {after:,} parameters")


if __name__ == "__main__":
    sys.exit(types.run_script(main, PROG))
