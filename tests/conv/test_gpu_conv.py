"""Every convolution engine on the GPU against float64 (pytest -m gpu)."""

import pytest
import torch
import torch.nn.functional as F

import opendnn.frontend as cudnn
from opendnn.engines.conv import shapes
from opendnn.enums import NumericalNote

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

TOL = {torch.bfloat16: 1.5e-2, torch.float16: 3e-3, torch.float32: 1e-5}


def _relerr(out, ref):
    out = out.double()
    assert not torch.isnan(out).any(), "unwritten (NaN-poisoned) outputs"
    return ((out - ref).norm() / max(ref.norm().item(), 1e-30)).item()


def _run(g, pack, outs, engine_id):
    g.validate()
    from opendnn.engines.registry import by_id
    from opendnn.handle import target_for

    e = by_id(engine_id)
    target = target_for(str(torch.device("cuda", torch.cuda.current_device())))
    sup = e.check_support(g.op_graph, target)
    if not sup.ok:
        pytest.skip(f"{e.name} declines: {sup.reason}")
    g.create_execution_plan(engine_id, e.configs(g.op_graph, target)[0].knob_dict)
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({**pack, **outs}, ws)
    torch.cuda.synchronize()


def _empty(t):
    return torch.empty_strided(
        t.get_dim(),
        t.get_stride(),
        device="cuda",
        dtype={
            cudnn.data_type.FLOAT: torch.float32,
            cudnn.data_type.BFLOAT16: torch.bfloat16,
            cudnn.data_type.HALF: torch.float16,
        }[t.get_data_type()],
    ).fill_(float("nan"))


def _run_wgrad_tma(kn, shape, dt):
    """(dw from conv_wgrad_implicit_gemm's config ``kn``, float64 reference) on a 2-D NHWC
    problem ``shape`` = (N, C, H, K, F, stride, pad) in ``dt``; dw NaN-poisoned first."""
    import dataclasses

    n, c, h, k, f, s, p = shape
    cl = torch.channels_last
    x = torch.randn(n, c, h, h, device="cuda", dtype=dt).to(memory_format=cl)
    w = torch.zeros(k, c, f, f, device="cuda", dtype=dt).to(memory_format=cl)
    wd = w.double().requires_grad_(True)
    yd = F.conv2d(x.double(), wd, stride=s, padding=p)
    dy = torch.randn(yd.shape, device="cuda", dtype=dt).to(memory_format=cl)
    yd.backward(dy.double())
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(tx, tdy, padding=[p, p], stride=[s, s])
    dw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
    g.validate()
    g.create_execution_plan(5, dataclasses.asdict(kn))
    out = _empty(dw)
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({tx: x, tdy: dy, dw: out}, ws)
    torch.cuda.synchronize()
    return out, wd.grad


@pytest.mark.parametrize("shape", shapes.GPU)
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("engine", [3, 11, 6, 7, 8, 9, 13, 14, 15])
def test_fprop_engines(shape, dt, engine):
    n, c, h, k, f, s, p = shape
    cl = torch.channels_last
    x = torch.randn(n, c, h, h, device="cuda", dtype=dt).to(memory_format=cl)
    w = (torch.randn(k, c, f, f, device="cuda", dtype=dt) * 0.1).to(memory_format=cl)
    b = torch.randn(1, k, 1, 1, device="cuda", dtype=dt)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[p, p], stride=[s, s]), tb))
    y.set_output(True)
    g.validate()
    out = _empty(y)
    _run(g, {tx: x, tw: w, tb: b}, {y: out}, engine)
    ref = torch.relu(F.conv2d(x.double(), w.double(), stride=s, padding=p) + b.double())
    tol = TOL[dt] * (4 if engine in (9, 15) else 1)  # Winograd transforms round more
    assert _relerr(out, ref) < tol


@pytest.mark.parametrize("shape", shapes.GPU)
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("engine", [4, 5, 10, 12, 16, 17, 18, 19, 20, 21, 22, 23, 24, 53, 57])
def test_backward_engines(shape, dt, engine):
    n, c, h, k, f, s, p = shape
    cl = torch.channels_last
    x = torch.randn(n, c, h, h, device="cuda", dtype=dt).to(memory_format=cl)
    w = (torch.randn(k, c, f, f, device="cuda", dtype=dt) * 0.1).to(memory_format=cl)
    xd, wd = x.double().requires_grad_(True), w.double().requires_grad_(True)
    yd = F.conv2d(xd, wd, stride=s, padding=p)
    dy = torch.randn(yd.shape, device="cuda", dtype=dt).to(memory_format=cl)
    yd.backward(dy.double())
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    if engine in (4, 16, 17, 18, 20, 21, 53, 57):
        tdy, tw = g.tensor_like(dy), g.tensor_like(w)
        out_t = g.conv_dgrad(tdy, tw, padding=[p, p], stride=[s, s])
        out_t.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
        pack, ref = {tdy: dy, tw: w}, xd.grad
    else:
        tx, tdy = g.tensor_like(x), g.tensor_like(dy)
        out_t = g.conv_wgrad(tx, tdy, padding=[p, p], stride=[s, s])
        out_t.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
        pack, ref = {tx: x, tdy: dy}, wd.grad
    g.validate()
    out = _empty(out_t)
    _run(g, pack, {out_t: out}, engine)
    assert _relerr(out, ref) < TOL[dt] * (4 if engine in (16, 18, 24) else 2)


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("cfg", range(6))
def test_col2im_dgrad_first_configs(layout, dt, cfg, monkeypatch):
    """conv_dgrad_col2im (57) on a ResNet stem (C = 3, 7x7 stride 2) at N = 4: its six
    first-ranked GEMM configs (TF32 for float32), NaN-poisoned dX against float64."""
    from opendnn import backends
    from opendnn.engines.registry import by_id
    from opendnn.handle import target_for

    monkeypatch.setattr(backends, "allow_tf32", True)
    cl = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    x = torch.randn(4, 3, 56, 56, device="cuda", dtype=dt).to(memory_format=cl)
    w = (torch.randn(64, 3, 7, 7, device="cuda", dtype=dt) * 0.1).to(memory_format=cl)
    xd, wd = x.double().requires_grad_(True), w.double()
    yd = F.conv2d(xd, wd, stride=2, padding=3)
    dy = torch.randn(yd.shape, device="cuda", dtype=dt).to(memory_format=cl)
    yd.backward(dy.double())
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw = g.tensor_like(dy), g.tensor_like(w)
    dx = g.conv_dgrad(tdy, tw, padding=[3, 3], stride=[2, 2])
    dx.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
    g.validate()
    target = target_for(str(torch.device("cuda", torch.cuda.current_device())))
    configs = by_id(57).configs(g.op_graph, target)
    assert len(configs) > cfg, f"only {len(configs)} configs"
    g.create_execution_plan(57, configs[cfg].knob_dict)
    out = _empty(dx)
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({tdy: dy, tw: w, dx: out}, ws)
    torch.cuda.synchronize()
    tol = 2e-3 if dt == torch.float32 else TOL[dt]  # TF32: 10-bit mantissas
    assert _relerr(out, xd.grad) < tol, configs[cfg].label()


@pytest.mark.parametrize("shape", shapes.GPU_TMA)
@pytest.mark.parametrize("cfg", range(11))
def test_fprop_tma_path_every_config(shape, cfg):
    """Each TMA knob set of conv_implicit_gemm on stride 1, stride 2 and an odd image."""
    import dataclasses

    from opendnn.engines.conv.tma import _kernels as T

    n, c, h, k, f, s, p = shape
    cl, dt = torch.channels_last, torch.bfloat16
    kn = T.KNOB_SPACE[cfg]
    if s == 2 and c % kn.BLOCK_K:
        pytest.skip("stride 2 needs BLOCK_K | C")
    x = torch.randn(n, c, h, h, device="cuda", dtype=dt).to(memory_format=cl)
    w = (torch.randn(k, c, f, f, device="cuda", dtype=dt) * 0.1).to(memory_format=cl)
    b = torch.randn(1, k, 1, 1, device="cuda", dtype=dt)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[p, p], stride=[s, s]), tb))
    y.set_output(True)
    g.validate()
    g.create_execution_plan(3, dataclasses.asdict(kn))
    out = _empty(y)
    g.execute({tx: x, tw: w, tb: b, y: out}, None)
    torch.cuda.synchronize()
    ref = torch.relu(F.conv2d(x.double(), w.double(), stride=s, padding=p) + b.double())
    assert _relerr(out, ref) < TOL[dt]


