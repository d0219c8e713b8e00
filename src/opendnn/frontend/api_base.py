"""cudnn-frontend's ``cudnn.api_base``: the small helpers its kernel wrappers share.

cudnn-frontend's ``APIBase`` / ``TensorDesc`` classes are the base of its CuTe-DSL
Blackwell (sm100) kernel wrappers (``GemmSwigluSm100`` and the like), which opendnn does
not ship (their names raise NOT_SUPPORTED, see ``OPTIONAL_KERNELS`` in ``__init__``);
the helpers below are the part of the module that code outside those wrappers uses.
"""

from __future__ import annotations

import logging
import threading

_experimental_api_warnings_emitted: set[str] = set()
_experimental_api_warnings_lock = threading.Lock()


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for positive integers."""
    return (a + b - 1) // b


def is_power_of_2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def warn_experimental_api_once(logger: logging.Logger, api_name: str) -> None:
    """Log "<api_name> is an experimental API" at WARNING on ``logger``, once per name
    per process."""
    with _experimental_api_warnings_lock:
        if api_name in _experimental_api_warnings_emitted:
            return
        _experimental_api_warnings_emitted.add(api_name)
    logger.warning("%s is an experimental API", api_name)


def _reset_experimental_api_warning_registry() -> None:
    """Forget which experimental APIs have warned (for tests)."""
    with _experimental_api_warnings_lock:
        _experimental_api_warnings_emitted.clear()
