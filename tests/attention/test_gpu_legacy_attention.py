"""GPU checks of the legacy multi-head attention calls (pytest -m gpu): the CPU suite's
cases and larger ones on the device, in float32 (reference engine), half and bfloat16
(Triton matmul and attention engines, which must be the plans chosen), against the
float64 PyTorch model of test_legacy_attention."""

import dataclasses

import pytest
import torch
from test_legacy_attention import AX, CASES, Case, run

from opendnn.legacy import attention_graphs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

LARGE = {
    "large_all_to_one": Case(
        heads=4,
        n=3,
        m=2,
        t_q=37,
        t_kv=70,
        q_size=48,
        k_size=40,
        v_size=56,
        q_proj=32,
        k_proj=32,
        v_proj=64,
        o_proj=48,
        biases=True,
        residual=True,
        window="random",
        lens="random",
    ),
    "large_one_to_one_causal": Case(
        heads=8,
        n=2,
        m=3,
        t_q=64,
        t_kv=64,
        q_size=64,
        k_size=64,
        v_size=64,
        q_proj=16,
        k_proj=16,
        v_proj=16,
        o_proj=0,
        one_to_one=True,
        window="causal",
        lens="random",
        axes=(AX.TIME, AX.BATCH, AX.BEAM, AX.VECT),
    ),
    "large_odd_heads": Case(
        heads=5,
        n=2,
        m=2,
        t_q=50,
        t_kv=45,
        q_size=30,
        k_size=20,
        v_size=24,
        q_proj=12,
        k_proj=12,
        v_proj=20,
        o_proj=30,
        biases=True,
        residual=True,
        window="band",
        lens="random",
        attn_drop=0.2,
        post_drop=0.1,
    ),
}


def _engines_used(dtype):
    """Plan names of the cached graphs built for ``dtype`` data."""

    def has(obj):
        return (
            obj == dtype
            if isinstance(obj, torch.dtype)
            else isinstance(obj, tuple) and any(has(x) for x in obj)
        )

    return [
        g.get_plan_name_at_index(0)
        for key, (g, *_rest) in attention_graphs._cache.items()
        if has(key)
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.half, torch.bfloat16])
@pytest.mark.parametrize("name", list(CASES) + list(LARGE))
def test_gpu_forward_backward(name, dtype):
    case = {**CASES, **LARGE}[name]
    attention_graphs._cache.clear()
    run(dataclasses.replace(case, dtype=dtype, device="cuda"), seed=1)
    if dtype != torch.float32:
        used = _engines_used(dtype)
        assert used and not any(n.startswith("reference") for n in used), used


@pytest.mark.parametrize("curr_idx", [-1, 5])
def test_gpu_inference(curr_idx):
    run(
        dataclasses.replace(LARGE["large_all_to_one"], dtype=torch.half, device="cuda"),
        seed=2,
        curr_idx=curr_idx,
    )
