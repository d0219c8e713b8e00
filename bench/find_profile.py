"""Where a cold benchmark-mode find spends its time (H100): one ResNet layer per process
run, cProfile of the first execute, top entries by cumulative and by own time; then the
same for the cached path (fresh graphs of the same problem, the winner from the cache).
Run: PYTHONPATH=src python bench/find_profile.py [layer] [kind]"""
import cProfile
import os
import pstats
import sys
import tempfile
import time

import torch

os.environ.setdefault("OPENDNN_CACHE_DIR", tempfile.mkdtemp())
from opendnn import backends  # noqa: E402
from opendnn.bench import conv as C  # noqa: E402


def _instrument():
    """Record the wall time of every Triton compile (any thread) and of every launcher's
    first-launch finish (loading the module, building Triton's C launcher)."""
    import threading
    import triton.compiler
    from opendnn.runtime import launch
    rec = []
    real_compile = triton.compiler.compile

    def compile_(*a, **k):
        t = time.perf_counter()
        try:
            return real_compile(*a, **k)
        finally:
            rec.append(("compile", threading.current_thread().name, t, time.perf_counter()))
    triton.compiler.compile = compile_      # JITFunction binders import it from here
    real_finish = launch.Launcher._finish_compile

    def finish(self):
        t = time.perf_counter()
        try:
            return real_finish(self)
        finally:
            rec.append(("finish", self.kernel.name, t, time.perf_counter()))
    launch.Launcher._finish_compile = finish
    from opendnn.runtime import compile_pool
    real_submit = compile_pool.submit

    def submit(*a, **k):
        t = time.perf_counter()
        fut = real_submit(*a, **k)
        if fut is not None:
            fut.add_done_callback(lambda f: rec.append(("worker job", a[1], t,
                                                        time.perf_counter())))
        return fut
    compile_pool.submit = submit
    real_init = triton.compiler.CompiledKernel._init_handles

    def init(self):
        t = time.perf_counter()
        try:
            return real_init(self)
        finally:
            rec.append(("init handles", self.name, t, time.perf_counter()))
    triton.compiler.CompiledKernel._init_handles = init
    return rec


def main(layer="l1_3x3_64", kind="fprop"):
    rec = _instrument()
    x, w, b, dy, s, p = C.layer_tensors(layer)
    backends.benchmark, backends.benchmark_limit = True, 6
    import opendnn.frontend as cudnn
    g, pack, out, buf = C._graph(kind, x, w, b, dy, s, p)
    t0 = time.perf_counter()
    bprof = cProfile.Profile()
    bprof.enable()
    g.build([cudnn.heur_mode.A])
    bprof.disable()
    t1 = time.perf_counter()
    ws = torch.empty(max(g.get_workspace_size(), 1 << 20) * 4, device="cuda", dtype=torch.uint8)
    prof = cProfile.Profile()
    prof.enable()
    g.execute({**pack, out: buf}, ws)
    torch.cuda.synchronize()
    prof.disable()
    t2 = time.perf_counter()
    print(f"{layer} {kind}: build {t1 - t0:.2f} s, first execute (find) {t2 - t1:.2f} s, "
          f"{os.cpu_count()} cpus")
    kinds = {}
    for what, who, start, end in rec:
        k = kinds.setdefault(what, [0, 0.0, None, None])
        k[0] += 1
        k[1] += end - start
        k[2] = start if k[2] is None else min(k[2], start)
        k[3] = end if k[3] is None else max(k[3], end)
    for what, (cnt, tot, start, end) in kinds.items():
        print(f"  {what}: {cnt} calls, {tot:.2f} s summed, {end - start:.2f} s from first "
              "start to last end")
    from opendnn.runtime import launch as L
    print(f"  kernels compiled again in the parent (worker key differed): {L.KEY_MISSES}")
    print("timeline (s from build start):")
    for what, who, start, end in sorted(rec, key=lambda r: r[2]):
        print(f"  {start - t0:6.2f} {end - t0:6.2f}  {what:12s} {str(who)[:70]}")
    print("build (the parent's part of the find):")
    pstats.Stats(bprof).sort_stats("cumulative").print_stats(35)
    st = pstats.Stats(prof)
    st.sort_stats("cumulative").print_stats(30)
    st.sort_stats("tottime").print_stats(15)
    # the cached path: a fresh graph of the same problem reads the winner from the cache
    for rep in range(3):
        g2, pack2, out2, buf2 = C._graph(kind, x, w, b, dy, s, p)
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        g2.build([cudnn.heur_mode.A])
        t1 = time.perf_counter()
        g2.execute({**pack2, out2: buf2}, ws)
        prof.disable()
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        print(f"cached find {rep}: build {(t1 - t0) * 1e3:.2f} ms, execute {(t2 - t1) * 1e3:.2f} ms"
              " (profiled)")
    st = pstats.Stats(prof)
    st.sort_stats("cumulative").print_stats(40)
    st.sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main(*sys.argv[1:])
