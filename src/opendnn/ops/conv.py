"""Convolution: forward (fprop), backward data (dgrad), backward filter (wgrad).

Shapes (N batch, C input channels, K output channels, G groups, spatial dims last):
x [N, C, *in], w [K, C/G, *filt], y [N, K, *out], with for each spatial axis i

    out_i = (in_i + pre_i + post_i - dil_i * (filt_i - 1) - 1) // stride_i + 1

Cross-correlation (cuDNN's default, what frameworks call convolution):

    y[n, k, p] = sum_{c in group(k), r} x[n, c, p * stride - pre + r * dil] * w[k, c, r]

(p, r multi-indices; out-of-range x reads are 0). CONVOLUTION mode flips the filter
(r -> filt - 1 - r). dgrad is the adjoint in x, wgrad the adjoint in w:

    dx[n, c, i] = sum_{k, r, p : p*stride - pre + r*dil = i} dy[n, k, p] w[k, c, r]
    dw[k, c, r] = sum_{n, p} dy[n, k, p] x[n, c, p*stride - pre + r*dil]

The float64 references below loop over filter taps (prod(filt) iterations), each a
tensor contraction over a strided window of the padded input.
"""

from __future__ import annotations

import itertools

import numpy as np


def output_dims(x_dims, w_dims, pre, post, stride, dilation) -> list[int]:
    """y dims [N, K, *out] for x [N, C, *in] and w [K, C/G, *filt]."""
    out = [x_dims[0], w_dims[0]]
    for i, (n, f) in enumerate(zip(x_dims[2:], w_dims[2:])):
        out.append((n + pre[i] + post[i] - dilation[i] * (f - 1) - 1) // stride[i] + 1)
    return out


def flops(y_dims, w_dims) -> float:
    """2 * N*K*prod(out) * (C/G)*prod(filt): multiply-adds of one fprop (= dgrad = wgrad)."""
    return 2.0 * float(np.prod(y_dims)) * float(np.prod(w_dims[1:]))


def _window(xp: np.ndarray, tap, stride, dilation, out) -> tuple:
    """Index of the strided window of padded x that tap ``tap`` multiplies."""
    idx = [slice(None), slice(None)]
    for t, s, d, o in zip(tap, stride, dilation, out):
        idx.append(slice(t * d, t * d + s * (o - 1) + 1, s))
    return tuple(idx)


def _flip(w: np.ndarray, mode_convolution: bool) -> np.ndarray:
    if not mode_convolution:
        return w
    return w[(slice(None), slice(None)) + (slice(None, None, -1),) * (w.ndim - 2)]


def fprop(x, w, pre, post, stride, dilation, convolution=False) -> np.ndarray:
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    groups = c // cg
    w = _flip(w, convolution)
    pad = [(0, 0), (0, 0)] + list(zip(pre, post))
    xp = np.pad(x, pad)
    out = output_dims(x.shape, w.shape, pre, post, stride, dilation)[2:]
    y = np.zeros([n, k] + out)
    kg = k // groups
    for tap in itertools.product(*[range(f) for f in w.shape[2:]]):
        win = xp[_window(xp, tap, stride, dilation, out)]
        wt = w[(slice(None), slice(None)) + tap]
        for g in range(groups):
            y[:, g * kg : (g + 1) * kg] += np.einsum(
                "nc...,kc->nk...", win[:, g * cg : (g + 1) * cg], wt[g * kg : (g + 1) * kg]
            )
    return y


def dgrad(dy, w, x_dims, pre, post, stride, dilation, convolution=False) -> np.ndarray:
    n, k = dy.shape[:2]
    _, cg = w.shape[:2]
    c = x_dims[1]
    groups = c // cg
    w = _flip(w, convolution)
    kg = k // groups
    padded = [x_dims[0], c] + [d + a + b for d, a, b in zip(x_dims[2:], pre, post)]
    dxp = np.zeros(padded)
    out = list(dy.shape[2:])
    for tap in itertools.product(*[range(f) for f in w.shape[2:]]):
        wt = w[(slice(None), slice(None)) + tap]
        sl = _window(dxp, tap, stride, dilation, out)
        for g in range(groups):
            contrib = np.einsum(
                "nk...,kc->nc...", dy[:, g * kg : (g + 1) * kg], wt[g * kg : (g + 1) * kg]
            )
            view = dxp[sl]
            view[:, g * cg : (g + 1) * cg] += contrib
    crop = (slice(None), slice(None)) + tuple(slice(a, a + d) for a, d in zip(pre, x_dims[2:]))
    return dxp[crop]


def wgrad(x, dy, w_dims, pre, post, stride, dilation, convolution=False) -> np.ndarray:
    c = x.shape[1]
    k, cg = w_dims[:2]
    groups = c // cg
    kg = k // groups
    pad = [(0, 0), (0, 0)] + list(zip(pre, post))
    xp = np.pad(x, pad)
    out = list(dy.shape[2:])
    dw = np.zeros(list(w_dims))
    for tap in itertools.product(*[range(f) for f in w_dims[2:]]):
        win = xp[_window(xp, tap, stride, dilation, out)]
        for g in range(groups):
            a = dy[:, g * kg : (g + 1) * kg].reshape(dy.shape[0], kg, -1)
            b = win[:, g * cg : (g + 1) * cg].reshape(win.shape[0], cg, -1)
            dw[(slice(g * kg, (g + 1) * kg), slice(None)) + tap] = np.einsum("nkp,ncp->kc", a, b)
    return _flip(dw, convolution)
