"""The ``moe`` benchmark family: the MoE grouped matmul (forward, NONE mode) and its weight
gradient in bfloat16 on the shapes of ``engines/moe/shapes.py`` (``GPU`` and ``BENCH``:
cudnn-frontend's E 36 / T 2000 case, Mixtral- and DeepSeek-like experts).

References, in the same run on the same inputs, each a row of its own:

- ``cuDNN``: real cuDNN's ``moe_grouped_matmul`` through cudnn-frontend's Python package
  (the nvidia-cudnn-frontend wheel) where it is installed and its cuDNN takes the graph
  (the forward needs cuDNN 9.18, the weight gradient 9.22); skipped otherwise.
- ``pytorch``: ``torch._grouped_mm`` (cuBLAS's grouped GEMM) where PyTorch has it and
  takes the layout, else one ``torch.mm`` per group (Python-bound on many small groups).

FLOPs: 2 T K N for both passes (every routed row once).
"""

from __future__ import annotations

import torch

from ..engines.moe.shapes import BENCH, GPU, offsets_for


def _opendnn(cudnn, token, weight, off, out, backward: bool):
    g = cudnn.pygraph(compute_data_type=cudnn.data_type.FLOAT)
    if backward:
        tdy, tt, to = (g.tensor_like(t) for t in (out, token, off))
        tw = g.moe_grouped_matmul_bwd(tdy, tt, to)
        tw.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
        pack = {tdy: out, tt: token, to: off, tw: weight}
    else:
        tt, tw, to = (g.tensor_like(t) for t in (token, weight, off))
        ty = g.moe_grouped_matmul(tt, tw, to)
        ty.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
        pack = {tt: token, tw: weight, to: off, ty: out}
    g.build([cudnn.heur_mode.A])
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    return (lambda: g.execute(pack, ws)), g.get_plan_name_at_index(0)


def _cudnn(token, weight, off, out, backward: bool):
    """Real cuDNN's graph for the same problem, or None (no wheel, or cuDNN declines)."""
    try:
        import cudnn as fe
    except ImportError:
        return None
    if not hasattr(fe, "moe_grouped_matmul_mode"):
        return None
    try:
        handle = getattr(_cudnn, "handle", None) or fe.create_handle()
        _cudnn.handle = handle
        g = fe.pygraph(
            intermediate_data_type=fe.data_type.FLOAT,
            compute_data_type=fe.data_type.FLOAT,
            handle=handle,
        )
        if backward:
            tdy, tt, to = (g.tensor_like(t) for t in (out, token, off))
            tw = g.moe_grouped_matmul_bwd(tdy, tt, to, compute_data_type=fe.data_type.FLOAT)
            tw.set_output(True).set_data_type(fe.data_type.BFLOAT16)
            pack = {tdy: out, tt: token, to: off, tw: weight}
        else:
            tt, tw, to = (g.tensor_like(t) for t in (token, weight, off))
            ty = g.moe_grouped_matmul(
                tt,
                tw,
                to,
                mode=fe.moe_grouped_matmul_mode.NONE,
                compute_data_type=fe.data_type.FLOAT,
            )
            ty.set_output(True).set_data_type(fe.data_type.BFLOAT16)
            pack = {tt: token, tw: weight, to: off, ty: out}
        g.build([fe.heur_mode.A, fe.heur_mode.FALLBACK])
        ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    except Exception as e:  # noqa: BLE001 -- an older cuDNN declines: reported, row skipped
        print(f"    (cuDNN's moe graph: {type(e).__name__}: {str(e)[:120]})")
        return None

    def run():  # on the current stream
        fe.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
        g.execute(pack, ws, handle=handle)

    return run


def _pytorch(token, weight, bounds, out, backward: bool):
    """(name, callable): torch._grouped_mm with int32 group ends, else a loop of mm."""
    t2, y2 = token[0], out[0]
    ends = torch.tensor([hi for _, hi in bounds], dtype=torch.int32, device="cuda")
    grouped = getattr(torch, "_grouped_mm", None)
    if grouped is not None:
        try:
            if backward:  # (K, T) x (T, N) grouped along T: one [K, N] per group
                fn = lambda: grouped(t2.t(), y2, offs=ends)  # noqa: E731
            else:  # (T, K) x (G, K, N): rows grouped
                fn = lambda: grouped(t2, weight, offs=ends)  # noqa: E731
            fn()
            return "torch._grouped_mm", fn
        except (RuntimeError, TypeError) as e:
            print(f"    (torch._grouped_mm: {type(e).__name__}: {str(e)[:120]})")

    def loop():
        for g, (lo, hi) in enumerate(bounds):
            if backward:  # a new [K, N] per group (DWeight's column-major slices)
                torch.mm(t2[lo:hi].t(), y2[lo:hi])
            else:
                torch.mm(t2[lo:hi], weight[g], out=y2[lo:hi])

    return "torch.mm per group", loop


def run_moe(r, bench):
    import opendnn.frontend as cudnn

    for case in GPU[:3] + BENCH:
        experts, rows, k, n, _ = case
        offsets = offsets_for(case)
        bounds = [
            (lo, offsets[i + 1] if i + 1 < len(offsets) else rows) for i, lo in enumerate(offsets)
        ]
        off = torch.tensor(offsets, dtype=torch.int32, device="cuda").reshape(-1, 1, 1)
        token = torch.randn(1, rows, k, device="cuda", dtype=torch.bfloat16)
        tag = f"E{experts} T{rows} K{k} N{n} bf16"
        flops = 2 * rows * k * n
        for backward in (False, True):
            # the weight column-major in K x N (cudnn-frontend's layout; DWeight's default)
            weight = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16)
            weight = weight.transpose(1, 2)
            out = torch.randn(1, rows, n, device="cuda", dtype=torch.bfloat16)
            fn, plan = _opendnn(cudnn, token, weight, off, out, backward)
            kind = "dweight" if backward else "fwd"
            ref = _cudnn(token, weight, off, out, backward)
            if ref is not None:
                r.add("moe", f"moe {kind} {tag}", bench(fn), bench(ref), flops=flops,
                      ref_name="cuDNN", plan=plan)  # fmt: skip
            name, pt = _pytorch(token, weight, bounds, out, backward)
            r.add("moe", f"moe {kind} {tag} vs {name}", bench(fn), bench(pt), flops=flops,
                  ref_name=name, plan=plan)  # fmt: skip
