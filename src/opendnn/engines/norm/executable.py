"""A built norm plan: its generated kernels, grids and argument templates (the engine
and the kernels' layout: ``engine.py``, ``_kernels.py``)."""

from __future__ import annotations

import torch

from ...ops import norm as N
from ...plan import role_error
from ...runtime.launch import LaunchList, kernel_from_source
from ..base import Executable
from ..fusion._codegen import zero_flags_source
from . import _bwd_kernels as KB
from . import _coop_kernels as KC
from . import _kernels as K
from . import _split_kernels as KS

GROUPED_FINISH_BLOCK = 1024  # group / instance norm: spatial positions per step


def finish_block(parts: int) -> int:
    """Columns per finishing program (layer / RMS norm): 32 for many partial rows (132-264:
    a [64 x 32] tile a step, L / 32 programs -- at 8192 x 8192 the kernel took 8.3 us with
    [32 x 64] tiles, 5% of the backward), wider for few (the one-read path's row groups)."""
    rows = min(KB.FINISH_PARTS, 1 << max(0, (parts - 1).bit_length()))
    return 32 if parts > 32 else max(64, min(1024, 2048 // rows))


class NormExecutable(Executable, LaunchList):
    def __init__(self, graph, a, kn, target, workspace: int):
        LaunchList.__init__(self)
        self.workspace_size = workspace
        self.eps_uid = a.uids.get("EPS")
        # an error names the node and tensor by position and role (plan.role_error): the
        # executable serves every graph of this key, whatever its names
        self.node = (graph.nodes.index(a.node), a.node.kind)
        p = a.problem
        self.tag = f"norm_{graph.key()[:12]}"
        self.graph, self.target, self.const = graph, target, {"num_warps": kn.num_warps}
        if kn.PATH == 4:
            words = KC.partial_floats(p, kn)
            self._add(
                zero_flags_source(f"{self.tag}_zero", 0, words),
                f"{self.tag}_zero",
                (-(-words // 1024),),
                [("ws", torch.float32)],
                4,
            )
        if a.backward:
            self._backward(a, kn)
        elif kn.PATH == 4:
            names, f = a.spec.names(), a.spec
            args = [("buf", a.uids[n]) for n in f.params()]
            self._add(
                KC.fwd_source(f"{self.tag}_coop", p, kn, f),
                f"{self.tag}_coop",
                (kn.PROGRAMS,),
                args[: len(names)] + [("ws", torch.float32)] + args[len(names) :],
            )
        elif kn.PATH == 3:
            names, f, ws = a.spec.names(), a.spec, ("ws", torch.float32)
            first = [n for n in ("X", "R", "XS") if n in names]
            self._add(
                KS.stats_source(f"{self.tag}_stats", p, kn, f),
                f"{self.tag}_stats",
                (p.R, kn.SPLIT),
                [("buf", a.uids[n]) for n in first] + [ws],
            )
            args = [("buf", a.uids[n]) for n in f.params()]
            self._add(
                KS.write_source(f"{self.tag}_write", p, kn, f),
                f"{self.tag}_write",
                (p.R, kn.SPLIT),
                args[: len(names)] + [ws] + args[len(names) :],
            )
        else:
            src = (K.fwd_rows_source if kn.PATH == 1 else K.fwd_loop_source)(
                self.tag, p, kn, a.spec
            )
            grid = (-(-p.R // kn.BLOCK_ROWS),) if kn.PATH == 1 else (p.R,)
            self._add(src, self.tag, grid, [("buf", a.uids[n]) for n in a.spec.params()])

    def _add(self, src: str, name: str, grid, args, warps: int | None = None) -> None:
        if any(g == 0 for g in grid):
            return
        const = self.const if warps is None else {"num_warps": warps}
        self.add_launch(
            kernel_from_source(src, name), grid, const, args, self.graph, self.target.is_cuda
        )

    def _backward(self, a, kn) -> None:
        p, rms, tag = a.problem, a.node.NORM == N.RMS, self.tag
        names = KB._names(rms)
        bufs = {n: ("buf", a.uids[n]) for n in names}
        ws = ("ws", torch.float32)
        if kn.PATH == 1:
            src = KB.rows_source(f"{tag}_rows", p, kn, rms, kn.PROGRAMS)
            self._add(src, f"{tag}_rows", (kn.PROGRAMS,), [bufs[n] for n in names] + [ws])
            parts, base = kn.PROGRAMS, 0
        elif kn.PATH == 4:
            self._add(
                KC.bwd_source(f"{tag}_coop", p, kn, rms),
                f"{tag}_coop",
                (kn.PROGRAMS,),
                [bufs[n] for n in names] + [ws],
            )
            parts, base = kn.PROGRAMS // kn.SPLIT, KC.params_offset(p, kn)
        else:
            stats = [n for n in names if n != "DX"]
            self._add(
                KB.stats_source(f"{tag}_stats", p, kn, rms),
                f"{tag}_stats",
                (p.R, kn.SPLIT),
                [bufs[n] for n in stats] + [ws],
            )
            self._add(
                KB.cols_source(f"{tag}_cols", p, kn, rms, kn.PROGRAMS),
                f"{tag}_cols",
                (-(-p.L // kn.BLOCK_L), p.G, kn.PROGRAMS),
                [bufs[n] for n in names] + [ws],
            )
            parts, base = kn.PROGRAMS, p.R * kn.SPLIT * 2
        outs = [n for n in ("DSCALE", "DBIAS") if n in a.uids]
        grouped = not (p.G == 1 and p.S == 1)
        block = (
            (GROUPED_FINISH_BLOCK if grouped else finish_block(parts))
            if self.target.is_cuda
            else 64
        )
        grid = (p.G * (p.L // p.S),) if grouped else (-(-p.L // block),)
        src = KB.finish_source(f"{tag}_finish", p, block, parts, base, outs)
        self._add(
            src,
            f"{tag}_finish",
            grid,
            [("buf", a.uids[n]) for n in outs] + [ws],
            4 if self.target.is_cuda else 4,
        )

    def run(self, buffers, workspace, stream=None):
        if self.eps_uid is not None:
            why = N.check_epsilon(buffers[self.eps_uid])
            if why:
                raise role_error(why, self.node[0], "EPSILON", self.node[1])
        self.run_launches(buffers, workspace, stream)
