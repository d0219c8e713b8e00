"""Variant pack binding: what execute() accepts, and one test per rejection rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _util import FUSION_ID, REFERENCE_ID, assert_close, expect_error, repro, workspace

import opendnn.frontend as cudnn
from opendnn.enums import DataType, HeurMode, ReductionMode
from opendnn.errors import BadParamError, Status


def _problem(rng, heur=(HeurMode.A,), name="vp"):
    """y = relu(a * b + s) with a pass-by-value s; a [3, 4], b [1, 4] (broadcast)."""
    g = cudnn.pygraph(name=name)
    a, b = rng.rand((3, 4)), rng.rand((1, 4))
    s = torch.tensor(0.25)
    A = g.tensor_like(a, name="a")
    B = g.tensor_like(b, name="b")
    S = g.tensor_like(s, name="s")
    mid = g.mul(A, B, name="mul")
    mid.set_name("mid")
    y = g.relu(g.add(mid, S, name="add"), name="act")
    y.set_output(True).set_name("y")
    g.build(list(heur))
    want = torch.relu(a.double() * b.double() + 0.25)
    return g, (A, B, S, y, mid), (a, b, s), want


def _out():
    return torch.full((3, 4), float("nan"))


# ---- what binds ------------------------------------------------------------------------------
@pytest.mark.parametrize("heur", [HeurMode.A, HeurMode.FALLBACK])
def test_bind_by_tensor_and_by_uid(rng, heur):
    g, (A, B, S, y, _), (a, b, s), want = _problem(rng, (heur,))
    out = _out()
    g.execute({A: a, B: b, S: s, y: out}, None)
    assert_close(
        out,
        want,
        torch.float32,
        msg=repro(
            "relu(a*b+s)", [(3, 4), (1, 4)], "float32", rng.seed, plan=g.get_plan_name_at_index(0)
        ),
    )
    out2 = _out()
    g.execute({A.get_uid(): a, B.get_uid(): b, S.get_uid(): 0.25, y.get_uid(): out2}, None)
    assert torch.equal(out, out2)


@pytest.mark.parametrize("heur", [HeurMode.A, HeurMode.FALLBACK])
def test_bind_numpy_arrays(rng, heur):
    g, (A, B, S, y, _), (a, b, s), want = _problem(rng, (heur,))
    out = np.full((3, 4), np.nan, dtype=np.float32)
    g.execute({A: a.numpy(), B: b.numpy(), S: np.float32(0.25), y: out}, None)
    assert_close(torch.from_numpy(out), want, torch.float32)


@pytest.mark.parametrize("engine_id", [FUSION_ID, REFERENCE_ID])
def test_bind_raw_integer_pointers(rng, engine_id):
    g, (A, B, S, y, _), (a, b, s), want = _problem(rng, (HeurMode.A,))
    g.create_execution_plan(engine_id, {})
    out = _out()
    g.execute({A: a.data_ptr(), B: b.data_ptr(), S: s, y: out.data_ptr()}, None)
    assert_close(
        out,
        want,
        torch.float32,
        msg=repro("raw pointers", [(3, 4)], "float32", rng.seed, engine=engine_id),
    )


def test_bind_1d_buffer_holding_the_span(rng):
    """A non-packed descriptor bound to a flat buffer that covers its span."""
    g = cudnn.pygraph()
    base = rng.rand((6, 9))
    view = base[1:5, 2:7]  # dims (4, 5), strides (9, 1)
    X = g.tensor([4, 5], [9, 1], DataType.FLOAT, name="x")
    y = g.exp(X)
    y.set_output(True).set_stride([5, 1])  # packed (it would inherit x's [9, 1])
    g.build([HeurMode.A])
    flat = base.reshape(-1)[1 * 9 + 2 :]  # starts at view[0, 0]
    out = torch.full((4, 5), float("nan"))
    g.execute({X: flat, y: out}, None)
    assert_close(out, view.double().exp(), torch.float32)


def test_size_one_dim_strides_are_ignored(rng):
    g = cudnn.pygraph()
    x = rng.rand((3, 1))
    X = g.tensor([3, 1], [1, 1], DataType.FLOAT, name="x")
    y = g.neg(X)
    y.set_output(True)
    g.build([HeurMode.A])
    odd = torch.empty_strided((3, 1), (1, 7)).copy_(x)  # stride 7 on the size-1 dim
    out = torch.full((3, 1), float("nan"))
    g.execute({X: odd, y: out}, None)
    assert torch.equal(out, -x)


def test_same_elements_other_shape_accepted(rng):
    g = cudnn.pygraph()
    x = rng.rand((3, 4))
    X = g.tensor_like(x, name="x")
    y = g.neg(X)
    y.set_output(True)
    g.build([HeurMode.A])
    out = torch.full((1, 3, 4), float("nan"))
    g.execute({X: x.reshape(1, 3, 4), y: out}, None)
    assert torch.equal(out.reshape(3, 4), -x)


# ---- rejections --------------------------------------------------------------------------------
def test_missing_entry(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        lambda: g.execute({A: a, S: s, y: _out()}, None),
        "execute 'vp'",
        "'b'",
        "missing",
    )


def test_binding_a_virtual_tensor(rng):
    g, (A, B, S, y, mid), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.execute({A: a, B: b, S: s, y: _out(), mid: _out()}, None),
        "execute 'vp'",
        "'mid'",
        "virtual",
    )


def test_unknown_uid(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.execute({A: a, B: b, S: s, y: _out(), 999: _out()}, None),
        "execute 'vp'",
        "uid 999",
        "not a tensor of this graph",
    )


def test_key_neither_tensor_nor_uid(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.execute({A: a, B: b, S: s, y: _out(), "b": b}, None),
        "execute 'vp'",
        "'b'",
        "neither",
    )


def test_wrong_dtype(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.execute({A: a.half(), B: b, S: s, y: _out()}, None),
        "execute 'vp'",
        "'a'",
        "torch.float16",
        "FLOAT",
    )


def test_wrong_shape(rng):
    """A buffer of another shape that is not dense (it skips elements) cannot be read as
    the descriptor's memory."""
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    gapped = torch.empty(3, 8)[:, ::2]  # [3, 4] with a gap after every element
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: g.execute({A: a, B: b, S: s, y: gapped[:, :3]}, None),
        "execute 'vp'",
        "'y'",
        "[3, 3]",
        "[3, 4]",
    )


