"""Sweep the attention engine's (40) tiles on an H100 through the graph API (B=4, H=16, bf16,
sdpa with Stats, top-left causal masks), against PyTorch's cuDNN backend in the same run;
outputs and gradients checked against the cuDNN backend's. What it decides, in
src/opendnn/engines/attention/engine.py:

    bwd              ``_backward_tiles`` (the Triton backward): S=4096, D=128, causal and
                     not -- the deterministic split (dK / dV, then dQ) with the dQ kernel on
                     the same or its own tiles, against the atomic-dQ variant (TMA=1: one
                     bulk reduction per tile)
    d64 | d128       ``_backward_tiles`` at that head dim, S 4096 and 16384: 32- and 16-row
                     query tiles, wider key tiles, the dQ kernel's tiles; with ``fwd`` also
                     ``_forward_tiles`` (the Triton forward), with ``nobwd`` the forward only
                     at S 4096 / 8192 / 16384
    s1024            ``_forward_tiles`` at S=1024: causal at head dims 64 / 128, and 64
                     without a mask
    gluon-fwd [P..]  ``_gluon_first`` (the Gluon forward, GLUON=1): key tiles, stages,
                     ping-pong, longest-first (LPT) and persistent (PERSIST) variants; each
                     config timed between two cuDNN timings, twice, with the GPU clocks read
                     after each (the H100 runs these at its power cap). Default problems
                     S=16384 D=128, S=1024 D=128 causal, S=16384 D=64; env ONLY=PERSIST,LPT
                     keeps the configs with those knobs set
    gluon-bwd [P..]  ``_gluon_backward_first`` and ``_gluon_nd_first`` (the Gluon backward,
                     deterministic and DQ_ATOMIC=1): dK / dV stages, the dQ kernel's key tile
                     and stages. Default problems S 1024 / 4096 / 8192, D 64 / 128, causal
                     and not

P: a problem ``S,D,causal`` (e.g. ``1024,64,1``). TFLOP/s count 4 B H S^2 D forward, 2.5x
that backward, halved when causal.

Run (GPU): PYTHONPATH=src python bench/attention_sweep.py [MODE [options]] (default bwd;
each mode takes five to fifteen minutes, most of it compiling).
"""

import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from _common import lse_reference, planned, sdpa_forward  # bench/ (the script's folder)
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import opendnn.frontend as cudnn

ATTENTION = 40
B, H = 4, 16
_SPLIT = dict(TMA=0, DQ_ATOMIC=0)
_TMA_ATOMIC = dict(TMA=1, DQ_ATOMIC=1)
_DQ = dict(DQ_BLOCK_M=128, DQ_BLOCK_N=64, DQ_WARPS=8, DQ_STAGES=3)
CONFIGS = [
    dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, **_SPLIT),
    dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, **_DQ, **_SPLIT),
    dict(
        BLOCK_M=64,
        BLOCK_N=64,
        num_warps=4,
        num_stages=2,
        DQ_BLOCK_M=128,
        DQ_BLOCK_N=32,
        DQ_WARPS=8,
        DQ_STAGES=3,
        **_SPLIT,
    ),
    dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=3, **_DQ, **_SPLIT),
    dict(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=3, **_DQ, **_SPLIT),
    dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=2, **_TMA_ATOMIC),
    dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=3, **_TMA_ATOMIC),
]
# head dim 64: the dK / dV accumulators of 128 keys fit (64 x 128 x 2 float32)
_dq = [
    dict(DQ_BLOCK_M=m, DQ_BLOCK_N=n, DQ_WARPS=w, DQ_STAGES=st)
    for m, n, w, st in (
        (128, 64, 8, 3),
        (128, 128, 8, 3),
        (64, 128, 4, 3),
        (128, 64, 4, 3),
        (64, 64, 4, 3),
    )
]
D64 = (
    [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, **_DQ, **_SPLIT)]
    + [
        dict(BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=st, **_DQ, **_SPLIT)
        for m, n, w, st in (
            (32, 128, 4, 3),
            (32, 128, 4, 4),
            (32, 128, 4, 5),
            (16, 128, 4, 3),
            (16, 128, 4, 4),
            (32, 64, 4, 3),
            (32, 64, 4, 4),
            (32, 128, 8, 3),
            (32, 64, 2, 3),
        )
    ]
    + [dict(BLOCK_M=32, BLOCK_N=128, num_warps=4, num_stages=3, **dq, **_SPLIT) for dq in _dq[1:]]
    + [
        dict(BLOCK_M=32, BLOCK_N=n, num_warps=4, num_stages=4, **_dq[3], **_SPLIT)
        for n in (64, 128)
    ]
)
# the same 32-row query tiles at head dim 128 (dK / dV of 64 keys: 128 registers a thread)
D128 = [
    dict(BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=st, **_DQ, **_SPLIT)
    for m, n, w, st in (
        (64, 64, 4, 2),
        (32, 64, 4, 3),
        (32, 64, 4, 4),
        (32, 64, 4, 5),
        (16, 64, 4, 4),
        (32, 128, 8, 3),
        (32, 128, 8, 4),
    )
]
FWD = [
    dict(BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=st)
    for m, n, w, st in (
        (64, 64, 4, 3),
        (128, 64, 8, 3),
        (128, 64, 4, 3),
        (64, 64, 4, 4),
        (128, 64, 4, 4),
        (64, 128, 4, 3),
        (64, 128, 4, 4),
        (128, 128, 8, 3),
        (64, 32, 4, 3),
        (128, 64, 8, 4),
    )
]
# the Gluon backward's rules (engine.py, _gluon_knob_rule): dK / dV on 64 x 128 tiles with
# 4 warps and 2-4 stages; the dQ kernel on 128 x 64 or 128 x 128 with 2 or 3 stages, or
# none (DQ_ATOMIC=1: dQ added into a float32 workspace); configs over the shared memory
# limit are declined and reported
GLUON_BWD = [
    dict(
        BLOCK_M=64,
        BLOCK_N=128,
        num_warps=4,
        num_stages=st,
        DQ_BLOCK_M=128,
        DQ_BLOCK_N=n,
        DQ_WARPS=4,
        DQ_STAGES=dst,
        GLUON=1,
    )
    for st in (2, 3, 4)
    for n in (64, 128)
    for dst in (2, 3)
] + [
    dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=st, DQ_ATOMIC=1, GLUON=1)
    for st in (2, 3, 4)
]


