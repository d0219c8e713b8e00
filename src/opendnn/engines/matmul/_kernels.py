"""Triton matmul kernel *source generator* with a fused-epilogue hook.

This module writes the Python source text of a Triton kernel (no ``@triton.jit``
decorator: the caller writes the text to a file, imports it and wraps the
function with ``triton.runtime.jit.JITFunction`` on a GPU or
``triton.runtime.interpreter.InterpretedFunction`` on the CPU).  It depends on
nothing but the standard library, so it can be imported standalone from its
path with ``importlib``.

Problem
=======
For every batch index ``(b0, b1)`` (``b0 in [0, BATCH0)``, ``b1 in [0, BATCH1)``)

    C[b0, b1, m, n] = epilogue( sum_k A[b0, b1, m, k] * B[b0, b1, k, n] )

with ``A`` of logical shape ``[BATCH0, BATCH1, M, K]`` and ``B`` of shape
``[BATCH0, BATCH1, K, N]``, both given by a base pointer and four element
strides each.  Any stride may be anything (row-major, column-major, neither);
a batch stride of 0 broadcasts that operand over the batch dimension.
Products are accumulated in float32.

Tiled GEMM
==========
The output plane ``M x N`` is cut into tiles of ``BLOCK_M x BLOCK_N``; one
program (CTA) owns one tile and walks the reduction dimension in steps of
``BLOCK_K``:

    acc(i, j) = sum_{t=0}^{ceil(K/BK)-1}  A[i, t*BK : (t+1)*BK] @ B[t*BK : (t+1)*BK, j]

Each step loads a ``BM x BK`` slab of A and a ``BK x BN`` slab of B into shared
memory and issues tensor-core MMAs (``wgmma`` on Hopper).  Arithmetic intensity
of one step is ``2*BM*BN*BK / ((BM+BN)*BK*bytes) = 2*BM*BN / ((BM+BN)*bytes)``
FLOP per byte of shared-memory traffic, which is why large tiles (128x256)
are needed to keep Hopper's tensor cores (about 990 dense bf16 TFLOP/s) fed.
``num_stages`` slabs are kept in flight (software pipelining: the loads of
step ``t + num_stages - 1`` are issued while step ``t`` computes).
Rows/columns/k-steps past ``M``/``N``/``K`` are masked (loaded as 0), so no
size needs to be a multiple of a block; ``K == 0`` runs zero steps and gives
``acc == 0``.  ``M == 0`` or ``N == 0`` means an empty grid: the *caller* must
not launch in that case (CUDA rejects an empty grid).

Grouped tile order (L2 reuse)
=============================
Tile ids are linear ``t in [0, Tm*Tn)`` (``Tm = ceil(M/BM)``, ``Tn = ceil(N/BN)``).
A row-major order ``(t // Tn, t % Tn)`` makes the ~132 concurrently running
tiles share one A row-panel but touch 132 different B column-panels.  Grouped
order walks ``GROUP_M`` row-panels column by column:

    group     = t // (GROUP_M * Tn)
    first_m   = group * GROUP_M
    size_m    = min(Tm - first_m, GROUP_M)
    pid_m     = first_m + (t % (GROUP_M*Tn)) % size_m
    pid_n     = (t % (GROUP_M*Tn)) // size_m

so a wave of W tiles touches about ``GROUP_M`` A panels and ``W/GROUP_M`` B
panels instead of ``1`` and ``W``: the sum of distinct panels, hence the DRAM
traffic per wave, drops from ``~W`` panels to ``~2*sqrt(W)`` for
``GROUP_M ~ sqrt(W)``.

Split-K
=======
With ``SPLIT_K = S > 1`` the reduction is cut into S contiguous ranges of
k-steps, ``kt in [s*ceil(T/S), min((s+1)*ceil(T/S), T))`` with ``T = ceil(K/BK)``;
program ``(tile, s, batch)`` writes its float32 partial sum to a workspace
``WS[s, batch, m, n]`` (contiguous, ``S*BATCH*M*N`` floats) and a second
kernel (:func:`splitk_reduce_source`) computes ``acc = sum_s WS[s, ...]`` and
runs the epilogue.  This multiplies the number of programs by S, which fills
the machine when ``Tm*Tn*BATCH`` is small (e.g. M = 16, decode-like shapes)
at the cost of ``2*S*M*N*4`` extra bytes and one more launch.

Persistent scheduling
=====================
Instead of one program per tile, ``P`` programs per batch (about the number of
SMs in total) each loop over work items ``w = pid, pid+P, pid+2P, ...`` of
their batch (``w`` enumerates ``tile + Tm*Tn*s``).  That removes the CTA
launch/teardown per tile, lets the compiler overlap the epilogue of one tile
with the loads of the next (``flatten`` knob: the tile loop and the k loop are
fused into one software-pipelined loop), and makes wave quantization
explicit: each program runs ``ceil(W/P)`` or ``floor(W/P)`` items.

TMA (Hopper, compiled only)
===========================
With ``tma=True`` the A/B slabs are fetched with the Tensor Memory Accelerator
(``cp.async.bulk.tensor``) instead of per-thread ``cp.async``: one thread
issues a whole ``BM x BK`` box, the hardware does address generation,
bounds-clipping (zero fill past M/N/K, so no masks) and the 128-byte
swizzle that ``wgmma`` wants.  We use *device-side* descriptors,
``tl.make_tensor_descriptor``: the kernel keeps the plain ``(A, B, ...)``
pointer signature (same call for TMA and non-TMA kernels), no host object is
built per call, and the per-batch base pointer is simply
``A + b0*stride_a_b0 + b1*stride_a_b1``.  The price is a 128-byte scratch
allocation per program for the descriptor, obtained through
``triton.set_allocator``: the caller must have set an allocator in the
launching thread (it is a ContextVar) -- :func:`ensure_allocator` installs a
torch-based one.  (The host-side ``TensorDescriptor`` alternative costs a
Python object plus a ``cuTensorMapEncodeTiled`` per operand and call, and
changes the kernel signature.)  Building a descriptor costs each CTA a
global-memory write plus a fence before its first load (~1-2 us): negligible
for persistent kernels (once per program) and long CTAs, but it made TMA
lose to pointer loads for skinny split-K problems (measured: 16x4096x4096
main kernel 42 us with TMA vs 21 us with cp.async).  TMA needs a 16-byte aligned base, 16-byte
aligned leading/batch strides and a unit inner stride: see :func:`tma_ok`;
the caller must also check ``data_ptr() % 16 == 0`` for both operands.
In TMA mode the kernel has two more constexpr parameters, ``A_KCONTIG``
(A has ``stride_ak == 1``; else ``stride_am == 1`` and the box is loaded
K-major and transposed in shared memory) and ``B_NCONTIG`` (``stride_bn == 1``;
else ``stride_bk == 1``): :func:`tma_flags` computes them.

Generated kernel contract
=========================
Main kernel (``SPLIT_K == 1``)::

    def NAME(A, B, <epilogue_params...>, M, N, K, BATCH1,
             stride_a_b0, stride_a_b1, stride_am, stride_ak,
             stride_b_b0, stride_b_b1, stride_bk, stride_bn,
             BLOCK_M: tl.constexpr = .., BLOCK_N: tl.constexpr = ..,
             BLOCK_K: tl.constexpr = .., GROUP_M: tl.constexpr = ..,
             SPLIT_K: tl.constexpr = ..
             [, A_KCONTIG: tl.constexpr = True, B_NCONTIG: tl.constexpr = True]  # tma only
             )

All constexpr parameters have defaults baked from the knobs, so a launch only
passes the runtime arguments (plus ``A_KCONTIG``/``B_NCONTIG`` when they are
False) and ``**launch_options(knobs)`` (num_warps, num_stages).

Main kernel (``SPLIT_K > 1``): identical, with ``WS`` inserted as the *first
epilogue parameter*: ``NAME(A, B, WS, <epilogue_params...>, M, N, ...)``.  The
user's epilogue params are accepted but unused; ``WS`` is a float32 pointer to
``workspace_bytes(...)`` bytes laid out contiguously as ``[SPLIT_K, BATCH, M, N]``
with ``BATCH = BATCH0*BATCH1`` and batch index ``pid_b = b0*BATCH1 + b1``.
Every element of WS is written, so it needs no zeroing.
Reduce kernel (:func:`splitk_reduce_source`)::

    def NAME(WS, <epilogue_params...>, M, N, BATCH1,
             BLOCK_M: tl.constexpr = .., BLOCK_N: tl.constexpr = ..,
             SPLIT_K: tl.constexpr = ..)

launched on :func:`reduce_grid` with :func:`reduce_launch_options`.

Grid (:func:`grid`): non-persistent ``(Tm*Tn, SPLIT_K, BATCH0*BATCH1)``;
persistent ``(P, 1, BATCH0*BATCH1)`` with ``P = min(Tm*Tn*SPLIT_K,
max(1, num_sms // BATCH))``.  The third grid dimension is limited to 65535
by CUDA: the caller must chunk larger batches.

Epilogue hook
=============
After the K loop the generated code defines, then pastes ``epilogue_body``:

* ``acc``    float32 ``[bm, bn]`` accumulator (the full tile, or half of it
  along N when ``epilogue_subtile == 2`` -- the body is then pasted twice,
  so it must not assume a tile shape; use ``offs_*``/``mask_*``),
* ``offs_m`` int32 ``[bm]`` global row indices, ``offs_n`` int32 ``[bn]``,
* ``mask_m = offs_m < M``, ``mask_n = offs_n < N`` (bool),
* ``b0``, ``b1`` batch indices (int32 scalars), also ``M``, ``N`` and the
  epilogue's own parameters.

The body does its own loads/stores, e.g.::

    c = C + b0.to(tl.int64) * stride_c_b0 + b1.to(tl.int64) * stride_c_b1
    tl.store(c + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc.to(C.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])

(use ``x.to(tl.int64) * stride`` rather than methods on parameters: an int
argument equal to 1 is specialized to a constexpr by Triton).

Rules for the body: it is pasted inside the persistent tile loop in
persistent mode, so it must only assign its own temporaries (prefix them,
e.g. ``ep_``) and never rebind kernel names (``A_b``, ``B_b``, ``num_pid_*``,
``num_tiles``, ``k_tiles``, ``k_per_split``, ``a_desc``, ``b_desc``,
``total``, the parameters).  Under ``InterpretedFunction`` without
``TRITON_INTERPRET=1`` the ``@triton.jit`` helpers of triton.language
(``tl.zeros``, ``tl.cdiv``, ``tl.sigmoid``, ``tl.sum``, ``tl.max``...) raise
"Cannot call @triton.jit'd outside of the scope of a kernel": the generated
code uses builtins only (``tl.full``, integer arithmetic), and an epilogue
meant for the interpreter must do the same (``tl.exp``, ``tl.where``,
``tl.maximum`` are builtins and fine).

Dtypes: A/B float32 (``tl.dot(..., input_precision="tf32"|"ieee")`` by
``allow_tf32``), float16, bfloat16 (A and B of the same dtype).  With
``interpret=True`` both tiles are cast to float32 before ``tl.dot`` because
Triton 3.6's interpreter computes bf16 dots wrongly; nothing else changes.
``triton.language.extra.libdevice`` is never used (the interpreter lacks it).

Pointer (non-TMA) mode assumptions: offsets are computed in int64 for the
batch/tile bases and int32 inside a tile (``BLOCK*stride < 2**31``).
Triton specializes stride == 1 and 16-divisibility, so contiguous operands
get 16-byte vector loads automatically; other strides are correct but slower.
"""

