"""Seeded, randomized fuzzer of BAD input for opendnn's error contract.

The contract (opendnn.errors): every invalid descriptor, graph, variant pack or
workspace raises a typed error (an ``OpenDNNError`` -- ``BadParamError`` is a ValueError,
``GraphNotSupportedError`` -- or a ValueError) whose message names the operation, the
tensor and the rule; nothing is silently wrong; no raw Python error (TypeError, KeyError,
AttributeError, ...) or torch internal error escapes from the library for bad user input.

Each *family* below is one kind of mutation of a small valid problem (frontend graphs:
pointwise chain, reduction, matmul + bias, conv_fprop, layernorm, batchnorm, softmax,
sdpa; and the legacy descriptor API). A family draws its bad values from a
``random.Random`` seeded by (--seed, family, iteration), so every probe reproduces:

    PYTHONPATH=src .venv/bin/python bench/fuzz_errors.py                 # everything (~4 min)
    PYTHONPATH=src .venv/bin/python bench/fuzz_errors.py --only vp_ -v   # some families
    PYTHONPATH=src .venv/bin/python bench/fuzz_errors.py --only g_cycle --iter 3 -v

Outcomes:
  OK          typed error whose message names the op, the tensor (when the mutation is
              about one) and the rule
  WEAK        typed error, but the message lacks the op, the tensor or the rule (or a plain
              ValueError from Python itself, e.g. an enum lookup, with no op in it)
  BUG-RAW     an untyped exception escaped (TypeError, KeyError, AttributeError, ...,
              or a torch / numpy internal error)
  BUG-SILENT  nothing was raised: the call accepted the invalid input (and ran)
  HANG/CRASH  the probe ran past --timeout, or (isolated probes) the process died
  VALID       the mutation turned out to be legal input and ran (not a finding)
  HARNESS     the fuzzer itself failed (no library frame in the traceback)

Everything runs in one process, sequentially; probes that may kill the process (raw
garbage pointers) run one at a time in a child process. CPU only.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import traceback
import warnings
import zlib
from dataclasses import dataclass

import numpy as np
import torch

import opendnn.frontend as cudnn
import opendnn.legacy as L
from opendnn.enums import DataType as DT
from opendnn.enums import HeurMode, NormForwardPhase, ReductionMode
from opendnn.errors import InternalError, OpenDNNError

warnings.filterwarnings("ignore")
torch.set_num_threads(1)

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "opendnn")
F = DT.FLOAT
A = HeurMode.A
FUSION_ID, REFERENCE_ID = 1, 0


# ==== probes and their outcome ===============================================================
@dataclass
class Probe:
    what: str  # the mutation, with the values drawn
    run: object  # callable: performs the whole call chain
    tensor: object = None  # a tensor name (or tuple of names) the message must contain
    op: str | None = None  # an operation name the message must contain
    valid: bool = False  # the input may be legal: returning is VALID, not SILENT
    rule: tuple = ()  # words of which the message must contain one (the rule)
    isolate: bool = False  # may kill the process: run in a child


class Silent(Exception):
    """Raised by a probe when the library accepted something it should have refused."""


class Hang(BaseException):
    pass


FAMILIES: list = []


def family(cat: str, n: int = 6):
    def deco(fn):
        FAMILIES.append((cat, fn.__name__, n, fn))
        return fn

    return deco


def _frames(e):
    tb = traceback.extract_tb(e.__traceback__)
    lib = [f for f in tb if f.filename.startswith(SRC)]
    last = tb[-1] if tb else None
    return lib, last


def _where(f) -> str:
    if f is None:
        return "?"
    fn = f.filename
    if fn.startswith(SRC):
        fn = "src/opendnn" + fn[len(SRC) :]
    else:
        for marker in ("site-packages/", "lib/python"):
            if marker in fn:
                fn = fn.split(marker, 1)[1]
                break
    return f"{fn}:{f.lineno} ({f.name})"


def classify(p: Probe, exc: BaseException | None) -> dict:
    """-> {outcome, exc, msg, origin, lib, missing}."""
    if exc is None:
        return dict(
            outcome="VALID" if p.valid else "BUG-SILENT",
            exc="",
            msg="(returned)",
            origin="",
            lib="",
            missing=[],
        )
    if isinstance(exc, Hang):
        return dict(
            outcome="HANG/CRASH", exc="timeout", msg=str(exc), origin="", lib="", missing=[]
        )
    if isinstance(exc, Silent):
        return dict(outcome="BUG-SILENT", exc="", msg=str(exc), origin="", lib="", missing=[])
    lib, last = _frames(exc)
    r = dict(
        exc=type(exc).__name__,
        msg=str(exc).replace("\n", " ")[:400],
        origin=_where(last),
        lib=_where(lib[-1]) if lib else "",
        missing=[],
    )
    if not lib and not isinstance(exc, OpenDNNError):
        r["outcome"] = "HARNESS"
        r["tb"] = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-1500:]
        return r
    msg = str(exc)
    if isinstance(exc, OpenDNNError):
        if not exc.op or (p.op and p.op not in msg):
            r["missing"].append("op" + (f" {p.op!r}" if p.op else ""))
        names = (p.tensor,) if isinstance(p.tensor, str) else (p.tensor or ())
        if names and not any(n in msg for n in names):
            r["missing"].append(f"tensor {' or '.join(names)}")
        if not (exc.rule or "").strip() or (
            p.rule and not any(w.lower() in msg.lower() for w in p.rule)
        ):
            r["missing"].append("rule" + (f" (one of {list(p.rule)})" if p.rule else ""))
        if isinstance(exc, InternalError):
            r["missing"].append("category (INTERNAL_ERROR for bad input)")
        r["outcome"] = "WEAK" if r["missing"] else "OK"
        return r
    foreign = (
        last is not None
        and not last.filename.startswith(SRC)
        and any(k in last.filename for k in ("/torch/", "/numpy/", "/triton/"))
    )
    if isinstance(exc, ValueError) and not foreign:
        # a plain ValueError (allowed type) raised by Python itself (int(), an enum lookup)
        # on the library's behalf: typed, but the message cannot name the op or the tensor
        r["missing"].append("op/tensor (plain ValueError)")
        r["outcome"] = "WEAK"
        return r
    r["outcome"] = "BUG-RAW"
    return r


@contextlib.contextmanager
def alarm(seconds: int):
    def handler(signum, frame):
        raise Hang(f"no answer after {seconds} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_probe(p: Probe, timeout: int) -> dict:
    exc = None
    t0 = time.perf_counter()
    try:
        with alarm(timeout):
            p.run()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 -- classifying is the point
        exc = e
    r = classify(p, exc)
    r["seconds"] = round(time.perf_counter() - t0, 2)
    return r


# ==== buffers ===================================================================================
_GEN = torch.Generator().manual_seed(0)


def rand_buf(d, poison=False) -> torch.Tensor:
    """A torch tensor with descriptor ``d``'s dims, strides and type; never-zero values
    (NaN for outputs)."""
    n = max(d.span, 1)
    dt = d.torch_dtype
    if dt.is_floating_point:
        flat = (
            torch.full((n,), float("nan")) if poison else torch.rand(n, generator=_GEN) * 1.9 + 0.1
        )
        flat = flat.to(dt)
    elif dt == torch.bool:
        flat = torch.randint(0, 2, (n,), generator=_GEN).bool()
    else:
        flat = torch.randint(1, 4, (n,), generator=_GEN).to(dt)
    return flat.as_strided(d.dims, d.strides)


def auto_pack(g) -> dict:
    """A valid variant pack (by uid) for a validated graph, from its frozen descriptors."""
    og = g.op_graph
    outs = set(og.output_uids)
    # scalars given when the graph was built (epsilon=..., momentum=...) keep their values
    known = {t.get_uid() for t in getattr(g, "_tensors", ()) if t.value is not None}
    pack = {}
    for uid, d in og.tensors.items():
        if d.is_virtual:
            continue
        if d.is_pass_by_value:
            if uid not in known:
                pack[uid] = 1 if not d.data_type.is_floating else 0.5
        else:
            pack[uid] = rand_buf(d, poison=uid in outs)
    return pack


def workspace_for(g):
    n = g.get_workspace_size()
    return torch.empty(n, dtype=torch.uint8) if n else None


def run_graph(g, modes=(A, HeurMode.FALLBACK)):
    """build + execute with an automatic pack (what a user does after building)."""
    g.build(list(modes))
    pack = auto_pack(g)
    g.execute(pack, workspace_for(g))
    return pack


def run_named(g, T: dict, bufs: dict, modes=(A, HeurMode.FALLBACK)):
    """build + execute with the *unmutated* problem's buffers, bound by tensor name."""
    g.build(list(modes))
    pack = {T[n]: b for n, b in bufs.items() if n in T}
    n = g.get_workspace_size()  # huge dims may ask for terabytes: give a small one
    g.execute(
        pack,
        torch.empty(n, dtype=torch.uint8)
        if 0 < n < 1 << 26
        else torch.empty(64, dtype=torch.uint8)
        if n
        else None,
    )


# ==== base problems (frontend) ==================================================================
# Each returns (graph, {name: tensor}); tensors have distinctive names so a message can be
# checked for them. INPUTS lists the inputs a mutation may pick.
def b_pw():
    g = cudnn.pygraph(name="g_pw")
    x = g.tensor([2, 3, 4], [12, 4, 1], F, name="x_in")
    s = g.tensor([1, 3, 1], [3, 1, 1], F, name="s_in")
    m = g.mul(x, s, name="mul_n")
    m.set_name("m_mid")
    y = g.relu(m, name="relu_n").set_output(True).set_name("y_out")
    return g, dict(x_in=x, s_in=s, m_mid=m, y_out=y)


def b_red():
    g = cudnn.pygraph(name="g_red")
    x = g.tensor([4, 6], [6, 1], F, name="x_in")
    y = g.reduction(x, ReductionMode.ADD, name="red_n").set_output(True).set_name("y_out")
    y.set_dim([4, 1])
    return g, dict(x_in=x, y_out=y)


def b_mm():
    g = cudnn.pygraph(name="g_mm")
    a = g.tensor([1, 4, 5], [20, 5, 1], F, name="a_in")
    b = g.tensor([1, 5, 3], [15, 3, 1], F, name="b_in")
    bias = g.tensor([1, 1, 3], [3, 3, 1], F, name="bias_in")
    c = g.matmul(a, b, name="mm_n").set_name("c_mid")
    y = g.bias(c, bias, name="bias_n").set_output(True).set_name("y_out")
    return g, dict(a_in=a, b_in=b, bias_in=bias, c_mid=c, y_out=y)


def b_conv():
    g = cudnn.pygraph(name="g_conv")
    x = g.tensor([1, 2, 5, 5], [50, 25, 5, 1], F, name="x_in")
    w = g.tensor([3, 2, 3, 3], [18, 9, 3, 1], F, name="w_in")
    y = g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="conv_n")
    y.set_output(True).set_name("y_out")
    return g, dict(x_in=x, w_in=w, y_out=y)


def b_ln():
    g = cudnn.pygraph(name="g_ln")
    x = g.tensor([2, 8], [8, 1], F, name="x_in")
    s = g.tensor([1, 8], [8, 1], F, name="scale_in")
    b = g.tensor([1, 8], [8, 1], F, name="bias_in")
    y, mean, iv = g.layernorm(NormForwardPhase.TRAINING, x, s, b, 1e-5, name="ln_n")
    y.set_output(True).set_name("y_out")
    mean.set_output(True).set_name("mean_out")
    iv.set_output(True).set_name("iv_out")
    return g, dict(x_in=x, scale_in=s, bias_in=b, y_out=y, mean_out=mean, iv_out=iv)


def b_bn():
    g = cudnn.pygraph(name="g_bn")
    x = g.tensor([2, 3, 2, 2], [12, 4, 2, 1], F, name="x_in")
    st = {
        n: g.tensor([1, 3, 1, 1], [3, 1, 1, 1], F, name=n)
        for n in ("scale_in", "bias_in", "rmean_in", "rvar_in")
    }
    outs = g.batchnorm(
        x,
        st["scale_in"],
        st["bias_in"],
        st["rmean_in"],
        st["rvar_in"],
        epsilon=1e-5,
        momentum=0.1,
        name="bn_n",
    )
    names = ("y_out", "mean_out", "iv_out", "nrm_out", "nrv_out")
    T = dict(x_in=x, **st)
    for t, n in zip(outs, names):
        t.set_output(True).set_name(n)
        T[n] = t
    return g, T


def b_sm():
    g = cudnn.pygraph(name="g_sm")
    x = g.tensor([2, 5], [5, 1], F, name="x_in")
    y = g.softmax(x, axis=-1, name="sm_n").set_output(True).set_name("y_out")
    return g, dict(x_in=x, y_out=y)


def b_sdpa():
    g = cudnn.pygraph(name="g_sdpa")
    dims, strides = [1, 2, 4, 8], [64, 32, 8, 1]
    q = g.tensor(dims, strides, F, name="q_in")
    k = g.tensor(dims, strides, F, name="k_in")
    v = g.tensor(dims, strides, F, name="v_in")
    o, stats = g.sdpa(q, k, v, attn_scale=0.35, generate_stats=True, name="sdpa_n")
    o.set_output(True).set_name("o_out")
    stats.set_output(True).set_name("stats_out")
    return g, dict(q_in=q, k_in=k, v_in=v, o_out=o, stats_out=stats)


BASES = dict(pw=b_pw, red=b_red, mm=b_mm, conv=b_conv, ln=b_ln, bn=b_bn, sm=b_sm, sdpa=b_sdpa)
INPUTS = dict(
    pw=["x_in", "s_in"],
    red=["x_in"],
    mm=["a_in", "b_in", "bias_in"],
    conv=["x_in", "w_in"],
    ln=["x_in", "scale_in", "bias_in"],
    bn=["x_in", "scale_in", "bias_in", "rmean_in", "rvar_in"],
    sm=["x_in"],
    sdpa=["q_in", "k_in", "v_in"],
)
OUTPUTS = dict(
    pw=["y_out"],
    red=["y_out"],
    mm=["y_out"],
    conv=["y_out"],
    ln=["y_out", "mean_out", "iv_out"],
    bn=["y_out", "mean_out", "iv_out", "nrm_out", "nrv_out"],
    sm=["y_out"],
    sdpa=["o_out", "stats_out"],
)
NODE = dict(
    pw="mul_n",
    red="red_n",
    mm="mm_n",
    conv="conv_n",
    ln="ln_n",
    bn="bn_n",
    sm="sm_n",
    sdpa="sdpa_n",
)

_BUILT: dict = {}


def built(base: str):
    """(graph, tensors, {name: buffer}) of a base, built once with heuristics A and run once
    (so the cached pack is known to be good)."""
    hit = _BUILT.get(base)
    if hit is None:
        g, T = BASES[base]()
        pack = run_graph(g)
        by_uid = {t.get_uid(): n for n, t in T.items()}
        bufs = {by_uid[u]: b for u, b in pack.items() if u in by_uid}
        hit = _BUILT[base] = (g, T, bufs, pack)
    return hit


def good_bufs(base: str) -> dict:
    """Fresh copies of a base's good buffers by name (scalars included by uid elsewhere)."""
    _, _, bufs, _ = built(base)
    return {n: (b.clone() if isinstance(b, torch.Tensor) else b) for n, b in bufs.items()}


