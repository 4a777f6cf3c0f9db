"""The gridify command line: train, evaluate, predict, show, export, bench, download, convert, list.

    gridify train --config procedural [section.key=value ...]
    gridify evaluate --ckpt outputs/procedural/checkpoints/model.pt
    gridify predict scan.ply --ckpt model.pt [--category chair] [--out labels.ply]
    gridify predict scan.ply --model modelnet10          (the ModelNet10 classifier shipped with gridify)
    gridify show scan.ply [--ckpt model.pt] [--layers points,grid,edges] [--out view.png]
    gridify export model.pt --format onnx [--num-points N] [--batch B] --out model.onnx
    gridify bench [...]                                (--recipe NAME: a training recipe; --scenes: scene scale)
    gridify download modelnet10 [--root datasets]      # or --config modelnet10, or --list
    gridify convert RAW_ROOT --layout s3dis --out datasets/s3dis_pointcept   (scenes -> the common layout)
    gridify list [configs|models|datasets]             (what gridify ships and knows by name)

``train``, ``evaluate`` and ``bench`` hand their arguments to :func:`gridify.training.main`,
:func:`gridify.evaluation.main` and :func:`gridify.bench.main` (imported only when used).

Every sub-command parses its numbers, devices and paths with the shared types of
:mod:`gridify._cliargs`, checks its output paths before it works (:mod:`gridify._paths`) and ends
every error, an ``OSError`` while writing included, with one line naming the flag or the file.

The package, by command: this module (:func:`main`, the parser of every sub-command, the delegation of ``train`` /
``evaluate`` / ``bench``, the output every command shares), :mod:`gridify.cli.predict` (``predict``, and what
``predict`` and ``show`` share: the model's options, loading it, reading the file as its task reads it),
:mod:`gridify.cli.show`, :mod:`gridify.cli.export`, :mod:`gridify.cli.data` (``download``, ``convert``) and
:mod:`gridify.cli.listing` (``list``). None imports PyTorch before a command runs: ``gridify --help``, ``list`` and
argument errors answer without it.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from typing import Any, List, Optional, Sequence

from .. import _cliargs as types
from .._paths import one_line_errors
from .data import add_convert_parser, add_download_parser, cmd_convert, cmd_download
from .export import add_export_parser, cmd_export
from .listing import add_list_parser, cmd_list
from .predict import add_predict_parser, cmd_predict
from .show import add_show_parser, cmd_show

__all__ = [
    "main",
    "script_main",
    "build_parser",
    "DELEGATED",
    "LIGHT_PARSERS",
    "cmd_predict",
    "cmd_show",
    "cmd_export",
    "cmd_download",
    "cmd_convert",
    "cmd_list",
    "ASCII_FOLD",
    "TRACEBACK_ENV",
]


DELEGATED = {
    "train": ("gridify.training", "train and test a model from a YAML config (Lightning)"),
    "evaluate": ("gridify.evaluation", "evaluate a checkpoint on a dataset split"),
    "bench": ("gridify.bench", "speed / memory benchmarks"),
}


@contextmanager
def _prog(name: str, label: Optional[str] = None):
    """Make the delegated command print ``label`` (default ``gridify <name>``) as its program name.

    Through the environment variable ``GRIDIFY_PROG`` (read by
    :func:`gridify.training.cli.program_name` and the benchmark), not by rewriting ``sys.argv[0]``:
    launchers that re-execute ``sys.argv`` (Lightning's DDP) must still find the program.
    """
    saved = os.environ.get("GRIDIFY_PROG")
    os.environ["GRIDIFY_PROG"] = label or f"gridify {name}"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("GRIDIFY_PROG", None)
        else:
            os.environ["GRIDIFY_PROG"] = saved


#: the delegated commands whose arguments are parsed before their module (and PyTorch) is imported
LIGHT_PARSERS = {"train": "train_parser", "evaluate": "evaluate_parser", "bench": "bench_parser"}


def _delegate(name: str, argv: List[str], label: Optional[str] = None) -> int:
    """Run the delegated command ``name`` (its module's ``main(argv)``) under the program name ``label``
    (default ``gridify <name>``): ``--help`` and argument errors answer from the light parser first."""
    import importlib

    label = label or f"gridify {name}"

    if name in LIGHT_PARSERS:  # --help and argument errors answer before anything heavy is imported
        from .. import _commands

        command = _commands.bench_command(argv) if name == "bench" else name  # each mode of bench: its own parser
        with _prog(name, label):
            parser = (
                _commands.bench_command_parser(command)
                if name == "bench"
                else getattr(_commands, LIGHT_PARSERS[name])()
            )
            parsed = parser.parse_args(argv) if name == "bench" else parser.parse_intermixed_args(argv)
            if name == "evaluate":
                _commands.check_evaluate_args(parsed, parser)
            elif name == "train":  # a misspelt config or override is named now, not after PyTorch has loaded
                _commands.check_config_name(parsed.config, parser.prog)
                _commands.check_overrides(parsed.overrides, parser.prog)
            elif command == "bench --recipe":
                _commands.check_config_name(parsed.recipe, parser.prog, "--recipe")
                _commands.check_overrides(parsed.override, parser.prog)
            elif command == "bench":
                _commands.check_bench_mode(parsed, parser.prog)
            given = types.given_options(parser, argv, intermixed=name != "bench")
            _commands.check_route(parser.prog, command, given, *_commands.light_route(command, parsed))
    module_name = DELEGATED[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise SystemExit(f"{label}: {module_name} is not available in this installation of gridify")
        raise SystemExit(
            f"{label}: missing dependency {exc.name!r}; install the script extras: pip install 'gridify[scripts]'"
        )
    with _prog(name, label), one_line_errors(label):
        status = module.main(argv)
    return status if isinstance(status, int) and not isinstance(status, bool) else 0  # evaluate returns its report


def script_main(name: str, prog: str, argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``scripts/<prog>`` (``train.py``, ``evaluate.py``): the command ``gridify
    <name>`` under the script's own program name, with its ``--help`` and argument errors answered before
    PyTorch is imported. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with _encodable_output(), _last_resort(prog):
        return _delegate(name, argv, prog)


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__

    p = types.Parser(
        prog="gridify",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'gridify <command> --help' for the options of a command.",
    )
    p.add_argument("--version", action="version", version=f"gridify {__version__}")
    sub = p.add_subparsers(dest="command", metavar="command")
    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, help=text, add_help=False)
    add_predict_parser(sub)
    add_show_parser(sub)
    add_export_parser(sub)
    add_download_parser(sub)
    add_convert_parser(sub)
    add_list_parser(sub)
    return p


def _one_line_warnings(prog: str) -> None:
    """Show warnings as ``<prog>: warning: <message> (<Category>)``: the source line Python prints by default
    (``data.py:145: UserWarning ... return cls(**kwargs)``) means nothing to a user of the command."""
    import warnings

    def fmt(message: Any, category: Any, filename: str, lineno: int, line: Optional[str] = None) -> str:
        text = " ".join(str(message).split())
        return f"{prog}: warning: {text} ({category.__name__})\n"

    warnings.formatwarning = fmt


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``gridify`` console script. Returns the exit status."""
    import warnings

    argv = list(sys.argv[1:] if argv is None else argv)
    saved = warnings.formatwarning
    if argv and not argv[0].startswith("-"):
        _one_line_warnings(f"gridify {argv[0]}")
    try:
        with _encodable_output(), _last_resort(f"gridify {argv[0]}" if argv else "gridify"):
            if argv and argv[0] in DELEGATED:
                return _delegate(argv[0], argv[1:])
            parser = build_parser()
            args, extras = parser.parse_known_args(argv)
            if extras:  # named by the sub-command's parser (its usage), not by the top-level one
                _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extras)}")
            if args.command is None:
                parser.print_help()
                return 2
            # what was typed, for the one rule of arguments a route does not read (gridify._commands.OPTION_USE)
            args.given_options = types.given_options(_command_parser(parser, args.command), argv[1:])
            with one_line_errors(f"gridify {args.command}"):
                try:
                    return int(args.func(args) or 0)
                except BrokenPipeError as exc:
                    if exc.filename is not None:  # a file of the command's own: its one line
                        raise
                    return _stdout_closed()
    finally:
        warnings.formatwarning = saved  # called from Python (tests, notebooks): leave the process as it was


