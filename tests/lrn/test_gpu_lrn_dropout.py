"""GPU checks of the LRN and dropout engines (pytest -m gpu): LRN and divisive
normalization forward and backward against float64 PyTorch on realistic shapes, NCHW and
NHWC, float32 / bfloat16; dropout masks bit-identical to the CPU's NumPy Philox (the
same seed gives the same mask on every device), including past 2^31 elements; the legacy
calls with blending and device-side states."""

import numpy as np
import pytest
import torch
from test_lrn import torch_div_norm, torch_lrn

import opendnn.frontend as cudnn
from opendnn.ops import dropout as ref

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
P = dict(lrn_alpha=1e-3, lrn_beta=0.75, lrn_k=2.0)


def _relerr(out, want):
    out, want = out.double().cpu(), want.double().cpu()
    assert not torch.isnan(out).any(), "unwritten (NaN-poisoned) outputs"
    return ((out - want).norm() / max(want.norm().item(), 1e-30)).item()


def _layout(t, fmt):
    if fmt == "nhwc":
        return t.contiguous(
            memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d
        )
    return t


def _run(g, pack, outs, engine="lrn", check=None):
    """Run the heuristics' first plan; with ``check``, every plan of ``engine`` (both
    backward schedules of LRN), each checked after its run."""
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0).startswith(engine), g.get_plan_name_at_index(0)
    plans = (
        [
            i
            for i in range(g.get_execution_plan_count())
            if g.get_plan_name_at_index(i).startswith(engine)
        ]
        if check
        else [0]
    )
    for i in plans:
        g.build_plan_at_index(i)
        for o in outs:
            pack[o[0]] = o[1].fill_(float("nan")) if o[1].is_floating_point() else o[1]
        ws = torch.empty(
            max(g.get_workspace_size_plan_at_index(i), 1), device="cuda", dtype=torch.uint8
        )
        g.execute_plan_at_index(pack, ws.fill_(255), i)
        torch.cuda.synchronize()
        if check:
            check(g.get_plan_name_at_index(i))


@pytest.mark.parametrize("shape", [(32, 64, 28, 28), (8, 96, 13, 17), (4, 16, 8, 12, 10)])
@pytest.mark.parametrize("fmt", ["nchw", "nhwc"])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [5, 4])
def test_lrn_forward_and_backward(shape, fmt, dt, n):
    x = _layout(torch.randn(shape, device="cuda", dtype=dt) * 3, fmt)
    want = torch_lrn(x.double(), n, P["lrn_alpha"], 0.75, 2.0)
    g = cudnn.pygraph()
    tx = g.tensor_like(x)
    ty = g.lrn(tx, lrn_n=n, **P)
    ty.set_output(True)
    y = torch.empty_like(x)
    _run(g, {tx: x}, [(ty, y)])
    assert _relerr(y, want) < TOL[dt]
    xr = x.double().requires_grad_(True)
    dy = torch.randn_like(x)
    torch_lrn(xr, n, P["lrn_alpha"], 0.75, 2.0).backward(dy.double())
    g = cudnn.pygraph()
    tdy, tx, tyv = g.tensor_like(dy), g.tensor_like(x), g.tensor_like(y)
    tdx = g.lrn_backward(tdy, tx, tyv, lrn_n=n, **P)
    tdx.set_output(True)
    dx = torch.empty_like(x)

    def check(name):
        assert _relerr(dx, xr.grad) < 2 * TOL[dt], name

    _run(g, {tdy: dy, tx: x, tyv: y}, [(tdx, dx)], check=check)


@pytest.mark.parametrize(
    "shape,n", [((8, 16, 32, 32), 5), ((2, 8, 9, 10, 11), 3), ((4, 3, 64, 64), 16)]
)
@pytest.mark.parametrize("fmt", ["nchw", "nhwc"])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_divisive_normalization_forward_and_backward(shape, n, fmt, dt):
    x = _layout(torch.randn(shape, device="cuda", dtype=dt) * 2, fmt)
    m = _layout(torch.randn(shape, device="cuda", dtype=dt) * 0.3, fmt)
    g = cudnn.pygraph()
    tx, tm = g.tensor_like(x), g.tensor_like(m)
    ty = g.divisive_normalization(tx, tm, lrn_n=n, **P)
    ty.set_output(True)
    y = torch.empty_like(x)
    _run(g, {tx: x, tm: m}, [(ty, y)])
    assert (
        _relerr(y, torch_div_norm(x.double(), m.double(), n, P["lrn_alpha"], 0.75, 2.0)) < TOL[dt]
    )
    xr, mr = x.double().requires_grad_(True), m.double().requires_grad_(True)
    dy = torch.randn_like(x)
    torch_div_norm(xr, mr, n, P["lrn_alpha"], 0.75, 2.0).backward(dy.double())
    g = cudnn.pygraph()
    tdy, tx, tm = g.tensor_like(dy), g.tensor_like(x), g.tensor_like(m)
    tdx, tdm = g.divisive_normalization_backward(tdy, tx, tm, lrn_n=n, **P)
    tdx.set_output(True)
    tdm.set_output(True)
    dx, dm = torch.empty_like(x), torch.empty_like(x)
    _run(g, {tdy: dy, tx: x, tm: m}, [(tdx, dx), (tdm, dm)])
    assert _relerr(dx, xr.grad) < 2 * TOL[dt]
    assert _relerr(dm, mr.grad) < 2 * TOL[dt]


