"""Probe 10 of bf16 column sums: is the column partial's slower stream (f 0.96 of copy
against the row sums' 1.02, notes/fusion.md probe 9) static load imbalance?

The engine's column partial runs 2 programs per SM, each with a fixed share of the rows:
the kernel ends when the slowest SM ends, and every SM that finishes early idles. Row sums
run 8192 short programs that the hardware deals out as SMs free up, so no SM idles until
the last wave. Two things measured here, both at 8192 x 8192 bf16 (and 16384 rows for the
fit t = bytes / (f x copy) + c):

- ``short``: many short programs, each summing R contiguous rows of BC columns into its
  own partial row (program_id(0) is the column block, so programs launched together cover
  whole rows); the finish sums the M / R partials in fixed order: deterministic, no state
  kept between runs. Partials are 4 / (2 R) of the input's bytes (R = 64: 3%).
- ``static``: probe 9's interleaved [8 x 2048] kernel, 66 slices (the engine's plan).
- Timestamps (%globaltimer at each program's start and end, with %smid): for each kernel,
  the idle fraction = mean over SMs of (kernel end - that SM's last end) / kernel time.

Run (GPU): PYTHONPATH=src:bench python bench/colsum_probe9.py
CPU check of the index math: TRITON_INTERPRET=1 python bench/colsum_probe9.py cpu"""
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def _smid():
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32,
                                     is_pure=True, pack=1)


@triton.jit
def short(X, P, T, N: tl.constexpr, R: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
          EL: tl.constexpr, TS: tl.constexpr):
    """Program (cb, ch): rows [ch R, ch R + R) x columns [cb BC, cb BC + BC) -> P[ch]."""
    if TS:
        t0 = _now()
    cb = tl.program_id(0)
    ch = tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    rows = ch * R + tl.arange(0, BR)
    ptrs = X + rows[:, None].to(tl.int64) * N + cols[None, :]
    acc = tl.zeros([BR, BC], tl.float32)
    for _ in tl.static_range(R // BR):
        acc += tl.load(ptrs, eviction_policy="evict_first").to(tl.float32)
        ptrs += BR * N
    if EL:
        tl.store(P + ch * N + cols, tl.sum(acc, 0), eviction_policy="evict_last")
    else:
        tl.store(P + ch * N + cols, tl.sum(acc, 0))
    if TS:
        pid = ch * tl.num_programs(0) + cb
        tl.store(T + pid * 3, t0)
        tl.store(T + pid * 3 + 1, _now())
        tl.store(T + pid * 3 + 2, _smid().to(tl.int64))


@triton.jit
def static(X, P, T, NB, G, N: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
           TS: tl.constexpr):
    """Probe 9's kernel: column block program_id(0), row blocks g, g + G, ... of NB."""
    if TS:
        t0 = _now()
    cb = tl.program_id(0)
    g = tl.program_id(1)
    cols = cb * BC + tl.arange(0, BC)
    ptrs = X + (g * BR + tl.arange(0, BR))[:, None].to(tl.int64) * N + cols[None, :]
    acc = tl.zeros([BR, BC], tl.float32)
    for _ in range(g, NB, G):
        acc += tl.load(ptrs, eviction_policy="evict_first").to(tl.float32)
        ptrs += BR * G * N
    tl.store(P + g * N + cols, tl.sum(acc, 0))
    if TS:
        pid = g * tl.num_programs(0) + cb
        tl.store(T + pid * 3, t0)
        tl.store(T + pid * 3 + 1, _now())
        tl.store(T + pid * 3 + 2, _smid().to(tl.int64))


@triton.jit
def rows(X, Y, T, N: tl.constexpr, BLOCK: tl.constexpr, TS: tl.constexpr):
    """The engine's row-sum config: 2048-wide chunks of one row per program."""
    if TS:
        t0 = _now()
    r = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], tl.float32)
    for c in range(0, N, BLOCK):
        acc += tl.load(X + r * N + c + tl.arange(0, BLOCK),
                       eviction_policy="evict_first").to(tl.float32)
    tl.store(Y + r, tl.sum(acc, 0))
    if TS:
        tl.store(T + r * 3, t0)
        tl.store(T + r * 3 + 1, _now())
        tl.store(T + r * 3 + 2, _smid().to(tl.int64))


@triton.jit
def finish(P, Y, G, N: tl.constexpr, GP: tl.constexpr, BC: tl.constexpr, PDL: tl.constexpr):
    """All G partials of BC columns in one [GP, BC] load: one L2 round trip."""
    if PDL:
        tl.extra.cuda.gdc_wait()
    cols = tl.program_id(0) * BC + tl.arange(0, BC)
    g = tl.arange(0, GP)
    v = tl.load(P + g[:, None] * N + cols[None, :], mask=g[:, None] < G, other=0.0)
    tl.store(Y + cols, tl.sum(v, 0))


