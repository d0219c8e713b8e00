"""What the one-read norm backward (PATH=4) loses to its programs meeting at every row.
Session 12's chunk sweep found a row step takes about the same time whatever its chunk, as
if the meeting (publish, then poll until the row's SPLIT partials carry its tag), not the
bytes, set it. Here the engine's backward is timed as built, then with the wait removed
(each poll reads the words once and goes on: wrong results, same memory traffic), then
with no partials exchanged at all (each program uses its own chunk's sums: a pure
stream). If the last two are much faster, pipelining the meeting (publish row r + G
before waiting for row r) is worth building; if not, the stream itself is the limit.
Results of the altered kernels are not checked (they are wrong by construction).
Run (GPU): PYTHONPATH=src python bench/norm_sync_probe.py"""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import norm_coop_sweep as S  # noqa: E402
from opendnn.engines.norm import _coop_kernels as KC  # noqa: E402

_POLL, _PARTIALS = KC._poll, KC._partials


def _nowait(sp, words, reduce, outs, indent):
    lines = _POLL(sp, words, reduce, outs, indent)
    return lines[:lines.index(f"{indent}while _n > 0:")]


def _local(sp, words, reduce, outs, indent):
    return [f"{indent}c1 = tl.sum(g * xh, 0)", f"{indent}c2 = tl.sum(g, 0)"]


VARIANTS = {"as built": (_POLL, _PARTIALS), "no wait": (_nowait, _PARTIALS),
            "no exchange": (_local, lambda *a: [])}


def main():
    print(f"{'case':28s} " + " ".join(f"{v:>12s}" for v in VARIANTS) + "  (GB/s)")
    for R, L in ((2048, 65536), (512, 262144)):
        x = torch.randn(R, L, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        w = torch.randn(1, L, device="cuda", dtype=torch.bfloat16)
        xf = x.float()
        for kind in ("layernorm", "rmsnorm"):
            mean, rstd = S.row_stats(kind, xf)
            row = []
            for name, (poll, partials) in VARIANTS.items():
                KC._poll, KC._partials = poll, partials
                try:
                    fn, plan, _ = S._run(kind, True, x, w, None, dy, mean, rstd, None)
                    ms = do_bench(fn, warmup=5, rep=30, return_mode="median")
                finally:
                    KC._poll, KC._partials = _POLL, _PARTIALS
                row.append(3 * x.numel() * 2 / ms / 1e6)
            print(f"{kind} {R}x{L} bwd".ljust(28) + " ".join(f"{r:12.0f}" for r in row) +
                  f"  {plan.split()[0]}", flush=True)


if __name__ == "__main__":
    main()
