"""Registers and spills (sm_90) of the norm engine's one-read kernels (PATH=4) over the
chunk / warps / PREFETCH grid that bench/norm_coop_sweep.py times, without a GPU: which
configs can keep two programs per SM (<= 64 registers at 16 warps, <= 128 at 8).
Run: PYTHONPATH=src python bench/ptxas_norm_coop.py"""
import os
import subprocess
import sys
import tempfile

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import compile_check as cc  # noqa: E402
from _norm_cases import backward_graph, forward_graph  # noqa: E402

from opendnn.engines.base import EngineConfig  # noqa: E402
from opendnn.engines.norm.engine import NormEngine  # noqa: E402

PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
_compile = triton.compile
LAST = {}


def _report(src, target=None, options=None):
    k = _compile(src, target=target, options=options)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    err = subprocess.run([PTXAS, "-arch=sm_90a", "-v", f.name, "-o", os.devnull],
                         capture_output=True, text=True).stderr
    os.unlink(f.name)
    if src.fn.__name__.endswith(("_coop", "_rows")):
        LAST["info"] = " | ".join(ln.split(":")[-1].strip() for ln in err.splitlines()
                                  if "registers" in ln or "spill" in ln)
    return k


def main():
    triton.compile = _report
    e = NormEngine()
    L = 262144
    x = torch.empty(512, L, dtype=torch.bfloat16)
    w = torch.empty(1, L, dtype=torch.bfloat16)
    st = torch.empty(512, 1)
    for kind in ("layernorm", "rmsnorm"):
        for bwd in (False, True):
            if bwd:
                g, _, _ = backward_graph(kind, x, x, w, st, st)
            else:
                g, _, _ = forward_graph(kind, x, w, w if kind == "layernorm" else None)
            g.validate()
            for block in (4096, 8192, 16384):
                for warps in (8, 16):
                    for pre in (0, 1):
                        split = L // block
                        kn = dict(PATH=4, BLOCK_L=block, BLOCK_ROWS=1, SPLIT=split,
                                  PROGRAMS=split, num_warps=warps, PREFETCH=pre)
                        cfg = EngineConfig.make(e, **kn)
                        exe = e.build(g.op_graph, cfg, cc.Target())  # sources only
                        cc.compile_launches(exe, g.op_graph)
                        print(f"{kind} {'bwd' if bwd else 'fwd'} block {block} warps {warps} "
                              f"prefetch {pre}: {LAST.get('info')}", flush=True)


if __name__ == "__main__":
    main()
