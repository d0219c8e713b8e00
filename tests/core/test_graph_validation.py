"""Graph validation: one test per rule (exception type, status, and a message naming the
operation and the tensor), plus the inference rules validate() applies."""

from __future__ import annotations

import pytest
import torch
from _util import FUSION_ID, assert_close, check_engine, expect_error, repro, run_reference

import opendnn.frontend as cudnn
from opendnn.enums import DataType, HeurMode, ReductionMode
from opendnn.errors import BadParamError, Status
from opendnn.graph import memo

F = DataType.FLOAT


def _g(**kw):
    return cudnn.pygraph(**kw)


# ---- descriptors of graph tensors ----------------------------------------------------------
def test_empty_graph_is_rejected():
    g = _g(name="empty")
    expect_error(
        BadParamError, Status.BAD_PARAM_NOT_FINALIZED, g.validate, "graph 'empty'", "no operations"
    )


@pytest.mark.parametrize(
    "dim,stride,status,frag",
    [
        ([2, -3], [3, 1], Status.BAD_PARAM_OUT_OF_BOUND, "negative dimension"),
        ([2, 3], [-3, 1], Status.BAD_PARAM_OUT_OF_BOUND, "negative stride"),
        ([1] * 9, [1] * 9, Status.BAD_PARAM_OUT_OF_BOUND, "9 dimensions"),
        ([2, 3], [3, 1, 1], Status.BAD_PARAM_SHAPE_MISMATCH, "3 strides for 2 dimensions"),
    ],
)
def test_bad_input_dims_strides(dim, stride, status, frag):
    g = _g(name="gbad")
    x = g.tensor(dim, stride, F, name="x_bad")
    g.relu(x, name="act")
    expect_error(BadParamError, status, g.validate, "graph 'gbad'", "x_bad", frag)


def test_bad_output_stride_length():
    g = _g(name="gout")
    x = g.tensor([2, 3], [3, 1], F, name="x")
    y = g.relu(x, name="act")
    y.set_output(True).set_name("y_bad").set_stride([1])
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "y_bad",
        "1 strides for 2 dimensions",
    )


def test_input_dims_not_set():
    g = _g(name="gnd")
    x = g.tensor(name="x_nodims", data_type=F)
    g.exp(x, name="e")
    expect_error(
        BadParamError, Status.BAD_PARAM_NOT_FINALIZED, g.validate, "x_nodims", "dims are not set"
    )


def test_pass_by_value_with_many_elements_rejected():
    g = _g(name="gpbv")
    x = g.tensor([2], [1], F, name="x")
    s = g.tensor([2], [1], F, is_pass_by_value=True, name="s_two")
    g.mul(x, s, name="m")
    expect_error(BadParamError, Status.BAD_PARAM_SHAPE_MISMATCH, g.validate, "s_two", "one element")


# ---- shapes ------------------------------------------------------------------------------------
def test_pointwise_inputs_not_broadcastable():
    g = _g()
    a = g.tensor([2, 3], [3, 1], F, name="a")
    b = g.tensor([4, 3], [3, 1], F, name="b_wide")
    g.add(a, b, name="plus")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "pointwise ADD 'plus'",
        "b_wide",
        "broadcast",
    )


def test_pointwise_input_does_not_broadcast_to_set_output_dims():
    g = _g()
    a = g.tensor([2, 3], [3, 1], F, name="a_in")
    y = g.exp(a, name="ex")
    y.set_output(True).set_name("y").set_dim([2, 5])
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "pointwise EXP 'ex'",
        "a_in",
        "do not broadcast to output dims [2, 5]",
    )


def test_matmul_inner_dims_mismatch():
    g = _g()
    a = g.tensor([1, 4, 5], [20, 5, 1], F, name="A")
    b = g.tensor([1, 7, 3], [21, 3, 1], F, name="B_mm")
    g.matmul(a, b, name="mm0")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "matmul 'mm0'",
        "B_mm",
        "inner dimensions differ",
    )


