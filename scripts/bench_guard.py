#!/usr/bin/env python
"""Time two checkouts of gridify against each other, interleaved in one run on one machine.

    python scripts/bench_guard.py main HEAD -- --models gridified-fast --num-points 1024 16384 --threads 2

``A`` and ``B`` (the first two arguments) are git revisions of this repository (a branch, a tag, a commit,
``HEAD~3``: each checked out into a temporary ``git worktree``, removed at the end, also after Ctrl-C) or paths of
checkouts (``.``: this working tree with its uncommitted changes). Everything after ``--`` is ``gridify bench``
arguments (default ``--models gridified-fast --num-points 1024 16384``): the cells are its N sweep, each
model's inference and (unless ``--no-train-step``) its training step at each N.

Every cell is measured ``--rounds`` times on each side, each time in a fresh process that imports that side's
gridify (``PYTHONPATH=<checkout>``) and runs that side's bench worker (``python -m gridify.bench.synthetic
--_worker``), which times it by :class:`gridify.bench.harness.MedianTimer` (warm-up, then repeats until its
median is known to ``--rel-ci``). The two sides alternate: in round ``r`` every cell runs A then B (``r``
even) or B then A (``r`` odd; ``--order abba``, the default), or always A then B (``--order ab``), so a drift
of the machine (another process, the clock) falls on both.

Per cell it prints A's and B's time per cloud (the median over the rounds, ± its 95 % interval), the ratio B/A
with its 95 % interval (the rounds' paired ratios ``b_r / a_r``: the exponential of the mean of their logarithms,
and of its Student's t interval) and a verdict: ``B faster`` (the whole interval below 1), ``B slower`` (above
1) or ``tie`` (it holds 1). Writes ``bench_guard.json`` (checkouts, settings, every run) and ``bench_guard.csv``
under ``--out``. Use it in the review of any change to ``gridify/ops``, ``gridify/nn`` or ``gridify/models``
(docs/contributing.md, "Timing a change"); an A/A run (the same checkout twice) shows the noise floor.

Both sides must have the bench worker of the commit that added this script (it takes the cells' ``rel_ci`` and
``part``); an older checkout is refused with one line.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gridify import _cliargs as types  # noqa: E402 - after the checkout is on the path

PROG = "bench_guard.py"
OUT_FILES = ("bench_guard.json", "bench_guard.csv")
#: the cells timed when no ``--models`` / ``--num-points`` follow ``--``
DEFAULT_MODELS = ("gridified-fast",)
DEFAULT_NUM_POINTS = (1024, 16384)
#: the ``gridify bench`` arguments the guard reads (every other one is refused by name)
BENCH_READ = (
    "models",
    "num_points",
    "batch_size",
    "max_points_per_batch",
    "repeats",
    "rel_ci",
    "warmup",
    "time_budget",
    "threads",
    "device",
    "train_step",
    "precision",
    "malloc",
    "seed",
)
#: the file a checkout must hold: the bench worker each side runs
WORKER = Path("gridify") / "bench" / "synthetic.py"
#: how the worker names the protocol of its cells (``WORKER_PROTOCOL = 2``)
PROTOCOL_LINE = re.compile(r"^WORKER_PROTOCOL = (\d+)", re.MULTILINE)
CSV_COLUMNS = [
    "model",
    "num_points",
    "part",
    "batch_a",
    "batch_b",
    "rounds",
    "a_ms_per_cloud",
    "a_rel_ci",
    "b_ms_per_cloud",
    "b_rel_ci",
    "ratio",
    "ratio_ci_low",
    "ratio_ci_high",
    "verdict",
]

__all__ = ["build_parser", "main", "schedule", "compare", "verdict", "Checkout"]


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python scripts/bench_guard.py`` (the ``gridify bench`` arguments after ``--`` are
    parsed by ``gridify bench``'s own parser)."""
    p = types.Parser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        usage=f"{PROG} [-h] [--rounds N] [--order {{abba,ab}}] [--out DIR] A B [-- GRIDIFY_BENCH_ARGS ...]",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("a", metavar="A", help="the base: a git revision of this repository, or a checkout's folder")
    p.add_argument("b", metavar="B", help="the change: a git revision, or a checkout's folder ('.': this tree)")
    p.add_argument(
        "--rounds", type=types.int_range(2), default=6, help="fresh-process measurements of every cell per side"
    )
    p.add_argument(
        "--order",
        choices=("abba", "ab"),
        default="abba",
        help="abba: A first in even rounds, B first in odd ones; ab: always A first",
    )
    p.add_argument(
        "--out",
        type=types.output_dir_of(files=OUT_FILES),
        default=str(ROOT / "outputs" / "bench_guard"),
        help="folder for bench_guard.json and bench_guard.csv",
    )
    return p


