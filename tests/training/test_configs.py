"""Configs that work anywhere: shipped in the package and found by name, _base_ inheritance, data roots from
--data-root / $GRIDIFY_DATA, ModelNet's source auto, the ShapeNet route's errors and part names, and what
`gridify download` knows about them."""

import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("yaml")

from gridify import cli  # noqa: E402
from gridify.datasets import DatasetNotFoundError, ModelNet, default_root, resolve_archive  # noqa: E402
from gridify.training import config as C  # noqa: E402
from gridify.training.cli import error_line  # noqa: E402
from gridify.training.data import build_dataset, config_archives, dataset_info  # noqa: E402
from tests.helpers import make_fake_shapenet  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_configs_ship_in_the_package_and_the_old_folder_still_works():
    assert C.CONFIG_DIR == ROOT / "gridify" / "configs"
    names = C.shipped_configs()
    assert {
        "procedural",
        "procedural_seg",
        "modelnet10",
        "modelnet10_cpu",
        "modelnet10_smoke",
        "modelnet10_mrconv",
        "modelnet40",
        "shapenet_ccnn",
        "shapenet_unet",
        "folder_classification",
        "folder_segmentation",
    } <= set(names)
    assert (ROOT / "configs").resolve() == C.CONFIG_DIR  # the repository's configs/ is a link to them
    assert (ROOT / "configs" / "procedural.yaml").is_file()


def test_find_config_by_name_path_or_stem(tmp_path, monkeypatch):
    shipped = C.CONFIG_DIR / "procedural.yaml"
    assert C.find_config("procedural") == C.find_config("procedural.yaml") == shipped
    assert C.find_config("temporal/dynamic_shapes") == C.CONFIG_DIR / "temporal" / "dynamic_shapes.yaml"
    mine = tmp_path / "procedural.yaml"  # a file of the same name in the working directory wins
    mine.write_text("seed: 5\n")
    monkeypatch.chdir(tmp_path)
    assert C.find_config("procedural").resolve() == mine and C.find_config(str(mine)) == mine
    assert C.resolve_config("procedural")["seed"] == 5
    with pytest.raises(
        C.ConfigError,
        match=r"^config 'missing' not found: no such file, and no shipped config of "
        r"that name \(shipped: folder_classification, folder_segmentation, ",
    ):
        C.find_config("missing")


def test_every_shipped_config_resolves_without_a_hard_coded_data_root():
    for name in C.shipped_configs():
        cfg = C.resolve_config(name)
        assert "_base_" not in cfg and cfg["data"].get("root") is None, name
        text = (C.CONFIG_DIR / f"{name}.yaml").read_text()
        assert "shared/data" not in text and "../" not in text, name


def test_base_inheritance_order_and_overrides(tmp_path):
    (tmp_path / "a.yaml").write_text("seed: 1\nmodel: {resolution: 7, k: 5}\ntrainer: {max_epochs: 3}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yaml").write_text("_base_: ../a.yaml\nmodel: {k: 6}\ndata: {batch_size: 4}\n")
    (tmp_path / "c.yaml").write_text("_base_: [procedural, sub/b]\nmodel: {depth: 1}\n")
    cfg = C.resolve_config(str(tmp_path / "c.yaml"), ["model.depth=2"])
    assert cfg["seed"] == 1 and cfg["output_dir"] == "outputs/procedural"  # procedural, then b (with a), then c
    assert (cfg["model"]["resolution"], cfg["model"]["k"], cfg["model"]["depth"]) == (7, 6, 2)
    assert cfg["model"]["hidden_channels"] == 48 and cfg["data"]["batch_size"] == 4
    assert cfg["trainer"]["max_epochs"] == 3 and "_base_" not in cfg
    cpu, fast = C.resolve_config("modelnet10_cpu"), C.resolve_config("modelnet10_smoke")
    assert cpu["model"]["hidden_channels"] == 64 and cpu["model"]["resolution"] == 9  # from modelnet10
    assert (fast["trainer"]["limit_val_batches"], fast["trainer"]["limit_test_batches"]) == (4, 6)
    assert {k: v for k, v in fast["model"].items()} == cpu["model"]


