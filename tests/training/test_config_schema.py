"""Every config key has a declared type and range (gridify/training/schema.py): the check, the key listing and
docs/config_keys.md come from it; model, optimizer and trainer errors name the config key; config paths that
are folders or FIFOs are said to be so.

The bad-value table is generated from the schema: every declared key gets a wrong-type and an out-of-range
value, and the error must name the key.
"""

import copy
import math
import os
import signal
from pathlib import Path

import pytest

pytest.importorskip("yaml")

import yaml  # noqa: E402

from gridify.registry import DATASETS, MODELS  # noqa: E402
from gridify.training import config as C  # noqa: E402
from gridify.training import schema as S  # noqa: E402
from gridify.training.data import make_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BASE = C.resolve_config(None)


def _owner(section: str, arg: str) -> str:
    """A dataset / model that takes ``arg`` (so the key is checked, not refused as unknown)."""
    if section == "data":
        return next(n for n in DATASETS.names() if arg in S.dataset_keys(n))
    return next(n for n in MODELS.names() if arg in S.model_keys(n))


def _config_with(key: str, value):
    cfg = copy.deepcopy(BASE)
    parts = key.split(".")
    if parts[0] == "data" and parts[1] in S.DATASET_KEYS:
        cfg["data"]["name"] = _owner("data", parts[1])
    if parts[0] == "model" and parts[1] != "name":
        cfg["model"]["name"] = _owner("model", parts[1])
    node = cfg
    for p in parts[:-1]:
        node = node[p]
    node[parts[-1]] = value
    return cfg


CASES = [(key, kind, value) for key, spec in S.declared_keys() for kind, value in spec.bad_values()]


def test_every_declared_key_has_a_wrong_type_and_an_out_of_range_case():
    keys = [k for k, _ in S.declared_keys()]
    assert len(keys) == len(set(keys)) and len(keys) > 100
    for key, spec in S.declared_keys():
        kinds = {kind for kind, _ in spec.bad_values()}
        assert "type" in kinds, key
        assert "range" in kinds or isinstance(spec, S.Mapping), key
    # every key of the defaults is declared
    flat = []

    def walk(prefix, d):
        for k, v in d.items():
            name = f"{prefix}.{k}" if prefix else k
            if isinstance(v, dict) and k not in ("train", "val", "test"):
                walk(name, v)
            else:
                flat.append(name)

    walk("", S.DEFAULTS)
    assert set(flat) <= set(keys)


@pytest.mark.parametrize("key, kind, value", CASES, ids=[f"{k}-{kind}-{v!r}"[:60] for k, kind, v in CASES])
def test_bad_value_is_a_config_error_naming_the_key(key, kind, value):
    with pytest.raises(C.ConfigError) as err:
        C.check_config(_config_with(key, value))
    assert key in str(err.value)


def test_every_default_passes_its_own_rule():
    def walk(prefix, defaults, specs):
        for key, value in defaults.items():
            name = f"{prefix}.{key}" if prefix else key
            if isinstance(specs[key], dict):
                walk(name, value, specs[key])
            else:
                assert specs[key].ok(value), (name, value, specs[key].rule())

    walk("", {k: v for k, v in S.DEFAULTS.items() if k != "model"}, S.SCHEMA)
    C.check_config(copy.deepcopy(BASE))


