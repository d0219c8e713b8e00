"""cudnn-frontend's property objects: ``knob``, the kernel cache and device properties.

``knob(knob_type, max_value, min_value, stride)`` is cuDNN's description of an engine
knob's range. opendnn's engines name their knobs by string with explicit value lists
(``pygraph.get_knobs_for_engine``); a ``knob`` object is what code written for
cudnn-frontend builds and reads.

A **kernel cache** (``create_kernel_cache()``, ``pygraph(kernel_cache=...)``) records,
per graph structure and GPU, the plan a graph built with it selected; a later graph of
the same structure built with the same cache takes that plan first, without running the
heuristics' ranking or a find again. ``serialize()`` / ``deserialize(json)`` carry the
records between processes. cuDNN's cache also shares compiled kernels between graphs
that differ only in shapes (dynamic shapes); opendnn's kernels are specialized on shapes
and already shared process-wide by their source, so the records are plan choices only.

**Device properties** (``create_device_properties(device_id)`` or ``(json)``,
``pygraph(device_property=...)``) are the GPU a graph's plans are chosen for: its name,
compute capability, SM count and the rates the cost models use (``engines.base.Target``).
A graph given device properties ranks and builds its plans for that GPU with no device
present (cuDNN's deviceless ahead-of-time build); it runs where a device of that kind is.
"""

from __future__ import annotations

import dataclasses
import json

from ..engines.base import Target
from ..enums import KnobType
from ..errors import BadParamError, Status

KERNEL_CACHE_FORMAT = "opendnn-kernel-cache-1"


class knob:  # noqa: N801 -- cudnn-frontend's class name
    """An engine knob's range as cuDNN describes it (read-only attributes)."""

    __slots__ = ("_type", "_max", "_min", "_stride")

    def __init__(self, knob_type=KnobType.NOT_SET, max_value=None, min_value=None, stride=None):
        op = "knob"
        if not isinstance(knob_type, KnobType):
            try:
                knob_type = KnobType(knob_type)
            except ValueError:
                raise BadParamError(
                    f"knob_type {knob_type!r:.40} is not a cudnn.knob_type",
                    op=op,
                    status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
                ) from None
        for name, v in (("max_value", max_value), ("min_value", min_value), ("stride", stride)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise BadParamError(
                    f"{name} must be an integer or None, got {v!r:.40}",
                    op=op,
                    status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
                )
        self._type, self._max, self._min, self._stride = knob_type, max_value, min_value, stride

    @property
    def type(self) -> KnobType:
        return self._type

    @property
    def max_value(self):
        return self._max

    @property
    def min_value(self):
        return self._min

    @property
    def stride(self):
        return self._stride

    def __repr__(self) -> str:
        return json.dumps(
            {
                "knob_type": self._type.name,
                "max_value": self._max,
                "min_value": self._min,
                "stride": self._stride,
            }
        )


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