def test_a_base_model_section_of_another_model_is_replaced_not_merged(tmp_path):
    peer = C.resolve_config("semantickitti_mini_pointnet2")
    mine = C.resolve_config("semantickitti_mini")
    assert peer["model"] == {
        "name": "pointnet2_segmenter",
        "ratios": [0.2, 0.25],
        "radii": [0.5, 1.5],
        "max_num_neighbors": 32,
        "dropout": 0.5,
    }
    assert peer["data"] == mine["data"] and peer["optim"] == mine["optim"]  # the same data, crops and loss
    assert C.resolve_config("scene_procedural_pointnet2")["data"] == C.resolve_config("scene_procedural")["data"]
    (tmp_path / "same.yaml").write_text("_base_: semantickitti_mini\nmodel: {name: scene_segmenter, k: 8}\n")
    same = C.resolve_config(str(tmp_path / "same.yaml"))["model"]
    assert same["k"] == 8 and same["extent"] == mine["model"]["extent"]  # the same model: merged
    assert C.merge_configs({"model": {"name": "a", "x": 1}}, {"model": {"y": 2}}) == {
        "model": {"name": "a", "x": 1, "y": 2}
    }


def test_base_errors(tmp_path):
    (tmp_path / "x.yaml").write_text("_base_: y\n")
    (tmp_path / "y.yaml").write_text("_base_: [x.yaml]\n")
    with pytest.raises(C.ConfigError, match=r"y.yaml: _base_ cycle: x.yaml -> y.yaml -> x.yaml$"):
        C.resolve_config(str(tmp_path / "x.yaml"))
    (tmp_path / "self.yaml").write_text("_base_: self\n")
    with pytest.raises(C.ConfigError, match=r"_base_ cycle: self.yaml -> self.yaml"):
        C.resolve_config(str(tmp_path / "self.yaml"))
    (tmp_path / "m.yaml").write_text("_base_: [procedural, nope]\n")
    with pytest.raises(C.ConfigError, match=r"m.yaml: _base_ 'nope': config 'nope' not found"):
        C.resolve_config(str(tmp_path / "m.yaml"))
    (tmp_path / "t.yaml").write_text("_base_: {a: 1}\n")
    with pytest.raises(C.ConfigError, match=r"t.yaml: _base_ must be a config name or a list of them, got \{'a': 1\}"):
        C.resolve_config(str(tmp_path / "t.yaml"))
    (tmp_path / "bad.yaml").write_text("model:\n  k: 3\n   depth: 2\n")
    with pytest.raises(
        C.ConfigError,
        match=r"bad.yaml: not valid YAML \(line 3, column 9: mapping values are not "
        r"allowed here\)$",
    ):
        C.resolve_config(str(tmp_path / "bad.yaml"))


def test_data_root_flag_environment_and_default(tmp_path, monkeypatch):
    from gridify.training import config_from_args, build_parser

    args = build_parser().parse_intermixed_args(["--config", "modelnet10", "--data-root", "a: b"])
    assert config_from_args(args)["data"]["root"] == "a: b"  # quoted: a path is never parsed as YAML
    monkeypatch.delenv("GRIDIFY_DATA_ROOT", raising=False)
    monkeypatch.setenv("GRIDIFY_DATA", str(tmp_path))
    assert default_root() == tmp_path
    monkeypatch.delenv("GRIDIFY_DATA")
    monkeypatch.setenv("GRIDIFY_DATA_ROOT", str(tmp_path / "old"))  # the earlier name still works
    assert default_root() == tmp_path / "old"
    monkeypatch.delenv("GRIDIFY_DATA_ROOT")
    assert default_root() == ROOT / "datasets"  # the repository layout


