"""cudnn-frontend's ``cudnn.experimental.ops``: ``sdpa.scaled_dot_product_attention``."""

from . import sdpa  # noqa: F401
