"""Infinities on the image's border through every backward-filter engine: a GEMM over
zero-filled or masked operands must not add 0 * inf for a term that does not exist, so a
tap that never reads x's last row or column keeps a finite dw, as the float64 reference
does. (The Winograd engines are left out: their transforms mix neighbouring pixels by
construction, which their numerical note says.)"""

import pytest
import torch
from _util import check_engine

import opendnn.frontend as cudnn
from opendnn.engines.base import Target
from opendnn.engines.registry import by_id

CL = torch.channels_last
# (engine id, C, K, groups, filter, stride, pad)
CASES = [
    (5, 16, 8, 1, 3, 1, 0),  # implicit-GEMM gather
    (10, 16, 8, 1, 3, 1, 0),  # split-K gather
    (12, 16, 8, 1, 3, 1, 0),  # explicit GEMM (im2col)
    (19, 16, 8, 1, 3, 1, 0),  # precomputed offsets
    (43, 16, 16, 16, 3, 1, 0),  # depthwise
    (49, 16, 16, 4, 3, 1, 0),  # grouped
    (52, 8, 8, 1, 2, 2, 0),  # patchify
]


@pytest.mark.parametrize("case", CASES, ids=[f"e{c[0]}" for c in CASES])
def test_wgrad_keeps_taps_that_never_read_an_inf_finite(case):
    eid, c, k, groups, f, s, p = case
    torch.manual_seed(eid)
    x = torch.randn(2, c, 8, 8, dtype=torch.float16)
    x[:, :, -1, :] = float("inf")
    x[:, 0, :, -1] = float("-inf")
    oh = (8 + 2 * p - f) // s + 1
    dy = torch.randn(2, k, oh, oh, dtype=torch.float16)
    x, dy = x.to(memory_format=CL), dy.to(memory_format=CL)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tdy = g.tensor_like(x), g.tensor_like(dy)
    dw = g.conv_wgrad(tx, tdy, padding=[p, p], stride=[s, s])
    dw.set_dim([k, c // groups, f, f]).set_output(True).set_data_type(cudnn.data_type.FLOAT)
    g.validate()
    knobs = by_id(eid).configs(g.op_graph, Target())[0].knob_dict
    out = check_engine(g, {tx: x, tdy: dy}, [dw], eid, knobs, n=2 * oh * oh, allow_nan=True)
    if f > s:  # overlapping windows: some taps never meet the last row / column
        assert torch.isfinite(out[dw]).any()