@pytest.mark.parametrize("shape", shapes.GPU_TMA)
@pytest.mark.parametrize("cfg", range(20))
def test_fprop_tma_tf32_every_config(shape, cfg, monkeypatch):
    """Each float32 (TF32) box config of conv_implicit_gemm with bias + relu, NaN-poisoned
    output, against float64; and through the NCHW transform (44) on the first shape."""
    import dataclasses

    from opendnn import backends
    from opendnn.engines.conv.tma import engine as tma

    monkeypatch.setattr(backends, "allow_tf32", True)
    assert len(tma.TF32_KNOBS) == 20, "parametrize over every TF32 config"
    n, c, h, k, f, s, p = shape
    kn = tma.TF32_KNOBS[cfg]
    if s == 2 and c % kn.BLOCK_K:
        pytest.skip("stride 2 needs BLOCK_K | C")
    x = torch.randn(n, c, h, h, device="cuda").to(memory_format=torch.channels_last)
    w = (torch.randn(k, c, f, f, device="cuda") * 0.1).to(memory_format=torch.channels_last)
    b = torch.randn(1, k, 1, 1, device="cuda")
    ref = torch.relu(F.conv2d(x.double(), w.double(), stride=s, padding=p) + b.double())
    for eid, (xx, ww) in ((3, (x, w)), (44, (x.contiguous(), w.contiguous()))):
        if eid == 44 and shape != shapes.GPU_TMA[0]:
            continue
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw, tb = g.tensor_like(xx), g.tensor_like(ww), g.tensor_like(b)
        y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[p, p], stride=[s, s]), tb))
        y.set_output(True)
        g.validate()
        knobs = tma.drop_defaults(dataclasses.asdict(kn))
        g.create_execution_plan(eid, knobs if eid == 3 else {**knobs, "ENGINE": 3})
        out = _empty(y)
        ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        g.execute({tx: xx, tw: ww, tb: b, y: out}, ws)
        torch.cuda.synchronize()
        assert _relerr(out, ref) < 3e-3, (eid, str(kn))


@pytest.mark.parametrize("shape", shapes.GPU_DGRAD_TMA)
@pytest.mark.parametrize("cfg", range(22))
def test_dgrad_tma_tf32_every_config(shape, cfg, monkeypatch):
    """Each float32 (TF32) box config of conv_dgrad_implicit_gemm: NHWC dy with the filter
    K-innermost, and NCHW through the channels-last transform (45, which copies the
    filter so); NaN-poisoned dx against float64."""
    import dataclasses

    from opendnn import backends
    from opendnn.engines.conv.tma import dgrad as tma_dgrad
    from opendnn.engines.conv.tma import engine as tma

    monkeypatch.setattr(backends, "allow_tf32", True)
    assert len(tma_dgrad.TF32_KNOBS) == 22, "parametrize over every TF32 config"
    kn = tma_dgrad.TF32_KNOBS[cfg]
    n, c, h, k, f, s, p = shape
    o = (h + 2 * p - f) // s + 1
    w = torch.randn(k, c, f, f, device="cuda") * 0.1
    dy = torch.randn(n, k, o, o, device="cuda")
    ref = torch.nn.grad.conv2d_input((n, c, h, h), w.double(), dy.double(), stride=s, padding=p)
    w_kmaj = w.permute(2, 3, 1, 0).contiguous().permute(3, 2, 0, 1)
    cl = torch.channels_last
    runs = ((4, dy.to(memory_format=cl), w_kmaj, cl), (45, dy, w, torch.contiguous_format))
    for eid, d_, w_, fmt in runs:
        if kn.SPLIT > 1 and s != 1:
            continue
        like = torch.empty(n, c, h, h, device="cuda").to(memory_format=fmt)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tdy, tw = g.tensor_like(d_), g.tensor_like(w_)
        dx = g.conv_dgrad(tdy, tw, padding=[p, p], stride=[s, s])
        dx.set_dim(list(like.shape)).set_stride(list(like.stride())).set_output(True)
        g.validate()
        knobs = tma.drop_defaults(dataclasses.asdict(kn))
        g.create_execution_plan(eid, knobs if eid == 4 else {**knobs, "ENGINE": 4})
        out = like.fill_(float("nan"))
        ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        g.execute({tdy: d_, tw: w_, dx: out}, ws)
        torch.cuda.synchronize()
        assert _relerr(out, ref) < 3e-3, (eid, str(kn))


def _fprop_bias_relu_with(knobs, shape, layout="nhwc", scale=0.1):
    """conv + bias + relu (bf16) on the forward TMA config ``knobs`` against float64."""
    from opendnn.engines.conv.tma import engine as tma

    n, c, h, k, f, s, p = shape
    dt = torch.bfloat16
    x = torch.randn(n, c, h, h, device="cuda", dtype=dt)
    w = torch.randn(k, c, f, f, device="cuda", dtype=dt) * scale
    if layout == "nhwc":
        x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
    b = torch.randn(1, k, 1, 1, device="cuda", dtype=dt)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[p, p], stride=[s, s]), tb))
    y.set_output(True)
    g.validate()
    g.create_execution_plan(3, tma.FPROP.knob_items(knobs))
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    out = _empty(y)
    g.execute({tx: x, tw: w, tb: b, y: out}, ws)
    torch.cuda.synchronize()
    ref = torch.relu(F.conv2d(x.double(), w.double(), stride=s, padding=p) + b.double())
    assert _relerr(out, ref) < TOL[dt]


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize(
    "shape", [(4, 3, 56, 64, 7, 2, 3), (2, 3, 31, 32, 7, 2, 3), (2, 4, 30, 48, 3, 2, 1)]
)
@pytest.mark.parametrize("cfg", range(4))
def test_fprop_tma_packed_every_config(layout, shape, cfg):
    """Each phase-packed TMA config (the stem: C = 3, stride 2), NHWC and NCHW operands."""
    from opendnn.engines.conv.tma import engine as tma

    _fprop_bias_relu_with(tma.PACKED_KNOBS[cfg], shape, layout)


@pytest.mark.parametrize("shape", [(8, 512, 7, 512, 3, 1, 1), (4, 128, 14, 96, 3, 2, 1)])
@pytest.mark.parametrize("cfg", range(9))
def test_fprop_tma_split_every_config(shape, cfg):
    """Each split-reduction TMA config (float32 partials summed in slice order, then the
    epilogue) on 7x7 images and a stride-2 layer."""
    from opendnn.engines.conv.tma import engine as tma

    _fprop_bias_relu_with(tma.SPLIT_KNOBS[cfg], shape, scale=0.05)


# (N, C, H, K, filt, stride, pad) of dx [N, C, H, H]: stride 1; stride 2 on an odd dx
# (phases of 8 and 7 rows); the ResNet stem at small N (C = 3: filter through pointers)


@pytest.mark.parametrize("shape", shapes.GPU_DGRAD_TMA)
@pytest.mark.parametrize("cfg", range(22))
def test_dgrad_tma_path_every_config(shape, cfg):
    """Each TMA knob set of conv_dgrad_implicit_gemm (stride phases, pointer filter; split
    sets on a stride-1 layer)."""
    import dataclasses

    from opendnn.engines.conv.tma import _dgrad_kernels as D

    assert len(D.KNOB_SPACE) == 22, "parametrize over every dgrad TMA config"
    kn = D.KNOB_SPACE[cfg]
    n, c, h, k, f, s, p = shape if kn.SPLIT == 1 else (4, 128, 7, 256, 3, 1, 1)
    cl, dt = torch.channels_last, torch.bfloat16
    o = (h + 2 * p - f) // s + 1
    w = (torch.randn(k, c, f, f, device="cuda", dtype=dt) * 0.1).to(memory_format=cl)
    dy = torch.randn(n, k, o, o, device="cuda", dtype=dt).to(memory_format=cl)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw = g.tensor_like(dy), g.tensor_like(w)
    dx = g.conv_dgrad(tdy, tw, padding=[p, p], stride=[s, s])
    dx.set_dim([n, c, h, h]).set_stride([h * h * c, 1, h * c, c]).set_output(True)
    g.validate()
    g.create_execution_plan(4, dataclasses.asdict(kn))
    out = _empty(dx)
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({tdy: dy, tw: w, dx: out}, ws)
    torch.cuda.synchronize()
    ref = torch.nn.grad.conv2d_input((n, c, h, h), w.double(), dy.double(), stride=s, padding=p)
    assert _relerr(out, ref) < TOL[dt]


