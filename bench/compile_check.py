"""Compile every kernel a set of plans would launch for sm_90 (H100) on a machine with no
GPU: catches what only the compiler rejects (types that change in a loop, constexpr misuse,
a signature that does not match the launch) before device time is spent.

    PYTHONPATH=src python bench/compile_check.py [FAMILY ...] [--all-configs]

FAMILY (default ``all``): each builds a few graphs on CPU tensors, asks the named engines
for their configs on an H100 target (the first three, or every config the engine lists
where the family says so, or with ``--all-configs``), builds each plan's sources and
compiles every launch with ``triton.compile`` for sm_90:

    conv       implicit GEMM / precomputed / GEMM / direct forward (int8, bf16, fp32, fused
               bias + relu, a conv1-like 7x7 s2), implicit-GEMM dgrad + drelu and wgrad,
               the pointwise dgrad as one GEMM (53), the NCHW column GEMMs (54, 55),
               a scale + bias + relu prologue with genstats (engines 3-12); depthwise (41-
               43): NHWC / NCHW, multiplier 2, stride 2, bias + relu, causal 1-D; grouped
               fprop, dgrad and wgrad (47-49) and the layout transforms (44-46)
    fusion     the runtime-fusion engine (1): pointwise, broadcast, slice / transpose /
               concatenate views, row and column reductions
    matmul     the matmul engine (2) with a pointwise epilogue (bias, residual)
    batchnorm  batch norm (30): training forward (running statistics, fused add + relu),
               inference, backward with a fused relu_backward; NHWC / NCHW; every config
    fft        FFT convolution (13, 14): 5x5 + bias + relu, a 256x256 image, a 1x1 filter
    norm       layer / RMS / group norm (26), forward and backward, fused add + GELU
    pool       pooling (34 forward, 35 backward): max / average, 2-D / 3-D, global
    softmax    softmax and log-softmax (25), forward and backward, a strided axis
    split      split-reduction dgrad (17) and wgrad (19): 1-3-D, groups, strided layouts,
               both accumulation modes of 19; an engine that declines counts as a failure
    moe        the MoE grouped matmul (56): NONE / GATHER / SCATTER forward and the weight
               gradient, bf16 and fp32, a column-major weight
    winograd   Winograd fused forward (15) and dgrad (16, 18), the delegated GEMM too, with
               each fused kernel's registers and spills from ptxas
    attention  the attention engine (40): ALiBi, dropout + rng_dump, ragged (THD) tensors
               and Stats, sinks + score outputs + dSink, block masks, paged K / V (plain
               and packed tables); forward and backward

Exit status 1 when a compile fails. Takes from about ten seconds (softmax) to a few minutes
(all) on one CPU core per family.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import traceback

import torch
import triton
from triton.backends.compiler import GPUTarget

import opendnn.frontend as cudnn
from opendnn.engines.base import Target
from opendnn.engines.registry import by_id

H100 = Target("cuda", "NVIDIA H100 (compile check)", (9, 0), 132, 7.1e14, 5e13, 3e12)
SM90 = GPUTarget("cuda", 90, 32)
TY = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "i1",
    torch.float64: "fp64",
}
DT = {
    torch.float32: cudnn.data_type.FLOAT,
    torch.float16: cudnn.data_type.HALF,
    torch.bfloat16: cudnn.data_type.BFLOAT16,
}
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
CL = torch.channels_last
CL3 = torch.channels_last_3d


# ---- compiling a plan's launches ---------------------------------------------------------
def compile_launches(exe, graph) -> list:
    """Compile every launch of executable ``exe`` (of ``graph``) for sm_90; returns
    (kernel name, compiled kernel) pairs."""
    out = []
    launches = list(getattr(exe, "launches", []))
    if hasattr(exe, "launcher"):
        launches.append((exe.launcher, None))
    for launcher, args in launches:
        fn = launcher.kernel.compiled
        params = [p.name for p in fn.params]
        sig, consts = {}, {}
        if args is None:  # precomp: X, W, PIX, TAP, then the rest (tensors or scalars)
            x_t = graph.tensors[exe.uids[0]].torch_dtype
            rest = [graph.tensors[u] for u in exe.rest]
            types = ["*" + TY[x_t], "*" + TY[x_t], "*i64", "*i64"] + [
                "fp32" if d.is_pass_by_value else "*" + TY[d.torch_dtype] for d in rest
            ]
        for i, name in enumerate(params):
            if name in launcher.constexprs or fn.params[i].is_constexpr:
                sig[name] = "constexpr"
                consts[name] = launcher.constexprs.get(name, fn.params[i].default)
                continue
            if args is None:
                sig[name] = types[i]
                continue
            kind, key = args[i]
            if kind == "buf":
                d = graph.tensors.get(key) if hasattr(graph, "tensors") else None
                sig[name] = "fp32" if d is None or d.is_pass_by_value else "*" + TY[d.torch_dtype]
            elif kind == "ws":
                sig[name] = "*" + TY[key]
            else:  # an integer: Triton types it i64 when it does not fit i32
                sig[name] = "i64" if not -(2**31) <= key < 2**31 else "i32"
        opts = {k: v for k, v in launcher.constexprs.items() if k in ("num_warps", "num_stages")}
        src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=consts)
        out.append((fn.__name__, triton.compile(src, target=SM90, options=opts)))
    return out


def ptxas_usage(ptx: str) -> str:
    """'regs=R spill_stores=S spill_loads=L' of the PTX's entry, from ``ptxas -v``."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        out = subprocess.run(
            [PTXAS, "-v", "--gpu-name=sm_90a", f.name, "-o", os.devnull],
            capture_output=True,
            text=True,
        ).stderr
    finally:
        os.unlink(f.name)
    regs = re.findall(r"Used (\d+) registers", out)
    st = re.findall(r"(\d+) bytes spill stores", out)
    ld = re.findall(r"(\d+) bytes spill loads", out)
    return (
        f"regs={regs[-1] if regs else '?'} spill_stores={st[-1] if st else '?'} "
        f"spill_loads={ld[-1] if ld else '?'}"
    )