def _off_release(root: Path, classes=("bathtub", "bed"), per_split=3):
    """An official-layout ModelNet10 OFF release (tetrahedra) under root/ModelNet10."""
    tetra = "OFF\n4 4 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 2 1\n3 0 1 3\n3 0 3 2\n3 1 2 3\n"
    for cls in classes:
        for split in ("train", "test"):
            d = root / "ModelNet10" / cls / split
            d.mkdir(parents=True)
            for i in range(per_split):
                (d / f"{cls}_{i:04d}.off").write_text(tetra)
    return root


def test_modelnet_source_auto_finds_the_official_off_download(tmp_path, monkeypatch):
    _off_release(tmp_path)
    monkeypatch.setenv("GRIDIFY_DATA", str(tmp_path))
    with pytest.warns(UserWarning, match="only 2 of 10 class folders"):
        ds = build_dataset(C.resolve_config("modelnet10", ["data.num_points=64"]), "test")
    assert ds.source_format == "off" and ds.data_dir == tmp_path / "ModelNet10" and len(ds) == 6
    assert ds[0]["pos"].shape == (64, 3)
    with pytest.raises(
        Exception,
        match=r"ModelNet10 not found under .*elsewhere: expected one of the releases "
        r"normal_resampled, off, pcd",
    ):
        ModelNet(tmp_path / "elsewhere", name="10", source="auto")


def test_modelnet10_configs_find_the_pcd_release(shared_data):
    root = shared_data / "modelnet10_pcd"
    if not (root / "ModelNet10" / "pcd").is_dir():
        pytest.skip(f"the PCD release is not under {root}")
    for name in ("modelnet10", "modelnet10_smoke"):
        cfg = C.resolve_config(name, [f"data.root={root}"])
        ds = build_dataset(cfg, "test")
        assert ds.source_format == "pcd" and len(ds) == 908 and ds.sample_groups().tolist() == ds.labels.tolist()


def test_shapenet_route_speaks_the_config_keys_and_names_the_parts(tmp_path):
    """The ShapeNet configs' errors name the keys a user types (data.use_normals=false, not use_normals=False),
    and a model trained on ShapeNet-Part gets the parts' names as its class names (not part45)."""
    root = make_fake_shapenet(tmp_path)

    def build(*overrides, split="train"):
        return build_dataset(C.resolve_config("shapenet_ccnn", [f"data.root={root}", *overrides]), split)

    ds = build("data.num_points=32")
    info = dataset_info(ds, "segmentation")
    assert info["class_names"][12:16] == ["Chair/back", "Chair/seat", "Chair/leg", "Chair/arm"]
    assert info["class_names"][36:38] == ["Mug/handle", "Mug/body"] and len(info["class_names"]) == 50
    with pytest.raises(
        C.ConfigError,
        match=r"^data \(shapenet, split 'train'\): ShapeNetPart: data\.source=v0_points "
        r"has no normals; set data\.use_normals=false$",
    ):
        build("data.source=v0_points")
    with pytest.raises(
        C.ConfigError, match=r"^data\.categories: ShapeNetPart: categories must be .*unknown: Spaceship$"
    ):
        build("data.categories=[Spaceship, chair]")
    with pytest.raises(
        C.ConfigError, match=r"the test split has no shapes of data\.test\.categories=\[Airplane\] under"
    ):
        build("data.test.categories=[Airplane]", split="test")
    lists = root / "shapenetcore_partanno_segmentation_benchmark_v0_normal" / "train_test_split"
    (lists / "shuffled_val_file_list.json").unlink()
    with pytest.raises(DatasetNotFoundError) as exc:
        build(split="val")
    assert error_line(exc.value) == (
        f"ShapeNetPart (normal_txt): the val split list {lists / 'shuffled_val_file_list.json'} is missing (the "
        f"official release ships train_test_split/shuffled_{{train,val,test}}_file_list.json) (point --data-root at it)"
    )
    next((root / "shapenetcore_partanno_segmentation_benchmark_v0_normal").glob("*/chairtrain0.txt")).unlink()
    with pytest.raises(
        C.ConfigError,
        match=r"1 of 4 shapes listed in the train split are missing .*set "
        r"data\.skip_missing=true to use what is there",
    ):
        build()
    with pytest.warns(UserWarning, match="skipped"):
        assert len(build("data.skip_missing=true")) == 3