@pytest.mark.parametrize("kind", ["fprop", "dgrad"])
@pytest.mark.parametrize("cfg", range(7))
def test_flat_tma_tiles_every_config(kind, cfg):
    """Each flat-row knob set (FLAT=1, 1x1 filters) of engines 3 and 4 on a shape in turn:
    small and odd images, ResNet's l4 and l3 1x1 layers."""
    import dataclasses

    from opendnn.engines.conv.tma import engine as tma

    n, c, h, k, f, p = shapes.GPU_FLAT[cfg % len(shapes.GPU_FLAT)]
    cl, dt = torch.channels_last, torch.bfloat16
    kn = tma.flat_knobs(tma.FpropTmaKnobs)[cfg]
    knobs = tma.drop_defaults(dataclasses.asdict(kn))
    x = torch.randn(n, c, h, h, device="cuda", dtype=dt).to(memory_format=cl)
    w = (torch.randn(k, c, f, f, device="cuda", dtype=dt) * 0.05).to(memory_format=cl)
    dy = torch.randn(n, k, h, h, device="cuda", dtype=dt).to(memory_format=cl)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tw = g.tensor_like(w)
    if kind == "fprop":
        ta = g.tensor_like(x)
        out_t = g.conv_fprop(ta, tw, padding=[p, p]).set_output(True)
        feeds, eid = {ta: x, tw: w}, 3
        ref = F.conv2d(x.double(), w.double(), padding=p)
    else:
        ta = g.tensor_like(dy)
        out_t = (
            g.conv_dgrad(ta, tw, padding=[p, p])
            .set_dim([n, c, h, h])
            .set_stride([h * h * c, 1, h * c, c])
            .set_output(True)
        )
        feeds, eid = {ta: dy, tw: w}, 4
        ref = torch.nn.grad.conv2d_input((n, c, h, h), w.double(), dy.double(), padding=p)
    g.validate()
    g.create_execution_plan(eid, knobs)
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    out = _empty(out_t)
    g.execute({**feeds, out_t: out}, ws)
    torch.cuda.synchronize()
    assert _relerr(out, ref) < TOL[dt]


@pytest.mark.parametrize("cfg", range(60))
def test_wgrad_tma_path_every_config(cfg):
    """Each TMA knob set of conv_wgrad_implicit_gemm, on stride 1, stride 2 or an odd image
    in turn (flat-run sets: a 1x1 layer or the C = 3 stem), with one slice (odd entries)
    or three summed slices (even entries)."""
    import dataclasses

    from opendnn.engines.conv.tma import _wgrad_kernels as T

    if T.KNOB_SPACE[cfg].FLAT:  # a gathered run too large for registers takes the 1x1 only
        from opendnn.engines.conv.tma import _wgrad_flat_kernels as FL

        kn0 = T.KNOB_SPACE[cfg]
        gather = cfg % 2 and not FL.gather_too_large(kn0) and not FL.live_too_large(kn0)
        shape = [(8, 64, 13, 128, 1, 1, 0), (2, 3, 56, 64, 7, 2, 3)][gather]
    else:
        shape = shapes.GPU_TMA[cfg % 3]
    dt = torch.bfloat16
    kn = dataclasses.replace(T.KNOB_SPACE[cfg], SPLIT=1 if cfg % 2 else 3)
    out, ref = _run_wgrad_tma(kn, shape, dt)
    assert _relerr(out, ref) < TOL[dt]


# (x dims, K, stride, padding): 3-D boxes over N * OD images, stride 1 and 2, 32 channels
WGRAD_3D_CASES = [
    ((2, 32, 9, 12, 10), 64, (1, 1, 1), (1, 1, 1)),
    ((1, 64, 8, 16, 12), 32, (2, 2, 2), (1, 1, 1)),
]


@pytest.mark.parametrize("cfg", range(50))
def test_wgrad_tma_3d_every_box_config(cfg):
    """Each one-image box config of conv_wgrad_implicit_gemm on a 3-D problem (NDHWC),
    alternating stride 1 / 2 and one slice / three slices, NaN-poisoned dw."""
    import dataclasses

    from opendnn.engines.conv.tma import _wgrad_kernels as T

    kns = [k for k in T.KNOB_SPACE if not k.FLAT and k.TMA_IMGS == 1]
    if cfg >= len(kns):
        pytest.skip(f"{len(kns)} one-image box configs")
    xdims, k, s, p = WGRAD_3D_CASES[cfg % 2]
    kn = dataclasses.replace(kns[cfg], SPLIT=3 if cfg % 4 < 2 else 1)
    cl, dt = torch.channels_last_3d, torch.bfloat16
    x = torch.randn(xdims, device="cuda", dtype=dt).to(memory_format=cl)
    w = torch.zeros(k, xdims[1], 3, 3, 3, device="cuda", dtype=dt).to(memory_format=cl)
    wd = w.double().requires_grad_(True)
    yd = F.conv3d(x.double(), wd, stride=s, padding=p)
    dy = torch.randn(yd.shape, device="cuda", dtype=dt).to(memory_format=cl)
    yd.backward(dy.double())
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(tx, tdy, padding=list(p), stride=list(s))
    dw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
    g.validate()
    g.create_execution_plan(5, dataclasses.asdict(kn))
    out = _empty(dw)
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({tx: x, tdy: dy, dw: out}, ws)
    torch.cuda.synchronize()
    assert _relerr(out, wd.grad) < TOL[dt], str(kn)


def _pending_launchers(plan) -> int:
    count = 0
    for s in plan.stages:
        exe = getattr(s.executable, "inner", s.executable)
        for launcher, _ in getattr(exe, "launches", []):
            count += launcher._pending is not None
    return count


@pytest.mark.parametrize("workers", ["16", "0"])
def test_build_all_compiles_in_parallel(workers, monkeypatch):
    """build_plans(ALL) (as benchmark mode's candidate build) compiles under
    parallel_compile: in worker processes (jobs submitted, kernels collected when the
    build ends), or with workers off in threads (launchers hold futures until their first
    launch); either way every plan computes the convolution (each run against float64)."""
    from opendnn.runtime import compile_pool

    monkeypatch.setenv("OPENDNN_COMPILE_WORKERS", workers)
    compile_pool.shutdown()
    jobs = []
    real_submit = compile_pool.submit
    monkeypatch.setattr(compile_pool, "submit", lambda *a: jobs.append(a[1]) or real_submit(*a))
    cl = torch.channels_last
    x = torch.randn(4, 40, 13, 13 + int(workers), device="cuda", dtype=torch.bfloat16).to(
        memory_format=cl
    )
    w = (torch.randn(24, 40, 3, 3, device="cuda", dtype=torch.bfloat16) * 0.1).to(memory_format=cl)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = g.tensor_like(x), g.tensor_like(w)
    y = g.relu(g.conv_fprop(tx, tw, padding=[1, 1]))
    y.set_output(True)
    g.build([cudnn.heur_mode.A])
    g.build_plans(cudnn.build_plan_policy.ALL)
    plans = [p for p in g._plans if p.built]
    assert len(plans) >= 2
    if workers == "0":
        assert not jobs
        assert sum(_pending_launchers(p) for p in plans) > 0, "nothing compiled in threads"
    else:
        assert jobs, "no kernel went to a compile worker"
        assert sum(_pending_launchers(p) for p in plans[1:]) == 0, "left uncollected"
    ref = F.relu(F.conv2d(x.double(), w.double(), padding=1))
    ws = torch.empty(max(p.workspace_size for p in plans), device="cuda", dtype=torch.uint8)
    for i, p in enumerate(g._plans):
        if not p.built:
            continue
        out = _empty(y)
        g.execute_plan_at_index({tx: x, tw: w, y: out}, ws, i)
        torch.cuda.synchronize()
        assert _pending_launchers(p) == 0
        # Winograd's transforms add rounding (the every-engine tests allow 4x there too)
        tol = TOL[torch.bfloat16] * (4 if NumericalNote.WINOGRAD in p.numerical_notes() else 1)
        err = _relerr(out, ref)
        assert err < tol, f"{p.name}: relative error {err:.3g}"
    compile_pool.shutdown()


def test_parallel_compile_error_raises_at_launch():
    """A kernel that fails to compile inside parallel_compile raises Triton's error at
    its first launch, not silently."""
    from opendnn.runtime.launch import Launcher, kernel_from_source, parallel_compile

    k = kernel_from_source(
        "@triton.jit\ndef broken(X):\n    tl.static_assert(False, 'no')\n", "broken"
    )
    for workers in (False, True):
        launcher = Launcher(k, (1,), {})
        with parallel_compile(workers=workers):
            launcher.prepare_cuda([torch.float32])
        with pytest.raises(Exception, match="no|static"):
            launcher.launch([torch.zeros(4, device="cuda")])


def _depthwise_problem(shape, layout):
    """A ``shapes.GPU_DEPTHWISE`` problem: (C, multiplier, x dims, filter, pre, post,
    stride, a function storing a tensor in ``layout``, the float64 reference conv(x, w)).
    A pad of -1 means causal 1-D (k - 1 before, none after)."""
    n, c, h, mult, f, s, p = shape
    one_d = p < 0
    dims = (n, c, h) if one_d else (n, c, h, h)
    filt = (f,) if one_d else (f, f)
    pre, post = ([f - 1], [0]) if one_d else ([p, p], [p, p])
    stride = [s] * len(filt)
    pads = [q for a_, b_ in zip(reversed(pre), reversed(post)) for q in (a_, b_)]
    fn = F.conv1d if one_d else F.conv2d

    def stored(t):
        return t.movedim(1, -1).contiguous().movedim(-1, 1) if layout == "nhwc" else t

    def conv(x, w):
        return fn(F.pad(x, pads), w, stride=stride, groups=c)

    return c, mult, dims, filt, pre, post, stride, stored, conv


