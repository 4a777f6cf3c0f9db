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
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np
import torch
from torch import Tensor

from .._checks import check_batch, check_finite, check_float, check_int, check_points, check_tensor, fail
from ..transforms import UP_AXES, to_z_up, up_axis_rotation
from .exporter import require_export_dependencies

__all__ = ["OnnxSceneModel"]


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
        meta = _metadata(where, os.fspath(path), self.session.get_modelmeta().custom_metadata_map)
        self.inputs: List[str] = meta["inputs"]
        self.class_names: List[str] = meta["class_names"]
        self.features: Optional[List[str]] = meta["features"]
        self.voxel_size: Optional[float] = meta["voxel_size"]
        self.max_points: Optional[int] = meta["max_points"]
        from ..scene_inference import scene_defaults  # noqa: PLC0415

        #: the whole-scan defaults of :meth:`predict` (the checkpoint's, as :meth:`gridify.Predictor.predict`'s)
        self.default_votes, self.default_fragments = scene_defaults(
            {"votes": meta["votes"], "max_fragments": meta["max_fragments"]}
        )
        self.in_channels: int = meta["in_channels"]
        self.k: int = meta["k"]
        #: the up direction of the clouds the file was exported for (``gridify export --up-axis``; ``"z"`` for a file
        #: that does not record one): :meth:`predict` and :meth:`features_of` turn a scan to z up first, as
        #: :meth:`gridify.Predictor.predict` does with ``up_axis=``, so its height and its crops are the checkpoint's
        self.up_axis: str = meta["up_axis"]
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
        :meth:`gridify.Predictor.predict` (:func:`gridify.datasets.scene_base.cloud_scene_features`), on the scan
        turned to z up from the file's :attr:`up_axis` (its height is measured along that axis, as ``predict``'s).
        A file whose features include ``has_strength`` takes a scan without intensity (strength 0, has_strength 0)."""
        from ..datasets._common import DatasetError  # noqa: PLC0415
        from ..datasets.scene_base import cloud_scene_features  # noqa: PLC0415
        from ..io import PointCloud, read_scan  # noqa: PLC0415

        if not isinstance(cloud, (PointCloud, str, os.PathLike)):
            fail(
                "OnnxSceneModel.features_of",
                f"cloud must be a file path or a gridify.io.PointCloud (an array has no named intensity: "
                f"PointCloud(points=a[:, :3], fields={{'intensity': a[:, 3]}})), got {type(cloud).__name__}",
            )
        cloud = cloud if isinstance(cloud, PointCloud) else read_scan(cloud)  # a path: with every field (intensity)
        pos, normals = to_z_up(cloud.points, self.up_axis, cloud.normals)  # the file's up axis: height along it
        try:
            x = cloud_scene_features(
                list(self.features or []),
                cloud,
                pos=pos,
                normal=normals,
                instead="give predict(coordinates, x) the features yourself",
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
        its checkpoint recorded others; ``max_fragments="all"``: every point in a fragment). A file exported with
        another up axis (``gridify export --up-axis y``, :attr:`up_axis`) takes coordinates with that axis up and
        covers the scan turned to z up, as :meth:`gridify.Predictor.predict` with ``up_axis=`` does (the same
        crops, views and height); a file without the entry is taken as z up."""
        from ..io import PointCloud, read_scan  # noqa: PLC0415
        from ..scene_inference import predict_scene_checked  # noqa: PLC0415

        where = "OnnxSceneModel.predict"
        if isinstance(pos, (PointCloud, str, os.PathLike)):
            if x is not None:
                fail(where, "x is built from the scan when pos is a file or a PointCloud: give x only with coordinates")
            cloud = pos if isinstance(pos, PointCloud) else read_scan(pos)
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
        model: Any = self
        if self.up_axis != "z":  # covered z up, as Predictor.predict(up_axis=...) covers it (crops, views about z)
            rotation = torch.as_tensor(up_axis_rotation(self.up_axis), dtype=torch.float64)
            pos = (pos.double() @ rotation.T).to(pos.dtype)  # a signed permutation: exact
            model = _FileFrame(self, rotation)
        return predict_scene_checked(
            where,
            model,
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


class _FileFrame:
    """An :class:`OnnxSceneModel` called on z-up crops: each crop turned back to the frame the file was exported for
    (``p_file = p_z R``, exact), which the file's graph turns to z up again."""

    def __init__(self, runner: OnnxSceneModel, rotation: Tensor) -> None:
        self.runner, self.rotation = runner, rotation
        self.class_names = runner.class_names

    def __call__(self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None) -> Tensor:
        return self.runner((pos.double() @ self.rotation.to(pos.device)).to(pos.dtype), x, batch)


#: metadata key -> (what it must hold, whether the file must have it, its default); every value but ``model``,
#: ``in_channels``, ``k`` and ``up_axis`` (plain strings) is JSON
_META: Dict[str, Any] = {
    "inputs": ("a JSON list of input names", True, None),
    "class_names": ("a JSON list of class names", True, None),
    "features": ("null or a JSON list of feature names", False, None),
    "voxel_size": ("null or a positive number (metres)", False, None),
    "max_points": ("null or a positive integer", False, None),
    "votes": ("null or a positive integer", False, None),
    "max_fragments": ("null, a positive integer or 'all'", False, None),
    "in_channels": ("an integer >= 0", True, None),
    "k": ("a positive integer", False, "1"),
    "up_axis": ("one of z, y, x, -z, -y, -x", False, "z"),
}


def _names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(n, str) for n in v)


