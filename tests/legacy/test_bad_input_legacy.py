"""Bad input to the descriptor API: every buffer, scalar, enum and dim is checked before
use and refused with a typed error naming the call, the argument and the rule; what the
graph API accepts (NumPy arrays, integer pointers, padded layouts) works with beta too."""

import numpy as np
import pytest
import torch
from _util import expect_error

import opendnn.legacy as cudnn
from opendnn.errors import BadParamError, Status

FLOAT = cudnn.DataType.FLOAT
NCHW = cudnn.TensorFormat.NCHW
H = cudnn.create("cpu")
DIMS = (2, 3, 4, 5)
_GEN = torch.Generator().manual_seed(0)
W = torch.rand(2, 3, 3, 3, generator=_GEN)  # the convolution's filter
BN = [torch.rand(1, 3, 1, 1, generator=_GEN) + 0.5 for _ in range(4)]  # scale bias mean var


def _desc(dims, strides=None):
    d = cudnn.create_tensor_descriptor()
    if strides is None:
        cudnn.set_tensor_4d_descriptor(d, NCHW, FLOAT, *dims)
    else:
        cudnn.set_tensor_4d_descriptor_ex(d, FLOAT, *dims, *strides)
    return d


def _filter(dims):
    d = cudnn.create_filter_descriptor()
    cudnn.set_filter_4d_descriptor(d, FLOAT, NCHW, *dims)
    return d


def _conv():
    c = cudnn.create_convolution_descriptor()
    cudnn.set_convolution_2d_descriptor(
        c, 1, 1, 1, 1, 1, 1, cudnn.ConvolutionMode.CROSS_CORRELATION, FLOAT
    )
    return c


def _pool():
    p = cudnn.create_pooling_descriptor()
    cudnn.set_pooling_2d_descriptor(
        p, cudnn.PoolingMode.MAX, cudnn.NanPropagation.NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2
    )
    return p


def _call(name, x, y, beta=0.5, alpha=1.0):
    """Run one blending call with input ``x`` and output ``y`` (shapes as the call needs)."""
    d = _desc(DIMS)
    if name == "softmax_forward":
        cudnn.softmax_forward(
            H, cudnn.SoftmaxAlgorithm.ACCURATE, cudnn.SoftmaxMode.CHANNEL, alpha, d, x, beta, d, y
        )
    elif name == "pooling_forward":
        cudnn.pooling_forward(H, _pool(), alpha, d, x, beta, _desc((2, 3, 2, 2)), y)
    elif name == "convolution_forward":
        cudnn.convolution_forward(
            H,
            alpha,
            d,
            x,
            _filter((2, 3, 3, 3)),
            W,
            _conv(),
            cudnn.ConvolutionFwdAlgo.IMPLICIT_GEMM,
            None,
            0,
            beta,
            _desc((2, 2, 4, 5)),
            y,
        )
    elif name == "lrn_cross_channel_forward":
        cudnn.lrn_cross_channel_forward(
            H,
            cudnn.create_lrn_descriptor(),
            cudnn.LRNMode.CROSS_CHANNEL_DIM1,
            alpha,
            d,
            x,
            beta,
            d,
            y,
        )
    elif name == "reduce_tensor":
        rd = cudnn.create_reduce_tensor_descriptor()
        cudnn.set_reduce_tensor_descriptor(rd, cudnn.ReduceTensorOp.ADD, FLOAT, 0, 0, 0)
        cd = _desc((2, 1, 1, 1))
        need = cudnn.get_reduction_workspace_size(H, rd, d, cd)
        cudnn.reduce_tensor(
            H, rd, None, 0, torch.empty(need, dtype=torch.uint8), need, alpha, d, x, beta, cd, y
        )
    elif name == "batch_normalization_forward_inference":
        bn = cudnn.derive_bn_tensor_descriptor(
            cudnn.create_tensor_descriptor(), d, cudnn.BatchNormMode.SPATIAL
        )
        cudnn.batch_normalization_forward_inference(
            H, cudnn.BatchNormMode.SPATIAL, alpha, beta, d, x, d, y, bn, *BN, 1e-5
        )
    elif name == "add_tensor":
        cudnn.add_tensor(H, alpha, d, x, beta, d, y)


