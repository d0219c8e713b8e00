"""Compile the FFT convolution engines' kernels (conv_fft #13, conv_fft_tiling #14) for
sm_90 (H100) on a machine with no GPU, as bench/compile_check.py does for the other conv
engines (whose graph list does not reach these two).
Run: PYTHONPATH=src python bench/compile_check_fft.py"""
import os
import sys

import torch

import opendnn.frontend as cudnn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_check import run_checks  # noqa: E402


def graphs():
    cl = torch.channels_last
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(4, 16, 28, 28, dtype=dt).to(memory_format=cl)
        w = torch.randn(32, 16, 5, 5, dtype=dt).to(memory_format=cl)
        b = torch.randn(1, 32, 1, 1, dtype=dt)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
        y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[2, 2]), tb))
        y.set_output(True)
        yield f"5x5+bias+relu {dt}", g, [13, 14]
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor(dim=[2, 8, 250, 250], data_type=cudnn.data_type.FLOAT)
    tw = g.tensor(dim=[8, 8, 7, 7], data_type=cudnn.data_type.FLOAT)
    g.conv_fprop(tx, tw, padding=[3, 3],
                 convolution_mode=cudnn.convolution_mode.CONVOLUTION).set_output(True)
    yield "256x256 7x7 conv mode", g, [13, 14]
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor(dim=[3, 1, 1, 1], data_type=cudnn.data_type.FLOAT)
    tw = g.tensor(dim=[1, 1, 1, 1], data_type=cudnn.data_type.FLOAT)
    g.conv_fprop(tx, tw).set_output(True)
    yield "1x1 image 1x1 filter", g, [13, 14]


def main():
    return 1 if run_checks(graphs(), limit=None) else 0


if __name__ == "__main__":
    sys.exit(main())
