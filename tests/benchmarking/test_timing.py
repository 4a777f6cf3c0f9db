"""The one stopping rule of the benchmarks (:class:`gridify.bench.harness.MedianTimer`) on a fake clock, the
intervals it reports, the batch of a cell, and the spreads in the printed tables.

Issue: figures of ``gridify bench`` moved by 2.5x between a sweep and a cell run alone (a batch picked by a
noisy timing probe, a cold first call reported as the measurement, a fixed number of repeats whatever the
noise), and nothing said how far a figure could be trusted."""

import math
from pathlib import Path

import pytest
import torch

from gridify.bench import harness, synthetic
from gridify.bench.harness import MedianTimer, median_ci


class FakeClock:
    """A clock that the fake call advances by the next of the given durations (the warm-up's first)."""

    def __init__(self, durations):
        self.now, self.durations, self.calls = 0.0, list(durations), 0

    def __call__(self):
        return self.now

    def step(self):
        self.now += self.durations[min(self.calls, len(self.durations) - 1)]
        self.calls += 1


def _timer(durations, **kw):
    clock = FakeClock(durations)
    return MedianTimer(clock=clock, **kw), clock


def test_stops_at_the_target_once_the_minimum_is_done():
    # one warm-up of 9 s, then 1.00, 1.01, 1.02, 1.00 ... s: the median's 95 % interval is narrow at 6 times
    timer, clock = _timer([9.0] + [1.0 + 0.01 * (i % 3) for i in range(100)], rel_ci=0.05, min_repeats=6)
    res = timer.run(clock.step)
    assert res["stopped"] == "target" and res["reached"] is True
    assert res["repeats"] == 6 and clock.calls == 7  # 1 warm-up + 6 timed
    assert res["ci_coverage"] >= 0.95 and res["rel_ci"] <= 0.05
    assert res["ci_low_s"] <= res["seconds"] <= res["ci_high_s"]


def test_min_repeats_are_made_whatever_the_budget():
    timer, clock = _timer([1.0], rel_ci=0.05, min_repeats=9, max_seconds=0.5)  # each call alone passes the budget
    res = timer.run(clock.step)
    assert res["repeats"] == 9 and res["stopped"] == "target"


def test_too_few_repeats_for_a_95_percent_interval_never_reach_the_target():
    """With 5 times the order-statistic interval [min, max] covers 93.75 %: not a 95 % interval."""
    timer, clock = _timer([1.0], rel_ci=0.05, min_repeats=5, max_seconds=5.5)
    res = timer.run(clock.step)
    assert res["repeats"] == 5 and res["ci_coverage"] == pytest.approx(0.9375)
    assert res["reached"] is False and res["stopped"] == "budget"


def test_noisy_times_end_at_the_budget_not_reached():
    noisy = [1.0, 3.0, 1.5, 2.5, 1.0, 3.0, 2.0]
    timer, clock = _timer([5.0] + noisy * 20, rel_ci=0.05, min_repeats=6, max_seconds=30.0)
    res = timer.run(clock.step)
    assert res["stopped"] == "budget" and res["reached"] is False
    assert res["rel_ci"] > 0.05
    # no repeat started that would end past the budget: spent + median > 30 stopped it
    assert sum(res["times"]) <= 30.0 + max(noisy)
    assert sum(res["times"]) + res["seconds"] > 30.0


def test_max_repeats_end_a_noisy_measurement():
    timer, clock = _timer([1.0] + [1.0, 4.0] * 10, rel_ci=0.01, min_repeats=6, max_repeats=8, max_seconds=math.inf)
    res = timer.run(clock.step)
    assert res["stopped"] == "max repeats" and res["repeats"] == 8 and res["reached"] is False


def test_the_warm_up_is_never_timed():
    """A cold first call of 100 s (page faults, lazy imports) is not the measurement, nor part of it."""
    timer, clock = _timer([100.0, 1.0], rel_ci=0.05, min_repeats=6, warmup=1)
    res = timer.run(clock.step)
    assert res["warmup_s"] == [100.0]
    assert res["times"] == [1.0] * 6 and res["max_s"] == 1.0 and res["seconds"] == 1.0
    timer, clock = _timer([100.0, 50.0, 1.0], rel_ci=0.05, min_repeats=6, warmup=2)
    assert timer.run(clock.step)["warmup_s"] == [100.0, 50.0]


