"""``MultiheadAttention``: PyTorch's module, its forward on opendnn's linear and
scaled-dot-product attention.

With E = embed_dim, H = num_heads, D = E / H, N batch, L target and S source length::

    q = query W_q^T + b_q,  k = key W_k^T + b_k,  v = value W_v^T + b_v    (OF.linear)
    o_h = softmax(q_h k_h^T / sqrt(D) + mask) v_h  per head h               (OF.sdpa)
    out = concat_h(o_h) W_o^T + b_o                                          (OF.linear)

Self-attention (``query is key is value`` with the packed ``in_proj_weight``) runs one
projection GEMM of width 3E and views q, k, v out of it. Boolean masks (True = masked
out, PyTorch's MHA convention) become additive -inf masks as in PyTorch; ``attn_mask``
(L, S) or (N*H, L, S) and ``key_padding_mask`` (N, S) are merged into one mask
broadcastable to (N, H, L, S). ``is_causal`` is PyTorch's hint: it needs ``attn_mask``,
and without ``key_padding_mask`` the causal flag goes to attention instead of the mask.

PyTorch's forward runs instead (logged once per reason, counted in
``enable.fallbacks()``) for what scaled-dot-product attention cannot give:
``need_weights=True`` (PyTorch's default! it returns the attention weights matrix, which
the fused kernel never forms; pass ``need_weights=False``), ``add_bias_kv``,
``add_zero_attn`` and nested-tensor inputs; and, as for every drop-in, when opendnn
declines a projection or the attention (GraphNotSupportedError).
"""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from . import functional as OF
from .enable import attempt, note_fallback

__all__ = ["MultiheadAttention"]


class MultiheadAttention(nn.MultiheadAttention):
    """opendnn's drop-in for ``torch.nn.MultiheadAttention``: the same constructor,
    parameters and state_dict; with ``need_weights=False`` the forward runs on opendnn
    (see the module docstring for when PyTorch's runs). Returns ``(output, None)`` then."""

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        def torch_forward():
            return super(MultiheadAttention, self).forward(
                query,
                key,
                value,
                key_padding_mask=key_padding_mask,
                need_weights=need_weights,
                attn_mask=attn_mask,
                average_attn_weights=average_attn_weights,
                is_causal=is_causal,
            )

        why = self._why_not_opendnn(query, key, value, need_weights)
        if why:
            note_fallback("MultiheadAttention", why)
            return torch_forward()
        return attempt(
            "MultiheadAttention",
            self._opendnn_forward,
            (
                query,
                key,
                value,
                key_padding_mask,
                attn_mask,
                is_causal,
                self.training,
                self.dropout,
            ),
            None,
            torch_forward,
        )

    def _why_not_opendnn(self, query, key, value, need_weights) -> str:
        if need_weights:
            return (
                "need_weights=True returns the attention weights, which fused "
                "attention does not form (pass need_weights=False)"
            )
        if self.bias_k is not None or self.bias_v is not None:
            return "add_bias_kv=True"
        if self.add_zero_attn:
            return "add_zero_attn=True"
        if query.is_nested or key.is_nested or value.is_nested:
            return "nested tensor inputs"
        return ""

    def _opendnn_forward(
        self, query, key, value, key_padding_mask, attn_mask, is_causal, training, dropout
    ):
        """query (L, N, E) / (N, L, E) if batch_first / (L, E) unbatched; key and value
        with S for L (and kdim / vdim for E). Returns (output like query, None)."""
        is_batched = F._mha_shape_check(
            query, key, value, key_padding_mask, attn_mask, self.num_heads
        )
        self_attention = query is key and key is value
        if not is_batched:  # as a batch of one, batch first
            query, key, value = (t.unsqueeze(0) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        batch_first = self.batch_first or not is_batched
        n, length = (
            (query.shape[0], query.shape[1]) if batch_first else (query.shape[1], query.shape[0])
        )
        source = key.shape[1] if batch_first else key.shape[0]

        q, k, v = self._project(query, key, value, self_attention)
        mask, causal = self._mask(
            key_padding_mask, attn_mask, is_causal, query.dtype, n, length, source
        )
        heads = (0, 2, 1, 3) if batch_first else (1, 2, 0, 3)  # -> (N, H, L, D)
        q, k, v = (
            t.unflatten(-1, (self.num_heads, self.head_dim)).permute(heads) for t in (q, k, v)
        )
        o = OF.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout if training else 0.0, is_causal=causal
        )
        if batch_first:
            o = o.permute(0, 2, 1, 3).reshape(n, length, self.embed_dim)
        else:
            o = o.permute(2, 0, 1, 3).reshape(length, n, self.embed_dim)
        out = OF.linear(o, self.out_proj.weight, self.out_proj.bias)
        return (out if is_batched else out.squeeze(0)), None

    def _project(self, query, key, value, self_attention):
        """The in-projections, each (.., .., E) in its input's layout."""
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
        if self._qkv_same_embed_dim:
            if self_attention:
                return OF.linear(query, self.in_proj_weight, b).chunk(3, dim=-1)
            wq, wk, wv = self.in_proj_weight.chunk(3)
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return OF.linear(query, wq, bq), OF.linear(key, wk, bk), OF.linear(value, wv, bv)

    def _mask(self, key_padding_mask, attn_mask, is_causal, dtype, n, length, source):
        """PyTorch's mask rules: the additive mask (broadcastable to (N, H, L, S)) or None,
        and the causal flag for attention."""
        key_padding_mask = F._canonical_mask(
            mask=key_padding_mask,
            mask_name="key_padding_mask",
            other_type=F._none_or_dtype(attn_mask),
            other_name="attn_mask",
            target_type=dtype,
        )
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "Need attn_mask if specifying the is_causal hint. You may "
                "use the Transformer module method "
                "`generate_square_subsequent_mask` to create this mask."
            )
        if is_causal and key_padding_mask is None:
            return None, True
        attn_mask = F._canonical_mask(
            mask=attn_mask,
            mask_name="attn_mask",
            other_type=None,
            other_name="",
            target_type=dtype,
            check_other=False,
        )
        if attn_mask is not None:
            want = (
                (length, source) if attn_mask.dim() == 2 else (n * self.num_heads, length, source)
            )
            if tuple(attn_mask.shape) != want:
                raise RuntimeError(
                    f"The shape of the {attn_mask.dim()}D attn_mask is "
                    f"{attn_mask.shape}, but should be {want}."
                )
            attn_mask = attn_mask.view(
                -1, self.num_heads if attn_mask.dim() == 3 else 1, length, source
            )
        if key_padding_mask is not None:
            kpm = key_padding_mask.view(n, 1, 1, source)
            attn_mask = kpm if attn_mask is None else attn_mask + kpm
        return attn_mask, False
