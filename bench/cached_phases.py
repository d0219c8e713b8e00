"""Where the cached find's host time goes (H100): after one cold benchmark-mode find of a
ResNet layer, CACHED fresh graphs of the same problem, each phase of build + first execute
timed with perf_counter (no profiler: at ~1 ms in all, cProfile's overhead hides it);
medians per phase, with the garbage collector on and off.
Run: PYTHONPATH=src python bench/cached_phases.py [layer] [kind] ..."""
import gc
import os
import sys
import tempfile
import time

import torch

os.environ.setdefault("OPENDNN_CACHE_DIR", tempfile.mkdtemp())
from opendnn import backends  # noqa: E402
from opendnn.bench import conv as C  # noqa: E402
from opendnn.graph.graph import Graph  # noqa: E402

CACHED = 40
PHASES = ("validate", "create_execution_plans", "check_support", "build_plans", "execute")
_rec: dict = {}


def _wrap(name):
    real = getattr(Graph, name)

    def timed(self, *a, **k):
        t = time.perf_counter()
        try:
            return real(self, *a, **k)
        finally:
            _rec.setdefault(name, []).append(time.perf_counter() - t)
    setattr(Graph, name, timed)


def main(layer="l3_3x3_256", kind="fused"):
    x, w, b, dy, s, p = C.layer_tensors(layer)
    backends.benchmark, backends.benchmark_limit = True, 6
    import opendnn.frontend as cudnn
    ws = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    g, pack, out, buf = C._graph(kind, x, w, b, dy, s, p)
    g.build([cudnn.heur_mode.A])
    g.execute({**pack, out: buf}, ws)
    torch.cuda.synchronize()
    for gc_on in (True, False):
        _rec.clear()
        total = []
        (gc.enable if gc_on else gc.disable)()
        for _ in range(CACHED):
            g2, pack2, out2, buf2 = C._graph(kind, x, w, b, dy, s, p)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            g2.build([cudnn.heur_mode.A])
            g2.execute({**pack2, out2: buf2}, ws)
            total.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
        gc.enable()
        med = {ph: sorted(v)[len(v) // 2] * 1e6 for ph, v in _rec.items()}
        print(f"{layer} {kind} gc={'on' if gc_on else 'off'}: total median "
              f"{sorted(total)[len(total) // 2] * 1e6:.0f} us, max {max(total) * 1e6:.0f} us | "
              + ", ".join(f"{ph} {med.get(ph, 0):.0f}" for ph in PHASES)
              + f" (validate x{len(_rec.get('validate', [])) // CACHED}); first five "
              + " ".join(f"{t * 1e6:.0f}" for t in total[:5]))


if __name__ == "__main__":
    for ph in PHASES:
        _wrap(ph)
    args = sys.argv[1:] or ["l3_3x3_256", "fused"]
    for i in range(0, len(args), 2):
        main(args[i], args[i + 1])
