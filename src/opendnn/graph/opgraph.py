"""The validated, frozen operation graph that heuristics and engines see.

``OpGraph`` holds TensorDescs by uid and nodes (whose tensor roles are uids) in a
topological order. Its ``key()`` is a hash of everything that affects which engines
apply and how they run (dims, strides, types, attributes; not names or uids' values
beyond their wiring), so plans and tuning results can be cached by it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from functools import cached_property

from ..tensor import TensorDesc, packed_strides, stride_order
from .nodes import NODE_TYPES, Node


def _uids(value):
    if isinstance(value, (list, tuple)):
        return list(value)
    return [] if value is None else [value]


@dataclasses.dataclass(frozen=True, eq=False)
class OpGraph:
    tensors: dict  # uid -> TensorDesc
    nodes: tuple  # Node, roles hold uids, topologically ordered
    name: str = ""

    # ---- structure -------------------------------------------------------------------
    @cached_property
    def producers(self) -> dict:
        return {u: n for n in self.nodes for v in n.outputs.values() for u in _uids(v)}

    @cached_property
    def consumers(self) -> dict:
        out: dict = {}
        for n in self.nodes:
            for v in n.inputs.values():
                for u in _uids(v):
                    out.setdefault(u, []).append(n)
        return out

    @cached_property
    def input_uids(self) -> list:
        """Non-virtual tensors no node produces, in first-use order."""
        seen, out = set(), []
        for n in self.nodes:
            for v in n.inputs.values():
                for u in _uids(v):
                    if u not in self.producers and u not in seen:
                        seen.add(u)
                        out.append(u)
        return out

    @cached_property
    def output_uids(self) -> list:
        """Non-virtual tensors some node produces."""
        return [
            u
            for n in self.nodes
            for v in n.outputs.values()
            for u in _uids(v)
            if not self.tensors[u].is_virtual
        ]

    @cached_property
    def output_uid_set(self) -> frozenset:
        return frozenset(self.output_uids)

    @cached_property
    def ragged_uid_set(self) -> frozenset:
        """uids of tensors laid out by ragged offsets (packed variable-length rows): the
        offsets, not the dims, say which of their elements are addressed."""
        out = set()
        for n in self.nodes:
            for r in getattr(n, "ragged_roles", list)():
                t = n.inputs.get(r, n.outputs.get(r))
                if t is not None:
                    out.add(t)
        return frozenset(out)

    @cached_property
    def virtual_uids(self) -> list:
        return [u for u, d in self.tensors.items() if d.is_virtual]

    def desc(self, uid) -> TensorDesc:
        return self.tensors[uid]

    @staticmethod
    def node_uids(node: Node, which: str) -> list:
        return [u for v in getattr(node, which).values() for u in _uids(v)]

    # ---- identity ----------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "name": self.name,
            "tensors": [d.to_json() for d in self.tensors.values()],
            "nodes": [
                {
                    "kind": n.kind,
                    "name": n.name,
                    "compute_data_type": n.compute_data_type.name,
                    "inputs": n.inputs,
                    "outputs": n.outputs,
                    "attrs": n.attrs(),
                }
                for n in self.nodes
            ],
        }

    @classmethod
    def from_json(cls, d: dict) -> "OpGraph":
        """The graph ``to_json`` wrote, as read: every uid a node names is one of the
        tensors; the rules of a valid graph are ``Graph.validate``'s to check. Raises
        ValueError (or KeyError, TypeError) saying what is malformed."""
        from ..enums import DataType

        if not isinstance(d, dict):
            raise ValueError(f"a {type(d).__name__}, not an object")
        tensors: dict = {}
        for t in d["tensors"]:
            uid = t["uid"]
            if type(uid) is not int or uid < 0:
                raise ValueError(f"tensor uid {uid!r:.40} is not a non-negative integer")
            if uid in tensors:
                raise ValueError(f"two tensors have uid {uid}")
            if t["data_type"] not in DataType.__members__:
                raise ValueError(
                    f"tensor uid {uid}: {t['data_type']!r:.40} is not a data type name"
                )
            tensors[uid] = TensorDesc.from_json(t)
        nodes = []
        for nd in d["nodes"]:
            cls_ = NODE_TYPES.get(nd["kind"])
            if cls_ is None:
                raise ValueError(f"unknown node kind {nd['kind']!r:.40}")
            for side in ("inputs", "outputs"):
                if not isinstance(nd[side], dict):
                    raise ValueError(f"node {nd['name']!r:.40}: {side} is not an object")
                for role, v in nd[side].items():
                    for u in v if isinstance(v, list) and side == "inputs" else [v]:
                        if type(u) is not int or u not in tensors:
                            raise ValueError(
                                f"node {nd['name']!r:.40}: {side[:-1]} {role} "
                                f"is uid {u!r:.40}, not a tensor of the graph"
                            )
            if not nd["outputs"]:
                raise ValueError(f"node {nd['name']!r:.40} has no outputs")
            attrs = {k: _decode_attr(cls_, k, v) for k, v in nd["attrs"].items()}
            node = cls_(
                name=nd["name"],
                compute_data_type=DataType[nd["compute_data_type"]],
                inputs=dict(nd["inputs"]),
                outputs=dict(nd["outputs"]),
                **attrs,
            )
            nodes.append(node)
        return cls(tensors, tuple(nodes), d.get("name", ""))

    @cached_property
    def canonical_uids(self) -> tuple:
        """Tensor uids in order of first appearance over the nodes' inputs and outputs:
        two graphs with the same key hold the same tensors at the same positions."""
        return tuple(self._canonical[0])

    @cached_property
    def _key(self) -> str:
        return self._canonical[1]

    @cached_property
    def _canonical(self) -> tuple:
        # Canonical form: uids renumbered by first appearance, names dropped.
        order: dict = {}

        def canon(u):
            return order.setdefault(u, len(order))

        nodes = []
        for n in self.nodes:
            ins = {r: [canon(u) for u in _uids(v)] for r, v in n.inputs.items()}
            outs = {r: [canon(u) for u in _uids(v)] for r, v in n.outputs.items()}
            nodes.append([n.kind, n.compute_data_type.name, ins, outs, n.attrs()])
        tensors = []
        for u, i in sorted(order.items(), key=lambda kv: kv[1]):
            d = self.tensors[u]
            tensors.append(
                [i, d.dims, d.strides, d.data_type.name, d.is_virtual, d.is_pass_by_value]
            )
        blob = json.dumps([nodes, tensors], sort_keys=True, default=str)
        return list(order), hashlib.sha256(blob.encode()).hexdigest()[:32]

    def key(self) -> str:
        return self._key

    def describe(self) -> str:
        """One line per node: 'kind(mode) in -> out'."""
        lines = []
        for n in self.nodes:
            ins = ",".join(self.tensors[u].label() for u in self.node_uids(n, "inputs"))
            outs = ",".join(self.tensors[u].label() for u in self.node_uids(n, "outputs"))
            lines.append(f"{n.label()}: {ins} -> {outs}")
        return "; ".join(lines)

    def piece(self, nodes: list) -> "OpGraph":
        """The subgraph of ``nodes`` with every tensor that crosses its border made real."""
        inside = {id(n) for n in nodes}
        crossing = set()
        for n in nodes:
            for u in self.node_uids(n, "outputs"):
                if any(id(c) not in inside for c in self.consumers.get(u, [])):
                    crossing.add(u)
            for u in self.node_uids(n, "inputs"):
                p = self.producers.get(u)
                if p is not None and id(p) not in inside:
                    crossing.add(u)
        return self.subgraph(nodes, crossing)

    def subgraph(self, nodes: list, materialized: set) -> "OpGraph":
        """The graph of ``nodes`` alone; virtual tensors in ``materialized`` become
        non-virtual (they cross a partition boundary and live in the workspace), packed in
        their stride order: a virtual tensor's strides are never seen by the caller, and
        ones inherited from a gapped input (a slice, a strided batch) would size the
        workspace by the input's span instead of the elements."""
        uids = {u for n in nodes for w in ("inputs", "outputs") for u in self.node_uids(n, w)}
        tensors = {}
        for u in self.tensors:
            if u in uids:
                d = self.tensors[u]
                if u in materialized and d.is_virtual:
                    strides = d.strides
                    if not (d.is_packed() or d.has_overlap()):
                        strides = packed_strides(d.dims, stride_order(d.strides))
                    d = dataclasses.replace(d, is_virtual=False, strides=strides)
                tensors[u] = d
        return OpGraph(tensors, tuple(nodes), self.name)


def _decode_attr(cls_, key, value):
    from ..enums import ConvolutionMode, PointwiseMode, ReductionMode

    if key == "convolution_mode" and isinstance(value, str):
        return ConvolutionMode[value]
    if key == "mode" and isinstance(value, str):
        return (PointwiseMode if cls_.kind == "pointwise" else ReductionMode)[value]
    if isinstance(value, list):
        return tuple(value)
    return value
