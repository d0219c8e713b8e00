"""Helpers shared by the sweeps in bench/ (imported as ``_common``: a script's own folder is
first on ``sys.path`` when it runs as ``python bench/<script>.py``)."""

import math

import torch
from triton.testing import do_bench


def copy_gbs() -> float:
    """The copy floor: 1 GiB of float32 read and written, GB/s (do_bench median)."""
    src = torch.randn(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6


def planned(g, engine_id: int, knobs, pack):
    """``g`` (a validated-or-not pygraph) built with ``engine_id`` and ``knobs`` (None: the
    heuristics' mode A) and a workspace; returns a callable running ``pack`` on it."""
    import opendnn.frontend as cudnn

    g.validate()
    g.build_operation_graph()
    if knobs is None:
        g.create_execution_plans([cudnn.heur_mode.A])
    else:
        g.create_execution_plan(engine_id, knobs)
    g.check_support()
    g.build_plans()
    dev = next(iter(pack.values())).device
    ws = torch.empty(max(g.get_workspace_size(), 1), device=dev, dtype=torch.uint8)
    return lambda: g.execute(pack, ws)


def sdpa_forward(q, k, v, out, lse, causal: bool, knobs):
    """A training-forward sdpa graph (O and Stats) of q / k / v [B, H, S, D] (attn_scale
    1 / sqrt(D), causal: top-left mask) built with the attention engine's (40) ``knobs``
    (None: the heuristics' mode A), writing ``out`` and ``lse`` [B, H, S, 1]; returns the
    run callable."""
    import opendnn.frontend as cudnn

    g = cudnn.pygraph()
    tq, tk, tv = (g.tensor_like(t) for t in (q, k, v))
    o, st = g.sdpa(
        tq,
        tk,
        tv,
        attn_scale=1 / math.sqrt(q.shape[-1]),
        generate_stats=True,
        diagonal_band_right_bound=0 if causal else None,
    )
    o.set_output(True)
    st.set_output(True)
    return planned(g, 40, knobs, {tq: q, tk: k, tv: v, o: out, st: lse})


def lse_reference(q, k, scale, causal=False, chunk=1024):
    """float32 natural-log logsumexp of the scaled scores q k^T [B, H, S], over chunks of
    ``chunk`` query rows (never S x S for all heads at once); k has q's heads. Top-left
    causal mask."""
    B, H, S, D = q.shape
    out = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    kf = k.float()
    cols = torch.arange(S, device=q.device)
    for i in range(0, S, chunk):
        s = torch.matmul(q[:, :, i : i + chunk].float(), kf.transpose(-1, -2)) * scale
        if causal:
            rows = torch.arange(i, min(i + chunk, S), device=q.device)
            s.masked_fill_(cols[None, :] > rows[:, None], float("-inf"))
        out[:, :, i : i + chunk] = torch.logsumexp(s, dim=-1)
        del s
    return out