import dataclasses
import textwrap

__all__ = [
    "MatmulKnobs",
    "knob_space",
    "matmul_source",
    "splitk_reduce_source",
    "grid",
    "reduce_grid",
    "launch_options",
    "reduce_launch_options",
    "workspace_bytes",
    "tma_ok",
    "tma_flags",
    "ensure_allocator",
    "estimate_seconds",
]


@dataclasses.dataclass(frozen=True)
class MatmulKnobs:
    """One kernel configuration.

    The first nine fields are the documented contract.  The last three are
    extra Hopper knobs with neutral defaults:

    * ``flatten``: persistent only -- ``tl.range(..., flatten=True)`` on the
      tile loop, letting the pipeliner fuse the tile and k loops.
    * ``warp_specialize``: ``tl.range(..., warp_specialize=True)`` on the k
      loop.  On Hopper with Triton 3.6 the pass only fires with TMA loads and
      ``num_warps=4``: the kernel then runs 12 warps (one producer warp group
      issuing TMA, two consumer warp groups doing wgmma); with num_warps=8
      the attribute is silently ignored.  MEASURED BROKEN: on an H100 with
      Triton 3.6 every such kernel left the output unwritten/NaN, so no
      knob_space() entry uses it; kept only for newer Tritons.
    * ``epilogue_subtile``: 1 or 2; with 2 the epilogue runs on two
      ``[BLOCK_M, BLOCK_N/2]`` halves (less register/shared-memory pressure
      in the store path).
    """

    BLOCK_M: int = 128
    BLOCK_N: int = 128
    BLOCK_K: int = 64
    GROUP_M: int = 8
    num_stages: int = 3
    num_warps: int = 8
    SPLIT_K: int = 1
    persistent: bool = False
    tma: bool = False
    flatten: bool = False
    warp_specialize: bool = False
    epilogue_subtile: int = 1

    def short(self) -> str:
        s = f"{self.BLOCK_M}x{self.BLOCK_N}x{self.BLOCK_K}_g{self.GROUP_M}_s{self.num_stages}_w{self.num_warps}"
        if self.SPLIT_K > 1:
            s += f"_sk{self.SPLIT_K}"
        if self.persistent:
            s += "_pers"
        if self.tma:
            s += "_tma"
        if self.flatten:
            s += "_flat"
        if self.warp_specialize:
            s += "_ws"
        if self.epilogue_subtile > 1:
            s += f"_sub{self.epilogue_subtile}"
        return s


