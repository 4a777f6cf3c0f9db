#!/usr/bin/env python
"""Fuzz every file reader of gridify.io for a bounded time (see tests/fuzz/fuzz_targets.py).

    python scripts/fuzz.py --seconds 120            # all formats, time split evenly
    python scripts/fuzz.py --seconds 30 --format .ply --seed 7

Each format gets its share of the time; inputs are seed files mutated by hypothesis (a fresh
random seed per run unless --seed is given). Every read is also held to the memory bound of
tests/fuzz/fuzz_targets.py (tracemalloc growth <= MEMORY_MULTIPLE x size x expansion +
MEMORY_CONSTANT); the run ends with the worst growth / file-size ratio seen per format.
Exit code 0 when no crash was found, 1 otherwise;
a crash prints a reproducer (the format, the input bytes as base64, and a command that replays
it) and saves the input under --crash-dir, to be turned into a regression test in
tests/fuzz/test_fuzz_readers.py (REGRESSIONS).
"""

from __future__ import annotations

import base64
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
sys.path.insert(0, str(ROOT))

from gridify import _cliargs as types  # noqa: E402 - after the checkout is on the path
from gridify._files import atomic_write_bytes  # noqa: E402

PROG = "fuzz.py"


def replay(ext: str, b64: str) -> int:
    import binascii

    import fuzz_targets as F

    if ext not in F.FORMATS:
        raise types.ScriptError(f"--replay: unknown format {ext!r}; known: {' '.join(F.FORMATS)}")
    try:
        data = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise types.ScriptError(f"--replay: the input is not base64 ({exc})") from None
    try:
        print(F.check_reader(ext, data))
        return 0
    except F.ReaderCrash as exc:
        print(f"CRASH: {exc}")
        return 1


def fuzz_one(ext: str, seconds: float, seed: int, crash_dir: Path) -> tuple:
    """Fuzz one format for about ``seconds``; returns (inputs tried, crash message or None)."""
    from hypothesis import HealthCheck, given, settings

    import fuzz_targets as F

    found = {}
    count = [0]
    deadline = time.monotonic() + seconds
    workdir = tempfile.mkdtemp(prefix="gridify-fuzz-")

    class TimeUp(Exception):
        pass

    @settings(
        max_examples=10_000_000,
        deadline=None,
        database=None,
        derandomize=False,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    @given(F.mutated_files(ext))
    def target(data: bytes) -> None:
        if time.monotonic() > deadline and not found:
            raise TimeUp()
        count[0] += 1
        try:
            F.check_reader(ext, data, workdir)
        except F.ReaderCrash as exc:
            found.setdefault("first", (data, str(exc)))
            found["last"] = (data, str(exc))  # hypothesis shrinks: the last failure is the smallest
            raise

    import random

    random.seed(seed)
    try:
        target._hypothesis_internal_use_seed = seed  # reproducible with --seed
        target()
    except TimeUp:
        return count[0], None
    except F.ReaderCrash:
        pass
    except Exception as exc:  # hypothesis errors, e.g. its Flaky report
        if not found:
            if time.monotonic() > deadline:
                # The time limit stops hypothesis by raising TimeUp from inside the test; when that
                # lands while hypothesis replays an earlier (valid) input it reports the input as
                # flaky. No reader crashed (a crash is recorded in ``found`` before anything else).
                return count[0], None
            return count[0], f"hypothesis error: {exc}"
    finally:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    if not found:
        return count[0], None
    data, msg = found["last"]
    out = atomic_write_bytes(crash_dir / f"crash-{ext[1:]}-{seed}{ext}", data)
    b64 = base64.b64encode(data).decode()
    report = (
        f"CRASH in the {ext} reader: {msg}\n  input ({len(data)} bytes) saved to {out}\n"
        f"  base64: {b64}\n  replay: python scripts/fuzz.py --replay {ext} {b64}"
    )
    return count[0], report


@types.script_errors(PROG)
def main(argv=None) -> int:
    p = types.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--seconds", type=types.positive_float, default=60.0, help="total time budget (split over the formats)"
    )
    p.add_argument("--format", action="append", help="only this extension (repeatable), e.g. .ply")
    p.add_argument("--seed", type=types.nonnegative_int, default=None, help="random seed (default: from the clock)")
    p.add_argument("--crash-dir", type=types.output_dir, default=str(ROOT / "outputs" / "fuzz-crashes"))
    p.add_argument("--replay", nargs=2, metavar=("EXT", "BASE64"), help="re-run one input and exit")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import logging

    logging.getLogger("trimesh").setLevel(logging.CRITICAL)  # it logs tracebacks of files it rejects
    if args.replay:
        return replay(*args.replay)
    import fuzz_targets as F

    formats = args.format or list(F.FORMATS)
    unknown = [f for f in formats if f not in F.FORMATS]
    if unknown:
        p.error(f"unknown format(s) {unknown}; known: {' '.join(F.FORMATS)}")
    seed = args.seed if args.seed is not None else int(time.time()) % 100_000
    share = max(1.0, args.seconds / len(formats))
    crashes = []
    t0 = time.monotonic()
    for ext in formats:
        n, crash = fuzz_one(ext, share, seed, Path(args.crash_dir))
        status = "CRASH" if crash else "ok"
        print(f"[fuzz] {ext:5s} {n:6d} inputs in {share:.0f} s: {status}", flush=True)
        if crash:
            crashes.append(crash)
    print(f"[fuzz] seed {seed}, {len(formats)} formats, {time.monotonic() - t0:.0f} s, {len(crashes)} crash(es)")
    print(memory_report(F))
    for c in crashes:
        print(c)
    return 1 if crashes else 0


def memory_report(F) -> str:
    """Per format: the read closest to the memory bound, and the largest growth / file-size ratio."""
    lines = [
        f"[fuzz] memory (tracemalloc growth of one read; bound = {F.MEMORY_MULTIPLE} x size x expansion "
        f"+ {F.MEMORY_CONSTANT >> 20} MiB):",
        f"[fuzz]   format  expansion  worst share of bound (growth / file bytes)  worst growth/size, files >= "
        f"{F.RATIO_MIN_SIZE} bytes",
    ]
    for ext, worst in sorted(F.MEMORY.items()):
        share, sg, ss = worst["share"]
        ratio, rg, rs = worst["ratio"]
        lines.append(
            f"[fuzz]   {ext:6s}  {F.EXPANSION.get(ext, 1):9d}  {share:20.1%} ({sg:>9d} / {ss:>7d})  "
            f"{ratio:17.1f}x ({rg:>9d} / {rs:>7d})"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(types.run_script(main, PROG))
