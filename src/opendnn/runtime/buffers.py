"""Binding a variant pack (tensor or uid -> buffer) to the descriptors of a graph.

A buffer may be a torch tensor, a NumPy array, any ``__dlpack__`` object (CuPy, JAX), or a
raw integer device pointer. Every entry is checked against its descriptor: data type,
device, and shape -- a torch tensor must either have the descriptor's dims and strides
(strides of size-1 dimensions are ignored) or be a 1-D contiguous buffer holding at least
the descriptor's span. Anything else is BAD_PARAM naming the tensor and the rule, never
a silent misread.

Buffers must live where the handle runs (a meta tensor holds no data and is refused); raw
pointers must lie in the 64-bit address space and be aligned to the element size, as must
NumPy data. A pass-by-value tensor takes a host number, converted to the descriptor's type.

Writes the library makes are raw memory writes, so what PyTorch and NumPy would check for
an in-place write is checked here: an output (or workspace) that is a read-only NumPy
array or ``np.memmap`` is refused (a read-only mapping would fault), a workspace may share
no byte with a bound buffer, and every torch tensor a run writes has its autograd version
counter bumped (``mark_written``), so that a tensor autograd saved and a run overwrote
fails backward with PyTorch's "modified by an inplace operation" error.
"""

from __future__ import annotations

import ctypes
import warnings

import numpy as np
import torch

from ..enums import DataType
from ..errors import BadParamError, Status
from ..handle import default_handle
from ..tensor import TensorDesc

# No process maps the first 64 KiB (Linux's default vm.mmap_min_addr; CUDA's virtual
# addresses are far higher): a pointer there is a null pointer plus an offset.
_LOWEST_POINTER = 1 << 16
_INT_RANGE = {
    DataType.INT8: (-(2**7), 2**7 - 1),
    DataType.UINT8: (0, 2**8 - 1),
    DataType.INT32: (-(2**31), 2**31 - 1),
    DataType.INT64: (-(2**63), 2**63 - 1),
    DataType.BOOLEAN: (0, 1),
}


class RawPointer:
    """A raw device or host address read through a descriptor (what cuDNN itself gets)."""

    __slots__ = ("ptr", "dtype", "device", "_desc")

    def __init__(self, ptr: int, desc: TensorDesc, device: torch.device):
        self.ptr, self.dtype, self.device, self._desc = int(ptr), desc.torch_dtype, device, desc

    def data_ptr(self) -> int:
        return self.ptr

    def as_tensor(self) -> torch.Tensor:
        """A tensor view of the addressed memory (span elements, 1-D)."""
        d = self._desc
        n = d.span
        if self.device.type == "cuda":
            return _cuda_view(self.ptr, n, d.torch_dtype, self.device)
        nbytes = n * d.data_type.itemsize
        raw = (ctypes.c_uint8 * nbytes).from_address(self.ptr) if nbytes else bytearray()
        u8 = (
            torch.frombuffer(raw, dtype=torch.uint8)
            if nbytes
            else torch.empty(0, dtype=torch.uint8)
        )
        return u8.view(d.torch_dtype)


def _cuda_view(ptr: int, n: int, dtype: torch.dtype, device) -> torch.Tensor:
    class _Holder:
        __cuda_array_interface__ = {
            "shape": (n * torch.empty((), dtype=dtype).element_size(),),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
        }

    return torch.as_tensor(_Holder(), device=device).view(dtype)


def as_tensor(buf) -> torch.Tensor:
    """Tensor view of a bound buffer (RawPointer or tensor)."""
    return buf.as_tensor() if isinstance(buf, RawPointer) else buf


def logical_view(buf, desc: TensorDesc) -> torch.Tensor:
    """The buffer read as ``desc.dims`` with ``desc.strides``."""
    t = as_tensor(buf)
    return t.as_strided(desc.dims, desc.strides)