def good_pack(base: str) -> dict:
    """A fresh good pack keyed by graph tensor (non-virtual ones) and uid (scalars)."""
    g, T, _, pack = built(base)
    names = {t.get_uid(): n for n, t in T.items()}
    out = {}
    for u, b in pack.items():
        key = T[names[u]] if u in names else u
        out[key] = b.clone() if isinstance(b, torch.Tensor) else b
    return out


def fresh(base):
    g, T = BASES[base]()
    return g, T


def pick(r, seq):
    return seq[r.randrange(len(seq))]


def overlaps(dims, strides) -> bool:
    """Two distinct indices address one element (brute force over the small dims)."""
    import itertools

    seen = set()
    for idx in itertools.product(*[range(n) for n in dims]):
        off = sum(i * s for i, s in zip(idx, strides))
        if off in seen:
            return True
        seen.add(off)
    return False


def packed(dims):
    out, run = [0] * len(dims), 1
    for i in reversed(range(len(dims))):
        out[i] = run
        run *= max(int(dims[i]), 1)
    return out


# ==== A. tensor attributes (frontend) ===========================================================
@family("tensor", 10)
def t_neg_dim(r):
    base = pick(r, list(BASES))
    name = pick(r, INPUTS[base])
    k = r.randrange(len(BASES[base]()[1][name].get_dim()))
    v = -r.randint(1, 6)

    def run():
        g, T = fresh(base)
        d = T[name].get_dim()
        d[k] = v
        T[name].set_dim(d)
        run_named(g, T, good_bufs(base))

    return Probe(f"{base}: {name}.dim[{k}] = {v}", run, tensor=name)


@family("tensor", 8)
def t_zero_dim(r):
    """Zero-size tensors are legal (DESIGN.md): must run or raise a typed error."""
    base = pick(r, ["pw", "red", "mm", "sm", "ln"])
    name = pick(r, INPUTS[base])
    k = r.randrange(len(BASES[base]()[1][name].get_dim()))

    def run():
        g, T = fresh(base)
        d = T[name].get_dim()
        d[k] = 0
        T[name].set_dim(d)
        for o in OUTPUTS[base]:
            if base == "red":
                T[o].set_dim([0 if k == 0 else 4, 1])
        run_graph(g)

    return Probe(f"{base}: {name}.dim[{k}] = 0 (run with a matching pack)", run, valid=True)


@family("tensor", 8)
def t_huge_dim(r):
    base = pick(r, list(BASES))
    name = pick(r, INPUTS[base])
    k = r.randrange(len(BASES[base]()[1][name].get_dim()))
    v = pick(r, [2**31, 2**40, 2**63 - 1, 2**64 + 3, 10**30])

    def run():
        g, T = fresh(base)
        d = T[name].get_dim()
        d[k] = v
        T[name].set_dim(d).set_stride(packed(d))
        run_named(g, T, good_bufs(base))

    return Probe(
        f"{base}: {name}.dim[{k}] = {v} (packed strides), executed with the original buffers", run
    )


@family("tensor", 8)
def t_stride_len(r):
    base = pick(r, list(BASES))
    name = pick(r, INPUTS[base] + OUTPUTS[base])
    delta = pick(r, [-10, -1, 1, 2])

    def run():
        g, T = fresh(base)
        t = T[name]
        n = len(t.get_dim()) if t.get_dim() else 4
        t.set_stride([1] * max(n + delta, 0))
        run_named(g, T, good_bufs(base))

    return Probe(f"{base}: {name} gets len(dims){delta:+d} strides", run, tensor=name)


@family("tensor", 8)
def t_neg_stride(r):
    base = pick(r, list(BASES))
    name = pick(r, INPUTS[base])
    k = r.randrange(len(BASES[base]()[1][name].get_dim()))
    v = -r.randint(1, 30)

    def run():
        g, T = fresh(base)
        s = T[name].get_stride()
        s[k] = v
        T[name].set_stride(s)
        run_named(g, T, good_bufs(base))

    return Probe(f"{base}: {name}.stride[{k}] = {v}", run, tensor=name)


