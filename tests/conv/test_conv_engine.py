"""The implicit-GEMM convolution engine against the float64 reference (interpreter):
1-3-D, groups, depthwise, stride, dilation, asymmetric padding, both modes, NCHW / NHWC /
non-packed layouts, fp32 / fp16 / bf16, and fused epilogues."""

import math

import pytest
import torch
from _util import CONV_TYPES as TYPES
from _util import assert_close, check_engine, repro
from _util import graph_tensor as _tensor
from _util import with_layout as _layout

import opendnn.frontend as cudnn
from opendnn.engines.base import Target
from opendnn.engines.conv.implicit_gemm.engine import ImplicitGemmEngine
from opendnn.errors import BadParamError, GraphNotSupportedError, Status

CONV_ID = ImplicitGemmEngine.id

CASES = [  # (N, C, K, in, filt, stride, pre, post, dilation, groups)
    (2, 4, 6, (11,), (3,), (2,), (1,), (0,), (1,), 2),
    (1, 3, 5, (9, 7), (3, 2), (2, 1), (1, 0), (0, 1), (1, 2), 1),
    (2, 6, 6, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 6),
    (1, 2, 4, (5, 6, 4), (3, 2, 2), (1, 2, 1), (1, 0, 1), (1, 0, 1), (1, 1, 2), 2),
    (3, 1, 1, (1, 1), (1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1),
    (1, 33, 17, (5, 5), (1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1),
]


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "strided"])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_fprop_against_reference(case, layout, mode):
    n, c, k, sp, f, stride, pre, post, dil, groups = case
    torch.manual_seed(len(sp) * 100 + c * 10 + k)
    x = _layout(torch.randn(n, c, *sp), layout)
    w = _layout(torch.randn(k, c // groups, *f), layout)
    g = cudnn.pygraph()
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.conv_fprop(
        tx,
        tw,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dil),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    y.set_output(True)
    check_engine(
        g,
        {tx: x, tw: w},
        [y],
        CONV_ID,
        n=(c // groups) * max(1, len(f)),
        msg=repro(
            "conv_fprop", [tuple(x.shape), tuple(w.shape)], "float32", 0, layout=layout, mode=mode
        ),
    )


@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16])
def test_fprop_bias_relu_epilogue_types(dt):
    torch.manual_seed(7)
    x = torch.randn(2, 8, 7, 9, dtype=dt).to(memory_format=torch.channels_last)
    w = (torch.randn(12, 8, 3, 3, dtype=dt) * 0.2).to(memory_format=torch.channels_last)
    b = torch.randn(1, 12, 1, 1, dtype=dt)
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[1, 1]), tb))
    y.set_output(True)
    out = check_engine(
        g,
        {tx: x, tw: w, tb: b},
        [y],
        CONV_ID,
        n=72,
        msg=repro("relu(conv+bias)", [(2, 8, 7, 9)], str(dt), 7),
    )
    assert out[y].dtype == dt


def test_fprop_scale_residual_and_two_outputs():
    """y = relu(alpha * conv(x) + z): cuDNN's convolution_bias_activation pattern without
    bias, with the raw convolution also written out."""
    torch.manual_seed(3)
    x, w = torch.randn(1, 5, 6, 6), torch.randn(7, 5, 3, 3)
    z = torch.randn(1, 7, 4, 4)
    g = cudnn.pygraph()
    tx, tw, tz = g.tensor_like(x), g.tensor_like(w), g.tensor_like(z)
    conv = g.conv_fprop(tx, tw)
    conv.set_output(True)
    y = g.relu(g.add(g.scale(conv, 0.5), tz))
    y.set_output(True)
    check_engine(g, {tx: x, tw: w, tz: z}, [conv, y], CONV_ID, n=45)


def test_heuristics_pick_a_fused_conv_engine_for_conv_bias_relu():
    x, w, b = torch.randn(1, 4, 5, 5), torch.randn(4, 4, 3, 3), torch.randn(1, 4, 1, 1)
    g = cudnn.pygraph()
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[1, 1]), tb))
    g.build([cudnn.heur_mode.A])
    # one fused kernel, whichever convolution engine the cost model prefers (C=4: direct)
    assert g.get_plan_name_at_index(0).split("#")[0] in (
        "conv_implicit_gemm",
        "conv_gemm",
        "conv_direct",
    )
    out = torch.full((1, 4, 5, 5), float("nan"))
    g.execute({tx: x, tw: w, tb: b, y: out})
    ref = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), padding=1) + b.double())
    assert_close(out, ref, torch.float32, n=36)


def test_declines_computed_operands_with_a_reason():
    x, w = torch.randn(1, 4, 5, 5), torch.randn(4, 4, 3, 3)
    g = cudnn.pygraph()
    tx, tw = g.tensor_like(x), g.tensor_like(w)
    g.conv_fprop(g.transpose(tx, [0, 1, 3, 2]), tw).set_output(True)
    g.validate()
    s = ImplicitGemmEngine().check_support(
        g.op_graph, __import__("opendnn.engines.base", fromlist=["Target"]).Target()
    )
    assert not s.ok and "not a pointwise prologue" in s.reason


