"""Descriptors, enums, errors and the graph tensor handle (no kernels run here)."""

from __future__ import annotations

import dataclasses
import enum
import json

import numpy as np
import pytest
import torch
from _util import expect_error

import opendnn
import opendnn.frontend as cudnn
from opendnn.enums import DataType
from opendnn.errors import (
    BadParamError,
    GraphNotSupportedError,
    OpenDNNError,
    Status,
    get_error_string,
    get_last_error_string,
)
from opendnn.tensor import (
    TensorDesc,
    as_data_type,
    nchw_strides,
    nhwc_strides,
    packed_strides,
    to_torch_dtype,
)


# ---- layout helpers ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dims", [(7,), (3, 5), (2, 3, 5, 7), (1, 4, 1, 3), (2, 0, 3), (2, 3, 4, 5, 6)]
)
def test_packed_strides_match_torch_contiguous(dims):
    assert packed_strides(dims) == torch.empty(dims).stride()
    assert nchw_strides(dims) == torch.empty(dims).stride()


@pytest.mark.parametrize("dims", [(2, 3, 5, 7), (1, 3, 1, 1), (3, 1, 4, 5)])
def test_nhwc_strides_match_torch_channels_last(dims):
    want = torch.empty(dims).contiguous(memory_format=torch.channels_last).stride()
    got = nhwc_strides(dims)
    # strides of size-1 dims are arbitrary; compare where the dim is > 1
    assert [g for g, d in zip(got, dims) if d > 1] == [w for w, d in zip(want, dims) if d > 1]
    assert not TensorDesc(dims, got, DataType.FLOAT, 1).has_overlap()


@pytest.mark.parametrize("dims", [(2, 3, 5, 7), (1, 3, 1, 1), (3, 1, 4, 5), (3, 1)])
def test_is_packed_true_for_dense_layouts_with_size_one_dims(dims):
    # "True when elements occupy exactly numel distinct, dense positions": a channels-last
    # tensor with C == 1 (strides (20, 1, 5, 1) for dims (3, 1, 4, 5)) is dense.
    for strides in (
        nchw_strides(dims),
        nhwc_strides(dims),
        torch.empty(dims).contiguous(memory_format=torch.channels_last).stride()
        if len(dims) == 4
        else nchw_strides(dims),
    ):
        assert TensorDesc(dims, strides, DataType.FLOAT, 1).is_packed(), (dims, strides)


def test_nhwc_strides_5d_match_channels_last_3d():
    dims = (2, 3, 4, 5, 6)
    want = torch.empty(dims).contiguous(memory_format=torch.channels_last_3d).stride()
    assert nhwc_strides(dims) == want


# ---- TensorDesc ------------------------------------------------------------------------------
def test_desc_properties_packed():
    d = TensorDesc((2, 3, 4), (12, 4, 1), DataType.HALF, 7, "x")
    assert d.numel == 24 and d.ndim == 3 and d.span == 24
    assert d.size_in_bytes == 48
    assert d.torch_dtype == torch.float16
    assert d.is_packed() and not d.has_overlap()
    assert d.label() == "x"
    assert TensorDesc((2,), (1,), DataType.FLOAT, 9).label() == "uid 9"


def test_desc_span_of_strided_view_and_zero_size():
    base = torch.empty(6, 10)
    v = base[1:5:2, 3:8]  # dims (2, 5), strides (20, 1)
    d = TensorDesc(tuple(v.shape), v.stride(), DataType.FLOAT, 1)
    assert d.span == 1 + 1 * 20 + 4 * 1
    assert not d.is_packed() and not d.has_overlap()
    z = TensorDesc((3, 0, 2), (0, 2, 1), DataType.FLOAT, 2)
    assert z.numel == 0 and z.span == 0 and z.size_in_bytes == 0


def test_desc_transposed_is_packed_without_overlap():
    t = torch.empty(3, 5).t()
    d = TensorDesc(tuple(t.shape), t.stride(), DataType.FLOAT, 1)
    assert d.is_packed() and not d.has_overlap()