def test_dense_buffer_too_small_for_the_descriptor(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: g.execute({A: a, B: b, S: s, y: torch.empty(2, 5)}, None),
        "execute 'vp'",
        "'y'",
        "[2, 5]",
        "10 elements",
        "12",
    )


def test_dense_buffer_of_another_shape_binds_by_pointer(rng):
    """cuDNN binds pointers: a dense buffer of any shape is the memory from its first
    element on, read through the descriptor's strides, when it holds the descriptor's
    span. A larger one (an int8 convolution writing into a reused int32 buffer, in
    cudnn-frontend's tests) is written over the span only."""
    g, (A, B, S, y, _), (a, b, s), want = _problem(rng)
    out = torch.full((4, 3), float("nan"))  # same element count, another shape
    g.execute({A: a, B: b, S: s, y: out}, None)
    assert_close(out.reshape(3, 4), want, torch.float32)
    big = torch.full((2, 5, 2), float("nan")).permute(2, 0, 1)  # dense, not contiguous
    g.execute({A: a, B: b, S: s, y: big}, None)
    flat = big.permute(1, 2, 0).reshape(-1)  # memory order
    assert_close(flat[:12].reshape(3, 4), want, torch.float32)
    assert flat[12:].isnan().all()  # nothing past the span is written


def test_buffer_strides_disagree(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    at = a.t().contiguous().t()  # shape (3, 4), strides (1, 3)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: g.execute({A: at, B: b, S: s, y: _out()}, None),
        "execute 'vp'",
        "'a'",
        "strides [1, 3]",
    )


def test_buffer_on_another_device(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.execute({A: a, B: b, S: s, y: torch.empty(3, 4, device="meta")}, None),
        "execute 'vp'",
        "'y'",
        "meta",
    )


def test_duplicated_entry(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_DUPLICATED_ENTRIES,
        lambda: g.execute({A: a, A.get_uid(): a, B: b, S: s, y: _out()}, None),
        "execute 'vp'",
        "'a'",
        "twice",
    )


