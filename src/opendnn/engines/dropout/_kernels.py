"""Triton source of the dropout engine (the random stream is defined in ``ops/dropout.py``).

One program per BLOCK elements, walked in the order of the data tensor's strides (largest
first) so loads coalesce in any layout. Element i (its row-major *logical* index: the
mask does not depend on the layout) takes word i mod 4 of Philox(SEED, OFFSET + i // 4).

- When the walk is the logical order (row-major strides, e.g. packed NCHW), a program's
  BLOCK lanes are BLOCK / 4 whole groups of four: one Philox evaluation per group, its
  four words interleaved into the lanes (join + reshape). Ten Philox rounds cost about
  a hundred integer instructions, which would bound the kernel well below DRAM
  bandwidth if each element paid for its own evaluation.
- Otherwise every lane evaluates its group's Philox and selects its word (the same
  stream, four times the arithmetic).

SEED and OFFSET are read from one-element integer tensors (device memory), so a plan never
changes when they do and no host synchronization is needed.
"""

from __future__ import annotations

from ..fusion._codegen import TL_TYPE, index_decomposition, offset_expr

INT32_LIMIT = 2**31 - 1

# Triton's tl.randint4x + tl.rand's float conversion (Philox-4x32-10) spelled out in the
# generated module itself: they are @jit helpers of triton.language, which exist only
# compiled, not in the interpreter. Bit for bit the stream of ops/dropout.py.
PHILOX_HELPER = """
@triton.jit
def _to_uniform(c):
    r = c.to(tl.int32, bitcast=True)
    r = tl.where(r < 0, -r - 1, r)
    return r * 4.6566127342e-10


@triton.jit
def _philox4_uniform(seed, counter):
    seed = seed.to(tl.uint64)
    k0 = (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c0 = counter.to(tl.uint32)
    c1 = (counter >> 32).to(tl.uint32)
    c2 = c0 * 0
    c3 = c0 * 0
    for _ in tl.static_range(10):
        _c0 = c0
        _c2 = c2
        c0 = tl.umulhi(_c2, 0xCD9E8D57) ^ c1 ^ k0
        c2 = tl.umulhi(_c0, 0xD2511F53) ^ c3 ^ k1
        c1 = tl.mul(_c2, 0xCD9E8D57, sanitize_overflow=False)
        c3 = tl.mul(_c0, 0xD2511F53, sanitize_overflow=False)
        k0 = tl.add(k0, 0x9E3779B9, sanitize_overflow=False)
        k1 = tl.add(k1, 0xBB67AE85, sanitize_overflow=False)
    return _to_uniform(c0), _to_uniform(c1), _to_uniform(c2), _to_uniform(c3)

"""


def logical_walk(dims: tuple, strides: tuple) -> bool:
    """Whether walking by ``strides`` (largest first) visits elements in row-major order."""
    order = sorted(range(len(dims)), key=lambda i: (-strides[i], i))
    kept = [i for i in order if dims[i] != 1]
    return kept == sorted(kept)


def source(
    name: str,
    dims: tuple,
    descs: dict,
    data: str,
    out: str,
    mask_role: str | None,
    p: float,
    scale: float,
    block: int,
) -> str:
    """Y = X * (keep ? scale : 0) (backward: DX from DY), keep = rand >= p, and MASK."""
    ind = "    "
    rank = len(dims)
    total = 1
    for d in dims:
        total *= d
    big = total >= INT32_LIMIT // 2 or any(d.span >= INT32_LIMIT for d in descs.values())
    strides = descs[data].strides
    grouped = logical_walk(dims, strides)
    # a grouped walk must follow the logical order exactly, size-one dims included
    order = list(range(rank)) if grouped else sorted(range(rank), key=lambda i: (-strides[i], i))
    params = [data, "SEED", "OFFSET", out] + ([mask_role] if mask_role else [])
    pid = "tl.program_id(0).to(tl.int64)" if big else "tl.program_id(0)"
    L = [
        PHILOX_HELPER,
        "@triton.jit",
        f"def {name}({', '.join(params)}):",
        f"{ind}e = {pid} * {block} + tl.arange(0, {block})",
        f"{ind}emask = e < {total}",
    ]
    L += index_decomposition("e", [dims[i] for i in order], "w", ind)
    for k, i in enumerate(order):
        L.append(f"{ind}i{i} = w{k}")
    names = [f"i{i}" for i in range(rank)]
    for role in params:
        if role in descs:
            L.append(f"{ind}off_{role} = {offset_expr(names, descs[role].strides, 'e * 0')}")
    L += [f"{ind}seed = tl.load(SEED).to(tl.int64)", f"{ind}base = tl.load(OFFSET).to(tl.int64)"]
    if grouped:
        q, half = block // 4, block // 2
        L += [
            f"{ind}q = ({pid} * {q} + tl.arange(0, {q})).to(tl.int64)",
            f"{ind}u0, u1, u2, u3 = _philox4_uniform(seed, base + q)",
            f"{ind}u02 = tl.reshape(tl.join(u0, u2), [{half}])",
            f"{ind}u13 = tl.reshape(tl.join(u1, u3), [{half}])",
            f"{ind}u = tl.reshape(tl.join(u02, u13), [{block}])",
        ]
    else:
        row_major, acc = [0] * rank, 1
        for i in reversed(range(rank)):
            row_major[i] = acc
            acc *= dims[i]
        L += [
            f"{ind}logical = ({offset_expr(names, row_major, 'e * 0')}).to(tl.int64)",
            f"{ind}u0, u1, u2, u3 = _philox4_uniform(seed, base + (logical >> 2))",
            f"{ind}w = logical & 3",
            f"{ind}u = tl.where(w == 0, u0, tl.where(w == 1, u1, tl.where(w == 2, u2, u3)))",
        ]
    L += [
        f"{ind}keep = u >= {float(p)!r}",
        f"{ind}v = tl.load({data} + off_{data}, mask=emask, other=0.0, "
        'eviction_policy="evict_first").to(tl.float32)',
        f"{ind}v = v * tl.where(keep, {float(scale)!r}, 0.0)",
        f"{ind}tl.store({out} + off_{out}, v.to({TL_TYPE[descs[out].data_type]}), mask=emask)",
    ]
    if mask_role:
        L.append(
            f"{ind}tl.store({mask_role} + off_{mask_role}, "
            f"keep.to({TL_TYPE[descs[mask_role].data_type]}), mask=emask)"
        )
    return "\n".join(L) + "\n"