def _stdout_closed() -> int:
    """The reader of the output went away (``gridify list | head``): stop quietly, as other tools do, with
    status 1 and no error line (the output is redirected to devnull so that Python's last flush says nothing)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (captured by a test, a notebook): nothing to redirect
        pass
    return 1


def _command_parser(parser: argparse.ArgumentParser, command: Optional[str]) -> argparse.ArgumentParser:
    """The parser of sub-command ``command`` (``parser`` itself when there is none)."""
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its sub-parsers only there
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:  # noqa: SLF001
            return action.choices[command]
    return parser


#: the name of the codec error handler of ``_encodable_output``
ASCII_FOLD = "gridify-ascii-fold"


#: characters without an ASCII decomposition, as a terminal without them should show them
_ASCII_SPELLING = {
    "\u2013": "-", "\u2014": "--", "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2026": "...",
    "\u00d7": "x", "\u2264": "<=", "\u2265": ">=", "\u2248": "~", "\u00b0": " deg", "\u2192": "->", "\u00b5": "u",
}  # fmt: skip


def _fold_to_ascii(exc: UnicodeError) -> tuple:
    """The codec error handler of ``_encodable_output``: a character the output cannot encode becomes its
    ASCII letters (``Lovász`` -> ``Lovasz``), a spelling of it (``≤`` -> ``<=``) or its escape (``\\u4e2d``); a
    byte a file name could not decode (``surrogateescape``) is written back as that byte."""
    import unicodedata

    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = b""
    for ch in exc.object[exc.start : exc.end]:
        if 0xDC80 <= ord(ch) <= 0xDCFF:  # surrogateescape: the undecodable byte itself
            out += bytes([ord(ch) - 0xDC00])
            continue
        folded = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode("ascii")
        text = _ASCII_SPELLING.get(ch) or folded or ch.encode("ascii", "backslashreplace").decode("ascii")
        out += text.encode("ascii")
    return out, exc.end


@contextmanager
def _encodable_output():
    """Every command's output survives a stdout / stderr that cannot encode all of it (``LANG=C``,
    ``PYTHONIOENCODING=ascii``, a Latin-1 terminal): what they cannot encode is folded to ASCII
    (:func:`_fold_to_ascii`) instead of ending the command with ``UnicodeEncodeError`` (``gridify list keys``
    names the Lovász loss). The streams' error handling is restored on the way out."""
    import codecs

    try:
        codecs.lookup_error(ASCII_FOLD)
    except LookupError:
        codecs.register_error(ASCII_FOLD, _fold_to_ascii)
    saved = []
    for stream in (sys.stdout, sys.stderr):
        errors = getattr(stream, "errors", None)
        if callable(getattr(stream, "reconfigure", None)) and errors in (
            "strict",
            "backslashreplace",
            "surrogateescape",
        ):
            try:
                stream.reconfigure(errors=ASCII_FOLD)
                saved.append((stream, errors))
            except (OSError, ValueError):  # closed, or a stream that cannot change now
                pass
    try:
        yield
    finally:
        for stream, errors in saved:
            try:
                stream.reconfigure(errors=errors)
            except (OSError, ValueError):
                pass


#: the one last resort of the commands and the scripts (``gridify._cliargs.last_resort``)
TRACEBACK_ENV = types.TRACEBACK_ENV


_last_resort = types.last_resort
