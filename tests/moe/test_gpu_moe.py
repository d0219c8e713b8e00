"""GPU checks of the MoE grouped matmul engine against float64 PyTorch (pytest -m gpu):
every plan the engine lists, forward in the three modes and backward, bf16 / fp16 /
fp32, on cudnn-frontend's shapes (E 36, T 2000, H 520, N 248 bf16 with its offsets; E 8,
T 1024, K 512, N 512 fp16) and odd ones; cudnn-frontend's two graph tests as written
(1-D buffers, inferred shapes and strides) and its experimental op's test; indices and
offsets out of range writing nothing outside the output."""

import pytest
import torch
from _util import TORCH_TO_DT, assert_close

import opendnn.frontend as cudnn
from opendnn.engines.moe import shapes
from opendnn.engines.moe.engine import MoeEngine

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

MODE = cudnn.moe_grouped_matmul_mode
NAME = MoeEngine.name
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TOP_K = 2


def _gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


def _rand(shape, dtype, gen):
    """|x| in [0.1, 1] with random signs, on the GPU."""
    mag = torch.empty(shape, device="cuda", dtype=torch.float32).uniform_(0.1, 1.0, generator=gen)
    sign = torch.randint(0, 2, shape, device="cuda", generator=gen) * 2 - 1
    return (mag * sign).to(dtype)


def _inputs(case, mode, dtype, seed=0):
    """token, weight (column-major in K x N), offsets [G, 1, 1], TokenIndex, TokenKs."""
    experts, rows, k, n, _ = case
    gen = _gen(seed)
    off = torch.tensor(shapes.offsets_for(case), dtype=torch.int32, device="cuda")
    weight = _rand((experts, n, k), dtype, gen).transpose(1, 2)
    idx = ks = None
    tokens = rows
    if mode == "GATHER":
        tokens = -(-rows // TOP_K)
        idx = torch.randint(0, tokens, (1, rows, 1), device="cuda", generator=gen)
        idx = idx.to(torch.int32)
    elif mode == "SCATTER":
        perm = torch.randperm(rows, device="cuda", generator=gen)
        idx = (perm // TOP_K).to(torch.int32).reshape(1, rows, 1)
        ks = (perm % TOP_K).to(torch.int32).reshape(1, rows, 1)
    token = _rand((1, tokens, k), dtype, gen)
    return token, weight, off.reshape(-1, 1, 1), idx, ks


def _reference(token, weight, off, mode, idx, ks, out_rows):
    """float64, group by group (valid routing); rows no group writes are NaN."""
    tok, w = token[0].double(), weight.double()
    experts, groups = w.shape[0], off.shape[0]
    o = [int(v) for v in off.reshape(-1).tolist()]
    routed = idx.shape[1] if mode == "GATHER" else tok.shape[0]
    y = torch.full((out_rows, w.shape[2]), float("nan"), dtype=torch.float64, device="cuda")
    for g in range(groups):
        lo, hi = o[g], o[g + 1] if g + 1 < groups else routed
        if hi <= lo:
            continue
        rows = torch.arange(lo, hi, device="cuda")
        src = idx[0, rows, 0].long() if mode == "GATHER" else rows
        dst = idx[0, rows, 0].long() * TOP_K + ks[0, rows, 0].long() if mode == "SCATTER" else rows
        y[dst] = tok[src] @ w[g % experts]
    return y[None]


def _graph(token, weight, off, mode, idx, ks):
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )

    def t(x, name):
        return g.tensor(
            dim=list(x.shape), stride=list(x.stride()), data_type=TORCH_TO_DT[x.dtype], name=name
        )

    feeds = {}
    ts = {}
    for name, x in (("token", token), ("weight", weight), ("off", off), ("idx", idx), ("ks", ks)):
        if x is not None:
            ts[name] = t(x, name)
            feeds[ts[name]] = x
    out = g.moe_grouped_matmul(
        ts["token"],
        ts["weight"],
        ts["off"],
        token_index=ts.get("idx"),
        token_ks=ts.get("ks"),
        mode=MODE[mode],
        top_k=TOP_K if mode == "SCATTER" else 0,
        name="moe",
    )
    out.set_output(True).set_data_type(TORCH_TO_DT[token.dtype])
    return g, feeds, out


def _every_plan(g, feeds, out_t, make_out, want, dtype, n):
    """Build heuristics A; run every plan of the engine (the first must be one) into a
    NaN-poisoned output and compare element by element. Returns the plan names."""
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith(NAME), g.get_plan_name_at_index(0)
    names = []
    for i in range(g.get_execution_plan_count()):
        name = g.get_plan_name_at_index(i)
        if not name.startswith(NAME):
            continue
        g.build_plan_at_index(i)
        size = max(g.get_workspace_size_plan_at_index(i), 1)
        ws = torch.full((size,), 255, dtype=torch.uint8, device="cuda")
        out = make_out()
        g.execute_plan_at_index({**feeds, out_t: out}, ws, i)
        torch.cuda.synchronize()
        assert_close(out.cpu(), want.cpu(), dtype, n, msg=f"plan {name}")
        names.append(name)
    assert names
    return names


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["NONE", "GATHER", "SCATTER"])
@pytest.mark.parametrize("case", shapes.GPU, ids=[f"E{c[0]}_T{c[1]}" for c in shapes.GPU])
def test_forward_every_plan(case, mode, dtype):
    token, weight, off, idx, ks = _inputs(case, mode, dtype)
    g, feeds, out_t = _graph(token, weight, off, mode, idx, ks)
    g.validate()
    rows, n = out_t.get_dim()[1], out_t.get_dim()[2]
    want = _reference(token, weight, off, mode, idx, ks, rows)

    def make_out():
        return torch.full((1, rows, n), float("nan"), dtype=dtype, device="cuda")

    _every_plan(g, feeds, out_t, make_out, want, dtype, case[2])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", shapes.GPU, ids=[f"E{c[0]}_T{c[1]}" for c in shapes.GPU])
