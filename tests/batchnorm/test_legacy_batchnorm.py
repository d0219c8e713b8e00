"""The descriptor API's batch normalization (forward inference, forward training, backward,
derive_bn_tensor_descriptor) against PyTorch in float64: SPATIAL and PER_ACTIVATION, NCHW
and NHWC, alpha/beta blending, running buffers updated in place, optional save buffers,
backward with and without saved statistics; and each rule with its error."""

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, expect_error

import opendnn.legacy as cudnn
from opendnn.errors import BadParamError, Status

FLOAT = cudnn.DataType.FLOAT
NCHW, NHWC = cudnn.TensorFormat.NCHW, cudnn.TensorFormat.NHWC
MODE = cudnn.BatchNormMode
DIMS = (3, 4, 3, 2)
EPS = 1e-4


def _desc(fmt, dims=DIMS, dtype=FLOAT):
    d = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(d, fmt, dtype, *dims)
    return d


def _tensor(fmt, dims, seed, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(*dims, generator=g) * scale + shift
    return t.to(memory_format=torch.channels_last if fmt == NHWC else torch.contiguous_format)


def _flat(x, mode):
    """x as PyTorch's batch norm sees it: [N, C, ...] (spatial) or [N, C*H*W]."""
    return x.reshape(x.shape[0], -1) if mode == MODE.PER_ACTIVATION else x


def _bn(x_desc, mode):
    return cudnn.derive_bn_tensor_descriptor(cudnn.create_tensor_descriptor(), x_desc, mode)


def _params(bn, seed):
    return [
        _tensor(NCHW, bn.dims, seed + i, 1.0, 1.0 if i == 3 else 0.0).abs()
        if i == 3
        else _tensor(NCHW, bn.dims, seed + i)
        for i in range(4)
    ]


def test_derive_bn_tensor_descriptor():
    x = _desc(NHWC, (2, 5, 3, 4), cudnn.DataType.HALF)
    d = _bn(x, MODE.SPATIAL)
    assert d.dims == (1, 5, 1, 1) and d.data_type == FLOAT
    d = _bn(x, MODE.PER_ACTIVATION)
    assert d.dims == (1, 5, 3, 4) and d.strides == (60, 12, 4, 1)
    assert _bn(x, MODE.SPATIAL_PERSISTENT).dims == (1, 5, 1, 1)


@pytest.mark.parametrize(
    "fmt,mode,alpha,beta",
    [
        (NCHW, MODE.SPATIAL, 1.0, 0.0),
        (NHWC, MODE.SPATIAL, 0.5, 2.0),
        (NCHW, MODE.PER_ACTIVATION, 0.5, 2.0),
        (NHWC, MODE.PER_ACTIVATION, 1.0, 0.0),
        (NHWC, MODE.SPATIAL_PERSISTENT, 1.0, 0.0),
    ],
)
def test_forward_training(fmt, mode, alpha, beta):
    handle, d = cudnn.create("cpu"), _desc(fmt)
    bn = _bn(d, mode)
    x, y = _tensor(fmt, DIMS, 1, 2.0, 3.0), _tensor(fmt, DIMS, 2)
    scale, bias, rm, rv = _params(bn, 3)
    prior, want_m, want_v = y.clone(), rm.double().reshape(-1), rv.double().reshape(-1)
    save_m, save_i = torch.empty(bn.dims), torch.empty(bn.dims)
    cudnn.batch_normalization_forward_training(
        handle, mode, alpha, beta, d, x, d, y, bn, scale, bias, 0.3, rm, rv, EPS, save_m, save_i
    )
    xf = _flat(x.double(), mode)
    ref = F.batch_norm(
        xf, want_m, want_v, scale.reshape(-1).double(), bias.reshape(-1).double(), True, 0.3, EPS
    ).reshape(DIMS)
    n = xf.numel() // want_m.numel()
    assert_close(y, alpha * ref + beta * prior.double(), torch.float32, n)
    assert_close(rm.reshape(-1), want_m, torch.float32, n)
    assert_close(rv.reshape(-1), want_v, torch.float32, n)
    axes = [0] + list(range(2, xf.dim()))
    assert_close(save_m.reshape(-1), xf.mean(axes), torch.float32, n)
    assert_close(save_i.reshape(-1), (xf.var(axes, unbiased=False) + EPS) ** -0.5, torch.float32, n)


def test_forward_training_without_running_or_save_buffers():
    handle, d = cudnn.create("cpu"), _desc(NHWC)
    bn = _bn(d, MODE.SPATIAL)
    x, y = _tensor(NHWC, DIMS, 4), torch.empty(DIMS).to(memory_format=torch.channels_last)
    scale, bias, _, _ = _params(bn, 5)
    cudnn.batch_normalization_forward_training(
        handle, MODE.SPATIAL, 1.0, 0.0, d, x, d, y, bn, scale, bias, 0.0, None, None, EPS
    )
    ref = F.batch_norm(
        x.double(),
        None,
        None,
        scale.reshape(-1).double(),
        bias.reshape(-1).double(),
        True,
        0.0,
        EPS,
    )
    assert_close(y, ref, torch.float32, 18)


@pytest.mark.parametrize(
    "fmt,mode,alpha,beta",
    [
        (NCHW, MODE.SPATIAL, 0.5, 2.0),
        (NHWC, MODE.SPATIAL, 1.0, 0.0),
        (NHWC, MODE.PER_ACTIVATION, 0.5, 2.0),
    ],
)
def test_forward_inference_takes_the_variance(fmt, mode, alpha, beta):
    handle, d = cudnn.create("cpu"), _desc(fmt)
    bn = _bn(d, mode)
    x, y = _tensor(fmt, DIMS, 6), _tensor(fmt, DIMS, 7)
    scale, bias, mean, var = _params(bn, 8)
    prior = y.clone()
    cudnn.batch_normalization_forward_inference(
        handle, mode, alpha, beta, d, x, d, y, bn, scale, bias, mean, var, EPS
    )
    ref = F.batch_norm(
        _flat(x.double(), mode),
        mean.reshape(-1).double(),
        var.reshape(-1).double(),
        scale.reshape(-1).double(),
        bias.reshape(-1).double(),
        False,
        0.1,
        EPS,
    ).reshape(DIMS)
    assert_close(y, alpha * ref + beta * prior.double(), torch.float32, 4)


PLAIN, BLEND = (1.0, 0.0, 1.0, 0.0), (2.0, -1.0, 0.5, 3.0)


@pytest.mark.parametrize(
    "fmt,mode,saved,blend",
    [
        (NCHW, MODE.SPATIAL, True, PLAIN),
        (NHWC, MODE.SPATIAL, False, BLEND),
        (NHWC, MODE.PER_ACTIVATION, True, BLEND),
        (NCHW, MODE.PER_ACTIVATION, False, PLAIN),
    ],
)
def test_backward(fmt, mode, saved, blend):
    ad, bd, ap, bp = blend
    handle, d = cudnn.create("cpu"), _desc(fmt)
    bn = _bn(d, mode)
    x, dy, dx = _tensor(fmt, DIMS, 9, 2.0, 1.0), _tensor(fmt, DIMS, 10), _tensor(fmt, DIMS, 11)
    scale, _, ds, db = _params(bn, 12)
    prior_dx, prior_ds, prior_db = dx.clone(), ds.clone(), db.clone()
    xr = _flat(x.double(), mode).requires_grad_(True)
    wr = scale.reshape(-1).double().requires_grad_(True)
    br = torch.zeros_like(wr).requires_grad_(True)
    F.batch_norm(xr, None, None, wr, br, True, 0.1, EPS).backward(_flat(dy.double(), mode))
    axes = [0] + list(range(2, xr.dim()))
    mean = inv = None
    if saved:
        mean = xr.detach().mean(axes).float().reshape(bn.dims)
        inv = ((xr.detach().var(axes, unbiased=False) + EPS) ** -0.5).float().reshape(bn.dims)
    cudnn.batch_normalization_backward(
        handle, mode, ad, bd, ap, bp, d, x, d, dy, d, dx, bn, scale, ds, db, EPS, mean, inv
    )
    n = xr.numel() // wr.numel()
    assert_close(dx, ad * xr.grad.reshape(DIMS) + bd * prior_dx.double(), torch.float32, n)
    assert_close(
        ds.reshape(-1), ap * wr.grad + bp * prior_ds.reshape(-1).double(), torch.float32, n
    )
    assert_close(
        db.reshape(-1), ap * br.grad + bp * prior_db.reshape(-1).double(), torch.float32, n
    )


# ---- bad input -------------------------------------------------------------------------------
def _train(**over):
    d = over.pop("x_desc", None) or _desc(NCHW)
    bn = over.pop("bn", None) or _bn(d, MODE.SPATIAL)
    scale, bias, rm, rv = _params(_bn(d, MODE.SPATIAL), 13)
    args = dict(mode=MODE.SPATIAL, factor=0.1, rm=rm, rv=rv, eps=EPS)
    args.update(over)
    x = torch.randn(DIMS)
    return lambda: cudnn.batch_normalization_forward_training(
        cudnn.create("cpu"),
        args["mode"],
        1.0,
        0.0,
        d,
        x,
        d,
        torch.empty(DIMS),
        bn,
        scale,
        bias,
        args["factor"],
        args["rm"],
        args["rv"],
        args["eps"],
    )


def test_epsilon_below_the_minimum_is_rejected():
    assert cudnn.BN_MIN_EPSILON == 0.0
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        _train(eps=-1e-6),
        "batch_normalization_forward_training",
        "epsilon",
        "below the minimum",
    )
    expect_error(BadParamError, Status.BAD_PARAM, _train(eps=float("nan")), "epsilon")


