"""Seed example "Hello, cuDNN" (Part 1): a 2-D convolution through the descriptor API.
1x3x224x224 input, 64 7x7 filters, padding 3, stride 2: output dims, the fastest
algorithm by get_v7, its workspace, convolution_forward. On the CPU it runs the same
problem through Triton's interpreter (slow: a smaller image there)."""
import torch

import opendnn.legacy as cudnn


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    N, C, H, W = (1, 3, 224, 224) if device == "cuda" else (1, 3, 32, 32)
    K, R, S = 64, 7, 7
    handle = cudnn.create(device)
    x_desc = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(x_desc, cudnn.TensorFormat.NCHW, cudnn.DataType.FLOAT, N, C, H, W)
    w_desc = cudnn.create_filter_descriptor()
    cudnn.set_filter_4d_descriptor(w_desc, cudnn.DataType.FLOAT, cudnn.TensorFormat.NCHW, K, C, R, S)
    conv_desc = cudnn.create_convolution_descriptor()
    cudnn.set_convolution_2d_descriptor(conv_desc, 3, 3, 2, 2, 1, 1,
                                        cudnn.ConvolutionMode.CROSS_CORRELATION, cudnn.DataType.FLOAT)
    out_n, out_c, out_h, out_w = cudnn.get_convolution_2d_forward_output_dim(conv_desc, x_desc, w_desc)
    print(f"Output dimensions: {out_n}x{out_c}x{out_h}x{out_w}")
    y_desc = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(y_desc, cudnn.TensorFormat.NCHW, cudnn.DataType.FLOAT,
                                   out_n, out_c, out_h, out_w)
    perf = cudnn.get_convolution_forward_algorithm_v7(handle, x_desc, w_desc, conv_desc, y_desc, 1)[0]
    print(f"Fastest algorithm found: {perf.algo.name} (Memory: {perf.memory} bytes)")
    workspace = torch.empty(perf.memory, dtype=torch.uint8, device=device) if perf.memory else None
    x = torch.randn(N, C, H, W, device=device)
    w = torch.randn(K, C, R, S, device=device)
    y = torch.empty(out_n, out_c, out_h, out_w, device=device)
    cudnn.convolution_forward(handle, 1.0, x_desc, x, w_desc, w, conv_desc, perf.algo, workspace,
                              perf.memory, 0.0, y_desc, y)
    print("Convolution executed successfully!")
    return x, w, y


if __name__ == "__main__":
    x, w, y = main()
    ref = torch.nn.functional.conv2d(x.double(), w.double(), stride=2, padding=3)
    print("max |error| vs float64:", (y.double() - ref).abs().max().item())
