"""Helpers shared by the GPU probes in bench/."""
import torch
from triton.testing import do_bench


def copy_gbs() -> float:
    """The copy floor as the bench measures it: 1 GiB of float32, read + write, GB/s."""
    src = torch.randn(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6


def colsum_input(M: int = 8192, N: int = 8192):
    """The column-sum probes' problem, with the copy floor printed: (copy GB/s, x [M, N]
    bfloat16, its column sums in float64 rounded to float32, x's bytes)."""
    copy = copy_gbs()
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    print(f"copy {copy:.0f} GB/s (1 GiB float32, as the bench)")
    return copy, x, x.double().sum(0).float(), x.numel() * 2


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
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    return lambda: g.execute(pack, ws)
