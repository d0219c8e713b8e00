"""The ``conv`` benchmark family: ResNet-50 layers at N=32 (shapes.BENCH).

Per layer, NHWC bfloat16: fprop, dgrad, wgrad against cuDNN through PyTorch
(and fprop in NCHW float32 with TF32 allowed on both sides, kind ``tf32``)
(``torch.backends.cudnn.benchmark`` on), and conv + bias + relu against PyTorch's unfused
sequence and against cudnn-frontend's fused graph when the ``cudnn`` module imports. Both
sides run in benchmark mode: opendnn with ``backends.benchmark`` (the first execute times
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
is what the find measured: {plan name: ms} of every candidate it timed.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

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


def layer_tensors(layer: str, w_scale: float = 1.0) -> tuple:
    """(x, w, b, dy, stride, padding) of a ResNet layer in shapes.BENCH at N = CONV_N:
    NHWC bfloat16 x, w and dy on the GPU, bias [1, K, 1, 1]."""
    _, c, k, h, f, s, p = next(t for t in shapes.BENCH if t[0] == layer)
    n, cl = shapes.BENCH_N, torch.channels_last
    x = torch.randn(n, c, h, h, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = (torch.randn(k, c, f, f, device="cuda", dtype=torch.bfloat16) * w_scale).to(
        memory_format=cl
    )
    b = torch.randn(1, k, 1, 1, device="cuda", dtype=torch.bfloat16)
    o = (h + 2 * p - f) // s + 1
    dy = torch.randn(n, k, o, o, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    return x, w, b, dy, s, p


def _graph(kind, x, w, b, dy, s, p):
    """(graph, variant pack without the output, output tensor, a buffer like the output)."""
    import opendnn.frontend as cudnn

    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    if kind in ("fprop", "fused", "tf32"):
        tx, tw = g.tensor_like(x), g.tensor_like(w)
        out = g.conv_fprop(tx, tw, padding=[p, p], stride=[s, s])
        pack = {tx: x, tw: w}
        if kind == "fused":
            tb = g.tensor_like(b)
            out = g.relu(g.bias(out, tb))
            pack[tb] = b
        out.set_output(True)
        o = (x.shape[2] + 2 * p - w.shape[2]) // s + 1
        like = torch.empty(x.shape[0], w.shape[0], o, o, device="cuda", dtype=x.dtype).to(
            memory_format=torch.channels_last if kind != "tf32" else torch.contiguous_format
        )
    elif kind == "dgrad":
        a_, b_ = g.tensor_like(dy), g.tensor_like(w)
        out = g.conv_dgrad(a_, b_, padding=[p, p], stride=[s, s])
        out.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
        pack, like = {a_: dy, b_: w}, torch.empty_like(x)
    else:
        a_, b_ = g.tensor_like(x), g.tensor_like(dy)
        out = g.conv_wgrad(a_, b_, padding=[p, p], stride=[s, s])
        out.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
        pack, like = {a_: x, b_: dy}, torch.empty_like(w)
    return g, pack, out, like


def _opendnn(kind, x, w, b, dy, s, p):
    """(callable, plan name, find cold s, find cached ms) in benchmark mode."""
    import opendnn.frontend as cudnn

    g, pack, out, buf = _graph(kind, x, w, b, dy, s, p)
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
        g2, pack2, out2, buf2 = _graph(kind, x, w, b, dy, s, p)
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
    return (lambda: g.execute(pack, ws)), name, cold, cached


def run_conv(r, kinds=("fprop", "fused", "dgrad", "wgrad", "tf32"), layers=None):
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    backends.benchmark = True
    backends.benchmark_limit = 6  # the cost model's top six plans are timed
    n = shapes.BENCH_N
    bwd = torch.ops.aten.convolution_backward
    for name, c, k, h, f, s, p in shapes.BENCH:
        if layers and name not in layers:
            continue
        x, w, b, dy, s, p = layer_tensors(name, w_scale=0.05)
        o = (h + 2 * p - f) // s + 1
        flops = 2.0 * n * k * o * o * c * f * f
        bias = b.reshape(k)
        refs = {
            "fprop": ("cuDNN", lambda: F.conv2d(x, w, stride=s, padding=p)),
            "fused": (
                "PyTorch unfused",
                lambda: torch.relu_(F.conv2d(x, w, bias, stride=s, padding=p)),
            ),
            "dgrad": (
                "cuDNN",
                lambda: bwd(
                    dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, [True, False, False]
                ),
            ),
            "wgrad": (
                "cuDNN",
                lambda: bwd(
                    dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, [False, True, False]
                ),
            ),
        }
        xf, wf = x.float().contiguous(), w.float().contiguous()  # NCHW float32
        refs["tf32"] = ("cuDNN", lambda: F.conv2d(xf, wf, stride=s, padding=p))
        for kind in kinds:
            backends.allow_tf32 = kind == "tf32"  # PyTorch's cuDNN default: TF32 allowed
            try:
                fn, plan, cold, cached = (
                    _opendnn(kind, xf, wf, b, dy, s, p)
                    if kind == "tf32"
                    else _opendnn(kind, x, w, b, dy, s, p)
                )
            except Exception as e:  # noqa: BLE001 -- one case must not end the family
                print(f"conv {kind} {name}: FAILED {type(e).__name__}: {str(e)[:200]}")
                r.meta.setdefault("errors", {})[f"conv {kind} {name}"] = repr(e)[:300]
                continue
            ref_name, ref_fn = refs[kind]
            extra = dict(
                eager_ms=bench_eager(fn),
                ref_eager_ms=bench_eager(ref_fn),
                find_cold_s=round(cold, 2),
                find_cached_ms=round(cached, 2),
                find_cached_max_ms=round(_opendnn.cached_max, 2),
                find_cached_samples_ms=_opendnn.cached_samples,
                timed=_opendnn.timed,
            )
            ms, ref_ms = bench_graph(fn), bench_graph(ref_fn)
            if ms is None or ref_ms is None:
                ms, ref_ms = extra["eager_ms"], extra["ref_eager_ms"]
                extra["timing"] = "eager (capture failed)"
            label = "fprop nchw fp32/tf32" if kind == "tf32" else f"{kind} nhwc bf16"
            r.add(
                "conv",
                f"{label} {name}",
                ms,
                ref_ms,
                flops=flops,
                ref_name=ref_name,
                plan=plan,
                **extra,
            )
            if kind == "fused":
                y = torch.empty_like(dy)
                try:
                    fe = _fe_conv_bias_relu(x, w, b, y, s, p)
                except Exception as e:  # noqa: BLE001
                    print(f"    cudnn-frontend failed: {type(e).__name__}: {str(e)[:160]}")
                    fe = None
                if fe is not None:
                    fe_ms = bench_graph(fe) or bench_eager(fe)
                    r.add(
                        "conv",
                        f"fused-vs-frontend nhwc bf16 {name}",
                        ms,
                        fe_ms,
                        flops=flops,
                        ref_name="cudnn-frontend fused",
                        plan=plan,
                        eager_ms=extra["eager_ms"],
                        ref_eager_ms=bench_eager(fe),
                    )
