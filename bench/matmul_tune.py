#!/usr/bin/env python3
"""Tune and check the generated Triton matmul kernels (src/opendnn/engines/matmul/_kernels.py).

What it decides: ``knob_space()`` of src/opendnn/engines/matmul/_kernels.py -- which
configs the matmul engine (2) lists and in which order (measured best first) -- from
timings against cuBLAS on the core bench family's matmul shapes.

GPU mode (default; one H100, about ten minutes: the budget options below bound it)::

    PYTHONUNBUFFERED=1 python bench/matmul_tune.py [--only REGEX,...] [--shapes SUBSTR,...]
        [--preset leaders --rounds 3]

1. loads _kernels.py standalone from its path (the opendnn package is not needed),
2. correctness: every config of knob_space() on a ragged bf16 problem
   (M=1000, N=1032, K=1048 -> partial tiles everywhere), transposed-operand,
   batched-broadcast and fp32/tf32 checks on a few configs; output poisoned with NaN,
3. timing: ``triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")``
   of the candidate configs and of torch.matmul (cuBLAS, ``out=``) on the same
   inputs, shapes (M x N x K, run in this order):
       8192x8192x8192 bf16, 8192x8192x8192 fp16, 8192x4096x14336 bf16,
       4096x4096x4096 bf16, 16x4096x4096 bf16, then 8192^3 bf16 with B
       column-major (B = W.t(), the nn.Linear layout) for the top configs.
   A is row-major [M, K], B row-major [K, N], C row-major in the input dtype.
4. prints a table (best config per shape, TFLOP/s, ratio to cuBLAS) last and
   writes all numbers to $OUT/matmul_tune.json (or $TMPDIR/opendnn_matmul_tune/).

CPU modes (no GPU; the opendnn package is not imported, only _kernels.py)::

    python bench/matmul_tune.py --compile-only   # sm_90 compile of every config:
                                                 # regs, spills, smem, HGMMA/UTMALDG counts
    python bench/matmul_tune.py --dry-run        # the whole GPU flow on tiny shapes in
                                                 # Triton's interpreter (plumbing check)
"""

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KPATH = os.path.normpath(
    os.path.join(HERE, "..", "src", "opendnn", "engines", "matmul", "_kernels.py")
)

EPI_PARAMS = ["C", "stride_c_b0", "stride_c_b1", "stride_cm", "stride_cn"]
EPI_BODY = """
    c_base = C + b0.to(tl.int64) * stride_c_b0 + b1.to(tl.int64) * stride_c_b1
    tl.store(c_base + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc.to(C.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])
"""

SRC_DIR = os.path.join(tempfile.gettempdir(), "opendnn_mm_src")


