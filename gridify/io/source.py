"""Opening input files: the checks every read starts with, and the one way a reader reads a file.

:func:`check_file` turns the ``path`` given to :func:`~gridify.io.read_points` (or
:func:`~gridify.io.read_mesh`) into a :class:`~pathlib.Path` to an existing, non-empty regular
file, or raises an error that names the path and the real cause: a missing file or a broken
symbolic link (:class:`FileNotFoundError`); a directory, a FIFO / socket / device ("not a
regular file"), a trailing ``/`` after a file name, a path component that is a file, a symbolic
link loop or a permission problem (:class:`ValueError`). Nothing is opened to find out, so a
FIFO never blocks the caller.

:func:`read_file_bytes` is how the built-in readers read a file: it opens it with
``O_NONBLOCK`` (a FIFO swapped in after the check still cannot block), checks with ``fstat``
that it is a regular file, and reads at most ``limit`` bytes. Every size a reader later derives
from a header is checked against the ``len(data)`` it got here before anything is allocated:

    bytes a header may make a reader allocate  <=  multiple x len(data)  (+ a small constant)

with the multiple of the format (1 for plain data, the codec's bounded expansion ratio for
compressed data; see each reader).

:func:`decode_text` is how every text file of the library (text clouds, label files, class and
split lists, timestamps) is decoded, so they all agree: a UTF-8 / UTF-16 / UTF-32 byte-order
mark picks the encoding and is removed; without one, UTF-16 is recognised by its zero bytes (an
ASCII character in UTF-16 has one zero byte: 2 bytes in 4 are zero, all on even or all on odd
offsets); other bytes are UTF-8, else Latin-1. Text holding NUL characters after that is a
binary file.

Shapes:
    no arrays: paths and bytes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any, Optional, Tuple

from .._files import PathLike

__all__ = [
    "check_file",
    "read_file_bytes",
    "describe_mode",
    "ReferencedFileNotFoundError",
    "decode_text",
    "read_text_file",
    "text_encoding",
]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def describe_mode(mode: int) -> str:
    """What kind of file ``mode`` (an ``st_mode``) is, in words: ``"a FIFO (named pipe)"``, ..."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((what for test, what in _KINDS if test(mode)), "a special file")


def _as_text(path: PathLike) -> str:
    if path is None:
        raise ValueError("path must be a file path, got None")
    try:
        raw = os.fspath(path)
    except TypeError:
        raise ValueError(f"path must be a str or os.PathLike, got {type(path).__name__}") from None
    return os.fsdecode(raw)


def _file_component(shown: str) -> Optional[str]:
    """The first component of ``shown`` that exists and is not a directory, or None."""
    parts = Path(shown).parts
    for i in range(1, len(parts)):
        head = os.path.join(*parts[:i])
        if os.path.lexists(head) and not os.path.isdir(head):
            return head
    return None


class ReferencedFileNotFoundError(FileNotFoundError, ValueError):
    """A file that the file being read refers to (a ``.gltf``'s buffer file) does not exist.

    Both a :class:`FileNotFoundError` (a file is missing) and a :class:`ValueError` (the file
    being read is unusable as it stands), as :class:`io.UnsupportedOperation` is both an
    ``OSError`` and a ``ValueError``: ``except ValueError`` around ``read_points`` catches every
    problem with the input, ``except FileNotFoundError`` every missing file.
    """


def _missing(shown: str) -> FileNotFoundError:
    if os.path.islink(shown):
        try:
            target = os.readlink(shown)
        except OSError:  # pragma: no cover - the link vanished meanwhile
            target = "?"
        return FileNotFoundError(f"{shown}: broken symbolic link (its target {target!r} does not exist)")
    parent = os.path.dirname(shown.rstrip("/" + (os.altsep or ""))) or "."
    if not os.path.isdir(parent) and not os.path.lexists(parent):
        return FileNotFoundError(f"{shown}: no such file (its folder {parent} does not exist)")
    return FileNotFoundError(f"{shown}: no such file")


def access_error(shown: str, exc: OSError) -> Exception:
    """The error read_points raises for ``exc``, an OSError from ``stat`` / ``open`` of ``shown``."""
    if isinstance(exc, FileNotFoundError):
        return _missing(shown)
    if isinstance(exc, NotADirectoryError) or exc.errno == errno.ENOTDIR:
        if shown.endswith(("/", os.sep)) and os.path.isfile(shown.rstrip("/" + os.sep)):
            return ValueError(f"{shown}: the path ends with '/' (a folder) but names a file; remove the trailing '/'")
        where = _file_component(shown)
        return ValueError(
            f"{shown}: a component of the path is not a folder" + (f" ({where} is a file)" if where else "")
        )
    if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM):
        return ValueError(f"{shown}: permission denied (this user may not read the file or search its folders)")
    if exc.errno == errno.ELOOP:
        return ValueError(f"{shown}: too many levels of symbolic links (a symbolic link loop)")
    if exc.errno == errno.ENAMETOOLONG:
        return ValueError(f"{shown}: file name too long")
    return ValueError(f"{shown}: cannot access the file ({exc.strerror or exc})")


