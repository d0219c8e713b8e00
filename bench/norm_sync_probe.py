"""What the one-read norm backward (PATH=4) loses to its programs meeting at every row.
Session 12's chunk sweep found a row step takes about the same time whatever its chunk, as
if the meeting (publish, then poll until the row's SPLIT partials carry its tag), not the
bytes, set it. Here the engine's backward is timed as built, then with the wait removed
(each poll reads the words once and goes on: wrong results, same memory traffic), then
with no partials exchanged at all (each program uses its own chunk's sums: a pure
stream). If the last two are much faster, pipelining the meeting (publish row r + G
before waiting for row r) is worth building; if not, the stream itself is the limit.
Results of the altered kernels are not checked (they are wrong by construction).
Run (GPU): PYTHONPATH=src python bench/norm_sync_probe.py [same: the 262144 and 65536 grids
that give each program the same addresses, on one buffer] [scale: those with SCALE's
re-read replaced, or the row statistics' loads [variant's first word: that one only]]"""
import os
import re
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import norm_coop_sweep as S  # noqa: E402
from opendnn import plan as plan_module  # noqa: E402
from opendnn.engines.norm import _coop_kernels as KC  # noqa: E402

_POLL, _PARTIALS = KC._poll, KC._partials


def _nowait(sp, words, reduce, outs, indent):
    lines = _POLL(sp, words, reduce, outs, indent)
    return lines[:lines.index(f"{indent}while _n > 0:")]


def _local(sp, words, reduce, outs, indent):
    return [f"{indent}c1 = tl.sum(g * xh, 0)", f"{indent}c2 = tl.sum(g, 0)"]


VARIANTS = {"as built": (_POLL, _PARTIALS), "no wait": (_nowait, _PARTIALS),
            "no exchange": (_local, lambda *a: [])}


def _grid(split, groups, chunk=0, pre=1):
    return dict(PATH=4, BLOCK_L=8192, BLOCK_ROWS=1, SPLIT=split, PROGRAMS=split * groups,
                num_warps=8, PREFETCH=pre, CHUNK=chunk)


# session 13: why 32 chunks a row (128 programs) read 25% slower than 33 (132) at 262144
# whatever their addresses (norm.md): is it the meeting, or the stream itself?
GRIDS = {65536: [None], 262144: [None, _grid(32, 4), _grid(32, 3), _grid(33, 3, 7944)]}


def main():
    print(f"{'case':28s} " + " ".join(f"{v:>12s}" for v in VARIANTS) + "  (GB/s)")
    if "same" in sys.argv:
        # one 256 MB x / dy seen as 512 x 262144 and as 2048 x 65536: the grids S=32, G=4
        # and S=8, G=16 give each program the same addresses (pid x 16 KB + step x 2 MB)
        x = torch.randn(512, 262144, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        for _ in range(2):
            for R, L, knobs in ((512, 262144, _grid(32, 4)), (2048, 65536, _grid(8, 16)),
                                (512, 262144, _grid(33, 4, 7944))):
                _case(R, L, knobs, x.view(R, L), dy.view(R, L))
        return
    if "scale" in sys.argv:
        _scale_probe()
        return
    for R, L in ((2048, 65536), (512, 262144)):
        for knobs in GRIDS[L]:
            _case(R, L, knobs)


_W = "w = tl.load(SCALE + coff_SCALE, mask=cmask, other=0.0).to(tl.float32)"
_STAT = re.compile(r"tl\.load\((MEAN|INV_VARIANCE) \+ \w+, mask=[^,]+, other=0\.0\)")
W_VARIANTS = {
    "L1/L2 load": lambda src: src,
    "no load (w = 1)": lambda src: src.replace(_W, "w = 1.0"),
    "evict_last": lambda src: src.replace(_W, _W.replace(
        "other=0.0)", "other=0.0, eviction_policy=\"evict_last\")")),
    ".cg (L2 only)": lambda src: src.replace(_W, _W.replace(
        "other=0.0)", "other=0.0, cache_modifier=\".cg\")")),
    "no mean / rstd load": lambda src: _STAT.sub("tl.full([], 0.5, tl.float32)", src)}


def _scale_probe():
    """The one difference between the same-address grids besides constants: each program
    reads its 16 KB of SCALE again every row (shared by 16 programs at 65536, by 4 at
    262144). Time both with that read replaced."""
    x = torch.randn(512, 262144, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    orig = KC.bwd_source
    only = [v for v in W_VARIANTS if v.split()[0] in sys.argv] or list(W_VARIANTS)
    for label in only:
        KC.bwd_source = lambda *a, _f=W_VARIANTS[label]: _f(orig(*a))
        plan_module._built.clear()
        try:
            for R, L, knobs in ((512, 262144, _grid(32, 4)), (2048, 65536, _grid(8, 16)),
                                (512, 262144, _grid(33, 4, 7944))):
                print(label, end=": ")
                _case(R, L, knobs, x.view(R, L), dy.view(R, L), kinds=("layernorm",))
        finally:
            KC.bwd_source = orig


def _case(R, L, knobs, x=None, dy=None, kinds=("layernorm", "rmsnorm")):
    if x is None:
        x = torch.randn(R, L, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
    w = torch.randn(1, L, device="cuda", dtype=torch.bfloat16)
    xf = x.float()
    for kind in kinds:
        mean, rstd = S.row_stats(kind, xf)
        row = []
        for name, (poll, partials) in VARIANTS.items():
            KC._poll, KC._partials = poll, partials
            plan_module._built.clear()   # else the process's built-plan cache (same graph
            try:                          # key and knobs) hands back the first variant's
                fn, plan, _ = S._run(kind, True, x, w, None, dy, mean, rstd, knobs)
                ms = do_bench(fn, warmup=5, rep=30, return_mode="median")
            finally:
                KC._poll, KC._partials = _POLL, _PARTIALS
            row.append(3 * x.numel() * 2 / ms / 1e6)
        print(f"{kind} {R}x{L} bwd".ljust(28) + " ".join(f"{r:12.0f}" for r in row) +
              f"  {plan.split()[0] if knobs is None else knobs}", flush=True)


if __name__ == "__main__":
    main()
