"""cudnn-frontend's ``cudnn.ops.causal_conv1d``: a depthwise causal 1-D convolution with
an optional fused activation, as Mamba-style models use it.

    y[b, c, t] = act( sum_{k < K} w[c, k] x[b, c, t - (K - 1) + k] + bias[c] )

with x read as 0 before t = 0 (left padding K - 1, none on the right), one filter per
channel (groups = channels) and act the identity or SiLU. It runs as opendnn's own
convolution (``opendnn::conv_forward``, pre-padding K - 1, post-padding 0, groups C)
and activation ops, so autograd and ``torch.compile`` work through theirs, and any
device opendnn runs on (cudnn-frontend's requires CUDA tensors).
"""

from __future__ import annotations

import torch

from ...errors import BadParamError, Status

ACTIVATIONS = ("identity", "silu")
TYPES = (torch.float32, torch.float16, torch.bfloat16)


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str = "identity",
) -> torch.Tensor:
    """y [batch, dim, seq_len] (x's type) from x [batch, dim, seq_len], weight
    [dim, kernel_size] and bias [dim] (zeros when None), all of one type among float32,
    float16 and bfloat16; ``activation``: "identity" or "silu"."""
    from ...torch import functional as F
    from ...torch.conv import conv_forward

    op = "causal_conv1d"
    if activation not in ACTIVATIONS:
        raise ValueError(f"Unsupported activation '{activation}'. Supported: 'identity', 'silu'.")
    if x.dim() != 3 or weight.dim() != 2 or (bias is not None and bias.dim() != 1):
        raise BadParamError(
            f"expected x (3-D), weight (2-D), bias (1-D); got {list(x.shape)}, "
            f"{list(weight.shape)}, {None if bias is None else list(bias.shape)}",
            op=op,
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    dim, k = weight.shape
    if x.shape[1] != dim or (bias is not None and bias.shape[0] != dim):
        raise BadParamError(
            f"x has {x.shape[1]} channels, weight {dim}"
            + ("" if bias is None else f", bias {bias.shape[0]}"),
            op=op,
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    types = {x.dtype, weight.dtype} | ({bias.dtype} if bias is not None else set())
    if len(types) != 1 or x.dtype not in TYPES:
        raise BadParamError(
            f"x, weight and bias must share one type among float32, float16 and bfloat16 "
            f"(got {sorted(map(str, types))})",
            op=op,
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    y = conv_forward(x, weight.unsqueeze(1), bias, [1], [k - 1], [0], [1], dim)
    return F.silu(y) if activation == "silu" else y