def check_file(path: PathLike) -> Path:
    """``path`` as a :class:`~pathlib.Path` to an existing, non-empty regular file (see the module docstring).

    Raises:
        FileNotFoundError: nothing at ``path``, or a symbolic link whose target is missing.
        ValueError: anything else that makes ``path`` unreadable, naming the path and the cause.
    """
    shown = _as_text(path)
    try:
        st = os.stat(shown)  # follows links; never opens (a FIFO would block open())
    except OSError as exc:
        raise access_error(shown, exc) from None
    except ValueError:  # an embedded NUL byte
        raise ValueError(f"{shown!r}: the path contains a NUL byte") from None
    p = Path(shown)
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{p}: is a directory, expected a point-cloud or mesh file")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(
            f"{p}: not a regular file (it is {describe_mode(st.st_mode)}); read_points reads regular files only"
        )
    if st.st_size == 0:
        raise ValueError(f"{p}: file is empty (0 bytes)")
    if not os.access(shown, os.R_OK):
        raise access_error(shown, PermissionError(errno.EACCES, "Permission denied"))
    return p


def read_file_bytes(p: Path, limit: Optional[int] = None) -> bytes:
    """The bytes of the regular file ``p`` (at most ``limit`` of them), never blocking on a FIFO.

    Raises:
        FileNotFoundError: the file disappeared.
        ValueError: it is no longer a regular file, or it cannot be read (naming ``p`` and the cause).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(p, flags)
    except OSError as exc:
        raise access_error(str(p), exc) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # before open(): Python refuses a folder's descriptor with "Is a directory: <fd>"
        os.close(fd)
        raise ValueError(f"{p}: not a regular file (it is {describe_mode(mode)}); read_points reads regular files only")
    with open(fd, "rb", closefd=True) as fh:
        try:
            return fh.read() if limit is None else fh.read(limit)
        except OSError as exc:
            raise ValueError(f"{p}: the file cannot be read ({exc.strerror or exc})") from None


_BOMS = (
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)


def _utf16_without_bom(raw: bytes) -> Optional[str]:
    """``"utf-16-le"`` / ``"utf-16-be"`` when ``raw`` looks like BOM-less UTF-16 text, else None."""
    head = raw[:4096]
    head = head[: len(head) // 2 * 2]
    if len(head) < 2:
        return None
    even, odd = head[0::2], head[1::2]
    for zeros, other, enc in ((odd, even, "utf-16-le"), (even, odd, "utf-16-be")):
        if zeros.count(0) >= 0.9 * len(zeros) and other.count(0) == 0:
            return enc
    return None


def text_encoding(raw: bytes) -> Tuple[str, int]:
    """``(encoding, length of its byte-order mark)`` of the text bytes ``raw`` (see the module docstring)."""
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            return enc, len(bom)
    utf16 = _utf16_without_bom(raw)
    if utf16 is not None:
        return utf16, 0
    try:
        raw.decode("utf-8")
        return "utf-8", 0
    except UnicodeDecodeError:
        return "latin-1", 0


def decode_text(raw: bytes, where: Any) -> str:
    """The text of the bytes ``raw`` of the file ``where`` (see the module docstring for the encodings).

    Raises:
        ValueError: the bytes are not text (a binary file), or not valid in the UTF-16 / UTF-32
            their start announces; the message names ``where`` and the encoding.
    """
    enc, skip = text_encoding(raw)
    try:
        text = raw[skip:].decode(enc)
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{where}: not valid {enc.upper()} text (it starts like {enc.upper()}; byte "
            f"{exc.start + skip} is invalid); save it as UTF-8"
        ) from None
    if "\x00" in text[:4096]:
        raise ValueError(
            f"{where}: looks like a binary file (it holds NUL bytes), expected text"
            + ("" if enc in ("utf-8", "latin-1") else f" (read as {enc.upper()})")
        )
    return text


def read_text_file(p: Path) -> str:
    """The text of the file ``p`` (:func:`read_file_bytes`, then :func:`decode_text`)."""
    return decode_text(read_file_bytes(p), p)
