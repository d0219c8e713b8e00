"""cudnn-frontend's module-level API on ``opendnn.frontend``: versions, enums, ``knob``,
the kernel cache, device properties, the pygraph constructor's ahead-of-time arguments
and the ``graph`` / ``jit`` / ``graph_cache`` helpers."""

import json
import re

import pytest
import torch

import opendnn
import opendnn.frontend as cudnn
from opendnn.errors import BadParamError, GraphNotSupportedError, Status

# cudnn-frontend's module-level names (its cudnn/__init__.py and graph.py), less the
# Graph wrapper class, which opendnn does not have yet
FRONTEND_NAMES = [
    "backend_version",
    "backend_version_string",
    "get_last_error_string",
    "destroy_handle",
    "norm_forward_phase",
    "reduction_mode",
    "behavior_note",
    "knob_type",
    "create_handle",
    "create_kernel_cache",
    "create_device_properties",
    "get_stream",
    "numerical_note",
    "set_stream",
    "build_plan_policy",
    "data_type",
    "tensor_reordering",
    "heur_mode",
    "pygraph",
    "tensor",
    "knob",
    "cudnnGraphNotSupportedError",
    "diagonal_alignment",
    "attention_implementation",
    "moe_grouped_matmul_mode",
    "scalar_type",
    "reshape_mode",
    "graph",
    "jit",
    "graph_cache",
    "__version__",
]

ENUMS = {
    "knob_type": "NOT_SET SWIZZLE TILE_SIZE EDGE MULTIPLY SPLIT_K_BUF TILEK STAGES "
    "REDUCTION_MODE SPLIT_K_SLC IDX_MODE SPECFILT KERNEL_CFG WORKSPACE TILE_CGA_M TILE_CGA_N "
    "BLOCK_SIZE OCCUPANCY ARRAY_SIZE_PER_THREAD SPLIT_COLS TILE_ROWS TILE_COLS LOAD_SIZE "
    "CTA_COUNT STREAM_K SPLIT_P_SLC TILE_M TILE_N WARP_SPEC_CFG",
    "tensor_reordering": "NONE INT8x32 F16x16 F8_128x4",
    "attention_implementation": "AUTO COMPOSITE UNIFIED",
    "moe_grouped_matmul_mode": "NONE GATHER SCATTER",
    "scalar_type": "RUNTIME_PARAM COMPILE_TIME_CONST",
    "reshape_mode": "VIEW_ONLY LOGICAL",
    "behavior_note": "RUNTIME_COMPILATION REQUIRES_FILTER_INT8x32_REORDER "
    "REQUIRES_BIAS_INT8x32_REORDER SUPPORTS_CUDA_GRAPH_NATIVE_API CUBLASLT_DEPENDENCY",
}

H100 = {
    "device": "cuda",
    "name": "NVIDIA H100 80GB HBM3",
    "capability": [9, 0],
    "num_sms": 132,
    "peak_flops_fp16": 7.1e14,
    "peak_flops_fp32": 5e13,
    "bandwidth": 3e12,
}


def test_every_module_level_name():
    missing = [n for n in FRONTEND_NAMES if not hasattr(cudnn, n)]
    assert not missing, missing


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_enum_members_are_cudnn_frontends(name):
    assert [m.name for m in getattr(cudnn, name)] == ENUMS[name].split()


def test_versions_compare_as_cudnns():
    """backend_version_string() is dotted numbers, so version gates (LooseVersion,
    tuples) compare it; opendnn's own version stays on the package."""
    v = tuple(int(p) for p in cudnn.backend_version_string().split("."))
    assert v == (9, 19, 0) and v >= (9, 5, 0)
    assert cudnn.backend_version() == 91900
    assert cudnn.__version__ == "1.32.0"
    assert opendnn.__version__ != cudnn.__version__