def load_mk():
    spec = importlib.util.spec_from_file_location("opendnn_matmul_kernels", KPATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["opendnn_matmul_kernels"] = mod
    spec.loader.exec_module(mod)
    return mod


mk = load_mk()


def load_fn(src: str, base: str):
    """Write `src` (function `base`) to a file named by its hash, import it, return the function."""
    name = f"{base}_{hashlib.sha1(src.encode()).hexdigest()[:12]}"
    src = src.replace(f"def {base}(", f"def {name}(", 1)
    os.makedirs(SRC_DIR, exist_ok=True)
    path = os.path.join(SRC_DIR, name + ".py")
    with open(path, "w") as f:
        f.write("import triton\nimport triton.language as tl\n" + src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, name)


class Kernels:
    """Main (+ reduce) kernel objects for one config, wrapped for GPU or interpreter."""

    _cache = {}

    def __init__(self, knobs, allow_tf32, interpret):
        if interpret:
            from triton.runtime.interpreter import InterpretedFunction as wrap
        else:
            from triton.runtime.jit import JITFunction as wrap
        src = mk.matmul_source(
            "mm",
            knobs,
            epilogue_params=EPI_PARAMS,
            epilogue_body=EPI_BODY,
            allow_tf32=allow_tf32,
            interpret=interpret,
        )
        self.main = wrap(load_fn(src, "mm"))
        self.red = None
        if knobs.SPLIT_K > 1:
            rsrc = mk.splitk_reduce_source("mmred", knobs, EPI_PARAMS, EPI_BODY)
            self.red = wrap(load_fn(rsrc, "mmred"))

    @classmethod
    def get(cls, knobs, allow_tf32=True, interpret=False):
        key = (knobs, allow_tf32, interpret)
        if key not in cls._cache:
            cls._cache[key] = Kernels(knobs, allow_tf32, interpret)
        return cls._cache[key]


def _as4(x):
    while x.dim() < 4:
        x = x.unsqueeze(0)
    return x


class Runner:
    """C = A @ B with one config; a, b: 2-D/3-D/4-D tensors (batch dims broadcast)."""

    def __init__(self, knobs, a, b, c, num_sms, allow_tf32=True, interpret=False):
        import torch

        self.knobs = knobs
        k = Kernels.get(knobs, allow_tf32, interpret)
        a4, b4, c4 = (_as4(x) for x in (a, b, c))
        B0, B1 = c4.shape[0], c4.shape[1]
        a4 = a4.expand(B0, B1, *a4.shape[2:])
        b4 = b4.expand(B0, B1, *b4.shape[2:])
        M, K = a4.shape[2], a4.shape[3]
        N = b4.shape[3]
        self.M, self.N, self.K, self.batch = M, N, K, B0 * B1
        c_args = [c4, c4.stride(0), c4.stride(1), c4.stride(2), c4.stride(3)]
        tail = [M, N, K, B1, *a4.stride(), *b4.stride()]
        self.kw = dict(mk.launch_options(knobs))
        if knobs.tma:
            ok, why = mk.tma_ok(a4.stride(), b4.stride(), a4.element_size())
            if not ok or a4.data_ptr() % 16 or b4.data_ptr() % 16:
                raise ValueError(f"TMA not applicable: {why}")
            self.kw.update(mk.tma_flags(a4.stride(), b4.stride()))
        self.grid = mk.grid(knobs, M, N, B0, B1, num_sms)
        self.main = k.main
        self.red = k.red
        if knobs.SPLIT_K > 1:
            self.ws = torch.empty(
                mk.workspace_bytes(knobs, M, N, B0 * B1) // 4, dtype=torch.float32, device=c.device
            )
            self.args = [a4, b4, self.ws, *c_args, *tail]
            self.rargs = [self.ws, *c_args, M, N, B1]
            self.rgrid = mk.reduce_grid(knobs, M, N, B0, B1)
            self.rkw = mk.reduce_launch_options(knobs)
        else:
            self.args = [a4, b4, *c_args, *tail]

    def __call__(self):
        if self.M == 0 or self.N == 0:
            return
        self.main[self.grid](*self.args, **self.kw)
        if self.red is not None:
            self.red[self.rgrid](*self.rargs, **self.rkw)


def rel_err(x, ref):
    import torch

    x = x.double()
    ref = ref.double()
    if torch.isnan(x).any():
        return float("inf")
    return ((x - ref).norm() / max(ref.norm().item(), 1e-30)).item()


# ---------------------------------------------------------------------------
# GPU flow
# ---------------------------------------------------------------------------

SHAPES = [
    # (label, M, N, K, dtype, b_layout)
    ("8192x8192x8192 bf16", 8192, 8192, 8192, "bfloat16", "row"),
    ("8192x8192x8192 fp16", 8192, 8192, 8192, "float16", "row"),
    ("8192x4096x14336 bf16", 8192, 4096, 14336, "bfloat16", "row"),
    ("4096x4096x4096 bf16", 4096, 4096, 4096, "bfloat16", "row"),
    ("16x4096x4096 bf16", 16, 4096, 4096, "bfloat16", "row"),
    ("8192x8192x8192 bf16 B-colmajor", 8192, 8192, 8192, "bfloat16", "col"),
]


# exploration variants around the expected best config (--no-explore to drop)
EXPLORE = [
    dict(
        BLOCK_M=128,
        BLOCK_N=256,
        BLOCK_K=64,
        GROUP_M=16,
        num_stages=3,
        num_warps=8,
        persistent=True,
        tma=True,
    ),
    dict(
        BLOCK_M=128,
        BLOCK_N=256,
        BLOCK_K=64,
        GROUP_M=4,
        num_stages=3,
        num_warps=8,
        persistent=True,
        tma=True,
    ),
    dict(
        BLOCK_M=128,
        BLOCK_N=256,
        BLOCK_K=64,
        GROUP_M=8,
        num_stages=4,
        num_warps=8,
        persistent=True,
        tma=True,
    ),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_stages=2, num_warps=8, tma=True),
    dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_stages=4, num_warps=8, tma=True),
    dict(
        BLOCK_M=128,
        BLOCK_N=256,
        BLOCK_K=64,
        GROUP_M=8,
        num_stages=4,
        num_warps=8,
        persistent=True,
        tma=True,
        flatten=True,
    ),
    dict(
        BLOCK_M=128,
        BLOCK_N=256,
        BLOCK_K=64,
        GROUP_M=8,
        num_stages=4,
        num_warps=8,
        persistent=True,
        tma=True,
        epilogue_subtile=2,
    ),
]


