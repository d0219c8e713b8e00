"""Column sums through the runtime-fusion engine (interleaved slices, the finish as a
programmatic dependent launch): knob sweep at 8192^2 bf16 / fp32 and the heuristic's pick
on other shapes, each against torch in the same run.

Grid: BLOCK_KEPT x BLOCK_RED tiles, SPLIT = m x num_sms / column blocks (every SM the
same number of programs), warps. Rows of the table: GB/s and fraction of the copy floor
(1 GiB float32, as the bench measures it).
Run (GPU): PYTHONPATH=src:bench python bench/colsum_engine_sweep.py [quick]"""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_common import copy_gbs, planned  # noqa: E402


def colsum(x, out, knobs):
    import opendnn.frontend as cudnn
    g = cudnn.pygraph(compute_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor_like(x)
    y = g.reduction(tx, mode=cudnn.reduction_mode.ADD).set_dim(list(out.shape))
    y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    fn = planned(g, 1, knobs, {tx: x, y: out})
    return fn, (g.get_plan_name_at_index(0) if knobs is None else str(knobs))


def measure(x, knobs, ref, copy):
    out = torch.full((1, x.shape[1]), float("nan"), device="cuda")
    fn, name = colsum(x, out, knobs)
    fn()
    torch.cuda.synchronize()
    err = (out[0].double() - ref).abs().max().item()
    if not err < 1e-3 * max(1.0, x.shape[0] ** 0.5):
        return name, None, f"WRONG {err}"
    ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
    gbs = x.numel() * x.element_size() / ms / 1e6
    return name, gbs, f"{gbs:6.0f} GB/s {gbs / copy:.3f}"


def main():
    quick = "quick" in sys.argv
    copy = copy_gbs()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {copy:.0f} GB/s; {nsm} SMs", flush=True)
    lines = []
    for dt in (torch.bfloat16, torch.float32):
        x = torch.randn(8192, 8192, device="cuda", dtype=dt)
        ref = x.double().sum(0)
        tms = do_bench(lambda: x.sum(0, keepdim=True, dtype=torch.float32), warmup=25,
                       rep=100, return_mode="median")
        lines.append(f"{dt} torch {x.numel() * x.element_size() / tms / 1e6:6.0f} GB/s")
        print(lines[-1], flush=True)
        name, gbs, txt = measure(x, None, ref, copy)
        lines.append(f"{dt} heuristic {name}: {txt}")
        print(lines[-1], flush=True)
        if quick:
            continue
        res = []
        for bk in (512, 1024, 2048, 4096):
            for br in (1, 2, 4, 8, 16):
                if not 4096 <= bk * br <= 16384:
                    continue
                for m in (1, 2, 4):
                    split = max(1, nsm * m * bk // 8192)
                    for w in (4, 8, 16):
                        if (w == 16 and bk * br < 8192) or (w == 4 and bk * br > 8192):
                            continue
                        k = dict(BLOCK_KEPT=bk, BLOCK_RED=br, SPLIT=split, num_warps=w)
                        name, gbs, txt = measure(x, k, ref, copy)
                        if gbs is None:
                            print(name, txt, flush=True)
                            continue
                        res.append((gbs, name))
        for gbs, name in sorted(res, reverse=True)[:12]:
            lines.append(f"{dt} {name}: {gbs:6.0f} GB/s {gbs / copy:.3f}")
            print(lines[-1], flush=True)
    for shape in ((4096, 4096), (16384, 1024), (1024, 16384), (65536, 256), (2048, 65536),
                  (100000, 64), (1000, 1000)):
        for dt in (torch.bfloat16, torch.float32):
            x = torch.randn(shape, device="cuda", dtype=dt)
            ref = x.double().sum(0)
            tms = do_bench(lambda: x.sum(0, keepdim=True, dtype=torch.float32), warmup=25,
                           rep=100, return_mode="median")
            name, gbs, txt = measure(x, None, ref, copy)
            tg = x.numel() * x.element_size() / tms / 1e6
            lines.append(f"{shape} {dt} {name}: {txt}  torch {tg:6.0f} GB/s")
            print(lines[-1], flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "colsum_engine_sweep.txt"), "w") as f:
        f.write(f"copy {copy:.0f} GB/s\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