def test_backward_every_plan(case, dtype):
    experts, rows, k, n, _ = case
    gen = _gen(1)
    dy, token = _rand((1, rows, n), dtype, gen), _rand((1, rows, k), dtype, gen)
    off = torch.tensor(shapes.offsets_for(case), dtype=torch.int32, device="cuda")
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    tdy = g.tensor(dim=[1, rows, n], stride=[rows * n, n, 1], data_type=TORCH_TO_DT[dtype])
    tt = g.tensor(dim=[1, rows, k], stride=[rows * k, k, 1], data_type=TORCH_TO_DT[dtype])
    to = g.tensor(dim=[len(off), 1, 1], stride=[1, 1, 1], data_type=cudnn.data_type.INT32)
    dw_t = g.moe_grouped_matmul_bwd(tdy, tt, to, name="moe_bwd")
    dw_t.set_output(True).set_data_type(TORCH_TO_DT[dtype])
    o = off.tolist() + [rows]
    want = torch.stack(
        [
            token[0, o[i] : o[i + 1]].double().T @ dy[0, o[i] : o[i + 1]].double()
            for i in range(len(off))
        ]
    )
    g.validate()
    assert dw_t.get_stride() == [k * n, 1, k]

    def make_out():
        return torch.empty_strided(
            (len(off), k, n), (k * n, 1, k), dtype=dtype, device="cuda"
        ).fill_(float("nan"))

    _every_plan(
        g, {tdy: dy, tt: token, to: off.reshape(-1, 1, 1)}, dw_t, make_out, want, dtype, rows
    )


def test_cudnn_frontend_forward_as_written():
    """cudnn-frontend's test_bf16_moe_grouped_matmul_fwd: inferred [1, T, N] row-major
    output set to bf16, 1-D buffers (the weight column-major in H x N); and its values."""
    experts, rows, n, hidden = 36, 2000, 248, 520
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    bf16 = cudnn.data_type.BFLOAT16
    tt = g.tensor(
        name="token", dim=[1, rows, hidden], stride=[rows * hidden, hidden, 1], data_type=bf16
    )
    tw = g.tensor(
        name="weight",
        dim=[experts, hidden, n],
        stride=[hidden * n, 1, hidden],
        data_type=bf16,
    )
    to = g.tensor(
        name="first_token_offset",
        dim=[experts, 1, 1],
        stride=[1, 1, 1],
        data_type=cudnn.data_type.INT32,
    )
    out_t = g.moe_grouped_matmul(
        tt,
        tw,
        to,
        mode=MODE.NONE,
        compute_data_type=cudnn.data_type.FLOAT,
        name="moe_grouped_matmul",
    )
    out_t.set_data_type(bf16).set_output(True)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A])
    g.check_support()
    g.build_plans()
    assert out_t.get_dim() == [1, rows, n] and out_t.get_stride() == [rows * n, n, 1]
    gen = _gen(2)
    token = _rand((rows * hidden,), torch.bfloat16, gen)
    weight = _rand((experts * hidden * n,), torch.bfloat16, gen)
    off = torch.tensor(shapes.FRONTEND_OFFSETS, dtype=torch.int32, device="cuda")
    out = torch.full((rows * n,), float("nan"), dtype=torch.bfloat16, device="cuda")
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda")
    g.execute({tt: token, tw: weight, to: off, out_t: out}, ws)
    torch.cuda.synchronize()
    w = weight.view(experts, n, hidden).transpose(1, 2)
    want = _reference(token.view(1, rows, hidden), w, off.view(-1, 1, 1), "NONE", None, None, rows)
    assert_close(out.view(1, rows, n).cpu(), want.cpu(), torch.bfloat16, hidden)


