"""The on-disk caches under threads, processes and kill -9.

- threads: first-time calls of distinct problems from 8 threads at once (each generates,
  writes and imports a kernel, and launches it in the interpreter), pairs of threads
  racing on the same kernel file;
- the interpreter: launches of one kernel from 4 threads at once;
- imports: generated modules decorated for both modes from several threads at once;
- processes: 8 processes storing 6 overlapping autotune problems (13 distinct) in one
  cache folder keep all 13, and a process sees what others stored since it last read;
- kill -9: writers killed at random moments leave a readable cache holding every entry
  they finished, and the first write of a later process sweeps their orphaned
  temporaries;
- bounds: the imported kernel modules stay within ``backends.kernel_cache_size``.

Case counts scale with ``--reliability-budget`` (CI runs 1). Every failure message
starts with a one-line reproduction.
"""

from __future__ import annotations

import linecache
import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
from _reliability import SRC, repro  # noqa: E402

import opendnn.torch.functional as F
from opendnn import backends
from opendnn.runtime import autotune, launch

_repro = repro


def _race(threads: int, work) -> bool:
    """Run ``work(t)`` on ``threads`` threads released together; True if one still runs
    after 300 s (a hang)."""
    start = threading.Barrier(threads)

    def run(t):
        start.wait()
        work(t)

    pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for p in pool:
        p.start()
    for p in pool:
        p.join(timeout=300)
    return any(p.is_alive() for p in pool)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder for the test, and no autotune results in memory."""
    d = tmp_path / "cache"
    monkeypatch.setenv("OPENDNN_CACHE_DIR", str(d))
    autotune.forget_memory()
    yield d
    autotune.forget_memory()


def _bounds(index: int) -> tuple[float, float]:
    """hardtanh bounds unique to ``index`` (a new generated kernel each), exact in
    float32, so that the result must equal torch's bit for bit."""
    return -1.0 - index / 4096, 1.0 + index / 2048


