"""``predict``, ``show`` and ``evaluate --scan`` take the same ``--votes`` / ``--max-fragments``; ``show`` and
``evaluate --scan`` reuse the labels ``predict --out`` wrote (``--pred``) instead of running the model again; and
``evaluate --scan`` prints a line per scan and, when interrupted, writes the summary of the scans it finished
(issue 70, items 4 and 6)."""

import argparse
import json

import numpy as np
import pytest

from gridify import _cliargs, _commands, cli
from gridify.api.predictor import Predictor
from gridify.cli import main as gridify_main
from tests.helpers import SCENE_CLASSES, export_scene_model, write_scan


def _parser(command):
    if command == "evaluate":
        return _commands.evaluate_parser()
    return cli._command_parser(cli.build_parser(), command)


def _action(parser, dest):
    return next(a for a in parser._actions if a.dest == dest)


def test_predict_show_and_evaluate_take_the_same_votes_and_max_fragments():
    """One definition (gridify._cliargs.add_scene_run_arguments): the same types, defaults and scene help."""
    parsers = {c: _parser(c) for c in ("predict", "show", "evaluate")}
    for command, parser in parsers.items():
        votes, cap = _action(parser, "votes"), _action(parser, "max_fragments")
        assert votes.default is None and cap.default is None, command
        assert votes.type is _cliargs.positive_int and cap.type is _cliargs.max_fragments, command
        assert votes.help.endswith(_cliargs.SCENE_VOTES_HELP) and cap.help == _cliargs.MAX_FRAGMENTS_HELP, command
    assert _action(parsers["predict"], "votes").help == _action(parsers["show"], "votes").help
    head = {"predict": ["scan.bin", "--model", "semantickitti"], "show": ["scan.bin"], "evaluate": ["--ckpt", "m.pt"]}
    for command, parser in parsers.items():
        args = parser.parse_args([*head[command], "--votes", "3", "--max-fragments", "all"])
        assert (args.votes, args.max_fragments) == (3, "all"), command
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([*head[command], "--votes", "0"])
        assert exc.value.code == 2
    for command in ("show", "evaluate"):  # --pred: one help, the same for both
        assert _action(parsers[command], "pred").help.startswith(_cliargs.PRED_HELP)
    assert not any(a.dest == "pred" for a in parsers["predict"]._actions)


@pytest.fixture
def scene(tmp_path):
    """A tiny scene model, a 700-point scan with ground truth (``truth.npy``) and its prediction as ``predict --out``
    writes it (``pred.npy``)."""
    write_scan(tmp_path / "scan.bin")
    model_path, _ = export_scene_model(tmp_path)
    np.save(tmp_path / "truth.npy", np.random.default_rng(0).integers(-1, 3, 700))
    argv = ["predict", str(tmp_path / "scan.bin"), "--ckpt", str(model_path), "--no-progress"]
    assert gridify_main([*argv, "--out", str(tmp_path / "pred.npy")]) == 0
    return argparse.Namespace(dir=tmp_path, model=str(model_path), scan=str(tmp_path / "scan.bin"))


def _evaluate(scene, *extra, output="m.json"):
    out = scene.dir / output
    argv = ["evaluate", "--ckpt", scene.model, "--scan", scene.scan, "--labels", str(scene.dir / "truth.npy")]
    assert gridify_main([*argv, "--output", str(out), *extra]) == 0
    return json.loads(out.read_text())