def _dropout(x, p, seed, offset, device_rng=False):
    g = cudnn.pygraph()
    tx = g.tensor_like(x)
    pack = {tx: x}
    if device_rng:
        ts = g.tensor([1], [1], cudnn.data_type.INT64)
        to = g.tensor([1], [1], cudnn.data_type.INT64)
        pack.update(
            {ts: torch.tensor([seed], device="cuda"), to: torch.tensor([offset], device="cuda")}
        )
        seed, offset = ts, to
    ty, tm = g.dropout(tx, p, seed, offset)
    ty.set_output(True)
    tm.set_output(True).set_data_type(cudnn.data_type.UINT8)
    y = torch.empty_like(x)
    mask = torch.empty_like(x, dtype=torch.uint8)  # x's layout, as inferred
    _run(g, pack, [(ty, y), (tm, mask)], "dropout")
    return y, mask


@pytest.mark.parametrize("device_rng", [False, True])
@pytest.mark.parametrize("fmt", ["nchw", "nhwc"])
def test_dropout_mask_equals_the_cpu_stream(device_rng, fmt):
    x = _layout(torch.randn(16, 32, 24, 24, device="cuda", dtype=torch.bfloat16), fmt)
    seed, offset, p = 2**45 + 17, 12345, 0.3
    y, mask = _dropout(x, p, seed, offset, device_rng)
    want = ref.mask(seed, offset, tuple(x.shape), p).astype(np.uint8)
    assert np.array_equal(mask.cpu().numpy(), want)
    kept = mask.double().mean().item()
    assert abs(kept - 0.7) < 5 * (0.21 / x.numel()) ** 0.5
    assert _relerr(y, x.double() * mask.double() / 0.7) < 1e-2


def test_dropout_past_2_to_the_31_elements():
    """int64 indexing: counters and offsets of elements beyond 2^31 match the CPU stream."""
    n = 2**31 + 4099
    x = torch.ones(n, device="cuda", dtype=torch.bfloat16)
    y, mask = _dropout(x, 0.5, 7, 3)
    for start in (0, 2**31 - 501, n - 1000):
        got = mask[start : start + 1000].cpu().numpy()
        u = ref.uniform_at(7, 3, np.arange(start, start + len(got)))
        assert np.array_equal(got, (u >= np.float32(0.5)).astype(np.uint8))
    del x, y, mask


def test_legacy_lrn_and_dropout_on_the_device():
    import opendnn.legacy as L

    h = L.create("cuda")
    dims = (8, 64, 14, 14)
    d = L.create_tensor_descriptor()
    L.set_tensor_4d_descriptor(d, L.TensorFormat.NHWC, L.DataType.FLOAT, *dims)
    norm = L.create_lrn_descriptor()
    L.set_lrn_descriptor(norm, 5, 1e-3, 0.75, 2.0)
    x = torch.randn(dims, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randn(dims, device="cuda").to(memory_format=torch.channels_last)
    prior = y.clone()
    L.lrn_cross_channel_forward(h, norm, L.LRNMode.CROSS_CHANNEL_DIM1, 0.5, d, x, 2.0, d, y)
    want = 0.5 * torch_lrn(x.double(), 5, 1e-3, 0.75, 2.0) + 2.0 * prior.double()
    assert _relerr(y, want) < 1e-5
    states = torch.empty(L.dropout_get_states_size(h), dtype=torch.uint8, device="cuda")
    desc = L.create_dropout_descriptor()
    L.set_dropout_descriptor(desc, h, 0.2, states, states.numel(), 99)
    reserve = torch.empty(L.dropout_get_reserve_space_size(d), dtype=torch.uint8, device="cuda")
    for call in range(2):
        out = torch.empty_like(x)
        L.dropout_forward(h, desc, d, x, d, out, reserve, reserve.numel())
        m = ref.mask(99, call * ref.counters(x.numel()), dims, 0.2)
        assert _relerr(out, x.double() * torch.from_numpy(m).cuda() / 0.8) < 1e-6
    assert states.view(torch.int64).tolist() == [99, 0, 2 * ref.counters(x.numel()), 0]
    dx = torch.empty_like(x)
    L.dropout_backward(h, desc, d, x, d, dx, reserve, reserve.numel())
    assert torch.equal(dx == 0, out == 0)
