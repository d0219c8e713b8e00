"""Registers and spills of the norm engine's kernels (#26) for sm_90, on a machine with no
GPU: compiles every config the engine lists for the bench shapes and runs Triton's own
``ptxas -v`` on the PTX. The configs' warps come from this report (a backward tile of
16 elements a thread spilled; 8 elements a thread stays near 60 registers).
Run: PYTHONPATH=src python bench/ptxas_norm.py"""
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

PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
_compile = triton.compile


def _report(src, target=None, options=None):
    k = _compile(src, target=target, options=options)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    err = subprocess.run([PTXAS, "-arch=sm_90a", "-v", f.name, "-o", os.devnull],
                         capture_output=True, text=True).stderr
    os.unlink(f.name)
    info = [ln.split(":")[-1].strip() for ln in err.splitlines()
            if "registers" in ln or "spill" in ln]
    print(f"    {src.fn.__name__[-14:]:14s} warps={options.get('num_warps')}: "
          + " | ".join(info))
    return k


def graphs():
    for rows, width in ((8192, 8192), (2048, 65536), (512, 262144)):
        x = torch.empty(rows, width, dtype=torch.bfloat16)
        w = torch.empty(1, width, dtype=torch.bfloat16)
        st = torch.empty(rows, 1)
        for kind in ("layernorm", "rmsnorm"):
            g, _, _ = forward_graph(kind, x, w, w if kind == "layernorm" else None)
            yield f"{kind} fwd {width}", g, [26]
            g, _, _ = backward_graph(kind, x, x, w, st, st)
            yield f"{kind} bwd {width}", g, [26]


if __name__ == "__main__":
    cc.triton.compile = _report
    sys.exit(1 if cc.run_checks(graphs(), limit=None) else 0)
