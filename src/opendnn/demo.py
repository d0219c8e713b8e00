"""``make demo``: run the seed examples end to end and say what was chosen and how fast.

For each graph: the plan the heuristics chose (engine, knobs, why), the check against
float64, and on a GPU the time against PyTorch's own sequence of kernels.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _time_ms(fn) -> float:
    from .bench.timing import bench

    return bench(fn)


def _report(title, g, err, tol):
    plan = g._selected_plan()
    print(f"\n== {title}")
    print(f"   graph : {g.op_graph.describe()}")
    print(f"   plan  : {plan.name}")
    print(
        f"   why   : heuristic mode {plan.origin}; ranked first of "
        f"{g.get_execution_plan_count()} candidates by the cost model; workspace "
        f"{plan.workspace_size} B; build {plan.build_seconds * 1e3:.1f} ms"
    )
    status = "OK" if err <= tol else "MISMATCH"
    print(f"   check : max relative error vs float64 = {err:.2e} (tolerance {tol:.0e}) {status}")
    return err <= tol


def main() -> int:
    gpu = torch.cuda.is_available()
    print(
        "opendnn demo on",
        torch.cuda.get_device_name()
        if gpu
        else "the CPU (no GPU found: Triton kernels run through the interpreter, small shapes)",
    )
    ok = True

    mm = _load("01_matmul_bias")
    g, (A, B, bias), result, pack, ws = mm.main()
    ref = A.double() @ B.double() + bias.double()
    err = ((result.double() - ref).abs().max() / ref.abs().max()).item()
    ok &= _report("seed: pygraph matmul + bias (fp32)", g, err, 1e-4 if not gpu else 1e-4)
    if gpu:
        t_ours = _time_ms(lambda: g.execute(pack, ws))
        t_torch = _time_ms(lambda: torch.baddbmm(bias, A, B))
        print(
            f"   time  : opendnn {t_ours:.4f} ms, PyTorch baddbmm {t_torch:.4f} ms "
            f"(ratio {t_torch / t_ours:.2f}x)"
        )

    fu = _load("02_runtime_fusion")
    g, (t1, t2, t3), out, pack, ws = fu.main()
    ref = torch.sigmoid(t1.double() + t2.double() * t3.double())
    err = (out.double() - ref).abs().max().item()
    ok &= _report("seed: runtime fusion sigmoid(t1 + t2*t3) (bf16)", g, err, 1e-2)
    if gpu:
        t_ours = _time_ms(lambda: g.execute(pack, ws))
        t_torch = _time_ms(lambda: torch.sigmoid(t1 + t2 * t3))
        gbs = 4 * t1.numel() * t1.element_size() / t_ours / 1e6
        print(
            f"   time  : opendnn {t_ours:.4f} ms ({gbs:.0f} GB/s), PyTorch eager "
            f"{t_torch:.4f} ms (ratio {t_torch / t_ours:.2f}x)"
        )
    hello = _load("03_hello_cudnn")
    print("\n== seed: Hello, cuDNN (descriptor API, 64 7x7 filters, pad 3, stride 2)")
    x, w, y = hello.main()
    ref = torch.nn.functional.conv2d(x.double(), w.double(), stride=2, padding=3)
    err = ((y.double() - ref).norm() / ref.norm()).item()
    print(f"   check : relative error vs float64 = {err:.2e} {'OK' if err < 1e-5 else 'MISMATCH'}")
    ok &= err < 1e-5
    if gpu:
        t_torch = _time_ms(lambda: torch.nn.functional.conv2d(x, w, stride=2, padding=3))
        print(f"   time  : PyTorch/cuDNN {t_torch:.4f} ms (opendnn: `opendnn bench conv`)")

    cbr = _load("04_conv_bias_relu")
    x, w, b, y = cbr.main()
    ref = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), padding=1) + b.double())
    err = ((y.double() - ref).norm() / ref.norm()).item()
    print("\n== seed: convolution_bias_activation_forward (conv + bias + relu, fp32)")
    print(f"   check : relative error vs float64 = {err:.2e} {'OK' if err < 1e-5 else 'MISMATCH'}")
    ok &= err < 1e-5

    gcb = _load("05_graph_conv_bias_relu")
    g, (x, w, b), out, pack, ws = gcb.main()
    ref = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), padding=1) + b.double())
    err = ((out.double() - ref).norm() / ref.norm()).item()
    ok &= _report("seed: graph conv -> bias -> relu", g, err, 1e-2)
    if gpu:
        t_ours = _time_ms(lambda: g.execute(pack, ws))
        bias = b.reshape(-1)
        t_torch = _time_ms(lambda: torch.relu_(torch.nn.functional.conv2d(x, w, bias, padding=1)))
        print(
            f"   time  : opendnn {t_ours:.4f} ms, PyTorch conv2d+relu {t_torch:.4f} ms "
            f"(ratio {t_torch / t_ours:.2f}x)"
        )
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