OUT_DIMS = {
    "pooling_forward": (2, 3, 2, 2),
    "convolution_forward": (2, 2, 4, 5),
    "reduce_tensor": (2, 1, 1, 1),
}
CALLS = [
    "softmax_forward",
    "pooling_forward",
    "convolution_forward",
    "lrn_cross_channel_forward",
    "reduce_tensor",
    "batch_normalization_forward_inference",
    "add_tensor",
]
OUT_NAME = {"reduce_tensor": "'C'", "add_tensor": "'C'"}


# ---- buffers: checked before any use -----------------------------------------------------
@pytest.mark.parametrize("call", CALLS)
def test_non_tensor_output_with_beta_is_refused_before_use(call):
    out = [0.0] * 80
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: _call(call, torch.rand(*DIMS), out),
        call,
        OUT_NAME.get(call, "'y'"),
        "cannot use a list as a buffer",
    )


@pytest.mark.parametrize("call", CALLS)
def test_none_output_is_null_pointer(call):
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        lambda: _call(call, torch.rand(*DIMS), None),
        call,
        OUT_NAME.get(call, "'y'"),
        "NULL",
    )


@pytest.mark.parametrize("call", CALLS)
def test_numpy_output_with_beta_blends_like_a_tensor(call):
    x = torch.rand(*DIMS)
    y0 = torch.rand(*OUT_DIMS.get(call, DIMS))
    want, got = y0.clone(), y0.numpy().copy()
    _call(call, x, want)
    _call(call, x, got)
    assert np.array_equal(got, want.numpy())


@pytest.mark.parametrize("call", ["softmax_forward", "pooling_forward", "add_tensor"])
def test_integer_pointer_output_with_beta(call):
    x, y0 = torch.rand(*DIMS), torch.rand(*OUT_DIMS.get(call, DIMS))
    want, got = y0.clone(), y0.clone()
    _call(call, x, want)
    _call(call, x, got.data_ptr())
    assert torch.equal(got, want)


def test_padded_output_with_beta_keeps_its_layout():
    """The beta term's copy of y keeps y's strides (clone() would pack them and the
    binding would refuse the copy)."""
    x = torch.rand(*DIMS)
    base = torch.rand(2, 3, 2, 5)
    y = base[..., :2]
    want = 0.5 * y + torch.nn.functional.max_pool2d(x, 2)
    cudnn.pooling_forward(
        H, _pool(), 1.0, _desc(DIMS), x, 0.5, _desc((2, 3, 2, 2), (30, 10, 5, 1)), y
    )
    assert torch.allclose(y, want)


def test_meta_buffer_is_refused():
    d = _desc(DIMS)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.scale_tensor(H, d, torch.empty(*DIMS, device="meta"), 2.0),
        "scale_tensor",
        "'y'",
        "meta",
    )


@pytest.mark.parametrize("call", ["softmax_forward", "convolution_forward", "add_tensor"])
def test_alpha_and_beta_must_be_numbers(call):
    x, y = torch.rand(*DIMS), torch.empty(*OUT_DIMS.get(call, DIMS))
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: _call(call, x, y, alpha=None),
        call,
        "'alpha'",
        "must be a number",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: _call(call, x, y, beta="half"),
        call,
        "'beta'",
        "must be a number",
    )


def test_set_tensor_value_must_be_a_number():
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.set_tensor(H, _desc(DIMS), torch.empty(*DIMS), "one"),
        "set_tensor",
        "'value_ptr'",
        "must be a number",
    )


