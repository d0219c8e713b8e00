"""The layout transform's copies: a batched 2-D transpose, Triton.

An NCHW image viewed as [N, C, S] (S = the pixels, H*W or D*H*W) and its channels-last
twin [N, S, C] are each other's transpose per image:

    out[n, s, c] = in[n, c, s]      (to channels-last; the way back swaps the roles)

A program moves one [BLOCK_C, BLOCK_S] tile: it loads the tile along its contiguous axis,
transposes it in registers (Triton stages the exchange through shared memory) and stores
it along the other tensor's contiguous axis, so both sides move whole 32-byte sectors.
A generic strided copy reads or writes one of the two sides element by element.
"""

from __future__ import annotations

# below this many channels a tile is mostly masked lanes: the strided copy moves the image
MIN_CHANNELS = 16


def tiles(itemsize: int) -> tuple[int, int, int]:
    """(BLOCK_C, BLOCK_S, num_warps) of the transpose for elements of ``itemsize`` bytes."""
    return (64, 64, 4) if itemsize <= 2 else (32, 64, 4)


def transpose_source(name: str, to_channels_last: bool, int64: bool) -> str:
    """Kernel ``name(SRC, DST, C, S, BLOCK_C, BLOCK_S)`` over the grid
    (cdiv(S, BLOCK_S), cdiv(C, BLOCK_C), N): packed [N, C, S] -> packed [N, S, C]
    (``to_channels_last``) or back."""
    cast = ".to(tl.int64)" if int64 else ""
    cs, sc = "c[:, None] * S + s[None, :]", "s[:, None] * C + c[None, :]"
    m_cs, m_sc = "mc[:, None] & ms[None, :]", "ms[:, None] & mc[None, :]"
    # the tile is loaded in the source's order and stored transposed
    src, dst, m_src, m_dst = (cs, sc, m_cs, m_sc) if to_channels_last else (sc, cs, m_sc, m_cs)
    return (
        "@triton.jit\n"
        f"def {name}(SRC, DST, C, S, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr):\n"
        f"    n = tl.program_id(2){cast}\n"
        f"    s = tl.program_id(0){cast} * BLOCK_S + tl.arange(0, BLOCK_S)\n"
        f"    c = tl.program_id(1){cast} * BLOCK_C + tl.arange(0, BLOCK_C)\n"
        "    ms = s < S\n"
        "    mc = c < C\n"
        "    base = n * C * S\n"
        f"    v = tl.load(SRC + base + {src}, mask={m_src})\n"
        f"    tl.store(DST + base + {dst}, tl.trans(v), mask={m_dst})\n"
    )