# the cases the issue listed, written as a user writes them (YAML overrides)
LISTED = [
    ("model.k=0", "model.k must be a positive integer, got 0"),
    ("optim.lr=.nan", "optim.lr must be a finite number > 0, got nan"),
    ("optim.lr=.inf", "optim.lr must be a finite number > 0, got inf"),
    ("optim.lr=0", "optim.lr must be a finite number > 0, got 0"),
    ("optim.betas=[0.9, 1.0]", "optim.betas must be a list of 2 items, each a number in [0, 1), got [0.9, 1.0]"),
    ("optim.betas=0.9", "optim.betas must be a list of 2 items"),
    ("optim.weight_decay=-.inf", "optim.weight_decay must be a finite number >= 0"),
    ("optim.min_lr=0.1", "optim.min_lr must be at most optim.lr (0.005), got 0.1"),
    ("trainer.precision=8", "trainer.precision must be one of ['32-true', "),
    ("trainer.precision=bf17-mixed", "trainer.precision must be one of"),
    ("trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches must be a positive integer, got 0"),
    ("trainer.check_val_every_n_epoch=0", "trainer.check_val_every_n_epoch must be a positive integer, got 0"),
    ("trainer.devices=0", "trainer.devices must be a positive count, -1 (all), 'auto', a list of device indices"),
    ("trainer.devices=gpu7", "trainer.devices must be a positive count"),
    ("trainer.gradient_clip_val='1.0'", "trainer.gradient_clip_val must be null or a finite number >= 0, got '1.0'"),
    ("trainer.gradient_clip_val=.nan", "trainer.gradient_clip_val must be null or a finite number >= 0, got nan"),
    ("trainer.max_steps='10'", "trainer.max_steps must be a positive integer or -1, got '10'"),
    ("trainer.max_steps=0", "trainer.max_steps must be a positive integer or -1, got 0"),
    ("trainer.strategy=ddp_bogus", "trainer.strategy must be one of ['auto', 'ddp', "),
    ("trainer.accelerator=gpu7", "trainer.accelerator must be one of ['auto', 'cpu', "),
    ("trainer.deterministic=always", "trainer.deterministic must be true or false or 'warn', got 'always'"),
    ("trainer.max_epochs=2.0", "trainer.max_epochs must be a positive integer, got 2.0"),
    ("trainer.checkpoint.keep_all='false'", "trainer.checkpoint.keep_all must be true or false, got 'false'"),
    ("data.drop_last='false'", "data.drop_last must be true or false, got 'false'"),
    ("data.drop_last=1", "data.drop_last must be true or false, got 1"),
    ("data.use_normals='no'", "data.use_normals must be true or false, got 'no'"),
    ("data.num_points=0", "data.num_points must be null or a positive integer, got 0"),
    ("data.val={num_samples_per_class: 0}", "data.val.num_samples_per_class must be a positive integer, got 0"),
    ("data.test={bogus: 1}", "unknown key data.test.bogus for dataset procedural; its keys: "),
    ("data.bogus=1", "unknown key data.bogus for dataset procedural"),
    ("data.split=test", "data.split is set by the run"),
    ("model.bogus=1", "unknown key model.bogus for model gridified_classifier; its keys: "),
    ("model.kernel_size=4", "model.kernel_size must be an odd positive integer or 'global', got 4"),
    ("model.dropout=1.0", "model.dropout must be a number in [0, 1), got 1.0"),
    ("model.omega0=.nan", "model.omega0 must be a number in (0, 10000], got nan"),
    ("model.resolution=1", "model.resolution must be an integer >= 2, got 1"),
    ("model.backbone=nope", "model.backbone must be one of ['ccnn', "),
    ("model.name=bogus", "model.name: unknown model 'bogus'; known models: "),
    ("seed=1.5", "seed must be an integer in [0, 2**32 - 1], got 1.5"),
]


@pytest.mark.parametrize("override, message", LISTED, ids=[o for o, _ in LISTED])
def test_listed_bad_values(override, message):
    with pytest.raises(C.ConfigError) as err:
        C.resolve_config("procedural", [override])
    assert str(err.value).startswith(message), str(err.value)


def test_the_command_line_says_it_in_one_line():
    from gridify.training import cli

    for override, message in LISTED[:3]:
        with pytest.raises(SystemExit) as exc:
            cli.main(["--config", "procedural", override])
        text = str(exc.value)
        assert "\n" not in text and "config error" in text and message in text, text


def test_every_shipped_config_passes_the_schema():
    names = C.shipped_configs()
    assert len(names) >= 14
    for name in names:
        C.check_config(C.resolve_config(name))
    assert "temporal/dynamic_shapes" in names  # the temporal model trains through gridify train too


def test_every_model_argument_is_declared_and_its_default_passes():
    import inspect

    for name in MODELS.names():
        for key in S.model_keys(name):
            assert key in S.MODEL_KEYS, f"declare model.{key} ({name}) in gridify/training/config_keys.py MODEL_KEYS"
        for p in inspect.signature(MODELS.get(name)).parameters.values():
            if p.default is not inspect.Parameter.empty and p.name in S.MODEL_KEYS:
                assert S.MODEL_KEYS[p.name].ok(p.default), (name, p.name, p.default)


