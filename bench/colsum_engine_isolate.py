"""Isolates the engine's slow [8 x 2048] bf16 column sum (bench/colsum_engine_check.py:
0.63 of copy where bench/colsum_probe8.py's kernel of the same tile reads 0.84): the
engine's generated partial kernel launched by hand, the probe's kernel, each alone and
with the engine's finish, on one input.
Run (GPU): PYTHONPATH=src:bench python bench/colsum_engine_isolate.py"""
import gc
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from colsum_engine_sweep import colsum  # noqa: E402
from colsum_probe8 import finish2, part  # noqa: E402
from probe_common import copy_gbs  # noqa: E402


def main():
    from opendnn.engines.fusion.engine import _FusedExecutable
    copy = copy_gbs()
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    nb = x.numel() * 2
    out = torch.empty(1, 8192, device="cuda")
    res = {}
    for bk, br, w in ((2048, 8, 8), (1024, 8, 4), (2048, 4, 4)):
        knobs = dict(BLOCK_KEPT=bk, BLOCK_RED=br, SPLIT=66, num_warps=w)
        fn, _ = colsum(x, out, knobs)
        fn()
        exe = [o for o in gc.get_objects() if isinstance(o, _FusedExecutable)][-1]
        (pl, _), (fl, _) = exe.launches
        ws = torch.empty(66 * 8192, device="cuda")
        ek = pl.kernel.compiled
        fk = fl.kernel.compiled
        grid = (8192 // bk, 66)
        p = torch.empty(66, 8192, device="cuda")
        runs = {
            "engine execute": fn,
            "engine kernel alone": lambda: ek[grid](x, out, ws, **pl.constexprs),
            "engine kernel + engine finish": lambda: (ek[grid](x, out, ws, **pl.constexprs),
                                                      fk[fl.grid[:1]](ws, out, **fl.constexprs)),
            "probe kernel alone": lambda: part[grid](x, p, 8192 // br, 66, 8192, br, bk, False,
                                                     num_warps=w),
            "probe kernel + probe finish pdl": lambda: (
                part[grid](x, p, 8192 // br, 66, 8192, br, bk, False, num_warps=w),
                finish2[(128,)](p, out, 66, 8192, 128, 64, True, launch_pdl=True)),
        }
        for name, f in runs.items():
            f()
            torch.cuda.synchronize()
            ms = do_bench(f, warmup=25, rep=100, return_mode="median")
            res[(str(knobs), name)] = nb / ms / 1e6 / copy
            print(f"{bk}x{br} w{w} {name:34s} {nb / ms / 1e6 / copy:.3f} of copy", flush=True)
        print("constexprs", pl.constexprs, fl.constexprs, flush=True)
        out_dir = os.environ.get("OUT", ".")
        ck = pl._compiled
        pk = part.warmup(x, p, 8192 // br, 66, 8192, br, bk, False, num_warps=w, grid=grid)
        for tag, k in (("engine", ck), ("probe", pk)):
            print(tag, "regs", k.n_regs, "spills", k.n_spills, "smem", k.metadata.shared,
                  flush=True)
            with open(os.path.join(out_dir, f"{tag}_{bk}x{br}w{w}.ptx"), "w") as f:
                f.write(k.asm["ptx"])
        with open(os.path.join(out_dir, f"engine_{bk}x{br}w{w}.py"), "w") as f:
            f.write(exe.source)
        break


if __name__ == "__main__":
    main()
