"""cudnn-frontend's ``cudnn.Graph``: a graph built from torch tensors in a ``with`` block,
compiled when the block ends, then called like a function.

    with cudnn.Graph(io_data_type=torch.float16) as g:
        y = g.conv_fprop(image=x, weight=w, padding=[1, 1], name="conv")
        y.set_output(True)
    g.set_io_tuples(["conv::image", "conv::weight"], ["conv::Y"])
    out = g(x, w)                      # positional, in the io tuples' order
    outs = g({"conv::image": x, "conv::weight": w})   # by name; missing outputs made

Inside the block every ``pygraph`` node method is available. A tensor argument may be a
torch (or any DLPack) tensor: the first use of an object makes its graph tensor
(``tensor_like``; detached when it requires grad), later uses reuse it. Nodes are named
``<method>.<k>`` unless given a name; a node's inputs are known as ``<node>::<argument>``
(``<node>::<position>`` when positional, ``::<j>`` added inside a tuple) and its outputs
by their own names (``<node>::<output>``, as the graph names them). On exit the graph is
validated, lowered, planned with the heuristics given (default A then FALLBACK), checked
and built, and a workspace of the plan's size is kept for calls (unless
``workspace_alloc=False``: then every call passes ``workspace=``).

Lifecycle methods (``build``, ``execute``, ``validate``, ...) belong to the wrapper and
are refused through it; ``get_workspace_size``, ``serialize`` and ``deserialize`` pass
through.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

import torch

from ..enums import HeurMode
from ..errors import BadParamError, Status
from ..graph.graph import Graph as _PyGraph
from ..graph.tensor import Tensor

_PASS_THROUGH = frozenset(
    {"get_workspace_size", "get_workspace_size_plan_at_index", "serialize", "deserialize"}
)
_LIFECYCLE = frozenset(
    {
        "build",
        "build_operation_graph",
        "build_plan_at_index",
        "build_plans",
        "check_support",
        "create_execution_plan",
        "create_execution_plans",
        "deselect_behavior_notes",
        "deselect_engines",
        "deselect_numeric_notes",
        "deselect_workspace_greater_than",
        "execute",
        "execute_plan_at_index",
        "get_behavior_notes",
        "get_behavior_notes_for_plan_at_index",
        "get_engine_count",
        "get_execution_plan_count",
        "get_knobs_for_engine",
        "get_plan_name_at_index",
        "key",
        "select_behavior_notes",
        "select_numeric_notes",
        "validate",
    }
)


def _error(rule: str, status=Status.BAD_PARAM, tensor=None) -> BadParamError:
    return BadParamError(rule, op="Graph", tensor=tensor, status=status)


class Graph:
    """cudnn-frontend's wrapper class (see the module docstring).

    ``handle``: the handle graphs and calls use (None or "auto": the process default's);
    ``inputs`` / ``outputs``: the io tuples, set when the block ends; ``heuristics``: the
    modes plans come from; other keywords go to ``pygraph`` (data types may be torch
    dtypes there too)."""

    def __init__(
        self,
        *,
        handle=None,
        inputs=None,
        outputs=None,
        heuristics=None,
        workspace_alloc: bool = True,
        **kwargs,
    ) -> None:
        for what, value in (("inputs", inputs), ("outputs", outputs), ("heuristics", heuristics)):
            if value is not None and not isinstance(value, (list, tuple)):
                raise _error(f"{what} must be a list or tuple, got {type(value).__name__}")
        self._kwargs = kwargs
        self._handle = None if handle in (None, "auto") else handle
        self._heuristics = list(heuristics or [HeurMode.A, HeurMode.FALLBACK])
        self._alloc = bool(workspace_alloc)
        self._graph: _PyGraph | None = None
        self._built = False
        self._workspace = None
        self._by_object: dict = {}  # id(torch tensor) -> (tensor, graph tensor)
        self._inputs: OrderedDict = OrderedDict()  # "<node>::<arg>" -> graph tensor
        self._outputs: OrderedDict = OrderedDict()  # output name -> graph tensor
        self._made: list = []  # graph tensors made directly (tensor / tensor_like)
        self._node_names: set = set()
        self._counts: dict = {}
        self._io = (list(inputs or []), list(outputs or []))
        self._in_tuple: tuple | None = None
        self._out_tuple: tuple | None = None

    # ---- the block ----------------------------------------------------------------------
    def __enter__(self) -> Graph:
        if self._graph is not None:
            raise _error("the graph was already created (one with block per Graph)")
        kw = dict(self._kwargs)
        if self._handle is not None:
            kw["handle"] = self._handle
        self._graph = _PyGraph(**kw)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self._graph = None  # a half-built graph is dropped; the error propagates
            return False
        g = self._graph
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans(self._heuristics)
        g.check_support()
        g.build_plans()
        self._built = True
        if self._alloc:
            self._workspace = torch.empty(
                max(1, g.get_workspace_size()), dtype=torch.uint8, device=g._device()
            )
        if self._io[0] or self._io[1]:
            self.set_io_tuples(*self._io)
        return False

    # ---- node methods -------------------------------------------------------------------
    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        g = self.__dict__.get("_graph")
        if g is None:
            raise _error(
                f"'{name}' needs the graph: use it inside the 'with Graph(...)' block",
                Status.BAD_PARAM_NOT_FINALIZED,
            )
        attr = getattr(g, name)
        if name in _PASS_THROUGH or not callable(attr):
            return attr
        if name in _LIFECYCLE:
            raise _error(
                f"'{name}' is the wrapper's to call (the graph is built when the with block "
                "ends and run by calling the Graph)",
                Status.NOT_SUPPORTED,
            )
        if name in ("tensor", "tensor_like"):

            def made(*args, **kwargs):
                t = attr(*args, **kwargs)
                self._made.append(t)
                return t

            return made

        def node(*args, **kwargs):
            k = self._counts.get(name, 0)
            self._counts[name] = k + 1
            node_name = kwargs.get("name") or f"{name}.{k}"
            if node_name in self._node_names:
                raise _error(f"node name '{node_name}' is already used in this graph")
            self._node_names.add(node_name)
            kwargs["name"] = node_name
            args = [self._arg(a, f"{node_name}::{i}") for i, a in enumerate(args)]
            kwargs = {
                key: (v if key == "name" else self._arg(v, f"{node_name}::{key}"))
                for key, v in kwargs.items()
            }
            out = attr(*args, **kwargs)
            outs = out if isinstance(out, (list, tuple)) else [out]
            for i, t in enumerate(outs):
                if isinstance(t, Tensor):
                    self._outputs[t.get_name() or f"{node_name}::{i}"] = t
            return out

        return node

    def _arg(self, value, key: str):
        """A node argument with torch tensors replaced by graph tensors, the graph tensors
        recorded as the node's inputs under ``key`` (tuples element by element)."""
        if isinstance(value, tuple):
            return tuple(self._arg(v, f"{key}::{j}") for j, v in enumerate(value))
        if isinstance(value, torch.Tensor) or (
            hasattr(value, "__dlpack__") and not isinstance(value, Tensor)
        ):
            hit = self._by_object.get(id(value))
            if hit is None or hit[0] is not value:
                src = value.detach() if getattr(value, "requires_grad", False) else value
                hit = (value, self._graph.tensor_like(src))
                self._by_object[id(value)] = hit
            value = hit[1]
        if isinstance(value, Tensor):
            self._inputs[key] = value
        return value

    # ---- io tuples ------------------------------------------------------------------------
    def _find(self, ref, table: dict) -> Tensor:
        """The graph tensor ``ref`` names in ``table``: a key ("<node>::<arg>"), a tensor's
        own name, a uid, a graph tensor, or a torch tensor the graph was built from."""
        if isinstance(ref, Tensor):
            if any(t is ref for t in itertools.chain(self._made, table.values())):
                return ref
        elif isinstance(ref, str):
            if ref in table:
                return table[ref]
            for t in itertools.chain(table.values(), self._made):
                if t.get_name() == ref:
                    return t
        elif isinstance(ref, int) and not isinstance(ref, bool):
            for t in itertools.chain(table.values(), self._made):
                if t.get_uid() == ref:
                    return t
        elif id(ref) in self._by_object and self._by_object[id(ref)][0] is ref:
            t = self._by_object[id(ref)][1]
            if any(t is u for u in table.values()):
                return t
        raise _error(f"{ref!r:.80} is not a tensor of this graph's nodes")

    def set_io_tuples(self, inputs, outputs) -> None:
        """The order of positional calls: ``g(*inputs)`` returns the ``outputs`` (one
        tensor, or a tuple). Every non-virtual tensor must be one of them."""
        for what, value in (("inputs", inputs), ("outputs", outputs)):
            if not isinstance(value, (list, tuple)):
                raise _error(f"{what} must be a list or tuple, got {type(value).__name__}")
        if not self._built:  # inside the block: set when it ends
            self._io = (list(inputs), list(outputs))
            return
        ins = [self._find(r, self._inputs) for r in inputs]
        outs = [self._find(r, self._outputs) for r in outputs]
        seen: set = set()
        for i, t in enumerate(ins + outs):
            if id(t) in seen:
                raise _error(f"io tuple entry {i} ('{t.label()}') is listed twice")
            seen.add(id(t))
        for i, t in enumerate(ins):
            if t.get_is_virtual():
                raise _error(f"input {i} ('{t.label()}') is virtual: it has no buffer")
        for t in itertools.chain(self._inputs.values(), self._outputs.values()):
            if not t.get_is_virtual() and id(t) not in seen:
                raise _error(
                    f"'{t.label()}' is a non-virtual tensor but neither an input nor an output",
                    tensor=t.label(),
                )
        self._in_tuple, self._out_tuple = tuple(ins), tuple(outs)

    # ---- calls --------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        """``g(x, w, ...)`` (after ``set_io_tuples``): the outputs, made here; or
        ``g({name: tensor, ...})``: the dict, with any output it lacked made and added.
        Keywords (``handle``, ``workspace``) go to ``execute``."""
        if not self._built:
            raise _error(
                "the graph is built when its with block ends; call it after",
                Status.BAD_PARAM_NOT_FINALIZED,
            )
        if len(args) == 1 and isinstance(args[0], dict):
            return self._call_dict(args[0], kwargs)
        if self._in_tuple is None:
            raise _error("positional calls need set_io_tuples(inputs, outputs) first")
        if len(args) != len(self._in_tuple):
            raise _error(f"{len(args)} arguments for {len(self._in_tuple)} inputs")
        pack = dict(zip(self._in_tuple, args))
        made = [self._new_output(t) for t in self._out_tuple]
        pack.update(zip(self._out_tuple, made))
        self._execute(pack, kwargs)
        return made[0] if len(made) == 1 else tuple(made)

    def _call_dict(self, tensors: dict, kwargs):
        pack, missing = {}, []
        for key, t in itertools.chain(self._inputs.items(), self._outputs.items()):
            if t.get_is_virtual() or t in pack:
                continue
            for ref in (key, t, t.get_name(), t.get_uid()):
                if ref in tensors:
                    pack[t] = tensors[ref]
                    break
            else:
                if key in self._outputs:
                    pack[t] = tensors[key] = self._new_output(t)
                else:
                    missing.append(key)
        if missing:
            raise _error(
                f"inputs missing from the call: {', '.join(missing)}", Status.BAD_PARAM_NULL_POINTER
            )
        self._execute(pack, kwargs)
        return tensors

    def _new_output(self, t: Tensor) -> torch.Tensor:
        d = self._graph.op_graph.tensors[t.get_uid()]
        return torch.empty_strided(
            d.dims, d.strides, dtype=d.torch_dtype, device=self._graph._device()
        )

    def _execute(self, pack: dict, kwargs: dict) -> None:
        kwargs = dict(kwargs)
        if "workspace" not in kwargs:
            if not self._alloc:
                raise _error(
                    "built with workspace_alloc=False: pass workspace= to each call",
                    Status.BAD_PARAM_NULL_POINTER,
                )
            kwargs["workspace"] = self._workspace
        if "handle" not in kwargs and self._handle is not None:
            kwargs["handle"] = self._handle
        self._graph.execute(pack, **kwargs)