@family("tensor", 8)
def t_overlap_out(r):
    base = pick(r, ["pw", "red", "mm", "conv", "ln", "sm", "sdpa", "bn"])
    name = pick(r, OUTPUTS[base])
    kind = pick(r, ["zero", "ones", "small"])

    def run():
        g, T = fresh(base)
        g.validate()
        d = T[name].get_dim()
        if all(x == 1 for x in d):
            raise Silent("skip: size-1 output cannot overlap")  # not applicable
        st = (
            [0] * len(d)
            if kind == "zero"
            else [1] * len(d)
            if kind == "ones"
            else [max(s // 2, 1) if i == 0 else s for i, s in enumerate(packed(d))]
        )
        if not overlaps(d, st):
            raise Silent("skip: these strides do not overlap for these dims")
        g2, T2 = fresh(base)
        T2[name].set_stride(st)
        if base == "red":
            T2[name].set_dim([4, 1])
        run_graph(g2)

    return Probe(f"{base}: output {name} strides overlap ({kind})", run, tensor=name)


@family("tensor", 6)
def t_overlap_in(r):
    """Overlapping (broadcast) input strides are legal: must run or raise a typed error."""
    base = pick(r, ["pw", "red", "mm", "sm", "ln"])
    name = pick(r, INPUTS[base])
    kind = pick(r, ["zero", "ones"])

    def run():
        g, T = fresh(base)
        d = T[name].get_dim()
        T[name].set_stride([0] * len(d) if kind == "zero" else [1] * len(d))
        run_graph(g)

    return Probe(f"{base}: input {name} strides all {kind}", run, tensor=name, valid=True)


@family("tensor", 6)
def t_many_dims(r):
    base = pick(r, list(BASES))
    name = pick(r, INPUTS[base])
    n = r.randint(9, 12)

    def run():
        g, T = fresh(base)
        T[name].set_dim([1] * n).set_stride([1] * n)
        run_named(g, T, good_bufs(base))

    return Probe(f"{base}: {name} gets {n} dims", run, tensor=name)


_BAD_TYPES = [
    999,
    -7,
    "FOO",
    "",
    "float ",
    torch.complex64,
    torch.int16,
    3.7,
    True,
    None,
    object(),
    [DT.FLOAT],
    np.float32,
    np.dtype("float16"),
]


@family("tensor", 14)
def t_bad_dtype(r):
    base = pick(r, list(BASES))
    name = pick(r, INPUTS[base])
    v = pick(r, _BAD_TYPES)
    how = pick(r, ["set_data_type", "tensor(data_type=)"])

    def run():
        g, T = fresh(base)
        t = T[name]
        if how == "set_data_type":
            t.set_data_type(v)
            got = t.get_data_type()
        else:
            got = g.tensor(t.get_dim(), t.get_stride(), v, name=name + "_2").get_data_type()
        raise Silent(f"data type {v!r} accepted as {DT(got).name}")

    return Probe(f"{base}: {name} {how} {v!r}", run, op=None, tensor=None)


@family("tensor", 6)
def t_exotic_dtype(r):
    """Every DataType on an input: must run or be refused with a typed error."""
    base = pick(r, ["pw", "red", "mm", "conv", "ln", "sm", "sdpa", "bn"])
    name = pick(r, INPUTS[base])
    dt = pick(
        r,
        [
            DT.BOOLEAN,
            DT.INT8,
            DT.UINT8,
            DT.INT32,
            DT.INT64,
            DT.FP8_E4M3,
            DT.FP8_E5M2,
            DT.DOUBLE,
            DT.HALF,
            DT.BFLOAT16,
        ],
    )

    def run():
        g, T = fresh(base)
        T[name].set_data_type(dt)
        run_graph(g)

    return Probe(f"{base}: input {name} is {dt.name}", run, tensor=name, valid=True)


@family("tensor", 8)
def t_dup_uid(r):
    variant = pick(
        r, ["other_dtype", "other_strides", "same", "input_is_mid", "other_pbv", "out_is_other_in"]
    )

    def run():
        g, T = fresh("pw")
        x, s = T["x_in"], T["s_in"]
        if variant in ("other_dtype", "other_strides", "same", "other_pbv"):
            # a second input tensor of the same dims sharing x's uid
            z = g.tensor([2, 3, 4], [12, 4, 1], F, name="z_twin", uid=77)
            x.set_uid(77)
            if variant == "other_dtype":
                z.set_data_type(DT.HALF)
            elif variant == "other_strides":
                z.set_stride([1, 2, 6])
            elif variant == "other_pbv":
                z.set_is_pass_by_value(True)
            g.exp(z, name="exp_twin").set_output(True).set_name("y2_out")
            g.build([A])
            d = g.op_graph.tensors[77]
            if variant != "same":
                raise Silent(
                    f"two tensors with uid 77 ({variant}) accepted; the graph keeps "
                    f"{d.data_type.name} strides {list(d.strides)} "
                    f"pbv={d.is_pass_by_value}"
                )
            run_graph(g)
        elif variant == "input_is_mid":
            s.set_uid(501)
            T["m_mid"].set_uid(501)
            run_graph(g)
        else:
            T["y_out"].set_uid(600)
            x.set_uid(600)
            run_graph(g)

    return Probe(
        f"pw: duplicate uid ({variant})",
        run,
        valid=(variant == "same"),
        tensor={"other_dtype": "z_twin", "other_strides": "z_twin", "other_pbv": "z_twin"}.get(
            variant
        ),
    )


@family("tensor", 8)
def t_names(r):
    v = pick(r, ["", "x" * 5000, "a'b\"c\nd", "ünï©ødé", 123, None, "y_out", "::"])

    def run():
        g, T = fresh("pw")
        T["x_in"].set_name(v)
        T["s_in"].set_name(v if v != "y_out" else "y_out")
        run_graph(g)
        g2 = cudnn.pygraph(name=v if isinstance(v, str) else "g")
        g2.deserialize(g.serialize())

    return Probe(f"pw: tensor names set to {v!r:.30} (legal or typed error)", run, valid=True)


@family("tensor", 12)
def t_setter_types(r):
    what = pick(
        r,
        [
            "set_dim(None)",
            "set_dim(5)",
            "set_dim('234')",
            "set_dim([2, 3.5, 4])",
            "set_dim([2, '3', 4])",
            "set_stride(None)",
            "set_stride([12, 4, 1.9])",
            "set_uid(None)",
            "set_uid('u1')",
            "set_uid(2.7)",
            "tensor(dim=5)",
            "tensor(dim=[2, 3.5, 4])",
            "tensor(dim=[2, 'a', 4])",
            "tensor(stride=[12, 'x', 1])",
        ],
    )

    def run():
        g, T = fresh("pw")
        x = T["x_in"]
        if what.startswith("tensor("):
            arg = what[len("tensor(") : -1]
            kw = eval("dict(" + arg + ")")
            kw.setdefault("dim", [2, 3, 4])
            kw.setdefault("stride", [12, 4, 1])
            t = g.tensor(data_type=F, name="t_new", **kw)
            g.exp(t, name="exp_new").set_output(True).set_name("y2_out")
            g.validate()
            raise Silent(
                f"{what} accepted: descriptor dims "
                f"{list(g.op_graph.tensors[t.get_uid()].dims)} strides "
                f"{list(g.op_graph.tensors[t.get_uid()].strides)}"
            )
        eval("x." + what)
        if what == "set_dim([2, '3', 4])":
            return
        raise Silent(
            f"{what} accepted: dim={x.get_dim()} stride={x.get_stride()} uid={x.get_uid()}"
        )

    return Probe(f"pw: x_in.{what}", run, tensor=None, valid=what in ("set_dim([2, '3', 4])",))


# ==== B. graph structure ==========================================================================
@family("graph", 6)
def g_cycle(r):
    n = r.randint(2, 4)

    def run():
        g = cudnn.pygraph(name="g_cyc")
        a = g.tensor([3, 4], [4, 1], F, name="a_in", uid=5)
        t = a
        for i in range(n):
            t = g.relu(t, name=f"n{i}") if i % 2 == 0 else g.exp(t, name=f"n{i}")
        t.set_uid(5)
        run_graph(g)

    return Probe(f"cycle through {n} nodes (last output gets the input's uid)", run, op="g_cyc")


@family("graph", 6)
def g_dup_producer(r):
    same_name = r.random() < 0.5
    kind = pick(r, ["two_pointwise", "matmul_and_pointwise", "output_is_intermediate"])

    def run():
        g, T = fresh("mm")
        if kind == "two_pointwise":
            y2 = g.exp(T["a_in"], name="exp2_n")
            y2.set_uid(900).set_name("dup" if same_name else "d2")
            T["y_out"].set_uid(900)
        elif kind == "matmul_and_pointwise":
            y2 = g.exp(T["c_mid"], name="exp2_n")
            y2.set_uid(T["y_out"].get_uid() if T["y_out"].get_uid() >= 0 else 901)
            T["y_out"].set_uid(901)
            y2.set_uid(901)
        else:
            y2 = g.neg(T["a_in"], name="neg2_n").set_output(True)
            T["c_mid"].set_uid(902)
            y2.set_uid(902)
        run_graph(g)

    return Probe(f"mm: two producers of one uid ({kind}, same name {same_name})", run)


@family("graph", 5)
def g_inplace_multi(r):
    base = pick(r, ["pw", "mm", "ln", "conv"])
    inp = pick(r, INPUTS[base])
    out = pick(r, OUTPUTS[base])

    def run():
        g, T = fresh(base)
        T[inp].set_uid(700)
        T[out].set_uid(700)
        run_graph(g)

    return Probe(f"{base}: output {out} shares uid with input {inp}", run)


@family("graph", 4)
def g_virtual_input(r):
    base = pick(r, list(BASES))
    name = pick(r, INPUTS[base])

    def run():
        g, T = fresh(base)
        T[name].set_is_virtual(True)
        run_graph(g)

    return Probe(f"{base}: input {name} marked virtual", run, tensor=name)


@family("graph", 6)
def g_pbv_output(r):
    kind = pick(r, ["scalar_reduction_output", "pointwise_output", "intermediate"])

    def run():
        g = cudnn.pygraph(name="g_pbv")
        x = g.tensor([4, 6], [6, 1], F, name="x_in")
        if kind == "scalar_reduction_output":
            y = g.reduction(x, ReductionMode.ADD, name="red_n").set_name("y_out")
            y.set_dim([1, 1]).set_output(True).set_is_pass_by_value(True)
        elif kind == "pointwise_output":
            one = g.tensor([1, 1], [1, 1], F, name="one_in")
            y = g.exp(one, name="exp_n").set_name("y_out").set_output(True)
            y.set_is_pass_by_value(True)
        else:
            m = g.reduction(x, ReductionMode.MAX, name="red_n").set_name("m_mid")
            m.set_dim([1, 1]).set_is_pass_by_value(True)
            y = g.mul(x, m, name="mul_n").set_output(True).set_name("y_out")
        g.build([A])
        pack = auto_pack(g)
        g.execute(pack, workspace_for(g))
        d = g.op_graph.tensors[y.get_uid()]
        raise Silent(
            f"a pass-by-value output ({kind}) was accepted; after execute the pack "
            f"holds {pack.get(y.get_uid())!r} for it (pbv={d.is_pass_by_value})"
        )

    return Probe(
        f"pass-by-value tensor as a node output ({kind})",
        run,
        tensor="y_out" if kind != "intermediate" else "m_mid",
    )


@family("graph", 16)
def g_shape_mismatch(r):
    base = pick(r, list(BASES))
    choices = {
        "pw": [
            ("s_in", [1, 4, 1]),
            ("s_in", [2, 3, 5]),
            ("x_in", [3, 4, 4]),
            ("y_out", [2, 3, 5]),
            ("y_out", [2, 3]),
        ],
        "red": [("y_out", [4, 6, 1]), ("y_out", [3, 1]), ("y_out", [2, 1]), ("y_out", [8])],
        "mm": [
            ("b_in", [1, 6, 3]),
            ("a_in", [2, 4, 5]),
            ("b_in", [5, 3]),
            ("bias_in", [1, 1, 4]),
            ("c_mid", [1, 4, 4]),
            ("a_in", [5]),
        ],
        "conv": [
            ("w_in", [3, 3, 3, 3]),
            ("w_in", [3, 1, 3, 3]),
            ("w_in", [3, 2, 9, 9]),
            ("y_out", [1, 3, 4, 4]),
            ("w_in", [3, 2, 3]),
            ("x_in", [1, 2, 5, 5, 5]),
            ("w_in", [3, 0, 3, 3]),
        ],
        "ln": [
            ("scale_in", [1, 7]),
            ("bias_in", [1, 4]),
            ("mean_out", [2, 8]),
            ("scale_in", [8]),
            ("x_in", [2, 8, 1, 1, 1]),
        ],
        "bn": [
            ("scale_in", [1, 4, 1, 1]),
            ("rvar_in", [1, 3, 2, 1]),
            ("x_in", [2, 3]),
            ("y_out", [2, 3, 2, 3]),
            ("x_in", [1, 3, 1, 1]),
        ],
        "sm": [("y_out", [2, 6]), ("y_out", [5, 2]), ("y_out", [10])],
        "sdpa": [
            ("k_in", [1, 2, 4, 16]),
            ("v_in", [1, 2, 5, 8]),
            ("k_in", [1, 3, 4, 8]),
            ("q_in", [1, 2, 4, 7]),
            ("q_in", [2, 4, 8]),
            ("stats_out", [1, 2, 4, 2]),
            ("k_in", [2, 2, 4, 8]),
        ],
    }
    name, dims = pick(r, choices[base])
    related = {
        "pw": ("x_in", "s_in"),
        "mm": ("a_in", "b_in", "bias_in", "c_mid"),
        "conv": ("x_in", "w_in"),
        "ln": ("x_in", "scale_in", "bias_in"),
        "bn": ("x_in", "scale_in"),
        "sm": ("x_in",),
        "sdpa": ("q_in", "k_in", "v_in"),
        "red": ("x_in",),
    }[base]

    def run():
        g, T = fresh(base)
        T[name].set_dim(dims).set_stride(packed(dims))
        run_named(g, T, {n: b for n, b in good_bufs(base).items() if n != name})

    return Probe(f"{base}: {name}.dim = {dims}", run, tensor=(name,) + related)


@family("graph", 16)
def g_attr_conv(r):
    kw = pick(
        r,
        [
            dict(padding=[-1, 1]),
            dict(padding=[1, 1, 1]),
            dict(stride=[0, 1]),
            dict(stride=[-2, 1]),
            dict(dilation=[0, 1]),
            dict(padding=1.5),
            dict(padding="a"),
            dict(padding=[1, 1], pre_padding=[0, 0]),
            dict(convolution_mode=7),
            dict(convolution_mode="FOO"),
            dict(stride=[1]),
            dict(padding=[4, 4]),
            dict(dilation=[5, 5]),
            dict(padding=None, stride=None, dilation=[1, 1, 1, 1]),
            dict(padding=[True, 1]),
            dict(stride=(2.5, 1)),
        ],
    )
    which = pick(r, ["conv_fprop", "conv_dgrad", "conv_wgrad"])

    def run():
        g = cudnn.pygraph(name="g_cv")
        x = g.tensor([1, 2, 5, 5], [50, 25, 5, 1], F, name="x_in")
        w = g.tensor([3, 2, 3, 3], [18, 9, 3, 1], F, name="w_in")
        dy = g.tensor([1, 3, 5, 5], [75, 25, 5, 1], F, name="dy_in")
        args = dict(padding=[1, 1], stride=[1, 1], dilation=[1, 1])
        args.update(kw)
        if which == "conv_fprop":
            y = g.conv_fprop(x, w, name="cv_n", **args)
        elif which == "conv_dgrad":
            y = g.conv_dgrad(dy, w, name="cv_n", **args).set_dim([1, 2, 5, 5])
        else:
            y = g.conv_wgrad(x, dy, name="cv_n", **args).set_dim([3, 2, 3, 3])
        y.set_output(True).set_name("y_out")
        run_graph(g)

    # one value stands for every spatial axis (conv_nodes._fill_defaults): stride=[1] is legal
    legal = (
        kw in (dict(padding=[4, 4]), dict(dilation=[5, 5])) and which == "conv_fprop"
    ) or kw == dict(stride=[1])
    return Probe(f"{which} with {kw}", run, op="cv_n", valid=legal)


@family("graph", 10)
def g_attr_softmax(r):
    axis = pick(r, [2, -3, 7, -100, "a", 1.5, None])
    backward = r.random() < 0.3

    def run():
        g = cudnn.pygraph(name="g_smx")
        x = g.tensor([2, 5], [5, 1], F, name="x_in")
        if backward:
            yy = g.tensor([2, 5], [5, 1], F, name="yy_in")
            y = g.softmax_backward(x, yy, axis=axis, name="smx_n")
        else:
            y = g.softmax(x, axis=axis, name="smx_n")
        y.set_output(True).set_name("y_out")
        run_graph(g)

    return Probe(
        f"softmax{'_backward' if backward else ''} axis={axis!r}", run, op="smx_n", tensor=None
    )


@family("graph", 10)
def g_attr_transpose(r):
    perm = pick(
        r,
        [
            [0, 1],
            [0, 1, 2, 3],
            [0, 0, 1],
            [2, 1, -1],
            [0, 1, 3],
            ["a", 1, 0],
            [0.5, 1, 2],
            None,
            [2, 1, 0, 0],
        ],
    )

    def run():
        g = cudnn.pygraph(name="g_tp")
        x = g.tensor([2, 3, 4], [12, 4, 1], F, name="x_in")
        g.transpose(x, perm, name="tp_n").set_output(True).set_name("y_out")
        run_graph(g)

    return Probe(f"transpose permutation={perm!r}", run, op="tp_n")


@family("graph", 14)
def g_attr_slice(r):
    sl = pick(
        r,
        [
            [(0, 2), (3, 9)],
            [(-1, 2), (0, 6)],
            [(3, 1), (0, 6)],
            [(0, 2)],
            [(0, 2), (0, 6), (0, 1)],
            [2, 3],
            [(0,), (0, 6)],
            [(0, 2, 5), (0, 6)],
            [slice(None), slice(None)],
            [slice(-10, 100), slice(2, 1)],
            [(0, 4.5), (0, 6)],
            [("a", 2), (0, 6)],
            None,
            [slice(0, 4, -1), slice(None)],
        ],
    )
    no_dims = r.random() < 0.3

    def run():
        g = cudnn.pygraph(name="g_sl")
        x = g.tensor([4, 6], [6, 1], F, name="x_in")
        if no_dims:  # slice given before x's dims are known (set afterwards)
            x.dim = None
        g.slice(x, sl, name="sl_n").set_output(True).set_name("y_out")
        if no_dims:
            x.set_dim([4, 6])
        run_graph(g)

    ok = (
        sl is not None
        and len(sl) == 2
        and all(isinstance(s, slice) for s in sl)
        and sl[0] == slice(None)
    )
    return Probe(
        f"slice {sl!r}{' (x dims set after slice())' if no_dims else ''}", run, op="sl_n", valid=ok
    )


@family("graph", 12)
def g_attr_concat(r):
    case = pick(
        r,
        [
            "axis_out",
            "axis_neg",
            "off_axis",
            "rank",
            "empty",
            "ip_str",
            "ip_neg",
            "ip_len",
            "dtype_mix",
            "axis_str",
            "single",
            "out_dims",
        ],
    )

    def run():
        g = cudnn.pygraph(name="g_cat")
        a = g.tensor([2, 3], [3, 1], F, name="a_in")
        b = g.tensor([2, 4], [4, 1], F, name="b_in")
        ins, axis, ipi = [a, b], 1, None
        if case == "axis_out":
            axis = 2
        elif case == "axis_neg":
            axis = -1
        elif case == "off_axis":
            b.set_dim([3, 4]).set_stride([4, 1])
        elif case == "rank":
            b.set_dim([2, 4, 1]).set_stride([4, 1, 1])
        elif case == "empty":
            ins = []
        elif case == "ip_str":
            ipi = "a"
        elif case == "ip_neg":
            ipi = -1
        elif case == "ip_len":
            ipi = 2
        elif case == "dtype_mix":
            b.set_data_type(DT.HALF)
        elif case == "axis_str":
            axis = "x"
        elif case == "single":
            ins = [a]
        y = g.concatenate(ins, axis=axis, in_place_index=ipi, name="cat_n")
        y.set_output(True).set_name("y_out")
        if case == "out_dims":
            y.set_dim([2, 8]).set_stride([8, 1])
        run_graph(g)

    # mixed input types are converted by the fused copy (checked: values are right)
    return Probe(f"concatenate: {case}", run, op="cat_n", valid=case in ("single", "dtype_mix"))


@family("graph", 10)
def g_attr_reduction(r):
    mode = pick(
        r,
        [
            0,
            "FOO",
            None,
            99,
            "add",
            ReductionMode.MUL_NO_ZEROS,
            ReductionMode.AMAX,
            cudnn.pointwise_mode.ADD,
        ],
    )
    ydims = pick(r, [[4, 1], [4, 6], [1, 1], [4, 6, 1], [2, 1], [1]])

    def run():
        g = cudnn.pygraph(name="g_rd")
        x = g.tensor([4, 6], [6, 1], F, name="x_in")
        y = g.reduction(x, mode, name="rd_n").set_output(True).set_name("y_out")
        y.set_dim(ydims)
        run_graph(g)

    good_mode = isinstance(mode, (ReductionMode, cudnn.pointwise_mode)) or mode == "add"
    good_dims = ydims in ([4, 1], [4, 6], [1, 1])
    return Probe(
        f"reduction mode={mode!r} y.dim={ydims}", run, op="rd_n", valid=good_mode and good_dims
    )


@family("graph", 18)
def g_attr_pointwise(r):
    case = pick(
        r,
        [
            "gen_index_axis_3",
            "gen_index_axis_-1",
            "gen_index_axis_str",
            "relu_clip_str",
            "relu_clip_inverted",
            "relu_clip_nan",
            "softplus_beta_0",
            "elu_alpha_str",
            "swish_beta_list",
            "leaky_slope_none",
            "operand_numpy",
            "operand_none",
            "operand_foreign",
            "operand_bool",
            "operand_str",
            "logical_on_float",
        ],
    )

    def run():
        g = cudnn.pygraph(name="g_pt")
        x = g.tensor([2, 3], [3, 1], F, name="x_in")
        other = cudnn.pygraph(name="other").tensor([2, 3], [3, 1], F, name="foreign_in")
        ops = {
            "gen_index_axis_3": lambda: g.gen_index(x, axis=3, name="pt_n"),
            "gen_index_axis_-1": lambda: g.gen_index(x, axis=-1, name="pt_n"),
            "gen_index_axis_str": lambda: g.gen_index(x, axis="a", name="pt_n"),
            "relu_clip_str": lambda: g.relu(x, lower_clip="a", upper_clip="b", name="pt_n"),
            "relu_clip_inverted": lambda: g.relu(x, lower_clip=2.0, upper_clip=1.0, name="pt_n"),
            "relu_clip_nan": lambda: g.relu(x, upper_clip=float("nan"), name="pt_n"),
            "softplus_beta_0": lambda: g.softplus(x, beta=0, name="pt_n"),
            "elu_alpha_str": lambda: g.elu(x, alpha="a", name="pt_n"),
            "swish_beta_list": lambda: g.swish(x, swish_beta=[1.0], name="pt_n"),
            "leaky_slope_none": lambda: g.leaky_relu(x, None, name="pt_n"),
            "operand_numpy": lambda: g.add(x, np.ones((2, 3), np.float32), name="pt_n"),
            "operand_none": lambda: g.add(x, None, name="pt_n"),
            "operand_foreign": lambda: g.add(x, other, name="pt_n"),
            "operand_bool": lambda: g.add(x, True, name="pt_n"),
            "operand_str": lambda: g.mul(x, "2", name="pt_n"),
            "logical_on_float": lambda: g.logical_and(x, x, name="pt_n"),
        }
        y = ops[case]()
        y.set_output(True).set_name("y_out")
        run_graph(g)

    return Probe(
        f"pointwise: {case}",
        run,
        op="pt_n",
        valid=case in ("leaky_slope_none", "logical_on_float", "relu_clip_nan"),
    )


@family("graph", 14)
def g_attr_norm(r):
    case = pick(
        r,
        [
            "eps_neg",
            "eps_zero",
            "eps_nan",
            "eps_inf",
            "eps_str",
            "eps_none",
            "eps_vec_tensor",
            "phase_5",
            "phase_str",
            "phase_none",
            "ln_no_bias",
            "bn_momentum_none",
            "bn_only_rmean",
            "bn_eps_tensor_2elem",
            "rms_phase_inference_stats_used",
            "groupnorm_groups_0",
        ],
    )

    def run():
        g = cudnn.pygraph(name="g_nm")
        x = g.tensor([2, 8], [8, 1], F, name="x_in")
        s = g.tensor([1, 8], [8, 1], F, name="scale_in")
        b = g.tensor([1, 8], [8, 1], F, name="bias_in")
        phase, eps, bias = NormForwardPhase.TRAINING, 1e-5, b
        if case.startswith("bn"):
            x4 = g.tensor([2, 3, 2, 2], [12, 4, 2, 1], F, name="x4_in")
            st = [g.tensor([1, 3, 1, 1], [3, 1, 1, 1], F, name=f"st{i}_in") for i in range(4)]
            if case == "bn_momentum_none":
                outs = g.batchnorm(
                    x4, st[0], st[1], st[2], st[3], epsilon=1e-5, momentum=None, name="nm_n"
                )
            elif case == "bn_only_rmean":
                outs = g.batchnorm(
                    x4, st[0], st[1], st[2], None, epsilon=1e-5, momentum=0.1, name="nm_n"
                )
            else:
                e2 = g.tensor([2], [1], F, name="eps_in", is_pass_by_value=True)
                outs = g.batchnorm(x4, st[0], st[1], epsilon=e2, name="nm_n")
            for i, t in enumerate(outs):
                if t is not None:
                    t.set_output(True).set_name(f"o{i}_out")
            run_graph(g)
            return
        if case == "groupnorm_groups_0":
            x4 = g.tensor([2, 4, 2, 2], [16, 4, 2, 1], F, name="x4_in")
            s4 = g.tensor([1, 4, 1, 1], [4, 1, 1, 1], F, name="s4_in")
            b4 = g.tensor([1, 4, 1, 1], [4, 1, 1, 1], F, name="b4_in")
            outs = g.groupnorm(phase, x4, s4, b4, 1e-5, groups=0, name="nm_n")
            for i, t in enumerate(outs):
                if t is not None:
                    t.set_output(True).set_name(f"o{i}_out")
            run_graph(g)
            return
        eps = {
            "eps_neg": -1e-3,
            "eps_zero": 0.0,
            "eps_nan": float("nan"),
            "eps_inf": float("inf"),
            "eps_str": "1e-5",
            "eps_none": None,
            "eps_vec_tensor": torch.full((3,), 1e-5),
        }.get(case, eps)
        phase = {"phase_5": 5, "phase_str": "FOO", "phase_none": None}.get(case, phase)
        if case == "ln_no_bias":
            bias = None
        if case == "rms_phase_inference_stats_used":
            y, iv = g.rmsnorm(NormForwardPhase.INFERENCE, x, s, None, 1e-5, name="nm_n")
            y.set_output(True).set_name("y_out")
            run_graph(g)
            if iv is not None:
                raise Silent("rmsnorm INFERENCE returned an inv_variance tensor")
            return
        outs = g.layernorm(phase, x, s, bias, eps, name="nm_n")
        for i, t in enumerate(outs):
            if t is not None:
                t.set_output(True).set_name(f"o{i}_out")
        run_graph(g)

    return Probe(
        f"norm: {case}",
        run,
        op="nm_n",
        valid=case in ("eps_zero", "rms_phase_inference_stats_used"),
    )


@family("graph", 14)
def g_attr_sdpa(r):
    case = pick(
        r,
        [
            "scale_str",
            "dropout_p_1.5",
            "dropout_short",
            "dropout_mask_tensor",
            "left_bound_neg",
            "right_bound_float",
            "alignment_9",
            "alignment_str",
            "q_rank3",
            "int_dtype",
            "padding_mask_no_seqlen",
            "causal_conflict",
            "head_dim_300",
            "gqa_not_dividing",
            "bias_bad_dims",
            "seq_len_float",
        ],
    )

    def run():
        g = cudnn.pygraph(name="g_at")
        qd = [1, 2, 4, 8]
        kd = list(qd)
        if case == "head_dim_300":
            qd = kd = [1, 2, 4, 304]
        if case == "gqa_not_dividing":
            qd, kd = [1, 3, 4, 8], [1, 2, 4, 8]
        q = g.tensor(qd, packed(qd), F, name="q_in")
        k = g.tensor(kd, packed(kd), F, name="k_in")
        v = g.tensor(kd, packed(kd), F, name="v_in")
        kw = dict(attn_scale=0.35, generate_stats=True)
        if case == "scale_str":
            kw["attn_scale"] = "0.3"
        elif case == "dropout_p_1.5":
            kw["dropout"] = (1.5, 1, 2)
        elif case == "dropout_short":
            kw["dropout"] = (0.1,)
        elif case == "dropout_mask_tensor":
            kw["dropout"] = (q, 2.0)
        elif case == "left_bound_neg":
            kw["diagonal_band_left_bound"] = -2
        elif case == "right_bound_float":
            kw["diagonal_band_right_bound"] = 1.5
        elif case == "alignment_9":
            kw["diagonal_alignment"] = 9
        elif case == "alignment_str":
            kw["diagonal_alignment"] = "FOO"
        elif case == "q_rank3":
            q.set_dim([2, 4, 8]).set_stride([32, 8, 1])
        elif case == "int_dtype":
            for t in (q, k, v):
                t.set_data_type(DT.INT32)
        elif case == "padding_mask_no_seqlen":
            kw["use_padding_mask"] = True
        elif case == "causal_conflict":
            kw.update(use_causal_mask=True, use_causal_mask_bottom_right=True)
        elif case == "bias_bad_dims":
            kw["bias"] = g.tensor([1, 2, 3, 3], packed([1, 2, 3, 3]), F, name="bias_in")
        elif case == "seq_len_float":
            kw["use_padding_mask"] = True
            kw["seq_len_q"] = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], F, name="slq_in")
            kw["seq_len_kv"] = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], F, name="slk_in")
        o, st = g.sdpa(q, k, v, name="at_n", **kw)
        o.set_output(True).set_name("o_out")
        if st is not None:
            st.set_output(True).set_name("st_out")
        run_graph(g)

    return Probe(f"sdpa: {case}", run, op="at_n")