def _label(kn) -> str:
    dq = "x".join(str(kn.get(f"DQ_{n}", 0)) for n in ("BLOCK_M", "BLOCK_N", "WARPS", "STAGES"))
    flags = " ".join(
        f"{k.lower()}={v}"
        for k, v in kn.items()
        if k in ("TMA", "DQ_ATOMIC", "GLUON", "PINGPONG", "LPT", "PERSIST") and v
    )
    return (
        f"{kn['BLOCK_M']}x{kn['BLOCK_N']} w{kn['num_warps']} s{kn['num_stages']} "
        f"dq={dq} {flags}".rstrip()
    )


def forward(S, D, causal):
    """The Triton forward's tiles (FWD) against cuDNN's forward."""
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        ms = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    fl = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    print(f"S={S} D={D} causal={causal} cudnn fwd: {fl / ms / 1e9:.0f} TFLOP/s", flush=True)
    for kn in FWD:
        out = torch.empty_like(q)
        lse = torch.empty(B, H, S, 1, device="cuda")
        try:
            fn = sdpa_forward(q, k, v, out, lse, causal, kn)
            fn()
            torch.cuda.synchronize()
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            ms = do_bench(fn)
        except Exception as e:  # noqa: BLE001 -- reported
            print(f"  {kn}: FAILED {str(e)[:100]}")
            continue
        print(
            f"  fwd {_label(kn)}: {ms:.3f} ms {fl / ms / 1e9:.0f} TFLOP/s rel err {err:.1e}",
            flush=True,
        )


def backward(S, D, causal, configs):
    """Backward ``configs`` against cuDNN's backward, gradients checked against its."""
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    qr, kr, vr = (t.clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
        ref = torch.autograd.grad(o, (qr, kr, vr), do, retain_graph=True)
        ms = do_bench(lambda: torch.autograd.grad(o, (qr, kr, vr), do, retain_graph=True))
    fl = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    print(f"S={S} D={D} causal={causal} cudnn bwd: {fl / ms / 1e9:.0f} TFLOP/s", flush=True)
    lse = lse_reference(q, k, 1 / math.sqrt(D), causal)[..., None]  # [B, H, S, 1]
    o = o.detach()
    for kn in configs:
        g = cudnn.pygraph()
        t = {
            n: g.tensor_like(x)
            for n, x in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("st", lse))
        }
        grads = g.sdpa_backward(
            t["q"],
            t["k"],
            t["v"],
            t["o"],
            t["do"],
            t["st"],
            attn_scale=1 / math.sqrt(D),
            diagonal_band_right_bound=0 if causal else None,
        )
        outs = [torch.empty_like(x) for x in (q, k, v)]
        for gt in grads:
            gt.set_output(True)
        pack = {
            t["q"]: q,
            t["k"]: k,
            t["v"]: v,
            t["o"]: o,
            t["do"]: do,
            t["st"]: lse,
            **dict(zip(grads, outs)),
        }
        try:
            fn = planned(g, ATTENTION, kn, pack)
            fn()
            torch.cuda.synchronize()
            err = max(
                ((a.float() - b.float()).norm() / b.float().norm()).item()
                for a, b in zip(outs, ref)
            )
            ms = do_bench(fn)
        except Exception as e:  # noqa: BLE001 -- reported
            print(f"  {_label(kn)}: FAILED {str(e)[:100]}")
            continue
        print(
            f"  {_label(kn)}: {ms:.3f} ms {fl / ms / 1e9:.0f} TFLOP/s rel err {err:.1e}", flush=True
        )