# ---------------------------------------------------------------------------------------
def test_threads_first_calls(request, cache):
    """8 threads, each making first-time calls of its own problems; threads 2k and 2k+1
    make the same ones at the same moment (same kernel file, same module)."""
    budget = request.config.getoption("--reliability-budget")
    threads, per_thread = 8, 24 * budget
    base = random.randrange(1, 1 << 20)  # problems new to this process
    failures: list[str] = []

    def work(t: int):
        gen = torch.Generator().manual_seed(base + t)
        for i in range(per_thread):
            index = base + (t // 2) * per_thread + i
            lo, hi = _bounds(index)
            x = torch.randn(16 + i % 7, generator=gen) * 3
            try:
                y = F.hardtanh(x, lo, hi)
            except Exception as e:  # noqa: BLE001 -- every failure is reported
                failures.append(
                    f"thread {t} call {i} bounds ({lo}, {hi}): {type(e).__name__}: {str(e)[:200]}"
                )
                continue
            want = torch.nn.functional.hardtanh(x, lo, hi)
            if not torch.equal(y, want):
                failures.append(
                    f"thread {t} call {i} bounds ({lo}, {hi}): max error "
                    f"{(y - want).abs().max().item()}"
                )

    assert not _race(threads, work), _repro(request, base=base) + ": a thread hangs"
    assert not failures, (
        _repro(request, base=base, threads=threads, per_thread=per_thread)
        + f": {len(failures)} of {threads * per_thread} calls failed; "
        + "; ".join(failures[:5])
    )


def test_threads_share_the_interpreter(request, cache):
    """One kernel launched from 4 threads at once: each launch must run alone in
    Triton's interpreter (it patches triton.language for the kernel it runs)."""
    budget = request.config.getoption("--reliability-budget")
    threads, calls = 4, 10 * budget
    x = torch.linspace(-4, 4, 257)
    want = torch.tanh(x)
    F.tanh(x)  # built once; the threads only launch
    failures: list[str] = []

    def work(t: int):
        for i in range(calls):
            try:
                y = F.tanh(x)
            except Exception as e:  # noqa: BLE001 -- every failure is reported
                failures.append(f"thread {t} call {i}: {type(e).__name__}: {str(e)[:200]}")
                continue
            if not torch.allclose(y, want, rtol=0, atol=1e-6):
                failures.append(f"thread {t} call {i}: max error {(y - want).abs().max().item()}")

    assert not _race(threads, work), _repro(request) + ": a thread hangs"
    assert not failures, (
        _repro(request, threads=threads, calls=calls)
        + f": {len(failures)} of {threads * calls} launches failed; "
        + "; ".join(failures[:5])
    )


KERNEL = """
@triton.jit
def affine_{tag}(X, Y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    tl.store(Y + offs, tl.load(X + offs, mask=mask) * 2.0 + {tag}.0, mask=mask)
"""


def test_imports_decorate_for_their_mode(request, cache):
    """Generated modules imported from several threads at once, half of them for the
    interpreter: each must decorate for its own mode although TRITON_INTERPRET is one
    process-wide switch."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    budget = request.config.getoption("--reliability-budget")
    threads, per_thread = 4, 100 * budget
    folder = cache / "imports"
    folder.mkdir(parents=True)
    path = folder / "affine.py"
    path.write_text("import triton\nimport triton.language as tl\n" + KERNEL.format(tag=1))
    failures: list[str] = []

    def work(t: int):
        interpret = t % 2 == 1
        want = InterpretedFunction if interpret else JITFunction
        for i in range(per_thread):
            try:
                mod = launch._exec_module(str(path), f"opendnn_test_import_{t}_{i}", interpret)
                sys.modules.pop(f"opendnn_test_import_{t}_{i}", None)
                got = type(mod.affine_1)
            except Exception as e:  # noqa: BLE001 -- every failure is reported
                failures.append(f"thread {t} import {i}: {type(e).__name__}: {e}")
                continue
            if not issubclass(got, want):
                failures.append(
                    f"thread {t} import {i} (interpret={interpret}): decorated as {got.__name__}"
                )

    assert not _race(threads, work), _repro(request) + ": a thread hangs"
    assert not failures, (
        _repro(request, threads=threads, per_thread=per_thread)
        + f": {len(failures)} of {threads * per_thread} imports wrong; "
        + "; ".join(failures[:5])
    )


# ---------------------------------------------------------------------------------------
PROCESS_WORKER = textwrap.dedent("""
    import os, sys
    from opendnn.runtime import autotune
    me = int(sys.argv[1])
    print("ready", flush=True)
    for line in sys.stdin:
        os.environ["OPENDNN_CACHE_DIR"] = line.strip()
        autotune.forget_memory()
        for p in range(me, me + 6):              # process k: problems k .. k+5
            autotune.store(f"problem-{p}", "cpu", [f"plan-{p}", "reference"],
                           [0.1 * p, 1.0])
        print("done", flush=True)
""")


def _read_line(proc, timeout: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline().strip() if ready else "<timeout>"


def test_processes_keep_each_others_tuning(request, tmp_path, monkeypatch):
    """8 processes store 6 overlapping problems each (13 distinct) in one cache folder,
    all at once, 3 times: every time all 13 entries must be there. A process that read
    the file before the others stored must see their entries too."""
    budget = request.config.getoption("--reliability-budget")
    n_proc, trials = 8, 3 * budget
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS_WORKER, str(k)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(n_proc)
    ]
    found = []
    try:
        for p in procs:
            assert _read_line(p, 120) == "ready", _repro(request) + ": a worker did not start"
        for trial in range(trials):
            folder = tmp_path / f"trial{trial}"
            monkeypatch.setenv("OPENDNN_CACHE_DIR", str(folder))
            autotune.forget_memory()
            assert autotune.lookup("problem-0", "cpu") is None  # read before the others
            for p in procs:
                p.stdin.write(f"{folder}\n")
                p.stdin.flush()
            for p in procs:
                assert _read_line(p, 120) == "done", (
                    _repro(request, trial=trial) + ": a worker did not finish"
                )
            seen = [k for k in range(13) if autotune.lookup(f"problem-{k}", "cpu")]
            autotune.forget_memory()
            on_disk = [k for k in range(13) if autotune.lookup(f"problem-{k}", "cpu")]
            found.append(len(on_disk))
            assert on_disk == list(range(13)), (
                _repro(request, trial=trial, processes=n_proc)
                + f": the file holds problems {on_disk} of 0..12 (found per trial: {found})"
            )
            assert seen == list(range(13)), (
                _repro(request, trial=trial) + f": a lookup made before the other processes "
                f"stored sees only {seen} afterwards"
            )
            assert autotune.lookup("problem-12", "cpu")["order"] == ["plan-12", "reference"]
        request.node.user_properties.append(("entries_found_per_trial", found))
    finally:
        for p in procs:
            p.stdin.close()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


# ---------------------------------------------------------------------------------------
SWEEP_CHECK = textwrap.dedent("""
    import threading
    from opendnn.runtime import autotune
    autotune.store("after-the-kills", "cpu", ["plan"], [1.0])
    for t in threading.enumerate():
        if t is not threading.current_thread() and t.daemon:
            t.join(timeout=60)
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="kills forked writers (POSIX only)")
def test_kill_9_during_writes(request, cache):
    """50 writers (forked: no start-up cost) store entries in a loop and are killed with
    SIGKILL at random moments. Afterwards the cache loads with every entry a writer
    finished; the first store of a later process removes the temporaries the killed
    writers left (aged past the sweep age with os.utime), in the cache folder and in
    kernels/, and leaves young ones (a live writer's) alone."""
    budget = request.config.getoption("--reliability-budget")
    runs = 50 * budget
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    autotune.store("before-the-kills", "cpu", ["plan"], [1.0])  # the folder exists
    autotune.forget_memory()
    completed: list[str] = []
    for run in range(runs):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the writer
            try:
                os.close(r)
                i = 0
                while True:
                    key = f"kill-{run}-{i}"
                    autotune.store(key, "cpu", [f"plan-{i}"], [float(i)])
                    os.write(w, (key + "\n").encode())
                    i += 1
            finally:
                os._exit(0)
        os.close(w)
        time.sleep(rnd.uniform(0.0, 0.03))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(r) as f:
            completed += f.read().split()
    autotune.forget_memory()
    with _no_warning():
        missing = [k for k in completed if autotune.lookup(k, "cpu") is None]
    assert not missing, (
        _repro(request, seed=seed, runs=runs)
        + f": {len(missing)} of {len(completed)} finished entries lost, "
        f"e.g. {missing[:3]}"
    )
    assert autotune.lookup("before-the-kills", "cpu") is not None, _repro(request, seed=seed)

    folder = launch.cache_dir()
    kernels = os.path.join(folder, "kernels")
    os.makedirs(kernels, exist_ok=True)
    orphans = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".tmp")]
    planted = os.path.join(kernels, "k_0123456789abcdef01234567.py.1.2.deadbeef.tmp")
    young = os.path.join(folder, "autotune-v1.json.99.1.cafe0001.tmp")
    for p in (planted, young):
        with open(p, "w") as f:
            f.write("{")
    old = time.time() - 3600
    for p in orphans + [planted]:
        os.utime(p, (old, old))
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", SWEEP_CHECK], env=env, check=True, timeout=300)
    left = [p for p in orphans + [planted] if os.path.exists(p)]
    assert not left, (
        _repro(request, seed=seed, runs=runs)
        + f": {len(left)} orphaned temporaries older than the sweep age left "
        f"({len(orphans)} from the killed writers + 1 planted), e.g. {left[:3]}"
    )
    assert os.path.exists(young), _repro(request, seed=seed) + ": a young temporary was swept"
    request.node.user_properties.append(
        ("kill9", {"runs": runs, "finished": len(completed), "orphans": len(orphans)})
    )