def _inner_graph(engine, graph):
    """The synthetic GEMM graph a matmul-delegating engine runs."""
    from opendnn.engines.matmul.delegate import _synthetic

    return _synthetic(engine, graph)


def run_checks(cases, limit=3, decline_fails=False, winograd=False) -> int:
    """Build (sources only, CPU target) and compile for sm_90 the first ``limit`` configs
    (None: all) of each (label, graph, engine ids) of ``cases``; returns the failure count.
    ``decline_fails``: an engine that declines a graph counts as a failure. ``winograd``:
    also compile the delegated GEMM and report the fused Winograd kernels' registers."""
    failures = 0
    for label, g, engine_ids in cases:
        g.validate()
        og = g.op_graph
        for eid in engine_ids:
            e = by_id(eid)
            sup = e.check_support(og, H100)
            if not sup.ok:
                failures += decline_fails
                print(f"{label:28s} {e.name:28s} declines: {sup.reason}")
                continue
            for cfg in e.configs(og, H100)[:limit]:
                try:
                    exe = e.build(og, cfg, Target())  # build generates sources (CPU target)
                    done = compile_launches(exe, og)
                    if getattr(exe, "inner_graph", None) is not None:  # a layout transform
                        done += compile_launches(exe.inner, exe.inner_graph)
                    inner = getattr(exe, "inner", None) or getattr(exe, "gemm", None)
                    extra = ""
                    if winograd:
                        if getattr(exe, "gemm", None) is not None:
                            done += compile_launches(exe.gemm, _inner_graph(e, og))
                        fused = [k for n, k in done if n.startswith("wino_fused_conv")]
                        extra = " " + ptxas_usage(fused[0].asm["ptx"]) if fused else ""
                    n = len(done)
                    if inner is not None and not winograd and not hasattr(exe, "inner_graph"):
                        n += len(getattr(inner, "launches", []))
                    print(
                        f"{label:28s} {cfg.label()[:70]:70s} ws={exe.workspace_size:>8d} "
                        f"compiled {n} kernel(s){extra}",
                        flush=True,
                    )
                except Exception:
                    failures += 1
                    print(f"{label:28s} {cfg.label()[:70]:70s} FAILED")
                    traceback.print_exc(limit=4)
    return failures


# ---- the families' graphs -----------------------------------------------------------------
def g_type(dt):
    """The graph data type of a torch dtype."""
    return {
        torch.float32: cudnn.data_type.FLOAT,
        torch.float16: cudnn.data_type.HALF,
        torch.bfloat16: cudnn.data_type.BFLOAT16,
    }[dt]


