"""GPU checks of the pooling engines against PyTorch (pytest -m gpu): every config each
engine lists (the compiled kernels), NCHW / NHWC / strided, 2-D and 3-D, float32 /
float16 / bfloat16, max (with and without the Index, backward from the Index and from X)
and both average modes; the bench shape; int64 offsets past 2**31 elements; the legacy
calls with blending."""

import math

import pytest
import torch
import torch.nn.functional as F

import opendnn.frontend as cudnn
from opendnn.engines.pool import shapes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
M = cudnn.resample_mode


def _relerr(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    assert not torch.isnan(out).any(), "unwritten (NaN-poisoned) outputs"
    return ((out - ref).norm() / max(ref.norm().item(), 1e-30)).item()


def _every_plan(g, prefix, run):
    """Build every plan of engine ``prefix`` and call ``run(index)`` for each."""
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith(prefix), g.get_plan_name_at_index(0)
    names = []
    for i in range(g.get_execution_plan_count()):
        name = g.get_plan_name_at_index(i)
        if not name.startswith(prefix + "#"):
            continue
        g.build_plan_at_index(i)
        run(i)
        names.append(name)
    assert names
    return names


def _execute(g, pack, i):
    ws = torch.empty(
        max(g.get_workspace_size_plan_at_index(i), 1), device="cuda", dtype=torch.uint8
    ).fill_(255)
    g.execute_plan_at_index(pack, ws, i)


def _torch_pool(x, mode, w, s, p):
    nd = x.dim() - 2
    if mode == "MAXPOOL":
        return getattr(F, f"max_pool{nd}d")(x, w, s, p, return_indices=True)
    return getattr(F, f"avg_pool{nd}d")(
        x, w, s, p, count_include_pad=mode == "AVGPOOL_INCLUDE_PADDING"
    ), None


def _layout(x, layout):
    if layout == "nhwc":
        return x.contiguous(
            memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        )
    if layout == "strided":
        return torch.empty(*x.shape[:-1], 2 * x.shape[-1], device="cuda", dtype=x.dtype)[
            ..., ::2
        ].copy_(x)
    return x


@pytest.mark.parametrize("case", shapes.GPU, ids=shapes.GPU_IDS)
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "strided"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32, torch.float16])
@pytest.mark.parametrize("mode", ["MAXPOOL", "AVGPOOL_INCLUDE_PADDING", "AVGPOOL_EXCLUDE_PADDING"])
def test_forward_and_backward_every_config(case, layout, dt, mode):
    shape, w, s, p = case
    x = _layout(torch.randn(shape, device="cuda", dtype=dt), layout)
    # the reference runs on the CPU: on the H100 (torch 2.11) PyTorch's CUDA avg_pool2d
    # backward of channels-last float64 with padding differs from its own CPU result by
    # up to 0.93, while ours matches the CPU to 1e-7
    xr = x.double().cpu().requires_grad_(True)
    ref, pt_idx = _torch_pool(xr, mode, w, s, p)
    g = cudnn.pygraph()
    tx = g.tensor_like(x)
    ty, tix = g.resample(tx, M[mode], list(w), list(s), padding=list(p), generate_index=True)
    ty.set_output(True)
    g.validate()
    y = torch.empty_strided(ty.get_dim(), ty.get_stride(), device="cuda", dtype=dt)
    pack = {tx: x, ty: y}
    if tix is not None:
        ix = torch.empty_strided(
            tix.get_dim(),
            tix.get_stride(),
            device="cuda",
            dtype=torch.int8 if math.prod(w) <= 128 else torch.int32,
        )
        pack[tix] = ix

    def check_fwd(i):
        y.fill_(float("nan"))
        if tix is not None:
            ix.fill_(-1)
        _execute(g, pack, i)
        if mode == "MAXPOOL":  # exact: the maximum is one of the inputs
            assert torch.equal(y.double().cpu(), ref.detach().to(dt).double())
            assert int(ix.min()) >= 0 and int(ix.max()) < math.prod(w)
        else:
            assert _relerr(y, ref.detach()) < TOL[dt]

    _every_plan(g, "pool", check_fwd)
    dy = _layout(torch.randn(ref.shape, device="cuda", dtype=dt), layout)
    ref.backward(dy.double().cpu())
    sources = ("index", "x") if mode == "MAXPOOL" else (None,)
    for source in sources:
        g = cudnn.pygraph()
        tdy = g.tensor_like(dy)
        bpack = {tdy: dy}
        kw = {}
        if source == "index":
            kw["index"] = g.tensor_like(ix)
            bpack[kw["index"]] = ix
        elif source == "x":
            kw["input"] = g.tensor_like(x)
            bpack[kw["input"]] = x
        tdx = g.resample_backward(tdy, M[mode], list(w), list(s), padding=list(p), **kw)
        tdx.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
        dx = torch.empty_strided(x.shape, x.stride(), device="cuda", dtype=dt)
        bpack[tdx] = dx

        def check_bwd(i):
            dx.fill_(float("nan"))
            _execute(g, bpack, i)
            assert _relerr(dx, xr.grad) < 2 * TOL[dt], (source, i)

        _every_plan(g, "pool_backward", check_bwd)