def test_knob_reads_back_and_checks_types():
    k = cudnn.knob(cudnn.knob_type.TILE_SIZE, max_value=8, min_value=1, stride=1)
    assert (k.type, k.max_value, k.min_value, k.stride) == (cudnn.knob_type.TILE_SIZE, 8, 1, 1)
    assert json.loads(repr(k)) == {
        "knob_type": "TILE_SIZE",
        "max_value": 8,
        "min_value": 1,
        "stride": 1,
    }
    assert cudnn.knob().type == cudnn.knob_type.NOT_SET
    with pytest.raises(AttributeError):
        k.max_value = 3
    with pytest.raises(BadParamError, match="knob_type"):
        cudnn.knob("TILE")
    with pytest.raises(BadParamError, match="max_value"):
        cudnn.knob(cudnn.knob_type.STAGES, max_value=2.5)


def _matmul_graph(cache=None, **kw):
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, kernel_cache=cache, **kw)
    a = g.tensor(name="A", dim=[2, 8, 16], stride=[128, 16, 1])
    b = g.tensor(name="B", dim=[2, 16, 4], stride=[64, 4, 1])
    c = g.matmul(a, b)
    c.set_output(True)
    return g, a, b, c


def test_kernel_cache_records_and_reuses_the_plan():
    """A graph built with a cache records its plan; a graph of the same structure built
    with a cache holding another candidate's name takes that candidate first."""
    cache = cudnn.create_kernel_cache()
    g, *_ = _matmul_graph(cache)
    g.build([cudnn.heur_mode.A])
    assert len(cache) == 1
    first = g.get_plan_name_at_index(0)
    assert first in cache.serialize()

    probe, *_ = _matmul_graph()
    probe.validate()
    probe.create_execution_plans([cudnn.heur_mode.A])
    other = probe.get_plan_name_at_index(1)
    assert other != first
    doc = json.loads(cache.serialize())
    doc["entries"] = {k: other for k in doc["entries"]}
    steered = cudnn.create_kernel_cache()
    steered.deserialize(json.dumps(doc))
    g2, a, b, c = _matmul_graph(steered)
    g2.build([cudnn.heur_mode.A])
    assert g2.get_plan_name_at_index(0) == other
    x, y = torch.randn(2, 8, 16), torch.randn(2, 16, 4)
    out = torch.full((2, 8, 4), float("nan"))
    g2.execute({a: x, b: y, c: out}, torch.empty(g2.get_workspace_size(), dtype=torch.uint8))
    torch.testing.assert_close(out, x @ y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"format": "other", "entries": {}}',
        '{"format": "opendnn-kernel-cache-1"}',
    ],
)
def test_kernel_cache_rejects_malformed_text(text):
    cache = cudnn.create_kernel_cache()
    with pytest.raises(BadParamError) as e:
        cache.deserialize(text)
    assert e.value.status == Status.SERIALIZATION_VERSION_MISMATCH
    assert len(cache) == 0


def test_device_properties_round_trip():
    cpu = cudnn.create_device_properties(-1)
    assert cudnn.create_device_properties(cpu.serialize()).serialize() == cpu.serialize()
    h100 = cudnn.create_device_properties(json.dumps(H100))
    assert h100.target.num_sms == 132 and h100.target.capability == (9, 0)
    assert json.loads(h100.serialize()) == H100
    if not torch.cuda.is_available():
        with pytest.raises(BadParamError, match="no CUDA device 0"):
            cudnn.create_device_properties(0)


@pytest.mark.parametrize(
    "text,why",
    [
        ("{", "malformed"),
        (json.dumps({**H100, "num_sms": 0}), "num_sms"),
        (json.dumps({k: v for k, v in H100.items() if k != "bandwidth"}), "fields"),
        (json.dumps({**H100, "device": "tpu"}), "device"),
    ],
)
def test_device_properties_reject_malformed_text(text, why):
    with pytest.raises(BadParamError, match=why) as e:
        cudnn.create_device_properties(text)
    assert e.value.status == Status.SERIALIZATION_VERSION_MISMATCH


