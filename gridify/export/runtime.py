"""Running an exported scene segmenter with onnxruntime: :class:`OnnxSceneModel`.

The file (written by :func:`gridify.export.export_onnx`) segments one crop per cloud; the runner
covers a whole scan with the crops recorded in the file's metadata, as
:meth:`gridify.Predictor.predict` does with a checkpoint (:func:`gridify.scene_inference.predict_scene`),
and builds the file's per-point features from their names in the metadata.

Shapes:
    OnnxSceneModel: pos ``[n, 3]``, x ``[n, F]``, batch ``[n]`` -> logits ``[n, K]``;
    OnnxSceneModel.predict: pos ``[N, 3]``, x ``[N, F]`` -> probabilities ``[N, K]``
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Union

import numpy as np
import torch
from torch import Tensor

from .._checks import check_batch, check_finite, check_float, check_int, check_points, check_tensor, fail
from .exporter import require_export_dependencies

__all__ = ["OnnxSceneModel"]


def _read_scan(cloud: Any) -> Any:
    """A :class:`gridify.io.PointCloud` as given, or read from a path with every per-point field (intensity)."""
    from ..io import PointCloud, read_points, reader_takes  # noqa: PLC0415

    if isinstance(cloud, PointCloud):
        return cloud
    return read_points(cloud, fields="all") if reader_takes(cloud, "fields") else read_points(cloud)


class OnnxSceneModel:
    """An exported scene segmenter (an ONNX file of :func:`gridify.export.export_onnx`) as the ``model(pos, x, batch)
    -> logits`` callable that :func:`gridify.scene_inference.predict_scene` covers a whole scan with.

    ``__call__`` runs the file once per cloud of the flat batch (``pos [n, 3]`` metres, ``x [n, F]``
    the features the file's metadata names, ``batch [n]`` sorted); :meth:`predict` scores every point
    of a scene with the crops recorded in the file (``voxel_size``, ``max_points``), as
    :meth:`gridify.Predictor.predict` does with the checkpoint. Needs onnxruntime only.

    Shapes:
        __call__: pos ``[n, 3]``, x ``[n, F]``, batch ``[n]`` -> logits ``[n, K]``;
        predict: pos ``[N, 3]``, x ``[N, F]`` (or a scan's path or PointCloud) -> probabilities ``[N, K]``
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], threads: Optional[int] = None) -> None:
        where = "OnnxSceneModel"
        require_export_dependencies(where, verify=True)
        import onnxruntime as ort

        if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
            fail(where, f"path must name an existing .onnx file, got {path!r}")
        threads = check_int(where, "threads", threads, 1, allow_none=True)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        try:
            self.session = ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types; one clear message
            fail(
                where,
                f"onnxruntime could not load {os.fspath(path)!r} ({type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''})",
            )
        meta = self.session.get_modelmeta().custom_metadata_map
        if meta.get("model") != "scene_segmenter":
            fail(
                where,
                f"{os.fspath(path)!r} is not a scene segmenter exported by gridify (its metadata says model="
                f"{meta.get('model')!r})",
            )
        self.inputs = json.loads(meta["inputs"])
        self.class_names = json.loads(meta["class_names"])
        self.features = json.loads(meta.get("features", "null"))
        self.voxel_size = json.loads(meta.get("voxel_size", "null"))
        self.max_points = json.loads(meta.get("max_points", "null"))
        from ..scene_inference import scene_defaults  # noqa: PLC0415

        recorded = {key: json.loads(meta.get(key, "null")) for key in ("votes", "max_fragments")}
        #: the whole-scan defaults of :meth:`predict` (the checkpoint's, as :meth:`gridify.Predictor.predict`'s)
        self.default_votes, self.default_fragments = scene_defaults(recorded)
        self.in_channels = int(meta["in_channels"])
        self.k = int(meta.get("k", 1))
        shape = self.session.get_inputs()[0].shape  # [B, N, 3]: N an int for a fixed-size export
        self.fixed_points = shape[1] if isinstance(shape[1], int) else None

    def __call__(self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None) -> Tensor:
        """Logits of every cloud of the flat batch. A cloud of fewer than ``k`` points runs padded with copies
        of its own points (cyclically) and its own rows are returned: the PyTorch model takes such a cloud as it
        is (its searches hold all ``N < k`` points, as the padded one does), the file's searches need ``k``. A
        fixed-size export (``--num-points N``) takes exactly ``N`` points: another size is an error naming both
        (padding a cloud of ``k`` or more points would change which points its nodes see)."""
        where = "OnnxSceneModel"
        pos = check_points(where, "pos", _as_tensor(pos))
        n = pos.size(0)
        if n == 0:
            fail(where, "pos holds no point (shape [0, 3]): give at least one")
        batch, _, _ = check_batch(where, "batch", None if batch is None else _as_tensor(batch), n, device=pos.device)
        check_finite(where, "pos", pos, batch)
        ends = torch.cumsum(torch.bincount(batch.cpu()), 0).tolist()
        out, start = [], 0
        if "features" in self.inputs:
            x = None if x is None else check_tensor(where, "x", _as_tensor(x))
            if x is None or x.dim() != 2 or x.size(0) != n or x.size(1) != self.in_channels:
                got = "none" if x is None else f"shape {tuple(x.shape)}"
                fail(
                    where,
                    f"x must hold the {self.in_channels} features {self.features} of every point: shape "
                    f"[{n}, {self.in_channels}], got {got}",
                )
            check_float(where, "x", x)
            check_finite(where, "x", x, batch)
        for end in ends:
            m = end - start
            want = max(m, self.k)
            if self.fixed_points is not None and want != self.fixed_points:
                fail(
                    "OnnxSceneModel",
                    f"a crop of {m} points, but the file was exported for exactly {self.fixed_points} points per "
                    f"cloud (gridify export --num-points); export it with a dynamic size (no --num-points) to cover "
                    f"scans, whose crops vary in size",
                )
            rows = torch.arange(want) % max(m, 1) + start  # the cloud's own rows, repeated to the size the file takes
            feeds = {"points": pos[rows].detach().cpu().float().numpy()[None]}
            if "features" in self.inputs:
                feeds["features"] = x[rows].detach().cpu().float().numpy()[None]
            out.append(torch.from_numpy(self.session.run(["logits"], feeds)[0][0][:m]))
            start = end
        return torch.cat(out).to(pos.device)

    def features_of(self, cloud: Any) -> Tensor:
        """The file's per-point input ``x [N, F]`` of a scan (a path or a :class:`gridify.io.PointCloud`),
        built from the feature names in its metadata by the same function as the datasets and
        :meth:`gridify.Predictor.predict` (:func:`gridify.datasets.scene_base.cloud_scene_features`)."""
        from ..datasets._common import DatasetError  # noqa: PLC0415
        from ..datasets.scene_base import cloud_scene_features  # noqa: PLC0415
        from ..io import PointCloud  # noqa: PLC0415

        if not isinstance(cloud, (PointCloud, str, os.PathLike)):
            fail(
                "OnnxSceneModel.features_of",
                f"cloud must be a file path or a gridify.io.PointCloud (an array has no named intensity: "
                f"PointCloud(points=a[:, :3], fields={{'intensity': a[:, 3]}})), got {type(cloud).__name__}",
            )
        cloud = _read_scan(cloud)
        try:
            x = cloud_scene_features(
                list(self.features or []), cloud, instead="give predict(coordinates, x) the features yourself"
            )
        except DatasetError as exc:
            fail("OnnxSceneModel.features_of", str(exc))
        return torch.from_numpy(x if self.features else x[:, :0])

    def predict(
        self,
        pos: Any,
        x: Optional[Tensor] = None,
        *,
        votes: Optional[int] = None,
        seed: int = 0,
        progress: Optional[Any] = None,
        max_fragments: Union[int, str, None] = None,
    ) -> Tensor:
        """Class probabilities ``[N, K]`` of every point of a scene, covered with the file's crops.

        ``pos``: the scan as a file path or a :class:`gridify.io.PointCloud` (its features then built by
        :meth:`features_of`, ``x`` not given), or its coordinates as a tensor or numpy array with ``x`` the
        features (:meth:`features_of` the scan; none for a file without features). ``votes``, ``seed``,
        ``progress`` and ``max_fragments`` as in :meth:`gridify.Predictor.predict` (``None``: the defaults
        recorded in the file, ``default_votes`` / ``default_fragments``: 1 view and 4 fragments unless
        its checkpoint recorded others; ``max_fragments="all"``: every point in a fragment)."""
        from ..io import PointCloud  # noqa: PLC0415
        from ..scene_inference import predict_scene_checked  # noqa: PLC0415

        where = "OnnxSceneModel.predict"
        if isinstance(pos, (PointCloud, str, os.PathLike)):
            if x is not None:
                fail(where, "x is built from the scan when pos is a file or a PointCloud: give x only with coordinates")
            cloud = _read_scan(pos)
            pos, x = torch.from_numpy(cloud.points), self.features_of(cloud)
        pos = check_points(where, "pos", _as_tensor(pos))
        if x is None:
            if "features" in self.inputs:
                fail(where, f"x must hold the {self.in_channels} features {self.features} of every point (features_of)")
            x = pos.new_zeros(pos.size(0), 0)
        x = _as_tensor(x)
        if "features" in self.inputs and isinstance(x, Tensor) and x.dim() == 2 and x.size(1) != self.in_channels:
            fail(
                where,
                f"x must hold the {self.in_channels} features {self.features} of every point, got {x.size(1)} "
                f"columns (features_of builds them from a scan)",
            )
        return predict_scene_checked(
            where,
            self,
            pos,
            x,
            self.voxel_size,
            self.max_points,
            self.default_votes if votes is None else votes,
            seed,
            1,
            self.default_fragments if max_fragments is None else max_fragments,
            progress,
        )


def _as_tensor(a: Any) -> Any:
    """A numpy array as a tensor (sharing its memory); anything else as given, for the checks to name."""
    return torch.from_numpy(a) if isinstance(a, np.ndarray) else a