# --preset leaders: the leaders of a full sweep, re-timed (run with --rounds 3), plus
# variants of them
PRESET_LEADERS_BIG = [
    "128x256x64_g8_s3_w8_pers_tma",
    "128x256x64_g8_s3_w8_pers_tma_flat",
    "128x256x64_g8_s3_w8_pers_tma_sub2",
    "128x256x64_g4_s3_w8_pers_tma",
    "128x256x64_g8_s4_w8_pers_tma",
    "128x256x64_g8_s4_w8_pers_tma_sub2",
    "128x256x64_g8_s4_w8_tma",
    "128x256x64_g8_s3_w8_tma",
    "256x128x64_g8_s3_w8_pers_tma",
    "128x256x64_g16_s3_w8_pers_tma",
    # variants of the leaders
    "128x256x64_g4_s3_w8_pers_tma_sub2",
    "128x256x64_g4_s4_w8_pers_tma_sub2",
    "128x256x64_g8_s3_w8_pers_tma_flat_sub2",
    "256x128x64_g8_s3_w8_pers_tma_sub2",
    "128x256x64_g8_s4_w8_tma_sub2",
]
PRESET_LEADERS_SKINNY = [
    "16x64x128_g1_s4_w4_sk4",
    "64x128x64_g8_s4_w4_sk4",
    "16x128x128_g1_s4_w4_sk2_tma",
    # variants of the leaders
    "16x128x64_g1_s4_w4_sk4",
    "16x64x128_g1_s4_w4_sk8",
    "16x64x64_g1_s6_w4_sk8",
    "16x128x128_g1_s3_w4_sk4",
    "32x128x128_g1_s3_w4_sk4",
    "64x128x64_g1_s4_w4_sk8",
    "64x128x128_g1_s3_w4_sk4",
    "64x64x128_g1_s4_w4_sk4",
    "16x256x64_g1_s4_w4_sk8",
    "16x256x64_g1_s4_w4_sk4_tma",
    "64x256x64_g1_s4_w4_sk4_tma",
    "16x64x128_g1_s6_w4_sk4",
    "16x32x128_g1_s4_w4_sk4",
    "64x128x64_g1_s4_w4_sk4_tma",
    "16x64x128_g1_s4_w4_sk4_tma",
]


def parse_short(name):
    """Inverse of MatmulKnobs.short()."""
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)_g(\d+)_s(\d+)_w(\d+)((?:_[a-z]+\d*)*)", name)
    if not m:
        raise ValueError(f"bad config name {name!r}")
    bm, bn, bk, g, st, w = (int(x) for x in m.groups()[:6])
    kw = {}
    for tok in m.group(7).split("_")[1:]:
        if tok.startswith("sk"):
            kw["SPLIT_K"] = int(tok[2:])
        elif tok.startswith("sub"):
            kw["epilogue_subtile"] = int(tok[3:])
        else:
            kw[
                {"pers": "persistent", "tma": "tma", "flat": "flatten", "ws": "warp_specialize"}[
                    tok
                ]
            ] = True
    k = mk.MatmulKnobs(bm, bn, bk, g, st, w, **kw)
    assert k.short() == name, (k.short(), name)
    return k


def is_risky(k):
    """Configs run in a child process with a timeout (a hang must not kill the sweep)."""
    return k.warp_specialize


def applicable(knobs, M, N, K, dtype_bytes):
    """Skip configs that cannot win on this shape (keeps the sweep inside its time budget)."""
    smem = knobs.num_stages * (knobs.BLOCK_M + knobs.BLOCK_N) * knobs.BLOCK_K * dtype_bytes
    if smem > 227 * 1024:
        return False
    if M >= 1024 and (knobs.BLOCK_M < 64 or knobs.SPLIT_K > 1):
        return False
    if M <= 64 and knobs.BLOCK_M > 64:
        return False
    return True


