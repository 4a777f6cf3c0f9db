"""Reader of text point clouds: ``.xyz .txt .pts .csv .xyzn .xyzrgb``.

Layout: one point per line, whitespace- or comma-separated numeric columns (``;`` also
separates when the file uses commas); ``#`` starts a comment; blank lines are skipped; a first
line holding only an integer (the ``.pts`` point count) is skipped. The columns are interpreted
by :func:`~gridify.io.columns.table_to_cloud`; ``.xyzn`` defaults to ``x y z nx ny nz`` and
``.xyzrgb`` to ``x y z r g b``.

Shapes:
    a file of ``N`` lines of ``C`` columns -> points ``[N, 3]`` (normals/colors ``[N, 3]``,
    labels ``[N]`` as the columns say).
"""
from __future__ import annotations

import io
import re
import warnings
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .cloud import PointCloud
from .columns import table_to_cloud

__all__ = ["read_text"]


def read_text(p: Path, columns: Optional[Sequence[str]] = None) -> PointCloud:
    """Read the text file ``p`` (see the module docstring); ``columns`` names its columns."""
    ext = p.suffix.lower()
    if columns is None and ext == ".xyzn":
        columns = ("x", "y", "z", "nx", "ny", "nz")
    elif columns is None and ext == ".xyzrgb":
        columns = ("x", "y", "z", "r", "g", "b")
    raw = p.read_bytes()
    if b"\x00" in raw[:4096]:
        raise ValueError(f"{p}: looks like a binary file, expected text with one point per line")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")

    # look at the first two data lines only: separator and an optional point-count header
    head: List[Tuple[int, str]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        s = line.split("#", 1)[0].strip()
        if s:
            head.append((lineno, s))
            if len(head) == 2:
                break
    if not head:
        raise ValueError(f"{p}: file contains no points (only blank or comment lines)")
    comma = any("," in s for _, s in head)

    def split(s: str) -> List[str]:
        return [t for t in re.split(r"[,\s;]+", s) if t] if comma else s.split()

    skip = head[0][0] - 1  # physical lines before the first data line
    first = split(head[0][1])
    if len(first) == 1 and len(head) == 2 and re.fullmatch(r"\d+", first[0]):
        skip = head[1][0] - 1  # a .pts-style header holding only the point count
        first = split(head[1][1])
    ncol = len(first)
    # fast path: numpy's C parser; on any failure the careful path below names the bad line
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. "input contained no data"
            table = np.loadtxt(io.StringIO(text), delimiter="," if comma else None, comments="#",
                               skiprows=skip, ndmin=2, dtype=np.float64)
        if table.shape[1] == ncol:
            return table_to_cloud(table, p, columns)
    except (ValueError, UserWarning):
        pass
    lines: List[Tuple[int, str]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        s = line.split("#", 1)[0].strip()
        if s and lineno > skip:
            lines.append((lineno, s))
    tokens: List[str] = []
    for lineno, s in lines:
        toks = split(s)
        if len(toks) != ncol:
            raise ValueError(f"{p}: line {lineno} has {len(toks)} columns but the first data line "
                             f"has {ncol} (truncated or corrupt file?)")
        tokens.extend(toks)
    try:
        table = np.array(tokens, dtype=np.float64).reshape(len(lines), ncol)
    except ValueError:
        for lineno, s in lines:  # find the offending line for the message
            try:
                np.array(split(s), dtype=np.float64)
            except ValueError:
                raise ValueError(f"{p}: line {lineno} is not numeric: {s[:80]!r}") from None
        raise
    return table_to_cloud(table, p, columns)
