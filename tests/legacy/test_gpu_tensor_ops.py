"""The descriptor API's tensor operations and activations on the GPU (pytest -m gpu),
against PyTorch in float64, at sizes the interpreter cannot run."""

import math

import pytest
import torch
from _util import assert_close

import opendnn.legacy as cudnn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
FLOAT, HALF, BF16 = cudnn.DataType.FLOAT, cudnn.DataType.HALF, cudnn.DataType.BFLOAT16
TORCH = {FLOAT: torch.float32, HALF: torch.float16, BF16: torch.bfloat16}
NCHW, NHWC = cudnn.TensorFormat.NCHW, cudnn.TensorFormat.NHWC
ACT, NAN, R = cudnn.ActivationMode, cudnn.NanPropagation, cudnn.ReduceTensorOp


def _desc(dims, dtype=FLOAT, fmt=NCHW):
    d = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(d, fmt, dtype, *dims)
    return d


def _buf(dims, dtype=FLOAT, fmt=NCHW, scale=1.0):
    t = (torch.randn(dims, device="cuda") * scale).to(TORCH[dtype])
    return t.to(memory_format=torch.channels_last) if fmt == NHWC else t.contiguous()


@pytest.fixture
def h():
    torch.manual_seed(0)
    return cudnn.create("cuda")


@pytest.mark.parametrize(
    "mode,coef,f",
    [
        (ACT.RELU, 0.0, torch.relu),
        (ACT.SIGMOID, 0.0, torch.sigmoid),
        (ACT.CLIPPED_RELU, 0.5, lambda x: x.clamp(0, 0.5)),
        (ACT.ELU, 0.3, lambda x: torch.where(x > 0, x, 0.3 * torch.expm1(x))),
    ],
)
@pytest.mark.parametrize("dtype,fmt", [(BF16, NHWC), (FLOAT, NCHW)])
def test_activation(h, mode, coef, f, dtype, fmt):
    dims = (8, 64, 33, 31)
    act = cudnn.create_activation_descriptor()
    cudnn.set_activation_descriptor(act, mode, NAN.PROPAGATE_NAN, coef)
    d = _desc(dims, dtype, fmt)
    x, y, dy, dx = (_buf(dims, dtype, fmt, 2.0) for _ in range(4))
    prior = y.clone()
    cudnn.activation_forward(h, act, 2.0, d, x, -1.0, d, y)
    xd = x.double().requires_grad_(True)
    fx = f(xd)
    assert_close(y, 2.0 * fx.detach() - prior.double(), TORCH[dtype], 2)
    fx.backward(dy.double())
    want = xd.grad
    if mode == ACT.CLIPPED_RELU:  # cuDNN's (and our) gradient is 0 at x == coef
        want = torch.where((x.double() > 0) & (x.double() < coef), dy.double(), 0.0)
    cudnn.activation_backward(h, act, 1.0, d, y, d, dy, d, x, 0.0, d, dx)
    assert_close(dx, want, TORCH[dtype], 2)


def test_add_op_and_transform(h):
    dims = (16, 96, 28, 28)
    a, c = _buf((1, 96, 1, 1)), _buf(dims, BF16, NHWC)
    prior = c.clone()
    cudnn.add_tensor(h, 0.5, _desc((1, 96, 1, 1)), a, 1.0, _desc(dims, BF16, NHWC), c)
    assert_close(c, 0.5 * a.double() + prior.double(), torch.bfloat16, 2)
    op = cudnn.create_op_tensor_descriptor()
    cudnn.set_op_tensor_descriptor(op, cudnn.OpTensorOp.MAX, FLOAT, NAN.NOT_PROPAGATE_NAN)
    x, out = _buf(dims), torch.full(dims, math.nan, device="cuda")
    cudnn.op_tensor(h, op, 1.0, _desc(dims), x, 1.0, _desc((1, 96, 1, 1)), a, 0.0, _desc(dims), out)
    assert torch.equal(out, torch.maximum(x, a))
    y = torch.full(dims, math.nan, device="cuda", dtype=torch.half).to(
        memory_format=torch.channels_last
    )
    cudnn.transform_tensor(h, 1.0, _desc(dims), x, 0.0, _desc(dims, HALF, NHWC), y)
    assert torch.equal(y, x.half())


@pytest.mark.parametrize("op", [R.ADD, R.MAX, R.AMAX, R.NORM2])
def test_reduce_with_indices(h, op):
    dims, c_dims = (8, 256, 14, 14), (8, 256, 1, 1)
    a = _buf(dims)
    rd = cudnn.create_reduce_tensor_descriptor()
    want_idx = op in (R.MAX, R.AMAX)
    cudnn.set_reduce_tensor_descriptor(rd, op, FLOAT, NAN.NOT_PROPAGATE_NAN, int(want_idx), 0)
    a_d, c_d = _desc(dims), _desc(c_dims)
    isz = cudnn.get_reduction_indices_size(h, rd, a_d, c_d)
    wsz = cudnn.get_reduction_workspace_size(h, rd, a_d, c_d)
    c = torch.full(c_dims, math.nan, device="cuda")
    ind = torch.full((max(isz // 4, 1),), -1, device="cuda", dtype=torch.int32)
    ws = torch.empty(wsz, device="cuda", dtype=torch.uint8)
    cudnn.reduce_tensor(h, rd, ind, isz, ws, wsz, 1.0, a_d, a, 0.0, c_d, c)
    v = a.double().abs() if op == R.AMAX else a.double()
    flat = v.reshape(8, 256, -1)
    want = {
        R.ADD: flat.sum(-1),
        R.MAX: flat.amax(-1),
        R.AMAX: flat.amax(-1),
        R.NORM2: flat.square().sum(-1).sqrt(),
    }[op]
    assert_close(c, want.view(c_dims), torch.float32, 196)
    if want_idx:
        assert torch.equal(ind.view(8, 256).long(), flat.argmax(-1))
