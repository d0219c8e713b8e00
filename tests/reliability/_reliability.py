"""What the reliability tests share: the one-line reproduction every test prints for a
failing case, and the in-place graph the timing tests run."""

from __future__ import annotations

import os

import torch

import opendnn
import opendnn.frontend as cudnn

SRC = os.path.dirname(os.path.dirname(opendnn.__file__))  # the opendnn under test


def repro(request, **params) -> str:
    """The command that runs this test again as it ran, with the case's parameters."""
    budget = request.config.getoption("--reliability-budget")
    extra = " ".join(f"{k}={v}" for k, v in params.items())
    return (
        f"repro: PYTHONPATH={SRC} python -m pytest '{request.node.nodeid}' "
        f"--reliability-budget={budget} [{extra}]"
    )


def doubling_graph(x: torch.Tensor):
    """(graph, x tensor, y tensor) of y = x * 2 in float32, built with heuristics A and
    FALLBACK (so that benchmark mode has candidates to time); bind y to x's buffer to run
    it in place."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
    t = g.tensor_like(x)
    y = g.mul(a=t, b=g.tensor_like(torch.tensor(2.0)))
    y.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, t, y
