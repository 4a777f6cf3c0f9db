"""scripts/bench_guard.py: two checkouts timed interleaved (A B, B A, ...), each run a fresh process of its own
checkout, the ratio B/A with a 95 % interval and a verdict; temporary worktrees removed at the end, also when the
run is interrupted. The measuring children are faked here (their own timing is tested in test_timing.py); the
bad-input refusals are in tests/cli/test_scripts.py."""

import importlib.util
import json
import math
import subprocess

import pytest

from gridify.bench import synthetic
from gridify._cliargs import ScriptError
from tests.helpers import ROOT


def _guard():
    spec = importlib.util.spec_from_file_location("bench_guard", ROOT / "scripts" / "bench_guard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_schedule_interleaves_the_sides_abba():
    guard = _guard()
    runs = guard.schedule(["c1", "c2"], rounds=3)
    assert [(r, c, s) for r, c, s in runs] == [
        (0, "c1", "A"), (0, "c1", "B"), (0, "c2", "A"), (0, "c2", "B"),
        (1, "c1", "B"), (1, "c1", "A"), (1, "c2", "B"), (1, "c2", "A"),
        (2, "c1", "A"), (2, "c1", "B"), (2, "c2", "A"), (2, "c2", "B"),
    ]  # fmt: skip
    assert [s for _, _, s in guard.schedule(["c"], rounds=3, order="ab")] == ["A", "B"] * 3


def test_ratio_is_the_geometric_mean_of_the_paired_rounds_with_a_t_interval():
    guard = _guard()
    a = [10.0, 12.0, 11.0, 10.5]
    b = [11.0, 13.0, 12.5, 11.0]
    res = guard.compare(a, b)
    logs = [math.log(y / x) for x, y in zip(a, b)]
    mean = sum(logs) / 4
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / 3)
    h = 3.182 * sd / 2  # t(0.975, 3 degrees of freedom) s / sqrt(4)
    assert res["ratio"] == pytest.approx(math.exp(mean))
    assert (res["ratio_ci_low"], res["ratio_ci_high"]) == pytest.approx((math.exp(mean - h), math.exp(mean + h)))
    assert res["a_ms_per_cloud"] == 10.75 and res["b_ms_per_cloud"] == 11.75  # medians over the rounds
    assert res["verdict"] == "B slower"  # every round slower: the interval lies above 1
    # the rounds pair A and B: a drift of the machine common to both sides cancels
    drift = [1.0, 2.0, 4.0, 8.0]
    assert guard.compare(drift, [1.05 * x for x in drift])["ratio_ci_low"] == pytest.approx(1.05)
    noisy = guard.compare([10.0, 10.0, 10.0, 10.0], [9.0, 11.5, 9.5, 11.0])
    assert noisy["verdict"] == "tie" and noisy["ratio_ci_low"] < 1 < noisy["ratio_ci_high"]
    assert guard.compare([10.0, 10.0], [8.0, 8.0])["verdict"] == "B faster"
    with pytest.raises(ValueError, match="two equally long lists"):
        guard.compare([1.0], [1.0])


def _git(repo, *args):
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        capture_output=True,
        text=True,
        check=True,
    )


