"""Backward filter of a memory-bound layer (ResNet l1_1x1_64_64 by default, N=32, NHWC
bf16) on the TMA path with SPLIT forced: how the pixel split's program count sets the
bandwidth. CUDA-graph timings against cuDNN in the same run.
Run: PYTHONPATH=src python bench/wgrad_split_probe.py [layer]"""
import sys

import torch

import opendnn.frontend as cudnn
from opendnn.bench import shapes
from opendnn.bench.conv import bench_graph

BASE = [dict(TMA_IMGS=1, TMA_TH=8, TMA_TW=16, BLOCK_M=64, BLOCK_N=64, FLAT=0, num_warps=4,
             num_stages=4),
        dict(TMA_IMGS=1, TMA_TH=1, TMA_TW=64, BLOCK_M=64, BLOCK_N=64, FLAT=1, num_warps=4,
             num_stages=4),
        dict(TMA_IMGS=1, TMA_TH=1, TMA_TW=128, BLOCK_M=64, BLOCK_N=64, FLAT=1, num_warps=4,
             num_stages=4)]
SPLITS = (44, 66, 88, 132, 176, 264)


def main(layer="l1_1x1_64_64"):
    name, c, k, h, f, s, p = next(t for t in shapes.CONV if t[0] == layer)
    n, cl = shapes.CONV_N, torch.channels_last
    x = torch.randn(n, c, h, h, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = torch.randn(k, c, f, f, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    o = (h + 2 * p - f) // s + 1
    dy = torch.randn(n, k, o, o, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    bwd = torch.ops.aten.convolution_backward
    ref = bench_graph(lambda: bwd(dy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1,
                                  [False, True, False]))
    gb = 2 * (x.numel() + dy.numel()) / 1e9
    print(f"{layer}: cuDNN {ref * 1e3:.1f} us; floor {gb / 3.35e3 * 1e6:.1f} us at 3.35 TB/s")
    for base in BASE:
        for split in SPLITS:
            g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT,
                              compute_data_type=cudnn.data_type.FLOAT)
            a_, b_ = g.tensor_like(x), g.tensor_like(dy)
            out = g.conv_wgrad(a_, b_, padding=[p, p], stride=[s, s])
            out.set_dim(list(w.shape)).set_stride(list(w.stride())).set_output(True)
            g.validate()
            try:
                g.create_execution_plan(5, dict(base, SPLIT=split))
            except Exception as e:   # noqa: BLE001 -- a split past the steps: report, go on
                print(f"  FLAT={base['FLAT']} run {base['TMA_TW']} SPLIT={split}: {e}"[:150])
                continue
            ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
            buf = torch.empty_like(w)
            ms = bench_graph(lambda: g.execute({a_: x, b_: dy, out: buf}, ws))
            print(f"  FLAT={base['FLAT']} TW={base['TMA_TW']:3d} SPLIT={split:3d}: "
                  f"{ms * 1e3:6.1f} us  ratio {ref / ms:.2f}  ws {g.get_workspace_size() >> 10} KiB")


if __name__ == "__main__":
    main(*sys.argv[1:])
