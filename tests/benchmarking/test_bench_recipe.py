"""``gridify bench --recipe``: real training steps of a recipe, split into data / graph / forward / backward / optimizer."""

import csv
import json

import pytest
import torch

from gridify import bench
from gridify.bench.recipe import RECIPE_COLUMNS, graph_timer

#: the procedural recipe shrunk to a few tiny clouds: 24 training clouds of 96 points, batches of 4
TINY = [
    "--override",
    "data.num_samples_per_class=2",
    "--override",
    "data.num_points=96",
    "--override",
    "data.batch_size=4",
    "--override",
    "data.val.num_samples_per_class=1",
]
PARTS = ("data_ms", "graph_ms", "forward_ms", "backward_ms", "optimizer_ms")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One run through ``gridify bench`` (gridify.bench.main hands --recipe over): gridified + PointNet2, 3 steps,
    one DataLoader worker (its CPU time counts in the cores used)."""
    out = tmp_path_factory.mktemp("bench_recipe")
    threads = torch.get_num_threads()
    try:
        rc = bench.main(
            [
                "--recipe",
                "procedural",
                *TINY,
                "--override",
                "data.num_workers=1",
                "--models",
                "gridified,pointnet2",
                "--steps",
                "3",
                "--warmup",
                "1",
                "--infer-steps",
                "2",
                "--synthetic-steps",
                "2",
                "--threads",
                "1",
                "--out",
                str(out),
            ]
        )
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    return out


def test_json_has_every_column_and_consistent_times(tiny_run):
    result = json.loads((tiny_run / "benchmark_recipe.json").read_text())
    machine = result["machine"]
    assert machine["threads"] == 1 and machine["num_workers"] == 1 and machine["batch_size"] == 4
    assert machine["cpu"] and machine["torch"] == torch.__version__
    assert result["config"]["data"]["num_points"] == 96 and result["settings"]["steps"] == 3
    rows = result["rows"]
    assert [r["model"] for r in rows] == ["gridified", "pointnet2"]
    assert [r["registry_name"] for r in rows] == ["gridified_classifier", "pointnet2_classifier"]
    for r in rows:
        assert r["status"] == "ok"
        assert set(RECIPE_COLUMNS) <= set(r), set(RECIPE_COLUMNS) - set(r)
        for key in (
            *PARTS,
            "step_ms",
            "inference_ms",
            "ms_per_cloud",
            "synthetic_step_ms",
            "cores_used",
            "train_over_inference",
            "real_over_synthetic",
        ):
            assert r[key] > 0, (r["model"], key, r[key])
        assert r["batch"] == 4 and r["points_per_cloud"] == 96 and r["steps"] == 3
        # the parts account for the step (the rest is a few microseconds of bookkeeping)
        assert sum(r[k] for k in PARTS) == pytest.approx(r["step_ms"], rel=0.2)
        assert r["ms_per_cloud"] == pytest.approx(r["step_ms"] / 4)
        # process + worker CPU time over wall time: at most threads + workers + 1 cores
        assert 0 < r["cores_used"] <= 1 + 1 + 1
        compute = r["graph_ms"] + r["forward_ms"] + r["backward_ms"] + r["optimizer_ms"]
        assert r["train_over_inference"] == pytest.approx(compute / r["inference_ms"])
    assert rows[0]["graph_what"].startswith("bilateral kNN") and rows[1]["graph_what"].startswith("FPS")


def test_csv_has_the_columns(tiny_run):
    with open(tiny_run / "benchmark_recipe.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == RECIPE_COLUMNS
        rows = list(reader)
    assert [r["model"] for r in rows] == ["gridified", "pointnet2"] and float(rows[0]["step_ms"]) > 0


def test_graph_timer_restores_the_wrapped_functions():
    from gridify.nn import gridification

    before = gridification.bilateral_knn_unchecked
    with graph_timer(lambda: 0.0) as spent:
        assert gridification.bilateral_knn_unchecked is not before
        assert spent == [0.0]
    assert gridification.bilateral_knn_unchecked is before


def _error_line(capsys, argv):
    """The one line a bad command ends with: the SystemExit message, or argparse's last stderr line."""
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if isinstance(exc.value.code, str):
        return exc.value.code
    assert exc.value.code == 2  # argparse: a usage line, then the error line
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--recipe", "no_such_recipe"], "--recipe"),
        (["--recipe", "procedural", "--data-root", "/no/such/folder"], "--data-root"),
        (["--recipe", "procedural", "--steps", "0"], "--steps"),
        (["--recipe", "procedural", "--steps", "many"], "--steps"),
        (["--recipe", "procedural", "--warmup", "-1"], "--warmup"),
        (["--recipe", "procedural", "--threads", "0"], "--threads"),
        (["--recipe", "procedural", "--override", "data.batch_size=0"], "--override"),
        (["--recipe", "procedural", "--override", "nonsense"], "--override"),
        (["--recipe", "procedural", "--models", "gridified,nosuch"], "--models"),
    ],
)
def test_bad_arguments_are_one_line_errors_naming_the_flag(argv, flag, tmp_path, capsys):
    line = _error_line(capsys, [*argv, "--out", str(tmp_path / "out")])
    assert flag in line and "\n" not in line and "error" in line, line
    assert not (tmp_path / "out").exists()


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    line = _error_line(capsys, ["--recipe", "procedural", "--out", str(f)])
    assert "--out" in line and "not a folder" in line


