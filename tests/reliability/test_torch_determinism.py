"""PyTorch's determinism switches reach the PyTorch layer's plan choice.

``torch.use_deterministic_algorithms(True)`` and ``torch.backends.cudnn.deterministic``
act as ``opendnn.backends.deterministic``: the kept graph of a problem deselects plans
with the NONDETERMINISTIC note (split-K convolution backward, the attention backward
adding dQ with atomics), and a graph is kept per setting, so switching takes effect at
the next call. On the CPU the convolution backward's candidates include the split-K
plans; the attention's nondeterministic backward is listed for Hopper only, so its
candidates are asked of the kept graph for a Hopper target (nothing is compiled).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import opendnn.torch as odnn
from opendnn import backends
from opendnn.engines.base import Target
from opendnn.enums import HeurMode, NumericalNote
from opendnn.graph import lifecycle
from opendnn.torch import _graphs

ND = NumericalNote.NONDETERMINISTIC
HOPPER = Target(
    "cuda",
    "NVIDIA H100 80GB HBM3",
    (9, 0),
    132,
    peak_flops_fp16=9.9e14,
    peak_flops_fp32=6.7e13,
    bandwidth=3.35e12,
)


def _repro(name: str) -> str:
    return f"[repro] pytest tests/reliability/test_torch_determinism.py -k {name}"


@contextlib.contextmanager
def _switch(name: str):
    """One of PyTorch's determinism switches on (None: none), restored afterwards."""
    algorithms = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn = torch.backends.cudnn.deterministic
    try:
        if name == "use_deterministic_algorithms":
            torch.use_deterministic_algorithms(True)
        elif name == "use_deterministic_algorithms_warn_only":
            torch.use_deterministic_algorithms(True, warn_only=True)
        elif name == "cudnn.deterministic":
            torch.backends.cudnn.deterministic = True
        yield
    finally:
        torch.use_deterministic_algorithms(algorithms, warn_only=warn_only)
        torch.backends.cudnn.deterministic = cudnn


@pytest.fixture(autouse=True)
def _fresh_graphs():
    _graphs.clear()
    yield
    _graphs.clear()


def _kept(op: str) -> list:
    """(determinism part of the key, graph) of every kept graph of operation ``op``."""
    return [(full[1], b.graph) for full, b in _graphs._cache.items() if full[0][0] == op]


def _notes(g) -> list:
    return [g.get_numerical_notes_for_plan_at_index(i) for i in range(g.get_execution_plan_count())]


def _conv_backward():
    x = torch.randn(2, 8, 10, 10, requires_grad=True)
    w = torch.randn(16, 8, 3, 3, requires_grad=True)
    odnn.functional.conv2d(x, w, padding=1).sum().backward()
    return x.grad, w.grad


SWITCHES = [
    "use_deterministic_algorithms",
    "use_deterministic_algorithms_warn_only",
    "cudnn.deterministic",
]


@pytest.mark.parametrize("switch", SWITCHES)
def test_conv_backward_candidates_exclude_split_k(switch):
    with _switch(switch):
        dx, dw = _conv_backward()
    assert dx is not None and dw is not None
    for op in ("opendnn.conv_dgrad", "opendnn.conv_wgrad"):
        ((_, g),) = _kept(op)
        notes = _notes(g)
        assert notes and not any(ND in n for n in notes), (
            f"{_repro(switch)}: {op} under {switch} keeps {notes}"
        )
        assert ND not in g.selected_plan().numerical_notes()
    # switched off, the next call takes a graph of its own, with the split-K plans back
    _conv_backward()
    for op in ("opendnn.conv_dgrad", "opendnn.conv_wgrad"):
        kept = _kept(op)
        assert len(kept) == 2, f"{_repro(switch)}: one kept graph per setting, got {len(kept)}"
        g = next(g for det, g in kept if not det)
        assert any(ND in n for n in _notes(g)), (
            f"{_repro(switch)}: {op} lists no NONDETERMINISTIC plan here; the test sees nothing"
        )


def _attention_backward():
    q, k, v = (
        torch.randn(1, 2, 128, 64, dtype=torch.float16, requires_grad=True) for _ in range(3)
    )
    odnn.functional.scaled_dot_product_attention(q, k, v).float().sum().backward()


@pytest.mark.parametrize("switch", ["use_deterministic_algorithms", "cudnn.deterministic"])
def test_attention_backward_candidates_on_hopper_exclude_atomic_dq(switch, monkeypatch):
    with _switch(switch):
        _attention_backward()
    ((_, g_det),) = _kept("opendnn.sdpa_backward")
    monkeypatch.setattr(lifecycle, "target_for", lambda device: HOPPER)
    g_det.create_execution_plans([HeurMode.A, HeurMode.FALLBACK])
    notes = _notes(g_det)
    assert notes and not any(ND in n for n in notes), f"{_repro(switch)}: {notes}"
    # the same problem without the switch: the atomic-dQ backward is a Hopper candidate
    _graphs.clear()
    monkeypatch.undo()  # built on the CPU's own target
    _attention_backward()
    ((_, g),) = _kept("opendnn.sdpa_backward")
    monkeypatch.setattr(lifecycle, "target_for", lambda device: HOPPER)
    g.create_execution_plans([HeurMode.A, HeurMode.FALLBACK])
    assert any(ND in n for n in _notes(g)), (
        f"{_repro(switch)}: no NONDETERMINISTIC candidate on Hopper; the test sees nothing"
    )


def test_backends_deterministic_still_applies():
    backends.deterministic = True
    _conv_backward()
    for op in ("opendnn.conv_dgrad", "opendnn.conv_wgrad"):
        ((_, g),) = _kept(op)
        assert not any(ND in n for n in _notes(g)), _repro("backends_deterministic")