def _pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


def validate(knobs: MatmulKnobs) -> None:
    """Raise ValueError for a configuration the generator cannot emit."""
    for f in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        v = getattr(knobs, f)
        if not _pow2(v) or v < 16:
            raise ValueError(f"{f}={v}: must be a power of two >= 16 (tl.dot minimum)")
    if knobs.GROUP_M < 1:
        raise ValueError("GROUP_M must be >= 1")
    if knobs.SPLIT_K < 1:
        raise ValueError("SPLIT_K must be >= 1")
    if knobs.num_stages < 1 or not _pow2(knobs.num_warps):
        raise ValueError("num_stages >= 1 and num_warps a power of two are required")
    if knobs.epilogue_subtile not in (1, 2):
        raise ValueError("epilogue_subtile must be 1 or 2")
    if knobs.epilogue_subtile == 2 and knobs.BLOCK_N < 32:
        raise ValueError("epilogue_subtile=2 needs BLOCK_N >= 32")
    if knobs.flatten and not knobs.persistent:
        raise ValueError("flatten only applies to persistent kernels")
    if knobs.warp_specialize and not (knobs.tma and knobs.epilogue_subtile == 1):
        # Triton 3.6's Hopper warp-specialization pass only handles TMA loops
        # (pointer loads and the subtiled epilogue crash the pass).
        raise ValueError("warp_specialize needs tma=True and epilogue_subtile=1")


# ---------------------------------------------------------------------------
# candidate configurations
# ---------------------------------------------------------------------------


