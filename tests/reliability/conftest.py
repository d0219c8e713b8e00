"""Benchmark mode with a cache folder of the test's own, for the reliability tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def benchmark_mode(tmp_path, monkeypatch):
    """``opendnn.backends.benchmark`` on, with an empty autotune cache of the test's own."""
    from opendnn import backends
    from opendnn.runtime import autotune

    monkeypatch.setenv("OPENDNN_CACHE_DIR", str(tmp_path))
    autotune.forget_memory()
    backends.benchmark = True
    yield
    backends.benchmark = False
    autotune.forget_memory()