def test_device_property_ranks_for_that_gpu_without_one():
    """A graph given an H100's properties ranks plans for it on a machine without a GPU
    (the TMA engines' configs appear), and checks sm_version / sm_count against it."""
    props = cudnn.create_device_properties(json.dumps(H100))
    g = cudnn.pygraph(
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        device_property=props,
        sm_version=90,
        sm_count=132,
    )
    x = g.tensor(name="X", dim=[8, 64, 28, 28], stride=[64 * 784, 1, 64 * 28, 64])
    w = g.tensor(name="W", dim=[64, 64, 3, 3], stride=[576, 1, 192, 64])
    y = g.conv_fprop(x, w, padding=[1, 1])
    y.set_output(True)
    g.validate()
    g.create_execution_plans([cudnn.heur_mode.A])
    names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    assert any("TMA_" in n for n in names)


@pytest.mark.parametrize(
    "kw,why",
    [({"sm_version": 80}, "sm_version 80"), ({"sm_count": 100}, "sm_count 100")],
)
def test_sm_version_and_count_must_match_the_gpu(kw, why):
    props = cudnn.create_device_properties(json.dumps(H100))
    g, *_ = _matmul_graph(device_property=props, **kw)
    g.validate()
    with pytest.raises(GraphNotSupportedError, match=why) as e:
        g.create_execution_plans([cudnn.heur_mode.A])
    assert e.value.status == Status.NOT_SUPPORTED


def test_sm_version_on_the_interpreter_is_taken():
    g, a, b, c = _matmul_graph(sm_version=90, sm_count=132, is_dynamic_shape_enabled=True)
    g.build([cudnn.heur_mode.A])
    assert g.get_execution_plan_count() >= 1


@pytest.mark.parametrize(
    "kw,err,why",
    [
        ({"sm_count": 0}, BadParamError, "sm_count"),
        ({"sm_version": "90"}, BadParamError, "sm_version"),
        ({"kernel_cache": {}}, BadParamError, "kernel_cache"),
        ({"device_property": "H100"}, BadParamError, "device_property"),
        ({"is_dynamic_shape_enabled": 1}, BadParamError, "is_dynamic_shape_enabled"),
        ({"is_override_shape_enabled": True}, GraphNotSupportedError, "is_override_shape"),
    ],
)
def test_pygraph_rejects_bad_aot_arguments(kw, err, why):
    with pytest.raises(err, match=why):
        cudnn.pygraph(**kw)


