"""The cost models' measured calibration: what the heuristics rank by, and a table that
names only real code paths."""

import torch
from _util import graph_tensor as _tensor

import opendnn.frontend as cudnn
from opendnn.engines import calibration
from opendnn.engines.base import Target
from opendnn.engines.registry import by_id, engines
from opendnn.handle import _KNOWN

H100 = Target("cuda", "H100", (9, 0), 132, **_KNOWN["H100"])


def _wgrad_graph(layout=torch.contiguous_format):
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    x = torch.randn(4, 32, 9, 9, dtype=torch.bfloat16).to(memory_format=layout)
    dy = torch.randn(4, 64, 9, 9, dtype=torch.bfloat16).to(memory_format=layout)
    dw = g.conv_wgrad(_tensor(g, x), _tensor(g, dy), padding=[1, 1])
    dw.set_dim([64, 32, 3, 3]).set_stride([288, 9, 3, 1]).set_output(True)
    g.validate()
    return g.op_graph


def test_every_factor_names_an_engine_and_is_positive():
    names = {e.name for e in engines()}
    for family, factor in calibration.MEASURED_SCALES.items():
        # a layout plan's key is outer/inner: both name engines
        for part in family.split("/"):
            assert part.split(":")[0] in names, family
        assert 0.05 < factor < 20, (family, factor)


def test_ranking_applies_the_factor_on_a_gpu_only():
    g = _wgrad_graph()
    splitk = by_id(10)  # nondeterministic split-K, calibrated
    cfg = splitk.configs(g, H100)[0]
    est = splitk.estimate_seconds(g, cfg, H100)
    key = splitk.calibration_key(g, cfg)
    assert key == splitk.family(cfg) + ":nchw"  # x and dy are NCHW
    factor = calibration.measured_scale(key, splitk.name)
    assert factor != 1.0
    assert splitk.ranked_seconds(g, cfg, H100) == est * factor
    cpu = Target()
    cfg = splitk.configs(g, cpu)[0]
    assert splitk.ranked_seconds(g, cfg, cpu) == splitk.estimate_seconds(g, cfg, cpu)


def test_unknown_paths_are_not_scaled():
    assert calibration.measured_scale("no_such_engine:path", "no_such_engine") == 1.0


def test_an_nchw_key_without_a_factor_takes_its_paths(monkeypatch):
    """``family:nchw`` has its own factor where NCHW timings were fitted; else the path's,
    else the engine's."""
    table = {"eng:path": 2.0, "eng:path:nchw": 3.0, "eng": 5.0}
    monkeypatch.setattr(calibration, "MEASURED_SCALES", table)
    assert calibration.measured_scale("eng:path:nchw", "eng") == 3.0
    assert calibration.measured_scale("eng:other:nchw", "eng") == 5.0
    del table["eng:path:nchw"]
    assert calibration.measured_scale("eng:path:nchw", "eng") == 2.0
    e = by_id(5)
    for layout in (torch.contiguous_format, torch.channels_last):
        g = _wgrad_graph(layout)  # NCHW: the key names the layout; channels-last: the path
        cfg = e.configs(g, H100)[0]
        nchw = layout == torch.contiguous_format
        assert e.calibration_key(g, cfg) == e.family(cfg) + (":nchw" if nchw else "")


