"""Where the bf16 column sum's time goes, by hardware counters and by flush mode (issue 2:
8192^2 bf16 column sums read at 0.81 of copy, row sums at 0.89; probe 9 fitted both with
~7 us of fixed cost and the column partial streaming at 0.96 of copy against the rows' 1.02).

Two questions:
1. Fixed cost: do_bench flushes L2 by writing a 256 MB buffer (`zero_`), so each timed run
   starts with ~50 MB of dirty lines to write back. Timed here three ways: do_bench; events
   after a flush that only reads (clean L2); events back to back (no flush).
2. Streaming: under ncu (run with `ncu` as the wrapper, see below), each kernel's DRAM bytes,
   L2 traffic, occupancy and warp stall reasons, for the copy, the engine's row sum, the
   engine's column partial and finish, and torch's column sum.

Run (GPU):
  PYTHONPATH=src:bench python bench/colsum_ncu.py time
  ncu --clock-control none --nvtx --nvtx-include "k/" --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section LaunchStats --metrics dram__bytes_read.sum,dram__bytes_write.sum \
      python bench/colsum_ncu.py ncu
"""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_common import planned  # noqa: E402


def sum_plan(x, dim):
    import opendnn.frontend as cudnn
    shape = [1, x.shape[1]] if dim == 0 else [x.shape[0], 1]
    out = torch.empty(shape, device="cuda")
    g = cudnn.pygraph(compute_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor_like(x)
    y = g.reduction(tx, mode=cudnn.reduction_mode.ADD).set_dim(shape)
    y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    fn = planned(g, 1, None, {tx: x, y: out})
    return fn, out, g.get_plan_name_at_index(0)


def events(fn, flush, n=100):
    """Median ms of ``fn`` between events, ``flush()`` before each run (None: none)."""
    ts = []
    for _ in range(n + 10):
        if flush is not None:
            flush()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        ts.append((a, b))
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in ts[10:])
    return ms[len(ms) // 2]


def main():
    mode = sys.argv[1]
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    nb = x.numel() * 2
    dst = torch.empty_like(x)
    col, yc, cname = sum_plan(x, 0)
    row, yr, rname = sum_plan(x, 1)
    tcol = lambda: x.sum(0, keepdim=True, dtype=torch.float32)  # noqa: E731
    cases = {"copy bf16 (read+write)": (lambda: dst.copy_(x), 2 * nb),
             f"engine rows {rname}": (row, nb), f"engine cols {cname}": (col, nb),
             "torch cols": (tcol, nb)}
    for fn, _ in cases.values():
        fn()
    torch.cuda.synchronize()
    assert (yc[0].double() - x.double().sum(0)).abs().max().item() < 0.1
    assert (yr[:, 0].double() - x.double().sum(1)).abs().max().item() < 0.1
    if mode == "ncu":
        for name, (fn, _) in cases.items():
            torch.cuda.nvtx.range_push("k")
            fn()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
        return
    big = torch.empty(int(256e6) // 4, device="cuda")
    wr = lambda: big.zero_()  # noqa: E731
    rd = lambda: big.max()  # noqa: E731
    print(f"{'case':44s} {'do_bench':>9s} {'write-flush':>11s} {'read-flush':>10s} "
          f"{'no flush':>9s}  (GB/s)")
    for name, (fn, byt) in cases.items():
        t = [do_bench(fn, warmup=25, rep=100, return_mode="median"),
             events(fn, wr), events(fn, rd), events(fn, None)]
        print(f"{name:44s} " + " ".join(f"{byt / ms / 1e6:9.0f}" for ms in t), flush=True)


if __name__ == "__main__":
    main()