def knob_space() -> list[MatmulKnobs]:
    """Candidate configurations, best Hopper (H100) configs first.

    Order = measured on an H100 (numbers in docs/design/matmul.md):
    persistent TMA 128x256x64 / 8 warps leads on every large bf16/fp16 problem
    (0.96-1.06x cuBLAS over three sweeps; GROUP_M, 3 vs 4 stages, subtiling
    and flatten differ by less than the +-5 % run-to-run noise; the plain
    3-stage one had the best mean), then non-persistent TMA, pointer (cp.async)
    configs for operands TMA cannot read, mid-size tiles, float32-sized tiles,
    and skinny (small M, split-K) configs, where pointer loads beat TMA (short
    CTAs cannot amortize the in-kernel descriptor creation).  warp_specialize
    configs are absent: Triton 3.6's Hopper auto-WS produced wrong results (see
    MatmulKnobs).
    """
    K = MatmulKnobs
    big = [
        K(128, 256, 64, 8, 3, 8, persistent=True, tma=True),
        K(128, 256, 64, 8, 3, 8, persistent=True, tma=True, epilogue_subtile=2),
        K(128, 256, 64, 8, 4, 8, persistent=True, tma=True, epilogue_subtile=2),
        K(128, 256, 64, 8, 3, 8, persistent=True, tma=True, flatten=True),
        K(128, 256, 64, 4, 3, 8, persistent=True, tma=True),
        K(128, 256, 64, 8, 3, 8, tma=True),
        K(128, 256, 64, 8, 4, 8, tma=True),
        K(256, 128, 64, 8, 4, 8, tma=True),
        K(256, 128, 64, 8, 3, 8, persistent=True, tma=True),
        # pointer loads (any strides / alignment)
        K(128, 256, 64, 8, 4, 8),
        K(128, 256, 64, 8, 3, 8),
        K(128, 256, 64, 8, 3, 8, persistent=True),
        K(256, 128, 64, 8, 3, 8),
    ]
    mid = [
        K(128, 128, 64, 8, 4, 8, persistent=True, tma=True),
        K(128, 128, 64, 8, 4, 8, tma=True),
        K(128, 128, 64, 8, 4, 4, tma=True),
        K(64, 256, 64, 8, 4, 4, tma=True),
        K(128, 128, 64, 8, 4, 8),
        K(128, 128, 64, 8, 4, 4),
        K(64, 128, 64, 8, 4, 4),
        K(64, 64, 64, 8, 4, 4),
        # float32 operands (tf32): half the k depth to fit shared memory
        K(128, 128, 32, 8, 4, 8, tma=True),
        K(128, 64, 32, 8, 4, 4),
    ]
    skinny = [
        K(16, 128, 64, 1, 4, 4, SPLIT_K=4),
        K(16, 128, 128, 1, 3, 4, SPLIT_K=4),
        K(64, 128, 64, 8, 4, 4, SPLIT_K=4),
        K(16, 64, 128, 1, 4, 4, SPLIT_K=4),
        K(32, 128, 128, 1, 3, 4, SPLIT_K=4),
        K(16, 64, 256, 1, 4, 4, SPLIT_K=4),
        K(16, 256, 64, 1, 4, 4, SPLIT_K=8),
        # a few output tiles over a reduction of 10^5 and more (a convolution's backward
        # filter as a GEMM: K x C*R*S outputs, N*P reduction): deep splits fill the GPU
        K(64, 64, 64, 1, 4, 4, SPLIT_K=32),
        K(64, 128, 64, 1, 4, 4, SPLIT_K=16),
        K(16, 128, 128, 1, 4, 4, SPLIT_K=2, tma=True),
        K(16, 64, 128, 1, 4, 4),
        K(16, 64, 128, 1, 4, 4, tma=True),
    ]
    return big + mid + skinny + FLOAT32_NARROW


# float32 operands (TF32 dots) of memory-bound GEMMs, offered for float32 only (see
# ``float32_only``): a few dozen output rows or columns over many pixels -- the pointwise
# convolutions of NCHW images, W [K, C] x X[n] [C, P] -- where a float32 operand read
# along its pixels is not K-major, and more, smaller CTAs per SM hide its transposing
# loads better than one large tile (H100, batch 32, cuDNN time / ours: 32x64x32 and
# 32x128x16 tiles 0.70-1.14 where the 128x64x32 of ``mid`` gave 0.3-0.6)
FLOAT32_NARROW = [
    MatmulKnobs(32, 128, 16, 8, 3, 4),
    MatmulKnobs(16, 128, 32, 8, 2, 4),
    MatmulKnobs(64, 128, 16, 8, 3, 4),
    MatmulKnobs(128, 128, 16, 8, 3, 4),
    MatmulKnobs(32, 64, 32, 8, 3, 4),
]


def float32_only(knobs: MatmulKnobs) -> bool:
    """Whether ``knobs`` is one of the float32-operand configs (``FLOAT32_NARROW``)."""
    return knobs in FLOAT32_NARROW


# ---------------------------------------------------------------------------
# source generation
# ---------------------------------------------------------------------------


def _indent(body: str, level: int) -> str:
    body = textwrap.dedent(body.expandtabs(4)).strip("\n")
    return textwrap.indent(body, " " * (4 * level), lambda line: line.strip() != "")


def _check_ident(name: str) -> None:
    if not name.isidentifier():
        raise ValueError(f"not a Python identifier: {name!r}")


_RESERVED = {
    "A",
    "B",
    "M",
    "N",
    "K",
    "BATCH1",
    "WS",
    "stride_a_b0",
    "stride_a_b1",
    "stride_am",
    "stride_ak",
    "stride_b_b0",
    "stride_b_b1",
    "stride_bk",
    "stride_bn",
    "BLOCK_M",
    "BLOCK_N",
    "BLOCK_K",
    "GROUP_M",
    "SPLIT_K",
    "A_KCONTIG",
    "B_NCONTIG",
}


def _dot_line(interpret: bool, allow_tf32: bool, a: str = "a", b: str = "b") -> str:
    prec = "tf32" if allow_tf32 else "ieee"
    if interpret:
        # Triton 3.6's interpreter gets bf16 dots wrong: do them in fp32.
        return (
            f'acc = tl.dot({a}.to(tl.float32), {b}.to(tl.float32), acc, input_precision="{prec}")'
        )
    return f'acc = tl.dot({a}, {b}, acc, input_precision="{prec}")'


def _range(lo: str, hi: str, step: str | None = None, **attrs) -> str:
    args = [lo, hi] + ([step] if step is not None else [])
    for k, v in attrs.items():
        if v:
            args.append(f"{k}={v}")
    return f"tl.range({', '.join(args)})"


def _epilogue_block(knobs: MatmulKnobs, body: str, level: int) -> str:
    """Code (at `level`) that defines offs_n/mask_n/acc per subtile and pastes body."""
    ind = " " * (4 * level)
    out = []
    if knobs.epilogue_subtile == 1:
        out.append(f"{ind}offs_n = off_n + tl.arange(0, BLOCK_N)")
        out.append(f"{ind}mask_n = offs_n < N")
        out.append(_indent(body, level))
    else:
        out.append(
            f"{ind}acc_full = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))"
        )
        out.append(f"{ind}acc_lo, acc_hi = tl.split(acc_full)")
        for half, nm in ((0, "acc_lo"), (1, "acc_hi")):
            out.append(f"{ind}acc = {nm}")
            out.append(
                f"{ind}offs_n = off_n + {half} * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)"
            )
            out.append(f"{ind}mask_n = offs_n < N")
            out.append(_indent(body, level))
    return "\n".join(out)


