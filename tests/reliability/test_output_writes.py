"""Writes the library makes outside PyTorch's view, made safe.

- Version counters: every torch tensor a call writes has its autograd version bumped, as a
  PyTorch in-place operation does, so a tensor autograd saved and a call then overwrote
  fails backward with PyTorch's "modified by an inplace operation" error instead of
  giving wrong gradients (graph API and descriptor API alike).
- Read-only memory: a read-only NumPy array or ``np.memmap`` given as an output (or as the
  workspace) is BAD_PARAM naming the operation and the tensor, never written (a read-only
  memmap would take the process down). Read-only inputs stay fine.
- Workspace: a workspace whose bytes overlap a bound input or output is BAD_PARAM (an FFT
  or Winograd plan would otherwise compute on its own scratch and return garbage).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import opendnn.frontend as cudnn
import opendnn.legacy as legacy
from opendnn.enums import DataType, HeurMode
from opendnn.errors import BadParamError, Status

F = DataType.FLOAT
INPLACE = "modified by an inplace operation"


def _repro(name: str) -> str:
    return f"[repro] pytest tests/reliability/test_output_writes.py -k {name}"


def _desc(dims):
    d = legacy.create_tensor_descriptor()
    legacy.set_tensor_4d_descriptor(d, legacy.TensorFormat.NCHW, legacy.DataType.FLOAT, *dims)
    return d


def _conv_problem():
    """x [1, 2, 6, 6], w [3, 2, 3, 3], padding 1: y [1, 3, 6, 6]."""
    x_desc, y_desc = _desc((1, 2, 6, 6)), _desc((1, 3, 6, 6))
    w_desc = legacy.create_filter_descriptor()
    legacy.set_filter_4d_descriptor(
        w_desc, legacy.DataType.FLOAT, legacy.TensorFormat.NCHW, 3, 2, 3, 3
    )
    conv = legacy.create_convolution_descriptor()
    legacy.set_convolution_2d_descriptor(
        conv, 1, 1, 1, 1, 1, 1, legacy.ConvolutionMode.CROSS_CORRELATION, legacy.DataType.FLOAT
    )
    return x_desc, w_desc, conv, y_desc


def _exp_graph():
    """y = exp(x), x and y [2, 3] float."""
    g = cudnn.pygraph(name="g")
    x = g.tensor([2, 3], [3, 1], F, name="x")
    y = g.exp(x, name="e").set_output(True).set_name("y")
    g.build([HeurMode.A])
    return g, x, y


def _tanh_act():
    act = legacy.create_activation_descriptor()
    legacy.set_activation_descriptor(
        act, legacy.ActivationMode.TANH, legacy.NanPropagation.PROPAGATE_NAN, 0.0
    )
    return act


# ---- version counters ---------------------------------------------------------------------
def _legacy_write(call: str, y: torch.Tensor) -> None:
    """Run the descriptor-API ``call`` with ``y`` (the [1, 3, 6, 6] tensor autograd saved)
    as its output."""
    h = legacy.create("cpu")
    d = _desc(tuple(y.shape))
    other = torch.linspace(-1, 1, int(np.prod(y.shape))).reshape(tuple(y.shape))
    if call == "activation_forward":
        legacy.activation_forward(h, _tanh_act(), 1.0, d, other, 0.0, d, y)
    elif call == "scale_tensor":
        legacy.scale_tensor(h, d, y, 2.0)
    elif call == "add_tensor":
        legacy.add_tensor(h, 1.0, d, other, 1.0, d, y)
    elif call == "convolution_forward":
        x_desc, w_desc, conv, y_desc = _conv_problem()
        legacy.convolution_forward(
            h,
            1.0,
            x_desc,
            torch.randn(1, 2, 6, 6),
            w_desc,
            torch.randn(3, 2, 3, 3),
            conv,
            legacy.ConvolutionFwdAlgo.IMPLICIT_GEMM,
            None,
            0,
            0.0,
            y_desc,
            y,
        )
    else:
        raise AssertionError(call)


@pytest.mark.parametrize(
    "call", ["activation_forward", "scale_tensor", "add_tensor", "convolution_forward"]
)
def test_legacy_write_into_saved_tensor_fails_backward(call):
    """y = tanh(x) saves y for its backward; a descriptor-API call overwriting y must make
    backward refuse, as ``y.mul_(2)`` would, not return gradients computed from the new y."""
    x = torch.linspace(-1, 1, 108).reshape(1, 3, 6, 6).requires_grad_()
    y = torch.tanh(x)
    before = y._version
    _legacy_write(call, y)
    assert y._version > before, f"{_repro(call)}: the version counter of y was not bumped"
    with pytest.raises(RuntimeError, match=INPLACE):
        y.sum().backward()


def test_graph_execute_into_saved_tensor_fails_backward():
    g, x, y = _exp_graph()
    a = torch.linspace(-1, 1, 6).reshape(2, 3).requires_grad_()
    out = torch.tanh(a)  # saved by tanh's backward
    g.execute({x: torch.ones(2, 3), y: out})
    torch.testing.assert_close(out.detach(), torch.full((2, 3), float(np.e)))
    with pytest.raises(RuntimeError, match=INPLACE):
        out.sum().backward()


def test_graph_execute_bumps_outputs_only():
    """Inputs are read, not written: their versions stay (a saved input still backs up)."""
    g, x, y = _exp_graph()
    a = torch.linspace(-1, 1, 6).reshape(2, 3).requires_grad_()
    saved = torch.tanh(a)
    out = torch.empty(2, 3)
    v_in, v_out = saved._version, out._version
    g.execute({x: saved, y: out})
    assert saved._version == v_in and out._version > v_out, _repro("bumps_outputs_only")
    saved.sum().backward()  # saved is intact: no error
    assert a.grad is not None


def test_graph_execute_into_a_view_bumps_its_base():
    g, x, y = _exp_graph()
    base = torch.zeros(4, 3)
    v = base._version
    g.execute({x: torch.ones(2, 3), y: base[1:3]})
    assert base._version > v, _repro("view_bumps_its_base")


def test_inference_tensors_are_written_without_error():
    """Inference tensors have no version counter: a write into one still runs, in and out
    of inference mode."""
    g, x, y = _exp_graph()
    with torch.inference_mode():
        out = torch.empty(2, 3)
        g.execute({x: torch.ones(2, 3), y: out})
    g.execute({x: torch.ones(2, 3), y: out})
    torch.testing.assert_close(out, torch.full((2, 3), float(np.e)))


# ---- read-only memory ---------------------------------------------------------------------
def _read_only(shape) -> np.ndarray:
    a = np.zeros(shape, np.float32)
    a.flags.writeable = False
    return a


def test_read_only_numpy_output_is_refused_by_execute():
    g, x, y = _exp_graph()
    out = _read_only((2, 3))
    with pytest.raises(BadParamError) as e:
        g.execute({x: torch.ones(2, 3), y: out})
    assert (
        e.value.status == Status.BAD_PARAM
        and e.value.op == "execute 'g'"
        and e.value.tensor == "y"
        and "read-only" in e.value.rule
    ), str(e.value)
    assert not out.any(), f"{_repro('read_only_numpy_output')}: the array was written"


def test_read_only_numpy_input_still_runs():
    g, x, y = _exp_graph()
    a = np.ones((2, 3), np.float32)
    a.flags.writeable = False
    out = torch.empty(2, 3)
    g.execute({x: a, y: out})
    torch.testing.assert_close(out, torch.full((2, 3), float(np.e)))


@pytest.mark.parametrize(
    "call", ["activation_forward", "scale_tensor", "add_tensor", "convolution_forward"]
)
def test_read_only_numpy_output_is_refused_by_legacy_calls(call):
    y = _read_only((1, 3, 6, 6))
    with pytest.raises(BadParamError) as e:
        _legacy_write(call, y)
    name = "C" if call == "add_tensor" else "y"
    assert e.value.op == call and e.value.tensor == name and "read-only" in e.value.rule, str(
        e.value
    )
    assert not y.any(), f"{_repro(call)}: the read-only array was written"


def test_read_only_numpy_input_still_runs_in_legacy_calls():
    h = legacy.create("cpu")
    d = _desc((1, 2, 3, 4))
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(1, 2, 3, 4)
    x.flags.writeable = False
    y = torch.empty(1, 2, 3, 4)
    legacy.activation_forward(h, _tanh_act(), 1.0, d, x, 0.0, d, y)
    torch.testing.assert_close(y, torch.tanh(torch.from_numpy(x.copy())))


def test_read_only_numpy_workspace_is_refused():
    g, x, y = _exp_graph()
    with pytest.raises(BadParamError) as e:
        g.execute({x: torch.ones(2, 3), y: torch.empty(2, 3)}, _read_only(64).view(np.uint8))
    assert "workspace" in str(e.value) and "read-only" in e.value.rule, str(e.value)


def test_read_only_memmap_output_is_refused_not_a_crash(tmp_path):
    """Writing a read-only mapping is a segmentation fault: run in a child process, so that
    a regression fails this test rather than the whole run."""
    path = tmp_path / "y.bin"
    np.zeros(18, np.float32).tofile(path)
    code = textwrap.dedent(f"""
        import numpy as np, torch
        import opendnn.frontend as cudnn
        import opendnn.legacy as legacy
        from opendnn.enums import DataType, HeurMode
        from opendnn.errors import BadParamError
        g = cudnn.pygraph(name="g")
        x = g.tensor([2, 3], [3, 1], DataType.FLOAT, name="x")
        y = g.exp(x).set_output(True).set_name("y")
        g.build([HeurMode.A])
        out = np.memmap({str(path)!r}, np.float32, mode="r", shape=(2, 3))
        try:
            g.execute({{x: torch.ones(2, 3), y: out}})
        except BadParamError as e:
            print("graph:", e)
        d = legacy.create_tensor_descriptor()
        legacy.set_tensor_4d_descriptor(d, legacy.TensorFormat.NCHW, legacy.DataType.FLOAT,
                                        1, 2, 3, 3)
        out = np.memmap({str(path)!r}, np.float32, mode="r", shape=(1, 2, 3, 3))
        try:
            legacy.scale_tensor(legacy.create("cpu"), d, out, 2.0)
        except BadParamError as e:
            print("legacy:", e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{_repro('memmap')}: exit {r.returncode}\n{r.stderr[-2000:]}"
    lines = r.stdout.splitlines()
    assert any(s.startswith("graph:") and "tensor 'y'" in s and "read-only" in s for s in lines), (
        r.stdout
    )
    assert any(
        s.startswith("legacy:") and "scale_tensor" in s and "read-only" in s for s in lines
    ), r.stdout


# ---- workspace overlapping a bound buffer --------------------------------------------------
def _fft_conv_graph():
    """y = conv(x, w) on the FFT engine (which needs a workspace); x [1, 2, 6, 6]."""
    g = cudnn.pygraph(name="g")
    x = g.tensor([1, 2, 6, 6], [72, 36, 6, 1], F, name="x")
    w = g.tensor([3, 2, 3, 3], [18, 9, 3, 1], F, name="w")
    y = g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    y.set_output(True).set_name("y")
    g.build([HeurMode.A, HeurMode.FALLBACK])
    for i in range(g.get_execution_plan_count()):
        if (
            g.get_plan_name_at_index(i).startswith("conv_fft")
            and g.get_workspace_size_plan_at_index(i) > 0
        ):
            return g, x, w, y, i
    pytest.skip("no FFT plan with a workspace among the candidates")


@pytest.mark.parametrize("role", ["x", "y"])
def test_workspace_overlapping_a_bound_buffer_is_refused(role):
    g, x, w, y, i = _fft_conv_graph()
    need = g.get_workspace_size_plan_at_index(i)
    arena = torch.zeros(need // 4 + 1024)
    bufs = {"x": torch.randn(1, 2, 6, 6), "y": torch.empty(1, 3, 6, 6)}
    bufs[role] = arena[: bufs[role].numel()].view(bufs[role].shape)
    with pytest.raises(BadParamError) as e:
        g.execute_plan_at_index(
            {x: bufs["x"], w: torch.randn(3, 2, 3, 3), y: bufs["y"]},
            arena.view(torch.uint8)[16:],
            i,
        )
    assert (
        e.value.status == Status.BAD_PARAM
        and "workspace" in e.value.rule
        and f"'{role}'" in e.value.rule
    ), f"{_repro('workspace_overlapping')}: {e.value}"


def test_workspace_beside_the_buffers_of_one_arena_runs():
    """One allocation holding the buffers and, after them, the workspace: no byte shared."""
    g, x, w, y, i = _fft_conv_graph()
    need = g.get_workspace_size_plan_at_index(i)
    arena = torch.zeros(72 + 108 + need // 4 + 1)
    xb, yb = arena[:72].view(1, 2, 6, 6), arena[72:180].view(1, 3, 6, 6)
    xb.copy_(torch.randn(1, 2, 6, 6))
    wt = torch.randn(3, 2, 3, 3)
    g.execute_plan_at_index({x: xb, w: wt, y: yb}, arena[180:].view(torch.uint8), i)
    torch.testing.assert_close(
        yb, torch.nn.functional.conv2d(xb, wt, padding=1), rtol=1e-4, atol=1e-4
    )


def test_legacy_workspace_overlapping_x_is_refused():
    h = legacy.create("cpu")
    x_desc, w_desc, conv, y_desc = _conv_problem()
    algo = legacy.ConvolutionFwdAlgo.FFT
    need = legacy.get_convolution_forward_workspace_size(h, x_desc, w_desc, conv, y_desc, algo)
    assert need > 0, "the FFT algorithm needs a workspace here"
    arena = torch.randn(need // 4 + 72)
    x = arena[:72].view(1, 2, 6, 6)
    with pytest.raises(BadParamError) as e:
        legacy.convolution_forward(
            h,
            1.0,
            x_desc,
            x,
            w_desc,
            torch.randn(3, 2, 3, 3),
            conv,
            algo,
            arena.view(torch.uint8),
            need,
            0.0,
            y_desc,
            torch.empty(1, 3, 6, 6),
        )
    assert (
        "convolution_forward" in e.value.op
        and "workspace" in e.value.rule
        and "'x'" in e.value.rule
    ), f"{_repro('legacy_workspace')}: {e.value}"


@pytest.mark.parametrize("offset", [64, 128], ids=["overlapping", "beside"])
def test_legacy_attention_work_space_overlapping_queries_is_refused(offset):
    """multi_head_attn_forward carves its work space into the projections and the heads'
    outputs: a work space sharing bytes with the queries would overwrite them mid-call.
    One starting right after them is fine."""
    h = legacy.create("cpu")
    attn = legacy.create_attn_descriptor()
    mode = legacy.AttnQueryMap.QUERYMAP_ALL_TO_ONE | legacy.AttnQueryMap.DISABLE_PROJ_BIASES
    legacy.set_attn_descriptor(
        attn,
        mode,
        1,
        0.5,
        legacy.DataType.FLOAT,
        legacy.DataType.FLOAT,
        legacy.MathType.DEFAULT_MATH,
        None,
        None,
        8,
        8,
        8,
        8,
        8,
        8,
        8,
        4,
        4,
        1,
        1,
    )
    axes = (
        legacy.SeqDataAxis.BATCH,
        legacy.SeqDataAxis.BEAM,
        legacy.SeqDataAxis.TIME,
        legacy.SeqDataAxis.VECT,
    )
    seq = legacy.create_seq_data_descriptor()
    dims = [0] * 4
    dims[legacy.SeqDataAxis.TIME], dims[legacy.SeqDataAxis.BATCH] = 4, 1
    dims[legacy.SeqDataAxis.BEAM], dims[legacy.SeqDataAxis.VECT] = 1, 8
    legacy.set_seq_data_descriptor(seq, torch.float32, 4, dims, axes, 1, [4], None)
    w_size, ws_size, _ = legacy.get_multi_head_attn_buffers(h, attn)
    weights = torch.randn(w_size // 4) * 0.3
    arena = torch.randn(32 + ws_size // 4)  # queries, then the work space after them
    queries = arena[:32]
    keys, values, out = torch.randn(32), torch.randn(32), torch.empty(32)
    lens = torch.tensor([4], dtype=torch.int32)

    def call():
        legacy.multi_head_attn_forward(
            h,
            attn,
            -1,
            [0] * 4,
            [4] * 4,
            lens,
            lens,
            seq,
            queries,
            None,
            seq,
            keys,
            seq,
            values,
            seq,
            out,
            w_size,
            weights,
            ws_size,
            arena.view(torch.uint8)[offset:],
        )

    if offset == 128:  # the queries end at byte 128
        call()
        assert torch.isfinite(out).all(), _repro("attention_work_space")
        return
    with pytest.raises(BadParamError) as e:
        call()
    assert (
        e.value.op == "multi_head_attn_forward"
        and "work_space" in e.value.rule
        and "'queries'" in e.value.rule
    ), f"{_repro('attention_work_space')}: {e.value}"