@pytest.mark.parametrize("dims,strides", [((4, 3), (0, 1)), ((2, 2), (1, 1)), ((3, 4), (2, 1))])
def test_desc_overlap_detected(dims, strides):
    assert TensorDesc(dims, strides, DataType.FLOAT, 1).has_overlap()


def test_desc_broadcast_size_one_zero_stride_is_not_overlap():
    assert not TensorDesc((1, 5), (0, 1), DataType.FLOAT, 1).has_overlap()


def test_desc_is_frozen_and_hashable():
    d = TensorDesc((2, 3), (3, 1), DataType.FLOAT, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.dims = (3, 2)
    assert hash(d) == hash(TensorDesc([2, 3], [3, 1], DataType.FLOAT, 1))
    assert d == TensorDesc([2, 3], [3, 1], DataType.FLOAT, 1)


def test_desc_json_round_trip():
    d = TensorDesc((2, 1, 5), (5, 5, 1), DataType.BFLOAT16, 4, "bias", False, False)
    assert TensorDesc.from_json(json.loads(json.dumps(d.to_json()))) == d
    s = TensorDesc((1,), (1,), DataType.FLOAT, 5, "eps", False, True)
    assert TensorDesc.from_json(s.to_json()).is_pass_by_value


@pytest.mark.parametrize(
    "dims,strides,status,frag",
    [
        ((2, -3), (3, 1), Status.BAD_PARAM_OUT_OF_BOUND, "negative dimension"),
        ((2, 3), (-3, 1), Status.BAD_PARAM_OUT_OF_BOUND, "negative stride"),
        ((2,) * 9, (1,) * 9, Status.BAD_PARAM_OUT_OF_BOUND, "9 dimensions"),
        ((), (), Status.BAD_PARAM_OUT_OF_BOUND, "0 dimensions"),
        ((2, 3), (1,), Status.BAD_PARAM_SHAPE_MISMATCH, "1 strides for 2 dimensions"),
    ],
)
def test_desc_rejects_bad_dims_and_strides(dims, strides, status, frag):
    e = expect_error(
        BadParamError,
        status,
        lambda: TensorDesc(dims, strides, DataType.FLOAT, 3, "x"),
        "'x'",
        frag,
    )
    assert isinstance(e, ValueError)


def test_desc_rejects_unset_type():
    expect_error(
        BadParamError,
        Status.BAD_PARAM_NOT_FINALIZED,
        lambda: TensorDesc((2,), (1,), DataType.NOT_SET, 3, "y"),
        "'y'",
        "data type",
    )


def test_desc_eight_dims_allowed():
    d = TensorDesc((1, 2) * 4, packed_strides((1, 2) * 4), DataType.FLOAT, 1)
    assert d.ndim == 8


# ---- data types ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value,want",
    [
        (DataType.HALF, DataType.HALF),
        (torch.float16, DataType.HALF),
        (torch.bfloat16, DataType.BFLOAT16),
        (torch.float32, DataType.FLOAT),
        (torch.bool, DataType.BOOLEAN),
        (torch.int32, DataType.INT32),
        ("half", DataType.HALF),
        ("FLOAT", DataType.FLOAT),
        (int(DataType.DOUBLE), DataType.DOUBLE),
        (cudnn.data_type.BFLOAT16, DataType.BFLOAT16),
    ],
)
def test_as_data_type_accepts_enum_torch_name_int(value, want):
    assert as_data_type(value) == want


class _Foreign(enum.Enum):
    FLOAT = 0
    COMPLEX = 1


@pytest.mark.parametrize("value", ["float17", torch.complex64, object(), _Foreign.COMPLEX])
def test_as_data_type_rejects_unknown(value):
    with pytest.raises(BadParamError):
        as_data_type(value)


def test_as_data_type_foreign_enum_by_name():
    assert as_data_type(_Foreign.FLOAT) == DataType.FLOAT
    with pytest.raises(BadParamError, match="_Foreign.COMPLEX names no data type"):
        as_data_type(_Foreign.COMPLEX)