def test_cudnn_frontend_backward_as_written():
    """cudnn-frontend's test_bf16_moe_grouped_matmul_bwd: inferred [E, H, N] DWeight,
    column-major in H x N, 1-D buffers; and its values."""
    experts, rows, n, hidden = 36, 2000, 248, 520
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    bf16 = cudnn.data_type.BFLOAT16
    tdy = g.tensor(name="doutput", dim=[1, rows, n], stride=[rows * n, n, 1], data_type=bf16)
    tt = g.tensor(
        name="token", dim=[1, rows, hidden], stride=[rows * hidden, hidden, 1], data_type=bf16
    )
    to = g.tensor(
        name="first_token_offset",
        dim=[experts, 1, 1],
        stride=[1, 1, 1],
        data_type=cudnn.data_type.INT32,
    )
    dw_t = g.moe_grouped_matmul_bwd(
        tdy, tt, to, compute_data_type=cudnn.data_type.FLOAT, name="moe_grouped_matmul_bwd"
    )
    dw_t.set_data_type(bf16).set_output(True)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A])
    g.check_support()
    g.build_plans()
    assert dw_t.get_dim() == [experts, hidden, n]
    assert dw_t.get_stride() == [hidden * n, 1, hidden]
    gen = _gen(3)
    dy = _rand((rows * n,), torch.bfloat16, gen)
    token = _rand((rows * hidden,), torch.bfloat16, gen)
    off = torch.tensor(shapes.FRONTEND_OFFSETS, dtype=torch.int32, device="cuda")
    dw = torch.full((experts * hidden * n,), float("nan"), dtype=torch.bfloat16, device="cuda")
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda")
    g.execute({tdy: dy, tt: token, to: off, dw_t: dw}, ws)
    torch.cuda.synchronize()
    o = list(shapes.FRONTEND_OFFSETS) + [rows]
    d2, t2 = dy.view(rows, n).double(), token.view(rows, hidden).double()
    want = torch.stack([t2[o[i] : o[i + 1]].T @ d2[o[i] : o[i + 1]] for i in range(experts)])
    got = dw.view(experts, n, hidden).transpose(1, 2)
    assert_close(got.cpu(), want.cpu(), torch.bfloat16, 200)


@pytest.mark.parametrize(
    "experts,tokens,k,n", [(4, 512, 256, 256), (8, 1024, 512, 512), (4, 256, 256, 256)]
)
def test_experimental_op_as_cudnn_frontend_tests_it(experts, tokens, k, n):
    """cudnn-frontend's test_moe_grouped_matmul_op (fp16, even groups, its tolerance)."""
    from opendnn.frontend.experimental.ops import moe_grouped_matmul

    torch.manual_seed(42)
    tpe = tokens // experts
    token = torch.randn(1, tpe * experts, k, dtype=torch.float16, device="cuda")
    weight = torch.randn(experts, n, k, dtype=torch.float16, device="cuda").transpose(1, 2)
    fto = (torch.arange(experts, dtype=torch.int32, device="cuda") * tpe).reshape(-1, 1, 1)
    result = moe_grouped_matmul(token, weight, fto, mode="none", top_k=1)
    want = torch.zeros(1, tpe * experts, n, dtype=torch.float16, device="cuda")
    for e in range(experts):
        s = slice(e * tpe, (e + 1) * tpe)
        want[0, s] = (token[0, s].float() @ weight[e].float()).to(torch.float16)
    torch.testing.assert_close(want, result, atol=0.125, rtol=0.125)


@pytest.mark.parametrize(
    "mode,off,bad",
    [
        ("NONE", [300, 100, 5000], None),
        ("GATHER", [0, 300], [0, 10**6, -1, 99999]),
        ("SCATTER", [-40, 200], [7, 10**5, -2, 4000]),
    ],
)
def test_data_out_of_range_writes_nothing_outside(mode, off, bad):
    case = (len(off), 777, 100, 60, tuple(off))
    token, weight, offs, idx, ks = _inputs(case, mode, torch.bfloat16, seed=4)
    if bad is not None:
        idx[0, : len(bad), 0] = torch.tensor(bad, dtype=torch.int32, device="cuda")
    g, feeds, out_t = _graph(token, weight, offs, mode, idx, ks)
    g.build([cudnn.heur_mode.A])
    rows, n = out_t.get_dim()[1], out_t.get_dim()[2]
    big = torch.full((1, rows + 256, n), -7.0, dtype=torch.bfloat16, device="cuda")
    view = big[:, 128 : 128 + rows]
    g.execute({**feeds, out_t: view}, None)
    torch.cuda.synchronize()
    assert bool((big[:, :128] == -7.0).all()) and bool((big[:, 128 + rows :] == -7.0).all())
    # the reference engine on the same graph agrees on every row
    g2, feeds2, out2 = _graph(token, weight, offs, mode, idx, ks)
    g2.build([cudnn.heur_mode.FALLBACK])
    want = torch.full((1, rows, n), -7.0, dtype=torch.bfloat16, device="cuda")
    g2.execute({**feeds2, out2: want}, None)
    assert_close(view.cpu(), want.cpu(), torch.bfloat16, 100)