@family("graph", 12)
def g_attr_pool(r):
    case = pick(
        r,
        [
            "window_0",
            "stride_0",
            "pad_ge_window",
            "pad_neg",
            "mode_9",
            "mode_str",
            "window_len3",
            "window_huge",
            "rank2_input",
            "window_float",
            "index_type_float",
            "backward_no_x_no_index",
        ],
    )

    def run():
        g = cudnn.pygraph(name="g_pl")
        x = g.tensor([1, 2, 5, 5], [50, 25, 5, 1], F, name="x_in")
        kw = dict(mode=cudnn.resample_mode.MAXPOOL, window=[2, 2], stride=[1, 1], padding=[0, 0])
        if case == "window_0":
            kw["window"] = [0, 2]
        elif case == "stride_0":
            kw["stride"] = [0, 1]
        elif case == "pad_ge_window":
            kw["padding"] = [2, 2]
        elif case == "pad_neg":
            kw["padding"] = [-1, 0]
        elif case == "mode_9":
            kw["mode"] = 9
        elif case == "mode_str":
            kw["mode"] = "FOO"
        elif case == "window_len3":
            kw["window"] = [2, 2, 2]
        elif case == "window_huge":
            kw["window"] = [9, 9]
        elif case == "rank2_input":
            x.set_dim([2, 5]).set_stride([5, 1])
        elif case == "window_float":
            kw["window"] = [2.5, 2]
        if case == "backward_no_x_no_index":
            dy = g.tensor([1, 2, 4, 4], [32, 16, 4, 1], F, name="dy_in")
            y = g.resample_backward(dy, name="pl_n", **kw).set_dim([1, 2, 5, 5])
            y.set_output(True).set_name("y_out")
            run_graph(g)
            return
        y, idx = g.resample(x, name="pl_n", generate_index=(case == "index_type_float"), **kw)
        y.set_output(True).set_name("y_out")
        if idx is not None:
            idx.set_output(True).set_name("idx_out").set_data_type(F)
        run_graph(g)

    return Probe(f"resample: {case}", run, op="pl_n")


@family("graph", 8)
def g_attr_matmul(r):
    case = pick(
        r,
        [
            "padding_str",
            "a_rank1",
            "int_operands",
            "bool_operands",
            "out_dims",
            "k_zero",
            "b_batch3",
            "out_rank",
        ],
    )

    def run():
        g = cudnn.pygraph(name="g_mt")
        a = g.tensor([1, 4, 5], [20, 5, 1], F, name="a_in")
        b = g.tensor([1, 5, 3], [15, 3, 1], F, name="b_in")
        pad = 0.0
        if case == "padding_str":
            pad = "x"
        elif case == "a_rank1":
            a.set_dim([5]).set_stride([1])
        elif case in ("int_operands", "bool_operands"):
            for t in (a, b):
                t.set_data_type(DT.INT32 if case == "int_operands" else DT.BOOLEAN)
        elif case == "k_zero":
            a.set_dim([1, 4, 0]).set_stride([1, 1, 1])
            b.set_dim([1, 0, 3]).set_stride([3, 3, 1])
        elif case == "b_batch3":
            b.set_dim([3, 5, 3]).set_stride([15, 3, 1])
            a.set_dim([2, 4, 5]).set_stride([20, 5, 1])
        c = g.matmul(a, b, padding=pad, name="mt_n").set_output(True).set_name("c_out")
        if case == "out_dims":
            c.set_dim([1, 4, 4])
        elif case == "out_rank":
            c.set_dim([4, 3])
        run_graph(g)

    return Probe(f"matmul: {case}", run, op="mt_n", valid=(case in ("k_zero", "out_rank")))


@family("graph", 6)
def g_misc(r):
    case = pick(
        r,
        [
            "empty_graph",
            "unused_tensors_only",
            "graph_io_type_bad",
            "compute_type_bad",
            "node_compute_type_int",
            "handle_str",
        ],
    )

    def run():
        if case == "graph_io_type_bad":
            cudnn.pygraph(io_data_type="FOO")
            raise Silent("io_data_type 'FOO' accepted")
        if case == "compute_type_bad":
            cudnn.pygraph(compute_data_type=DT.INT8, name="g_ct")
            g, T = fresh("pw")
            g.compute_data_type = DT.BOOLEAN
            run_graph(g)
            raise Silent("compute_data_type BOOLEAN accepted and ran")
        if case == "node_compute_type_int":
            g = cudnn.pygraph(name="g_nc")
            x = g.tensor([2, 3], [3, 1], F, name="x_in")
            g.exp(x, name="e_n", compute_data_type=DT.INT8).set_output(True)
            run_graph(g)
            raise Silent("exp with compute_data_type INT8 accepted and ran")
        if case == "handle_str":
            g = cudnn.pygraph(name="g_h", handle="cpu")
            x = g.tensor([2, 3], [3, 1], F, name="x_in")
            g.exp(x, name="e_n").set_output(True)
            run_graph(g)
            raise Silent("pygraph(handle='cpu') accepted")
        g = cudnn.pygraph(name="g_empty")
        if case == "unused_tensors_only":
            g.tensor([2, 3], [3, 1], F, name="lonely")
        g.build([A])

    return Probe(f"misc: {case}", run)


# ==== C. variant packs ===========================================================================
def _vp_base(r):
    return pick(r, list(BASES))


def _nonvirtual(base):
    return INPUTS[base] + OUTPUTS[base]


def _exec(base, pack, ws=None, handle=None):
    g = built(base)[0]
    if handle is not None:
        g.execute(pack, ws if ws is not None else workspace_for(g), handle=handle)
    else:
        g.execute(pack, ws if ws is not None else workspace_for(g))


@family("vp", 8)
def vp_missing(r):
    base = _vp_base(r)
    name = pick(r, _nonvirtual(base))

    def run():
        T = built(base)[1]
        pack = good_pack(base)
        del pack[T[name]]
        _exec(base, pack)

    return Probe(f"{base}: pack without {name}", run, tensor=name)


@family("vp", 8)
def vp_extra_key(r):
    base = _vp_base(r)
    key = pick(
        r, [10**6, -1, 0, 2**70, True, 1.0, "x_in", None, (1,), np.int64(1), torch.tensor(1)]
    )

    def run():
        pack = good_pack(base)
        pack[key] = torch.zeros(2)
        _exec(base, pack)

    return Probe(f"{base}: extra pack key {key!r} ({type(key).__name__})", run)


@family("vp", 4)
def vp_foreign_key(r):
    base = _vp_base(r)

    def run():
        g, T = fresh(base)  # another graph's tensors, same names, unvalidated uids
        T0 = built(base)[1]
        pack = good_pack(base)
        name = INPUTS[base][0]
        pack[T[name]] = pack.pop(T0[name])
        _exec(base, pack)
        raise Silent(f"a tensor of ANOTHER graph (uid {T[name].get_uid()}) bound as key")

    return Probe(f"{base}: key is a tensor of another (unbuilt) graph", run)


@family("vp", 6)
def vp_virtual(r):
    base = pick(r, ["pw", "mm"])
    name = {"pw": "m_mid", "mm": "c_mid"}[base]

    def run():
        T = built(base)[1]
        pack = good_pack(base)
        pack[T[name]] = torch.empty(built(base)[0].op_graph.tensors[T[name].get_uid()].dims)
        _exec(base, pack)

    return Probe(f"{base}: virtual {name} bound", run, tensor=name)


def _legal_binding(t: torch.Tensor, d) -> bool:
    """The documented rule (runtime/buffers.py docstring)."""
    if tuple(t.shape) == d.dims:
        return all(a == b for a, b, n in zip(t.stride(), d.strides, d.dims) if n > 1)
    if t.dim() == 1 and t.is_contiguous():
        return t.numel() >= d.span
    return (
        [n for n in t.shape if n != 1] == [n for n in d.dims if n != 1]
        and t.is_contiguous()
        and list(d.strides) == packed(d.dims)
    )


@family("vp", 16)
def vp_wrong_shape(r):
    base = _vp_base(r)
    name = pick(r, _nonvirtual(base))
    g, T = built(base)[:2]
    d = g.op_graph.tensors[T[name].get_uid()]
    dims = list(d.dims)
    kind = pick(
        r,
        [
            "permuted",
            "bigger",
            "smaller",
            "lead1",
            "flat_small",
            "flat_big",
            "flat_exact",
            "extra_dim",
            "zero",
            "scalar0d",
        ],
    )
    if kind == "permuted":
        shape = dims[::-1] if dims[::-1] != dims else dims[1:] + dims[:1]
    elif kind == "bigger":
        shape = [n + 1 for n in dims]
    elif kind == "smaller":
        shape = [max(n - 1, 1) for n in dims]
    elif kind == "lead1":
        shape = [1] + dims
    elif kind == "flat_small":
        shape = [max(d.span - 1, 0)]
    elif kind == "flat_big":
        shape = [d.span + 5]
    elif kind == "flat_exact":
        shape = [d.span]
    elif kind == "extra_dim":
        shape = dims + [2]
    elif kind == "zero":
        shape = [0] + dims[1:]
    else:
        shape = []
    buf = torch.full(shape, 0.5, dtype=d.torch_dtype)
    legal = _legal_binding(buf, d)

    def run():
        pack = good_pack(base)
        pack[T[name]] = buf.clone()
        _exec(base, pack)

    return Probe(
        f"{base}: {name} {list(d.dims)} bound to shape {shape} ({kind})",
        run,
        tensor=name,
        valid=legal,
    )


@family("vp", 10)
def vp_wrong_dtype(r):
    base = _vp_base(r)
    name = pick(r, _nonvirtual(base))
    dt = pick(
        r,
        [
            torch.float16,
            torch.float64,
            torch.bfloat16,
            torch.int32,
            torch.bool,
            torch.complex64,
            torch.uint8,
            torch.int64,
        ],
    )

    def run():
        g, T = built(base)[:2]
        pack = good_pack(base)
        b = pack[T[name]]
        pack[T[name]] = b.to(dt)
        _exec(base, pack)

    return Probe(f"{base}: {name} bound as {dt}", run, tensor=name, valid=False)


@family("vp", 8)
def vp_meta(r):
    base = _vp_base(r)
    name = pick(r, _nonvirtual(base))
    how = pick(r, ["one", "first", "all"])

    def run():
        T = built(base)[1]
        pack = good_pack(base)
        if how == "all":
            pack = {
                k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in pack.items()
            }
        elif how == "first":
            k = T[name]
            v = pack.pop(k).to("meta")
            pack = {k: v, **pack}
        else:
            pack[T[name]] = pack[T[name]].to("meta")
        _exec(base, pack)

    return Probe(
        f"{base}: meta-device buffer ({how}: {name})",
        run,
        tensor=name if how != "all" else None,
        rule=("meta", "device"),
    )


@family("vp", 10)
def vp_noncontig(r):
    base = _vp_base(r)
    name = pick(r, _nonvirtual(base))
    kind = pick(r, ["transposed_same_shape", "strided_view", "expanded", "flat_strided"])

    def run():
        g, T = built(base)[:2]
        d = g.op_graph.tensors[T[name].get_uid()]
        dims = list(d.dims)
        if kind == "transposed_same_shape":
            t = torch.rand(dims[::-1]).to(d.torch_dtype).permute(*range(len(dims) - 1, -1, -1))
        elif kind == "strided_view":
            big = torch.rand([n * 2 for n in dims]).to(d.torch_dtype)
            t = big[tuple(slice(None, None, 2) for _ in dims)]
        elif kind == "expanded":
            t = torch.rand([1] * len(dims)).to(d.torch_dtype).expand(*dims)
        else:
            t = torch.rand(d.span * 2).to(d.torch_dtype)[::2]
        if _legal_binding(t, d):
            raise Silent("skip: legal layout")
        pack = good_pack(base)
        pack[T[name]] = t
        _exec(base, pack)

    return Probe(f"{base}: {name} bound to a {kind} tensor", run, tensor=name)


