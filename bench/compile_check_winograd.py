"""Compile the Winograd engines' kernels (fused forward 15, non-fused dgrad 16, fused dgrad
18) for sm_90 on a machine with no GPU, and report each fused kernel's register count and
spills from ptxas (the 16 float32 accumulators are the register-pressure risk).

Run: PYTHONPATH=src python bench/compile_check_winograd.py [--all-configs]
"""
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

sys.path.insert(0, os.path.dirname(__file__))
from compile_check import H100, TY  # noqa: E402

PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")


def ptxas_usage(ptx: str) -> str:
    """'regs=R spill_stores=S spill_loads=L' of the PTX's entry, from ptxas -v."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        out = subprocess.run([PTXAS, "-v", "--gpu-name=sm_90a", f.name, "-o", os.devnull],
                             capture_output=True, text=True).stderr
    finally:
        os.unlink(f.name)
    regs = re.findall(r"Used (\d+) registers", out)
    st = re.findall(r"(\d+) bytes spill stores", out)
    ld = re.findall(r"(\d+) bytes spill loads", out)
    return f"regs={regs[-1] if regs else '?'} spill_stores={st[-1] if st else '?'} " \
           f"spill_loads={ld[-1] if ld else '?'}"


def compile_launches(exe, graph) -> list:
    """Compile every launch of ``exe`` for sm_90; returns (kernel name, usage) pairs."""
    out = []
    for launcher, args in exe.launches:
        fn = launcher.kernel.compiled
        params = [p.name for p in fn.params]
        sig, consts = {}, {}
        for i, name in enumerate(params):
            if name in launcher.constexprs or fn.params[i].is_constexpr:
                sig[name] = "constexpr"
                consts[name] = launcher.constexprs.get(name, fn.params[i].default)
                continue
            kind, key = args[i]
            if kind == "buf":
                d = graph.tensors[key]
                sig[name] = "fp32" if d.is_pass_by_value else "*" + TY[d.torch_dtype]
            elif kind == "ws":
                sig[name] = "*" + TY[key]
            else:
                sig[name] = "i32"
        opts = {k: v for k, v in launcher.constexprs.items() if k in ("num_warps", "num_stages")}
        src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=consts)
        ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
        out.append((fn.__name__, ptxas_usage(ck.asm["ptx"])))
    return out


def graphs():
    cl = torch.channels_last
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        x = torch.randn(8, 64, 28, 28, dtype=dt).to(memory_format=cl)
        w = torch.randn(64, 64, 3, 3, dtype=dt).to(memory_format=cl)
        b = torch.randn(1, 64, 1, 1, dtype=dt)
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
        y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[1, 1]), tb))
        y.set_output(True)
        yield f"fprop+bias+relu {dt}", g, [15]
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tdy = g.tensor_like(torch.randn(8, 64, 28, 28, dtype=dt).to(memory_format=cl))
        tw, tx = g.tensor_like(w), g.tensor_like(x)
        dx = g.conv_dgrad(tdy, tw, padding=[1, 1])
        dx.set_dim(list(x.shape)).set_stride(list(x.stride()))
        g.relu_backward(dx, tx).set_output(True)
        yield f"dgrad+drelu {dt}", g, [16, 18]
    x = torch.randn(2, 16, 9, 9)                  # NCHW, fp32, no padding
    g = cudnn.pygraph()
    tx, tw = g.tensor_like(x), g.tensor_like(torch.randn(24, 16, 3, 3))
    g.conv_fprop(tx, tw, convolution_mode=cudnn.convolution_mode.CONVOLUTION).set_output(True)
    yield "fprop nchw conv-mode fp32", g, [15]


def main():
    all_configs = "--all-configs" in sys.argv
    failures = 0
    for label, g, engine_ids in graphs():
        g.validate()
        og = g.op_graph
        for eid in engine_ids:
            e = by_id(eid)
            sup = e.check_support(og, H100)
            if not sup.ok:
                print(f"{label:26s} {e.name:30s} declines: {sup.reason}")
                continue
            cfgs = e.configs(og, H100)
            for cfg in cfgs if all_configs else cfgs[:3]:
                try:
                    exe = e.build(og, cfg, Target())   # sources only (CPU target)
                    done = compile_launches(exe, og)
                    inner = getattr(exe, "gemm", None)
                    if inner is not None:
                        done += compile_launches(inner, inner_graph(e, og))
                    fused = [u for n, u in done if n.startswith("wino_fused_conv")]
                    print(f"{label:26s} {cfg.label()[:84]:84s} {len(done)} kernel(s) "
                          f"{fused[0] if fused else ''}")
                except Exception:
                    failures += 1
                    print(f"{label:26s} {cfg.label()[:84]:84s} FAILED")
                    traceback.print_exc(limit=4)
    print("compile failures:", failures)
    return 1 if failures else 0


def inner_graph(engine, graph):
    """The synthetic GEMM graph a matmul-delegating engine runs."""
    from opendnn.engines.matmul.delegate import _synthetic
    return _synthetic(engine, graph)


if __name__ == "__main__":
    sys.exit(main())
