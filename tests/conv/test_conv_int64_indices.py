"""Tensors spanning 2**31 elements or more make the convolution kernels address in int64.
Their pixel indices are still split into (n, o_0, ..) in int32 (Triton 3.6 on sm_90
miscompiled constant divisions of int64 indices) and widened afterwards. The interpreter
runs those code paths on small problems with the int64 threshold lowered; every engine
that splits a pixel index is checked against the float64 reference, and its source is
checked to split before it widens."""

import re

import pytest
import torch
import torch.nn.functional as F
from _util import assert_close, check_engine, conv_backward_graph, seed_for
from _util import graph_tensor as _tensor

import opendnn.frontend as cudnn
from opendnn.engines.conv import analysis

# (kind, engine id, knobs, x dims, K, filter, stride, pad, groups)
CASES = [
    ("fprop", 3, None, (2, 6, 7, 5), 5, (3, 3), (1, 1), (1, 1), 1),  # gather implicit GEMM
    ("dgrad", 4, None, (2, 6, 7, 5), 5, (3, 3), (2, 1), (1, 1), 1),  # gather dgrad
    ("wgrad", 5, None, (2, 6, 7, 5), 5, (3, 3), (1, 1), (1, 1), 1),  # gather wgrad
    ("wgrad", 49, None, (2, 8, 6, 5), 8, (3, 3), (1, 1), (1, 1), 4),  # grouped wgrad
    ("wgrad", 43, None, (2, 6, 7, 5), 6, (3, 3), (1, 1), (1, 1), 6),  # depthwise wgrad
    ("wgrad", 52, {"SPLIT": 3}, (2, 3, 8, 6), 4, (2, 2), (2, 2), (0, 0), 1),  # patchify
    ("wgrad", 19, None, (2, 6, 7, 5), 5, (3, 3), (1, 1), (1, 1), 1),  # tables' wgrad
    ("dgrad", 57, None, (2, 3, 7, 5), 5, (3, 3), (2, 1), (1, 1), 1),  # col2im dgrad
]


def _run(case, request):
    kind, eid, knobs, xdims, k, filt, stride, pad, groups = case
    gen = torch.Generator().manual_seed(seed_for(request.node.name))
    x = torch.randn(xdims, generator=gen)
    w = torch.randn((k, xdims[1] // groups, *filt), generator=gen) * 0.3
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    y = F.conv2d(xr, wr, stride=stride, padding=pad, groups=groups)
    dy = torch.randn(y.shape, generator=gen)
    dil = (1, 1)
    if kind == "fprop":
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        tx, tw = _tensor(g, x), _tensor(g, w)
        out = g.conv_fprop(tx, tw, padding=list(pad), stride=list(stride))
        out.set_dim(list(y.shape)).set_stride(list(dy.stride())).set_output(True)
        out.set_data_type(cudnn.data_type.FLOAT)
        feeds, ref, n = {tx: x, tw: w}, y.detach(), w[0].numel()
    else:
        dx, dw = torch.autograd.grad(y, (xr, wr), dy.double())
        if kind == "dgrad":
            g, feeds, out = conv_backward_graph(
                "dgrad", dy, w, x.shape, x.stride(), stride, pad, pad, dil
            )
            ref, n = dx, k * w[0, 0].numel()
        else:
            g, feeds, out = conv_backward_graph(
                "wgrad", x, dy, w.shape, w.stride(), stride, pad, pad, dil
            )
            ref, n = dw, dy[:, 0].numel()
    got = check_engine(g, feeds, [out], eid, knobs, n=n)
    assert_close(got[out], ref, torch.float32, n=n)
    return g


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_int64_addressing_splits_pixels_in_int32(case, request, monkeypatch):
    from opendnn.runtime import launch

    monkeypatch.setattr(analysis, "INT64_SPAN", 16)
    sources = []
    ensure = launch._ensure_file

    def capture(path, data):
        sources.append(data.decode())
        return ensure(path, data)

    monkeypatch.setattr(launch, "_ensure_file", capture)
    g = _run(case, request)
    kind = {"fprop": "conv_fprop"}.get(case[0], f"conv_{case[0]}")
    assert analysis.analyze(g.op_graph, kind).geo.int64, "int64 addressing must be selected"
    split = [src for src in sources if "nb = " in src]
    assert split, "the plan's kernel splits a pixel index"
    for src in split:
        # nb comes out of an int32 split, and is widened only then
        assert "nb = nb.to(tl.int64)" in src
        assert not re.search(r"= \(.*\)\.to\(tl\.int64\)\n\s*\w+ = _q", src)


def test_index_split_widens_after_an_int32_split():
    from opendnn.engines.conv.implicit_gemm import _kernels as K

    lines = K.index_split("p", "a + b", 1000, [2, 5], ["nb", "o0"], "", "_q", True)
    src = "\n".join(lines)
    assert lines[0] == "p = a + b"
    assert src.index("_q % 5") < src.index("nb = nb.to(tl.int64)")
    assert src.endswith("o0 = o0.to(tl.int64)")
    huge = K.index_split("p", "a + b", 2**31, [2, 5], ["nb", "o0"], "", "_q", True)
    assert huge[0] == "p = (a + b).to(tl.int64)" and "nb.to" not in "\n".join(huge)
    plain = K.index_split("p", "a + b", 2**40, [2, 5], ["nb", "o0"], "", "_q", False)
    assert plain[0] == "p = a + b" and ".to(tl.int64)" not in "\n".join(plain)