@family("vp", 14)
def vp_numpy(r):
    base = _vp_base(r)
    name = pick(r, _nonvirtual(base))
    kind = pick(
        r,
        [
            "float64",
            "int32",
            "object",
            "negative_stride",
            "big_endian",
            "misaligned",
            "right",
            "unicode",
            "fortran",
            "readonly_out",
            "0d",
            "structured",
            "float16",
            "datetime",
        ],
    )

    def run():
        g, T = built(base)[:2]
        d = g.op_graph.tensors[T[name].get_uid()]
        dims = tuple(d.dims)
        a = np.full(dims, 0.5, dtype=np.float32)
        if kind == "float64":
            a = a.astype(np.float64)
        elif kind == "int32":
            a = a.astype(np.int32)
        elif kind == "float16":
            a = a.astype(np.float16)
        elif kind == "object":
            a = a.astype(object)
        elif kind == "unicode":
            a = a.astype("U3")
        elif kind == "datetime":
            a = np.zeros(dims, dtype="datetime64[s]")
        elif kind == "structured":
            a = np.zeros(dims, dtype=[("a", np.float32)])
        elif kind == "negative_stride":
            a = np.full((dims[0] * 1,) + dims[1:], 0.5, np.float32)[::-1]
        elif kind == "big_endian":
            a = a.astype(">f4")
        elif kind == "misaligned":
            raw = np.zeros(a.size * 4 + 1, np.uint8)
            a = np.frombuffer(raw.data, dtype=np.float32, count=a.size, offset=1).reshape(dims)
        elif kind == "fortran":
            a = np.asfortranarray(a)
        elif kind == "readonly_out":
            a = np.broadcast_to(np.float32(0.5), dims)
        elif kind == "0d":
            a = np.float32(0.5) * np.ones((), np.float32)
        pack = good_pack(base)
        pack[T[name]] = a
        _exec(base, pack)
        if kind == "misaligned":
            raise Silent("a float32 array at an odd address was bound and ran")
        if kind == "readonly_out" and name in OUTPUTS[base]:
            raise Silent("a read-only broadcast array was bound as an output and written")

    g0, T0 = built(base)[:2]
    dims0 = g0.op_graph.tensors[T0[name].get_uid()].dims
    fortran_is_c = sum(n > 1 for n in dims0) <= 1  # then a Fortran array is C-ordered too
    return Probe(
        f"{base}: {name} bound to a NumPy array ({kind})",
        run,
        tensor=name,
        valid=kind == "right" or (kind == "fortran" and fortran_is_c),
    )


@family("vp", 10)
def vp_rawptr(r):
    base = pick(r, ["pw", "mm", "sm", "red"])
    name = pick(r, _nonvirtual(base))
    kind = pick(
        r,
        ["exact", "plus1", "plus2", "np_int64", "bool", "negative", "huge", "garbage_low", "freed"],
    )

    def run():
        g, T = built(base)[:2]
        d = g.op_graph.tensors[T[name].get_uid()]
        pack = good_pack(base)
        keep = pack[T[name]]
        base_ptr = keep.data_ptr()
        ptr = {
            "exact": base_ptr,
            "plus1": base_ptr + 1,
            "plus2": base_ptr + 2,
            "np_int64": np.int64(base_ptr),
            "bool": True,
            "negative": -base_ptr,
            "huge": 2**70,
            "garbage_low": 0x1000,
            "freed": None,
        }[kind]
        if kind == "freed":
            tmp = torch.empty(d.span + 1)
            ptr = tmp.data_ptr()
            del tmp
        pack[T[name]] = ptr
        _exec(base, pack)
        if kind in ("plus1", "plus2"):
            raise Silent(
                f"a raw pointer {kind[4:]} byte(s) past a float buffer (misaligned "
                "for FLOAT) was accepted and ran"
            )

    return Probe(
        f"{base}: {name} bound to a raw int pointer ({kind})",
        run,
        tensor=name,
        valid=kind in ("exact", "np_int64"),
        # an output written 1-2 bytes past its buffer corrupts the heap: isolate
        isolate=kind in ("negative", "huge", "garbage_low", "freed", "plus1", "plus2"),
    )


@family("vp", 14)
def vp_values(r):
    base = _vp_base(r)
    name = pick(r, _nonvirtual(base))
    kind = pick(
        r,
        [
            "None",
            "list",
            "str",
            "dict",
            "float",
            "0d_tensor",
            "sparse",
            "requires_grad_out",
            "parameter",
            "bytes",
            "bytearray",
            "memoryview",
            "complex",
            "quantized",
        ],
    )

    def run():
        g, T = built(base)[:2]
        pack = good_pack(base)
        good = pack[T[name]]
        v = {
            "None": None,
            "list": good.tolist(),
            "str": "buffer",
            "dict": {},
            "float": 0.5,
            "0d_tensor": torch.tensor(0.5),
            "bytes": bytes(good.numel() * 4),
            "bytearray": bytearray(good.numel() * 4),
            "complex": 1 + 2j,
        }.get(kind)
        if kind == "sparse":
            v = good.contiguous().to_sparse()
        elif kind == "requires_grad_out":
            v = good.clone().requires_grad_(True)
        elif kind == "parameter":
            v = torch.nn.Parameter(good.clone())
        elif kind == "memoryview":
            v = memoryview(bytearray(good.numel() * 4))
        elif kind == "quantized":
            v = torch.quantize_per_tensor(good.float().contiguous(), 0.1, 0, torch.qint8)
        pack[T[name]] = v
        _exec(base, pack)

    return Probe(
        f"{base}: {name} bound to {kind}",
        run,
        tensor=name,
        valid=kind in ("requires_grad_out", "parameter"),
        rule=("sparse", "layout") if kind == "sparse" else (),
    )


@family("vp", 10)
def vp_pbv(r):
    kind = pick(
        r,
        [
            "two_elems",
            "str",
            "complex",
            "None",
            "nan",
            "np_two",
            "list",
            "int_tensor",
            "cuda_like_meta",
            "bool",
        ],
    )

    def run():
        g = cudnn.pygraph(name="g_s")
        x = g.tensor([2, 3], [3, 1], F, name="x_in")
        s = g.tensor([1], [1], F, is_pass_by_value=True, name="s_in")
        y = g.mul(x, s, name="mul_n").set_output(True).set_name("y_out")
        g.build([A])
        v = {
            "two_elems": torch.ones(2),
            "str": "0.5",
            "complex": 1 + 1j,
            "None": None,
            "nan": float("nan"),
            "np_two": np.ones(2),
            "list": [0.5],
            "int_tensor": torch.tensor([3]),
            "cuda_like_meta": torch.ones(1, device="meta"),
            "bool": True,
        }[kind]
        g.execute({x: torch.ones(2, 3), s: v, y: torch.empty(2, 3)}, None)

    return Probe(
        f"pass-by-value s_in bound to {kind}",
        run,
        tensor="s_in",
        valid=kind in ("nan", "int_tensor", "bool"),
    )


@family("vp", 8)
def vp_pack_type(r):
    kind = pick(r, ["None", "list_of_pairs", "tuple", "str", "set", "generator"])

    def run():
        g, T = built("pw")[:2]
        pack = good_pack("pw")
        v = {
            "None": None,
            "list_of_pairs": list(pack.items()),
            "tuple": tuple(pack.items()),
            "str": "pack",
            "set": set(),
            "generator": (kv for kv in pack.items()),
        }[kind]
        g.execute(v, None)

    return Probe(f"variant_pack is a {kind}", run)


@family("vp", 8)
def vp_alias(r):
    kind = pick(
        r,
        [
            "out_is_input_multi",
            "two_outputs_one_buffer",
            "partial_overlap",
            "ln_mean_iv_same",
            "conv_out_over_in",
            "bn_running_in_place",
        ],
    )

    def run():
        if kind == "bn_running_in_place":
            # cuDNN updates running stats in place; the graph API has separate next_* outputs
            g, T = built("bn")[:2]
            pack = good_pack("bn")
            pack[T["nrm_out"]] = pack[T["rmean_in"]]
            _exec("bn", pack)
            return
        if kind in ("out_is_input_multi", "partial_overlap"):
            g, T = built("pw")[:2]
            pack = good_pack("pw")
            if kind == "out_is_input_multi":
                pack[T["y_out"]] = pack[T["x_in"]]
            else:
                big = torch.rand(40)
                pack[T["x_in"]] = big[:24].view(2, 3, 4)
                pack[T["y_out"]] = big[10:34].view(2, 3, 4)
            _exec("pw", pack)
        elif kind == "conv_out_over_in":
            g, T = built("conv")[:2]
            pack = good_pack("conv")
            big = torch.rand(80)
            pack[T["x_in"]] = big[:50].view(1, 2, 5, 5)
            pack[T["y_out"]] = big[5:80].view(1, 3, 5, 5)
            _exec("conv", pack)
        else:
            base = "ln"
            g, T = built(base)[:2]
            pack = good_pack(base)
            pack[T["iv_out"]] = pack[T["mean_out"]]
            _exec(base, pack)

    # a pointwise-only graph with one output may write over an identical input (by design)
    return Probe(f"aliasing: {kind}", run, valid=(kind == "out_is_input_multi"))


@family("vp", 6)
def vp_handle(r):
    kind = pick(r, ["str", "object", "int", "meta_handle", "destroyed"])

    def run():
        pack = good_pack("pw")
        h = {"str": "cpu", "object": object(), "int": 3}.get(kind)
        if kind == "meta_handle":
            h = cudnn.create_handle("meta")
        elif kind == "destroyed":
            h = cudnn.create_handle("cpu")
            cudnn.destroy_handle(h)
        _exec("pw", pack, handle=h)

    return Probe(f"execute(handle={kind})", run, valid=(kind == "destroyed"))


# ==== D. workspace ================================================================================
_WS: dict = {}


def ws_graph():
    """A reduction built with a split plan that needs a workspace (as the test suite does)."""
    if "g" not in _WS:
        g = cudnn.pygraph(name="g_ws")
        x = g.tensor([3, 64], [64, 1], F, name="x_in")
        y = g.reduction(x, ReductionMode.ADD, name="sum_n").set_output(True).set_name("y_out")
        y.set_dim([3, 1])
        g.validate()
        g.create_execution_plan(FUSION_ID, {"SPLIT": 4, "BLOCK_RED": 8, "BLOCK_KEPT": 4})
        _WS.update(g=g, x=x, y=y, need=g.get_workspace_size())
    return _WS["g"], _WS["x"], _WS["y"], _WS["need"]