def test_data_type_itemsize_and_torch_round_trip():
    for dt in (
        DataType.FLOAT,
        DataType.DOUBLE,
        DataType.HALF,
        DataType.BFLOAT16,
        DataType.INT8,
        DataType.INT32,
        DataType.INT64,
        DataType.UINT8,
        DataType.BOOLEAN,
    ):
        t = to_torch_dtype(dt)
        assert torch.empty((), dtype=t).element_size() == dt.itemsize
        assert as_data_type(t) == dt
    assert DataType.HALF.is_floating and not DataType.INT8.is_floating


def test_to_torch_dtype_rejects_not_set():
    expect_error(
        BadParamError,
        Status.NOT_SUPPORTED_DATA_TYPE,
        lambda: to_torch_dtype(DataType.NOT_SET),
        "NOT_SET",
    )


# ---- errors ----------------------------------------------------------------------------------
def test_status_numbers_and_categories():
    assert Status.BAD_PARAM == 2000 and Status.NOT_SUPPORTED == 3000
    assert Status.INTERNAL_ERROR == 4000 and Status.EXECUTION_FAILED == 5000
    assert Status.BAD_PARAM_SHAPE_MISMATCH.category == Status.BAD_PARAM
    assert Status.NOT_SUPPORTED_DATA_TYPE.category == Status.NOT_SUPPORTED
    assert get_error_string(Status.BAD_PARAM_NULL_POINTER) == "CUDNN_STATUS_BAD_PARAM_NULL_POINTER"
    assert get_error_string(0) == "CUDNN_STATUS_SUCCESS"


def test_error_message_names_status_op_tensor_rule():
    e = BadParamError(
        "inner dimension 5 != 7",
        op="matmul 'mm0'",
        tensor="B",
        status=Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    assert str(e) == "BAD_PARAM_SHAPE_MISMATCH: matmul 'mm0': tensor 'B': inner dimension 5 != 7"
    assert isinstance(e, ValueError) and isinstance(e, OpenDNNError)
    assert (e.op, e.tensor, e.rule) == ("matmul 'mm0'", "B", "inner dimension 5 != 7")
    assert get_last_error_string() == str(e)
    assert cudnn.get_last_error_string() == str(e)


def test_graph_not_supported_error_lists_reasons():
    e = GraphNotSupportedError("no engine", reasons={"eng_a": "too big", "eng_b": "no fp8"})
    assert e.status == Status.NOT_SUPPORTED
    assert "eng_a: too big" in str(e) and "eng_b: no fp8" in str(e)
    assert not isinstance(e, ValueError)
    assert cudnn.cudnnGraphNotSupportedError is GraphNotSupportedError


# ---- graph tensor handle --------------------------------------------------------------------
def test_tensor_setters_chain_and_getters():
    g = cudnn.pygraph()
    t = g.tensor(dim=[2, 3], stride=[3, 1], data_type=cudnn.data_type.HALF, name="x")
    assert (
        t.set_name("y")
        .set_uid(17)
        .set_dim([4, 5])
        .set_stride([1, 4])
        .set_data_type(torch.bfloat16)
        .set_is_pass_by_value(False)
        .set_is_virtual(False)
        is t
    )
    assert t.get_name() == "y" and t.get_uid() == 17
    assert t.get_dim() == [4, 5] and t.get_stride() == [1, 4]
    assert t.get_data_type() == DataType.BFLOAT16
    assert not t.get_is_virtual() and not t.get_is_pass_by_value()
    d = json.loads(repr(t))
    assert d == {
        "name": "y",
        "uid": 17,
        "dim": [4, 5],
        "stride": [1, 4],
        "data_type": "BFLOAT16",
        "is_virtual": False,
        "is_pass_by_value": False,
    }
    assert t.set_output(True) is t and not t.get_is_virtual()
    assert t.set_output(False).get_is_virtual()


def test_tensor_is_hashable_by_identity():
    g = cudnn.pygraph()
    a = g.tensor([2], [1], DataType.FLOAT)
    b = g.tensor([2], [1], DataType.FLOAT)
    assert len({a: 1, b: 2}) == 2


def test_tensor_like_copies_dims_strides_type_of_views():
    g = cudnn.pygraph()
    base = torch.empty(6, 10, dtype=torch.float16)
    v = base[1:5:2, 3:8]
    t = g.tensor_like(v, name="v")
    assert t.get_dim() == [2, 5] and t.get_stride() == [20, 1]
    assert t.get_data_type() == DataType.HALF and t.get_name() == "v"
    tt = g.tensor_like(torch.empty(3, 5).t())
    assert tt.get_dim() == [5, 3] and tt.get_stride() == [1, 5]
    cl = g.tensor_like(torch.empty(2, 3, 4, 5).contiguous(memory_format=torch.channels_last))
    assert cl.get_stride() == [60, 1, 15, 3]
    z = g.tensor_like(torch.empty(3, 0, 2))
    assert z.get_dim() == [3, 0, 2]
    assert not t.get_is_pass_by_value() and not z.get_is_pass_by_value()


def test_tensor_like_scalar_is_pass_by_value():
    g = cudnn.pygraph()
    s = g.tensor_like(torch.tensor(0.5))
    assert s.get_is_pass_by_value() and s.get_dim() == [1] and s.value == 0.5
    one = g.tensor_like(torch.full((1, 1, 1), 3.0))  # single element on a CPU graph
    assert one.get_is_pass_by_value()


def test_tensor_like_of_graph_tensor_and_numpy():
    g = cudnn.pygraph()
    a = g.tensor([2, 3], [1, 2], DataType.HALF, name="a")
    b = g.tensor_like(a)
    assert (b.get_dim(), b.get_stride(), b.get_data_type()) == ([2, 3], [1, 2], DataType.HALF)
    c = g.tensor_like(np.zeros((4, 5), dtype=np.float32))
    assert c.get_dim() == [4, 5] and c.get_data_type() == DataType.FLOAT


def test_tensor_like_rejects_non_tensor():
    g = cudnn.pygraph()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.tensor_like([1.0, 2.0], name="lst"),
        "tensor_like",
        "'lst'",
    )