def conv_graphs():
    xi = torch.randint(-128, 128, (4, 16, 12, 12), dtype=torch.int8).to(memory_format=CL)
    wi = torch.randint(-128, 128, (32, 16, 3, 3), dtype=torch.int8).to(memory_format=CL)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor(list(xi.shape), list(xi.stride()), cudnn.data_type.INT8)
    tw = g.tensor(list(wi.shape), list(wi.stride()), cudnn.data_type.INT8)
    y = g.scale(g.conv_fprop(tx, tw, padding=[1, 1]), 0.01)
    y.set_output(True).set_data_type(cudnn.data_type.INT8)
    yield "int8 fprop", g, [3, 11]
    g = cudnn.pygraph(
        io_data_type=cudnn.data_type.INT8,
        intermediate_data_type=cudnn.data_type.INT32,
        compute_data_type=cudnn.data_type.INT32,
    )
    tx = g.tensor(list(xi.shape), list(xi.stride()), cudnn.data_type.INT8)
    tw = g.tensor(list(wi.shape), list(wi.stride()), cudnn.data_type.INT8)
    y = g.identity(g.conv_fprop(tx, tw, padding=[1, 1]))
    y.set_output(True).set_data_type(cudnn.data_type.INT32)
    yield "int8 fprop int32 compute", g, [3, 11]
    for dt in (torch.bfloat16, torch.float32):
        x = torch.randn(4, 16, 12, 12, dtype=dt).to(memory_format=CL)
        w = torch.randn(32, 16, 3, 3, dtype=dt).to(memory_format=CL)
        b = torch.randn(1, 32, 1, 1, dtype=dt)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
        y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[1, 1]), tb))
        y.set_output(True)
        yield f"fprop+bias+relu {dt}", g, [3, 11, 6, 8, 9]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw = g.tensor_like(x[:, :3]), g.tensor_like(torch.randn(32, 3, 7, 7, dtype=dt))
        g.conv_fprop(tx, tw, padding=[3, 3], stride=[2, 2]).set_output(True)
        yield f"conv1-like direct {dt}", g, [7]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tdy = g.tensor_like(torch.randn(4, 32, 12, 12, dtype=dt).to(memory_format=CL))
        tw, tx = g.tensor_like(w), g.tensor_like(x)
        dx = g.conv_dgrad(tdy, tw, padding=[1, 1])
        dx.set_dim([4, 16, 12, 12]).set_stride(list(x.stride()))
        g.relu_backward(dx, tx).set_output(True)
        yield f"dgrad+drelu {dt}", g, [4]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        w1 = torch.randn(32, 16, 1, 1, dtype=dt).to(memory_format=CL)
        tdy = g.tensor_like(torch.randn(4, 32, 12, 12, dtype=dt).to(memory_format=CL))
        dx = g.conv_dgrad(tdy, g.tensor_like(w1))
        dx.set_dim([4, 16, 12, 12]).set_stride(list(x.stride()))
        g.relu_backward(dx, g.tensor_like(x)).set_output(True)
        yield f"pointwise dgrad+drelu as GEMM {dt}", g, [53]
        # NCHW: the column GEMMs (channels as rows, pixels as columns)
        xn, wn = torch.randn(4, 16, 12, 12, dtype=dt), torch.randn(32, 16, 1, 1, dtype=dt)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw, tb = g.tensor_like(xn), g.tensor_like(wn), g.tensor_like(b)
        g.relu(g.bias(g.conv_fprop(tx, tw), tb)).set_output(True)
        yield f"pointwise NCHW fprop+bias+relu as column GEMM {dt}", g, [54]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        dx = g.conv_dgrad(g.tensor_like(torch.randn(4, 32, 12, 12, dtype=dt)), g.tensor_like(wn))
        dx.set_dim([4, 16, 12, 12])
        g.relu_backward(dx, g.tensor_like(xn)).set_output(True)
        yield f"pointwise NCHW dgrad+drelu as column GEMM {dt}", g, [55]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx = g.tensor_like(x)
        tdy = g.tensor_like(torch.randn(4, 32, 12, 12, dtype=dt).to(memory_format=CL))
        dw = g.conv_wgrad(tx, tdy, padding=[1, 1])
        dw.set_dim([32, 16, 3, 3]).set_stride(list(w.stride())).set_output(True)
        yield f"wgrad {dt}", g, [5, 10, 12]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw, ts, tb = (
            g.tensor_like(t) for t in (x, w, torch.randn(1, 16, 1, 1), torch.randn(1, 16, 1, 1))
        )
        y = g.conv_fprop(g.relu(g.bias(g.scale(tx, ts), tb)), tw, padding=[1, 1])
        y.set_output(True)
        s, q = g.genstats(y)
        s.set_output(True)
        q.set_output(True)
        yield f"prologue+genstats {dt}", g, [3]
    for dt in (torch.bfloat16, torch.float32, torch.float16):
        for fmt, tag in ((CL, "nhwc"), (torch.contiguous_format, "nchw")):
            x = torch.randn(4, 24, 13, 12, dtype=dt).to(memory_format=fmt)
            w = torch.randn(48, 1, 5, 5, dtype=dt).to(memory_format=fmt)  # multiplier 2
            g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
            tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(torch.randn(1, 48, 1, 1))
            y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[2, 2], stride=[2, 1]), tb))
            y.set_output(True).set_data_type(g_type(dt))
            yield f"depthwise+bias+relu {tag} {dt}", g, [41]
        x = torch.randn(2, 64, 33, dtype=dt)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw = g.tensor_like(x), g.tensor_like(torch.randn(64, 1, 4, dtype=dt))
        g.conv_fprop(tx, tw, pre_padding=[3], post_padding=[0]).set_output(True)
        yield f"depthwise causal 1-D {dt}", g, [41]
        for fmt, tag in ((CL, "nhwc"), (torch.contiguous_format, "nchw")):
            dy = torch.randn(4, 48, 7, 12, dtype=dt).to(memory_format=fmt)
            x = torch.randn(4, 24, 13, 12, dtype=dt).to(memory_format=fmt)
            g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
            tdy = g.tensor_like(dy)
            tw = g.tensor_like(torch.randn(48, 1, 5, 5, dtype=dt).to(memory_format=fmt))
            dx = g.conv_dgrad(tdy, tw, padding=[2, 2], stride=[2, 1])
            dx.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
            dx.set_data_type(g_type(dt))
            yield f"depthwise dgrad {tag} {dt}", g, [42]
            g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
            tx, tdy = g.tensor_like(x), g.tensor_like(dy)
            w = torch.randn(48, 1, 5, 5, dtype=dt).to(memory_format=fmt)
            dw = g.conv_wgrad(tx, tdy, padding=[2, 2], stride=[2, 1])
            dw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
            dw.set_data_type(g_type(dt))
            yield f"depthwise wgrad {tag} {dt}", g, [43]
    # grouped, several groups per program (47): ResNeXt-like 32 groups of 4 and of 16,
    # NHWC / NCHW, bias + relu, 1-D
    for dt in (torch.bfloat16, torch.float32, torch.float16):
        for fmt, tag, cg in ((CL, "nhwc", 4), (torch.contiguous_format, "nchw", 16)):
            x = torch.randn(4, 32 * cg, 9, 10, dtype=dt).to(memory_format=fmt)
            w = torch.randn(32 * cg, cg, 3, 3, dtype=dt).to(memory_format=fmt)
            g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
            tx, tw = g.tensor_like(x), g.tensor_like(w)
            tb = g.tensor_like(torch.randn(1, 32 * cg, 1, 1, dtype=dt))
            y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[1, 1], stride=[2, 1]), tb))
            y.set_output(True).set_data_type(g_type(dt))
            yield f"grouped+bias+relu {tag} {cg} {dt}", g, [47]
            dy = torch.randn(4, 32 * cg, 9, 10, dtype=dt).to(memory_format=fmt)
            g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
            tdy, tw = g.tensor_like(dy), g.tensor_like(w)
            dx = g.conv_dgrad(tdy, tw, padding=[1, 1], stride=[2, 1])
            x = torch.randn(4, 32 * cg, 17, 10, dtype=dt).to(memory_format=fmt)
            dx.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
            dx.set_data_type(g_type(dt))
            yield f"grouped dgrad {tag} {cg} {dt}", g, [48]
            g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
            tx, tdy = g.tensor_like(x), g.tensor_like(dy)
            dw = g.conv_wgrad(tx, tdy, padding=[1, 1], stride=[2, 1])
            dw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
            dw.set_data_type(g_type(dt))
            yield f"grouped wgrad {tag} {cg} {dt}", g, [49]
    x = torch.randn(2, 64, 37, dtype=torch.bfloat16)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = g.tensor_like(x), g.tensor_like(torch.randn(64, 8, 3, dtype=torch.bfloat16))
    g.conv_fprop(tx, tw, padding=[1]).set_output(True)
    yield "grouped 1-D", g, [47]
    # backward data by stride phases (4, PHASES=1): 2-D stride 2 in NHWC, 3-D in NCDHW
    for dims, st in (((4, 16, 13, 12), [2, 2]), ((2, 8, 9, 8, 6), [2, 1, 2])):
        d = len(dims) - 2
        xs = torch.randn(dims, dtype=torch.bfloat16)
        if d == 2:
            xs = xs.to(memory_format=CL)
        ws_ = torch.randn(24, dims[1], *([3] * d), dtype=torch.bfloat16)
        out = [-(-s_ // t) for s_, t in zip(dims[2:], st)]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tdy = g.tensor_like(torch.randn(dims[0], 24, *out, dtype=torch.bfloat16))
        tw = g.tensor_like(ws_)
        dx = g.conv_dgrad(tdy, tw, padding=[1] * d, stride=st)
        dx.set_dim(list(dims)).set_stride(list(xs.stride())).set_output(True)
        dx.set_data_type(cudnn.data_type.BFLOAT16)
        yield f"dgrad by phases {d}-D", g, [4]
    # the backward filter's flat gathered runs: an RGB stem (C = 3, 7x7 stride 2)
    x = torch.randn(2, 3, 32, 32, dtype=torch.bfloat16).to(memory_format=CL)
    dy = torch.randn(2, 64, 16, 16, dtype=torch.bfloat16).to(memory_format=CL)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(tx, tdy, padding=[3, 3], stride=[2, 2])
    dw.set_dim([64, 3, 7, 7]).set_output(True).set_data_type(cudnn.data_type.FLOAT)
    yield "wgrad flat gathered stem", g, [5]
    # the TMA boxes in 3-D (N * D depth slices), each direction, stride 1 and 2: 32- and
    # 64-channel images (the forward's stride 2 needs C % 64 == 0)
    for s in (1, 2):
        conv = dict(padding=[1] * 3, stride=[s] * 3)
        x32, x64 = (torch.randn(2, c, 8, 8, 8, dtype=torch.bfloat16) for c in (32, 64))
        x32, x64 = x32.to(memory_format=CL3), x64.to(memory_format=CL3)
        w32, w64 = (torch.randn(64, c, 3, 3, 3, dtype=torch.bfloat16) for c in (32, 64))
        w32, w64 = w32.to(memory_format=CL3), w64.to(memory_format=CL3)
        dy = torch.randn(2, 64, 8 // s, 8 // s, 8 // s, dtype=torch.bfloat16)
        dy = dy.to(memory_format=CL3)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        dw = g.conv_wgrad(g.tensor_like(x32), g.tensor_like(dy), **conv)
        dw.set_dim(list(w32.shape)).set_output(True).set_data_type(cudnn.data_type.FLOAT)
        yield f"wgrad 3-D boxes stride {s}", g, [5]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        y = g.conv_fprop(g.tensor_like(x64), g.tensor_like(w64), **conv)
        y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
        yield f"fprop 3-D boxes stride {s}", g, [3]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        dx = g.conv_dgrad(g.tensor_like(dy), g.tensor_like(w32), **conv)
        dx.set_dim(list(x32.shape)).set_stride(list(x32.stride())).set_output(True)
        dx.set_data_type(cudnn.data_type.BFLOAT16)
        yield f"dgrad 3-D boxes stride {s}", g, [4]
    # patchify (50-52): a 4x4/4 RGB stem in NHWC bf16 and NCHW float32 (TF32)
    for dt, fmt in ((torch.bfloat16, CL), (torch.float32, torch.contiguous_format)):
        x = torch.randn(4, 3, 32, 32, dtype=dt).to(memory_format=fmt)
        w = torch.randn(96, 3, 4, 4, dtype=dt).to(memory_format=fmt)
        dy = torch.randn(4, 96, 8, 8, dtype=dt).to(memory_format=fmt)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw = g.tensor_like(x), g.tensor_like(w)
        g.conv_fprop(tx, tw, stride=[4, 4]).set_output(True).set_data_type(g_type(dt))
        yield f"patchify fprop {dt}", g, [50]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tdy, tw = g.tensor_like(dy), g.tensor_like(w)
        dx = g.conv_dgrad(tdy, tw, stride=[4, 4])
        dx.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
        dx.set_data_type(g_type(dt))
        yield f"patchify dgrad {dt}", g, [51]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tdy = g.tensor_like(x), g.tensor_like(dy)
        dw = g.conv_wgrad(tx, tdy, stride=[4, 4])
        dw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
        dw.set_data_type(g_type(dt))
        yield f"patchify wgrad {dt}", g, [52]
    # layout transforms (44-46): a patchify stem and a 1x1 layer in NCHW, each direction
    for dt in (torch.float16, torch.float32):
        for c, k, f in ((3, 96, 4), (64, 128, 1)):
            x = torch.randn(4, c, 32, 32, dtype=dt)
            w = torch.randn(k, c, f, f, dtype=dt)
            dy = torch.randn(4, k, 32 // f, 32 // f, dtype=dt)
            g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
            tx, tw = g.tensor_like(x), g.tensor_like(w)
            g.conv_fprop(tx, tw, stride=[f, f]).set_output(True).set_data_type(g_type(dt))
            yield f"channels-last fprop {c}->{k} {dt}", g, [44]
            g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
            tdy, tw = g.tensor_like(dy), g.tensor_like(w)
            dx = g.conv_dgrad(tdy, tw, stride=[f, f])
            dx.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
            dx.set_data_type(g_type(dt))
            yield f"channels-last dgrad {c}->{k} {dt}", g, [45]
            g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
            tx, tdy = g.tensor_like(x), g.tensor_like(dy)
            dw = g.conv_wgrad(tx, tdy, stride=[f, f])
            dw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
            dw.set_data_type(g_type(dt))
            yield f"channels-last wgrad {c}->{k} {dt}", g, [46]


def fusion_graphs():
    """Runtime-fusion kernels (sizes as runtime arguments): pointwise with a count that is
    not a multiple of 16 (sizes passed in units), broadcast, layout views, row and column
    reductions (the column one split, with its finishing kernel)."""
    F = cudnn.data_type.FLOAT
    for dt in (torch.bfloat16, torch.float32):
        x = torch.randn(3, 1000, dtype=dt)
        g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
        y = g.relu(g.mul(g.tensor_like(x), g.tensor_like(x)))
        y.set_output(True).set_data_type(F)
        yield f"fusion pointwise {dt}", g, [1]
        x = torch.randn(4, 24, 7, 7, dtype=dt).to(memory_format=CL)
        g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
        y = g.add(g.tensor_like(x), g.tensor_like(torch.randn(1, 24, 1, 1, dtype=dt)))
        y.set_output(True)
        yield f"fusion broadcast nhwc {dt}", g, [1]
        x = torch.randn(6, 40, 24, dtype=dt)
        g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
        tx = g.tensor_like(torch.randn(6, 24, 40, dtype=dt))
        tz = g.tensor_like(torch.randn(6, 42, 24, dtype=dt))
        y = g.add(g.transpose(tx, [0, 2, 1]), g.slice(tz, [(0, 6), (2, 42), (0, 24)]))
        y.set_output(True)
        yield f"fusion slice+transpose {dt}", g, [1]
        g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
        tx = g.tensor_like(x)
        c = g.concatenate([tx, g.tensor_like(torch.randn(6, 40, 8, dtype=dt))], axis=2)
        g.relu(c).set_output(True)
        yield f"fusion concatenate {dt}", g, [1]
        for name, dims in (("rows", [4096, 1]), ("columns", [1, 1000])):
            g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
            tx = g.tensor_like(torch.randn(4096, 1000, dtype=dt))
            y = g.reduction(g.relu(tx), mode=cudnn.reduction_mode.AVG)
            y.set_dim(dims).set_output(True).set_data_type(F)
            yield f"fusion {name} mean {dt}", g, [1]


def matmul_graphs():
    """Matmuls with a pointwise epilogue whose strides are runtime arguments (bias and
    residual: a broadcast row, an odd row pitch passed in units)."""
    F = cudnn.data_type.FLOAT
    for dt in (torch.bfloat16, torch.float16):
        for m, n, k in ((1000, 520, 264), (4096, 4096, 4096)):
            a, b = torch.randn(m, k, dtype=dt), torch.randn(k, n, dtype=dt)
            g = cudnn.pygraph(intermediate_data_type=F, compute_data_type=F)
            c = g.matmul(g.tensor_like(a), g.tensor_like(b))
            y = g.add(
                g.relu(g.add(c, g.tensor_like(torch.randn(1, n, dtype=dt)))),
                g.tensor_like(torch.randn(m, n, dtype=dt)),
            )
            y.set_output(True).set_data_type(dt)
            yield f"matmul+epilogue {dt} {m}x{n}x{k}", g, [2]


def batchnorm_graphs():
    for dt in (torch.bfloat16, torch.float32):
        for layout in ("nhwc", "nchw"):
            for shape in ((64, 256, 56, 56), (7, 37, 13, 11)):
                x = torch.empty(shape, dtype=dt)
                if layout == "nhwc":
                    x = x.to(memory_format=CL)
                s = torch.empty(1, shape[1], 1, 1)
                g = cudnn.pygraph()
                tx, ts, tb, tm, tv = (g.tensor_like(t) for t in (x, s, s, s, s))
                outs = g.batchnorm(tx, ts, tb, tm, tv, 1e-5, 0.1)
                for t in outs[1:]:
                    t.set_output(True)
                tz = g.tensor_like(x)
                g.relu(g.add(outs[0], tz)).set_output(True)
                yield f"bn+add+relu {shape} {layout} {dt}", g, [30]
                g = cudnn.pygraph()
                tx, ts, tb, tm, tv = (g.tensor_like(t) for t in (x, s, s, s, s))
                g.batchnorm_inference(tx, tm, tv, ts, tb).set_output(True)
                yield f"bn inference {shape} {layout} {dt}", g, [30]
                g = cudnn.pygraph()
                tl_, ty, tx, ts, tm, tv = (g.tensor_like(t) for t in (x, x, x, s, s, s))
                for t in g.batchnorm_backward(g.relu_backward(tl_, ty), tx, ts, tm, tv):
                    t.set_output(True)
                yield f"drelu+bn bwd {shape} {layout} {dt}", g, [30]


def fft_graphs():
    """The FFT engines (13, 14), which the conv family's graphs do not reach."""
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(4, 16, 28, 28, dtype=dt).to(memory_format=CL)
        w = torch.randn(32, 16, 5, 5, dtype=dt).to(memory_format=CL)
        b = torch.randn(1, 32, 1, 1, dtype=dt)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
        y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[2, 2]), tb))
        y.set_output(True)
        yield f"5x5+bias+relu {dt}", g, [13, 14]
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor(dim=[2, 8, 250, 250], data_type=cudnn.data_type.FLOAT)
    tw = g.tensor(dim=[8, 8, 7, 7], data_type=cudnn.data_type.FLOAT)
    g.conv_fprop(
        tx, tw, padding=[3, 3], convolution_mode=cudnn.convolution_mode.CONVOLUTION
    ).set_output(True)
    yield "256x256 7x7 conv mode", g, [13, 14]
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor(dim=[3, 1, 1, 1], data_type=cudnn.data_type.FLOAT)
    tw = g.tensor(dim=[1, 1, 1, 1], data_type=cudnn.data_type.FLOAT)
    g.conv_fprop(tx, tw).set_output(True)
    yield "1x1 image 1x1 filter", g, [13, 14]


def norm_graphs():
    tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")
    sys.path[:0] = [os.path.join(tests, "norm"), tests]  # the norm tests' graph builders
    from _norm_cases import backward_graph, forward_graph, param_shape

    for dt in (torch.bfloat16, torch.float32):
        for kind, shape, groups in (
            ("layernorm", (64, 1000), 1),
            ("rmsnorm", (4, 300000), 1),
            ("layernorm", (8, 65536), 1),
            ("groupnorm", (4, 64, 32, 32), 8),
        ):
            x = torch.empty(shape, dtype=dt)
            w = torch.empty(param_shape(kind, shape), dtype=dt)
            b = None if kind == "rmsnorm" else w
            g, _, _ = forward_graph(kind, x, w, b, 1e-5, groups)
            yield f"{kind} {shape} {dt}", g, [26]
            st = torch.empty(
                (shape[0], groups) + (1,) * (len(shape) - 2)
                if kind == "groupnorm"
                else (shape[0], 1),
                dtype=torch.float32,
            )
            g, _, _ = backward_graph(kind, x, x, w, st, st, groups)
            yield f"{kind}_bwd {shape} {dt}", g, [26]
        x = torch.empty(4, 64, 16, 16, dtype=dt).contiguous(memory_format=CL)
        w = torch.empty(1, 64, 1, 1, dtype=dt)
        st = torch.empty(4, 8, 1, 1)
        g, _, _ = backward_graph("groupnorm", x, x, w, st, st, 8)
        yield f"groupnorm_bwd NHWC {dt}", g, [26]
        x = torch.empty(256, 4096, dtype=dt)
        w = torch.empty(1, 4096, dtype=dt)
        g = cudnn.pygraph()
        tx, tr, tw = g.tensor_like(x), g.tensor_like(x), g.tensor_like(w)
        y, m, v = g.layernorm(cudnn.norm_forward_phase.TRAINING, g.add(tx, tr), tw, tw, 1e-5)
        g.gelu(y).set_output(True)
        m.set_output(True)
        v.set_output(True)
        yield f"add+layernorm+gelu {dt}", g, [26]


def _tensor(g, t, dt=None):
    return g.tensor(dim=list(t.shape), stride=list(t.stride()), data_type=dt or DT[t.dtype])


def pool_graphs():
    M = cudnn.resample_mode
    cases = (
        ((64, 256, 56, 56), (3, 3), (2, 2), (1, 1)),
        ((8, 3, 33, 47), (2, 2), (2, 2), (0, 0)),
        ((2, 16, 9, 10, 11), (3, 3, 3), (2, 2, 2), (1, 1, 1)),
        ((8, 512, 14, 14), (14, 14), (1, 1), (0, 0)),
    )  # global: run-time loops
    for dt in (torch.bfloat16, torch.float32):
        for shape, w, s, p in cases:
            for fmt in ("nchw", "nhwc"):
                x = torch.empty(shape, dtype=dt)
                if fmt == "nhwc":
                    x = x.contiguous(
                        memory_format=CL if len(shape) == 4 else torch.channels_last_3d
                    )
                for mode in ("MAXPOOL", "AVGPOOL_INCLUDE_PADDING", "AVGPOOL_EXCLUDE_PADDING"):
                    label = f"{mode[:7]} {shape} {fmt} {str(dt)[6:]}"
                    g = cudnn.pygraph()
                    ty, tix = g.resample(
                        _tensor(g, x), M[mode], w, s, padding=p, generate_index=mode == "MAXPOOL"
                    )
                    ty.set_output(True)
                    yield f"fwd {label}", g, [34]
                    g.validate()
                    y = torch.empty_strided(ty.get_dim(), ty.get_stride(), dtype=dt)
                    for source in ("index", "x") if mode == "MAXPOOL" else (None,):
                        g = cudnn.pygraph()
                        kw = {}
                        if source == "index":
                            kw["index"] = _tensor(g, y, tix.get_data_type())
                        elif source == "x":
                            kw["input"] = _tensor(g, x)
                        dx = g.resample_backward(_tensor(g, y), M[mode], w, s, padding=p, **kw)
                        dx.set_output(True).set_dim(list(shape)).set_stride(list(x.stride()))
                        yield f"bwd {source} {label}", g, [35]


def softmax_graphs():
    for dt in (torch.bfloat16, torch.float32):
        for shape, axis in (((64, 1000), -1), ((4, 300000), -1), ((8, 64, 7, 7), 1)):
            for log in (False, True):
                x = torch.empty(shape, dtype=dt)
                g = cudnn.pygraph()
                tx = g.tensor_like(x)
                g.softmax(tx, axis=axis, log=log).set_output(True)
                yield f"softmax {shape} {axis} {log} {dt}", g, [25]
                g = cudnn.pygraph()
                ty, tdy = g.tensor_like(x), g.tensor_like(x)
                g.softmax_backward(tdy, ty, axis=axis, log=log).set_output(True)
                yield f"softmax_bwd {shape} {axis} {log} {dt}", g, [25]


def split_graphs():
    for dt in (torch.bfloat16, torch.float32, torch.float16):
        x = torch.empty(4, 16, 12, 12, dtype=dt).to(memory_format=CL)
        w = torch.empty(32, 16, 3, 3, dtype=dt).to(memory_format=CL)
        dy = torch.empty(4, 32, 12, 12, dtype=dt).to(memory_format=CL)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tdy, tw, tx = _tensor(g, dy), _tensor(g, w), _tensor(g, x)
        dx = g.conv_dgrad(tdy, tw, padding=[1, 1])
        dx.set_dim(list(x.shape)).set_stride(list(x.stride()))
        g.relu_backward(dx, tx).set_output(True).set_data_type(DT[dt])
        yield f"dgrad+drelu {dt}", g, [17]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tdy = _tensor(g, x), _tensor(g, dy)
        dw = g.conv_wgrad(tx, tdy, padding=[1, 1])
        dw.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
        dw.set_data_type(DT[dt])  # fp32: into dw; fp16 / bf16: accumulator + finish
        yield f"wgrad {dt}", g, [19]
    # 3-D, groups, stride, dilation, CONVOLUTION mode, NCDHW
    x, w = torch.empty(2, 8, 6, 7, 5), torch.empty(12, 4, 3, 2, 2)
    dy = torch.empty(2, 12, 6, 3, 5)
    params = dict(
        pre_padding=[1, 0, 1],
        post_padding=[1, 0, 1],
        stride=[1, 2, 1],
        dilation=[1, 1, 2],
        convolution_mode=cudnn.convolution_mode.CONVOLUTION,
    )
    g = cudnn.pygraph()
    tdy, tw = _tensor(g, dy), _tensor(g, w)
    dx = g.conv_dgrad(tdy, tw, **params)
    dx.set_dim(list(x.shape)).set_output(True)
    yield "dgrad 3-D groups", g, [17]
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = _tensor(g, x), _tensor(g, dy)
    dw = g.conv_wgrad(tx, tdy, **params)
    dw.set_dim(list(w.shape))
    g.scale(dw, 0.5).set_output(True).set_data_type(cudnn.data_type.HALF)
    yield "wgrad 3-D groups +scale", g, [19]
    # 1-D depthwise
    x, w, dy = torch.empty(8, 64, 101), torch.empty(64, 1, 5), torch.empty(8, 64, 50)
    g = cudnn.pygraph()
    tdy, tw = _tensor(g, dy), _tensor(g, w)
    dx = g.conv_dgrad(tdy, tw, padding=[1], stride=[2])
    dx.set_dim(list(x.shape)).set_output(True)
    yield "dgrad 1-D depthwise", g, [17]
    g = cudnn.pygraph()
    tx, tdy = _tensor(g, x), _tensor(g, dy)
    dw = g.conv_wgrad(tx, tdy, padding=[1], stride=[2])
    dw.set_dim(list(w.shape)).set_output(True)
    yield "wgrad 1-D depthwise", g, [19]


def winograd_graphs():
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        x = torch.randn(8, 64, 28, 28, dtype=dt).to(memory_format=CL)
        w = torch.randn(64, 64, 3, 3, dtype=dt).to(memory_format=CL)
        b = torch.randn(1, 64, 1, 1, dtype=dt)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
        y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[1, 1]), tb))
        y.set_output(True)
        yield f"fprop+bias+relu {dt}", g, [15]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tdy = g.tensor_like(torch.randn(8, 64, 28, 28, dtype=dt).to(memory_format=CL))
        tw, tx = g.tensor_like(w), g.tensor_like(x)
        dx = g.conv_dgrad(tdy, tw, padding=[1, 1])
        dx.set_dim(list(x.shape)).set_stride(list(x.stride()))
        g.relu_backward(dx, tx).set_output(True)
        yield f"dgrad+drelu {dt}", g, [16, 18]
    x = torch.randn(2, 16, 9, 9)  # NCHW, fp32, no padding
    g = cudnn.pygraph()
    tx, tw = g.tensor_like(x), g.tensor_like(torch.randn(24, 16, 3, 3))
    g.conv_fprop(tx, tw, convolution_mode=cudnn.convolution_mode.CONVOLUTION).set_output(True)
    yield "fprop nchw conv-mode fp32", g, [15]


