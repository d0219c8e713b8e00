"""Compile the pooling engines' kernels (#34 forward, #35 backward) for sm_90 on a machine
with no GPU, with the helpers of ``compile_check.py``: max (with and without the Index)
and both average modes, forward and backward (from the Index and from X), NCHW / NHWC,
2-D and 3-D, global pooling (run-time window loops), bf16 / fp32, every config the
engines list.
Run: PYTHONPATH=src python bench/compile_check_pool.py"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opendnn.frontend as cudnn  # noqa: E402
from compile_check import run_checks  # noqa: E402

M = cudnn.resample_mode
DT = {torch.bfloat16: cudnn.data_type.BFLOAT16, torch.float32: cudnn.data_type.FLOAT}


def _tensor(g, t, dt=None):
    return g.tensor(list(t.shape), list(t.stride()), dt or DT[t.dtype])


def graphs():
    cases = (((64, 256, 56, 56), (3, 3), (2, 2), (1, 1)),
             ((8, 3, 33, 47), (2, 2), (2, 2), (0, 0)),
             ((2, 16, 9, 10, 11), (3, 3, 3), (2, 2, 2), (1, 1, 1)),
             ((8, 512, 14, 14), (14, 14), (1, 1), (0, 0)))       # global: run-time loops
    for dt in (torch.bfloat16, torch.float32):
        for shape, w, s, p in cases:
            for fmt in ("nchw", "nhwc"):
                x = torch.empty(shape, dtype=dt)
                if fmt == "nhwc":
                    x = x.contiguous(memory_format=torch.channels_last if len(shape) == 4
                                     else torch.channels_last_3d)
                for mode in ("MAXPOOL", "AVGPOOL_INCLUDE_PADDING", "AVGPOOL_EXCLUDE_PADDING"):
                    label = f"{mode[:7]} {shape} {fmt} {str(dt)[6:]}"
                    g = cudnn.pygraph()
                    ty, tix = g.resample(_tensor(g, x), M[mode], w, s, padding=p,
                                         generate_index=mode == "MAXPOOL")
                    ty.set_output(True)
                    yield f"fwd {label}", g, [34]
                    g.validate()
                    y = torch.empty_strided(ty.get_dim(), ty.get_stride(), dtype=dt)
                    for source in (("index", "x") if mode == "MAXPOOL" else (None,)):
                        g = cudnn.pygraph()
                        kw = {}
                        if source == "index":
                            kw["index"] = _tensor(g, y, tix.get_data_type())
                        elif source == "x":
                            kw["input"] = _tensor(g, x)
                        dx = g.resample_backward(_tensor(g, y), M[mode], w, s, padding=p, **kw)
                        dx.set_output(True).set_dim(list(shape)).set_stride(list(x.stride()))
                        yield f"bwd {source} {label}", g, [35]


if __name__ == "__main__":
    sys.exit(1 if run_checks(graphs(), limit=None) else 0)
