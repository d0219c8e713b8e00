"""Pooling graph rules, each with its typed error naming the node, the tensor and the rule
(forward: mode, rank, parameter counts and bounds, padding below the window, the window
fitting the padded input, output dims, data and index types; backward: what max needs,
DX's dims, the Index's mode, DY / X dims), and the pooling engine's reasons to decline."""

import pytest
import torch
from _util import expect_error

import opendnn.frontend as cudnn
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.pool.engine import PoolEngine
from opendnn.errors import BadParamError, Status

M = cudnn.resample_mode


# ---- bad input -------------------------------------------------------------------------------
def _graph_error(
    status,
    rule,
    tensor="x",
    shape=(2, 3, 6, 6),
    mode="MAXPOOL",
    window=(3, 3),
    stride=(2, 2),
    pre=(1, 1),
    post=(1, 1),
    dtype=None,
    y_dims=None,
    index_type=None,
):
    g = cudnn.pygraph()
    x = g.tensor(
        list(shape),
        list(torch.empty(shape).stride()) if 0 not in shape else [1] * len(shape),
        dtype or cudnn.data_type.FLOAT,
        name="x",
    )
    y, idx = g.resample(
        x,
        M[mode],
        window,
        stride,
        pre_padding=pre,
        post_padding=post,
        generate_index=index_type is not None,
        name="pool",
    )
    y.set_name("y").set_data_type(cudnn.data_type.FLOAT)
    if y_dims is not None:
        y.set_dim(list(y_dims))
    if index_type is not None:
        idx.set_name("idx").set_data_type(index_type)
    expect_error(BadParamError, status, g.validate, "resample 'pool'", tensor, rule)


@pytest.mark.parametrize(
    "kw,status,rule",
    [
        (dict(mode="NEAREST"), Status.NOT_SUPPORTED, "NEAREST is not a pooling mode"),
        (
            dict(shape=(2, 3), window=(), stride=(), pre=(), post=()),
            Status.NOT_SUPPORTED_SHAPE,
            "rank 2",
        ),
        (dict(window=(3,) * 3), Status.BAD_PARAM_SHAPE_MISMATCH, "window has 3 values"),
        (
            dict(window=(0, 3), pre=(0, 0), post=(0, 0)),
            Status.BAD_PARAM_OUT_OF_BOUND,
            "window [0, 3] must be >= 1",
        ),
        (dict(stride=(2, 0)), Status.BAD_PARAM_OUT_OF_BOUND, "stride [2, 0] must be >= 1"),
        (dict(pre=(-1, 0)), Status.BAD_PARAM_OUT_OF_BOUND, "pre_padding [-1, 0] must be >= 0"),
        (dict(post=(1, 3)), Status.BAD_PARAM_OUT_OF_BOUND, "must be smaller than the window"),
        (dict(window=(9, 3)), Status.BAD_PARAM_OUT_OF_BOUND, "larger than the padded input"),
        (dict(shape=(2, 3, 0, 6)), Status.BAD_PARAM_OUT_OF_BOUND, "spatial dims [0, 6]"),
        (
            dict(y_dims=(2, 3, 4, 4), tensor="y"),
            Status.BAD_PARAM_SHAPE_MISMATCH,
            "disagree with the pooling output [2, 3, 3, 3]",
        ),
        (
            dict(dtype=cudnn.data_type.INT32),
            Status.NOT_SUPPORTED_DATA_TYPE,
            "INT32 is not a floating type",
        ),
        (
            dict(index_type=cudnn.data_type.FLOAT, tensor="idx"),
            Status.NOT_SUPPORTED_DATA_TYPE,
            "not an integer type",
        ),
        (
            dict(
                shape=(1, 1, 20, 20), window=(12, 12), index_type=cudnn.data_type.INT8, tensor="idx"
            ),
            Status.NOT_SUPPORTED_DATA_TYPE,
            "cannot hold the window's 144",
        ),
    ],
)
def test_forward_rules(kw, status, rule):
    _graph_error(status, rule, **kw)