# family: (graphs, configs per engine (None: all), options of run_checks)
def attention_graphs():
    """The attention engine's Triton kernels (40) with every option the node offers: ALiBi,
    dropout with rng_dump, paged K / V (plain and packed tables), ragged (THD) tensors and
    Stats, sinks with the score outputs and dSink, block masks; forward and backward where
    the option has one."""
    B, H, HK, S, D = 2, 4, 2, 256, 128
    T = cudnn.data_type
    bhsd, thd = [H * S * D, S * D, D, 1], [S * H * D, D, H * D, 1]

    def t(g, dims, dt, name=None):
        strides = [1] * len(dims)
        for i in range(len(dims) - 2, -1, -1):
            strides[i] = strides[i + 1] * dims[i + 1]
        return g.tensor(list(dims), strides, dt, name=name)

    def offsets(g):
        return t(g, (B + 1, 1, 1, 1), T.INT64)

    def qkv(g, ragged):
        if not ragged:
            q = g.tensor([B, H, S, D], bhsd, T.BFLOAT16, name="q")
            k, v = (t(g, (B, HK, S, D), T.BFLOAT16, n) for n in "kv")
            return q, k, v
        q = g.tensor([B, H, S, D], thd, T.BFLOAT16, name="q")
        kv = [S * HK * D, D, HK * D, 1]
        k, v = (g.tensor([B, HK, S, D], kv, T.BFLOAT16, name=n) for n in "kv")
        for x in (q, k, v):
            x.set_ragged_offset(offsets(g))
        return q, k, v

    def padding(g):
        return dict(
            use_padding_mask=True,
            seq_len_q=t(g, (B, 1, 1, 1), T.INT32),
            seq_len_kv=t(g, (B, 1, 1, 1), T.INT32),
        )

    def fwd(label, make=lambda g: {}, ragged=False):
        g = cudnn.pygraph()
        q, k, v = qkv(g, ragged)
        o, st = g.sdpa(q, k, v, attn_scale=0.125, **make(g))
        o.set_output(True)
        st.set_output(True)
        if ragged:
            o.set_dim([B, H, S, D]).set_stride(thd).set_ragged_offset(offsets(g))
            st.set_dim([B, H, S, 1]).set_stride([S * H, 1, H, 1]).set_ragged_offset(offsets(g))
        return f"sdpa {label}", g, [40]

    def bwd(label, make=lambda g: {}, ragged=False):
        g = cudnn.pygraph()
        q, k, v = qkv(g, ragged)
        o, do = (g.tensor([B, H, S, D], thd if ragged else bhsd, T.BFLOAT16) for _ in "od")
        st = g.tensor([B, H, S, 1], [S * H, 1, H, 1] if ragged else [H * S, S, 1, 1], T.FLOAT)
        if ragged:
            for x in (o, do, st):
                x.set_ragged_offset(offsets(g))
        grads = g.sdpa_backward(q, k, v, o, do, st, attn_scale=0.125, **make(g))
        for x, like in zip(grads, (q, k, v)):
            x.set_output(True)
            if ragged:
                x.set_dim(like.get_dim()).set_stride(like.get_stride())
                x.set_ragged_offset(offsets(g))
        return f"sdpa_bwd {label}", g, [40]

    def sink(g):
        return dict(sink_token=t(g, (1, H, 1, 1), T.FLOAT), dSink_token=t(g, (1, H, 1, 1), T.FLOAT))

    def sink_fwd(g):
        return dict(
            padding(g),
            sink_token=t(g, (1, H, 1, 1), T.FLOAT),
            score_max=t(g, (B, H, S, 1), T.FLOAT),
            score_sum_exp=t(g, (B, H, S, 1), T.FLOAT),
        )

    def dump(g):
        return dict(dropout=(0.1, 7, 3), rng_dump=t(g, (B, H, S, S), T.FLOAT))

    def block(g):
        return dict(block_mask=t(g, (B, H, S // 128, 1), T.UINT8), diagonal_band_right_bound=0)

    yield fwd("alibi causal", lambda g: dict(use_alibi_mask=True, diagonal_band_right_bound=0))
    yield bwd("alibi causal", lambda g: dict(use_alibi_mask=True, diagonal_band_right_bound=0))
    yield fwd("dropout rng_dump", dump)
    yield bwd("dropout rng_dump", dump)
    yield fwd("ragged padding", padding, ragged=True)
    yield bwd("ragged padding", padding, ragged=True)
    yield fwd("sink scores padding", sink_fwd)
    yield bwd("sink padding", lambda g: dict(padding(g), **sink(g)))
    yield bwd("ragged sink", lambda g: dict(padding(g), **sink(g)), ragged=True)
    yield fwd("block mask causal", block)
    for packed in (False, True):
        g = cudnn.pygraph()
        q = g.tensor([B, H, S, D], bhsd, T.BFLOAT16, name="q")
        kc, vc = (t(g, (2 * B * S // 64, HK, 64, D), T.BFLOAT16, n) for n in "kv")
        tables = {}
        for n in "kv":
            table = g.tensor([B, 1, S // 64, 1], [S // 64, 1, 1, 1], T.INT32)
            if packed:
                table.set_ragged_offset(offsets(g))
            tables[f"paged_attention_{n}_table"] = table
        o, st = g.sdpa(
            q, kc, vc, attn_scale=0.125, paged_attention_max_seq_len_kv=S, **padding(g), **tables
        )
        o.set_output(True)
        st.set_output(True)
        yield f"sdpa paged packed={packed}", g, [40]


def moe_graphs():
    from opendnn.enums import MoeGroupedMatmulMode as Mode

    e, m, k, n = 8, 1024, 512, 384
    for dt in (torch.bfloat16, torch.float32):
        for mode in (Mode.NONE, Mode.GATHER, Mode.SCATTER):
            g = cudnn.pygraph(compute_data_type=cudnn.data_type.FLOAT)
            tok = g.tensor_like(torch.empty(1, m, k, dtype=dt))
            w = g.tensor_like(torch.empty_strided((e, k, n), (k * n, 1, k), dtype=dt))
            off = g.tensor_like(torch.empty(e, 1, 1, dtype=torch.int32))
            idx = g.tensor_like(torch.empty(1, m, 1, dtype=torch.int32))
            ks = g.tensor_like(torch.empty(1, m, 1, dtype=torch.int32))
            g.moe_grouped_matmul(
                tok, w, off, token_index=idx, token_ks=ks, mode=mode, top_k=2
            ).set_output(True)
            yield f"moe {mode.name} {dt}", g, [56]
        g = cudnn.pygraph(compute_data_type=cudnn.data_type.FLOAT)
        dout = g.tensor_like(torch.empty(1, m, n, dtype=dt))
        tok = g.tensor_like(torch.empty(1, m, k, dtype=dt))
        off = g.tensor_like(torch.empty(e, 1, 1, dtype=torch.int32))
        g.moe_grouped_matmul_bwd(dout, tok, off).set_output(True)
        yield f"moe_bwd {dt}", g, [56]


FAMILIES = {
    "conv": (conv_graphs, 3, {}),
    "fusion": (fusion_graphs, 3, {}),
    "matmul": (matmul_graphs, 3, {}),
    "batchnorm": (batchnorm_graphs, None, {}),
    "fft": (fft_graphs, None, {}),
    "norm": (norm_graphs, None, {}),
    "pool": (pool_graphs, None, {}),
    "softmax": (softmax_graphs, None, {}),
    "split": (split_graphs, 3, {"decline_fails": True}),
    "winograd": (winograd_graphs, 3, {"winograd": True}),
    "attention": (attention_graphs, 3, {"decline_fails": True}),
    "moe": (moe_graphs, 3, {"decline_fails": True}),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="compile the kernels of a family's plans for sm_90 without a GPU"
    )
    ap.add_argument(
        "families", nargs="*", default=["all"], help="all, or some of: " + ", ".join(FAMILIES)
    )
    ap.add_argument(
        "--all-configs",
        action="store_true",
        help="every config the engines list, not the first three",
    )
    args = ap.parse_args(argv)
    names = list(FAMILIES) if "all" in args.families else args.families
    bad = [n for n in names if n not in FAMILIES]
    if bad:
        ap.error(f"unknown family {', '.join(bad)} (choose from all, {', '.join(FAMILIES)})")
    failures = {}
    for name in names:
        graphs, limit, opts = FAMILIES[name]
        print(f"== {name}", flush=True)
        failures[name] = run_checks(graphs(), None if args.all_configs else limit, **opts)
        print(f"{name}: compile failures: {failures[name]}", flush=True)
    if len(names) > 1:
        print("compile failures:", ", ".join(f"{n} {c}" for n, c in failures.items()))
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