# --------------------------------------------------------------------------------------
# gridify download knows the configs' spellings and needs
# --------------------------------------------------------------------------------------
def test_archive_names_in_any_case_and_aliases():
    assert (
        resolve_archive("modelnet10") == resolve_archive("ModelNet10") == resolve_archive("MODELNET10") == "ModelNet10"
    )
    assert resolve_archive("modelnet40") == "ModelNet40"
    assert resolve_archive("shapenet") == "shapenetcore_partanno_segmentation_benchmark_v0_normal"
    with pytest.raises(ValueError, match=r"unknown archive 'modelnet99'; known: ModelNet40, ModelNet10, "):
        resolve_archive("modelnet99")


def test_configs_name_the_archives_they_need():
    configs = {name: C.resolve_config(name) for name in C.shipped_configs()}
    needs = {name: config_archives(cfg) for name, cfg in configs.items() if cfg["data"]["name"] != "folder"}
    assert needs["modelnet10"] == needs["modelnet10_smoke"] == needs["modelnet10_fast"] == ["ModelNet10"] and needs[
        "modelnet40"
    ] == ["ModelNet40"]
    assert needs["shapenet_ccnn"] == ["shapenetcore_partanno_segmentation_benchmark_v0_normal"]
    assert needs["procedural"] == []


def test_download_command_speaks_the_configs_names(tmp_path, capsys, monkeypatch):
    assert cli.main(["download", "--list"]) == 0
    listing = capsys.readouterr().out
    assert "configs: modelnet10, modelnet10_cpu, modelnet10_fast, modelnet10_mrconv, modelnet10_smoke" in listing
    assert cli.main(["download", "modelnet10", "--root", str(tmp_path), "--instructions"]) == 0
    assert str(tmp_path / "ModelNet10.zip") in capsys.readouterr().out
    assert cli.main(["download", "--config", "modelnet10_cpu", "--root", str(tmp_path), "--instructions"]) == 0
    assert "ModelNet10.zip" in capsys.readouterr().out
    assert cli.main(["download", "--config", "procedural"]) == 0
    assert "needs no download" in capsys.readouterr().out

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(SystemExit) as exc:
        cli.main(["download", "modelnet10", "--root", str(tmp_path), "--no-progress"])
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("gridify download: error: could not download 'ModelNet10.zip'")
    assert f"put it at {tmp_path / 'ModelNet10.zip'} and run again" in msg
    # the archive placed by hand (here: a tiny OFF release zipped) is extracted on the next call
    import zipfile

    _off_release(tmp_path / "src")
    with zipfile.ZipFile(tmp_path / "ModelNet10.zip", "w") as zf:
        for f in (tmp_path / "src").rglob("*.off"):
            zf.write(f, f.relative_to(tmp_path / "src").as_posix())
    with pytest.warns(UserWarning, match="no reference sha256"):
        assert cli.main(["download", "modelnet10", "--root", str(tmp_path), "--no-progress"]) == 0
    assert (tmp_path / "ModelNet10" / "bed" / "test" / "bed_0000.off").is_file()
    with pytest.warns(UserWarning, match="only 2 of 10 class folders"):
        assert ModelNet(tmp_path, name="10", source="auto", split="test").source_format == "off"


def test_the_folder_recipes_of_modelnet40_name_the_archive_they_read():
    """``gridify download --config modelnet40_thesis`` fetched nothing (data.name=folder needs a root): the
    ModelNet40 recipes name the official archive whose layout they read; a misspelt archive is a config error."""
    from gridify.training.config import ConfigError, resolve_config
    from gridify.training.data import config_archives

    for name in ("modelnet40_fast", "modelnet40_wide", "modelnet40_thesis"):
        assert config_archives(resolve_config(name)) == ["ModelNet40"], name
    with pytest.raises(ConfigError, match="data.archive"):
        config_archives(resolve_config("modelnet40_thesis", ["data.archive=ModelNet41"]))
