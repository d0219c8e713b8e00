"""The ``conv`` benchmark family: the layer sets of ``engines/conv/shapes.py``
(``BENCH_SETS``, picked with ``--set``; ``resnet50`` by default, ``all`` for every set).

ResNet-50 (at N=32) runs as it always has: per layer fprop, dgrad and wgrad in NHWC
bfloat16, fprop in NCHW float32 with TF32 allowed on both sides (kind ``tf32``), and conv +
bias + relu against PyTorch's unfused sequence and against cudnn-frontend's fused graph
when the ``cudnn`` module imports. Every other set runs fprop, dgrad and wgrad in each
layout and data type of ``BENCH_VARIANTS`` (NHWC bf16, NCHW float32 / TF32, NCHW float16;
``--variants`` narrows them, and also applies to ResNet-50). The references are cuDNN
through PyTorch (``torch.backends.cudnn.benchmark`` on); a causally padded 1-D layer
(padding only before the sequence) is compared with what PyTorch users run for it, the
symmetric padding of ``padding=k-1`` (whose output they then slice). A set at a time keeps
one run inside a few minutes (``--set mobilenetv3``, ...): a run that leaves out sets,
layers, kinds or variants replaces only its own rows of ``conv.json``. Both sides run in
benchmark mode: opendnn with ``backends.benchmark`` (the first execute times
the top ``benchmark_limit`` plans and caches the winner), PyTorch with cuDNN's own.

Two timings per case, same inputs, same run:
- ``ms``/``ref_ms``: CUDA-graph replays (``do_bench_cudagraph``): the GPU time of the
  kernels with the host's launch cost removed -- at 10-30 us per layer, an eager loop
  measures the host as much as the kernel;
- ``eager_ms``/``ref_eager_ms``: plain calls as a user makes them (the runner's timer,
  timing.py).
``find_cold_s`` is build + the first benchmark-mode execute of a fresh problem (building
compiles every candidate the execute then times); ``find_cached_ms`` is build + first
execute of a fresh graph of the same problem, which reads the winner from the cache --
host time until the kernels are queued (their GPU time is the ``ms`` column): the median
of CACHED_SAMPLES fresh graphs, the slowest in ``find_cached_max_ms``, all of them in
order in ``find_cached_samples_ms``; ``timed``
is what the find measured: {plan name: ms} of every candidate it timed; ``mode_a`` the plan
heuristics mode A ranks first, ``mode_a_ratio`` the find's best time over that plan's (1:
mode A already picks the best; the heuristics' target is >= 0.8).
"""

from __future__ import annotations

import time

import torch

from .. import backends
from ..engines.conv import shapes
from .timing import bench as bench_eager

CACHED_SAMPLES = 5  # fresh graphs per case timed on the cached path


def bench_graph(fn, rep=100):
    """Median ms of CUDA-graph replays of ``fn``; None when ``fn`` cannot be captured."""
    from triton.testing import do_bench_cudagraph

    try:
        return do_bench_cudagraph(fn, rep=rep, return_mode="median")
    except Exception as e:  # noqa: BLE001 -- reported, the eager timing still stands
        print(f"    (graph capture failed: {type(e).__name__}: {str(e)[:120]})")
        return None


def _fe_conv_bias_relu(x, w, b, y, s, p):
    """cudnn-frontend's fused conv + bias + relu graph, or None without the module."""
    try:
        import cudnn as fe
    except ImportError:
        return None
    handle = getattr(_fe_conv_bias_relu, "handle", None) or fe.create_handle()
    _fe_conv_bias_relu.handle = handle
    g = fe.pygraph(
        io_data_type=fe.data_type.BFLOAT16,
        intermediate_data_type=fe.data_type.FLOAT,
        compute_data_type=fe.data_type.FLOAT,
        handle=handle,
    )
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    c = g.conv_fprop(image=X, weight=W, padding=[p, p], stride=[s, s], dilation=[1, 1])
    out = g.relu(input=g.bias(input=c, bias=B))
    out.set_output(True).set_data_type(fe.data_type.BFLOAT16)
    g.build([fe.heur_mode.A, fe.heur_mode.FALLBACK])
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    pack = {X: x, W: w, B: b, out: y}

    def run():  # on the current stream, so that a CUDA-graph capture records it
        fe.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
        g.execute(pack, ws, handle=handle)

    return run


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    """``t`` with the channels innermost in memory (NHWC, NDHWC, NLC), logical dims kept."""
    return t.movedim(1, -1).contiguous().movedim(-1, 1)


