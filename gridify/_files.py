"""Writing files so that readers never see half a file, and with the permissions users expect.

:func:`atomic_write` is the one way the library writes a file: the content goes to a temporary
file in the target's folder, is flushed and ``fsync``-ed, then ``os.replace`` renames it over the
target (atomic on POSIX and Windows) and the folder is fsynced so the rename itself is durable.
A crash or an exception at any point leaves the previous file (or none) at the target, and the
temporary file is removed on exceptions. An ``OSError`` while writing (a full disk, ``ulimit -f``)
that names no file is given the target's path, so it can be reported as one line
(:func:`gridify._paths.describe_os_error`); one that a writer wrapped in another exception
(``torch.save`` raises a ``RuntimeError``) is raised as itself.

``tempfile.mkstemp`` creates files with mode ``0600``; the finished file instead gets the mode
an ordinary ``open(path, "w")`` would give it (``0666`` minus the process umask), so checkpoints
and exports can be shared by a team whose umask allows it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Union

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "default_file_mode",
    "staging_dir",
    "commit_staged",
]

PathLike = Union[str, "os.PathLike[str]"]


def default_file_mode() -> int:
    """``0o666`` minus the current umask: the mode ``open(path, "w")`` gives a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(str(folder), os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows cannot open a directory
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _os_error_in(exc: BaseException) -> "OSError | None":
    """``exc`` if it is an ``OSError``, else the ``OSError`` it was raised while handling (torch.save
    turns a failed write into a ``RuntimeError``), else None."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def atomic_write(path: PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
    """Call ``write(fh)`` on a binary temporary file, then move it to ``path`` atomically.

    Parent folders are created. Returns ``path`` as a :class:`~pathlib.Path`.
    """
    target = Path(os.fspath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=str(target.parent))
    except OSError as exc:  # named by the target, not by the temporary file that could not be made
        raise OSError(exc.errno, exc.strerror, str(target)) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, default_file_mode())
        try:
            os.replace(tmp, target)
        except OSError as exc:  # named by the target, not by the temporary file (e.g. a folder is in the way)
            raise OSError(exc.errno, exc.strerror, str(target)) from None
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        cause = _os_error_in(exc) if isinstance(exc, Exception) else None
        if cause is not None and cause.filename is None and cause.strerror is not None:
            cause.filename = str(target)  # a full disk or a file size limit names no file by itself
        if cause is not None and cause is not exc:
            raise cause from None  # e.g. torch.save's "unexpected pos" RuntimeError around the OSError
        raise
    _fsync_dir(target.parent)
    return target


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`)."""
    return atomic_write_bytes(path, text.encode(encoding))


# --------------------------------------------------------------------------------------
# several files: staged beside the target, moved into place on success
# --------------------------------------------------------------------------------------
def staging_dir(target: PathLike) -> Path:
    """Where a command that writes several files into the folder ``target`` writes them first: the hidden folder
    ``.<name>.partial`` beside it (on the same file system, so that :func:`commit_staged` moves by renaming). A
    failed run leaves ``target`` as it was; an interrupted one leaves what it wrote here for a rerun to resume."""
    t = Path(target)
    return t.parent / f".{t.name}.partial"


def commit_staged(stage: PathLike, target: PathLike, unit_depth: int = 1, last: tuple = ()) -> None:
    """Move everything under ``stage`` into ``target`` (created when missing), then remove ``stage``.

    Folders above ``unit_depth`` (1: the entries of ``stage`` itself) are merged with ``target``'s; an entry at
    ``unit_depth`` (a scene folder at 2) or any file replaces what ``target`` holds there, whole (a folder is
    renamed aside, the new one renamed in, the old one removed: never the files of two runs in one folder). The
    names in ``last`` (a record, a class list) are moved after everything else, in that order."""
    import shutil

    src, dst = Path(stage), Path(target)
    dst.mkdir(parents=True, exist_ok=True)
    entries = sorted(src.iterdir(), key=lambda p: (p.name in last, last.index(p.name) if p.name in last else 0))
    for entry in entries:
        goal = dst / entry.name
        if entry.is_dir() and not entry.is_symlink() and unit_depth > 1 and goal.is_dir():
            commit_staged(entry, goal, unit_depth - 1)
        elif goal.is_dir() and not goal.is_symlink():  # a whole unit replaced: the old one aside, then removed
            aside = goal.with_name(f".{goal.name}.old")
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(goal, aside)
            os.replace(entry, goal)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(entry, goal)
    _fsync_dir(dst)
    shutil.rmtree(src, ignore_errors=True)
