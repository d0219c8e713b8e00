"""Compile every kernel a set of plans would launch for sm_90 (H100), on a machine with no
GPU: catches what only the compiler rejects (types that change in a loop, constexpr
misuse) before device time is spent. Run: PYTHONPATH=src python bench/compile_check.py"""
import sys
import traceback

import torch
import triton
from triton.backends.compiler import GPUTarget

import opendnn.frontend as cudnn
from opendnn.engines.base import Target
from opendnn.engines.registry import by_id

H100 = Target("cuda", "NVIDIA H100 (compile check)", (9, 0), 132, 7.1e14, 5e13, 3e12)
TY = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int64: "i64",
      torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1",
      torch.float64: "fp64"}


def compile_launches(exe, graph):
    count = 0
    launches = list(getattr(exe, "launches", []))
    if hasattr(exe, "launcher"):
        launches.append((exe.launcher, None))
    for launcher, args in launches:
        fn = launcher.kernel.compiled
        params = [p.name for p in fn.params]
        sig, consts = {}, {}
        if args is None:   # precomp: X, W, PIX, TAP, then the rest (tensors or scalars)
            x_t = graph.tensors[exe.uids[0]].torch_dtype
            rest = [graph.tensors[u] for u in exe.rest]
            types = (["*" + TY[x_t], "*" + TY[x_t], "*i64", "*i64"] +
                     ["fp32" if d.is_pass_by_value else "*" + TY[d.torch_dtype] for d in rest])
        for i, name in enumerate(params):
            if name in launcher.constexprs or fn.params[i].is_constexpr:
                sig[name] = "constexpr"
                consts[(i,)] = launcher.constexprs.get(name, fn.params[i].default)
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
            else:   # an integer: Triton types it i64 when it does not fit i32
                sig[name] = "i64" if not -2 ** 31 <= key < 2 ** 31 else "i32"
        opts = {k: v for k, v in launcher.constexprs.items() if k in ("num_warps", "num_stages")}
        src = triton.compiler.ASTSource(fn=fn, signature=sig,
                                        constexprs={params[k[0]]: v for k, v in consts.items()})
        triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
        count += 1
    return count


def graphs():
    cl = torch.channels_last
    xi = torch.randint(-128, 128, (4, 16, 12, 12), dtype=torch.int8).to(memory_format=cl)
    wi = torch.randint(-128, 128, (32, 16, 3, 3), dtype=torch.int8).to(memory_format=cl)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor(list(xi.shape), list(xi.stride()), cudnn.data_type.INT8)
    tw = g.tensor(list(wi.shape), list(wi.stride()), cudnn.data_type.INT8)
    y = g.scale(g.conv_fprop(tx, tw, padding=[1, 1]), 0.01)
    y.set_output(True).set_data_type(cudnn.data_type.INT8)
    yield "int8 fprop", g, [3, 11]
    for dt in (torch.bfloat16, torch.float32):
        x = torch.randn(4, 16, 12, 12, dtype=dt).to(memory_format=cl)
        w = torch.randn(32, 16, 3, 3, dtype=dt).to(memory_format=cl)
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
        tdy = g.tensor_like(torch.randn(4, 32, 12, 12, dtype=dt).to(memory_format=cl))
        tw, tx = g.tensor_like(w), g.tensor_like(x)
        dx = g.conv_dgrad(tdy, tw, padding=[1, 1])
        dx.set_dim([4, 16, 12, 12]).set_stride(list(x.stride()))
        g.relu_backward(dx, tx).set_output(True)
        yield f"dgrad+drelu {dt}", g, [4]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx = g.tensor_like(x)
        tdy = g.tensor_like(torch.randn(4, 32, 12, 12, dtype=dt).to(memory_format=cl))
        dw = g.conv_wgrad(tx, tdy, padding=[1, 1])
        dw.set_dim([32, 16, 3, 3]).set_stride(list(w.stride())).set_output(True)
        yield f"wgrad {dt}", g, [5, 10, 12]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw, ts, tb = (g.tensor_like(t) for t in (x, w, torch.randn(1, 16, 1, 1),
                                                     torch.randn(1, 16, 1, 1)))
        y = g.conv_fprop(g.relu(g.bias(g.scale(tx, ts), tb)), tw, padding=[1, 1])
        y.set_output(True)
        s, q = g.genstats(y)
        s.set_output(True)
        q.set_output(True)
        yield f"prologue+genstats {dt}", g, [3]


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
        x = torch.randn(4, 24, 7, 7, dtype=dt).to(memory_format=torch.channels_last)
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
            y = g.add(g.relu(g.add(c, g.tensor_like(torch.randn(1, n, dtype=dt)))),
                      g.tensor_like(torch.randn(m, n, dtype=dt)))
            y.set_output(True).set_data_type(dt)
            yield f"matmul+epilogue {dt} {m}x{n}x{k}", g, [2]


def run_checks(graph_iter, limit=3, decline_fails=False) -> int:
    """Build (sources only, CPU target) and compile for sm_90 the first ``limit`` configs
    (None: all) of each (label, graph, engine ids); returns the failure count."""
    failures = 0
    for label, g, engine_ids in graph_iter:
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
                    exe = e.build(og, cfg, Target())   # build generates sources (CPU target)
                    n = compile_launches(exe, og)
                    inner = getattr(exe, "inner", None) or getattr(exe, "gemm", None)
                    if inner is not None:
                        n += len(getattr(inner, "launches", []))
                    print(f"{label:28s} {cfg.label()[:70]:70s} ws={exe.workspace_size:>8d} "
                          f"compiled {n} kernel(s)")
                except Exception:
                    failures += 1
                    print(f"{label:28s} {cfg.label()[:70]:70s} FAILED")
                    traceback.print_exc(limit=3)
    print("compile failures:", failures)
    return failures


def main():
    return 1 if (run_checks(graphs()) + run_checks(fusion_graphs())
                 + run_checks(matmul_graphs())) else 0


if __name__ == "__main__":
    sys.exit(main())
