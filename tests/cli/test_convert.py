"""``gridify convert``: raw scene layouts -> the common (Pointcept) layout, from the command line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gridify.cli import main
from gridify.datasets import SceneDataset

KITTI = Path(__file__).resolve().parents[3] / "shared" / "data" / "semantickitti_mini" / "dataset"


def _s3dis_tree(root: Path) -> Path:
    """Two rooms of two areas in the raw S3DIS layout: ``x y z r g b`` rows per instance file."""
    rng = np.random.default_rng(0)
    for area, room in (("Area_1", "office_1"), ("Area_5", "hallway_1")):
        ann = root / area / room / "Annotations"
        ann.mkdir(parents=True)
        for name in ("floor_1", "wall_1", "chair_1"):
            rows = np.hstack([rng.uniform(0, 3, (20, 3)), rng.integers(0, 256, (20, 3))])
            np.savetxt(ann / f"{name}.txt", rows, fmt="%.4f %.4f %.4f %d %d %d")
    return root


def test_convert_s3dis_tree_reads_back(tmp_path, capsys):
    raw = _s3dis_tree(tmp_path / "raw")
    assert main(["convert", str(raw), "--layout", "s3dis", "--out", str(tmp_path / "pc"), "--quiet"]) == 0
    assert "2 scenes" in capsys.readouterr().out
    ds = SceneDataset(tmp_path / "pc", layout="pointcept", split="Area_1")
    item = ds[0]
    assert item["pos"].shape == (60, 3)
    names = ds.class_names
    assert sorted({names[i] for i in item["y"].tolist()}) == ["chair", "floor", "wall"]
    # a second run keeps the scenes already written (resume) and says so in the same words
    assert main(["convert", str(raw), "--layout", "s3dis", "--out", str(tmp_path / "pc"), "--quiet"]) == 0


@pytest.mark.skipif(not KITTI.is_dir(), reason="../shared/data/semantickitti_mini not present")
def test_convert_real_semantickitti_sequence(tmp_path):
    out = tmp_path / "kitti"
    assert (
        main(["convert", str(KITTI), "--layout", "semantickitti", "--sequences", "10", "--out", str(out), "--quiet"])
        == 0
    )
    scenes = sorted(p.name for p in (out / "train").iterdir())
    assert scenes == ["10_000000", "10_000004", "10_000008"]
    coord = np.load(out / "train" / "10_000000" / "coord.npy")
    seg = np.load(out / "train" / "10_000000" / "segment.npy")
    assert coord.shape[0] == seg.shape[0] > 100_000
    assert seg.min() >= -1 and seg.max() < 19


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "does not exist"),
        ("file", "is not a folder"),
        ("same", "is the source folder"),
    ],
)
def test_convert_bad_paths_name_the_problem(tmp_path, capsys, case, message):
    raw = _s3dis_tree(tmp_path / "raw")
    root = {
        "missing": tmp_path / "nope",
        "file": raw / "Area_1" / "office_1" / "Annotations" / "floor_1.txt",
        "same": raw,
    }[case]
    with pytest.raises(SystemExit) as exc:
        main(["convert", str(root), "--layout", "s3dis", "--out", str(raw if case == "same" else tmp_path / "o")])
    assert message in str(exc.value)


def test_convert_empty_tree_and_bad_layout(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["convert", str(tmp_path / "empty"), "--layout", "s3dis", "--out", str(tmp_path / "o")])
    assert "no s3dis scenes" in str(exc.value)
    with pytest.raises(SystemExit):
        main(["convert", str(tmp_path / "empty"), "--layout", "nope", "--out", str(tmp_path / "o")])
    assert "invalid choice: 'nope'" in capsys.readouterr().err
