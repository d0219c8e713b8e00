"""Compile the split-reduction backward engines' kernels (conv_dgrad_splitk #17,
conv_wgrad_precomp #19) for sm_90 on a machine with no GPU, with the helpers of
``compile_check.py``: 1-3-D, groups, strided layouts, fp32 / fp16 / bf16, epilogues, and
both accumulation modes of #19 (into dw, into the workspace accumulator).
Run: PYTHONPATH=src python bench/compile_check_split.py"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opendnn.frontend as cudnn  # noqa: E402
from compile_check import run_checks  # noqa: E402

TYPES = {torch.float32: cudnn.data_type.FLOAT, torch.float16: cudnn.data_type.HALF,
         torch.bfloat16: cudnn.data_type.BFLOAT16}


def _t(g, t):
    return g.tensor(dim=list(t.shape), stride=list(t.stride()), data_type=TYPES[t.dtype])


def graphs():
    cl = torch.channels_last
    for dt in (torch.bfloat16, torch.float32, torch.float16):
        x = torch.empty(4, 16, 12, 12, dtype=dt).to(memory_format=cl)
        w = torch.empty(32, 16, 3, 3, dtype=dt).to(memory_format=cl)
        dy = torch.empty(4, 32, 12, 12, dtype=dt).to(memory_format=cl)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tdy, tw, tx = _t(g, dy), _t(g, w), _t(g, x)
        dx = g.conv_dgrad(tdy, tw, padding=[1, 1])
        dx.set_dim(list(x.shape)).set_stride(list(x.stride()))
        g.relu_backward(dx, tx).set_output(True).set_data_type(TYPES[dt])
        yield f"dgrad+drelu {dt}", g, [17]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tdy = _t(g, x), _t(g, dy)
        dw = g.conv_wgrad(tx, tdy, padding=[1, 1])
        dw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
        dw.set_data_type(TYPES[dt])      # fp32: into dw; fp16 / bf16: accumulator + finish
        yield f"wgrad {dt}", g, [19]
    # 3-D, groups, stride, dilation, CONVOLUTION mode, NCDHW
    x, w = torch.empty(2, 8, 6, 7, 5), torch.empty(12, 4, 3, 2, 2)
    dy = torch.empty(2, 12, 6, 3, 5)
    params = dict(pre_padding=[1, 0, 1], post_padding=[1, 0, 1], stride=[1, 2, 1],
                  dilation=[1, 1, 2], convolution_mode=cudnn.convolution_mode.CONVOLUTION)
    g = cudnn.pygraph()
    tdy, tw = _t(g, dy), _t(g, w)
    dx = g.conv_dgrad(tdy, tw, **params)
    dx.set_dim(list(x.shape)).set_output(True)
    yield "dgrad 3-D groups", g, [17]
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = _t(g, x), _t(g, dy)
    dw = g.conv_wgrad(tx, tdy, **params)
    dw.set_dim(list(w.shape))
    g.scale(dw, 0.5).set_output(True).set_data_type(cudnn.data_type.HALF)
    yield "wgrad 3-D groups +scale", g, [19]
    # 1-D depthwise
    x, w, dy = torch.empty(8, 64, 101), torch.empty(64, 1, 5), torch.empty(8, 64, 50)
    g = cudnn.pygraph()
    tdy, tw = _t(g, dy), _t(g, w)
    dx = g.conv_dgrad(tdy, tw, padding=[1], stride=[2])
    dx.set_dim(list(x.shape)).set_output(True)
    yield "dgrad 1-D depthwise", g, [17]
    g = cudnn.pygraph()
    tx, tdy = _t(g, x), _t(g, dy)
    dw = g.conv_wgrad(tx, tdy, padding=[1], stride=[2])
    dw.set_dim(list(w.shape)).set_output(True)
    yield "wgrad 1-D depthwise", g, [19]


def main():
    return 1 if run_checks(graphs(), decline_fails=True) else 0


if __name__ == "__main__":
    sys.exit(main())
