"""Reader of text point clouds: ``.xyz .txt .pts .csv .xyzn .xyzrgb``.

Layout (decoded by :func:`~gridify.io.source.decode_text`: UTF-8 or Latin-1, a byte-order mark
skipped, UTF-16 / UTF-32 read): one point per line, whitespace- or comma-separated numeric
columns (``;`` also separates when the file uses commas); ``#`` starts a comment; blank lines are skipped; a first
line holding only an integer (the ``.pts`` point count) is skipped. The columns are interpreted
by :func:`~gridify.io.columns.table_to_cloud`; ``.xyzn`` defaults to ``x y z nx ny nz`` and
``.xyzrgb`` to ``x y z r g b``.

:func:`read_text_rows` reads a strict numeric table of a known width (S3DIS ``Annotations/*.txt``:
``x y z r g b``): whitespace-separated values only, blank lines skipped; a line with another number of values, or
a value that is not a number (e.g. the stray ``\\x10`` of the raw S3DIS release's ``Area_5/hallway_6``), is
refused naming the file and the line (``<file>:<line>: ...``). :func:`read_text_values` reads every number of a
file in order, any number per line (a label file: :func:`gridify.io.read_labels`), with the same errors.

Shapes:
    a file of ``N`` lines of ``C`` columns -> points ``[N, 3]`` (normals/colors ``[N, 3]``,
    labels ``[N]`` as the columns say); :func:`read_text_rows`: ``[N, width]`` float64; :func:`read_text_values`:
    ``[M]`` float64.
"""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .._files import PathLike
from .cloud import PointCloud
from .columns import table_to_cloud
from .source import decode_text, read_file_bytes, text_encoding

__all__ = ["read_text", "read_text_rows", "read_text_values"]


def _split(s: str, comma: bool) -> List[str]:
    return [t for t in re.split(r"[,\s;]+", s) if t] if comma else s.split()


def _decode(p: Path) -> Tuple[bytes, str, str]:
    """``(bytes, encoding, text)`` of the text file ``p`` (decoded by :func:`~gridify.io.source.decode_text`);
    the bytes are in ``encoding``, an ASCII-compatible one, without a byte-order mark."""
    raw = read_file_bytes(p)
    text = decode_text(raw, p)
    enc, skip = text_encoding(raw)
    if enc in ("utf-8", "latin-1"):
        return raw[skip:], enc, text
    return text.encode("utf-8"), "utf-8", text  # UTF-16 / UTF-32: numpy's parser reads the UTF-8 copy


def _first_data_lines(text: str) -> List[Tuple[int, str]]:
    """``(line number, content)`` of the first two lines holding data (not blank, not a comment).

    Looks at the first 64 KiB of whole lines, and at the whole text only when they hold fewer.
    """
    cut = text.rfind("\n", 0, 1 << 16) + 1
    head: List[Tuple[int, str]] = []
    for chunk in ([text[:cut]] if 0 < cut < len(text) else []) + [text]:
        head = []
        for lineno, line in enumerate(chunk.splitlines(), start=1):
            s = line.split("#", 1)[0].strip()
            if s:
                head.append((lineno, s))
                if len(head) == 2:
                    return head
    return head


def _layout(p: Path, text: str) -> Tuple[int, int, bool]:
    """``(lines to skip, column count, comma-separated)`` from the first two data lines."""
    head = _first_data_lines(text)
    if not head:
        raise ValueError(f"{p}: file contains no points (only blank or comment lines)")
    comma = any("," in s for _, s in head)
    skip = head[0][0] - 1  # physical lines before the first data line
    first = _split(head[0][1], comma)
    if len(first) == 1 and len(head) == 2 and re.fullmatch(r"\d+", first[0]):
        skip = head[1][0] - 1  # a .pts-style header holding only the point count
        first = _split(head[1][1], comma)
    return skip, len(first), comma