def test_reduce_indices_buffer_smaller_than_its_claimed_size():
    rd = cudnn.create_reduce_tensor_descriptor()
    cudnn.set_reduce_tensor_descriptor(
        rd, cudnn.ReduceTensorOp.MAX, FLOAT, 0, cudnn.ReduceTensorIndices.FLATTENED_INDICES, 0
    )
    a_d, c_d = _desc(DIMS), _desc((2, 1, 1, 1))
    need = cudnn.get_reduction_workspace_size(H, rd, a_d, c_d)
    size = cudnn.get_reduction_indices_size(H, rd, a_d, c_d)
    ws = torch.empty(need, dtype=torch.uint8)

    def run(indices):
        cudnn.reduce_tensor(
            H,
            rd,
            indices,
            size,
            ws,
            need,
            1.0,
            a_d,
            torch.rand(*DIMS),
            0.0,
            c_d,
            torch.empty(2, 1, 1, 1),
        )

    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: run(torch.empty(1, dtype=torch.int32)),
        "reduce_tensor",
        "'indices'",
        "fewer than the 8 needed",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: run(torch.empty(4, dtype=torch.int32)[::2]),
        "reduce_tensor",
        "'indices'",
        "contiguous",
    )


# ---- descriptors: checked before the key of the plan cache -----------------------------------
def test_convolution_forward_with_an_unset_x_descriptor():
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.convolution_forward(
            H,
            1.0,
            cudnn.create_tensor_descriptor(),
            torch.rand(*DIMS),
            _filter((2, 3, 3, 3)),
            torch.rand(2, 3, 3, 3),
            _conv(),
            cudnn.ConvolutionFwdAlgo.IMPLICIT_GEMM,
            None,
            0,
            0.0,
            _desc((2, 2, 4, 5)),
            torch.empty(2, 2, 4, 5),
        ),
        "convolution_forward",
        "'x'",
        "never set",
    )


def test_get_convolution_2d_descriptor_needs_a_set_2d_descriptor():
    c = cudnn.create_convolution_descriptor()
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.get_convolution_2d_descriptor(c),
        "get_convolution_2d_descriptor",
        "never set",
    )
    cudnn.set_convolution_nd_descriptor(
        c, 3, [0] * 3, [1] * 3, [1] * 3, cudnn.ConvolutionMode.CROSS_CORRELATION, FLOAT
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.get_convolution_2d_descriptor(c),
        "get_convolution_2d_descriptor",
        "not a 2-D",
        "3 spatial dims",
    )
    assert cudnn.get_convolution_2d_descriptor(_conv())[:6] == (1, 1, 1, 1, 1, 1)


def test_group_count_must_be_an_integer():
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.set_convolution_group_count(cudnn.create_convolution_descriptor(), "2"),
        "set_convolution_group_count",
        "'group_count'",
        "not an integer",
    )


# ---- softmax: buffers of another layout ------------------------------------------------
@pytest.mark.parametrize("mode", [cudnn.SoftmaxMode.CHANNEL, cudnn.SoftmaxMode.INSTANCE])
def test_softmax_refuses_a_buffer_of_the_descriptors_dims_but_other_strides(mode):
    d = _desc(DIMS)
    y = torch.empty(2, 3, 5, 4).transpose(-1, -2)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: cudnn.softmax_forward(
            H, cudnn.SoftmaxAlgorithm.ACCURATE, mode, 1.0, d, torch.rand(*DIMS), 0.0, d, y
        ),
        "softmax_forward",
        "'y'",
        "strides",
    )


@pytest.mark.parametrize("mode", [cudnn.SoftmaxMode.CHANNEL, cudnn.SoftmaxMode.INSTANCE])
def test_softmax_binds_a_dense_buffer_of_another_shape_by_pointer(mode):
    """cuDNN reads pointers: a dense buffer of another shape holding the descriptor's
    elements receives them in the descriptor's memory order."""
    d, x = _desc(DIMS), torch.rand(*DIMS)
    want, other = torch.empty(*DIMS), torch.full((5, 4, 3, 2), float("nan"))
    for y in (want, other):
        cudnn.softmax_forward(H, cudnn.SoftmaxAlgorithm.ACCURATE, mode, 1.0, d, x, 0.0, d, y)
    assert torch.equal(other.reshape(DIMS), want)


