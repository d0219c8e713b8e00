"""The descriptor API's softmax_forward / softmax_backward against PyTorch in float64:
CHANNEL and INSTANCE modes, ACCURATE / FAST / LOG, NCHW and NHWC, alpha/beta blending;
and each rule with its error."""

import pytest
import torch
from _util import assert_close

import opendnn.legacy as cudnn
from opendnn.errors import BadParamError, GraphNotSupportedError, Status

FLOAT = cudnn.DataType.FLOAT
NCHW, NHWC = cudnn.TensorFormat.NCHW, cudnn.TensorFormat.NHWC
ALGO, MODE = cudnn.SoftmaxAlgorithm, cudnn.SoftmaxMode


def _desc(fmt, dims, dtype=FLOAT):
    d = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(d, fmt, dtype, *dims)
    return d


def _tensor(fmt, dims, seed):
    torch.manual_seed(seed)
    cl = torch.channels_last if fmt == NHWC else torch.contiguous_format
    return (torch.randn(*dims) * 3).to(memory_format=cl)


def _ref_forward(x, algo, mode):
    xd = x.double()
    flat = xd.reshape(xd.shape[0], -1) if mode == MODE.INSTANCE else xd
    dim = 1
    out = torch.log_softmax(flat, dim) if algo == ALGO.LOG else torch.softmax(flat, dim)
    return out.reshape(xd.shape)


@pytest.mark.parametrize("fmt", [NCHW, NHWC])
@pytest.mark.parametrize("mode", [MODE.CHANNEL, MODE.INSTANCE])
@pytest.mark.parametrize("algo", [ALGO.ACCURATE, ALGO.FAST, ALGO.LOG])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 2.0)])
def test_softmax_forward(fmt, mode, algo, alpha, beta):
    dims = (2, 5, 3, 4)
    handle, d = cudnn.create("cpu"), _desc(fmt, dims)
    x, y = _tensor(fmt, dims, 1), _tensor(fmt, dims, 2)
    prior = y.clone()
    cudnn.softmax_forward(handle, algo, mode, alpha, d, x, beta, d, y)
    want = alpha * _ref_forward(x, algo, mode) + beta * prior.double()
    assert_close(y, want, torch.float32, 60)


@pytest.mark.parametrize("fmt", [NCHW, NHWC])
@pytest.mark.parametrize("mode", [MODE.CHANNEL, MODE.INSTANCE])
@pytest.mark.parametrize("algo", [ALGO.ACCURATE, ALGO.LOG])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, -1.0)])
def test_softmax_backward(fmt, mode, algo, alpha, beta):
    dims = (2, 4, 3, 3)
    handle, d = cudnn.create("cpu"), _desc(fmt, dims)
    x = _tensor(fmt, dims, 3).double().requires_grad_(True)
    y = _ref_forward(x, algo, mode)
    g = _tensor(fmt, dims, 4)
    y.backward(g.double())
    yv = (
        y.detach()
        .float()
        .to(memory_format=torch.channels_last if fmt == NHWC else torch.contiguous_format)
    )
    dx = _tensor(fmt, dims, 5)
    prior = dx.clone()
    cudnn.softmax_backward(handle, algo, mode, alpha, d, yv, d, g, beta, d, dx)
    assert_close(dx, alpha * x.grad + beta * prior.double(), torch.float32, 40)


def test_channel_mode_takes_different_layouts_for_x_and_y():
    dims = (2, 6, 2, 3)
    handle = cudnn.create("cpu")
    x, y = _tensor(NCHW, dims, 6), _tensor(NHWC, dims, 7)
    cudnn.softmax_forward(
        handle, ALGO.ACCURATE, MODE.CHANNEL, 1.0, _desc(NCHW, dims), x, 0.0, _desc(NHWC, dims), y
    )
    assert_close(y, torch.softmax(x.double(), 1), torch.float32, 6)


def test_instance_mode_needs_one_layout():
    dims = (2, 6, 2, 3)
    handle = cudnn.create("cpu")
    with pytest.raises(GraphNotSupportedError) as e:
        cudnn.softmax_forward(
            handle,
            ALGO.ACCURATE,
            MODE.INSTANCE,
            1.0,
            _desc(NCHW, dims),
            _tensor(NCHW, dims, 8),
            0.0,
            _desc(NHWC, dims),
            _tensor(NHWC, dims, 9),
        )
    assert e.value.status == Status.NOT_SUPPORTED and "same layout" in str(e.value)


def test_instance_mode_needs_dense_samples():
    handle = cudnn.create("cpu")
    d = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor_ex(d, FLOAT, 2, 3, 2, 2, 24, 8, 4, 1)  # padded rows
    buf = torch.randn(48).as_strided((2, 3, 2, 2), (24, 8, 4, 1))
    with pytest.raises(GraphNotSupportedError) as e:
        cudnn.softmax_forward(
            handle, ALGO.ACCURATE, MODE.INSTANCE, 1.0, d, buf, 0.0, d, buf.clone()
        )
    assert "one dense block" in str(e.value)


def test_dims_that_disagree_are_rejected():
    handle = cudnn.create("cpu")
    with pytest.raises(BadParamError) as e:
        cudnn.softmax_forward(
            handle,
            ALGO.ACCURATE,
            MODE.CHANNEL,
            1.0,
            _desc(NCHW, (2, 3, 2, 2)),
            torch.randn(2, 3, 2, 2),
            0.0,
            _desc(NCHW, (2, 4, 2, 2)),
            torch.randn(2, 4, 2, 2),
        )
    assert e.value.status == Status.BAD_PARAM_SHAPE_MISMATCH
    assert "softmax_forward" in str(e.value) and "y" in str(e.value)


def test_an_unset_descriptor_is_rejected():
    handle = cudnn.create("cpu")
    with pytest.raises(BadParamError) as e:
        cudnn.softmax_forward(
            handle,
            ALGO.ACCURATE,
            MODE.CHANNEL,
            1.0,
            cudnn.create_tensor_descriptor(),
            torch.randn(2, 3, 2, 2),
            0.0,
            _desc(NCHW, (2, 3, 2, 2)),
            torch.randn(2, 3, 2, 2),
        )
    assert "never set" in str(e.value)