@pytest.mark.parametrize("factor", [-0.1, 1.5])
def test_factor_outside_zero_one_is_rejected(factor):
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        _train(factor=factor),
        "exponential_average_factor",
        "within [0, 1]",
    )


def test_bn_descriptor_of_the_wrong_dims_or_mode_is_rejected():
    d = _desc(NCHW)
    wrong = _desc(NCHW, (1, 5, 1, 1))
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        _train(bn=wrong),
        "bn_scale_bias_mean_var_desc",
        "must be [1, 4, 1, 1] for mode SPATIAL",
    )
    per_act = _bn(d, MODE.PER_ACTIVATION)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        _train(bn=per_act),
        "dims [1, 4, 3, 2] must be [1, 4, 1, 1] for mode SPATIAL",
    )


def test_running_buffers_come_in_pairs():
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        _train(rv=None),
        "result_running_variance",
        "both running buffers",
    )


def test_x_and_y_dims_must_agree_and_descriptors_be_set():
    handle, d = cudnn.create("cpu"), _desc(NCHW)
    bn = _bn(d, MODE.SPATIAL)
    scale, bias, mean, var = _params(bn, 14)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: (
            cudnn.batch_normalization_forward_inference(
                handle,
                MODE.SPATIAL,
                1.0,
                0.0,
                d,
                torch.randn(DIMS),
                _desc(NCHW, (3, 4, 3, 3)),
                torch.empty(3, 4, 3, 3),
                bn,
                scale,
                bias,
                mean,
                var,
                EPS,
            )
        ),
        "y",
        "must equal x's",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: (
            cudnn.batch_normalization_forward_inference(
                handle,
                MODE.SPATIAL,
                1.0,
                0.0,
                cudnn.create_tensor_descriptor(),
                None,
                d,
                None,
                bn,
                scale,
                bias,
                mean,
                var,
                EPS,
            )
        ),
        "x",
        "never set",
    )


