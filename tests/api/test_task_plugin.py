"""A new task needs no edit of the api or the command line: it is a registered Task, and its way to predict
is either an existing predictor (``predicted_by``) or a TaskPredictor registered under its name.

Both toy tasks are registered here, served by ``gridify.load`` / ``Predictor.predict`` and ``gridify predict``
(through ``gridify.cli.main``), and unregistered at the end so that the registries are as before.
"""

import json

import numpy as np
import pytest
import torch

import gridify
from gridify.api import PREDICTORS, Prediction, TaskPredictor, predictor_for
from gridify.api.task_predictors import ClassificationPredictor, check_predict_arguments, served_tasks
from gridify.registry import TASKS
from gridify.tasks import ClassificationTask, get_task

SCORES, ALIKE = "toy_cloud_scores", "toy_classification_alike"


class ToyScoresTask(ClassificationTask):
    """One label per cloud, predicted by a predictor of its own (one pass over the whole cloud)."""

    name = SCORES
    datasets = ()
    models = ()


class ToyAlikeTask(ClassificationTask):
    """One label per cloud, predicted as classification is (no predictor of its own)."""

    name = ALIKE
    datasets = ()
    models = ()
    predicted_by = "classification"


class ToyScoresPredictor(TaskPredictor):
    """The whole cloud in one forward pass (no subsets); the logits kept in ``extra``."""

    def predict(
        self,
        predictor,
        points,
        normals=None,
        category=None,
        *,
        num_votes=None,
        seed=0,
        batch_size=8,
        estimate_normals=False,
        features=None,
        progress=None,
        up_axis="z",
        where="Predictor.predict",
    ):
        check_predict_arguments(where, 1 if num_votes is None else num_votes, batch_size, seed, estimate_normals)
        cloud = predictor.prepare(points, normals, estimate_normals=estimate_normals, up_axis=up_axis, where=where)
        pos = torch.from_numpy(cloud["pos"])[None]
        logits = predictor.model(pos, torch.from_numpy(np.ascontiguousarray(cloud["x"]))[None])[0].float()
        probs = torch.softmax(logits, -1).numpy()
        return Prediction(
            labels=np.asarray(probs.argmax(-1), dtype=np.int64),
            probabilities=probs,
            class_names=list(predictor.class_names),
            task=predictor.task,
            num_points=len(pos[0]),
            source=cloud["source"],
            extra={"logits": logits.numpy(), "one_pass": True},
        )


@pytest.fixture
def plugin():
    """The toy tasks and the predictor, registered for one test and removed after it."""
    TASKS.register(SCORES, ToyScoresTask)
    TASKS.register(ALIKE, ToyAlikeTask)
    PREDICTORS.register(SCORES, ToyScoresPredictor)
    try:
        yield
    finally:
        TASKS.unregister(SCORES)
        TASKS.unregister(ALIKE)
        PREDICTORS.unregister(SCORES)


def _checkpoint(path, task):
    """A tiny classifier whose metadata says ``task`` (as a plugin's training would write it)."""
    from gridify.models import build_model

    kwargs = dict(in_channels=3, num_classes=3, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    torch.manual_seed(0)
    model = build_model("gridified_classifier", **kwargs)
    meta = {
        "model_name": "gridified_classifier",
        "model_kwargs": kwargs,
        "task": task,
        "info": {"class_names": ["a", "b", "c"], "num_points": 50},
        "config": {},
    }
    torch.save(dict(meta, state_dict=model.state_dict()), path)
    return path


def _cloud(n=80, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 3)) * 2.0 + 1.0


def test_a_task_with_a_predictor_of_its_own_is_served_without_an_api_edit(plugin, tmp_path):
    assert SCORES in served_tasks() and isinstance(predictor_for(SCORES), ToyScoresPredictor)
    model = gridify.load(_checkpoint(tmp_path / "model.pt", SCORES))
    assert model.task == SCORES and not model.dense and isinstance(model.task_predictor, ToyScoresPredictor)
    pos = _cloud()
    pred = model.predict(pos)
    assert pred.extra["one_pass"] and pred.probabilities.shape == (3,) and pred.labels.shape == ()
    assert abs(float(pred.probabilities.sum()) - 1.0) < 1e-5
    # the same numbers as the model on the normalized cloud (no subsets: 80 points in one pass)
    cloud = model.prepare(pos)
    with torch.no_grad():
        want = model.model(torch.from_numpy(cloud["pos"])[None], torch.from_numpy(cloud["x"])[None])[0]
    np.testing.assert_allclose(pred.extra["logits"], want.numpy(), rtol=1e-5, atol=1e-6)


def test_a_task_that_predicts_like_classification_names_that_predictor(plugin, tmp_path):
    assert isinstance(predictor_for(ALIKE), ClassificationPredictor)
    path = _checkpoint(tmp_path / "model.pt", ALIKE)
    model = gridify.load(path)
    pos = _cloud(n=120)
    pred = model.predict(pos, seed=3)
    as_cls = gridify.load(_checkpoint(tmp_path / "cls.pt", "classification")).predict(pos, seed=3)
    np.testing.assert_allclose(pred.probabilities, as_cls.probabilities, rtol=1e-6)
    assert pred.task == ALIKE and pred.names == as_cls.names


def test_gridify_predict_serves_the_new_task_through_the_command_line(plugin, tmp_path, capsys):
    from gridify.cli import main

    path = _checkpoint(tmp_path / "model.pt", SCORES)
    np.save(tmp_path / "cloud.npy", _cloud().astype(np.float32))
    out = tmp_path / "pred.json"
    assert main(["predict", str(tmp_path / "cloud.npy"), "--ckpt", str(path), "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    want = gridify.load(path).predict(np.load(tmp_path / "cloud.npy"))
    assert written["task"] == SCORES and written["labels"] == int(want.labels)
    np.testing.assert_allclose(written["probabilities"], want.probabilities, atol=1e-6)
    assert "labels written to" in capsys.readouterr().out


def test_the_registries_are_clean_after_the_plugin():
    assert SCORES not in TASKS and ALIKE not in TASKS and SCORES not in PREDICTORS
    assert SCORES not in served_tasks()
    with pytest.raises(ValueError, match="Predictor: task must be one of"):
        gridify.Predictor(torch.nn.Linear(3, 3), task=SCORES, class_names=["a"], num_points=10, in_channels=3)
    assert get_task("classification").predicted_by == ""  # the built-in tasks are served under their own names


def test_a_predictor_that_is_not_a_task_predictor_is_refused_when_it_is_registered():
    """It registered, and the first ``predict`` failed deep inside the call (``cls()`` of a function, a missing
    ``predict``); now the registration itself names the name, what was given and the class to subclass."""

    def predict(predictor, points, **options):
        return None

    class NotOne:
        def predict(self, predictor, points, **options):
            return None

    for given, what in ((predict, "function"), (NotOne, "class NotOne"), (NotOne(), "NotOne")):
        with pytest.raises(
            TypeError,
            match=rf"predictor registry: 'plugin_task' must be a subclass of "
            rf"gridify\.api\.task_predictors\.TaskPredictor, got {what}",
        ):
            PREDICTORS.register("plugin_task", given)
    assert "plugin_task" not in PREDICTORS
