"""Each task's predictor declares the options it takes (``TaskPredictor.options`` / ``inspect_options``):
``Predictor.predict(points, **options)`` hands them to it, and an option of another task is refused naming the
tasks that take it, before anything is read or run."""

import inspect

import numpy as np
import pytest

from gridify import Predictor
from gridify.api.task_predictors import (
    OPTIONS,
    PREDICTORS,
    SHARED_OPTIONS,
    ClassificationPredictor,
    PartSegmentationPredictor,
    ScenePredictor,
    TaskPredictor,
    entry_options,
    predictor_for,
)
from gridify.models import build_model

TINY = dict(in_channels=3, num_classes=2, resolution=3, k=2, hidden_channels=4, depth=1, kernel_size=3)


def _predictor(task, model="gridified_classifier"):
    return Predictor(build_model(model, **TINY), task=task, class_names=["a", "b"], num_points=32, in_channels=3)


def _cloud(n=40):
    return np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32)


@pytest.mark.parametrize("cls", [ClassificationPredictor, PartSegmentationPredictor, ScenePredictor])
def test_every_declared_option_is_a_keyword_of_predict_and_inspect(cls):
    for entry in ("predict", "inspect"):
        declared = cls().option_names(entry)
        params = inspect.signature(getattr(cls, entry)).parameters
        keywords = {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY} - {"up_axis", "where"}
        takes_more = any(p.kind is p.VAR_KEYWORD for p in params.values())
        assert set(declared) <= keywords or takes_more, (cls.__name__, entry, declared)
        assert set(SHARED_OPTIONS) - {"batch_size"} <= set(declared), (cls.__name__, entry)
        assert all(name in OPTIONS for name in declared)


def test_the_built_in_predictors_take_their_own_options_only():
    cls, seg, scene = (predictor_for(t) for t in ("classification", "segmentation", "scene_segmentation"))
    assert cls.takes("num_votes") and scene.takes("num_votes") and not seg.takes("num_votes")
    assert scene.takes("max_fragments") and not cls.takes("max_fragments") and not seg.takes("max_fragments")
    assert scene.takes("progress", "inspect") and not scene.takes("batch_size", "inspect")
    assert not scene.takes("category") and cls.takes("category") and seg.takes("category")
    assert entry_options("predict")[: len(SHARED_OPTIONS)] == list(SHARED_OPTIONS)
    assert "features" in entry_options("predict") and "features" not in entry_options("inspect")
    assert not scene.one_grid and cls.one_grid and seg.one_grid


def test_an_option_of_another_task_is_refused_naming_the_tasks_that_take_it():
    seg = _predictor("segmentation", "gridified_segmenter")
    with pytest.raises(
        ValueError,
        match=r"^Predictor\.predict: num_votes= \(--votes\) is for classifiers \(random subsets\) and scene "
        r"segmenters \(rotated views\); this is a segmentation model \(num_votes is an option of classification and "
        r"scene_segmentation models, not of segmentation models\)$",
    ):
        seg.predict(_cloud(), num_votes=3)
    with pytest.raises(ValueError, match=r"^Predictor\.inspect: num_votes= \(--votes\) is for classifiers"):
        seg.inspect(_cloud(), num_votes=3)
    cls = _predictor("classification")
    with pytest.raises(
        ValueError,
        match=r"^Predictor\.predict: features= and progress= are for scene segmenters; this is a classification "
        r"model \(features is an option of scene_segmentation models, not of classification models\)$",
    ):
        cls.predict(_cloud(), features=np.zeros((40, 2)))
    scene = _predictor("scene_segmentation", "gridified_segmenter")
    with pytest.raises(
        ValueError,
        match=r"^Predictor\.predict: category \(--category\) is only used by part segmenters; this is a "
        r"scene_segmentation model \(category is an option of classification and segmentation models",
    ):
        scene.predict(_cloud(), category="chair")


def test_none_is_no_option_and_an_unknown_keyword_is_a_type_error():
    seg = _predictor("segmentation", "gridified_segmenter")
    want = seg.predict(_cloud()).probabilities
    got = seg.predict(_cloud(), num_votes=None, max_fragments=None, features=None, progress=False)
    np.testing.assert_array_equal(got.probabilities, want)
    with pytest.raises(TypeError, match=r"^Predictor\.predict\(\) got an unexpected keyword argument 'votes' \(a "):
        seg.predict(_cloud(), votes=2)
    with pytest.raises(TypeError, match=r"Predictor\.inspect\(\) got an unexpected keyword argument 'batch'"):
        seg.inspect(_cloud(), batch=2)


def test_an_option_a_plugin_adds_is_its_own():
    """A predictor that declares an option no built-in takes: the built-in tasks refuse it by its keyword, naming
    the plugin's task; without the plugin it is an unknown keyword."""
    from gridify.registry import TASKS
    from gridify.tasks import ClassificationTask

    class ToyTask(ClassificationTask):
        name = "toy_temperature"
        datasets = ()
        models = ()

    class ToyPredictor(TaskPredictor):
        options = (*SHARED_OPTIONS, "temperature")

    TASKS.register("toy_temperature", ToyTask)
    PREDICTORS.register("toy_temperature", ToyPredictor)
    try:
        assert "temperature" in entry_options("predict")
        with pytest.raises(
            ValueError,
            match=r"^Predictor\.predict: temperature= is not an option of classification models \(temperature is an "
            r"option of toy_temperature models, not of classification models\)$",
        ):
            _predictor("classification").predict(_cloud(), temperature=2.0)
    finally:
        TASKS.unregister("toy_temperature")
        PREDICTORS.unregister("toy_temperature")
    with pytest.raises(TypeError, match="unexpected keyword argument 'temperature'"):
        _predictor("classification").predict(_cloud(), temperature=2.0)
