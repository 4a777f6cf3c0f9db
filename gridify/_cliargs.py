"""The argument types every ``gridify`` sub-command shares (argparse ``type=`` callables).

One argument layer for ``gridify train``, ``evaluate``, ``predict``, ``show``, ``export``,
``bench`` and ``download``: CPU threads, DataLoader workers, devices, counts and paths are
checked when the command line is parsed, so a bad value is an argparse error naming the flag
(``gridify predict: error: argument --threads: must be an integer >= 1, got '0'``), never a torch
traceback after the model has loaded. Path types only look at the path
(:mod:`gridify._paths`); nothing is created while parsing.
"""

from __future__ import annotations

import argparse
import difflib
import re
from typing import Callable, List, NoReturn, Optional, Sequence, Union

from ._paths import PathError, check_checkpoint_flag, check_input_file, check_output_dir, check_output_file
from ._pretrained import not_found_hint

__all__ = [
    "Parser",
    "did_you_mean",
    "check_ckpt",
    "int_range",
    "positive_int",
    "nonnegative_int",
    "threads",
    "workers",
    "positive_float",
    "voxel_size",
    "device",
    "device_or_auto",
    "input_file",
    "output_file",
    "output_dir",
    "up_axis",
    "max_fragments",
    "MAX_THREADS",
    "MAX_WORKERS",
]

#: more CPU threads or DataLoader workers than this is a typo, not a machine
MAX_THREADS = 4096
MAX_WORKERS = 1024

DEVICE_HINT = "cpu, cuda, cuda:N or mps"


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


def did_you_mean(message: str, options: Sequence[str]) -> str:
    """``message`` of an argparse error with the closest spellings appended: for an unrecognized ``--flag``
    among ``options`` (the parser's flags), for an invalid choice among the choices the message lists."""
    hints: List[str] = []
    m = _INVALID_CHOICE.search(message)
    if m:
        hints = difflib.get_close_matches(m[1], re.findall(r"'([^']*)'", m[2]), n=1)
    elif message.startswith("unrecognized arguments: "):
        for word in message.split(": ", 1)[1].split():
            flag = word.split("=", 1)[0]
            if flag.startswith("--"):
                hints += [h for h in difflib.get_close_matches(flag, options, n=1) if h not in hints]
    return f"{message}; did you mean {' or '.join(hints)}?" if hints else message


class Parser(argparse.ArgumentParser):
    """The parser class of every ``gridify`` command and sub-command: argparse's, with the closest spelling
    named in an error (``unrecognized arguments: --no-progres; did you mean --no-progress?``,
    ``invalid choice: 'predit' (choose from ...); did you mean predict?``)."""

    def error(self, message: str) -> NoReturn:
        flags = [o for o in self._option_string_actions if o.startswith("--")]
        super().error(did_you_mean(message, flags))


def check_ckpt(path: Optional[str]) -> None:
    """``--ckpt PATH`` of any command: ``gridify._paths.check_checkpoint_flag``, and for a missing bare name
    the shipped models (``--model modelnet40`` loads a shipped one). ``None``: nothing to check."""
    check_checkpoint_flag(path, "--ckpt", hint="" if path is None else not_found_hint(str(path), "--ckpt"))


def int_range(low: int, high: Optional[int] = None, name: str = "integer") -> Callable[[str], int]:
    """A type accepting the integers in ``[low, high]`` (ASCII digits only)."""
    bound = f">= {low}" if high is None else f"in [{low}, {high}]"

    def parse(text: str) -> int:
        stripped = text.strip()
        digits = stripped[1:] if stripped[:1] in "+-" else stripped
        if not (digits.isascii() and digits.isdigit()):
            raise argparse.ArgumentTypeError(f"must be an {name} {bound}, got {text!r}")
        value = int(stripped)
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be an {name} {bound}, got {text!r}")
        return value

    parse.__name__ = name  # argparse names the type in its "invalid <type> value" messages
    return parse


positive_int = int_range(1)
nonnegative_int = int_range(0)
threads = int_range(1, MAX_THREADS)
workers = int_range(0, MAX_WORKERS)


#: ``--up-axis`` values: :data:`gridify.transforms.UP_AXES` (kept here so that parsing imports no numpy or torch;
#: a test holds the two equal)
UP_AXES = ("z", "y", "x", "-z", "-y", "-x")


def up_axis(text: str) -> str:
    """A cloud's up direction: one of :data:`UP_AXES` (case ignored)."""
    value = text.strip().lower()
    if value not in UP_AXES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(UP_AXES)}, got {text!r}")
    return value


def max_fragments(text: str) -> Union[int, str]:
    """``--max-fragments``: a positive integer, or ``all`` (every point of a scan in a fragment)."""
    if text.strip().lower() == "all":
        return "all"
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a positive integer or 'all', got {text!r}") from None


#: ``--max-fragments`` help (predict, show, evaluate)
MAX_FRAGMENTS_HELP = (
    "scene segmenters: grid-subsampled fragments of the scan per view at most (default: the model's, 4 unless "
    "its checkpoint records another, semantickitti: 1; 'all': every point in a fragment; 1 with --votes 1: about "
    "a quarter of the model calls of 4 fragments, for a faster, slightly coarser labelling)"
)


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def voxel_size(text: str) -> float:
    """A voxel edge in metres: a finite number >= ``gridify._clinames.MIN_VOXEL_SIZE`` (as ``data.voxel_size``)."""
    from ._clinames import MIN_VOXEL_SIZE

    value = positive_float(text)
    if value < MIN_VOXEL_SIZE:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_VOXEL_SIZE:g} (a micrometre), got {text!r}")
    return value


def _check_device(text: str) -> str:
    if text.strip() == "cpu":  # every machine has one; a default of "cpu" is parsed without importing PyTorch
        return "cpu"
    import torch

    try:
        dev = torch.device(text.strip())
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; use {DEVICE_HINT}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(f"{text!r}: CUDA is not available on this machine; use cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(
                f"{text!r}: there is no CUDA device {dev.index} (this machine has "
                f"{torch.cuda.device_count()}: cuda:0 to "
                f"cuda:{torch.cuda.device_count() - 1})"
            )
    elif dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise argparse.ArgumentTypeError(f"{text!r}: MPS is not available on this machine; use cpu")
    elif dev.type != "cpu":
        raise argparse.ArgumentTypeError(f"{text!r}: gridify runs on {DEVICE_HINT}, not {dev.type}")
    return str(dev)


def device(text: str) -> str:
    """A device this machine has: ``cpu``, ``cuda``, ``cuda:N`` (N < the number of GPUs), ``mps``."""
    return _check_device(text)


def device_or_auto(text: str) -> str:
    """:func:`device`, or ``auto`` (CUDA when available, else the CPU)."""
    return "auto" if text.strip().lower() == "auto" else _check_device(text)


def _path_type(check: Callable[..., object], **kw: object) -> Callable[[str], str]:
    def parse(text: str) -> str:
        try:
            check(text, **kw)
        except PathError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    parse.__name__ = "path"
    return parse


def input_file(text: str) -> str:
    """A readable regular file (not a folder, a FIFO or a device)."""
    return _path_type(check_input_file)(text)


def output_file(suffixes: Optional[Sequence[str]] = None) -> Callable[[str], str]:
    """A type for a file to write (:func:`gridify._paths.check_output_file`), with these extensions."""
    return _path_type(check_output_file, suffixes=suffixes)


def output_dir(text: str) -> str:
    """A folder to write into (:func:`gridify._paths.check_output_dir`)."""
    return _path_type(check_output_dir)(text)
