"""Helpers shared by the GPU probes in bench/."""
import os
import re
import subprocess
import tempfile
import traceback

import torch
import triton
from triton.testing import do_bench


def copy_gbs() -> float:
    """The copy floor as the bench measures it: 1 GiB of float32, read + write, GB/s."""
    src = torch.randn(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6


def colsum_input(M: int = 8192, N: int = 8192):
    """The column-sum probes' problem, with the copy floor printed: (copy GB/s, x [M, N]
    bfloat16, its column sums in float64 rounded to float32, x's bytes)."""
    copy = copy_gbs()
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    print(f"copy {copy:.0f} GB/s (1 GiB float32, as the bench)")
    return copy, x, x.double().sum(0).float(), x.numel() * 2


def planned(g, engine_id: int, knobs, pack):
    """``g`` (a validated-or-not pygraph) built with ``engine_id`` and ``knobs`` (None: the
    heuristics' mode A) and a workspace; returns a callable running ``pack`` on it."""
    import opendnn.frontend as cudnn
    g.validate()
    g.build_operation_graph()
    if knobs is None:
        g.create_execution_plans([cudnn.heur_mode.A])
    else:
        g.create_execution_plan(engine_id, knobs)
    g.check_support()
    g.build_plans()
    dev = next(iter(pack.values())).device
    ws = torch.empty(max(g.get_workspace_size(), 1), device=dev, dtype=torch.uint8)
    return lambda: g.execute(pack, ws)


def sdpa_forward(q, k, v, out, lse, causal: bool, knobs):
    """A training-forward sdpa graph (O and Stats) of q / k / v [B, H, S, D] (attn_scale
    1 / sqrt(D), causal: top-left mask) built with engine 40's ``knobs`` (None: the
    heuristics' mode A), writing ``out`` and ``lse`` [B, H, S, 1]; returns the run callable."""
    import math

    import opendnn.frontend as cudnn
    g = cudnn.pygraph()
    tq, tk, tv = (g.tensor_like(t) for t in (q, k, v))
    o, st = g.sdpa(tq, tk, tv, attn_scale=1 / math.sqrt(q.shape[-1]), generate_stats=True,
                   diagonal_band_right_bound=0 if causal else None)
    o.set_output(True)
    st.set_output(True)
    return planned(g, 40, knobs, {tq: q, tk: k, tv: v, o: out, st: lse})


PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")


def gluon_compile_offline(fn, args, consts, opts):
    """Compile Gluon kernel ``fn`` for sm_90a without a GPU (``args``: its runtime arguments,
    TMA descriptors built on CPU tensors; ``consts``: constexprs by name; ``opts``: launch
    options); returns the CompiledKernel."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    names = fn.arg_names
    sig, constexprs, attrs = {}, {}, {}
    pos = 0
    for i, name in enumerate(names):
        if name in consts:
            sig[name] = "constexpr"
            constexprs[(i, )] = consts[name]
            continue
        a = args[pos]
        pos += 1
        sig[name] = mangle_type(a)
        if isinstance(a, torch.Tensor) or hasattr(a, "data_ptr"):
            # 16-byte aligned, as the JIT specializes an aligned pointer at launch
            attrs[(i, )] = [["tt.divisibility", 16]]
    src = GluonASTSource(fn, sig, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def ptxas_report(ptx):
    """Registers / spill stores / spill loads / smem of every entry in ``ptx``."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        r = subprocess.run([PTXAS, "-arch=sm_90a", "-v", path, "-o", os.devnull],
                           capture_output=True, text=True)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        return "ptxas failed: " + out.strip()[-2000:]
    regs = re.findall(r"Used (\d+) registers", out)
    spill = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    spill = ",".join(f"{a}/{b}" for a, b in spill)
    # Warp-specialized kernels: ptxas reports the launch bound (maxnreg); the per-partition
    # budgets are the setmaxnreg.{inc,dec} values Triton emitted.
    setmax = sorted({int(n) for n in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)",
                                                ptx)})
    extra = f" setmaxnreg={setmax}" if setmax else ""
    return f"ptxas regs={','.join(regs)} spill st/ld bytes={spill}{extra}"


def compile_report(tag: str, fn, args, consts, opts) -> None:
    """Compile ``fn`` offline for sm_90a and print ``tag``, its shared memory and the
    ptxas report, or the failure (and go on)."""
    try:
        ck = gluon_compile_offline(fn, args, consts, opts)
        print(f"{tag} smem={ck.metadata.shared:6d} {ptxas_report(ck.asm['ptx'])}", flush=True)
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"{tag} FAILED: {type(e).__name__}: {e}"[:3000], flush=True)
        traceback.print_exc()


def lse_reference(q, k, scale, causal=False, chunk=1024):
    """float32 natural-log logsumexp of the scaled scores q k^T [B, H, S], over chunks of
    ``chunk`` query rows (never S x S for all heads at once); k has q's heads. Top-left
    causal mask."""
    B, H, S, D = q.shape
    out = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    kf = k.float()
    cols = torch.arange(S, device=q.device)
    for i in range(0, S, chunk):
        s = torch.matmul(q[:, :, i:i + chunk].float(), kf.transpose(-1, -2)) * scale
        if causal:
            rows = torch.arange(i, min(i + chunk, S), device=q.device)
            s.masked_fill_(cols[None, :] > rows[:, None], float("-inf"))
        out[:, :, i:i + chunk] = torch.logsumexp(s, dim=-1)
        del s
    return out
