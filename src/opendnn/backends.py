"""Switches like ``torch.backends.cudnn``: module attributes read at plan-selection time.

- ``benchmark``: time candidate plans on first use of a problem and cache the winner.
  Switching it on (on a machine with a CUDA device) also starts the compile worker
  processes in the background, so that the first find does not wait for their start-up.
- ``deterministic``: only engines without the NONDETERMINISTIC note.
- ``allow_tf32``: float32 matmul/convolution may round inputs to TF32 on tensor cores.
- ``benchmark_limit``: at most this many candidates are timed (0 = all).
- ``workspace_limit``: plans needing more workspace bytes are skipped (None = no limit).

Bounds on what a process and its on-disk cache keep (least recently used goes first):

- ``plan_cache_size``: built executables (compiled kernels and launch set-up) per process.
- ``kernel_cache_size``: generated kernel modules imported per process.
- ``legacy_cache_size``: graphs the descriptor API keeps per call kind.
- ``disk_cache_max_bytes`` / ``disk_cache_max_age_days``: what ``opendnn cache trim``
  (and the sweep a process runs once, in the background, when it first writes the cache)
  keeps of the generated kernels on disk.
"""

import sys
import threading
import types

benchmark: bool = False
deterministic: bool = False
allow_tf32: bool = False
benchmark_limit: int = 10
workspace_limit: int | None = None
plan_cache_size: int = 256
kernel_cache_size: int = 1024
legacy_cache_size: int = 256
disk_cache_max_bytes: int = 1 << 30
disk_cache_max_age_days: float = 30.0


def _start_workers() -> None:
    """Start the compile workers (runtime.compile_pool) for the current CUDA device. Only a
    head start: if it fails, the first find starts them itself (and reports a failure)."""
    try:
        import torch

        if torch.cuda.is_available():
            from .runtime.launch import start_compile_workers

            start_compile_workers()
    except Exception:  # noqa: BLE001 -- the find starts the workers again and reports
        pass


class _Switches(types.ModuleType):
    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name == "benchmark" and value:
            threading.Thread(
                target=_start_workers, daemon=True, name="opendnn-start-workers"
            ).start()


sys.modules[__name__].__class__ = _Switches
