"""A graph's ahead-of-time options (cudnn-frontend's ``pygraph`` arguments): the kernel
cache and device properties it is built with, ``sm_version`` / ``sm_count``, and the
dynamic / override shape switches (``AotOptions``, checked when the graph is made and
against the GPU its plans are for).

A **kernel cache** (``frontend.create_kernel_cache()``, ``pygraph(kernel_cache=...)``)
records, per graph structure and GPU, the plan a graph built with it selected; a later
graph of the same structure built with the same cache takes that plan first, without
running the heuristics' ranking or a find again. ``serialize()`` / ``deserialize(json)``
carry the records between processes. cuDNN's cache also shares compiled kernels between
graphs that differ only in shapes (dynamic shapes); opendnn's kernels are specialized on
shapes and already shared process-wide by their source, so the records are plan choices
only.

**Device properties** (``frontend.create_device_properties(device_id)`` or ``(json)``,
``pygraph(device_property=...)``) are the GPU a graph's plans are chosen for: its name,
compute capability, SM count and the rates the cost models use (``engines.base.Target``).
A graph given device properties ranks and builds its plans for that GPU with no device
present (cuDNN's deviceless ahead-of-time build); it runs where a device of that kind is.
"""

from __future__ import annotations

import dataclasses
import json

from ..engines.base import Target
from ..errors import BadParamError, GraphNotSupportedError, Status

KERNEL_CACHE_FORMAT = "opendnn-kernel-cache-1"


class kernel_cache:  # noqa: N801 -- cudnn-frontend's class name
    """Plan choices by graph structure and GPU (see the module docstring)."""

    def __init__(self):
        self._entries: dict[str, str] = {}  # "graph key@target name" -> plan name

    @staticmethod
    def _key(graph_key: str, target_name: str) -> str:
        return f"{graph_key}@{target_name}"

    def lookup(self, graph_key: str, target_name: str) -> str | None:
        """The plan name recorded for a graph structure on a GPU, or None."""
        return self._entries.get(self._key(graph_key, target_name))

    def record(self, graph_key: str, target_name: str, plan_name: str) -> None:
        self._entries[self._key(graph_key, target_name)] = plan_name

    def __len__(self) -> int:
        return len(self._entries)

    def serialize(self) -> str:
        """The records as JSON text."""
        return json.dumps(
            {"format": KERNEL_CACHE_FORMAT, "entries": dict(sorted(self._entries.items()))}
        )

    def deserialize(self, text) -> None:
        """Replace the records with those of ``serialize``'s JSON text; a malformed text
        is SERIALIZATION_VERSION_MISMATCH and leaves the records as they were."""
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("format") != KERNEL_CACHE_FORMAT:
                raise ValueError(f"not a {KERNEL_CACHE_FORMAT} document")
            entries = doc["entries"]
            if not isinstance(entries, dict) or not all(
                isinstance(k, str) and "@" in k and isinstance(v, str) for k, v in entries.items()
            ):
                raise ValueError("'entries' is not an object of 'key@gpu': plan name")
        except (TypeError, ValueError, KeyError) as e:
            raise BadParamError(
                f"malformed kernel cache: {e}",
                op="kernel_cache.deserialize",
                status=Status.SERIALIZATION_VERSION_MISMATCH,
            ) from None
        self._entries = dict(entries)


def create_kernel_cache() -> kernel_cache:
    """An empty kernel cache (``pygraph(kernel_cache=...)``)."""
    return kernel_cache()


class device_properties:  # noqa: N801 -- cudnn-frontend's class name
    """A GPU's properties as the heuristics see them (``target``: an ``engines.base.Target``)."""

    __slots__ = ("target",)

    def __init__(self, target: Target):
        self.target = target

    def serialize(self) -> str:
        """The properties as JSON text (``create_device_properties`` reads it back)."""
        d = dataclasses.asdict(self.target)
        d["capability"] = list(d["capability"])
        return json.dumps(d, sort_keys=True)

    def __repr__(self) -> str:
        t = self.target
        return (
            f"device_properties({t.name!r}, sm_{t.capability[0]}{t.capability[1]}, {t.num_sms} SMs)"
        )


