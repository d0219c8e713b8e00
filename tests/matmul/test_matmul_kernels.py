"""CPU tests of the Triton matmul source generator (engines/matmul/_kernels.py).

The generated source is written to a temporary module, imported, and run
through Triton's interpreter (``InterpretedFunction``) on CPU tensors, then
compared with a float64 torch matmul.  Block sizes are kept small (16/32)
so the whole file runs in seconds.
"""

import dataclasses
import importlib.util
import itertools
import math
import os
import sys

import pytest
import torch

triton = pytest.importorskip("triton")
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

_HERE = os.path.dirname(os.path.abspath(__file__))
_KPATH = os.path.join(_HERE, "..", "..", "src", "opendnn", "engines", "matmul", "_kernels.py")


def _load_kernels_module():
    spec = importlib.util.spec_from_file_location("_opendnn_matmul_kernels_under_test", _KPATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mk = _load_kernels_module()
Knobs = mk.MatmulKnobs

EPI_PARAMS = ["C", "stride_c_b0", "stride_c_b1", "stride_cm", "stride_cn"]
EPI_BODY = """
    c_base = C + b0.to(tl.int64) * stride_c_b0 + b1.to(tl.int64) * stride_c_b1
    c_ptrs = c_base + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])
"""

_COUNTER = itertools.count()


@pytest.fixture(scope="module")
def srcdir(tmp_path_factory):
    return tmp_path_factory.mktemp("mm_kernels")


def _compile(srcdir, src, name):
    path = os.path.join(str(srcdir), f"{name}.py")
    with open(path, "w") as f:
        f.write("import triton\nimport triton.language as tl\n" + src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return InterpretedFunction(getattr(mod, name))


def _as4(x):
    """View a 2-D/3-D/4-D operand as 4-D [b0, b1, rows, cols] (no copy)."""
    while x.dim() < 4:
        x = x.unsqueeze(0)
    return x


def run_matmul(
    srcdir, knobs, a, b, *, c_dtype=torch.float32, allow_tf32=False, num_sms=4, tma_flags=None
):
    """C = A @ B through the generated kernel(s) in the interpreter.

    a: [.., M, K], b: [.., K, N] (any strides, batch dims broadcast by expand).
    """
    a4, b4 = _as4(a), _as4(b)
    B0 = max(a4.shape[0], b4.shape[0])
    B1 = max(a4.shape[1], b4.shape[1])
    a4 = a4.expand(B0, B1, *a4.shape[2:])
    b4 = b4.expand(B0, B1, *b4.shape[2:])
    M, K = a4.shape[2:]
    N = b4.shape[3]
    c = torch.full((B0, B1, M, N), float("nan"), dtype=c_dtype)
    n = next(_COUNTER)
    src = mk.matmul_source(
        f"mm_{n}",
        knobs,
        epilogue_params=EPI_PARAMS,
        epilogue_body=EPI_BODY,
        allow_tf32=allow_tf32,
        interpret=True,
    )
    fn = _compile(srcdir, src, f"mm_{n}")
    c_args = [c, c.stride(0), c.stride(1), c.stride(2), c.stride(3)]
    tail = [M, N, K, B1, *a4.stride(), *b4.stride()]
    kw = {}
    if knobs.tma:
        kw.update(tma_flags if tma_flags is not None else mk.tma_flags(a4.stride(), b4.stride()))
    g = mk.grid(knobs, M, N, B0, B1, num_sms)
    if M == 0 or N == 0:
        return c  # the caller never launches an empty grid
    if knobs.SPLIT_K > 1:
        ws = torch.full(
            (mk.workspace_bytes(knobs, M, N, B0 * B1) // 4,), float("nan"), dtype=torch.float32
        )
        fn[g](a4, b4, ws, *c_args, *tail, **kw)
        rsrc = mk.splitk_reduce_source(f"mmred_{n}", knobs, EPI_PARAMS, EPI_BODY)
        rfn = _compile(srcdir, rsrc, f"mmred_{n}")
        rfn[mk.reduce_grid(knobs, M, N, B0, B1)](ws, *c_args, M, N, B1)
    else:
        fn[g](a4, b4, *c_args, *tail, **kw)
    return c


def _ref(a, b):
    return torch.matmul(a.double(), b.double())


def _check(c, ref, tol):
    ref = ref.expand_as(c)
    assert not torch.isnan(c).any(), "unwritten (NaN) output elements"
    err = (c.double() - ref).abs().max().item()
    scale = max(1.0, ref.abs().max().item())
    assert err <= tol * scale, f"max abs err {err} (scale {scale})"


def _rand(*shape, dtype):
    return torch.randn(*shape, dtype=torch.float32).to(dtype)


SMALL = Knobs(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_stages=2, num_warps=4)
MID = Knobs(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, num_stages=2, num_warps=4)


# ---------------------------------------------------------------------------
# correctness in the interpreter
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mnk", [(1, 7, 33), (33, 65, 7), (65, 33, 65), (7, 1, 1)])
def test_dtypes_odd_sizes(srcdir, dtype, mnk):
    M, N, K = mnk
    torch.manual_seed(M * 1000 + N * 10 + K)
    a, b = _rand(M, K, dtype=dtype), _rand(K, N, dtype=dtype)
    knobs = SMALL if max(mnk) < 40 else MID
    c = run_matmul(srcdir, knobs, a, b)
    # products of 16-bit inputs are exact in fp32; only fp32 accumulation error
    _check(c, _ref(a, b), 1e-5)


def test_bf16_output_and_grouping(srcdir):
    torch.manual_seed(1)
    M, N, K = 70, 90, 40  # 5x6 tiles of 16: exercises ragged last group
    a, b = _rand(M, K, dtype=torch.bfloat16), _rand(K, N, dtype=torch.bfloat16)
    knobs = dataclasses.replace(SMALL, GROUP_M=3)
    c = run_matmul(srcdir, knobs, a, b, c_dtype=torch.bfloat16)
    _check(c, _ref(a, b), 1e-2)


def test_k_zero(srcdir):
    a = torch.empty(9, 0)
    b = torch.empty(0, 17)
    for knobs in (
        SMALL,
        dataclasses.replace(SMALL, SPLIT_K=2),
        dataclasses.replace(SMALL, persistent=True),
    ):
        c = run_matmul(srcdir, knobs, a, b)
        assert torch.equal(c, torch.zeros_like(c))


def test_m_or_n_zero_grid_is_empty():
    assert mk.grid(SMALL, 0, 17, 1, 1, 4)[0] == 0
    assert mk.grid(SMALL, 17, 0, 1, 1, 4)[0] == 0
    assert math.prod(mk.grid(dataclasses.replace(SMALL, persistent=True), 0, 5, 1, 1, 4)) == 0


def test_batch_broadcast(srcdir):
    torch.manual_seed(2)
    M, N, K = 19, 23, 37
    a = _rand(2, 3, M, K, dtype=torch.float16)
    b = _rand(1, 3, K, N, dtype=torch.float16)  # broadcast over b0 (stride 0 after expand)
    c = run_matmul(srcdir, SMALL, a, b)
    _check(c, _ref(a, b), 1e-5)
    b2 = _rand(K, N, dtype=torch.float16)  # broadcast over both batch dims
    c = run_matmul(srcdir, dataclasses.replace(SMALL, persistent=True), a, b2, num_sms=5)
    _check(c, _ref(a, b2), 1e-5)


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_transposed_operands(srcdir, ta, tb):
    torch.manual_seed(3)
    M, N, K = 33, 40, 29
    a = _rand(K, M, dtype=torch.bfloat16).t() if ta else _rand(M, K, dtype=torch.bfloat16)
    b = _rand(N, K, dtype=torch.bfloat16).t() if tb else _rand(K, N, dtype=torch.bfloat16)
    c = run_matmul(srcdir, SMALL, a, b)
    _check(c, _ref(a, b), 1e-5)


def test_non_unit_strides(srcdir):
    torch.manual_seed(4)
    a = _rand(40, 60, dtype=torch.float32)[::2, ::3]  # [20, 20], strides (120, 3)
    b = _rand(50, 30, dtype=torch.float32)[::2, 1::2]  # [25, 15] -> use [:20]
    b = b[:20]
    c = run_matmul(srcdir, SMALL, a, b)
    _check(c, _ref(a, b), 1e-5)


@pytest.mark.parametrize("split", [2, 3])
@pytest.mark.parametrize("persistent", [False, True])
def test_split_k(srcdir, split, persistent):
    torch.manual_seed(5 + split)
    M, N, K = 33, 17, 65  # 5 k-tiles of 16: uneven ranges
    a = _rand(2, M, K, dtype=torch.bfloat16)
    b = _rand(K, N, dtype=torch.bfloat16)
    knobs = dataclasses.replace(SMALL, SPLIT_K=split, persistent=persistent)
    c = run_matmul(srcdir, knobs, a, b, num_sms=3)
    _check(c, _ref(a, b), 1e-5)


def test_split_k_more_splits_than_k_tiles(srcdir):
    torch.manual_seed(6)
    a, b = _rand(20, 10, dtype=torch.float16), _rand(10, 20, dtype=torch.float16)
    knobs = dataclasses.replace(SMALL, SPLIT_K=4)  # one k-tile, three empty splits
    _check(run_matmul(srcdir, knobs, a, b), _ref(a, b), 1e-5)


@pytest.mark.parametrize("persistent", [False, True])
def test_epilogue_subtile(srcdir, persistent):
    torch.manual_seed(7)
    M, N, K = 45, 50, 20
    a, b = _rand(M, K, dtype=torch.float32), _rand(K, N, dtype=torch.float32)
    knobs = dataclasses.replace(MID, epilogue_subtile=2, persistent=persistent)
    _check(run_matmul(srcdir, knobs, a, b, num_sms=2), _ref(a, b), 1e-5)


def test_persistent_many_tiles_per_program(srcdir):
    torch.manual_seed(8)
    M, N, K = 65, 65, 24
    a, b = _rand(3, M, K, dtype=torch.float16), _rand(3, K, N, dtype=torch.float16)
    knobs = dataclasses.replace(SMALL, persistent=True)
    # 5x5 tiles per batch, 3 batches, 6 "SMs" -> 2 programs per batch, ~13 tiles each
    _check(run_matmul(srcdir, knobs, a, b, num_sms=6), _ref(a, b), 1e-5)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("persistent", [False, True])
def test_tma_interpreted(srcdir, ta, tb, persistent):
    # TMA needs 16-byte aligned leading strides: dims multiple of 8 for fp16
    torch.manual_seed(9)
    M, N, K = 40, 48, 56
    a = _rand(K, M, dtype=torch.float16).t() if ta else _rand(M, K, dtype=torch.float16)
    b = _rand(N, K, dtype=torch.float16).t() if tb else _rand(K, N, dtype=torch.float16)
    ok, why = mk.tma_ok(_as4(a).stride(), _as4(b).stride(), 2)
    assert ok, why
    knobs = dataclasses.replace(SMALL, tma=True, persistent=persistent, BLOCK_N=32)
    _check(run_matmul(srcdir, knobs, a, b, num_sms=3), _ref(a, b), 1e-5)


def test_tma_split_k_batched(srcdir):
    torch.manual_seed(10)
    a = _rand(2, 24, 72, dtype=torch.bfloat16)
    b = _rand(72, 40, dtype=torch.bfloat16)
    knobs = dataclasses.replace(SMALL, tma=True, SPLIT_K=2)
    _check(run_matmul(srcdir, knobs, a, b), _ref(a, b), 1e-5)


def test_fp32_tf32_flag_source():
    kw = dict(epilogue_params=EPI_PARAMS, epilogue_body=EPI_BODY)
    s_tf32 = mk.matmul_source("k", SMALL, allow_tf32=True, interpret=False, **kw)
    s_ieee = mk.matmul_source("k", SMALL, allow_tf32=False, interpret=False, **kw)
    s_interp = mk.matmul_source("k", SMALL, allow_tf32=False, interpret=True, **kw)
    assert 'input_precision="tf32"' in s_tf32 and 'input_precision="ieee"' in s_ieee
    assert ".to(tl.float32), b.to(tl.float32)" in s_interp
    assert ".to(tl.float32), b.to(tl.float32)" not in s_ieee
    for s in (s_tf32, s_interp):
        assert "libdevice" not in s
        compile(s, "<gen>", "exec")


def test_source_signature_contract():
    kw = dict(
        epilogue_params=["C", "ldc"], epilogue_body="    pass\n", allow_tf32=True, interpret=False
    )
    s = mk.matmul_source("kern", SMALL, **kw)
    head = s[: s.index("):")]
    names = [p.strip().split(":")[0] for p in head[len("def kern(") :].split(",") if p.strip()]
    assert names[:16] == [
        "A",
        "B",
        "C",
        "ldc",
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
    ]
    s2 = mk.matmul_source("kern", dataclasses.replace(SMALL, SPLIT_K=2), **kw)
    assert "def kern(\n    A,\n    B,\n    WS,\n    C,\n    ldc," in s2
    r = mk.splitk_reduce_source(
        "red", dataclasses.replace(SMALL, SPLIT_K=2), ["C", "ldc"], "    pass\n"
    )
    assert r.startswith("def red(\n    WS,\n    C,\n    ldc,\n    M,\n    N,\n    BATCH1,")
    with pytest.raises(ValueError):
        mk.matmul_source(
            "kern", SMALL, epilogue_params=["M"], epilogue_body="", allow_tf32=True, interpret=False
        )


# ---------------------------------------------------------------------------
# host-side helpers
# ---------------------------------------------------------------------------


def test_grid_and_workspace():
    k = Knobs(128, 256, 64, 8, 3, 8)
    assert mk.grid(k, 8192, 8192, 1, 1, 132) == (64 * 32, 1, 1)
    assert mk.grid(dataclasses.replace(k, SPLIT_K=3), 100, 300, 2, 5, 132) == (2, 3, 10)
    kp = dataclasses.replace(k, persistent=True)
    assert mk.grid(kp, 8192, 8192, 1, 1, 132) == (132, 1, 1)
    assert mk.grid(kp, 128, 256, 1, 1, 132) == (1, 1, 1)
    assert mk.grid(kp, 8192, 8192, 4, 1, 132) == (33, 1, 4)
    assert mk.grid(kp, 8192, 8192, 500, 1, 132) == (1, 1, 500)
    assert mk.workspace_bytes(k, 10, 20, 3) == 0
    assert mk.workspace_bytes(dataclasses.replace(k, SPLIT_K=4), 10, 20, 3) == 4 * 4 * 3 * 10 * 20


def test_tma_ok():
    assert mk.tma_ok((8192, 1), (8192, 1), 2) == (True, "ok")
    assert mk.tma_ok((0, 0, 1, 4096), (0, 0, 1, 4096), 2)[0]  # column-major both
    assert not mk.tma_ok((33, 1), (64, 1), 2)[0]  # 66-byte rows
    assert not mk.tma_ok((64, 2), (64, 1), 2)[0]  # no unit stride
    assert not mk.tma_ok((3, 0, 64, 1), (64, 1), 2)[0]  # misaligned batch stride
    assert mk.tma_ok((0, 4096, 64, 1), (0, 0, 64, 1), 4)[0]
    assert not mk.tma_ok((64, 1), (64, 1), 1)[0]
    assert mk.tma_flags((64, 1), (1, 64)) == {"A_KCONTIG": True, "B_NCONTIG": False}


def test_knob_space():
    ks = mk.knob_space()
    assert 8 <= len(ks) <= 48
    assert len(set(ks)) == len(ks)
    for k in ks:
        mk.validate(k)
    first = ks[0]
    assert (first.BLOCK_M, first.BLOCK_N) in ((128, 256), (256, 128)) and first.tma
    assert any(k.SPLIT_K > 1 for k in ks) and any(k.BLOCK_M <= 32 for k in ks)


def test_estimate_seconds_ranks_sensibly():
    peak, bw, sms = 990e12, 3.0e12, 132
    ks = mk.knob_space()

    def best(M, N, K):
        return min(ks, key=lambda k: mk.estimate_seconds(k, M, N, K, 1, 2, peak, bw, sms))

    big = best(8192, 8192, 8192)
    assert big.BLOCK_M * big.BLOCK_N >= 128 * 128
    t = mk.estimate_seconds(big, 8192, 8192, 8192, 1, 2, peak, bw, sms)
    assert 2 * 8192**3 / peak < t < 3 * 2 * 8192**3 / peak
    skinny = best(16, 4096, 4096)
    assert skinny.BLOCK_M <= 64
    # more work never costs less
    k = ks[0]
    assert mk.estimate_seconds(k, 4096, 4096, 4096, 1, 2, peak, bw, sms) < mk.estimate_seconds(
        k, 4096, 4096, 8192, 1, 2, peak, bw, sms
    )
    assert mk.estimate_seconds(k, 0, 4096, 4096, 1, 2, peak, bw, sms) == 0.0


def test_validate_rejects_bad_knobs():
    for bad in (
        Knobs(BLOCK_M=8),
        Knobs(BLOCK_K=48),
        Knobs(SPLIT_K=0),
        Knobs(flatten=True),
        Knobs(warp_specialize=True),
        Knobs(epilogue_subtile=3),
    ):
        with pytest.raises(ValueError):
            mk.validate(bad)
