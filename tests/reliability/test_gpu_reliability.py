"""The reliability cases on the GPU (pytest -m gpu): in-place and beta-blending calls under
benchmark mode apply once; threads making first calls of distinct problems at once get
exact results."""

import threading

import pytest
import torch
from _reliability import doubling_graph

import opendnn.frontend as cudnn
import opendnn.legacy as legacy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _desc(dims, dtype=legacy.DataType.FLOAT):
    d = legacy.create_tensor_descriptor()
    legacy.set_tensor_4d_descriptor(d, legacy.TensorFormat.NCHW, dtype, *dims)
    return d


def test_scale_and_add_tensor_in_benchmark_mode_apply_once(benchmark_mode):
    h = legacy.create("cuda")
    y = torch.ones(2, 3, 17, 5, device="cuda")
    legacy.scale_tensor(h, _desc(y.shape), y, 2.0)
    assert torch.equal(y, torch.full_like(y, 2.0)), y.flatten()[:4]
    a = torch.ones_like(y)
    legacy.add_tensor(h, 1.0, _desc(a.shape), a, 1.0, _desc(y.shape), y)
    assert torch.equal(y, torch.full_like(y, 3.0)), y.flatten()[:4]


def test_in_place_activation_in_benchmark_mode_applies_once(benchmark_mode):
    h = legacy.create("cuda")
    act = legacy.create_activation_descriptor()
    legacy.set_activation_descriptor(
        act, legacy.ActivationMode.TANH, legacy.NanPropagation.PROPAGATE_NAN, 0.0
    )
    x = torch.linspace(-2, 2, 4 * 3 * 7 * 9, device="cuda").reshape(4, 3, 7, 9)
    want = torch.tanh(x.double())
    d = _desc(x.shape)
    legacy.activation_forward(h, act, 1.0, d, x, 0.0, d, x)
    torch.testing.assert_close(x.double(), want, atol=1e-6, rtol=1e-5)


def test_in_place_graph_in_benchmark_mode_applies_once(benchmark_mode):
    x = torch.arange(1.0, 1.0 + 64 * 33, device="cuda").reshape(64, 33)
    want = x * 2
    g, t, y = doubling_graph(x)
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda")
    g.execute({t: x, y: x}, ws)
    torch.cuda.synchronize()
    assert torch.equal(x, want)


UNARY = (
    ("tanh", torch.tanh),
    ("sigmoid", torch.sigmoid),
    ("sin", torch.sin),
    ("abs", torch.abs),
    ("neg", torch.neg),
    ("cos", torch.cos),
)


def _chain(index: int) -> list:
    """A distinct chain of unary ops per index (index in base 6, at least three ops)."""
    ops, n = [], index + 6 * 6
    while n:
        ops.append(UNARY[n % 6])
        n //= 6
    return ops


def test_threads_making_first_calls_of_distinct_problems():
    """8 threads, each building and running pointwise graphs no thread ran before: a
    distinct chain of ops per call, so each generates, writes and compiles a new kernel."""
    errors, wrong = [], []

    def work(k):
        try:
            for i in range(12):
                ops = _chain(k * 12 + i)
                x = torch.randn(31 + i, 7, device="cuda")
                g = cudnn.pygraph(
                    io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT
                )
                t = g.tensor_like(x)
                v, want = t, x.double()
                for name, fn in ops:
                    v, want = getattr(g, name)(input=v), fn(want)
                v.set_output(True).set_data_type(cudnn.data_type.FLOAT)
                g.build([cudnn.heur_mode.A])
                out = torch.full_like(x, float("nan"))
                g.execute(
                    {t: x, v: out},
                    torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda"),
                )
                torch.cuda.synchronize()
                if not torch.allclose(out.double(), want, atol=1e-5, rtol=1e-5):
                    wrong.append((k, i, [n for n, _ in ops]))
        except Exception as e:  # noqa: BLE001 -- collected and reported below
            errors.append(f"thread {k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert not wrong, wrong[:5]