def make_inputs(M, N, K, dtype, b_layout, device, batch=None):
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(M * 31 + N * 7 + K)
    a = torch.randn(M, K, device=device, dtype=torch.float32, generator=g).to(dtype)
    if b_layout == "col":
        b = torch.randn(N, K, device=device, dtype=torch.float32, generator=g).to(dtype).t()
    else:
        b = torch.randn(K, N, device=device, dtype=torch.float32, generator=g).to(dtype)
    return a, b


def correctness(configs, device, num_sms, interpret, log):
    """Ragged / transposed / batched / fp32 checks; returns {config: (ok, err, note)}."""
    import torch

    results = {}
    bf = torch.bfloat16
    M, N, K = (1000, 1032, 1048) if not interpret else (40, 48, 40)
    a, b = make_inputs(M, N, K, bf, "row", device)
    ref = a.float() @ b.float()
    for kn in configs:
        name = kn.short()
        try:
            c = torch.full((M, N), float("nan"), device=device, dtype=bf)
            Runner(kn, a, b, c, num_sms, interpret=interpret)()
            if device == "cuda":
                torch.cuda.synchronize()
            err = rel_err(c, ref)
            ok = err < 1e-2
            results[name] = {"ok": ok, "err": err}
            log(f"  check {name:44s} rel_err={err:.2e} {'ok' if ok else 'FAIL'}")
        except Exception as e:  # compile or launch failure: record and move on
            results[name] = {"ok": False, "err": None, "error": repr(e)[:400]}
            log(f"  check {name:44s} ERROR {repr(e)[:200]}")
    # extra layout / batch / fp32 checks on a few configs
    extras = []
    tma_cfgs = (
        [
            k
            for k in configs
            if k.tma and k.SPLIT_K == 1 and not k.persistent and not k.warp_specialize
        ][:1]
        + [k for k in configs if k.tma and k.persistent][:1]
        + [k for k in configs if k.warp_specialize][:1]
    )
    ptr_cfgs = [k for k in configs if not k.tma and k.SPLIT_K == 1][:1]
    sk_cfgs = [k for k in configs if k.SPLIT_K > 1][:1]
    for kn in tma_cfgs + ptr_cfgs:
        for la, lb in (("col", "row"), ("row", "col"), ("col", "col")):
            extras.append((kn, "layout", la, lb))
    for kn in tma_cfgs[:2] + ptr_cfgs + sk_cfgs:
        extras.append((kn, "batch", "row", "row"))
    fits32 = [
        k
        for k in configs
        if k.SPLIT_K == 1 and k.num_stages * (k.BLOCK_M + k.BLOCK_N) * k.BLOCK_K * 4 <= 227 * 1024
    ]
    f32 = [k for k in fits32 if k.tma][:1] + [k for k in fits32 if not k.tma][:1]
    for kn in f32:
        extras.append((kn, "fp32", "row", "row"))
        extras.append((kn, "fp32", "col", "col"))
    for kn, kind, la, lb in extras:
        tag = f"{kn.short()} {kind} A={la} B={lb}"
        try:
            if kind == "layout":
                Mx, Nx, Kx = (520, 776, 1048) if not interpret else (24, 40, 32)
                aa = torch.randn(Mx, Kx, device=device).to(torch.float16)
                bb = torch.randn(Kx, Nx, device=device).to(torch.float16)
                if la == "col":
                    aa = aa.t().contiguous().t()
                if lb == "col":
                    bb = bb.t().contiguous().t()
                c = torch.full((Mx, Nx), float("nan"), device=device, dtype=torch.float16)
                Runner(kn, aa, bb, c, num_sms, interpret=interpret)()
                err = rel_err(c, aa.float() @ bb.float())
            elif kind == "batch":
                Mx, Nx, Kx = (264, 520, 392) if not interpret else (24, 40, 32)
                aa = torch.randn(2, 3, Mx, Kx, device=device).to(bf)
                bb = torch.randn(1, 3, Kx, Nx, device=device).to(bf)  # broadcast over b0
                c = torch.full((2, 3, Mx, Nx), float("nan"), device=device, dtype=bf)
                Runner(kn, aa, bb, c, num_sms, interpret=interpret)()
                err = rel_err(c, aa.float() @ bb.float())
            else:
                Mx, Nx, Kx = (1000, 1032, 1048) if not interpret else (40, 48, 40)
                aa = torch.randn(Mx, Kx, device=device)
                bb = torch.randn(Kx, Nx, device=device)
                if la == "col":
                    aa = aa.t().contiguous().t()
                if lb == "col":
                    bb = bb.t().contiguous().t()
                c = torch.full((Mx, Nx), float("nan"), device=device)
                Runner(kn, aa, bb, c, num_sms, allow_tf32=True, interpret=interpret)()
                err = rel_err(c, aa.double() @ bb.double())
            if device == "cuda":
                torch.cuda.synchronize()
            ok = err < 1e-2
            results[tag] = {"ok": ok, "err": err}
            log(f"  check {tag:44s} rel_err={err:.2e} {'ok' if ok else 'FAIL'}")
        except Exception as e:
            results[tag] = {"ok": False, "err": None, "error": repr(e)[:400]}
            log(f"  check {tag:44s} ERROR {repr(e)[:200]}")
    return results


