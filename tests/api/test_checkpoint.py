"""gridify.checkpoint: exported files rebuild their model; bad entries, sizes and weights are refused by name."""

import time

import numpy as np
import pytest
import torch

import gridify
from gridify.checkpoint import CheckpointError, build_model_from_checkpoint, export_model, load_checkpoint
from gridify.models import GridifiedClassifier


def _tiny_payload(**model_kwargs):
    kw = dict(in_channels=3, num_classes=4, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    kw.update(model_kwargs)
    model = GridifiedClassifier(**kw).eval()
    return model, dict(
        model_name="gridified_classifier",
        model_kwargs=kw,
        task="classification",
        info=dict(class_names=list("abcd"), num_points=32),
    )


NAN = float("nan")


def _with(t, index, value=NAN):
    t = t.clone()
    t[index] = value
    return t


def _tiny_classifier(**kw):
    args = dict(resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    args.update(kw)
    return GridifiedClassifier(3, 3, **args)


def _payload(**model_kwargs):
    kwargs = dict(in_channels=3, num_classes=3, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    kwargs.update(model_kwargs)
    return {
        "state_dict": {},
        "model_name": "gridified_classifier",
        "model_kwargs": kwargs,
        "task": "classification",
        "info": {},
        "config": {},
    }


def _export(tmp_path, **entries):
    torch.manual_seed(0)
    model = _tiny_classifier()
    raw = {
        "state_dict": model.state_dict(),
        "model_name": "gridified_classifier",
        "model_kwargs": dict(
            in_channels=3, num_classes=3, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3
        ),
        "task": "classification",
        "info": {"class_names": ["a", "b", "c"], "num_points": 50},
        "config": {"data": {"normalize": True}},
    }
    raw.update(entries)
    path = tmp_path / "model.pt"
    torch.save(raw, path)
    return path


def test_checkpoint_with_an_unknown_backbone_names_the_backbone(tmp_path):
    model, meta = _tiny_payload()
    path = tmp_path / "m.pt"
    export_model(path, model, meta)
    payload = torch.load(path, weights_only=True)
    payload["model_kwargs"]["backbone"] = "zzz"
    with pytest.raises(CheckpointError, match=r"cannot rebuild 'gridified_classifier'.*unknown backbone 'zzz'"):
        build_model_from_checkpoint(payload)
    payload["model_name"] = "zzz"
    with pytest.raises(CheckpointError, match=r"model 'zzz' is not registered \(known models: "):
        build_model_from_checkpoint(payload)


def test_fresh_mrconv_model_saved_unfolded_loads_and_predicts(tmp_path):
    torch.manual_seed(0)
    model, meta = _tiny_payload(backbone="mrconv")
    path = tmp_path / "mr.pt"
    export_model(path, model, meta, reparameterize=False)
    pts = np.random.default_rng(0).random((50, 3))
    folded = gridify.load(path).predict(pts)  # folds for the model's resolution, not a placeholder
    plain = gridify.load(path, reparameterize=False).predict(pts)
    np.testing.assert_allclose(folded.probabilities, plain.probabilities, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(resolution=100000), r"resolution=100000 with 8 channels .* would need"),
        (dict(hidden_channels=10**9), r"hidden_channels=1000000000, depth=1 .* would need"),
        (dict(backbone="unet", depth=60), r"channel_multiplier=2, depth=60 .* would need"),
        (dict(num_classes=10**13, backbone="resnet"), r"would need"),
    ],
)
def test_checkpoint_sizes_are_refused_before_anything_is_allocated(kwargs, match):
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match=match):
        build_model_from_checkpoint(_payload(**kwargs))
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize(
    "entries, match",
    [
        (dict(state_dict="weights"), "entry 'state_dict' must be a dict of tensors, got str"),
        (dict(state_dict={"gridify.x": [1, 2]}), r"entry state_dict\['gridify.x'\] must be a tensor"),
        (dict(info="nothing"), "entry 'info' must be a dict, got str"),
        (dict(model_kwargs=[1, 2]), "entry 'model_kwargs' must be a dict of keyword arguments, got list"),
        (dict(model_name=7), "entry 'model_name' must be a string, got int"),
        (
            dict(task="regression"),
            "entry 'task' is 'regression'; gridify.load serves the models of the tasks \\['classification', 'segmentation'",
        ),
        (dict(task=3), "entry 'task' must be a string, got int"),
        (dict(class_names="abc"), "entry 'class_names' must be a list of strings or None"),
        (dict(config={"data": {"num_points": "1024"}}), r"entry config\['data'\]\['num_points'\] must be an integer"),
        (dict(info={"category_to_parts": [[0, -1]]}), r"entry info\['category_to_parts'\] must be a list of lists"),
        (dict(reparameterized="yes"), "entry 'reparameterized' must be a bool"),
    ],
)
def test_checkpoint_entries_of_the_wrong_type_are_named(tmp_path, entries, match):
    with pytest.raises(CheckpointError, match=match):
        gridify.load(_export(tmp_path, **entries))