# ---------------------------------------------------------------------------- the statistics
def schedule(cells: Sequence[Any], rounds: int, order: str = "abba") -> List[Tuple[int, Any, str]]:
    """``(round, cell, side)`` of every run, in the order they run: round by round, every cell A then B, or
    (``order="abba"``) B then A in the odd rounds."""
    runs = []
    for r in range(rounds):
        sides = ("B", "A") if order == "abba" and r % 2 else ("A", "B")
        runs += [(r, cell, side) for cell in cells for side in sides]
    return runs


def verdict(low: float, high: float) -> str:
    """``B faster`` (the interval of B/A below 1), ``B slower`` (above 1) or ``tie`` (it holds 1)."""
    return "B faster" if high < 1 else "B slower" if low > 1 else "tie"


def compare(a: Sequence[float], b: Sequence[float]) -> Dict[str, Any]:
    """A's and B's times of one cell (one per round, paired by round) compared: each side's median over the
    rounds with the half-width of its 95 % interval over it (``a_rel_ci``, ``b_rel_ci``:
    :func:`gridify.bench.harness.median_ci`; ``a_full_interval``, ``b_full_interval``: whether it covers 95 %, which
    takes 6 rounds), ``ratio`` = ``exp(mean(log(b_r / a_r)))`` with its 95 % interval
    ``ratio_ci_low`` / ``ratio_ci_high`` (the exponential of the Student's t interval of the mean log ratio) and
    the :func:`verdict`."""
    from gridify.bench.harness import CONFIDENCE, mean_ci, summarize

    if len(a) != len(b) or len(a) < 2 or min(*a, *b) <= 0:
        raise ValueError(f"compare: two equally long lists of at least 2 positive times, got {len(a)} and {len(b)}")
    sa, sb = summarize(a), summarize(b)
    mean, lo, hi = mean_ci([math.log(y / x) for x, y in zip(a, b)])
    low, high = math.exp(lo), math.exp(hi)
    return {
        "a_ms_per_cloud": sa["seconds"],
        "a_rel_ci": sa["rel_ci"],
        "a_full_interval": sa["ci_coverage"] >= CONFIDENCE,
        "b_ms_per_cloud": sb["seconds"],
        "b_rel_ci": sb["rel_ci"],
        "b_full_interval": sb["ci_coverage"] >= CONFIDENCE,
        "ratio": math.exp(mean),
        "ratio_ci_low": low,
        "ratio_ci_high": high,
        "verdict": verdict(low, high),
    }


# ---------------------------------------------------------------------------- the checkouts
class Checkout:
    """One side: what was given, the folder whose gridify it imports, its commit, whether the guard made the
    folder (a worktree, removed at the end), a note (uncommitted changes) and the rows of its runs."""

    def __init__(
        self, side: str, given: str, path: Path, commit: str = "", worktree: bool = False, note: str = ""
    ) -> None:
        self.side, self.given, self.path, self.commit = side, given, path, commit
        self.worktree, self.note = worktree, note
        self.rows: List[Dict[str, Any]] = []

    def describe(self) -> str:
        where = f"worktree of {self.given}" if self.worktree else str(self.path)
        return f"{self.side} = {self.given} ({self.commit[:10] or 'no git commit'}{self.note}; {where})"


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