def test_none_buffer(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        lambda: g.execute({A: a, B: None, S: s, y: _out()}, None),
        "execute 'vp'",
        "'b'",
        "None",
    )


def test_null_integer_pointer(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        lambda: g.execute({A: a, B: 0, S: s, y: _out()}, None),
        "execute 'vp'",
        "'b'",
        "null pointer",
    )


def test_unbindable_object(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.execute({A: a, B: [1.0] * 4, S: s, y: _out()}, None),
        "execute 'vp'",
        "'b'",
        "list",
    )


def test_pass_by_value_with_non_scalar(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: g.execute({A: a, B: b, S: torch.ones(2), y: _out()}, None),
        "execute 'vp'",
        "'s'",
        "1 element",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SHAPE_MISMATCH,
        lambda: g.execute({A: a, B: b, S: np.ones(3), y: _out()}, None),
        "execute 'vp'",
        "'s'",
        "1 element",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.execute({A: a, B: b, S: "0.25", y: _out()}, None),
        "execute 'vp'",
        "'s'",
        "number",
    )


def test_flat_buffer_too_small(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: g.execute({A: a, B: b, S: s, y: torch.empty(11)}, None),
        "execute 'vp'",
        "'y'",
        "11 elements",
        "12",
    )


@pytest.mark.parametrize("heur", [HeurMode.A, HeurMode.FALLBACK])
def test_pointwise_graph_runs_in_place_over_an_input(rng, heur):
    """cuDNN's add_tensor / op_tensor write C over an input: a pointwise-only graph with
    one output may write over an identical input buffer (each element reads first)."""
    g, (A, B, S, y, _), (a, b, s), want = _problem(rng, (heur,))
    g.execute({A: a, B: b, S: s, y: a}, None)
    torch.testing.assert_close(a.double(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("heur", [HeurMode.A, HeurMode.FALLBACK])
def test_two_outputs_in_place_over_two_inputs(rng, heur):
    """RoPE's form: y1 = a*c - b*s over a, y2 = b*c + a*s over b, one pass (the fused
    kernel, the reference) reading an element's inputs before writing its outputs."""
    g = cudnn.pygraph(name="rope")
    a, b = rng.rand((3, 4)), rng.rand((3, 4))
    c, sn = rng.rand((1, 4)), rng.rand((1, 4))
    A, B = g.tensor_like(a, name="a"), g.tensor_like(b, name="b")
    C, S = g.tensor_like(c, name="c"), g.tensor_like(sn, name="s")
    y1 = g.sub(g.mul(A, C), g.mul(B, S)).set_output(True).set_name("y1")
    y2 = g.add(g.mul(B, C), g.mul(A, S)).set_output(True).set_name("y2")
    g.build([heur])
    assert g._selected_plan().single_pass
    a64, b64 = a.double(), b.double()
    want1, want2 = a64 * c.double() - b64 * sn.double(), b64 * c.double() + a64 * sn.double()
    g.execute({A: a, B: b, C: c, S: sn, y1: a, y2: b}, None)
    assert_close(a, want1, torch.float32)
    assert_close(b, want2, torch.float32)


def test_in_place_with_two_outputs_needs_one_pass(rng):
    """A plan of several stages could read a after y overwrote it: with two outputs an
    in-place buffer is refused unless the plan is one pass."""
    from opendnn.runtime.buffers import bind, check_no_aliasing

    g = cudnn.pygraph(name="vp2")
    a, b = rng.rand((3, 4)), rng.rand((1, 4))
    A, B = g.tensor_like(a, name="a"), g.tensor_like(b, name="b")
    mid = g.mul(A, B, name="mul").set_output(True).set_name("mid")
    y = g.relu(g.add(mid, A, name="add"), name="act").set_output(True).set_name("y")
    g.build([HeurMode.A])
    bound, _ = bind(g.op_graph, {A: a, B: b, mid: torch.empty(3, 4), y: a}, "x", a.device)
    check_no_aliasing(g.op_graph, bound, "execute 'vp2'", single_pass=True)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: check_no_aliasing(g.op_graph, bound, "execute 'vp2'"),
        "execute 'vp2'",
        "'y'",
        "'a'",
        "in place",
    )


def test_in_place_output_that_a_node_reads_is_rejected(rng):
    g = cudnn.pygraph(name="vp3")
    a = rng.rand((3, 4))
    A = g.tensor_like(a, name="a")
    mid = g.exp(A, name="exp").set_output(True).set_name("mid")
    y = g.neg(mid, name="neg").set_output(True).set_name("y")
    g.build([HeurMode.A])
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.execute({A: a, mid: a, y: torch.empty(3, 4)}, None),
        "execute 'vp3'",
        "'mid'",
        "'a'",
        "in place",
    )


