"""The graph's normalization methods (batch norm; layer, RMS, instance and group norm),
with cudnn-frontend's names and keyword arguments; mixed into the graph by ``builders``."""

from __future__ import annotations

from ..enums import DataType
from ..errors import BadParamError, GraphNotSupportedError, Status
from . import batchnorm_nodes as BN
from . import norm_nodes as NN
from .tensor import as_enum, as_int


class NormBuilderMixin:
    # ---- batch norm (engines/batchnorm) ---------------------------------------------------
    def _bn_scalar(self, v, op, role):
        """epsilon / momentum: a graph tensor, a Python number or a CPU one-element torch
        tensor (both become pass-by-value scalars)."""
        import torch

        from .tensor import Tensor

        if isinstance(v, Tensor):
            return self._check_tensor(v, op, role)
        if isinstance(v, torch.Tensor):
            if v.numel() != 1 or v.device.type != "cpu":
                raise BadParamError(
                    f"{role} must be a graph tensor, a number or a CPU "
                    f"one-element tensor (got {v.numel()} elements on "
                    f"{v.device})",
                    op=op,
                    status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
                )
            v = float(v.item())
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return self._coerce(float(v), op).set_name(f"{op}::{role}")
        raise BadParamError(
            f"{role} must be a graph tensor or a number, got {type(v).__name__}",
            op=op,
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )

    def batchnorm(
        self,
        input,
        scale,
        bias,
        in_running_mean=None,
        in_running_var=None,
        epsilon=1e-5,
        momentum=None,
        peer_stats=(),
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """Training batch norm: [Y, MEAN, INV_VARIANCE, NEXT_RUNNING_MEAN, NEXT_RUNNING_VAR]
        (the running outputs are None without running inputs). Statistics have scale's
        dims: [1, C, 1, ...] (spatial) or [1, C, H, W, ...] (per activation)."""
        op = name or f"batchnorm_{len(self._nodes)}"
        if peer_stats:
            raise BadParamError(
                "peer_stats (statistics shared across GPUs) are not supported",
                op=op,
                status=Status.NOT_SUPPORTED,
            )
        running = (in_running_mean is not None, in_running_var is not None)
        if running[0] != running[1]:
            raise BadParamError(
                "give both in_running_mean and in_running_var, or neither",
                op=op,
                status=Status.BAD_PARAM,
            )
        if running[0] and momentum is None:
            raise BadParamError(
                "running statistics need a momentum", op=op, status=Status.BAD_PARAM
            )
        ins = {
            "X": self._check_tensor(input, op, "input"),
            "SCALE": self._check_tensor(scale, op, "scale"),
            "BIAS": self._check_tensor(bias, op, "bias"),
            "EPSILON": self._bn_scalar(epsilon, op, "epsilon"),
        }
        outs = {r: self._new_output(f"{op}::{r}") for r in ("Y", "MEAN", "INV_VARIANCE")}
        if running[0]:
            ins["PREV_RUNNING_MEAN"] = self._check_tensor(in_running_mean, op, "in_running_mean")
            ins["PREV_RUNNING_VAR"] = self._check_tensor(in_running_var, op, "in_running_var")
            ins["MOMENTUM"] = self._bn_scalar(momentum, op, "momentum")
            for r in ("NEXT_RUNNING_MEAN", "NEXT_RUNNING_VAR"):
                outs[r] = self._new_output(f"{op}::{r}")
        node = BN.BatchNorm(
            name=op, compute_data_type=self._ctype(compute_data_type, op), inputs=ins
        )
        self._add(node, outs)
        return [
            outs["Y"],
            outs["MEAN"],
            outs["INV_VARIANCE"],
            outs.get("NEXT_RUNNING_MEAN"),
            outs.get("NEXT_RUNNING_VAR"),
        ]

    def batchnorm_inference(
        self, input, mean, inv_variance, scale, bias, name="", compute_data_type=DataType.NOT_SET
    ):
        """Y = scale * (input - mean) * inv_variance + bias."""
        op = name or f"batchnorm_inference_{len(self._nodes)}"
        ins = {
            "X": self._check_tensor(input, op, "input"),
            "MEAN": self._check_tensor(mean, op, "mean"),
            "INV_VARIANCE": self._check_tensor(inv_variance, op, "inv_variance"),
            "SCALE": self._check_tensor(scale, op, "scale"),
            "BIAS": self._check_tensor(bias, op, "bias"),
        }
        node = BN.BatchNormInference(
            name=op, compute_data_type=self._ctype(compute_data_type, op), inputs=ins
        )
        y = self._new_output(f"{op}::Y")
        self._add(node, {"Y": y})
        return y

    def batchnorm_backward(
        self,
        grad,
        input,
        scale,
        mean,
        inv_variance,
        peer_stats=(),
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """[DX, DSCALE, DBIAS] from grad (DY), the forward's input, scale and the saved
        mean and inv_variance."""
        op = name or f"batchnorm_backward_{len(self._nodes)}"
        if peer_stats:
            raise BadParamError(
                "peer_stats (statistics shared across GPUs) are not supported",
                op=op,
                status=Status.NOT_SUPPORTED,
            )
        ins = {
            "DY": self._check_tensor(grad, op, "grad"),
            "X": self._check_tensor(input, op, "input"),
            "SCALE": self._check_tensor(scale, op, "scale"),
            "MEAN": self._check_tensor(mean, op, "mean"),
            "INV_VARIANCE": self._check_tensor(inv_variance, op, "inv_variance"),
        }
        node = BN.BatchNormBackward(
            name=op, compute_data_type=self._ctype(compute_data_type, op), inputs=ins
        )
        outs = {r: self._new_output(f"{op}::{r}") for r in ("DX", "DSCALE", "DBIAS")}
        self._add(node, outs)
        return [outs["DX"], outs["DSCALE"], outs["DBIAS"]]

    # ---- normalization (layer, RMS, instance, group norm; see ops/norm.py) ------------------
    def _norm_forward(
        self, cls, phase, input, scale, bias, epsilon, name, compute_data_type, **attrs
    ):
        from ..enums import NormForwardPhase

        op = name or f"{cls.kind}_{len(self._nodes)}"
        phase = as_enum(NormForwardPhase, phase, f"{cls.kind} '{op}'", "norm_forward_phase")
        training = phase == NormForwardPhase.TRAINING
        if epsilon is None:
            raise BadParamError(
                "needs an epsilon (a float or a pass-by-value tensor)",
                op=op,
                status=Status.BAD_PARAM_NULL_POINTER,
            )
        if hasattr(epsilon, "shape") and not hasattr(epsilon, "_graph"):  # a torch tensor
            epsilon = self.tensor_like(epsilon, name=f"{op}::epsilon")
        eps = self._check_tensor(self._coerce(epsilon, op), op, "epsilon")
        if eps.name == f"{op}::scalar":
            eps.set_name(f"{op}::epsilon")
        if eps.dim is not None and len(eps.dim) and all(d == 1 for d in eps.dim):
            eps.set_is_pass_by_value(True)  # a [1, 1, 1, 1] CPU tensor: a host scalar
        ins = {
            "X": self._check_tensor(input, op, "input"),
            "SCALE": self._check_tensor(scale, op, "scale"),
            "EPSILON": eps,
        }
        if bias is not None:
            ins["BIAS"] = self._check_tensor(bias, op, "bias")
        node = cls(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs=ins,
            training=training,
            **attrs,
        )
        outs = {"Y": self._new_output(f"{op}::Y")}
        if training:
            if cls.NORM != "rms":
                outs["MEAN"] = self._new_output(f"{op}::MEAN")
            outs["INV_VARIANCE"] = self._new_output(f"{op}::INV_VARIANCE")
        self._add(node, outs)
        return outs

    def _norm_backward(
        self,
        cls,
        grad,
        input,
        scale,
        mean,
        inv_variance,
        has_dbias,
        name,
        compute_data_type,
        **attrs,
    ):
        op = name or f"{cls.kind}_{len(self._nodes)}"
        ins = {
            "DY": self._check_tensor(grad, op, "grad"),
            "X": self._check_tensor(input, op, "input"),
            "SCALE": self._check_tensor(scale, op, "scale"),
            "INV_VARIANCE": self._check_tensor(inv_variance, op, "inv_variance"),
        }
        if mean is not None:
            ins["MEAN"] = self._check_tensor(mean, op, "mean")
        elif cls.NORM != "rms":
            raise BadParamError(
                "needs the forward's mean", op=op, status=Status.BAD_PARAM_NULL_POINTER
            )
        node = cls(
            name=op, compute_data_type=self._ctype(compute_data_type, op), inputs=ins, **attrs
        )
        outs = {"DX": self._new_output(f"{op}::DX"), "DSCALE": self._new_output(f"{op}::DSCALE")}
        if has_dbias:
            outs["DBIAS"] = self._new_output(f"{op}::DBIAS")
        self._add(node, outs)
        return [outs["DX"], outs["DSCALE"], outs.get("DBIAS")]

    def layernorm(
        self,
        norm_forward_phase,
        input,
        scale,
        bias,
        epsilon,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """[Y, MEAN, INV_VARIANCE] (the last two None at INFERENCE): normalized over the
        axes where scale's dim is not 1."""
        o = self._norm_forward(
            NN.LayerNorm, norm_forward_phase, input, scale, bias, epsilon, name, compute_data_type
        )
        return [o["Y"], o.get("MEAN"), o.get("INV_VARIANCE")]

    def layernorm_backward(
        self, grad, input, scale, mean, inv_variance, name="", compute_data_type=DataType.NOT_SET
    ):
        """[DX, DSCALE, DBIAS]."""
        return self._norm_backward(
            NN.LayerNormBackward,
            grad,
            input,
            scale,
            mean,
            inv_variance,
            True,
            name,
            compute_data_type,
        )

    def rmsnorm(
        self,
        norm_forward_phase,
        input,
        scale,
        bias=None,
        epsilon=None,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """[Y, INV_VARIANCE] (None at INFERENCE); bias optional."""
        o = self._norm_forward(
            NN.RMSNorm, norm_forward_phase, input, scale, bias, epsilon, name, compute_data_type
        )
        return [o["Y"], o.get("INV_VARIANCE")]

    def rmsnorm_backward(
        self,
        grad,
        input,
        scale,
        inv_variance,
        has_dbias=False,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """[DX, DSCALE, DBIAS or None]."""
        return self._norm_backward(
            NN.RMSNormBackward,
            grad,
            input,
            scale,
            None,
            inv_variance,
            has_dbias,
            name,
            compute_data_type,
        )

    def instancenorm(
        self,
        norm_forward_phase,
        input,
        scale,
        bias,
        epsilon,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """[Y, MEAN, INV_VARIANCE]: each (n, c) over the spatial axes; scale [1, C, 1, ...]."""
        o = self._norm_forward(
            NN.InstanceNorm,
            norm_forward_phase,
            input,
            scale,
            bias,
            epsilon,
            name,
            compute_data_type,
        )
        return [o["Y"], o.get("MEAN"), o.get("INV_VARIANCE")]

    def instancenorm_backward(
        self,
        grad,
        input,
        scale,
        mean=None,
        inv_variance=None,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """[DX, DSCALE, DBIAS] from the saved mean and inv_variance, which cudnn-frontend
        lets code leave out; recomputing them would need the forward's epsilon, which
        the backward does not take, so leaving them out is NOT_SUPPORTED."""
        if mean is None or inv_variance is None:
            raise GraphNotSupportedError(
                "instancenorm_backward without the saved mean and inv_variance is not "
                "supported (recomputing them needs the forward's epsilon)",
                op=name or f"instancenorm_backward_{len(self._nodes)}",
                status=Status.NOT_SUPPORTED,
            )
        return self._norm_backward(
            NN.InstanceNormBackward,
            grad,
            input,
            scale,
            mean,
            inv_variance,
            True,
            name,
            compute_data_type,
        )

    def groupnorm(
        self,
        norm_forward_phase,
        input,
        scale,
        bias,
        epsilon,
        groups,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        """[Y, MEAN, INV_VARIANCE]: each (n, group) over (C/groups, spatial); per-channel
        scale and bias [1, C, 1, ...]; statistics [N, groups, 1, ...]."""
        o = self._norm_forward(
            NN.GroupNorm,
            norm_forward_phase,
            input,
            scale,
            bias,
            epsilon,
            name,
            compute_data_type,
            groups=as_int(groups, f"groupnorm '{name}'", "groups"),
        )
        return [o["Y"], o.get("MEAN"), o.get("INV_VARIANCE")]

    def groupnorm_backward(
        self,
        grad,
        input,
        scale,
        mean,
        inv_variance,
        groups,
        name="",
        compute_data_type=DataType.NOT_SET,
    ):
        return self._norm_backward(
            NN.GroupNormBackward,
            grad,
            input,
            scale,
            mean,
            inv_variance,
            True,
            name,
            compute_data_type,
            groups=as_int(groups, f"groupnorm_backward '{name}'", "groups"),
        )
