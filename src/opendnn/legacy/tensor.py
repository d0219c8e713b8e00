"""Tensor and filter descriptors (cudnnTensorDescriptor_t, cudnnFilterDescriptor_t)."""
from __future__ import annotations

from ..enums import DataType
from ..tensor import TensorDesc, as_data_type, nchw_strides, nhwc_strides
from .common import TensorFormat, check


class TensorDescriptor:
    """Mutable, as in C: create, then set; ``desc()`` gives the frozen TensorDesc."""

    def __init__(self):
        self.data_type = None
        self.dims: tuple = ()
        self.strides: tuple = ()

    def is_set(self) -> bool:
        return self.data_type is not None

    def desc(self, uid: int = 1, name: str = "") -> TensorDesc:
        check(self.is_set(), "descriptor was never set", "tensor descriptor", name or None)
        return TensorDesc(self.dims, self.strides, self.data_type, uid, name)


class FilterDescriptor(TensorDescriptor):
    """A filter is a tensor [K, C/groups, spatial...] with a format."""
    format = TensorFormat.NCHW


def create_tensor_descriptor() -> TensorDescriptor:
    return TensorDescriptor()


def destroy_tensor_descriptor(desc) -> None:
    desc.data_type = None


def _set(desc, op, data_type, dims, strides):
    dims = tuple(int(d) for d in dims)
    check(all(d > 0 for d in dims), f"dims {list(dims)} must be positive", op)
    check(len(strides) == len(dims), f"{len(strides)} strides for {len(dims)} dims", op)
    check(all(s > 0 for s in strides), f"strides {list(strides)} must be positive", op)
    desc.data_type = as_data_type(data_type)
    check(desc.data_type != DataType.NOT_SET, "data type must be set", op)
    desc.dims, desc.strides = dims, tuple(int(s) for s in strides)


def set_tensor_4d_descriptor(desc, format, data_type, n, c, h, w) -> None:
    dims = (n, c, h, w)
    strides = nhwc_strides(dims) if TensorFormat(format) == TensorFormat.NHWC else nchw_strides(dims)
    _set(desc, "set_tensor_4d_descriptor", data_type, dims, strides)


def set_tensor_4d_descriptor_ex(desc, data_type, n, c, h, w, n_stride, c_stride, h_stride,
                                w_stride) -> None:
    _set(desc, "set_tensor_4d_descriptor_ex", data_type, (n, c, h, w),
         (n_stride, c_stride, h_stride, w_stride))


def set_tensor_nd_descriptor(desc, data_type, nb_dims, dims, strides) -> None:
    check(3 <= nb_dims <= 8 and len(dims) == nb_dims, f"nb_dims {nb_dims} must be 3..8 and "
          f"match {len(dims)} dims", "set_tensor_nd_descriptor")
    _set(desc, "set_tensor_nd_descriptor", data_type, dims, strides)


def set_tensor_nd_descriptor_ex(desc, format, data_type, nb_dims, dims) -> None:
    strides = nhwc_strides(dims) if TensorFormat(format) == TensorFormat.NHWC else nchw_strides(dims)
    set_tensor_nd_descriptor(desc, data_type, nb_dims, dims, strides)


def get_tensor_4d_descriptor(desc) -> tuple:
    """(data_type, n, c, h, w, n_stride, c_stride, h_stride, w_stride)."""
    check(len(desc.dims) == 4, "not a 4-D descriptor", "get_tensor_4d_descriptor")
    return (desc.data_type,) + desc.dims + desc.strides


def get_tensor_nd_descriptor(desc) -> tuple:
    """(data_type, nb_dims, dims, strides)."""
    return desc.data_type, len(desc.dims), list(desc.dims), list(desc.strides)


def get_tensor_size_in_bytes(desc) -> int:
    return desc.desc().size_in_bytes


def create_filter_descriptor() -> FilterDescriptor:
    return FilterDescriptor()


def destroy_filter_descriptor(desc) -> None:
    desc.data_type = None


def set_filter_4d_descriptor(desc, data_type, format, k, c, h, w) -> None:
    dims = (k, c, h, w)
    desc.format = TensorFormat(format)
    strides = nhwc_strides(dims) if desc.format == TensorFormat.NHWC else nchw_strides(dims)
    _set(desc, "set_filter_4d_descriptor", data_type, dims, strides)


def set_filter_nd_descriptor(desc, data_type, format, nb_dims, dims) -> None:
    check(3 <= nb_dims <= 5 and len(dims) == nb_dims, f"nb_dims {nb_dims} must be 3..5 and "
          f"match {len(dims)} dims", "set_filter_nd_descriptor")
    desc.format = TensorFormat(format)
    strides = nhwc_strides(dims) if desc.format == TensorFormat.NHWC else nchw_strides(dims)
    _set(desc, "set_filter_nd_descriptor", data_type, dims, strides)


def get_filter_4d_descriptor(desc) -> tuple:
    """(data_type, format, k, c, h, w)."""
    check(len(desc.dims) == 4, "not a 4-D filter", "get_filter_4d_descriptor")
    return (desc.data_type, desc.format) + desc.dims


def get_filter_nd_descriptor(desc) -> tuple:
    return desc.data_type, desc.format, len(desc.dims), list(desc.dims)