@pytest.mark.parametrize("shape", shapes.GPU_DEPTHWISE)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32, torch.float16])
def test_depthwise_engine_every_config(shape, layout, dt):
    """conv_depthwise (41), every config it lists for the problem, with bias + relu fused,
    against float64 PyTorch; a pad of -1 means causal 1-D (k - 1 before, none after)."""
    from opendnn.engines.registry import by_id
    from opendnn.handle import target_for

    c, mult, dims, filt, pre, post, stride, stored, ref_conv = _depthwise_problem(shape, layout)
    x = stored(torch.randn(dims, device="cuda", dtype=dt))
    w = stored(torch.randn((c * mult, 1, *filt), device="cuda", dtype=dt) * 0.3)
    b = torch.randn((1, c * mult) + (1,) * len(filt), device="cuda", dtype=dt)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    conv = g.conv_fprop(tx, tw, pre_padding=pre, post_padding=post, stride=stride)
    y = g.relu(g.bias(conv, tb))
    y.set_output(True)
    g.validate()
    e = by_id(41)
    target = target_for(str(torch.device("cuda", torch.cuda.current_device())))
    assert e.check_support(g.op_graph, target).ok
    ref = ref_conv(x.double(), w.double())
    ref = torch.relu(ref + b.double())
    for cfg in e.configs(g.op_graph, target):
        g.create_execution_plan(41, cfg.knob_dict)
        out = _empty(y)
        g.execute({tx: x, tw: w, tb: b, y: out}, None)
        torch.cuda.synchronize()
        assert _relerr(out, ref) < TOL[dt], cfg.label()


@pytest.mark.parametrize("shape", shapes.GPU_DEPTHWISE)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
def test_depthwise_dgrad_every_config(shape, layout, dt):
    """conv_dgrad_depthwise (42), every config, against float64 PyTorch autograd."""
    from opendnn.engines.registry import by_id
    from opendnn.handle import target_for

    c, mult, dims, filt, pre, post, stride, stored, ref_conv = _depthwise_problem(shape, layout)
    w = stored(torch.randn((c * mult, 1, *filt), device="cuda", dtype=dt) * 0.3)
    xr = torch.zeros(dims, device="cuda", dtype=torch.float64, requires_grad=True)
    y = ref_conv(xr, w.double())
    dy = stored(torch.randn(y.shape, device="cuda", dtype=dt))
    (ref,) = torch.autograd.grad(y, xr, dy.double())
    like = stored(torch.empty(dims, device="cuda", dtype=dt))
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw = g.tensor_like(dy), g.tensor_like(w)
    dx = g.conv_dgrad(tdy, tw, pre_padding=pre, post_padding=post, stride=stride)
    dx.set_dim(list(dims)).set_stride(list(like.stride())).set_output(True)
    dx.set_data_type(
        {torch.bfloat16: cudnn.data_type.BFLOAT16, torch.float32: cudnn.data_type.FLOAT}[dt]
    )
    g.validate()
    e = by_id(42)
    target = target_for(str(torch.device("cuda", torch.cuda.current_device())))
    assert e.check_support(g.op_graph, target).ok
    for cfg in e.configs(g.op_graph, target):
        g.create_execution_plan(42, cfg.knob_dict)
        out = like.fill_(float("nan"))
        g.execute({tdy: dy, tw: w, dx: out}, None)
        torch.cuda.synchronize()
        assert _relerr(out, ref) < TOL[dt], cfg.label()


@pytest.mark.parametrize("shape", shapes.GPU_DEPTHWISE)
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
def test_depthwise_wgrad_every_config(shape, layout, dt):
    """conv_wgrad_depthwise (43), every config, against float64 PyTorch autograd; the same
    config twice gives the same bits (fixed-order split)."""
    from opendnn.engines.registry import by_id
    from opendnn.handle import target_for

    c, mult, dims, filt, pre, post, stride, stored, ref_conv = _depthwise_problem(shape, layout)
    x = stored(torch.randn(dims, device="cuda", dtype=dt))
    wdims = (c * mult, 1, *filt)
    wr = torch.zeros(wdims, device="cuda", dtype=torch.float64, requires_grad=True)
    y = ref_conv(x.double(), wr)
    dy = stored(torch.randn(y.shape, device="cuda", dtype=dt))
    (ref,) = torch.autograd.grad(y, wr, dy.double())
    like = stored(torch.empty(wdims, device="cuda", dtype=dt))
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(tx, tdy, pre_padding=pre, post_padding=post, stride=stride)
    dw.set_dim(list(wdims)).set_stride(list(like.stride())).set_output(True)
    dw.set_data_type(
        {torch.bfloat16: cudnn.data_type.BFLOAT16, torch.float32: cudnn.data_type.FLOAT}[dt]
    )
    g.validate()
    e = by_id(43)
    target = target_for(str(torch.device("cuda", torch.cuda.current_device())))
    assert e.check_support(g.op_graph, target).ok
    for cfg in e.configs(g.op_graph, target):
        g.create_execution_plan(43, cfg.knob_dict)
        ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        runs = []
        for _ in range(2):
            out = like.clone().fill_(float("nan"))
            g.execute({tx: x, tdy: dy, dw: out}, ws)
            torch.cuda.synchronize()
            runs.append(out)
        assert _relerr(runs[0], ref) < TOL[dt] * 2, cfg.label()  # long float32 sums
        assert torch.equal(runs[0], runs[1]), cfg.label()


GRAPH_TYPES = {
    torch.bfloat16: cudnn.data_type.BFLOAT16,
    torch.float16: cudnn.data_type.HALF,
    torch.float32: cudnn.data_type.FLOAT,
}


def _direction_graph(kind, x, w, dy, refs, **args):
    """(graph, output tensor, pack, output-like buffer, float64 reference) of one direction
    of the convolution of x and w whose output gradient is dy; refs = (y, dx, dw)."""
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    if kind == "fprop":
        a, b = g.tensor_like(x), g.tensor_like(w)
        out, pack, like, ref = g.conv_fprop(a, b, **args), {a: x, b: w}, dy, refs[0]
    elif kind == "dgrad":
        a, b = g.tensor_like(dy), g.tensor_like(w)
        out, pack, like, ref = g.conv_dgrad(a, b, **args), {a: dy, b: w}, x, refs[1]
    else:
        a, b = g.tensor_like(x), g.tensor_like(dy)
        out, pack, like, ref = g.conv_wgrad(a, b, **args), {a: x, b: dy}, w, refs[2]
    out.set_dim(list(like.shape)).set_stride(list(like.stride())).set_output(True)
    out.set_data_type(GRAPH_TYPES[x.dtype])
    return g, out, pack, like, ref


def _every_config(g, eid, cfgs, pack, out, like, ref, tol):
    """Each config of engine ``eid`` once on a NaN-poisoned output, against ``ref``."""
    for cfg in cfgs:
        g.create_execution_plan(eid, cfg.knob_dict)
        ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        res = like.clone().fill_(float("nan"))
        g.execute({**pack, out: res}, ws)
        torch.cuda.synchronize()
        assert _relerr(res, ref) < tol, cfg.label()


# (x dims, K, filter, stride, padding): the ConvNeXt patchify stem, a 1x1, a 3x3 with an
# odd image, 1-D
CHANNELS_LAST_CASES = [
    ((4, 3, 32, 32), 16, (4, 4), (4, 4), (0, 0)),
    ((3, 24, 9, 7), 40, (1, 1), (1, 1), (0, 0)),
    ((2, 16, 15, 13), 32, (3, 3), (1, 1), (1, 1)),
    ((2, 32, 37), 48, (3,), (2,), (1,)),
]


@pytest.mark.parametrize("case", CHANNELS_LAST_CASES, ids=[f"c{i}" for i in range(4)])
@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("dt", [torch.float16, torch.float32, "tf32"])
def test_channels_last_transform_every_config(case, kind, dt):
    """conv_{fprop,dgrad,wgrad}_channels_last (44 / 45 / 46) on NCHW tensors, every config
    it offers (each an inner engine's config, outputs copied back or, DIRECT=1, written in
    place by the inner engine), NaN-poisoned outputs, against float64; float32 in IEEE and
    with TF32 allowed (the TF32 boxes inside)."""
    from opendnn import backends
    from opendnn.engines.registry import by_id
    from opendnn.handle import target_for

    allow = dt == "tf32"
    dt, tol = (torch.float32, 3e-3) if allow else (dt, TOL[dt] * 4)
    xdims, k, filt, stride, pad = case
    conv = {3: F.conv1d, 4: F.conv2d}[len(xdims)]
    x = torch.randn(xdims, device="cuda", dtype=dt)
    w = torch.randn((k, xdims[1], *filt), device="cuda", dtype=dt) * 0.2
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    y = conv(xr, wr, stride=stride, padding=pad)
    dy = torch.randn(y.shape, device="cuda", dtype=dt)
    dx, dwr = torch.autograd.grad(y, (xr, wr), dy.double())
    refs = (y.detach(), dx, dwr)
    g, out, pack, like, ref = _direction_graph(
        kind, x, w, dy, refs, padding=list(pad), stride=list(stride)
    )
    g.validate()
    eid = {"fprop": 44, "dgrad": 45, "wgrad": 46}[kind]
    e = by_id(eid)
    target = target_for(str(torch.device("cuda", torch.cuda.current_device())))
    tf32, backends.allow_tf32 = backends.allow_tf32, allow
    try:
        assert e.check_support(g.op_graph, target).ok
        cfgs = e.configs(g.op_graph, target)
        assert cfgs
        assert any(c.knob_dict.get("DIRECT") == 1 for c in cfgs), [c.label() for c in cfgs]
        _every_config(g, eid, cfgs, pack, out, like, ref, tol)
    finally:
        backends.allow_tf32 = tf32


