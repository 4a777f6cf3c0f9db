"""``scripts/cross_validate.py``: folds checked before any run, every sequence validated once, the per-fold and
pooled scores computed from the folds' confusion matrices, and finished folds not trained or scored again."""

import importlib.util
import json

import pytest

from tests.helpers import ROOT


def _script():
    spec = importlib.util.spec_from_file_location("cross_validate", ROOT / "scripts" / "cross_validate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _root(tmp_path, seqs):
    for s in seqs:
        (tmp_path / "data" / "sequences" / s / "velodyne").mkdir(parents=True)
    return str(tmp_path / "data")


@pytest.mark.parametrize(
    "folds, overrides, expected",
    [
        (["00,01"], [], "at least two"),
        (["00,01", "01,02"], [], "sequence 01 is in fold 0 and fold 1"),
        (["00", "01"], ["output_dir=x"], "the folds set output_dir"),
        (["00", "01"], ["data.sequences=[1]"], "the folds set data.sequences"),
        (["00", "01"], ["nonsense"], "expected section.key=value"),
    ],
)
def test_bad_folds_and_overrides_are_refused_before_any_run(tmp_path, capsys, folds, overrides, expected):
    cv = _script()
    root = _root(tmp_path, ["00", "01", "02"])
    with pytest.raises(SystemExit) as exc:
        cv.main(
            [
                "--config",
                "semantickitti_mini",
                "--data-root",
                root,
                "--out",
                str(tmp_path / "o"),
                *overrides,
                "--folds",
                *folds,
            ]
        )
    assert exc.value.code == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_missing_sequence_is_named_before_any_run(tmp_path, monkeypatch):
    cv = _script()
    monkeypatch.setattr(cv, "run", lambda cmd: pytest.fail("nothing may run"))
    root = _root(tmp_path, ["00"])
    with pytest.raises(SystemExit, match="no sequences/<NN>/velodyne for 01"):
        cv.main(
            ["--config", "semantickitti_mini", "--data-root", root, "--out", str(tmp_path / "o"), "--folds", "00", "01"]
        )


def test_folds_train_on_the_others_and_pool_their_confusions(tmp_path, monkeypatch):
    cv = _script()
    root = _root(tmp_path, ["00", "01", "02"])
    calls = []
    names = ["a", "b", "c"]
    confusions = {  # rows: truth; fold 0 sees only a and b, fold 1 all three
        "fold0.json": [[8, 2, 0], [0, 10, 0], [0, 0, 0]],
        "fold1.json": [[5, 0, 5], [0, 0, 0], [0, 5, 5]],
    }

    def fake_run(cmd):
        calls.append(cmd)
        if cmd[1] == "train":
            out = [a.split("=", 1)[1] for a in cmd if a.startswith("output_dir=")][0]
            (tmp_path / out).mkdir(parents=True, exist_ok=True) if not out.startswith("/") else None
            from pathlib import Path

            (Path(out) / "checkpoints").mkdir(parents=True, exist_ok=True)
            (Path(out) / "checkpoints" / "model.pt").write_text("x")
        else:
            from pathlib import Path

            report = Path(cmd[cmd.index("--output") + 1])
            conf = confusions[report.name]
            ious = cv.iou_of(conf)
            present = [v for v in ious if v is not None]
            report.write_text(
                json.dumps(
                    {
                        "metrics": {"miou": sum(present) / len(present), "oa": 0.5},
                        "iou": dict(zip(names, ious)),
                        "confusion": conf,
                        "class_names": names,
                    }
                )
            )

    monkeypatch.setattr(cv, "run", fake_run)
    argv = [
        "--config",
        "semantickitti_mini",
        "--data-root",
        root,
        "--out",
        str(tmp_path / "o"),
        "--folds",
        "00,02",
        "01",
    ]
    summary = cv.main(argv + ["trainer.max_epochs=3"])
    train0 = [c for c in calls if c[1] == "train"][0]
    assert 'data.sequences=["01"]' in train0 and 'data.val={sequences: ["00", "02"]}' in train0
    assert "trainer.max_epochs=3" in train0 and "trainer.test_ckpt=last" in train0
    assert summary["folds"][0]["iou"]["c"] is None  # absent from the fold: not a zero
    pooled = summary["pooled"]["iou"]
    # a: tp 8 + 5, fn 2 + 5, fp 0
    assert pooled["a"] == pytest.approx(13 / 20)
    assert pooled["c"] == pytest.approx(5 / (5 + 5 + 0 + 5))
    assert summary["miou"]["n"] == 2 and summary["miou"]["std"] is not None
    for name in ("cv.json", "cv.csv", "cv.md"):
        assert (tmp_path / "o" / name).is_file()
    # run again: trained and scored folds are left alone
    calls.clear()
    cv.main(argv)
    assert calls == []
