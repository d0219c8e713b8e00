"""Bad input to the graph frontend: one test per rule. Each asserts the exception type, the
Status, and that the message names the operation, the tensor (where there is one) and
the rule; valid neighbours of each rule keep working."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _util import assert_close, expect_error, repro, run_reference

import opendnn.frontend as cudnn
from opendnn.enums import DataType, HeurMode, NormForwardPhase, ReductionMode
from opendnn.errors import BadParamError, Status

F = DataType.FLOAT
ATTR = Status.BAD_PARAM_ATTRIBUTE_TYPE


def _g(name="g"):
    return cudnn.pygraph(name=name)


def _x(g, dims=(2, 3, 4), name="x_in"):
    return g.tensor(list(dims), None, F, name=name)


# ---- tensor setters: exact ints, no truncation -----------------------------------------
@pytest.mark.parametrize(
    "call,frag",
    [
        (lambda x: x.set_dim(None), "dim must be a sequence of ints"),
        (lambda x: x.set_dim(5), "dim must be a sequence of ints"),
        (lambda x: x.set_dim("234"), "dim must be a sequence of ints"),
        (lambda x: x.set_dim([2, 3.5, 4]), "dim[1] must be an int, got 3.5"),
        (lambda x: x.set_dim([2, True, 4]), "dim[1] must be an int, got True"),
        (lambda x: x.set_stride(None), "stride must be a sequence of ints"),
        (lambda x: x.set_stride([12, 4, 1.9]), "stride[2] must be an int, got 1.9"),
        (lambda x: x.set_uid(None), "uid must be an int"),
        (lambda x: x.set_uid("u1"), "uid must be an int"),
        (lambda x: x.set_uid(2.7), "uid must be an int, got 2.7"),
    ],
)
def test_tensor_setters_take_exact_ints(call, frag):
    g = _g("gset")
    x = _x(g)
    expect_error(BadParamError, ATTR, lambda: call(x), "graph 'gset'", "x_in", frag)
    assert x.get_dim() == [2, 3, 4] and x.get_uid() == -1


@pytest.mark.parametrize(
    "kw,frag",
    [
        (dict(dim=5), "dim must be a sequence of ints"),
        (dict(dim=[2, 3.5, 4]), "dim[1] must be an int"),
        (dict(dim=[2, 3], stride=[3, "x"]), "stride[1] must be an int"),
    ],
)
def test_graph_tensor_takes_exact_ints(kw, frag):
    g = _g("gnew")
    expect_error(
        BadParamError,
        ATTR,
        lambda: g.tensor(data_type=F, name="t_new", **kw),
        "graph 'gnew'",
        "t_new",
        frag,
    )


def test_integer_like_dims_still_accepted():
    g = _g()
    x = _x(g)
    assert x.set_dim(torch.Size([2, 3, 4])).get_dim() == [2, 3, 4]
    assert x.set_dim(np.array([2, 3, 4])).get_dim() == [2, 3, 4]
    assert x.set_stride((np.int64(12), 4, 1)).get_stride() == [12, 4, 1]
    assert x.set_uid(np.int32(5)).get_uid() == 5


# ---- data types ------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [3.7, True, None, np.float32, [F]])
def test_data_type_not_truncated_from_a_number(bad):
    g = _g("gdt")
    x = _x(g)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: x.set_data_type(bad),
        "graph 'gdt'",
        "x_in",
        "cannot interpret",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.tensor([2], [1], bad, name="t_dt"),
        "graph 'gdt'",
        "t_dt",
        "cannot interpret",
    )


def test_data_type_errors_name_the_tensor():
    g = _g("gdt")
    x = _x(g)
    expect_error(
        BadParamError, Status.BAD_PARAM, lambda: x.set_data_type(999), "graph 'gdt'", "x_in", "999"
    )
    expect_error(
        BadParamError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        lambda: x.set_data_type(torch.int16),
        "graph 'gdt'",
        "x_in",
        "torch.int16",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: cudnn.pygraph(name="gio", io_data_type="FOO"),
        "graph 'gio'",
        "io_data_type",
        "FOO",
    )


def test_data_types_still_accepted():
    x = _x(_g())
    for v, want in (
        (DataType.HALF, DataType.HALF),
        (torch.bfloat16, DataType.BFLOAT16),
        ("half", DataType.HALF),
        (int(DataType.DOUBLE), DataType.DOUBLE),
    ):
        assert x.set_data_type(v).get_data_type() == want


def test_handle_must_be_a_handle():
    expect_error(
        BadParamError,
        ATTR,
        lambda: cudnn.pygraph(name="gh", handle="cpu"),
        "graph 'gh'",
        "handle must be an opendnn Handle",
    )


# ---- compute types -------------------------------------------------------------------------
def test_node_compute_type_no_engine_honours():
    g = _g("gct")
    g.exp(_x(g), name="e_n", compute_data_type=DataType.INT8).set_output(True)
    expect_error(
        BadParamError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        g.validate,
        "pointwise EXP 'e_n'",
        "compute_data_type INT8",
        "not honoured",
    )


def test_graph_compute_type_no_engine_honours():
    g = _g("gct")
    g.exp(_x(g), name="e_n").set_output(True)
    g.compute_data_type = DataType.BOOLEAN
    expect_error(
        BadParamError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        g.validate,
        "graph 'gct'",
        "compute_data_type BOOLEAN",
        "not honoured",
    )


@pytest.mark.parametrize("ct", [DataType.FLOAT, DataType.DOUBLE, DataType.HALF, DataType.BFLOAT16])
def test_float_compute_types_accepted(ct):
    g = _g()
    g.exp(_x(g), compute_data_type=ct).set_output(True)
    g.validate()


# ---- enum attributes -------------------------------------------------------------------
def _reduction(mode):
    g = _g()
    y = g.reduction(_x(g, (4, 6)), mode, name="rd_n")
    y.set_dim([4, 1]).set_output(True)
    return g


@pytest.mark.parametrize("mode", [0, 99, "FOO", None])
def test_reduction_mode(mode):
    expect_error(
        BadParamError,
        ATTR,
        lambda: _reduction(mode),
        "reduction 'rd_n'",
        "is not a ReductionMode",
        "MUL_NO_ZEROS",
    )


@pytest.mark.parametrize("mode", [ReductionMode.ADD, "add", cudnn.pointwise_mode.ADD])
def test_reduction_mode_accepted(mode):
    _reduction(mode).validate()


def _conv(which="conv_fprop", **kw):
    g = _g()
    x = g.tensor([1, 2, 5, 5], None, F, name="x_in")
    w = g.tensor([3, 2, 3, 3], None, F, name="w_in")
    args = dict(padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    args.update(kw)
    if which == "conv_fprop":
        y = g.conv_fprop(x, w, name="cv_n", **args)
    else:
        dy = g.tensor([1, 3, 5, 5], None, F, name="dy_in")
        y = g.conv_wgrad(x, dy, name="cv_n", **args).set_dim([3, 2, 3, 3])
    y.set_output(True)
    return g


@pytest.mark.parametrize("mode", ["FOO", 7, [1]])
def test_convolution_mode(mode):
    expect_error(
        BadParamError,
        ATTR,
        lambda: _conv(convolution_mode=mode),
        "conv_fprop 'cv_n'",
        "is not a ConvolutionMode",
        "CROSS_CORRELATION",
    )


@pytest.mark.parametrize("which", ["conv_fprop", "conv_wgrad"])
@pytest.mark.parametrize(
    "kw,frag",
    [
        (dict(padding=1.5), "padding must be an int, got 1.5"),
        (dict(padding="a"), "padding must be an int"),
        (dict(padding=[True, 1]), "padding[0] must be an int, got True"),
        (dict(stride=(2.5, 1)), "stride[0] must be an int, got 2.5"),
        (dict(dilation=[1, None]), "dilation[1] must be an int"),
    ],
)
def test_convolution_parameters_exact_ints(which, kw, frag):
    expect_error(BadParamError, ATTR, lambda: _conv(which, **kw), f"{which} 'cv_n'", frag)


def test_convolution_parameters_accepted():
    for kw in (
        dict(padding=1),
        dict(stride=[1]),
        dict(convolution_mode="convolution"),
        dict(convolution_mode=1),
        dict(padding=(np.int64(1), 1)),
    ):
        _conv(**kw).validate()


def test_sdpa_diagonal_alignment():
    def make(alignment):
        g = _g()
        q, k, v = (g.tensor([1, 2, 4, 8], None, F, name=n) for n in ("q", "k", "v"))
        g.sdpa(q, k, v, attn_scale=0.3, diagonal_alignment=alignment, name="at_n")

    for bad in ("FOO", 9):
        expect_error(
            BadParamError,
            ATTR,
            lambda: make(bad),
            "at_n",
            "is not a DiagonalAlignment",
            "BOTTOM_RIGHT",
        )
    make("bottom_right")


def _pool(**kw):
    g = _g()
    args = dict(mode=cudnn.resample_mode.MAXPOOL, window=[2, 2], stride=[1, 1], padding=[0, 0])
    args.update(kw)
    y, _ = g.resample(g.tensor([1, 2, 5, 5], None, F, name="x_in"), name="pl_n", **args)
    y.set_output(True)
    return g


@pytest.mark.parametrize(
    "kw,frag",
    [
        (dict(mode="FOO"), "mode 'FOO' is not a ResampleMode"),
        (dict(mode=9), "mode 9 is not a ResampleMode"),
        (dict(window=[2.5, 2]), "window[0] must be an int, got 2.5"),
        (dict(stride=1.0), "stride must be an int"),
    ],
)
def test_resample_attributes(kw, frag):
    expect_error(BadParamError, ATTR, lambda: _pool(**kw), "resample 'pl_n'", frag)


def test_resample_attributes_accepted():
    for kw in (dict(mode="maxpool"), dict(mode=3), dict(window=2)):
        _pool(**kw).validate()


@pytest.mark.parametrize("phase", ["FOO", None, 5])
def test_norm_forward_phase(phase):
    def make():
        g = _g()
        x, s, b = (
            g.tensor(d, None, F, name=n) for d, n in (([2, 8], "x"), ([1, 8], "s"), ([1, 8], "b"))
        )
        g.layernorm(phase, x, s, b, 1e-5, name="nm_n")

    expect_error(
        BadParamError,
        ATTR,
        make,
        "layernorm 'nm_n'",
        "norm_forward_phase",
        "is not a NormForwardPhase",
    )


# ---- int attributes ----------------------------------------------------------------
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("axis", [None, 1.5, "a"])
def test_softmax_axis(axis, backward):
    g = _g()
    x = _x(g, (2, 5))
    if backward:
        fn = lambda: g.softmax_backward(x, _x(g, (2, 5), "y_in"), axis=axis, name="sm_n")  # noqa
    else:
        fn = lambda: g.softmax(x, axis=axis, name="sm_n")  # noqa: E731
    kind = "softmax_backward" if backward else "softmax"
    expect_error(BadParamError, ATTR, fn, f"{kind} 'sm_n'", "axis must be an int")


@pytest.mark.parametrize(
    "perm,frag",
    [
        (None, "permutation must be a sequence of ints"),
        ([0.5, 1, 2], "permutation[0] must be an int, got 0.5"),
        (["a", 1, 0], "permutation[0] must be an int"),
    ],
)
def test_transpose_permutation(perm, frag):
    g = _g()
    expect_error(
        BadParamError, ATTR, lambda: g.transpose(_x(g), perm, name="tp_n"), "transpose 'tp_n'", frag
    )


def test_concatenate_axis_and_in_place_index():
    g = _g()
    a, b = _x(g, (2, 3), "a_in"), _x(g, (2, 4), "b_in")
    expect_error(
        BadParamError,
        ATTR,
        lambda: g.concatenate([a, b], axis="x", name="cat_n"),
        "concatenate 'cat_n'",
        "axis must be an int",
    )
    expect_error(
        BadParamError,
        ATTR,
        lambda: g.concatenate([a, b], axis=1, in_place_index="a", name="cat_n"),
        "concatenate 'cat_n'",
        "in_place_index must be an int",
    )


def test_concatenate_in_place_index_checked_at_validate():
    g = _g()
    a, b = _x(g, (2, 3), "a_in"), _x(g, (2, 4), "b_in")
    g.concatenate([a, b], axis=1, name="cat_n").set_output(True)
    g._nodes[0].in_place_index = "a"  # set after the builder, as a deserializer might
    expect_error(BadParamError, ATTR, g.validate, "concatenate 'cat_n'", "in_place_index")


def test_matmul_padding_and_gen_index_axis():
    g = _g()
    a, b = _x(g, (4, 5), "a_in"), _x(g, (5, 3), "b_in")
    expect_error(
        BadParamError,
        ATTR,
        lambda: g.matmul(a, b, padding="x", name="mt_n"),
        "matmul 'mt_n'",
        "padding must be a number",
    )
    expect_error(
        BadParamError,
        ATTR,
        lambda: g.gen_index(a, axis="a", name="gi_n"),
        "pointwise GEN_INDEX 'gi_n'",
        "axis must be an int",
    )


# ---- slices ----------------------------------------------------------------------------
@pytest.mark.parametrize("dims_later", [False, True])
@pytest.mark.parametrize(
    "slices,status,frag",
    [
        (None, ATTR, "slices must be a sequence"),
        ([2, 3], ATTR, "slice 0 must be a slice or a (start, end) pair, got 2"),
        ([(0,), (0, 6)], ATTR, "slice 0 must be a slice or a (start, end) pair"),
        ([(0, 2, 5), (0, 6)], ATTR, "a step is not supported"),
        ([(0, 4.5), (0, 6)], ATTR, "slice 0 end must be an int, got 4.5"),
        ([("a", 2), (0, 6)], ATTR, "slice 0 start must be an int"),
        ([slice(0, 4, 2), slice(None)], Status.NOT_SUPPORTED, "only unit steps"),
    ],
)
def test_slice_specification(slices, status, frag, dims_later):
    g = _g()
    x = _x(g, (4, 6))
    if dims_later:
        x.dim = None
    expect_error(
        BadParamError, status, lambda: g.slice(x, slices, name="sl_n"), "slice 'sl_n'", "x_in", frag
    )


def test_slice_before_dims_are_set_runs(rng):
    g = _g()
    x = g.tensor(name="x_in", data_type=F)
    y = g.slice(x, [slice(None), slice(2, None)], name="sl_n")
    y.set_output(True)
    x.set_dim([4, 6])
    a = rng.rand((4, 6))
    out = run_reference(g, {x: a}, [y])[y]
    assert_close(
        out,
        a.double()[:, 2:],
        torch.float32,
        msg=repro("slice before dims", [(4, 6)], "float32", rng.seed),
    )


def test_slice_negative_bound_before_dims_are_set():
    g = _g()
    x = g.tensor(name="x_in", data_type=F)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NOT_FINALIZED,
        lambda: g.slice(x, [slice(-2, None), slice(None)], name="sl_n"),
        "slice 'sl_n'",
        "x_in",
        "set input's dims before slice()",
    )


# ---- pointwise attributes ------------------------------------------------------------------
@pytest.mark.parametrize(
    "make,frag",
    [
        (lambda g, x: g.swish(x, swish_beta=[1.0], name="pt_n"), "swish_beta must be a number"),
        (
            lambda g, x: g.relu(x, lower_clip="a", upper_clip="b", name="pt_n"),
            "relu_lower_clip must be a number",
        ),
        (lambda g, x: g.elu(x, alpha="a", name="pt_n"), "elu_alpha must be a number"),
        (lambda g, x: g.leaky_relu(x, True, name="pt_n"), "relu_lower_clip_slope must be a number"),
    ],
)
def test_pointwise_attributes_type_checked_at_validate(make, frag):
    g = _g()
    make(g, _x(g, (2, 3))).set_output(True)
    expect_error(BadParamError, ATTR, g.validate, "'pt_n'", frag)


def test_pointwise_numpy_attribute_accepted(rng):
    g = _g()
    a = rng.rand((2, 3))
    x = g.tensor_like(a, name="x_in")
    y = g.leaky_relu(x, np.float32(0.25), name="pt_n")
    y.set_output(True)
    out = run_reference(g, {x: a}, [y])[y]
    want = torch.where(a.double() > 0, a.double(), 0.25 * a.double())
    assert_close(out, want, torch.float32, msg=repro("leaky relu", [(2, 3)], "float32", rng.seed))


# ---- pass-by-value outputs -----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["pointwise_output", "reduction_output", "intermediate"])
def test_pass_by_value_node_output_rejected(kind):
    g = _g("gpbv")
    x = g.tensor([4, 6], [6, 1], F, name="x_in")
    if kind == "pointwise_output":
        y = g.exp(x, name="op_n").set_name("y_pbv").set_output(True)
        y.set_is_pass_by_value(True)
    elif kind == "reduction_output":
        y = g.reduction(x, ReductionMode.ADD, name="op_n").set_name("y_pbv")
        y.set_dim([1, 1]).set_output(True).set_is_pass_by_value(True)
    else:
        m = g.reduction(x, ReductionMode.MAX, name="op_n").set_name("y_pbv")
        m.set_dim([1, 1]).set_is_pass_by_value(True)
        g.mul(x, m, name="mul_n").set_output(True)
    label = "pointwise EXP 'op_n'" if kind == "pointwise_output" else "reduction 'op_n'"
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        g.validate,
        label,
        "y_pbv",
        "node output cannot be pass-by-value",
    )


def test_pass_by_value_with_many_elements_names_its_reader():
    g = _g("gpbv")
    x = g.tensor([2, 3, 2, 2], None, F, name="x_in")
    st = [g.tensor([1, 3, 1, 1], None, F, name=f"st{i}") for i in range(2)]
    eps = g.tensor([2], [1], F, is_pass_by_value=True, name="eps_two")
    g.batchnorm(x, st[0], st[1], epsilon=eps, name="bn_n")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "batchnorm 'bn_n'",
        "eps_two",
        "one element",
    )


# ---- one uid, one tensor -------------------------------------------------------------------
@pytest.mark.parametrize(
    "change,frag",
    [
        (lambda z: z.set_data_type(DataType.HALF), "data type FLOAT and HALF"),
        (lambda z: z.set_stride([1, 2, 6]), "strides [12, 4, 1] and [1, 2, 6]"),
        (lambda z: z.set_is_pass_by_value(True), "pass-by-value False and True"),
    ],
)
def test_uid_twins_must_agree(change, frag):
    g = _g("gtwin")
    x = g.tensor([2, 3, 4], [12, 4, 1], F, name="x_in", uid=77)
    z = g.tensor([2, 3, 4], [12, 4, 1], F, name="z_twin", uid=77)
    change(z)
    g.relu(x, name="r").set_output(True)
    g.exp(z, name="e").set_output(True)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_DUPLICATED_ENTRIES,
        g.validate,
        "graph 'gtwin'",
        "'x_in'",
        "'z_twin'",
        "uid 77",
        frag,
    )


def test_uid_twins_that_agree_are_one_tensor():
    g = _g("gtwin")
    x = g.tensor([2, 3, 4], [12, 4, 1], F, name="x_in", uid=77)
    z = g.tensor([2, 3, 4], [12, 4, 1], F, name="z_twin", uid=77)
    g.relu(x, name="r").set_output(True)
    g.exp(z, name="e").set_output(True)
    g.validate()
    assert 77 in g.op_graph.tensors


def test_declared_twin_of_a_node_output_is_that_output():
    g = _g("gtwin")
    x = g.tensor([3, 5], None, F, name="x_in")
    mid = g.tensor([3, 5], [5, 1], DataType.HALF, is_virtual=True, name="mid", uid=70)
    g.exp(mid, name="consumer").set_output(True)
    g.neg(x, name="producer").set_uid(70)
    g.validate()
    assert g.op_graph.tensors[70].data_type == DataType.HALF


def test_declared_twin_of_a_node_output_must_agree():
    g = _g("gtwin")
    x = g.tensor([3, 5], None, F, name="x_in")
    mid = g.tensor([3, 5], [5, 1], DataType.HALF, is_virtual=True, name="mid", uid=70)
    g.exp(mid, name="consumer").set_output(True)
    g.neg(x, name="producer").set_uid(70).set_data_type(F).set_name("neg_out")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_DUPLICATED_ENTRIES,
        g.validate,
        "graph 'gtwin'",
        "'mid'",
        "'neg_out'",
        "data type HALF and FLOAT",
    )


# ---- input descriptors checked before inference; conv output size -------------------------
@pytest.mark.parametrize(
    "dims,frag", [([1, 5, -3], "negative dimension"), ([1] * 10, "10 dimensions")]
)
def test_bad_input_named_before_downstream_nodes(dims, frag):
    g = _g("gmm")
    a = g.tensor([1, 4, 5], None, F, name="a_in")
    b = g.tensor(dims, [1] * len(dims), F, name="b_in")
    c = g.matmul(a, b, name="mm_n")
    g.bias(c, g.tensor([1, 1, 3], None, F, name="bias_in"), name="bias_n").set_output(True)
    expect_error(
        BadParamError, Status.BAD_PARAM_OUT_OF_BOUND, g.validate, "graph 'gmm'", "b_in", frag
    )


def test_pointwise_set_output_dims_name_the_output():
    g = _g()
    y = g.relu(_x(g, (2, 3, 4), "m_in"), name="relu_n")
    y.set_output(True).set_name("y_out").set_dim([2, 3])
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "pointwise RELU_FWD 'relu_n'",
        "m_in",
        "(of 'y_out')",
        "do not broadcast",
    )


def test_conv_filter_larger_than_padded_image():
    g = _g()
    x = g.tensor([1, 2, 5, 5], None, F, name="x_in")
    w = g.tensor([3, 2, 9, 9], None, F, name="w_in")
    g.conv_fprop(x, w, padding=[1, 1], name="cv_n").set_output(True)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        g.validate,
        "conv_fprop 'cv_n'",
        "x_in",
        "output spatial dims [-1, -1] are empty",
        "[9, 9]",
    )


# ---- batch norm values ---------------------------------------------------------------------
def _bn(eps=1e-5, momentum=0.1):
    g = _g("gbn")
    x = g.tensor([2, 3, 2, 2], None, F, name="x_in")
    st = [g.tensor([1, 3, 1, 1], None, F, name=f"st{i}") for i in range(4)]
    for t in g.batchnorm(x, *st, epsilon=eps, momentum=momentum, name="bn_n"):
        t.set_output(True)
    return g


@pytest.mark.parametrize("eps", [float("nan"), float("inf"), -float("inf")])
def test_batchnorm_epsilon(eps):
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        _bn(eps=eps).validate,
        "batchnorm 'bn_n'",
        "bn_n::epsilon",
        f"epsilon {eps} must be finite",
    )


@pytest.mark.parametrize("momentum", [-0.5, 2.0, float("nan")])
def test_batchnorm_momentum(momentum):
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        _bn(momentum=momentum).validate,
        "batchnorm 'bn_n'",
        "bn_n::momentum",
        f"momentum {momentum} must be within [0, 1]",
    )


def test_batchnorm_value_bounds_accepted():
    for eps, momentum in ((0.0, 0.0), (1e-5, 1.0)):
        _bn(eps, momentum).validate()


# ---- the validation memo sees checked values -----------------------------------------------
def _norm(kind, eps):
    g = _g("gmemo")
    x, s, b = (
        g.tensor(d, [d[1], 1], F, name=n) for d, n in (([2, 8], "x"), ([1, 8], "s"), ([1, 8], "b"))
    )
    if kind == "rmsnorm":
        outs = g.rmsnorm(NormForwardPhase.TRAINING, x, s, None, eps, name="nm_n")
    else:
        outs = g.layernorm(NormForwardPhase.TRAINING, x, s, b, eps, name="nm_n")
    for t in outs:
        if t is not None:
            t.set_output(True)
    return g


@pytest.mark.parametrize(
    "kind,bad", [("layernorm", -1.0), ("layernorm", float("nan")), ("rmsnorm", 0.0)]
)
def test_memo_does_not_answer_for_another_epsilon(kind, bad):
    _norm(kind, 1e-5).validate()
    _norm(kind, 1e-5).validate()  # the memo answers the twin
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        _norm(kind, bad).validate,
        f"{kind} 'nm_n'",
        "nm_n::epsilon",
        "must be finite and > 0",
    )


def test_memo_does_not_answer_for_another_momentum():
    _bn().validate()
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        _bn(momentum=2.0).validate,
        "batchnorm 'bn_n'",
        "momentum 2.0",
    )


def test_memo_still_answers_the_same_values():
    from opendnn.graph import memo

    _norm("layernorm", 1e-5).validate()
    g = _norm("layernorm", 1e-5)
    fp, _ = memo.fingerprint(g)
    assert memo.lookup(fp) is not None


# ---- a graph of valid inputs still builds and runs -----------------------------------------------
def test_valid_graph_still_runs(rng):
    g = _g()
    a = rng.rand((3, 4))
    x = g.tensor_like(a, name="x_in")
    y = g.relu(g.mul(x, 2.0, name="m"), name="r")
    y.set_output(True)
    g.build([HeurMode.A])
    out = torch.empty(3, 4)
    g.execute({x: a, y: out}, None)
    assert_close(
        out,
        torch.relu(2 * a.double()),
        torch.float32,
        msg=repro("relu(2x)", [(3, 4)], "float32", rng.seed),
    )


def test_boolean_and_integer_compute_where_float32_is_exact():
    """cudnn-frontend's mask subgraphs: BOOLEAN compute on comparisons, logic and selects,
    INT32 on generated indices and arithmetic on them, are taken (float32 computes them
    exactly); BOOLEAN on arithmetic stays refused."""
    g = cudnn.pygraph()
    x = g.tensor([2, 3], [3, 1], DataType.FLOAT, name="x")
    row = g.gen_index(input=x, axis=0, compute_data_type=DataType.INT32)
    row.set_data_type(DataType.INT32)
    col = g.gen_index(input=x, axis=1, compute_data_type=DataType.INT32)
    col.set_data_type(DataType.INT32)
    diff = g.sub(a=row, b=col, compute_data_type=DataType.INT32)
    diff.set_data_type(DataType.INT32)
    keep = g.cmp_ge(input=diff, comparison=row, compute_data_type=DataType.BOOLEAN)
    keep.set_data_type(DataType.BOOLEAN)
    g.binary_select(input0=x, input1=x, mask=keep).set_output(True)
    g.validate()
    g2 = cudnn.pygraph()
    y = g2.tensor([2, 3], [3, 1], DataType.FLOAT, name="y")
    g2.add(a=y, b=y, compute_data_type=DataType.BOOLEAN).set_output(True)
    with pytest.raises(BadParamError, match="compute_data_type BOOLEAN"):
        g2.validate()
