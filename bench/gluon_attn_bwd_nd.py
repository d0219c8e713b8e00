"""The nondeterministic Gluon backward (src/opendnn/engines/attention/_gluon_bwd_nd_kernels.py:
dQ added into a float32 workspace by TMA reduce from the dK / dV kernel) against cuDNN and
the deterministic Gluon backward on an H100, launched directly (no graph).

    PYTHONPATH=src:bench python bench/gluon_attn_bwd_nd.py compile   # offline: ptxas report
    PYTHONPATH=src:bench python bench/gluon_attn_bwd_nd.py [S,D,causal ...]   # GPU

GPU mode (default B=4 H=16, S in (1024, 4096, 8192), D in (64, 128), causal and not):
gradients against cuDNN's (relative error), TFLOP/s (2.5 x 4 B H S^2 D, halved causal)
against cuDNN and the deterministic pair, with each kernel's own time.

History (bench/notes/attention.md): session 15's draft added per-warpgroup partials with
float32 atomics from registers (slower than the deterministic pair); session 16 tried, and
dropped, per-warpgroup partials by TMA reduce (PAIR=0: 2x the reduce traffic, spills at
head dim 128) and the dQ wgmma left in flight into the next step (PIPE: 0.85x, 0.65x at
head dim 128 from spills).
"""
import sys

import torch

from opendnn.engines.attention import _gluon_bwd_nd_kernels as ND

STAGES = {64: (2, 3, 4), 128: (2, 3)}


def _prepare(q, k, v, o, do, stats, dq, dk, dv, ws, dims, scale, stages, causal,
             launch=None):
    """ND.prepare on one float32 workspace ws: delta, then W at a 128-byte boundary."""
    from opendnn.engines.attention._gluon_kernels import Base
    B, H, HKV, S, D, _ = dims
    n = (B * H * S + 31) // 32 * 32
    delta, acc = Base(ws.data_ptr(), torch.float32), Base(ws.data_ptr() + 4 * n,
                                                           torch.float32)
    kw = {} if launch is None else dict(launch=launch)
    return ND.prepare(q, k, v, o, do, stats, dq, dk, dv, delta, acc, dims, scale, stages,
                      causal, **kw)


def compile_only():
    """Offline (no GPU): compile attn_bwd_dkdvq for sm_90a at both head dims and each
    config, causal and not; print shared memory and the ptxas report (spills)."""
    import os

    from probe_common import gluon_compile_offline, ptxas_report
    for D in (64, 128):
        for cfg in STAGES[D]:
            for causal in (False, True):
                B, H, S = 1, 4, 1024
                q = torch.empty(B, H, S, D, dtype=torch.bfloat16)
                st = torch.empty(B, H, S, dtype=torch.float32)
                captured = []
                ws = torch.empty(B * H * S * (D + 1) + 32)
                _prepare(q, q, q, q, q, st, q, q, q, ws, (B, H, H, S, D, q.dtype), 0.1, cfg,
                         causal, launch=lambda fn, grid, a, c: captured.append((fn, a, c)))
                fn, a, c = captured[1]
                opts = {k: c.pop(k) for k in ("num_warps", "maxnreg")}
                tag = f"D={D} stages={cfg} causal={int(causal)}"
                try:
                    ck = gluon_compile_offline(fn, list(a), c, opts)
                    print(f"{tag}: smem={ck.metadata.shared} {ptxas_report(ck.asm['ptx'])}",
                          flush=True)
                    if os.environ.get("PTX_DUMP"):
                        with open(f"{os.environ['PTX_DUMP']}-{D}-{cfg}-{int(causal)}.ptx",
                                  "w") as f:
                            f.write(ck.asm["ptx"])
                except Exception as e:  # noqa: BLE001 -- reported, the next config goes on
                    print(f"{tag}: FAILED {type(e).__name__}: {str(e)[:2000]}", flush=True)


def main(problems=None):
    """problems: (S, D, causal) triples (default: S in 1024 / 4096 / 8192, D 64 / 128,
    causal and not)."""
    from triton.testing import do_bench

    from gluon_attn_bwd_probe import _rel, cudnn_backward, gluon_backward
    from probe_common import lse_reference
    B, H = 4, 16
    problems = problems or [(S, D, c) for S in (1024, 4096, 8192) for D in (64, 128)
                            for c in (False, True)]
    for S, D, causal in problems:
        q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                       for _ in range(4))
        scale = D ** -0.5
        out, ref, cudnn_run = cudnn_backward(q, k, v, do, scale, causal)
        lse = lse_reference(q, k, scale, causal)
        ws = torch.empty(B * H * S * (D + 1) + 32, device="cuda")
        # the engine's first choice of the deterministic Gluon backward
        dcfg = ((64, 2), (64, 3)) if D == 128 else ((64, 4), (128, 2))
        det, *_ = gluon_backward(q, k, v, out, do, lse, scale, causal, dcfg)
        fl = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1) / 1e9
        t_det, t_c = do_bench(det), do_bench(cudnn_run)
        parts = "/".join(f"{do_bench(r):.3f}" for r in det.runs)
        print(f"S={S} D={D} causal={int(causal)}: det {fl / t_det:.0f}  "
              f"cudnn {fl / t_c:.0f} TFLOP/s; det delta/dkdv/dq {parts} ms", flush=True)
        for cfg in STAGES[D]:
            dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
            ws.fill_(float("nan"))
            try:
                run = _prepare(q, k, v, out, do, lse, dq, dk, dv, ws, (B, H, H, S, D, q.dtype),
                               scale, cfg, causal)
                run()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 -- reported, the next config goes on
                print(f"  stages={cfg}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            errs = [_rel(g, r)[0] for g, r in zip((dq, dk, dv), ref)]
            t_nd = do_bench(run)
            t_k = do_bench(run.runs[1])
            print(f"  stages={cfg}: rel err dq/dk/dv {errs[0]:.1e}/{errs[1]:.1e}/{errs[2]:.1e}"
                  f"  nondet {fl / t_nd:.0f} TFLOP/s ({t_nd:.3f} ms, kernel {t_k:.3f}, "
                  f"det {t_det:.3f})",
                  flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["compile"]:
        compile_only()
    else:   # optional problems "S,D,causal", e.g. 4096,64,1
        main([(int(a), int(b), bool(int(c))) for a, b, c in
              (x.split(",") for x in sys.argv[1:])] or None)