def test_matmul_batch_dims_not_broadcastable():
    g = _g()
    a = g.tensor([2, 4, 5], [20, 5, 1], F, name="A")
    b = g.tensor([3, 5, 3], [15, 3, 1], F, name="B_batch")
    g.matmul(a, b, name="mm1")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "matmul 'mm1'",
        "B_batch",
        "do not broadcast",
    )


def test_matmul_needs_two_dims():
    g = _g()
    a = g.tensor([5], [1], F, name="A_vec")
    b = g.tensor([5, 3], [3, 1], F, name="B")
    g.matmul(a, b, name="mm2")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "matmul 'mm2'",
        "A_vec",
        "2 dims",
    )


def test_matmul_integer_operands_rejected():
    g = _g()
    a = g.tensor([4, 5], [5, 1], DataType.INT32, name="A_int")
    b = g.tensor([5, 3], [3, 1], DataType.INT32, name="B_int")
    g.matmul(a, b, name="mm3")
    expect_error(BadParamError, Status.NOT_SUPPORTED_DATA_TYPE, g.validate, "matmul 'mm3'", "INT32")


def test_reduction_output_dims_not_set():
    g = _g()
    x = g.tensor([4, 6], [6, 1], F, name="x")
    y = g.reduction(x, cudnn.reduction_mode.ADD, name="red0")
    y.set_output(True).set_name("y_red")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NOT_FINALIZED,
        g.validate,
        "reduction 'red0'",
        "y_red",
        "output dims must be set",
    )


@pytest.mark.parametrize("ydims", [[4, 3], [2, 1], [4, 6, 1], [4]])
def test_reduction_output_dims_incompatible(ydims):
    g = _g()
    x = g.tensor([4, 6], [6, 1], F, name="x")
    y = g.reduction(x, cudnn.reduction_mode.MAX, name="red1")
    y.set_output(True).set_name("y_bad").set_dim(ydims)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "reduction 'red1'",
        "y_bad",
        "reduced axes",
    )


def test_genstats_needs_two_dims():
    g = _g()
    x = g.tensor([6], [1], F, name="x_1d")
    g.genstats(x, name="gs")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "genstats 'gs'",
        "x_1d",
        "2 dims",
    )


def test_genstats_wrong_output_dims():
    g = _g()
    x = g.tensor([2, 3, 4], [12, 4, 1], F, name="x")
    s, sq = g.genstats(x, name="gs")
    s.set_name("sum_bad").set_dim([1, 3])
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "genstats 'gs'",
        "sum_bad",
        "must be [1, 3, 1]",
    )


def test_reshape_output_dims_not_set():
    g = _g()
    x = g.tensor([4, 6], [6, 1], F, name="x")
    y = g.reshape(x, name="rs")
    y.set_name("y_rs")
    expect_error(BadParamError, Status.BAD_PARAM_NOT_FINALIZED, g.validate, "reshape 'rs'", "y_rs")


def test_reshape_element_count_changes():
    g = _g()
    x = g.tensor([4, 6], [6, 1], F, name="x")
    y = g.reshape(x, name="rs")
    y.set_name("y_rs").set_dim([5, 5])
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "reshape 'rs'",
        "y_rs",
        "element count",
    )


def test_transpose_bad_permutation():
    g = _g()
    x = g.tensor([2, 3, 4], [12, 4, 1], F, name="x_t")
    g.transpose(x, [0, 2, 2], name="tp")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        g.validate,
        "transpose 'tp'",
        "x_t",
        "permutation",
    )


def test_slice_out_of_range():
    g = _g()
    x = g.tensor([4, 6], [6, 1], F, name="x_s")
    g.slice(x, [(0, 2), (3, 9)], name="sl")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        g.validate,
        "slice 'sl'",
        "x_s",
        "out of range",
    )


def test_slice_with_step_not_supported():
    g = _g()
    x = g.tensor([4, 6], [6, 1], F, name="x_s")
    expect_error(
        BadParamError,
        Status.NOT_SUPPORTED,
        lambda: g.slice(x, [slice(0, 4, 2), slice(None)], name="sl2"),
        "sl2",
        "x_s",
        "step",
    )


