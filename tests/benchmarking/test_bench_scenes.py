"""``gridify bench --scenes``: a --quick run ends every cell measured or with a "cannot run" reason
(with or without ../shared/data: the sweep falls back to generated clouds), prints its tables and
writes results.json / results.csv; a missing --ckpt is a clear SystemExit naming the file (status 2, before any
measurement); an option a part that is not run would read is refused by name, before PyTorch loads."""

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from gridify.bench import main, scenes

MODELS = ("scene_segmenter", "pointnet2_segmenter")


def _check_cell(cell, where):
    assert cell["status"] in ("measured", "cannot run"), where
    if cell["status"] == "measured":
        assert cell["seconds"] > 0 and cell["us_per_point"] > 0, where
        assert cell["peak_mib"] > 0 and cell["baseline_mib"] > 0 and cell["peak_mib"] >= cell["baseline_mib"], where
    else:
        assert isinstance(cell["reason"], str) and cell["reason"].strip(), where


@pytest.mark.slow  # about a minute: 13 child processes
def test_quick_run_measures_every_cell_or_says_why_not(tmp_path, capsys):
    assert main(["--scenes", "--quick", "--threads", "1", "--models", *MODELS, "--out", str(tmp_path)]) == 0
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

    header = (tmp_path / "results.csv").read_text().splitlines()[0]
    assert header.startswith("part,name,n,mode,status,reason,seconds")
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "bench_scenes.png").stat().st_size > 0


def test_missing_ckpt_is_a_systemexit_naming_the_file(tmp_path):
    missing = tmp_path / "no_such_model.pt"
    with pytest.raises(SystemExit, match=r"argument --ckpt: .*no_such_model\.pt: not found") as exc:
        main(["--scenes", "--quick", "--ckpt", str(missing), "--out", str(tmp_path / "out")])
    assert exc.value.code == 2 and not (tmp_path / "out").exists()


def test_scene_cloud_tiles_the_scan_for_more_points_than_it_has():
    rng = np.random.default_rng(0)
    pts = (rng.random((500, 3)) * [40, 40, 3] - [20, 20, 1]).astype(np.float32)
    inten = rng.random(500).astype(np.float32)
    pos, x = scenes.scene_cloud(pts, inten, 1200)
    assert pos.shape == (1200, 3) and x.shape == (1200, 2) and pos.dtype == x.dtype == np.float32
    assert pos[:, 0].max() > 60  # copies shifted 100 m in x
    # the recipes' height (z above the cloud's 1st percentile: build_scene_features), not a copy of its own
    from gridify.datasets.scene_base import scene_height

    assert np.array_equal(x[:, 1], scene_height(pos[:, 2])) and np.all(x[:, 0] >= 0)
    pos, x = scenes.scene_cloud(pts, inten, 100)  # a crop: the points nearest to the sensor in xy
    centre = pts[np.argmin(np.linalg.norm(pts[:, :2], axis=1)), :2]
    radius = np.sort(np.linalg.norm(pts[:, :2] - centre, axis=1))[99]
    assert pos.shape == (100, 3) and np.linalg.norm(pos[:, :2] - centre, axis=1).max() <= radius + 1e-6


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["--parts", "sweep", "--ckpt", "m.pt"], "--ckpt is only read for the end-to-end part (--parts e2e) (here: "),
        (
            ["--parts", "scans", "e2e", "--num-points", "64"],
            "--num-points is only read for the N sweep (--parts sweep)",
        ),
        (["--parts", "scans", "--source", "random"], "--source is only read for the N sweep and the end-to-end part"),
        (["--parts", "sweep", "--max-scene-seconds", "9"], "--max-scene-seconds is only read for the real scans"),
        (["--out", "AFILE"], "argument --out: "),
        (["--out", "OUT"], "argument --out: OUT: OUT/results.json is a folder"),
        (["--memory-limit-gb", "nan"], "argument --memory-limit-gb: must be a finite number > 0"),
        (["--ckpt", "ADIR"], "argument --ckpt: "),
    ],
)
def test_bad_or_unread_options_are_refused_by_name_before_torch_loads(argv, shown, tmp_path):
    (tmp_path / "AFILE").write_text("x")
    (tmp_path / "ADIR").mkdir()
    (tmp_path / "OUT" / "results.json").mkdir(parents=True)  # a folder where the file goes
    (tmp_path / "m.pt").write_bytes(b"")
    probe = (
        "import sys\nfrom gridify import cli\ntry:\n    cli.main(['bench', '--scenes', *sys.argv[1:]])\n"
        "except SystemExit as exc:\n    print('EXIT', exc.code)\n"
        "print('HEAVY', sorted(m for m in ('torch', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert "HEAVY []" in out.stdout and "Traceback" not in out.stderr, (out.stdout[-500:], out.stderr[-800:])
    assert f"gridify bench: error: {shown}" in out.stderr, out.stderr[-800:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ADIR", "AFILE", "OUT", "m.pt"]  # nothing written


def test_an_abbreviated_mode_flag_is_refused_not_taken_for_the_sweep():
    """``--scen`` / ``--recip`` parsed by the sweep's parser ran the synthetic sweep, ignoring the mode."""
    from gridify import cli

    for flag in ("--scen", "--recip=procedural"):
        with pytest.raises(SystemExit, match=f"spell --{'scenes' if 'scen' in flag else 'recipe'} out in full"):
            cli.main(["bench", flag])