# (N, C = K, groups, image, stride): ResNeXt's 32 groups of 4 and 16 channels, 8 of 8 at
# an odd image
GROUPED_CASES = [(4, 128, 32, 14, 1), (2, 512, 32, 9, 2), (3, 64, 8, 11, 1)]


def _grouped_problem(case, layout, dt, monkeypatch):
    """(n, c, groups, size, stride, stored, tol) of a grouped GPU case. float32 runs with
    TF32: the grouped engines decline IEEE float32 on a GPU."""
    from opendnn import backends

    monkeypatch.setattr(backends, "allow_tf32", dt == torch.float32)

    def stored(t):
        return t.to(memory_format=torch.channels_last) if layout == "nhwc" else t

    tol = 2e-3 if dt == torch.float32 else TOL[dt] * 2
    return (*case, stored, tol)


def _grouped_configs(g, engine_id):
    """The configs engine ``engine_id`` offers for ``g`` on this GPU (it must take it)."""
    from opendnn.engines.registry import by_id
    from opendnn.handle import target_for

    g.validate()
    e = by_id(engine_id)
    target = target_for(str(torch.device("cuda", torch.cuda.current_device())))
    sup = e.check_support(g.op_graph, target)
    assert sup.ok, sup.reason
    return e.configs(g.op_graph, target)


@pytest.mark.parametrize("case", GROUPED_CASES, ids=[f"g{i}" for i in range(3)])
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16, torch.float32])
def test_grouped_engine_every_config(case, layout, dt, monkeypatch):
    """conv_grouped (47), every config, with bias + relu fused, NaN-poisoned outputs,
    against float64 PyTorch."""
    n, c, groups, size, stride, stored, tol = _grouped_problem(case, layout, dt, monkeypatch)
    x = stored(torch.randn(n, c, size, size, device="cuda", dtype=dt))
    w = stored(torch.randn(c, c // groups, 3, 3, device="cuda", dtype=dt) * 0.2)
    b = torch.randn(1, c, 1, 1, device="cuda", dtype=dt)
    ref = torch.relu(
        F.conv2d(x.double(), w.double(), stride=stride, padding=1, groups=groups) + b.double()
    )
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[1, 1], stride=[stride, stride]), tb))
    y.set_output(True).set_data_type(GRAPH_TYPES[dt])
    like = stored(torch.empty(ref.shape, device="cuda", dtype=dt))
    for cfg in _grouped_configs(g, 47):
        g.create_execution_plan(47, cfg.knob_dict)
        out = like.fill_(float("nan"))
        g.execute({tx: x, tw: w, tb: b, y: out}, None)
        torch.cuda.synchronize()
        assert _relerr(out, ref) < tol, cfg.label()


