"""``torch.nn.functional`` on opendnn: the same names, signatures, defaults and semantics,
each running opendnn graphs through the ``opendnn::*`` custom operations (autograd,
fake tensors for ``torch.compile``, autocast).

A case opendnn does not take raises ``opendnn.errors.GraphNotSupportedError`` with the
reason; nothing here falls back to PyTorch by itself. ``opendnn.torch.enable()``, the
drop-in modules and the ``opendnn`` compile backend catch exactly that error and run
PyTorch's function instead (logged at ``OPENDNN_LOG=info``).

    conv1d conv2d conv3d                      conv.py
    linear matmul                             linear.py
    batch_norm layer_norm rms_norm group_norm instance_norm        norm.py
    max_pool1d..3d avg_pool1d..3d adaptive_avg_pool1d..3d          pool.py
    relu relu6 hardtanh leaky_relu elu gelu silu sigmoid tanh softplus mish
    hardsigmoid hardswish                     activation.py
    softmax log_softmax                       softmax.py
    dropout                                   dropout.py
    scaled_dot_product_attention              attention.py
"""

from .activation import (
    elu,
    gelu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    mish,
    relu,
    relu6,
    sigmoid,
    silu,
    softplus,
    tanh,
)
from .attention import scaled_dot_product_attention
from .conv import conv1d, conv2d, conv3d
from .dropout import dropout
from .linear import linear, matmul
from .norm import batch_norm, group_norm, instance_norm, layer_norm, rms_norm
from .pool import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    max_pool1d,
    max_pool2d,
    max_pool3d,
)
from .softmax import log_softmax, softmax

__all__ = [
    "conv1d",
    "conv2d",
    "conv3d",
    "linear",
    "matmul",
    "batch_norm",
    "layer_norm",
    "rms_norm",
    "group_norm",
    "instance_norm",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "relu",
    "relu6",
    "hardtanh",
    "leaky_relu",
    "elu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "softplus",
    "mish",
    "hardsigmoid",
    "hardswish",
    "softmax",
    "log_softmax",
    "dropout",
    "scaled_dot_product_attention",
]