def test_index_is_pytorchs_argmax():
    x = torch.randn(16, 64, 56, 56, device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last
    )
    _, pt = F.max_pool2d(x.float(), 3, 2, 1, return_indices=True)
    g = cudnn.pygraph()
    tx = g.tensor_like(x)
    ty, tix = g.resample(tx, M.MAXPOOL, [3, 3], [2, 2], padding=[1, 1], generate_index=True)
    ty.set_output(True)
    g.build([cudnn.heur_mode.A])
    y = torch.empty_strided(ty.get_dim(), ty.get_stride(), device="cuda", dtype=x.dtype)
    ix = torch.empty_strided(tix.get_dim(), tix.get_stride(), device="cuda", dtype=torch.int8)
    g.execute({tx: x, ty: y, tix: ix}, None)
    k = ix.long()
    oh = torch.arange(28, device="cuda")[:, None]
    ow = torch.arange(28, device="cuda")[None, :]
    assert torch.equal((oh * 2 - 1 + k // 3) * 56 + ow * 2 - 1 + k % 3, pt)


def test_max_backward_is_deterministic():
    x = torch.randn(32, 128, 56, 56, device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last
    )
    dy = torch.randn(32, 128, 28, 28, device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last
    )
    g = cudnn.pygraph()
    tdy, tx = g.tensor_like(dy), g.tensor_like(x)
    tdx = g.resample_backward(tdy, M.MAXPOOL, [3, 3], [2, 2], padding=[1, 1], input=tx)
    tdx.set_output(True)
    g.build([cudnn.heur_mode.A])
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    outs = []
    for _ in range(3):
        dx = torch.full_like(x, float("nan"))
        g.execute({tdy: dy, tx: x, tdx: dx}, ws)
        outs.append(dx)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2])


def test_int64_offsets_past_two_to_the_31():
    """2.1e9 elements (4.3 GB of bf16): the kernels index in int64."""
    x = torch.randn(1, 64, 4100, 8200, device="cuda", dtype=torch.bfloat16)
    g = cudnn.pygraph()
    tx = g.tensor_like(x)
    ty, _ = g.resample(tx, M.MAXPOOL, [2, 2], [2, 2])
    ty.set_output(True)
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith("pool")
    y = torch.full(ty.get_dim(), float("nan"), device="cuda", dtype=x.dtype)
    g.execute({tx: x, ty: y}, None)
    assert torch.equal(y, F.max_pool2d(x, 2, 2))


def test_legacy_pooling_with_blending():
    import opendnn.legacy as L

    dims = (8, 64, 28, 28)
    h = L.create("cuda")
    xd, yd = L.create_tensor_descriptor(), L.create_tensor_descriptor()
    L.set_tensor_4d_descriptor(xd, L.TensorFormat.NHWC, L.DataType.FLOAT, *dims)
    L.set_tensor_4d_descriptor(yd, L.TensorFormat.NHWC, L.DataType.FLOAT, 8, 64, 14, 14)
    p = L.create_pooling_descriptor()
    L.set_pooling_2d_descriptor(
        p,
        L.PoolingMode.AVERAGE_COUNT_EXCLUDE_PADDING,
        L.NanPropagation.NOT_PROPAGATE_NAN,
        3,
        3,
        1,
        1,
        2,
        2,
    )
    x = torch.randn(dims, device="cuda").contiguous(memory_format=torch.channels_last)
    y = torch.randn(8, 64, 14, 14, device="cuda").contiguous(memory_format=torch.channels_last)
    prior = y.clone()
    L.pooling_forward(h, p, 0.5, xd, x, 2.0, yd, y)
    ref = F.avg_pool2d(x.double(), 3, 2, 1, count_include_pad=False)
    assert _relerr(y, 0.5 * ref + 2.0 * prior.double()) < 1e-5
