"""Fusion patterns of the ``opendnn`` torch.compile backend, found on canonical calls
(``compile_ops.canonical``) and rewritten as one node calling ``compile_fused``.

A pattern is a chain whose inner values have one user each (the next link), so nothing
outside the chain sees them and replacing the chain by its last value changes nothing
else. Non-tensor arguments (stride, padding, ...) must be constants of the graph, except
the norms' eps and momentum, which ``dynamic=True`` makes SymFloats (passed through).

- ``conv[+batch_norm][+add][+act]`` (at least one link): conv2d / conv3d (bias or not)
  [-> batch_norm(training=False, running statistics given)] [-> + z, a residual of the
  output's shape] [-> act]: BN folded into the conv (inference), the residual and the
  activation in its epilogue (ResNet's conv-bn-add-relu); ``conv_bn_act`` / ``conv_act``.
- ``linear+act``: linear (bias or not) -> act, ``linear_act``.
- ``layer_norm+act`` / ``group_norm+act``: the norm engine's epilogue, ``norm_act``.
- ``attention``: matmul(q, k.transpose(-2, -1)) [* c | / c] [+ float mask] ->
  softmax(dim=-1) -> matmul(., v), q, k, v with equal batch dims: ``attention``.
act is one of relu, gelu (exact or tanh), silu, sigmoid, tanh.
"""

from __future__ import annotations

import dataclasses
import numbers
import operator

import torch
from torch.fx import Node

from . import compile_fused as CF
from .compile_ops import bind


@dataclasses.dataclass
class Group:
    kind: str
    nodes: list  # the chain in graph order; the last one's value is the group's
    target: object  # a compile_fused function
    args: tuple


def _const(v) -> bool:
    if isinstance(v, list | tuple):
        return all(_const(x) for x in v)
    if isinstance(v, dict):
        return all(_const(x) for x in v.values())
    return not isinstance(v, Node)


def _tensor_or_none(v) -> bool:
    return v is None or isinstance(v, Node)


def _call(node, canon, names):
    """(name, bound params) when ``node`` is a canonical call of one of ``names``."""
    c = canon.get(node)
    if not isinstance(c, tuple) or c[0] not in names:
        return None
    p = bind(c[0], c[1], c[2])
    return None if p is None else (c[0], p)


def _only_user(node):
    return next(iter(node.users)) if len(node.users) == 1 else None


def _value(node):
    """The fake tensor dynamo traced for a node, when its shape is static (the patterns
    that compare shapes leave symbolic ones alone rather than add guards)."""
    v = node.meta.get("example_value") if isinstance(node, Node) else None
    if not isinstance(v, torch.Tensor) or not all(type(d) is int for d in v.shape):
        return None
    return v


def _number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _binary(node, fns, methods):
    if node.op == "call_function" and node.target in fns:
        ok = len(node.args) == 2 and not node.kwargs
    elif node.op == "call_method" and node.target in methods:
        ok = len(node.args) == 2 and not node.kwargs
    else:
        return None
    return node.args if ok else None


_MUL = ((operator.mul, torch.mul), ("mul",))
_DIV = ((operator.truediv, torch.div), ("div",))
_ADD = ((operator.add, torch.add), ("add",))
_RESIDUAL = ((operator.add, operator.iadd, torch.add), ("add", "add_"))


def _act_after(node, canon):
    """(act node, name, kwargs) when node's only user is a supported activation of it."""
    user = _only_user(node)
    hit = user is not None and _call(user, canon, CF.ACTIVATIONS)
    if not hit or hit[1]["input"] is not node:
        return None
    name, p = hit
    if not _const({k: v for k, v in p.items() if k != "input"}):
        return None
    if name == "gelu":
        if p["approximate"] not in ("none", "tanh"):
            return None
        return user, name, {"approximate": p["approximate"]}
    return user, name, {}


def _bn_after(node, canon):
    """(bn node, params) when node's only user is an eval-mode batch_norm of it."""
    user = _only_user(node)
    hit = user is not None and _call(user, canon, ("batch_norm",))
    if not hit or hit[1]["input"] is not node:
        return None
    q = hit[1]
    if (
        q["training"] is False
        and isinstance(q["running_mean"], Node)
        and isinstance(q["running_var"], Node)
        and _tensor_or_none(q["weight"])
        and _tensor_or_none(q["bias"])
    ):
        return user, q  # eps, momentum: constants, or SymFloats under dynamic=True
    return None


