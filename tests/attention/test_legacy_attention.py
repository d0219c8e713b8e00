"""The descriptor API's multi-head attention (forward, backward data, backward weights)
against a float64 PyTorch model written here (linear projections per head, explicit
attention with cuDNN's window and key lengths, output projection, residuals): with and
without projections and their biases, residuals, unequal q / k / v and projection sizes,
several heads, beams (QUERYMAP_ALL_TO_ONE and ONE_TO_ONE), variable sequence lengths,
windows (full, causal, banded, arbitrary, empty rows), axis orders, padding fill,
inference by time step and WgradMode ADD. Outputs are NaN-poisoned first."""

import dataclasses
import math

import pytest
import torch
from _util import assert_close

import opendnn.legacy as cudnn
from opendnn.ops.attention import dropout_keep
from opendnn.ops.dropout import mask as dropout_mask

AX = cudnn.SeqDataAxis
WK = cudnn.MultiHeadAttnWeightKind
QMAP = cudnn.AttnQueryMap
CANON = {AX.BATCH: 0, AX.BEAM: 1, AX.TIME: 2, AX.VECT: 3}  # canonical [N, M, T, V]


@dataclasses.dataclass
class Case:
    heads: int = 2
    n: int = 2
    m: int = 1
    t_q: int = 3
    t_kv: int = 4
    q_size: int = 5
    k_size: int = 6
    v_size: int = 7
    q_proj: int = 8
    k_proj: int = 8
    v_proj: int = 8
    o_proj: int = 5
    biases: bool = False
    one_to_one: bool = False
    residual: bool = False
    window: str = "full"  # full, causal, band, random
    lens: str = "full"  # full, random
    axes: tuple = (AX.BATCH, AX.BEAM, AX.TIME, AX.VECT)
    sm_scaler: float = 0.7
    fill: float | None = None
    attn_drop: float = 0.0  # dropout probabilities (training only)
    post_drop: float = 0.0
    dtype: torch.dtype = torch.float32
    device: str = "cpu"

    @property
    def m_kv(self):
        return self.m if self.one_to_one else 1

    @property
    def v_len(self):
        return self.v_proj or self.v_size

    @property
    def o_len(self):
        return self.o_proj or self.heads * self.v_len


def _seq_desc(case, t, m, vect, lens):
    d = cudnn.create_seq_data_descriptor()
    dims = [0] * 4
    dims[AX.TIME], dims[AX.BATCH], dims[AX.BEAM], dims[AX.VECT] = t, case.n, m, vect
    cudnn.set_seq_data_descriptor(d, case.dtype, 4, dims, case.axes, len(lens), lens, case.fill)
    return d


def _pack(case, canon):
    """canonical [N, M, T, V] -> the packed buffer in the case's axis order."""
    return canon.permute([CANON[a] for a in case.axes]).contiguous().reshape(-1).to(case.device)


def _unpack(case, buf, shape):
    order = [CANON[a] for a in case.axes]
    inv = [order.index(i) for i in range(4)]
    return buf.cpu().view([shape[i] for i in order]).permute(inv)


def _window(case, g):
    t_q, t_kv = case.t_q, case.t_kv
    if case.window == "full":
        return [0] * t_q, [t_kv] * t_q
    if case.window == "causal":
        return [0] * t_q, [t + 1 for t in range(t_q)]
    if case.window == "band":  # keys t-1 .. t+1
        return [min(t_kv, max(0, t - 1)) for t in range(t_q)], [
            min(t_kv, t + 2) for t in range(t_q)
        ]
    lo = [int(torch.randint(0, t_kv, (1,), generator=g)) for _ in range(t_q)]
    hi = [int(torch.randint(x, t_kv + 2, (1,), generator=g)) for x in lo]
    lo[0], hi[0] = 2, 2  # an empty window
    return lo, hi


def _lengths(case, g, count, t):
    if case.lens == "full":
        return [t] * count
    # one full sequence; the others at least 2 long, so that most rows meet several keys
    rest = torch.randint(min(2, t), t + 1, (count - 1,), generator=g)
    return [t] + [int(x) for x in rest]


