"""Seed example: the graph API's conv -> bias -> relu (one fused implicit-GEMM kernel)."""
import torch

import opendnn.frontend as cudnn


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    N, C, H, K = (32, 64, 56, 64) if device == "cuda" else (1, 8, 10, 16)
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    cl = torch.channels_last
    x = torch.randn(N, C, H, H, device=device, dtype=dt).to(memory_format=cl)
    w = (torch.randn(K, C, 3, 3, device=device, dtype=dt) * 0.1).to(memory_format=cl)
    b = torch.randn(1, K, 1, 1, device=device, dtype=dt)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    tx, tw, tb = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    y = g.relu(g.bias(g.conv_fprop(tx, tw, padding=[1, 1], stride=[1, 1], dilation=[1, 1]), tb))
    g.build([cudnn.heur_mode.A])
    out = torch.empty_strided(y.get_dim(), y.get_stride(), device=device, dtype=dt)
    ws = torch.empty(g.get_workspace_size(), device=device, dtype=torch.uint8)
    pack = {tx: x, tw: w, tb: b, y: out}
    g.execute(pack, ws)
    return g, (x, w, b), out, pack, ws


if __name__ == "__main__":
    g, (x, w, b), out, _, _ = main()
    ref = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), padding=1) + b.double())
    print("plan:", g.get_plan_name_at_index(0))
    print("max relative error:", ((out.double() - ref).norm() / ref.norm()).item())
