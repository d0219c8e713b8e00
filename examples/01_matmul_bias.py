"""Seed example (cudnn-frontend's matmul + bias), unchanged but for the import line and
the device: it runs on CUDA when there is a GPU, otherwise on CPU tensors through Triton's
interpreter (with a smaller problem, since the interpreter is slow)."""
import torch

import opendnn.frontend as cudnn


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    b, m, n, k = (1, 1024, 1024, 512) if device == "cuda" else (1, 128, 96, 64)
    A = torch.randn(b, m, k, dtype=torch.float32, device=device)
    B = torch.randn(b, k, n, dtype=torch.float32, device=device)
    bias = torch.randn(b, m, 1, dtype=torch.float32, device=device)
    result = torch.empty(b, m, n, dtype=torch.float32, device=device)

    graph = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    a_cudnn_tensor = graph.tensor_like(A)
    b_cudnn_tensor = graph.tensor_like(B)
    bias_cudnn_tensor = graph.tensor_like(bias)
    c_cudnn_tensor = graph.matmul(name="matmul", A=a_cudnn_tensor, B=b_cudnn_tensor)
    d_cudnn_tensor = graph.bias(name="bias", input=c_cudnn_tensor, bias=bias_cudnn_tensor)

    graph.build([cudnn.heur_mode.A])
    workspace = torch.empty(graph.get_workspace_size(), device=device, dtype=torch.uint8)
    variant_pack = {
        a_cudnn_tensor: A,
        b_cudnn_tensor: B,
        bias_cudnn_tensor: bias,
        d_cudnn_tensor: result,
    }
    graph.execute(variant_pack, workspace)
    return graph, (A, B, bias), result, variant_pack, workspace


if __name__ == "__main__":
    g, (A, B, bias), result, _, _ = main()
    ref = A.double() @ B.double() + bias.double()
    print("plan:", g.get_plan_name_at_index(0))
    print("max |error| vs float64:", (result.double() - ref).abs().max().item())