_SPLITK_STORE = """
ws_row = (pid_k * tl.num_programs(2) + pid_b).to(tl.int64) * M + offs_m.to(tl.int64)
tl.store(WS + ws_row[:, None] * N + offs_n[None, :], acc, mask=mask_m[:, None] & mask_n[None, :])
"""


def matmul_source(
    name: str,
    knobs: MatmulKnobs,
    *,
    epilogue_params: list[str],
    epilogue_body: str,
    allow_tf32: bool,
    interpret: bool,
) -> str:
    """Return the source of kernel ``name`` (see the module docstring for the contract)."""
    validate(knobs)
    _check_ident(name)
    params = list(epilogue_params)
    for p in params:
        _check_ident(p)
        if p in _RESERVED:
            raise ValueError(f"epilogue param {p!r} clashes with a kernel parameter")
    if knobs.SPLIT_K > 1:
        params = ["WS"] + params
        body = _SPLITK_STORE
    else:
        body = epilogue_body
    kn = knobs
    sig = (
        ["A", "B"]
        + params
        + [
            "M",
            "N",
            "K",
            "BATCH1",
            "stride_a_b0",
            "stride_a_b1",
            "stride_am",
            "stride_ak",
            "stride_b_b0",
            "stride_b_b1",
            "stride_bk",
            "stride_bn",
            f"BLOCK_M: tl.constexpr = {kn.BLOCK_M}",
            f"BLOCK_N: tl.constexpr = {kn.BLOCK_N}",
            f"BLOCK_K: tl.constexpr = {kn.BLOCK_K}",
            f"GROUP_M: tl.constexpr = {kn.GROUP_M}",
            f"SPLIT_K: tl.constexpr = {kn.SPLIT_K}",
        ]
    )
    if kn.tma:
        sig += ["A_KCONTIG: tl.constexpr = True", "B_NCONTIG: tl.constexpr = True"]

    L: list[str] = []
    w = L.append
    w(f"def {name}(")
    for s in sig:
        w(f"    {s},")
    w("):")
    w(
        f"    # generated by opendnn.engines.matmul._kernels: {kn.short()} tf32={allow_tf32} interpret={interpret}"
    )
    w("    pid_b = tl.program_id(2)")
    w("    b0 = pid_b // BATCH1")
    w("    b1 = pid_b % BATCH1")
    w("    A_b = A + b0.to(tl.int64) * stride_a_b0 + b1.to(tl.int64) * stride_a_b1")
    w("    B_b = B + b0.to(tl.int64) * stride_b_b0 + b1.to(tl.int64) * stride_b_b1")
    w("    num_pid_m = ((M + BLOCK_M - 1) // BLOCK_M)")
    w("    num_pid_n = ((N + BLOCK_N - 1) // BLOCK_N)")
    w("    num_tiles = num_pid_m * num_pid_n")
    w("    k_tiles = ((K + BLOCK_K - 1) // BLOCK_K)")
    if kn.SPLIT_K > 1:
        w("    k_per_split = ((k_tiles + SPLIT_K - 1) // SPLIT_K)")
    if kn.tma:
        w("    if A_KCONTIG:")
        w(
            "        a_desc = tl.make_tensor_descriptor(A_b, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])"
        )
        w("    else:")
        w(
            "        a_desc = tl.make_tensor_descriptor(A_b, shape=[K, M], strides=[stride_ak, 1], block_shape=[BLOCK_K, BLOCK_M])"
        )
        w("    if B_NCONTIG:")
        w(
            "        b_desc = tl.make_tensor_descriptor(B_b, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])"
        )
        w("    else:")
        w(
            "        b_desc = tl.make_tensor_descriptor(B_b, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, BLOCK_K])"
        )

    if kn.persistent:
        w("    total = num_tiles * SPLIT_K")
        w(
            "    "
            + "for work in "
            + _range(
                "tl.program_id(0)",
                "total",
                "tl.num_programs(0)",
                flatten=kn.flatten and not interpret,
            )
            + ":"
        )
        lv = 2
        ind = "        "
        w(ind + "tile = work % num_tiles")
        if kn.SPLIT_K > 1:
            w(ind + "pid_k = work // num_tiles")
    else:
        lv = 1
        ind = "    "
        w(ind + "tile = tl.program_id(0)")
        if kn.SPLIT_K > 1:
            w(ind + "pid_k = tl.program_id(1)")
    # grouped ordering
    w(ind + "num_pid_in_group = GROUP_M * num_pid_n")
    w(ind + "group_id = tile // num_pid_in_group")
    w(ind + "first_pid_m = group_id * GROUP_M")
    w(ind + "group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)")
    w(ind + "pid_m = first_pid_m + (tile % num_pid_in_group) % group_size_m")
    w(ind + "pid_n = (tile % num_pid_in_group) // group_size_m")
    w(ind + "off_m = pid_m * BLOCK_M")
    w(ind + "off_n = pid_n * BLOCK_N")
    if kn.SPLIT_K > 1:
        w(ind + "k_lo = pid_k * k_per_split")
        w(ind + "k_hi = tl.minimum(k_lo + k_per_split, k_tiles)")
    else:
        w(ind + "k_lo = 0")
        w(ind + "k_hi = k_tiles")
    w(ind + "acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)")
    loop_attrs = {"warp_specialize": kn.warp_specialize and not interpret}
    if kn.tma:
        w(ind + "for kt in " + _range("k_lo", "k_hi", **loop_attrs) + ":")
        w(ind + "    k_off = kt * BLOCK_K")
        w(ind + "    if A_KCONTIG:")
        w(ind + "        a = a_desc.load([off_m, k_off])")
        w(ind + "    else:")
        w(ind + "        a = a_desc.load([k_off, off_m]).T")
        w(ind + "    if B_NCONTIG:")
        w(ind + "        b = b_desc.load([k_off, off_n])")
        w(ind + "    else:")
        w(ind + "        b = b_desc.load([off_n, k_off]).T")
        w(ind + "    " + _dot_line(interpret, allow_tf32))
    else:
        w(ind + "rm = tl.arange(0, BLOCK_M)")
        w(ind + "rn = tl.arange(0, BLOCK_N)")
        w(ind + "rk = tl.arange(0, BLOCK_K)")
        w(ind + "a_mask_m = rm < M - off_m")
        w(ind + "b_mask_n = rn < N - off_n")
        ka = " + (k_lo * BLOCK_K).to(tl.int64) * stride_ak" if kn.SPLIT_K > 1 else ""
        kb = " + (k_lo * BLOCK_K).to(tl.int64) * stride_bk" if kn.SPLIT_K > 1 else ""
        w(ind + f"a_ptrs = (A_b + off_m.to(tl.int64) * stride_am{ka}")
        w(ind + "          + rm[:, None] * stride_am + rk[None, :] * stride_ak)")
        w(ind + f"b_ptrs = (B_b + off_n.to(tl.int64) * stride_bn{kb}")
        w(ind + "          + rk[:, None] * stride_bk + rn[None, :] * stride_bn)")
        w(ind + "a_step = BLOCK_K * stride_ak")
        w(ind + "b_step = BLOCK_K * stride_bk")
        w(ind + "for kt in " + _range("k_lo", "k_hi", **loop_attrs) + ":")
        w(ind + "    k_rem = K - kt * BLOCK_K")
        w(
            ind
            + "    a = tl.load(a_ptrs, mask=a_mask_m[:, None] & (rk[None, :] < k_rem), other=0.0)"
        )
        w(
            ind
            + "    b = tl.load(b_ptrs, mask=(rk[:, None] < k_rem) & b_mask_n[None, :], other=0.0)"
        )
        w(ind + "    " + _dot_line(interpret, allow_tf32))
        w(ind + "    a_ptrs += a_step")
        w(ind + "    b_ptrs += b_step")
    # epilogue
    w(ind + "offs_m = off_m + tl.arange(0, BLOCK_M)")
    w(ind + "mask_m = offs_m < M")
    if kn.SPLIT_K > 1:
        # partial store: never subtiled (plain fp32 store)
        w(ind + "offs_n = off_n + tl.arange(0, BLOCK_N)")
        w(ind + "mask_n = offs_n < N")
        w(_indent(body, lv))
    else:
        w(_epilogue_block(kn, body, lv))
    return "\n".join(L) + "\n"


