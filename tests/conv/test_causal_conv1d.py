"""cudnn-frontend's ``cudnn.ops.causal_conv1d`` on opendnn: the depthwise causal 1-D
convolution (+ bias, + SiLU) and its gradients against float64 PyTorch; its argument
rules."""

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close

import opendnn.frontend as cudnn
from opendnn.errors import BadParamError, Status


def _want(x, w, b, activation):
    """float64 PyTorch: left-pad K - 1, one filter per channel, bias, activation."""
    y = F.conv1d(F.pad(x, (w.shape[1] - 1, 0)), w.unsqueeze(1), b, groups=w.shape[0])
    return F.silu(y) if activation == "silu" else y


@pytest.mark.parametrize(
    "shape,k,dtype,activation,with_bias",
    [
        ((2, 5, 11), 4, torch.float32, "identity", True),
        ((1, 3, 7), 3, torch.float32, "silu", False),
        ((2, 8, 16), 4, torch.bfloat16, "silu", True),
        ((3, 1, 1), 2, torch.float16, "identity", True),  # one step, one channel
    ],
)
def test_forward_and_gradients_match_pytorch(rng, shape, k, dtype, activation, with_bias):
    x = rng.rand(shape, dtype).requires_grad_()
    w = rng.rand((shape[1], k), dtype).requires_grad_()
    b = rng.rand((shape[1],), dtype).requires_grad_() if with_bias else None
    y = cudnn.ops.causal_conv1d(x, w, b, activation)
    ref = [t.detach().double().requires_grad_() for t in (x, w) + ((b,) if with_bias else ())]
    want = _want(ref[0], ref[1], ref[2] if with_bias else None, activation)
    assert y.dtype == dtype and y.shape == shape
    assert_close(y, want.detach(), dtype, k)
    g = rng.rand(shape, dtype)
    y.backward(g)
    want.backward(g.double())
    for got, r in zip((x, w) + ((b,) if with_bias else ()), ref):
        assert_close(got.grad, r.grad, dtype, shape[0] * shape[2])


def test_causality():
    """y[t] depends on x[<= t] only."""
    x = torch.zeros(1, 2, 9)
    x[0, :, 5] = 1.0
    y = cudnn.ops.causal_conv1d(x, torch.ones(2, 3))
    assert torch.equal(y[0, 0], torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 0], dtype=torch.float32))


@pytest.mark.parametrize(
    "args,err,status,words",
    [
        (
            (torch.ones(2, 3), torch.ones(3, 2)),
            BadParamError,
            Status.BAD_PARAM_SHAPE_MISMATCH,
            "3-D",
        ),
        (
            (torch.ones(1, 3, 4), torch.ones(4, 2)),
            BadParamError,
            Status.BAD_PARAM_SHAPE_MISMATCH,
            "3 channels",
        ),
        (
            (torch.ones(1, 3, 4), torch.ones(3, 2), torch.ones(3, dtype=torch.half)),
            BadParamError,
            Status.BAD_PARAM_ATTRIBUTE_TYPE,
            "one type",
        ),
    ],
)
def test_rules(args, err, status, words):
    with pytest.raises(err) as e:
        cudnn.ops.causal_conv1d(*args)
    assert e.value.status == status and words in str(e.value)
    with pytest.raises(ValueError, match="Unsupported activation 'relu'"):
        cudnn.ops.causal_conv1d(torch.ones(1, 3, 4), torch.ones(3, 2), activation="relu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_bf16_mamba_shape(rng):
    x = rng.rand((4, 256, 1024), torch.bfloat16).cuda().requires_grad_()
    w = rng.rand((256, 4), torch.bfloat16).cuda().requires_grad_()
    b = rng.rand((256,), torch.bfloat16).cuda().requires_grad_()
    y = cudnn.ops.causal_conv1d(x, w, b, "silu")
    want = _want(x.double(), w.double(), b.double(), "silu")
    assert_close(y.cpu(), want.detach().cpu(), torch.bfloat16, 4)
    y.float().sum().backward()
    assert x.grad is not None and w.grad is not None and b.grad is not None
