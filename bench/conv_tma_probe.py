"""Probe: an NHWC implicit-GEMM convolution whose image slabs are TMA boxes of a 4-D (stride
1) or 5-D (stride 2, the image seen as [N, H/2, 2, W/2, 2C]) tensor descriptor. Each tap's
box starts at the shifted (possibly negative) coordinates; the copy engine zero-fills what
falls outside the image, so the padding costs no masks. Persistent grid, one output tile
(BNI images x TH x TW pixels x BN channels) per step. Checks against F.conv2d and times
against cuDNN (PyTorch, benchmark on), both as CUDA-graph replays and as eager calls.

    PYTHONPATH=src python bench/conv_tma_probe.py
"""
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.testing import do_bench, do_bench_cudagraph


@triton.jit
def conv_tma(X, Wt, Y, NB: tl.constexpr, H: tl.constexpr, WI: tl.constexpr, C: tl.constexpr,
             K: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr, R: tl.constexpr,
             S: tl.constexpr, PAD: tl.constexpr, STRIDE: tl.constexpr, BNI: tl.constexpr,
             TH: tl.constexpr, TW: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
             NUM_SMS: tl.constexpr, GROUP_K: tl.constexpr):
    BM: tl.constexpr = BNI * TH * TW
    CB: tl.constexpr = (C + BK - 1) // BK
    if STRIDE == 1:
        x_desc = tl.make_tensor_descriptor(X, shape=[NB, H, WI, C],
                                           strides=[H * WI * C, WI * C, C, 1],
                                           block_shape=[BNI, TH, TW, BK])
    else:
        x_desc = tl.make_tensor_descriptor(X, shape=[NB, H // 2, 2, WI // 2, 2 * C],
                                           strides=[H * WI * C, 2 * WI * C, WI * C, 2 * C, 1],
                                           block_shape=[BNI, TH, 1, TW, BK])
    w_desc = tl.make_tensor_descriptor(Wt, shape=[K, R * S, C], strides=[R * S * C, C, 1],
                                       block_shape=[BN, 1, BK])
    y_desc = tl.make_tensor_descriptor(Y, shape=[NB, OH, OW, K],
                                       strides=[OH * OW * K, OW * K, K, 1],
                                       block_shape=[BNI, TH, TW, BN])
    tiles_h: tl.constexpr = (OH + TH - 1) // TH
    tiles_w: tl.constexpr = (OW + TW - 1) // TW
    tiles_n: tl.constexpr = (NB + BNI - 1) // BNI
    tiles_k: tl.constexpr = (K + BN - 1) // BN
    num_tiles: tl.constexpr = tiles_n * tiles_h * tiles_w * tiles_k
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS):
        kt = tile % tiles_k
        pt = tile // tiles_k
        wt = pt % tiles_w
        pt = pt // tiles_w
        ht = pt % tiles_h
        nt = pt // tiles_h
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for it in range(R * S * CB):
            t = it // CB
            c0 = (it % CB) * BK
            r = t // S
            s = t % S
            if STRIDE == 1:
                a = x_desc.load([nt * BNI, ht * TH + r - PAD, wt * TW + s - PAD, c0])
            else:
                dh = r - PAD + 2 * PAD     # kept non-negative before halving
                dw = s - PAD + 2 * PAD
                a = x_desc.load([nt * BNI, ht * TH + dh // 2 - PAD, dh % 2,
                                 wt * TW + dw // 2 - PAD, (dw % 2) * C + c0])
            a = a.reshape(BM, BK)
            b = w_desc.load([kt * BN, t, c0]).reshape(BN, BK)
            acc = tl.dot(a, b.T, acc)
        y_desc.store([nt * BNI, ht * TH, wt * TW, kt * BN],
                      acc.to(Y.dtype.element_ty).reshape(BNI, TH, TW, BN))


def run(x, w, pad, stride, bni, th, tw, bn, bk, warps, stages):
    n, c, h, wi = x.shape
    k, _, r, s = w.shape
    oh, ow = (h + 2 * pad - r) // stride + 1, (wi + 2 * pad - s) // stride + 1
    y = torch.empty(n, k, oh, ow, device=x.device, dtype=x.dtype,
                    memory_format=torch.channels_last)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = -(-n // bni) * -(-oh // th) * -(-ow // tw) * -(-k // bn)
    grid = (min(sms, tiles),)
    wk = w.permute(0, 2, 3, 1).contiguous()

    def fn():
        conv_tma[grid](x, wk, y, n, h, wi, c, k, oh, ow, r, s, pad, stride, bni, th, tw, bn, bk,
                       grid[0], 1, num_warps=warps, num_stages=stages)
    return fn, y


LAYERS = [  # name, C, K, H, filt, stride, pad  (N=32)
    ("l1_1x1_64_64", 64, 64, 56, 1, 1, 0), ("l1_3x3_64", 64, 64, 56, 3, 1, 1),
    ("l1_1x1_64_256", 64, 256, 56, 1, 1, 0), ("l2_3x3_128s2", 128, 128, 56, 3, 2, 1),
    ("l2_3x3_128", 128, 128, 28, 3, 1, 1), ("l3_3x3_256", 256, 256, 14, 3, 1, 1),
    ("l3_1x1_1024_256", 1024, 256, 14, 1, 1, 0), ("l4_3x3_512", 512, 512, 7, 3, 1, 1),
    ("l4_1x1_512_2048", 512, 2048, 7, 1, 1, 0)]

CONFIGS = [  # bni, th, tw, bn, bk, warps, stages
    (1, 8, 16, 128, 64, 8, 4), (1, 8, 16, 64, 64, 4, 4), (1, 8, 8, 128, 64, 4, 4),
    (2, 8, 8, 128, 64, 8, 4), (1, 16, 16, 128, 64, 8, 3), (1, 8, 16, 256, 64, 8, 3),
    (2, 8, 8, 256, 64, 8, 3), (4, 4, 8, 128, 64, 4, 4), (1, 4, 16, 128, 64, 4, 4)]


def main():
    torch.backends.cudnn.benchmark = True
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                 device="cuda"))
    rows = []
    for name, c, k, h, f, s, p in LAYERS:
        n = 32
        x = torch.randn(n, c, h, h, device="cuda", dtype=torch.bfloat16).to(
            memory_format=torch.channels_last)
        w = (torch.randn(k, c, f, f, device="cuda", dtype=torch.bfloat16) * 0.05).to(
            memory_format=torch.channels_last)
        ref = F.conv2d(x, w, stride=s, padding=p)
        cud = lambda: F.conv2d(x, w, stride=s, padding=p)  # noqa: E731
        t_ref_g = do_bench_cudagraph(cud, rep=100, return_mode="median")
        t_ref_e = do_bench(cud, warmup=25, rep=100, return_mode="median")
        best = (float("inf"), None, 0.0)
        for cfg in CONFIGS:
            try:
                fn, y = run(x, w, p, s, *cfg)
                y.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                err = ((y.double() - ref.double()).norm() / ref.double().norm()).item()
                if not err < 2e-2:
                    print(f"  {name} {cfg} WRONG rel err {err}", flush=True)
                    continue
                t = do_bench_cudagraph(fn, rep=100, return_mode="median")
            except Exception as ex:  # a config that does not compile must not end the probe
                print(f"  {name} {cfg} FAILED {str(ex)[:300]}", flush=True)
                continue
            if t < best[0]:
                best = (t, cfg, err)
        rows.append((name, t_ref_g, t_ref_e, *best))
        print(f"{name:16s} cuDNN graph {t_ref_g * 1e3:6.1f} us eager {t_ref_e * 1e3:6.1f} us | "
              f"tma {best[0] * 1e3:6.1f} us ratio {t_ref_g / best[0]:.2f} {best[1]} "
              f"err {best[2]:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
