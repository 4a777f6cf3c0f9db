"""scripts/bench_scenes.py: a --quick run ends every cell measured or with a "cannot run" reason
(with or without ../shared/data: the sweep falls back to generated clouds), prints its tables and
writes results.json / results.csv; a missing --ckpt is a clear SystemExit naming the file (status 2, before any
measurement)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_scenes.py"
MODELS = ("scene_segmenter", "pointnet2_segmenter")


def _bench():
    spec = importlib.util.spec_from_file_location("bench_scenes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_cell(cell, where):
    assert cell["status"] in ("measured", "cannot run"), where
    if cell["status"] == "measured":
        assert cell["seconds"] > 0 and cell["us_per_point"] > 0, where
        assert cell["peak_mib"] > 0 and cell["baseline_mib"] > 0 and cell["peak_mib"] >= cell["baseline_mib"], where
    else:
        assert isinstance(cell["reason"], str) and cell["reason"].strip(), where


@pytest.mark.slow  # about a minute: 13 child processes
def test_quick_run_measures_every_cell_or_says_why_not(tmp_path, capsys):
    results = _bench().main(["--quick", "--threads", "1", "--models", *MODELS, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert out.startswith("CPU: ") and "torch.get_num_threads() = 1" in out
    assert "| model | N | train s/step | infer s |" in out and "Goals: " in out

    data = json.loads((tmp_path / "results.json").read_text())
    assert data["environment"]["threads"] == 1 and data["environment"]["cpu"] and data["environment"]["torch"]
    assert {(r["model"], r["n"]) for r in data["sweep"]} == {(m, n) for m in MODELS for n in (2048, 4096)}
    for r in data["sweep"]:
        for mode in ("train", "infer"):
            _check_cell(r[mode], (r["model"], r["n"], mode))
            if r["model"] == "scene_segmenter":  # the gridified model runs at these sizes on any machine
                assert r[mode]["status"] == "measured", r[mode]
                assert r[mode]["threads"] == 1
    assert [r["scan"] for r in data["scans"]] == ["semantickitti", "scannet", "3dmatch"]
    for r in data["scans"]:
        _check_cell(r, r["scan"])
    assert [r["scene"] for r in data["e2e"]] == ["tiled", "crop"]
    for r in data["e2e"]:  # generated scans when the KITTI files are missing
        assert r["status"] == "measured", r
        _check_cell(r, r["scene"])
        assert r["read_s"] > 0 and r["predict_s"] > 0 and r["write_s"] > 0
    assert data["e2e"][0]["points"] == 8 * 2560 and data["e2e"][1]["points"] == 4096
    assert set(data["goals"]) == {"train_10x_pointnet2", "memory_linear", "time_per_point_1m_within_2x"}
    assert results["environment"] == data["environment"]

    header = (tmp_path / "results.csv").read_text().splitlines()[0]
    assert header.startswith("part,name,n,mode,status,reason,seconds")
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "bench_scenes.png").stat().st_size > 0


def test_missing_ckpt_is_a_systemexit_naming_the_file(tmp_path):
    missing = tmp_path / "no_such_model.pt"
    with pytest.raises(SystemExit, match=r"argument --ckpt: .*no_such_model\.pt: not found") as exc:
        _bench().main(["--quick", "--ckpt", str(missing), "--out", str(tmp_path / "out")])
    assert exc.value.code == 2 and not (tmp_path / "out").exists()


def test_scene_cloud_tiles_the_scan_for_more_points_than_it_has():
    bench = _bench()
    rng = np.random.default_rng(0)
    pts = (rng.random((500, 3)) * [40, 40, 3] - [20, 20, 1]).astype(np.float32)
    inten = rng.random(500).astype(np.float32)
    pos, x = bench.scene_cloud(pts, inten, 1200)
    assert pos.shape == (1200, 3) and x.shape == (1200, 2) and pos.dtype == x.dtype == np.float32
    assert pos[:, 0].max() > 60  # copies shifted 100 m in x
    # the recipes' height (z above the cloud's 1st percentile: build_scene_features), not a copy of its own
    from gridify.datasets.scene_base import scene_height

    assert np.array_equal(x[:, 1], scene_height(pos[:, 2])) and np.all(x[:, 0] >= 0)
    pos, x = bench.scene_cloud(pts, inten, 100)  # a crop: the points nearest to the sensor in xy
    centre = pts[np.argmin(np.linalg.norm(pts[:, :2], axis=1)), :2]
    radius = np.sort(np.linalg.norm(pts[:, :2] - centre, axis=1))[99]
    assert pos.shape == (100, 3) and np.linalg.norm(pos[:, :2] - centre, axis=1).max() <= radius + 1e-6
