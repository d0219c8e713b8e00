"""Compile the batch-norm engine's kernels (#30) for sm_90 on a machine with no GPU, with the
helpers of ``compile_check.py``: training forward (with running statistics, fused add +
relu), inference, backward (with a fused relu_backward), NHWC and NCHW, bf16 / fp32, and
the REUSE=0 variant. Run: PYTHONPATH=src python bench/compile_check_batchnorm.py"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opendnn.frontend as cudnn  # noqa: E402
from compile_check import run_checks  # noqa: E402


def _x(shape, dt, layout):
    x = torch.empty(shape, dtype=dt)
    return x.to(memory_format=torch.channels_last) if layout == "nhwc" else x


def graphs():
    for dt in (torch.bfloat16, torch.float32):
        for layout in ("nhwc", "nchw"):
            for shape in ((64, 256, 56, 56), (7, 37, 13, 11)):
                x = _x(shape, dt, layout)
                s = torch.empty(1, shape[1], 1, 1)
                g = cudnn.pygraph()
                tx, ts, tb, tm, tv = (g.tensor_like(t) for t in (x, s, s, s, s))
                outs = g.batchnorm(tx, ts, tb, tm, tv, 1e-5, 0.1)
                for t in outs[1:]:
                    t.set_output(True)
                tz = g.tensor_like(x)
                g.relu(g.add(outs[0], tz)).set_output(True)
                yield f"bn+add+relu {shape} {layout} {dt}", g, [30]
                g = cudnn.pygraph()
                tx, ts, tb, tm, tv = (g.tensor_like(t) for t in (x, s, s, s, s))
                g.batchnorm_inference(tx, tm, tv, ts, tb).set_output(True)
                yield f"bn inference {shape} {layout} {dt}", g, [30]
                g = cudnn.pygraph()
                tl_, ty, tx, ts, tm, tv = (g.tensor_like(t) for t in (x, x, x, s, s, s))
                for t in g.batchnorm_backward(g.relu_backward(tl_, ty), tx, ts, tm, tv):
                    t.set_output(True)
                yield f"drelu+bn bwd {shape} {layout} {dt}", g, [30]


if __name__ == "__main__":
    sys.exit(1 if run_checks(graphs(), limit=None) else 0)
