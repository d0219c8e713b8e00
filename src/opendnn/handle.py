"""Handle: the device and stream work runs on. Cheap to create; one per thread is safe."""

from __future__ import annotations

import functools

import torch

from .engines.base import Target
from .errors import BadParamError, Status

# Measured on our H100 (shared/bench anchors): copy 3.0 TB/s, bf16 dense 711 TFLOP/s.
_KNOWN = {
    "H100": dict(peak_flops_fp16=7.1e14, peak_flops_fp32=5.0e13, bandwidth=3.0e12),
    "H200": dict(peak_flops_fp16=7.9e14, peak_flops_fp32=5.0e13, bandwidth=4.3e12),
}


class Handle:
    """cuDNN handle: ``device`` ('cpu' or 'cuda[:i]') and ``stream`` (None = current)."""

    def __init__(self, device=None, stream=None):
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise BadParamError(
                "CUDA device requested but none is available",
                op="create_handle",
                status=Status.NOT_INITIALIZED,
            )
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.stream = stream

    def set_stream(self, stream) -> None:
        self.stream = stream

    def get_stream(self):
        return self.stream

    def cuda_stream(self) -> int | None:
        """Raw stream handle for launches (None when the handle runs on the CPU)."""
        if self.device.type != "cuda":
            return None
        s = self.stream
        if s is None:
            return torch.cuda.current_stream(self.device).cuda_stream
        return s.cuda_stream if hasattr(s, "cuda_stream") else int(s)

    @property
    def target(self) -> Target:
        return target_for(str(self.device))


@functools.lru_cache(maxsize=None)
def target_for(device: str) -> Target:
    dev = torch.device(device)
    if dev.type != "cuda":
        return Target()
    props = torch.cuda.get_device_properties(dev)
    rates = next((v for k, v in _KNOWN.items() if k in props.name), None)
    if rates is None:  # rough: 1 GHz-ish per SM tensor-core rate, HBM-class bandwidth
        rates = dict(
            peak_flops_fp16=props.multi_processor_count * 2.0e12,
            peak_flops_fp32=props.multi_processor_count * 1.5e11,
            bandwidth=1.5e12,
        )
    return Target(
        "cuda", props.name, (props.major, props.minor), props.multi_processor_count, **rates
    )


_default: dict = {}


def default_handle(device=None) -> Handle:
    key = str(device)
    if key not in _default:
        _default[key] = Handle(device)
    return _default[key]