def _attn_mask(case, seed):
    """The attention dropout's keep mask [N, M, H, T_q, T_kv]: the Philox stream of
    ops.dropout over the sdpa graph's [B, H, R, T_kv] (B = N * M_kv K/V sequences, row
    r = (beam within the K/V sequence) * T_q + t)."""
    b, share = case.n * case.m_kv, case.m // case.m_kv
    keep = torch.from_numpy(
        dropout_keep(seed, 0, case.attn_drop, (b, case.heads, share * case.t_q, case.t_kv))
    )
    keep = keep.view(case.n, case.m_kv, case.heads, share, case.t_q, case.t_kv)
    return (
        keep.permute(0, 1, 3, 2, 4, 5)
        .reshape(case.n, case.m, case.heads, case.t_q, case.t_kv)
        .double()
    )


def _reference(case, x, w, lo, hi, lens_kv, training, seeds=(1, 2)):
    """float64 model; x: Q, K, V, R canonical; w: {kind: per-head tensors or None};
    seeds: of the attention and output dropouts (their first call: offset 0)."""
    q, k, v = x["q"], x["k"], x["v"]
    heads = []
    mask = torch.zeros(case.t_q, case.t_kv, dtype=torch.bool)
    for t in range(case.t_q):
        mask[t, lo[t] : hi[t]] = True
    kv_len = torch.tensor(lens_kv).view(case.n, case.m_kv, 1, 1)
    keep = mask.view(1, 1, case.t_q, case.t_kv) & (torch.arange(case.t_kv) < kv_len)
    for h in range(case.heads):

        def proj(inp, kind):
            if w[kind] is None:
                return inp
            out = inp @ w[kind][h]
            return out + w[kind + "b"][h] if case.biases else out

        qh, kh, vh = proj(q, "q"), proj(k, "k"), proj(v, "v")
        kh = kh.expand(case.n, case.m, -1, -1) if not case.one_to_one else kh
        vh = vh.expand(case.n, case.m, -1, -1) if not case.one_to_one else vh
        keep_h = keep.expand(case.n, case.m, -1, -1)
        s = case.sm_scaler * qh @ kh.transpose(-1, -2)
        s = s.masked_fill(~keep_h, float("-inf"))
        prob = torch.softmax(s, -1).nan_to_num(0.0)  # a row without keys: y = 0
        if case.attn_drop and training:
            prob = prob * _attn_mask(case, seeds[0])[:, :, h] / (1 - case.attn_drop)
        heads.append(prob @ vh)
    if w["o"] is None:
        out = torch.cat(heads, -1)
    else:
        out = sum(heads[h] @ w["o"][h] for h in range(case.heads))
        if case.biases:
            out = out + w["ob"][0]
    if case.post_drop and training:
        keep = torch.from_numpy(dropout_mask(seeds[1], 0, tuple(out.shape), case.post_drop))
        out = out * keep.double() / (1 - case.post_drop)
    return out + x["r"] if case.residual else out