@pytest.mark.parametrize("case", GROUPED_CASES, ids=[f"g{i}" for i in range(3)])
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
def test_grouped_dgrad_every_config(case, layout, dt, monkeypatch):
    """conv_dgrad_grouped (48), every config, NaN-poisoned dx, against float64 autograd."""
    n, c, groups, size, stride, stored, tol = _grouped_problem(case, layout, dt, monkeypatch)
    w = stored(torch.randn(c, c // groups, 3, 3, device="cuda", dtype=dt) * 0.2)
    xr = torch.zeros(n, c, size, size, device="cuda", dtype=torch.float64, requires_grad=True)
    y = F.conv2d(xr, w.double(), stride=stride, padding=1, groups=groups)
    dy = stored(torch.randn(y.shape, device="cuda", dtype=dt))
    (ref,) = torch.autograd.grad(y, xr, dy.double())
    like = stored(torch.empty(xr.shape, device="cuda", dtype=dt))
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw = g.tensor_like(dy), g.tensor_like(w)
    dx = g.conv_dgrad(tdy, tw, padding=[1, 1], stride=[stride, stride])
    dx.set_dim(list(like.shape)).set_stride(list(like.stride())).set_output(True)
    dx.set_data_type(GRAPH_TYPES[dt])
    for cfg in _grouped_configs(g, 48):
        g.create_execution_plan(48, cfg.knob_dict)
        out = like.fill_(float("nan"))
        g.execute({tdy: dy, tw: w, dx: out}, None)
        torch.cuda.synchronize()
        assert _relerr(out, ref) < tol, cfg.label()


@pytest.mark.parametrize("case", GROUPED_CASES, ids=[f"g{i}" for i in range(3)])
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
def test_grouped_wgrad_every_config(case, layout, dt, monkeypatch):
    """conv_wgrad_grouped (49), every config, NaN-poisoned dw, against float64 autograd;
    the same config twice gives the same bits (fixed-order split)."""
    n, c, groups, size, stride, stored, tol = _grouped_problem(case, layout, dt, monkeypatch)
    x = stored(torch.randn(n, c, size, size, device="cuda", dtype=dt))
    wr = torch.zeros(c, c // groups, 3, 3, device="cuda", dtype=torch.float64, requires_grad=True)
    y = F.conv2d(x.double(), wr, stride=stride, padding=1, groups=groups)
    dy = stored(torch.randn(y.shape, device="cuda", dtype=dt))
    (ref,) = torch.autograd.grad(y, wr, dy.double())
    like = stored(torch.empty(wr.shape, device="cuda", dtype=dt))
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(tx, tdy, padding=[1, 1], stride=[stride, stride])
    dw.set_dim(list(like.shape)).set_stride(list(like.stride())).set_output(True)
    dw.set_data_type(GRAPH_TYPES[dt])
    for cfg in _grouped_configs(g, 49):
        g.create_execution_plan(49, cfg.knob_dict)
        ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        runs = []
        for _ in range(2):
            out = like.clone().fill_(float("nan"))
            g.execute({tx: x, tdy: dy, dw: out}, ws)
            torch.cuda.synchronize()
            runs.append(out)
        assert _relerr(runs[0], ref) < tol, cfg.label()
        assert torch.equal(runs[0], runs[1]), cfg.label()


# (x dims, K, patch): the ConvNeXt-T stem at a small batch, its 2x2 downsampling, a ViT-style
# 16x16 patch embedding, an odd channel count with a non-square patch
PATCHIFY_CASES = [
    ((4, 3, 64, 64), 96, (4, 4)),
    ((2, 96, 28, 28), 192, (2, 2)),
    ((2, 3, 64, 48), 128, (16, 16)),
    ((3, 5, 12, 15), 24, (3, 5)),
]


@pytest.mark.parametrize("case", PATCHIFY_CASES, ids=[f"p{i}" for i in range(4)])
@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize(
    "dt,layout", [(torch.bfloat16, "nhwc"), (torch.float16, "nchw"), (torch.float32, "nchw")]
)
def test_patchify_every_config(case, kind, dt, layout, monkeypatch):
    """conv_{,dgrad_,wgrad_}patchify (50 / 51 / 52), every config, NaN-poisoned outputs,
    against float64 autograd; float32 with TF32 (IEEE float32 is declined on a GPU)."""
    from opendnn import backends

    monkeypatch.setattr(backends, "allow_tf32", dt == torch.float32)
    xdims, k, filt = case
    x = torch.randn(xdims, device="cuda", dtype=dt)
    w = torch.randn((k, xdims[1], *filt), device="cuda", dtype=dt) * 0.2
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    y = F.conv2d(xr, wr, stride=filt)
    dy = torch.randn(y.shape, device="cuda", dtype=dt)
    dx, dwr = torch.autograd.grad(y, (xr, wr), dy.double())
    if layout == "nhwc":
        x, w, dy = (t.to(memory_format=torch.channels_last) for t in (x, w, dy))
    g, out, pack, like, ref = _direction_graph(
        kind, x, w, dy, (y.detach(), dx, dwr), padding=[0, 0], stride=list(filt)
    )
    eid = {"fprop": 50, "dgrad": 51, "wgrad": 52}[kind]
    cfgs = _grouped_configs(g, eid)
    assert cfgs
    tol = 3e-3 if dt == torch.float32 else TOL[dt] * 2
    _every_config(g, eid, cfgs, pack, out, like, ref, tol)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_tf32_dgrad_transform_every_config(layout, monkeypatch):
    """conv_dgrad_channels_last (45) with TF32: the filter copied K-innermost (an NHWC
    problem moves the filter alone), every config, NaN-poisoned dx, against float64."""
    from opendnn import backends

    monkeypatch.setattr(backends, "allow_tf32", True)
    x = torch.randn(3, 48, 15, 13, device="cuda")
    w = torch.randn(64, 48, 3, 3, device="cuda") * 0.2
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    y = F.conv2d(xr, wr, stride=2, padding=1)
    dy = torch.randn(y.shape, device="cuda")
    (dx,) = torch.autograd.grad(y, (xr,), dy.double())
    if layout == "nhwc":
        x, w, dy = (t.to(memory_format=torch.channels_last) for t in (x, w, dy))
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    a, b = g.tensor_like(dy), g.tensor_like(w)
    out = g.conv_dgrad(a, b, padding=[1, 1], stride=[2, 2])
    out.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
    out.set_data_type(cudnn.data_type.FLOAT)
    cfgs = _grouped_configs(g, 45)
    assert cfgs
    _every_config(g, 45, cfgs, {a: dy, b: w}, out, x, dx, 3e-3)


# (x dims, K, filter, stride, padding): the 3-D UNet downsample at a small size, a 2-D
# 3x3 stride 2 with an odd image, a 1x1 stride 2 (phases no tap reaches), 1-D stride 3
PHASE_CASES = [
    ((1, 32, 12, 10, 9), 64, (3, 3, 3), (2, 2, 2), (1, 1, 1)),
    ((2, 24, 17, 15), 40, (3, 3), (2, 2), (1, 1)),
    ((2, 64, 14, 14), 96, (1, 1), (2, 2), (0, 0)),
    ((2, 16, 31), 24, (4,), (3,), (1,)),
]


@pytest.mark.parametrize("case", PHASE_CASES, ids=[f"s{i}" for i in range(len(PHASE_CASES))])
@pytest.mark.parametrize(
    "dt,layout", [(torch.bfloat16, "nhwc"), (torch.float16, "nchw"), (torch.float16, "nhwc")]
)
def test_dgrad_stride_phases_every_config(case, dt, layout):
    """conv_dgrad_implicit_gemm (4) with PHASES=1: every phase config it offers, NaN-poisoned
    dx, against float64 autograd."""
    xdims, k, filt, stride, pad = case
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(xdims)]
    x = torch.randn(xdims, device="cuda", dtype=dt)
    w = torch.randn((k, xdims[1], *filt), device="cuda", dtype=dt) * 0.2
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    y = conv(xr, wr, stride=stride, padding=pad)
    dy = torch.randn(y.shape, device="cuda", dtype=dt)
    dx, dwr = torch.autograd.grad(y, (xr, wr), dy.double())
    if layout == "nhwc":
        fmt = {3: None, 4: torch.channels_last, 5: torch.channels_last_3d}[len(xdims)]
        if fmt is not None:
            x, w, dy = (t.to(memory_format=fmt) for t in (x, w, dy))
    g, out, pack, like, ref = _direction_graph(
        "dgrad", x, w, dy, (y.detach(), dx, dwr), padding=list(pad), stride=list(stride)
    )
    cfgs = [c for c in _grouped_configs(g, 4) if c.knob_dict.get("PHASES")]
    assert cfgs, "no stride-phase config offered"
    _every_config(g, 4, cfgs, pack, out, like, ref, TOL[dt] * 2)


# (dx dims, K, stride, padding): 3-D boxes of the backward data over N * D depth slices
DGRAD_3D_CASES = [
    ((2, 32, 9, 12, 10), 64, (1, 1, 1), (1, 1, 1)),
    ((1, 32, 8, 16, 12), 64, (2, 2, 2), (1, 1, 1)),
]


@pytest.mark.parametrize("cfg", range(24))
def test_dgrad_tma_3d_every_box_config(cfg):
    """Each one-image, unsplit box config of conv_dgrad_implicit_gemm on a 3-D problem
    (NDHWC), alternating stride 1 / 2, NaN-poisoned dx."""
    import dataclasses

    from opendnn.engines.conv.tma import _dgrad_kernels as D

    kns = [k for k in D.KNOB_SPACE if k.TMA_IMGS == 1 and k.SPLIT == 1]
    if cfg >= 2 * len(kns):
        pytest.skip(f"{len(kns)} one-image box configs, two cases each")
    kn, (xdims, k, s, p) = kns[cfg // 2], DGRAD_3D_CASES[cfg % 2]
    cl, dt = torch.channels_last_3d, torch.bfloat16
    w = torch.randn(k, xdims[1], 3, 3, 3, device="cuda", dtype=dt).to(memory_format=cl)
    xd = torch.zeros(xdims, device="cuda", dtype=torch.float64, requires_grad=True)
    yd = F.conv3d(xd, w.double(), stride=s, padding=p)
    dy = torch.randn(yd.shape, device="cuda", dtype=dt).to(memory_format=cl)
    yd.backward(dy.double())
    like = torch.empty(xdims, device="cuda", dtype=dt).to(memory_format=cl)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tdy, tw = g.tensor_like(dy), g.tensor_like(w)
    dx = g.conv_dgrad(tdy, tw, padding=list(p), stride=list(s))
    dx.set_dim(list(xdims)).set_stride(list(like.stride())).set_output(True)
    dx.set_data_type(cudnn.data_type.BFLOAT16)
    g.validate()
    g.create_execution_plan(4, dataclasses.asdict(kn))
    out = like.fill_(float("nan"))
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({tdy: dy, tw: w, dx: out}, ws)
    torch.cuda.synchronize()
    assert _relerr(out, xd.grad) < TOL[dt], str(kn)


# (N, C, K, dx spatial, filter, stride, padding): geometries on which two programs per SM
# with three stages wrote wrong dx elements (from run to run): 3-D strided, 2-D (2, 1)
PPS_RACE_CASES = [
    (2, 64, 64, (12, 19, 20), (3, 5, 2), (2, 2, 2), (1, 2, 0)),
    (2, 128, 64, (20, 17, 18), (5, 1, 3), (2, 3, 3), (1, 0, 2)),
    (2, 128, 128, (12, 13, 19), (5, 2, 5), (2, 3, 1), (2, 0, 4)),
    (4, 64, 128, (29, 23), (3, 2), (2, 1), (1, 1)),
]


@pytest.mark.parametrize("case", range(len(PPS_RACE_CASES)))
def test_dgrad_tma_two_programs_per_sm_exact_run_after_run(case):
    """Every PPS=2 box config of conv_dgrad_implicit_gemm, twelve runs each, on small
    integers (exact in float32 and in bfloat16 after rounding): every dx element equals
    the float64 reference rounded to bfloat16, every run (a race shows as a few wrong
    elements in some runs; a norm-relative check would hide them)."""
    import dataclasses

    from opendnn.engines.conv.tma import _dgrad_kernels as D
    from opendnn.engines.conv.tma import engine as tma

    n, c, k, sp, filt, st, pad = PPS_RACE_CASES[case]
    three = len(sp) == 3
    cl, dt = (torch.channels_last_3d if three else torch.channels_last), torch.bfloat16
    osp = [(i + 2 * p - f) // s + 1 for i, p, f, s in zip(sp, pad, filt, st)]
    gen = torch.Generator(device="cuda").manual_seed(case)
    w = torch.randint(-1, 2, (k, c, *filt), device="cuda", generator=gen)
    keep = torch.rand(n, k, *osp, device="cuda", generator=gen) < 0.3
    dy = torch.randint(-1, 2, (n, k, *osp), device="cuda", generator=gen) * keep
    w, dy = (t.to(dt).to(memory_format=cl) for t in (w, dy))
    grad = torch.nn.grad.conv3d_input if three else torch.nn.grad.conv2d_input
    ref = grad((n, c, *sp), w.double(), dy.double(), stride=st, padding=pad).to(dt)
    like = torch.empty(n, c, *sp, device="cuda", dtype=dt).to(memory_format=cl)
    kns = [kn for kn in D.KNOB_SPACE if kn.PPS == 2 and (kn.TMA_IMGS == 1 or not three)]
    assert len(kns) >= 3
    for kn in kns:
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tdy, tw = g.tensor_like(dy), g.tensor_like(w)
        dx = g.conv_dgrad(tdy, tw, padding=list(pad), stride=list(st))
        dx.set_dim(list(like.shape)).set_stride(list(like.stride())).set_output(True)
        dx.set_data_type(cudnn.data_type.BFLOAT16)
        g.validate()
        g.create_execution_plan(4, tma.drop_defaults(dataclasses.asdict(kn)))
        ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        wrong = []
        for _ in range(12):
            out = like.fill_(float("nan"))
            g.execute({tdy: dy, tw: w, dx: out}, ws)
            torch.cuda.synchronize()
            wrong.append(int((out != ref).sum()))
        assert not any(wrong), (str(kn), wrong)


@pytest.mark.parametrize("kind", ["fprop", "dgrad"])
def test_tma_split_exact_run_after_run(kind):
    """Split box configs (float32 partials, summed in slice order by a second launch):
    twelve runs on one workspace poisoned first and left dirty by each run, small
    integers, every element equal to the float64 reference rounded to bfloat16."""
    import dataclasses

    from opendnn.engines.conv.tma import _dgrad_kernels as D
    from opendnn.engines.conv.tma import engine as tma

    n, c, k, h = 8, 256, 512, 7
    cl, dt = torch.channels_last, torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randint(-1, 2, (n, c, h, h), device="cuda", generator=gen)
    w = torch.randint(-1, 2, (k, c, 3, 3), device="cuda", generator=gen)
    dy = torch.randint(-1, 2, (n, k, h, h), device="cuda", generator=gen)
    x, w, dy = (t.to(dt).to(memory_format=cl) for t in (x, w, dy))
    if kind == "fprop":
        ref = F.conv2d(x.double(), w.double(), padding=1).to(dt)
        kns = list(tma.SPLIT_KNOBS)
        feeds, like = (x, w), dy
    else:
        ref = torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), padding=1).to(dt)
        kns = [kn for kn in D.KNOB_SPACE if kn.SPLIT > 1]
        feeds, like = (dy, w), x
    assert len(kns) >= 2
    for kn in kns:
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        ta, tb = g.tensor_like(feeds[0]), g.tensor_like(feeds[1])
        if kind == "fprop":
            out_t = g.conv_fprop(ta, tb, padding=[1, 1])
        else:
            out_t = g.conv_dgrad(ta, tb, padding=[1, 1])
        out_t.set_dim(list(like.shape)).set_stride(list(like.stride())).set_output(True)
        out_t.set_data_type(cudnn.data_type.BFLOAT16)
        g.validate()
        g.create_execution_plan(
            kind == "fprop" and 3 or 4, tma.drop_defaults(dataclasses.asdict(kn))
        )
        ws = torch.full((g.get_workspace_size(),), 255, device="cuda", dtype=torch.uint8)
        wrong = []
        for _ in range(12):
            out = torch.empty_like(like).fill_(float("nan"))
            g.execute({ta: feeds[0], tb: feeds[1], out_t: out}, ws)
            torch.cuda.synchronize()
            wrong.append(int((out != ref).sum()))
        assert not any(wrong), (str(kn), wrong)


# (x dims, K, stride, padding): 3-D boxes of the forward over N * OD output depth slices
FPROP_3D_CASES = [
    ((2, 64, 9, 12, 10), 64, (1, 1, 1), (1, 1, 1)),
    ((1, 128, 8, 16, 12), 64, (2, 2, 2), (1, 1, 1)),
]


@pytest.mark.parametrize("cfg", range(16))
def test_fprop_tma_3d_every_box_config(cfg):
    """Each one-image box config of conv_implicit_gemm on a 3-D problem (NDHWC), stride 1
    and 2 in turn, with bias + relu, NaN-poisoned output."""
    import dataclasses

    from opendnn.engines.conv.tma import _kernels as T

    kns = [k for k in T.KNOB_SPACE if k.TMA_IMGS == 1]
    if cfg >= 2 * len(kns):
        pytest.skip(f"{len(kns)} one-image box configs, two cases each")
    kn, (xdims, k, s, p) = kns[cfg // 2], FPROP_3D_CASES[cfg % 2]
    cl, dt = torch.channels_last_3d, torch.bfloat16
    x = torch.randn(xdims, device="cuda", dtype=dt).to(memory_format=cl)
    w = (torch.randn(k, xdims[1], 3, 3, 3, device="cuda", dtype=dt) * 0.1).to(memory_format=cl)
    b = torch.randn(1, k, 1, 1, 1, device="cuda", dtype=dt)
    ref = torch.relu(F.conv3d(x.double(), w.double(), stride=s, padding=p) + b.double())
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=list(p), stride=list(s)), tb))
    y.set_output(True)
    g.validate()
    g.create_execution_plan(3, dataclasses.asdict(kn))
    out = _empty(y)
    g.execute({tx: x, tw: w, tb: b, y: out}, None)
    torch.cuda.synchronize()
    assert _relerr(out, ref) < TOL[dt], str(kn)


