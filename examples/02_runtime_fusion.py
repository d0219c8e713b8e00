"""Seed example: runtime fusion of ``output = sigmoid(t1 + t2 * t3)`` into one kernel."""
import torch

import opendnn.frontend as cudnn


def main(shape=None, dtype=torch.bfloat16):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = shape or ((8192, 8192) if device == "cuda" else (64, 96))
    t1, t2, t3 = (torch.randn(shape, device=device, dtype=dtype) for _ in range(3))
    out = torch.empty(shape, device=device, dtype=dtype)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16 if dtype == torch.bfloat16 else
                      cudnn.data_type.FLOAT,
                      intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    x1, x2, x3 = g.tensor_like(t1), g.tensor_like(t2), g.tensor_like(t3)
    y = g.sigmoid(g.add(x1, g.mul(x2, x3)))
    y.set_output(True)
    g.build([cudnn.heur_mode.A])
    ws = torch.empty(g.get_workspace_size(), device=device, dtype=torch.uint8)
    pack = {x1: t1, x2: t2, x3: t3, y: out}
    g.execute(pack, ws)
    return g, (t1, t2, t3), out, pack, ws


if __name__ == "__main__":
    g, (t1, t2, t3), out, _, _ = main()
    ref = torch.sigmoid(t1.double() + t2.double() * t3.double())
    print("plan:", g.get_plan_name_at_index(0))
    print("max |error| vs float64:", (out.double() - ref).abs().max().item())