def test_graph_context_and_jit_build_and_give_uids():
    calls = []

    @cudnn.jit(heur_modes=[cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    def make(n):
        calls.append(n)
        with cudnn.graph(None, io_data_type=cudnn.data_type.FLOAT) as (g, extra):
            assert extra == [] and isinstance(g, cudnn.pygraph)
            assert g.io_data_type == cudnn.data_type.FLOAT
            x = g.tensor(name="X", dim=[n, 8], stride=[8, 1])
            y = g.relu(x)
            y.set_output(True)
            return g, [x, y]

    g, (x_uid, y_uid) = make(3)
    assert g.get_execution_plan_count() >= 1
    assert isinstance(x_uid, int) and isinstance(y_uid, int) and x_uid != y_uid
    x, out = torch.randn(3, 8), torch.full((3, 8), float("nan"))
    g.execute({x_uid: x, y_uid: out}, torch.empty(g.get_workspace_size(), dtype=torch.uint8))
    assert torch.equal(out, x.relu())
    assert make.__wrapped__(2)[0].get_execution_plan_count() == 0  # the function itself
    assert calls == [3, 2]


def test_jit_leaves_a_built_graph_alone():
    built = []

    @cudnn.jit(heur_modes=cudnn.heur_mode.A)
    def make():
        g, a, b, c = _matmul_graph()
        g.build([cudnn.heur_mode.FALLBACK])
        built.append(g.get_plan_name_at_index(0))
        return g, [a, b, c]

    g, uids = make()
    assert g.get_plan_name_at_index(0) == built[0] and len(uids) == 3


def test_graph_cache_memoizes_by_key_and_evicts_oldest():
    made = []

    @cudnn.graph_cache(key_fn=lambda n, tag="": n, maxsize=2)
    def make(n, tag=""):
        made.append(n)
        return (n, tag)

    assert make(1, "a") == (1, "a") and make(1, "b") == (1, "a")
    make(2)
    make(3)  # evicts 1
    make(1)
    assert made == [1, 2, 3, 1]


def test_tensor_takes_cudnn_frontends_arguments_and_refuses_unsupported_layouts():
    """tensor(dim, stride, data_type, is_virtual, is_pass_by_value, ragged_offset,
    reordering_type, name, uid): the order cudnn-frontend's keyword-less calls use; a
    ragged offset or a reordered layout is NOT_SUPPORTED at validate, naming it."""
    g = cudnn.pygraph()
    x = g.tensor([4, 8], [8, 1], cudnn.data_type.FLOAT, False, False, None, None, "X", 7)
    assert (x.get_name(), x.get_uid()) == ("X", 7)
    assert x.get_reordering_type() == cudnn.tensor_reordering.NONE
    g.relu(x).set_output(True)
    g.validate()

    for kw, why in (
        ({"reordering_type": cudnn.tensor_reordering.F8_128x4}, "reordering F8_128x4"),
        ({"ragged_offset": "offsets"}, "ragged offsets"),
    ):
        g = cudnn.pygraph()
        if "ragged_offset" in kw:
            off = g.tensor(dim=[5, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT32)
            kw = {"ragged_offset": off}
        q = g.tensor(dim=[4, 2, 6, 8], stride=[96, 48, 8, 1], name="Q", **kw)
        g.relu(q).set_output(True)
        with pytest.raises(GraphNotSupportedError, match=why) as e:
            g.validate()
        assert e.value.status == Status.NOT_SUPPORTED and "'Q'" in str(e.value)
    with pytest.raises(BadParamError, match="ragged_offset must be a graph tensor"):
        cudnn.pygraph().tensor(dim=[2], stride=[1], ragged_offset=3)
    with pytest.raises(BadParamError, match="reordering_type"):
        cudnn.pygraph().tensor(dim=[2], stride=[1]).set_reordering_type(9)


def test_deserialize_takes_cudnn_frontends_handle_argument():
    g, a, b, c = _matmul_graph()
    g.build([cudnn.heur_mode.A])
    blob = g.serialize()
    h = cudnn.create_handle("cpu")
    g2 = cudnn.pygraph()
    g2.deserialize(h, blob)
    assert g2.handle is h  # the built plan comes back, on the handle given
    assert g2.get_plan_name_at_index(0) == g.get_plan_name_at_index(0)
    g3 = cudnn.pygraph()
    g3.deserialize(list(blob))  # cudnn-frontend's serialize gives a list of byte values
    x, y = torch.randn(2, 8, 16), torch.randn(2, 16, 4)
    out = torch.full((2, 8, 4), float("nan"))
    g3.execute({a.get_uid(): x, b.get_uid(): y, c.get_uid(): out}, None)
    torch.testing.assert_close(out, x @ y, rtol=1e-5, atol=1e-5)
    with pytest.raises(BadParamError, match=r"\(blob\) or \(handle, blob\)"):
        cudnn.pygraph().deserialize(h, blob, 3)
    with pytest.raises(BadParamError, match="handle"):
        cudnn.pygraph().deserialize("not a handle", blob)


def test_kernel_cfg_knobs_build_plans_as_cudnn_code_does():
    """cudnn-frontend's test_conv_bias loop: for every engine, its KERNEL_CFG knob's range,
    one create_execution_plan per index -- each a config the engine lists -- then
    check_support and build_plans; the other knobs read as cuDNN ranges."""
    x = torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)
    w = torch.randn(8, 4, 3, 3).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.relu(g.conv_fprop(X, W, padding=[1, 1]), lower_clip=0.5, upper_clip=0.55)
    Y.set_output(True)
    g.validate()
    g.build_operation_graph()
    made = 0
    for engine in range(g.get_engine_count()):
        try:
            knobs = g.get_knobs_for_engine(engine)
        except RuntimeError:
            continue
        for k in knobs:
            if k.type == cudnn.knob_type.KERNEL_CFG:
                assert (k.min_value, k.stride) == (0, 1)
                for cfg in range(k.min_value, k.max_value + 1, k.stride):
                    g.create_execution_plan(engine, {cudnn.knob_type.KERNEL_CFG: cfg})
                    made += 1
            else:
                assert k.type == cudnn.knob_type.NOT_SET
    assert made >= 2
    g.check_support()
    g.build_plans()
    out = torch.full((2, 8, 6, 6), float("nan")).to(memory_format=torch.channels_last)
    g.execute({X: x, W: w, Y: out}, torch.empty(g.get_workspace_size(), dtype=torch.uint8))
    ref = torch.nn.functional.conv2d(x, w, padding=1).clamp(0.5, 0.55)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert cudnn.behavior_note.RUNTIME_COMPILATION in g.get_behavior_notes()
    assert isinstance(g.get_numerical_notes(), list)
    conv_id = next(
        e for e in range(g.get_engine_count()) if "conv_implicit_gemm" == _engine_name(g, e)
    )
    with pytest.raises(BadParamError, match="KERNEL_CFG 999"):
        g.create_execution_plan(conv_id, {cudnn.knob_type.KERNEL_CFG: 999})
    with pytest.raises(GraphNotSupportedError, match="SWIZZLE has no opendnn counterpart"):
        g.create_execution_plan(conv_id, {cudnn.knob_type.SWIZZLE: 1})


def _engine_name(g, engine_id):
    from opendnn.engines.registry import by_id

    e = by_id(engine_id)
    return e.name if e is not None else None


def test_execute_shape_overrides_are_not_supported():
    g, a, b, c = _matmul_graph()
    g.build([cudnn.heur_mode.A])
    x, y, out = torch.randn(2, 8, 16), torch.randn(2, 16, 4), torch.empty(2, 8, 4)
    for call in (
        lambda: g.execute({a: x, b: y, c: out}, None, None, [a.get_uid()], [[2, 8, 16]]),
        lambda: g.execute_plan_at_index({a: x, b: y, c: out}, None, 0, override_strides=[[1]]),
    ):
        with pytest.raises(GraphNotSupportedError, match="override_uids") as e:
            call()
        assert e.value.status == Status.NOT_SUPPORTED
    g.execute({a: x, b: y, c: out}, None, None, None, None, None)
    torch.testing.assert_close(out, x @ y, rtol=1e-5, atol=1e-5)


def test_data_types_and_heur_modes_are_cudnn_frontends():
    """Every cudnn-frontend data_type name exists (cuDNN's numbering); the vectorized,
    block-scale and sub-byte ones are refused at validate, naming the type; heur_mode
    OPENSOURCE ranks as A (every engine here is open source)."""
    names = (
        "FLOAT DOUBLE HALF INT8 INT32 INT8x4 UINT8 UINT8x4 INT8x32 BFLOAT16 INT64 BOOLEAN "
        "FP8_E4M3 FP8_E5M2 FAST_FLOAT_FOR_FP8 FP8_E8M0 FP4_E2M1 INT4 NOT_SET"
    ).split()
    assert all(hasattr(cudnn.data_type, n) for n in names)
    assert (cudnn.data_type.INT8x4, cudnn.data_type.INT4) == (5, 17)
    for dt in ("INT8x4", "FP8_E8M0", "FP4_E2M1", "INT4"):
        g = cudnn.pygraph()
        t = g.tensor(dim=[4, 8], stride=[8, 1], data_type=getattr(cudnn.data_type, dt), name="s")
        g.identity(t).set_output(True).set_data_type(cudnn.data_type.FLOAT)
        with pytest.raises(GraphNotSupportedError, match=f"{dt} is not supported") as e:
            g.validate()
        assert e.value.status == Status.NOT_SUPPORTED_DATA_TYPE and "'s'" in str(e.value)
    assert [m.name for m in cudnn.heur_mode] == ["A", "B", "FALLBACK", "OPENSOURCE"]
    a, *_ = _matmul_graph()
    a.validate()
    a.create_execution_plans([cudnn.heur_mode.A])
    o, *_ = _matmul_graph()
    o.validate()
    o.create_execution_plans([cudnn.heur_mode.OPENSOURCE])
    count = a.get_execution_plan_count()
    assert o.get_execution_plan_count() == count
    assert [o.get_plan_name_at_index(i) for i in range(count)] == [
        a.get_plan_name_at_index(i) for i in range(count)
    ]


def test_instancenorm_backward_without_saved_statistics_is_not_supported():
    """cudnn-frontend's mean / inv_variance default to None; without them the backward
    would need the forward's epsilon to recompute them, which it does not take."""
    g = cudnn.pygraph()
    dy = g.tensor(dim=[2, 3, 4, 4], stride=[48, 16, 4, 1], name="dy")
    x = g.tensor(dim=[2, 3, 4, 4], stride=[48, 16, 4, 1], name="x")
    s = g.tensor(dim=[1, 3, 1, 1], stride=[3, 1, 1, 1], name="scale")
    with pytest.raises(GraphNotSupportedError, match="saved mean and inv_variance") as e:
        g.instancenorm_backward(dy, x, s, name="DIN")
    assert e.value.status == Status.NOT_SUPPORTED and "DIN" in str(e.value)


def test_every_pygraph_method_of_cudnn_frontend_exists():
    """cudnn-frontend's public pygraph methods (its Python bindings, release 1.32): each
    exists here; those whose operation opendnn lacks raise NOT_SUPPORTED naming it."""
    from opendnn.graph.graph import NOT_SUPPORTED_METHODS

    names = """add_operation batchnorm batchnorm_backward batchnorm_inference build
    build_operation_graph build_plan_at_index build_plans check_support concatenate
    conv_dgrad conv_fprop conv_wgrad create_execution_plan create_execution_plans
    deselect_behavior_notes deselect_engines deselect_numeric_notes
    deselect_workspace_greater_than deserialize dropout execute execute_plan_at_index
    genstats get_behavior_notes get_behavior_notes_for_plan_at_index get_engine_count
    get_execution_plan_count get_knobs_for_engine get_plan_name_at_index
    get_workspace_size get_workspace_size_plan_at_index instancenorm
    instancenorm_backward key layernorm layernorm_backward matmul moe_grouped_matmul
    moe_grouped_matmul_bwd query_tensor_attributes_of_uid reduction reshape resample
    rmsnorm rmsnorm_backward sdpa sdpa_backward select_behavior_notes select_numeric_notes serialize slice
    softmax tensor tensor_like tensor_scalar transpose validate""".split()
    g = cudnn.pygraph()
    for n in names + list(NOT_SUPPORTED_METHODS):
        assert callable(getattr(g, n)), n
    assert "moe_grouped_matmul" not in NOT_SUPPORTED_METHODS  # implemented (tests/moe)
    for n, feature in NOT_SUPPORTED_METHODS.items():
        with pytest.raises(BadParamError, match=re.escape(f"{feature} is not supported")) as e:
            getattr(g, n)()
        assert e.value.status == Status.NOT_SUPPORTED and e.value.op == n


def test_tensor_scalar_and_query_by_uid():
    g = cudnn.pygraph()
    x = g.tensor([2, 3], [3, 1], cudnn.data_type.FLOAT, name="x")
    s = g.tensor_scalar(2.5, cudnn.scalar_type.COMPILE_TIME_CONST)
    y = g.mul(x, s)
    y.set_output(True)
    g.build([cudnn.heur_mode.A])
    assert s.get_is_pass_by_value() and s.get_dim() == [1]
    xv = torch.arange(6.0).reshape(2, 3)
    out = torch.full((2, 3), float("nan"))
    g.execute({x: xv, y: out}, None)  # the scalar's value is known: not in the pack
    assert torch.equal(out, xv * 2.5)
    assert g.query_tensor_attributes_of_uid(y.get_uid()) is y
    with pytest.raises(BadParamError, match="no tensor of this graph has uid 999"):
        g.query_tensor_attributes_of_uid(999)
    with pytest.raises(BadParamError, match="scalar_type"):
        g.tensor_scalar(1.0, "SOMETIMES")


def test_keyword_names_of_cudnn_frontend():
    """tensor_like(input=...), deserialize(handle_=..., pyobj=...) as cudnn-frontend names
    them."""
    g = cudnn.pygraph()
    x = g.tensor_like(input=torch.randn(2, 2), name="x")
    g.exp(x).set_output(True)
    g.build([cudnn.heur_mode.A])
    blob = g.serialize()
    g2 = cudnn.pygraph()
    g2.deserialize(handle_=cudnn.create_handle(), pyobj=blob)
    assert g2.get_execution_plan_count() >= 1
    with pytest.raises(BadParamError, match="unknown keyword"):
        cudnn.pygraph().deserialize(blob=blob)


def test_optional_cute_dsl_kernels_raise_not_supported_as_import_errors():
    """cudnn-frontend's CuTe-DSL Blackwell kernels: ``from cudnn import X`` fails as an
    ImportError (as in cudnn-frontend without its optional dependencies) that is a typed
    NOT_SUPPORTED naming the kernel."""
    for name in ("GemmSwigluSm100", "grouped_gemm_srelu_wrapper_sm100", "NSA"):
        with pytest.raises(ImportError) as e:
            exec(f"from opendnn.frontend import {name}", {})
        assert isinstance(e.value, GraphNotSupportedError)
        assert e.value.status == Status.NOT_SUPPORTED and name in str(e.value)
    with pytest.raises(AttributeError):
        cudnn.no_such_name  # noqa: B018


def test_datatypes_and_api_base_helpers():
    from opendnn.frontend import api_base, datatypes

    assert datatypes._library_type(torch.bfloat16) == cudnn.data_type.BFLOAT16
    assert datatypes._library_type(cudnn.data_type.INT8) == cudnn.data_type.INT8
    assert datatypes._cudnn_to_torch_data_type(cudnn.data_type.HALF) == torch.float16
    assert datatypes._torch_to_cudnn_data_type(torch.complex64) is None
    with pytest.raises(TypeError, match="complex64"):
        datatypes._library_type(torch.complex64)
    assert datatypes._is_torch_tensor(torch.zeros(1)) and not datatypes._is_torch_tensor(1)
    if not datatypes.is_cutlass_available():
        assert datatypes._convert_to_cutlass_data_type(torch.half) is None
    assert api_base.ceil_div(7, 2) == 4 and api_base.is_power_of_2(64)
    assert not api_base.is_power_of_2(0)


def test_experimental_api_warns_once_per_name(caplog):
    from opendnn.frontend import api_base

    logger = __import__("logging").getLogger("opendnn.test.experimental")
    api_base._reset_experimental_api_warning_registry()
    try:
        with caplog.at_level("WARNING", logger=logger.name):
            for name in ("First", "First", "Second"):
                api_base.warn_experimental_api_once(logger, name)
        assert [r.getMessage() for r in caplog.records] == [
            "First is an experimental API",
            "Second is an experimental API",
        ]
    finally:
        api_base._reset_experimental_api_warning_registry()
