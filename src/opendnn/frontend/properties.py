"""cudnn-frontend's property objects: ``knob``, and the kernel cache and device
properties a graph is built with (defined with the graph's ahead-of-time options in
``graph/aot.py``).

``knob(knob_type, max_value, min_value, stride)`` is cuDNN's description of an engine
knob's range. opendnn's engines name their knobs by string with explicit value lists
(``pygraph.get_knobs_for_engine``, which reads them as cuDNN ranges); a ``knob`` object
is what code written for cudnn-frontend builds and reads.
"""

from __future__ import annotations

import json

from ..enums import KnobType
from ..errors import BadParamError, Status
from ..graph.aot import (  # noqa: F401 -- cudnn-frontend's names
    create_device_properties,
    create_kernel_cache,
    device_properties,
    kernel_cache,
)


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