@pytest.mark.parametrize("cfg", range(30))
def test_wgrad_tma_tf32_every_box_config(cfg, monkeypatch):
    """Each box config of conv_wgrad_implicit_gemm with x tiles of at most 64 channels
    (dy tiles of 128 come as two halves), in float32 as TF32 (stages cut to what 4-byte
    boxes fit), stride 1 and 2 in turn, one slice or three; NaN-poisoned dw against
    float64."""
    import dataclasses

    from opendnn import backends
    from opendnn.engines.conv.tma import _wgrad_kernels as T

    monkeypatch.setattr(backends, "allow_tf32", True)
    kns = [k for k in T.KNOB_SPACE if not k.FLAT and k.BLOCK_N <= 64]
    assert len(kns) == 30, "parametrize over every float32 box config"
    if cfg >= len(kns):
        pytest.skip(f"{len(kns)} configs")
    kn = kns[cfg]
    st = T.SMEM // (kn.box * (kn.BLOCK_M + kn.BLOCK_N) * 4)
    if st < 2:
        pytest.skip("a 4-byte box of this size leaves no room for two stages")
    kn = dataclasses.replace(kn, num_stages=min(kn.num_stages, st), SPLIT=3 if cfg % 2 else 1)
    out, ref = _run_wgrad_tma(kn, shapes.GPU_TMA[cfg % 2], torch.float32)
    assert _relerr(out, ref) < 3e-3, str(kn)


@pytest.mark.parametrize("engine", [3, 11])
def test_int8_int32_compute_exact_every_config(engine):
    """cuDNN's int8 form (INT8 io, INT32 compute, identity to INT32) on each config of the
    int8 implicit GEMMs: sums beyond 2^24 exact (the epilogue in float64); NaN-free int32
    output poisoned with -7 first."""
    from opendnn.engines.base import Target
    from opendnn.engines.registry import by_id

    cl = torch.channels_last
    # non-negative x: the 4608-term sums of one sign reach 2^25..2^26 (random signs would
    # cancel to ~2^20, which float32 holds exactly)
    x = torch.randint(0, 128, (2, 512, 6, 6), dtype=torch.int8, device="cuda")
    x = x.to(memory_format=cl)
    w = torch.full((8, 512, 3, 3), 127, dtype=torch.int8, device="cuda").to(memory_format=cl)
    w[1] = -128
    exact = F.conv2d(x.cpu().double(), w.cpu().double(), padding=1).long()
    assert exact.abs().max() > 2**24
    g = cudnn.pygraph(
        io_data_type=cudnn.data_type.INT8,
        intermediate_data_type=cudnn.data_type.INT32,
        compute_data_type=cudnn.data_type.INT32,
    )
    tx, tw = g.tensor_like(x), g.tensor_like(w)
    y = g.identity(g.conv_fprop(tx, tw, padding=[1, 1]))
    y.set_output(True).set_data_type(cudnn.data_type.INT32)
    g.validate()
    e = by_id(engine)
    target = Target("cuda", "gpu", torch.cuda.get_device_capability(), 132)
    configs = e.configs(g.op_graph, target)
    assert configs
    for cfg in configs:
        g.create_execution_plan(engine, cfg.knob_dict)
        out = torch.full((2, 8, 6, 6), -7, dtype=torch.int32, device="cuda").to(memory_format=cl)
        ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        g.execute({tx: x, tw: w, y: out}, ws)
        torch.cuda.synchronize()
        assert torch.equal(out.cpu().long(), exact), cfg.label()