def gpu_main(args):
    import torch
    import triton
    from triton.testing import do_bench

    t_start = time.time()
    out_dir = os.environ.get("OUT") or os.path.join(tempfile.gettempdir(), "opendnn_matmul_tune")
    os.makedirs(out_dir, exist_ok=True)
    stem = "matmul_tune_child" if args.child else "matmul_tune"
    json_path = os.path.join(out_dir, stem + ".json")
    logf = open(os.path.join(out_dir, stem + ".log"), "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    dev = torch.cuda.get_device_properties(0)
    num_sms = dev.multi_processor_count
    info = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "device": dev.name,
        "sms": num_sms,
        "l2_bytes": getattr(dev, "L2_cache_size", None),
    }
    log(f"env: {info}")
    mk.ensure_allocator()
    configs = list(mk.knob_space())
    if not args.no_explore:
        configs += [mk.MatmulKnobs(**d) for d in EXPLORE]
    if args.preset == "leaders":
        configs = [parse_short(n) for n in PRESET_LEADERS_BIG + PRESET_LEADERS_SKINNY]
    for extra in args.extra:
        configs.append(mk.MatmulKnobs(**json.loads(extra)))
    configs = list(dict.fromkeys(configs))
    if args.only:
        pats = args.only.split(",")
        configs = [k for k in configs if any(re.fullmatch(p, k.short()) for p in pats)]
    risky = []
    if args.child:
        configs = [k for k in configs if is_risky(k)]
    else:
        risky = [k for k in configs if is_risky(k)]
        configs = [k for k in configs if not is_risky(k)]
    log(
        f"{len(configs)} configs"
        + (f" (+{len(risky)} risky ones in a child process later)" if risky else "")
    )
    result = {
        "env": info,
        "configs": [dataclasses.asdict(k) | {"name": k.short()} for k in configs],
        "checks": {},
        "shapes": {},
    }

    def dump():
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)

    if not args.skip_check:
        t0 = time.time()
        result["checks"] = correctness(configs, "cuda", num_sms, False, log)
        log(f"correctness: {time.time() - t0:.1f}s")
        dump()
    bad = {n for n, r in result["checks"].items() if not r["ok"] and " " not in n}

    peak_flops, peak_bw = 989e12, 3.0e12
    shapes = (
        SHAPES
        if not args.shapes
        else [s for s in SHAPES if any(p in s[0] for p in args.shapes.split(","))]
    )
    for label, M, N, K, dtname, b_layout in shapes:
        if time.time() - t_start > args.budget_s:
            log(f"budget exhausted before {label}")
            break
        dtype = getattr(torch, dtname)
        a, b = make_inputs(M, N, K, dtype, b_layout, "cuda")
        flops = 2.0 * M * N * K
        c_ref = torch.empty(M, N, device="cuda", dtype=dtype)
        torch.matmul(a, b, out=c_ref)
        ms_cublas = do_bench(
            lambda: torch.matmul(a, b, out=c_ref), warmup=25, rep=100, return_mode="median"
        )
        entry = {
            "M": M,
            "N": N,
            "K": K,
            "dtype": dtname,
            "b_layout": b_layout,
            "cublas_ms": ms_cublas,
            "cublas_tflops": flops / ms_cublas * 1e-9,
            "runs": [],
        }
        result["shapes"][label] = entry
        log(f"== {label}: cuBLAS {ms_cublas:.4f} ms = {flops / ms_cublas * 1e-9:.1f} TFLOP/s")
        if b_layout == "col":
            # re-time only the best few configs of the row-major bf16 8192^3 run
            prev = result["shapes"].get("8192x8192x8192 bf16", {}).get("runs", [])
            top = sorted([r for r in prev if r.get("ms")], key=lambda r: r["ms"])[: args.top_col]
            names = {r["name"] for r in top}
            cands = [k for k in configs if k.short() in names]
        else:
            cands = [k for k in configs if applicable(k, M, N, K, a.element_size())]
        cands.sort(
            key=lambda k: mk.estimate_seconds(
                k, M, N, K, 1, a.element_size(), peak_flops, peak_bw, num_sms
            )
        )
        runners = {}
        for kn in cands:
            if time.time() - t_start > args.budget_s:
                log("  budget exhausted")
                break
            name = kn.short()
            est = mk.estimate_seconds(
                kn, M, N, K, 1, a.element_size(), peak_flops, peak_bw, num_sms
            )
            rec = {"name": name, "est_ms": est * 1e3}
            if name in bad:
                rec["skipped"] = "failed correctness"
                entry["runs"].append(rec)
                continue
            try:
                c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
                t0 = time.time()
                run = Runner(kn, a, b, c, num_sms)
                run()
                torch.cuda.synchronize()
                rec["first_call_s"] = time.time() - t0
                rec["err_vs_cublas"] = rel_err(c, c_ref)
                if not rec["err_vs_cublas"] < 2e-2:
                    rec["skipped"] = "wrong result"
                    log(f"  {name:44s} WRONG err={rec['err_vs_cublas']}")
                    entry["runs"].append(rec)
                    continue
                ms = do_bench(run, warmup=25, rep=100, return_mode="median")
                rec.update(
                    ms=ms, tflops=flops / ms * 1e-9, vs_cublas=ms_cublas / ms, rounds_ms=[ms]
                )
                if kn.SPLIT_K > 1:

                    def main_only(run=run):
                        run.main[run.grid](*run.args, **run.kw)

                    rec["main_only_ms"] = do_bench(
                        main_only, warmup=25, rep=100, return_mode="median"
                    )
                runners[name] = run
                log(
                    f"  {name:44s} {ms:8.4f} ms {rec['tflops']:7.1f} TFLOP/s "
                    f"{rec['vs_cublas']:6.3f}x cuBLAS"
                    f"  (est {est * 1e3:.3f} ms, first call {rec['first_call_s']:.1f}s"
                    + (
                        f", main kernel alone {rec['main_only_ms'] * 1e3:.1f} us"
                        if "main_only_ms" in rec
                        else ""
                    )
                    + ")"
                )
            except Exception as e:
                rec["error"] = repr(e)[:400]
                log(f"  {name:44s} ERROR {repr(e)[:200]}")
            entry["runs"].append(rec)
        # extra interleaved rounds over the leaders: median of rounds, cuBLAS re-timed each round
        timed = sorted([r for r in entry["runs"] if r.get("ms")], key=lambda r: r["ms"])[
            : args.top_rerun
        ]
        if args.rounds > 1 and timed:
            cub = [ms_cublas]
            for rnd in range(1, args.rounds):
                if time.time() - t_start > args.budget_s:
                    break
                cub.append(
                    do_bench(
                        lambda: torch.matmul(a, b, out=c_ref),
                        warmup=25,
                        rep=100,
                        return_mode="median",
                    )
                )
                for r in timed:
                    r["rounds_ms"].append(
                        do_bench(runners[r["name"]], warmup=25, rep=100, return_mode="median")
                    )

            def med(xs):
                return sorted(xs)[len(xs) // 2]

            entry["cublas_rounds_ms"] = cub
            entry["cublas_ms"] = med(cub)
            entry["cublas_tflops"] = flops / entry["cublas_ms"] * 1e-9
            log(f"  rounds: cuBLAS {['%.4f' % x for x in cub]}")
            for r in timed:
                r["ms"] = med(r["rounds_ms"])
                r["tflops"] = flops / r["ms"] * 1e-9
                r["vs_cublas"] = entry["cublas_ms"] / r["ms"]
                log(
                    f"  rounds: {r['name']:44s} median {r['ms']:.4f} ms {r['tflops']:7.1f} TFLOP/s "
                    f"{r['vs_cublas']:6.3f}x  {['%.4f' % x for x in r['rounds_ms']]}"
                )
        # host overhead of the best config (CPU submit time per call)
        good = [r for r in entry["runs"] if r.get("ms")]
        if good:
            best = min(good, key=lambda r: r["ms"])
            kn = next(k for k in configs if k.short() == best["name"])
            try:
                c = torch.empty(M, N, device="cuda", dtype=dtype)
                run = Runner(kn, a, b, c, num_sms)
                run()
                torch.cuda.synchronize()
                n = 50
                t0 = time.perf_counter()
                for _ in range(n):
                    run()
                t_sub = (time.perf_counter() - t0) / n
                torch.cuda.synchronize()
                t_all = (time.perf_counter() - t0) / n
                entry["best_host_submit_us"] = t_sub * 1e6
                entry["best_wall_per_call_us"] = t_all * 1e6
                log(
                    f"  host submit {t_sub * 1e6:.1f} us/call, "
                    f"wall {t_all * 1e6:.1f} us/call (best config)"
                )
            except Exception as e:
                log(f"  host timing failed: {e!r}")
        dump()

    if risky and not args.child:
        left = args.total_s - (time.time() - t_start)
        if left > 60:
            summary(result, log, t_start)
            log(f"== child process for {len(risky)} risky configs (timeout {left:.0f}s)")
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--child",
                "--budget-s",
                str(left - 30),
                "--shapes",
                args.child_shapes,
                "--only",
                ",".join(re.escape(k.short()) for k in risky),
            ]
            if args.no_explore:
                cmd.append("--no-explore")
            try:
                subprocess.run(cmd, timeout=left)
            except subprocess.TimeoutExpired:
                log("child timed out (killed)")
            try:
                with open(os.path.join(out_dir, "matmul_tune_child.json")) as f:
                    child = json.load(f)
                result["checks"].update(child.get("checks", {}))
                for lab, e in child.get("shapes", {}).items():
                    if lab in result["shapes"]:
                        result["shapes"][lab]["runs"] += e["runs"]
                        result["shapes"][lab]["cublas_ms_child"] = e["cublas_ms"]
            except Exception as e:
                log(f"no child results: {e!r}")
        else:
            log("no time left for risky configs")
    summary(result, log, t_start)
    dump()