def resolve(side: str, given: str, repo: Path) -> Checkout:
    """The checkout ``given`` names: a folder holding gridify's bench worker, else a revision of ``repo`` (checked
    here, checked out later by :func:`add_worktree`); :class:`~gridify._cliargs.ScriptError` naming it otherwise."""
    if not given.strip():
        raise types.ScriptError(f"{side}: empty; give a git revision or a checkout's folder")
    path = Path(given).expanduser()
    if path.is_dir():
        if not (path / WORKER).is_file():
            raise types.ScriptError(f"{side} {given}: not a gridify checkout (no {WORKER.as_posix()} in it)")
        _check_protocol(side, given, (path / WORKER).read_text(encoding="utf-8", errors="replace"))
        head = _git(path, "rev-parse", "HEAD")
        dirty = _git(path, "status", "--porcelain", "--untracked-files=no")
        note = ", with uncommitted changes" if head.returncode == 0 and dirty.stdout.strip() else ""
        return Checkout(side, given, path.resolve(), head.stdout.strip() if head.returncode == 0 else "", note=note)
    if path.exists():
        raise types.ScriptError(f"{side} {given}: a file, not a checkout's folder or a git revision")
    top = _git(repo, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise types.ScriptError(
            f"{side} {given!r}: no such folder, and {repo} is not a git repository to find it in as a revision"
        )
    sha = _git(repo, "rev-parse", "--verify", "--quiet", f"{given}^{{commit}}")
    if sha.returncode != 0 or not sha.stdout.strip():
        raise types.ScriptError(
            f"{side} {given!r}: neither a folder nor a revision of the repository {top.stdout.strip()}"
        )
    commit = sha.stdout.strip()
    worker = _git(repo, "show", f"{commit}:{WORKER.as_posix()}")
    if worker.returncode != 0:
        raise types.ScriptError(f"{side} {given} ({commit[:10]}): no {WORKER.as_posix()} at that revision")
    _check_protocol(side, f"{given} ({commit[:10]})", worker.stdout)
    return Checkout(side, given, Path(), commit, worktree=True)


def _check_protocol(side: str, given: str, worker: str) -> None:
    """The checkout's bench worker (its text ``worker``) takes the cells this guard sends (its
    ``WORKER_PROTOCOL``); :class:`~gridify._cliargs.ScriptError` otherwise."""
    from gridify.bench.synthetic import WORKER_PROTOCOL

    m = PROTOCOL_LINE.search(worker)
    if m is None:
        raise types.ScriptError(
            f"{side} {given}: its bench worker ({WORKER.as_posix()}) predates the guard (no WORKER_PROTOCOL); "
            "compare checkouts from the commit that added scripts/bench_guard.py on"
        )
    if int(m[1]) != WORKER_PROTOCOL:
        raise types.ScriptError(
            f"{side} {given}: its bench worker takes cells of protocol {m[1]}, this guard sends protocol "
            f"{WORKER_PROTOCOL}; run the guard of the newer checkout"
        )


def add_worktree(checkout: Checkout, repo: Path, tmp: Path) -> None:
    """Check the revision out into a detached ``git worktree`` under ``tmp`` (:func:`remove_worktrees` removes it)."""
    path = tmp / checkout.side
    done = _git(repo, "worktree", "add", "--detach", str(path), checkout.commit)
    if done.returncode != 0:
        raise types.ScriptError(f"{checkout.side} {checkout.given}: git worktree add failed: {done.stderr.strip()}", 1)
    checkout.path = path


def remove_worktrees(checkouts: Sequence[Checkout], repo: Path) -> None:
    """Remove the worktrees :func:`add_worktree` made (the repository's other worktrees are left alone)."""
    for c in checkouts:
        if c.worktree and c.path != Path() and c.path.exists():
            _git(repo, "worktree", "remove", "--force", str(c.path))


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the run as Ctrl-C does (the worktrees are removed on the way out)."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


# ---------------------------------------------------------------------------- the bench arguments
def bench_args(argv: Sequence[str]) -> argparse.Namespace:
    """``gridify bench`` arguments (after ``--``), parsed by its own parser; an argument the guard does not read
    (``--out``, ``--k``, ...) or an unknown model is refused by name."""
    from gridify._commands import bench_parser

    parser = bench_parser()
    parser.prog = PROG  # its errors name the flag after --
    args = parser.parse_args(list(argv))
    unread = [label for dest, label in types.given_options(parser, argv).items() if dest not in BENCH_READ]
    if unread:
        raise types.ScriptError(
            f"after --: {', '.join(unread)} {'is' if len(unread) == 1 else 'are'} not read by the guard (it times the N sweep's cells; it reads "
            f"{', '.join('--' + d.replace('_', '-') for d in BENCH_READ)})"
        )
    from gridify.bench import synthetic

    args.models = args.models or list(DEFAULT_MODELS)
    args.num_points = args.num_points or list(DEFAULT_NUM_POINTS)
    for name in args.models:
        try:
            synthetic._model_kind(name)  # noqa: SLF001 - the benchmark's own check of a model name
        except ValueError as exc:
            raise types.ScriptError(f"after --: --models: {str(exc).removeprefix('benchmark: ')}") from None
    args.flops = False  # not compared: no FLOP count in the measuring children
    return args


def _cells(args: argparse.Namespace) -> List[Tuple[str, int, str]]:
    from gridify.bench.synthetic import cell_parts

    return [(m, n, part) for m in args.models for n in args.num_points for part in cell_parts(m, args.train_step)]


# ---------------------------------------------------------------------------- the runs
def per_cloud(row: Dict[str, Any], part: str) -> Tuple[float, int]:
    """``(ms per cloud, batch)`` of a worker's row for ``part``."""
    prefix = "train_" if part == "train" else ""
    batch = row[f"{prefix}batch" if prefix else "batch"]
    return row[f"{prefix}ms_per_batch"] / batch, batch


def run_schedule(
    args: argparse.Namespace, sides: Dict[str, Checkout], runs: List[Tuple[int, Tuple[str, int, str], str]]
) -> None:
    """Every run of the schedule, each in a fresh process of its side's checkout; rows kept on the checkouts."""
    import torch

    from gridify.bench.synthetic import cell_spec, child_timeout, run_isolated

    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else ("cpu" if args.device == "auto" else args.device)
    )
    child = {"threads": args.threads or torch.get_num_threads(), "malloc": args.malloc}
    started = time.monotonic()  # the progress lines' seconds: no figure
    for i, (r, (model, n, part), side) in enumerate(runs):
        c = sides[side]
        spec = {**cell_spec(args, model, n, None, device, part), **child}
        row = run_isolated(spec, child_timeout(args.time_budget), root=c.path)
        status = str(row.get("status"))
        if status != "ok":
            why = f"{c.describe()}: {model} N={n} {part}: {status}"
            raise types.ScriptError(why, 1)
        ms, batch = per_cloud(row, part)
        key = "train_ms_per_batch" if part == "train" else "ms_per_batch"
        c.rows.append(
            {
                "round": r,
                "model": model,
                "num_points": n,
                "part": part,
                "ms_per_cloud": ms,
                "batch": batch,
                "rel_ci": row.get(f"{key}_rel_ci"),
                "reached": row.get(f"{key}_reached"),
                "repeats": row.get(f"{key}_repeats"),
                "malloc_applied": row.get("malloc_applied"),
            }
        )
        print(
            f"[{i + 1}/{len(runs)} {time.monotonic() - started:.0f}s] round {r + 1} {side} {model} N={n} {part}: "
            f"{ms:.4g} ms/cloud (batch {batch}){_spread(row.get(f'{key}_rel_ci'), row.get(f'{key}_reached'))}",
            flush=True,
        )


