"""The Triton interpreter as the library sets it up (runtime/launch.py): the int32
overflow checks that the interpreter computes and then drops (their assert is off
without debug, as in compiled kernels) are turned off, and int32 arithmetic wraps as a
compiled kernel's does."""

import torch
from triton.runtime import interpreter

from opendnn.runtime.launch import kernel_from_source

WRAP = """@triton.jit
def wrap_mul(X, Y, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(X + i)
    tl.store(Y + i, x * 65536 + x)
"""


def test_overflow_checks_are_off_and_int32_wraps():
    assert interpreter.interpreter_builder.options.sanitize_overflow is False
    k = kernel_from_source(WRAP, "wrap_mul")
    x = torch.tensor([1, 40000, -40000, 2**31 - 1], dtype=torch.int32)
    y = torch.full_like(x, -7)
    k.interpreted[(1,)](x, y, BLOCK=4)
    want = ((x.long() * 65536 + x.long() + 2**31) % 2**32 - 2**31).to(torch.int32)
    assert torch.equal(y, want), (y, want)
