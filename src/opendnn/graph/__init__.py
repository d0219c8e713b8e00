"""The operation graph: tensors, nodes, validation, plans (cudnn-frontend's lifecycle)."""

from .graph import Graph  # noqa: F401
from .tensor import Tensor  # noqa: F401
