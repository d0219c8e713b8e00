"""The ``softmax`` benchmark family: softmax and log-softmax along the last axis, forward
and backward, bfloat16, 64 Mi elements at row widths 8192, 65536 and 262144 (targets:
forward >= 2.7 TB/s at 8192 and >= 2.0 at the long rows, backward >= 2.4), against
PyTorch's own kernels (``torch.softmax``, ``torch._softmax_backward_data``) in the same
run. Bytes: forward reads x and writes y, backward reads dy and y and writes dx."""

from __future__ import annotations

import torch

from ..engines.softmax.shapes import BENCH as CASES


def _build(g, cudnn, pack):
    g.build([cudnn.heur_mode.A])
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    return (lambda: g.execute(pack, ws)), g.get_plan_name_at_index(0)


def run_softmax(r, bench):
    import opendnn.frontend as cudnn

    for rows, width in CASES:
        for log in (False, True):
            x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
            y = torch.empty_like(x)
            g = cudnn.pygraph()
            tx = g.tensor_like(x)
            ty = g.softmax(tx, axis=-1, log=log)
            ty.set_output(True)
            fn, plan = _build(g, cudnn, {tx: x, ty: y})
            ref = (lambda: torch.log_softmax(x, -1)) if log else (lambda: torch.softmax(x, -1))
            name = "log_softmax" if log else "softmax"
            r.add(
                "softmax",
                f"{name} fwd ({rows}, {width}) bf16",
                bench(fn),
                bench(ref),
                nbytes=2 * x.numel() * 2,
                plan=plan,
            )
            yv, dy, dx = ref(), torch.randn_like(x), torch.empty_like(x)
            g = cudnn.pygraph()
            tdy, tyv = g.tensor_like(dy), g.tensor_like(yv)
            tdx = g.softmax_backward(tdy, tyv, axis=-1, log=log)
            tdx.set_output(True)
            fn, plan = _build(g, cudnn, {tdy: dy, tyv: yv, tdx: dx})
            bwd = torch._log_softmax_backward_data if log else torch._softmax_backward_data
            r.add(
                "softmax",
                f"{name} bwd ({rows}, {width}) bf16",
                bench(fn),
                bench(lambda: bwd(dy, yv, -1, torch.bfloat16)),
                nbytes=3 * x.numel() * 2,
                plan=plan,
            )
