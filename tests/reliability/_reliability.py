"""The one-line reproduction every reliability test prints for a failing case."""
from __future__ import annotations

import os

import opendnn

SRC = os.path.dirname(os.path.dirname(opendnn.__file__))   # the opendnn under test


def repro(request, **params) -> str:
    """The command that runs this test again as it ran, with the case's parameters."""
    budget = request.config.getoption("--reliability-budget")
    extra = " ".join(f"{k}={v}" for k, v in params.items())
    return (f"repro: PYTHONPATH={SRC} python -m pytest '{request.node.nodeid}' "
            f"--reliability-budget={budget} [{extra}]")
