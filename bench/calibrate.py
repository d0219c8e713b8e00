"""Fit ``MEASURED_SCALES`` (src/opendnn/engines/calibration.py) to the conv results.

Every row of bench/results/<gpu>/conv.json carries the find's timings of its top
candidates (``timed``: plan label -> ms). For each row this script rebuilds the layer's
graph (meta tensors, no GPU needed), evaluates each timed config's cost model
(``estimate_seconds``, uncalibrated) on the GPU's target, and fits

    log(measured) = log(model) + row offset + family factor

by alternating least squares over all rows; a family seen in n timings is shrunk towards
1 as n / (n + SHRINK). A layout-transform plan (``conv_*_channels_last``) has a key of its
own, outer/inner (the inner engine's key after the slash): its model already holds the
inner engine's factor, so its factor is what the copies and the strided epilogue add.
The script prints the factors as the table to paste, then replays mode A on the recorded
timings with the old and the new factors: mode A's first timed plan against the find's
best per row (geomean, worst, rows below 0.8). The transform plans' models hold the inner
factors in the library, so paste and rerun until the replay stops moving.

What it decides: ``MEASURED_SCALES``. Run after a cost model or a kernel changes and the
conv results were measured again:

    PYTHONPATH=src python bench/calibrate.py [bench/results/h100/conv.json ...] [--gpu H100]
"""

import argparse
import collections
import math
import re

from opendnn import backends
from opendnn.bench.conv import _graph, set_tensors
from opendnn.engines import calibration
from opendnn.engines.base import EngineConfig, Target
from opendnn.engines.conv import shapes
from opendnn.engines.registry import by_id
from opendnn.enums import HeurMode
from opendnn.handle import _KNOWN
from opendnn.heuristics import candidate_plans

SHRINK = 3.0
SMS = {"H100": 132, "H200": 132}


def parse(label: str) -> tuple[int, dict]:
    """(engine id, knobs) of a plan label ``name#id{K=v,...}``."""
    m = re.fullmatch(r"(.*)#(\d+)\{(.*)\}", label)
    knobs = {}
    for k, v in re.findall(r"(\w+)=([^,]*)", m.group(3)):
        knobs[k] = (
            int(v) if re.fullmatch(r"-?\d+", v) else (v == "True" if v in ("True", "False") else v)
        )
    return int(m.group(2)), knobs


def layer_of(case: str):
    """(kind, variant, layer) of a row's case name (ResNet-50 rows keep their old names)."""
    sets = {f"{s}/{lay.name}": lay for s in shapes.BENCH_SETS for lay in shapes.BENCH_SETS[s]}
    rs50 = {lay.name: lay for lay in shapes.BENCH_SETS["resnet50"]}
    p = case.split()
    kind = "fprop" if p[0] == "tf32" else p[0]
    if p[-1] in sets:
        return kind, p[1], sets[p[-1]]
    return kind, ("nhwc-bf16" if p[1] == "nhwc" else "nchw-tf32"), rs50[p[-1]]


def collect(paths, target) -> list:
    """Per row: (case, [(family, log model, log ms, label)], [(family, log model, label)]
    of mode A's candidates)."""
    import json

    out = []
    for path in paths:
        for r in json.load(open(path))["rows"]:
            if len(r.get("timed") or {}) < 2 or r["case"].startswith("fused"):
                continue
            kind, variant, lay = layer_of(r["case"])
            backends.allow_tf32 = variant == "nchw-tf32"
            x, w, b, dy = set_tensors(lay, variant, device="meta")
            g = _graph(kind, x, w, b, dy, lay)[0]
            g.validate()
            timed = []
            for label, ms in r["timed"].items():
                eid, knobs = parse(label)
                e = by_id(eid)
                cfg = EngineConfig.make(e, **knobs)
                t = e.estimate_seconds(g.op_graph, cfg, target)
                key = e.calibration_key(g.op_graph, cfg)
                timed.append((key, math.log(t), math.log(ms), label))
            plans, _ = candidate_plans(g.op_graph, (HeurMode.A,), target, None, False)
            cands = []
            for p in plans:
                st = p.stages[0]
                e = by_id(st.config.engine_id)
                t = e.estimate_seconds(st.graph, st.config, target)
                cands.append((e.calibration_key(st.graph, st.config), math.log(t), p.name))
            out.append((r["case"], timed, cands))
    return out


def fit(rows) -> dict:
    fams = {f for _, timed, _ in rows for f, *_ in timed}
    c = dict.fromkeys(fams, 0.0)
    for _ in range(300):
        off = {
            case: sum(lm - le - c[f] for f, le, lm, _ in timed) / len(timed)
            for case, timed, _ in rows
        }
        res = collections.defaultdict(list)
        for case, timed, _ in rows:
            for f, le, lm, _ in timed:
                res[f].append(lm - le - off[case])
        c = {f: sum(v) / (len(v) + SHRINK) for f, v in res.items()}
        ref = c.get("conv_implicit_gemm:gather", 0.0)
        c = {f: v - ref for f, v in c.items()}
    return c


def replay(rows, scale) -> tuple:
    """(geomean, worst, rows below 0.8, [(ratio, case, first)]) of mode A's first timed
    plan under log factors ``scale``."""
    res = []
    for case, timed, cands in rows:
        ms = {label: lm for _, _, lm, label in timed}
        ranked = sorted(cands, key=lambda a: a[1] + scale(a[0]))
        first = next((n for *_, n in ranked if n in ms), None)
        if first:
            res.append((math.exp(min(ms.values()) - ms[first]), case, first))
    res.sort()
    v = [a for a, *_ in res]
    return math.exp(sum(map(math.log, v)) / len(v)), v[0], sum(a < 0.8 for a in v), res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=["bench/results/h100/conv.json"])
    ap.add_argument("--gpu", default="H100")
    ap.add_argument(
        "--worst", type=int, default=10, help="rows to list (the library's current factors)"
    )
    args = ap.parse_args()
    target = Target("cuda", args.gpu, (9, 0), SMS[args.gpu], **_KNOWN[args.gpu])
    rows = collect(args.paths, target)
    c = fit(rows)
    n = collections.Counter(f for _, timed, _ in rows for f, *_ in timed)
    print("MEASURED_SCALES = {")
    for f in sorted(c):
        print(f'    "{f}": {math.exp(c[f]):.2f},  # {n[f]} timings')
    print("}")

    def old(f):
        return math.log(calibration.measured_scale(f, f.split(":")[0].split("/")[0]))

    for name, scale in (("model only", lambda f: 0.0), ("current", old), ("fitted", c.get)):
        geo, worst, low, res = replay(rows, lambda f, s=scale: s(f) or 0.0)
        print(
            f"{name:10s} mode A / best over {len(res)} rows: geomean {geo:.3f}, worst "
            f"{worst:.3f}, {low} below 0.8"
        )
    # the rows mode A misses most with the factors in the library now
    for ratio, case, first in replay(rows, old)[3][: args.worst]:
        print(f"  {ratio:.3f} {case}: {first[:90]}")


if __name__ == "__main__":
    main()