def test_a_buffer_that_does_not_match_its_descriptor_is_rejected():
    handle, d = cudnn.create("cpu"), _desc(NHWC)
    bn = _bn(d, MODE.SPATIAL)
    scale, bias, mean, var = _params(bn, 15)
    with pytest.raises(BadParamError) as e:
        cudnn.batch_normalization_forward_inference(
            handle,
            MODE.SPATIAL,
            1.0,
            0.0,
            d,
            torch.randn(DIMS),
            d,
            torch.empty(DIMS).to(memory_format=torch.channels_last),
            bn,
            scale,
            bias,
            mean,
            var,
            EPS,
        )
    assert "strides" in str(e.value)


def test_training_with_one_value_per_channel_is_rejected():
    d = _desc(NCHW, (1, 4, 1, 1))
    handle, bn = cudnn.create("cpu"), _bn(d, MODE.SPATIAL)
    scale, bias, _, _ = _params(bn, 16)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: (
            cudnn.batch_normalization_forward_training(
                handle,
                MODE.SPATIAL,
                1.0,
                0.0,
                d,
                torch.randn(1, 4, 1, 1),
                d,
                torch.empty(1, 4, 1, 1),
                bn,
                scale,
                bias,
                0.1,
                None,
                None,
                EPS,
            )
        ),
        "more than one value per statistic",
    )
