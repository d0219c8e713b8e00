"""cudnn-frontend's ``cudnn.experimental.ops.moe_grouped_matmul``: the MoE grouped matmul
on PyTorch tensors, a custom operator (``torch.compile`` through its fake kernel) over
opendnn's ``moe_grouped_matmul`` graph node (``ops/moe.py`` has the math).

token [1, M, K] (``"gather"``: [1, S, K]), weight [E, K, N] (any strides; cudnn-frontend
passes a column-major view), first_token_offset [B * E, 1, 1] int32, token_index /
token_ks [1, R, 1] int32 -> a new tensor [1, M_out, N] of token's type, M_out =
token_index's R in ``"gather"`` and M otherwise. Rows no group covers are left as
``torch.empty`` made them, as cudnn-frontend's are.

One graph is built per configuration (shapes, strides, types, device, mode, top_k, and
the switches that change plans) and kept in ``_graph_cache`` (cudnn-frontend's name). A bad mode, or a mode without its
tensors, is a ValueError, as in cudnn-frontend.
"""

from __future__ import annotations

from typing import Optional

import torch

from .... import backends
from ....enums import MoeGroupedMatmulMode
from ....torch import _graphs
from ....torch._bind import graph_tensor, mark_output

MODES = {
    "none": MoeGroupedMatmulMode.NONE,
    "gather": MoeGroupedMatmulMode.GATHER,
    "scatter": MoeGroupedMatmulMode.SCATTER,
}
# the tensors each mode reads besides token, weight and first_token_offset
_ROUTING = {"none": (), "gather": ("token_index",), "scatter": ("token_index", "token_ks")}

# one built graph per configuration
_graph_cache: dict = {}


def _check(mode: str, token_index, token_ks) -> None:
    if mode not in MODES:
        raise ValueError(f"Invalid mode '{mode}'. Must be one of: none, gather, scatter")
    if mode == "scatter" and (token_index is None or token_ks is None):
        raise ValueError("SCATTER mode requires both token_index and token_ks")
    if mode == "gather" and token_index is None:
        raise ValueError("GATHER mode requires token_index")


def _output(token, weight, token_index, mode) -> torch.Tensor:
    rows = token_index.shape[1] if mode == "gather" else token.shape[1]
    return torch.empty(1, rows, weight.shape[2], dtype=token.dtype, device=token.device)


@torch.library.custom_op("opendnn_frontend::moe_grouped_matmul", mutates_args=())
def _moe_grouped_matmul(
    token: torch.Tensor,
    weight: torch.Tensor,
    first_token_offset: torch.Tensor,
    token_index: Optional[torch.Tensor],
    token_ks: Optional[torch.Tensor],
    mode: str,
    top_k: int,
) -> torch.Tensor:
    """Output [1, M_out, N] of token's type (see the module docstring)."""
    _check(mode, token_index, token_ks)
    out = _output(token, weight, token_index, mode)
    tensors = {"token": token, "weight": weight, "first_token_offset": first_token_offset}
    given = {"token_index": token_index, "token_ks": token_ks}
    tensors.update({r: given[r] for r in _ROUTING[mode]})

    def builder(g):
        ts = {r: graph_tensor(g, t, r) for r, t in tensors.items()}
        o = g.moe_grouped_matmul(
            ts["token"],
            ts["weight"],
            ts["first_token_offset"],
            token_index=ts.get("token_index"),
            token_ks=ts.get("token_ks"),
            mode=MODES[mode],
            top_k=int(top_k),
            name="moe",
        )
        mark_output(o, out)
        return {**ts, "out": o}

    key = ("moe_grouped_matmul", mode, int(top_k)) + tuple(
        (r, _graphs.meta(t)) for r, t in tensors.items()
    )
    kept = (key, bool(backends.allow_tf32), _graphs.deterministic())  # what changes plans
    built = _graph_cache.get(kept)
    if built is None:
        built = _graph_cache[kept] = _graphs.built(key, token.device, builder)
    _graphs.run(built, {**tensors, "out": out})
    return out


@_moe_grouped_matmul.register_fake
def _(token, weight, first_token_offset, token_index, token_ks, mode, top_k):
    _check(mode, token_index, token_ks)
    return _output(token, weight, token_index, mode)


def moe_grouped_matmul(
    token: torch.Tensor,
    weight: torch.Tensor,
    first_token_offset: torch.Tensor,
    token_index: Optional[torch.Tensor] = None,
    token_ks: Optional[torch.Tensor] = None,
    mode: str = "none",
    top_k: int = 1,
) -> torch.Tensor:
    """The MoE grouped matmul of cudnn-frontend's ``moe_grouped_matmul``: tokens routed to
    experts by ``first_token_offset`` (group g: its offset to the next group's, expert
    g % E), ``mode`` "none" (rows already routed), "gather" (row r reads
    token[token_index[r]]) or "scatter" (row r is written to token_index[r] * top_k +
    token_ks[r]). Returns a new [1, M_out, N] tensor of token's type."""
    _check(mode, token_index, token_ks)
    return _moe_grouped_matmul(
        token, weight, first_token_offset, token_index, token_ks, mode, int(top_k)
    )