@pytest.mark.parametrize("mode", [cudnn.SoftmaxMode.CHANNEL, cudnn.SoftmaxMode.INSTANCE])
def test_softmax_flat_buffers(mode):
    """A flat buffer of the descriptor's size binds; one element short is refused."""
    d, x = _desc(DIMS), torch.rand(*DIMS)
    want, flat = torch.empty(*DIMS), torch.empty(x.numel())
    for y in (want, flat):
        cudnn.softmax_forward(H, cudnn.SoftmaxAlgorithm.ACCURATE, mode, 1.0, d, x, 0.0, d, y)
    assert torch.equal(flat.view(DIMS), want)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: cudnn.softmax_forward(
            H,
            cudnn.SoftmaxAlgorithm.ACCURATE,
            mode,
            1.0,
            d,
            x.reshape(-1)[:-1].clone(),
            0.5,
            d,
            want,
        ),
        "softmax_forward",
        "'x'",
        "119",
    )


# ---- dims ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dims,rule",
    [
        ((None, 2, 3, 3), "None is not an integer"),
        ((1, 2, "3x", 3), "'3x' is not an integer"),
        ((1, 2, 3, 3.7), "3.7 is not an integer"),
        ((2**62, 2**62, 3, 3), "int32"),
    ],
)
def test_tensor_4d_dims_must_be_int32(dims, rule):
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.set_tensor_4d_descriptor(
            cudnn.create_tensor_descriptor(), NCHW, FLOAT, *dims
        ),
        "set_tensor_4d_descriptor",
        rule,
    )


def test_strides_and_sizes_must_fit():
    d = cudnn.create_tensor_descriptor()
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.set_tensor_nd_descriptor(d, FLOAT, 3, [2, 3, 4], [2**31, 4, 1]),
        "set_tensor_nd_descriptor",
        "int32",
    )
    big = 2**31 - 1
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.set_tensor_nd_descriptor(d, FLOAT, 8, [big] * 8, [1] * 8),
        "set_tensor_nd_descriptor",
        "2^63 bytes",
    )
    assert not d.is_set()
    cudnn.set_tensor_4d_descriptor(d, NCHW, FLOAT, 2.0, 3, 4, 5)  # integral floats pass
    assert d.dims == DIMS and all(type(n) is int for n in d.dims)


@pytest.mark.parametrize("data_type,rule", [(999, "999"), ("FOO", "FOO")])
def test_unknown_data_type_names_the_call(data_type, rule):
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.set_tensor_4d_descriptor(
            cudnn.create_tensor_descriptor(), NCHW, data_type, *DIMS
        ),
        "set_tensor_4d_descriptor",
        "'data_type'",
        rule,
    )


# ---- enums: typed errors naming the call and the argument --------------------------------
def _x():
    return torch.rand(*DIMS)