def test_op_rejects_tensor_of_another_graph():
    g1, g2 = cudnn.pygraph(), cudnn.pygraph()
    a = g1.tensor([2], [1], DataType.FLOAT, name="foreign")
    expect_error(
        BadParamError,
        Status.BAD_PARAM,
        lambda: g2.relu(a, name="my_relu"),
        "my_relu",
        "foreign",
        "another graph",
    )


def test_op_rejects_non_tensor_argument():
    g = cudnn.pygraph()
    expect_error(
        BadParamError,
        Status.BAD_PARAM_ATTRIBUTE_TYPE,
        lambda: g.reduction("not a tensor", cudnn.reduction_mode.ADD, name="red"),
        "red",
    )


# ---- frontend module surface -------------------------------------------------------------------
def test_frontend_module_surface():
    assert cudnn.backend_version() == opendnn.BACKEND_VERSION == 91900
    assert cudnn.backend_version_string() == "9.19.0"
    for name in (
        "FLOAT",
        "DOUBLE",
        "HALF",
        "BFLOAT16",
        "INT8",
        "INT32",
        "INT64",
        "UINT8",
        "BOOLEAN",
        "FP8_E4M3",
        "FP8_E5M2",
        "NOT_SET",
    ):
        assert hasattr(cudnn.data_type, name)
    assert {m.name for m in cudnn.heur_mode} >= {"A", "B", "FALLBACK"}
    assert {m.name for m in cudnn.build_plan_policy} == {"HEURISTICS_CHOICE", "ALL"}
    assert {m.name for m in cudnn.reduction_mode} == {
        "ADD",
        "MUL",
        "MIN",
        "MAX",
        "AMAX",
        "AVG",
        "NORM1",
        "NORM2",
        "MUL_NO_ZEROS",
    }
    h = cudnn.create_handle("cpu")
    cudnn.set_stream(handle=h, stream=None)
    assert cudnn.get_stream(h) is None
    cudnn.destroy_handle(h)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error path")
def test_cuda_handle_without_a_gpu_is_rejected():
    expect_error(
        BadParamError,
        Status.NOT_INITIALIZED,
        lambda: cudnn.create_handle("cuda"),
        "create_handle",
        "CUDA",
    )
