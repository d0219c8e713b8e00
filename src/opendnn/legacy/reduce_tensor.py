"""cudnnReduceTensor on the graph API's reduction and pointwise nodes.

    C = alpha * reduce(A) + beta * C

C's dims are each A's (kept) or 1 (reduced). Ops: ADD, MUL, MIN, MAX, AMAX (max |a|),
AVG, NORM1 (sum |a|), NORM2 (sqrt(sum a^2)), MUL_NO_ZEROS (the product of the non-zero
elements). With FLATTENED_INDICES (MIN, MAX, AMAX only) the call also writes, for each
element of C, the position of the first extreme element within its reduced region,
counted row-major over the reduced dims, as int32.

The indices are one more graph: m = reduce(A) (the unblended value), then
idx = min over the region of (hit ? flat : BIG), where hit = (|a| or a) == m -- or, when
m is NaN, a is NaN -- and flat = sum_k gen_index(a, k) * (row-major stride of reduced dim
k). The flat index is computed in float32, exact below 2^24 elements per region; larger
regions are NOT_SUPPORTED with that reason.
"""

from __future__ import annotations

import enum

import torch

from ..enums import DataType, HeurMode, ReductionMode
from ..graph.graph import Graph
from ..runtime.lru import LRU, legacy_cache_size
from .common import SCALAR, NanPropagation, Status, as_enum, as_float, as_int, buffer, check, prior

# cudnnReduceTensorOp_t has the graph's reduction modes, with the same numbers
ReduceTensorOp = ReductionMode


class ReduceTensorIndices(enum.IntEnum):
    NO_INDICES = 0
    FLATTENED_INDICES = 1


class IndicesType(enum.IntEnum):
    INDICES_32BIT = 0
    INDICES_64BIT = 1
    INDICES_16BIT = 2
    INDICES_8BIT = 3


_EXACT_INDEX_LIMIT = 1 << 24


class ReduceTensorDescriptor:
    def __init__(self):
        self.op = None
        self.comp_type = DataType.FLOAT
        self.nan_opt = NanPropagation.NOT_PROPAGATE_NAN
        self.indices = ReduceTensorIndices.NO_INDICES
        self.indices_type = IndicesType.INDICES_32BIT


def create_reduce_tensor_descriptor() -> ReduceTensorDescriptor:
    return ReduceTensorDescriptor()


def destroy_reduce_tensor_descriptor(desc) -> None:
    desc.op = None


def set_reduce_tensor_descriptor(
    desc,
    reduce_tensor_op,
    reduce_tensor_comp_type,
    reduce_tensor_nan_opt,
    reduce_tensor_indices,
    reduce_tensor_indices_type,
) -> None:
    op = "set_reduce_tensor_descriptor"
    rop = as_enum(op, "reduce_tensor_op", ReduceTensorOp, reduce_tensor_op)
    comp = as_enum(op, "reduce_tensor_comp_type", DataType, reduce_tensor_comp_type)
    check(
        comp in (DataType.FLOAT, DataType.DOUBLE, DataType.HALF, DataType.BFLOAT16),
        f"compute type {comp.name} is not a floating type",
        op,
    )
    nan_opt = as_enum(op, "reduce_tensor_nan_opt", NanPropagation, reduce_tensor_nan_opt)
    ind = as_enum(op, "reduce_tensor_indices", ReduceTensorIndices, reduce_tensor_indices)
    check(
        ind == ReduceTensorIndices.NO_INDICES
        or rop in (ReduceTensorOp.MIN, ReduceTensorOp.MAX, ReduceTensorOp.AMAX),
        f"indices are computed only for MIN, MAX and AMAX, not {rop.name}",
        op,
    )
    itype = as_enum(op, "reduce_tensor_indices_type", IndicesType, reduce_tensor_indices_type)
    check(
        itype == IndicesType.INDICES_32BIT,
        f"indices type {itype.name} is not supported (32-bit only, as cuDNN)",
        op,
        None,
        Status.NOT_SUPPORTED,
    )
    desc.op, desc.comp_type, desc.nan_opt = rop, comp, nan_opt
    desc.indices, desc.indices_type = ind, itype


