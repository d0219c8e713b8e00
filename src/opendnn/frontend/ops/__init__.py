"""cudnn-frontend's ``cudnn.ops``: PyTorch-facing operations (``causal_conv1d``)."""

from .causal_conv1d import causal_conv1d  # noqa: F401
