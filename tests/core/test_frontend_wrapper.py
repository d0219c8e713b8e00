"""cudnn-frontend's ``cudnn.Graph`` wrapper: built from torch tensors in a with block,
called positionally (io tuples) or with a dict; misuse raises typed errors."""

from __future__ import annotations

import pytest
import torch
from _util import assert_close

import opendnn.frontend as cudnn
from opendnn.errors import BadParamError, Status


def _conv_bias_relu(x, w, b, **kw):
    with cudnn.Graph(intermediate_data_type=torch.float32, **kw) as g:
        y = g.conv_fprop(image=x, weight=w, padding=[1, 1], name="conv")
        z = g.relu(input=g.bias(input=y, bias=b, name="bias"), name="relu")
        z.set_output(True)
    return g, z


def test_positional_call_after_set_io_tuples():
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(1, 4, 1, 1)
    g, z = _conv_bias_relu(x, w, b)
    g.set_io_tuples(["conv::image", "conv::weight", "bias::bias"], ["relu::OUT_0"])
    ref = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), padding=1) + b.double())
    out = g(x, w, b)
    assert out.shape == (2, 4, 6, 6)
    assert_close(out, ref, torch.float32, n=27)
    # the same tuples by the torch tensors the graph was built from, and set in advance
    g2, _ = _conv_bias_relu(x, w, b, inputs=None)
    g2.set_io_tuples([x, w, b], [z.get_name()])
    assert_close(g2(x, w, b), ref, torch.float32, n=27)


def test_io_tuples_given_to_the_constructor_and_two_outputs():
    torch.manual_seed(1)
    a, b = torch.randn(3, 5), torch.randn(3, 5)
    with cudnn.Graph(inputs=["add::a", "add::b"], outputs=["add::OUT_0", "neg.0::OUT_0"]) as g:
        s = g.add(a=a, b=b, name="add")
        s.set_output(True)
        g.neg(s).set_output(True)
    total, neg = g(a, b)
    assert torch.equal(total, a + b) and torch.equal(neg, -(a + b))


def test_dict_call_makes_missing_outputs():
    torch.manual_seed(2)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with cudnn.Graph() as g:
        y = g.mul(a, b, name="mul")
        y.set_output(True)
    got = g({"mul::0": a, "mul::1": b})
    assert torch.equal(got["mul::OUT_0"], a * b)
    out = torch.full((4, 4), float("nan"))
    got = g({"mul::0": a, "mul::1": b, y: out})
    assert torch.equal(out, a * b) and got[y] is out
    with pytest.raises(BadParamError, match="inputs missing from the call: mul::1") as e:
        g({"mul::0": a})
    assert e.value.status == Status.BAD_PARAM_NULL_POINTER


def test_misuse_is_refused():
    a = torch.randn(2, 2)
    with cudnn.Graph() as g:
        with pytest.raises(BadParamError, match="'validate' is the wrapper's") as e:
            g.validate()
        assert e.value.status == Status.NOT_SUPPORTED
        y = g.exp(a, name="e")
        y.set_output(True)
        with pytest.raises(BadParamError, match="already used"):
            g.exp(a, name="e")
        with pytest.raises(BadParamError, match="call it after"):
            g(a)
    with pytest.raises(BadParamError, match="set_io_tuples"):
        g(a)
    with pytest.raises(BadParamError, match="neither an input nor an output"):
        g.set_io_tuples(["e::0"], [])
    with pytest.raises(BadParamError, match="listed twice"):
        g.set_io_tuples(["e::0"], ["e::OUT_0", "e::OUT_0"])
    with pytest.raises(BadParamError, match="not a tensor of this graph"):
        g.set_io_tuples(["nope"], ["e::OUT_0"])
    g.set_io_tuples(["e::0"], ["e::OUT_0"])
    with pytest.raises(BadParamError, match="1 inputs"):
        g(a, a)
    assert g.get_workspace_size() == 0


def test_an_error_inside_the_block_propagates_and_drops_the_graph():
    g = cudnn.Graph()
    with pytest.raises(KeyError):
        with g:
            g.exp(torch.randn(2))
            raise KeyError("user code")
    with pytest.raises(BadParamError, match="inside the 'with Graph"):
        g.exp(torch.randn(2))


def test_workspace_alloc_off_needs_a_workspace_per_call():
    torch.manual_seed(3)
    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    with cudnn.Graph(workspace_alloc=False) as g:
        x_t, w_t = g.tensor_like(x), g.tensor_like(w)
        g.conv_fprop(x_t, w_t, padding=[1, 1], name="conv").set_output(True)
        g.set_io_tuples([x_t, w_t], ["conv::Y"])  # kept until the block ends
    with pytest.raises(BadParamError, match="workspace_alloc=False"):
        g(x, w)
    ws = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8)
    ref = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    assert_close(g(x, w, workspace=ws), ref, torch.float32, n=18)
