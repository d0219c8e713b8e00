"""Test configuration: per-test seeded inputs, an isolated cache directory, clean switches."""

from __future__ import annotations

import logging
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from _util import Rng, seed_for  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--reliability-budget",
        type=int,
        default=1,
        help="multiplies the case counts of tests/reliability (the fuzzer, the "
        "concurrency and leak tests); CI runs 1",
    )


def pytest_configure(config):
    # Masked-off lanes of interpreted kernels compute on the `other=0` fill (log(0), 1/0):
    # NumPy's warnings about those lanes are noise, not results.
    config.addinivalue_line("filterwarnings", "ignore::RuntimeWarning:triton.runtime.interpreter")
    config.addinivalue_line(
        "filterwarnings", "ignore::DeprecationWarning:triton.runtime.interpreter"
    )


# Tests that run for minutes on the CPU (test_tiny_resnet_50_step_curve: ~570 s of a
# ~15-minute suite on two workers). They go first, so that with `-n 2 --dist worksteal`
# one worker runs them while the other works through the rest, instead of one of them
# starting last and running alone.
LONG_TESTS = ("test_torch_models.py::test_tiny_resnet_50_step_curve",)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda it: not it.nodeid.endswith(LONG_TESTS))


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Generated kernels and autotune results go to a fresh directory for this session, so
    a user's cache can neither help nor break the tests."""
    d = tmp_path_factory.mktemp("opendnn-cache")
    old = os.environ.get("OPENDNN_CACHE_DIR")
    os.environ["OPENDNN_CACHE_DIR"] = str(d)
    from opendnn.runtime import autotune

    autotune.forget_memory()
    yield d
    if old is None:
        os.environ.pop("OPENDNN_CACHE_DIR", None)
    else:
        os.environ["OPENDNN_CACHE_DIR"] = old
    autotune.forget_memory()


@pytest.fixture(autouse=True)
def _clean_switches():
    """Every test starts with opendnn.backends at its defaults and leaves it so."""
    from opendnn import backends

    saved = {
        k: getattr(backends, k)
        for k in (
            "benchmark",
            "deterministic",
            "allow_tf32",
            "benchmark_limit",
            "workspace_limit",
            "plan_cache_size",
            "kernel_cache_size",
            "legacy_cache_size",
            "disk_cache_max_bytes",
            "disk_cache_max_age_days",
        )
    }
    yield
    for k, v in saved.items():
        setattr(backends, k, v)


@pytest.fixture
def rng(request) -> Rng:
    """Inputs drawn fresh for each test case; the seed is printed in every repro line.
    The seed comes from the file's name and the test's, not its folder
    (``tests/<file>::<test>``): a test file moved between family folders keeps its inputs."""
    return Rng(seed_for(stable_test_id(request.node.nodeid)))


def stable_test_id(nodeid: str) -> str:
    """``tests/<family>/test_x.py::case`` -> ``tests/test_x.py::case``."""
    path, sep, rest = nodeid.partition("::")
    return f"tests/{os.path.basename(path)}{sep}{rest}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test that drew random inputs reports its seed and how to rerun it."""
    outcome = yield
    rep = outcome.get_result()
    r = getattr(item, "funcargs", {}).get("rng")
    if rep.failed and r is not None:
        rep.sections.append(
            (
                "repro",
                f"seed={r.seed} (OPENDNN_TEST_SEED="
                f"{os.environ.get('OPENDNN_TEST_SEED', '0')}); rerun: "
                f"PYTHONPATH=src python -m pytest '{item.nodeid}'",
            )
        )


@pytest.fixture
def opendnn_log(monkeypatch):
    """The messages opendnn logs at OPENDNN_LOG=info during the test."""
    monkeypatch.setenv("OPENDNN_LOG", "info")
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger, handler = logging.getLogger("opendnn"), Keep()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)