def _residual_after(node):
    """(add node, z) when node's only user adds a same-shaped tensor z to it (``+``,
    ``+=``, torch.add / Tensor.add without alpha)."""
    user = _only_user(node)
    args = user is not None and _binary(user, *_RESIDUAL)
    if not args or node not in args or args[0] is args[1]:
        return None
    if user.target in (operator.iadd, "add_") and args[0] is not node:
        return None  # z += y mutates z, which others may read
    z = args[1] if args[0] is node else args[0]
    yv, zv = _value(node), _value(z)
    if not isinstance(z, Node) or yv is None or zv is None or zv.shape != yv.shape:
        return None
    return user, z


def _conv(node, canon):
    """conv [-> batch_norm (eval)] [-> + residual] [-> act], at least one link after."""
    hit = _call(node, canon, ("conv2d", "conv3d"))
    if not hit:
        return None
    name, p = hit
    if not (
        isinstance(p["input"], Node)
        and isinstance(p["weight"], Node)
        and _tensor_or_none(p["bias"])
        and _const([p["stride"], p["padding"], p["dilation"], p["groups"]])
    ):
        return None
    spec = {
        "conv": name,
        "stride": p["stride"],
        "padding": p["padding"],
        "dilation": p["dilation"],
        "groups": p["groups"],
        "act": None,
        "act_kw": {},
    }
    chain, kind, tail = [node], ["conv"], node
    bn = _bn_after(node, canon)
    if bn:
        chain.append(bn[0])
        kind.append("batch_norm")
        tail = bn[0]
    res = _residual_after(tail)
    if res:
        chain.append(res[0])
        kind.append("add")
        tail = res[0]
    act = _act_after(tail, canon)
    if act:
        chain.append(act[0])
        kind.append(act[1])
        spec.update(act=act[1], act_kw=act[2])
    if len(chain) == 1:
        return None
    z = res[1] if res else None
    if bn:
        q = bn[1]
        return Group(
            "+".join(kind),
            chain,
            CF.conv_bn_act,
            (
                p["input"],
                p["weight"],
                p["bias"],
                q["running_mean"],
                q["running_var"],
                q["weight"],
                q["bias"],
                z,
                q["eps"],
                q["momentum"],
                spec,
            ),
        )
    return Group("+".join(kind), chain, CF.conv_act, (p["input"], p["weight"], p["bias"], z, spec))


def _linear(node, canon):
    hit = _call(node, canon, ("linear",))
    if not hit:
        return None
    p = hit[1]
    act = _act_after(node, canon)
    if not act or not (
        isinstance(p["input"], Node)
        and isinstance(p["weight"], Node)
        and _tensor_or_none(p["bias"])
    ):
        return None
    return Group(
        f"linear+{act[1]}",
        [node, act[0]],
        CF.linear_act,
        (p["input"], p["weight"], p["bias"], {"act": act[1], "act_kw": act[2]}),
    )


def _norm(node, canon):
    hit = _call(node, canon, ("layer_norm", "group_norm"))
    if not hit:
        return None
    name, p = hit
    second = "normalized_shape" if name == "layer_norm" else "num_groups"
    act = _act_after(node, canon)
    if not act or not (
        isinstance(p["input"], Node)
        and _tensor_or_none(p["weight"])
        and _tensor_or_none(p["bias"])
        and _const(p[second])
    ):
        return None
    value = (
        tuple(p[second])
        if name == "layer_norm" and isinstance(p[second], list | tuple)
        else p[second]
    )
    if name == "layer_norm" and isinstance(value, int):
        value = (value,)
    spec = {"norm": name, second: value, "act": act[1], "act_kw": act[2]}
    return Group(
        f"{name}+{act[1]}",
        [node, act[0]],
        CF.norm_act,
        (p["input"], p["weight"], p["bias"], p["eps"], spec),
    )


