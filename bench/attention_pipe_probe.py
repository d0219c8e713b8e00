"""Probe: does issuing the next key tile's Q K^T before this tile's softmax (FA3's
intra-warpgroup overlap, written as a software-pipelined loop) let Triton 3.6 overlap the
exponentials with the tensor cores? Hand-written non-causal forward kernels (B=4, H=16,
D=128, bf16, S in {1024, 4096}), against PyTorch's cuDNN backend in the same run.
Variants: PIPE (next tile's scores issued first), FOLD=1 (scale folded into the exponent:
exp2(s c - m) as one FMA, the row maximum taken on raw scores), FOLD=2 (and lazy
rescaling: the reference maximum moves only when it rises by more than 8 in log2 units).
Session 10: PIPE=1 never faster (Triton waits on each dot before the next).
Run (GPU): PYTHONPATH=src python bench/attention_pipe_probe.py"""
import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench


@triton.jit
def _step(q, kt, v, m_i, l_i, acc, c, FOLD: tl.constexpr):
    s = tl.dot(q, kt)
    return _soft(s, v, m_i, l_i, acc, c, FOLD)


@triton.jit
def _soft(s, v, m_i, l_i, acc, c, FOLD: tl.constexpr):
    if FOLD == 2:     # lazy rescaling: a row's reference maximum moves only when its
        #               maximum rises by more than 8 (p <= 256); acc rescaled only then
        m_row = tl.max(s, 1) * c
        m_new = tl.where(m_row > m_i + 8.0, m_row, m_i)
        p = tl.exp2(s * c - m_new[:, None])
        l_i = l_i * tl.exp2(m_i - m_new) + tl.sum(p, 1)
        if tl.max((m_new > m_i).to(tl.int32), 0) > 0:
            acc = acc * tl.exp2(m_i - m_new)[:, None]
        acc = tl.dot(p.to(tl.bfloat16), v, acc)
        return m_new, l_i, acc
    if FOLD:
        m_new = tl.maximum(m_i, tl.max(s, 1) * c)
        p = tl.exp2(s * c - m_new[:, None])
    else:
        s = s * c
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), v)
    return m_new, l_i, acc


@triton.jit
def fwd(Q, K, V, O, scale, S: tl.constexpr, D: tl.constexpr, BM: tl.constexpr,
        BN: tl.constexpr, PIPE: tl.constexpr, FOLD: tl.constexpr):
    pid_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * S * D
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + base + offs_m[:, None] * D + offs_d[None, :])
    kp = K + base + offs_n[None, :] * D + offs_d[:, None]
    vp = V + base + offs_n[:, None] * D + offs_d[None, :]
    c = scale * 1.4426950408889634
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    if PIPE:
        s = tl.dot(q, tl.load(kp))
        for start in range(BN, S, BN):
            s_next = tl.dot(q, tl.load(kp + start * D))
            m_i, l_i, acc = _soft(s, tl.load(vp + (start - BN) * D), m_i, l_i, acc, c, FOLD)
            s = s_next
        m_i, l_i, acc = _soft(s, tl.load(vp + (S - BN) * D), m_i, l_i, acc, c, FOLD)
    else:
        for start in range(0, S, BN):
            m_i, l_i, acc = _step(q, tl.load(kp + start * D), tl.load(vp + start * D), m_i,
                                  l_i, acc, c, FOLD)
    o = acc / l_i[:, None]
    tl.store(O + base + offs_m[:, None] * D + offs_d[None, :], o.to(tl.bfloat16))


def main():
    B, H, Dh = 4, 16, 128
    rows = []
    for S in (1024, 4096):
        q, k, v = (torch.randn(B, H, S, Dh, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        flops = 4 * B * H * S * S * Dh
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ref = F.scaled_dot_product_attention(q, k, v)
            ms = do_bench(lambda: F.scaled_dot_product_attention(q, k, v), warmup=10, rep=50)
        rows.append(f"S={S} cudnn {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s")
        print(rows[-1], flush=True)
        o = torch.empty_like(q)
        for bm, bn, warps, stages in ((128, 64, 8, 3), (128, 128, 8, 2), (128, 128, 8, 3),
                                      (64, 64, 4, 3), (64, 128, 4, 2), (64, 64, 4, 4)):
            for pipe in (0,):
                for fold in (0, 1, 2):
                    def fn():
                        fwd[(S // bm, B * H)](q, k, v, o, 1 / math.sqrt(Dh), S, Dh, bm, bn,
                                              pipe, fold, num_warps=warps, num_stages=stages)
                    try:
                        o.fill_(float("nan"))
                        fn()
                        torch.cuda.synchronize()
                        err = (o.float() - ref.float()).abs().max().item()
                        ms = do_bench(fn, warmup=10, rep=50)
                    except Exception as e:   # noqa: BLE001 -- reported
                        print(f"  {bm}x{bn} w{warps} s{stages} pipe{pipe} fold{fold}: FAILED "
                              f"{str(e)[:100]}", flush=True)
                        continue
                    rows.append(f"  {bm}x{bn} w{warps} s{stages} pipe{pipe} fold{fold}: "
                                f"{ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s err {err:.3f}")
                    print(rows[-1], flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