def _careful_table(p: Path, text: str, skip: int, ncol: int, comma: bool) -> np.ndarray:
    """The ``[N, ncol]`` table, line by line: an error names the first bad line."""
    lines: List[Tuple[int, str]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        s = line.split("#", 1)[0].strip()
        if s and lineno > skip:
            lines.append((lineno, s))
    tokens: List[str] = []
    for lineno, s in lines:
        toks = _split(s, comma)
        if len(toks) != ncol:
            raise ValueError(
                f"{p}: line {lineno} has {len(toks)} columns but the first data line "
                f"has {ncol} (truncated or corrupt file?)"
            )
        tokens.extend(toks)
    try:
        return np.array(tokens, dtype=np.float64).reshape(len(lines), ncol)
    except ValueError:
        for lineno, s in lines:  # find the offending line for the message
            try:
                np.array(_split(s, comma), dtype=np.float64)
            except ValueError:
                raise ValueError(f"{p}: line {lineno} is not numeric: {s[:80]!r}") from None
        raise


def read_text(p: Path, columns: Optional[Sequence[str]] = None) -> PointCloud:
    """Read the text file ``p`` (see the module docstring); ``columns`` names its columns."""
    ext = p.suffix.lower()
    if columns is None and ext == ".xyzn":
        columns = ("x", "y", "z", "nx", "ny", "nz")
    elif columns is None and ext == ".xyzrgb":
        columns = ("x", "y", "z", "r", "g", "b")
    raw, encoding, text = _decode(p)
    skip, ncol, comma = _layout(p, text)
    # fast path: numpy's C parser, streaming the bytes (no second copy of the text); on any
    # failure the careful path names the bad line
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. "input contained no data"
            table = np.loadtxt(
                io.TextIOWrapper(io.BytesIO(raw), encoding=encoding, newline=None),
                delimiter="," if comma else None,
                comments="#",
                skiprows=skip,
                ndmin=2,
                dtype=np.float64,
            )
        if table.shape[1] == ncol:
            return table_to_cloud(table, p, columns)
    except (ValueError, UserWarning):
        pass
    return table_to_cloud(_careful_table(p, text, skip, ncol, comma), p, columns)


def _first_bad_row(p: Path, body: bytes, width: int, what: str) -> ValueError:
    """The error naming the first line of ``body`` that is not ``width`` numbers."""
    for lineno, line in enumerate(body.split(b"\n"), 1):
        tokens = line.split()
        if not tokens:
            continue
        if len(tokens) != width:
            return ValueError(f"{p}:{lineno}: expected {width} numbers{what}, got {len(tokens)}: {line.strip()[:80]!r}")
        for tok in tokens:
            try:
                float(tok)
            except ValueError:
                return ValueError(f"{p}:{lineno}: not a number: {tok[:40]!r} in {line.strip()[:80]!r}")
    return ValueError(f"{p}: unreadable text table{what}")


def read_text_rows(path: PathLike, width: int, names: str = "") -> np.ndarray:
    """The rows of the whitespace-separated numeric table ``path``, each of ``width`` values, as
    ``[N, width]`` float64 (see the module docstring).

    Args:
        path: the text file.
        width: the number of values on every line that is neither blank nor a ``#`` comment.
        names: the columns' names for the messages (``"x y z r g b"``).

    Raises:
        ValueError: an empty file, or a malformed line, naming the file and the line (``<file>:<line>: ...``).
    """
    p = Path(path)
    what = f" ({names})" if names else ""
    body = read_file_bytes(p)
    if b"#" in body:  # comment lines (np.savetxt's header) are blank lines: the line numbers stay the file's
        body = b"\n".join(b"" if line.lstrip().startswith(b"#") else line for line in body.split(b"\n"))
    lines = sum(1 for line in body.split(b"\n") if line.strip())
    if lines == 0:
        raise ValueError(f"{p}: empty file (no rows{f' of {names}' if names else ''})")
    vals = _parse_floats(body)
    if vals is None or vals.size != lines * width:
        raise _first_bad_row(p, body, width, what)
    return vals.reshape(lines, width)


def _parse_floats(body: bytes) -> Optional[np.ndarray]:
    """Every whitespace-separated number of ``body`` as float64, or None when a token is not one (numpy's
    parser warns and stops there: the caller then names the first bad row)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return np.fromstring(body, dtype=np.float64, sep=" ")
    except (ValueError, DeprecationWarning):
        return None


def read_text_values(path: PathLike, names: str = "") -> np.ndarray:
    """Every whitespace-separated number of the text file ``path``, in file order, as ``[M]`` float64 (a label
    file: one label per point, one or several per line); ``#`` starts a comment, blank lines are skipped; decoded
    as every text file of gridify is (:func:`~gridify.io.source.decode_text`: a byte-order mark skipped, UTF-16
    read). ``names``: what the values are, for the messages (``"labels"``).

    Raises:
        ValueError: a file without a number, or a value that is not one, naming the file (and the line:
            ``<file>:<line>: ...``).
    """
    p = Path(path)
    body = _decode(p)[0]
    if b"#" in body:  # comments: the rest of their line (the line numbers stay the file's)
        body = b"\n".join(line.split(b"#", 1)[0] for line in body.split(b"\n"))
    count = len(body.split())
    if count == 0:
        raise ValueError(f"{p}: empty file (no {names or 'values'})")
    vals = _parse_floats(body)
    if vals is None or vals.size != count:
        for lineno, line in enumerate(body.split(b"\n"), 1):
            for tok in line.split():
                try:
                    float(tok)
                except ValueError:
                    raise ValueError(f"{p}:{lineno}: not a number: {tok[:40]!r} in {line.strip()[:80]!r}") from None
        raise ValueError(f"{p}: unreadable text{f' ({names})' if names else ''}")
    return vals
