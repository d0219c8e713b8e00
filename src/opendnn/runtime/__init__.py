"""Runtime: dual-mode Triton launching, buffer binding, autotune caches."""
