"""Timing candidates for autotuning and find: the kernels' time, not the host's.

On the GPU each sample is ``batch`` back-to-back calls between two CUDA events, queued
behind a short device-side sleep: the host has enqueued every call before the GPU reaches
the first event, so the sample is the kernels' time alone (a 10 us kernel launched from
Python would otherwise time the host's launch path, which is the same for every
candidate and hides their differences). On the CPU, wall clock per call.
"""

from __future__ import annotations

import time

import torch

SLEEP_CYCLES = 2_000_000  # ~1 ms at H100 clocks: covers enqueuing 8 calls from Python


def median_ms(fn, on_cuda: bool, warmup: int = 3, iters: int = 10, batch: int = 8) -> float:
    """Median milliseconds per call of ``fn`` over ``iters`` samples."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if on_cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(SLEEP_CYCLES)
            s.record()
            for _ in range(batch):
                fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / batch)
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]
