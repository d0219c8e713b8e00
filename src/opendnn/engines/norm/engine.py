"""The norm engine: layer, RMS, instance and group norm, forward and backward, as Triton
kernels (paths and layouts in ``_kernels``; the math in ``ops/norm.py``).

It takes a graph of one backward norm node alone, or of one forward norm node with,
when the graph asks for them, a residual ``add`` producing the norm's input (the sum
may be an output too) and a chain of pointwise operations on Y (activation, scale,
another residual, ...; ``fusion.epilogue``) -- all in one kernel, Y then virtual.
Tensors are float32 / float16 / bfloat16 of any strides.

Knobs: PATH 1 holds whole rows in registers (BLOCK_ROWS rows of BLOCK_L >= L); PATH 2
takes long rows (forward: two loops per row; backward: statistics, column blocks); PATH 3
(forward) splits rows into SPLIT chunks over two kernels; PATH 4 (GPU only) reads long
rows once, a row's SPLIT chunks held by co-resident programs (``_coop_kernels``). SPLIT:
chunks per row (backward statistics kernel, PATH 3 and 4); PROGRAMS: persistent programs
(backward PATH 1, PATH 4) or row groups (backward PATH 2) whose DSCALE / DBIAS partials
the finishing kernel sums in order (deterministic); PREFETCH (PATH 4): the next row's
loads are issued before waiting for the row's other chunks.
"""

from __future__ import annotations

import dataclasses
import functools

from ...enums import BehaviorNote, DataType, PointwiseMode
from ...ops import norm as N
from ..base import (
    SUPPORTED,
    Engine,
    EngineConfig,
    Executable,
    Knob,
    Support,
    Target,
    decline,
    one_read_grid,
)
from ..fusion import epilogue as fe
from . import _coop_kernels as KC
from . import _kernels as K

TYPES = (DataType.FLOAT, DataType.HALF, DataType.BFLOAT16)
FORWARD = ("layernorm", "rmsnorm", "instancenorm", "groupnorm")
BACKWARD = tuple(f"{k}_backward" for k in FORWARD)
MAX_TILE = 16384  # elements of one program's register tile
COOP_COST = (1.3, 1.1, 1.0)  # PATH=4 time factor by PREFETCH (H100: the one-read softmax
#                              read 0.66-0.70 of copy without; PREFETCH=2 ~10% faster than
#                              1 where chosen; LAG=2 costs as PREFETCH=2; docs/design/norm.md)
COOP_MAX_SPLIT = 64  # PATH=4: chunks per row (the partials are gathered as a vector)
POW2 = tuple(1 << i for i in range(15))
L2_BYTES = 40e6  # the part of the H100's 50 MB L2 that re-read rows may count on


@dataclasses.dataclass(frozen=True)
class NormKnobs:
    PATH: int = 1  # 1: whole rows in registers; 2: long rows; 3: split forward
    BLOCK_L: int = 1024  # elements of a row per tile (PATH=1: at least the row)
    BLOCK_ROWS: int = 1  # rows per tile (PATH=1)
    SPLIT: int = 1  # chunks per row (backward PATH=2, forward PATH=3)
    PROGRAMS: int = 1  # backward: persistent programs (PATH=1) / row groups (PATH=2);
    #                         PATH=4: row groups x SPLIT, all resident at once
    num_warps: int = 4
    PREFETCH: int = 0  # PATH=4: load the next row while waiting for the others (2:
    #                         before this row's partials); backward PATH=1: load the next
    #                         row tile during this one
    CHUNK: int = 0  # PATH=4: elements of a row per program (0: BLOCK_L); less than
    #                         BLOCK_L lets SPLIT x groups fill every SM (132 = 12 x 11)
    LAG: int = 0  # backward PATH=4: wait for a row's partials one step later,
    #                         after publishing the next row's (2: the next row loaded
    #                         before the wait; LAG replaces PREFETCH)


