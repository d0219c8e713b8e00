"""The special-values fuzzer (``fuzz_values.py``) in CI: a seeded budget of random graphs
on the fast engines and the reference against PyTorch, and a check that the comparison
has teeth (a known-broken mode is caught).

``--reliability-budget N`` runs N times the cases; ``OPENDNN_TEST_SEED`` moves the seed.
A failure lists each failing case with the command that reruns it alone.
"""

from __future__ import annotations

import math

import fuzz_values as fv
from _util import fresh_plan_caches, seed_for

CASES = 1000  # ~15 s on one core of the CI machine


def test_fuzz_special_values(request):
    """Every case's outputs match PyTorch (E64 or the compute type's own), NaN and
    infinities exactly, on the fast engine and on the reference."""
    budget = request.config.getoption("--reliability-budget")
    seed = seed_for("fuzz_values")
    lines: list[str] = []
    failures = fv.run(seed, CASES * budget, out=lines.append)
    assert not failures, (
        f"{len(failures)} of {CASES * budget} cases fail (seed {seed}):\n" + "\n".join(lines[:30])
    )


def test_fuzzer_catches_a_broken_mode(monkeypatch):
    """With relu's lower side written back as lo + slope (x - lo) (0 * -inf = NaN), the
    fuzzer's cases holding a relu of slope 0 fail, each with its reproduction line."""
    from opendnn.enums import PointwiseMode as M
    from opendnn.ops import pointwise as P

    def broken(x, at):
        lo, hi, slope = (
            P._f(at[k]) for k in ("relu_lower_clip", "relu_upper_clip", "relu_lower_clip_slope")
        )
        return f"tl.where({x} > {lo}, tl.minimum({x}, {hi}), {lo} + {slope} * ({x} - {lo}))"

    spec = P.MODES[M.RELU_FWD]
    monkeypatch.setitem(
        P.MODES, M.RELU_FWD, P.ModeSpec(spec.arity, spec.ref, broken, spec.frontend)
    )
    fresh_plan_caches(monkeypatch)  # no plan built before the patch is handed back
    seed = seed_for("fuzz_values_teeth")
    picked = []
    for i in range(3000):
        case = fv.make_case(seed, i, "pointwise")
        first = case.nodes[0]
        if (
            first[0] == M.RELU_FWD
            and first[1]["relu_lower_clip_slope"] == 0
            and bool((case.inputs[0] == -math.inf).any())
        ):
            picked.append(i)
        if len(picked) == 8:
            break
    assert picked, "no relu case with -inf in 3000: the generator changed"
    caught = []
    for i in picked:
        lines: list[str] = []
        caught += fv.run(seed, 1, start=i, out=lines.append, family="pointwise")
        assert all("repro: python tests/reliability/fuzz_values.py" in ln for ln in lines)
    assert len(caught) == len(picked), (
        f"the broken relu passed in cases {sorted(set(picked) - {c[0] for c in caught})}"
    )