def test_wgrad_main_loop_bounds_a_few_long_programs():
    """The one-program-per-tap backward filter: 9 programs each walking 40k pixels take at
    least 40k / BLOCK_K dependent steps, whatever the roofline says."""
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    x = torch.empty(64, 64, 25, 25, dtype=torch.bfloat16)
    dy = torch.empty(64, 64, 25, 25, dtype=torch.bfloat16)
    dw = g.conv_wgrad(_tensor(g, x), _tensor(g, dy), padding=[1, 1])
    dw.set_dim([64, 64, 3, 3]).set_stride([576, 9, 3, 1]).set_output(True)
    g.validate()
    e = by_id(5)
    from opendnn.engines.conv.implicit_gemm import _kernels as K

    kn = K.ConvKnobs(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)
    steps = -(-64 * 25 * 25 // 32)
    assert e.gather_loop(g.op_graph, kn, H100) >= steps * K.STEP_LATENCY * 0.99
    assert e.gather_loop(g.op_graph, kn, H100, split=16) < e.gather_loop(g.op_graph, kn, H100) / 8


def test_tf32_tma_and_layout_plans_have_keys_of_their_own(monkeypatch):
    """float32 on a TMA path is ``...:tma:tf32`` (its boxes reach the TF32 tensor cores
    through register transposes); an NCHW plan through the layout transform is keyed
    outer/inner, and its factor multiplies a model that already holds the inner one."""
    from opendnn import backends

    monkeypatch.setattr(backends, "allow_tf32", True)
    g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
    x = torch.randn(4, 64, 9, 9)
    dy = torch.randn(4, 128, 9, 9)
    dw = g.conv_wgrad(_tensor(g, x), _tensor(g, dy), padding=[1, 1])
    dw.set_dim([128, 64, 3, 3]).set_stride([576, 9, 3, 1]).set_output(True)
    g.validate()
    layout = by_id(46)  # conv_wgrad_channels_last
    cfgs = [c for c in layout.configs(g.op_graph, H100) if "TMA_TH" in c.knob_dict]
    assert cfgs
    key = layout.calibration_key(g.op_graph, cfgs[0])
    outer, inner = key.split("/")
    assert outer.startswith("conv_wgrad_channels_last") and inner.endswith(":tma:tf32"), key
    monkeypatch.setattr(calibration, "MEASURED_SCALES", {key: 2.0})
    est = layout.estimate_seconds(g.op_graph, cfgs[0], H100)
    assert layout.ranked_seconds(g.op_graph, cfgs[0], H100) == est * 2.0


def test_nchw_depthwise_keys_split_by_filter_taps():
    """A native NCHW depthwise plan's key names its filter's size class: every tap is a
    gather of its own, and the 5x5 and 7x7 layers measured apart (``:taps25`` from 25 taps,
    ``:taps49`` from 49); a channels-last image keeps the plain key."""
    keys = {}
    for f, layout in ((3, "nchw"), (5, "nchw"), (7, "nchw"), (7, "nhwc")):
        g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
        x = torch.randn(2, 16, 12, 12)
        w = torch.randn(16, 1, f, f)
        if layout == "nhwc":
            x, w = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
        y = g.conv_fprop(_tensor(g, x), _tensor(g, w), padding=[f // 2, f // 2])
        y.set_output(True)
        g.validate()
        e = by_id(41)  # conv_depthwise
        cfg = e.configs(g.op_graph, H100)[0]
        keys[(f, layout)] = e.calibration_key(g.op_graph, cfg)
    assert keys[(3, "nchw")].endswith(":nchw") and ":taps" not in keys[(3, "nchw")], keys
    assert keys[(5, "nchw")].endswith(":taps25:nchw"), keys
    assert keys[(7, "nchw")].endswith(":taps49:nchw"), keys
    assert not keys[(7, "nhwc")].endswith(":nchw"), keys


def test_grouped_nchw_keys_split_float32():
    """A grouped plan on an NCHW image in float32 (TF32) keys ``:nchw:fp32`` apart from
    half precision's ``:nchw`` (the model charges the NCHW gather in half precision only);
    channels-last images keep the plain key."""
    from opendnn import backends

    keys = {}
    tf32, backends.allow_tf32 = backends.allow_tf32, True
    try:
        for dt, layout in (
            (torch.float32, "nchw"),
            (torch.float16, "nchw"),
            (torch.float32, "nhwc"),
        ):
            g = cudnn.pygraph(intermediate_data_type=cudnn.data_type.FLOAT)
            x, w = torch.randn(2, 16, 8, 8).to(dt), torch.randn(16, 4, 3, 3).to(dt)
            if layout == "nhwc":
                x, w = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
            y = g.conv_fprop(_tensor(g, x), _tensor(g, w), padding=[1, 1])
            y.set_output(True)
            g.validate()
            e = by_id(47)  # conv_grouped
            cfg = e.configs(g.op_graph, H100)[0]
            keys[(dt, layout)] = e.calibration_key(g.op_graph, cfg)
    finally:
        backends.allow_tf32 = tf32
    assert keys[(torch.float32, "nchw")].endswith(":nchw:fp32"), keys
    assert keys[(torch.float16, "nchw")].endswith(":nchw"), keys
    assert ":nchw" not in keys[(torch.float32, "nhwc")], keys