def _spread(rel: Optional[float], reached: Optional[bool] = True) -> str:
    from gridify.bench.harness import fmt_spread

    return fmt_spread(rel, reached)


def results(cells: Sequence[Tuple[str, int, str]], sides: Dict[str, Checkout]) -> List[Dict[str, Any]]:
    """One row per cell: :func:`compare` of the two sides' rounds."""
    rows = []
    for model, n, part in cells:
        got = {
            s: sorted(
                (r for r in c.rows if (r["model"], r["num_points"], r["part"]) == (model, n, part)),
                key=lambda r: r["round"],
            )
            for s, c in sides.items()
        }
        row: Dict[str, Any] = {"model": model, "num_points": n, "part": part, "rounds": len(got["A"])}
        row.update(batch_a=got["A"][0]["batch"], batch_b=got["B"][0]["batch"])
        row.update(compare([r["ms_per_cloud"] for r in got["A"]], [r["ms_per_cloud"] for r in got["B"]]))
        rows.append(row)
    return rows


def report(rows: List[Dict[str, Any]], sides: Dict[str, Checkout]) -> str:
    """The printed table: per cell A's and B's ms per cloud ± their spread, B/A and its 95 % interval, the verdict."""
    from gridify.bench.harness import format_table

    shown = [
        {
            "cell": f"{r['model']} N={r['num_points']} {r['part']}",
            "batch": str(r["batch_a"]) if r["batch_a"] == r["batch_b"] else f"{r['batch_a']} / {r['batch_b']}",
            "a": r["a_ms_per_cloud"],
            "a_rel_ci": r["a_rel_ci"],
            "a_reached": r["a_full_interval"],
            "b": r["b_ms_per_cloud"],
            "b_rel_ci": r["b_rel_ci"],
            "b_reached": r["b_full_interval"],
            "ratio": f"{r['ratio']:.3f}",
            "interval": f"[{r['ratio_ci_low']:.3f}, {r['ratio_ci_high']:.3f}]",
            "verdict": r["verdict"],
        }
        for r in rows
    ]
    columns = [
        ("cell", "cell"),
        ("batch", "batch"),
        ("a", "A ms/cloud"),
        ("b", "B ms/cloud"),
        ("ratio", "B/A"),
        ("interval", "95 % interval"),
        ("verdict", "verdict"),
    ]
    lines = [sides["A"].describe(), sides["B"].describe(), "", format_table(shown, columns, fixed_from=1e3)]
    lines.append(
        "A, B: the median over the rounds ± the half-width of its 95 % interval (*: fewer than the 6 rounds such an "
        "interval needs; it covers less); B/A: the geometric mean of the rounds' paired ratios and its 95 % t "
        "interval; B faster / slower: the interval excludes 1"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main
def split_argv(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """The guard's arguments and the ``gridify bench`` arguments after the first ``--``."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


@types.script_errors(PROG)
def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Check everything, then time the two checkouts interleaved; print the table, write the files; the result."""
    own, bench = split_argv(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
    settings = bench_args(bench)
    sides = {"A": resolve("A", args.a, ROOT), "B": resolve("B", args.b, ROOT)}
    cells = _cells(settings)
    runs = schedule(cells, args.rounds, args.order)
    out = Path(args.out)
    tmp = Path(tempfile.mkdtemp(prefix="bench_guard_"))
    try:
        with _terminate_as_interrupt():
            for c in sides.values():
                if c.worktree:
                    add_worktree(c, ROOT, tmp)
            print(f"{sides['A'].describe()}\n{sides['B'].describe()}", flush=True)
            print(f"{len(cells)} cells x {args.rounds} rounds x 2 sides = {len(runs)} runs, order {args.order}")
            run_schedule(settings, sides, runs)
    except KeyboardInterrupt:
        raise types.ScriptError("interrupted; the temporary worktrees were removed", 130) from None
    finally:
        remove_worktrees(list(sides.values()), ROOT)
        shutil.rmtree(tmp, ignore_errors=True)
    rows = results(cells, sides)
    print("\n" + report(rows, sides), flush=True)
    result = {
        "checkouts": {
            s: {
                "given": c.given,
                "commit": c.commit,
                "path": None if c.worktree else str(c.path),
                "note": c.note.removeprefix(", "),
            }
            for s, c in sides.items()
        },
        "rounds": args.rounds,
        "order": args.order,
        "bench": {k: v for k, v in vars(settings).items() if k in BENCH_READ},
        "cpu_count": os.cpu_count(),
        "rows": rows,
        "runs": {s: c.rows for s, c in sides.items()},
    }
    from gridify.bench import harness

    out.mkdir(parents=True, exist_ok=True)
    harness.write_json(out / "bench_guard.json", result)
    harness.write_csv(out / "bench_guard.csv", rows, CSV_COLUMNS)
    print(f"wrote {out / 'bench_guard.json'} and {out / 'bench_guard.csv'}", flush=True)
    return result


if __name__ == "__main__":
    sys.exit(types.run_script(main, PROG))