def _bwd_error(
    status,
    rule,
    tensor,
    mode="MAXPOOL",
    index=False,
    x_dims=(2, 3, 6, 6),
    dy_dims=(2, 3, 3, 3),
    set_dx=True,
    use_x=False,
):
    g = cudnn.pygraph()
    f = cudnn.data_type.FLOAT
    dy = g.tensor(list(dy_dims), list(torch.empty(dy_dims).stride()), f, name="dy")
    ix = (
        g.tensor(
            list(dy_dims), list(torch.empty(dy_dims).stride()), cudnn.data_type.INT8, name="idx"
        )
        if index
        else None
    )
    x = g.tensor(list(x_dims), list(torch.empty(x_dims).stride()), f, name="x") if use_x else None
    dx = g.resample_backward(
        dy, M[mode], (3, 3), (2, 2), padding=1, index=ix, input=x, name="poolb"
    )
    dx.set_name("dx")
    if set_dx:
        dx.set_dim([2, 3, 6, 6])
    expect_error(BadParamError, status, g.validate, "resample_backward 'poolb'", tensor, rule)


@pytest.mark.parametrize(
    "kw,status,rule",
    [
        (dict(tensor="dy"), Status.BAD_PARAM_NOT_FINALIZED, "needs the forward's Index or"),
        (
            dict(tensor="dx", set_dx=False, index=True),
            Status.BAD_PARAM_NOT_FINALIZED,
            "DX dims must be set",
        ),
        (
            dict(tensor="idx", mode="AVGPOOL_INCLUDE_PADDING", index=True),
            Status.BAD_PARAM,
            "for MAXPOOL only",
        ),
        (
            dict(tensor="dy", index=True, dy_dims=(2, 3, 4, 4)),
            Status.BAD_PARAM_SHAPE_MISMATCH,
            "DY dims [2, 3, 4, 4] disagree",
        ),
        (
            dict(tensor="x", use_x=True, x_dims=(2, 3, 6, 5)),
            Status.BAD_PARAM_SHAPE_MISMATCH,
            "X dims [2, 3, 6, 5] must equal DX dims",
        ),
    ],
)
def test_backward_rules(kw, status, rule):
    _bwd_error(status, rule, **kw)


def test_padding_and_pre_padding_together_are_rejected():
    g = cudnn.pygraph()
    x = g.tensor([1, 1, 4, 4], [16, 16, 4, 1], cudnn.data_type.FLOAT)
    with pytest.raises(BadParamError, match="give padding, or pre_padding"):
        g.resample(x, M.MAXPOOL, 2, 2, padding=0, pre_padding=0, name="p")


@pytest.mark.parametrize(
    "dtype,knobs,reason",
    [
        (torch.float64, None, "float64 runs on the reference"),
        (torch.float32, dict(BLOCK_P=4096, BLOCK_C=8, num_warps=4), "BLOCK_P x BLOCK_C"),
        (
            torch.float32,
            dict(BLOCK_P=8, BLOCK_C=2, num_warps=4, BLOCK_W=8),
            "plane tiles (BLOCK_W=8) hold one channel a row: BLOCK_C must be 1, not 2",
        ),
        (
            torch.float32,
            dict(BLOCK_P=1024, BLOCK_C=1, num_warps=4, BLOCK_W=32),
            "BLOCK_P x BLOCK_W = 32768 > 16384",
        ),
    ],
)
def test_engine_declines_with_a_reason(dtype, knobs, reason):
    x = torch.empty(1, 2, 5, 5, dtype=dtype)
    g = cudnn.pygraph()
    g.resample(g.tensor_like(x), M.MAXPOOL, (2, 2), (1, 1))[0].set_output(True)
    g.validate()
    e = PoolEngine()
    sup = e.check_support(g.op_graph, Target())
    if sup.ok:
        sup = e.check_config(g.op_graph, EngineConfig.make(e, **knobs), Target())
    assert not sup.ok and reason in sup.reason
