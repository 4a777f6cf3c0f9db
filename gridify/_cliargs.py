"""The argument types every ``gridify`` sub-command and every script of ``scripts/`` shares (argparse ``type=``
callables), and how a command or script ends on an error.

One argument layer for ``gridify train``, ``evaluate``, ``predict``, ``show``, ``export``,
``bench`` and ``download``: CPU threads, DataLoader workers, devices, counts and paths are
checked when the command line is parsed, so a bad value is an argparse error naming the flag
(``gridify predict: error: argument --threads: must be an integer >= 1, got '0'``), never a torch
traceback after the model has loaded. Path types only look at the path
(:mod:`gridify._paths`); nothing is created while parsing.

The scripts of ``scripts/`` use the same types and end the same way: their ``main(argv)`` is decorated
with :func:`script_errors` (a :class:`ScriptError`, a :class:`~gridify._paths.PathError` or an ``OSError``
ends the script with one line ``<script>: error: ...``; exit status 2 for an argument or input refused
before the work starts, 1 for a failure while working) and run by :func:`run_script`, whose
:func:`last_resort` turns any other exception into one line too (``GRIDIFY_TRACEBACK=1`` shows the
traceback). Every output path of a script is checked when its arguments are parsed, before any work.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    NoReturn,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from ._paths import (
    PathError,
    check_checkpoint_flag,
    check_input_file,
    check_output_dir,
    check_output_file,
    describe_os_error,
)
from ._pretrained import PRETRAINED, not_found_hint, shipped_name

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
    "rel_ci",
    "voxel_size",
    "device",
    "device_or_auto",
    "input_file",
    "output_file",
    "output_dir",
    "output_dir_of",
    "input_dir",
    "shipped_or_file",
    "up_axis",
    "max_fragments",
    "add_scene_run_arguments",
    "add_pred_argument",
    "option_label",
    "given_options",
    "option_read",
    "check_options",
    "UsageExit",
    "Interrupted",
    "MAX_THREADS",
    "MAX_WORKERS",
    "ScriptError",
    "TRACEBACK_ENV",
    "last_resort",
    "script_errors",
    "run_script",
    "read_json_object",
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
    ``invalid choice: 'predit' (choose from ...); did you mean predict?``). Its ``SystemExit`` has the exit status
    (2 for an error) as its code and the error line as its text, for a caller of ``main(argv)``."""

    def error(self, message: str) -> NoReturn:
        flags = [o for o in self._option_string_actions if o.startswith("--")]
        super().error(did_you_mean(message, flags))

    def exit(self, status: int = 0, message: Optional[str] = None) -> NoReturn:
        if message:
            self._print_message(message, sys.stderr)
        raise _Exit(status, (message or "").strip())


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


#: ``--max-fragments`` help (predict, show, evaluate: :func:`add_scene_run_arguments`)
MAX_FRAGMENTS_HELP = (
    "scene segmenters: grid-subsampled fragments of the scan per view at most (default: the model's, 4 unless "
    "its checkpoint records another, semantickitti: 1; 'all': every point in a fragment; 1 with --votes 1: about "
    "a quarter of the model calls of 4 fragments, for a faster, slightly coarser labelling)"
)
#: ``--votes`` help on scene segmenters (predict, show, evaluate: :func:`add_scene_run_arguments`)
SCENE_VOTES_HELP = (
    "scene segmenters: views averaged, the scan and its rotations about z by evenly spaced angles (default: the "
    "model's, 1 unless its checkpoint records another; semantickitti: 4)"
)
#: ``--pred`` help (show, evaluate --scan: :func:`add_pred_argument`)
PRED_HELP = (
    "labels a scene segmenter wrote before (gridify predict --out: .txt, .npy, .ply or .json), used instead of "
    "labelling the scan again (the model is not run; its classes name the labels); checked against the scan's "
    "point count and the model's classes"
)


def add_scene_run_arguments(parser: argparse.ArgumentParser, votes_others: str = "") -> None:
    """``--votes`` and ``--max-fragments`` of ``predict``, ``show`` and ``evaluate``: one definition (types,
    defaults None = the model's, and help on scene segmenters). ``votes_others``: what ``--votes`` means for the
    command's other models, said before the scene segmenters' part (``""``: none)."""
    parser.add_argument("--votes", type=positive_int, default=None, help=votes_others + SCENE_VOTES_HELP)
    parser.add_argument("--max-fragments", type=max_fragments, default=None, help=MAX_FRAGMENTS_HELP)


def add_pred_argument(parser: argparse.ArgumentParser, several: str = "") -> None:
    """``--pred FILE`` of ``show`` and ``evaluate --scan`` (:data:`PRED_HELP`; ``several``: what it takes for
    several scans, said after it)."""
    parser.add_argument("--pred", metavar="FILE", default=None, help=PRED_HELP + several)


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def rel_ci(text: str) -> float:
    """``--rel-ci``: a benchmark's target precision, the half-width of the 95 % interval of a median as a fraction
    of it, in (0, 1) (0.05: ± 5 %)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1), e.g. 0.05 for ± 5 %, got {text!r}")
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


def output_dir_of(files: Sequence[str] = (), folders: Sequence[str] = ()) -> Callable[[str], str]:
    """A type for a folder to write into (:func:`gridify._paths.check_output_dir`) that will hold the files
    ``files`` and the folders ``folders`` (none of them may exist as the other kind)."""
    return _path_type(check_output_dir, files=tuple(files), folders=tuple(folders))


def _exists(text: str) -> Optional[bool]:
    """Whether the path exists (None: it cannot be looked up, e.g. a name too long or a NUL byte)."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return None


