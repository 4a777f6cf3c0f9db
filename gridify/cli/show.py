"""``gridify show``: a cloud in an Open3D window or a PNG, with a model's labels (:meth:`gridify.api.Predictor.inspect`,
or the labels ``--pred`` gives), its grid and kNN edges, and the ground truth beside a segmentation; a scene model's
hidden classes (``--hide``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .. import _cliargs as types
from .._commands import check_command_route, route_reads
from .._paths import check_input_file
from .._pretrained import PRETRAINED
from .predict import add_common_model_args, check_given_files, load_model, model_facts, model_options, read_file

if TYPE_CHECKING:  # numpy is imported by the command that runs, never while parsing
    import numpy as np

__all__ = ["add_show_parser", "cmd_show"]


def add_show_parser(sub: Any) -> None:
    s = sub.add_parser(
        "show",
        help="look at a cloud (and a model's labels, grid and kNN edges) in Open3D",
        description="Show a cloud in an Open3D window, or render it headless to a PNG with --out. "
        "With --ckpt the points are coloured by the predicted class/part (with a legend) "
        "and the grid layer is the model's learned gridification; without it the file's "
        "colours/labels are used and the grid comes from a freshly initialised "
        "(seeded) Gridification at --resolution / --k. The grid layer draws the nodes "
        "the cloud touches, the edges layer the bilateral kNN edges of a few nodes "
        "spread over the cloud, and the camera looks along the cloud's axis of least "
        "variance.",
    )
    s.add_argument("file", help="point cloud or mesh file")
    s.add_argument("--ckpt", help="model whose predictions colour the points")
    s.add_argument(
        "--labels",
        default="auto",
        help="ground truth drawn beside a segmentation model's prediction: a .label/.npy/.txt file, 'auto' "
        "(default: SemanticKITTI labels/<stem>.label or segment.npy beside the scan, else the file's label "
        "field) or 'none'",
    )
    s.add_argument(
        "--model", choices=sorted(PRETRAINED), help="a shipped model instead of --ckpt (gridify list models)"
    )
    s.add_argument(
        "--out", type=types.output_file([".png"]), help="PNG path: render headless instead of opening a window"
    )
    s.add_argument(
        "--layers",
        default=None,
        help="comma-separated layers to show: points, grid, edges (default: points; with --ckpt in a "
        "window all three, toggleable)",
    )
    s.add_argument(
        "--grid-color",
        choices=("norm", "pca"),
        default="pca",
        help="colour grid nodes by feature norm or by a PCA of the features (default pca)",
    )
    s.add_argument(
        "--resolution", type=types.positive_int, default=9, help="grid resolution without --ckpt (default 9)"
    )
    s.add_argument("--k", type=types.positive_int, default=9, help="kNN neighbours without --ckpt (default 9)")
    s.add_argument("--width", type=types.positive_int, default=800, help="image width (default 800)")
    s.add_argument("--height", type=types.positive_int, default=600, help="image height (default 600)")
    s.add_argument("--point-size", type=types.positive_float, default=3.0, help="point size in pixels (default 3)")
    _add_show_edge_arguments(s)
    _add_show_view_arguments(s)
    s.add_argument(
        "--hide",
        default=None,
        metavar="CLASS,...",
        help="with a scene model: leave out the points predicted as these classes, from both panels when the "
        "ground truth is drawn beside (default: ceiling, so a room is seen from above; 'none' hides nothing)",
    )
    s.add_argument("--no-progress", action="store_true", help="no progress bar (scene segmenters)")
    types.add_pred_argument(s)
    add_common_model_args(s)
    s.set_defaults(func=cmd_show)


def _add_show_edge_arguments(s: argparse.ArgumentParser) -> None:
    """The ``show`` options choosing the grid nodes and the kNN edges drawn."""
    from .._clinames import DEFAULT_EDGE_NODES, DEFAULT_MAX_EDGES, GRID_NODES

    s.add_argument(
        "--grid-nodes",
        choices=GRID_NODES,
        default=GRID_NODES[0],
        help="grid nodes drawn: those nearest to a point of the cloud, or the whole R^3 lattice (default touched)",
    )
    s.add_argument(
        "--edge-nodes",
        default=str(DEFAULT_EDGE_NODES),
        metavar="N|all",
        help="draw the kNN edges of N grid nodes spread over the cloud (farthest point sampling), each "
        f"in its own colour, or of every node with 'all' (default {DEFAULT_EDGE_NODES})",
    )
    s.add_argument(
        "--edge-node-ids",
        metavar="I,J,...",
        help="draw the edges of these grid nodes (indices a*R*R + b*R + c) instead",
    )
    s.add_argument(
        "--max-edges",
        type=types.nonnegative_int,
        default=DEFAULT_MAX_EDGES,
        help=f"edges drawn at most, a seeded random subset beyond that (default {DEFAULT_MAX_EDGES})",
    )


def _add_show_view_arguments(s: argparse.ArgumentParser) -> None:
    """The ``show`` options placing the camera."""
    s.add_argument(
        "--view",
        default="pca",
        metavar="pca|iso|X,Y,Z",
        help="camera: along the cloud's axis of least variance (pca), the fixed diagonal view (iso), "
        "or from this direction (default pca)",
    )
    s.add_argument("--up", metavar="X,Y,Z", help="camera up vector (default: z, or y for a view from above)")
    s.add_argument(
        "--azimuth",
        type=float,
        default=0.0,
        help="then turn the camera by this many degrees about the up vector (default 0)",
    )
    s.add_argument(
        "--elevation", type=float, default=0.0, help="and raise it by this many degrees, e.g. 20 (default 0)"
    )


def _vector_arg(flag: str, text: str) -> List[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 3:
        raise SystemExit(f"gridify show: error: {flag} must be three comma-separated numbers, got {text!r}")
    return values


def _show_options(args: argparse.Namespace) -> dict:
    """The vis.show keyword arguments of the --edge-nodes, --edge-node-ids, --view and --up options."""
    if args.edge_node_ids:
        try:
            edge_nodes: Any = [int(v) for v in args.edge_node_ids.split(",") if v.strip()]
        except ValueError:
            raise SystemExit(
                f"gridify show: error: --edge-node-ids must be comma-separated integers, got {args.edge_node_ids!r}"
            )
    elif args.edge_nodes == "all":
        edge_nodes = "all"
    elif args.edge_nodes.isascii() and args.edge_nodes.isdigit():
        edge_nodes = int(args.edge_nodes)
    else:
        raise SystemExit(
            f"gridify show: error: --edge-nodes must be a positive integer or 'all', got {args.edge_nodes!r}"
        )
    view = args.view if args.view in ("pca", "iso") else _vector_arg("--view", args.view)
    up = None if args.up is None else _vector_arg("--up", args.up)
    return dict(
        grid_color=args.grid_color,
        grid_nodes=args.grid_nodes,
        edge_nodes=edge_nodes,
        max_edges=args.max_edges,
        view=view,
        up=up,
        azimuth=args.azimuth,
        elevation=args.elevation,
        width=args.width,
        height=args.height,
        point_size=args.point_size,
        seed=args.seed,
    )


def _show_route(args: argparse.Namespace, model: Any = None) -> Tuple[Dict[str, Optional[str]], List[str]]:
    """``(facts, maybe)`` of a ``show`` call for :data:`gridify._commands.OPTION_USE`: the file, the model (its
    kind once loaded) and the layers drawn (``--layers``, else the default: points, and with a model in a window
    all three unless it is a scene model)."""
    from .._clinames import VIS_LAYERS
    from .._commands import MODEL_KINDS, file_facts, pred_facts

    facts, maybe = file_facts(args.file), []
    named = bool(args.ckpt or args.model)
    if model is not None:
        facts.update(model_facts(model))
    elif named:
        facts["model"], maybe = None, list(MODEL_KINDS)
    else:
        facts["model:none"] = "no model (--ckpt / --model)"
    facts.update(pred_facts(args))
    layers = None if args.layers is None else [x.strip() for x in args.layers.split(",") if x.strip()]
    if layers is None:
        window = named and not args.out
        if window and model is None:
            maybe += ["layers:grid", "layers:edges"]
        one_grid = model is not None and model.task_predictor.one_grid  # a scene's crops have a grid each
        layers = list(VIS_LAYERS) if window and one_grid else ["points"]
    facts["layers"] = f"--layers {','.join(layers)}"
    facts.update({f"layers:{name}": None for name in layers if name in ("grid", "edges")})
    return facts, maybe


def cmd_show(args: argparse.Namespace) -> int:
    from .._clinames import VIS_LAYERS

    check_given_files(args)
    if args.pred is not None:
        check_input_file(args.pred, "--pred")
    layers = None if args.layers is None else [x.strip() for x in args.layers.split(",") if x.strip()]
    bad = [x for x in (layers or ()) if x not in VIS_LAYERS]
    if bad:
        raise SystemExit(f"gridify show: error: unknown layer(s) {bad}; layers are {list(VIS_LAYERS)}")
    check_command_route(args, *_show_route(args))  # before anything loads, as far as the route is known
    from .. import vis
    from ..api import gridify as gridify_fn

    options = _show_options(args)
    model = load_model(args) if (args.ckpt or args.model) else None
    want = set(layers or ())
    if model is not None and not model.task_predictor.one_grid and want & {"grid", "edges"}:
        raise SystemExit(  # each crop of a scene has a grid of its own
            f"gridify show: error: --layers: a {model.task} model has no single grid or edges to draw; use points"
        )
    facts = _show_route(args, model)[0]
    if model is not None:
        check_command_route(args, facts)
    hide = model is not None and route_reads(args, "hide", facts)  # a scene model (--hide, default ceiling)
    if hide:
        _hide_names(args, list(model.class_names))  # an unknown class fails now, not after the scan is labelled
    cloud = read_file(args, model)
    # a bad --labels file fails now, not after the model has labelled every point (minutes for a scan)
    truth = _ground_truth(args, cloud, model) if model is not None and route_reads(args, "labels", facts) else None
    try:
        if model is not None:
            res = _show_labelled(args, model, cloud)
            if layers is None:
                layers = ["points"] if args.out or res["grid"] is None else list(vis.LAYERS)
            pos, labels, names = res["pos"], res["labels"], res["class_names"]
            if hide:  # both panels lose the points predicted as a hidden class
                pos, labels, truth = _hide_classes(args, pos, labels, names, truth)
            if truth is not None:
                img = _show_truth_beside(args, pos, truth, labels, names, options)
                if args.out:
                    print(f"wrote {args.out} ({img.shape[1]}x{img.shape[0]}: ground truth | prediction)")
                return 0
            kw = dict(
                points=pos,
                labels=labels,
                class_names=names,
                grid=res["grid"],
                edges=res["graph"],
                title=f"{Path(args.file).name}: {res['title']}",
            )
        else:
            if layers is None:
                layers = ["points"]
            grid = graph = None
            if want & {"grid", "edges"}:
                grid, graph = gridify_fn(
                    cloud.points, resolution=args.resolution, k=args.k, seed=args.seed, return_graph=True
                )
            from ..api import normalize_cloud

            pos = normalize_cloud(cloud.points)[0] if grid is not None else cloud.points
            kw = dict(
                points=pos, labels=cloud.labels, colors=cloud.colors, grid=grid, edges=graph, title=Path(args.file).name
            )
        img = vis.show(**kw, layers=layers, out=args.out, **options)
    except (vis.RenderError, ValueError) as exc:
        raise SystemExit(f"gridify show: error: {exc}")
    if args.out:
        print(f"wrote {args.out} ({img.shape[1]}x{img.shape[0]}, layers {', '.join(layers)})")
    return 0


def _show_labelled(args: argparse.Namespace, model: Any, cloud: Any) -> Dict[str, Any]:
    """What ``show`` draws of a model's labels: ``pos``, ``labels`` (one per point), ``class_names``, ``grid``,
    ``graph`` and ``title``; from :meth:`~gridify.api.Predictor.inspect` (a summary line printed), or with
    ``--pred`` the labels read from that file (:func:`gridify.api.read_prediction`) without running the model."""
    if args.pred is not None:  # a scene segmenter's labels written before (the route allows no other model)
        from ..api.prediction import label_counts, read_prediction
        from ..api.task_predictors import scene_points

        names = list(model.class_names)
        try:
            labels = read_prediction(args.pred, len(cloud), names, scan=args.file)
            pos = scene_points(cloud, args.up_axis or "z", "gridify show")
        except ValueError as exc:
            raise SystemExit(f"gridify show: error: {exc}")
        print(f"{args.pred}: {len(labels)} points: {label_counts(labels, names)}")
        return dict(pos=pos, labels=labels, class_names=names, grid=None, graph=None, title=model.task)
    try:
        res = model.inspect(cloud, up_axis=args.up_axis or "z", **model_options(args, model, "inspect"))
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"gridify show: error: {exc}")
    pred = res["prediction"]
    print(pred.summary())
    title = pred.task if pred.dense else pred.names
    return dict(
        pos=res["pos"],
        labels=pred.point_labels,
        class_names=pred.class_names,
        grid=res["grid"],
        graph=res["graph"],
        title=title,
    )


def _ground_truth(args: argparse.Namespace, cloud: Any, model: Any) -> Optional[np.ndarray]:
    """The training ids of ``--labels`` (a file, or found beside the scan / in the file with ``auto``), or None."""
    from ..datasets import DatasetError
    from ..datasets.scene_layouts import check_scan_labels, read_scan_labels, scan_label_path

    if args.labels.strip().lower() == "none":
        return None
    auto = args.labels.strip().lower() == "auto"
    path = scan_label_path(args.file) if auto else Path(args.labels)
    if path is not None and not path.is_file():
        raise SystemExit(f"gridify show: error: --labels {args.labels}: no such file")
    try:
        if path is None:  # the file's own label field: ids of the model's classes, as a label file's are
            truth = None if cloud.labels is None else check_scan_labels(args.file, cloud.labels, model.class_names)
        else:
            truth = read_scan_labels(path, cloud, list(model.class_names))
    except DatasetError as exc:
        raise SystemExit(f"gridify show: error: {exc}")
    if truth is not None and not (truth >= 0).any():  # a panel of nothing but unlabelled points: nothing to compare
        what = path if path is not None else f"{args.file}'s label field"
        raise SystemExit(
            f"gridify show: error: {what}: every point is unlabelled (-1, the ignore index; SemanticKITTI's unlabeled "
            "and outlier classes map to it): no ground truth to draw beside the prediction; --labels none draws the "
            "prediction alone"
        )
    return truth


def _show_truth_beside(args: argparse.Namespace, pos: Any, truth: Any, labels: Any, names: List[str], options: dict):
    """Ground truth and prediction side by side (:func:`gridify.vis.show_comparison`)."""
    from .. import vis

    keep = {k: options[k] for k in ("view", "up", "azimuth", "elevation", "width", "height", "point_size")}
    try:
        return vis.show_comparison(pos, truth, labels, names, out=args.out, title=Path(args.file).name, **keep)
    except (vis.RenderError, ValueError) as exc:
        raise SystemExit(f"gridify show: error: {exc}")


def _hide_names(args: argparse.Namespace, class_names: List[str]) -> List[str]:
    """The lower-case classes ``--hide`` names (default: the ceiling, when the model has one: a room seen from
    any side above is hidden by its ceiling); an unknown class exits naming the model's classes."""
    lower = [c.lower() for c in class_names]
    if args.hide is None:
        return ["ceiling"] if "ceiling" in lower else []
    if args.hide.strip().lower() == "none":
        return []
    names = [n.strip().lower() for n in args.hide.split(",") if n.strip()]
    unknown = [n for n in names if n not in lower]
    if unknown:
        raise SystemExit(
            f"gridify show: error: --hide: unknown class(es) {unknown}; the model's classes: {', '.join(class_names)}"
        )
    return names


def _hide_classes(args: argparse.Namespace, pos: Any, labels: Any, class_names: List[str], truth: Any = None):
    """The points, predicted labels and ground truth (when drawn beside) of a labelled scene without the points
    predicted as the classes of ``--hide`` (:func:`_hide_names`)."""
    import numpy as np

    names = _hide_names(args, class_names)
    if not names:
        return pos, labels, truth
    lower = [c.lower() for c in class_names]
    keep = ~np.isin(labels, [lower.index(n) for n in names])
    if not keep.any():
        raise SystemExit(f"gridify show: error: --hide {','.join(names)} leaves no point to draw")
    print(f"hidden: {int((~keep).sum())} points predicted as {', '.join(names)} (--hide none shows them)")
    return pos[keep], labels[keep], None if truth is None else np.asarray(truth)[keep]