def test_slice_wrong_number_of_slices():
    g = _g()
    x = g.tensor([4, 6], [6, 1], F, name="x_s")
    g.slice(x, [(0, 2)], name="sl3")
    expect_error(BadParamError, Status.BAD_PARAM_SHAPE_MISMATCH, g.validate, "slice 'sl3'", "x_s")


def test_concatenate_off_axis_mismatch():
    g = _g()
    a = g.tensor([2, 3], [3, 1], F, name="a")
    b = g.tensor([4, 5], [5, 1], F, name="b_cat")
    g.concatenate([a, b], axis=1, name="cat")
    expect_error(
        BadParamError, Status.BAD_PARAM_SHAPE_MISMATCH, g.validate, "concatenate 'cat'", "b_cat"
    )


def test_concatenate_axis_out_of_range():
    g = _g()
    a = g.tensor([2, 3], [3, 1], F, name="a_cat")
    g.concatenate([a, a], axis=2, name="cat")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        g.validate,
        "concatenate 'cat'",
        "a_cat",
        "axis 2",
    )


# ---- attributes ------------------------------------------------------------------------------
def test_gen_index_axis_out_of_range():
    g = _g()
    x = g.tensor([2, 3], [3, 1], F, name="x")
    y = g.gen_index(x, axis=2, name="gi")
    y.set_name("idx")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        g.validate,
        "pointwise GEN_INDEX 'gi'",
        "idx",
        "axis 2",
    )


def test_softplus_beta_zero_rejected():
    g = _g()
    x = g.tensor([2, 3], [3, 1], F, name="x")
    g.softplus(x, beta=0.0, name="sp")
    expect_error(
        BadParamError, Status.BAD_PARAM, g.validate, "pointwise SOFTPLUS_FWD 'sp'", "softplus_beta"
    )


def test_relu_upper_clip_below_lower_clip_rejected():
    g = _g()
    x = g.tensor([2, 3], [3, 1], F, name="x")
    g.relu(x, lower_clip=1.0, upper_clip=0.5, name="clip")
    expect_error(
        BadParamError, Status.BAD_PARAM, g.validate, "pointwise RELU_FWD 'clip'", "upper clip"
    )


# ---- dataflow --------------------------------------------------------------------------------
def test_cycle_through_set_uid():
    g = _g(name="cyc")
    a = g.tensor([3, 4], [4, 1], F, name="a", uid=5)
    b = g.relu(a, name="first")
    c = g.exp(b, name="second")
    c.set_uid(5)  # second's output feeds first's input
    expect_error(
        BadParamError, Status.BAD_PARAM, g.validate, "graph 'cyc'", "cycle", "'first'", "'second'"
    )


def test_in_place_multi_node_graph_rejected():
    g = _g()
    a = g.tensor([3, 4], [4, 1], F, name="a_inplace", uid=11)
    b = g.relu(a, name="r")
    y = g.exp(b, name="ex_inplace")
    y.set_output(True)
    g2_in = g.tensor([3, 4], [4, 1], F, name="z", uid=21)
    w = g.neg(g2_in, name="negate")
    w.set_uid(21)  # one node reads and writes uid 21
    expect_error(
        BadParamError, Status.BAD_PARAM, g.validate, "pointwise NEG 'negate'", "'z'", "in-place"
    )


def test_in_place_non_pointwise_single_node_rejected():
    g = _g()
    x = g.tensor([4, 6], [6, 1], F, name="x_rs", uid=3)
    y = g.reshape(x, name="rs")
    y.set_dim([4, 6]).set_uid(3)
    expect_error(BadParamError, Status.BAD_PARAM, g.validate, "reshape 'rs'", "x_rs", "in-place")


def test_in_place_single_pointwise_node_runs(rng):
    g = _g()
    x = rng.rand((5, 7))
    X = g.tensor_like(x, name="x").set_uid(9)
    Y = g.sigmoid(X, name="sig")
    Y.set_uid(9).set_output(True)
    g.build([HeurMode.A])
    buf = x.clone()
    g.execute({9: buf}, None)
    assert_close(
        buf,
        torch.sigmoid(x.double()),
        torch.float32,
        msg=repro("sigmoid in place", [(5, 7)], "float32", rng.seed),
    )