def test_every_argument_of_the_point_cloud_datasets_is_declared():
    for name in ("folder", "modelnet", "procedural", "shapenet"):
        for key in S.dataset_keys(name):
            assert key in S.DATASET_KEYS or key in S.RUN_DATA_KEYS, f"declare data.{key} ({name}) in DATASET_KEYS"


SMALL = dict(in_channels=3, num_classes=3, hidden_channels=8, depth=1, kernel_size=3, resolution=3, k=3)
# the declared ranges (not the int64 bound every integer has, nor strict booleans, where models are laxer)
MODEL_RANGE_CASES = [
    (name, key, value)
    for key, spec in S.MODEL_KEYS.items()
    for kind, value in spec.bad_values()
    if kind == "range"
    and key not in ("in_channels", "num_classes")
    and not isinstance(spec, S.Bool)
    and not (isinstance(value, int) and value > S.INT64_MAX)
    for name in [next(n for n in MODELS.names() if key in S.model_keys(n))]
]


@pytest.mark.parametrize(
    "name, key, value", MODEL_RANGE_CASES, ids=[f"{n}-{k}-{v!r}"[:60] for n, k, v in MODEL_RANGE_CASES]
)
def test_the_schema_refuses_no_value_the_model_accepts(name, key, value):
    """The declared ranges are not stricter than the model: its constructor refuses the out-of-range
    values too (so the schema only says it earlier, naming the key)."""
    kwargs = {k: v for k, v in SMALL.items() if k in S.model_keys(name) or k in ("in_channels", "num_classes")}
    kwargs[key] = value
    with pytest.raises(C.ConfigError) as err:
        make_model(name, kwargs)
    assert "model" in str(err.value)


def test_a_model_value_error_names_the_model_key():
    """Values the schema cannot judge alone (lower bound above the upper one) still name the key."""
    with pytest.raises(C.ConfigError, match=r"^model\.bounds: RegularGrid: upper must exceed lower"):
        make_model("gridified_classifier", dict(SMALL, bounds=[1.0, -1.0]))
    with pytest.raises(C.ConfigError, match=r"^model\.k: Gridification: k must be a positive integer, got 0"):
        make_model("gridified_classifier", dict(SMALL, k=0))


