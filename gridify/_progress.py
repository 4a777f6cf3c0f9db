"""Progress of long work (a scene's crops): one ``progress=`` argument with one meaning everywhere.

``progress=`` of :meth:`gridify.Predictor.predict` (scene segmenters), :func:`gridify.scene_inference.predict_scene`
and the CLI's ``predict`` takes ``None`` / ``False`` (silent), ``True`` (a bar on stderr, :func:`stderr_bar`) or a
callable ``progress(done, total)`` called after every model call. :func:`resolve_progress` turns any of them into
``None`` or a callable, and refuses anything else naming the argument.

Work that cannot count its units (tracing a model for export) reports through :func:`heartbeat`: a line
``<what>: still running (2 min 30 s)`` every ``every`` seconds from a timer thread while the block runs.

The bar: ``\\r[what] [#####     ] 12/40 crops`` redrawn in place on a terminal; a line per 10 % (``[what] 12/40
crops (30 %)``) when stderr is a file or a pipe, so a redirected log holds a few lines, not thousands.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Any, Callable, Iterator, Optional

from ._checks import fail

__all__ = ["ProgressFn", "elapsed_words", "heartbeat", "resolve_progress", "stderr_bar"]

#: ``progress(done, total)``: called after every unit of work (``done`` of ``total`` units)
ProgressFn = Callable[[int, int], None]


def stderr_bar(what: str, unit: str = "crops") -> ProgressFn:
    """A ``progress(done, total)`` callback drawing a bar on stderr (a line per 10 % when stderr is no terminal)."""
    tty = sys.stderr.isatty()
    state = {"shown": -1}

    def progress(done: int, total: int) -> None:
        frac = done / max(total, 1)
        if tty:
            bar = "#" * int(30 * frac)
            end = "\n" if done >= total else ""
            print(f"\r[{what}] [{bar:<30}] {done}/{total} {unit}", end=end, file=sys.stderr, flush=True)
        elif int(10 * frac) > state["shown"]:
            state["shown"] = int(10 * frac)
            print(f"[{what}] {done}/{total} {unit} ({100 * frac:.0f} %)", file=sys.stderr, flush=True)

    return progress


def resolve_progress(where: str, progress: Any, what: str = "predict") -> Optional[ProgressFn]:
    """``None`` / ``False`` -> None, ``True`` -> :func:`stderr_bar` (``what`` labels it), a callable -> itself;
    anything else is refused with a ``ValueError`` naming ``progress``."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return stderr_bar(what)
    if not callable(progress):
        fail(
            where,
            f"progress must be None, True / False or callable as progress(done, total), got {type(progress).__name__}",
        )
    return progress


def elapsed_words(seconds: float) -> str:
    """``"45 s"``, ``"2 min 30 s"``, ``"1 h 05 min"``: a duration as a person reads it."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


@contextlib.contextmanager
def heartbeat(say: Callable[[str], None], what: str, every: float = 30.0) -> Iterator[None]:
    """Call ``say(f"{what}: still running ({elapsed})")`` every ``every`` seconds while the block runs.

    For long work that cannot report units of its own (a trace inside a library call). The calls come from
    a daemon timer thread; the block's own exceptions pass through unchanged, and the thread stops when
    the block ends (no line after it).
    """
    if not (isinstance(every, (int, float)) and every > 0):
        fail("heartbeat", f"every must be a positive number of seconds, got {every!r}")
    done = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not done.wait(every):
            say(f"{what}: still running ({elapsed_words(time.monotonic() - start)})")

    thread = threading.Thread(target=beat, name=f"gridify-heartbeat-{what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
