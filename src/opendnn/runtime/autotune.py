"""Persistent autotune results: plan names ranked by measured time, per problem.

The cache is one JSON file per user (``<cache>/autotune-v1.json``), keyed by graph key,
device name, opendnn version and Triton version, so a result never crosses a library or
device change. It is a ``cache_files.JsonStore``: ``store`` merges its entry into the
file under an exclusive lock on ``autotune-v1.json.lock`` (re-read, merge, write a
temporary, fsync, rename), so processes tuning at once keep each other's results, and a
writer killed at any moment leaves the last complete file. ``lookup`` re-reads the file
when it changed, so it sees what other processes stored since.

A file that cannot be read (truncated, not JSON, the wrong shape, a directory or a FIFO
in its place) is ignored with a ``RuntimeWarning``, never a crash, and is rewritten on
the next store; a malformed entry (not a dict with a list of plan names under
``order``) is dropped with a warning and the others kept. When the file cannot be
written the results are kept for the process, with a warning.
"""

from __future__ import annotations

import os
import threading

import triton

from .. import __version__
from . import cache_files
from .launch import cache_dir, maintain_once

_lock = threading.Lock()
_stores: dict[str, cache_files.JsonStore] = {}
FORMAT = "opendnn-autotune-v1"


def path() -> str:
    return os.path.join(cache_dir(), "autotune-v1.json")


def valid_entry(entry) -> bool:
    """Whether ``entry`` is usable: a dict whose 'order' is a list of plan names."""
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("order"), list)
        and all(isinstance(n, str) for n in entry["order"])
    )


def _store() -> cache_files.JsonStore:
    p = path()
    with _lock:
        s = _stores.get(p)
        if s is None:
            s = _stores[p] = cache_files.JsonStore(p, FORMAT, valid_entry, "autotune cache")
        return s


def problem_key(graph_key: str, device_name: str) -> str:
    return f"{graph_key}|{device_name}|opendnn-{__version__}|triton-{triton.__version__}"


def lookup(graph_key: str, device_name: str) -> dict | None:
    """{'order': [plan names fastest first], 'times_ms': [...]} or None."""
    return _store().get(problem_key(graph_key, device_name))


def store(graph_key: str, device_name: str, order: list[str], times_ms: list[float]) -> None:
    """Record a problem's ranking, merged into the file with what other processes stored."""
    entry = {"order": [str(n) for n in order], "times_ms": [round(float(t), 6) for t in times_ms]}
    _store().update({problem_key(graph_key, device_name): entry})
    maintain_once()


def entries() -> dict:
    """Every valid entry of the file (``opendnn cache show``)."""
    return _store().entries()


def forget_memory() -> None:
    """Drop the in-process copy so the next lookup rereads the file (tests, restarts)."""
    with _lock:
        _stores.clear()