def get_reduce_tensor_descriptor(desc) -> tuple:
    return desc.op, desc.comp_type, desc.nan_opt, desc.indices, desc.indices_type


def _wants_indices(desc) -> bool:
    return desc.indices == ReduceTensorIndices.FLATTENED_INDICES


def _check(op, desc, a_desc, c_desc) -> list:
    """The reduced axes of A, after checking the descriptors."""
    check(desc is not None and desc.op is not None, "reduce tensor descriptor was never set", op)
    for n, d in (("A", a_desc), ("C", c_desc)):
        check(d.is_set(), "descriptor was never set", op, n)
    check(
        len(a_desc.dims) == len(c_desc.dims),
        f"C has {len(c_desc.dims)} dims; A has {len(a_desc.dims)}",
        op,
        "C",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    axes = []
    for i, (da, dc) in enumerate(zip(a_desc.dims, c_desc.dims)):
        check(
            dc in (da, 1),
            f"dim {i} is {dc}: each dim must be A's ({da}) or 1",
            op,
            "C",
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
        if dc == 1 and da != 1:
            axes.append(i)
    return axes


class _Reduce:
    """The built graph(s) of one reduce_tensor problem."""

    def __init__(self, handle, op, desc, a_desc, c_desc, axes, blend, beta):
        g = Graph(
            name=op,
            handle=handle,
            intermediate_data_type=DataType.FLOAT,
            compute_data_type=DataType.FLOAT,
        )
        self.a = g.tensor(list(a_desc.dims), list(a_desc.strides), a_desc.data_type, name="A")
        cdims, cstr = list(c_desc.dims), list(c_desc.strides)
        r = g.reduction(self.a, desc.op, name="reduce")
        r.set_dim(cdims)
        self.alpha = self.beta = self.prior = self.idx = None
        t = r
        if blend:
            self.alpha = g.tensor(name="alpha", **SCALAR)
            t = g.scale(t, self.alpha)
        if beta:
            self.prior = g.tensor(cdims, cstr, c_desc.data_type, name="C_prior")
            self.beta = g.tensor(name="beta", **SCALAR)
            t = g.add(t, g.scale(self.prior, self.beta))
        t.set_output(True).set_stride(cstr).set_data_type(c_desc.data_type).set_name("C")
        self.c = t
        if _wants_indices(desc):
            self.idx = self._indices(g, desc, a_desc, axes, r, cdims)
        g.build([HeurMode.A, HeurMode.FALLBACK])
        self.graph = g

    def _indices(self, g, desc, a_desc, axes, m, cdims):
        region = 1
        for k in axes:
            region *= a_desc.dims[k]
        if region >= _EXACT_INDEX_LIMIT:
            from ..errors import GraphNotSupportedError

            raise GraphNotSupportedError(
                f"a reduced region of {region} elements is too large "
                f"for exact indices (limit {_EXACT_INDEX_LIMIT})",
                op="reduce_tensor",
                status=Status.NOT_SUPPORTED,
            )
        a = self.a
        v = g.abs(a) if desc.op == ReductionMode.AMAX else a
        flat, stride = None, 1
        for k in reversed(axes):
            term = g.gen_index(a, axis=k)
            term = g.mul(term, float(stride)) if stride != 1 else term
            flat = term if flat is None else g.add(flat, term)
            stride *= a_desc.dims[k]
        if flat is None:  # nothing reduced: every index is 0
            flat = g.mul(g.gen_index(a, axis=0), 0.0)
        hit = g.logical_or(g.cmp_eq(v, m), g.logical_and(g.cmp_neq(m, m), g.cmp_neq(v, v)))
        sel = g.binary_select(flat, float(_EXACT_INDEX_LIMIT), hit)
        idx = g.reduction(sel, ReductionMode.MIN, name="indices")
        idx.set_dim(cdims).set_output(True).set_data_type(DataType.INT32).set_name("indices")
        return idx

    def run(self, A, C, indices, alpha, beta, workspace) -> None:
        pack = {self.a: A, self.c: C}
        if self.alpha is not None:
            pack[self.alpha] = float(alpha)
        if self.prior is not None:
            pack[self.prior] = prior(C)  # a reduction may not run in place
            pack[self.beta] = float(beta)
        if self.idx is not None:
            pack[self.idx] = indices
        self.graph.execute(pack, workspace)


_cache = LRU(legacy_cache_size)


def _built(handle, op, desc, a_desc, c_desc, blend, beta) -> _Reduce:
    axes = _check(op, desc, a_desc, c_desc)
    key = (
        str(handle.device),
        int(desc.op),
        int(desc.indices),
        blend,
        beta,
        a_desc.dims,
        a_desc.strides,
        int(a_desc.data_type),
        c_desc.dims,
        c_desc.strides,
        int(c_desc.data_type),
    )
    hit = _cache.get(key)
    if hit is None:
        hit = _cache[key] = _Reduce(handle, op, desc, a_desc, c_desc, axes, blend, beta)
    return hit


def get_reduction_indices_size(handle, reduce_tensor_desc, a_desc, c_desc) -> int:
    """Bytes of the indices buffer: one int32 per element of C (0 without indices)."""
    _check("get_reduction_indices_size", reduce_tensor_desc, a_desc, c_desc)
    if not _wants_indices(reduce_tensor_desc):
        return 0
    n = 1
    for d in c_desc.dims:
        n *= d
    return 4 * n


def get_reduction_workspace_size(handle, reduce_tensor_desc, a_desc, c_desc) -> int:
    """Bytes of workspace reduce_tensor needs for this problem (beta != 0 counted)."""
    op = "get_reduction_workspace_size"
    return max(
        _built(handle, op, reduce_tensor_desc, a_desc, c_desc, a, b).graph.get_workspace_size()
        for a in (False, True)
        for b in (False, True)
    )


def reduce_tensor(
    handle,
    reduce_tensor_desc,
    indices,
    indices_size_in_bytes,
    workspace,
    workspace_size_in_bytes,
    alpha,
    a_desc,
    A,
    beta,
    c_desc,
    C,
) -> None:
    """C = alpha * reduce(A) + beta * C, and the flattened indices when the descriptor asks."""
    op = "reduce_tensor"
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    A, C = buffer(op, "A", A, a_desc, handle), buffer(op, "C", C, c_desc, handle, output=True)
    built = _built(handle, op, reduce_tensor_desc, a_desc, c_desc, alpha != 1.0, beta != 0.0)
    if built.idx is not None:
        need = get_reduction_indices_size(handle, reduce_tensor_desc, a_desc, c_desc)
        indices = buffer(op, "indices", indices, output=True)
        size = as_int(op, "indices_size_in_bytes", indices_size_in_bytes)
        check(
            size >= need,
            f"indices size {size} bytes is below the {need} this problem needs",
            op,
            "indices",
            Status.BAD_PARAM_SIZE_INSUFFICIENT,
        )
        check(
            indices.dtype == torch.int32,
            f"indices must be int32, not {indices.dtype}",
            op,
            "indices",
            Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
        check(
            indices.is_contiguous(),
            "indices must be a contiguous buffer",
            op,
            "indices",
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
        check(
            indices.numel() * 4 >= need,
            f"the indices buffer holds {indices.numel() * 4} bytes, fewer than the {need} needed",
            op,
            "indices",
            Status.BAD_PARAM_SIZE_INSUFFICIENT,
        )
        indices = indices.view(-1)[: need // 4].view(list(c_desc.dims))
    ws_need = built.graph.get_workspace_size()
    workspace_size_in_bytes = as_int(op, "workspace_size_in_bytes", workspace_size_in_bytes)
    check(
        workspace_size_in_bytes >= ws_need,
        f"workspace size {workspace_size_in_bytes} bytes is below the {ws_need} this problem needs",
        op,
        "workspace",
        Status.BAD_PARAM_SIZE_INSUFFICIENT,
    )
    built.run(A, C, indices, alpha, beta, workspace if ws_need else None)


__all__ = [
    "ReduceTensorOp",
    "ReduceTensorIndices",
    "IndicesType",
    "ReduceTensorDescriptor",
    "create_reduce_tensor_descriptor",
    "destroy_reduce_tensor_descriptor",
    "set_reduce_tensor_descriptor",
    "get_reduce_tensor_descriptor",
    "get_reduction_indices_size",
    "get_reduction_workspace_size",
    "reduce_tensor",
]
