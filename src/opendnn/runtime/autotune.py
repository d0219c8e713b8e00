"""Persistent autotune results: plan names ranked by measured time, per problem.

The cache is one JSON file per user (``<cache>/autotune-v1.json``), keyed by graph key,
device name, opendnn version and Triton version, so a result never crosses a library or
device change. A corrupt or foreign file is ignored with a warning, never a crash, and
is rewritten on the next store.
"""
from __future__ import annotations

import json
import os
import threading
import warnings

import triton

from .. import __version__
from .launch import cache_dir

_lock = threading.Lock()
_memory: dict | None = None
FORMAT = "opendnn-autotune-v1"


def path() -> str:
    return os.path.join(cache_dir(), "autotune-v1.json")


def problem_key(graph_key: str, device_name: str) -> str:
    return f"{graph_key}|{device_name}|opendnn-{__version__}|triton-{triton.__version__}"


def _load() -> dict:
    global _memory
    if _memory is not None:
        return _memory
    p = path()
    data: dict = {}
    if os.path.exists(p):
        try:
            with open(p) as f:
                raw = json.load(f)
            if not isinstance(raw, dict) or raw.get("format") != FORMAT or \
                    not isinstance(raw.get("entries"), dict):
                raise ValueError("not an opendnn autotune cache")
            data = raw["entries"]
        except (OSError, ValueError) as e:
            warnings.warn(f"opendnn: ignoring unreadable autotune cache {p}: {e}", RuntimeWarning,
                          stacklevel=3)
            data = {}
    _memory = data
    return data


def lookup(graph_key: str, device_name: str) -> dict | None:
    """{'order': [plan names fastest first], 'times_ms': [...]} or None."""
    with _lock:
        hit = _load().get(problem_key(graph_key, device_name))
    if hit is None:
        return None
    if not (isinstance(hit, dict) and isinstance(hit.get("order"), list)
            and all(isinstance(n, str) for n in hit["order"])):
        warnings.warn(f"opendnn: ignoring a malformed autotune cache entry in {path()}",
                      RuntimeWarning, stacklevel=2)
        return None
    return hit


def store(graph_key: str, device_name: str, order: list[str], times_ms: list[float]) -> None:
    with _lock:
        data = _load()
        data[problem_key(graph_key, device_name)] = {"order": list(order),
                                                     "times_ms": [round(t, 6) for t in times_ms]}
        p = path()
        tmp = f"{p}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"format": FORMAT, "entries": data}, f)
        os.replace(tmp, p)


def forget_memory() -> None:
    """Drop the in-process copy so the next lookup rereads the file (tests, restarts)."""
    global _memory
    with _lock:
        _memory = None