def _no_forward(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the model was run")

    monkeypatch.setattr(Predictor, "predict", boom)
    monkeypatch.setattr(Predictor, "inspect", boom)


@pytest.mark.parametrize("ext", [".npy", ".txt", ".ply", ".json"])
def test_evaluate_scan_scores_the_labels_predict_wrote_without_running_the_model(scene, ext, monkeypatch, capsys):
    ran = _evaluate(scene, "--no-progress")
    pred = scene.dir / f"pred{ext}"
    if ext != ".npy":
        argv = ["predict", scene.scan, "--ckpt", scene.model, "--no-progress", "--out", str(pred)]
        assert gridify_main(argv) == 0
    _no_forward(monkeypatch)
    capsys.readouterr()
    read = _evaluate(scene, "--pred", str(pred), output="p.json")
    assert read["metrics"] == ran["metrics"] and read["confusion"] == ran["confusion"]
    assert read["labelled_by"] == f"--pred {pred}" and read["scans"][0]["prediction"] == str(pred)
    assert f"prediction {pred}" in capsys.readouterr().out


def test_a_prediction_of_another_scan_or_model_is_refused_naming_the_files(scene, monkeypatch):
    _no_forward(monkeypatch)
    labels = np.load(scene.dir / "pred.npy")
    np.save(scene.dir / "short.npy", labels[:10])
    with pytest.raises(SystemExit) as exc:
        _evaluate(scene, "--pred", str(scene.dir / "short.npy"))
    assert (
        str(exc.value)
        == f"gridify evaluate: error: {scene.dir / 'short.npy'}: 10 labels for the 700 points of {scene.scan}"
    )
    bad = labels.copy()
    bad[699] = 5
    np.save(scene.dir / "big.npy", bad)
    with pytest.raises(SystemExit, match=r"big\.npy: label 5 \(row 699\) outside 0\.\.2 \(3 classes of the model\)"):
        _evaluate(scene, "--pred", str(scene.dir / "big.npy"))
    np.save(scene.dir / "neg.npy", np.where(np.arange(700) == 3, -1, labels))  # no -1 in a prediction
    with pytest.raises(SystemExit, match=r"neg\.npy: label -1 \(row 3\) outside 0\.\.2"):
        _evaluate(scene, "--pred", str(scene.dir / "neg.npy"))
    payload = {"task": "scene_segmentation", "class_names": ["road", "car", "pole"], "labels": labels.tolist()}
    (scene.dir / "other.json").write_text(json.dumps(payload))
    with pytest.raises(SystemExit, match=r"other\.json: its class names \['road', 'car', 'pole'\] are not the model's"):
        _evaluate(scene, "--pred", str(scene.dir / "other.json"))
    np.save(scene.dir / "cloud.npy", np.int64(1))  # a classifier's one label
    with pytest.raises(SystemExit, match=r"cloud\.npy: one label for the whole cloud"):
        _evaluate(scene, "--pred", str(scene.dir / "cloud.npy"))
    with pytest.raises(SystemExit, match=r"--pred .*gone\.npy: no such file"):
        _evaluate(scene, "--pred", str(scene.dir / "gone.npy"))


def test_pred_is_refused_where_it_is_not_read_and_so_are_the_model_run_options(scene, capsys):
    pred = str(scene.dir / "pred.npy")
    scan = ["evaluate", "--ckpt", scene.model, "--scan", scene.scan, "--labels", str(scene.dir / "truth.npy")]
    for flags in (["--votes", "2"], ["--max-fragments", "1"], ["--no-progress"]):
        with pytest.raises(SystemExit) as exc:
            gridify_main([*scan, "--pred", pred, *flags])
        text = str(exc.value)
        assert exc.value.code == 2 and text.startswith(f"gridify evaluate: error: {flags[0]} is only read"), text
        assert "not with --pred" in text and text.endswith("--pred); leave it out"), text  # before the model loads
    with pytest.raises(SystemExit, match=r"--pred is only read with --scan"):
        gridify_main(["evaluate", "--ckpt", scene.model, "--pred", pred])
    show = ["show", scene.scan, "--ckpt", scene.model, "--pred", pred, "--out", str(scene.dir / "v.png")]
    with pytest.raises(
        SystemExit, match=r"--votes is only read by a classifier .* \(here: a scene_segmentation model, --pred\)"
    ):
        gridify_main([*show, "--votes", "2"])
    with pytest.raises(SystemExit, match=r"--pred is only read with a scene segmenter .*\(here: no model"):
        gridify_main(["show", scene.scan, "--pred", pred, "--out", str(scene.dir / "v.png")])
    assert not (scene.dir / "v.png").exists()


def test_show_draws_the_labels_predict_wrote_without_running_the_model(scene, monkeypatch, capsys):
    _no_forward(monkeypatch)
    png = scene.dir / "v.png"
    argv = ["show", scene.scan, "--ckpt", scene.model, "--pred", str(scene.dir / "pred.npy"), "--labels", "none"]
    np.save(scene.dir / "short.npy", np.zeros(10, np.int64))
    with pytest.raises(SystemExit, match=rf"short\.npy: 10 labels for the 700 points of {scene.scan}"):
        gridify_main([*argv[:-4], "--pred", str(scene.dir / "short.npy"), "--out", str(png)])
    try:
        assert gridify_main([*argv, "--out", str(png), "--width", "80", "--height", "60"]) == 0
    except SystemExit as exc:
        if "offscreen renderer could not start" in str(exc):
            pytest.skip(str(exc))
        raise
    counts = np.bincount(np.load(scene.dir / "pred.npy"), minlength=3)
    want = ", ".join(f"{SCENE_CLASSES[i]} {counts[i]}" for i in np.flatnonzero(counts))
    assert f"pred.npy: 700 points: {want}" in capsys.readouterr().out and png.is_file()


def test_show_passes_votes_to_the_model_and_inspect_averages_those_views(scene, monkeypatch):
    from gridify import load

    model = load(scene.model)
    assert np.array_equal(
        model.inspect(scene.scan, num_votes=2)["prediction"].labels, model.predict(scene.scan, num_votes=2).labels
    )
    seen = {}

    def spy(self, *args, **kwargs):
        seen.update(kwargs)
        raise KeyError("stop here")

    monkeypatch.setattr(Predictor, "inspect", spy)
    with pytest.raises(SystemExit):
        gridify_main(
            ["show", scene.scan, "--ckpt", scene.model, "--votes", "3", "--max-fragments", "2", "--out", "x.png"]
        )
    assert seen["num_votes"] == 3 and seen["max_fragments"] == 2


def _folder_of_scans(tmp_path, names=("000000", "000001", "000002")):
    (tmp_path / "velodyne").mkdir()
    (tmp_path / "labels").mkdir()
    for i, name in enumerate(names):
        write_scan(tmp_path / "velodyne" / f"{name}.bin", n=300, seed=i)
        np.random.default_rng(i).integers(0, 3, 300).astype(np.uint32).tofile(tmp_path / "labels" / f"{name}.label")
    return tmp_path / "velodyne"


def test_evaluate_scan_prints_a_line_per_scan_and_reads_a_folder_of_predictions(tmp_path, monkeypatch, capsys):
    velodyne = _folder_of_scans(tmp_path)
    model, _ = export_scene_model(tmp_path)
    out = tmp_path / "m.json"
    base = ["evaluate", "--ckpt", str(model), "--scan", str(velodyne), "--output", str(out)]
    assert gridify_main([*base, "--no-progress"]) == 0
    text = capsys.readouterr().out
    ran = json.loads(out.read_text())
    for i, row in enumerate(ran["scans"]):
        line = f"[evaluate] scan {i + 1}/3 {row['scan']}: mIoU {100 * row['miou']:.2f} %, OA {100 * row['oa']:.2f} % "
        assert line + "(300 points, labels " in text, text
    assert all(row["seconds"] >= 0 for row in ran["scans"]) and not ran["partial"] and ran["scans_finished"] == 3
    preds = tmp_path / "preds"
    preds.mkdir()
    for scan in sorted(velodyne.iterdir()):
        assert (
            gridify_main(
                ["predict", str(scan), "--ckpt", str(model), "--no-progress", "--out", str(preds / f"{scan.stem}.npy")]
            )
            == 0
        )
    _no_forward(monkeypatch)
    assert gridify_main([*base, "--pred", str(preds)]) == 0
    read = json.loads(out.read_text())
    assert read["metrics"] == ran["metrics"] and [r["miou"] for r in read["scans"]] == [r["miou"] for r in ran["scans"]]
    (preds / "000001.npy").unlink()
    with pytest.raises(
        SystemExit, match=r"the labels of the scan .*000001\.bin are 000001\.txt, \.npy, \.ply or \.json"
    ):
        gridify_main([*base, "--pred", str(preds)])
    with pytest.raises(SystemExit, match=r"--pred .*000000\.npy: one file for 3 scans; give a folder"):
        gridify_main([*base, "--pred", str(preds / "000000.npy")])


def test_an_interrupted_evaluate_scan_writes_the_summary_of_the_scans_it_finished(tmp_path, monkeypatch, capsys):
    from gridify import load
    from gridify.metrics import SegmentationIoU

    velodyne = _folder_of_scans(tmp_path)
    model_path, _ = export_scene_model(tmp_path)
    out = tmp_path / "m.json"
    real, calls = Predictor.predict, []

    def ctrl_c_on_the_second(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", ctrl_c_on_the_second)
    argv = ["evaluate", "--ckpt", str(model_path), "--scan", str(velodyne), "--output", str(out), "--no-progress"]
    with pytest.raises(SystemExit) as exc:
        gridify_main(argv)
    assert exc.value.code == 130
    line = f"gridify evaluate: interrupted after 1 of 3 scan(s); their summary is in {out} (partial)"
    cap = capsys.readouterr()
    assert str(exc.value) == line and cap.err.strip().endswith(line)
    assert "scan 1/3" in cap.out and "scan 2/3" not in cap.out and "1 of 3 scan(s) (interrupted): mIoU" in cap.out
    report = json.loads(out.read_text())
    assert report["partial"] and (report["scans_finished"], report["scans_total"]) == (1, 3)
    assert [r["scan"] for r in report["scans"]] == [str(velodyne / "000000.bin")]
    monkeypatch.setattr(Predictor, "predict", real)
    metric = SegmentationIoU(3)  # the summary is the first scan's alone
    labels = load(model_path).predict(velodyne / "000000.bin").labels
    truth = np.fromfile(tmp_path / "labels" / "000000.label", np.uint32).astype(np.int64)
    metric.update(__import__("torch").from_numpy(labels), __import__("torch").from_numpy(truth))
    assert report["metrics"]["miou"] == pytest.approx(float(metric.compute()["miou"]))
    # interrupted before any scan finished: nothing written
    out.unlink()
    calls.clear()
    calls.append(1)
    monkeypatch.setattr(Predictor, "predict", ctrl_c_on_the_second)
    with pytest.raises(SystemExit) as exc:
        gridify_main(argv)
    assert exc.value.code == 130 and "interrupted before the first of 3 scan(s) was scored; nothing written" in str(
        exc.value
    )
    assert not out.exists()
