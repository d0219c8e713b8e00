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


PASSES_ON_CUDNN = """
import pytest

import cudnn


@pytest.mark.parametrize("i", range(4))
def test_case(i):
    assert i % 2 == 0 or getattr(cudnn, "REAL", False)
"""


def test_opendnn_runs_only_where_cudnn_passes(tmp_path):
    """--where-cudnn-passes: cuDNN's side runs first, opendnn's only on the cases cuDNN
    passed (here a stand-in ``cudnn`` package in --deps passes cases 0 and 1)."""
    fake = tmp_path / "deps" / "cudnn"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_stand_in.py").write_text(PASSES_ON_CUDNN)
    out = tmp_path / "out"
    args = ["--tests", str(tmp_path / "suite"), "--deps", str(tmp_path / "deps")]
    args += ["--out", str(out), "--sample", "test_stand_in.py=3", "--seed", "3"]
    assert _runner().main(args + ["--where-cudnn-passes", "--jobs", "2"]) == 0
    both = json.loads((out / "conformance.json").read_text())["test_stand_in.py"]
    assert both["cudnn"]["passed"] == 3 and len(both["cudnn"]["outcomes"]) == 3
    assert both["opendnn"]["outcomes"].keys() == both["cudnn"]["outcomes"].keys()
    assert both["opendnn"]["only_where_cudnn_passes"]
    odd = [p for p in both["opendnn"]["outcomes"] if int(p) % 2]
    assert sorted(f[0] for f in both["opendnn"]["failures"]) == odd
    # a rerun of opendnn's side on the cases of an earlier cuDNN run
    (fake / "__init__.py").write_text("raise ImportError('cuDNN side must not run')\n")
    earlier = tmp_path / "earlier.json"
    earlier.write_text((out / "conformance.json").read_text())
    assert _runner().main(args + ["--where-cudnn-passes", "--cudnn-from", str(earlier)]) == 0
    again = json.loads((out / "conformance.json").read_text())["test_stand_in.py"]
    assert again["cudnn"] == both["cudnn"]
    assert again["opendnn"]["outcomes"] == both["opendnn"]["outcomes"]


def test_fetch_lays_out_the_test_folder(tmp_path, monkeypatch):
    """--fetch clones a repository (here a local one) and keeps its test/python folder,
    with the source and commit it came from."""
    import subprocess

    src = tmp_path / "src"
    (src / "test" / "python").mkdir(parents=True)
    (src / "test" / "python" / "test_x.py").write_text("def test_x():\n    pass\n")
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    runner = _runner()
    tests = runner.fetch(str(src), tmp_path / "root")
    assert (tests / "test_x.py").exists() and not (tmp_path / "root" / "repo").exists()
    assert (tests / "SOURCE").read_text().startswith(str(src))


DIES = """
import os

import pytest


@pytest.mark.parametrize("i", range(4))
def test_case(i):
    if i == 2:
        os._exit(139)  # as a segfault would end it: no report, no teardown
"""


def test_a_process_that_dies_is_charged_with_its_case(tmp_path):
    """A pytest process that dies mid-file (a crash in a kernel, say) keeps the outcomes
    before it, charges the case it died in as an error and reports its exit code."""
    r = _run(tmp_path, "--timeout", "60", suite=DIES)
    assert (r["passed"], r["errors"], r["exit"]) == (2, 1, 139)
    [(place, node, msg)] = r["failures"]
    assert (place, node) == ("2", "test_stand_in.py::test_case[2]")
    assert "died in this case (exit 139)" in msg
