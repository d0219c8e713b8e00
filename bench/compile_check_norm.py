"""Compile the norm engine's kernels (#26) for sm_90 on a machine with no GPU, with the
helpers of ``compile_check.py``: layer / RMS / group norm forward (rows in registers, two
loops per long row, fused residual add + GELU) and backward (persistent rows; statistics
+ column blocks + group finish), bf16 / fp32, every config the engine lists.
Run: PYTHONPATH=src python bench/compile_check_norm.py"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import opendnn.frontend as cudnn  # noqa: E402
from _norm_cases import backward_graph, forward_graph, param_shape  # noqa: E402
from compile_check import run_checks  # noqa: E402


def graphs():
    for dt in (torch.bfloat16, torch.float32):
        for kind, shape, groups in (("layernorm", (64, 1000), 1), ("rmsnorm", (4, 300000), 1),
                                    ("layernorm", (8, 65536), 1),
                                    ("groupnorm", (4, 64, 32, 32), 8)):
            x = torch.empty(shape, dtype=dt)
            w = torch.empty(param_shape(kind, shape), dtype=dt)
            b = None if kind == "rmsnorm" else w
            g, _, _ = forward_graph(kind, x, w, b, 1e-5, groups)
            yield f"{kind} {shape} {dt}", g, [26]
            st = torch.empty((shape[0], groups) + (1,) * (len(shape) - 2) if kind == "groupnorm"
                             else (shape[0], 1), dtype=torch.float32)
            g, _, _ = backward_graph(kind, x, x, w, st, st, groups)
            yield f"{kind}_bwd {shape} {dt}", g, [26]
        x = torch.empty(4, 64, 16, 16, dtype=dt).contiguous(memory_format=torch.channels_last)
        w = torch.empty(1, 64, 1, 1, dtype=dt)
        st = torch.empty(4, 8, 1, 1)
        g, _, _ = backward_graph("groupnorm", x, x, w, st, st, 8)
        yield f"groupnorm_bwd NHWC {dt}", g, [26]
        x = torch.empty(256, 4096, dtype=dt)
        w = torch.empty(1, 4096, dtype=dt)
        g = cudnn.pygraph()
        tx, tr, tw = g.tensor_like(x), g.tensor_like(x), g.tensor_like(w)
        y, m, v = g.layernorm(cudnn.norm_forward_phase.TRAINING, g.add(tx, tr), tw, tw, 1e-5)
        g.gelu(y).set_output(True)
        m.set_output(True)
        v.set_output(True)
        yield f"add+layernorm+gelu {dt}", g, [26]


if __name__ == "__main__":
    sys.exit(1 if run_checks(graphs(), limit=None) else 0)