@pytest.fixture
def fake_repo(tmp_path):
    """A git repository whose one commit holds a bench worker of the guard's protocol (and nothing else)."""
    repo = tmp_path / "repo"
    (repo / "gridify" / "bench").mkdir(parents=True)
    (repo / "gridify" / "bench" / "synthetic.py").write_text(f"WORKER_PROTOCOL = {synthetic.WORKER_PROTOCOL}\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "worker")
    return repo


def _fake_worker(monkeypatch, calls, ms_of):
    """Replace the measuring child: record ``(root, part)`` and return a row of ``ms_of(root)`` ms per cloud."""

    def run_isolated(spec, timeout, root=None):
        calls.append((root, spec["model_name"], spec["num_points"], spec["part"]))
        ms = ms_of(root, spec["part"], len(calls))
        if ms is None:
            raise KeyboardInterrupt
        key = "train_ms_per_batch" if spec["part"] == "train" else "ms_per_batch"
        b = synthetic.cell_spec  # the guard builds its cells with the benchmark's own function
        assert b and spec["rel_ci"] == 0.05 and spec["count_flops"] is False
        batch = 4
        return {
            "status": "ok",
            "batch": batch,
            "train_batch": batch,
            key: ms * batch,
            f"{key}_rel_ci": 0.01,
            f"{key}_reached": True,
            f"{key}_repeats": 6,
        }

    monkeypatch.setattr(synthetic, "run_isolated", run_isolated)


def test_a_run_alternates_the_checkouts_and_reports_the_ratios(fake_repo, tmp_path, monkeypatch, capsys):
    guard = _guard()
    monkeypatch.setattr(guard, "ROOT", fake_repo)
    calls = []
    worktrees = []

    def ms_of(root, part, i):
        if root != fake_repo:
            worktrees.append(root)
        return (10.0 if root == fake_repo else 12.0) * (3 if part == "train" else 1) * (1 + 0.001 * (i % 3))

    _fake_worker(monkeypatch, calls, ms_of)
    out = tmp_path / "out"
    argv = [str(fake_repo), "HEAD", "--rounds", "2", "--out", str(out), "--"]
    result = guard.main(argv + ["--models", "gridified-fast", "--num-points", "64", "--threads", "1"])
    # round 0: A then B for each cell; round 1: B then A
    sides = ["A" if root == fake_repo else "B" for root, *_ in calls]
    assert sides == ["A", "B", "A", "B", "B", "A", "B", "A"]
    assert [c[3] for c in calls] == ["infer", "infer", "train", "train"] * 2
    assert len(set(worktrees)) == 1 and not worktrees[0].exists()  # B's worktree, removed at the end
    assert "worktree" not in _git(fake_repo, "worktree", "list").stdout.split("\n", 1)[-1]
    rows = result["rows"]
    assert [(r["part"], r["verdict"]) for r in rows] == [("infer", "B slower"), ("train", "B slower")]
    assert rows[0]["ratio"] == pytest.approx(1.2, rel=0.01) and rows[0]["rounds"] == 2
    printed = capsys.readouterr().out
    assert "B/A" in printed and "95 % interval" in printed and "B slower" in printed
    assert "30 ± 0.1 %*" in printed  # 2 rounds: an interval of the median that covers 50 %, marked
    saved = json.loads((out / "bench_guard.json").read_text())
    assert saved["checkouts"]["B"]["given"] == "HEAD" and len(saved["runs"]["A"]) == 4
    assert (out / "bench_guard.csv").read_text().splitlines()[0].startswith("model,num_points,part,batch_a")


def test_an_interrupted_run_removes_its_worktrees(fake_repo, tmp_path, monkeypatch):
    guard = _guard()
    monkeypatch.setattr(guard, "ROOT", fake_repo)
    calls = []
    _fake_worker(monkeypatch, calls, lambda root, part, i: None if i == 2 else 10.0)  # Ctrl-C in the second run
    with pytest.raises(SystemExit) as exc:
        guard.main(["HEAD", "HEAD", "--rounds", "2", "--out", str(tmp_path / "out"), "--", "--num-points", "64"])
    assert exc.value.code == 130 and "interrupted" in str(exc.value)
    assert len(calls) == 2 and all(not root.exists() for root, *_ in calls)
    assert _git(fake_repo, "worktree", "list").stdout.count("\n") == 1  # the repository's own tree only
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "worker, words",
    [
        ("def measure(): pass\n", r"predates the guard \(no WORKER_PROTOCOL\)"),
        ("WORKER_PROTOCOL = 1\n", "takes cells of protocol 1, this guard sends protocol"),
    ],
)
def test_a_checkout_whose_worker_takes_other_cells_is_refused(worker, words, tmp_path):
    guard = _guard()
    (tmp_path / "old" / "gridify" / "bench").mkdir(parents=True)
    (tmp_path / "old" / "gridify" / "bench" / "synthetic.py").write_text(worker)
    with pytest.raises(ScriptError, match=words):
        guard.resolve("A", str(tmp_path / "old"), ROOT)


def test_revisions_need_a_git_repository(tmp_path, monkeypatch):
    guard = _guard()
    with pytest.raises(ScriptError, match=r"no such folder, and .* is not a git repository"):
        guard.resolve("A", "main", tmp_path)
