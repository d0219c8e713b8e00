"""Batch normalization, forward (training, inference) and backward: the float64 reference.

Statistics are taken per element of the statistics shape ``S`` (dims of scale, bias,
mean, inv_var): spatial batch norm has S = [1, C, 1, ...] and reduces over N and every
spatial dim; per-activation batch norm has S = [1, C, H, W, ...] and reduces over N. With
m the number of reduced elements per statistic (the count):

    mean    = sum(x) / m
    var     = sum((x - mean)^2) / m                       (biased: used to normalize)
    inv_var = 1 / sqrt(var + eps)
    y       = scale * (x - mean) * inv_var + bias

Training also updates the running statistics with factor ``momentum`` (cuDNN's
exponentialAverageFactor), using the UNBIASED variance as cuDNN and PyTorch do:

    next_running_mean = (1 - momentum) * running_mean + momentum * mean
    next_running_var  = (1 - momentum) * running_var  + momentum * var * m / (m - 1)

Inference normalizes with given statistics: y = scale * (x - mean) * inv_var + bias.

Backward, from dy, x and the saved mean / inv_var, with xhat = (x - mean) * inv_var:

    dbias  = sum(dy)
    dscale = sum(dy * xhat)
    dx     = scale * inv_var * (dy - dbias / m - xhat * dscale / m)
"""

from __future__ import annotations

import numpy as np


def reduced_axes(x_dims, stat_dims) -> tuple:
    """Axes of x summed over for statistics of dims ``stat_dims`` (size one there)."""
    return tuple(i for i, (a, b) in enumerate(zip(x_dims, stat_dims)) if b == 1 and a != 1)


def count(x_dims, stat_dims) -> int:
    """Elements of x folded into one statistic."""
    n = 1
    for i in reduced_axes(x_dims, stat_dims):
        n *= x_dims[i]
    return n


def forward_training(x, scale, bias, eps, running_mean=None, running_var=None, momentum=None):
    """(y, mean, inv_var, next_running_mean, next_running_var); statistics arrays have
    scale's shape; the running outputs are None without running inputs."""
    axes = reduced_axes(x.shape, scale.shape)
    m = count(x.shape, scale.shape)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN is the answer
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        inv_var = 1.0 / np.sqrt(var + eps)
        y = scale * (x - mean) * inv_var + bias
    next_mean = next_var = None
    if running_mean is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            unbiased = var * m / (m - 1)
        next_mean = (1.0 - momentum) * running_mean + momentum * mean
        next_var = (1.0 - momentum) * running_var + momentum * unbiased
    return y, mean, inv_var, next_mean, next_var


def forward_inference(x, mean, inv_var, scale, bias):
    """y = scale * (x - mean) * inv_var + bias (statistics broadcast over x)."""
    return scale * (x - mean) * inv_var + bias


def backward(dy, x, scale, mean, inv_var):
    """(dx, dscale, dbias); dscale and dbias have scale's shape."""
    axes = reduced_axes(x.shape, scale.shape)
    m = count(x.shape, scale.shape)
    xhat = (x - mean) * inv_var
    dbias = dy.sum(axis=axes, keepdims=True)
    dscale = (dy * xhat).sum(axis=axes, keepdims=True)
    if m == 0:
        return np.empty_like(x), dscale, dbias
    dx = scale * inv_var * (dy - dbias / m - xhat * dscale / m)
    return dx, dscale, dbias