def set_tensors(lay, variant: str, device="cuda", w_scale: float = 0.05) -> tuple:
    """(x, w, b, dy) of ``lay`` (a ``shapes.Layer``) in ``variant`` (a key of
    ``shapes.BENCH_VARIANTS``): x [N, C, *spatial], w [K, C / groups, *filt], bias
    [1, K, 1, ...], dy [N, K, *out]; random normal, w scaled by ``w_scale``."""
    layout, dtype, _ = shapes.BENCH_VARIANTS[variant]
    dt = getattr(torch, dtype)

    def make(*dims, scale=1.0):
        t = torch.randn(*dims, device=device, dtype=dt) * scale
        return _channels_last(t) if layout == "channels_last" else t

    d = len(lay.spatial)
    x = make(lay.n, lay.c, *lay.spatial)
    w = make(lay.k, lay.c // lay.groups, *lay.filt, scale=w_scale)
    b = torch.randn(1, lay.k, *([1] * d), device=device, dtype=dt)
    dy = make(lay.n, lay.k, *lay.out)
    return x, w, b, dy


def _graph(kind, x, w, b, dy, lay):
    """(graph, variant pack without the output, output tensor, a buffer like the output)."""
    import opendnn.frontend as cudnn

    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    conv = dict(pre_padding=list(lay.pre), post_padding=list(lay.post), stride=list(lay.stride))
    if kind in ("fprop", "fused", "tf32"):
        tx, tw = g.tensor_like(x), g.tensor_like(w)
        out = g.conv_fprop(tx, tw, **conv)
        pack = {tx: x, tw: w}
        if kind == "fused":
            tb = g.tensor_like(b)
            out = g.relu(g.bias(out, tb))
            pack[tb] = b
        out.set_output(True)
        like = torch.empty_like(dy)  # dy has y's dims, type and layout
    elif kind == "dgrad":
        a_, b_ = g.tensor_like(dy), g.tensor_like(w)
        out = g.conv_dgrad(a_, b_, **conv)
        out.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
        pack, like = {a_: dy, b_: w}, torch.empty_like(x)
    else:
        a_, b_ = g.tensor_like(x), g.tensor_like(dy)
        out = g.conv_wgrad(a_, b_, **conv)
        out.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
        pack, like = {a_: x, b_: dy}, torch.empty_like(w)
    return g, pack, out, like


def _opendnn(kind, x, w, b, dy, lay):
    """(callable, plan name, find cold s, find cached ms) in benchmark mode."""
    import opendnn.frontend as cudnn

    g, pack, out, buf = _graph(kind, x, w, b, dy, lay)
    ws = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)  # >= any candidate's
    pack = {**pack, out: buf}
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    g.build([cudnn.heur_mode.A])  # benchmark mode: compiles the candidates
    g.execute(pack, ws)  # ... and times them
    torch.cuda.synchronize()
    cold = time.perf_counter() - t0
    samples = []
    for _ in range(CACHED_SAMPLES):
        g2, pack2, out2, buf2 = _graph(kind, x, w, b, dy, lay)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        g2.build([cudnn.heur_mode.A])
        g2.execute({**pack2, out2: buf2}, ws)
        samples.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
    _opendnn.cached_max = max(samples)
    _opendnn.cached_samples = [round(t, 3) for t in samples]
    cached = sorted(samples)[len(samples) // 2]
    name = g._selected_plan().name
    from ..runtime import autotune

    hit = autotune.lookup(g.key(), torch.cuda.get_device_name()) or {}
    _opendnn.timed = dict(zip(hit.get("order", []), hit.get("times_ms", [])))
    _opendnn.mode_a = mode_a_first(g)
    return (lambda: g.execute(pack, ws)), name, cold, cached


def mode_a_first(g) -> str:
    """The plan heuristics mode A ranks first for ``g`` (what a build without benchmark mode
    runs; the autotune cache is not consulted)."""
    from ..enums import HeurMode
    from ..heuristics import candidate_plans

    plans, _ = candidate_plans(g.op_graph, (HeurMode.A,), g._target(), None, False)
    return plans[0].name if plans else ""


def mode_a_ratio(timed: dict, first: str) -> float | None:
    """The find's best time over mode A's first plan's (1: mode A picked the best; None
    when the find did not time that plan)."""
    if first not in timed or not timed:
        return None
    return round(min(timed.values()) / timed[first], 3)


def _cases(sets, kinds, variants) -> list:
    """(set, layer, kind, variant) to run: ResNet-50 in its historical kinds (``tf32`` =
    fprop in nchw-tf32) unless ``variants`` is given; the other sets fprop, dgrad and wgrad
    in every variant (or those of ``variants``)."""
    out = []
    for name in sets:
        for lay in shapes.BENCH_SETS[name]:
            if name == "resnet50" and not variants:
                pairs = [("fprop", "nchw-tf32") if k == "tf32" else (k, "nhwc-bf16") for k in kinds]
            else:
                vs = variants or list(shapes.BENCH_VARIANTS)
                ks = [k for k in kinds if k not in ("tf32", "fused")]
                pairs = [(k, v) for v in vs for k in ks]
            out += [(name, lay, k, v) for k, v in pairs]
    return out


def _label(set_name, lay, kind, variant) -> str:
    """The row's case: ResNet-50's rows keep their historical names."""
    if set_name == "resnet50" and variant == "nhwc-bf16":
        return f"{kind} nhwc bf16 {lay.name}"
    if set_name == "resnet50" and variant == "nchw-tf32" and kind == "fprop":
        return f"fprop nchw fp32/tf32 {lay.name}"
    return f"{kind} {variant} {set_name}/{lay.name}"


def _references(lay, x, w, b, dy, kind):
    """cuDNN through PyTorch for ``kind``: (name, callable)."""
    d = len(lay.spatial)
    pad = list(lay.pre)  # causal layers: PyTorch's symmetric padding=k-1 (users slice after)
    args = (list(lay.stride), pad, [1] * d, False, [0] * d, lay.groups)
    conv = torch.ops.aten.convolution
    bwd = torch.ops.aten.convolution_backward
    if lay.pre != lay.post and kind in ("dgrad", "wgrad"):
        o = [(i + 2 * p - f) // s + 1 for i, p, f, s in zip(lay.spatial, pad, lay.filt, lay.stride)]
        dy = torch.empty((lay.n, lay.k, *o), device=dy.device, dtype=dy.dtype)
        dy = dy.normal_() if x.is_contiguous() else _channels_last(dy.normal_())
    if kind == "fprop":
        return "cuDNN", lambda: conv(x, w, None, *args)
    if kind == "fused":
        bias = b.reshape(-1)
        return "PyTorch unfused", lambda: torch.relu_(conv(x, w, bias, *args))
    mask = [kind == "dgrad", kind == "wgrad", False]
    return "cuDNN", lambda: bwd(dy, x, w, None, *args, mask)


def run_conv(
    r, kinds=("fprop", "fused", "dgrad", "wgrad", "tf32"), layers=None, sets=None, variants=None
):
    """Time every case of ``sets`` (default ResNet-50) against cuDNN; see the module
    docstring. ``layers`` and ``variants`` narrow the cases."""
    sets = list(shapes.BENCH_SETS) if sets == ["all"] else (sets or ["resnet50"])
    unknown = [n for n in sets if n not in shapes.BENCH_SETS] + [
        v for v in variants or () if v not in shapes.BENCH_VARIANTS
    ]
    if unknown:
        raise ValueError(
            f"unknown conv set or variant {unknown} (sets: {', '.join(shapes.BENCH_SETS)}; "
            f"variants: {', '.join(shapes.BENCH_VARIANTS)})"
        )
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    backends.benchmark = True
    backends.benchmark_limit = 6  # the cost model's top six plans are timed
    tensors = {}
    for set_name, lay, kind, variant in _cases(sets, kinds, variants):
        if layers and lay.name not in layers:
            continue
        key = (set_name, lay.name, variant)
        if key not in tensors:
            tensors.clear()  # one layer's tensors at a time
            tensors[key] = set_tensors(lay, variant)
        x, w, b, dy = tensors[key]
        case = _label(set_name, lay, kind, variant)
        backends.allow_tf32 = shapes.BENCH_VARIANTS[variant][2]  # PyTorch's cuDNN default
        try:
            fn, plan, cold, cached = _opendnn(kind, x, w, b, dy, lay)
            ref_name, ref_fn = _references(lay, x, w, b, dy, kind)
        except Exception as e:  # noqa: BLE001 -- one case must not end the family
            print(f"conv {case}: FAILED {type(e).__name__}: {str(e)[:200]}")
            r.meta.setdefault("errors", {})[f"conv {case}"] = repr(e)[:300]
            continue
        extra = dict(
            eager_ms=bench_eager(fn),
            ref_eager_ms=bench_eager(ref_fn),
            find_cold_s=round(cold, 2),
            find_cached_ms=round(cached, 2),
            find_cached_max_ms=round(_opendnn.cached_max, 2),
            find_cached_samples_ms=_opendnn.cached_samples,
            timed=_opendnn.timed,
            mode_a=_opendnn.mode_a,
            mode_a_ratio=mode_a_ratio(_opendnn.timed, _opendnn.mode_a),
        )
        ms, ref_ms = bench_graph(fn), bench_graph(ref_fn)
        if ms is None or ref_ms is None:
            ms, ref_ms = extra["eager_ms"], extra["ref_eager_ms"]
            extra["timing"] = "eager (capture failed)"
        r.add("conv", case, ms, ref_ms, flops=lay.flops, ref_name=ref_name, plan=plan, **extra)
        if kind == "fused":
            y = torch.empty_like(dy)
            try:
                fe = _fe_conv_bias_relu(x, w, b, y, lay.stride[0], lay.pre[0])
            except Exception as e:  # noqa: BLE001
                print(f"    cudnn-frontend failed: {type(e).__name__}: {str(e)[:160]}")
                fe = None
            if fe is not None:
                fe_ms = bench_graph(fe) or bench_eager(fe)
                r.add(
                    "conv",
                    f"fused-vs-frontend nhwc bf16 {lay.name}",
                    ms,
                    fe_ms,
                    flops=lay.flops,
                    ref_name="cudnn-frontend fused",
                    plan=plan,
                    eager_ms=extra["eager_ms"],
                    ref_eager_ms=bench_eager(fe),
                )