def run(case, seed=0, curr_idx=None, add_grad=False):
    g = torch.Generator().manual_seed(seed)
    h = cudnn.create()
    attn = cudnn.create_attn_descriptor()
    mode = (QMAP.QUERYMAP_ONE_TO_ONE if case.one_to_one else QMAP.QUERYMAP_ALL_TO_ONE) | (
        QMAP.ENABLE_PROJ_BIASES if case.biases else QMAP.DISABLE_PROJ_BIASES
    )
    drops = []
    for p_drop, seed in ((case.attn_drop, 1), (case.post_drop, 2)):
        d = None
        if p_drop:
            d = cudnn.create_dropout_descriptor()
            states = torch.empty(4, dtype=torch.int64, device=case.device)
            cudnn.set_dropout_descriptor(d, h, p_drop, states, 32, seed)
        drops.append(d)
    cudnn.set_attn_descriptor(
        attn,
        mode,
        case.heads,
        case.sm_scaler,
        case.dtype,
        cudnn.DataType.FLOAT,
        cudnn.MathType.DEFAULT_MATH,
        *drops,
        case.q_size,
        case.k_size,
        case.v_size,
        case.q_proj,
        case.k_proj,
        case.v_proj,
        case.o_proj,
        case.t_q + 1,
        case.t_kv,
        case.n + 1,
        case.m,
    )
    lens_q = _lengths(case, g, case.n * case.m, case.t_q)
    lens_kv = _lengths(case, g, case.n * case.m_kv, case.t_kv)
    descs = {
        "q": _seq_desc(case, case.t_q, case.m, case.q_size, lens_q),
        "k": _seq_desc(case, case.t_kv, case.m_kv, case.k_size, lens_kv),
        "v": _seq_desc(case, case.t_kv, case.m_kv, case.v_size, lens_kv),
        "o": _seq_desc(case, case.t_q, case.m, case.o_len, lens_q),
    }
    shapes = {
        "q": (case.n, case.m, case.t_q, case.q_size),
        "k": (case.n, case.m_kv, case.t_kv, case.k_size),
        "v": (case.n, case.m_kv, case.t_kv, case.v_size),
        "o": (case.n, case.m, case.t_q, case.o_len),
    }
    canon = {
        k: torch.randn(*shapes[k], generator=g, dtype=torch.float64).to(case.dtype) for k in "qkv"
    }
    canon["r"] = torch.randn(*shapes["q"], generator=g, dtype=torch.float64).to(case.dtype)
    bufs = {k: _pack(case, canon[k]) for k in "qkvr"}
    w_size, ws_size, rs_size = cudnn.get_multi_head_attn_buffers(h, attn)
    weights = torch.empty(w_size, dtype=torch.uint8, device=case.device)
    w64 = {}
    for kind, name in (
        (WK.Q_WEIGHTS, "q"),
        (WK.K_WEIGHTS, "k"),
        (WK.V_WEIGHTS, "v"),
        (WK.O_WEIGHTS, "o"),
        (WK.Q_BIASES, "qb"),
        (WK.K_BIASES, "kb"),
        (WK.V_BIASES, "vb"),
        (WK.O_BIASES, "ob"),
    ):
        desc, view = cudnn.get_multi_head_attn_weights(h, attn, kind, w_size, weights)
        if view is None:
            w64[name] = None
            continue
        assert list(view.shape) == list(desc.dims) and list(view.stride()) == list(desc.strides)
        # weights scaled by 1 / sqrt(fan-in): scores stay O(1), softmax unsaturated
        scale = 1 / math.sqrt(view.shape[1]) if view.shape[1] > 1 else 0.5
        val = torch.randn(*view.shape, generator=g, dtype=torch.float64) * scale
        view.copy_(val.to(case.dtype))
        w64[name] = view.double().cpu()
    lo, hi = _window(case, g)
    training = curr_idx is None
    work = torch.empty(ws_size, dtype=torch.uint8, device=case.device)
    reserve = (
        torch.full((rs_size,), 255, dtype=torch.uint8, device=case.device) if training else None
    )
    out = torch.full((descs["o"].numel,), float("nan"), dtype=case.dtype, device=case.device)
    dev_q = torch.tensor(lens_q, dtype=torch.int32, device=case.device)
    dev_kv = torch.tensor(lens_kv, dtype=torch.int32, device=case.device)
    cudnn.multi_head_attn_forward(
        h,
        attn,
        -1 if curr_idx is None else curr_idx,
        lo,
        hi,
        dev_q,
        dev_kv,
        descs["q"],
        bufs["q"],
        bufs["r"] if case.residual else None,
        descs["k"],
        bufs["k"],
        descs["v"],
        bufs["v"],
        descs["o"],
        out,
        w_size,
        weights,
        ws_size,
        work,
        rs_size if training else 0,
        reserve,
    )

    counts = (
        case.n * case.m * case.heads * case.t_q * case.t_kv,
        case.n * case.m * case.t_q * case.o_len,
    )
    for d, count in zip(drops, counts):  # a training forward advances the offset
        if d is not None:
            assert int(d.states[2]) == (-(-count // 4) if training else 0)
    x = {k: canon[k].double().requires_grad_(k in "qkv") for k in "qkvr"}
    for val in w64.values():
        if val is not None:
            val.requires_grad_(True)
    want = _reference(case, x, w64, lo, hi, lens_kv, training)
    got = _unpack(case, out, shapes["o"])
    valid = (
        torch.arange(case.t_q).view(1, 1, -1) < torch.tensor(lens_q).view(case.n, case.m, 1)
    ).unsqueeze(-1)
    idx = -1 if curr_idx is None else curr_idx
    steps = slice(None) if idx < 0 else slice(idx, idx + 1)
    sel_valid = valid[:, :, steps].expand_as(got[:, :, steps])
    n_terms = 4 * max(case.q_size, case.t_kv, case.heads * case.v_len)
    if case.dtype != torch.float32:
        # the graphs round each stage's result (Q', K', V', H_cat, dH, dQ' ...) to the data
        # type, and a bias gradient sums terms far larger than itself (dbk is 0 in exact
        # arithmetic): four chained stages, each within the dtype's tolerance
        n_terms *= 16
    tol = dict(dtype=case.dtype, n=n_terms)
    assert_close(
        got[:, :, steps][sel_valid].double(),
        want[:, :, steps].expand_as(got[:, :, steps])[sel_valid].detach(),
        **tol,
    )
    untouched = got[:, :, steps][~sel_valid]
    if case.fill is None:
        assert torch.isnan(untouched).all(), "padded output vectors were written"
    else:
        assert (untouched == case.fill).all(), "padded output vectors are not the fill"
    if not training:
        if idx >= 0:
            rest = torch.ones(case.t_q, dtype=torch.bool)
            rest[idx] = False
            assert torch.isnan(got[:, :, rest]).all(), "other time steps were written"
        return

    dout_c = torch.randn(*shapes["o"], generator=g, dtype=torch.float64).to(case.dtype)
    dout = _pack(case, dout_c)
    d = {k: torch.full_like(bufs[k], float("nan")) for k in "qkv"}
    cudnn.multi_head_attn_backward_data(
        h,
        attn,
        lo,
        hi,
        dev_q,
        dev_kv,
        descs["o"],
        dout,
        descs["q"],
        d["q"],
        bufs["q"],
        descs["k"],
        d["k"],
        bufs["k"],
        descs["v"],
        d["v"],
        bufs["v"],
        w_size,
        weights,
        ws_size,
        work,
        rs_size,
        reserve,
    )
    loss = (want * (dout_c.double() * valid)).sum()
    params = [v for v in w64.values() if v is not None]
    grads = torch.autograd.grad(loss, [x["q"], x["k"], x["v"]] + params)
    for name, want_g in zip("qkv", grads[:3]):
        assert_close(_unpack(case, d[name], shapes[name]).double(), want_g, **tol)

    dweights = torch.empty(w_size, dtype=torch.uint8, device=case.device)
    base = {}
    for kind, name in (
        (WK.Q_WEIGHTS, "q"),
        (WK.K_WEIGHTS, "k"),
        (WK.V_WEIGHTS, "v"),
        (WK.O_WEIGHTS, "o"),
        (WK.Q_BIASES, "qb"),
        (WK.K_BIASES, "kb"),
        (WK.V_BIASES, "vb"),
        (WK.O_BIASES, "ob"),
    ):
        _, view = cudnn.get_multi_head_attn_weights(h, attn, kind, w_size, dweights)
        if view is not None:
            start = (
                torch.randn(*view.shape, generator=g)
                if add_grad
                else torch.full(view.shape, float("nan"))
            )
            view.copy_(start.to(case.dtype))
            base[name] = view.double().cpu()
    mode_w = cudnn.WgradMode.ADD if add_grad else cudnn.WgradMode.SET
    cudnn.multi_head_attn_backward_weights(
        h,
        attn,
        mode_w,
        descs["q"],
        bufs["q"],
        descs["k"],
        bufs["k"],
        descs["v"],
        bufs["v"],
        descs["o"],
        dout,
        w_size,
        weights,
        dweights,
        ws_size,
        work,
        rs_size,
        reserve,
    )
    names = [k for k, v in w64.items() if v is not None]
    for name, want_g in zip(names, grads[3:]):
        _, view = cudnn.get_multi_head_attn_weights(h, attn, WK[_KIND[name]], w_size, dweights)
        expect = want_g + base[name] if add_grad else want_g
        assert_close(view.double().cpu(), expect, **tol)


_KIND = {
    "q": "Q_WEIGHTS",
    "k": "K_WEIGHTS",
    "v": "V_WEIGHTS",
    "o": "O_WEIGHTS",
    "qb": "Q_BIASES",
    "kb": "K_BIASES",
    "vb": "V_BIASES",
    "ob": "O_BIASES",
}

CASES = {
    "plain": Case(),
    "biases_residual": Case(biases=True, residual=True),
    "no_projections": Case(q_size=8, k_size=8, v_size=8, q_proj=0, k_proj=0, v_proj=0, o_proj=0),
    "no_o_projection_biases": Case(biases=True, o_proj=0, v_proj=16, heads=3),
    "k_unprojected": Case(k_size=8, k_proj=0, biases=True),
    "beams_all_to_one": Case(m=2, window="random", lens="random", biases=True),
    "beams_one_to_one": Case(m=2, one_to_one=True, window="random", lens="random", residual=True),
    "causal": Case(window="causal", t_q=4, lens="random"),
    "band": Case(window="band", t_q=4, t_kv=5, biases=True),
    "time_outer": Case(
        axes=(AX.TIME, AX.BATCH, AX.BEAM, AX.VECT), m=2, lens="random", window="random"
    ),
    "odd_head_dims": Case(
        q_proj=5,
        k_proj=5,
        v_proj=3,
        heads=3,
        m=2,
        biases=True,
        residual=True,
        window="random",
        lens="random",
    ),
    "odd_unprojected": Case(
        q_size=6,
        k_size=6,
        v_size=5,
        q_proj=0,
        k_proj=0,
        v_proj=0,
        o_proj=0,
        lens="random",
        window="causal",
        t_q=4,
    ),
    "beam_outer_fill": Case(
        axes=(AX.BEAM, AX.TIME, AX.BATCH, AX.VECT), m=2, one_to_one=True, lens="random", fill=-3.0
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_backward(name):
    run(CASES[name])


def test_add_grad():
    run(Case(biases=True, m=2, lens="random"), seed=3, add_grad=True)


@pytest.mark.parametrize("curr_idx,window", [(0, "full"), (2, "band")])
def test_inference_one_step(curr_idx, window):
    run(
        Case(m=2, window=window, lens="random", biases=True, residual=True),
        seed=5,
        curr_idx=curr_idx,
    )


def test_inference_all_steps():
    run(Case(m=2, one_to_one=True, lens="random"), seed=7, curr_idx=-1)


@pytest.mark.parametrize("dtype", [torch.half, torch.bfloat16])
@pytest.mark.parametrize(
    "name", ["beams_all_to_one", "beams_one_to_one", "causal", "odd_head_dims"]
)
def test_low_precision(name, dtype):
    """half / bfloat16: the Triton matmul and attention engines (interpreted on the CPU)."""
    run(dataclasses.replace(CASES[name], dtype=dtype), seed=11)


@pytest.mark.parametrize("attn_drop,post_drop", [(0.3, 0.0), (0.0, 0.25), (0.3, 0.25)])
def test_dropout(attn_drop, post_drop):
    """Dropout on the attention probabilities and on the output (before the residual),
    from the dropout descriptors' streams; the backward reuses the forward's masks."""
    run(
        Case(
            m=2,
            window="random",
            lens="random",
            biases=True,
            residual=True,
            attn_drop=attn_drop,
            post_drop=post_drop,
        ),
        seed=13,
    )


def test_dropout_inference_is_off():
    run(Case(attn_drop=0.5, post_drop=0.5, biases=True), seed=17, curr_idx=-1)