def test_before_timing_runs_between_the_warm_up_and_the_timed_calls():
    timer, clock = _timer([2.0, 1.0], min_repeats=6)
    seen = []
    timer.run(clock.step, before_timing=lambda: seen.append(clock.calls))
    assert seen == [1]


@pytest.mark.parametrize(
    "kw, word",
    [
        ({"warmup": 0}, "warmup must be an integer >= 1"),
        ({"min_repeats": 0}, "min_repeats must be an integer >= 1"),
        ({"min_repeats": 6, "max_repeats": 5}, "max_repeats must be an integer >= min_repeats 6"),
        ({"rel_ci": 0.0}, "rel_ci must be a finite fraction > 0"),
        ({"max_seconds": 0}, "max_seconds must be > 0"),
    ],
)
def test_bad_settings_are_refused_by_name(kw, word):
    with pytest.raises(ValueError, match=word):
        MedianTimer(**kw)


def test_time_repeats_makes_exactly_the_repeats_after_a_warm_up():
    clock = FakeClock([7.0, 1.0, 2.0, 3.0])
    res = harness.time_repeats(clock.step, 3, clock=clock)
    assert res["repeats"] == 3 and res["warmup_s"] == [7.0] and res["reached"] is False


def test_time_once_gives_the_value_and_the_seconds_of_one_call():
    clock = FakeClock([2.5, 9.0])
    value, seconds = harness.time_once(lambda: (clock.step(), "labels")[1], clock)
    assert (value, seconds, clock.calls) == ("labels", 2.5, 1)


#: the files that read the measuring clock, and why: a timed call of a benchmark goes through the harness
CLOCK_READERS = {
    "gridify/bench/harness.py": "the harness: MedianTimer, time_repeats, time_once, timed_first, run_child",
    "gridify/training/callbacks.py": "a training run's own step timer (the run's record, not a benchmark)",
}


def test_no_benchmark_times_a_call_with_a_clock_of_its_own():
    """Seven timing loops lived beside the harness (the matmul peak, the scans and end-to-end parts of the scene
    benchmark, three scripts' median loops and a stopwatch), each with its own warm-up rule and statistic. The
    measuring clock (``time.perf_counter``) is read in the harness alone; a run's wall time (progress lines, a
    total) reads ``time.monotonic``."""
    root = Path(__file__).resolve().parents[2]
    files = [*sorted((root / "gridify").rglob("*.py")), *sorted((root / "scripts").glob("*.py"))]
    readers = {str(f.relative_to(root)) for f in files if "perf_counter" in f.read_text(encoding="utf-8")}
    assert readers == set(CLOCK_READERS), readers ^ set(CLOCK_READERS)


def test_median_interval_is_the_order_statistic_one():
    xs = list(range(100))  # the textbook ranks for n = 100 at 95 %: the 40th and the 61st
    lo, hi, cov = median_ci(xs)
    assert (lo, hi) == (39, 60) and 0.95 <= cov < 0.97
    assert median_ci([3, 1, 2, 5, 4, 6]) == (1, 6, pytest.approx(1 - 2 / 64))
    assert median_ci([5.0]) == (5.0, 5.0, 0.0)


def test_summary_keeps_every_statistic():
    s = harness.summarize([4.0, 1.0, 3.0, 2.0, 5.0, 6.0])
    assert s["seconds"] == 3.5 and (s["min_s"], s["max_s"]) == (1.0, 6.0) and s["repeats"] == 6
    assert s["q1_s"] == 2.25 and s["q3_s"] == 4.75 and s["mean_s"] == 3.5
    assert s["rel_ci"] == pytest.approx((6 - 1) / 2 / 3.5)
    assert harness.summarize([2.0])["rel_ci"] is None  # one time: no interval