def test_missing_dataset_under_an_existing_root_names_data_root(tmp_path, capsys):
    line = _error_line(
        capsys, ["--recipe", "modelnet10_fast", "--data-root", str(tmp_path), "--out", str(tmp_path / "out")]
    )
    assert "--data-root" in line and "\n" not in line


def test_no_model_measured_exits_non_zero_with_one_line(tmp_path, monkeypatch, capsys):
    """Every model failing used to end `gridify bench --recipe` with status 0 and a table of errors."""
    from gridify import cli
    from gridify.bench import recipe

    def fail(name, *a, **kw):
        raise RuntimeError(f"{name} does not fit\nsecond line")

    monkeypatch.setattr(recipe, "_measure_model", fail)
    argv = ["bench", "--recipe", "procedural", *TINY, "--models", "gridified,pointnet2", "--steps", "1"]
    argv += ["--isolation", "inprocess"]  # the monkeypatch holds in this process only
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--threads", "1", "--out", str(tmp_path / "b")])
    msg = str(exc.value.code)
    assert msg.startswith(
        "gridify bench: error: no model could be measured: gridified: RuntimeError: gridified "
        "does not fit (and 1 other model(s)"
    ), msg
    assert "\n" not in msg and "Traceback" not in capsys.readouterr().err
    assert json.loads((tmp_path / "b" / "benchmark_recipe.json").read_text())["rows"][1]["model"] == "pointnet2"


@pytest.mark.parametrize(
    "recipe, models, words",
    [
        (
            "temporal/dynamic_shapes",
            "gridified,pointnet2",
            "pointnet2 (pointnet2_classifier) is a classification model, but the recipe temporal/dynamic_shapes "
            "trains the task sequence_classification; models that serve it: gridified (the recipe's own), temporal_cfc",
        ),
        (
            "scene_procedural",
            "gridified_classifier",
            "gridified_classifier is a classification model, but the recipe scene_procedural trains the task "
            "scene_segmentation; models that serve it: gridified (the recipe's own), gridified_segmenter, "
            "point_ckconv_segmenter, pointnet2_segmenter, scene_segmenter",
        ),
    ],
)
def test_a_model_of_another_task_is_refused_before_the_data_is_read(
    recipe, models, words, tmp_path, capsys, monkeypatch
):
    """A classifier peer of a temporal recipe ended in a TypeError (forward() got 'mask'); a classifier on a scene
    recipe named the grid box of its first crop. Now one line names the model's task and the recipe's."""
    from gridify.bench import recipe as R

    monkeypatch.setattr(R, "_build_data", lambda *a: pytest.fail("the data was read"))
    line = _error_line(capsys, ["--recipe", recipe, "--models", models, "--out", str(tmp_path / "out")])
    assert line.endswith(f": error: --models: {words}"), line
    assert "\n" not in line and not (tmp_path / "out").exists()


def test_a_model_failing_with_any_error_is_a_row_and_no_model_measured_is_non_zero(tmp_path, monkeypatch, capsys):
    """A TypeError inside one model's steps ended the whole run with a traceback (only RuntimeError, ValueError and
    MemoryError became rows)."""
    from gridify import cli
    from gridify.bench import recipe

    def fail(name, *a, **kw):
        raise TypeError(f"{name}.forward() got an unexpected keyword argument 'mask'")

    monkeypatch.setattr(recipe, "_measure_model", fail)
    argv = ["bench", "--recipe", "procedural", *TINY, "--models", "gridified,pointnet2", "--steps", "1"]
    argv += ["--isolation", "inprocess"]  # the monkeypatch holds in this process only
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--threads", "1", "--out", str(tmp_path / "b")])
    assert str(exc.value.code).startswith(
        "gridify bench: error: no model could be measured: gridified: TypeError: gridified.forward() got"
    )
    rows = json.loads((tmp_path / "b" / "benchmark_recipe.json").read_text())["rows"]
    assert [r["status"].split(":")[1].strip() for r in rows] == ["TypeError", "TypeError"]
