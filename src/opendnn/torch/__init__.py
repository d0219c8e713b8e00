"""opendnn for PyTorch users: autograd-aware ``torch.library`` operations, a functional
layer with ``torch.nn.functional``'s signatures, drop-in modules, ``convert(model)``,
``enable()`` (routing ``torch.nn.functional`` calls) and a ``torch.compile`` backend.

Every operation runs a kept opendnn graph per problem (``_graphs``): the same engines,
heuristics, plans and ``opendnn.backends`` switches as the graph API. PyTorch's
determinism switches, ``torch.use_deterministic_algorithms(True)`` and
``torch.backends.cudnn.deterministic = True``, act as ``opendnn.backends.deterministic``:
plans with the NONDETERMINISTIC note (split-K convolution backward, attention backward
adding dQ with atomics) are left out, and switching them takes effect at the next call.
"""

from . import functional  # noqa: E402,F401  (the custom operations register on import)
from .convert import convert, revert  # noqa: E402,F401
from .enable import clear_fallbacks, disable, enable, fallbacks, is_enabled  # noqa: E402,F401
from .modules import *  # noqa: E402,F401,F403


def __getattr__(name):
    """``opendnn.torch.compile`` (the torch.compile backend; it imports torch._dynamo, about
    a second) loads on first use; ``torch.compile(backend="opendnn")`` finds it through the
    package's torch_dynamo_backends entry point."""
    if name == "compile":
        import importlib

        return importlib.import_module(".compile", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