def _convert(
    value, desc: TensorDesc, op: str, device: torch.device, output: bool = False, ragged=False
):
    """Turn one variant-pack value into a torch tensor or RawPointer, checking it
    (``output``: the run writes it; ``ragged``: its rows are placed by ragged offsets)."""
    if (
        type(value) is torch.Tensor
        and value.dtype == desc.torch_dtype
        and value.shape == desc.dims
        and value.stride() == desc.strides
        and not value.requires_grad
    ):
        return value  # the common case, checked in one go
    if isinstance(value, torch.Tensor):
        # written as raw memory, as cuDNN does: autograd neither sees nor refuses the write
        # (detach shares the storage, so outputs still land in the caller's tensor)
        t = value.detach() if value.requires_grad else value
    elif isinstance(value, np.ndarray):
        if output:
            check_writable(value, op, desc.label(), "output")
        t = _import(
            from_numpy,
            value,
            f"NumPy array of dtype {value.dtype} strides {list(value.strides)}",
            op,
            desc.label(),
        )
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        raw = RawPointer(_check_pointer(int(value), desc, op), desc, device)
        # the interpreter reads host memory through a tensor; compiled kernels take the pointer
        return raw if raw.device.type == "cuda" else raw.as_tensor()
    elif hasattr(value, "__dlpack__"):
        t = _import(torch.from_dlpack, value, f"{type(value).__name__} (DLPack)", op, desc.label())
    else:
        raise BadParamError(
            f"cannot bind a {type(value).__name__}: expected a torch tensor, "
            "NumPy array, DLPack object or integer pointer",
            op=op,
            tensor=desc.label(),
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    if t.layout != torch.strided:
        raise BadParamError(
            f"buffer layout {t.layout} is not dense: a strided tensor is required",
            op=op,
            tensor=desc.label(),
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    if t.dtype != desc.torch_dtype and t.element_size() == desc.data_type.itemsize:
        # cuDNN binds pointers, so a buffer of another type with elements of the same size
        # runs; its bytes are read as the descriptor's type (not converted), said aloud
        warnings.warn(
            f"opendnn: {op}: tensor '{desc.label()}': the {t.dtype} buffer's bytes are read as the "
            f"descriptor's {desc.data_type.name} (the same {t.element_size()}-byte "
            "elements, bound by pointer as cuDNN does): values are reinterpreted, "
            "not converted",
            RuntimeWarning,
            stacklevel=5,
        )
        t = t.view(desc.torch_dtype)
    if t.dtype != desc.torch_dtype:
        raise BadParamError(
            f"buffer data type {t.dtype} differs from the descriptor's {desc.data_type.name}",
            op=op,
            tensor=desc.label(),
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    if t.data_ptr() % t.element_size():
        raise BadParamError(
            f"buffer address {t.data_ptr():#x} is not aligned to its "
            f"{t.element_size()}-byte {desc.data_type.name} elements",
            op=op,
            tensor=desc.label(),
            status=Status.BAD_PARAM_MISALIGNED_POINTER,
        )
    if tuple(t.shape) == desc.dims:
        if any(a != b for a, b, d in zip(t.stride(), desc.strides, desc.dims) if d > 1):
            raise BadParamError(
                f"buffer strides {list(t.stride())} differ from the descriptor's "
                f"{list(desc.strides)}",
                op=op,
                tensor=desc.label(),
                status=Status.BAD_PARAM_SHAPE_MISMATCH,
            )
    elif _same_but_size_one(t, desc):
        # the same dims and strides but for size-1 dims ([M, N] bound to [1, M, N] or to
        # [M, 1, N] with any stride on the 1): the same memory, read as the descriptor
        t = t.as_strided(desc.dims, desc.strides)
    elif _dense(t):
        # cuDNN binds pointers: a dense buffer (a 1-D array, or any shape whose elements
        # fill one gap-free range) is the memory from its first element on, read through
        # the descriptor's own strides; it must hold every element the descriptor
        # addresses, and nothing past that span is read or written. A ragged tensor's
        # offsets (device data) place its rows, so its dims bound nothing: cuDNN reads and
        # writes where they point (a THD buffer holds only the batches' real rows)
        if t.numel() < desc.span and not ragged:
            raise BadParamError(
                f"buffer of shape {list(t.shape)} holds {t.numel()} elements; the "
                f"descriptor (dims {list(desc.dims)} strides {list(desc.strides)}) "
                f"addresses {desc.span}",
                op=op,
                tensor=desc.label(),
                status=Status.BAD_PARAM_SIZE_INSUFFICIENT,
            )
        t = t.as_strided((t.numel(),), (1,))
    else:
        raise BadParamError(
            f"buffer shape {list(t.shape)} strides {list(t.stride())} disagree "
            f"with descriptor dims {list(desc.dims)} strides {list(desc.strides)}",
            op=op,
            tensor=desc.label(),
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    return t


def _dense(t: torch.Tensor) -> bool:
    """``t``'s elements fill one gap-free range of memory: its dims of size above 1, taken
    by increasing stride, are packed (any permutation of a contiguous tensor)."""
    expect = 1
    for s, d in sorted((s, d) for d, s in zip(t.shape, t.stride()) if d != 1):
        if s != expect:
            return False
        expect *= d
    return True


def _same_but_size_one(t: torch.Tensor, desc: TensorDesc) -> bool:
    """``t`` and ``desc`` agree on every dimension of size above 1, sizes and strides, in
    order: they address the same elements."""
    mine = [(d, s) for d, s in zip(t.shape, t.stride()) if d != 1]
    theirs = [(d, s) for d, s in zip(desc.dims, desc.strides) if d != 1]
    return mine == theirs


def check_writable(value, op: str, tensor: str | None, role: str) -> None:
    """BAD_PARAM when ``value`` is a NumPy array whose memory may not be written: ``role``
    (an output, the workspace) is written, and torch's view of a read-only array would
    write it anyway (into a read-only ``np.memmap``: a segmentation fault)."""
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        what = (
            "np.memmap opened read-only"
            if isinstance(value, np.memmap)
            else "read-only NumPy array"
        )
        raise BadParamError(
            f"{role} is a {what}: it is written, so its memory must be "
            "writable (read-only is allowed for inputs only)",
            op=op,
            tensor=tensor,
            status=Status.BAD_PARAM,
        )


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy``, without its warning that writing a read-only array is undefined:
    the arrays it sees read-only are inputs (``check_writable`` refused the others)."""
    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        return torch.from_numpy(array)


def _import(convert, value, what: str, op: str, tensor: str | None) -> torch.Tensor:
    """``convert(value)`` (torch.from_numpy, torch.from_dlpack), its refusals made typed."""
    try:
        return convert(value)
    except (TypeError, ValueError, RuntimeError, BufferError) as e:
        reason = str(e).split(". ")[0].rstrip(".")
        raise BadParamError(
            f"cannot view a {what} as a tensor: {reason}",
            op=op,
            tensor=tensor,
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        ) from None


def _check_pointer(ptr: int, desc: TensorDesc, op: str) -> int:
    """A raw address, refused when it cannot be one: outside 64 bits, null (or in the
    never-mapped first 64 KiB), or not aligned to the element size (a kernel would read
    across elements, and write past the end of the buffer)."""
    if not 0 <= ptr < 2**64:
        raise BadParamError(
            f"pointer {ptr:#x} is outside the 64-bit address space",
            op=op,
            tensor=desc.label(),
            status=Status.BAD_PARAM_OUT_OF_BOUND,
        )
    if ptr < _LOWEST_POINTER:
        rule = (
            "null pointer bound"
            if ptr == 0
            else f"pointer {ptr:#x} lies in the never-mapped first 64 KiB (a null pointer "
            "plus an offset)"
        )
        raise BadParamError(rule, op=op, tensor=desc.label(), status=Status.BAD_PARAM_NULL_POINTER)
    size = desc.data_type.itemsize
    if ptr % size:
        raise BadParamError(
            f"pointer {ptr:#x} is not aligned to the {size}-byte {desc.data_type.name} elements",
            op=op,
            tensor=desc.label(),
            status=Status.BAD_PARAM_MISALIGNED_POINTER,
        )
    return ptr


def scalar_value(value, desc: TensorDesc, op: str):
    """The host value of a pass-by-value tensor, as the descriptor's type: a float for a
    floating type, an int for an integer one, a bool for BOOLEAN."""
    dt = desc.data_type
    if type(value) is float and dt.is_floating:
        return value  # the common case
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise BadParamError(
                f"pass-by-value tensor needs a host value: a CPU tensor or a "
                f"number, got a tensor on {value.device}",
                op=op,
                tensor=desc.label(),
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        if value.numel() != 1:
            raise BadParamError(
                f"pass-by-value tensor needs 1 element, got {value.numel()}",
                op=op,
                tensor=desc.label(),
                status=Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        value = value.item()
    elif isinstance(value, np.ndarray):
        if value.size != 1:
            raise BadParamError(
                f"pass-by-value array needs 1 element, got {value.size}",
                op=op,
                tensor=desc.label(),
                status=Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        value = value.item()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        if dt == DataType.BOOLEAN:
            return value
    elif isinstance(value, (int, float)) and dt.is_floating:
        try:
            return float(value)
        except OverflowError:
            raise BadParamError(
                f"{value} is beyond the range of a float",
                op=op,
                tensor=desc.label(),
                status=Status.BAD_PARAM_OUT_OF_BOUND,
            ) from None
    elif isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        lo, hi = _INT_RANGE.get(dt, (0, -1))
        if not lo <= value <= hi:
            raise BadParamError(
                f"{value} is outside the range [{lo}, {hi}] of {dt.name}",
                op=op,
                tensor=desc.label(),
                status=Status.BAD_PARAM_OUT_OF_BOUND,
            )
        return bool(value) if dt == DataType.BOOLEAN else int(value)
    if isinstance(value, (int, float, bool)):
        rule = f"a {type(value).__name__} ({value!r}) is not a value of type {dt.name}"
    else:
        rule = f"pass-by-value tensor needs a number, got {type(value).__name__}"
    raise BadParamError(rule, op=op, tensor=desc.label(), status=Status.BAD_PARAM_ATTRIBUTE_TYPE)


def bind(
    graph,
    variant_pack: dict,
    op: str,
    default_device,
    scalar_defaults: dict | None = None,
    explicit: bool = False,
    unused: frozenset = frozenset(),
) -> tuple[dict, torch.device]:
    """Check ``variant_pack`` against ``graph`` (an OpGraph) and return (uid -> buffer or
    host scalar, device). ``default_device`` is the handle's device; it places raw pointers.
    ``scalar_defaults`` gives pass-by-value tensors' values known at build time.
    ``explicit``: the caller gave a handle (to the graph or to execute). ``unused``: uids of
    tensors the caller made that no operation uses (their entries are ignored).

    Every buffer must be on the handle's device. One exception keeps the CPU usable on a GPU
    machine: when no handle was given (the process default's device), a pack that lies
    wholly on another device runs there (CPU tensors in the interpreter)."""
    tensors, outputs = graph.tensors, graph.output_uid_set
    bound: dict = {}
    handle_device = (
        default_device if isinstance(default_device, torch.device) else torch.device(default_device)
    )
    on_handle = None  # a tensor whose buffer is on the handle's device
    elsewhere = None  # (tensor, device) of the first buffer on another device
    for key, value in variant_pack.items():
        if key is None:
            # an optional tensor the graph did not make (rmsnorm's bias, its Dbias):
            # cudnn-frontend's binding skips a null tensor
            continue
        uid = key if isinstance(key, int) else getattr(key, "uid", None)
        if uid == -1 and not isinstance(key, int):
            # a graph tensor no node used never got a uid: cuDNN ignores such an entry
            # (cudnn-frontend's tests pass their unused epsilon tensors)
            continue
        if uid is None or isinstance(key, bool):
            raise BadParamError(
                f"variant pack key {key!r} is neither a graph tensor nor a uid",
                op=op,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        desc = tensors.get(uid)
        if desc is None and uid in unused:
            continue  # a tensor made on the graph that no operation uses: as cuDNN
        if desc is None:
            raise BadParamError(
                f"uid {uid} is not a tensor of this graph",
                op=op,
                tensor=getattr(key, "name", None) or f"uid {uid}",
                status=Status.BAD_PARAM,
            )
        if desc.is_virtual:
            raise BadParamError(
                "is virtual: it lives only inside the fused kernel and cannot "
                "be bound in the variant pack",
                op=op,
                tensor=desc.label(),
                status=Status.BAD_PARAM,
            )
        if uid in bound:
            raise BadParamError(
                "bound twice in the variant pack",
                op=op,
                tensor=desc.label(),
                status=Status.BAD_PARAM_DUPLICATED_ENTRIES,
            )
        if desc.is_pass_by_value:
            bound[uid] = scalar_value(value, desc, op)
            continue
        if value is None:
            raise BadParamError(
                "bound to None", op=op, tensor=desc.label(), status=Status.BAD_PARAM_NULL_POINTER
            )
        buf = _convert(value, desc, op, handle_device, uid in outputs, uid in graph.ragged_uid_set)
        dev = buf.device
        if dev != handle_device:
            # a handle other than the process default's binds (asked only off the hot path)
            if (
                dev.type == "meta"
                or on_handle is not None
                or (elsewhere is not None and dev != elsewhere[1])
                or explicit
                or handle_device != default_handle().device
            ):
                _device_mismatch(desc, dev, handle_device, on_handle, elsewhere, op, explicit)
            elsewhere = elsewhere or (desc, dev)
        elif elsewhere is not None:
            _device_mismatch(elsewhere[0], elsewhere[1], handle_device, desc, None, op, explicit)
        else:
            on_handle = desc
        bound[uid] = buf
    for uid, desc in tensors.items():
        if (
            desc.is_pass_by_value
            and uid not in bound
            and scalar_defaults
            and uid in scalar_defaults
        ):
            bound[uid] = scalar_defaults[uid]
            continue
        if not desc.is_virtual and uid not in bound:
            raise BadParamError(
                "missing from the variant pack",
                op=op,
                tensor=desc.label(),
                status=Status.BAD_PARAM_NULL_POINTER,
            )
    return bound, elsewhere[1] if elsewhere is not None else handle_device


def mark_written(graph, bound: dict) -> None:
    """Bump the autograd version counter of every torch tensor bound to an output of
    ``graph``, as PyTorch's in-place operations do; call it once the call's checks have
    passed, before the run. A tensor autograd saved for a backward (``y = tanh(x)``
    saves y) and then overwritten here makes that backward raise "modified by an inplace
    operation" instead of computing gradients from the new values. A view shares its
    base's counter, a detached tensor its source's; inference tensors have none (PyTorch
    skips them)."""
    written = [b for u in graph.output_uid_set if isinstance(b := bound.get(u), torch.Tensor)]
    if written:
        torch.autograd.graph.increment_version(written)


def _device_mismatch(
    desc: TensorDesc, dev, handle_device, on_handle, elsewhere, op: str, explicit: bool = False
):
    """Raise for ``desc``'s buffer on ``dev``, naming the tensor that is out of place."""
    if dev.type == "meta":
        rule = "buffer is on the meta device, which holds no data to read or write"
    elif explicit or handle_device != default_handle().device:
        rule = f"buffer is on {dev} but the handle's device is {handle_device}"
    elif on_handle is not None:
        rule = (
            f"buffer is on {dev} but tensor '{on_handle.label()}' is on the handle's "
            f"device {handle_device}"
        )
    else:
        rule = f"buffer is on {dev} but tensor '{elsewhere[0].label()}' is on {elsewhere[1]}"
    raise BadParamError(rule, op=op, tensor=desc.label(), status=Status.BAD_PARAM)


def _memory_bytes(graph, uid, buf) -> int:
    """The bytes a bound tensor's memory spans from its address: its descriptor's span;
    a ragged tensor's offsets place its rows within its buffer, which may be smaller
    than the dims span (a THD buffer holds only the batches' real rows)."""
    size = graph.tensors[uid].size_in_bytes
    if uid in graph.ragged_uid_set and isinstance(buf, torch.Tensor):
        size = min(size, buf.numel() * buf.element_size())
    return size


def check_no_aliasing(graph, bound: dict, op: str, single_pass: bool = False) -> None:
    """A graph may not write memory it reads (cuDNN's in-place rule). The one exception:
    a graph of pointwise nodes only, whose one output no node reads, written exactly over one
    of its inputs (same address, same layout): each element is read before it is
    written, and no other element reads it (cuDNN's in-place add_tensor / op_tensor).
    ``single_pass``: the plan is one kernel that reads every input of an element before
    it writes that element's outputs (the fused pointwise kernel, the reference); then
    each of several outputs may lie exactly over an input (RoPE written in place over
    both halves of its slice)."""
    spans = []
    for uid, buf in bound.items():
        if isinstance(buf, (int, float, bool)):
            continue
        start = buf.data_ptr()
        spans.append((start, start + _memory_bytes(graph, uid, buf), uid))
    outs = graph.output_uid_set
    for s0, e0, u0 in spans:
        if u0 not in outs or s0 == e0:
            continue
        for s1, e1, u1 in spans:
            if u1 == u0 or not (s1 < e0 and s0 < e1):
                continue
            d0, d1 = graph.tensors[u0], graph.tensors[u1]
            if _exact_in_place(graph, d0, d1, s0 == s1, single_pass) or _interleaved(
                d0, d1, s1 - s0
            ):
                continue
            if s0 == s1 and _running_stats_in_place(graph, d0, d1):
                continue
            rule = (
                "only a graph of pointwise nodes with one output, which no node reads, "
                "may run in place, and only on an identical buffer"
            )
            raise BadParamError(
                f"output overlaps the memory of tensor '{d1.label()}': {rule}",
                op=op,
                tensor=d0.label(),
                status=Status.BAD_PARAM,
            )


def _exact_in_place(
    graph, out: TensorDesc, inp: TensorDesc, same_start: bool, single_pass: bool = False
) -> bool:
    return (
        same_start
        and out.dims == inp.dims
        and out.strides == inp.strides
        and out.data_type == inp.data_type
        and not out.has_overlap()
        and (len(graph.output_uids) == 1 or single_pass)
        and out.uid not in graph.consumers
        and all(n.kind == "pointwise" for n in graph.nodes)
    )


# a batch-norm training forward's running statistics may be one buffer in and out (as
# cudnn-frontend binds them): each channel's new value is written by the code that read
# its old one, and nothing else reads it
_RUNNING_PAIRS = (
    ("NEXT_RUNNING_MEAN", "PREV_RUNNING_MEAN"),
    ("NEXT_RUNNING_VAR", "PREV_RUNNING_VAR"),
)


def _running_stats_in_place(graph, out: TensorDesc, inp: TensorDesc) -> bool:
    """``out`` is a batchnorm node's next running statistic and ``inp`` the same node's
    previous one, with the same layout and no other reader."""
    if (out.dims, out.strides, out.data_type) != (inp.dims, inp.strides, inp.data_type):
        return False
    for n in graph.nodes:
        if n.kind != "batchnorm":
            continue
        for o, i in _RUNNING_PAIRS:
            if n.outputs.get(o) == out.uid and n.inputs.get(i) == inp.uid:
                readers = graph.consumers.get(inp.uid, [])
                return len(readers) == 1 and out.uid not in graph.consumers
    return False


def _interleaved(a: TensorDesc, b: TensorDesc, byte_delta: int) -> bool:
    """True when two same-layout views at ``byte_delta`` bytes apart provably share no
    element (e.g. the even and odd columns of one buffer)."""
    size = a.data_type.itemsize
    if (
        a.dims != b.dims
        or a.strides != b.strides
        or a.data_type != b.data_type
        or byte_delta % size
        or a.has_overlap()
    ):
        return False
    r = abs(byte_delta // size)
    axes = sorted(((s, d) for s, d in zip(a.strides, a.dims) if d > 1 and s > 0), reverse=True)

    # A shared element needs r = sum k_i * stride_i with |k_i| < dims_i. In a
    # non-overlapping layout each stride exceeds the reach of the smaller ones, so the
    # remainder after the largest stride must be reached by digit floor(r/s) or that + 1.
    def reachable(rem: int, i: int) -> bool:
        if i == len(axes):
            return rem == 0
        s, d = axes[i]
        q = rem // s
        return any(abs(k) < d and reachable(rem - k * s, i + 1) for k in {q, q + 1})

    return not reachable(r, 0)


def check_workspace(workspace, needed: int, device, op: str, graph=None, bound: dict | None = None):
    """Return the workspace as a uint8 tensor (or None when none is needed). With
    ``graph`` and ``bound`` (uid -> buffer, as ``bind`` returns it), the ``needed`` bytes
    the plan uses may share none with a bound buffer: a plan writes its workspace while it
    reads its inputs and writes its outputs (an FFT or Winograd plan would compute on its
    own scratch). Byte ranges are compared, not elements: one comparison per buffer."""
    if isinstance(workspace, (int, np.integer)) and not isinstance(workspace, bool):
        # a raw address (cudnn-frontend's execute takes workspace.data_ptr()): the plan's
        # bytes there, on the buffers' device
        if needed == 0:
            return None
        workspace = _pointer_bytes(int(workspace), needed, device, op)
    if needed == 0:
        return None if workspace is None else as_bytes(workspace, op)
    if workspace is None:
        raise BadParamError(
            f"workspace of {needed} bytes is required, got None",
            op=op,
            status=Status.BAD_PARAM_SIZE_INSUFFICIENT,
        )
    ws = as_bytes(workspace, op)
    if ws.numel() < needed:
        raise BadParamError(
            f"workspace holds {ws.numel()} bytes; the plan needs {needed}",
            op=op,
            status=Status.BAD_PARAM_SIZE_INSUFFICIENT,
        )
    if device is not None and ws.device != device:
        raise BadParamError(
            f"workspace is on {ws.device}; the buffers are on {device}",
            op=op,
            status=Status.BAD_PARAM,
        )
    if bound:
        start = ws.data_ptr()
        for uid, buf in bound.items():
            if isinstance(buf, (int, float, bool)):
                continue
            desc = graph.tensors[uid]
            b0 = buf.data_ptr()
            common = min(start + needed, b0 + _memory_bytes(graph, uid, buf)) - max(start, b0)
            if common > 0:
                _overlap(op, "workspace", desc.label(), common)
    return ws


def _pointer_bytes(ptr: int, nbytes: int, device, op: str) -> torch.Tensor:
    """``nbytes`` bytes at address ``ptr`` on ``device`` (None: the default handle's) as a
    uint8 tensor; the address checked as a variant pack's pointers are."""
    if not _LOWEST_POINTER <= ptr < 2**64:
        raise BadParamError(
            f"workspace pointer {ptr:#x} is null, in the never-mapped first 64 KiB or "
            "outside the 64-bit address space",
            op=op,
            status=Status.BAD_PARAM_NULL_POINTER,
        )
    device = device if device is not None else default_handle().device
    if device.type == "cuda":
        return _cuda_view(ptr, nbytes, torch.uint8, device)
    return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=torch.uint8)


def byte_span(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, one past the last byte) that ``t`` addresses (an empty one for none)."""
    start = t.data_ptr()
    if t.numel() == 0:
        return start, start
    extent = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))
    return start, start + extent * t.element_size()


def check_disjoint(space: torch.Tensor, nbytes: int, buffers: dict, op: str, name: str) -> None:
    """BAD_PARAM when the first ``nbytes`` bytes of ``space`` (a workspace or reserve
    space the call writes) share a byte with one of ``buffers`` ({name: tensor}) on its
    device."""
    s0 = space.data_ptr()
    s1 = s0 + nbytes
    for label, buf in buffers.items():
        if buf is None or buf.device != space.device:
            continue
        b0, b1 = byte_span(as_tensor(buf))
        common = min(s1, b1) - max(s0, b0)
        if common > 0:
            _overlap(op, name, label, common)


def _overlap(op: str, name: str, label: str, common: int):
    raise BadParamError(
        f"{name} overlaps the memory of tensor '{label}' ({common} bytes in "
        f"common): the call writes its {name}, so it may share no byte with "
        "a buffer it reads or writes",
        op=op,
        status=Status.BAD_PARAM,
    )


def as_bytes(workspace, op: str) -> torch.Tensor:
    """The workspace (a tensor, NumPy array or DLPack object) as flat uint8 bytes."""
    t = workspace
    if isinstance(t, np.ndarray):
        check_writable(t, op, None, "workspace")
        t = _import(
            torch.from_numpy,
            t,
            f"workspace NumPy array of dtype {t.dtype} strides {list(t.strides)}",
            op,
            None,
        )
    elif not isinstance(t, torch.Tensor) and hasattr(t, "__dlpack__"):
        t = _import(torch.from_dlpack, t, f"workspace {type(t).__name__} (DLPack)", op, None)
    if not isinstance(t, torch.Tensor):
        raise BadParamError(
            f"workspace must be a tensor, got {type(workspace).__name__}",
            op=op,
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    if t.layout != torch.strided or not t.is_contiguous():
        raise BadParamError("workspace must be contiguous", op=op, status=Status.BAD_PARAM)
    return t.view(-1).view(torch.uint8) if t.dtype != torch.uint8 else t.view(-1)


DTYPE_BYTES = {dt: dt.itemsize for dt in DataType if dt != DataType.NOT_SET}