def _count(v: Any, low: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


#: metadata key -> whether a parsed value is of the right kind
_META_OK: Dict[str, Callable[[Any], bool]] = {
    "inputs": lambda v: _names(v) and bool(v),
    "class_names": lambda v: _names(v) and bool(v),
    "features": lambda v: v is None or _names(v),
    "voxel_size": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e300),
    "max_points": lambda v: v is None or _count(v, 1),
    "votes": lambda v: v is None or _count(v, 1),
    "max_fragments": lambda v: v is None or v == "all" or _count(v, 1),
    "in_channels": lambda v: _count(v, 0),
    "k": lambda v: _count(v, 1),
    "up_axis": lambda v: v in UP_AXES,
}


def _metadata(where: str, path: str, meta: Dict[str, str]) -> Dict[str, Any]:
    """The runner's entries of an exported scene segmenter's metadata, parsed and checked: a value that is not JSON
    (where JSON is kept), of the wrong kind or missing is a ValueError naming the file, the key and what it must
    hold (never a raw JSONDecodeError or KeyError)."""
    if meta.get("model") != "scene_segmenter":
        fail(
            where,
            f"{path!r} is not a scene segmenter exported by gridify (its metadata says model={meta.get('model')!r})",
        )
    out: Dict[str, Any] = {}
    for key, (holds, required, default) in _META.items():
        text = meta.get(key, default)
        if text is None:
            if required:
                fail(
                    where,
                    f"{path!r}: the metadata has no {key!r} entry ({holds}); re-export the model (gridify export)",
                )
            out[key] = None
            continue
        if key == "up_axis":
            value: Any = text
        else:
            try:
                value = json.loads(text)
            except ValueError as exc:  # json.JSONDecodeError: the text itself is not JSON
                fail(
                    where,
                    f"{path!r}: metadata {key!r} is not JSON ({exc.msg} at character {exc.pos}: {text[:60]!r}); it must "
                    f"hold {holds}",
                )
        if not _META_OK[key](value):
            fail(where, f"{path!r}: metadata {key!r} must hold {holds}, got {text[:60]!r}")
        out[key] = value
    return out


def _as_tensor(a: Any) -> Any:
    """A numpy array as a tensor (sharing its memory); anything else as given, for the checks to name."""
    return torch.from_numpy(a) if isinstance(a, np.ndarray) else a
