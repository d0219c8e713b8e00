"""The conv benchmark's layer sets (``engines/conv/shapes.py``, ``BENCH_SETS``): every
layer is a valid convolution, ResNet-50's rows keep their names, and every case the runner
times -- each set, kind and variant -- builds a valid graph that some engine other than the
float64 reference takes on an H100 (support checks and cost models only: nothing is
compiled or run, the tensors live on the meta device)."""

import math

import pytest
import torch

from opendnn import backends, heuristics
from opendnn.bench import conv as bench_conv
from opendnn.engines.base import Target
from opendnn.engines.conv import shapes
from opendnn.handle import _KNOWN

# the rates target_for gives an H100 (the cost models compare compute with memory)
H100 = Target(device="cuda", name="H100", capability=(9, 0), num_sms=132, **_KNOWN["H100"])
KINDS = ("fprop", "fused", "dgrad", "wgrad", "tf32")
CASES = bench_conv._cases(list(shapes.BENCH_SETS), KINDS, None)


@pytest.mark.parametrize("name", list(shapes.BENCH_SETS))
def test_every_layer_is_a_valid_convolution(name):
    layers = shapes.BENCH_SETS[name]
    assert len({lay.name for lay in layers}) == len(layers), "layer names repeat"
    for lay in layers:
        d = len(lay.spatial)
        assert len(lay.filt) == len(lay.stride) == len(lay.pre) == len(lay.post) == d, lay
        assert lay.c % lay.groups == 0 and lay.k % lay.groups == 0, lay
        assert all(o >= 1 for o in lay.out), lay
        assert lay.flops == 2 * lay.n * lay.k * math.prod(lay.out) * (
            lay.c // lay.groups
        ) * math.prod(lay.filt)


def test_sets_cover_what_users_run():
    sets = shapes.BENCH_SETS
    assert [tuple(vars(lay).values())[:2] for lay in sets["resnet50"]] == [
        (name, shapes.BENCH_N) for name, *_ in shapes.BENCH
    ]
    dw = [lay for n in ("mobilenetv3", "efficientnet_b0", "convnext_t") for lay in sets[n]]
    assert {lay.filt[0] for lay in dw if lay.depthwise} == {3, 5, 7}
    assert {lay.stride[0] for lay in dw if lay.depthwise} == {1, 2}
    assert all(1 < lay.groups < lay.c for lay in sets["resnext50"])
    assert {len(lay.spatial) for lay in sets["unet3d"]} == {3}
    causal = [lay for lay in sets["conv1d"] if lay.post != lay.pre]
    assert causal and all(lay.post == (0,) and lay.out == lay.spatial for lay in causal)


def test_resnet50_rows_keep_their_names_and_other_sets_run_every_variant():
    labels = {bench_conv._label(s, lay, k, v) for s, lay, k, v in CASES if s == "resnet50"}
    assert "fprop nhwc bf16 l1_3x3_64" in labels
    assert "fprop nchw fp32/tf32 l1_3x3_64" in labels
    assert len(labels) == 5 * len(shapes.BENCH)
    other = [(k, v) for s, _, k, v in CASES if s == "mobilenetv3"]
    per_layer = {(k, v) for k in ("fprop", "dgrad", "wgrad") for v in shapes.BENCH_VARIANTS}
    assert set(other) == per_layer and len(other) == len(per_layer) * len(
        shapes.BENCH_SETS["mobilenetv3"]
    )
    narrowed = bench_conv._cases(["resnet50"], ("fprop", "dgrad"), ["nchw-fp16"])
    assert {(k, v) for _, _, k, v in narrowed} == {("fprop", "nchw-fp16"), ("dgrad", "nchw-fp16")}


def test_unknown_set_or_variant_is_named():
    with pytest.raises(ValueError, match="mobilenet_v9"):
        bench_conv.run_conv(None, sets=["mobilenet_v9"])
    with pytest.raises(ValueError, match="nhwc-int4"):
        bench_conv.run_conv(None, sets=["resnet50"], variants=["nhwc-int4"])


@pytest.mark.parametrize("name", list(shapes.BENCH_SETS))
def test_every_case_has_an_engine_on_h100(name, monkeypatch):
    missing = []
    for set_name, lay, kind, variant in CASES:
        if set_name != name:
            continue
        x, w, b, dy = bench_conv.set_tensors(lay, variant, device="meta")
        g, _, _, _ = bench_conv._graph(kind, x, w, b, dy, lay)
        g.validate()
        monkeypatch.setattr(backends, "allow_tf32", shapes.BENCH_VARIANTS[variant][2])
        ranked, reasons, _ = heuristics._ranked_plans(g.op_graph, H100)
        if not ranked:
            missing.append(f"{bench_conv._label(set_name, lay, kind, variant)}: {reasons}")
    assert not missing, "\n".join(missing)


def test_mode_a_first_is_what_a_build_without_benchmark_mode_runs():
    """The bench's ``mode_a`` field: the first plan of mode A, as a plain build selects it,
    and the ratio it reports against the find's timings."""
    import opendnn.frontend as cudnn
    from opendnn.bench.conv import mode_a_first, mode_a_ratio

    x, w = torch.randn(2, 8, 9, 9), torch.randn(16, 8, 3, 3)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    tx, tw = g.tensor_like(x), g.tensor_like(w)
    g.conv_fprop(tx, tw, padding=[1, 1]).set_output(True)
    g.build([cudnn.heur_mode.A])
    assert mode_a_first(g) == g.get_plan_name_at_index(0)
    assert mode_a_ratio({"a": 2.0, "b": 1.0}, "a") == 0.5
    assert mode_a_ratio({"a": 2.0}, "c") is None
