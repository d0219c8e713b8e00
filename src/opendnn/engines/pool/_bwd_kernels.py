"""Triton source of the pooling backward kernel: a gather, deterministic by construction.

A program owns a tile of BLOCK_P input pixels x BLOCK_C channels and sums, for each, the
gradient of every window that contains it -- no atomics, and a fixed order of terms, so
MAXPOOL and MAX_DETERMINISTIC share it. Along axis a, input i (padded coordinate
t = i + pre) lies in window o iff 0 <= k = t - o s < w; the windows holding it are

    o = floor(t / s) - j,   j = 0 .. ceil(w / s) - 1   (with 0 <= o < out and k < w)

so the kernel visits prod_a ceil(w_a / s_a) candidate windows (4 for 3x3 stride 2), not
prod(w). Per window: MAXPOOL adds dy[o] where Index[o] equals the flat window offset of
k; the average modes add dy[o] / count(o) (prod(w), or the real elements of o).
MAXPOOL without an Index first runs the forward kernel to store the argmax into the
workspace (``_kernels.forward_source`` with no Y).
"""

from __future__ import annotations

from ...enums import ResampleMode
from ..fusion._codegen import TL_TYPE
from ._kernels import (
    Problem,
    chan,
    channel_mask,
    loop,
    offset,
    px,
    tile_head,
    tile_mask,
    tile_shape,
)


def backward_source(name: str, p: Problem, kn, index_role: str | None) -> str:
    """Arguments DY, then ``index_role`` (MAXPOOL: the graph's Index or the workspace),
    then DX."""
    ind = "    "
    params = ["DY"] + ([index_role] if index_role else []) + ["DX"]
    L = tile_head(name, params, p, kn, p.inp)
    cm = channel_mask(p, kn)
    sdy, sdx = p.strides["DY"][1], p.strides["DX"][1]
    L.append(f"{ind}cdy = {chan(kn, f'c * {sdy}')}")
    if index_role:
        L.append(f"{ind}cix = {chan(kn, f'c * {p.strides[index_role][1]}')}")
    L.append(f"{ind}acc = tl.full({tile_shape(kn)}, 0.0, tl.float32)")
    for a in range(p.nsp):
        L.append(f"{ind}t{a} = q{a + 1} + {p.pre[a]}")
    depth, ok = ind, "pmask"
    trips = 1
    for w, s in zip(p.window, p.stride):
        trips *= -(-w // s)
    for a in range(p.nsp):
        w, s = p.window[a], p.stride[a]
        L += [
            f"{depth}for j{a} in {loop(-(-w // s), trips)}:",
            f"{depth}    o{a} = t{a} // {s} - j{a}",
            f"{depth}    k{a} = t{a} - o{a} * {s}",
            f"{depth}    ok{a} = {ok} & (o{a} >= 0) & (o{a} < {p.out[a]}) & (k{a} < {w})",
        ]
        ok = f"ok{a}"
        depth += "    "
    osp = [f"o{a}" for a in range(p.nsp)]
    mask = tile_mask(kn, ok, cm)
    L.append(
        f"{depth}g = tl.load(DY + {px(kn, offset(p, 'DY', 'q0', osp))} + cdy, "
        f"mask={mask}, other=0.0).to(tl.float32)"
    )
    if p.is_max:
        ks = [f"k{a}" for a in range(p.nsp)]
        L += [
            f"{depth}ix = tl.load({index_role} + {px(kn, offset(p, index_role, 'q0', osp))}"
            f" + cix, mask={mask}, other=-1).to(tl.int32)",
            f"{depth}acc += tl.where(ix == {px(kn, p.flat_window(ks))}, g, 0.0)",
        ]
    elif p.mode == ResampleMode.AVGPOOL_INCLUDE_PADDING:
        L.append(f"{depth}acc += g")
    else:
        counts = []
        for a in range(p.nsp):
            st = f"(o{a} * {p.stride[a]} - {p.pre[a]})"
            counts.append(f"(tl.minimum({st} + {p.window[a]}, {p.inp[a]}) - tl.maximum({st}, 0))")
        L += [
            f"{depth}cnt = ({' * '.join(counts)}).to(tl.float32)",
            f"{depth}acc += g / {px(kn, 'tl.maximum(cnt, 1.0)')}",
        ]
    if p.mode == ResampleMode.AVGPOOL_INCLUDE_PADDING:
        L.append(f"{ind}acc = acc * {1.0 / p.volume!r}")
    isp = [f"q{a + 1}" for a in range(p.nsp)]
    L.append(
        f"{ind}tl.store(DX + {px(kn, offset(p, 'DX', 'q0', isp))} + "
        f"{chan(kn, f'c * {sdx}')}, "
        f"acc.to({TL_TYPE[p.types['DX']]}), mask={tile_mask(kn, 'pmask', cm)})"
    )
    return "\n".join(L) + "\n"
