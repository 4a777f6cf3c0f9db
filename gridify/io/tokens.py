"""Numbers in ascii data (PCD, PLY and OFF bodies): whitespace-separated tokens -> float64, and ragged lists.

:func:`ascii_floats` parses every token of a byte string with NumPy's C parser (8 bytes per
token, no Python object per token); when that fails it takes the careful path, Python's
``float()`` per token, which either accepts the tokens (e.g. ``1_000``) or names the first one
that is not a number. :func:`min_ascii_bytes` is the size check a reader does before parsing: T
tokens need at least ``2 T - 1`` bytes (one character each, one separator between two).

:class:`Ragged` holds ``P`` lists of different lengths (polygons, triangle strips) as one flat
array and the lengths: list ``i`` is ``values[s_i : s_i + lengths[i]]`` with
``s_i = lengths[0] + ... + lengths[i-1]``; :func:`gather_lists` builds one from the positions
of the lists in a flat array (one index per value, no Python object per list).

Shapes:
    body of ``T`` tokens -> ``[T]`` float64; Ragged: values ``[sum(lengths)]``, lengths ``[P]``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import List, NamedTuple

import numpy as np

__all__ = ["ascii_floats", "min_ascii_bytes", "Ragged", "gather_lists"]


class Ragged(NamedTuple):
    """``P`` lists of different lengths, stored flat (see the module docstring)."""

    values: np.ndarray
    lengths: np.ndarray

    def split(self) -> List[np.ndarray]:
        """The lists, as views of ``values``."""
        return np.split(self.values, np.cumsum(self.lengths)[:-1]) if len(self.lengths) else []


def gather_lists(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> Ragged:
    """The lists ``flat[starts[i] : starts[i] + lengths[i]]``, as a :class:`Ragged`."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    index = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()))
    return Ragged(flat[index], lengths)


def min_ascii_bytes(tokens: int) -> int:
    """The fewest bytes that hold ``tokens`` whitespace-separated tokens: ``2 tokens - 1`` (0 for none)."""
    return max(0, 2 * tokens - 1)


def _careful(p: Path, what: str, body: bytes) -> np.ndarray:
    """Python's float() per token; a ValueError names the first token that is not a number."""
    tokens = body.split()
    try:
        return np.array(tokens, dtype=np.float64)
    except (ValueError, OverflowError):
        for i, tok in enumerate(tokens):
            try:
                float(tok)
            except (ValueError, OverflowError):
                raise ValueError(f"{p}: {what}: value {i + 1} is not a number: {tok[:40]!r}") from None
        raise ValueError(f"{p}: {what}: the data is not numeric") from None


def ascii_floats(p: Path, what: str, body: bytes) -> np.ndarray:
    """Every whitespace-separated token of ``body`` as float64 (see the module docstring).

    Raises:
        ValueError: a token is not a number; the message names ``p``, ``what`` and the token.
    """
    if not body.strip():  # numpy parses whitespace alone as [-1.0]
        return np.zeros(0, np.float64)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return np.fromstring(body, dtype=np.float64, sep=" ")
    except (ValueError, DeprecationWarning):
        return _careful(p, what, body)
