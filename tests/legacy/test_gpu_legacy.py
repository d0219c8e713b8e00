"""The descriptor API on the GPU: the seed programs and the backward calls (pytest -m gpu)."""

import importlib.util
import os

import pytest
import torch
import torch.nn.functional as F

import opendnn.legacy as cudnn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def _example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_hello_cudnn_on_gpu():
    x, w, y = _example("03_hello_cudnn").main()
    assert y.is_cuda
    ref = F.conv2d(x.double(), w.double(), stride=2, padding=3)
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-5


def test_conv_bias_relu_seed_on_gpu():
    x, w, b, y = _example("04_conv_bias_relu").main()
    ref = torch.relu(F.conv2d(x.double(), w.double(), padding=1) + b.double())
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-5


@pytest.mark.parametrize("algo", list(cudnn.ConvolutionFwdAlgo))
def test_every_forward_algorithm_or_its_reason(algo):
    h = cudnn.create("cuda")
    xd, yd = cudnn.create_tensor_descriptor(), cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(xd, cudnn.TensorFormat.NHWC, cudnn.DataType.HALF, 8, 32, 20, 20)
    wd = cudnn.create_filter_descriptor()
    cudnn.set_filter_4d_descriptor(wd, cudnn.DataType.HALF, cudnn.TensorFormat.NHWC, 64, 32, 3, 3)
    conv = cudnn.create_convolution_descriptor()
    cudnn.set_convolution_2d_descriptor(
        conv, 1, 1, 1, 1, 1, 1, cudnn.ConvolutionMode.CROSS_CORRELATION, cudnn.DataType.FLOAT
    )
    dims = cudnn.get_convolution_2d_forward_output_dim(conv, xd, wd)
    cudnn.set_tensor_4d_descriptor(yd, cudnn.TensorFormat.NHWC, cudnn.DataType.HALF, *dims)
    perf = {p.algo: p for p in cudnn.get_convolution_forward_algorithm_v7(h, xd, wd, conv, yd, 8)}
    p = perf[algo]
    if p.status != cudnn.Status.SUCCESS:
        assert p.reason, f"{algo.name} declined without a reason"
        pytest.skip(f"{algo.name}: {p.reason}")
    cl = torch.channels_last
    x = torch.randn(8, 32, 20, 20, device="cuda", dtype=torch.half).to(memory_format=cl)
    w = (torch.randn(64, 32, 3, 3, device="cuda", dtype=torch.half) * 0.1).to(memory_format=cl)
    y = torch.empty(*dims, device="cuda", dtype=torch.half).to(memory_format=cl)
    ws = torch.empty(p.memory, device="cuda", dtype=torch.uint8) if p.memory else None
    cudnn.convolution_forward(h, 1.0, xd, x, wd, w, conv, algo, ws, p.memory, 0.0, yd, y)
    ref = F.conv2d(x.double(), w.double(), padding=1)
    assert ((y.double() - ref).norm() / ref.norm()).item() < 5e-3