SHORT = [(64, 16, 128, 4), (64, 32, 128, 4), (64, 64, 128, 8), (64, 16, 256, 4),
         (64, 32, 256, 8), (64, 8, 512, 4), (64, 16, 1024, 8), (128, 16, 128, 4),
         (128, 32, 256, 8), (128, 8, 1024, 8), (32, 32, 128, 4), (32, 16, 256, 4),
         (128, 8, 2048, 8)]


class Case:
    """One way to sum the columns of x [M, N] into y [N]: ``launch(x, y, ts)``."""

    def __init__(self, name, M, N, dev, kind, cfg, pdl=True, el=False, fb=64):
        self.name, self.kind, self.cfg, self.pdl, self.el = name, kind, cfg, pdl, el
        if kind == "short":
            r, br, bc, w = cfg
            self.g = M // r
            self.grid = (N // bc, self.g)
        elif kind == "static":
            br, bc, g, w = cfg
            self.g, self.nb = g, M // br
            self.grid = (N // bc, g)
        elif kind == "engine":
            self.g, self.grid, self.fn = 1, (1,), None
        else:
            self.g, self.grid = 1, (M,)
        self.p = torch.empty(self.g, N, device=dev)
        self.gp = triton.next_power_of_2(self.g)
        self.fb = max(1, min(fb, 8192 // self.gp))
        self.t = torch.zeros(self.grid[0] * (self.grid[1] if len(self.grid) > 1 else 1) * 3,
                             dtype=torch.int64, device=dev)
        self.pdl = pdl and dev == "cuda"

    def launch(self, x, y, ts=False, finish_too=True):
        N = x.shape[1]
        if self.kind == "engine":
            if self.fn is None or self.fn[1] is not x or self.fn[2] is not y:
                self.fn = (engine_plan(x, y, self.cfg), x, y)
            self.fn[0]()
            return
        if self.kind == "short":
            r, br, bc, w = self.cfg
            short[self.grid](x, self.p, self.t, N, r, br, bc, self.el, ts, num_warps=w)
        elif self.kind == "static":
            br, bc, g, w = self.cfg
            static[self.grid](x, self.p, self.t, self.nb, g, N, br, bc, ts, num_warps=w)
        else:
            rows[self.grid](x, y, self.t, N, 2048, ts, num_warps=16)
            return
        if finish_too:
            kw = dict(launch_pdl=True) if self.pdl else {}
            finish[(N // self.fb,)](self.p, y, self.g, N, self.gp, self.fb, self.pdl, **kw)


def engine_plan(x, y, knobs):
    """The runtime-fusion engine's column sum of x into y with ``knobs``: a callable."""
    import opendnn.frontend as cudnn

    from probe_common import planned
    g = cudnn.pygraph(compute_data_type=cudnn.data_type.FLOAT)
    tx = g.tensor_like(x)
    ty = g.reduction(tx, mode=cudnn.reduction_mode.ADD).set_dim([1, x.shape[1]])
    ty.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    return planned(g, 1, knobs, {tx: x, ty: y.view(1, -1)})


# the engine's own kernels in the short-program regime: SPLIT = rows / (BLOCK_RED x steps)
ENGINE = [dict(BLOCK_KEPT=128, BLOCK_RED=16, SPLIT=128, num_warps=4),
          dict(BLOCK_KEPT=128, BLOCK_RED=64, SPLIT=128, num_warps=8),
          dict(BLOCK_KEPT=256, BLOCK_RED=16, SPLIT=128, num_warps=4),
          dict(BLOCK_KEPT=256, BLOCK_RED=32, SPLIT=64, num_warps=8)]


def cases(M, N, dev, nsm):
    out = [Case("static [8x2048] g%d w8 (engine)" % (2 * nsm // 4), M, N, dev, "static",
                (8, 2048, 2 * nsm // 4, 8))]
    for cfg in SHORT:
        out.append(Case("short R%d [%dx%d] w%d" % cfg, M, N, dev, "short", cfg))
    for cfg in SHORT[:3]:
        out.append(Case("short R%d [%dx%d] w%d evict_last" % cfg, M, N, dev, "short", cfg,
                        el=True))
        out.append(Case("short R%d [%dx%d] w%d finish 32 cols" % cfg, M, N, dev, "short",
                        cfg, fb=32))
    if dev == "cuda":
        out.append(Case("engine heuristic", M, N, dev, "engine", None))
        for k in ENGINE:      # SPLIT scales with the rows: the same steps per program
            k = {**k, "SPLIT": k["SPLIT"] * M // 8192}
            out.append(Case("engine %(BLOCK_KEPT)dx%(BLOCK_RED)d split %(SPLIT)d "
                            "w%(num_warps)d" % k, M, N, dev, "engine", k))
    return out


def idle_fraction(t):
    """t: int64 [programs * 3] of (start ns, end ns, smid): (kernel us, idle fraction)."""
    t = t.view(-1, 3).cpu()
    start, end, sm = t[:, 0], t[:, 1], t[:, 2]
    t0, t1 = start.min().item(), end.max().item()
    last = {}
    for s, e in zip(sm.tolist(), end.tolist()):
        last[s] = max(last.get(s, 0), e)
    idle = sum(t1 - e for e in last.values()) / len(last) / max(t1 - t0, 1)
    return (t1 - t0) / 1e3, idle


def cpu_check():
    M, N = 256, 256
    x = torch.randn(M, N).to(torch.bfloat16)
    ref = x.double().sum(0)
    small = [(64, 16, 128, 4), (32, 32, 128, 4), (64, 8, 256, 8)]
    for c in [Case("static", M, N, "cpu", "static", (8, 128, 3, 4))] + \
             [Case(str(cfg), M, N, "cpu", "short", cfg) for cfg in small] + \
             [Case("engine", M, N, "cpu", "engine", dict(BLOCK_KEPT=128, BLOCK_RED=16,
                                                         SPLIT=4, num_warps=4))]:
        y = torch.full((N,), float("nan"))
        c.launch(x, y)
        err = (y.double() - ref).abs().max().item()
        print(c.name, "max error", err)
        assert err < 1e-3, err


def main():
    from triton.testing import do_bench

    from probe_common import copy_gbs
    copy = copy_gbs()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    N = 8192
    print(f"copy {copy:.0f} GB/s (1 GiB float32, as the bench); {nsm} SMs", flush=True)
    xs = {M: torch.randn(M, N, device="cuda", dtype=torch.bfloat16) for M in (8192, 16384)}
    refs = {M: x.double().sum(0) for M, x in xs.items()}
    y = torch.empty(N, device="cuda")
    res = []
    byc = {M: [Case("rows (engine config, row sums)", M, N, "cuda", "rows", None)]
           + cases(M, N, "cuda", nsm) for M in xs}
    for i, c8 in enumerate(byc[8192]):
        t = {}
        ok = True
        for M in xs:
            c = byc[M][i]
            yy = torch.full((M,), float("nan"), device="cuda") if c.kind == "rows" else y
            yy.fill_(float("nan"))
            c.launch(xs[M], yy)
            torch.cuda.synchronize()
            ref = xs[M].double().sum(1) if c.kind == "rows" else refs[M]
            err = (yy.double() - ref).abs().max().item()
            if not err < 0.05:
                print(c.name, M, "WRONG", err, flush=True)
                ok = False
                break
            t[M] = do_bench(lambda: c.launch(xs[M], yy), warmup=10, rep=60,
                            return_mode="median") * 1e-3
        if not ok:
            continue
        if c8.kind == "engine":       # its own launches: no partial alone, no timestamps
            alone, kus, idle = t[8192], float("nan"), float("nan")
        else:
            alone = do_bench(lambda: c8.launch(xs[8192], y, finish_too=False), warmup=10,
                             rep=60, return_mode="median") * 1e-3
            c8.launch(xs[8192], y, ts=True, finish_too=False)
            torch.cuda.synchronize()
            kus, idle = idle_fraction(c8.t)
        b = {M: xs[M].numel() * 2 for M in t}
        a = (t[16384] - t[8192]) / (b[16384] - b[8192])
        c0 = t[8192] - a * b[8192]
        gbs = b[8192] / t[8192] / 1e9
        row = (c8.name, gbs / copy, b[8192] / alone / 1e9 / copy, 1 / a / 1e9 / copy,
               c0 * 1e6, idle, kus)
        res.append(row)
        print("%-40s %.3f of copy (partial alone %.3f)  f %.3f  c %4.1f us  idle %.3f of "
              "%.1f us" % row, flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "colsum_probe9.txt"), "w") as f:
        f.write(f"copy {copy:.0f} GB/s\n")
        for r in res:
            f.write(f"{r}\n")
    print("\nname | of copy | partial alone | f | c us | idle fraction | kernel us (timed)")
    for r in sorted(res, key=lambda r: -r[1]):
        print("%-40s %.3f %.3f %.3f %4.1f %.3f %.1f" % r)


if __name__ == "__main__":
    cpu_check() if sys.argv[1:] == ["cpu"] else main()
