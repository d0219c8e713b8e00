"""Compile workers (runtime.compile_pool): a kernel compiled for sm_90 in a worker process
lands in Triton's on-disk cache; a kernel that cannot compile comes back as an error
(the parent then compiles it itself and raises). No GPU needed: Triton compiles for a
named target."""

import json
import os

import pytest
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import serialize_specialization_data

from opendnn.runtime import compile_pool
from opendnn.runtime.launch import kernel_from_source

GOOD = """@triton.jit
def add_one(X, Y, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + i, tl.load(X + i) + 1.0)
"""
BAD = """@triton.jit
def never(X, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK < 0, "this kernel never compiles")
"""


def _spec(name: str, signature: dict, constants: dict) -> str:
    opts = make_backend(GPUTarget("cuda", 90, 32)).parse_options({})
    attrs = {(0,): [["tt.divisibility", 16]]}
    return serialize_specialization_data(name, signature, constants, attrs, opts, "key")


@pytest.fixture
def pool(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("OPENDNN_COMPILE_WORKERS", "1")
    compile_pool.shutdown()
    yield tmp_path / "triton"
    compile_pool.shutdown()


def test_worker_compiles_into_triton_cache(pool):
    k = kernel_from_source(GOOD, "add_one").compiled
    spec = _spec("add_one", {"X": "*fp32", "Y": "*fp32", "BLOCK": "constexpr"}, {(2,): 128})
    fut = compile_pool.submit(k.fn.__code__.co_filename, "add_one", spec, 90, 32)
    ans = fut.result(timeout=300)
    assert ans["ok"] is True and isinstance(ans["hash"], str)
    files = [f for _, _, fs in os.walk(pool) for f in fs]
    assert any(f.endswith(".cubin") for f in files), files


def test_worker_reports_a_compile_error(pool):
    k = kernel_from_source(BAD, "never").compiled
    spec = _spec("never", {"X": "*fp32", "BLOCK": "constexpr"}, {(1,): 16})
    ans = compile_pool.submit(k.fn.__code__.co_filename, "never", spec, 90, 32).result(timeout=300)
    assert "this kernel never compiles" in ans["error"]


def test_no_workers_when_turned_off(monkeypatch):
    monkeypatch.setenv("OPENDNN_COMPILE_WORKERS", "0")
    compile_pool.shutdown()
    assert compile_pool.workers_wanted() == 0
    assert compile_pool.submit("x.py", "f", json.dumps({}), 90, 32) is None
    compile_pool.shutdown()