def input_dir(text: str) -> str:
    """An existing folder to read from (not a file, not missing)."""
    if not text:
        raise argparse.ArgumentTypeError("empty path; give a folder")
    found = _exists(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r:.80}: not a usable path (too long, or a NUL byte)")
    if not found:
        raise argparse.ArgumentTypeError(f"{text}: no such folder")
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a file, not a folder")
    return text


def shipped_or_file(text: str) -> str:
    """A model given as ``gridify.load`` takes it: a shipped model's name, or a checkpoint file (readable, not a
    folder or a FIFO). A bare name that is neither is named with the shipped models and the closest one
    (``did you mean 'semantickitti'?``), as ``gridify.load`` names it."""
    if shipped_name(text):  # a file of that name is a checkpoint and wins (gridify._pretrained.shipped_name)
        return text
    if not text.strip():
        raise argparse.ArgumentTypeError(f"empty; give a shipped model's name ({', '.join(PRETRAINED)}) or a file")
    if _exists(text) is False:
        raise argparse.ArgumentTypeError(f"checkpoint not found: {text}{not_found_hint(text)}")
    return _path_type(check_input_file)(text)


# -- how a command or script ends on an error ------------------------------------------------------------------

#: set to see the traceback of an error the command did not expect (instead of its one line)
TRACEBACK_ENV = "GRIDIFY_TRACEBACK"


class ScriptError(Exception):
    """What ends a script of ``scripts/`` with one line (:func:`script_errors`): ``status`` 2 for an argument
    or input file refused before the work starts (the default), 1 for a failure while working."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def _one_line(text: str) -> str:
    return "; ".join(ln.strip() for ln in str(text).splitlines() if ln.strip())


class _Exit(SystemExit):
    """The exit of a script with ``status`` after its line was printed; ``str()`` is that line (what a caller of
    ``main(argv)`` reads from the ``SystemExit``)."""

    def __init__(self, status: int, line: str) -> None:
        super().__init__(status)
        self.line = line

    def __str__(self) -> str:
        return self.line


def _end(prog: str, message: str, status: int) -> NoReturn:
    line = f"{prog}: error: {_one_line(message)}"
    print(line, file=sys.stderr)
    raise _Exit(status, line) from None


@contextmanager
def last_resort(prog: str) -> Iterator[None]:
    """Every command and script ends in one line, whatever stage an error comes from: an exception none of its
    own checks turned into a message (a value deep inside torch, a library bug) becomes
    ``<prog>: error: <Type>: <message>`` (exit status 1) with the hint to set ``GRIDIFY_TRACEBACK=1`` for the
    traceback."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the last resort of the command line, never of the library
        if os.environ.get(TRACEBACK_ENV, "").strip() not in ("", "0"):
            raise
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        text = "; ".join(lines[-1:] if any(ln.startswith("Original Traceback") for ln in lines) else lines[:3])
        raise SystemExit(
            f"{prog}: error: {type(exc).__name__}: {text or 'no message'} (an unexpected error: set "
            f"{TRACEBACK_ENV}=1 to see where it came from, and please report it)"
        ) from None


MainFn = TypeVar("MainFn", bound=Callable[..., Any])


def script_errors(prog: str) -> Callable[[MainFn], MainFn]:
    """Decorator of a script's ``main(argv)``: a :class:`ScriptError` ends it with its line and status, a
    :class:`~gridify._paths.PathError` (an output or input path refused) with status 2, an ``OSError`` (a full
    disk, a file that vanished) with :func:`gridify._paths.describe_os_error`'s line and status 1; each as
    ``<prog>: error: <message>`` on stderr, never a traceback. Other exceptions pass (:func:`run_script`)."""

    def decorate(main: MainFn) -> MainFn:
        @functools.wraps(main)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                return main(*args, **kwargs)
            except ScriptError as exc:
                _end(prog, str(exc), exc.status)
            except PathError as exc:
                _end(prog, str(exc), 2)
            except OSError as exc:
                _end(prog, describe_os_error(exc), 1)

        return checked  # type: ignore[return-value]

    return decorate


