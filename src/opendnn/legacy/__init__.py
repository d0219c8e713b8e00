"""cuDNN's descriptor API, snake_case (``cudnnConvolutionForward`` -> ``convolution_forward``),
on the same core as the graph API. See ../shared/docs/API.md §2."""

from ..enums import ConvolutionMode, DataType  # noqa: F401
from ..errors import Status, get_error_string  # noqa: F401
from .activation import *  # noqa: F401,F403

# ---- multi-head attention (legacy-mha) ----
from .attention import *  # noqa: F401,F403
from .attention_buffers import *  # noqa: F401,F403
from .attention_calls import *  # noqa: F401,F403
from .batchnorm import *  # noqa: F401,F403
from .cnn import *  # noqa: F401,F403
from .cnn import ActivationMode, ConvolutionFwdAlgo, ConvolutionFwdAlgoPerf  # noqa: F401
from .cnn_backward import *  # noqa: F401,F403
from .common import *  # noqa: F401,F403
from .common import Determinism, MathType, NanPropagation, TensorFormat, get_version  # noqa: F401
from .common import guard_handles as _guard_handles
from .dropout import *  # noqa: F401,F403
from .lrn import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .reduce_tensor import *  # noqa: F401,F403
from .softmax import *  # noqa: F401,F403
from .tensor import *  # noqa: F401,F403
from .tensor_ops import *  # noqa: F401,F403

_guard_handles(globals())  # every call taking a handle refuses None or a non-handle first