@dataclasses.dataclass
class Analysis:
    node: object
    backward: bool
    problem: K.Problem
    uids: dict  # kernel parameter name -> uid
    spec: K.FwdSpec | None = None


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _per_sm(kn: NormKnobs) -> int:
    """Programs of the long-row loop one SM holds at once, from a register estimate
    (ptxas, sm_90: 128 registers for 16 or 32 elements a thread, 80 for 16 with 8 warps;
    the loop's loads are pipelined)."""
    threads = 32 * kn.num_warps
    regs = 128 if kn.BLOCK_L // threads >= 16 and kn.num_warps >= 8 and kn.BLOCK_L >= 8192 else 80
    return max(1, min(64 // kn.num_warps, 65536 // (threads * regs)))


@functools.lru_cache(maxsize=64)  # keyed by the (frozen) graph object
def _analyze(graph) -> Analysis | str:
    """The norm node, its fused neighbours and the problem, or why the graph does not fit."""
    norms = [n for n in graph.nodes if n.kind in FORWARD + BACKWARD]
    if len(norms) != 1:
        return "takes exactly one layer / RMS / instance / group norm node"
    n = norms[0]
    x, s = graph.tensors[n.inputs["X"]], graph.tensors[n.inputs["SCALE"]]
    geo = N.geometry(n.NORM, x.dims, s.dims, getattr(n, "groups", 1))
    uids = {**{r: u for r, u in n.inputs.items() if r != "EPSILON"}, **n.outputs}
    if n.kind in BACKWARD:
        if len(graph.nodes) != 1:
            return "a backward norm fuses with nothing: it must be alone"
        names = {k: graph.tensors[u] for k, u in uids.items()}
        return Analysis(n, True, K.Problem(geo, n.NORM, names, {"MEAN", "INV_VARIANCE"}), uids)
    pro = graph.producers.get(x.uid)
    if pro is not None:
        why = _prologue(graph, pro, x)
        if why:
            return why
        a, b = (pro.inputs[r] for r in ("IN_0", "IN_1"))
        uids.update(X=a, R=b)
        if not x.is_virtual:
            uids["XS"] = x.uid
    y = graph.tensors[n.outputs["Y"]]
    ep = fe.collect(graph, n, y.uid, skip=[pro] if pro is not None else [])
    if isinstance(ep, str):
        return ep
    why = _epilogue_inputs(graph, ep, n, pro)
    if why:
        return why
    if not ep.nodes:
        ep = None
    uids.pop("Y")
    if ep is None:
        uids["Y"] = y.uid
    else:
        uids.update({f"E{u}": u for u in ep.inputs + ep.outputs})
    training = "INV_VARIANCE" in n.outputs
    spec = K.FwdSpec(
        n.NORM == N.RMS,
        training,
        "BIAS" in n.inputs,
        pro is not None,
        "XS" in uids,
        ep is None,
        ep,
        graph,
    )
    names = {k: graph.tensors[uids[k]] for k in spec.names()}
    uids = {k: uids[k] for k in spec.names()}
    uids["EPS"] = n.inputs["EPSILON"]
    if ep is not None:
        uids.update({f"s{u}": u for u in ep.scalars})
    return Analysis(n, False, K.Problem(geo, n.NORM, names, {"MEAN", "INV_VARIANCE"}), uids, spec)


def _prologue(graph, pro, x) -> str | None:
    if pro.kind != "pointwise" or pro.mode != PointwiseMode.ADD:
        return f"the norm's input comes from {pro.label()}: only a residual add fuses before it"
    for u in pro.inputs.values():
        d = graph.tensors[u]
        if u in graph.producers or d.is_pass_by_value or d.dims != x.dims:
            return (
                f"residual add input '{d.label()}' must be a graph input of X's dims {list(x.dims)}"
            )
    if len(graph.consumers.get(x.uid, [])) != 1:
        return f"the residual sum '{x.label()}' feeds more than the norm"
    return None


def _epilogue_inputs(graph, ep, n, pro) -> str | None:
    inside = {n.outputs["Y"]} | {e.outputs["OUT_0"] for e in ep.nodes}
    for e in ep.nodes:
        for u in e.inputs.values():
            if u in graph.producers and u not in inside:
                return (
                    f"{e.label()} reads '{graph.tensors[u].label()}', which is neither Y "
                    "nor computed after it"
                )
    return None


def _coop_knobs(a: Analysis, target: Target) -> NormKnobs | None:
    """The one-read config (PATH=4) for rows of 4 to 64 chunks on a GPU, or None."""
    p = a.problem
    if not target.is_cuda or (a.backward and (p.G != 1 or p.S != 1)):
        return None
    # measured on the H100 (bf16, 2048 x 65536 and 512 x 262144; PREFETCH on): the forward
    # is best with 16384-element chunks, 8 warps, a program per SM (2.10 / 2.48 TB/s layer
    # / RMS norm at 262144); at 65536 (4 chunks) with PREFETCH=2 (``_prefetch``); the
    # backward's choice is below (docs/design/norm.md)
    if a.backward:
        return _coop_backward_knobs(p.L, target.num_sms)
    block, warps, per_sm = 16384, 8, 1
    split = -(-p.L // block)
    # from 65536 measured for layer / RMS norm only; instance / group norm rows (strided
    # when channels-last) keep the earlier threshold
    if p.L < (65536 if p.G == 1 and p.S == 1 else 131072) or split > COOP_MAX_SPLIT:
        return None
    plain = p.G == 1 and p.S == 1  # layer / RMS norm: what PREFETCH=2 was measured on
    return NormKnobs(
        4,
        block,
        1,
        split,
        (per_sm * target.num_sms // split) * split,
        warps,
        _prefetch(split, p.L % block == 0 and plain),
    )


def _prefetch(split: int, full: bool) -> int:
    """PREFETCH for the one-read path. Measured on the H100 (bf16, docs/design/norm.md):
    loading the next row first (2) pays with few chunks a row -- 2048 x 65536 forward
    (4 x 16384) 2.50 / 2.62 TB/s layer / RMS against 2.30 / 2.53 with 1 (and 2.25 / 2.11
    for the two-loop path), backward (8 x 8192) 2.41 / 2.46 against 2.32 / 2.34 -- and
    not with many: at 262144 forward 2.07 / 2.50 against 2.09 / 2.48, backward (33 x
    7944) 1.65 / 1.73 against 1.80 / 1.82 (ptxas spills). Chunks not all full (masks
    that vary by chunk) take more registers: ptxas spills there with 2 (a 49160-wide
    forward: 712 bytes), so those keep 1."""
    return 2 if split <= 8 and full else 1


def _coop_backward_knobs(L: int, sms: int) -> NormKnobs | None:
    """The backward's one-read config: chunks of at most 8192 elements, 8 warps, a program
    per SM. Measured on the H100 (bf16, docs/design/norm.md): a row step takes about the
    same time whatever its chunk (the programs' meeting, not the bytes, sets it), so the
    rate follows the rows in flight -- the groups, SMs // SPLIT -- times L. Chunks shorter
    than 8192 that leave the groups as many fill the SMs: 262144 in 33 chunks of 7944
    (4 x 33 = 132 programs) read 1.79 / 1.82 TB/s layer / RMS, against 1.71 / 1.74 for
    64 chunks of 4096 (two per SM); at 65536 eight chunks (16 groups) read 2.29, eleven
    of 5958 (12 groups) 1.78."""
    least = -(-L // 8192)
    if least > COOP_MAX_SPLIT or sms < least:
        return None
    best = max(range(least, min(COOP_MAX_SPLIT, sms) + 1), key=lambda s: (sms // s, (sms // s) * s))
    if least > 8 and L % 8192 == 0:
        # many full chunks take the meeting a row late with the next row loaded ahead
        # (LAG=2): on the H100 262144 in 32 x 8192 read 2.44 / 2.43 TB/s layer / RMS,
        # against 1.81 / 1.82 for 33 x 7944 with PREFETCH=1 (docs/design/norm.md)
        return NormKnobs(4, 8192, 1, least, (sms // least) * least, 8, 0, 0, 2)
    chunk = -(-L // best)
    chunk = -(-chunk // 8) * 8  # 16-byte aligned chunks of bf16
    split = -(-L // chunk)
    if split < 4:
        return None
    pre = _prefetch(split, chunk == 8192 and L % 8192 == 0)
    return NormKnobs(
        4, 8192, 1, split, (sms // best) * split, 8, pre, 0 if chunk == 8192 else chunk
    )


def _check_coop(a: Analysis, kn: NormKnobs, target: Target) -> Support:
    p = a.problem
    if not target.is_cuda and kn.SPLIT > 1:
        return decline(
            "PATH=4 with SPLIT > 1 needs a GPU: a row's programs wait for each "
            "other, and the interpreter runs programs one at a time"
        )
    if a.backward and (p.G != 1 or p.S != 1):
        return decline("backward PATH=4 takes layer / RMS norm; group / instance norm take PATH=2")
    if kn.BLOCK_ROWS != 1 or kn.BLOCK_L > MAX_TILE:
        return decline(f"PATH=4: BLOCK_ROWS=1 and BLOCK_L <= {MAX_TILE}")
    chunks = -(-p.L // (kn.CHUNK or kn.BLOCK_L))
    return one_read_grid("PATH=4", kn.SPLIT, chunks, COOP_MAX_SPLIT, kn.PROGRAMS, target.num_sms)


class NormEngine(Engine):
    """Layer / RMS / instance / group norm, forward (with fusion) and backward."""

    id = 26
    name = "norm"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def check_support(self, graph, target: Target) -> Support:
        a = _analyze(graph)
        if isinstance(a, str):
            return decline(a)
        for name, d in a.problem.descs.items():
            if d.is_pass_by_value and not name.startswith("E"):
                return decline(
                    f"{a.node.label()} operand '{d.label()}' is passed by value (a "
                    "host scalar): the norm kernels load it from memory"
                )
            if d.data_type not in TYPES and not name.startswith("E"):
                return decline(
                    f"tensor {d.label()} is {d.data_type.name}: float32, float16 or "
                    "bfloat16 only (float64 runs on the reference)"
                )
        return SUPPORTED

    def knob_space(self, graph=None) -> list[Knob]:
        return [
            Knob("PATH", (1, 2, 3, 4), 1),
            Knob("BLOCK_L", POW2, 1024),
            Knob("BLOCK_ROWS", POW2[:9], 1),
            Knob("SPLIT", tuple(range(1, 257)), 1),
            Knob("PROGRAMS", tuple(range(1, 4097)), 1),
            Knob("num_warps", (1, 2, 4, 8, 16, 32), 4),
            Knob("PREFETCH", (0, 1, 2), 0),
            Knob("CHUNK", tuple(range(0, MAX_TILE + 1)), 0),
            Knob("LAG", (0, 1, 2), 0),
        ]

    def check_config(self, graph, config: EngineConfig, target: Target) -> Support:
        sup = super().check_config(graph, config, target)
        if not sup.ok:
            return sup
        kn, a = NormKnobs(**config.knob_dict), _analyze(graph)
        p = a.problem
        if kn.PREFETCH and not (kn.PATH == 4 or (kn.PATH == 1 and a.backward)):
            return decline("PREFETCH is a knob of PATH=4 and of the backward's PATH=1")
        if kn.PREFETCH == 2 and kn.PATH != 4:
            return decline(
                "PREFETCH=2 (the next row loaded before this row's partials) is a knob of PATH=4"
            )
        if kn.CHUNK and (kn.PATH != 4 or kn.CHUNK > kn.BLOCK_L):
            return decline(f"CHUNK={kn.CHUNK} is a knob of PATH=4, at most BLOCK_L={kn.BLOCK_L}")
        if kn.LAG and (kn.PATH != 4 or not a.backward or kn.PREFETCH):
            return decline(
                f"LAG={kn.LAG} is a knob of the backward's PATH=4, with PREFETCH=0 "
                "(LAG=2 loads ahead itself)"
            )
        if kn.PATH == 4:
            return _check_coop(a, kn, target)
        if kn.PATH == 1:
            if kn.BLOCK_L < p.L:
                return decline(f"PATH=1 holds whole rows: BLOCK_L={kn.BLOCK_L} < row length {p.L}")
            if kn.BLOCK_L * kn.BLOCK_ROWS > MAX_TILE:
                return decline(f"PATH=1: BLOCK_ROWS x BLOCK_L <= {MAX_TILE}")
            if a.backward and (p.G != 1 or p.S != 1):
                return decline(
                    "backward PATH=1 takes layer / RMS norm (parameters shared "
                    "by every row); group / instance norm take PATH=2"
                )
        elif kn.PATH == 3 and a.backward:
            return decline("PATH=3 is a forward path")
        elif kn.BLOCK_L > MAX_TILE or kn.BLOCK_ROWS != 1:
            return decline(f"PATH={kn.PATH}: BLOCK_ROWS=1 and BLOCK_L <= {MAX_TILE}")
        elif kn.SPLIT > max(1, -(-p.L // kn.BLOCK_L)) and (a.backward or kn.PATH == 3):
            return decline(
                f"PATH={kn.PATH}: SPLIT at most the row's tiles ({max(1, -(-p.L // kn.BLOCK_L))})"
            )
        return SUPPORTED

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        a = _analyze(graph)
        p, sms, cuda = a.problem, target.num_sms, target.is_cuda
        out = []
        cap = MAX_TILE if cuda else 1024
        if _pow2(p.L) <= cap and not (a.backward and (p.G != 1 or p.S != 1)):
            bl = _pow2(max(p.L, 1))
            br = max(1, min(256, (4096 if cuda else 256) // bl))
            warps = max(1, min(16, bl * br // 512)) if cuda else 4
            if a.backward:  # persistent: as many programs as the SMs hold at once
                # 8 elements a thread: ptxas (sm_90) gives the 8192-wide tile 62 registers
                # with 32 warps, 128 and 340 bytes of spills with 16
                warps = max(1, min(32, bl * br // 256)) if cuda else 4
                tiles = -(-p.R // br)
                threads = 32 * warps
                regs = 7 * max(1, bl * br // threads) + 8  # ~7 live values per element
                per_sm = max(1, min(64 // warps, 65536 // (threads * regs)))
                # 8192-element tiles (32 warps): the next tile prefetched (H100, 8192 x
                # 8192 bf16: 2.40 / 2.65 TB/s layer / RMS norm against 2.26 / 2.42)
                pre = 1 if cuda and warps == 32 else 0
                for k in (1, 2) if cuda else (1,):  # 2: for autotuning
                    progs = max(1, min(tiles, 4096, k * per_sm * sms))
                    out.append(NormKnobs(1, bl, br, 1, progs, warps, pre))
                if pre:
                    out.append(NormKnobs(1, bl, br, 1, out[-2].PROGRAMS, warps, 0))
            else:
                out.append(NormKnobs(1, bl, br, 1, 1, warps))
                # for autotuning: fewer warps; twice the rows (SCALE / BIAS read half as
                # often from L2)
                if cuda and warps >= 8:
                    out.append(NormKnobs(1, bl, br, 1, 1, warps // 2))
                    if 2 * bl * br <= MAX_TILE and p.R > 2 * br * sms:
                        out.append(NormKnobs(1, bl, 2 * br, 1, 1, warps))
        bl = 4096 if cuda else 256
        if p.L > bl or not out:
            if a.backward:
                # 8192-wide tiles with 32 warps (8 elements a thread): the column kernel
                # took 164 registers with 4096 and 8 warps, one 16 KB tile per SM in flight
                bl = 2 * bl if cuda else bl
                tiles = max(1, -(-p.L // bl))
                split = max(1, min(256, tiles, _pow2(-(-4 * sms // max(p.R, 1)))))
                blocks = tiles * p.G
                groups = max(1, min(4096, p.R // p.G or 1, -(-2 * sms // blocks)))
                out.append(NormKnobs(2, bl, 1, split, groups, 32 if cuda else 4))
            else:
                # rows of 128K+ elements: the widest tile, one program per SM, the fewest
                # rows in flight (their tails stay in L2 for the backwards second loop)
                # (as measured for softmax: 8192-wide tiles, 8 warps for 65536-wide rows)
                # (16384-wide tiles spill: ptxas, sm_90)
                tiles = (
                    ((2 * bl, 16), (2 * bl, 8), (bl, 8))
                    if p.L >= 131072
                    else ((2 * bl, 8), (2 * bl, 16), (bl, 8))
                )
                for b, w in tiles if cuda else ((bl, 4),):
                    out.append(NormKnobs(2, b, 1, 1, 1, w))
                if cuda:  # two kernels, chunks filling the GPU (softmax's measured best
                    #          for 262144-wide rows; the cost model ranks it)
                    tiles = max(1, -(-p.L // bl))
                    split = max(1, min(256, tiles, _pow2(-(-16 * sms // max(p.R, 1)))))
                    out.append(NormKnobs(3, bl, 1, split, 1, 8))
        coop = _coop_knobs(a, target)
        if coop is not None:
            out.append(coop)
        out.sort(key=lambda kn: self._estimate(a, kn, target))
        return [EngineConfig.make(self, **dataclasses.asdict(kn)) for kn in out]

    @staticmethod
    def _estimate(a: Analysis, kn: NormKnobs, target: Target) -> float:
        p = a.problem
        full = p.R * p.L
        item = {n: d.data_type.itemsize for n, d in p.descs.items()}
        if not a.backward:
            big = [n for n in p.descs if n not in ("SCALE", "BIAS", "MEAN", "INV_VARIANCE")]
            moved = full * sum(item[n] for n in big)
            if kn.PATH == 2:  # the second read: from L2 for the rows still there
                reread = full * sum(item[n] for n in ("X", "R") if n in item)
                in_flight = min(p.R, _per_sm(kn) * target.num_sms) * p.L * item["X"]
                moved += reread * (1.0 - 0.85 * min(1.0, L2_BYTES / max(in_flight, 1)))
            if kn.PATH == 3:  # the second read from DRAM
                moved += full * sum(item[n] for n in ("X", "R") if n in item)
            programs = {1: -(-p.R // kn.BLOCK_ROWS), 2: p.R, 3: p.R * kn.SPLIT, 4: kn.PROGRAMS}[
                kn.PATH
            ]
            launches = 2 if kn.PATH in (3, 4) else 1
        else:
            moved = full * (item["DY"] + item["X"] + item["DX"])
            if kn.PATH == 1:
                moved += 2 * kn.PROGRAMS * p.L * 4 * 2
                programs = kn.PROGRAMS
            elif kn.PATH == 4:
                moved += 2 * kn.PROGRAMS // kn.SPLIT * p.L * 4 * 2
                programs = kn.PROGRAMS
            else:
                moved += full * (item["DY"] + item["X"]) + 2 * kn.PROGRAMS * p.G * p.L * 8
                programs = min(p.R * kn.SPLIT, -(-p.L // kn.BLOCK_L) * p.G * kn.PROGRAMS)
            launches = 2 if kn.PATH == 1 else 3
        if kn.PATH == 4:  # programs wait for each other at every row (LAG: a row late)
            moved *= COOP_COST[2 if kn.LAG == 2 else kn.PREFETCH]
        fill = max(min(1.0, programs / (1.0 * target.num_sms)), 1e-3)
        return moved / (target.bandwidth * fill) + 3e-6 * launches

    def estimate_seconds(self, graph, config, target) -> float:
        return self._estimate(_analyze(graph), NormKnobs(**config.knob_dict), target)

    def family(self, config: EngineConfig) -> str:
        return f"{self.name}/path{config.knob_dict.get('PATH', 1)}"

    def workspace_size(self, graph, config, target) -> int:
        a = _analyze(graph)
        kn, p = NormKnobs(**config.knob_dict), a.problem
        if kn.PATH == 4:
            return KC.workspace_floats(p, kn, a.backward) * 4
        if not a.backward:
            return p.R * kn.SPLIT * 3 * 4 if kn.PATH == 3 else 0
        if kn.PATH == 1:
            return 2 * kn.PROGRAMS * p.L * 4
        return (p.R * kn.SPLIT * 2 + 2 * kn.PROGRAMS * p.G * p.L) * 4

    def build(self, graph, config, target) -> Executable:
        from .executable import NormExecutable

        return NormExecutable(
            graph,
            _analyze(graph),
            NormKnobs(**config.knob_dict),
            target,
            self.workspace_size(graph, config, target),
        )