def test_the_optimizer_names_the_optim_key():
    import torch

    from gridify.training.module import build_optimizer

    params = [torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(C.ConfigError, match=r"^optim\.betas: Invalid beta parameter"):
        build_optimizer(params, dict(lr=1e-3, weight_decay=0.0, betas=[0.9, 1.5]))
    with pytest.raises(C.ConfigError, match=r"^optim\.lr: Invalid learning rate"):
        build_optimizer(params, dict(lr=-1.0, weight_decay=0.0, betas=[0.9, 0.99]))
    assert isinstance(build_optimizer(params, dict(lr=1e-3, weight_decay=0.0)), torch.optim.AdamW)


def test_the_trainer_names_the_trainer_key(tmp_path):
    pytest.importorskip("lightning")
    from gridify.training.runner import build_trainer

    tr = C.resolve_config(None, ["trainer.accelerator=mps"])["trainer"]
    with pytest.raises(C.ConfigError, match=r"^trainer\.accelerator='mps': .*MPSAccelerator"):
        build_trainer(tr, tmp_path, [], True)
    tr = C.resolve_config(None, ["trainer.accelerator=cpu", "trainer.strategy=fsdp", "trainer.devices=2"])["trainer"]
    with pytest.raises(C.ConfigError, match=r"^trainer\.(strategy|accelerator)=.*fsdp"):
        build_trainer(tr, tmp_path, [], True)
    assert (
        S.trainer_error(
            {"devices": [5], "accelerator": "cpu"},
            TypeError("`devices` selected with `CPUAccelerator` should be an int > 0."),
        )
        .args[0]
        .startswith("trainer.devices=[5]: ")
    )


def test_the_schema_rules_match_lightning():
    pytest.importorskip("lightning")
    from lightning.pytorch.strategies import StrategyRegistry

    assert set(S.STRATEGIES) - {"auto"} <= set(StrategyRegistry.available_strategies())
    from lightning.fabric.plugins.precision import precision as P

    accepted = (
        set(P._PRECISION_INPUT_STR.__args__)
        | set(P._PRECISION_INPUT_INT.__args__)
        | set(P._PRECISION_INPUT_STR_ALIAS.__args__)
    )
    assert set(S.PRECISIONS) <= accepted


def test_config_paths_that_are_folders_or_fifos_are_named_as_such(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(C.ConfigError, match=r"dir\.yaml is a folder, not a config file"):
        C.resolve_config(str(tmp_path / "dir.yaml"))
    with pytest.raises(C.ConfigError, match=r"dir\.yaml is a folder, not a config file"):
        C.resolve_config(str(tmp_path / "dir"))
    (tmp_path / "child.yaml").write_text("_base_: dir\n")
    with pytest.raises(C.ConfigError, match=r"child\.yaml: _base_ 'dir': config 'dir': .*dir\.yaml is a folder"):
        C.resolve_config(str(tmp_path / "child.yaml"))
    with pytest.raises(C.ConfigError, match=r"is a folder, not a config file"):
        C.load_yaml(tmp_path / "dir.yaml")
    if not hasattr(os, "mkfifo"):
        return
    os.mkfifo(tmp_path / "pipe.yaml")
    (tmp_path / "piped.yaml").write_text("_base_: [procedural, pipe]\n")
    old = signal.signal(signal.SIGALRM, lambda *a: pytest.fail("the FIFO was opened (blocked)"))
    signal.alarm(20)
    try:
        for target in ("pipe.yaml", "pipe", "piped.yaml"):
            with pytest.raises(C.ConfigError, match=r"pipe\.yaml is not a regular file but a named pipe \(FIFO\)"):
                C.resolve_config(str(tmp_path / target))
        with pytest.raises(C.ConfigError, match=r"named pipe"):
            C.load_yaml(tmp_path / "pipe.yaml")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    with pytest.raises(C.ConfigError, match=r"^config 'nothing' not found"):
        C.resolve_config("nothing")


def test_docs_key_table_is_up_to_date():
    doc = ROOT / "docs" / "config_keys.md"
    assert doc.read_text() == S.markdown_table(), (
        "regenerate: python -m gridify.training.schema --markdown > docs/config_keys.md"
    )
    for key, _ in S.declared_keys():
        assert f"| `{key}` |" in doc.read_text()


def test_key_listing_and_annotated_config(capsys):
    S.main([])
    out = capsys.readouterr().out
    assert "optim.lr" in out and "a finite number > 0" in out and "trainer.precision" in out
    cfg = C.resolve_config("procedural")
    text = S.annotated_yaml(cfg)
    assert yaml.safe_load(text) == cfg  # the comments change nothing
    assert "  lr: 0.005  # a finite number > 0\n" in text and "  k: 8  # a positive integer\n" in text
    assert "  drop_last: false  # true or false\n" in text


def test_numbers_are_finite_everywhere():
    for key, spec in S.declared_keys():
        for bad in (math.nan, math.inf):
            assert not spec.ok(bad) or isinstance(spec, S.Mapping), key


TINY = [
    "data.num_points=48",
    "data.num_samples_per_class=1",
    "data.classes=[box, sphere]",
    "data.batch_size=2",
    "data.augmentations=[]",
    "model.resolution=3",
    "model.k=3",
    "model.hidden_channels=8",
    "model.depth=1",
    "model.kernel_size=3",
    "trainer.max_epochs=1",
    "trainer.num_threads=1",
    "trainer.progress_bar=false",
    "trainer.plots=false",
]


@pytest.mark.parametrize(
    "override, start",
    [
        ("model.bounds=[1.0, -1.0]", "model.bounds: RegularGrid: upper must exceed lower"),
        ("trainer.accelerator=mps", "trainer.accelerator='mps': `MPSAccelerator` can not run on your system"),
    ],
)
def test_a_run_reports_model_and_trainer_errors_in_one_line(tmp_path, override, start):
    """Values only the model or Lightning can judge end the run with one line naming the key, before training."""
    pytest.importorskip("lightning")
    from gridify.training import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["--config", "procedural", *TINY, f"output_dir={tmp_path / 'out'}", override])
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"train.py: error: {start}"), text
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.mark.parametrize("seed", ["seed=-1", "seed=4294967296", "seed=true"])
def test_config_seed_outside_the_trainer_range_is_a_config_error(seed):
    from gridify.training.config import ConfigError, resolve_config

    with pytest.raises(ConfigError, match=r"seed must be an integer in \[0, 2\*\*32 - 1\]"):
        resolve_config("procedural", [seed])