@family("ws", 16)
def ws_bad(r):
    kind = pick(
        r,
        [
            "too_small",
            "empty",
            "None",
            "float32_enough",
            "bool_enough",
            "complex_enough",
            "meta",
            "noncontig",
            "list",
            "bytes",
            "bytearray",
            "int",
            "numpy_u8",
            "numpy_object",
            "numpy_negstride",
            "2d_enough",
            "zero_need_garbage",
            "zero_need_meta",
        ],
    )

    def run():
        if kind.startswith("zero_need"):
            g, T = built("pw")[:2]
            ws = "garbage" if kind == "zero_need_garbage" else torch.empty(8, device="meta")
            _exec("pw", good_pack("pw"), ws=ws)
            if kind == "zero_need_garbage":
                raise Silent("a str accepted as workspace")
            return
        g, x, y, need = ws_graph()
        ws = {
            "too_small": torch.empty(need - 1, dtype=torch.uint8),
            "empty": torch.empty(0, dtype=torch.uint8),
            "None": None,
            "float32_enough": torch.empty((need + 3) // 4),
            "bool_enough": torch.empty(need, dtype=torch.bool),
            "complex_enough": torch.empty(need, dtype=torch.complex64),
            "meta": torch.empty(need, dtype=torch.uint8, device="meta"),
            "noncontig": torch.empty(2 * need, dtype=torch.uint8)[::2],
            "list": [0] * need,
            "bytes": bytes(need),
            "bytearray": bytearray(need),
            "int": torch.empty(need, dtype=torch.uint8).data_ptr(),
            "numpy_u8": np.zeros(need, np.uint8),
            "numpy_object": np.zeros(need, dtype=object),
            "numpy_negstride": np.zeros(need * 2, np.uint8)[::-2],
            "2d_enough": torch.empty(2, need, dtype=torch.uint8),
        }[kind]
        xb = torch.rand(3, 64)
        g.execute({x: xb, y: torch.empty(3, 1)}, ws)

    return Probe(
        f"workspace: {kind}",
        run,
        valid=kind
        in (
            "float32_enough",
            "bool_enough",
            "complex_enough",
            "numpy_u8",
            "2d_enough",
            "zero_need_meta",
        ),
    )


# ==== E. lifecycle ================================================================================
@family("life", 8)
def l_execute_early(r):
    stage = pick(
        r,
        [
            "nothing",
            "validated",
            "plans_created",
            "supported",
            "node_added_after",
            "filtered_to_nothing",
            "tensor_changed_after",
        ],
    )

    def run():
        g, T = fresh("pw")
        pack = None
        if stage != "nothing":
            g.validate()
        if stage in ("plans_created", "supported"):
            g.create_execution_plans([A])
        if stage == "supported":
            g.check_support()
        if stage in ("node_added_after", "filtered_to_nothing", "tensor_changed_after"):
            g.build([A])
            pack = auto_pack(g)
            if stage == "node_added_after":
                g.neg(T["y_out"], name="late_n").set_output(True)
            elif stage == "filtered_to_nothing":
                g.deselect_engines([""])
            else:
                T["x_in"].set_dim([5, 3, 4]).set_stride([12, 4, 1])
                pack[T["x_in"].get_uid()] = torch.rand(5, 3, 4)
        g.execute(
            pack
            if pack is not None
            else {
                T["x_in"]: torch.rand(2, 3, 4),
                T["s_in"]: torch.rand(1, 3, 1),
                T["y_out"]: torch.empty(2, 3, 4),
            },
            None,
        )

    return Probe(f"execute after: {stage}", run)


@family("life", 14)
def l_plan_index(r):
    fn = pick(
        r,
        [
            "build_plan_at_index",
            "execute_plan_at_index",
            "get_plan_name_at_index",
            "get_workspace_size_plan_at_index",
            "get_behavior_notes_for_plan_at_index",
        ],
    )
    idx = pick(r, [-1, 10**9, "0", 0.5, None, True, 2**70])

    def run():
        g, T = fresh("pw")
        g.build([A])
        if fn == "execute_plan_at_index":
            g.execute_plan_at_index(auto_pack(g), None, idx)
        else:
            getattr(g, fn)(idx)
        if idx is True:
            raise Silent(f"{fn}(True) accepted as index 1")

    return Probe(f"{fn}({idx!r})", run, valid=False)


@family("life", 16)
def l_create_plan(r):
    eid = pick(r, [999, -1, "1", None, 1.5, FUSION_ID, FUSION_ID, REFERENCE_ID, 5])
    knobs = pick(
        r,
        [
            {},
            {"FOO": 1},
            {"BLOCK": -3},
            {"BLOCK": "x"},
            {"BLOCK": [1]},
            {1: 2},
            [("BLOCK", 1)],
            "BLOCK",
            {"BLOCK": None},
            {"num_warps": 0},
            {"num_warps": 4.0},
            {"BLOCK": 1024, "FOO": 1},
        ],
    )

    def run():
        g, T = fresh("pw")
        g.validate()
        g.create_execution_plan(eid, knobs)
        run_ok = auto_pack(g)
        g.execute(run_ok, workspace_for(g))

    legal = eid in (FUSION_ID, REFERENCE_ID) and knobs in ({}, {"num_warps": 4.0})
    return Probe(f"create_execution_plan({eid!r}, {knobs!r})", run, valid=legal)


@family("life", 10)
def l_knobs_engine(r):
    eid = pick(r, [999, -1, "1", None, 1.5, 3, 23])

    def run():
        g, T = fresh("pw")
        g.validate()
        ks = g.get_knobs_for_engine(eid)
        if eid in (3, 23):
            return
        raise Silent(f"get_knobs_for_engine({eid!r}) -> {ks!r}")

    return Probe(f"get_knobs_for_engine({eid!r}) on a pointwise graph", run, valid=eid in (3, 23))


@family("life", 12)
def l_heuristics_args(r):
    case = pick(
        r,
        [
            "modes_99",
            "modes_str",
            "modes_None",
            "modes_empty",
            "modes_mixed",
            "policy_5",
            "policy_str",
            "notes_99",
            "deselect_engines_None",
            "ws_limit_str",
            "ws_limit_neg",
            "behavior_str",
        ],
    )

    def run():
        g, T = fresh("pw")
        g.validate()
        if case.startswith("modes"):
            m = {
                "modes_99": [99],
                "modes_str": ["A"],
                "modes_None": None,
                "modes_empty": [],
                "modes_mixed": [A, 7],
            }[case]
            g.create_execution_plans(m)
            g.check_support()
            g.build_plans()
            g.execute(auto_pack(g), None)
            raise Silent(f"create_execution_plans({m!r}) accepted")
        g.create_execution_plans([A])
        if case == "policy_5":
            g.build_plans(5)
        elif case == "policy_str":
            g.build_plans("ALL")
        elif case == "notes_99":
            g.select_numeric_notes([99])
        elif case == "deselect_engines_None":
            g.deselect_engines(None)
        elif case == "ws_limit_str":
            g.deselect_workspace_greater_than("x")
        elif case == "ws_limit_neg":
            g.deselect_workspace_greater_than(-1)
            g.build_plans()
        elif case == "behavior_str":
            g.select_behavior_notes(["FOO"])
        raise Silent(f"{case} accepted")

    return Probe(f"heuristics/filters: {case}", run, valid=False)


def _serialized(base="pw") -> bytes:
    g, T = fresh(base)
    g.build([A])
    return g.serialize()


@family("life", 24)
def l_deserialize(r):
    kind = pick(
        r,
        [
            "random_bytes",
            "truncated",
            "json_list",
            "json_num",
            "json_null",
            "json_str",
            "no_types",
            "bad_types",
            "wrong_format",
            "None",
            "str",
            "int",
            "tensor_neg_dim",
            "tensor_bad_dtype",
            "node_unknown_kind",
            "node_bad_attr",
            "plan_bad_engine",
            "plan_bad_stage",
            "dims_tampered",
            "uid_dangling",
            "scalars_bad",
            "plans_not_list",
            "graph_not_dict",
            "node_cycle",
        ],
    )
    rb = bytes(r.getrandbits(8) for _ in range(r.randint(0, 64)))

    def run():
        blob = _serialized()
        doc = json.loads(blob)
        gj = doc["graph"]
        if kind == "random_bytes":
            blob = rb
        elif kind == "truncated":
            blob = blob[: len(blob) // 2]
        elif kind.startswith("json_"):
            blob = {
                "json_list": b"[1, 2]",
                "json_num": b"3",
                "json_null": b"null",
                "json_str": b'"x"',
            }[kind]
        elif kind == "None":
            blob = None
        elif kind == "str":
            blob = blob.decode()
        elif kind == "int":
            blob = 12
        else:
            if kind == "no_types":
                del doc["types"]
            elif kind == "bad_types":
                doc["types"] = ["FOO", "FLOAT", "FLOAT"]
            elif kind == "wrong_format":
                doc["format"] = "opendnn-graph-v0"
            elif kind == "tensor_neg_dim":
                gj["tensors"][0]["dim"][0] = -2
            elif kind == "tensor_bad_dtype":
                gj["tensors"][0]["data_type"] = "FOO"
            elif kind == "node_unknown_kind":
                gj["nodes"][0]["kind"] = "teleport"
            elif kind == "node_bad_attr":
                gj["nodes"][0]["attrs"]["bogus"] = 1
            elif kind == "plan_bad_engine":
                doc["plans"][0]["stages"][0]["config"]["engine_id"] = 999
            elif kind == "plan_bad_stage":
                doc["plans"][0]["stages"][0]["node_index"] = [7]
            elif kind == "dims_tampered":
                for t in gj["tensors"]:
                    if t["name"] == "s_in":
                        t["dim"], t["stride"] = [1, 5, 1], [5, 1, 1]
            elif kind == "uid_dangling":
                gj["nodes"][0]["inputs"]["IN_0"] = 4242
            elif kind == "scalars_bad":
                doc["scalars"] = {"abc": "x"}
            elif kind == "plans_not_list":
                doc["plans"] = 5
            elif kind == "graph_not_dict":
                doc["graph"] = [1]
            elif kind == "node_cycle":
                n0, n1 = gj["nodes"][0], gj["nodes"][1]
                n0["inputs"]["IN_0"] = n1["outputs"]["OUT_0"]
            blob = json.dumps(doc).encode()
        g = cudnn.pygraph(name="g_de")
        g.deserialize(blob)
        pack = auto_pack(g)
        g.execute(pack, workspace_for(g))
        raise Silent(f"deserialize of {kind} accepted and the graph ran")

    return Probe(f"deserialize: {kind}", run)


# ==== F. legacy API ==============================================================================
def _td(dims, dtype=DT.FLOAT, strides=None):
    d = L.create_tensor_descriptor()
    if strides is None and len(dims) == 4:
        L.set_tensor_4d_descriptor(d, L.TensorFormat.NCHW, dtype, *dims)
    else:
        L.set_tensor_nd_descriptor(d, dtype, len(dims), list(dims), list(strides or packed(dims)))
    return d


def _fd(dims, dtype=DT.FLOAT):
    d = L.create_filter_descriptor()
    L.set_filter_4d_descriptor(d, dtype, L.TensorFormat.NCHW, *dims)
    return d


@family("legacy", 14)
def lg_tensor_desc(r):
    case = pick(
        r,
        [
            "n_zero",
            "c_neg",
            "h_str",
            "w_float",
            "n_None",
            "n_huge",
            "format_7",
            "dtype_999",
            "dtype_str",
            "dtype_notset",
            "nd_nb_mismatch",
            "nd_9",
            "nd_2",
            "nd_stride0",
            "nd_stride_neg",
            "nd_stride_len",
            "ex_overlap",
            "filter_k0",
            "filter_nd_6",
            "filter_format_9",
            "get4d_on_nd",
            "size_unset",
        ],
    )

    def run():
        d = L.create_tensor_descriptor()
        op4 = L.set_tensor_4d_descriptor
        if case == "n_zero":
            op4(d, L.TensorFormat.NCHW, F, 0, 2, 3, 3)
        elif case == "c_neg":
            op4(d, L.TensorFormat.NCHW, F, 1, -2, 3, 3)
        elif case == "h_str":
            op4(d, L.TensorFormat.NCHW, F, 1, 2, "3x", 3)
        elif case == "w_float":
            op4(d, L.TensorFormat.NCHW, F, 1, 2, 3, 3.7)
            raise Silent(f"w=3.7 accepted as dims {d.dims}")
        elif case == "n_None":
            op4(d, L.TensorFormat.NCHW, F, None, 2, 3, 3)
        elif case == "n_huge":
            op4(d, L.TensorFormat.NCHW, F, 2**62, 2**62, 3, 3)
            L.get_tensor_size_in_bytes(d)
            raise Silent(f"dims {d.dims}: size {L.get_tensor_size_in_bytes(d)} bytes")
        elif case == "format_7":
            op4(d, 7, F, 1, 2, 3, 3)
        elif case == "dtype_999":
            op4(d, L.TensorFormat.NCHW, 999, 1, 2, 3, 3)
        elif case == "dtype_str":
            op4(d, L.TensorFormat.NCHW, "FOO", 1, 2, 3, 3)
        elif case == "dtype_notset":
            op4(d, L.TensorFormat.NCHW, DT.NOT_SET, 1, 2, 3, 3)
        elif case == "nd_nb_mismatch":
            L.set_tensor_nd_descriptor(d, F, 4, [1, 2, 3], [6, 3, 1])
        elif case == "nd_9":
            L.set_tensor_nd_descriptor(d, F, 9, [1] * 9, [1] * 9)
        elif case == "nd_2":
            L.set_tensor_nd_descriptor(d, F, 2, [2, 3], [3, 1])
        elif case == "nd_stride0":
            L.set_tensor_nd_descriptor(d, F, 3, [2, 3, 4], [12, 0, 1])
        elif case == "nd_stride_neg":
            L.set_tensor_nd_descriptor(d, F, 3, [2, 3, 4], [12, -4, 1])
        elif case == "nd_stride_len":
            L.set_tensor_nd_descriptor(d, F, 3, [2, 3, 4], [12, 4])
        elif case == "ex_overlap":
            L.set_tensor_4d_descriptor_ex(d, F, 2, 3, 4, 5, 1, 1, 1, 1)
            # overlapping strides are legal for inputs; as an output they must be refused
            x = _td((2, 3, 4, 5))
            L.add_tensor(
                L.create("cpu"), 1.0, x, torch.rand(2, 3, 4, 5), 0.0, d, torch.rand(2 * 3 * 4 * 5)
            )
            raise Silent("add_tensor wrote an output whose descriptor strides overlap")
        elif case == "filter_k0":
            L.set_filter_4d_descriptor(
                L.create_filter_descriptor(), F, L.TensorFormat.NCHW, 0, 2, 3, 3
            )
        elif case == "filter_nd_6":
            L.set_filter_nd_descriptor(
                L.create_filter_descriptor(), F, L.TensorFormat.NCHW, 6, [1] * 6
            )
        elif case == "filter_format_9":
            L.set_filter_4d_descriptor(L.create_filter_descriptor(), F, 9, 3, 2, 3, 3)
        elif case == "get4d_on_nd":
            L.set_tensor_nd_descriptor(d, F, 3, [2, 3, 4], [12, 4, 1])
            L.get_tensor_4d_descriptor(d)
        elif case == "size_unset":
            L.get_tensor_size_in_bytes(d)
        raise Silent(f"{case} accepted")

    return Probe(f"legacy tensor/filter descriptor: {case}", run)


@family("legacy", 14)
def lg_conv_desc(r):
    case = pick(
        r,
        [
            "pad_neg",
            "stride_0",
            "dil_0",
            "mode_9",
            "compute_999",
            "len_0",
            "len_4",
            "group_0",
            "group_str",
            "math_9",
            "get2d_unset",
            "get2d_on_3d",
            "outdim_unset_conv",
            "outdim_groups_mismatch",
            "outdim_rank_mismatch",
            "outdim_empty",
        ],
    )

    def run():
        c = L.create_convolution_descriptor()
        s2 = L.set_convolution_2d_descriptor
        X = L.ConvolutionMode.CROSS_CORRELATION
        if case == "pad_neg":
            s2(c, -1, 0, 1, 1, 1, 1, X, F)
        elif case == "stride_0":
            s2(c, 0, 0, 0, 1, 1, 1, X, F)
        elif case == "dil_0":
            s2(c, 0, 0, 1, 1, 0, 1, X, F)
        elif case == "mode_9":
            s2(c, 0, 0, 1, 1, 1, 1, 9, F)
        elif case == "compute_999":
            s2(c, 0, 0, 1, 1, 1, 1, X, 999)
        elif case == "len_0":
            L.set_convolution_nd_descriptor(c, 0, [], [], [], X, F)
        elif case == "len_4":
            L.set_convolution_nd_descriptor(c, 4, [0] * 4, [1] * 4, [1] * 4, X, F)
        elif case == "group_0":
            L.set_convolution_group_count(c, 0)
        elif case == "group_str":
            L.set_convolution_group_count(c, "2")
        elif case == "math_9":
            L.set_convolution_math_type(c, 9)
        elif case == "get2d_unset":
            L.get_convolution_2d_descriptor(c)
        elif case == "get2d_on_3d":
            L.set_convolution_nd_descriptor(c, 3, [0] * 3, [1] * 3, [1] * 3, X, F)
            L.get_convolution_2d_descriptor(c)
        elif case.startswith("outdim"):
            x, w = _td((1, 4, 5, 5)), _fd((4, 4, 3, 3))
            if case != "outdim_unset_conv":
                s2(c, 0, 0, 1, 1, 1, 1, X, F)
            if case == "outdim_groups_mismatch":
                L.set_convolution_group_count(c, 3)
            elif case == "outdim_rank_mismatch":
                w = L.create_filter_descriptor()
                L.set_filter_nd_descriptor(w, F, L.TensorFormat.NCHW, 3, [4, 4, 3])
            elif case == "outdim_empty":
                w = _fd((4, 4, 7, 7))
            L.get_convolution_2d_forward_output_dim(c, x, w)
        raise Silent(f"{case} accepted")

    return Probe(f"legacy convolution descriptor: {case}", run)


_H = None


def handle():
    global _H
    if _H is None:
        _H = L.create("cpu")
    return _H


@family("legacy", 18)
def lg_conv_fwd(r):
    case = pick(
        r,
        [
            "y_dims",
            "w_channels",
            "x_buf_shape",
            "w_buf_dtype",
            "algo_99",
            "algo_neg",
            "ws_small",
            "alpha_str",
            "alpha_None",
            "x_unset",
            "mixed_dtype",
            "y_buf_too_small",
            "y_desc_overlap",
            "conv_unset",
            "handle_None",
            "bias_act_bad_bias",
            "bias_act_none_act",
            "find_ex_small_y",
        ],
    )

    def run():
        h = handle()
        x_d, w_d, y_d = _td((1, 2, 5, 5)), _fd((3, 2, 3, 3)), _td((1, 3, 5, 5))
        c = L.create_convolution_descriptor()
        if case != "conv_unset":
            L.set_convolution_2d_descriptor(
                c, 1, 1, 1, 1, 1, 1, L.ConvolutionMode.CROSS_CORRELATION, F
            )
        x, w, y = torch.rand(1, 2, 5, 5), torch.rand(3, 2, 3, 3), torch.empty(1, 3, 5, 5)
        algo, alpha, ws, wss = L.ConvolutionFwdAlgo.IMPLICIT_GEMM, 1.0, None, 0
        if case == "y_dims":
            y_d = _td((1, 3, 4, 4))
        elif case == "w_channels":
            w_d = _fd((3, 4, 3, 3))
        elif case == "x_buf_shape":
            x = torch.rand(1, 2, 4, 6)
        elif case == "w_buf_dtype":
            w = w.half()
        elif case == "algo_99":
            algo = 99
        elif case == "algo_neg":
            algo = -1
        elif case == "ws_small":
            algo = L.ConvolutionFwdAlgo.FFT
            need = L.get_convolution_forward_workspace_size(h, x_d, w_d, c, y_d, algo)
            if need == 0:
                raise Silent("skip: FFT needs no workspace here")
            ws, wss = torch.empty(need - 1, dtype=torch.uint8), need - 1
        elif case == "alpha_str":
            alpha = "1"
        elif case == "alpha_None":
            alpha = None
        elif case == "x_unset":
            x_d = L.create_tensor_descriptor()
        elif case == "mixed_dtype":
            w_d = _fd((3, 2, 3, 3), DT.HALF)
            w = w.half()
        elif case == "y_buf_too_small":
            y = torch.empty(10)
        elif case == "y_desc_overlap":
            y_d = L.create_tensor_descriptor()
            L.set_tensor_4d_descriptor_ex(y_d, F, 1, 3, 5, 5, 1, 1, 1, 1)
            y = torch.empty(75)
        elif case == "handle_None":
            h = None
        elif case.startswith("bias_act"):
            b_d = _td((1, 4, 1, 1)) if case == "bias_act_bad_bias" else _td((1, 3, 1, 1))
            act = None
            if case == "bias_act_bad_bias":
                act = L.create_activation_descriptor()
            L.convolution_bias_activation_forward(
                h,
                1.0,
                x_d,
                x,
                w_d,
                w,
                c,
                algo,
                None,
                0,
                0.0,
                y_d,
                y,
                b_d,
                torch.rand(1, 3, 1, 1),
                act,
                y_d,
                y,
            )
            if case == "bias_act_none_act":
                return
            raise Silent(f"{case} accepted")
        elif case == "find_ex_small_y":
            L.find_convolution_forward_algorithm_ex(
                h, x_d, x, w_d, w, c, y_d, torch.empty(3), 8, None, 0
            )
            raise Silent("find_..._ex with a 3-element y accepted")
        L.convolution_forward(h, alpha, x_d, x, w_d, w, c, algo, ws, wss, 0.0, y_d, y)
        if case in ("handle_None", "alpha_str"):
            return
        raise Silent(f"{case} accepted")

    return Probe(
        f"legacy convolution_forward: {case}",
        run,
        valid=case in ("bias_act_none_act", "handle_None", "alpha_str"),
    )


@family("legacy", 16)
def lg_misc_ops(r):
    case = pick(
        r,
        [
            "act_mode_99",
            "act_desc_None",
            "act_xy_dims",
            "act_y_dtype",
            "softmax_algo_7",
            "softmax_mode_5",
            "softmax_dims",
            "pool_window_0",
            "pool_mode_9",
            "pool_y_dims",
            "pool_nb_4",
            "add_not_broadcast",
            "op_tensor_op_9",
            "op_tensor_unset",
            "transform_dims",
            "set_tensor_str",
            "scale_tensor_None",
            "lrn_n_0",
            "lrn_beta_0",
            "dropout_p_1.5",
            "dropout_states_small",
            "reduce_op_99",
            "bn_mode_7",
            "bn_eps_neg",
            "bn_desc_mismatch",
            "lrn_mode_5",
            "reduce_c_dims",
            "reduce_idx_small_buffer",
            "reduce_idx_noncontig",
            "reduce_idx_none",
            "dd_fwd_reserve_small",
            "dd_desc_unset",
        ],
    )

    def run():
        h = handle()
        x_d = _td((2, 3, 4, 4))
        x, y = torch.rand(2, 3, 4, 4), torch.empty(2, 3, 4, 4)
        if case.startswith("act"):
            a = L.create_activation_descriptor()
            if case == "act_mode_99":
                L.set_activation_descriptor(a, 99, L.NanPropagation.NOT_PROPAGATE_NAN, 0.0)
            else:
                L.set_activation_descriptor(
                    a, L.ActivationMode.RELU, L.NanPropagation.NOT_PROPAGATE_NAN, 0.0
                )
            y_d = x_d
            if case == "act_desc_None":
                a = None
            elif case == "act_xy_dims":
                y_d = _td((2, 3, 4, 5))
            elif case == "act_y_dtype":
                y = y.double()
            L.activation_forward(h, a, 1.0, x_d, x, 0.0, y_d, y)
        elif case.startswith("softmax"):
            algo = 7 if case == "softmax_algo_7" else L.SoftmaxAlgorithm.ACCURATE
            mode = 5 if case == "softmax_mode_5" else L.SoftmaxMode.CHANNEL
            y_d = _td((2, 3, 4, 5)) if case == "softmax_dims" else x_d
            L.softmax_forward(h, algo, mode, 1.0, x_d, x, 0.0, y_d, y)
        elif case.startswith("pool"):
            p = L.create_pooling_descriptor()
            if case == "pool_window_0":
                L.set_pooling_2d_descriptor(
                    p, L.PoolingMode.MAX, L.NanPropagation.NOT_PROPAGATE_NAN, 0, 2, 0, 0, 1, 1
                )
            elif case == "pool_mode_9":
                L.set_pooling_2d_descriptor(
                    p, 9, L.NanPropagation.NOT_PROPAGATE_NAN, 2, 2, 0, 0, 1, 1
                )
            elif case == "pool_nb_4":
                L.set_pooling_nd_descriptor(
                    p,
                    L.PoolingMode.MAX,
                    L.NanPropagation.NOT_PROPAGATE_NAN,
                    4,
                    [2] * 4,
                    [0] * 4,
                    [1] * 4,
                )
            else:
                L.set_pooling_2d_descriptor(
                    p, L.PoolingMode.MAX, L.NanPropagation.NOT_PROPAGATE_NAN, 2, 2, 0, 0, 1, 1
                )
            L.pooling_forward(h, p, 1.0, x_d, x, 0.0, _td((2, 3, 2, 2)), torch.empty(2, 3, 2, 2))
        elif case == "add_not_broadcast":
            L.add_tensor(h, 1.0, _td((1, 2, 1, 1)), torch.rand(1, 2, 1, 1), 1.0, x_d, x)
        elif case.startswith("op_tensor"):
            od = L.create_op_tensor_descriptor()
            if case == "op_tensor_op_9":
                L.set_op_tensor_descriptor(od, 9, F, L.NanPropagation.NOT_PROPAGATE_NAN)
            L.op_tensor(h, od, 1.0, x_d, x, 1.0, x_d, x, 0.0, x_d, y)
        elif case == "transform_dims":
            L.transform_tensor(h, 1.0, x_d, x, 0.0, _td((2, 3, 4, 5)), torch.empty(2, 3, 4, 5))
        elif case == "set_tensor_str":
            L.set_tensor(h, x_d, y, "one")
        elif case == "scale_tensor_None":
            L.scale_tensor(h, x_d, None, 2.0)
        elif case.startswith("lrn"):
            ld = L.create_lrn_descriptor()
            if case == "lrn_n_0":
                L.set_lrn_descriptor(ld, 0, 1e-4, 0.75, 2.0)
            elif case == "lrn_beta_0":
                L.set_lrn_descriptor(ld, 5, 1e-4, 0.0, 2.0)
            else:
                L.lrn_cross_channel_forward(h, ld, 5, 1.0, x_d, x, 0.0, x_d, y)
        elif case.startswith("dropout"):
            dd = L.create_dropout_descriptor()
            n = L.dropout_get_states_size(h)
            st = torch.empty(n if case != "dropout_states_small" else 1, dtype=torch.uint8)
            L.set_dropout_descriptor(
                dd, h, 1.5 if case == "dropout_p_1.5" else 0.5, st, st.numel(), 1
            )
        elif case.startswith("reduce"):
            rd = L.create_reduce_tensor_descriptor()
            c_d = _td((2, 1, 1, 1)) if case != "reduce_c_dims" else _td((2, 2, 1, 1))
            c = torch.empty(2, 1, 1, 1) if case != "reduce_c_dims" else torch.empty(2, 2, 1, 1)
            if case == "reduce_op_99":
                L.set_reduce_tensor_descriptor(rd, 99, F, 0, 0, 0)
            elif case.startswith("reduce_idx"):
                L.set_reduce_tensor_descriptor(rd, L.ReduceTensorOp.MAX, F, 0, 1, 0)
            else:
                L.set_reduce_tensor_descriptor(rd, 0, F, 0, 0, 0)
            need = L.get_reduction_workspace_size(h, rd, x_d, c_d)
            ws = torch.empty(need, dtype=torch.uint8)
            idx, idx_size = None, 0
            if case.startswith("reduce_idx"):
                idx_size = L.get_reduction_indices_size(h, rd, x_d, c_d)
                idx = {
                    "reduce_idx_small_buffer": torch.empty(1, dtype=torch.int32),
                    "reduce_idx_noncontig": torch.empty(4, dtype=torch.int32)[::2],
                    "reduce_idx_none": None,
                }[case]
            wss = ws.numel()
            if case == "reduce_ws_buffer_lies":
                if need == 0:
                    raise Silent("skip: no workspace needed")
                ws, wss = torch.empty(1, dtype=torch.uint8), need
            L.reduce_tensor(h, rd, idx, idx_size, ws, wss, 1.0, x_d, x, 0.0, c_d, c)
        elif case.startswith("dd_"):
            dd = L.create_dropout_descriptor()
            if case == "dd_fwd_reserve_small":
                n = L.dropout_get_states_size(h)
                st = torch.empty(n, dtype=torch.uint8)
                L.set_dropout_descriptor(dd, h, 0.5, st, n, 1)
            rs = torch.empty(1, dtype=torch.uint8)
            L.dropout_forward(h, dd, x_d, x, x_d, y, rs, rs.numel())
        elif case.startswith("bn"):
            bn = L.create_tensor_descriptor()
            mode = 7 if case == "bn_mode_7" else L.BatchNormMode.SPATIAL
            L.derive_bn_tensor_descriptor(bn, x_d, mode)
            if case == "bn_desc_mismatch":
                bn = _td((1, 4, 1, 1))
            p = [torch.rand(1, 3, 1, 1) for _ in range(4)]
            L.batch_normalization_forward_inference(
                h,
                L.BatchNormMode.SPATIAL,
                1.0,
                0.0,
                x_d,
                x,
                x_d,
                y,
                bn,
                *p,
                -1.0 if case == "bn_eps_neg" else 1e-5,
            )
        raise Silent(f"{case} accepted")

    return Probe(f"legacy: {case}", run)


_KEEP: list = []  # buffers whose raw pointers were handed out stay alive


@family("legacy", 40)
def lg_buffers(r):
    """One buffer of a legacy call replaced by something that does not match its
    descriptor (API.md: a mismatch is BAD_PARAM with the reason, never a silent misread)."""
    call = pick(
        r,
        [
            "activation_forward",
            "softmax_forward",
            "add_tensor",
            "transform_tensor",
            "pooling_forward",
            "convolution_forward",
            "bn_inference",
            "lrn_forward",
            "scale_tensor",
            "op_tensor",
            "reduce_tensor",
            "bn_training",
        ],
    )
    role = pick(r, ["in", "out"])
    kind = pick(
        r,
        [
            "None",
            "double",
            "transposed",
            "reshaped_same_numel",
            "flat_exact",
            "numpy_f32",
            "list",
            "meta",
            "int_ptr",
            "float",
            "half",
            "too_small_flat",
            "numpy_f64",
            "noncontig",
        ],
    )
    beta = pick(r, [0.0, 0.5])

    def mutate(t):
        return {
            "None": lambda: None,
            "double": lambda: t.double(),
            "transposed": lambda: t.transpose(-1, -2).contiguous().transpose(-1, -2)
            if t.shape[-1] != t.shape[-2] or True
            else t,
            "reshaped_same_numel": lambda: t.reshape(list(t.shape)[::-1]),
            "flat_exact": lambda: t.reshape(-1).clone(),
            "numpy_f32": lambda: t.numpy(),
            "numpy_f64": lambda: t.double().numpy(),
            "list": lambda: t.tolist(),
            "meta": lambda: t.to("meta"),
            "int_ptr": lambda: (_KEEP.append(t), t.data_ptr())[1],
            "float": lambda: 0.5,
            "half": lambda: t.half(),
            "too_small_flat": lambda: t.reshape(-1)[:-1].clone(),
            "noncontig": lambda: torch.rand([n * 2 for n in t.shape])[
                tuple(slice(None, None, 2) for _ in t.shape)
            ],
        }[kind]()

    def run():
        h = handle()
        dims = (2, 3, 4, 5)
        d = _td(dims)
        x, y = torch.rand(*dims), torch.rand(*dims)
        if role == "in":
            x = mutate(x)
        else:
            y = mutate(y)
        if call == "activation_forward":
            a = L.create_activation_descriptor()
            L.set_activation_descriptor(
                a, L.ActivationMode.TANH, L.NanPropagation.NOT_PROPAGATE_NAN, 0.0
            )
            L.activation_forward(h, a, 1.0, d, x, beta, d, y)
        elif call == "softmax_forward":
            L.softmax_forward(
                h, L.SoftmaxAlgorithm.ACCURATE, L.SoftmaxMode.CHANNEL, 1.0, d, x, beta, d, y
            )
        elif call == "add_tensor":
            L.add_tensor(h, 1.0, d, x, beta, d, y)
        elif call == "transform_tensor":
            L.transform_tensor(h, 1.0, d, x, beta, d, y)
        elif call == "scale_tensor":
            L.scale_tensor(h, d, y if role == "out" else x, 2.0)
        elif call == "op_tensor":
            od = L.create_op_tensor_descriptor()
            L.set_op_tensor_descriptor(od, L.OpTensorOp.MUL, F, L.NanPropagation.NOT_PROPAGATE_NAN)
            L.op_tensor(h, od, 1.0, d, x, 1.0, d, torch.rand(*dims), beta, d, y)
        elif call == "pooling_forward":
            p = L.create_pooling_descriptor()
            L.set_pooling_2d_descriptor(
                p, L.PoolingMode.MAX, L.NanPropagation.NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2
            )
            yd = _td((2, 3, 2, 2))
            yy = torch.rand(2, 3, 2, 2)
            L.pooling_forward(h, p, 1.0, d, x, beta, yd, mutate(yy) if role == "out" else yy)
        elif call == "convolution_forward":
            c = L.create_convolution_descriptor()
            L.set_convolution_2d_descriptor(
                c, 1, 1, 1, 1, 1, 1, L.ConvolutionMode.CROSS_CORRELATION, F
            )
            w_d = _fd((2, 3, 3, 3))
            yd = _td((2, 2, 4, 5))
            yy = torch.rand(2, 2, 4, 5)
            L.convolution_forward(
                h,
                1.0,
                d,
                x,
                w_d,
                torch.rand(2, 3, 3, 3),
                c,
                L.ConvolutionFwdAlgo.IMPLICIT_GEMM,
                None,
                0,
                beta,
                yd,
                mutate(yy) if role == "out" else yy,
            )
        elif call in ("bn_inference", "bn_training"):
            bn = L.derive_bn_tensor_descriptor(
                L.create_tensor_descriptor(), d, L.BatchNormMode.SPATIAL
            )
            p = [torch.rand(1, 3, 1, 1) + 0.5 for _ in range(4)]
            if call == "bn_inference":
                L.batch_normalization_forward_inference(
                    h, L.BatchNormMode.SPATIAL, 1.0, beta, d, x, d, y, bn, *p, 1e-5
                )
            else:
                L.batch_normalization_forward_training(
                    h,
                    L.BatchNormMode.SPATIAL,
                    1.0,
                    beta,
                    d,
                    x,
                    d,
                    y,
                    bn,
                    p[0],
                    p[1],
                    0.1,
                    p[2],
                    p[3],
                    1e-5,
                    None,
                    None,
                )
        elif call == "lrn_forward":
            ld = L.create_lrn_descriptor()
            L.lrn_cross_channel_forward(h, ld, L.LRNMode.CROSS_CHANNEL_DIM1, 1.0, d, x, beta, d, y)
        elif call == "reduce_tensor":
            rd = L.create_reduce_tensor_descriptor()
            L.set_reduce_tensor_descriptor(rd, 0, F, 0, 0, 0)
            cd = _td((2, 1, 1, 1))
            need = L.get_reduction_workspace_size(h, rd, d, cd)
            cc = torch.rand(2, 1, 1, 1)
            L.reduce_tensor(
                h,
                rd,
                None,
                0,
                torch.empty(need, dtype=torch.uint8),
                need,
                1.0,
                d,
                x,
                beta,
                cd,
                mutate(cc) if role == "out" else cc,
            )

    # legal when the graph API's binding rule accepts it (the descriptors are packed NCHW)
    odims = (
        {
            "pooling_forward": (2, 3, 2, 2),
            "convolution_forward": (2, 2, 4, 5),
            "reduce_tensor": (2, 1, 1, 1),
        }.get(call, (2, 3, 4, 5))
        if role == "out"
        else (2, 3, 4, 5)
    )
    probe_t = mutate(torch.rand(*odims)) if kind not in ("int_ptr",) else None

    class _D:
        dims, strides = odims, tuple(packed(odims))
        span = math.prod(odims)

    legal = kind in ("numpy_f32", "flat_exact", "int_ptr") or (
        isinstance(probe_t, torch.Tensor)
        and probe_t.device.type == "cpu"
        and probe_t.dtype == torch.float32
        and _legal_binding(probe_t, _D)
    )
    return Probe(
        f"legacy {call}(beta={beta}): {'input' if role == 'in' else 'output'} buffer -> {kind}",
        run,
        valid=legal,
        isolate=kind == "int_ptr",
    )


@family("graph", 6)
def g_memo_value(r):
    """A graph validated once, then built again identically but for the VALUE of a
    pass-by-value scalar: the validation memo's fingerprint leaves values out."""
    case = pick(r, ["ln_eps_neg", "ln_eps_nan", "rms_eps_zero"])

    def make(eps):
        g = cudnn.pygraph(name="g_memo")
        x = g.tensor([2, 8], [8, 1], F, name="x_in")
        s = g.tensor([1, 8], [8, 1], F, name="scale_in")
        b = g.tensor([1, 8], [8, 1], F, name="bias_in")
        if case.startswith("rms"):
            outs = g.rmsnorm(NormForwardPhase.TRAINING, x, s, None, eps, name="nm_n")
        else:
            outs = g.layernorm(NormForwardPhase.TRAINING, x, s, b, eps, name="nm_n")
        for i, t in enumerate(outs):
            if t is not None:
                t.set_output(True).set_name(f"o{i}_out")
        return g

    bad = {"ln_eps_neg": -1.0, "ln_eps_nan": float("nan"), "rms_eps_zero": 0.0}[case]

    def run():
        make(1e-5).validate()  # the good twin, validated first
        g = make(bad)
        g.validate()
        then = "execute then ran"
        try:
            run_graph(g)
        except OpenDNNError as e:
            then = f"execute then raised: {e}"
        raise Silent(
            f"validate() accepted epsilon={bad} (a fresh graph refuses it): the "
            f"memo of the epsilon=1e-5 twin answered; {then}"
        )

    return Probe(f"validation memo: {case}", run, op="nm_n", tensor="nm_n::epsilon")


@family("graph", 6)
def g_bn_values(r):
    case = pick(r, ["eps_neg", "eps_nan", "momentum_neg", "momentum_2", "eps_inf"])

    def run():
        g = cudnn.pygraph(name="g_bnv")
        x = g.tensor([2, 3, 2, 2], [12, 4, 2, 1], F, name="x_in")
        st = [g.tensor([1, 3, 1, 1], [3, 1, 1, 1], F, name=f"st{i}_in") for i in range(4)]
        eps = {"eps_neg": -1.0, "eps_nan": float("nan"), "eps_inf": float("inf")}.get(case, 1e-5)
        mom = {"momentum_neg": -0.5, "momentum_2": 2.0}.get(case, 0.1)
        outs = g.batchnorm(x, st[0], st[1], st[2], st[3], epsilon=eps, momentum=mom, name="bnv_n")
        for i, t in enumerate(outs):
            t.set_output(True).set_name(f"o{i}_out")
        pack = run_graph(g)
        y = pack[outs[0].get_uid()]
        raise Silent(f"batchnorm {case} ran; y finite: {bool(torch.isfinite(y).all())}")

    return Probe(f"batchnorm graph: {case}", run, op="bnv_n")


@family("tensor", 6)
def t_edge_all_engines(r):
    """Legal but unusual inputs through EVERY candidate plan (heuristics A, B, FALLBACK,
    policy ALL): each must run or be declined with a typed error."""
    case = pick(
        r,
        [
            "pw_zero_size",
            "pw_broadcast_strides",
            "red_padded_strides",
            "mm_transposed_b",
            "conv_nhwc",
            "sm_padded",
        ],
    )

    def run():
        if case.startswith("pw"):
            g, T = fresh("pw")
            if case == "pw_zero_size":
                T["x_in"].set_dim([2, 0, 4]).set_stride([4, 4, 1])
                T["s_in"].set_dim([1, 0, 1]).set_stride([1, 1, 1])
            else:
                T["x_in"].set_stride([0, 4, 1])
        elif case == "red_padded_strides":
            g, T = fresh("red")
            T["x_in"].set_stride([9, 1])
        elif case == "mm_transposed_b":
            g, T = fresh("mm")
            T["b_in"].set_stride([15, 1, 5])
        elif case == "conv_nhwc":
            g, T = fresh("conv")
            T["x_in"].set_stride([50, 1, 10, 2])
            T["w_in"].set_stride([18, 1, 6, 2])
        else:
            g, T = fresh("sm")
            T["x_in"].set_stride([7, 1])
        g.validate()
        g.create_execution_plans([A, HeurMode.B, HeurMode.FALLBACK])
        g.check_support()
        g.build_plans(cudnn.build_plan_policy.ALL)
        pack = auto_pack(g)
        for i in range(g.get_execution_plan_count()):
            ws = g.get_workspace_size_plan_at_index(i)
            g.execute_plan_at_index(pack, torch.empty(ws, dtype=torch.uint8) if ws else None, i)

    return Probe(f"every plan on {case}", run, valid=True)


@family("graph", 8)
def g_pbv_operand(r):
    """A one-element pass-by-value tensor as the operand of a non-pointwise node."""
    case = pick(
        r,
        [
            "matmul_A",
            "conv_weight",
            "reduction_input",
            "softmax_input",
            "layernorm_scale",
            "transpose_input",
        ],
    )

    def run():
        g = cudnn.pygraph(name="g_pop")
        one = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], F, is_pass_by_value=True, name="pbv_in")
        if case == "matmul_A":
            b = g.tensor([1, 1, 1, 3], [3, 3, 3, 1], F, name="b_in")
            y = g.matmul(one, b, name="op_n")
        elif case == "conv_weight":
            x = g.tensor([1, 1, 3, 3], [9, 9, 3, 1], F, name="x_in")
            y = g.conv_fprop(x, one, padding=[0, 0], name="op_n")
        elif case == "reduction_input":
            y = g.reduction(one, ReductionMode.ADD, name="op_n")
            y.set_dim([1, 1, 1, 1])
        elif case == "softmax_input":
            y = g.softmax(one, axis=-1, name="op_n")
        elif case == "transpose_input":
            y = g.transpose(one, [0, 1, 3, 2], name="op_n")
        else:
            x = g.tensor([2, 1, 1, 1], [1, 1, 1, 1], F, name="x_in")
            b = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], F, name="bias_in")
            y = g.layernorm(NormForwardPhase.INFERENCE, x, one, b, 1e-5, name="op_n")[0]
        y.set_output(True).set_name("y_out")
        run_graph(g)

    return Probe(f"pass-by-value operand: {case}", run, op="op_n", tensor="pbv_in", valid=True)