def _split_graph(rng):
    g = cudnn.pygraph(name="ws")
    x = rng.rand((3, 64))
    X = g.tensor_like(x, name="x")
    r = g.reduction(X, ReductionMode.ADD, name="sum")
    r.set_dim([3, 1]).set_output(True).set_name("r")
    g.validate()
    g.create_execution_plan(FUSION_ID, {"SPLIT": 4, "BLOCK_RED": 8, "BLOCK_KEPT": 4})
    return g, X, r, x


def test_workspace_too_small(rng):
    g, X, r, x = _split_graph(rng)
    need = g.get_workspace_size()
    assert need > 0
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: g.execute({X: x, r: torch.empty(3, 1)}, workspace(need - 1)),
        "execute 'ws'",
        f"{need - 1} bytes",
        str(need),
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
        lambda: g.execute({X: x, r: torch.empty(3, 1)}, None),
        "execute 'ws'",
        "None",
    )


def test_workspace_non_contiguous_rejected(rng):
    g, X, r, x = _split_graph(rng)
    need = g.get_workspace_size()
    ws = torch.empty(2 * need, dtype=torch.uint8)[::2]
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.execute({X: x, r: torch.empty(3, 1)}, ws),
        "execute 'ws'",
        "contiguous",
    )


def test_workspace_of_another_dtype_is_bytes(rng):
    g, X, r, x = _split_graph(rng)
    need = g.get_workspace_size()
    ws = torch.full(((need + 3) // 4,), float("nan"))  # float32 storage, enough bytes
    out = torch.full((3, 1), float("nan"))
    g.execute({X: x, r: out}, ws)
    assert_close(out, x.double().sum(1, keepdim=True), torch.float32, n=64)


def test_execute_before_build(rng):
    g = cudnn.pygraph()
    x = rng.rand((3, 4))
    X = g.tensor_like(x)
    y = g.exp(X)
    y.set_output(True)
    g.validate()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NOT_FINALIZED,
        lambda: g.execute({X: x, y: _out()}, None),
        "graph",
        "build",
    )


def test_plan_index_out_of_range(rng):
    g, (A, B, S, y, _), (a, b, s), _w = _problem(rng)
    n = g.get_execution_plan_count()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        lambda: g.execute_plan_at_index({A: a, B: b, S: s, y: _out()}, None, n),
        "graph",
        f"plan index {n}",
    )
    for query in (
        g.get_plan_name_at_index,
        g.get_workspace_size_plan_at_index,
        g.build_plan_at_index,
        g.get_behavior_notes_for_plan_at_index,
    ):
        expect_error(
            BadParamError,
            Status.BAD_PARAM_OUT_OF_BOUND,
            lambda: query(-1),
            "graph",
            "plan index -1",
        )


def test_disjoint_interleaved_views_are_not_aliasing(rng):
    """Input and output are column blocks of one buffer: their address ranges interleave,
    but no element is shared, so this is not in-place."""
    base = rng.rand((3, 8))
    a = base[:, :4].clone()
    g = cudnn.pygraph()
    A = g.tensor_like(base[:, :4])
    y = g.exp(g.neg(A))
    y.set_output(True).set_stride([8, 1])
    g.build([HeurMode.A])
    g.execute({A: base[:, :4], y: base[:, 4:]}, None)
    assert_close(base[:, 4:], torch.exp(-a.double()), torch.float32)
    assert torch.equal(base[:, :4], a)