def test_config_with_an_unknown_model_or_backbone_names_it():
    from gridify.training.config import ConfigError
    from gridify.training.data import make_model

    with pytest.raises(ConfigError, match="model.name: unknown model 'nope'; known models: "):
        make_model("nope", {})
    with pytest.raises(ConfigError, match="model 'gridified_classifier': unknown backbone 'zzz'"):
        make_model("gridified_classifier", dict(in_channels=3, num_classes=4, backbone="zzz"))


VALUES_THE_RUN_CANNOT_USE = [
    ("scene_procedural", ["data.voxel_size=1e-300"], "data.voxel_size must be null or a finite number >= 1e-06"),
    (
        "temporal/dynamic_shapes",
        ["data.frame_interval=1e300"],
        "data.frame_interval must be a number in [1e-06, 1e+06]",
    ),
    ("temporal/dynamic_shapes", ["data.frame_interval=1e-300"], "data.frame_interval must be a number in [1e-06"),
    ("temporal/dynamic_shapes", ["model.time_scale=1e300"], "model.time_scale must be a number in [1e-12, 1e+12]"),
    ("temporal/dynamic_shapes", ["model.time_scale=1e38"], "model.time_scale must be a number in [1e-12, 1e+12]"),
    ("temporal/dynamic_shapes", ["model.first_timespan=1e300"], "model.first_timespan must be a number in [0, 1e+12]"),
    (
        "scene_procedural",
        ["data.features=[color]", "model.in_channels=4"],
        "data.features: ['color'] gives 3 column(s) per point but model.in_channels is 4",
    ),
    (
        "scene_procedural",
        ["data.features=[color, height]", "data.test.features=[height]"],
        "data.test.features: ['height'] gives 1 column(s) per point but data.features ['color', 'height'] gives the "
        "model 4 (train)",
    ),
    (
        "semantickitti_mini",
        ["data.features=[strength, intensity, height]"],
        "data.features: features=['strength', 'intensity', 'height']: 'intensity' and 'strength' are the same feature",
    ),
    ("scene_procedural", ["data.val.features=[height, height]"], "data.val.features: features=['height', 'height']"),
]


@pytest.mark.parametrize("config, overrides, message", VALUES_THE_RUN_CANNOT_USE, ids=lambda v: str(v)[:40])
def test_values_the_run_cannot_use_are_refused_before_it_naming_the_key(config, overrides, message):
    """A voxel size of 1e-300, frame intervals and time scales that float32 cannot hold, features whose width is not
    the model's: accepted by the check and failing mid-run inside the model before, refused by it now."""
    with pytest.raises(C.ConfigError) as err:
        C.resolve_config(config, overrides)
    assert str(err.value).startswith(message), str(err.value)
    if config == "scene_procedural":  # the same width under other names is fine
        C.resolve_config(config, ["data.features=[color, height]", "data.test.features=[normal, height]"])


def test_model_in_channels_against_the_dataset_own_features():
    """data.features null (the dataset's own) cannot be judged by the config check: the run refuses an explicit
    model.in_channels of another width before it builds the model."""
    from gridify.training.data import fill_model_kwargs

    cfg = C.resolve_config("scene_procedural", ["model.in_channels=5"])
    with pytest.raises(C.ConfigError, match=r"model.in_channels: 5, but the data give 4 column\(s\) per point"):
        fill_model_kwargs(cfg, {"in_channels": 4, "num_outputs": 3})


def test_augmentation_doc_names_every_augmentation_and_a_config_builds_flip():
    doc = S.markdown_table()
    line = next(row for row in doc.splitlines() if row.startswith("| `data.augmentations`"))
    for name in C.AUGMENTATIONS:
        assert name in line, f"data.augmentations' doc does not name {name!r}"
    specs = C.parse_augmentations(["rotate_z", {"name": "flip", "axes": [0], "p": 1.0}])
    assert specs == [("rotate_z", {}), ("flip", {"axes": [0], "p": 1.0})]
    with pytest.raises(C.ConfigError, match=r"flip"):
        C.parse_augmentations([{"name": "flip", "p": 2}])
