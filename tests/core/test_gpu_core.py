"""GPU checks of the core engines against the float64 reference (pytest -m gpu)."""

import pytest
import torch

import opendnn.frontend as cudnn
from opendnn.engines.matmul import _kernels as K

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _relerr(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    assert not torch.isnan(out).any(), "unwritten (NaN-poisoned) outputs"
    return ((out - ref).norm() / max(ref.norm().item(), 1e-30)).item()


@pytest.mark.parametrize(
    "dt,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2), (torch.float16, 2e-3)]
)
@pytest.mark.parametrize("shape", [(8192, 8192), (3, 1, 17, 33), (1000, 1)])
def test_fused_pointwise(dt, tol, shape):
    ts = [torch.randn(shape, device="cuda", dtype=dt) for _ in range(3)]
    out = torch.full(shape, float("nan"), device="cuda", dtype=dt)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    a, b, c = (g.tensor_like(t) for t in ts)
    y = g.sigmoid(g.add(a, g.mul(b, c)))
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("runtime_fusion")
    g.execute({a: ts[0], b: ts[1], c: ts[2], y: out})
    ref = torch.sigmoid(ts[0].double() + ts[1].double() * ts[2].double())
    assert _relerr(out, ref) < tol


@pytest.mark.parametrize("out_shape", [(4099, 1), (1, 515), (1, 1)])
@pytest.mark.parametrize("mode", ["ADD", "MAX", "NORM2", "AVG"])
def test_fused_reduction(out_shape, mode):
    x = torch.randn(4099, 515, device="cuda")
    out = torch.full(out_shape, float("nan"), device="cuda")
    g = cudnn.pygraph()
    tx = g.tensor_like(x)
    y = g.reduction(tx, mode=cudnn.reduction_mode[mode]).set_dim(list(out_shape)).set_output(True)
    g.build([cudnn.heur_mode.A])
    g.execute(
        {tx: x, y: out}, torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    )
    dims = [i for i, (a, b) in enumerate(zip(x.shape, out_shape)) if a != b]
    xd = x.double()
    ref = {
        "ADD": lambda: xd.sum(dims, keepdim=True),
        "MAX": lambda: xd.amax(dims, keepdim=True),
        "NORM2": lambda: xd.square().sum(dims, keepdim=True).sqrt(),
        "AVG": lambda: xd.mean(dims, keepdim=True),
    }[mode]()
    assert _relerr(out, ref) < 1e-5


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(8192, 8192), (1001, 3000), (64, 4096), (5, 70000)])
def test_column_sums_every_config(dt, shape):
    """Column sums (the kept axis contiguous): interleaved slices of a balanced grid, the
    finish launched as a programmatic dependent; every plan the heuristics offer, twice
    (the second run finds the first run's partials in the workspace)."""
    x = torch.randn(shape, device="cuda", dtype=dt)
    g = cudnn.pygraph(compute_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor_like(x)
    y = g.reduction(tx, mode=cudnn.reduction_mode.ADD).set_dim([1, shape[1]])
    y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    g.build([cudnn.heur_mode.A])
    g.build_plans(cudnn.build_plan_policy.ALL)
    ref = x.double().sum(0, keepdim=True)
    for i in range(g.get_execution_plan_count()):
        ws = torch.full(
            (max(g.get_workspace_size_plan_at_index(i), 1),), 255, device="cuda", dtype=torch.uint8
        )
        for _ in range(2):
            out = torch.full((1, shape[1]), float("nan"), device="cuda")
            g.execute_plan_at_index({tx: x, y: out}, ws, i)
            torch.cuda.synchronize()
            assert _relerr(out, ref) < 1e-6, g.get_plan_name_at_index(i)


def test_genstats_columns_nhwc():
    """Two reductions in one kernel (sum and sum of squares per channel, NHWC)."""
    x = torch.randn(64, 96, 56, 56, device="cuda").to(memory_format=torch.channels_last)
    g = cudnn.pygraph(compute_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor_like(x)
    s, sq = g.genstats(tx)
    s.set_output(True)
    sq.set_output(True)
    g.build([cudnn.heur_mode.A])
    outs = {t: torch.full((1, 96, 1, 1), float("nan"), device="cuda") for t in (s, sq)}
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    g.execute({tx: x, **outs}, ws)
    xd = x.double()
    assert _relerr(outs[s], xd.sum((0, 2, 3), keepdim=True)) < 1e-6
    assert _relerr(outs[sq], (xd * xd).sum((0, 2, 3), keepdim=True)) < 1e-6


@pytest.mark.parametrize(
    "dt,tol", [(torch.bfloat16, 1e-2), (torch.float16, 2e-3), (torch.float32, 1e-5)]
)
@pytest.mark.parametrize("mnk", [(1, 1, 1), (17, 33, 65), (512, 384, 1000), (2048, 2048, 2048)])
def test_matmul_every_config(dt, tol, mnk):
    """Every knob config the engine offers on this GPU, against float64."""
    m, n, k = mnk
    A = torch.randn(2, m, k, device="cuda", dtype=dt)
    B = torch.randn(1, k, n, device="cuda", dtype=dt)
    bias = torch.randn(1, 1, n, device="cuda", dtype=dt)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    ta, tb, tbias = g.tensor_like(A), g.tensor_like(B), g.tensor_like(bias)
    y = g.relu(g.bias(g.matmul(ta, tb), tbias))
    g.build([cudnn.heur_mode.A])
    ref = torch.relu(A.double() @ B.double() + bias.double())
    g.build_plans(cudnn.build_plan_policy.ALL)
    for i in range(g.get_execution_plan_count()):
        out = torch.full((2, m, n), float("nan"), device="cuda", dtype=dt)
        ws = torch.empty(g.get_workspace_size_plan_at_index(i), device="cuda", dtype=torch.uint8)
        g.execute_plan_at_index({ta: A, tb: B, tbias: bias, y: out}, ws, i)
        torch.cuda.synchronize()
        err = _relerr(out, ref)
        assert err < tol * (1 + (k > 512)), f"{g.get_plan_name_at_index(i)} err {err}"


@pytest.mark.parametrize("knobs", K.knob_space()[:12])
def test_matmul_knob_space_8192_slice(knobs):
    """The top of the knob space (the configs the heuristics rank first) on a real size."""
    import dataclasses

    A = torch.randn(1024, 1536, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(1536, 768, device="cuda", dtype=torch.bfloat16)
    out = torch.full((1024, 768), float("nan"), device="cuda", dtype=torch.bfloat16)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    ta, tb = g.tensor_like(A), g.tensor_like(B)
    y = g.matmul(ta, tb)
    g.create_execution_plan(2, dataclasses.asdict(knobs))
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({ta: A, tb: B, y: out}, ws)
    assert _relerr(out, A.double() @ B.double()) < 1e-2


def test_cpu_and_gpu_in_one_process():
    """One plan's kernel runs compiled on CUDA tensors and interpreted on CPU tensors."""
    g = cudnn.pygraph()
    x = torch.randn(33, 7, device="cuda")
    tx = g.tensor_like(x)
    y = g.gelu(tx)
    g.build([cudnn.heur_mode.A])
    for dev in ("cuda", "cpu"):
        xi = x.to(dev)
        out = torch.full_like(xi, float("nan"))
        g.execute({tx: xi, y: out})
        assert _relerr(out, torch.nn.functional.gelu(xi.double())) < 1e-6


def test_explicit_cuda_handle_refuses_cpu_buffers():
    """Without a handle a wholly-CPU pack runs on the CPU (above); with an explicit CUDA
    handle, even the process default's device, every buffer must be on it."""
    from opendnn.errors import BadParamError, Status

    g = cudnn.pygraph(name="g_h")
    x = torch.randn(5, 3)
    tx = g.tensor_like(x, name="x_in")
    y = g.relu(tx)
    y.set_output(True).set_name("y_out")
    g.build([cudnn.heur_mode.A])
    h = cudnn.create_handle()
    with pytest.raises(BadParamError) as e:
        g.execute({tx: x, y: torch.empty(5, 3)}, None, handle=h)
    assert (
        e.value.status == Status.BAD_PARAM
        and "x_in" in str(e.value)
        and "the handle's device is cuda" in str(e.value)
    ), str(e.value)
    out = torch.full((5, 3), float("nan"), device="cuda")
    g.execute({tx: x.cuda(), y: out}, None, handle=h)
    assert torch.equal(out.cpu(), x.relu())


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_layout_ops_fused(dt):
    """transpose -> relu, slice, concatenate and a view reshape, compiled on the GPU."""
    x = torch.randn(257, 129, device="cuda", dtype=dt)
    z = torch.randn(3, 129, device="cuda", dtype=dt)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tz = g.tensor_like(x), g.tensor_like(z)
    t = g.relu(g.transpose(tx, [1, 0]))
    s = g.slice(tx, [slice(5, 200), slice(1, 128)]).set_output(True)
    c = g.concatenate([tx, tz], axis=0).set_output(True)
    r = g.reshape(tx).set_dim([129, 257]).set_output(True)
    g.build([cudnn.heur_mode.A])
    outs = {
        t: torch.full((129, 257), float("nan"), device="cuda", dtype=dt),
        s: torch.full((195, 127), float("nan"), device="cuda", dtype=dt),
        c: torch.full((260, 129), float("nan"), device="cuda", dtype=dt),
        r: torch.full((129, 257), float("nan"), device="cuda", dtype=dt),
    }
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({tx: x, tz: z, **outs}, ws)
    assert _relerr(outs[t], torch.relu(x.t().double())) == 0
    assert _relerr(outs[s], x[5:200, 1:128]) == 0
    assert _relerr(outs[c], torch.cat([x, z])) == 0
    assert _relerr(outs[r], x.reshape(129, 257)) == 0


def test_pass_by_value_scalars_compiled():
    """Host scalars (tensor_like of a CPU scalar, Python numbers) reach compiled kernels
    as values, in a fused graph and in a matmul epilogue."""
    x = torch.randn(1000, 33, device="cuda")
    g = cudnn.pygraph()
    tx, ts = g.tensor_like(x), g.tensor_like(torch.tensor(0.5))
    y = g.add(g.mul(tx, ts), 2.0)
    g.build([cudnn.heur_mode.A])
    out = torch.full_like(x, float("nan"))
    g.execute({tx: x, y: out}, None)
    assert _relerr(out, x.double() * 0.5 + 2.0) < 1e-6
    A = torch.randn(64, 48, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(48, 80, device="cuda", dtype=torch.bfloat16)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    ta, tb, tsc = g.tensor_like(A), g.tensor_like(B), g.tensor_like(torch.tensor(3.0))
    y = g.scale(g.matmul(ta, tb), tsc)
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("triton_matmul")
    out = torch.full((64, 80), float("nan"), device="cuda", dtype=torch.bfloat16)
    g.execute(
        {ta: A, tb: B, y: out},
        torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8),
    )
    assert _relerr(out, 3.0 * (A.double() @ B.double())) < 1e-2


@pytest.mark.parametrize(
    "shape",
    [(8, 64, 56, 3, 1, 1), (4, 3, 224, 7, 2, 3), (8, 256, 14, 1, 1, 0), (2, 32, 17, 3, 2, 1)],
)
@pytest.mark.parametrize("dt,tol", [(torch.bfloat16, 1e-2), (torch.float32, 1e-5)])
def test_conv_implicit_gemm_bias_relu(shape, dt, tol):
    """ResNet-like layers, NHWC, against float64 (the heuristics' first plan)."""
    n, c, h, f, s, p = shape
    cl = torch.channels_last
    x = torch.randn(n, c, h, h, device="cuda", dtype=dt).to(memory_format=cl)
    w = (torch.randn(64, c, f, f, device="cuda", dtype=dt) * 0.1).to(memory_format=cl)
    b = torch.randn(1, 64, 1, 1, device="cuda", dtype=dt)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[p, p], stride=[s, s]), tb))
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("conv_")  # C=3 goes to im2col + GEMM
    g.validate()
    out = torch.empty_strided(y.get_dim(), y.get_stride(), device="cuda", dtype=dt)
    out.fill_(float("nan"))
    g.execute({tx: x, tw: w, tb: b, y: out}, None)
    ref = torch.relu(
        torch.nn.functional.conv2d(x.double(), w.double(), stride=s, padding=p) + b.double()
    )
    assert _relerr(out, ref) < tol