def reduce_blocks(knobs: MatmulKnobs) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of the split-K reduce kernel."""
    return 32, 128


def splitk_reduce_source(
    name: str,
    knobs: MatmulKnobs,
    epilogue_params: list[str],
    epilogue_body: str,
) -> str:
    """Source of the split-K reduce kernel (see module docstring).

    ``def NAME(WS, <epilogue_params...>, M, N, BATCH1, BLOCK_M=.., BLOCK_N=.., SPLIT_K=..)``,
    grid :func:`reduce_grid`.  Sums ``WS[0:SPLIT_K, pid_b]`` in float32 (fixed
    order, deterministic) then defines the epilogue names and pastes the body.
    The body's ``acc`` is ``[32, 128]`` (or ``[32, 64]`` twice with subtiling).
    """
    validate(knobs)
    _check_ident(name)
    for p in epilogue_params:
        _check_ident(p)
        if p in _RESERVED:
            raise ValueError(f"epilogue param {p!r} clashes with a kernel parameter")
    rbm, rbn = reduce_blocks(knobs)
    sig = (
        ["WS"]
        + list(epilogue_params)
        + [
            "M",
            "N",
            "BATCH1",
            f"BLOCK_M: tl.constexpr = {rbm}",
            f"BLOCK_N: tl.constexpr = {rbn}",
            f"SPLIT_K: tl.constexpr = {knobs.SPLIT_K}",
        ]
    )
    L = [f"def {name}("] + [f"    {s}," for s in sig] + ["):"]
    L += [
        f"    # generated by opendnn.engines.matmul._kernels: split-K reduce for {knobs.short()}",
        "    pid = tl.program_id(0)",
        "    pid_b = tl.program_id(2)",
        "    b0 = pid_b // BATCH1",
        "    b1 = pid_b % BATCH1",
        "    num_pid_n = ((N + BLOCK_N - 1) // BLOCK_N)",
        "    off_m = (pid // num_pid_n) * BLOCK_M",
        "    off_n = (pid % num_pid_n) * BLOCK_N",
        "    offs_m = off_m + tl.arange(0, BLOCK_M)",
        "    offs_nn = off_n + tl.arange(0, BLOCK_N)",
        "    mask_m = offs_m < M",
        "    mask_nn = offs_nn < N",
        "    mask2 = mask_m[:, None] & mask_nn[None, :]",
        "    split_stride = tl.num_programs(2).to(tl.int64) * M * N",
        "    row = pid_b.to(tl.int64) * M + offs_m.to(tl.int64)",
        "    ws_ptrs = WS + row[:, None] * N + offs_nn[None, :]",
        "    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)",
        "    for s in tl.static_range(SPLIT_K):",
        "        acc += tl.load(ws_ptrs + s * split_stride, mask=mask2, other=0.0)",
    ]
    sub = dataclasses.replace(knobs, BLOCK_M=rbm, BLOCK_N=rbn)
    L.append(_epilogue_block(sub, epilogue_body, 1))
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------
# launch helpers
# ---------------------------------------------------------------------------


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def grid(knobs: MatmulKnobs, M: int, N: int, batch0: int, batch1: int, num_sms: int) -> tuple:
    """Launch grid of the main kernel.

    non-persistent: ``(ceil(M/BM)*ceil(N/BN), SPLIT_K, batch0*batch1)``;
    persistent: ``(P, 1, batch0*batch1)``, ``P = min(work, max(1, num_sms // batch))``
    with ``work = ceil(M/BM)*ceil(N/BN)*SPLIT_K``.  M or N == 0 gives an empty
    grid: do not launch.
    """
    tiles = _cdiv(M, knobs.BLOCK_M) * _cdiv(N, knobs.BLOCK_N)
    batch = batch0 * batch1
    if knobs.persistent:
        work = tiles * knobs.SPLIT_K
        p = min(work, max(1, num_sms // max(batch, 1)))
        return (p, 1, batch)
    return (tiles, knobs.SPLIT_K, batch)


def reduce_grid(knobs: MatmulKnobs, M: int, N: int, batch0: int, batch1: int) -> tuple:
    rbm, rbn = reduce_blocks(knobs)
    return (_cdiv(M, rbm) * _cdiv(N, rbn), 1, batch0 * batch1)


def launch_options(knobs: MatmulKnobs) -> dict:
    """Keyword arguments for the main kernel's launch (besides the constexpr defaults)."""
    return {"num_warps": knobs.num_warps, "num_stages": knobs.num_stages}


def reduce_launch_options(knobs: MatmulKnobs) -> dict:
    return {"num_warps": 4, "num_stages": 1}


def workspace_bytes(knobs: MatmulKnobs, M: int, N: int, batch: int) -> int:
    """Bytes of the float32 split-K workspace ``[SPLIT_K, batch, M, N]`` (0 if SPLIT_K == 1)."""
    if knobs.SPLIT_K <= 1:
        return 0
    return 4 * knobs.SPLIT_K * batch * M * N


def _strides4(s) -> tuple:
    s = tuple(int(x) for x in s)
    if len(s) == 2:
        return (0, 0) + s
    if len(s) != 4:
        raise ValueError("strides must be (row, col) or (b0, b1, row, col)")
    return s


def tma_ok(a_strides, b_strides, dtype_size: int) -> tuple[bool, str]:
    """Can the TMA kernel read these operands?

    ``a_strides = (stride_a_b0, stride_a_b1, stride_am, stride_ak)`` (or just
    ``(stride_am, stride_ak)``), same for B with ``(.., stride_bk, stride_bn)``;
    element strides.  Needs, per operand: one unit inner stride (either one),
    the other matrix stride a nonzero multiple of 16 bytes, batch strides
    multiples of 16 bytes (0 allowed), and a 2- or 4-byte dtype.  The caller
    must also check both base pointers are 16-byte aligned.
    """
    if dtype_size not in (2, 4):
        return False, f"dtype size {dtype_size} not supported by the TMA path"
    for nm, s in (("A", _strides4(a_strides)), ("B", _strides4(b_strides))):
        sb0, sb1, s_row, s_col = s
        for bs in (sb0, sb1):
            if (bs * dtype_size) % 16:
                return False, f"{nm} batch stride {bs} is not a multiple of 16 bytes"
        if s_col == 1:
            lead = s_row
        elif s_row == 1:
            lead = s_col
        else:
            return False, f"{nm} has no unit inner stride (strides {s_row}, {s_col})"
        if lead <= 0 or (lead * dtype_size) % 16:
            return False, f"{nm} leading stride {lead} is not a positive multiple of 16 bytes"
    return True, "ok"


def tma_flags(a_strides, b_strides) -> dict:
    """Constexpr arguments of a TMA kernel for these operand strides (pass as kwargs)."""
    a = _strides4(a_strides)
    b = _strides4(b_strides)
    return {"A_KCONTIG": a[3] == 1, "B_NCONTIG": b[3] == 1}


_ALLOCATOR = None


def ensure_allocator() -> None:
    """Install a torch-based global-scratch allocator for device-side TMA descriptors.

    ``triton.set_allocator`` stores the allocator in a ContextVar, so call this
    in every thread that launches TMA kernels (cheap; idempotent).  The buffer
    comes from torch's stream-ordered caching allocator, so freeing it right
    after the launch is safe.
    """
    global _ALLOCATOR
    import triton

    if _ALLOCATOR is None:
        import torch

        def _alloc(size: int, alignment: int, stream):
            return torch.empty(size, device="cuda", dtype=torch.int8)

        _ALLOCATOR = _alloc
    triton.set_allocator(_ALLOCATOR)


# ---------------------------------------------------------------------------
# analytical cost model
# ---------------------------------------------------------------------------

_SMEM_PER_SM = 227 * 1024
_REGS_PER_SM = 65536


def _tile_efficiency(k: MatmulKnobs, dtype_bytes: int) -> float:
    """Fraction of peak tensor-core rate one CTA tile shape can sustain.

    Shared-memory operand traffic per MMA FLOP scales as (BM+BN)/(BM*BN), so
    efficiency grows with the tile's "intensity" BM*BN/(BM+BN) (85 for 128x256,
    the Hopper sweet spot).  Tiles under 64 rows per warp group cannot use
    wgmma (mma.sync path, about half the rate).
    """
    bm, bn = k.BLOCK_M, k.BLOCK_N
    inten = bm * bn / (bm + bn)
    eff = 0.75 * min(1.0, inten / 85.0) ** 0.35
    # warp specialization (Hopper, num_warps=4) adds a producer group and
    # runs the MMA on two consumer warp groups
    mma_warps = 2 * k.num_warps if k.warp_specialize else k.num_warps
    warpgroups = max(1, mma_warps // 4)
    if bm // warpgroups < 64:
        eff *= 0.55
    # accumulator registers per thread; > ~200 spills
    acc_regs = bm * bn / (32 * mma_warps)
    if acc_regs > 200:
        eff *= 0.3
    if k.tma:
        eff *= 1.04
    if k.BLOCK_K * dtype_bytes < 64:  # short k steps: more barrier/issue overhead
        eff *= 0.9
    return min(eff, 0.95)


# resident warps per SM that hide a transposed float32 operand's loads (H100, the NCHW
# pointwise convolutions of MobileNetV3 / EfficientNet-B0 / ResNet-50 at batch 32: the
# 32x128x16 tile, 7 CTAs of 4 warps per SM, ran 1.2-2.5x faster than the 64x128x64 one,
# one CTA of 4 warps, on the same bytes)
TRANSPOSED_FP32_WARPS = 24


def estimate_seconds(
    knobs: MatmulKnobs,
    M: int,
    N: int,
    K: int,
    batch: int,
    dtype_bytes: int,
    peak_flops: float,
    peak_bw: float,
    num_sms: int,
    transposed_fp32: bool = False,
) -> float:
    """Roofline estimate of one call (main kernel + split-K reduce), in seconds.

    compute: ``waves * tile_time`` where a wave is ``num_sms * ctas_per_sm``
    work items (wave quantization) and ``tile_time = 2*BM*BN*BK*k_steps /
    (peak_flops/num_sms * eff(tile))`` -- partial tiles at the M/N edges cost a
    full tile (tile efficiency); plus a per-tile prologue/epilogue latency.
    memory: max(compulsory DRAM bytes / bw, L2->SM bytes / (3.5*bw)) with
    ``bw = peak_bw * min(1, busy SMs / num_sms)``, plus split-K workspace
    traffic and a second launch.  ``peak_flops`` is the dense rate for the
    operand dtype (tf32 for float32 with tf32 allowed).  Meant for ranking
    configs, not for absolute predictions.

    ``transposed_fp32``: a float32 operand under TF32 that is not K-major (the
    tensor cores read TF32 K-major only, so its tiles pass through registers to
    be transposed on their way to shared memory: synchronous loads, which only
    other resident warps hide): the DRAM rate scales with the warps resident
    per SM, ``min(1, warps / TRANSPOSED_FP32_WARPS)``.
    """
    if M <= 0 or N <= 0 or batch <= 0:
        return 0.0
    k = knobs
    tm, tn = _cdiv(M, k.BLOCK_M), _cdiv(N, k.BLOCK_N)
    tiles = tm * tn * batch
    k_steps_total = _cdiv(K, k.BLOCK_K) if K > 0 else 0
    k_steps = _cdiv(k_steps_total, k.SPLIT_K) if k_steps_total else 0
    work = tiles * k.SPLIT_K
    smem = k.num_stages * (k.BLOCK_M + k.BLOCK_N) * k.BLOCK_K * dtype_bytes
    if smem > _SMEM_PER_SM:
        return float("inf")
    regs_per_cta = 32 * k.num_warps * min(255, int(k.BLOCK_M * k.BLOCK_N / (32 * k.num_warps)) + 40)
    ctas = max(
        1, min(_SMEM_PER_SM // max(smem, 1), _REGS_PER_SM // regs_per_cta, 32 // k.num_warps)
    )
    slots = num_sms * ctas
    waves = _cdiv(work, slots)
    eff = _tile_efficiency(k, dtype_bytes)
    sm_rate = peak_flops / num_sms * eff
    # ctas sharing an SM split its rate
    tile_flops = 2.0 * k.BLOCK_M * k.BLOCK_N * k.BLOCK_K * max(k_steps, 0)
    per_tile_overhead = (0.35e-6 if k.persistent else 0.7e-6) + k.num_stages * 0.08e-6
    if k.tma and not k.persistent:
        # each CTA builds its two descriptors in global memory (+ fence) before the first load
        per_tile_overhead += 1.5e-6
    t_compute = waves * (
        tile_flops * min(ctas, max(1, _cdiv(work, num_sms))) / sm_rate + per_tile_overhead
    )
    if k.persistent:
        # one program per slot; items per program = ceil(work / programs)
        progs = min(work, num_sms)
        t_compute = _cdiv(work, progs) * (tile_flops / sm_rate + per_tile_overhead)
    out_bytes = 2 if dtype_bytes <= 2 else 4
    dram = (M * K + K * N) * dtype_bytes * batch + M * N * out_bytes * batch
    l2 = work * (k.BLOCK_M + k.BLOCK_N) * k.BLOCK_K * max(k_steps, 0) * dtype_bytes
    # one SM cannot pull more than ~1/num_sms of the DRAM bandwidth with a
    # few stages in flight: too few work items leave bandwidth unused
    bw = peak_bw * min(1.0, min(work, slots) / num_sms)
    if transposed_fp32:
        warps = min(ctas, max(1, _cdiv(work, num_sms))) * k.num_warps
        bw *= min(1.0, warps / TRANSPOSED_FP32_WARPS)
    t_mem = max(dram / bw, l2 / (3.5 * bw))
    t = max(t_compute, t_mem) + 3e-6
    if k.SPLIT_K > 1:
        ws = 4.0 * k.SPLIT_K * batch * M * N
        t += 2 * ws / peak_bw + 3e-6
    return t
