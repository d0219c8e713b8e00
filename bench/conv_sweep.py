"""Sweep every convolution engine and knob config on the ResNet-50 layers of the conv
bench family (src/opendnn/engines/conv/shapes.py BENCH: N=32, NHWC bf16) against cuDNN in the same run:
the best plan per layer and direction, its ratio, the runner-up, and the cost model's
estimate of each config next to its time.

What it decides: the conv engines' config lists and the cost models that order them --
``KNOB_SPACE`` of the TMA paths (src/opendnn/engines/conv/tma/_kernels.py forward,
_dgrad_kernels.py dgrad, _wgrad_kernels.py wgrad), ``SPLIT_KNOBS`` / ``PACKED_KNOBS`` in
tma/engine.py, and each engine's ``configs`` / ``estimate_seconds`` (a config that wins a
layer but ranks low in the estimate shows here).

Run (GPU; a full sweep of the three directions takes about half an hour, one direction
with --limit 4 a few minutes):

    PYTHONPATH=src python bench/conv_sweep.py [fprop|dgrad|wgrad ...] [--limit N]
        [--engines 5,10] [--path tma|gather|flat] [--layers l1_3x3_64,...]

Times are CUDA-graph replays (kernel time; eager calls at these sizes measure the host).
Writes every row, after each layer, to $OUT/conv_sweep_<kinds>_<engines>_<path>.json (or
/tmp/...).
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

import opendnn.frontend as cudnn
from opendnn.bench.conv import bench_graph
from opendnn.engines.conv import shapes
from opendnn.engines.registry import engines
from opendnn.handle import target_for

ENGINES = {"fprop": [3, 11, 6, 7, 8, 9], "dgrad": [4], "wgrad": [5, 10]}


def graph_for(kind, x, w, dy, s, p):
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    if kind == "fprop":
        a, b = g.tensor_like(x), g.tensor_like(w)
        out = g.conv_fprop(a, b, padding=[p, p], stride=[s, s])
        out.set_output(True)
        return g, {a: x, b: w}, out, dy
    if kind == "dgrad":
        a, b = g.tensor_like(dy), g.tensor_like(w)
        out = g.conv_dgrad(a, b, padding=[p, p], stride=[s, s])
        out.set_dim(list(x.shape)).set_stride(list(x.stride())).set_output(True)
        return g, {a: dy, b: w}, out, x
    a, b = g.tensor_like(x), g.tensor_like(dy)
    out = g.conv_wgrad(a, b, padding=[p, p], stride=[s, s])
    out.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
    return g, {a: x, b: dy}, out, w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kinds", nargs="*", default=["fprop", "dgrad", "wgrad"])
    ap.add_argument("--limit", type=int, default=8, help="configs per engine")
    ap.add_argument("--engines", default="", help="comma list of engine ids")
    ap.add_argument("--path", default="all", choices=["all", "tma", "gather", "flat"])
    ap.add_argument("--layers", default="", help="comma list of layer names")
    args = ap.parse_args()
    target = target_for(str(torch.device("cuda", torch.cuda.current_device())))
    by_id = {e.id: e for e in engines()}
    n, cl = shapes.BENCH_N, torch.channels_last
    results = []
    only = set(args.layers.split(",")) - {""}
    pick = [int(e) for e in args.engines.split(",") if e]
    for name, c, k, h, f, s, p in shapes.BENCH:
        if only and name not in only:
            continue
        x = torch.randn(n, c, h, h, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        w = (torch.randn(k, c, f, f, device="cuda", dtype=torch.bfloat16) * 0.05).to(
            memory_format=cl
        )
        o = (h + 2 * p - f) // s + 1
        dy = torch.randn(n, k, o, o, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        flops = 2.0 * n * k * o * o * c * f * f
        bwd = torch.ops.aten.convolution_backward
        ref = {
            "fprop": lambda: F.conv2d(x, w, stride=s, padding=p),
            "dgrad": lambda: bwd(
                dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, [True, False, False]
            ),
            "wgrad": lambda: bwd(
                dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, [False, True, False]
            ),
        }
        for kind in args.kinds:
            ref_ms = bench_graph(ref[kind])
            rows = []
            for eid in pick or ENGINES[kind]:
                g, pack, out_t, like = graph_for(kind, x, w, dy, s, p)
                g.validate()
                e = by_id[eid]
                sup = e.check_support(g.op_graph, target)
                if not sup.ok:
                    continue
                cfgs = [
                    c
                    for c in e.configs(g.op_graph, target)
                    if args.path == "all"
                    or (args.path == "flat" and c.knob_dict.get("FLAT"))
                    or (
                        args.path in ("tma", "gather")
                        and (args.path == "tma") == ("TMA_TH" in c.knob_dict)
                    )
                ]
                for cfg in cfgs[: args.limit]:
                    try:
                        g2, pack2, out2, like2 = graph_for(kind, x, w, dy, s, p)
                        t0 = time.perf_counter()
                        g2.create_execution_plan(eid, cfg.knob_dict)
                        build_s = time.perf_counter() - t0
                        ws = torch.empty(g2.get_workspace_size(), device="cuda", dtype=torch.uint8)
                        buf = torch.empty_like(like2)
                        fn = lambda: g2.execute({**pack2, out2: buf}, ws)  # noqa: E731
                        fn()
                        ms = bench_graph(fn, rep=50)
                        est = e.estimate_seconds(g2.op_graph, cfg, target) * 1e3
                        rows.append((ms, cfg.label(), build_s, est))
                    except Exception as ex:  # a config that fails must not end the sweep
                        rows.append((float("inf"), f"{cfg.label()} FAILED {ex!r}"[:200], 0, 0))
            rows.sort()
            best = rows[0] if rows else (float("inf"), "none", 0, 0)
            res = {
                "layer": name,
                "kind": kind,
                "cudnn_ms": ref_ms,
                "best_ms": best[0],
                "best": best[1],
                "ratio": ref_ms / best[0],
                "tflops": flops / best[0] / 1e9,
                "top": rows[:4],
                "all": rows,
            }
            results.append(res)
            print(
                f"{kind:6s} {name:18s} cuDNN {ref_ms:.4f} ms  best {best[0]:.4f} ms "
                f"ratio {ref_ms / best[0]:.2f}  {best[1][:80]} (est {best[3]:.4f})",
                flush=True,
            )
            out = os.environ.get("OUT", "/tmp")  # written after every row: a cut run keeps
            tag = "_".join(args.kinds + [args.engines.replace(",", "-") or "all", args.path])
            with open(os.path.join(out, f"conv_sweep_{tag}.json"), "w") as fh:
                json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