def test_lightning_checkpoint_with_a_bad_info_entry(tmp_path):
    path = tmp_path / "last.ckpt"
    torch.save(
        {
            "state_dict": {},
            "hyper_parameters": {
                "model_name": "gridified_classifier",
                "model_kwargs": {},
                "task": "classification",
                "info": "x",
                "config": {},
            },
        },
        path,
    )
    with pytest.raises(CheckpointError, match="entry 'info' must be a dict, got str"):
        load_checkpoint(path)
    torch.save({"state_dict": {}, "hyper_parameters": "x"}, path)
    with pytest.raises(CheckpointError, match="entry 'hyper_parameters' must be a dict, got str"):
        load_checkpoint(path)


def test_checkpoint_weights_are_checked_before_loading(tmp_path):
    torch.manual_seed(0)
    state = _tiny_classifier().state_dict()
    bad = dict(state)
    key = next(k for k, v in state.items() if v.is_floating_point())
    bad[key] = _with(state[key], (0,) * state[key].dim())
    with pytest.raises(CheckpointError, match=rf"entry state_dict\['{key}'\] holds NaN/Inf values"):
        gridify.load(_export(tmp_path, state_dict=bad))
    missing = {k: v for k, v in state.items() if k != key}
    with pytest.raises(CheckpointError, match=rf"missing \['{key}'\]"):
        gridify.load(_export(tmp_path, state_dict=missing))
    wide = dict(state, **{key: torch.zeros(3, *state[key].shape)})
    with pytest.raises(CheckpointError, match=rf"entry state_dict\['{key}'\] has shape \(3, "):
        gridify.load(_export(tmp_path, state_dict=wide))
    ints = dict(state, **{key: state[key].long()})
    with pytest.raises(CheckpointError, match=rf"entry state_dict\['{key}'\] has dtype torch.int64"):
        gridify.load(_export(tmp_path, state_dict=ints))
    with pytest.raises(CheckpointError, match="class_names names 2 classes but the model has 3 outputs"):
        gridify.load(_export(tmp_path, info={"class_names": ["a", "b"]}))
    with pytest.raises(ValueError, match="gridify.load: device must be a torch.device or a name"):
        gridify.load(_export(tmp_path), device="gpu9")
    assert gridify.load(_export(tmp_path)).predict(np.random.rand(50, 3)).probabilities.shape == (3,)


# --------------------------------------------------------------------------- the model_task record
def test_an_exported_model_records_the_task_of_its_network_and_readers_use_the_record(tmp_path):
    """``export_model`` records ``model_task``; a reader checks the file's ``task`` against the record, not against
    a guess from the model's class (edited metadata that agrees with the class but not with the record is refused)."""
    from gridify.checkpoint import MODEL_TASK, recorded_model_task

    model, meta = _tiny_payload()
    export_model(tmp_path / "model.pt", model, meta)
    raw = torch.load(tmp_path / "model.pt", weights_only=True)
    assert raw[MODEL_TASK] == "classification"
    payload = load_checkpoint(tmp_path / "model.pt")
    assert payload[MODEL_TASK] == "classification" and recorded_model_task(payload) == "classification"
    torch.save(dict(raw, **{MODEL_TASK: "segmentation"}), tmp_path / "edited.pt")
    with pytest.raises(CheckpointError, match=r"entry 'task' is 'classification' but the model .* is a segmentation"):
        load_checkpoint(tmp_path / "edited.pt")
    torch.save(dict(raw, **{MODEL_TASK: "detection"}), tmp_path / "unknown.pt")
    with pytest.raises(CheckpointError, match=r"entry 'model_task' must be a registered task \(classification, "):
        load_checkpoint(tmp_path / "unknown.pt")
    del raw[MODEL_TASK]  # an older file: the task of its registered model, found from its class
    torch.save(raw, tmp_path / "old.pt")
    assert load_checkpoint(tmp_path / "old.pt")[MODEL_TASK] is None
    assert gridify.load(tmp_path / "old.pt").task == "classification"


def test_every_built_in_model_has_its_task_by_declaration_or_by_a_task_table():
    """``model_task`` of a built-in model (what a checkpoint records) never reads a ``forward`` signature: the guess
    of :func:`gridify.checkpoint.task_from_forward` is left to older files of models that declare nothing."""
    from gridify import checkpoint as CK
    from gridify.registry import MODELS
    from gridify.tasks import get_task, task_names

    for name in MODELS.names():
        cls = MODELS.get(name)
        declared = getattr(cls, "task", None)
        listed = [t for t in task_names() if name in get_task(t).models]
        assert declared in task_names() or len(listed) == 1, name
        assert CK.model_task(cls) == (declared if declared in task_names() else listed[0]), name
    # where the old guess answers, it agrees with the tables (the scene segmenter takes no category keyword)
    guessed = {n: CK.task_from_forward(MODELS.get(n)) for n in MODELS.names() if n != "scene_segmenter"}
    assert all(CK.model_task(MODELS.get(n)) == t for n, t in guessed.items()), guessed
