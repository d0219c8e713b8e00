"""Bad buffers in a variant pack or workspace: one test per rule (exception type, status,
and a message naming the operation, the tensor and the rule), plus the valid neighbours
that must keep running."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from _util import FUSION_ID, REFERENCE_ID, expect_error

import opendnn.frontend as cudnn
from opendnn.enums import DataType, HeurMode, ReductionMode
from opendnn.errors import BadParamError, Status
from opendnn.runtime import buffers
from opendnn.tensor import TensorDesc

F = DataType.FLOAT
OP = "execute 'g'"


def _exp_graph(engine_id=None):
    """y = exp(x), x and y [2, 3] float."""
    g = cudnn.pygraph(name="g")
    x = g.tensor([2, 3], [3, 1], F, name="x")
    y = g.exp(x, name="e").set_output(True).set_name("y")
    if engine_id is None:
        g.build([HeurMode.A])
    else:
        g.validate()
        g.create_execution_plan(engine_id, {})
    return g, x, y


def _scale_graph(data_type=F):
    """y = x * s with a pass-by-value s of ``data_type``."""
    g = cudnn.pygraph(name="g")
    x = g.tensor([2, 3], [3, 1], F, name="x")
    s = g.tensor([1], [1], data_type, is_pass_by_value=True, name="s")
    y = g.mul(x, s, name="mul").set_output(True).set_name("y")
    g.build([HeurMode.A])
    return g, x, s, y


# ---- NumPy arrays torch cannot view -------------------------------------------------------
@pytest.mark.parametrize(
    "array",
    [
        np.zeros((2, 3), object),
        np.zeros((2, 3), "datetime64[s]"),
        np.zeros((2, 3), [("a", np.float32)]),
        np.zeros((2, 3), ">f4"),
        np.zeros((2, 3), np.float32)[::-1],
    ],
    ids=["object", "datetime", "structured", "big_endian", "negative_stride"],
)
def test_numpy_array_torch_cannot_view(array):
    g, x, y = _exp_graph()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.execute({x: array, y: torch.empty(2, 3)}),
        OP,
        "tensor 'x'",
        "cannot view a NumPy array",
    )


@pytest.mark.parametrize(
    "array",
    [np.zeros(64, object), np.zeros(128, np.uint8)[::-2]],
    ids=["object", "negative_stride"],
)
def test_numpy_workspace_torch_cannot_view(array):
    g = cudnn.pygraph(name="ws")
    x = g.tensor([3, 64], [64, 1], F, name="x")
    r = g.reduction(x, ReductionMode.ADD, name="sum").set_output(True).set_name("r")
    r.set_dim([3, 1])
    g.validate()
    g.create_execution_plan(FUSION_ID, {"SPLIT": 4, "BLOCK_RED": 8, "BLOCK_KEPT": 4})
    assert 0 < g.get_workspace_size() <= 64
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.execute({x: torch.rand(3, 64), r: torch.empty(3, 1)}, array),
        "execute 'ws'",
        "workspace NumPy array",
        "cannot view",
    )


def test_numpy_array_at_a_misaligned_address():
    g, x, y = _exp_graph()
    raw = np.zeros(6 * 4 + 1, np.uint8)
    odd = np.frombuffer(raw.data, dtype=np.float32, count=6, offset=1).reshape(2, 3)
    for pack in ({x: odd, y: torch.empty(2, 3)}, {x: torch.rand(2, 3), y: odd}):
        expect_error(
            BadParamError,
            Status.BAD_PARAM_MISALIGNED_POINTER,
            lambda: g.execute(pack),
            OP,
            "not aligned",
            "FLOAT",
        )


# ---- pass-by-value values -----------------------------------------------------------------
def test_pass_by_value_bool_for_a_float_scalar():
    g, x, s, y = _scale_graph()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.execute({x: torch.ones(2, 3), s: True, y: torch.empty(2, 3)}),
        OP,
        "tensor 's'",
        "bool",
        "FLOAT",
    )


def test_pass_by_value_tensor_not_on_the_host():
    g, x, s, y = _scale_graph()
    meta = torch.ones(1, device="meta")
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.execute({x: torch.ones(2, 3), s: meta, y: torch.empty(2, 3)}),
        OP,
        "tensor 's'",
        "CPU tensor",
        "meta",
    )


def test_pass_by_value_is_converted_to_the_descriptor_type():
    g, x, s, y = _scale_graph()
    xs = torch.rand(2, 3)
    for v in (torch.tensor([3]), 3, np.int64(3), np.float32(3.0), torch.tensor(3.0)):
        out = torch.full((2, 3), float("nan"))
        g.execute({x: xs, s: v, y: out})
        assert torch.equal(out, xs * 3), v
    desc = g.op_graph.tensors[s.get_uid()]
    assert type(buffers.scalar_value(torch.tensor([3]), desc, OP)) is float


def test_pass_by_value_integer_scalar_rules():
    g, x, s, y = _scale_graph(DataType.INT32)
    desc = g.op_graph.tensors[s.get_uid()]
    assert buffers.scalar_value(np.float64(4.0), desc, OP) == 4
    assert type(buffers.scalar_value(torch.tensor(4.0), desc, OP)) is int
    for bad, status, rule in (
        (2.5, Status.BAD_PARAM_ATTRIBUTE_TYPE, "INT32"),
        (float("nan"), Status.BAD_PARAM_ATTRIBUTE_TYPE, "INT32"),
        (True, Status.BAD_PARAM_ATTRIBUTE_TYPE, "bool"),
        (2**40, Status.BAD_PARAM_OUT_OF_BOUND, "range"),
    ):
        expect_error(
            BadParamError,
            status,
            lambda: buffers.scalar_value(bad, desc, OP),
            OP,
            "tensor 's'",
            rule,
        )


def test_pass_by_value_bool_for_a_boolean_scalar():
    desc = TensorDesc((1,), (1,), DataType.BOOLEAN, uid=1, name="s", is_pass_by_value=True)
    assert buffers.scalar_value(True, desc, OP) is True
    assert buffers.scalar_value(np.bool_(False), desc, OP) is False
    expect_error(
        BadParamError,
        Status.BAD_PARAM_OUT_OF_BOUND,
        lambda: buffers.scalar_value(2, desc, OP),
        OP,
        "tensor 's'",
        "range",
    )


# ---- raw integer pointers -----------------------------------------------------------------
@pytest.mark.parametrize(
    "ptr,status,rule",
    [
        (2**70, Status.BAD_PARAM_OUT_OF_BOUND, "64-bit address space"),
        (-4096, Status.BAD_PARAM_OUT_OF_BOUND, "64-bit address space"),
        (0x1000, Status.BAD_PARAM_NULL_POINTER, "first 64 KiB"),
        (0, Status.BAD_PARAM_NULL_POINTER, "null pointer"),
    ],
    ids=["huge", "negative", "low", "null"],
)
def test_raw_pointer_that_cannot_be_an_address(ptr, status, rule):
    g, x, y = _exp_graph()
    for pack in ({x: ptr, y: torch.empty(2, 3)}, {x: torch.rand(2, 3), y: ptr}):
        name = "tensor 'x'" if pack[x] is ptr else "tensor 'y'"
        expect_error(BadParamError, status, lambda: g.execute(pack), OP, name, rule)


@pytest.mark.parametrize("offset", [1, 2])
def test_raw_pointer_misaligned(offset):
    g, x, y = _exp_graph()
    xs, out = torch.rand(2, 3), torch.full((2, 3), float("nan"))
    before = out.clone()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_MISALIGNED_POINTER,
        lambda: g.execute({x: xs.data_ptr() + offset, y: out}),
        OP,
        "tensor 'x'",
        "not aligned",
        "4-byte FLOAT",
    )
    expect_error(
        BadParamError,
        Status.BAD_PARAM_MISALIGNED_POINTER,
        lambda: g.execute({x: xs, y: out.data_ptr() + offset}),
        OP,
        "tensor 'y'",
        "not aligned",
    )
    assert torch.equal(out.isnan(), before.isnan())  # nothing was written


def test_raw_pointers_aligned_still_run():
    g, x, y = _exp_graph()
    xs, out = torch.rand(2, 3), torch.full((2, 3), float("nan"))
    g.execute({x: np.int64(xs.data_ptr()), y: out.data_ptr()})
    torch.testing.assert_close(out, xs.exp())


# ---- outputs that require grad -----------------------------------------------------------
@pytest.mark.parametrize("engine_id", [FUSION_ID, REFERENCE_ID])
@pytest.mark.parametrize("kind", ["parameter", "requires_grad"])
def test_output_requiring_grad_is_written_in_place(engine_id, kind):
    g, x, y = _exp_graph(engine_id)
    xs = torch.rand(2, 3)
    out = torch.full((2, 3), float("nan"))
    out = torch.nn.Parameter(out) if kind == "parameter" else out.requires_grad_(True)
    g.execute({x: xs, y: out})
    torch.testing.assert_close(out.detach(), xs.exp())
    assert out.requires_grad and out.grad_fn is None


# ---- devices -------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["x", "y", "both"])
def test_meta_buffer_is_named(which):
    g, x, y = _exp_graph()
    xs = torch.rand(2, 3, device="meta" if which != "y" else "cpu")
    out = torch.empty(2, 3, device="meta" if which != "x" else "cpu")
    name = "tensor 'y'" if which == "y" else "tensor 'x'"
    expect_error(
        BadParamError, Status.BAD_PARAM, lambda: g.execute({x: xs, y: out}), OP, name, "meta device"
    )
    # the meta buffer first in the pack is the one blamed, not the good one after it
    if which == "y":
        expect_error(
            BadParamError,
            Status.BAD_PARAM,
            lambda: g.execute({y: out, x: xs}),
            OP,
            name,
            "meta device",
        )


def test_meta_handle_is_refused():
    g, x, y = _exp_graph()
    with pytest.raises(BadParamError) as e:
        g.execute({x: torch.rand(2, 3), y: torch.empty(2, 3)}, handle=cudnn.create_handle("meta"))
    assert e.value.status == Status.BAD_PARAM and "meta" in str(e.value)


def _default_device(monkeypatch, device):
    """Pretend the process default handle (the one used when none is given) is on ``device``."""
    monkeypatch.setattr(
        buffers, "default_handle", lambda: types.SimpleNamespace(device=torch.device(device))
    )


def test_buffer_off_an_explicit_handle_device(monkeypatch):
    """A handle on another device than the process default binds every buffer."""
    _default_device(monkeypatch, "cpu")
    g, x, y = _exp_graph()
    pack = {x: torch.rand(2, 3), y: torch.empty(2, 3)}
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: buffers.bind(g.op_graph, pack, OP, torch.device("cuda", 0)),
        OP,
        "tensor 'x'",
        "buffer is on cpu",
        "handle's device is cuda:0",
    )


def test_pack_wholly_off_the_default_device_runs_there(monkeypatch):
    """Without a handle, CPU tensors on a GPU machine run on the CPU, as before."""
    _default_device(monkeypatch, "cuda:0")
    g, x, y = _exp_graph()
    xs, out = torch.rand(2, 3), torch.full((2, 3), float("nan"))
    bound, device = buffers.bind(g.op_graph, {x: xs, y: out}, OP, torch.device("cuda", 0))
    assert device == torch.device("cpu") and bound[y.get_uid()] is out


@pytest.mark.parametrize("order", ["pointer_first", "tensor_first"])
def test_split_pack_names_the_buffer_off_the_handle_device(monkeypatch, order):
    """A raw pointer binds on the handle's device (cuda:0); the CPU tensor beside it is the
    one out of place, whichever comes first in the pack."""
    _default_device(monkeypatch, "cuda:0")
    g, x, y = _exp_graph()
    xs, out = torch.rand(2, 3), torch.empty(2, 3)
    pack = {y: out.data_ptr(), x: xs} if order == "pointer_first" else {x: xs, y: out.data_ptr()}
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: buffers.bind(g.op_graph, pack, OP, torch.device("cuda", 0)),
        OP,
        "tensor 'x'",
        "buffer is on cpu",
        "'y' is on the handle's device cuda:0",
    )