@family("graph", 6)
def g_grad_dims(r):
    case = pick(
        r,
        [
            "dgrad_dx_dims",
            "wgrad_dw_dims",
            "dgrad_dx_rank",
            "wgrad_dw_groups",
            "dgrad_no_dims",
            "softmax_bwd_dims",
        ],
    )

    def run():
        g = cudnn.pygraph(name="g_gd")
        x = g.tensor([1, 2, 5, 5], [50, 25, 5, 1], F, name="x_in")
        w = g.tensor([3, 2, 3, 3], [18, 9, 3, 1], F, name="w_in")
        dy = g.tensor([1, 3, 5, 5], [75, 25, 5, 1], F, name="dy_in")
        kw = dict(padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="gd_n")
        if case.startswith("dgrad"):
            t = g.conv_dgrad(dy, w, **kw)
            if case == "dgrad_dx_dims":
                t.set_dim([1, 2, 6, 6])
            elif case == "dgrad_dx_rank":
                t.set_dim([1, 2, 5])
        elif case.startswith("wgrad"):
            t = g.conv_wgrad(x, dy, **kw)
            t.set_dim([3, 2, 5, 5] if case == "wgrad_dw_dims" else [3, 4, 3, 3])
        else:
            yy = g.tensor([2, 5], [5, 1], F, name="yy_in")
            t = g.softmax_backward(g.tensor([2, 4], [4, 1], F, name="ddy_in"), yy, name="gd_n")
        t.set_output(True).set_name("d_out")
        run_graph(g)

    return Probe(f"backward output dims: {case}", run, op="gd_n")