def test_conv_genstats_many_tiles():
    """conv + genstats with more per-tile partials than one chunk of the finishing sum
    (NHWC bf16, 1568 pixels: 13-49 tiles), against float64."""
    cl = torch.channels_last
    x = torch.randn(32, 64, 7, 7, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = (torch.randn(96, 64, 3, 3, device="cuda", dtype=torch.bfloat16) * 0.1).to(memory_format=cl)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = g.tensor_like(x), g.tensor_like(w)
    y = g.conv_fprop(tx, tw, padding=[1, 1])
    y.set_output(True)
    s, sq = g.genstats(y)
    s.set_output(True)
    sq.set_output(True)
    g.validate()
    g.create_execution_plan(3, {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4})
    outs = {t: _empty(t) for t in (y, s, sq)}
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    g.execute({tx: x, tw: w, **outs}, ws)
    torch.cuda.synchronize()
    ref = F.conv2d(x.double(), w.double(), padding=1)
    assert _relerr(outs[s], ref.sum((0, 2, 3), keepdim=True)) < 1e-3
    assert _relerr(outs[sq], (ref * ref).sum((0, 2, 3), keepdim=True)) < 1e-3


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(8, 240, 40, 28), (4, 72, 24, 15), (2, 16, 96, 7)])
def test_gemm_columns_every_config(shape, dt, monkeypatch):
    """The NCHW column GEMMs (54: forward + bias + relu, 55: backward data + drelu) on each
    config they list (TF32 for float32), against float64; outputs NaN-poisoned."""
    from opendnn import backends
    from opendnn.engines.registry import by_id

    monkeypatch.setattr(backends, "allow_tf32", True)
    from opendnn.handle import target_for

    n, c, k, h = shape
    x = torch.randn(n, c, h, h, device="cuda", dtype=dt)
    w = (torch.randn(k, c, 1, 1, device="cuda", dtype=dt) * 0.1).to(dt)
    b = torch.randn(1, k, 1, 1, device="cuda", dtype=dt)
    dy = torch.randn(n, k, h, h, device="cuda", dtype=dt)
    target = target_for(str(torch.device("cuda", torch.cuda.current_device())))
    fwd = torch.relu(F.conv2d(x.double(), w.double()) + b.double())
    bwd = torch.einsum("kc,nkhw->nchw", w.double()[:, :, 0, 0], dy.double()) * (x > 0)
    for engine in (54, 55):
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        if engine == 54:
            tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
            y = g.relu(g.bias(g.conv_fprop(tx, tw), tb))
            pack, ref = {tx: x, tw: w, tb: b}, fwd
        else:
            tdy, tw, tx = g.tensor_like(dy), g.tensor_like(w), g.tensor_like(x)
            dx = g.conv_dgrad(tdy, tw)
            dx.set_dim(list(x.shape))
            y = g.relu_backward(dx, tx)
            pack, ref = {tdy: dy, tw: w, tx: x}, bwd
        y.set_output(True)
        g.validate()
        configs = by_id(engine).configs(g.op_graph, target)
        assert len(configs) >= 8
        for cfg in configs:
            g.create_execution_plan(engine, cfg.knob_dict)
            out = _empty(y)
            ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
            g.execute({**pack, y: out}, ws)
            torch.cuda.synchronize()
            assert _relerr(out, ref) < (3e-3 if dt == torch.float32 else TOL[dt]), cfg.label()


# geometries that differ per spatial dimension (filter, stride, padding, dilation), 2-D
# and 3-D NHWC, from cudnn-frontend's conv fuzzer: (N, C, K, image, filter, pad, stride,
# dilation, dtype)
RECT = [
    (4, 256, 88, (8, 104), (5, 7), (1, 1), (2, 1), (2, 2), torch.float16),
    (1, 144, 56, (56, 32), (7, 3), (3, 0), (1, 2), (1, 1), torch.bfloat16),
    (4, 104, 16, (16, 16), (5, 3), (2, 0), (3, 1), (1, 1), torch.float32),
    (2, 128, 256, (16, 40, 8), (5, 1, 7), (1, 0, 0), (3, 3, 3), (1, 1, 1), torch.float32),
    (8, 8, 8, (32, 16, 104), (7, 3, 1), (1, 1, 0), (1, 3, 1), (1, 2, 2), torch.bfloat16),
]


@pytest.mark.parametrize("case", RECT, ids=lambda c: "x".join(map(str, c[4])) + f"_s{c[6]}")
@pytest.mark.parametrize("kind,engine", [("fprop", 3), ("fprop", 6), ("fprop", 11), ("wgrad", 12)])
def test_rectangular_geometries(case, kind, engine):
    """Per-dimension filters, strides, paddings and dilations through the implicit and
    explicit GEMMs (the explicit GEMM's im2col kernel miscompiled on sm_90 with its
    index split in int64)."""
    n, c, k, img, flt, pad, st, dil, dt = case
    cl = torch.channels_last if len(img) == 2 else torch.channels_last_3d
    conv = F.conv2d if len(img) == 2 else F.conv3d
    x = torch.randint(-3, 4, (n, c, *img), device="cuda").to(dt).to(memory_format=cl)
    w = torch.randint(-3, 4, (k, c, *flt), device="cuda").to(dt).to(memory_format=cl)
    ref = conv(x.double(), w.double(), stride=st, padding=pad, dilation=dil)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor_like(x)
    opts = dict(padding=list(pad), stride=list(st), dilation=list(dil))
    if kind == "fprop":
        tw = g.tensor_like(w)
        y = g.conv_fprop(tx, tw, **opts)
        y.set_output(True)
        feeds, want = {tx: x, tw: w}, ref
    else:
        dy = torch.randint(-3, 4, ref.shape, device="cuda").to(dt).to(memory_format=cl)
        xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
        conv(xd, wd, stride=st, padding=pad, dilation=dil).backward(dy.double())
        tdy = g.tensor_like(dy)
        y = g.conv_wgrad(tx, tdy, **opts)
        y.set_output(True).set_dim(list(w.shape)).set_stride(list(w.stride()))
        feeds, want = {tx: x, tdy: dy}, wd.grad
    g.validate()
    out = _empty(y)
    _run(g, feeds, {y: out}, engine)
    assert _relerr(out, want) < TOL[dt]


# engines whose kernels split a pixel index under int64 addressing (the split in int32,
# the parts widened): the gather forward / backward data, the grouped backward filter
# (the grouped one with 4 groups of 4 channels: its tiles hold 16 or more channels)
INT64_ENGINES = [("fprop", 3, 1, 8), ("dgrad", 4, 1, 8), ("wgrad", 49, 4, 16)]


@pytest.mark.parametrize(
    "kind,eid,groups,c", INT64_ENGINES, ids=[f"{k}-{e}" for k, e, _, _ in INT64_ENGINES]
)
def test_int64_addressing_on_tensors_past_2_31_elements(kind, eid, groups, c):
    """x and dy of 2**31 + elements (bfloat16, NHWC, 4 GB each): the plan addresses in
    int64 and splits its pixel indices in int32. Small integers make every sum exact; the
    first and last images of the forward and backward data are compared element by
    element with a float64 reference, the backward filter (a sum over every image) with
    PyTorch's."""
    from opendnn.engines.conv import analysis

    h, k = 64, c
    n = 2**31 // (c * h * h) + 4  # 2**31 + 4 images' worth of elements
    cl, dt = torch.channels_last, torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randint(-1, 2, (n, c, h, h), device="cuda", generator=gen, dtype=torch.int8)
    x = x.to(dt).to(memory_format=cl)
    w = torch.randint(-1, 2, (k, c // groups, 3, 3), device="cuda", generator=gen)
    w = w.to(dt).to(memory_format=cl)
    dy = torch.randint(-1, 2, (n, k, h, h), device="cuda", generator=gen, dtype=torch.int8)
    dy = dy.to(dt).to(memory_format=cl)
    like = {"fprop": dy, "dgrad": x, "wgrad": w}[kind]
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    if kind == "fprop":
        a, b = g.tensor_like(x), g.tensor_like(w)
        out, pack = g.conv_fprop(a, b, padding=[1, 1]), {a: x, b: w}
    elif kind == "dgrad":
        a, b = g.tensor_like(dy), g.tensor_like(w)
        out, pack = g.conv_dgrad(a, b, padding=[1, 1]), {a: dy, b: w}
    else:
        a, b = g.tensor_like(x), g.tensor_like(dy)
        out, pack = g.conv_wgrad(a, b, padding=[1, 1]), {a: x, b: dy}
    out.set_dim(list(like.shape)).set_stride(list(like.stride())).set_output(True)
    out.set_data_type(cudnn.data_type.FLOAT if kind == "wgrad" else cudnn.data_type.BFLOAT16)
    g.validate()
    conv_kind = {"fprop": "conv_fprop"}.get(kind, f"conv_{kind}")
    assert analysis.analyze(g.op_graph, conv_kind).geo.int64
    from opendnn.engines.registry import by_id
    from opendnn.handle import target_for

    target = target_for(str(torch.device("cuda", torch.cuda.current_device())))
    g.create_execution_plan(eid, by_id(eid).configs(g.op_graph, target)[0].knob_dict)
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    dtype = torch.float32 if kind == "wgrad" else dt
    res = torch.empty_like(like, dtype=dtype).fill_(float("nan"))
    g.execute({**pack, out: res}, ws)
    torch.cuda.synchronize()
    if kind == "wgrad":
        ref = torch.nn.grad.conv2d_weight(x.float(), w.shape, dy.float(), padding=1, groups=groups)
        assert torch.equal(res, ref)  # integer sums below 2**24: exact in float32
        return
    for i in (0, n - 1):
        if kind == "fprop":
            ref = F.conv2d(x[i : i + 1].double(), w.double(), padding=1)
        else:
            ref = torch.nn.grad.conv2d_input(
                (1, c, h, h), w.double(), dy[i : i + 1].double(), padding=1
            )
        assert torch.equal(res[i : i + 1].double(), ref), (kind, i)
