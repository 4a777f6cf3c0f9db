"""The item format every scene dataset shares: :class:`SceneDatasetBase` and :func:`scene_features`.

An item holds ``pos`` in metres (unless ``normalize``), ``x`` = the chosen ``features``
(:data:`SCENE_FEATURES`: ``xyz``, ``color`` scaled to ``[0, 1]``, ``normal``, ``strength``
(alias ``intensity``), ``height`` = z - min z; none: ``x = pos``), ``y`` the per-point training ids
with -1 for ignored points, the raw ``color`` / ``normal`` / ``strength`` the scene has, ``index``
and the ``scene`` name. The pipeline is :class:`~gridify.datasets.PointCloudDataset`'s.

Shapes:
    an item: pos ``[N, 3]`` float32, x ``[N, F]`` float32, y ``[N]`` int64, index ``[]``, scene str.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from .._checks import check_choice
from ._common import DatasetError, PointCloudDataset, Transform
from .scene_layouts import IGNORE_INDEX

__all__ = ["SCENE_FEATURES", "SceneDatasetBase", "scene_features", "check_features"]
#: feature name -> its width in ``x``
SCENE_FEATURES: Dict[str, int] = {"xyz": 3, "color": 3, "normal": 3, "strength": 1, "intensity": 1, "height": 1}
#: keys of a raw scene sample that travel with the points (subsampled, transformed alike)
_POINT_KEYS = ("color", "normal", "strength")


def check_features(where: str, features: Any) -> Tuple[str, ...]:
    """``features`` as a tuple of names of :data:`SCENE_FEATURES` (a single name is accepted)."""
    if isinstance(features, str):
        features = (features,)
    for f in features:
        check_choice(where, "features", f, list(SCENE_FEATURES))
    return tuple(features)


def scene_features(sample: Dict[str, Any], features: Sequence[str], where: str) -> Tensor:
    """``x`` of a scene sample: the ``features`` concatenated in order (``[N, F]`` float32).

    ``xyz`` is ``pos``; ``color`` is divided by 255; ``intensity`` is ``strength``; ``height`` is
    ``z - min z``. No features: ``x = pos``. A feature the scene lacks raises a DatasetError
    naming ``where`` (the scene).
    """
    pos = torch.as_tensor(np.asarray(sample["pos"]) if not isinstance(sample["pos"], Tensor) else sample["pos"])
    pos = pos.float()
    cols: List[Tensor] = []
    for f in features:
        key = "strength" if f == "intensity" else f
        if key == "xyz":
            cols.append(pos)
        elif key == "height":
            cols.append((pos[:, 2:3] - pos[:, 2:3].min()) if len(pos) else pos[:, 2:3])
        else:
            if sample.get(key) is None:
                raise DatasetError(f"{where}: feature {f!r} requested but the scene has no {key} "
                                   f"(it has: {sorted(k for k in sample if k in _POINT_KEYS)})")
            v = torch.as_tensor(np.asarray(sample[key]) if not isinstance(sample[key], Tensor) else sample[key])
            v = v.float().reshape(len(pos), -1)
            cols.append(v / 255.0 if key == "color" else v)
    return torch.cat(cols, dim=1) if cols else pos.clone()


class SceneDatasetBase(PointCloudDataset):
    """The item format of scene datasets (see the module docstring); subclasses implement
    :meth:`load_scene` (index -> scene dict in the common vocabulary), :meth:`scene_name`, ``__len__``.

    Attributes:
        class_names, num_classes, ignore_index, features, in_channels (width of ``x``).
    """

    def __init__(self, *, split: str, class_names: Sequence[str], features: Sequence[str],
                 num_points: Optional[int], transform: Optional[Transform], seed: int, normalize: bool,
                 cache: bool) -> None:
        features = check_features(type(self).__name__, features)
        super().__init__(split=split, num_points=num_points, use_normals=False, transform=transform, seed=seed,
                         normalize=normalize)
        self.class_names = list(class_names)
        self.features = tuple(features)
        self.ignore_index = IGNORE_INDEX
        self.cache = bool(cache)
        self._cache: Dict[int, Dict[str, np.ndarray]] = {}

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def in_channels(self) -> int:
        return sum(SCENE_FEATURES[f] for f in self.features) or 3

    def load_scene(self, index: int) -> Dict[str, np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def scene_name(self, index: int) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self, index: int) -> str:
        return f"{type(self).__name__} {self.split} scene {self.scene_name(index)!r}"

    def scene(self, index: int) -> Dict[str, np.ndarray]:
        """The full scene ``index`` as read (common vocabulary, before subsampling and transforms)."""
        scene = self._cache.get(index)
        if scene is None:
            try:
                scene = self.load_scene(index)
            except DatasetError as exc:  # the reader named the file (and line): name the scene too
                raise DatasetError(f"{self.describe(index)}: {exc}") from None
            if self.cache:
                self._cache[index] = scene
        return scene

    def raw(self, index: int) -> Dict[str, Any]:
        scene = self.scene(index)
        sample: Dict[str, Any] = {"pos": scene["coord"], "y": scene["segment"]}
        for k in _POINT_KEYS:
            if scene.get(k) is not None:
                sample[k] = scene[k]
        return sample

    def to_item(self, sample: Dict[str, Any], index: int) -> Dict[str, Any]:
        where = self.describe(index)
        item: Dict[str, Any] = {}
        for k, v in sample.items():
            if isinstance(v, (str, bytes)) or v is None:
                continue
            item[k] = torch.as_tensor(np.asarray(v) if not isinstance(v, Tensor) else v)
        item["pos"] = item["pos"].float()
        item["x"] = scene_features(sample, self.features, where)
        item["y"] = item["y"].long()
        for k in _POINT_KEYS:
            if k in item:
                item[k] = item[k].float()
        item["index"] = torch.tensor(index, dtype=torch.long)
        item["scene"] = self.scene_name(index)
        return item