ENUM_CASES = {
    "set_tensor_4d_descriptor": (
        "format",
        lambda: cudnn.set_tensor_4d_descriptor(cudnn.create_tensor_descriptor(), 7, FLOAT, *DIMS),
    ),
    "set_filter_4d_descriptor": (
        "format",
        lambda: cudnn.set_filter_4d_descriptor(
            cudnn.create_filter_descriptor(), FLOAT, 9, 3, 2, 3, 3
        ),
    ),
    "set_convolution_nd_descriptor": (
        "mode",
        lambda: cudnn.set_convolution_2d_descriptor(
            cudnn.create_convolution_descriptor(), 0, 0, 1, 1, 1, 1, 9, FLOAT
        ),
    ),
    "set_convolution_nd_descriptor ": (
        "compute_type",
        lambda: cudnn.set_convolution_2d_descriptor(
            cudnn.create_convolution_descriptor(),
            0,
            0,
            1,
            1,
            1,
            1,
            cudnn.ConvolutionMode.CONVOLUTION,
            999,
        ),
    ),
    "set_convolution_math_type": (
        "math_type",
        lambda: cudnn.set_convolution_math_type(cudnn.create_convolution_descriptor(), 9),
    ),
    "set_activation_descriptor": (
        "mode",
        lambda: cudnn.set_activation_descriptor(
            cudnn.create_activation_descriptor(), 99, cudnn.NanPropagation.NOT_PROPAGATE_NAN, 0.0
        ),
    ),
    "convolution_forward": (
        "algo",
        lambda: cudnn.convolution_forward(
            H,
            1.0,
            _desc(DIMS),
            _x(),
            _filter((2, 3, 3, 3)),
            torch.rand(2, 3, 3, 3),
            _conv(),
            99,
            None,
            0,
            0.0,
            _desc((2, 2, 4, 5)),
            torch.empty(2, 2, 4, 5),
        ),
    ),
    "set_pooling_nd_descriptor": (
        "mode",
        lambda: cudnn.set_pooling_2d_descriptor(
            cudnn.create_pooling_descriptor(),
            9,
            cudnn.NanPropagation.NOT_PROPAGATE_NAN,
            2,
            2,
            0,
            0,
            1,
            1,
        ),
    ),
    "softmax_forward": (
        "algo",
        lambda: cudnn.softmax_forward(
            H, 7, cudnn.SoftmaxMode.CHANNEL, 1.0, _desc(DIMS), _x(), 0.0, _desc(DIMS), _x()
        ),
    ),
    "softmax_forward ": (
        "mode",
        lambda: cudnn.softmax_forward(
            H, cudnn.SoftmaxAlgorithm.ACCURATE, 5, 1.0, _desc(DIMS), _x(), 0.0, _desc(DIMS), _x()
        ),
    ),
    "derive_bn_tensor_descriptor": (
        "mode",
        lambda: cudnn.derive_bn_tensor_descriptor(cudnn.create_tensor_descriptor(), _desc(DIMS), 7),
    ),
    "set_reduce_tensor_descriptor": (
        "reduce_tensor_indices",
        lambda: cudnn.set_reduce_tensor_descriptor(
            cudnn.create_reduce_tensor_descriptor(), 0, FLOAT, 0, "x", 0
        ),
    ),
}


@pytest.mark.parametrize("op", list(ENUM_CASES))
def test_unknown_enum_values(op):
    arg, fn = ENUM_CASES[op]
    e = expect_error(BadParamError, Status.BAD_PARAM, fn, op.strip(), f"'{arg}'", f"unknown {arg}")
    assert type(e) is BadParamError and e.op == op.strip() and e.tensor == arg


# ---- the handle: every call that takes one refuses None or another object first -----------------
def _handle_calls(h):
    d, x, y = _desc(DIMS), torch.randn(DIMS), torch.empty(DIMS)
    return {
        "softmax_forward": lambda: cudnn.softmax_forward(
            h, cudnn.SoftmaxAlgorithm.ACCURATE, cudnn.SoftmaxMode.CHANNEL, 1.0, d, x, 0.0, d, y
        ),
        "add_tensor": lambda: cudnn.add_tensor(h, 1.0, d, x, 1.0, d, y),
        "scale_tensor": lambda: cudnn.scale_tensor(h, d, y, 2.0),
        "set_tensor": lambda: cudnn.set_tensor(h, d, y, 2.0),
        "convolution_forward": lambda: cudnn.convolution_forward(
            h, 1.0, d, x, _filter((2, 3, 3, 3)), W, _conv(), 0, None, 0, 0.0, d, y
        ),
        "dropout_get_states_size": lambda: cudnn.dropout_get_states_size(h),
    }


@pytest.mark.parametrize("call", list(_handle_calls(H)))
@pytest.mark.parametrize("bad,what", [(None, "NULL (None)"), ("cpu", "a str")])
def test_calls_refuse_a_missing_handle(call, bad, what):
    expect_error(
        BadParamError, Status.BAD_PARAM, _handle_calls(bad)[call], call, f"handle is {what}"
    )


def test_handle_keyword_is_checked_too():
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.dropout_get_states_size(handle=None),
        "dropout_get_states_size",
        "handle is NULL",
    )
    assert cudnn.dropout_get_states_size(handle=H) > 0