def test_two_outputs_bound_to_one_buffer(rng):
    x = rng.rand((3, 4))
    g = cudnn.pygraph(name="two")
    X = g.tensor_like(x)
    y1 = g.exp(X)
    y1.set_output(True).set_name("y1")
    y2 = g.neg(y1)
    y2.set_output(True).set_name("y2")
    g.build([HeurMode.A])
    buf = torch.empty(3, 4)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.execute({X: x, y1: buf, y2: buf}, None),
        "execute 'two'",
        "'y1'",
        "'y2'",
    )


def test_same_layout_views_that_share_elements_are_aliasing(rng):
    """Rows of 5 in a pitch of 8: the view 6 elements further on shares elements with the
    first one (out[0, 2] is x[1, 0]), so a multi-node graph may not write it."""
    base = rng.rand((40,))
    x = base.as_strided((3, 5), (8, 1), 0)
    out = base.as_strided((3, 5), (8, 1), 6)
    assert out[0, 2].data_ptr() == x[1, 0].data_ptr()
    g = cudnn.pygraph(name="alias")
    X = g.tensor_like(x, name="x")
    y = g.exp(g.neg(X))
    y.set_output(True).set_stride([8, 1]).set_name("y")
    g.build([HeurMode.A])
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.execute({X: x, y: out}, None),
        "execute 'alias'",
        "'y'",
        "'x'",
        "in place",
    )


def test_single_transpose_into_its_own_input_buffer_is_rejected():
    """A non-pointwise node reading and writing one buffer would race on a GPU."""
    base = torch.randn(16)
    g = cudnn.pygraph()
    x = g.tensor(dim=[4, 4], stride=[4, 1], data_type=cudnn.data_type.FLOAT, name="x")
    y = g.transpose(x, [1, 0]).set_output(True).set_name("y")
    g.build([cudnn.heur_mode.A])
    with pytest.raises(BadParamError) as e:
        g.execute({x: base, y: base})
    assert (
        e.value.status == Status.BAD_PARAM and "'y'" in str(e.value) and "in place" in str(e.value)
    )


def test_single_pointwise_node_in_place_on_identical_buffer_runs():
    base = torch.randn(4, 5)
    want = torch.relu(base.double())
    g = cudnn.pygraph()
    x = g.tensor_like(base, name="x")
    y = g.relu(x).set_output(True)
    g.build([cudnn.heur_mode.A])
    g.execute({x: base, y: base})
    assert torch.equal(base.double(), want)


def test_pointwise_output_takes_its_input_strides(rng):
    """cudnn-frontend's inference: a pointwise output takes the strides of its first input
    of the same dims as they are, so a slice can be written in place (RoPE on a column
    slice of a wider tensor); a broadcast (stride-0) input lends only its stride order."""
    g = cudnn.pygraph()
    base = rng.rand((4, 10))
    x = base[:, 2:6]  # dims (4, 4), strides (10, 1)
    X = g.tensor_like(x)
    y = g.neg(X)
    y.set_output(True)
    g.build([HeurMode.A])
    assert y.get_stride() == [10, 1]
    expect = -x.clone()
    g.execute({X: x, y: x}, None)
    assert torch.equal(base[:, 2:6], expect)
    g = cudnn.pygraph()
    B = g.tensor([4, 4], [0, 1], DataType.FLOAT, name="b")
    y2 = g.neg(B)
    y2.set_output(True)
    g.validate()
    assert sorted(y2.get_stride()) == [1, 4]  # packed, no zero stride


def test_unused_graph_tensor_in_the_pack_is_ignored(rng):
    """A tensor the graph made but no node used never gets a uid; cuDNN ignores such an
    entry (cudnn-frontend's instance-norm test passes its unused epsilon), while a uid
    the graph does not know is still refused."""
    g = cudnn.pygraph()
    x = rng.rand((3, 4))
    X = g.tensor_like(x)
    unused = g.tensor_like(torch.full((1, 1, 1, 1), 1e-5))
    y = g.neg(X)
    y.set_output(True)
    g.build([HeurMode.A])
    assert unused.get_uid() == -1
    out = _out()
    g.execute({X: x, y: out, unused: torch.full((1, 1, 1, 1), 1e-5)}, None)
    assert torch.equal(out, -x)
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g.execute({X: x, y: _out(), 999: x}, None),
        "uid 999 is not a tensor of this graph",
    )


