"""Compile the softmax engine's kernels (#25) for sm_90 on a machine with no GPU, with the
helpers of ``compile_check.py``: forward and backward, softmax and log-softmax, one pass
and two, bf16 / fp32, a strided axis.
Run: PYTHONPATH=src python bench/compile_check_softmax.py"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opendnn.frontend as cudnn  # noqa: E402
from compile_check import run_checks  # noqa: E402


def graphs():
    for dt in (torch.bfloat16, torch.float32):
        for shape, axis in (((64, 1000), -1), ((4, 300000), -1), ((8, 64, 7, 7), 1)):
            for log in (False, True):
                x = torch.empty(shape, dtype=dt)
                g = cudnn.pygraph()
                tx = g.tensor_like(x)
                g.softmax(tx, axis=axis, log=log).set_output(True)
                yield f"softmax {shape} {axis} {log} {dt}", g, [25]
                g = cudnn.pygraph()
                ty, tdy = g.tensor_like(x), g.tensor_like(x)
                g.softmax_backward(tdy, ty, axis=axis, log=log).set_output(True)
                yield f"softmax_bwd {shape} {axis} {log} {dt}", g, [25]


if __name__ == "__main__":
    sys.exit(1 if run_checks(graphs(), limit=None) else 0)
