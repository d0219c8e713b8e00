"""cudnn-frontend's ``cudnn.experimental``: PyTorch operators built on graphs (``ops``)."""

from . import ops  # noqa: F401
