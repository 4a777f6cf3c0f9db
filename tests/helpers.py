"""Helpers shared by the test modules (import them: ``from tests.helpers import ragged_batch``).

Fixtures live in ``tests/conftest.py``; plain functions live here.
"""

import json
import os
from pathlib import Path

import numpy as np
import torch

#: the repository root (the folder holding ``gridify/``, ``scripts/`` and ``tests/``)
ROOT = Path(__file__).resolve().parents[1]


def shared_data_root() -> Path | None:
    """``../shared/data`` beside the project, or ``$GRIDIFY_SHARED_DATA``; None when absent."""
    env = os.environ.get("GRIDIFY_SHARED_DATA")
    root = Path(env) if env else ROOT.parent / "shared" / "data"
    return root if root.is_dir() else None


def shared_path(root: Path, relative: str) -> Path:
    """``root / relative`` in the shared data (from the ``shared_data`` fixture); skips the test when it is absent."""
    path = root / relative
    if not path.exists():
        import pytest

        pytest.skip(f"{relative.split('/')[0]} not in the shared data")
    return path


#: ``gridify train`` arguments of a one-epoch part-segmentation run on three procedural shapes (seconds)
TINY_SEG_RUN = [
    "--config",
    str(ROOT / "configs" / "procedural_seg.yaml"),
    "data.num_points=96",
    "data.num_samples_per_class=1",
    "data.classes=[chair, lamp, box]",
    "data.val={num_samples_per_class: 1}",
    "data.test={num_samples_per_class: 1}",
    "data.batch_size=3",
    "model.resolution=4",
    "model.k=4",
    "model.hidden_channels=8",
    "model.depth=1",
    "model.kernel_size=3",
    "model.point_channels=8",
    "trainer.max_epochs=1",
    "trainer.num_threads=1",
    "trainer.progress_bar=false",
    "trainer.plots=false",
]


def ragged_batch(sizes, seed=0, scale=1.0):
    """Points of len(sizes) clouds in [-scale, scale]^3, with a sorted batch vector."""
    g = torch.Generator().manual_seed(seed)
    pos = (torch.rand(sum(sizes), 3, generator=g) * 2 - 1) * scale
    batch = torch.cat([torch.full((n,), i, dtype=torch.long) for i, n in enumerate(sizes)])
    return pos, batch


# a tiny scene segmenter checkpoint and a KITTI-style scan (tests of predict on scenes, library and CLI)
SCENE_SMALL = dict(
    resolution=(6, 6, 3), k=3, hidden_channels=8, depth=1, point_channels=4, message_channels=8, pos_hidden_channels=8
)
SCENE_CLASSES = ["ground", "car", "pole"]


def write_scan(path, n=700, seed=0):
    """A random KITTI ``.bin`` scan (x y z intensity, float32) of ``n`` points at ``path``; returns its rows."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.uniform(-20, 20, (n, 2)), rng.uniform(-2, 1, (n, 1)), rng.uniform(0, 1, (n, 1))], 1)
    rows.astype("<f4").tofile(path)
    return rows.astype(np.float32)


def export_scene_model(tmp_path, features=("strength", "height"), voxel_size=0.5, max_points=200):
    """``(path of an exported tiny scene segmenter, the model)`` with the scene metadata predict reads."""
    import torch

    from gridify.checkpoint import export_model
    from gridify.datasets.scene_base import SCENE_FEATURES
    from gridify.models import GridifiedSceneSegmenter

    torch.manual_seed(0)
    width = sum(SCENE_FEATURES[f] for f in features)
    model = GridifiedSceneSegmenter(width, len(SCENE_CLASSES), **SCENE_SMALL).eval()
    kwargs = dict(in_channels=width, num_classes=len(SCENE_CLASSES), **SCENE_SMALL)
    info = {
        "class_names": SCENE_CLASSES,
        "features": list(features),
        "voxel_size": voxel_size,
        "max_points": max_points,
        "num_points": max_points,
        "normalization": None,
        "in_channels": width,
    }
    path = tmp_path / "scene.pt"
    export_model(
        path,
        model,
        {"model_name": "scene_segmenter", "model_kwargs": kwargs, "task": "scene_segmentation", "info": info},
    )
    return path, model


def make_fake_shapenet(root: Path, n_per_split=2):
    """ShapeNet-Part's normal_txt + v0_points layouts under ``root`` with Chair (12-15) and Mug (36-37) shapes."""
    from gridify.datasets import SHAPENET_CATEGORY_TO_PARTS, SHAPENET_SYNSETS

    r = np.random.default_rng(2)
    normal_dir = root / "shapenetcore_partanno_segmentation_benchmark_v0_normal"
    v0_dir = root / "shapenetcore_partanno_v0"
    lists = {"train": [], "val": [], "test": []}
    for cat, cid in (("Chair", 4), ("Mug", 11)):
        syn = SHAPENET_SYNSETS[cat]
        parts = SHAPENET_CATEGORY_TO_PARTS[cid]
        (normal_dir / syn).mkdir(parents=True, exist_ok=True)
        (v0_dir / syn / "points").mkdir(parents=True, exist_ok=True)
        (v0_dir / syn / "points_label").mkdir(parents=True, exist_ok=True)
        for split in lists:
            for k in range(n_per_split):
                sid = f"{cat.lower()}{split}{k}"
                n = int(r.integers(40, 60))
                pts = r.normal(size=(n, 3))
                nrm = pts / np.linalg.norm(pts, axis=1, keepdims=True)
                lab = r.choice(parts, size=n)
                np.savetxt(normal_dir / syn / f"{sid}.txt", np.hstack([pts, nrm, lab[:, None]]), fmt="%.6f")
                np.savetxt(v0_dir / syn / "points" / f"{sid}.pts", pts, fmt="%.5f")
                np.savetxt(v0_dir / syn / "points_label" / f"{sid}.seg", lab - parts[0] + 1, fmt="%d")
                lists[split].append(f"shape_data/{syn}/{sid}")
    for d in (normal_dir, v0_dir):
        (d / "train_test_split").mkdir()
        for split, items in lists.items():
            (d / "train_test_split" / f"shuffled_{split}_file_list.json").write_text(json.dumps(items))
    return root


def modelnet_clouds(root: Path, per_class: int = 1) -> list:
    """Normalized ModelNet10 test shapes (PCD, 1,024 points each) of every class, from the shared data ``root``."""
    from gridify.io import read_points

    base = root / "modelnet10_pcd" / "ModelNet10" / "pcd"
    clouds = []
    for folder in sorted(p for p in base.iterdir() if p.is_dir()):
        for f in sorted((folder / "test").glob("*.pcd"))[:per_class]:
            clouds.append(torch.from_numpy(read_points(f).points).float())
    return clouds
