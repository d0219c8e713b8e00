"""Benchmark runner: every opendnn engine against cuDNN/cuBLAS (through PyTorch) in the
same run, on the same inputs.

    python -m opendnn.bench [FAMILY[,FAMILY...] | core | all] [--out DIR] [--tag TAG]
                            [--flush clean|dirty] [--kinds ...] [--layers ...]

Families: pointwise, reduction, matmul, latency (together ``core``), conv, softmax,
elementwise, lrn, dropout, pool, norm (layer / RMS norm and batch norm), attention, moe
(the MoE grouped matmul against cuDNN's where the cudnn-frontend wheel has it and
``torch._grouped_mm``), models
(whole networks in images/s; ``OPENDNN_BENCH_MODELS=train,infer64,infer1,emonet`` picks
its cases -- see models.py).

For each case it prints ms, GB/s or TFLOP/s, the ratio to the reference (>1 = opendnn
faster) and the fraction of the measured floor (copy bandwidth, cuBLAS 8192^3 rate
measured at the start of the run).

Results: one JSON file per family and GPU, ``bench/results/<gpu>/<file>.json`` (``<gpu>``
a short slug of the device name, e.g. ``h100``; ``<file>`` the family, ``core`` for
pointwise / reduction / matmul / latency, ``<file>-<tag>`` with ``--tag``), each
``{"meta": {device, library versions, date, commit, flush, floors, ...}, "rows": [...]}``.
A run replaces the rows of the families it ran and keeps the file's other rows (the other
core families; with ``--kinds`` / ``--layers`` or ``OPENDNN_BENCH_MODELS``, the conv or
models cases it did not run), each kept row marked with the run it came from. ``--out DIR``
writes into DIR instead (repeatable); ``$OUT``, when set, gets a copy of each file written
in the first folder (the merged file, every row) under ``$OUT/<gpu>/``.
``bench/plot.py`` turns the files into the index table and the summary plot. The commit
recorded is the checkout's, or ``OPENDNN_BENCH_COMMIT`` when set (a copied tree whose git
history is not its own).

Timing: medians of CUDA-event times after warm-up, on random inputs, the L2 emptied before
each timed call by reading a 256 MB buffer (``--flush dirty`` writes it instead, as
triton's do_bench does; timing.py says why the default reads).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time

import torch

from .. import __version__
from ..engines.fusion import shapes as fusion_shapes
from ..engines.matmul import shapes as matmul_shapes
from . import timing
from .timing import bench


class Runner:
    def __init__(self):
        import triton

        self.rows = []
        self.meta = {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "opendnn": __version__,
            "cudnn": torch.backends.cudnn.version(),
            "date": datetime.date.today().isoformat(),
            "commit": _commit(),
            "flush": timing.flush_mode(),
        }
        src = torch.randn(1 << 28, device="cuda")
        dst = torch.empty_like(src)
        ms = bench(lambda: dst.copy_(src))
        self.copy_gbs = 2 * src.numel() * 4 / ms / 1e6
        x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        self.mm_tflops = 2 * 8192**3 / bench(lambda: x @ y) / 1e9
        self.meta.update(
            copy_GBps=round(self.copy_gbs, 1), cublas_bf16_8192_TFLOPs=round(self.mm_tflops, 1)
        )
        print(
            f"floors: copy {self.copy_gbs:.0f} GB/s, "
            f"cuBLAS bf16 8192^3 {self.mm_tflops:.0f} TFLOP/s"
        )

    def add(
        self,
        family,
        case,
        ms,
        ref_ms,
        *,
        nbytes=None,
        flops=None,
        ref_name="pytorch",
        plan="",
        **extra,
    ):
        """One row; ``extra`` (e.g. eager timings, find costs) is stored as given."""
        row = {
            "family": family,
            "case": case,
            "ms": round(ms, 5),
            "ref": ref_name,
            "ref_ms": round(ref_ms, 5),
            "ratio": round(ref_ms / ms, 3),
            "plan": plan,
        }
        row.update({k: round(v, 5) if isinstance(v, float) else v for k, v in extra.items()})
        if "eager_ms" in extra and "ref_eager_ms" in extra:
            row["eager_ratio"] = round(extra["ref_eager_ms"] / extra["eager_ms"], 3)
        if nbytes:
            row["GBps"] = round(nbytes / ms / 1e6, 1)
            row["floor_frac"] = round(row["GBps"] / self.copy_gbs, 3)
        if flops:
            row["TFLOPs"] = round(flops / ms / 1e9, 1)
            row["ref_TFLOPs"] = round(flops / ref_ms / 1e9, 1)
            row["floor_frac"] = round(row["TFLOPs"] / self.mm_tflops, 3)
        self.rows.append(row)
        rate = f"{row['GBps']:8.0f} GB/s" if nbytes else f"{row['TFLOPs']:8.1f} TF/s"
        eager = f"  eager {row['eager_ratio']:5.2f}" if "eager_ratio" in row else ""
        print(
            f"{family:10s} {case:44s} {ms:9.4f} ms {rate}  {ref_name} {ref_ms:9.4f} ms  "
            f"ratio {row['ratio']:5.2f}  floor {row['floor_frac']:.2f}{eager}",
            flush=True,
        )

    def save(self, folders, families, tag="", restricted=(), copies=()) -> list[str]:
        """Write the rows of ``families`` (the runner's families that ran) into one file per
        result file (``FILE_OF``) in each of ``folders``, merged with that folder's file,
        and the document written in the first folder, as it is, into each of ``copies``;
        see the module docstring."""
        written = []
        for name in dict.fromkeys(FILE_OF.get(f, f) for f in families):
            ran = [f for f in families if FILE_OF.get(f, f) == name]
            kinds = {k for f in ran for k in ROW_FAMILIES.get(f, (f,))}
            fname = f"{name}-{tag}.json" if tag else f"{name}.json"
            rows = [row for row in self.rows if row["family"] in kinds]
            first = None
            for d in folders:
                os.makedirs(d, exist_ok=True)
                path = os.path.join(d, fname)
                doc = _merge(path, self.meta, rows, ran, kinds, restricted)
                first = doc if first is None else first
                _write(path, doc)
                written.append(path)
            for d in copies:
                os.makedirs(d, exist_ok=True)
                _write(os.path.join(d, fname), first)
                written.append(os.path.join(d, fname))
        return written


def _write(path: str, doc: dict) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


FILE_OF = {"pointwise": "core", "reduction": "core", "matmul": "core", "latency": "core"}
ROW_FAMILIES = {"norm": ("norm", "batchnorm"), "latency": ()}
LATENCY_META = ("plan_build_ms_median", "execute_host_us")


def _merge(path, meta, rows, ran, kinds, restricted) -> dict:
    """The document for ``path``: this run's ``meta`` and ``rows``, plus the rows of the
    existing file that this run did not measure -- families of the same file it did not run,
    and, for a ``restricted`` family (a subset of its cases ran), the cases it skipped."""
    meta = {k: v for k, v in meta.items() if k not in LATENCY_META or "latency" in ran}
    meta["families"] = list(ran)
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return {"meta": meta, "rows": rows}
    old_meta = old.get("meta", {}) if isinstance(old, dict) else {}
    source = {"date": old_meta.get("date"), "commit": old_meta.get("commit")}
    have = {(row["family"], row["case"]) for row in rows}
    kept = []
    for row in old.get("rows", []) if isinstance(old, dict) else []:
        fam = row.get("family")
        if fam in kinds and (fam not in restricted or (fam, row.get("case")) in have):
            continue
        kept.append({**row, "from": row.get("from", source)})
    if "latency" not in ran and any(k in old_meta for k in LATENCY_META):
        meta.update({k: old_meta[k] for k in LATENCY_META if k in old_meta})
        meta.setdefault("carried", {})["latency"] = old_meta.get("carried", {}).get(
            "latency", source
        )
    for row in kept:
        meta.setdefault("carried", {}).setdefault(row["family"], row["from"])
    return {"meta": meta, "rows": rows + kept}


def gpu_slug(device_name: str) -> str:
    """A short folder name for a device: 'NVIDIA H100 80GB HBM3' -> 'h100',
    'NVIDIA A100-SXM4-80GB' -> 'a100', 'NVIDIA GeForce RTX 4090' -> 'rtx-4090'."""
    words = [
        w
        for w in device_name.replace("-", " ").split()
        if w.lower() not in ("nvidia", "geforce", "tesla", "quadro")
    ]
    if not words:
        return "gpu"
    if words[0].lower() == "rtx" and len(words) > 1:
        words = ["rtx", words[1]]
    else:
        words = words[:1]
    return "-".join(re.sub(r"[^a-z0-9]+", "", w.lower()) for w in words) or "gpu"


def _commit() -> str | None:
    """The commit the results are recorded against: ``OPENDNN_BENCH_COMMIT`` when set (a
    copy of the tree whose git history is not its own, such as a remote machine's, would
    report a stale commit), else the checkout's short commit (with ``-dirty`` for
    uncommitted changes), or None."""
    given = os.environ.get("OPENDNN_BENCH_COMMIT", "").strip()
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _graph_exec(g, pack):
    ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    return lambda: g.execute(pack, ws)


def run_pointwise(r: Runner):
    import opendnn.frontend as cudnn

    for shape in fusion_shapes.BENCH_POINTWISE:
        for dt in (torch.bfloat16, torch.float32):
            ts = [torch.randn(shape, device="cuda", dtype=dt) for _ in range(5)]
            out = torch.empty(shape, device="cuda", dtype=dt)
            g = cudnn.pygraph(
                intermediate_data_type=cudnn.data_type.FLOAT,
                compute_data_type=cudnn.data_type.FLOAT,
            )
            a, b, c = (g.tensor_like(t) for t in ts[:3])
            y = g.sigmoid(g.add(a, g.mul(b, c)))
            g.build([cudnn.heur_mode.A])
            fn = _graph_exec(g, {a: ts[0], b: ts[1], c: ts[2], y: out})
            nbytes = 4 * out.numel() * out.element_size()
            r.add(
                "pointwise",
                f"sigmoid(a+b*c) {shape} {str(dt)[6:]}",
                bench(fn),
                bench(lambda: torch.sigmoid(ts[0] + ts[1] * ts[2])),
                nbytes=nbytes,
                ref_name="eager",
                plan=g.get_plan_name_at_index(0),
            )
            # six-op chain: sigmoid(relu(a*b + c) * d - e)... + identity-free
            g = cudnn.pygraph(
                intermediate_data_type=cudnn.data_type.FLOAT,
                compute_data_type=cudnn.data_type.FLOAT,
            )
            a, b, c, d, e = (g.tensor_like(t) for t in ts)
            y = g.tanh(g.sub(g.mul(g.relu(g.add(g.mul(a, b), c)), d), e))
            g.build([cudnn.heur_mode.A])
            fn = _graph_exec(g, {a: ts[0], b: ts[1], c: ts[2], d: ts[3], e: ts[4], y: out})
            nbytes = 6 * out.numel() * out.element_size()
            r.add(
                "pointwise",
                f"tanh(relu(a*b+c)*d-e) {shape} {str(dt)[6:]}",
                bench(fn),
                bench(lambda: torch.tanh(torch.relu(ts[0] * ts[1] + ts[2]) * ts[3] - ts[4])),
                nbytes=nbytes,
                ref_name="eager",
                plan=g.get_plan_name_at_index(0),
            )


def run_reduction(r: Runner):
    import opendnn.frontend as cudnn

    for shape, out_shape in fusion_shapes.BENCH_REDUCTION:
        for dt in (torch.bfloat16, torch.float32):
            x = torch.randn(shape, device="cuda", dtype=dt)
            out = torch.empty(out_shape, device="cuda", dtype=torch.float32)
            g = cudnn.pygraph(compute_data_type=cudnn.data_type.FLOAT)
            tx = g.tensor_like(x)
            y = g.reduction(tx, mode=cudnn.reduction_mode.ADD).set_dim(list(out_shape))
            y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
            g.build([cudnn.heur_mode.A])
            fn = _graph_exec(g, {tx: x, y: out})
            dim = 1 if out_shape[1] == 1 else 0
            nbytes = x.numel() * x.element_size() + out.numel() * 4
            r.add(
                "reduction",
                f"sum {shape}->{out_shape} {str(dt)[6:]}",
                bench(fn),
                bench(lambda: x.sum(dim, keepdim=True, dtype=torch.float32)),
                nbytes=nbytes,
                plan=g.get_plan_name_at_index(0),
            )


def run_matmul(r: Runner):
    import opendnn.frontend as cudnn

    cases = [(m, n, k, torch.bfloat16) for m, n, k in matmul_shapes.BENCH] + [
        (8192, 8192, 8192, torch.float16)
    ]
    for m, n, k, dt in cases:
        A = torch.randn(m, k, device="cuda", dtype=dt)
        B = torch.randn(k, n, device="cuda", dtype=dt)
        C = torch.empty(m, n, device="cuda", dtype=dt)
        g = cudnn.pygraph(
            intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
        )
        ta, tb = g.tensor_like(A), g.tensor_like(B)
        tc = g.matmul(ta, tb)
        g.build([cudnn.heur_mode.A])
        fn = _graph_exec(g, {ta: A, tb: B, tc: C})
        r.add(
            "matmul",
            f"{m}x{n}x{k} {str(dt)[6:]}",
            bench(fn),
            bench(lambda: A @ B),
            flops=2 * m * n * k,
            ref_name="cuBLAS",
            plan=g.get_plan_name_at_index(0),
        )
    m = n = k = 8192
    A = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    B = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1, n, device="cuda", dtype=torch.bfloat16)
    C = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    g = cudnn.pygraph(
        intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
    )
    ta, tb, tbias = g.tensor_like(A), g.tensor_like(B), g.tensor_like(bias)
    y = g.gelu(g.bias(g.matmul(ta, tb), tbias))
    g.build([cudnn.heur_mode.A])
    fn = _graph_exec(g, {ta: A, tb: B, tbias: bias, y: C})
    r.add(
        "matmul",
        "matmul+bias+gelu 8192^3 bf16",
        bench(fn),
        bench(lambda: torch.nn.functional.gelu(A @ B + bias)),
        flops=2 * m * n * k,
        ref_name="torch mm->add->gelu",
        plan=g.get_plan_name_at_index(0),
    )


def run_latency(r: Runner):
    """Plan build with the kernel already compiled, and execute()'s host time per call."""
    import opendnn.frontend as cudnn

    x = torch.randn(1024, device="cuda")
    out = torch.empty_like(x)

    def make():
        g = cudnn.pygraph()
        tx = g.tensor_like(x)
        y = g.relu(tx)
        return g, tx, y

    g, tx, y = make()
    g.build([cudnn.heur_mode.A])
    builds = []
    for _ in range(20):
        g2, tx2, y2 = make()
        t0 = time.perf_counter()
        g2.build([cudnn.heur_mode.A])
        builds.append((time.perf_counter() - t0) * 1e3)
    builds.sort()
    pack = {tx2: x, y2: out}
    for _ in range(100):
        g2.execute(pack, None)
    torch.cuda.synchronize()
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        g2.execute(pack, None)
    host_us = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    r.meta["plan_build_ms_median"] = round(builds[len(builds) // 2], 3)
    r.meta["execute_host_us"] = round(host_us, 2)
    print(
        f"latency    plan build (kernel compiled) {builds[len(builds) // 2]:.3f} ms median; "
        f"execute() host {host_us:.1f} us/call"
    )


def run_conv(r: Runner, args=None):
    from .conv import run_conv as run

    kinds = (
        tuple(args.kinds.split(","))
        if args and args.kinds
        else ("fprop", "fused", "dgrad", "wgrad", "tf32")
    )
    run(
        r,
        kinds,
        args.layers.split(",") if args and args.layers else None,
        args.set.split(",") if args and args.set else None,
        args.variants.split(",") if args and args.variants else None,
    )


def run_softmax(r: Runner):
    from .softmax import run_softmax as run

    run(r, bench)


def run_elementwise(r: Runner):
    from .elementwise import run_elementwise as run

    run(r, bench)


def run_lrn(r: Runner):
    from .lrn import run_lrn as run

    run(r, bench)


def run_dropout(r: Runner):
    from .lrn import run_dropout as run

    run(r, bench)


def run_pool(r: Runner):
    from .pool import run_pool as run

    run(r, bench)


def run_norm(r: Runner):
    """Layer / RMS norm rows, then batch norm's."""
    from .batchnorm import run_batchnorm
    from .norm import run_norm as run

    run(r, bench)
    run_batchnorm(r, bench)


def run_attention(r: Runner):
    from .attention import run_attention as run

    run(r, bench)


def run_models(r: Runner):
    from .models import run_models as run

    run(r, bench)


def run_moe(r: Runner):
    from .moe import run_moe as run

    run(r, bench)


FAMILIES = {
    "pointwise": run_pointwise,
    "reduction": run_reduction,
    "matmul": run_matmul,
    "latency": run_latency,
    "conv": run_conv,
    "softmax": run_softmax,
    "elementwise": run_elementwise,
    "lrn": run_lrn,
    "dropout": run_dropout,
    "pool": run_pool,
    "norm": run_norm,
    "attention": run_attention,
    "models": run_models,
    "moe": run_moe,
}


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m opendnn.bench",
        description="opendnn against cuDNN / cuBLAS / PyTorch, "
        "same run, same inputs; writes "
        "bench/results/<gpu>/<family>.json",
    )
    p.add_argument(
        "family",
        nargs="?",
        default="all",
        help="all, core (pointwise, reduction, matmul, latency), or a comma list "
        "of: " + ",".join(FAMILIES),
    )
    p.add_argument(
        "--out",
        action="append",
        default=None,
        help="folder for the result files (repeatable; default bench/results/<gpu>)",
    )
    p.add_argument("--kinds", default="", help="conv: comma list of fprop,fused,dgrad,wgrad,tf32")
    p.add_argument("--layers", default="", help="conv: comma list of layer names")
    p.add_argument(
        "--set",
        default="",
        help="conv: comma list of layer sets (resnet50, mobilenetv3, efficientnet_b0, "
        "convnext_t, resnext50, unet3d, conv1d) or all; default resnet50",
    )
    p.add_argument(
        "--variants",
        default="",
        help="conv: comma list of nhwc-bf16, nchw-tf32, nchw-fp16 (default: every variant "
        "for the sets other than ResNet-50, which keeps its historical kinds)",
    )
    p.add_argument(
        "--tag",
        default="",
        help="write <family>-<tag>.json instead of <family>.json (a separate "
        "file, e.g. for an experiment)",
    )
    p.add_argument(
        "--flush",
        default="clean",
        choices=timing.MODES,
        help="empty the L2 before each timed call by reading (clean) or writing "
        "(dirty, do_bench's way) a 256 MB buffer",
    )
    args = p.parse_args(argv)
    timing.set_flush(args.flush)
    fams = {"all": list(FAMILIES), "core": ["pointwise", "reduction", "matmul", "latency"]}.get(
        args.family, args.family.split(",")
    )
    bad = [f for f in fams if f not in FAMILIES]
    if bad:
        p.error(f"unknown family {', '.join(bad)} (choose from all, core, {', '.join(FAMILIES)})")
    if args.tag and not re.fullmatch(r"[A-Za-z0-9_.-]+", args.tag):
        p.error(f"--tag {args.tag!r}: letters, digits, '_', '.' and '-' only")
    if not torch.cuda.is_available():
        print("opendnn.bench needs a CUDA GPU (the comparisons are against cuDNN/cuBLAS)")
        return 2
    r = Runner()
    # a run stopped by SIGTERM (``timeout``, a scheduler) still writes the rows it measured:
    # the signal ends the family in flight, which is recorded as interrupted
    signal.signal(signal.SIGTERM, _interrupt)
    for i, f in enumerate(fams):
        try:
            FAMILIES[f](r, args) if f == "conv" else FAMILIES[f](r)
        except KeyboardInterrupt:
            print(f"\n{f}: interrupted; writing the rows measured so far")
            for g in fams[i:]:
                r.meta.setdefault("errors", {})[g] = "interrupted"
            break
        except Exception as e:  # report and go on: one family's failure must not hide the rest
            import traceback

            traceback.print_exc()
            r.meta.setdefault("errors", {})[f] = repr(e)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    gpu = gpu_slug(r.meta["device"])
    outs = args.out or [os.path.join("bench", "results", gpu)]
    copies = [os.path.join(os.environ["OUT"], gpu)] if os.environ.get("OUT") else []
    # families that measured a subset of their cases (or failed part-way) keep the rest
    # a conv run that leaves out sets, layers, kinds or variants keeps the file's other rows
    restricted = (
        {"conv"} if args.kinds or args.layers or args.set != "all" or args.variants else set()
    )
    if os.environ.get("OPENDNN_BENCH_MODELS"):
        restricted.add("models")
    for f in r.meta.get("errors", {}):
        restricted.update(ROW_FAMILIES.get(f, (f,)))
    written = r.save(outs, fams, args.tag, restricted, copies)
    print("\nwrote " + ", ".join(written) + "\n")
    print(f"{'case':52s} {'ms':>9s} {'rate':>10s} {'ratio':>6s} {'floor':>6s} {'eager':>6s}")
    for row in r.rows:
        rate = f"{row.get('GBps', row.get('TFLOPs'))}"
        eager = f" {row['eager_ratio']:6.2f}" if "eager_ratio" in row else ""
        print(
            f"{row['family'][:6] + ' ' + row['case']:52s} {row['ms']:9.4f} {rate:>10s} "
            f"{row['ratio']:6.2f} {row['floor_frac']:6.2f}{eager}"
        )
    return 1 if r.meta.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
