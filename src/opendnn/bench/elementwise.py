"""The ``elementwise`` benchmark family: the descriptor API's activation and tensor calls
against PyTorch's kernels in the same run, bfloat16 (cuDNN's legacy calls are not
reachable from PyTorch; its eager kernels are the comparison).

- activation_forward / activation_backward, RELU and SIGMOID, 8192 x 8192 (read x, write
  y; backward reads dy and x, writes dx);
- add_tensor of a per-channel bias into NHWC 64x256x56x56 in place (C = A + C: reads and
  writes C) against ``c.add_(bias)``;
- op_tensor MUL of two full tensors, 8192 x 8192, against ``torch.mul(a, b, out=c)``;
- transform_tensor NCHW -> NHWC of 64x256x56x56 against
  ``y.copy_(x)`` into a channels-last tensor (PyTorch's permuting copy).
Times are whole calls (a cached graph per call, host overhead included)."""

from __future__ import annotations

import torch


def _desc(cudnn, dims, fmt):
    d = cudnn.create_tensor_descriptor()
    cudnn.set_tensor_4d_descriptor(d, fmt, cudnn.DataType.BFLOAT16, *dims)
    return d


def run_elementwise(r, bench):
    import opendnn.legacy as cudnn

    h = cudnn.create("cuda")
    _flat_cases(r, bench, cudnn, h)  # its 8192^2 tensors are freed when it returns
    _image_cases(r, bench, cudnn, h)


def _flat_cases(r, bench, cudnn, h):
    """activation_forward / _backward and op_tensor on 8192 x 8192."""
    NCHW = cudnn.TensorFormat.NCHW
    flat = (1, 1, 8192, 8192)
    x = torch.randn(flat, device="cuda", dtype=torch.bfloat16)
    y, dy, dx = torch.empty_like(x), torch.randn_like(x), torch.empty_like(x)
    d = _desc(cudnn, flat, NCHW)
    nb = x.numel() * 2
    for mode, fwd, bwd in (
        (
            cudnn.ActivationMode.RELU,
            torch.relu,
            lambda: torch.ops.aten.threshold_backward(dy, x, 0.0),
        ),
        (
            cudnn.ActivationMode.SIGMOID,
            torch.sigmoid,
            lambda: torch.ops.aten.sigmoid_backward(dy, y),
        ),
    ):
        act = cudnn.create_activation_descriptor()
        cudnn.set_activation_descriptor(act, mode, cudnn.NanPropagation.PROPAGATE_NAN, 0.0)
        r.add(
            "elementwise",
            f"activation_forward {mode.name} 8192^2 bf16",
            bench(lambda: cudnn.activation_forward(h, act, 1.0, d, x, 0.0, d, y)),
            bench(lambda: fwd(x)),
            nbytes=2 * nb,
            ref_name="torch",
        )
        r.add(
            "elementwise",
            f"activation_backward {mode.name} 8192^2 bf16",
            bench(lambda: cudnn.activation_backward(h, act, 1.0, d, y, d, dy, d, x, 0.0, d, dx)),
            bench(bwd),
            nbytes=3 * nb,
            ref_name="torch",
        )
    op = cudnn.create_op_tensor_descriptor()
    cudnn.set_op_tensor_descriptor(
        op, cudnn.OpTensorOp.MUL, cudnn.DataType.FLOAT, cudnn.NanPropagation.PROPAGATE_NAN
    )
    r.add(
        "elementwise",
        "op_tensor MUL 8192^2 bf16",
        bench(lambda: cudnn.op_tensor(h, op, 1.0, d, x, 1.0, d, dy, 0.0, d, y)),
        bench(lambda: torch.mul(x, dy, out=y)),
        nbytes=3 * nb,
        ref_name="torch",
    )


def _image_cases(r, bench, cudnn, h):
    """add_tensor and transform_tensor on 64x256x56x56."""
    NCHW, NHWC = cudnn.TensorFormat.NCHW, cudnn.TensorFormat.NHWC
    img = (64, 256, 56, 56)
    c = torch.randn(img, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    bias = torch.randn(1, 256, 1, 1, device="cuda", dtype=torch.bfloat16)
    cd, bd = _desc(cudnn, img, NHWC), _desc(cudnn, (1, 256, 1, 1), NCHW)
    nb = c.numel() * 2
    r.add(
        "elementwise",
        "add_tensor bias into NHWC 64x256x56x56 bf16",
        bench(lambda: cudnn.add_tensor(h, 1.0, bd, bias, 1.0, cd, c)),
        bench(lambda: c.add_(bias)),
        nbytes=2 * nb,
        ref_name="torch",
    )
    x = torch.randn(img, device="cuda", dtype=torch.bfloat16)
    xd = _desc(cudnn, img, NCHW)
    r.add(
        "elementwise",
        "transform_tensor NCHW->NHWC 64x256x56x56 bf16",
        bench(lambda: cudnn.transform_tensor(h, 1.0, xd, x, 0.0, cd, c)),
        bench(lambda: c.copy_(x)),
        nbytes=2 * nb,
        ref_name="torch",
    )