def summary(result, log, t_start):
    log("")
    log(
        f"total {time.time() - t_start:.0f}s; checks failed: "
        f"{[n for n, r in result['checks'].items() if not r['ok']]}"
    )
    log(
        f"{'shape (MxNxK)':34s} {'best config':40s} {'ms':>8s} {'TFLOP/s':>8s} "
        f"{'cuBLAS':>8s} {'ratio':>6s}"
    )
    for label, e in result["shapes"].items():
        good = sorted([r for r in e["runs"] if r.get("ms")], key=lambda r: r["ms"])
        if not good:
            log(f"{label:34s} (no result)")
            continue
        r = good[0]
        log(
            f"{label:34s} {r['name']:40s} {r['ms']:8.4f} {r['tflops']:8.1f} "
            f"{e['cublas_tflops']:8.1f} {r['vs_cublas']:6.3f}"
        )
        for r2 in good[1:3]:
            log(
                f"{'':34s}   {r2['name']:38s} {r2['ms']:8.4f} {r2['tflops']:8.1f} {'':8s} "
                f"{r2['vs_cublas']:6.3f}"
            )


# ---------------------------------------------------------------------------
# CPU: interpreter dry run and sm_90 compile report
# ---------------------------------------------------------------------------


def dry_run(args):
    configs = list(mk.knob_space())
    small = [
        dataclasses.replace(
            k,
            BLOCK_M=min(k.BLOCK_M, 16),
            BLOCK_N=min(k.BLOCK_N, 32),
            BLOCK_K=min(k.BLOCK_K, 16),
            GROUP_M=2,
        )
        for k in configs
    ]
    small = list(dict.fromkeys(small))
    res = correctness(small, "cpu", 4, True, print)
    bad = [n for n, r in res.items() if not r["ok"]]
    print(f"dry run: {len(res)} checks, failed: {bad}")
    return 0 if not bad else 1