def clocks() -> str:
    q = "clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    return subprocess.run(
        ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.strip()


def gluon_forward(problems):
    """The Gluon forward's knobs, each config between two cuDNN timings, twice."""
    base = [
        dict(BLOCK_N=n, num_stages=st, PINGPONG=pp)
        for n, st, pp in ((128, 2, 1), (128, 2, 0), (64, 3, 0), (64, 3, 1), (128, 3, 0))
    ]
    only = os.environ.get("ONLY")  # e.g. ONLY=PERSIST,LPT: configs with those knobs set
    for S, D, causal in problems:
        # causal: also query tiles longest first across heads (LPT=1)
        knobs = base + ([dict(kn, LPT=1) for kn in base[1:3] + base[4:]] if causal else [])
        knobs += [
            dict(BLOCK_N=n, num_stages=st, PINGPONG=0, PERSIST=1)
            for n, st in ((64, 3), (64, 2), (128, 2)) + (((128, 3),) if D == 64 else ())
        ]
        if only:
            knobs = [kn for kn in knobs if any(kn.get(n) for n in only.split(","))]
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        fl = 4 * B * H * S * S * D * (0.5 if causal else 1) / 1e9

        def ref():  # timed inside sdpa_kernel(CUDNN_ATTENTION)
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ref()
        out, lse = torch.empty_like(q), torch.empty(B, H, S, 1, device="cuda")
        for rep in range(2):
            for kn in knobs:
                kn = dict(BLOCK_M=128, num_warps=4, GLUON=1, **kn)
                try:
                    run = sdpa_forward(q, k, v, out, lse, causal, kn)
                    run()
                except Exception as e:  # noqa: BLE001 -- reported
                    print(f"S={S} D={D} causal={int(causal)} {_label(kn)}: FAILED {str(e)[:100]}")
                    continue
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    c0 = do_bench(ref)
                ms = do_bench(run)
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    c1 = do_bench(ref)
                print(
                    f"S={S} D={D} causal={int(causal)} rep{rep} {_label(kn)}: "
                    f"{fl / ms:.0f} TFLOP/s, cudnn {fl / c0:.0f}/{fl / c1:.0f}, "
                    f"ratio {(c0 + c1) / 2 / ms:.3f} | {clocks()}",
                    flush=True,
                )


def _problems(args, default):
    given = [tuple(int(x) for x in a.split(",")) for a in args if "," in a]
    return [(s, d, bool(c)) for s, d, c in given] if given else default


def main(argv):
    mode = argv[0] if argv else "bwd"
    args = argv[1:]
    if mode == "bwd":
        for causal in (False, True):
            backward(4096, 128, causal, CONFIGS)
    elif mode in ("d64", "d128"):
        d, configs = (64, D64) if mode == "d64" else (128, D128)
        for S in (4096, 8192, 16384) if "nobwd" in args else (4096, 16384):
            for causal in (False, True):
                if "fwd" in args or "nobwd" in args:
                    forward(S, d, causal)
                if "nobwd" not in args:
                    backward(S, d, causal, configs)
    elif mode == "s1024":
        for d in (64, 128):
            forward(1024, d, True)
        forward(1024, 64, False)
    elif mode == "gluon-fwd":
        gluon_forward(_problems(args, [(16384, 128, False), (1024, 128, True), (16384, 64, False)]))
    elif mode == "gluon-bwd":
        for S, D, causal in _problems(
            args, [(s, d, c) for s in (1024, 4096, 8192) for d in (64, 128) for c in (False, True)]
        ):
            backward(S, D, causal, GLUON_BWD)
    else:
        sys.exit(f"unknown mode {mode!r}: bwd, d64, d128, s1024, gluon-fwd or gluon-bwd")


if __name__ == "__main__":
    main(sys.argv[1:])