# ---- attention ---------------------------------------------------------------------------------
def _transposed(node):
    """k when node is k.transpose(-2, -1) (of its last two dims)."""
    if (
        node.op == "call_method"
        and node.target == "transpose"
        or (node.op == "call_function" and node.target is torch.transpose)
    ):
        if len(node.args) != 3 or node.kwargs or not isinstance(node.args[0], Node):
            return None
        k, d0, d1 = node.args
        v = _value(k)
        if v is None or not all(isinstance(d, int) for d in (d0, d1)):
            return None
        nd = v.dim()
        return k if {d0 % nd, d1 % nd} == {nd - 2, nd - 1} else None
    return None


def _attention(node, canon):
    hit = _call(node, canon, ("softmax",))
    if not hit or hit[1]["dtype"] is not None:
        return None
    s, dim = hit[1]["input"], hit[1]["dim"]
    out = _only_user(node)
    pv = out is not None and _call(out, canon, ("matmul",))
    sv = _value(s)
    if (
        not pv
        or pv[1]["input"] is not node
        or sv is None
        or not isinstance(dim, int)
        or dim % sv.dim() != sv.dim() - 1
        or _only_user(s) is not node
    ):
        return None
    chain, mask = [node, out], None
    parsed = _scaled_scores(s, canon)
    if parsed is None:  # scores + mask
        args = _binary(s, *_ADD)
        for a, b in (args, args[::-1]) if args else ():
            mv = _value(b)
            if (
                isinstance(a, Node)
                and mv is not None
                and mv.is_floating_point()
                and _only_user(a) is s
                and torch.broadcast_shapes(mv.shape, sv.shape) == sv.shape
                and mv.dtype == sv.dtype
            ):
                parsed = _scaled_scores(a, canon)
                if parsed is not None:
                    mask, chain = b, [s] + chain
                    break
        if parsed is None:
            return None
    scale, nodes, q, k = parsed
    v = pv[1]["other"]
    qv, kv, vv = _value(q), _value(k), _value(v)
    if (
        qv is None
        or kv is None
        or vv is None
        or not (
            qv.dim() == kv.dim() == vv.dim() >= 2
            and qv.shape[:-2] == kv.shape[:-2] == vv.shape[:-2]
            and qv.shape[-1] == kv.shape[-1]
            and kv.shape[-2] == vv.shape[-2]
        )
    ):
        return None
    return Group("attention", nodes + chain, CF.attention, (q, k, v, mask, {"scale": scale}))


def _scaled_scores(node, canon):
    """(scale, nodes, q, k) when node is q @ k.transpose(-2, -1), optionally times or
    divided by a number; nodes: the chain (transpose first)."""
    scale, nodes = None, []
    for fns, kind in ((_MUL, "mul"), (_DIV, "div")):
        args = _binary(node, *fns)
        if not args:
            continue
        a, b = args
        if kind == "mul" and _number(a) and isinstance(b, Node):
            a, b = b, a
        if isinstance(a, Node) and _number(b) and _only_user(a) is node:
            scale, nodes, node = (kind, b), [node], a
        break
    hit = _call(node, canon, ("matmul",))
    if not hit or not isinstance(hit[1]["input"], Node) or not isinstance(hit[1]["other"], Node):
        return None
    kt = hit[1]["other"]
    k = _transposed(kt)
    if k is None or _only_user(kt) is not node:
        return None
    return scale, [kt, node] + nodes, hit[1]["input"], k


PATTERNS = (_conv, _linear, _norm, _attention)


def find(graph, canon) -> list[Group]:
    """Non-overlapping groups, first match per node in graph order."""
    groups, used = [], set()
    for node in graph.nodes:
        if node in used:
            continue
        for pattern in PATTERNS:
            g = pattern(node, canon)
            if g is not None and not any(n in used for n in g.nodes):
                groups.append(g)
                used.update(g.nodes)
                break
    return groups


def apply(graph, groups) -> dict:
    """Replace each group by one call of its fused function; {new node: group}."""
    made = {}
    for g in groups:
        last = g.nodes[-1]
        with graph.inserting_before(last):
            new = graph.call_function(g.target, g.args)
        new.meta = dict(last.meta)
        last.replace_all_uses_with(new)
        for n in reversed(g.nodes):
            graph.erase_node(n)
        made[new] = g
    return made
