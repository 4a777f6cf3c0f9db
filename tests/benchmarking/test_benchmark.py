import csv
import json
import math

import pytest

from gridify.bench import main, synthetic
from gridify.bench.harness import SPREAD_NOTE
from gridify.bench.synthetic import CSV_COLUMNS, add_ratios, grid_resolution


def test_resolution_rule():
    assert [grid_resolution(n) for n in (8, 512, 1024, 4096, 65536)] == [2, 8, 10, 16, 40]


def test_tiny_run_writes_json_csv_and_ratios(tmp_path, capsys):
    out = tmp_path / "bench"
    rc = main(
        [
            "--models",
            "gridified",
            "pointnet2",
            "point_ckconv",
            "gridified-nosuch",
            "--num-points",
            "64",
            "--k",
            "4",
            "--k-num-points",
            "64",
            "--batch-size",
            "2",
            "--repeats",
            "1",
            "--warmup",
            "1",
            "--time-budget",
            "0.3",
            "--threads",
            "1",
            "--isolation",
            "inprocess",
            "--no-plots",
            "--matmul-size",
            "512",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    result = json.loads((out / "benchmark.json").read_text())
    assert result["machine"]["threads"] == 1 and result["machine"]["torch"]
    assert result["matmul_gflops"] > 0
    rows = result["rows"]
    # N sweep: 4 models; k sweep: gridified, point_ckconv (and the skipped variant)
    assert len(rows) == 4 + 3
    ok = {(r["sweep"], r["model"]): r for r in rows if r["status"] == "ok"}
    assert set(ok) == {
        ("n", "gridified"),
        ("n", "pointnet2"),
        ("n", "point_ckconv"),
        ("k", "gridified"),
        ("k", "point_ckconv"),
    }
    skipped = [r for r in rows if r["model"] == "gridified-nosuch"]
    assert all(r["status"].startswith("skipped: backbone 'nosuch'") for r in skipped)
    grid = ok[("n", "gridified")]
    assert grid["resolution"] == 4 and grid["k"] == 9 and grid["ratio"] == pytest.approx(1.0)
    assert grid["gflop_per_cloud"] > 0 and grid["gflops_achieved"] > 0
    for r in ok.values():
        assert r["batch"] >= 1 and r["ms_per_batch"] > 0 and r["train_ms_per_batch"] > 0
        assert r["clouds_per_s"] == pytest.approx(1e3 * r["batch"] / r["ms_per_batch"])
        assert r["us_per_point"] == pytest.approx(1e3 * r["ms_per_batch"] / (r["batch"] * 64))
        if r["sweep"] == "n":
            assert r["ratio"] == pytest.approx(grid["clouds_per_s"] / r["clouds_per_s"])
    assert ok[("k", "point_ckconv")]["k"] == 4
    with open(out / "benchmark.csv") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == CSV_COLUMNS
        csv_rows = list(reader)
    assert len(csv_rows) == len(rows)
    assert all(r["ratio"] for r in csv_rows if r["status"] == "ok")
    printed = capsys.readouterr().out
    assert "ref/model" in printed and "GFLOP/s" in printed and "% of the matmul peak" in printed
    assert " ± " in printed and SPREAD_NOTE in printed  # every time with its spread
    for r in ok.values():  # the interval of every time, and whether its target was reached
        assert r["ms_per_batch_ci_low"] <= r["ms_per_batch"] <= r["ms_per_batch_ci_high"]
        assert r["ms_per_batch_repeats"] >= 1 and isinstance(r["ms_per_batch_reached"], bool)
        assert len(r["warmup_ms"]) == 1 and len(r["train_warmup_ms"]) == 1  # a warm-up before every timing


def _timed(ms, batch, rel=0.02, reached=True):
    """Row fields of a time of ``ms`` per batch with a symmetric interval of ``± rel``."""
    return dict(
        batch=batch,
        ms_per_batch=ms,
        ms_per_batch_ci_low=ms * (1 - rel),
        ms_per_batch_ci_high=ms * (1 + rel),
        ms_per_batch_rel_ci=rel,
        ms_per_batch_reached=reached,
    )


def test_add_ratios_matches_sweep_n_and_k_and_carries_an_interval():
    rows = [
        dict(sweep="n", model="gridified", num_points=512, k=9, status="ok", **_timed(320.0, 32)),  # 10 ms/cloud
        dict(sweep="n", model="pointnet2", num_points=512, k=None, status="ok", **_timed(640.0, 16)),  # 40
        dict(sweep="k", model="gridified", num_points=512, k=4, status="ok", **_timed(160.0, 32)),  # 5
        dict(sweep="k", model="point_ckconv", num_points=512, k=4, status="ok", **_timed(100.0, 1, 0.1, False)),
        dict(sweep="k", model="point_ckconv", num_points=512, k=8, status="ok", **_timed(100.0, 1)),
    ]
    add_ratios(rows)
    assert [r.get("ratio") for r in rows] == pytest.approx([1.0, 4.0, 1.0, 20.0, None])
    assert "ratio_rel_ci" not in rows[0]  # the reference against itself: exactly 1
    # ratio of medians, log half-widths added in quadrature: log(1.02 / 0.98) / 2 from each cell
    h = math.hypot(math.log(1.02 / 0.98) / 2, math.log(1.02 / 0.98) / 2)
    assert rows[1]["ratio_ci_low"] == pytest.approx(4.0 * math.exp(-h))
    assert rows[1]["ratio_ci_high"] == pytest.approx(4.0 * math.exp(h))
    assert rows[1]["ratio_reached"] is True and rows[3]["ratio_reached"] is False  # a cell that missed its target
    assert rows[3]["ratio_rel_ci"] > rows[1]["ratio_rel_ci"]


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [
        dict(
            sweep="n",
            model=m,
            num_points=n,
            batch=2,
            ms_per_batch=n * f,
            train_batch=2,
            train_ms_per_batch=3 * n * f,
            peak_mb=0.01 * n,
            status="ok",
        )
        for m, f in (("gridified", 0.01), ("pointnet2", 0.1))
        for n in (512, 1024, 2048)
    ]
    paths = synthetic.plot(rows, tmp_path)
    assert paths == [str(tmp_path / "scaling_n.png")]
    assert (tmp_path / "scaling_n.png").stat().st_size > 1000


def test_bad_arguments(capsys):
    with pytest.raises(SystemExit, match="error: --models: unknown model 'resnet50'"):  # one line, no traceback
        main(["--models", "resnet50", "--out", "/tmp/unused"])
    # bad numbers are argparse errors of the shared parser (status 2, the flag named), before anything runs
    for argv, shown in (
        (["--batch-size", "0"], "argument --batch-size: must be an integer >= 1, got '0'"),
        (["--num-points", "4"], "argument --num-points: must be an integer >= 8, got '4'"),
        (["--repeats", "0"], "argument --repeats: must be an integer >= 1"),
        (["--time-budget", "0"], "argument --time-budget: must be a finite number > 0"),
        (["--matmul-size", "8"], "argument --matmul-size: must be an integer >= 16"),
    ):
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--out", "/tmp/unused"])
        assert exc.value.code == 2 and shown in capsys.readouterr().err


@pytest.mark.slow
def test_subprocess_isolation_measures_memory(tmp_path):
    out = tmp_path / "bench"
    main(
        [
            "--models",
            "point_ckconv",
            "--num-points",
            "256",
            "--k",
            "--batch-size",
            "2",
            "--repeats",
            "1",
            "--time-budget",
            "3",
            "--threads",
            "1",
            "--no-plots",
            "--matmul-size",
            "256",
            "--out",
            str(out),
        ]
    )
    rows = json.loads((out / "benchmark.json").read_text())["rows"]
    assert rows[0]["status"] == "ok" and rows[0]["peak_mb"] > 0


def test_malloc_setting_is_recorded(tmp_path):
    out = tmp_path / "bench"
    rc = main(
        [
            "--models",
            "gridified",
            "--num-points",
            "64",
            "--k",
            "--batch-size",
            "2",
            "--repeats",
            "1",
            "--warmup",
            "1",
            "--time-budget",
            "0.3",
            "--threads",
            "1",
            "--isolation",
            "inprocess",
            "--no-plots",
            "--no-train-step",
            "--matmul-size",
            "256",
            "--malloc",
            "tuned",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    result = json.loads((out / "benchmark.json").read_text())
    assert result["malloc"].startswith("tuned") or result["malloc"] == "default"
    before, after = result["matmul_gflops_before_after"]
    assert result["matmul_gflops"] == pytest.approx(max(before, after))
    assert result["rows"][0]["matmul_fraction"] == pytest.approx(
        result["rows"][0]["gflops_achieved"] / result["matmul_gflops"]
    )


def test_training_columns_presets_and_precision(tmp_path, recwarn):
    out = tmp_path / "bench"
    rc = main(
        [
            "--models",
            "gridified-fast",
            "gridified",
            "--num-points",
            "64",
            "--k",
            "--batch-size",
            "2",
            "--repeats",
            "1",
            "--warmup",
            "1",
            "--time-budget",
            "0.3",
            "--threads",
            "1",
            "--isolation",
            "inprocess",
            "--no-plots",
            "--no-flops",
            "--matmul-size",
            "256",
            "--precision",
            "bf16",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    result = json.loads((out / "benchmark.json").read_text())
    from gridify.precision import cpu_has_native_bf16

    assert result["precision"] == ("bf16" if cpu_has_native_bf16() else "fp32")
    assert result["reference"] == "gridified-fast"
    fast, thesis = result["rows"]
    assert fast["k"] == 6 and thesis["k"] == 9 and fast["params"] < thesis["params"]
    for r in (fast, thesis):
        assert r["train_over_inference"] == pytest.approx(
            (r["train_ms_per_batch"] / r["train_batch"]) / (r["ms_per_batch"] / r["batch"])
        )
        assert r["train_peak_mb_per_cloud"] == pytest.approx(r["train_peak_mb"] / r["train_batch"])
    assert thesis["train_ratio"] == pytest.approx(fast["train_clouds_per_s"] / thesis["train_clouds_per_s"])


def test_precision_falls_back_with_a_warning_where_the_hardware_cannot(monkeypatch):
    import gridify.precision as P

    monkeypatch.setattr(P, "cpu_has_native_bf16", lambda: False)
    with pytest.warns(UserWarning, match="no native bfloat16 .* running in fp32"):
        assert P.resolve_precision("bf16", "cpu") == "fp32"
    with pytest.raises(ValueError, match="precision must be one of"):
        P.resolve_precision("int8", "cpu")


def test_a_sweep_in_which_every_model_failed_exits_non_zero(tmp_path, monkeypatch, capsys):
    """It printed a table of errors and exited 0."""
    from gridify.bench import synthetic

    def fail(**spec):
        raise RuntimeError(f"{spec['model_name']} does not fit")

    monkeypatch.setattr(synthetic, "measure", fail)
    monkeypatch.setattr(synthetic, "matmul_gflops", lambda *a, **k: 1.0)
    argv = ["--models", "gridified", "pointnet2", "--num-points", "64", "--k", "4", "--k-num-points", "64"]
    argv += ["--isolation", "inprocess", "--no-plots", "--threads", "1", "--out", str(tmp_path / "b")]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    msg = str(exc.value.code)
    assert msg.startswith("benchmark: error: no model could be measured: gridified N=64: RuntimeError: gridified "), msg
    assert "(and 2 other model(s): see the table)" in msg and "\n" not in msg
    assert len(json.loads((tmp_path / "b" / "benchmark.json").read_text())["rows"]) == 3  # the rows are written


def test_crop_sizes_refuse_a_scan_too_small_to_measure():
    """A scan smaller than the smallest crop timed measured nothing and printed an empty table (exit 0)."""
    from gridify.bench.harness import crop_sizes

    assert crop_sizes("bench", "scan.bin", 5000, (4096, 16384)) == [4096]
    with pytest.raises(
        ValueError,
        match=r"^bench: the scan scan\.bin holds 300 points, too few to measure: the "
        r"smallest crop timed is 4096 points \(sizes 4096, 16384\); give a scan of at least 4096",
    ):
        crop_sizes("bench", "scan.bin", 300, (4096, 16384))