@pytest.mark.parametrize("reduce", [False, True])
def test_pass_by_value_scalars_keep_double_precision(reduce):
    """A float64 compute takes host scalars as doubles: 0.1 rounded to float32 would be off
    by 1.5e-9 relative, far above float64 rounding."""
    x = torch.randn(1000, 33, device="cuda", dtype=torch.float64)
    g = cudnn.pygraph(
        io_data_type=cudnn.data_type.DOUBLE,
        intermediate_data_type=cudnn.data_type.DOUBLE,
        compute_data_type=cudnn.data_type.DOUBLE,
    )
    tx, ts = g.tensor_like(x), g.tensor_like(torch.tensor(0.1, dtype=torch.float64))
    y = g.add(g.mul(tx, ts), 1.0 / 3.0)
    ref = x * 0.1 + 1.0 / 3.0
    if reduce:
        y = g.reduction(y, mode=cudnn.reduction_mode.ADD).set_dim([1, 33])
        y.set_data_type(cudnn.data_type.DOUBLE)
        ref = ref.sum(0, keepdim=True)
    y.set_output(True)
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("runtime_fusion")
    out = torch.full(ref.shape, float("nan"), device="cuda", dtype=torch.float64)
    g.execute(
        {tx: x, y: out}, torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    )
    assert _relerr(out, ref) < 1e-13