def test_buffer_differing_in_size_one_dims_binds(rng):
    """[4, 64, 64] bound to a [4, 1, 64, 64] descriptor whose size-1 dim has stride 1
    (cudnn-frontend's reduction output): the same elements; a [4, 3] buffer for [3, 4]
    stays refused (test_wrong_shape_with_the_same_element_count)."""
    g = cudnn.pygraph()
    x = rng.rand((4, 6, 5))
    X = g.tensor_like(x)
    y = g.reduction(X, mode=ReductionMode.ADD, compute_data_type=DataType.FLOAT)
    y.set_dim([4, 1, 5]).set_stride([5, 1, 1]).set_output(True)
    g.build([HeurMode.A])
    out = torch.full((4, 5), float("nan"))
    g.execute({X: x, y: out}, None)
    assert_close(out, x.double().sum(1), torch.float32, n=6)


def test_workspace_as_a_raw_pointer(rng):
    """execute(pack, workspace.data_ptr()) (cudnn-frontend's pointer form): the plan's
    bytes at that address; a null-like pointer is refused."""
    g = cudnn.pygraph(intermediate_data_type=DataType.FLOAT)
    x, w = rng.rand((2, 3, 6, 6)), rng.rand((4, 3, 3, 3))
    X, W = g.tensor_like(x), g.tensor_like(w)
    y = g.conv_fprop(X, W, padding=[1, 1])
    y.set_output(True)
    g.validate()
    g.create_execution_plan(6, {})  # the explicit GEMM: an im2col workspace
    need = g.get_workspace_size()
    assert need > 0
    ws = torch.zeros(need, dtype=torch.uint8)
    out = torch.full((2, 4, 6, 6), float("nan"))
    g.execute({X: x, W: w, y: out}, ws.data_ptr())
    ref = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    assert_close(out, ref, torch.float32, n=27)
    assert ws.any()  # the im2col matrix landed there
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NULL_POINTER,
        lambda: g.execute({X: x, W: w, y: out}, 4096),
        "workspace pointer",
    )


def test_cpu_scalar_tensor_is_pass_by_value_on_a_gpu_graph(monkeypatch):
    """tensor_like of a one-element CPU tensor of any rank ((1, 1, 1, 1) epsilon) is a
    host scalar whatever device the graph runs on (cudnn-frontend: CPU tensors are
    pass-by-value)."""
    g = cudnn.pygraph()
    monkeypatch.setattr(g, "_device", lambda: torch.device("cuda", 0))
    e = g.tensor_like(torch.full((1, 1, 1, 1), 1e-5))
    assert e.is_pass_by_value and e.value == pytest.approx(1e-5)
    assert not g.tensor_like(torch.ones(2, 1)).is_pass_by_value


def test_none_key_is_skipped(rng):
    """{bias: ...} where the optional bias was never made (``bias = None``): cudnn-frontend
    skips a null tensor, so does the binding."""
    g, (A, B, S, y, _), (a, b, s), want = _problem(rng)
    out = _out()
    g.execute({A: a, B: b, S: s, y: out, None: torch.zeros(3)}, None)
    assert_close(out, want, torch.float32)


def test_buffer_of_another_type_with_the_same_element_size_is_reinterpreted_aloud():
    """cuDNN binds pointers: a bfloat16 buffer bound to a HALF tensor runs on its bytes
    (cudnn-frontend's kernel-cache test does so). opendnn binds it too, reading the bytes
    as the descriptor's type, and warns; a buffer whose elements differ in size is refused
    (test_wrong_dtype)."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    X = g.tensor(name="x", dim=[2, 3], stride=[3, 1], data_type=cudnn.data_type.HALF)
    y = g.neg(X)
    y.set_output(True).set_data_type(cudnn.data_type.HALF)
    g.build([HeurMode.A])
    x = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, -0.25]], dtype=torch.bfloat16)
    out = torch.full((2, 3), float("nan"), dtype=torch.half)
    with pytest.warns(RuntimeWarning, match=r"tensor 'x'.*bfloat16.*read as.*HALF"):
        g.execute({X: x, y: out}, None)
    assert torch.equal(out, -x.view(torch.half))