def test_ratio_interval_adds_log_half_widths_in_quadrature():
    r, lo, hi = harness.ratio_interval((20.0, 18.0, 22.0), (10.0, 9.0, 11.0))
    h = math.hypot(math.log(22 / 18) / 2, math.log(11 / 9) / 2)
    assert (r, lo, hi) == pytest.approx((2.0, 2.0 * math.exp(-h), 2.0 * math.exp(h)))
    assert harness.ratio_interval((1.0, 0.0, 2.0), (1.0, 1.0, 1.0)) is None


def test_mean_interval_is_students_t():
    mean, lo, hi = harness.mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and hi - mean == pytest.approx(4.303 * 1.0 / math.sqrt(3))


def test_batch_of_a_cell_comes_from_the_flags_alone():
    assert harness.batch_for(1024, 32, 1 << 16) == 32
    assert harness.batch_for(16384, 32, 1 << 16) == 4
    assert harness.batch_for(65536, 32, 1 << 16) == 1
    assert harness.batch_for(200_000, 32, 1 << 16) == 1  # one cloud at least


def test_a_cell_measures_the_same_batch_whatever_its_time_budget():
    """The batch used to come from a timing probe under the budget: a short budget measured smaller batches."""
    spec = dict(model_name="gridified-fast", num_points=64, batch_size=8, repeats=1, device="cpu")
    spec.update(count_flops=False, part="infer", max_points_per_batch=4 * 64)
    rows = [synthetic.measure(**spec, time_budget=budget) for budget in (1e-4, 5.0)]
    assert [r["batch"] for r in rows] == [4, 4] and all(r["status"] == "ok" for r in rows)
    assert all(r["ms_per_batch_repeats"] >= 1 for r in rows)


def test_a_cloud_is_the_same_at_every_batch_size():
    """The ellipsoids' axes used to be drawn after all the points of a batch: cloud 0 changed with the batch."""
    small, _ = harness.ellipsoid_clouds(1, 50, seed=3)
    large, _ = harness.ellipsoid_clouds(4, 50, seed=3)
    assert torch.equal(small[0], large[0])
    pos1, _, y1 = synthetic.make_batch(2, 50, torch.device("cpu"), seed=3)
    pos4, _, y4 = synthetic.make_batch(4, 50, torch.device("cpu"), seed=3)
    assert torch.equal(pos1, pos4[:100]) and torch.equal(y1, y4[:2])
    other, _ = harness.ellipsoid_clouds(1, 50, seed=4)
    assert not torch.equal(small[0], other[0])


def test_tables_carry_the_spread_beside_every_figure():
    row = dict(sweep="n", model="gridified-fast", num_points=65536, status="ok")
    stats = harness.summarize([2.812, 2.70, 2.90, 2.75, 2.85, 2.80])
    row.update(harness.figure_fields("ms_per_batch", {**stats, "reached": True}, 1e3), batch=1)
    slow = harness.summarize([7.18, 2.81, 2.70])
    row.update(harness.figure_fields("train_ms_per_batch", {**slow, "reached": False}, 1e3), train_batch=1)
    text = synthetic.format_table([row])
    rel = 100 * (2.90 - 2.70) / 2 / stats["seconds"]
    assert f"2,806 ± {rel:.1f} %" in text  # median of the six, with its interval's half-width
    assert "2,810 ± 80 %*" in text  # a target not reached is marked
    assert harness.fmt_spread(0.031) == " ± 3.1 %" and harness.fmt_spread(0.25, False) == " ± 25 %*"
    assert harness.fmt_spread(None) == ""


def test_ratio_of_two_cells_and_training_over_inference_get_intervals():
    infer = harness.figure_fields("ms_per_batch", {**harness.summarize([10.0] * 3 + [11.0] * 3), "reached": True})
    train = harness.figure_fields("train_ms_per_batch", {**harness.summarize([30.0, 33.0] * 3), "reached": True})
    row = {"batch": 4, "train_batch": 2, **infer, **train}
    synthetic.derive(row)
    # training per cloud over inference per cloud: (31.5 / 2) / (10.5 / 4) = 6
    assert row["train_over_inference"] == pytest.approx(6.0)
    assert row["train_over_inference_ci_low"] < 6.0 < row["train_over_inference_ci_high"]
    assert row["train_over_inference_reached"] is True
