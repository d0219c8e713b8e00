"""cudnn-frontend's ``cudnn.experimental.ops``: ``sdpa.scaled_dot_product_attention`` and
``moe_grouped_matmul`` (``from cudnn.experimental.ops import moe_grouped_matmul``)."""

from . import sdpa  # noqa: F401
from .moe_grouped_matmul import moe_grouped_matmul  # noqa: F401
from .sdpa import scaled_dot_product_attention  # noqa: F401

__all__ = ["scaled_dot_product_attention", "moe_grouped_matmul"]
