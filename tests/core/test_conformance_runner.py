"""The cudnn-frontend conformance runner (bench/conformance/cudnn_frontend.py) on a small
stand-in suite: per-file counts from the outcomes each test logs, the re-export-only shim,
the seeded sample (split over parallel processes or not) and a file cut by its timeout
keeping what it reached."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SUITE = """
import time

import pytest

import cudnn


def test_shim_is_opendnn():
    assert cudnn.backend_version() >= 91900
    assert cudnn.experimental.ops.sdpa.scaled_dot_product_attention


def test_fails():
    assert 1 == 2, "one is not two"


@pytest.mark.skip(reason="not here")
def test_skipped():
    pass


@pytest.mark.parametrize("i", range(3))
def test_slow(i):
    time.sleep(30 * (i == 2))
"""


def _runner():
    spec = importlib.util.spec_from_file_location(
        "cf_runner", REPO / "bench" / "conformance" / "cudnn_frontend.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(tmp_path, *extra, suite=SUITE):
    (tmp_path / "suite").mkdir(exist_ok=True)
    (tmp_path / "suite" / "test_stand_in.py").write_text(suite)
    out = tmp_path / "out"
    args = ["--tests", str(tmp_path / "suite"), "--side", "opendnn", "--out", str(out)]
    assert _runner().main(args + list(extra)) == 0
    return json.loads((out / "conformance.json").read_text())["test_stand_in.py"]["opendnn"]


def test_counts_and_a_file_cut_by_its_timeout(tmp_path):
    r = _run(tmp_path, "--timeout", "15")
    assert r["timeout"] == 15  # cut in test_slow[2]; the outcomes before it are kept
    assert (r["passed"], r["failed"], r["skipped"], r["errors"]) == (3, 1, 1, 0)
    [(place, node, msg)] = r["failures"]  # its place in the collection order, id, message
    assert (place, node) == ("1", "test_stand_in.py::test_fails")
    assert msg.startswith("AssertionError: one is not two | assert 1 == 2")


def test_seeded_sample(tmp_path):
    r = _run(tmp_path, "--sample", "test_stand_in.py=2", "--seed", "1", "--timeout", "60")
    assert r["passed"] + r["failed"] + r["skipped"] + r["errors"] <= 2
    again = _run(tmp_path, "--sample", "test_stand_in.py=2", "--seed", "1", "--timeout", "60")
    assert {k: v for k, v in again.items() if k != "tail"} == {
        k: v for k, v in r.items() if k != "tail"
    }


def test_a_sample_split_over_jobs_merges_to_the_same_result(tmp_path):
    sample = ["--sample", "test_stand_in.py=4", "--exclude", "slow[2]", "--timeout", "60"]
    one = _run(tmp_path, *sample)
    two = _run(tmp_path, *sample, "--jobs", "4")  # two parts on the one side
    assert (one["passed"], one["failed"], one["skipped"]) == (3, 1, 0)
    for key in ("passed", "failed", "skipped", "errors", "outcomes", "skips"):
        assert two[key] == one[key], key
    assert sorted(two["failures"]) == sorted(one["failures"])


DRAWS = """
import os
import random

import pytest


@pytest.mark.parametrize("i", range(4))
def test_draw(i):
    with open(os.environ["DRAWS"], "a") as f:
        f.write(f"{i} {random.random()}\\n")
"""


def test_every_case_draws_the_same_whatever_ran_before_it(tmp_path, monkeypatch):
    """The suite's unseeded random draws are seeded per case from its collection place:
    a case draws the same in the whole file and in a sample without its predecessors."""
    runs = []
    for extra in ([], ["--sample", "test_stand_in.py=2"]):
        log = tmp_path / f"draws{len(runs)}"
        monkeypatch.setenv("DRAWS", str(log))
        _run(tmp_path, *extra, "--seed", "0", suite=DRAWS)
        runs.append(dict(line.split() for line in log.read_text().splitlines()))
    whole, sample = runs
    assert len(whole) == 4 and len(set(whole.values())) == 4
    assert len(sample) == 2 and all(whole[i] == v for i, v in sample.items())
