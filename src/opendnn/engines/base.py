"""What every engine is: identity, notes, knob space, support check, cost, build.

An engine answers ``check_support(graph, target)`` without compiling anything, always
with a reason when it declines. ``configs`` lists its knob settings for a graph, best
first by its own cost model; ``build`` turns one config into an ``Executable`` (compiled
kernels and launch grids). Executing does no work that could be done at build time.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from ..enums import BehaviorNote, KnobType, NumericalNote
from .calibration import measured_scale


@dataclasses.dataclass(frozen=True)
class Support:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


SUPPORTED = Support(True)


def decline(reason: str) -> Support:
    return Support(False, reason)


def operands_in_memory(graph, allowed: tuple = (), nodes=None) -> Support:
    """Declines naming the first operand of ``nodes`` (default: every node) passed by value
    (a host scalar, not a tile in memory) whose role is not in ``allowed`` (e.g. EPSILON);
    else SUPPORTED."""
    for n in graph.nodes if nodes is None else nodes:
        for role, uids in n.inputs.items():
            for u in uids if isinstance(uids, (list, tuple)) else (uids,):
                d = graph.tensors[u]
                if d.is_pass_by_value and role not in allowed:
                    return decline(
                        f"{n.label()} {role} '{d.label()}' is passed by value (a "
                        "host scalar): this engine loads its operands from memory"
                    )
    return SUPPORTED


@dataclasses.dataclass(frozen=True)
class Knob:
    """One tunable: its name, the values it may take, its default. cudnn-frontend reads a
    knob as cuDNN describes one (``type``, ``min_value``, ``max_value``, ``stride``):
    opendnn's knobs are named (type NOT_SET) with explicit value lists, of which the
    numeric range shows; ``kind`` marks the one cuDNN kind opendnn has, KERNEL_CFG
    (``graph.lifecycle``: a config index)."""

    name: str
    values: tuple
    default: Any
    kind: KnobType = KnobType.NOT_SET

    @property
    def type(self) -> KnobType:
        return self.kind

    def _numbers(self) -> list:
        return [v for v in self.values if isinstance(v, int) and not isinstance(v, bool)]

    @property
    def min_value(self):
        nums = self._numbers()
        return min(nums) if nums else None

    @property
    def max_value(self):
        nums = self._numbers()
        return max(nums) if nums else None

    @property
    def stride(self):
        """The step of an evenly spaced integer value list (1 for KERNEL_CFG), else None."""
        nums = sorted(set(self._numbers()))
        if len(nums) < 2 or len(nums) != len(self.values):
            return 1 if len(nums) == 1 else None
        steps = {b - a for a, b in zip(nums, nums[1:])}
        return steps.pop() if len(steps) == 1 else None


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """An engine plus knob values: frozen, hashable, serializable."""

    engine_id: int
    engine_name: str
    knobs: tuple = ()  # sorted (name, value) pairs

    @property
    def knob_dict(self) -> dict:
        return dict(self.knobs)

    def label(self) -> str:
        return self._label

    @functools.cached_property
    def _label(self) -> str:  # plans are named, sorted and matched by it: built once
        if not self.knobs:
            return f"{self.engine_name}#{self.engine_id}"
        inner = ",".join(f"{k}={v}" for k, v in self.knobs)
        return f"{self.engine_name}#{self.engine_id}{{{inner}}}"

    def to_json(self) -> dict:
        return {
            "engine_id": self.engine_id,
            "engine_name": self.engine_name,
            "knobs": [[k, v] for k, v in self.knobs],
        }

    @classmethod
    def from_json(cls, d: dict) -> "EngineConfig":
        return cls(d["engine_id"], d["engine_name"], tuple((k, v) for k, v in d["knobs"]))

    @classmethod
    def make(cls, engine, **knobs) -> "EngineConfig":
        return cls(engine.id, engine.name, tuple(sorted(knobs.items())))


@dataclasses.dataclass(frozen=True)
class Target:
    """Where a plan is built for: 'cpu' (interpreter) or 'cuda' with its properties."""

    device: str = "cpu"
    name: str = "cpu"
    capability: tuple = (0, 0)
    num_sms: int = 1
    peak_flops_fp16: float = 1e12  # dense tensor-core rate, FLOP/s
    peak_flops_fp32: float = 1e11
    bandwidth: float = 1e10  # bytes/s, read + write

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def is_hopper(self) -> bool:
        return self.capability[0] == 9


class Executable:
    """A built config: ``run(buffers, workspace, stream)``; ``workspace_size`` bytes."""

    workspace_size: int = 0

    def run(self, buffers: dict, workspace, stream=None) -> None:
        raise NotImplementedError


class Engine:
    """Base engine. Subclasses set ``id``, ``name`` and implement the methods."""

    id: int = -1
    name: str = "engine"
    behavior_notes: frozenset = frozenset()
    # one pass that reads every input of an element before it writes that element's
    # outputs, on a pointwise-only graph: several outputs may then lie exactly over
    # inputs (buffers.check_no_aliasing)
    single_pass_pointwise: bool = False

    def numerical_notes(self, graph, config: EngineConfig) -> frozenset:
        return frozenset()

    def check_support(self, graph, target: Target) -> Support:
        raise NotImplementedError

    def knob_space(self, graph=None) -> list[Knob]:
        return []

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        """Configs for this graph, best first (default: the default knobs)."""
        return [EngineConfig.make(self, **{k.name: k.default for k in self.knob_space(graph)})]

    def complete_knobs(self, graph, knobs: dict) -> dict:
        """``knobs`` with every knob left out set to its default (create_execution_plan)."""
        return {**{k.name: k.default for k in self.knob_space(graph)}, **knobs}

    def check_config(self, graph, config: EngineConfig, target: Target) -> Support:
        """Whether a specific config (e.g. user-chosen knobs) applies."""
        space = {k.name: k for k in self.knob_space(graph)}
        for name, value in config.knobs:
            if name not in space:
                return decline(f"unknown knob {name!r}")
            if value not in space[name].values:
                return decline(f"knob {name}={value!r} not in {list(space[name].values)}")
        return SUPPORTED

    def estimate_seconds(self, graph, config: EngineConfig, target: Target) -> float:
        return float("inf")

    def calibration_key(self, graph, config: EngineConfig) -> str:
        """The key of ``config`` on ``graph`` in ``calibration.MEASURED_SCALES``: its code
        path (``family``), which an engine may qualify by what of the problem its model
        leaves out (a convolution's NCHW image: ``...:nchw``)."""
        return self.family(config)

    def measured_scale(self, config: EngineConfig, graph=None) -> float:
        """How much slower than ``estimate_seconds`` this engine's ``config`` runs on a GPU,
        fitted to measured find timings (``calibration``; 1: not calibrated)."""
        key = self.family(config) if graph is None else self.calibration_key(graph, config)
        return measured_scale(key, self.name)

    def ranked_seconds(self, graph, config: EngineConfig, target: Target) -> float:
        """The time the heuristics rank by: the cost model times ``measured_scale`` on a
        GPU (the interpreter's ranking is the plain model)."""
        t = self.estimate_seconds(graph, config, target)
        return t * self.measured_scale(config, graph) if target.is_cuda else t

    def family(self, config: EngineConfig) -> str:
        """Which of the engine's code paths ``config`` takes (benchmark mode times the
        best config of every path, so one path's cost model cannot hide another)."""
        return self.name

    def workspace_size(self, graph, config: EngineConfig, target: Target) -> int:
        return 0

    def build(self, graph, config: EngineConfig, target: Target) -> Executable:
        raise NotImplementedError


def notes_json(notes) -> list[str]:
    return sorted(n.name for n in notes)


__all__ = [
    "Support",
    "SUPPORTED",
    "decline",
    "Knob",
    "EngineConfig",
    "Target",
    "Executable",
    "Engine",
    "NumericalNote",
    "BehaviorNote",
    "notes_json",
    "json",
]


def one_read_grid(
    label: str, split: int, chunks: int, max_split: int, programs: int, num_sms: int
) -> Support:
    """The grid rules of a one-read cooperative path (softmax PASSES=4, norm PATH=4): a row
    is SPLIT = ``chunks`` programs (at most ``max_split``) that wait for each other, so the
    persistent grid is a multiple of SPLIT of at most two programs per SM."""
    if split != chunks or split > max_split:
        return decline(
            f"{label}: SPLIT must be the row's chunks ({chunks}) and at most {max_split}"
        )
    if programs % split or not split <= programs <= 2 * max(num_sms, 1):
        return decline(
            f"{label}: PROGRAMS must be a multiple of SPLIT={split} and at most "
            f"{2 * num_sms} (two programs per SM, all resident at once)"
        )
    return SUPPORTED