def create_device_properties(source) -> device_properties:
    """The properties of CUDA device ``source`` (an int; a negative one: empty properties,
    the CPU interpreter's) or those a ``serialize`` JSON text holds."""
    op = "create_device_properties"
    if isinstance(source, int) and not isinstance(source, bool):
        if source < 0:
            return device_properties(Target())
        import torch

        from ..handle import target_for

        if not torch.cuda.is_available() or source >= torch.cuda.device_count():
            raise BadParamError(
                f"no CUDA device {source} (devices: "
                f"{torch.cuda.device_count() if torch.cuda.is_available() else 0})",
                op=op,
                status=Status.BAD_PARAM_OUT_OF_BOUND,
            )
        return device_properties(target_for(f"cuda:{source}"))
    if not isinstance(source, str):
        raise BadParamError(
            f"takes a device id (int) or serialized properties (str), got {type(source).__name__}",
            op=op,
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    fields = {f.name for f in dataclasses.fields(Target)}
    try:
        d = json.loads(source)
        if not isinstance(d, dict) or set(d) != fields:
            raise ValueError(f"fields must be {sorted(fields)}")
        d["capability"] = tuple(int(c) for c in d["capability"])
        if len(d["capability"]) != 2 or d["device"] not in ("cpu", "cuda"):
            raise ValueError("capability is (major, minor) and device 'cpu' or 'cuda'")
        if not isinstance(d["num_sms"], int) or d["num_sms"] < 1:
            raise ValueError(f"num_sms {d['num_sms']!r} is not a positive integer")
        target = Target(**d)
    except (TypeError, ValueError, KeyError) as e:
        raise BadParamError(
            f"malformed device properties: {e}",
            op=op,
            status=Status.SERIALIZATION_VERSION_MISMATCH,
        ) from None
    return device_properties(target)


@dataclasses.dataclass(frozen=True)
class AotOptions:
    """A graph's checked ahead-of-time options (see ``checked``)."""

    sm_count: int | None = None
    sm_version: int | None = None
    kernel_cache: kernel_cache | None = None
    device_property: device_properties | None = None
    dynamic: bool = False

    @classmethod
    def checked(cls, op, sm_count, sm_version, cache, props, dynamic, override) -> AotOptions:
        """The options of a ``Graph`` (see its ``__init__``), each checked: integers,
        objects of this module, bools; ``override`` (other shapes at execute) is
        NOT_SUPPORTED."""
        for name, v, least in (("sm_count", sm_count, 1), ("sm_version", sm_version, 0)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < least):
                raise BadParamError(
                    f"{name} must be an integer >= {least} or None, got {v!r:.40}",
                    op=op,
                    status=Status.BAD_PARAM,
                )
        if cache is not None and not isinstance(cache, kernel_cache):
            raise BadParamError(
                "kernel_cache must come from cudnn.create_kernel_cache(), got "
                f"{type(cache).__name__}",
                op=op,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        if props is not None and not isinstance(props, device_properties):
            raise BadParamError(
                "device_property must come from cudnn.create_device_properties(), got "
                f"{type(props).__name__}",
                op=op,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        for name, v in (
            ("is_dynamic_shape_enabled", dynamic),
            ("is_override_shape_enabled", override),
        ):
            if not isinstance(v, bool):
                raise BadParamError(
                    f"{name} must be a bool, got {v!r:.40}", op=op, status=Status.BAD_PARAM
                )
        if override:
            raise GraphNotSupportedError(
                "is_override_shape_enabled (other shapes at execute) is not supported: plans "
                "are specialized on the graph's shapes",
                op=op,
                status=Status.NOT_SUPPORTED,
            )
        return cls(sm_count, sm_version, cache, props, dynamic)

    def check(self, target: Target, op: str) -> None:
        """``sm_version`` / ``sm_count`` against the GPU the plans are built for (a CPU
        target, the interpreter, takes any)."""
        if not target.is_cuda:
            return
        have = target.capability[0] * 10 + target.capability[1]
        if self.sm_version is not None and self.sm_version != have:
            raise GraphNotSupportedError(
                f"sm_version {self.sm_version}: plans are built for the GPU present or given "
                f"by device_property ({target.name}, sm_version {have}), not for another "
                "architecture",
                op=op,
                status=Status.NOT_SUPPORTED,
            )
        if self.sm_count is not None and self.sm_count < target.num_sms:
            raise GraphNotSupportedError(
                f"sm_count {self.sm_count}: kernels are not confined to fewer SMs than the "
                f"device's {target.num_sms}",
                op=op,
                status=Status.NOT_SUPPORTED,
            )
