"""The graph's pooling (resample), LRN / divisive normalization, dropout and
mixture-of-experts grouped matmul methods; mixed into the graph by ``builders``."""

from __future__ import annotations

from ..enums import DataType, MoeGroupedMatmulMode
from ..errors import BadParamError, Status
from . import dropout_nodes as DN
from . import lrn_nodes as LN
from . import moe_nodes as MN
from . import pool_nodes as PN
from .tensor import as_enum, as_float, as_int, as_ints


class OpsBuilderMixin:
    # ---- pooling (resample) -----------------------------------------------------------------
    def _pool_attrs(self, op, mode, window, stride, padding, pre_padding, post_padding):
        from ..enums import ResampleMode

        mode = as_enum(ResampleMode, mode, op, "mode")
        if padding is not None and (pre_padding is not None or post_padding is not None):
            raise BadParamError(
                "give padding, or pre_padding and post_padding, not both",
                op=op,
                status=Status.BAD_PARAM,
            )

        def vec(v, name):
            if v is None:
                return ()
            if not hasattr(v, "__iter__") or isinstance(v, (str, bytes)):
                return (as_int(v, op, name),)
            return tuple(as_ints(v, op, name))

        pre = vec(
            pre_padding if padding is None else padding,
            "pre_padding" if padding is None else "padding",
        )
        post = vec(
            post_padding if padding is None else padding,
            "post_padding" if padding is None else "padding",
        )
        return dict(
            resample_mode=mode,
            window=vec(window, "window"),
            stride=vec(stride, "stride"),
            pre_padding=pre,
            post_padding=post,
        )

    def resample(
        self,
        input,
        mode,
        window,
        stride=None,
        padding=None,
        pre_padding=None,
        post_padding=None,
        generate_index=False,
        nan_propagation=True,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """[Y, Index] = pool(input [N, C, *in]) -> Y [N, C, *out]; Index (MAXPOOL with
        ``generate_index``: each output's window offset of its maximum, int8 unless set)
        is None otherwise. An int window / stride / padding stands for every axis."""
        op = name or f"resample_{len(self._nodes)}"
        node = PN.Resample(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={"X": self._check_tensor(input, op, "input")},
            generate_index=bool(generate_index),
            nan_propagation=bool(nan_propagation),
            **self._pool_attrs(
                f"resample '{op}'", mode, window, stride, padding, pre_padding, post_padding
            ),
        )
        y = self._new_output(f"{op}::Y")
        outs = {"Y": y}
        index = None
        if node.is_max and generate_index:
            index = outs["Index"] = self._new_output(f"{op}::Index")
        self._add(node, outs)
        return [y, index]

    def resample_backward(
        self,
        loss,
        mode,
        window,
        stride=None,
        padding=None,
        pre_padding=None,
        post_padding=None,
        index=None,
        input=None,
        output=None,
        nan_propagation=True,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """DX [N, C, *in] from ``loss`` (DY [N, C, *out]). MAXPOOL needs the forward's
        ``index`` or its ``input`` X (``output`` Y is optional; the argmax recomputed from
        X follows ``nan_propagation`` as the forward did); the average modes need neither.
        DX takes X's dims, or must be set when X is not given."""
        op = name or f"resample_backward_{len(self._nodes)}"
        ins = {"DY": self._check_tensor(loss, op, "loss")}
        for role, t, arg in (
            ("Index", index, "index"),
            ("X", input, "input"),
            ("Y", output, "output"),
        ):
            if t is not None:
                ins[role] = self._check_tensor(t, op, arg)
        node = PN.ResampleBackward(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs=ins,
            nan_propagation=bool(nan_propagation),
            **self._pool_attrs(
                f"resample_backward '{op}'",
                mode,
                window,
                stride,
                padding,
                pre_padding,
                post_padding,
            ),
        )
        dx = self._new_output(f"{op}::DX")
        self._add(node, {"DX": dx})
        return dx

    # ---- lrn, divisive normalization, dropout ----------------------------------------------
    def _lrn_node(
        self, cls, op, ins: dict, outs: tuple, lrn_n, lrn_alpha, lrn_beta, lrn_k, compute_data_type
    ):
        ins = {r: self._check_tensor(t, op, r) for r, t in ins.items()}
        label = f"{cls.kind} '{op}'"
        node = cls(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs=ins,
            lrn_n=as_int(lrn_n, label, "lrn_n"),
            lrn_alpha=as_float(lrn_alpha, label, "lrn_alpha"),
            lrn_beta=as_float(lrn_beta, label, "lrn_beta"),
            lrn_k=as_float(lrn_k, label, "lrn_k"),
        )
        made = {r: self._new_output(f"{op}::{r}") for r in outs}
        self._add(node, made)
        return made[outs[0]] if len(outs) == 1 else [made[r] for r in outs]

    def lrn(
        self,
        input,
        lrn_n=5,
        lrn_alpha=1e-4,
        lrn_beta=0.75,
        lrn_k=2.0,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """Y = input / (k + alpha/n sum_{n channels} input^2)^beta (cross-channel LRN)."""
        op = name or f"lrn_{len(self._nodes)}"
        return self._lrn_node(
            LN.Lrn, op, {"X": input}, ("Y",), lrn_n, lrn_alpha, lrn_beta, lrn_k, compute_data_type
        )

    def lrn_backward(
        self,
        loss,
        input,
        output,
        lrn_n=5,
        lrn_alpha=1e-4,
        lrn_beta=0.75,
        lrn_k=2.0,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """DX of cross-channel LRN from loss (DY), the forward's input X and output Y."""
        op = name or f"lrn_backward_{len(self._nodes)}"
        return self._lrn_node(
            LN.LrnBackward,
            op,
            {"DY": loss, "X": input, "Y": output},
            ("DX",),
            lrn_n,
            lrn_alpha,
            lrn_beta,
            lrn_k,
            compute_data_type,
        )

    def divisive_normalization(
        self,
        input,
        means,
        lrn_n=5,
        lrn_alpha=1e-4,
        lrn_beta=0.75,
        lrn_k=2.0,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """Y = (input - means) / (k + alpha/n^s sum_{spatial box} (input - means)^2)^beta."""
        op = name or f"div_norm_{len(self._nodes)}"
        return self._lrn_node(
            LN.DivNorm,
            op,
            {"X": input, "MEANS": means},
            ("Y",),
            lrn_n,
            lrn_alpha,
            lrn_beta,
            lrn_k,
            compute_data_type,
        )

    def divisive_normalization_backward(
        self,
        loss,
        input,
        means,
        lrn_n=5,
        lrn_alpha=1e-4,
        lrn_beta=0.75,
        lrn_k=2.0,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """[DX, DMEANS] of divisive normalization from loss (DY), input and means."""
        op = name or f"div_norm_backward_{len(self._nodes)}"
        return self._lrn_node(
            LN.DivNormBackward,
            op,
            {"DY": loss, "X": input, "MEANS": means},
            ("DX", "DMEANS"),
            lrn_n,
            lrn_alpha,
            lrn_beta,
            lrn_k,
            compute_data_type,
        )

    def _rng_scalar(self, v, op, role):
        if isinstance(v, int) and not isinstance(v, bool):
            return self.tensor(
                dim=[1],
                stride=[1],
                data_type=DataType.INT64,
                is_pass_by_value=True,
                name=f"{op}::{role}",
            )._with_value(v)
        return self._check_tensor(v, op, role)

    def dropout(
        self,
        input,
        probability,
        seed,
        offset=0,
        generate_mask=True,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """[Y, MASK]: Y = input * MASK / (1 - probability); seed and offset are ints
        (pass-by-value) or one-element int64 tensors. MASK (0/1, input's type unless set)
        is None with ``generate_mask=False``."""
        op = name or f"dropout_{len(self._nodes)}"
        node = DN.Dropout(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={
                "X": self._check_tensor(input, op, "input"),
                "SEED": self._rng_scalar(seed, op, "SEED"),
                "OFFSET": self._rng_scalar(offset, op, "OFFSET"),
            },
            probability=as_float(probability, f"dropout '{op}'", "probability"),
        )
        y = self._new_output(f"{op}::Y")
        mask = self._new_output(f"{op}::MASK") if generate_mask else None
        self._add(node, {"Y": y, "MASK": mask} if generate_mask else {"Y": y})
        return [y, mask]

    def dropout_backward(
        self, loss, probability, seed, offset=0, name="", compute_data_type=DataType.NOT_SET
    ):
        """DX = loss * MASK / (1 - probability), MASK regenerated from (seed, offset)."""
        op = name or f"dropout_backward_{len(self._nodes)}"
        node = DN.DropoutBackward(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={
                "DY": self._check_tensor(loss, op, "loss"),
                "SEED": self._rng_scalar(seed, op, "SEED"),
                "OFFSET": self._rng_scalar(offset, op, "OFFSET"),
            },
            probability=as_float(probability, f"dropout_backward '{op}'", "probability"),
        )
        dx = self._new_output(f"{op}::DX")
        self._add(node, {"DX": dx})
        return dx

    # ---- mixture-of-experts grouped matmul ------------------------------------------------
    def moe_grouped_matmul(
        self,
        token,
        weight,
        first_token_offset,
        token_index=None,
        token_ks=None,
        mode=MoeGroupedMatmulMode.NONE,
        compute_data_type=DataType.FLOAT,
        top_k=0,
        name="",
    ):
        """OUTPUT [1, M_out, N]: cuDNN's MoE grouped matmul (cudnn-frontend's signature).
        ``token`` [1, M, K] (GATHER: [1, S, K]), ``weight`` [E, K, N] (any strides),
        ``first_token_offset`` [B * E, 1, 1] int32: group g owns the routed rows from its
        offset to the next group's (the last to the end) and multiplies them by expert
        g % E. GATHER reads Token[token_index[r]] for routed row r ([1, R, 1] int32; M_out
        = R); SCATTER writes row r to token_index[r] * top_k + token_ks[r] (both [1, M, 1]
        int32, ``top_k`` >= 1). A ``token_index`` / ``token_ks`` the mode does not read is
        left out of the node (cuDNN sets only the mode's tensors). OUTPUT is row-major
        unless set; rows no group covers are not written (``ops/moe.py``)."""
        op = name or f"moe_grouped_matmul_{len(self._nodes)}"
        label = f"moe_grouped_matmul '{op}'"
        mode = as_enum(MoeGroupedMatmulMode, mode, label, "mode")
        ins = {
            "TOKEN": self._check_tensor(token, op, "token"),
            "WEIGHT": self._check_tensor(weight, op, "weight"),
            MN.OFFSET: self._check_tensor(first_token_offset, op, "first_token_offset"),
        }
        used = {
            MoeGroupedMatmulMode.NONE: (),
            MoeGroupedMatmulMode.GATHER: ("token_index",),
            MoeGroupedMatmulMode.SCATTER: ("token_index", "token_ks"),
        }[mode]
        for arg, t in (("token_index", token_index), ("token_ks", token_ks)):
            if t is not None and arg in used:
                ins[arg.upper()] = self._check_tensor(t, op, arg)
        node = MN.MoeGroupedMatmul(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs=ins,
            moe_mode=mode,
            top_k=as_int(top_k, label, "top_k"),
        )
        out = self._new_output(f"{op}::OUTPUT")
        self._add(node, {"OUTPUT": out})
        return out

    def moe_grouped_matmul_bwd(
        self, doutput, token, first_token_offset, compute_data_type=DataType.FLOAT, name=""
    ):
        """DWEIGHT [G, K, N] (column-major in K x N unless set): for each group g of
        ``first_token_offset`` ([G, 1, 1] int32), token[rows of g]^T @ doutput[rows of g]
        with ``doutput`` [1, M, N] and ``token`` [1, M, K]; zeros for a group without
        rows (cudnn-frontend's signature)."""
        op = name or f"moe_grouped_matmul_bwd_{len(self._nodes)}"
        node = MN.MoeGroupedMatmulBwd(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs={
                "DOUTPUT": self._check_tensor(doutput, op, "doutput"),
                "TOKEN": self._check_tensor(token, op, "token"),
                MN.OFFSET: self._check_tensor(first_token_offset, op, "first_token_offset"),
            },
        )
        dw = self._new_output(f"{op}::DWEIGHT")
        self._add(node, {"DWEIGHT": dw})
        return dw
