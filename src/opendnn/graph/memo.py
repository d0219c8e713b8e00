"""The validation memo: a graph built exactly as one validated before in this process
takes that validation's outcome instead of redoing it.

A graph's fingerprint is everything ``Graph.validate`` reads -- the graph's name and data
types; per node its class, name, compute type, attributes, which tensor fills each role
and the host values of the scalars validation checks (``VALUE_ROLES``: epsilon,
momentum); per tensor (in order of first appearance) its dims, strides, data type, uid if
set, output / virtual / pass-by-value flags and name. Equal fingerprints validate alike,
so the outcome -- every tensor's inferred properties and uid, every node's compute type,
and the frozen ``OpGraph`` (immutable, shared) -- is recorded after a successful
validation and applied to the next graph with that fingerprint (a framework re-creating
its graph every step; benchmark mode's cached find). Failures are never recorded.
``OPENDNN_CHECK_VALIDATION_MEMO=1`` validates every graph in full and compares.
"""

from __future__ import annotations

import os

from ..runtime.lru import LRU, plan_cache_size

# graphs' outcomes kept per built plan (a framework re-creates several graphs per problem:
# forward, backward, each shape of a bucket); least recently used dropped first
OUTCOMES_PER_PLAN = 4
_OUTCOMES = LRU(lambda: OUTCOMES_PER_PLAN * plan_cache_size())
# OPENDNN_CHECK_VALIDATION_MEMO=1: validate every graph in full and compare with the memo
CHECK = os.environ.get("OPENDNN_CHECK_VALIDATION_MEMO") == "1"


def fingerprint(graph) -> tuple:
    """(everything validation reads, as a hashable tuple, or None when some attribute is
    not hashable; the graph's tensors in order of first appearance)."""
    pos: dict = {}
    tensors: list = []

    def at(t):
        i = pos.get(id(t))
        if i is None:
            i = pos[id(t)] = len(tensors)
            tensors.append(t)
        return i

    parts = [graph.name, graph.io_data_type, graph.intermediate_data_type, graph.compute_data_type]
    for n in graph._nodes:
        roles = []
        for side in (n.inputs, n.outputs):
            for r, v in side.items():
                if v is None:
                    roles.append((r, None))
                elif isinstance(v, (list, tuple)):
                    roles.append((r, tuple(at(t) for t in v)))
                else:
                    roles.append((r, at(v)))
            roles.append("|")
        values = tuple(getattr(n.inputs.get(r), "value", None) for r in n.VALUE_ROLES)
        parts.append(
            (type(n), n.name, n.compute_data_type, tuple(n.attrs().values()), tuple(roles), values)
        )
    for t in tensors:
        parts.append(
            (
                None if t.dim is None else tuple(t.dim),
                None if t.stride is None else tuple(t.stride),
                t.data_type,
                t.uid if t._uid_assigned else None,
                t.is_output,
                t.is_virtual,
                t.is_pass_by_value,
                t.name,
            )
        )
    fp = tuple(parts)
    try:
        hash(fp)
    except TypeError:
        return None, tensors
    return fp, tensors


def record(graph, tensors: list) -> tuple:
    """What validation decided: each tensor's inferred properties, each node's compute
    type, and the frozen graph (immutable: graphs of one fingerprint share it)."""
    return (
        tuple(
            (
                t.uid,
                None if t.dim is None else tuple(t.dim),
                None if t.stride is None else tuple(t.stride),
                t.data_type,
                t.is_virtual,
            )
            for t in tensors
        ),
        tuple(n.compute_data_type for n in graph._nodes),
        graph._op_graph,
    )


def apply(rec: tuple, graph, tensors: list) -> None:
    props, types, op_graph = rec
    for t, (uid, dim, stride, dt, virtual) in zip(tensors, props):
        t.uid, t._uid_assigned, t.data_type, t.is_virtual = uid, True, dt, virtual
        t.dim = None if dim is None else list(dim)
        t.stride = None if stride is None else list(stride)
    for n, ct in zip(graph._nodes, types):
        n.compute_data_type = ct
    graph._op_graph = op_graph


def lookup(fp):
    return _OUTCOMES.get(fp) if fp is not None else None


def store(fp, graph, tensors: list) -> None:
    if fp is None:
        return
    _OUTCOMES[fp] = record(graph, tensors)
