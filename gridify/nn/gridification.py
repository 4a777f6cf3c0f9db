"""Gridification (points -> dense grid) and de-gridification (grid -> points).

Both are one convolutional message-passing layer on the bipartite graph of bilateral kNN
connectivity (thesis eqs. 4.1, 4.2):

    x_i^G = phi_upd( AGG_{j -> i} phi_msg( phi_node(x_j^P), phi_pos(c_i^G - c_j^P) ) )
    x_j^P = phi_upd'( AGG_{i -> j} phi_msg'( phi_node'(x_i^G), phi_pos'(c_j^P - c_i^G) ) )

Inside :func:`gridify.nn.dense.fixed_shapes` both run their fixed-shape (traceable) path on equally
sized clouds ``[B, N, 3]``: the graph is :func:`gridify.nn.dense.fixed_bilateral_knn` (every node's
``k`` points ``A_i``, every point's ``k'`` nodes ``P_j`` with the mask ``keep`` of the edges ``A``
already holds), the messages are the same :meth:`BipartiteConv.edge_message` as the sparse path's, and
the aggregation over the two edge kinds is :func:`gridify.ops.scatter_fixed`:

    x_i^G = phi_upd( AGG( {phi_msg(h_j, phi_pos(c_i^G - c_j)) : j in A_i} U {... : i in P_j, keep_{j,i}} ) )
    x_j^P = phi_upd'( AGG( {phi_msg'(g_i, phi_pos'(c_j - c_i^G)) : i in P_j, keep_{j,i}} U {... : j in A_i} ) )

(a max takes the duplicate edges unmasked: one carries the message of the edge it repeats, the same
value up to the rounding of the two evaluations, and a maximum counts it once).

Validation: :class:`Gridification` and :class:`Degridification` validate their inputs once
(NaN/Inf only outside :func:`gridify._checks.trusted_inputs`, i.e. not when a model that
validated them calls them) and run their :class:`BipartiteConv` trusted; a
:class:`BipartiteConv` called directly validates its own inputs
(:func:`gridify.nn.inputs.check_message_passing_inputs`). Sizes that would exceed the
allocation limit (a resolution, a batch of clouds, a width) are refused before allocating. The
fixed-shape path validates nothing (its callers do: the ONNX wrappers, :func:`gridify_dense`).

Shapes:
    Gridification: pos [N, 3], x [N, F], batch [N] -> [B, C, Rx, Ry, Rz] ([B, C, R, R, R] for an int R);
    Degridification: grid [B, C, Rx, Ry, Rz], graph -> [N, C_out];
    fixed-shape path: pos [B, N, 3], x [B, N, F] -> [B, C, Rx, Ry, Rz]; grid, graph -> [B, N, C_out];
    gridify_dense: pos [B, N, 3], x [B, N, F] -> [B, C, R, R, R]
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .._checks import (
    check_alloc,
    check_batch,
    check_choice,
    check_finite,
    check_float,
    check_index,
    check_parameters,
    check_points,
    check_positive_int,
    check_tensor,
    checked_forward,
    fail,
    trusted_inputs,
    validating,
)
from ..ops.grid import grid_shape, resolution_value
from ..ops.scatter import accumulation_dtype, scatter_fixed_unchecked, scatter_unchecked
from ..ops.knn import check_knn_backend
from ..ops.knn_dense import check_dense_clouds, check_dense_size, index_rows
from ..registry import POS_EMBEDDINGS
from .dense import FixedShapeGraph, FixedShapes, fixed_bilateral_knn, fixed_shape_settings, grid_axes
from .edge_messages import fused_edge_messages, use_fused_messages
from .connectivity import (
    BipartiteGraph,
    GraphBuilder,
    bilateral_knn_unchecked,
    check_connectivity_args,
    check_graph_size,
    warn_small_clouds,
)
from .inputs import check_message_passing_inputs, module_dtype, parse_points
from .grid import RegularGrid

MESSAGES = ("product", "concat")
AGGREGATIONS = ("mean", "max", "sum")


class _MLP(nn.Sequential):
    """``Linear -> GELU -> Linear`` (the state-dict keys of ``nn.Sequential``).

    Without autograd the GELU runs in place on the first layer's fresh output: one large
    temporary fewer per call (on CPU a fresh multi-MiB buffer costs page faults).
    """

    def __init__(self, i: int, h: int, o: int) -> None:
        super().__init__(nn.Linear(i, h), nn.GELU(), nn.Linear(h, o))

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled():
            return super().forward(x)
        first, act, last = self[0], self[1], self[2]
        h = first(x)
        return last(torch.ops.aten.gelu_(h) if act.approximate == "none" else act(h))


class BipartiteConv(nn.Module):
    r"""Convolutional message passing from source to target nodes of a bipartite graph.

        y_i = phi_upd( AGG_{(j, i) in E} phi_msg( phi_node(x_j), phi_pos(o_ji) ) )

    * ``phi_node``: Linear-GELU-Linear, ``F -> H``, evaluated once per *source node* and then
      gathered onto edges.
    * ``phi_pos``: a neural field of the edge offset ``o_ji`` (target minus source), ``D -> H``
      (``"rff"`` random Fourier features or ``"siren"``), with frequency scale ``omega0``.
    * ``phi_msg``: ``"product"``: ``phi_node * phi_pos``; ``"concat"``: an MLP on
      ``[phi_node, phi_pos]``, i.e. ``W_2 GELU(A phi_node + B phi_pos + b)``. Two savings, same
      function class: the ``A phi_node`` half is computed per source node, not per edge, and
      ``B`` is folded into the last linear layer of ``phi_pos`` (two linear maps in a row).
    * ``AGG``: ``"mean"``, ``"max"`` or ``"sum"``; ``phi_upd``: Linear-GELU-Linear, ``H -> C``.

    Shapes:
        x_src: [S, F], edge_src/edge_dst: [E], offset: [E, D] -> [num_dst, C]
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int,
        pos_dim: int = 3,
        pos_embedding: str = "rff",
        omega0: float = 0.1,
        message: str = "product",
        aggr: str = "mean",
        fused_messages: Union[str, bool] = "auto",
        pos_hidden_channels: Optional[int] = None,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        check_positive_int(where, in_channels=in_channels, out_channels=out_channels, hidden_channels=hidden_channels)
        if pos_hidden_channels is not None:
            check_positive_int(where, pos_hidden_channels=pos_hidden_channels)
        check_choice(where, "message", message, MESSAGES)
        check_choice(where, "aggr", aggr, AGGREGATIONS)
        check_choice(where, "fused_messages", fused_messages, ("auto", True, False))
        check_parameters(
            where,
            f"in_channels={in_channels}, hidden_channels={hidden_channels}, out_channels={out_channels}",
            hidden_channels * (in_channels + 6 * hidden_channels + out_channels + 8),
        )
        self.fused_messages = fused_messages
        self.in_channels, self.out_channels, self.hidden_channels = in_channels, out_channels, hidden_channels
        self.message, self.aggr = message, aggr
        H = hidden_channels
        self.phi_node = _MLP(in_channels, H, H)
        self.phi_pos = POS_EMBEDDINGS.build(
            pos_embedding, in_features=pos_dim, out_features=H, omega0=omega0, hidden_features=pos_hidden_channels
        )
        if message == "concat":
            self.msg_node = nn.Linear(H, H)  # A (per source node); B lives in phi_pos's last layer
            self.msg_out = nn.Linear(H, H)
        self.phi_upd = _MLP(H, H, out_channels)

    def reset_parameters(self) -> None:
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    #: Per-edge values (edges x hidden channels) processed at once when no gradient is needed: a
    #: chunk's per-edge tensors (about 1 MiB each) stay in cache, which makes inference about 2x
    #: faster on CPU than one pass (measured: 11k edges x 128 channels, 1 thread, chunks of 2,048
    #: edges vs 8,192: 9.5 vs 15 ms). Training uses one pass.
    edge_chunk_elements: int = 1 << 18

    @property
    def edge_chunk_size(self) -> int:
        """Edges per chunk in the no-gradient path (``edge_chunk_elements / hidden_channels``)."""
        return max(256, self.edge_chunk_elements // self.hidden_channels)

    def node_embedding(self, x_src: Tensor) -> Tensor:
        """``h = phi_node(x_src)`` (times ``A`` for concat messages): the half of every message that
        depends on its source node only, computed once per source node. ``[S, F] -> [S, H]``."""
        h = self.phi_node(x_src)
        return self.msg_node(h) if self.message == "concat" else h

    def edge_message(self, h_src: Tensor, offset: Tensor) -> Tensor:
        """``phi_msg(h_src, phi_pos(offset))``: the messages of edges whose sources have the
        :meth:`node_embedding` ``h_src [..., H]`` and the offsets ``offset [..., D]`` (target minus
        source); ``"product"``: ``h_src * phi_pos``, ``"concat"``: ``W_2 GELU(h_src + phi_pos)``.
        The autograd path of :meth:`forward` and the fixed-shape (exported) path
        (:meth:`Gridification.fixed_shape_forward`, :meth:`Degridification.fixed_shape_propagate`) both
        compute their messages here. ``-> [..., H]``."""
        p = self.phi_pos(offset)
        if self.message == "product":
            return h_src * p
        return self.msg_out(nn.functional.gelu(h_src + p))

    def update(self, agg: Tensor) -> Tensor:
        """``phi_upd(agg)``: the target features of the aggregated messages ``[T, H] -> [T, C]``."""
        return self.phi_upd(agg)

    def _messages(self, h: Tensor, offset: Tensor, edge_src: Tensor, phi_pos=None) -> Tensor:
        if not torch.is_grad_enabled():  # same values as edge_message, fewer temporaries and passes over memory
            p = (phi_pos or self.phi_pos)(offset)
            if self.message == "product":
                return p.mul_(torch.index_select(h, 0, edge_src))
            return self.msg_out(torch.ops.aten.gelu_(p.add_(torch.index_select(h, 0, edge_src))))
        return self.edge_message(h[edge_src], offset)

    def _inference_phi_pos(self):
        """phi_pos for the no-gradient path: the field's fused ``inference_fn()`` when it has one."""
        make = getattr(self.phi_pos, "inference_fn", None)
        return make() if make is not None else self.phi_pos

    @checked_forward(check_message_passing_inputs)
    def forward(self, x_src: Tensor, edge_src: Tensor, edge_dst: Tensor, offset: Tensor, num_dst: int) -> Tensor:
        h = self.node_embedding(x_src)  # A phi_node for concat messages, once per source node
        E = edge_src.numel()
        chunk = self.edge_chunk_size
        if torch.is_grad_enabled():
            if use_fused_messages(
                self.fused_messages, field=self.phi_pos, aggr=self.aggr, needs_grad=True, offset=offset
            ):
                agg = fused_edge_messages(
                    h,
                    offset,
                    edge_src,
                    edge_dst,
                    num_dst,
                    field=self.phi_pos,
                    aggr=self.aggr,
                    msg_out=self.msg_out if self.message == "concat" else None,
                )
            else:
                agg = scatter_unchecked(self._messages(h, offset, edge_src), edge_dst, num_dst, self.aggr)
        elif E <= chunk:
            agg = scatter_unchecked(
                self._messages(h, offset, edge_src, self._inference_phi_pos()), edge_dst, num_dst, self.aggr
            )
        else:
            agg = self._chunked_aggregate(h, offset, edge_src, edge_dst, num_dst, chunk)
        return self.update(agg)

    def _chunked_aggregate(
        self, h: Tensor, offset: Tensor, edge_src: Tensor, edge_dst: Tensor, num_dst: int, chunk: int
    ) -> Tensor:
        """The same aggregation as one pass, edge chunk by edge chunk (inference only).

        Sums and means accumulate in float32 when the messages are bf16/fp16 (under autocast), as
        :func:`~gridify.ops.scatter` does, and are rounded once: a low-precision accumulator would
        drop small messages added to a large sum, and a count above 256 is not exact in bf16.
        """
        H = self.hidden_channels
        if self.aggr == "max":
            out = h.new_full((num_dst, H), float("-inf"))
        else:
            out = h.new_zeros((num_dst, H), dtype=accumulation_dtype(h.dtype))
        phi_pos = self._inference_phi_pos()
        for s in range(0, edge_src.numel(), chunk):
            m = self._messages(h, offset[s : s + chunk], edge_src[s : s + chunk], phi_pos)
            dst = edge_dst[s : s + chunk]
            if self.aggr == "max":
                out.scatter_reduce_(0, dst[:, None].expand_as(m), m, reduce="amax", include_self=True)
            else:
                out.index_add_(0, dst, m.to(out.dtype))
        if self.aggr == "mean":
            out /= torch.bincount(edge_dst, minlength=num_dst).clamp_(min=1).to(out.dtype)[:, None]
        elif self.aggr == "max":
            out.masked_fill_(torch.isinf(out), 0.0)  # targets without edges, as scatter() gives
        return out.to(h.dtype)


def check_graph(where: str, graph: BipartiteGraph) -> None:
    """A graph given from outside: ``edge_index [2, E]`` integers, points in ``[0, N)``, nodes in
    ``[0, B R^3)``, finite points on the edges' device."""
    edges = check_tensor(where, "graph.edge_index", graph.edge_index)
    if edges.dim() != 2 or edges.size(0) != 2:
        fail(where, f"graph.edge_index must have shape [2, E], got {tuple(edges.shape)}")
    check_index(where, "graph.edge_index[0] (points)", edges[0], graph.num_points, device=graph.pos.device)
    check_index(where, "graph.edge_index[1] (grid nodes)", edges[1], graph.num_nodes, device=graph.pos.device)
    check_finite(where, "graph.pos", graph.pos, graph.batch)


def check_grid_bytes(where: str, resolution: Union[int, Sequence[int]], channels: int) -> None:
    """Refuse a resolution (``R`` or ``(Rx, Ry, Rz)``) whose grid of ``channels`` float32 features
    for ONE cloud already exceeds the allocation limit (checked at construction, before anything
    is allocated)."""
    shape = grid_shape(resolution)
    dims = "R, R, R" if shape[0] == shape[1] == shape[2] else "Rx, Ry, Rz"
    check_alloc(
        where,
        f"resolution={resolution_value(shape)} with {channels} channels (one cloud's grid "
        f"[{channels}, {dims}] in float32)",
        4 * channels * math.prod(shape),
    )


class Gridification(nn.Module):
    r"""Learned gridification: a point cloud -> a dense ``Rx x Ry x Rz`` grid of features.

        x_i^G = phi_upd( AGG_{j -> i in E} phi_msg( phi_node(x_j), phi_pos(c_i^G - c_j) ) )

    over bilateral kNN edges ``E`` (:func:`bilateral_knn`); see :class:`BipartiteConv` for the
    networks. The grid spans ``bounds`` (default ``[-1, 1]^3``; normalize clouds into it first).

    Args:
        in_channels: point features ``F`` (3 when ``x`` is None: the coordinates are used).
        out_channels: grid channels ``C``.
        resolution: grid nodes per axis, ``R`` (a cube) or ``(Rx, Ry, Rz)`` (e.g. a flat scene,
            ``(32, 32, 8)``); choose ``Rx Ry Rz`` roughly ``N``. ``(R, R, R)`` is the int ``R``.
        k: neighbours in each direction of the bilateral kNN.
        hidden_channels: width ``H`` of phi_node / phi_pos / phi_msg / phi_upd
            (default ``max(C, F + 3)``, requirement (iv) of the thesis).
        pos_embedding: ``"rff"`` (default) or ``"siren"`` field for phi_pos.
        omega0: frequency scale of phi_pos (0.1 ModelNet, 1.0 ShapeNet).
        message: ``"product"`` (classification) or ``"concat"`` (segmentation).
        aggr: ``"mean"`` (classification), ``"max"`` (segmentation) or ``"sum"``.
        bounds: ``(lower, upper)`` of the grid box, scalars or per-axis triples.
        outside: ``"error"`` (default) raises for points outside the box; ``"allow"`` keeps
            them (they still connect to their nearest nodes).
        knn_backend: backend of the node -> points kNN search, see :func:`gridify.ops.knn`.
        max_in_degree: optional cap on the edges a grid node receives (e.g. ``2 * k``); see
            :func:`bilateral_knn` (coverage of every point is kept even past the cap).
        pos_hidden_channels: hidden width of the positional field phi_pos (its Fourier features
            and hidden layer; default ``H``). A narrower field costs less per edge: the per-edge
            matrix products take ``H_pos (H_pos + H)`` multiply-adds instead of ``2 H^2``.

    Inputs: ``pos [N, 3]`` with ``x [N, F]`` and ``batch [N]`` (PyG style, sorted), a PyG
    ``Data``/``Batch`` with those attributes, or dense ``pos [B, N, 3]`` with ``x [B, N, F]``.
    ``x=None`` uses the coordinates as features.
    A cloud with fewer than ``k`` points is allowed (warning); NaN/Inf, empty clouds, wrong
    shapes/dtypes and points outside the box raise ``ValueError`` naming the cloud.

    Shapes:
        pos [N, 3], x [N, F], batch [N] -> [B, C, Rx, Ry, Rz] (axes C, x, y, z); with
        ``return_graph=True`` also the :class:`BipartiteGraph` for :class:`Degridification`.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        resolution: Union[int, Sequence[int]],
        k: int = 9,
        hidden_channels: Optional[int] = None,
        pos_embedding: str = "rff",
        omega0: float = 0.1,
        message: str = "product",
        aggr: str = "mean",
        bounds: Tuple[Union[float, Sequence[float]], Union[float, Sequence[float]]] = (-1.0, 1.0),
        outside: str = "error",
        knn_backend: str = "auto",
        max_in_degree: Optional[int] = None,
        pos_hidden_channels: Optional[int] = None,
    ) -> None:
        super().__init__()
        where = "Gridification"
        check_choice(where, "outside", outside, ("error", "allow"))
        if hidden_channels is None and isinstance(in_channels, int) and isinstance(out_channels, int):
            hidden_channels = max(out_channels, in_channels + 3)
        if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
            fail(where, f"bounds must be a pair (lower, upper), got {bounds!r}")
        self.grid = RegularGrid(resolution, bounds[0], bounds[1])
        check_positive_int(where, out_channels=out_channels)
        check_grid_bytes(where, self.grid.shape, out_channels)
        self.k = check_connectivity_args(where, self.grid, k, knn_backend, max_in_degree)
        self.outside, self.knn_backend, self.max_in_degree = outside, knn_backend, max_in_degree
        self.conv = BipartiteConv(
            in_channels,
            out_channels,
            hidden_channels,
            3,
            pos_embedding,
            omega0,
            message,
            aggr,
            pos_hidden_channels=pos_hidden_channels,
        )
        self.in_channels, self.out_channels = in_channels, out_channels

    @property
    def resolution(self) -> Union[int, Tuple[int, int, int]]:
        """``R`` of a cubic grid, else ``(Rx, Ry, Rz)``."""
        return self.grid.resolution

    def set_resolution(self, resolution: Union[int, Sequence[int]]) -> None:
        """Gridify onto a grid of another resolution (``R`` or ``(Rx, Ry, Rz)``) from now on
        (same box, same weights)."""
        grid = RegularGrid(resolution, self.grid.lower, self.grid.upper)
        check_grid_bytes(f"{type(self).__name__}.set_resolution", grid.shape, self.out_channels)
        self.grid = grid

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()

    def _check_cloud(
        self, where: str, pos: Tensor, batch: Optional[Tensor], num_clouds: Optional[int]
    ) -> Tuple[Tensor, Tensor]:
        """Validate flat ``pos``/``batch`` once: ``(batch, counts)``. Points outside the box, NaN/Inf,
        empty clouds and bad batch vectors raise; clouds with fewer than ``k`` points warn."""
        batch, B, counts = check_batch(where, "batch", batch, pos.size(0), num_clouds, pos.device)
        if B == 0:
            fail(where, "no points: every cloud needs at least one point")
        check_graph_size(where, self.grid, self.k, pos.size(0), B, pos, self.conv.hidden_channels + self.out_channels)
        check_knn_backend(where, self.knn_backend, pos.device, "knn_backend")
        if validating():
            check_finite(where, "pos", pos, batch)
        warn_small_clouds(where, counts, self.k)
        if self.outside == "error":
            inside = self.grid.contains_unchecked(pos)
            if not bool(inside.all()):
                row = int((~inside).nonzero()[0])
                fail(
                    where,
                    f"cloud {int(batch[row])} has points outside the grid box {self.grid.lower}.."
                    f"{self.grid.upper} (e.g. row {row} at {[round(v, 4) for v in pos[row].tolist()]}); "
                    f"normalize the cloud into the box, or pass bounds=... or outside='allow'",
                )
        return batch, counts

    def _given_graph(self, where: str, graph: object, pos: Tensor, batch: Tensor, num_clouds: int) -> BipartiteGraph:
        """A prebuilt graph, checked against this call's points and this module's grid (the point
        positions and cloud ids compared exactly, the edges checked in range), as a fresh value
        that holds this call's ``pos``/``batch`` (on their device)."""
        if not isinstance(graph, BipartiteGraph):
            fail(where, f"graph must be a BipartiteGraph (from graph_builder()), got {type(graph).__name__}")
        grid = graph.grid
        if (grid.shape, grid.lower, grid.upper) != (self.grid.shape, self.grid.lower, self.grid.upper):
            fail(
                where,
                f"graph was built for a grid of resolution {grid.resolution} over {grid.lower}..{grid.upper}, "
                f"this module's grid has resolution {self.grid.resolution} over "
                f"{self.grid.lower}..{self.grid.upper}",
            )
        if graph.num_points != pos.size(0) or graph.num_clouds != num_clouds:
            fail(
                where,
                f"graph was built for {graph.num_points} points in {graph.num_clouds} clouds, "
                f"got {pos.size(0)} points in {num_clouds} clouds",
            )
        edges = graph.edge_index.to(pos.device)
        if validating():
            same = torch.equal(graph.pos.to(pos.device, pos.dtype), pos) and torch.equal(
                graph.batch.to(batch.device), batch
            )
            if not same:
                fail(where, "graph was built for other points than pos/batch (positions or cloud ids differ)")
            check_graph(where, BipartiteGraph(edges, pos, batch, num_clouds, self.grid))
            keys = edges[1] * pos.size(0) + edges[0]
            if keys.numel() > 1 and not bool((keys[1:] > keys[:-1]).all()):
                fail(
                    where,
                    "graph.edge_index must be sorted by grid node, then point, without repeats "
                    "(as graph_builder() returns it)",
                )
        return BipartiteGraph(edge_index=edges, pos=pos, batch=batch, num_clouds=num_clouds, grid=self.grid)

    def build_graph(
        self,
        pos: Tensor,
        batch: Optional[Tensor] = None,
        num_clouds: Optional[int] = None,
    ) -> BipartiteGraph:
        """Bilateral kNN edges of flat ``pos [N, 3]`` to this module's grid (validated)."""
        where = type(self).__name__
        pos = check_points(where, "pos", pos)
        batch, counts = self._check_cloud(where, pos, batch, num_clouds)
        return bilateral_knn_unchecked(pos, self.grid, self.k, batch, counts, self.knn_backend, self.max_in_degree)

    def graph_builder(self) -> GraphBuilder:
        """A picklable :class:`GraphBuilder` that builds this module's graph elsewhere (a DataLoader
        worker); its graphs go back in as ``forward(..., graph=graph)``."""
        return GraphBuilder(self.grid, self.k, self.knn_backend, self.max_in_degree)

    #: the node -> points search of the fixed-shape graph (:data:`gridify.ops.knn_dense.SEARCHES`) unless
    #: :func:`gridify.nn.dense.fixed_shapes` names one; a grid of thousands of nodes over clouds of thousands of
    #: points (a scene segmenter's) searches by bucket
    fixed_search = "brute"

    def fixed_tables(
        self, dtype: torch.dtype = torch.float32, device: Optional[torch.device] = None
    ) -> Tuple[Tensor, Tuple[Tensor, Tensor, Tensor]]:
        """The grid's node positions ``[R, 3]`` and per-axis coordinates (:func:`gridify.nn.dense.grid_axes`) of
        the fixed-shape path: computed once per grid, dtype and device and kept, so that a trace of the path,
        after one eager call, holds them as constants (not as the ops that compute them)."""
        device = torch.device("cpu") if device is None else torch.device(device)
        key = (self.grid.shape, self.grid.lower, self.grid.upper, dtype, device)
        cached = self.__dict__.get("_fixed_tables")
        if cached is None or cached[0] != key:
            cached = (key, (self.grid.positions(device, dtype), grid_axes(self.grid, device, dtype)))
            self.__dict__["_fixed_tables"] = cached
        return cached[1]

    def fixed_shape_forward(
        self, pos: Tensor, x: Tensor, tables: Optional[Tuple[Tensor, Tuple[Tensor, Tensor, Tensor]]] = None
    ) -> Tuple[Tensor, FixedShapeGraph]:
        """The fixed-shape path of :meth:`forward` (module docstring; no checks): the grid ``[B, C, Rx, Ry, Rz]``
        of equally sized clouds ``pos [B, N, 3]`` (finite, ``N >= k``) with features ``x [B, N, F]``, and the
        graph. ``tables``: :meth:`fixed_tables` (the default)."""
        settings = fixed_shape_settings() or FixedShapes()
        nodes, axes = self.fixed_tables(pos.dtype, pos.device) if tables is None else tables
        search = settings.search or self.fixed_search
        graph = fixed_bilateral_knn(pos, self.k, nodes, axes, settings.node_chunk, search)
        conv = self.conv
        B, N = pos.shape[:2]
        R, k = nodes.size(0), graph.node_points.size(2)
        h = conv.node_embedding(x)
        H = h.size(-1)
        cloud = torch.arange(B, device=pos.device)
        src = (graph.node_points + (cloud * N).view(B, 1, 1)).reshape(-1)  # A: node <- its k points, [B R k]
        dst = (graph.point_nodes + (cloud * R).view(B, 1, 1)).reshape(-1)  # P: point -> its k' nodes, [B N k']
        offset_a = nodes.repeat(B, 1).repeat_interleave(k, 0) - index_rows(pos.reshape(-1, 3), src)
        m_a = conv.edge_message(index_rows(h.reshape(-1, H), src), offset_a)
        m_b = conv.edge_message(h.unsqueeze(2), index_rows(nodes, graph.point_nodes) - pos.unsqueeze(2)).reshape(-1, H)
        keep = None if conv.aggr == "max" else graph.keep.reshape(-1)  # a max counts a duplicate once
        out = conv.update(scatter_fixed_unchecked(m_a.view(B * R, k, H), m_b, dst, conv.aggr, extra_keep=keep))
        return self.grid.to_dense_unchecked(out, B), graph

    def forward(
        self,
        pos: Tensor,
        x: Optional[Tensor] = None,
        batch: Optional[Tensor] = None,
        *,
        num_clouds: Optional[int] = None,
        return_graph: bool = False,
        graph: Optional[BipartiteGraph] = None,
    ):
        """``graph``: the graph of exactly these points built by :meth:`graph_builder` (e.g. in a
        DataLoader worker), used instead of building it here; checked against ``pos``/``batch``."""
        where = type(self).__name__
        pos, x, batch, dense_shape = parse_points(where, pos, x, batch, self.in_channels, module_dtype(self))
        if fixed_shape_settings() is not None:  # equally sized clouds [B, N, 3], validated by the caller
            grid, fixed = self.fixed_shape_forward(pos, x)
            return (grid, fixed) if return_graph else grid
        batch, counts = self._check_cloud(where, pos, batch, num_clouds)
        if validating():
            check_finite(where, "x", x, batch)
        if graph is None:
            graph = bilateral_knn_unchecked(pos, self.grid, self.k, batch, counts, self.knn_backend, self.max_in_degree)
        else:
            graph = self._given_graph(where, graph, pos, batch, counts.numel())
        graph.dense_shape = dense_shape
        point, node = graph.edge_index
        offset = graph.point_to_node_offsets()
        with trusted_inputs():
            out = self.conv(x, point, node, offset, graph.num_nodes)
        grid = self.grid.to_dense_unchecked(out, graph.num_clouds)
        return (grid, graph) if return_graph else grid


class Degridification(nn.Module):
    r"""Learned de-gridification: dense grid features -> features at the original points.

        x_j^P = phi_upd( AGG_{i -> j in E^T} phi_msg( phi_node(x_i^G), phi_pos(c_j^P - c_i^G) ) )

    over the *transposed* edges of the gridification graph (no second kNN search), with weights
    of its own. Arguments as :class:`Gridification` (``in_channels`` = grid channels ``C``).

    Shapes:
        grid [B, C, Rx, Ry, Rz] (or [B * Rx Ry Rz, C]), graph -> [N, C_out], or [B, N, C_out] when the
        graph was built from dense ``[B, N, 3]`` points.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: Optional[int] = None,
        pos_embedding: str = "rff",
        omega0: float = 0.1,
        message: str = "product",
        aggr: str = "mean",
        pos_hidden_channels: Optional[int] = None,
    ) -> None:
        super().__init__()
        if hidden_channels is None and isinstance(in_channels, int) and isinstance(out_channels, int):
            hidden_channels = max(in_channels, out_channels + 3)
        self.conv = BipartiteConv(
            in_channels,
            out_channels,
            hidden_channels,
            3,
            pos_embedding,
            omega0,
            message,
            aggr,
            pos_hidden_channels=pos_hidden_channels,
        )
        self.in_channels, self.out_channels = in_channels, out_channels

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()

    def forward(self, grid: Tensor, graph: BipartiteGraph) -> Tensor:
        """Validate ``grid`` (type, shape, dtype, NaN/Inf) and ``graph``, then :meth:`propagate`."""
        where = type(self).__name__
        grid = check_tensor(where, "grid", grid)
        if not isinstance(graph, BipartiteGraph):
            fail(
                where,
                f"graph must be the BipartiteGraph returned by Gridification(..., return_graph=True), "
                f"got {type(graph).__name__}",
            )
        check_float(where, "grid", grid)
        shape, B, nodes = graph.grid.shape, graph.num_clouds, graph.grid.num_nodes
        if grid.dim() == 5:
            if tuple(grid.shape) != (B, self.in_channels, *shape):
                fail(
                    where,
                    f"grid must have shape [{B}, {self.in_channels}, {', '.join(str(r) for r in shape)}] to "
                    f"match the graph and in_channels, got {tuple(grid.shape)}",
                )
        elif grid.dim() == 2:
            if tuple(grid.shape) != (B * nodes, self.in_channels):
                fail(
                    where,
                    f"flat grid features must have shape [{B * nodes}, {self.in_channels}], got {tuple(grid.shape)}",
                )
        elif graph.grid.is_cubic:
            fail(where, f"grid must be [B, C, R, R, R] or [B * R^3, C], got {tuple(grid.shape)}")
        else:
            fail(where, f"grid must be [B, C, Rx, Ry, Rz] or [B * Rx Ry Rz, C], got {tuple(grid.shape)}")
        if grid.device != graph.pos.device:
            fail(where, f"grid is on {grid.device} but the graph's points are on {graph.pos.device}")
        if validating():
            flat = graph.grid.from_dense_unchecked(grid) if grid.dim() == 5 else grid
            check_finite(where, "grid", flat, torch.arange(B, device=grid.device).repeat_interleave(nodes))
            check_graph(where, graph)
        return self.propagate(grid, graph)

    def propagate(self, grid: Tensor, graph: Union[BipartiteGraph, FixedShapeGraph]) -> Tensor:
        """De-gridify without validation (``grid`` of the shape :meth:`forward` checks, finite).

        For library code that produced ``grid`` and ``graph`` itself (a model's forward pass); over the graph
        of the fixed-shape path (:class:`gridify.nn.dense.FixedShapeGraph`) it runs :meth:`fixed_shape_propagate`.
        """
        if isinstance(graph, FixedShapeGraph):
            return self.fixed_shape_propagate(grid, graph)
        x = graph.grid.from_dense_unchecked(grid) if grid.dim() == 5 else grid
        x = x.to(module_dtype(self))
        point, node = graph.edge_index
        offset = -graph.point_to_node_offsets().to(x.dtype)
        with trusted_inputs():
            out = self.conv(x, node, point, offset, graph.num_points)
        if graph.dense_shape is not None:
            out = out.view(*graph.dense_shape, -1)
        return out

    def fixed_shape_propagate(self, grid: Tensor, graph: FixedShapeGraph) -> Tensor:
        r"""The fixed-shape path of :meth:`propagate` (module docstring; no checks): grid features
        ``[B, C, Rx, Ry, Rz]`` at the points ``graph.pos [B, N, 3]``, ``[B, N, C_out]``. Node ``i`` sends to
        every point of ``A_i`` and to every point ``j`` whose ``P_j`` holds it (``keep``), with offsets
        ``c_j - c_i^G``."""
        conv, pos, nodes = self.conv, graph.pos, graph.nodes
        B, N = pos.shape[:2]
        R, k, kk = nodes.size(0), graph.node_points.size(2), graph.point_nodes.size(2)
        h = conv.node_embedding(grid.permute(0, 2, 3, 4, 1).reshape(B * R, -1))
        H = h.size(-1)
        cloud = torch.arange(B, device=pos.device)
        dst = (graph.node_points + (cloud * N).view(B, 1, 1)).reshape(-1)  # A edges: node -> point, [B R k]
        offset_a = index_rows(pos.reshape(-1, 3), dst) - nodes.repeat(B, 1).repeat_interleave(k, 0)
        m_a = conv.edge_message(h.repeat_interleave(k, 0), offset_a)
        src = (graph.point_nodes + (cloud * R).view(B, 1, 1)).reshape(-1)  # P edges: point <- node, [B N k']
        offset_b = pos.unsqueeze(2).expand(-1, -1, kk, -1).reshape(-1, 3) - index_rows(
            nodes, graph.point_nodes
        ).reshape(-1, 3)
        m_b = conv.edge_message(index_rows(h, src), offset_b)
        keep = None if conv.aggr == "max" else graph.keep.reshape(B * N, kk)  # a max counts a duplicate once
        out = conv.update(scatter_fixed_unchecked(m_b.view(B * N, kk, H), m_a, dst, conv.aggr, own_keep=keep))
        return out.view(B, N, -1)


def gridify_dense(
    module: Gridification, pos: Tensor, x: Tensor, tables: Optional[Tuple[Tensor, Tensor]] = None
) -> Tensor:
    r"""The forward of a :class:`Gridification` on fixed-shape tensors (traceable): its fixed-shape path.

    ``pos [B, N, 3]`` (finite, ``N >= k``) and ``x [B, N, F]`` -> ``[B, C, R, R, R]``: the same
    result as ``module(pos, x)`` (to float rounding) over the edges of
    :func:`gridify.nn.dense.fixed_bilateral_knn`; points outside the grid box connect to their nearest
    nodes (``outside="allow"``). Aggregations ``mean``, ``sum`` and ``max``. ``tables``: the grid's
    :func:`gridify.nn.dense.grid_tables` (None: the module's own). Validates its arguments (outside a
    trace), then runs :meth:`Gridification.fixed_shape_forward`.
    """
    if validating():
        _check_gridify_dense(module, pos, x, tables)
    fixed = None if tables is None else (tables[0], (tables[1][0], tables[1][1], tables[1][2]))
    return module.fixed_shape_forward(pos, x, fixed)[0]


def _check_gridify_dense(module: object, pos: object, x: object, tables: object) -> None:
    where = "gridify_dense"
    if not isinstance(module, Gridification):
        fail(where, f"module must be a gridify.nn.Gridification, got {type(module).__name__}")
    if module.max_in_degree is not None:
        fail(
            where,
            f"the module caps the in-degree (max_in_degree={module.max_in_degree}); gridify_dense builds "
            f"the uncapped bilateral kNN graph",
        )
    p = next(module.parameters())
    pos = check_dense_clouds(where, pos, "pos", module.k, p.dtype, p.device)
    x = check_tensor(where, "x", x)
    if x.dim() != 3 or x.shape[:2] != pos.shape[:2] or x.size(2) != module.in_channels:
        fail(
            where,
            f"x must have shape [B, N, F] = [{pos.size(0)}, {pos.size(1)}, {module.in_channels}] (pos' B and "
            f"N, the module's in_channels), got {tuple(x.shape)}",
        )
    if x.dtype != pos.dtype or x.device != pos.device:
        fail(where, f"x must have pos' dtype and device ({pos.dtype} on {pos.device}), got {x.dtype} on {x.device}")
    check_finite(where, "x", x.reshape(-1, x.size(2)), torch.arange(x.size(0)).repeat_interleave(x.size(1)))
    if tables is not None:
        R = module.grid.resolution
        ok = (
            isinstance(R, int)
            and isinstance(tables, (tuple, list))
            and len(tables) == 2
            and all(isinstance(t, Tensor) for t in tables)
            and tuple(tables[0].shape) == (R**3, 3)
            and tuple(tables[1].shape) == (3, R)
            and all(t.dtype == pos.dtype and t.device == pos.device for t in tables)
        )
        if not ok:
            fail(
                where,
                f"tables must be None or the grid's grid_tables(grid, device, dtype): (nodes [{module.grid.num_nodes}, 3], "
                f"axis [3, {R}]) of pos' dtype and device",
            )
    check_dense_size(where, f"pos {tuple(pos.shape)}", pos.size(0), pos.size(1), module.grid.num_nodes, pos.dtype)
