"""The graph's attention methods (``sdpa``, ``sdpa_backward``) with cudnn-frontend's
names, keyword arguments and deprecated aliases; mixed into the graph by ``builders``.

Aliases, as cudnn-frontend resolves them: ``use_causal_mask`` = TOP_LEFT alignment
with right bound 0 (unless a right bound is given); ``use_causal_mask_bottom_right`` =
BOTTOM_RIGHT with right bound 0; ``sliding_window_length`` = the left bound;
``is_inference`` = not ``generate_stats``. Giving an alias and the argument it stands
for with different meanings is an error, not a silent choice.
"""

from __future__ import annotations

from ..enums import AttentionImplementation, DataType, DiagonalAlignment
from ..errors import BadParamError, Status
from . import attention_nodes as AN
from .tensor import as_enum


class AttentionBuilderMixin:
    def _attn_error(self, op, rule, status=Status.BAD_PARAM, tensor=None):
        return BadParamError(rule, op=op, tensor=tensor, status=status)

    def _attn_implementation(self, value, op) -> AttentionImplementation:
        """cudnn-frontend's ``implementation`` as the enum (a member, its value or name)."""
        try:
            if isinstance(value, str):
                return AttentionImplementation[value.upper()]
            return AttentionImplementation(int(value))
        except (KeyError, ValueError, TypeError):
            raise self._attn_error(
                op,
                f"implementation {value!r} is not an attention_implementation "
                f"({', '.join(m.name for m in AttentionImplementation)})",
            ) from None

    def _attn_scale(self, v, op, role="attn_scale"):
        """None (no scaling), a Python number, a CPU one-element torch tensor or a graph
        tensor -> a pass-by-value tensor (or None); ``role`` names it."""
        import torch

        from .tensor import Tensor

        if v is None or isinstance(v, Tensor):
            return None if v is None else self._check_tensor(v, op, role)
        if isinstance(v, torch.Tensor) and v.numel() == 1 and v.device.type == "cpu":
            v = float(v.item())
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return self.tensor(
                dim=[1, 1, 1, 1],
                stride=[1, 1, 1, 1],
                data_type=DataType.FLOAT,
                is_pass_by_value=True,
                name=f"{op}::{role}",
            )._with_value(float(v))
        raise self._attn_error(
            op,
            f"{role} must be a float or a graph tensor, got {type(v).__name__}",
            Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )

    def _attn_common(
        self,
        op,
        ins: dict,
        attn_scale,
        bias,
        use_alibi_mask,
        use_padding_mask,
        seq_len_q,
        seq_len_kv,
        use_causal_mask,
        use_causal_mask_bottom_right,
        sliding_window_length,
        diagonal_alignment,
        left_bound,
        right_bound,
        dropout,
    ) -> dict:
        """Adds the optional inputs to ``ins``; returns the node's attributes."""
        diagonal_alignment = as_enum(
            DiagonalAlignment, diagonal_alignment, op, "diagonal_alignment"
        )
        if use_causal_mask and use_causal_mask_bottom_right:
            raise self._attn_error(
                op, "use_causal_mask and use_causal_mask_bottom_right contradict each other"
            )
        for flag, want in (
            (use_causal_mask, DiagonalAlignment.TOP_LEFT),
            (use_causal_mask_bottom_right, DiagonalAlignment.BOTTOM_RIGHT),
        ):
            if flag:
                if diagonal_alignment != DiagonalAlignment.TOP_LEFT and diagonal_alignment != want:
                    raise self._attn_error(
                        op,
                        f"the deprecated causal flag asks for {want.name} "
                        f"but diagonal_alignment is {diagonal_alignment.name}",
                    )
                diagonal_alignment = want
                right_bound = 0 if right_bound is None else right_bound
        if sliding_window_length is not None:
            if left_bound is not None and left_bound != sliding_window_length:
                raise self._attn_error(
                    op,
                    f"sliding_window_length {sliding_window_length} and "
                    f"diagonal_band_left_bound {left_bound} differ",
                )
            left_bound = sliding_window_length
        scale = self._attn_scale(attn_scale, op)
        if scale is not None:
            ins["ATTN_SCALE"] = scale
        if bias is not None:
            ins["BIAS"] = self._check_tensor(bias, op, "bias")
        for role, t in (("SEQ_LEN_Q", seq_len_q), ("SEQ_LEN_KV", seq_len_kv)):
            if t is not None:
                ins[role] = self._check_tensor(t, op, role.lower())
        p = None
        if dropout is not None:
            if not isinstance(dropout, (tuple, list)) or len(dropout) not in (2, 3):
                raise self._attn_error(
                    op,
                    "dropout must be a tuple (probability, seed, offset)",
                    Status.BAD_PARAM_ATTRIBUTE_TYPE,
                )
            if len(dropout) == 2 and not isinstance(dropout[0], (int, float)):
                # the caller's mask [B, Hq, Sq, Skv] and the kept elements' factor
                ins["DROPOUT_MASK"] = self._check_tensor(dropout[0], op, "dropout mask")
                ins["DROPOUT_SCALE"] = self._attn_scale(dropout[1], op, "dropout_scale")
                if ins["DROPOUT_SCALE"] is None:
                    raise self._attn_error(
                        op, "dropout scale is missing", Status.BAD_PARAM_NULL_POINTER
                    )
                dropout = None
            elif len(dropout) != 3 or isinstance(dropout[0], bool):
                raise self._attn_error(
                    op,
                    "dropout must be a tuple (probability, seed, offset)",
                    Status.BAD_PARAM_ATTRIBUTE_TYPE,
                )
        if dropout is not None:
            p = float(dropout[0])
            ins["SEED"] = self._rng_scalar(dropout[1], op, "SEED")
            ins["OFFSET"] = self._rng_scalar(dropout[2], op, "OFFSET")
        return dict(
            diagonal_alignment=diagonal_alignment,
            diagonal_band_left_bound=left_bound,
            diagonal_band_right_bound=right_bound,
            use_padding_mask=bool(use_padding_mask),
            dropout_probability=p,
            use_alibi_mask=bool(use_alibi_mask),
        )

    def sdpa(
        self,
        q,
        k,
        v,
        attn_scale=None,
        bias=None,
        use_alibi_mask=False,
        use_padding_mask=False,
        seq_len_q=None,
        seq_len_kv=None,
        diagonal_alignment=DiagonalAlignment.TOP_LEFT,
        diagonal_band_left_bound=None,
        diagonal_band_right_bound=None,
        dropout=None,
        generate_stats=None,
        is_inference=None,
        use_causal_mask=False,
        use_causal_mask_bottom_right=False,
        sliding_window_length=None,
        rng_dump=None,
        paged_attention_k_table=None,
        paged_attention_v_table=None,
        paged_attention_max_seq_len_kv=None,
        score_mod=None,
        compute_data_type=DataType.NOT_SET,
        name="",
        block_mask=None,
        implementation=AttentionImplementation.AUTO,
        score_max=None,
        score_sum_exp=None,
        sink_token=None,
        unfuse_fma=False,
    ):
        """[O, Stats] of scaled-dot-product attention (ops/attention.py): q [B, Hq, Sq,
        Dqk], k [B, Hk, Skv, Dqk], v [B, Hv, Skv, Dv] -> O [B, Hq, Sq, Dv] and Stats
        [B, Hq, Sq, 1] float32 (None unless ``generate_stats``; default True).
        ``dropout`` = (probability, seed, offset), seed / offset ints or one-element
        int32 / int64 tensors; seq_len_q / seq_len_kv [B, 1, 1, 1] integers with
        ``use_padding_mask``; bias [B or 1, Hq or 1, Sq, Skv]. ``implementation``: AUTO,
        COMPOSITE and UNIFIED all name the same function, run by the fused attention
        engine. Paged K / V: ``paged_attention_k_table`` / ``_v_table`` [B, 1, pages, 1]
        int32 over K / V containers [blocks, Hk, block_size, D], the logical length
        ``paged_attention_max_seq_len_kv`` (nodes: ``Sdpa``). ``sink_token`` [1, Hq, 1, 1]
        float32: an attention sink; ``score_max`` / ``score_sum_exp`` [B, Hq, Sq, 1]
        float32: tensors receiving each row's score maximum and sum of exponentials
        (ops/attention); ``block_mask`` uint8: a bit per 128 x 128 tile (ops/attention);
        ``score_mod(graph, scores) -> tensor`` builds graph nodes on the scores before the
        masks and softmax (``_score_mod``). NOT_SUPPORTED: ``unfuse_fma``."""
        op = name or f"sdpa_{len(self._nodes)}"
        self._attn_implementation(implementation, op)

        if unfuse_fma:
            raise self._attn_error(
                op, "unfuse_fma (unfused multiply-adds) is not supported", Status.NOT_SUPPORTED
            )
        if (paged_attention_k_table is None) != (paged_attention_v_table is None) or (
            paged_attention_max_seq_len_kv is not None and paged_attention_k_table is None
        ):
            raise self._attn_error(
                op,
                "paged attention needs both paged_attention_k_table and "
                "paged_attention_v_table (and paged_attention_max_seq_len_kv only with them)",
                Status.BAD_PARAM_NULL_POINTER,
            )
        if (
            generate_stats is not None
            and is_inference is not None
            and bool(generate_stats) == bool(is_inference)
        ):
            raise self._attn_error(
                op,
                f"generate_stats={generate_stats} contradicts the "
                f"deprecated is_inference={is_inference}",
            )
        stats = (
            not bool(is_inference)
            if generate_stats is None and is_inference is not None
            else (True if generate_stats is None else bool(generate_stats))
        )
        ins = {
            "Q": self._check_tensor(q, op, "q"),
            "K": self._check_tensor(k, op, "k"),
            "V": self._check_tensor(v, op, "v"),
        }
        attrs = self._attn_common(
            op,
            ins,
            attn_scale,
            bias,
            use_alibi_mask,
            use_padding_mask,
            seq_len_q,
            seq_len_kv,
            use_causal_mask,
            use_causal_mask_bottom_right,
            sliding_window_length,
            diagonal_alignment,
            diagonal_band_left_bound,
            diagonal_band_right_bound,
            dropout,
        )
        if sink_token is not None:
            ins["SINK_TOKEN"] = self._check_tensor(sink_token, op, "sink_token")
        if block_mask is not None:
            ins["BLOCK_MASK"] = self._check_tensor(block_mask, op, "block_mask")
        if paged_attention_k_table is not None:
            ins["PAGE_TABLE_K"] = self._check_tensor(paged_attention_k_table, op, "k_table")
            ins["PAGE_TABLE_V"] = self._check_tensor(paged_attention_v_table, op, "v_table")
        max_kv = paged_attention_max_seq_len_kv
        if score_mod is not None:
            self._score_mod(op, ins, attrs, score_mod, max_kv)
        node = AN.Sdpa(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs=ins,
            generate_stats=stats,
            paged_max_seq_len_kv=None if max_kv is None else int(max_kv),
            **attrs,
        )
        outs = {"O": self._new_output(f"{op}::O")}
        if stats:
            outs["STATS"] = self._new_output(f"{op}::Stats")
        if rng_dump is not None:
            outs["RNG_DUMP"] = self._check_tensor(rng_dump, op, "rng_dump")
        for role, t in (("SCORE_MAX", score_max), ("SCORE_SUM_EXP", score_sum_exp)):
            if t is not None:  # tensors the caller made, as cuDNN's
                outs[role] = self._check_tensor(t, op, role.lower())
        self._add(node, outs)
        return [outs["O"], outs.get("STATS")]

    def _score_mod(self, op, ins: dict, attrs: dict, score_mod, max_kv) -> None:
        """cudnn-frontend's ``score_mod``: ``score_mod(graph, S)`` builds graph nodes on the
        scores S = scale Q K^T (+ bias, + ALiBi), made here by an ``sdpa_scores`` node, and
        returns the tensor the softmax reads (the sdpa's SCORES input); bias and ALiBi
        then belong to S, not to the sdpa."""
        if not callable(score_mod):
            raise self._attn_error(
                op,
                f"score_mod must be callable (graph, scores) -> tensor, got "
                f"{type(score_mod).__name__}",
                Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        roles = ("Q", "K", "PAGE_TABLE_K", "ATTN_SCALE", "BIAS")
        scores = AN.SdpaScores(
            name=f"{op}::scores",
            inputs={r: ins[r] for r in roles if r in ins},
            use_alibi_mask=attrs.pop("use_alibi_mask"),
            paged_max_seq_len_kv=None if max_kv is None else int(max_kv),
        )
        ins.pop("BIAS", None)
        s = self._new_output(f"{op}::S")
        self._add(scores, {"S": s})
        out = score_mod(self, s)
        ins["SCORES"] = self._check_tensor(out, op, "score_mod's result")

    def sdpa_backward(
        self,
        q,
        k,
        v,
        o,
        dO,
        stats,
        attn_scale=None,
        bias=None,
        dBias=None,
        use_alibi_mask=False,
        use_padding_mask=False,
        seq_len_q=None,
        seq_len_kv=None,
        max_total_seq_len_q=None,
        max_total_seq_len_kv=None,
        diagonal_alignment=DiagonalAlignment.TOP_LEFT,
        diagonal_band_left_bound=None,
        diagonal_band_right_bound=None,
        dropout=None,
        use_deterministic_algorithm=False,
        use_causal_mask=False,
        use_causal_mask_bottom_right=False,
        sliding_window_length=None,
        rng_dump=None,
        compute_data_type=DataType.NOT_SET,
        name="",
        score_mod=None,
        score_mod_bprop=None,
        sink_token=None,
        dSink_token=None,
    ):
        """[dQ, dK, dV] from the forward's q, k, v, its output o and Stats and the
        gradient dO [B, Hq, Sq, Dv]; every masking and dropout argument must be the
        forward's. ``dBias`` (a graph tensor, bias's dims unless set) receives the bias
        gradient summed over the axes the bias broadcasts over; ``dSink_token`` the
        gradient of the forward's ``sink_token``; ``max_total_seq_len_q`` / ``_kv`` (bounds
        on ragged tensors' packed rows, which cuDNN sizes its workspace by) are checked
        and need nothing here. NOT_SUPPORTED: ``score_mod`` / ``score_mod_bprop``."""
        op = name or f"sdpa_backward_{len(self._nodes)}"
        if (sink_token is None) != (dSink_token is None):
            raise self._attn_error(
                op,
                "sink_token and dSink_token come together (the backward of a sink is its gradient)",
                Status.BAD_PARAM_NULL_POINTER,
            )
        if (score_mod is None) != (score_mod_bprop is None):
            raise self._attn_error(
                op,
                "score_mod and score_mod_bprop come together in the backward (the second "
                "maps the gradient of the first's result to that of its input)",
                Status.BAD_PARAM_NULL_POINTER,
            )
        if score_mod is not None and dBias is not None:
            raise self._attn_error(
                op, "dBias with a score_mod is not supported", Status.NOT_SUPPORTED
            )
        for what, bound in (
            ("max_total_seq_len_q", max_total_seq_len_q),
            ("max_total_seq_len_kv", max_total_seq_len_kv),
        ):
            # cuDNN sizes its ragged backward's workspace by these bounds on the packed
            # rows; opendnn's kernels need none, so they are checked and kept nowhere
            if bound is not None and (
                not isinstance(bound, int) or isinstance(bound, bool) or bound < 0
            ):
                raise self._attn_error(
                    op, f"{what} {bound!r} is not a non-negative int", Status.BAD_PARAM
                )
        ins = {
            "Q": self._check_tensor(q, op, "q"),
            "K": self._check_tensor(k, op, "k"),
            "V": self._check_tensor(v, op, "v"),
            "O": self._check_tensor(o, op, "o"),
            "DO": self._check_tensor(dO, op, "dO"),
            "STATS": self._check_tensor(stats, op, "stats"),
        }
        attrs = self._attn_common(
            op,
            ins,
            attn_scale,
            bias,
            use_alibi_mask,
            use_padding_mask,
            seq_len_q,
            seq_len_kv,
            use_causal_mask,
            use_causal_mask_bottom_right,
            sliding_window_length,
            diagonal_alignment,
            diagonal_band_left_bound,
            diagonal_band_right_bound,
            dropout,
        )
        if score_mod is not None:  # S' = score_mod(S), as the forward's
            self._score_mod(op, ins, attrs, score_mod, None)
        node = AN.SdpaBackward(
            name=op,
            compute_data_type=self._ctype(compute_data_type, op),
            inputs=ins,
            use_deterministic_algorithm=bool(use_deterministic_algorithm),
            **attrs,
        )
        roles = (("DV", "dV"),) if score_mod else (("DQ", "dQ"), ("DK", "dK"), ("DV", "dV"))
        outs = {r: self._new_output(f"{op}::{nm}") for r, nm in roles}
        if score_mod is not None:
            outs["DSCORES"] = self._new_output(f"{op}::dS'")
        if dBias is not None:
            outs["DBIAS"] = self._check_tensor(dBias, op, "dBias")
        if rng_dump is not None:
            outs["RNG_DUMP"] = self._check_tensor(rng_dump, op, "rng_dump")
        if sink_token is not None:
            ins["SINK_TOKEN"] = self._check_tensor(sink_token, op, "sink_token")
            outs["DSINK_TOKEN"] = self._check_tensor(dSink_token, op, "dSink_token")
        self._add(node, outs)
        if score_mod is not None:  # dS = score_mod_bprop(dS'), then dQ, dK from dS
            ds = score_mod_bprop(self, outs["DSCORES"])
            grads = {r: self._new_output(f"{op}::{nm}") for r, nm in (("DQ", "dQ"), ("DK", "dK"))}
            g_ins = {
                "DS": self._check_tensor(ds, op, "score_mod_bprop's result"),
                "Q": ins["Q"],
                "K": ins["K"],
            }
            if "ATTN_SCALE" in ins:
                g_ins["ATTN_SCALE"] = ins["ATTN_SCALE"]
            self._add(AN.SdpaScoresBackward(name=f"{op}::scores_backward", inputs=g_ins), grads)
            return [grads["DQ"], grads["DK"], outs["DV"]]
        return [outs["DQ"], outs["DK"], outs["DV"]]
