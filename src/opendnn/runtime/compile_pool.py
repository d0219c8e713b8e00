"""Triton compiles in worker processes: the parallel half of benchmark mode's find.

Compiling a Triton kernel spends roughly a third of its time in Python (the AST to IR
code generator) holding the GIL, so threads compile only ~2-3 kernels at a time however
many cores there are (H100 host, 16 cores: 32 kernels in 10.4 s on 16 threads). Worker
processes compile truly in parallel. Each worker (``_compile_worker.py``, started by file
path with the same interpreter and environment, importing only Triton) compiles a kernel
into Triton's on-disk cache; the parent then asks Triton for the kernel as usual and
finds it there (the cache key is the kernel's source, specialization, options and
target, identical on both sides).

A job names the kernel's source file, its function and Triton's specialization data,
which the parent captures without compiling through Triton's ``jit_cache_hook``. The
workers are an accelerator only: a kernel a worker fails to compile (one whose module
cannot be imported alone, say) is compiled in the parent, where a genuine error raises.
``OPENDNN_COMPILE_WORKERS=0`` turns the workers off (threads are used instead). Workers
store only the binary and its metadata (``TRITON_STORE_BINARY_ONLY``, which is not part
of Triton's cache key): a kernel they compiled has no IRs in ``kernel.asm``.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_compile_worker.py")

_lock = threading.Lock()
_state: dict = {}


def workers_wanted() -> int:
    v = os.environ.get("OPENDNN_COMPILE_WORKERS", "")
    if v.strip():
        return max(0, int(v))
    return min(16, os.cpu_count() or 1)


def _serve(proc, jobs: queue.Queue) -> None:
    """One feeder thread per worker: a job out, its answer back, until the pipe breaks.
    The last feeder to lose its worker answers every queued job with an error (their
    kernels then compile in the parent) and marks the pool gone."""
    while True:
        job, fut = jobs.get()
        try:
            proc.stdin.write(json.dumps(job) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            if not line:
                raise OSError("compile worker exited")
            ans = json.loads(line)
        except (OSError, ValueError) as e:
            fut.set_result({"error": f"compile worker failed: {e}"})
            break
        fut.set_result(ans)
    with _lock:
        _state["live"] -= 1
        if _state["live"] == 0:
            _state["jobs"] = None
            while not jobs.empty():
                jobs.get()[1].set_result({"error": "no compile worker left"})


def _start(target: tuple | None) -> queue.Queue | None:
    n = workers_wanted()
    if n == 0:
        return None
    jobs: queue.Queue = queue.Queue()
    # binary only: the parent's cache hit then reads the cubin and its metadata, not the
    # kernel's IRs (megabytes of text for the long generated kernels)
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_STORE_BINARY_ONLY="1")
    warm = [str(v) for v in target] if target else []
    started = 0
    for _ in range(n):
        try:
            proc = subprocess.Popen(
                [sys.executable, WORKER, *warm],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
        except OSError:
            break
        threading.Thread(
            target=_serve, args=(proc, jobs), daemon=True, name="opendnn-compile-feeder"
        ).start()
        _state.setdefault("procs", []).append(proc)
        started += 1
    _state["live"] = started
    return jobs if started else None


def shutdown() -> None:
    """Stop the workers (they exit at the end of their input); the next submit starts
    fresh ones with the environment of that moment."""
    with _lock:
        for proc in _state.get("procs", []):
            try:
                proc.stdin.close()
                proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
        _state.clear()


def start(arch: int, warp: int) -> None:
    """Start the workers now (each warms up with a tiny compile for this target) if they
    are not running: called as soon as plans for a CUDA device are listed, so the
    workers are ready when the builds send their first kernels."""
    with _lock:
        if "jobs" not in _state:
            _state["jobs"] = _start((arch, warp))


def submit(path: str, name: str, spec: str, arch: int, warp: int) -> Future | None:
    """Queue one compile; the future's result is the worker's answer ({"ok": True} or
    {"error": text}). None when no worker can run (the caller compiles itself)."""
    with _lock:
        if "jobs" not in _state:
            _state["jobs"] = _start((arch, warp))
        jobs = _state["jobs"]
        if jobs is None:
            return None
        fut: Future = Future()
        jobs.put(({"path": path, "name": name, "spec": spec, "arch": arch, "warp": warp}, fut))
    return fut


def capture_spec(jit_fn, args: list, grid: tuple, constexprs: dict):
    """(compiled kernel, None) when ``jit_fn`` already holds this specialization in
    memory, else (None, Triton's specialization data) -- nothing is compiled."""
    from triton import knobs

    box = {}

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        box["spec"] = compile["specialization_data"]
        return True  # skip the compile: a worker does it

    old = knobs.runtime.jit_cache_hook
    knobs.runtime.jit_cache_hook = hook
    try:
        k = jit_fn.warmup(*args, grid=grid, **constexprs)
    finally:
        knobs.runtime.jit_cache_hook = old
    return (k, None) if k is not None else (None, box.get("spec"))