class _no_warning:
    """Fails the block if it warns (the cache must load cleanly after the kills)."""

    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings(record=True)
        self._seen = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        opendnn_warnings = [str(w.message) for w in self._seen if "opendnn" in str(w.message)]
        assert not opendnn_warnings, f"loading the cache warned: {opendnn_warnings[:2]}"
        return False


# ---------------------------------------------------------------------------------------
def test_imported_modules_are_bounded(request, cache):
    """At most backends.kernel_cache_size generated modules stay imported, evicted ones
    leave sys.modules, and a kernel whose module was evicted still runs."""
    backends.kernel_cache_size = 3
    base = random.randrange(1 << 20)
    kernels = [
        launch.kernel_from_source(KERNEL.format(tag=base + k), f"affine_{base + k}")
        for k in range(6)
    ]
    x = torch.arange(10, dtype=torch.float32)
    for k, kern in enumerate(kernels):
        y = torch.empty_like(x)
        kern((1,), x, y, 10, BLOCK=16)
        assert torch.equal(y, x * 2 + base + k), _repro(request, base=base, kernel=k)
    generated = [m for m in sys.modules if m.startswith("opendnn_generated_")]
    assert len(launch._modules) <= 3, (
        _repro(request, base=base) + f": {len(launch._modules)} modules kept, limit 3"
    )
    assert len(generated) <= 3, _repro(request, base=base) + f": {len(generated)} in sys.modules"
    sources = [
        p
        for p, e in linecache.cache.items()
        if p.startswith(launch.kernel_dir()) and len(e) == 4 and e[1] is None
    ]
    assert len(sources) <= 3, _repro(request, base=base) + f": {len(sources)} sources kept"
    y = torch.empty_like(x)
    kernels[0]((1,), x, y, 10, BLOCK=16)  # its module was evicted long ago
    assert torch.equal(y, x * 2 + base), _repro(request, base=base) + ": evicted kernel broke"