DGRAD_ID, WGRAD_ID = 4, 5


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_dgrad_and_wgrad_against_reference(case, layout, mode):
    n, c, k, sp, f, stride, pre, post, dil, groups = case
    torch.manual_seed(len(sp) * 100 + c * 10 + k + 1)
    x = _layout(torch.randn(n, c, *sp), layout)
    w = _layout(torch.randn(k, c // groups, *f), layout)
    from opendnn.ops.conv import output_dims

    ydims = output_dims(x.shape, w.shape, pre, post, stride, dil)
    dy = _layout(torch.randn(*ydims), layout)
    params = dict(
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dil),
        convolution_mode=cudnn.convolution_mode[mode],
    )

    g = cudnn.pygraph()
    tdy, tw = _tensor(g, dy), _tensor(g, w)
    dx = g.conv_dgrad(tdy, tw, **params)
    dx.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
    check_engine(
        g,
        {tdy: dy, tw: w},
        [dx],
        DGRAD_ID,
        n=(k // groups) * max(1, len(f)),
        msg=repro(
            "conv_dgrad", [tuple(dy.shape), tuple(w.shape)], "float32", 0, layout=layout, mode=mode
        ),
    )

    g = cudnn.pygraph()
    tx, tdy = _tensor(g, x), _tensor(g, dy)
    dw = g.conv_wgrad(tx, tdy, **params)
    dw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
    check_engine(
        g,
        {tx: x, tdy: dy},
        [dw],
        WGRAD_ID,
        n=n * max(1, len(sp)) * 4,
        msg=repro(
            "conv_wgrad", [tuple(x.shape), tuple(dy.shape)], "float32", 0, layout=layout, mode=mode
        ),
    )


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_dgrad_with_relu_backward_epilogue(dt):
    """DX = relu_backward(dgrad(DY, W), X): cuDNN's dgrad + drelu fusion."""
    torch.manual_seed(11)
    x = torch.randn(2, 6, 7, 7, dtype=dt).to(memory_format=torch.channels_last)
    w = (torch.randn(8, 6, 3, 3, dtype=dt) * 0.2).to(memory_format=torch.channels_last)
    dy = torch.randn(2, 8, 7, 7, dtype=dt).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw, tx = _tensor(g, dy), _tensor(g, w), _tensor(g, x)
    dgrad = g.conv_dgrad(tdy, tw, padding=[1, 1])
    dgrad.set_dim(list(x.shape)).set_stride(list(x.stride()))
    out = g.relu_backward(dgrad, tx)
    out.set_output(True).set_data_type(TYPES[dt])
    check_engine(g, {tdy: dy, tw: w, tx: x}, [out], DGRAD_ID, n=72)


# (N, C, K, in, filt, stride, pre, post, dilation, groups): strided backward data by phases
PHASE_CASES = [
    (2, 3, 5, (9, 8), (3, 3), (2, 2), (1, 1), (1, 0), (1, 1), 1),  # odd image, uneven pad
    (1, 4, 6, (7, 10), (4, 3), (3, 2), (2, 0), (0, 1), (1, 1), 2),  # filter not a multiple
    (2, 2, 3, (11,), (4,), (3,), (3,), (0,), (1,), 1),  # causal 1-D, stride 3
    (1, 2, 4, (5, 6, 4), (3, 3, 3), (2, 1, 2), (1, 1, 1), (1, 1, 0), (1, 2, 1), 1),  # 3-D
    (2, 6, 4, (8, 8), (1, 1), (2, 2), (0, 0), (0, 0), (1, 1), 2),  # 1x1 s2: empty phases
]


@pytest.mark.parametrize("case", PHASE_CASES, ids=[f"p{i}" for i in range(len(PHASE_CASES))])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_dgrad_by_stride_phases(case, layout, mode):
    """The gather backward data split by stride phases (PHASES=1): each program one
    phase's dx pixels and only the taps that reach them; dilation on stride-1 axes, groups,
    filters longer than the stride and phases no tap reaches (1x1 stride 2, dx = 0)."""
    n, c, k, sp, f, stride, pre, post, dil, groups = case
    torch.manual_seed(len(sp) * 100 + c * 10 + k + 7)
    x = _layout(torch.randn(n, c, *sp), layout)
    w = _layout(torch.randn(k, c // groups, *f), layout)
    from opendnn.ops.conv import output_dims

    dy = _layout(torch.randn(*output_dims(x.shape, w.shape, pre, post, stride, dil)), layout)
    g = cudnn.pygraph()
    tdy, tw = _tensor(g, dy), _tensor(g, w)
    dx = g.conv_dgrad(
        tdy,
        tw,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dil),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    dx.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
    g.validate()
    from opendnn.engines.registry import by_id

    cfgs = by_id(DGRAD_ID).configs(g.op_graph, Target())
    knobs = next(c.knob_dict for c in cfgs if c.knob_dict.get("PHASES"))
    check_engine(g, {tdy: dy, tw: w}, [dx], DGRAD_ID, knobs, n=(k // groups) * len(f))


def test_stride_phases_declines_with_reasons():
    g = cudnn.pygraph()
    dy = g.tensor(dim=[1, 4, 4, 4], data_type=cudnn.data_type.FLOAT)
    w = g.tensor(dim=[4, 2, 3, 3], data_type=cudnn.data_type.FLOAT)
    dx = g.conv_dgrad(dy, w, padding=[1, 1], stride=[2, 2], dilation=[2, 1])
    dx.set_dim([1, 2, 9, 8]).set_output(True)
    g.validate()
    with pytest.raises(GraphNotSupportedError) as e:
        g.create_execution_plan(DGRAD_ID, {"PHASES": 1})
    assert "dilation on a strided axis" in e.value.reasons["conv_dgrad_implicit_gemm"]
    g = cudnn.pygraph()
    dy = g.tensor(dim=[1, 4, 6, 6], data_type=cudnn.data_type.FLOAT)
    w = g.tensor(dim=[4, 2, 3, 3], data_type=cudnn.data_type.FLOAT)
    dx = g.conv_dgrad(dy, w, padding=[1, 1])
    dx.set_dim([1, 2, 6, 6]).set_output(True)
    g.validate()
    with pytest.raises(GraphNotSupportedError) as e:
        g.create_execution_plan(DGRAD_ID, {"PHASES": 1})
    assert "stride 1" in e.value.reasons["conv_dgrad_implicit_gemm"]


GEMM_ID = 6


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_gemm_engine_against_reference(case, layout, mode):
    """im2col + matmul engine (or the direct GEMM for 1x1 convolutions)."""
    n, c, k, sp, f, stride, pre, post, dil, groups = case
    torch.manual_seed(len(sp) * 100 + c * 10 + k + 2)
    x = _layout(torch.randn(n, c, *sp), layout)
    w = _layout(torch.randn(k, c // groups, *f), layout)
    b = torch.randn(1, k, *([1] * len(sp)))
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb = _tensor(g, x), _tensor(g, w), _tensor(g, b)
    conv = g.conv_fprop(
        tx,
        tw,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dil),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    y = g.relu(g.bias(conv, tb))
    y.set_output(True)
    check_engine(
        g,
        {tx: x, tw: w, tb: b},
        [y],
        GEMM_ID,
        n=(c // groups) * max(1, len(f)),
        msg=repro(
            "conv_gemm", [tuple(x.shape), tuple(w.shape)], "float32", 0, layout=layout, mode=mode
        ),
    )


@pytest.mark.parametrize(
    "filt,groups,batch_gap,fold",
    [
        ((1, 1), 1, 0, True),  # the direct GEMM: x itself, N*P rows
        ((3, 3), 1, 0, True),  # im2col, one group: the workspace's rows fold
        ((1, 1), 2, 0, True),  # direct with groups: each group's rows fold
        ((3, 3), 2, 0, False),  # im2col with groups: [N, G, P, kk] rows do not
        ((1, 1), 1, 5, False),  # x's images not adjacent: N GEMMs of P rows
    ],
)
def test_gemm_engine_folds_batch_into_rows(filt, groups, batch_gap, fold):
    """The explicit GEMM runs one [N*P, kk] GEMM when every operand walks (n, pixel)
    with one stride (channels-last), else N of P rows; both against float64, with bias,
    a residual add and relu on the fused epilogue."""
    from opendnn.engines.conv.gemm.engine import plan_gemm

    n, c, k, sp = 3, 8, 12, (5, 3)
    torch.manual_seed(7)
    big = torch.randn(n, sp[0] * sp[1] * c + batch_gap)
    x = big[:, : sp[0] * sp[1] * c].view(n, *sp, c).permute(0, 3, 1, 2)
    w = _layout(torch.randn(k, c // groups, *filt), "nhwc")
    b = torch.randn(1, k, 1, 1)
    pad = [f // 2 for f in filt]
    z = _layout(torch.randn(n, k, *sp), "nhwc")
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb, tz = _tensor(g, x), _tensor(g, w), _tensor(g, b), _tensor(g, z)
    conv = g.conv_fprop(tx, tw, padding=pad)
    y = g.relu(g.add(g.bias(conv, tb), tz))
    y.set_output(True)
    g.validate()
    assert plan_gemm(g.op_graph).fold is fold
    check_engine(g, {tx: x, tw: w, tb: b, tz: z}, [y], GEMM_ID, n=(c // groups) * 9)


DGRAD_GEMM_ID = 53


@pytest.mark.parametrize(
    "layout,groups,dims,fold",
    [
        ("nhwc", 1, (5, 3), True),  # one [N*P, K] x [K, C] GEMM
        ("nhwc", 2, (4, 2), True),  # each group's rows fold
        ("nchw", 1, (5, 3), False),  # N GEMMs of pixel-fastest operands
        ("nhwc", 1, (1, 1), True),  # one pixel per image
    ],
)
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_dgrad_gemm_engine(layout, groups, dims, fold, dt):
    """Pointwise backward data on the matmul engine, with cuDNN's dgrad + drelu epilogue,
    against float64; the batch folds into the rows only for channels-last tensors."""
    from opendnn.engines.conv.gemm.dgrad import plan_dgrad

    n, c, k = 3, 8, 12
    torch.manual_seed(13)
    x = _layout(torch.randn(n, c, *dims, dtype=dt), layout)
    w = _layout((torch.randn(k, c // groups, *([1] * len(dims))) * 0.3).to(dt), layout)
    dy = _layout(torch.randn(n, k, *dims, dtype=dt), layout)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw, tx = _tensor(g, dy), _tensor(g, w), _tensor(g, x)
    dgrad = g.conv_dgrad(tdy, tw, padding=[0] * len(dims))
    dgrad.set_dim(list(x.shape)).set_stride(list(x.stride()))
    out = g.relu_backward(dgrad, tx)
    out.set_output(True).set_data_type(TYPES[dt])
    g.validate()
    assert plan_dgrad(g.op_graph).fold is fold
    check_engine(g, {tdy: dy, tw: w, tx: x}, [out], DGRAD_GEMM_ID, n=k // groups)


COLUMNS_ID, DGRAD_COLUMNS_ID = 54, 55


@pytest.mark.parametrize(
    "n,groups,dims,batch_gap",
    [
        (3, 1, (5, 3), 0),  # N GEMMs W [K, C] x X[n] [C, P]
        (3, 2, (4, 3), 0),  # one per image and group
        (2, 3, (7,), 4),  # 1-D, three groups, x's images not adjacent
        (1, 1, (1, 1), 0),  # one image of one pixel
    ],
)
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_gemm_columns_engine(n, groups, dims, batch_gap, dt):
    """The pointwise forward with the output channels as rows and pixels as columns (NCHW),
    bias + residual + relu fused, against float64; y NaN-poisoned by check_engine."""
    c, k = 6, 12
    torch.manual_seed(17)
    p = math.prod(dims)
    x = torch.randn(n, c * p + batch_gap, dtype=dt)[:, : c * p].view(n, c, *dims)
    w = (torch.randn(k, c // groups, *([1] * len(dims))) * 0.3).to(dt)
    b = torch.randn(1, k, *([1] * len(dims)), dtype=dt)
    z = torch.randn(n, k, *dims, dtype=dt)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb, tz = _tensor(g, x), _tensor(g, w), _tensor(g, b), _tensor(g, z)
    y = g.relu(g.add(g.bias(g.conv_fprop(tx, tw, padding=[0] * len(dims)), tb), tz))
    y.set_output(True).set_data_type(TYPES[dt])
    check_engine(g, {tx: x, tw: w, tb: b, tz: z}, [y], COLUMNS_ID, n=c // groups)


@pytest.mark.parametrize(
    "n,groups,dims", [(3, 1, (5, 3)), (3, 2, (4, 3)), (2, 1, (9,)), (1, 1, (1, 1))]
)
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_dgrad_gemm_columns_engine(n, groups, dims, dt):
    """The pointwise backward data with dX's channels as rows (NCHW), drelu fused, against
    float64."""
    c, k = 8, 10
    torch.manual_seed(19)
    x = torch.randn(n, c, *dims, dtype=dt)
    w = (torch.randn(k, c // groups, *([1] * len(dims))) * 0.3).to(dt)
    dy = torch.randn(n, k, *dims, dtype=dt)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw, tx = _tensor(g, dy), _tensor(g, w), _tensor(g, x)
    dgrad = g.conv_dgrad(tdy, tw, padding=[0] * len(dims))
    dgrad.set_dim(list(x.shape)).set_stride(list(x.stride()))
    out = g.relu_backward(dgrad, tx)
    out.set_output(True).set_data_type(TYPES[dt])
    check_engine(g, {tdy: dy, tw: w, tx: x}, [out], DGRAD_COLUMNS_ID, n=k // groups)


def test_gemm_columns_engines_decline_channels_last_and_taps():
    """The column GEMMs take pixel-fastest 1x1 problems; channels-last ones fold into the
    row GEMMs, and a 3x3 filter is not a plain GEMM."""
    from opendnn.engines.registry import by_id

    for layout, filt, why in [
        ("nhwc", 1, "folds into the rows"),
        ("nchw", 3, "1x1"),
    ]:
        x = _layout(torch.randn(2, 4, 5, 5), layout)
        w = _layout(torch.randn(6, 4, filt, filt), layout)
        g = cudnn.pygraph()
        g.conv_fprop(_tensor(g, x), _tensor(g, w), padding=[filt // 2] * 2).set_output(True)
        g.validate()
        assert why in by_id(COLUMNS_ID).check_support(g.op_graph, Target()).reason
        dy = _layout(torch.randn(2, 6, 5, 5), layout)
        g = cudnn.pygraph()
        dx = g.conv_dgrad(_tensor(g, dy), _tensor(g, w), padding=[filt // 2] * 2)
        dx.set_dim([2, 4, 5, 5]).set_output(True)
        g.validate()
        assert why in by_id(DGRAD_COLUMNS_ID).check_support(g.op_graph, Target()).reason


def test_dgrad_gemm_engine_declines_taps_stride_padding():
    """Only the pointwise, stride-1, unpadded backward data is a plain GEMM."""
    from opendnn.engines.conv.gemm.dgrad import plan_dgrad

    for filt, stride, pad, why in [
        (3, 1, 1, "1x1 filters"),
        (1, 2, 0, "stride 1 and no padding"),
        (1, 1, 1, "stride 1 and no padding"),
    ]:
        g = cudnn.pygraph()
        dy = g.tensor(dim=[2, 4, 6, 6], stride=[144, 1, 24, 4], data_type=cudnn.data_type.FLOAT)
        w = g.tensor(dim=[4, 3, filt, filt], data_type=cudnn.data_type.FLOAT)
        dx = g.conv_dgrad(dy, w, padding=[pad, pad], stride=[stride, stride])
        size = (6 - 1) * stride - 2 * pad + filt
        dx.set_dim([2, 3, size, size]).set_output(True)
        g.validate()
        assert why in plan_dgrad(g.op_graph)


DIRECT_ID = 7


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c[1] // c[9] <= 16],
    ids=[f"c{i}" for i, c in enumerate(CASES) if c[1] // c[9] <= 16],
)
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "strided"])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_direct_engine_against_reference(case, layout, mode):
    n, c, k, sp, f, stride, pre, post, dil, groups = case
    torch.manual_seed(len(sp) * 100 + c * 10 + k + 3)
    x = _layout(torch.randn(n, c, *sp), layout)
    w = _layout(torch.randn(k, c // groups, *f), layout)
    g = cudnn.pygraph()
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.swish(
        g.conv_fprop(
            tx,
            tw,
            pre_padding=list(pre),
            post_padding=list(post),
            stride=list(stride),
            dilation=list(dil),
            convolution_mode=cudnn.convolution_mode[mode],
        )
    )
    y.set_output(True)
    check_engine(
        g,
        {tx: x, tw: w},
        [y],
        DIRECT_ID,
        n=(c // groups) * max(1, len(f)),
        msg=repro(
            "conv_direct", [tuple(x.shape), tuple(w.shape)], "float32", 0, layout=layout, mode=mode
        ),
    )


def test_direct_declines_wide_channels_with_reason():
    from opendnn.engines.base import Target
    from opendnn.engines.conv.direct.engine import DirectConvEngine

    g = cudnn.pygraph()
    x = g.tensor(dim=[1, 64, 8, 8], data_type=cudnn.data_type.FLOAT)
    w = g.tensor(dim=[8, 64, 3, 3], data_type=cudnn.data_type.FLOAT)
    g.conv_fprop(x, w).set_output(True)
    g.validate()
    s = DirectConvEngine().check_support(g.op_graph, Target())
    assert not s.ok and "small-channel" in s.reason


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("pad", [0, 1])
def test_scale_bias_relu_prologue(layout, pad):
    """conv(relu(x * scale + bias)) in one kernel: the previous layer's batch-norm apply
    fused into the image load; the padding stays zero after the transform."""
    torch.manual_seed(21 + pad)
    x = _layout(torch.randn(2, 6, 7, 5), layout)
    w = _layout(torch.randn(8, 6, 3, 3), layout)
    sc, bi = torch.randn(1, 6, 1, 1), torch.randn(1, 6, 1, 1)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, ts, tb = _tensor(g, x), _tensor(g, w), _tensor(g, sc), _tensor(g, bi)
    xin = g.relu(g.bias(g.scale(tx, ts), tb))
    y = g.conv_fprop(xin, tw, padding=[pad, pad])
    y.set_output(True)
    out = check_engine(g, {tx: x, tw: w, ts: sc, tb: bi}, [y], CONV_ID, n=54)
    ref = torch.nn.functional.conv2d(
        torch.relu(x.double() * sc.double() + bi.double()), w.double(), padding=pad
    )
    assert_close(out[y], ref, torch.float32, n=54)


def test_prologue_with_an_extra_output_is_declined():
    x, w = torch.randn(1, 4, 5, 5), torch.randn(4, 4, 3, 3)
    g = cudnn.pygraph()
    tx, tw = _tensor(g, x), _tensor(g, w)
    act = g.relu(tx)
    act.set_output(True)
    g.conv_fprop(act, tw).set_output(True)
    g.validate()
    from opendnn.engines.base import Target

    s = ImplicitGemmEngine().check_support(g.op_graph, Target())
    assert not s.ok and "output" in s.reason


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_conv_bias_genstats_fused(layout):
    """y = conv(x) + bias and its batch-norm statistics (per-channel sum, sum of squares)
    from one kernel plus a deterministic finishing pass."""
    torch.manual_seed(31)
    x = _layout(torch.randn(3, 5, 9, 7), layout)
    w = _layout(torch.randn(6, 5, 3, 3), layout)
    b = torch.randn(1, 6, 1, 1)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb = _tensor(g, x), _tensor(g, w), _tensor(g, b)
    y = g.bias(g.conv_fprop(tx, tw, padding=[1, 1]), tb)
    y.set_output(True)
    s, sq = g.genstats(y)
    s.set_output(True)
    sq.set_output(True)
    out = check_engine(g, {tx: x, tw: w, tb: b}, [y, s, sq], CONV_ID, n=45 * 63)
    ref = torch.nn.functional.conv2d(x.double(), w.double(), padding=1) + b.double()
    assert_close(out[s], ref.sum((0, 2, 3), keepdim=True), torch.float32, n=45 * 189)
    assert_close(out[sq], (ref * ref).sum((0, 2, 3), keepdim=True), torch.float32, n=45 * 189)


def test_conv_genstats_many_tiles():
    """The statistics' finishing pass over more per-tile partials than one chunk (54 tiles
    of 32 pixels: two chunks of 32)."""
    torch.manual_seed(32)
    x = _layout(torch.randn(3, 5, 24, 24), "nhwc")
    w = _layout(torch.randn(6, 5, 1, 1), "nhwc")
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.conv_fprop(tx, tw, padding=[0, 0])
    y.set_output(True)
    s, sq = g.genstats(y)
    s.set_output(True)
    sq.set_output(True)
    knobs = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=2)
    out = check_engine(g, {tx: x, tw: w}, [y, s, sq], CONV_ID, knobs, n=5)
    ref = torch.nn.functional.conv2d(x.double(), w.double())
    assert_close(out[s], ref.sum((0, 2, 3), keepdim=True), torch.float32, n=5 * 1728)
    assert_close(out[sq], (ref * ref).sum((0, 2, 3), keepdim=True), torch.float32, n=5 * 1728)


WINO_ID = 8


@pytest.mark.parametrize(
    "shape", [(2, 5, 9, 7, 6, 1), (1, 3, 8, 8, 4, 0), (1, 2, 1, 3, 3, 2), (3, 7, 5, 6, 1, 1)]
)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
@pytest.mark.parametrize("engine", [WINO_ID, WINO_ID + 1], ids=["F2x2", "F4x4"])
def test_winograd_nonfused_against_reference(shape, layout, mode, engine):
    """F(2x2,3x3) and F(4x4,3x3): odd output sizes (partial tiles), padding 0-2, with a
    bias+relu epilogue. The 4x4 transforms' coefficients (up to 8 and 1/24) cost a few
    more bits: the tolerance counts them as a longer reduction."""
    n, c, h, w_, k, pad = shape
    torch.manual_seed(n * 1000 + c * 100 + h * 10 + pad)
    x = _layout(torch.randn(n, c, h, w_), layout)
    w = _layout(torch.randn(k, c, 3, 3), layout)
    b = torch.randn(1, k, 1, 1)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb = _tensor(g, x), _tensor(g, w), _tensor(g, b)
    y = g.relu(
        g.bias(
            g.conv_fprop(tx, tw, padding=[pad, pad], convolution_mode=cudnn.convolution_mode[mode]),
            tb,
        )
    )
    y.set_output(True)
    check_engine(
        g,
        {tx: x, tw: w, tb: b},
        [y],
        engine,
        n=c * 9 * (4 if engine == WINO_ID else 64),
        msg=repro("winograd", [tuple(x.shape)], "float32", 0, layout=layout, mode=mode),
    )


def test_winograd_declines_strided_or_5x5_with_reasons():
    from opendnn.engines.base import Target
    from opendnn.engines.conv.winograd.engine import WinogradNonfusedEngine

    for wdims, stride, want in [([4, 4, 5, 5], 1, "3x3"), ([4, 4, 3, 3], 2, "stride 1")]:
        g = cudnn.pygraph()
        x = g.tensor(dim=[1, 4, 8, 8], data_type=cudnn.data_type.FLOAT)
        w = g.tensor(dim=wdims, data_type=cudnn.data_type.FLOAT)
        g.conv_fprop(x, w, stride=[stride, stride]).set_output(True)
        g.validate()
        s = WinogradNonfusedEngine().check_support(g.op_graph, Target())
        assert not s.ok and want in s.reason


SPLIT_ID = 10


@pytest.mark.parametrize("case", CASES[:4], ids=[f"c{i}" for i in range(4)])
@pytest.mark.parametrize("split", [2, 4])
def test_splitk_wgrad_against_reference(case, split):
    n, c, k, sp, f, stride, pre, post, dil, groups = case
    torch.manual_seed(len(sp) * 100 + c * 10 + k + 4)
    x = torch.randn(n, c, *sp)
    w = torch.randn(k, c // groups, *f)
    from opendnn.ops.conv import output_dims

    dy = torch.randn(*output_dims(x.shape, w.shape, pre, post, stride, dil))
    g = cudnn.pygraph()
    tx, tdy = _tensor(g, x), _tensor(g, dy)
    dw = g.conv_wgrad(
        tx,
        tdy,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dil),
    )
    dw.set_dim(list(w.shape)).set_output(True)
    from _util import heuristic_knobs

    g.validate()
    knobs = {**heuristic_knobs(g, SPLIT_ID), "SPLIT": split}
    check_engine(
        g,
        {tx: x, tdy: dy},
        [dw],
        SPLIT_ID,
        knobs,
        n=n * 64,
        msg=repro("conv_wgrad_splitk", [tuple(x.shape)], "float32", 0, split=split),
    )


def test_splitk_wgrad_is_marked_and_deterministic_mode_skips_it(monkeypatch):
    from opendnn import backends

    x, dy = torch.randn(2, 4, 6, 6), torch.randn(2, 4, 4, 4)
    g = cudnn.pygraph()
    tx, tdy = _tensor(g, x), _tensor(g, dy)
    dw = g.conv_wgrad(tx, tdy)
    dw.set_dim([4, 4, 3, 3]).set_output(True)
    g.build([cudnn.heur_mode.A])
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    split = [i for i, nm in enumerate(names) if nm.startswith("conv_wgrad_splitk")]
    assert (
        split
        and cudnn.numerical_note.NONDETERMINISTIC
        in g.get_numerical_notes_for_plan_at_index(split[0])
    )
    monkeypatch.setattr(backends, "deterministic", True)
    g2 = cudnn.pygraph()
    tx, tdy = _tensor(g2, x), _tensor(g2, dy)
    dw = g2.conv_wgrad(tx, tdy)
    dw.set_dim([4, 4, 3, 3]).set_output(True)
    g2.build([cudnn.heur_mode.A])
    assert not any(
        g2.get_plan_name_at_index(i).startswith("conv_wgrad_splitk")
        for i in range(g2.get_execution_plan_count())
    )


PRECOMP_ID = 11


@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "strided"])
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
def test_precomp_engine_against_reference(case, layout, mode):
    n, c, k, sp, f, stride, pre, post, dil, groups = case
    torch.manual_seed(len(sp) * 100 + c * 10 + k + 5)
    x = _layout(torch.randn(n, c, *sp), layout)
    w = _layout(torch.randn(k, c // groups, *f), layout)
    g = cudnn.pygraph()
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.elu(
        g.conv_fprop(
            tx,
            tw,
            pre_padding=list(pre),
            post_padding=list(post),
            stride=list(stride),
            dilation=list(dil),
            convolution_mode=cudnn.convolution_mode[mode],
        )
    )
    y.set_output(True)
    check_engine(
        g,
        {tx: x, tw: w},
        [y],
        PRECOMP_ID,
        n=(c // groups) * max(1, len(f)),
        msg=repro(
            "conv_precomp", [tuple(x.shape), tuple(w.shape)], "float32", 0, layout=layout, mode=mode
        ),
    )


def test_benchmark_mode_tunes_once_and_reuses_the_cache(tmp_path, monkeypatch):
    """backends.benchmark: the first execute times the candidates and persists the order;
    a fresh graph of the same problem (a later process) reuses it without timing."""
    from opendnn import backends
    from opendnn.runtime import autotune

    monkeypatch.setenv("OPENDNN_CACHE_DIR", str(tmp_path))
    autotune.forget_memory()
    monkeypatch.setattr(backends, "benchmark", True)
    x, w = torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3)

    def make():
        g = cudnn.pygraph()
        tx, tw = _tensor(g, x), _tensor(g, w)
        y = g.conv_fprop(tx, tw, padding=[1, 1])
        y.set_output(True)
        g.build([cudnn.heur_mode.A])
        return g, tx, tw, y

    g, tx, tw, y = make()
    assert g.get_execution_plan_count() > 1
    out = torch.full((1, 4, 6, 6), float("nan"))
    g.execute({tx: x, tw: w, y: out}, torch.empty(1 << 20, dtype=torch.uint8))
    hit = autotune.lookup(g.key(), g._target().name)
    assert hit and hit["order"][0] == g.get_plan_name_at_index(0)
    autotune.forget_memory()  # a new process: read from disk
    g2, tx, tw, y = make()
    timed = []
    monkeypatch.setattr(type(g2), "autotune", lambda self, *a, **k: timed.append(1))
    out2 = torch.full((1, 4, 6, 6), float("nan"))
    g2.execute({tx: x, tw: w, y: out2}, torch.empty(1 << 20, dtype=torch.uint8))
    assert not timed and g2.get_plan_name_at_index(g2._selected) == hit["order"][0]
    assert torch.allclose(out, out2)


@pytest.mark.parametrize("out_type", [cudnn.data_type.FLOAT, cudnn.data_type.INT8])
@pytest.mark.parametrize("engine", [CONV_ID, PRECOMP_ID])
def test_int8_forward_int32_accumulation(out_type, engine):
    """int8 image and filter, exact int32 accumulation, scaled into float32 or int8 output
    (rounded toward zero and saturated)."""
    torch.manual_seed(41)
    x = torch.randint(-128, 128, (2, 16, 7, 7), dtype=torch.int8).to(
        memory_format=torch.channels_last
    )
    w = torch.randint(-128, 128, (8, 16, 3, 3), dtype=torch.int8).to(
        memory_format=torch.channels_last
    )
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.scale(g.conv_fprop(tx, tw, padding=[1, 1]), 1.0 / 256)
    y.set_output(True).set_data_type(out_type)
    out = check_engine(g, {tx: x, tw: w}, [y], engine, n=144)
    exact = torch.nn.functional.conv2d(x.double(), w.double(), padding=1) / 256
    if out_type == cudnn.data_type.INT8:
        assert torch.equal(out[y], exact.trunc().clamp(-128, 127).to(torch.int8))
        assert (exact.abs() > 127).any(), "the case must exercise saturation"
    else:
        assert torch.allclose(out[y].double(), exact, rtol=1e-6, atol=1e-6)


def _int8_graph(x, w, compute, out_type, **conv):
    g = cudnn.pygraph(
        io_data_type=cudnn.data_type.INT8,
        intermediate_data_type=cudnn.data_type.INT32,
        compute_data_type=compute,
    )
    tx, tw = _tensor(g, x), _tensor(g, w)
    y = g.identity(g.conv_fprop(tx, tw, **conv))
    y.set_output(True).set_data_type(out_type)
    return g, tx, tw, y


@pytest.mark.parametrize("engine", [None, 3, 11])
def test_int8_conv_int32_compute_is_exact(engine):
    """cudnn-frontend's int8 graph (INT8 io, INT32 intermediate and compute, identity to an
    INT32 output) built by mode A and FALLBACK (None) or pinned to each int8 implicit GEMM
    (the plain and the precomputed-index one): sums beyond 2^24, where float32 would round,
    come out exact (the INT32 epilogue runs in float64)."""
    torch.manual_seed(43)
    x = torch.full((1, 512, 3, 3), 127, dtype=torch.int8).to(memory_format=torch.channels_last)
    x[0, :, 0, 0] = torch.randint(-128, 128, (512,), dtype=torch.int8)
    w = torch.full((4, 512, 3, 3), 127, dtype=torch.int8).to(memory_format=torch.channels_last)
    w[1] = -w[1] - 1
    w[2, :7, 0, 0] = 3
    g, tx, tw, y = _int8_graph(x, w, cudnn.data_type.INT32, cudnn.data_type.INT32, padding=[1, 1])
    if engine is None:
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        assert "reference" not in g.get_plan_name_at_index(0)
    else:
        g.validate()
        g.create_execution_plan(engine, {})
    out = torch.full((1, 4, 3, 3), -7, dtype=torch.int32).to(memory_format=torch.channels_last)
    g.execute({tx: x, tw: w, y: out}, torch.empty(g.get_workspace_size(), dtype=torch.uint8))
    exact = torch.nn.functional.conv2d(x.double(), w.double(), padding=1).long()
    assert exact.abs().max() > 2**24 and (exact.abs() > 2**24).float().mean() > 0.2
    assert torch.equal(out.long(), exact)


def test_int8_conv_float_compute_builds_through_the_heuristics():
    """int8 with float32 compute (the epilogue in float32): every engine that cannot take
    int8 declines with its reason -- the explicit GEMM's synthetic matmul among them --
    and the search goes on to the int8 implicit GEMM."""
    torch.manual_seed(44)
    x = torch.randint(-5, 5, (2, 16, 6, 6), dtype=torch.int8).to(memory_format=torch.channels_last)
    w = torch.randint(-5, 5, (4, 16, 3, 3), dtype=torch.int8).to(memory_format=torch.channels_last)
    g, tx, tw, y = _int8_graph(x, w, cudnn.data_type.FLOAT, cudnn.data_type.FLOAT, padding=[1, 1])
    g.build([cudnn.heur_mode.A])
    out = torch.full((2, 4, 6, 6), float("nan")).to(memory_format=torch.channels_last)
    g.execute({tx: x, tw: w, y: out}, torch.empty(g.get_workspace_size(), dtype=torch.uint8))
    assert torch.equal(out.double(), torch.nn.functional.conv2d(x.double(), w.double(), padding=1))
    from opendnn.engines.registry import by_id

    why = by_id(GEMM_ID).check_support(g.op_graph, Target()).reason
    assert "GEMM cannot be built" in why and "INT8" in why


def test_int32_compute_outside_an_int8_convolution_is_refused():
    x = torch.randn(1, 8, 5, 5).to(memory_format=torch.channels_last)
    w = torch.randn(4, 8, 3, 3).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(compute_data_type=cudnn.data_type.INT32)
    g.conv_fprop(_tensor(g, x), _tensor(g, w), padding=[1, 1]).set_output(True)
    with pytest.raises(GraphNotSupportedError, match="int8 convolution") as e:
        g.validate()
    assert e.value.status == Status.NOT_SUPPORTED_DATA_TYPE
    g = cudnn.pygraph()
    t = g.tensor(dim=[4, 8], stride=[8, 1], data_type=cudnn.data_type.INT32)
    g.identity(t, compute_data_type=cudnn.data_type.INT32).set_output(True)
    with pytest.raises(GraphNotSupportedError, match="epilogue only"):
        g.validate()
    g = cudnn.pygraph()
    a = g.tensor(dim=[1, 4, 8], stride=[32, 8, 1])
    b = g.tensor(dim=[1, 8, 2], stride=[16, 2, 1])
    g.matmul(a, b, compute_data_type=cudnn.data_type.INT32).set_output(True)
    with pytest.raises(BadParamError, match="INT32 is an int8 convolution's"):
        g.validate()


GEMM_WGRAD_ID = 12


@pytest.mark.parametrize(
    "case", [c for c in CASES if c[9] == 1], ids=[f"c{i}" for i, c in enumerate(CASES) if c[9] == 1]
)
@pytest.mark.parametrize("mode", ["CROSS_CORRELATION", "CONVOLUTION"])
@pytest.mark.parametrize(
    "layout,dt",
    [
        ("nhwc", torch.float32),
        ("nchw", torch.float32),
        ("nhwc", torch.bfloat16),
        ("nchw", torch.bfloat16),
    ],
)
def test_gemm_wgrad_against_reference(case, mode, layout, dt):
    """im2col + one GEMM over (n, pixel) for dW, one group: half precision with NHWC-packed
    dY read in place; float32 and NCHW through the K-major copies (im2col^T, dY^T); an
    NCHW pointwise layer as one GEMM per image, the products summed in order."""
    n, c, k, sp, f, stride, pre, post, dil, groups = case
    torch.manual_seed(len(sp) * 100 + c * 10 + k + 6)
    x = _layout(torch.randn(n, c, *sp), layout).to(dt)
    w = _layout(torch.randn(k, c, *f), layout)
    from opendnn.ops.conv import output_dims

    dy = _layout(torch.randn(*output_dims(x.shape, w.shape, pre, post, stride, dil)), layout)
    if dy.dim() != 4 and layout == "nhwc":  # 1-D / 3-D: (n, pixel)-uniform by hand
        perm = [0] + list(range(2, dy.dim())) + [1]
        dy = dy.permute(*perm).contiguous().permute(0, dy.dim() - 1, *range(1, dy.dim() - 1))
    dy = dy.to(dt)
    from opendnn.engines.conv.gemm.wgrad import plan_wgrad

    g = cudnn.pygraph()
    tx, tdy = _tensor(g, x), _tensor(g, dy)
    dw = g.conv_wgrad(
        tx,
        tdy,
        pre_padding=list(pre),
        post_padding=list(post),
        stride=list(stride),
        dilation=list(dil),
        convolution_mode=cudnn.convolution_mode[mode],
    )
    dw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
    dw.set_data_type(cudnn.data_type.FLOAT)
    g.validate()
    wp = plan_wgrad(g.op_graph)
    pointwise = f == (1, 1) and stride == (1, 1) and sp != (1, 1)
    assert wp.batched == (layout == "nchw" and pointwise)
    if dt == torch.float32 or (layout == "nchw" and n > 1 and k > 1):  # no (n, pixel) stride
        assert wp.kmajor != wp.batched
    else:
        assert not wp.kmajor
    check_engine(
        g,
        {tx: x, tdy: dy},
        [dw],
        GEMM_WGRAD_ID,
        dtype=dt,
        n=n * 64,
        msg=repro("conv_wgrad_gemm", [tuple(x.shape)], str(dt)[6:], 0, mode=mode),
    )
