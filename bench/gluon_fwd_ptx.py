"""Offline (no GPU) PTX fingerprints of the Gluon forward kernels, to check that a
refactor leaves a kernel's instructions unchanged: each config is compiled for sm_90a and
printed with the ptxas report and a hash of its PTX without debug lines.
Run: PYTHONPATH=src:bench python bench/gluon_fwd_ptx.py [persistent]"""
import hashlib
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_common import gluon_compile_offline, ptxas_report  # noqa: E402

# (D, BLOCK_N, stages, pingpong, causal, S, lpt)
CONFIGS = [(64, 64, 3, 0, 1, 1024, 1), (64, 128, 2, 0, 0, 1024, 0), (128, 128, 2, 1, 0, 8192, 0),
           (128, 128, 3, 0, 1, 4096, 0), (64, 128, 2, 0, 1, 1000, 0)]


def fingerprint(ck, dump=None) -> str:
    """A hash of the PTX's instructions (debug lines, comments and the debug sections left
    out); with ``dump`` the filtered text is written there too."""
    ptx = ck.asm["ptx"].split(".section\t.debug")[0]
    body = "\n".join(ln.split("//")[0].rstrip() for ln in ptx.splitlines()
                     if not re.match(r"\s*(\.loc|\.file|//|\$L__(debug|tmp|func_end))", ln))
    if dump:
        with open(dump, "w") as f:
            f.write(body)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def main():
    from opendnn.engines.attention import _gluon_kernels as G
    captured = []
    real = G.launcher
    G.launcher = lambda fn, grid, args, consts: captured.append((fn, args, consts))
    try:
        for D, bn, st, pp, causal, S, lpt in CONFIGS:
            q = torch.empty(1, 8, S, D, dtype=torch.bfloat16)
            kv = torch.empty(1, 2, S, D, dtype=torch.bfloat16)
            lse = torch.empty(1, 8, S, dtype=torch.float32)
            dims = (1, 8, 2, S, D, torch.bfloat16)
            if "persistent" in sys.argv:
                from opendnn.engines.attention import _gluon_persist_kernels as P
                P.launcher = G.launcher
                P.prepare(q, kv, kv, q, lse, dims, 0.1, bn, st, bool(causal), num_sms=132)
            else:
                G.prepare(q, kv, kv, q, lse, dims, 0.1, bn, st, bool(pp), bool(causal), bool(lpt))
            fn, args, consts = captured.pop()
            opts = {k: consts.pop(k) for k in ("num_warps", "maxnreg")}
            ck = gluon_compile_offline(fn, list(args), consts, opts)
            dump = os.environ.get("PTX_DUMP")
            dump = dump and f"{dump}-{D}-{bn}-{st}-{pp}-{causal}-{S}-{lpt}.ptx"
            print(f"D={D} BN={bn} st={st} pp={pp} causal={causal} S={S} lpt={lpt}: "
                  f"{fingerprint(ck, dump)} smem={ck.metadata.shared} "
                  f"{ptxas_report(ck.asm['ptx'])}", flush=True)
    finally:
        G.launcher = real


if __name__ == "__main__":
    main()