def compile_report(args):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    tdir = os.path.dirname(triton.__file__)
    ptxas = os.path.join(tdir, "backends", "nvidia", "bin", "ptxas")
    nvdisasm = os.path.join(tdir, "backends", "nvidia", "bin", "nvdisasm")
    tmp = tempfile.mkdtemp()
    rows = []
    for kn in mk.knob_space():
        for dt in ("bf16",) + (("fp32",) if kn.BLOCK_K == 32 else ()):
            src = mk.matmul_source(
                "mm",
                kn,
                epilogue_params=EPI_PARAMS,
                epilogue_body=EPI_BODY,
                allow_tf32=True,
                interpret=False,
            )
            fn = JITFunction(load_fn(src, "mm"))
            sig, cons, attrs = {}, {}, {}
            for i, p in enumerate(fn.params):
                n = p.name
                if p.is_constexpr:
                    sig[n] = "constexpr"
                elif n in ("A", "B", "C"):
                    sig[n] = "*" + dt
                    attrs[(i,)] = [["tt.divisibility", 16]]
                elif n in ("stride_ak", "stride_bn", "stride_cn", "BATCH1"):
                    sig[n] = "constexpr"  # ints equal to 1 are specialized like this at run time
                    cons[n] = 1
                else:
                    sig[n] = "*fp32" if n == "WS" else "i32"
                    attrs[(i,)] = [["tt.divisibility", 16]]
            for f in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K"):
                cons[f] = getattr(kn, f)
            if kn.tma:
                cons["A_KCONTIG"], cons["B_NCONTIG"] = True, True
            row = {"name": kn.short(), "dtype": dt}
            try:
                t0 = time.time()
                c = triton.compile(
                    ASTSource(fn, sig, cons, attrs),
                    target=GPUTarget("cuda", 90, 32),
                    options={"num_warps": kn.num_warps, "num_stages": kn.num_stages},
                )
                row["compile_s"] = round(time.time() - t0, 2)
                row["smem"] = c.metadata.shared
                row["warps"] = c.metadata.num_warps
                ptx = os.path.join(tmp, "k.ptx")
                cub = os.path.join(tmp, "k.cubin")
                with open(ptx, "w") as f:
                    f.write(c.asm["ptx"])
                with open(cub, "wb") as f:
                    f.write(c.asm["cubin"])
                v = subprocess.run(
                    [ptxas, "-arch=sm_90a", "-v", ptx, "-o", os.path.join(tmp, "v.cubin")],
                    capture_output=True,
                    text=True,
                ).stderr
                row["regs"] = int((re.findall(r"Used (\d+) registers", v) or [-1])[0])
                row["spill"] = int((re.findall(r"(\d+) bytes spill stores", v) or [-1])[0])
                sass = subprocess.run([nvdisasm, cub], capture_output=True, text=True).stdout
                for op in ("HGMMA", "HMMA", "UTMALDG", "LDGSTS"):
                    row[op] = sass.count(op)
            except Exception as e:
                row["error"] = repr(e)[:200]
            rows.append(row)
            print(row, flush=True)
    out = os.environ.get("OUT") or os.path.join(tempfile.gettempdir(), "opendnn_matmul_tune")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "matmul_compile_report.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--compile-only", action="store_true", help="CPU: sm_90 compile report of knob_space()"
    )
    ap.add_argument(
        "--dry-run", action="store_true", help="CPU: correctness flow in the interpreter"
    )
    ap.add_argument("--only", default="", help="comma list of regexes over config names")
    ap.add_argument(
        "--extra",
        action="append",
        default=[],
        help="extra config as JSON dict of MatmulKnobs fields",
    )
    ap.add_argument("--shapes", default="", help="comma list of substrings selecting shape labels")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--top-col", type=int, default=4, help="configs re-timed with column-major B")
    ap.add_argument(
        "--budget-s", type=float, default=390.0, help="stop starting new timings after this"
    )
    ap.add_argument(
        "--total-s", type=float, default=560.0, help="hard end of the risky child process"
    )
    ap.add_argument("--no-explore", action="store_true", help="drop the EXPLORE variants")
    ap.add_argument(
        "--preset",
        default="",
        choices=["", "leaders"],
        help="named config list (replaces knob_space)",
    )
    ap.add_argument(
        "--rounds", type=int, default=1, help="interleaved timing rounds for the leaders"
    )
    ap.add_argument("--top-rerun", type=int, default=12, help="leaders re-timed in extra rounds")
    ap.add_argument("--child", action="store_true", help="(internal) run only the risky configs")
    ap.add_argument(
        "--child-shapes",
        default="8192x8192x8192,8192x4096x14336",
        help="shapes the risky child times",
    )
    args = ap.parse_args()
    if args.compile_only:
        return compile_report(args)
    if args.dry_run:
        return dry_run(args)
    return gpu_main(args)


if __name__ == "__main__":
    sys.exit(main())