def test_virtual_tensor_never_produced():
    g = _g(name="gv")
    a = g.tensor([3, 4], [4, 1], F, name="a")
    v = g.tensor([3, 4], [4, 1], F, is_virtual=True, name="ghost")
    g.add(a, v, name="plus")
    expect_error(
        BadParamError, Status.BAD_PARAM, g.validate, "graph 'gv'", "ghost", "no node produces"
    )


@pytest.mark.parametrize("stride", [[0, 1], [1, 1], [2, 1]])
def test_overlapping_output_strides(stride):
    g = _g()
    a = g.tensor([3, 4], [4, 1], F, name="a")
    y = g.exp(a, name="ex")
    y.set_output(True).set_name("y_overlap").set_stride(stride)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        g.validate,
        "pointwise EXP 'ex'",
        "y_overlap",
        "overlap",
    )


def test_duplicate_producers_of_a_uid():
    g = _g(name="gdup")
    a = g.tensor([3, 4], [4, 1], F, name="a")
    y1 = g.exp(a, name="p1")
    y2 = g.sin(a, name="p2")
    y1.set_uid(40).set_name("twice")
    y2.set_uid(40).set_name("twice")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_DUPLICATED_ENTRIES,
        g.validate,
        "'p1'",
        "'p2'",
        "twice",
        "produced by both",
    )


def test_uid_shared_by_tensors_with_different_dims():
    g = _g(name="gshare")
    a = g.tensor([3, 4], [4, 1], F, name="a", uid=7)
    b = g.tensor([2, 2], [2, 1], F, name="b_same_uid", uid=7)
    g.exp(a, name="e1")
    g.exp(b, name="e2")
    expect_error(
        BadParamError, Status.BAD_PARAM_DUPLICATED_ENTRIES, g.validate, "graph 'gshare'", "uid 7"
    )


# ---- inference and the positive rules --------------------------------------------------------
def test_node_order_does_not_matter(rng):
    """The consumer is added before its producer; uids wire them (dataflow by uid)."""
    g = _g()
    a = rng.rand((3, 5))
    A = g.tensor_like(a, name="a")
    mid = g.tensor([3, 5], [5, 1], F, is_virtual=True, name="mid", uid=77)
    y = g.exp(mid, name="consumer")  # added first
    y.set_output(True).set_name("y")
    m = g.neg(A, name="producer")  # added second, produces uid 77
    m.set_uid(77)
    g.validate()
    order = [n.name for n in g.op_graph.nodes]
    assert order == ["producer", "consumer"]
    out = run_reference(g, {A: a}, [y])[y]
    assert_close(
        out,
        torch.exp(-a.double()),
        torch.float32,
        msg=repro("exp(neg) by uid", [(3, 5)], "float32", rng.seed),
    )
    check_engine(
        g, {A: a}, [y], FUSION_ID, msg=repro("exp(neg) by uid", [(3, 5)], "float32", rng.seed)
    )


def test_unconsumed_output_is_a_graph_output_without_set_output(rng):
    g = _g()
    a = rng.rand((4, 3))
    A = g.tensor_like(a)
    y = g.abs(g.neg(A))
    assert y.get_is_virtual()
    g.validate()
    assert not y.get_is_virtual()
    out = run_reference(g, {A: a}, [y])[y]
    assert_close(out, a.double().abs(), torch.float32)


def test_inference_of_dims_strides_types():
    g = _g(
        io_data_type=DataType.HALF,
        intermediate_data_type=DataType.BFLOAT16,
        compute_data_type=DataType.FLOAT,
    )
    x = g.tensor([2, 3, 4, 5], [60, 1, 15, 3], name="x")  # NHWC, type from io type
    b = g.tensor([1, 3, 1, 1], [3, 1, 1, 1], name="bias")
    mid = g.add(x, b, name="plus")
    y = g.relu(mid, name="act")
    y.set_output(True)
    g.validate()
    assert x.get_data_type() == DataType.HALF
    assert y.get_dim() == [2, 3, 4, 5]
    assert y.get_stride() == [60, 1, 15, 3]  # follows x's layout
    assert y.get_data_type() == DataType.HALF  # io type
    assert mid.get_data_type() == DataType.BFLOAT16  # intermediate type
    assert mid.get_is_virtual()
    nodes = g.op_graph.nodes
    assert all(n.compute_data_type == DataType.FLOAT for n in nodes)