def read_json_object(path: Path, holds: str, hint: str = "") -> Dict[str, Any]:
    """The JSON object in the file ``path`` (a run's ``run_info.json``, ``test_metrics.json``, a score), for a
    script; :class:`ScriptError` naming the file when it is not JSON (``hint``: what to do then) or not an object
    (``holds``: what the object should hold, e.g. ``'started'``)."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScriptError(f"{path}: not a JSON file ({exc}){'; ' + hint if hint else ''}") from None
    if not isinstance(value, dict):
        raise ScriptError(f"{path}: must hold a JSON object with {holds}, got {type(value).__name__}")
    return value


def run_script(main: Callable[[Optional[Sequence[str]]], Any], prog: str, argv: Optional[Sequence[str]] = None) -> int:
    """Run a script's ``main(argv)`` (``argv`` None: the command line) under :func:`last_resort`; its exit status
    (an ``int`` returned, else 0)."""
    with last_resort(prog):
        status = main(None if argv is None else list(argv))
    return status if isinstance(status, int) and not isinstance(status, bool) else 0


# --------------------------------------------------------------------------------------
# options a route does not read
# --------------------------------------------------------------------------------------
def option_label(action: argparse.Action) -> str:
    """How a message names an argument: its long flag (``--up-axis``), else its metavar or name (``NAME``)."""
    longs = [o for o in action.option_strings if o.startswith("--")]
    if longs or action.option_strings:
        return (longs or action.option_strings)[0]
    return str(action.metavar or action.dest.upper())


#: the default of a positional argument while :func:`given_options` parses (not given: still it)
_NOT_GIVEN = object()


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str], intermixed: bool = False) -> Dict[str, str]:
    """``{dest: label}`` of the arguments given on the command line ``argv`` (already parsed once by ``parser``):
    parsed a second time with every option's default suppressed (and every positional's a marker), so that an
    option given with its default value counts as given and one left out does not, whatever its default."""
    actions = parser._actions  # noqa: SLF001 - argparse keeps a parser's arguments only there
    saved = [(a, a.default) for a in actions]
    try:
        for a in actions:
            a.default = argparse.SUPPRESS if a.option_strings else _NOT_GIVEN
        parse = parser.parse_known_intermixed_args if intermixed else parser.parse_known_args
        namespace, _ = parse(list(argv))
    finally:
        for a, default in saved:
            a.default = default
    given = {k: v for k, v in vars(namespace).items() if v is not _NOT_GIVEN}
    return {
        a.dest: option_label(a)
        for a in actions
        if a.dest in given and a.dest != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)  # noqa: SLF001
    }


def option_read(requirement: str, facts: Iterable[str]) -> bool:
    """Whether an option whose entry reads ``requirement`` (``""``: always; ``"a+b|c"``: with the facts ``a`` and
    ``b``, or with ``c``) is read on a route of these facts."""
    if not requirement:
        return True
    have = set(facts)
    return any(set(alt.split("+")) <= have for alt in requirement.split("|"))


class Interrupted(_Exit):
    """Ctrl-C ended a command after it kept what it had finished: exit status 130 (128 + SIGINT, what a shell
    reports for it), with its one line printed to stderr when raised (``str()`` of it is that line)."""

    STATUS = 130

    def __init__(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)
        super().__init__(self.STATUS, message)


class UsageExit(_Exit):
    """A usage error found after parsing: exit status 2, as argparse's own, with its one line printed to stderr
    when raised (``str()`` of it is that line, as for every exit of :class:`Parser` and the scripts)."""

    def __init__(self, message: str) -> None:
        print(message, file=sys.stderr)
        super().__init__(2, message)

    @property
    def message(self) -> str:
        return self.line


def _group(fact: str) -> str:
    """The group of a route fact (``model:classifier`` -> ``model``)."""
    return fact.split(":", 1)[0]


def check_options(
    prog: str,
    uses: Mapping[str, Tuple[str, str]],
    given: Mapping[str, str],
    facts: Mapping[str, Optional[str]],
    maybe: Iterable[str] = (),
) -> None:
    """The one rule for arguments a route of a command does not read: a :class:`UsageExit` naming every given
    argument whose entry of ``uses`` (``{dest: (requirement, when it is read)}``, see :func:`option_read`) is not
    read with the route's ``facts`` (``{group:fact: words for the message, or None}``), instead of ignoring it.
    The message names the route by the facts of the groups the refused arguments depend on.

    ``maybe``: facts not known yet that may hold (the kind of model before it is loaded): an argument they could
    make read passes now and is checked again once the route is known."""
    known = set(facts) | set(maybe)
    unread = [(label, *uses[dest]) for dest, label in given.items() if not option_read(uses[dest][0], known)]
    if not unread:
        return
    groups = {_group(tag) for _, need, _ in unread for alt in need.split("|") for tag in alt.split("+")}
    by_when: Dict[str, List[str]] = {}
    for label, _, when in unread:  # one clause per reason: "--config and --split are only read on a split"
        by_when.setdefault(when, []).append(label)
    said = ", and ".join(
        f"{' and '.join(labels)} {'is' if len(labels) == 1 else 'are'} only read {when}"
        for when, labels in by_when.items()
    )
    route = ", ".join(words for fact, words in facts.items() if words and _group(fact) in groups)
    raise UsageExit(
        f"{prog}: error: {said}"
        + (f" (here: {route})" if route else "")
        + f"; leave {'it' if len(unread) == 1 else 'them'} out"
    )
