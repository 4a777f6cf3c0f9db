"""Paths a command reads or writes: checked before the work starts, OS errors as one line.

Every command that writes (``gridify train``, ``evaluate``, ``predict``, ``show``, ``bench``,
``download``) checks its output paths with :func:`check_output_file` / :func:`check_output_dir`
*before* it trains, renders or measures, so a run of minutes never finds out at the end that it
cannot write. The checks only look (nothing is created): a path that is a file where a folder is
needed or the other way round, a path below a file, a folder that is not writable or lies on a
read-only file system, a FIFO or device where a regular file is needed. They raise
:class:`PathError` (a ``ValueError``) naming the path and the cause.

What cannot be known beforehand (a disk that fills up, a file size limit, ``ulimit -f``, a
permission changed during the run) surfaces as an ``OSError`` while writing;
:func:`describe_os_error` turns one into a line naming the path and the cause, and
:func:`one_line_errors` ends a command with that line instead of a traceback.

:func:`check_input_file` does the same for a file a command reads (``--resume``, ``--ckpt``):
a folder or a FIFO is said to be one, not "not found".

:func:`folder_lock` holds an exclusive ``flock`` on a lock file inside a run's folder for the
run's lifetime, so two runs started on one folder cannot mix their outputs; the kernel drops the
lock when the process ends, however it ends, so a killed run never leaves a stale lock.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Union

__all__ = [
    "PathError",
    "FolderInUseError",
    "check_input_file",
    "check_output_file",
    "check_output_dir",
    "describe_os_error",
    "one_line_errors",
    "folder_lock",
    "LOCK_NAME",
]

PathLike = Union[str, "os.PathLike[str]"]

#: the lock file :func:`folder_lock` keeps inside a run's folder
LOCK_NAME = ".gridify.lock"


class PathError(ValueError):
    """A path that cannot be used as given; the message names the path and the cause."""


class FolderInUseError(PathError):
    """The folder is locked by another running process (:func:`folder_lock`)."""


def _name(path: PathLike, what: str) -> str:
    return f"{what} {os.fspath(path)}" if what else os.fspath(path)


def _special_kind(mode: int) -> Optional[str]:
    """What a file that is neither a regular file nor a folder is, in words (None for those two)."""
    for test, words in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return words
    return None


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (``Path.exists`` is False below a file)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def _folder_problem(folder: Path) -> Optional[str]:
    """Why nothing can be written into the existing ``folder`` (None: it can)."""
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    top = folder.resolve().parts[1:2]
    if sys.platform.startswith("linux") and top in (("proc",), ("sys",)):
        return f"{folder} lies on the kernel's /{top[0]} pseudo file system, where files cannot be created"
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return f"{folder} is on a read-only file system"
    except (AttributeError, OSError):  # pragma: no cover - no statvfs (Windows)
        pass
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable (permission denied)"
    return None


def _creatable(path: Path, target: str) -> Optional[str]:
    """Why the missing ``path`` cannot be created (None: it can), in words after ``target``."""
    anchor = _nearest_existing(path.parent if path.parent != path else path)
    if not anchor.is_dir():
        return f"{target}: it lies below {anchor}, which is a file, not a folder"
    problem = _folder_problem(anchor)
    return f"{target}: cannot be created, {problem}" if problem else None


def _checked(check: Any) -> Any:
    """Run a path check on a path that is a non-empty string without NUL bytes; an ``OSError`` of the
    check itself (a name too long, a folder that cannot be searched) is a :class:`PathError` too."""

    @functools.wraps(check)
    def wrapper(path: PathLike, what: str = "", **kw: Any) -> Path:
        if not isinstance(path, (str, os.PathLike)):
            raise PathError(f"{what or 'path'}: must be a path, got {type(path).__name__} ({path!r:.80})")
        text = os.fspath(path)
        if not isinstance(text, str) or not text or "\0" in text:
            raise PathError(f"{what or 'path'}: {'empty path' if not text else f'not a usable path: {text!r:.80}'}")
        try:
            return check(text, what, **kw)
        except OSError as exc:
            raise PathError(f"{_name(text, what)}: {_cause(exc)}") from None

    return wrapper


@_checked
def check_input_file(path: PathLike, what: str = "") -> Path:
    """``path`` as a :class:`~pathlib.Path` when it is a readable regular file; else :class:`PathError`
    saying what it is instead (missing, below a file, a folder, a FIFO, a device, unreadable)."""
    p, target = Path(os.fspath(path)), _name(path, what)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise PathError(f"{target}: not found") from None
    except NotADirectoryError:
        raise PathError(f"{target}: not found ({_nearest_existing(p)} is a file, not a folder)") from None
    if stat.S_ISDIR(mode):
        raise PathError(f"{target}: is a folder, not a file")
    special = _special_kind(mode)
    if special:
        raise PathError(f"{target}: is {special}, not a regular file")
    if not os.access(p, os.R_OK):
        raise PathError(f"{target}: not readable (permission denied)")
    return p


def check_checkpoint_flag(path: Optional[PathLike], flag: str = "--ckpt", hint: str = "") -> None:
    """A checkpoint given by ``flag`` exists as a readable file; else :class:`PathError` naming the flag
    (``--ckpt: checkpoint not found: PATH``, then ``hint``, or what the path is instead). ``None``: nothing to
    check."""
    if path is None:
        return
    if not Path(os.fspath(path)).exists():
        raise PathError(f"{flag}: checkpoint not found: {os.fspath(path)}{hint}")
    check_input_file(path, flag)


#: the label files ``gridify predict --out`` / :func:`gridify.api.write_prediction` write, by extension
PREDICTION_FORMATS = (".txt", ".npy", ".ply", ".json")


@_checked
def check_output_file(path: PathLike, what: str = "", *, suffixes: Optional[Sequence[str]] = None) -> Path:
    """``path`` as a :class:`~pathlib.Path` when a file can be written there (the parent folders
    may be missing: they are created when writing); else :class:`PathError` naming the path and the
    cause. ``suffixes``: the extensions allowed (lower case, with the dot). Creates nothing."""
    text, target = os.fspath(path), _name(path, what)
    p = Path(text)
    if text.endswith(("/", os.sep)) or p.is_dir():
        raise PathError(f"{target}: is a folder, but a file is written there; give a file name")
    if p.exists():
        special = _special_kind(p.stat().st_mode)
        if special:
            raise PathError(f"{target}: is {special}, not a regular file")
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise PathError(
            f"{target}: unsupported extension {p.suffix.lower() or '(none)'!r}; use one of {list(suffixes)}"
        )
    if p.parent.exists():
        problem = _folder_problem(p.parent)
        if problem:
            raise PathError(f"{target}: cannot be written, {problem}")
        return p
    problem = _creatable(p.parent, target)
    if problem:
        raise PathError(problem)
    return p


@_checked
def check_output_dir(path: PathLike, what: str = "", *, folders: Sequence[str] = (), files: Sequence[str] = ()) -> Path:
    """``path`` as a :class:`~pathlib.Path` when a folder can be written there (created if missing
    when writing); else :class:`PathError` naming the path and the cause. ``folders`` / ``files``:
    names inside it the command writes, which must not exist as the other kind. Creates nothing."""
    target = _name(path, what)
    p = Path(os.fspath(path))
    if not p.exists():
        problem = _creatable(p, target)
        if problem:
            raise PathError(problem)
        return p
    if not p.is_dir():
        raise PathError(f"{target}: is {_special_kind(p.stat().st_mode) or 'a file'}, not a folder")
    problem = _folder_problem(p)
    if problem:
        raise PathError(f"{target}: cannot be written, {problem}")
    for name in folders:
        if (p / name).exists() and not (p / name).is_dir():
            raise PathError(f"{target}: {p / name} is a file where a folder is written")
    for name in files:
        if (p / name).is_dir():
            raise PathError(f"{target}: {p / name} is a folder where a file is written")
    return p


_CAUSES = {
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "is a folder where a file is written",
    errno.EEXIST: "exists, and is a file where a folder is needed",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.EFBIG: "file too large: the file size limit (ulimit -f) was reached while writing",
    errno.ENOSPC: "no space left on the device",
    errno.ENAMETOOLONG: "file name too long",
    errno.ELOOP: "too many levels of symbolic links",
}
if hasattr(errno, "EDQUOT"):
    _CAUSES[errno.EDQUOT] = "disk quota exceeded"


def _cause(exc: OSError) -> str:
    return _CAUSES.get(exc.errno or -1) or (exc.strerror or str(exc) or type(exc).__name__).strip()


def describe_os_error(exc: OSError, path: Optional[PathLike] = None) -> str:
    """One line naming the path of ``exc`` (or ``path`` when the error names none) and the cause."""
    if exc.errno is None and exc.filename is None:  # an error of gridify's own (an OSError subclass): its message
        return "; ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__
    name = exc.filename if exc.filename is not None else path
    cause = _cause(exc)
    if exc.filename2 is not None:
        return f"{os.fsdecode(name)} -> {os.fsdecode(exc.filename2)}: {cause}"
    if name is None:
        return f"{cause} ({type(exc).__name__})"
    return f"{os.fsdecode(name) if isinstance(name, (str, bytes, os.PathLike)) else name}: {cause}"


@contextmanager
def one_line_errors(prog: str) -> Iterator[None]:
    """End the command ``prog`` with one line (``<prog>: error: <path>: <cause>``) on an ``OSError``
    or a :class:`PathError` raised inside, instead of a traceback."""
    try:
        yield
    except PathError as exc:
        raise SystemExit(f"{prog}: error: {'; '.join(ln for ln in str(exc).splitlines() if ln.strip())}") from None
    except OSError as exc:
        raise SystemExit(f"{prog}: error: {describe_os_error(exc)}") from None


def _holder(fd: int) -> str:
    """What the lock file says about the process holding it."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 4096).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text.splitlines()[0] if text else "a process that did not say which"


@contextmanager
def folder_lock(folder: PathLike, what: str = "", owner: str = "") -> Iterator[Path]:
    """Hold an exclusive lock on ``folder`` (created if missing) while the block runs.

    The lock is an ``flock`` on ``folder/.gridify.lock``, which records the holder's pid and
    ``owner`` (e.g. its command line). A second process (or a second lock in this one) fails at
    once with :class:`FolderInUseError` naming the holder. The kernel releases the lock when the
    holder ends, even when it is killed, so a stale file never blocks anyone. Where ``fcntl`` does
    not exist (Windows) nothing is locked.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield Path(os.fspath(folder))
        return
    root = Path(os.fspath(folder))
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderInUseError(
                f"{_name(root, what)}: in use by another run ({_holder(fd)}); wait for it to "
                f"end or choose another {what or 'folder'}"
            ) from None
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        command = owner or " ".join(sys.argv)
        os.write(fd, f"pid {os.getpid()}: {command}\n".encode("utf-8", "replace"))
        yield root
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
