"""The benchmark runner's one timer: the median of CUDA-event times, the cache emptied first.

Every family times its engines and PyTorch's with ``bench(fn)``, so both sides of a ratio
and the copy floor are measured the same way. Before each timed call the 50 MB L2 is
emptied by streaming a 256 MB buffer through it, in one of two ways:

- ``clean`` (the default): the buffer is *read* (a max over it). The timed call starts on
  a cold cache holding no dirty lines, so it moves only its own bytes: the inputs once
  from DRAM, the outputs once back.
- ``dirty``: the buffer is *written* (``zero_``), as ``triton.testing.do_bench`` flushes.
  The timed call then also writes back up to 50 MB of the flush's dirty lines. That adds
  ~2% to the 2 GiB copy that measures the floor but ~10% to a 134 MB reduction (measured
  on the H100: bf16 8192^2 column sums 2437 GB/s dirty, 2718 clean; a same-size copy
  2851 / 3049), so fractions of the floor taken this way charge small kernels for the
  flush's traffic. Kept to compare with earlier results (``--flush dirty``).

The number of timed calls follows the call's length as in do_bench: ``rep`` ms worth,
at least 10 and at most 1000, after ``warmup`` ms of untimed calls.
"""

from __future__ import annotations

import torch

MODES = ("clean", "dirty")
_state = {"mode": "clean", "buffer": None}


def set_flush(mode: str) -> None:
    """Choose how the cache is emptied before each timed call (``clean`` or ``dirty``)."""
    if mode not in MODES:
        raise ValueError(f"bench flush mode {mode!r}: choose one of {', '.join(MODES)}")
    _state["mode"] = mode


def flush_mode() -> str:
    return _state["mode"]


def _flush() -> None:
    buf = _state["buffer"]
    if buf is None:
        buf = _state["buffer"] = torch.empty(256 * 2**20 // 4, device="cuda")
        buf.normal_()
    if _state["mode"] == "clean":
        buf.max()
    else:
        buf.zero_()


def _median(fn, n: int) -> float:
    """Median ms of ``n`` calls of ``fn``, each between two events after a flush."""
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(n)
    ]
    for a, b in events:
        _flush()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in events)
    return times[len(times) // 2]


def bench(fn, rep: float = 100, warmup: float = 25) -> float:
    """Median milliseconds of ``fn()`` between two CUDA events, the L2 emptied before each."""
    fn()
    est = max(_median(fn, 5), 1e-3)
    for _ in range(max(1, int(warmup / est))):
        fn()
    return _median(fn, max(10, min(1000, int(rep / est))))