def test_inference_defaults_without_graph_types():
    g = _g()
    x = g.tensor([3, 4], [4, 1], DataType.BFLOAT16, name="x")
    y = g.exp(x)
    s = g.reduction(y, ReductionMode.ADD)
    s.set_dim([3, 1])
    g.validate()
    assert y.get_data_type() == DataType.FLOAT  # virtual -> FLOAT
    assert s.get_data_type() == DataType.BFLOAT16  # output like the input
    assert s.get_stride() == [1, 1]


def test_adding_a_node_after_validate_revalidates():
    g = _g()
    x = g.tensor([3, 4], [4, 1], F, name="x")
    y = g.exp(x)
    g.validate()
    k1 = g.key()
    z = g.neg(y)
    z.set_output(True)
    g.validate()
    assert g.key() != k1 and len(g.op_graph.nodes) == 2
    # y was an output while nothing consumed it; now neg consumes it and it was never
    # set_output: it must be virtual again (not a buffer the user has to bind)
    assert y.get_is_virtual()
    assert g.op_graph.tensors[y.get_uid()].is_virtual


def test_concatenate_in_place_index_out_of_range():
    g = _g()
    a = g.tensor([2, 3], [3, 1], F, name="a")
    b = g.tensor([2, 4], [4, 1], F, name="b")
    g.concatenate([a, b], axis=1, in_place_index=2, name="cat_ip")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        g.validate,
        "concatenate 'cat_ip'",
        "in_place_index 2",
    )


# ---- the validation memo: a graph re-created exactly takes the earlier outcome ----------
def _conv_bias_relu(x_stride=None, name=""):
    g = _g(name=name, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([2, 8, 5, 5], x_stride or [200, 1, 40, 8], DataType.HALF, name="x")
    w = g.tensor([4, 8, 3, 3], [72, 1, 24, 8], DataType.HALF, name="w")
    b = g.tensor([1, 4, 1, 1], [4, 1, 1, 1], DataType.HALF, name="b")
    y = g.relu(g.bias(g.conv_fprop(x, w, padding=[1, 1]), b))
    y.set_output(True)
    return g, y


def test_a_graph_built_again_shares_the_first_validation():
    g1, y1 = _conv_bias_relu(name="memo")
    g1.validate()
    g2, y2 = _conv_bias_relu(name="memo")
    g2.validate()
    assert g2.key() == g1.key()
    assert memo.CHECK or g2.op_graph is g1.op_graph  # the frozen graph, shared
    assert (
        y2.get_dim(),
        y2.get_stride(),
        y2.get_data_type(),
        y2.get_uid(),
        y2.get_is_virtual(),
    ) == (y1.get_dim(), y1.get_stride(), y1.get_data_type(), y1.get_uid(), y1.get_is_virtual())
    assert [t.uid for t in g2._tensors] == [t.uid for t in g1._tensors]
    assert [n.compute_data_type for n in g2._nodes] == [n.compute_data_type for n in g1._nodes]


def test_a_graph_that_differs_in_one_stride_is_validated_afresh():
    g1, _ = _conv_bias_relu(name="memo2")
    g1.validate()
    g2, _ = _conv_bias_relu(x_stride=[200, 25, 5, 1], name="memo2")  # NCHW x
    g2.validate()
    assert g2.op_graph is not g1.op_graph and g2.key() != g1.key()
    assert g2.op_graph.tensors[g2._tensors[0].uid].strides == (200, 25, 5, 1)


def test_an_invalid_graph_fails_every_time():
    for _ in range(2):
        g = _g(name="bad_again")
        x = g.tensor([2, 3], [3, 1], F, name="x")
        y = g.tensor([4, 3], [3, 1], F, name="y")
        g.add(x, y, name="sum")
        expect_error(BadParamError, Status.BAD_PARAM_SHAPE_MISMATCH, g.validate, "sum", "y")
