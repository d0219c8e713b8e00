"""Seed example (Part 2): conv + bias + ReLU fused by convolution_bias_activation_forward,
y = relu(alpha1 * conv(x) + alpha2 * z + bias), one kernel."""
import torch

import opendnn.legacy as cudnn


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    N, C, H, W, K = (16, 64, 56, 56, 64) if device == "cuda" else (1, 8, 12, 12, 16)
    handle = cudnn.create(device)
    x_desc, y_desc, z_desc, b_desc = (cudnn.create_tensor_descriptor() for _ in range(4))
    cudnn.set_tensor_4d_descriptor(x_desc, cudnn.TensorFormat.NCHW, cudnn.DataType.FLOAT, N, C, H, W)
    w_desc = cudnn.create_filter_descriptor()
    cudnn.set_filter_4d_descriptor(w_desc, cudnn.DataType.FLOAT, cudnn.TensorFormat.NCHW, K, C, 3, 3)
    conv = cudnn.create_convolution_descriptor()
    cudnn.set_convolution_2d_descriptor(conv, 1, 1, 1, 1, 1, 1,
                                        cudnn.ConvolutionMode.CROSS_CORRELATION, cudnn.DataType.FLOAT)
    n, k, p, q = cudnn.get_convolution_2d_forward_output_dim(conv, x_desc, w_desc)
    cudnn.set_tensor_4d_descriptor(y_desc, cudnn.TensorFormat.NCHW, cudnn.DataType.FLOAT, n, k, p, q)
    cudnn.set_tensor_4d_descriptor(z_desc, cudnn.TensorFormat.NCHW, cudnn.DataType.FLOAT, n, k, p, q)
    cudnn.set_tensor_4d_descriptor(b_desc, cudnn.TensorFormat.NCHW, cudnn.DataType.FLOAT, 1, k, 1, 1)
    act = cudnn.create_activation_descriptor()
    cudnn.set_activation_descriptor(act, cudnn.ActivationMode.RELU,
                                    cudnn.NanPropagation.NOT_PROPAGATE_NAN, 0.0)
    algo = cudnn.ConvolutionFwdAlgo.IMPLICIT_GEMM
    ws_size = cudnn.get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv, y_desc, algo)
    ws = torch.empty(ws_size, dtype=torch.uint8, device=device) if ws_size else None
    x = torch.randn(N, C, H, W, device=device)
    w = torch.randn(K, C, 3, 3, device=device) * 0.1
    bias = torch.randn(1, K, 1, 1, device=device)
    y = torch.empty(n, k, p, q, device=device)
    # alpha2 = 0: y = relu(conv(x) + bias); z (here y itself) is not read
    cudnn.convolution_bias_activation_forward(handle, 1.0, x_desc, x, w_desc, w, conv, algo, ws,
                                              ws_size, 0.0, z_desc, y, b_desc, bias, act, y_desc, y)
    return x, w, bias, y


if __name__ == "__main__":
    x, w, bias, y = main()
    ref = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), padding=1) + bias.double())
    print("max |error| vs float64:", (y.double() - ref).abs().max().item())
