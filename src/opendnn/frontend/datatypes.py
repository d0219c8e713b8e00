"""cudnn-frontend's ``cudnn.datatypes``: conversions between framework data types and
``cudnn.data_type``.

``_library_type`` turns a torch dtype into a graph data type (opendnn's own table,
``tensor._FROM_TORCH``). The CUTLASS conversions answer ``None`` unless the ``cutlass``
package (NVIDIA's CuTe DSL) imports, as in cudnn-frontend, whose CuTe-DSL kernels use
them; opendnn does not ship those kernels, and the conversions are here for code (and
tests) that import them.
"""

from __future__ import annotations

import torch

from ..enums import DataType
from ..tensor import _FROM_TORCH

cudnn_data_type = DataType
torch_available = True
cutlass_available: bool | None = None
_torch_to_cudnn_data_type_dict = dict(_FROM_TORCH)
_torch_to_cutlass_data_type_dict: dict = {}

# torch dtype name -> cutlass type name (both looked up by name: either may lack one)
_CUTLASS_NAMES = {
    "float16": "Float16",
    "bfloat16": "BFloat16",
    "float32": "Float32",
    "float64": "Float64",
    "int8": "Int8",
    "int32": "Int32",
    "int64": "Int64",
    "uint8": "Uint8",
    "bool": "Boolean",
    "float8_e4m3fn": "Float8E4M3FN",
    "float8_e5m2": "Float8E5M2",
    "float8_e8m0fnu": "Float8E8M0FNU",
    "float4_e2m1fn_x2": "Float4E2M1FN",
}


def is_torch_available() -> bool:
    return True


def is_cutlass_available() -> bool:
    """Whether ``cutlass`` (NVIDIA's CuTe DSL) imports; fills the CUTLASS mapping once."""
    global cutlass_available
    if cutlass_available is None:
        try:
            import cutlass
        except ImportError:
            cutlass_available = False
        else:
            cutlass_available = True
            for t, c in _CUTLASS_NAMES.items():
                if hasattr(torch, t) and hasattr(cutlass, c):
                    _torch_to_cutlass_data_type_dict[getattr(torch, t)] = getattr(cutlass, c)
    return cutlass_available


def _torch_to_cudnn_data_type(torch_data_type) -> DataType | None:
    """The graph data type of a torch dtype; None when it has none."""
    return _torch_to_cudnn_data_type_dict.get(torch_data_type)


def _cudnn_to_torch_data_type(data_type) -> torch.dtype | None:
    """The torch dtype of a graph data type; None when it has none."""
    for t, d in _torch_to_cudnn_data_type_dict.items():
        if d == data_type:
            return t
    return None


def _torch_to_cutlass_data_type(data_type, interpret_uint8_as_fp4x2: bool = False):
    """The CUTLASS type of a torch dtype (uint8 read as packed FP4 pairs on request);
    None without ``cutlass`` or without an equivalent."""
    if not is_cutlass_available():
        return None
    if interpret_uint8_as_fp4x2 and data_type == torch.uint8:
        import cutlass

        return getattr(cutlass, "Float4E2M1FN", None)
    return _torch_to_cutlass_data_type_dict.get(data_type)


def _convert_to_cutlass_data_type(data_type, interpret_uint8_as_fp4x2: bool = False):
    """A CUTLASS numeric type as is, a torch dtype converted (ValueError when it has no
    CUTLASS equivalent, or is None); None without ``cutlass``."""
    if not is_cutlass_available():
        return None
    import cutlass

    if isinstance(data_type, type) and issubclass(data_type, cutlass.Numeric):
        return data_type
    if data_type is None:
        raise ValueError("None is not a valid tensor data type.")
    out = _torch_to_cutlass_data_type(data_type, interpret_uint8_as_fp4x2)
    if out is None:
        raise ValueError(f"Unsupported tensor data type {data_type}.")
    return out


def _library_type(input_type) -> DataType:
    """A ``cudnn.data_type`` as is, a torch dtype converted; anything else raises."""
    if isinstance(input_type, DataType):
        return input_type
    out = _torch_to_cudnn_data_type(input_type)
    if out is None:
        raise TypeError(f"No available conversion from type {input_type} to a library type.")
    return out


def _is_torch_tensor(input_tensor) -> bool:
    return isinstance(input_tensor, torch.Tensor)
