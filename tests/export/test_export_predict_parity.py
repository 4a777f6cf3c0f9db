"""How far the exported ONNX file of the shipped ModelNet10 classifier is from ``gridify predict``.

docs/guides/export.md, "Point counts other than the training size": the file runs the network once on
exactly the points it is given, while the Predictor (``gridify.load(...).predict``, the library side of
``gridify predict``) resamples a cloud of another size to the training size and averages the softmax
of ``num_votes`` subsets. Measured on real ModelNet shapes (the file exported once, as
``gridify export modelnet10`` does):

* at the training size (``Predictor.num_points``, 1,024) with one vote, the same points in the same
  (canonical) order give the same probabilities, within 1e-4;
* at 600 points (ModelNet10 test clouds, subsampled) and 3,000 points (the ModelNet10 classes of the
  ``modelnet40_normal_resampled`` sample, subsampled, z up) with the default voting, the classes agree
  on every cloud used, the probabilities differ by at most 0.07 on each and by a few thousandths
  (median <= 0.01) over them.

The guide's wider measurement (908 test clouds at 600 points, three subsample seeds: the largest
difference 0.2 to 0.44, about 5 % above 0.07, about 1 % with another class; 61 clouds at 3,000 points:
up to 0.14, none with another class) shows that a cloud between two classes can break 0.07 and even the
class; none of the eight fixed, seeded clouds here is such a cloud, so a change of either computation that
moves ordinary clouds apart fails this test.

Needs onnx, onnxscript and onnxruntime (the export extra) and ``../shared/data``; skipped without them.
"""

import numpy as np
import pytest
import torch

import gridify
from gridify import cli
from gridify.api import canonical_order
from gridify.io import read_points
from tests.helpers import shared_path

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")

#: the classes whose clouds are compared (one shape each), among them the often confused dresser / night_stand
CLASSES = ("bathtub", "bed", "chair", "desk", "dresser", "monitor", "night_stand", "toilet")
#: docs/guides/export.md: at 600 / 3,000 points about 1 cloud in 20 differs by more than this (default votes)
TYPICAL_BOUND = 0.07


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """``(onnxruntime session of the exported shipped model, the shipped Predictor)``."""
    out = tmp_path_factory.mktemp("parity") / "modelnet10.onnx"
    assert cli.main(["export", "modelnet10", "--out", str(out)]) == 0
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"])
    return session, gridify.load("modelnet10")


def modelnet10_test_clouds(root):
    """The first test shape of each class in CLASSES: ``{class: [1024, 3] float64}`` (centred, mesh units)."""
    base = shared_path(root, "modelnet10_pcd/ModelNet10/pcd")
    return {c: read_points(sorted((base / c / "test").glob("*.pcd"))[0]).points.astype(np.float64) for c in CLASSES}


def resampled_clouds(root):
    """The first ``modelnet40_normal_resampled`` shape of each class in CLASSES (10,000 points), y/z swapped
    so z is up like the ModelNet10 clouds (as ModelNet(align_up_axis=True) reads them)."""
    base = shared_path(root, "modelnet40_normal_resampled_sample/data/modelnet40_normal_resampled")
    clouds = {}
    for c in CLASSES:
        cloud = read_points(sorted((base / c).glob("*.txt"))[0], columns=("x", "y", "z", "nx", "ny", "nz"))
        clouds[c] = cloud.points.astype(np.float64)[:, [0, 2, 1]]
    return clouds


def subsample(pts, n, seed):
    return pts[np.sort(np.random.default_rng(seed).choice(len(pts), n, replace=False))]


def file_probabilities(session, pts):
    """Softmax of the file's logits for one cloud [N, 3] (the file normalizes it itself)."""
    logits = session.run(["logits"], {"points": pts[None].astype(np.float32)})[0]
    return torch.softmax(torch.from_numpy(logits).double(), -1)[0].numpy()


def test_the_file_takes_points_and_gives_logits(deployed):
    session, predictor = deployed
    assert [(i.name, i.shape) for i in session.get_inputs()] == [("points", ["batch", "num_points", 3])]
    assert [(o.name, o.shape) for o in session.get_outputs()] == [("logits", ["batch", 10])]
    assert predictor.task == "classification" and predictor.num_points == 1024 and predictor.in_channels == 3


def test_one_vote_at_the_training_size_is_the_same_computation(deployed, shared_data):
    session, predictor = deployed
    clouds = modelnet10_test_clouds(shared_data)
    for name, pts in clouds.items():
        assert len(pts) == predictor.num_points, name
        pts = pts[canonical_order(pts)]  # the order the Predictor runs the network on
        want = predictor.predict(pts, num_votes=1).probabilities
        got = file_probabilities(session, pts)
        assert np.abs(got - want).max() <= 1e-4, name


@pytest.mark.parametrize("n", [600, 3000])
def test_other_sizes_with_default_votes_agree_within_the_guides_bounds(deployed, shared_data, n):
    session, predictor = deployed
    clouds = modelnet10_test_clouds(shared_data) if n < predictor.num_points else resampled_clouds(shared_data)
    diffs = {}
    for seed, (name, pts) in enumerate(clouds.items()):
        pts = subsample(pts, n, seed)
        want = predictor.predict(pts).probabilities  # num_votes=4 subsets of 1,024 points
        got = file_probabilities(session, pts)  # one pass on the n points
        assert want.argmax() == got.argmax(), (name, want.round(3), got.round(3))
        diffs[name] = float(np.abs(got - want).max())
    assert len(diffs) == len(CLASSES)
    assert max(diffs.values()) <= TYPICAL_BOUND, diffs
    assert np.median(list(diffs.values())) <= 0.01, diffs  # "usually differ by a few thousandths"
