"""The graph's operation methods, with cudnn-frontend's names and keyword arguments.

Every method takes ``name=`` and ``compute_data_type=``, creates the node and its output
tensors (virtual until a node-less consumer makes them outputs, or ``set_output(True)``),
and returns the output tensor(s).
"""

from __future__ import annotations

from ..enums import DataType, ReductionMode, ReshapeMode
from ..enums import PointwiseMode as M
from ..errors import BadParamError, Status
from ..ops.pointwise import MODES
from . import conv_nodes as CN
from . import nodes as N
from . import softmax_nodes as SN
from .builders_attention import AttentionBuilderMixin  # attention (sdpa) section
from .builders_norm import NormBuilderMixin
from .builders_ops import OpsBuilderMixin
from .tensor import as_enum, as_float, as_int, as_ints, as_type


class BuilderMixin(NormBuilderMixin, OpsBuilderMixin, AttentionBuilderMixin):
    # ---- plumbing ---------------------------------------------------------------------
    def _new_output(self, name: str):
        return self.tensor(is_virtual=True, name=name)._mark_created()

    def _add(self, node, outputs: dict):
        node.outputs = outputs
        self._nodes.append(node)
        self._invalidate()
        return node

    def _check_tensor(self, t, op: str, role: str):
        from .tensor import Tensor

        if not isinstance(t, Tensor):
            raise BadParamError(
                f"{role} must be a tensor of this graph, got {type(t).__name__}",
                op=op,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        if t._graph is not self:
            raise BadParamError(
                f"{role} belongs to another graph", op=op, tensor=t.label(), status=Status.BAD_PARAM
            )
        return t

    def _pointwise(
        self, mode: M, inputs: list, name="", compute_data_type=DataType.NOT_SET, **attrs
    ):
        op = name or f"{MODES[mode].frontend}_{len(self._nodes)}"
        ins = {}
        for i, t in enumerate(inputs):
            ins[f"IN_{i}"] = self._check_tensor(self._coerce(t, op), op, f"input {i}")
        node = N.Pointwise(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs=ins,
            mode=mode,
            **attrs,
        )
        out = self._new_output(f"{op}::OUT_0")
        self._add(node, {"OUT_0": out})
        return out

    def add_operation(self, node, output_roles) -> list:
        """Add ``node`` -- an operation of any kind, one defined outside the library
        included (a ``nodes.Node`` subclass; ``nodes.register_node_type`` makes its kind
        known to ``deserialize``) -- and return its output tensors, one per role of
        ``output_roles``, in that order. The built-in operations' methods are built on
        the same steps.

        ``node.inputs`` maps roles to tensors of this graph (a role may hold a list of
        them); each is checked as every builder checks its inputs. Each output is a new
        virtual tensor named ``<node name>::<role>`` whose dims, strides and type
        ``node.infer_properties`` fills in at validation unless the caller sets them. A
        node without a name is named ``<kind>_<number of nodes>``."""
        from .nodes import Node

        if not isinstance(node, Node) or type(node) is Node:
            raise BadParamError(
                f"needs an operation node (a Node subclass), got {type(node).__name__}",
                op="add_operation",
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        op = node.name or f"{node.kind}_{len(self._nodes)}"
        if (
            isinstance(output_roles, str)
            or not all(isinstance(r, str) for r in output_roles)
            or not output_roles
            or len(set(output_roles)) != len(output_roles)
        ):
            raise BadParamError(
                f"output_roles must be distinct role names, got {output_roles!r:.60}",
                op=op,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        for role, v in node.inputs.items():
            many = isinstance(v, (list, tuple))
            for i, t in enumerate(v if many else [v]):
                if t is not None:
                    self._check_tensor(t, op, f"{role}[{i}]" if many else role)
        node.name = op
        node.compute_data_type = self._ctype(node.compute_data_type, op)
        outs = {role: self._new_output(f"{op}::{role}") for role in output_roles}
        self._add(node, outs)
        return [outs[role] for role in output_roles]

    def _coerce(self, t, op):
        """Python numbers become pass-by-value scalars (a convenience over the C++ API)."""
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            return self.tensor(
                dim=[1],
                stride=[1],
                data_type=DataType.FLOAT,
                is_pass_by_value=True,
                name=f"{op}::scalar",
            )._with_value(t)
        return t

    def _ctype(self, t, op: str | None = None):
        """A compute data type, the error naming node ``op`` (else the graph)."""
        where = f"node '{op}'" if op else (f"graph '{self.name}'" if self.name else "graph")
        return as_type(t, where, "compute_data_type")

    # ---- pointwise, unary ---------------------------------------------------------------
    def _unary(mode):
        def method(self, input, name="", compute_data_type=DataType.NOT_SET):
            return self._pointwise(mode, [input], name, compute_data_type)

        method.__name__ = MODES[mode].frontend
        method.__doc__ = f"Pointwise {mode.name}: OUT = f(input), same dims as input."
        return method

    sqrt = _unary(M.SQRT)
    tanh = _unary(M.TANH_FWD)
    gelu = _unary(M.GELU_FWD)
    gelu_approx_tanh = _unary(M.GELU_APPROX_TANH_FWD)
    sigmoid = _unary(M.SIGMOID_FWD)
    erf = _unary(M.ERF)
    identity = _unary(M.IDENTITY)
    exp = _unary(M.EXP)
    log = _unary(M.LOG)
    neg = _unary(M.NEG)
    abs = _unary(M.ABS)
    ceil = _unary(M.CEIL)
    floor = _unary(M.FLOOR)
    rsqrt = _unary(M.RSQRT)
    reciprocal = _unary(M.RECIPROCAL)
    sin = _unary(M.SIN)
    cos = _unary(M.COS)
    tan = _unary(M.TAN)
    logical_not = _unary(M.LOGICAL_NOT)

    def elu(self, input, alpha=None, name="", compute_data_type=DataType.NOT_SET):
        return self._pointwise(M.ELU_FWD, [input], name, compute_data_type, elu_alpha=alpha)

    def softplus(self, input, beta=None, name="", compute_data_type=DataType.NOT_SET):
        return self._pointwise(M.SOFTPLUS_FWD, [input], name, compute_data_type, softplus_beta=beta)

    def relu(
        self,
        input,
        negative_slope=None,
        lower_clip=None,
        upper_clip=None,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        return self._pointwise(
            M.RELU_FWD,
            [input],
            name,
            compute_data_type,
            relu_lower_clip_slope=negative_slope,
            relu_lower_clip=lower_clip,
            relu_upper_clip=upper_clip,
        )

    def leaky_relu(self, input, negative_slope, name="", compute_data_type=DataType.NOT_SET):
        return self._pointwise(
            M.RELU_FWD, [input], name, compute_data_type, relu_lower_clip_slope=negative_slope
        )

    def swish(self, input, swish_beta=None, name="", compute_data_type=DataType.NOT_SET):
        return self._pointwise(M.SWISH_FWD, [input], name, compute_data_type, swish_beta=swish_beta)

    def gen_index(self, input, axis, name="", compute_data_type=DataType.NOT_SET):
        op = name or f"gen_index_{len(self._nodes)}"
        return self._pointwise(
            M.GEN_INDEX,
            [input],
            op,
            compute_data_type,
            axis=as_int(axis, f"pointwise GEN_INDEX '{op}'", "axis"),
        )

    # ---- pointwise, binary / ternary ------------------------------------------------------
    def _binary(mode, a_name="a", b_name="b"):
        def method(self, *args, name="", compute_data_type=DataType.NOT_SET, **kw):
            vals = list(args) + [kw.pop(k) for k in (a_name, b_name) if k in kw]
            if kw:
                raise TypeError(f"{MODES[mode].frontend}() got unexpected arguments {list(kw)}")
            if len(vals) != 2:
                raise TypeError(f"{MODES[mode].frontend}() takes 2 tensors ({a_name}, {b_name})")
            return self._pointwise(mode, vals, name, compute_data_type)

        method.__name__ = MODES[mode].frontend
        method.__doc__ = f"Pointwise {mode.name}({a_name}, {b_name}), inputs broadcast."
        return method

    add = _binary(M.ADD)
    bias = _binary(M.ADD, "input", "bias")
    mul = _binary(M.MUL)
    scale = _binary(M.MUL, "input", "scale")
    sub = _binary(M.SUB)
    div = _binary(M.DIV)
    add_square = _binary(M.ADD_SQUARE)
    max = _binary(M.MAX, "input0", "input1")
    min = _binary(M.MIN, "input0", "input1")
    mod = _binary(M.MOD)
    pow = _binary(M.POW)
    logical_and = _binary(M.LOGICAL_AND)
    logical_or = _binary(M.LOGICAL_OR)
    cmp_eq = _binary(M.CMP_EQ, "input", "comparison")
    cmp_neq = _binary(M.CMP_NEQ, "input", "comparison")
    cmp_gt = _binary(M.CMP_GT, "input", "comparison")
    cmp_ge = _binary(M.CMP_GE, "input", "comparison")
    cmp_lt = _binary(M.CMP_LT, "input", "comparison")
    cmp_le = _binary(M.CMP_LE, "input", "comparison")

    def binary_select(self, input0, input1, mask, name="", compute_data_type=DataType.NOT_SET):
        """OUT = mask ? input0 : input1."""
        return self._pointwise(M.BINARY_SELECT, [input0, input1, mask], name, compute_data_type)

    # ---- activation backward (loss = incoming gradient, input = forward input) ---------------
    def _backward(mode):
        def method(self, loss, input, name="", compute_data_type=DataType.NOT_SET, **attrs):
            return self._pointwise(mode, [loss, input], name, compute_data_type, **attrs)

        method.__name__ = MODES[mode].frontend
        method.__doc__ = f"{mode.name}: DX = loss * f'(input)."
        return method

    tanh_backward = _backward(M.TANH_BWD)
    sigmoid_backward = _backward(M.SIGMOID_BWD)
    gelu_backward = _backward(M.GELU_BWD)
    gelu_approx_tanh_backward = _backward(M.GELU_APPROX_TANH_BWD)

    def relu_backward(
        self,
        loss,
        input,
        negative_slope=None,
        lower_clip=None,
        upper_clip=None,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        return self._pointwise(
            M.RELU_BWD,
            [loss, input],
            name,
            compute_data_type,
            relu_lower_clip_slope=negative_slope,
            relu_lower_clip=lower_clip,
            relu_upper_clip=upper_clip,
        )

    def leaky_relu_backward(
        self, loss, input, negative_slope, name="", compute_data_type=DataType.NOT_SET
    ):
        return self._pointwise(
            M.RELU_BWD, [loss, input], name, compute_data_type, relu_lower_clip_slope=negative_slope
        )

    def elu_backward(self, loss, input, alpha=None, name="", compute_data_type=DataType.NOT_SET):
        return self._pointwise(M.ELU_BWD, [loss, input], name, compute_data_type, elu_alpha=alpha)

    def softplus_backward(
        self, loss, input, beta=None, name="", compute_data_type=DataType.NOT_SET
    ):
        return self._pointwise(
            M.SOFTPLUS_BWD, [loss, input], name, compute_data_type, softplus_beta=beta
        )

    def swish_backward(
        self, loss, input, swish_beta=None, name="", compute_data_type=DataType.NOT_SET
    ):
        return self._pointwise(
            M.SWISH_BWD, [loss, input], name, compute_data_type, swish_beta=swish_beta
        )

    # ---- reductions -------------------------------------------------------------------------
    def reduction(self, input, mode, name="", compute_data_type=DataType.NOT_SET):
        """Y = reduce(input); set Y's dims (size 1 on reduced axes) before validate()."""
        op = name or f"reduction_{len(self._nodes)}"
        mode = as_enum(ReductionMode, mode, f"reduction '{op}'", "mode", ints=False)
        node = N.Reduction(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={"X": self._check_tensor(input, op, "input")},
            mode=mode,
        )
        y = self._new_output(f"{op}::Y")
        self._add(node, {"Y": y})
        return y

    def genstats(self, input, name="", compute_data_type=DataType.NOT_SET):
        """[SUM, SQ_SUM] per channel (axis 1) of input."""
        op = name or f"genstats_{len(self._nodes)}"
        node = N.GenStats(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={"X": self._check_tensor(input, op, "input")},
        )
        s, sq = self._new_output(f"{op}::SUM"), self._new_output(f"{op}::SQ_SUM")
        self._add(node, {"SUM": s, "SQ_SUM": sq})
        return [s, sq]

    # ---- softmax -------------------------------------------------------------------------------
    def softmax(self, input, axis=-1, log=False, name="", compute_data_type=DataType.NOT_SET):
        """Y = softmax(input) along ``axis`` (log-softmax with ``log``); Y has input's dims."""
        op = name or f"softmax_{len(self._nodes)}"
        node = SN.Softmax(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={"X": self._check_tensor(input, op, "input")},
            axis=as_int(axis, f"softmax '{op}'", "axis"),
            log=bool(log),
        )
        y = self._new_output(f"{op}::Y")
        self._add(node, {"Y": y})
        return y

    def softmax_backward(
        self, loss, output, axis=-1, log=False, name="", compute_data_type=DataType.NOT_SET
    ):
        """DX from the gradient ``loss`` (DY) and the forward's ``output`` (Y)."""
        op = name or f"softmax_backward_{len(self._nodes)}"
        node = SN.SoftmaxBackward(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={
                "DY": self._check_tensor(loss, op, "loss"),
                "Y": self._check_tensor(output, op, "output"),
            },
            axis=as_int(axis, f"softmax_backward '{op}'", "axis"),
            log=bool(log),
        )
        dx = self._new_output(f"{op}::DX")
        self._add(node, {"DX": dx})
        return dx

    # ---- matmul -------------------------------------------------------------------------------
    def matmul(self, A, B, padding=0.0, name="", compute_data_type=DataType.NOT_SET):
        """C[..., M, N] = A[..., M, K] @ B[..., K, N], batch dims broadcast."""
        op = name or f"matmul_{len(self._nodes)}"
        node = N.Matmul(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={"A": self._check_tensor(A, op, "A"), "B": self._check_tensor(B, op, "B")},
            padding=as_float(padding, f"matmul '{op}'", "padding"),
        )
        c = self._new_output(f"{op}::C")
        self._add(node, {"C": c})
        return c

    # ---- layout ----------------------------------------------------------------------------
    def reshape(
        self,
        input,
        name="",
        reshape_mode=ReshapeMode.VIEW_ONLY,
        compute_data_type=DataType.NOT_SET,
    ):
        """Y with the same elements; set Y's dims before validate(). ``reshape_mode``
        (cudnn-frontend's, in its argument order): VIEW_ONLY reads X's memory through Y's
        layout (row-major packed X and Y only), LOGICAL reshapes in row-major logical order
        (any layouts)."""
        op = name or f"reshape_{len(self._nodes)}"
        node = N.Reshape(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={"X": self._check_tensor(input, op, "input")},
            mode=as_enum(ReshapeMode, reshape_mode, f"reshape '{op}'", "reshape_mode"),
        )
        y = self._new_output(f"{op}::Y")
        self._add(node, {"Y": y})
        return y

    def transpose(self, input, permutation, name="", compute_data_type=DataType.NOT_SET):
        op = name or f"transpose_{len(self._nodes)}"
        node = N.Transpose(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={"X": self._check_tensor(input, op, "input")},
            permutation=tuple(as_ints(permutation, f"transpose '{op}'", "permutation")),
        )
        y = self._new_output(f"{op}::Y")
        self._add(node, {"Y": y})
        return y

    def slice(self, input, slices, name="", compute_data_type=DataType.NOT_SET):
        """slices: one Python ``slice`` (unit step) or (start, end) pair per dimension. A
        ``slice`` with negative bounds needs input's dims set first (to resolve them)."""
        op = name or f"slice_{len(self._nodes)}"
        t = self._check_tensor(input, op, "input")
        label = f"slice '{op}'"
        if isinstance(slices, (str, bytes, slice)) or not hasattr(slices, "__iter__"):
            raise BadParamError(
                f"slices must be a sequence of one slice or (start, end) pair "
                f"per dimension, got {slices!r}",
                op=label,
                tensor=t.label(),
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )

        def bound(v, what):
            return None if v is None else as_int(v, label, what, t.label())

        starts, ends = [], []
        for i, s in enumerate(slices):
            if isinstance(s, slice):
                if bound(s.step, f"slice {i} step") not in (None, 1):
                    raise BadParamError(
                        f"slice step {s.step} on axis {i}: only unit steps",
                        op=label,
                        tensor=t.label(),
                        status=Status.NOT_SUPPORTED,
                    )
                start, stop = bound(s.start, f"slice {i} start"), bound(s.stop, f"slice {i} stop")
                dim = t.dim[i] if t.dim is not None and i < len(t.dim) else None
                if dim is not None:
                    start, stop, _ = slice(start, stop).indices(dim)
                elif (start or 0) < 0 or (stop or 0) < 0:
                    raise BadParamError(
                        f"slice {i} {s}: negative bounds count from the end of "
                        "a dim not set yet (set input's dims before slice())",
                        op=label,
                        tensor=t.label(),
                        status=Status.BAD_PARAM_NOT_FINALIZED,
                    )
                starts.append(start or 0)
                ends.append(stop)  # None: to the end (Slice resolves it)
            else:
                if isinstance(s, (str, bytes)) or not hasattr(s, "__len__") or len(s) != 2:
                    step = (
                        " (a step is not supported)"
                        if hasattr(s, "__len__") and len(s) == 3
                        else ""
                    )
                    raise BadParamError(
                        f"slice {i} must be a slice or a (start, end) pair, got {s!r}{step}",
                        op=label,
                        tensor=t.label(),
                        status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
                    )
                starts.append(bound(s[0], f"slice {i} start"))
                ends.append(bound(s[1], f"slice {i} end"))
        node = N.Slice(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={"X": t},
            starts=tuple(starts),
            ends=tuple(ends),
        )
        y = self._new_output(f"{op}::Y")
        self._add(node, {"Y": y})
        return y

    def concatenate(
        self, inputs, axis, in_place_index=None, name="", compute_data_type=DataType.NOT_SET
    ):
        op = name or f"concatenate_{len(self._nodes)}"
        xs = [self._check_tensor(t, op, f"input {i}") for i, t in enumerate(inputs)]
        node = N.Concatenate(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={"X": xs},
            axis=as_int(axis, f"concatenate '{op}'", "axis"),
            in_place_index=None
            if in_place_index is None
            else as_int(in_place_index, f"concatenate '{op}'", "in_place_index"),
        )
        y = self._new_output(f"{op}::Y")
        self._add(node, {"Y": y})
        return y

    # ---- convolution ---------------------------------------------------------------------------
    def _conv_params(self, kind, t, op, padding, pre_padding, post_padding, stride, dilation):
        """Per-axis parameters; an int means every axis. Left unset, they take cuDNN's
        defaults (padding 0, stride 1, dilation 1) once the image's rank is known."""
        nsp = len(t.dim) - 2 if t.dim is not None else None
        label = f"{kind} '{op}'"

        def vec(v, default, name):
            if v is None:
                return (default,) * nsp if nsp is not None else ()
            if not hasattr(v, "__iter__") or isinstance(v, (str, bytes)):
                v = as_int(v, label, name)
                return (v,) * nsp if nsp is not None else (v,)
            return tuple(as_ints(v, label, name))

        if padding is not None and (pre_padding is not None or post_padding is not None):
            raise BadParamError(
                "give padding, or pre_padding and post_padding, not both",
                op=label,
                status=Status.BAD_PARAM,
            )
        pre = vec(
            pre_padding if padding is None else padding,
            0,
            "pre_padding" if padding is None else "padding",
        )
        post = vec(
            post_padding if padding is None else padding,
            0,
            "post_padding" if padding is None else "padding",
        )
        return dict(
            pre_padding=pre,
            post_padding=post,
            stride=vec(stride, 1, "stride"),
            dilation=vec(dilation, 1, "dilation"),
        )

    def _conv_mode(self, mode, label):
        from ..enums import ConvolutionMode

        return as_enum(ConvolutionMode, mode, label, "convolution_mode")

    def _conv(
        self,
        cls,
        op,
        first,
        inputs: dict,
        out_role: str,
        padding,
        pre_padding,
        post_padding,
        stride,
        dilation,
        convolution_mode,
        compute_data_type,
    ):
        label = f"{cls.kind} '{op}'"
        node = cls(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs=inputs,
            convolution_mode=self._conv_mode(
                1 if convolution_mode is None else convolution_mode, label
            ),
            **self._conv_params(
                cls.kind, first, op, padding, pre_padding, post_padding, stride, dilation
            ),
        )
        out = self._new_output(f"{op}::{out_role}")
        self._add(node, {out_role: out})
        return out

    def conv_fprop(
        self,
        image,
        weight,
        padding=None,
        pre_padding=None,
        post_padding=None,
        stride=None,
        dilation=None,
        convolution_mode=None,
        compute_data_type=DataType.NOT_SET,
        name="",
    ):
        """Y [N, K, *out] = conv(image [N, C, *in], weight [K, C/G, *filt])."""
        op = name or f"conv_fprop_{len(self._nodes)}"
        x = self._check_tensor(image, op, "image")
        w = self._check_tensor(weight, op, "weight")
        return self._conv(
            CN.ConvFprop,
            op,
            x,
            {"X": x, "W": w},
            "Y",
            padding,
            pre_padding,
            post_padding,
            stride,
            dilation,
            convolution_mode,
            compute_data_type,
        )

    def conv_dgrad(
        self,
        loss,
        filter,
        padding=None,
        pre_padding=None,
        post_padding=None,
        stride=None,
        dilation=None,
        convolution_mode=None,
        compute_data_type=DataType.NOT_SET,
        name="",
    ):
        """DX = dgrad(loss = DY [N, K, *out], filter [K, C/G, *filt]); set DX's dims."""
        op = name or f"conv_dgrad_{len(self._nodes)}"
        dy = self._check_tensor(loss, op, "loss")
        w = self._check_tensor(filter, op, "filter")
        return self._conv(
            CN.ConvDgrad,
            op,
            dy,
            {"DY": dy, "W": w},
            "DX",
            padding,
            pre_padding,
            post_padding,
            stride,
            dilation,
            convolution_mode,
            compute_data_type,
        )

    def conv_wgrad(
        self,
        image,
        loss,
        padding=None,
        pre_padding=None,
        post_padding=None,
        stride=None,
        dilation=None,
        convolution_mode=None,
        compute_data_type=DataType.NOT_SET,
        name="",
    ):
        """DW = wgrad(image X [N, C, *in], loss DY [N, K, *out]); set DW's dims."""
        op = name or f"conv_wgrad_{len(self._nodes)}"
        x = self._check_tensor(image, op, "image")
        dy = self._check_tensor(loss, op, "loss")
        return self._conv(
            CN.ConvWgrad,
            op,
            x,
            {"X": x, "DY": dy},
            "DW",
            padding,
            pre_padding,
            post_padding,
            stride,
            dilation,
            convolution_mode,
            compute_data_type,
        )

    del _unary, _binary, _backward