@family("life", 8)
def l_autotune(r):
    case = pick(
        r,
        [
            "missing_entry",
            "ws_int",
            "ws_none_needed",
            "ws_numpy_small",
            "pack_none",
            "iters_0",
            "not_built",
        ],
    )

    def run():
        if case in ("ws_int", "ws_none_needed", "ws_numpy_small"):
            g, x, y, need = ws_graph()
            pack = {x: torch.rand(3, 64), y: torch.empty(3, 1)}
            ws = {"ws_int": need, "ws_none_needed": None, "ws_numpy_small": np.zeros(1, np.uint8)}[
                case
            ]
            res = g.autotune(pack, ws, warmup=1, iters=2)
            raise Silent(f"autotune with workspace {case} -> {res!r}")
        g, T = fresh("pw")
        if case != "not_built":
            g.build([A, HeurMode.FALLBACK])
        else:
            g.validate()
        pack = auto_pack(g) if case != "pack_none" else None
        if case == "missing_entry":
            pack.pop(T["s_in"].get_uid())
        res = g.autotune(pack, None, warmup=1, iters=0 if case == "iters_0" else 2)
        if case == "not_built":
            raise Silent(f"autotune before any plan was created -> {res!r}")

    return Probe(
        f"autotune: {case}",
        run,
        valid=case == "iters_0",
        rule=("workspace",) if case.startswith("ws_") else (),
    )


# ==== driver ====================================================================================
def probes_for(fam, n, seed):
    cat, name, _, fn = fam
    seen = set()
    for i in range(n):
        s = zlib.crc32(f"{seed}:{name}:{i}".encode())
        r = random.Random(s)
        p = fn(r)
        if p.what in seen:
            continue
        seen.add(p.what)
        yield i, s, p


def run_isolated(name: str, i: int, seed: int, timeout: int) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        name,
        str(i),
        "--seed",
        str(seed),
        "--timeout",
        str(timeout),
    ]
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout + 60, env=dict(os.environ)
        )
    except subprocess.TimeoutExpired:
        return dict(
            outcome="HANG/CRASH",
            exc="timeout",
            msg="child ran past the timeout",
            origin="",
            lib="",
            missing=[],
        )
    if out.returncode < 0 or out.returncode not in (0,):
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        if line and out.returncode == 0:
            return json.loads(line[-1])
        sig = -out.returncode if out.returncode < 0 else None
        return dict(
            outcome="HANG/CRASH",
            exc=f"signal {sig}" if sig else f"exit {out.returncode}",
            msg=(out.stderr or "")[-300:].replace("\n", " "),
            origin="",
            lib="",
            missing=[],
        )
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    return (
        json.loads(line[-1])
        if line
        else dict(
            outcome="HARNESS", exc="no output", msg=out.stderr[-300:], origin="", lib="", missing=[]
        )
    )


def child(name: str, i: int, seed: int, timeout: int) -> None:
    fam = next(f for f in FAMILIES if f[1] == name)
    s = zlib.crc32(f"{seed}:{name}:{i}".encode())
    p = fam[3](random.Random(s))
    r = run_probe(p, timeout)
    print(json.dumps(r), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument(
        "--iter", type=float, default=10.0, help="draws per family, as a multiple of its base count"
    )
    ap.add_argument("--only", default="", help="comma-separated substrings of family names")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per probe")
    ap.add_argument("--budget", type=int, default=2100, help="stop starting probes after s")
    ap.add_argument("--json", default="", help="write every result to this file")
    ap.add_argument("-v", "--verbose", action="store_true", help="print OK/VALID lines too")
    ap.add_argument("--child", nargs=2, metavar=("FAMILY", "I"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), a.seed, a.timeout)
        return 0
    only = [s for s in a.only.split(",") if s]
    fams = [f for f in FAMILIES if not only or any(s in f[1] for s in only)]
    t_start = time.perf_counter()
    results = []
    counts = collections.Counter()
    print(
        f"fuzz_errors: seed {a.seed}, {len(fams)} families, timeout {a.timeout} s/probe", flush=True
    )
    for fam in fams:
        cat, name, n, _ = fam
        for i, s, p in probes_for(fam, max(1, round(n * a.iter)), a.seed):
            if time.perf_counter() - t_start > a.budget:
                print("-- budget spent, stopping", flush=True)
                break
            if p.isolate:
                r = run_isolated(name, i, a.seed, a.timeout)
            else:
                r = run_probe(p, a.timeout)
            if r["outcome"] == "BUG-SILENT" and r["msg"].startswith("skip:"):
                continue
            r.update(cat=cat, family=name, i=i, seed=s, what=p.what)
            results.append(r)
            counts[r["outcome"]] += 1
            if a.verbose or r["outcome"] not in ("OK", "VALID"):
                extra = f" missing={r['missing']}" if r.get("missing") else ""
                loc = (
                    f" @ {r['lib'] or r['origin']}"
                    if r["outcome"] in ("BUG-RAW", "WEAK", "HARNESS")
                    else ""
                )
                print(
                    f"[{r['outcome']:10}] {name}#{i}: {p.what}\n"
                    f"             -> {r['exc']}: {r['msg'][:300]}{loc}{extra}",
                    flush=True,
                )
                if r["outcome"] == "HARNESS":
                    print(r.get("tb", ""), flush=True)
        else:
            continue
        break
    dt = time.perf_counter() - t_start
    print(f"\n== {len(results)} probes in {dt:.0f} s")
    for k in ("OK", "WEAK", "BUG-RAW", "BUG-SILENT", "HANG/CRASH", "VALID", "HARNESS"):
        print(f"   {k:10} {counts.get(k, 0)}")
    # distinct findings: (outcome, exception type, library location)
    groups = collections.defaultdict(list)
    for r in results:
        if r["outcome"] in ("BUG-RAW", "BUG-SILENT", "HANG/CRASH", "WEAK"):
            key = (
                (r["outcome"], r["exc"], r["lib"] or r["origin"])
                if r["exc"]
                else (r["outcome"], "", r["family"] + ": " + r["msg"][:70])
            )
            groups[key].append(r)
    print(f"\n== {len(groups)} distinct findings (outcome, exception, library frame)")
    for (outcome, exc, where), rs in sorted(groups.items()):
        ex = rs[0]
        print(
            f"  {outcome:10} {exc or '-':22} {where}\n"
            f"             e.g. {ex['family']}#{ex['i']}: {ex['what']}  ({len(rs)} probes)"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
