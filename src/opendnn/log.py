"""``OPENDNN_LOG=info`` logs every engine decision; ``OPENDNN_LOG=dispatch`` also logs
every engine that declined and why. Messages go to stderr through ``logging``."""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger("opendnn")


def _level() -> int:
    v = os.environ.get("OPENDNN_LOG", "").strip().lower()
    return {"info": 1, "dispatch": 2, "debug": 2}.get(v, 0)


def _ensure_handler():
    if not logger.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("opendnn %(levelname)s: %(message)s"))
        logger.addHandler(h)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False


def info(msg: str) -> None:
    if _level() >= 1:
        _ensure_handler()
        logger.info(msg)


def info_enabled() -> bool:
    """Whether info messages are logged: skip formatting costly ones (plan lists, graph
    descriptions) on paths that run for every fresh graph."""
    return _level() >= 1


def dispatch_enabled() -> bool:
    """Whether dispatch messages are logged (level 2): skip building costly ones if not."""
    return _level() >= 2


def dispatch(msg: str) -> None:
    if _level() >= 2:
        _ensure_handler()
        logger.debug(msg)
