"""cudnn-frontend's own Python tests against opendnn, and against real cuDNN on the same
machine: passed / failed / skipped / errors per test file, each side.

    python bench/conformance/cudnn_frontend.py --fetch [URL_OR_PATH]   # lays out the tests
    python bench/conformance/cudnn_frontend.py [--tests DIR] [--side opendnn|cudnn|both]
        [--files test_conv_bias.py,...] [--sample test_mhas.py=2000 ...] [--seed 0]
        [--exclude fp8] [--shard K/N] [--jobs J] [--where-cudnn-passes] [--deps DIR]
        [--timeout 1800] [--out OUT]

DIR is cudnn-frontend's ``test/python`` folder. ``--fetch`` lays it out at run time in
an ignored folder (``.conformance/cudnn-frontend``, the default DIR) from the public
repository (github.com/NVIDIA/cudnn-frontend, or a local clone of it) -- the test files
are never committed. The tests need ``looseversion`` (``--deps``). The opendnn side
imports ``cudnn`` from a generated re-export-only package (``from opendnn.frontend
import *``, with its submodules -- ``cudnn.experimental...``, ``cudnn.datatypes``,
``cudnn.api_base`` -- mapped onto opendnn.frontend's); the cuDNN side imports the real
one (the nvidia-cudnn-frontend wheel, when installed). ``--deps`` is prepended to both
sides' path (the tests' pure-Python needs, e.g. looseversion). The suite's own ``-m L0``
selection runs (its pytest.ini). ``--sample FILE=N`` runs a seeded random sample of N of
FILE's collected cases, the same node ids on both sides (the SDPA files hold tens of
thousands), drawn from the ids containing none of the ``--exclude`` strings; ``--shard
K/N`` runs every N-th of them from the K-th (a sample too long for one sitting runs in
N). The suite draws its shapes from unseeded generators; every case is seeded (Python's,
NumPy's and torch's generators) from ``--seed`` and its place in the collection, so both
sides, and every rerun or shard, run the same shapes. Each (side, file) runs as its own
pytest process with a timeout; ``--jobs J`` runs J of those processes at once, a sample
split into J parts per side (the GPU is shared: the suite's time is mostly host work --
kernel compiles, reference math). ``--where-cudnn-passes`` runs cuDNN's side first and
opendnn's only on the cases cuDNN passed (the acceptance measure at a fraction of the
time: most SDPA cases are ones cuDNN skips); ``--cudnn-from JSON`` takes cuDNN's
outcomes from an earlier run instead (a rerun of opendnn's side after a fix). The table
goes to stdout and the counts, with every failing node id and the head of its message,
to OUT/conformance.json (rewritten after each file).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHIM = (
    "import sys as _sys\n"
    "from opendnn.frontend import *  # noqa: F401,F403\n"
    "from opendnn.frontend import __version__  # noqa: F401\n"
    "import opendnn.frontend.api_base  # noqa: F401\n"
    "import opendnn.frontend.datatypes  # noqa: F401\n"
    "import opendnn.frontend.experimental.ops.sdpa  # noqa: F401\n"
    "# cudnn's submodules resolve to opendnn's modules (not second copies)\n"
    "for _m in ('api_base', 'datatypes', 'experimental', 'experimental.ops',\n"
    "           'experimental.ops.sdpa'):\n"
    "    _sys.modules[__name__ + '.' + _m] = _sys.modules['opendnn.frontend.' + _m]\n"
    "experimental = _sys.modules['opendnn.frontend.experimental']\n"
)
# a pytest plugin keeping only the node ids listed in $CONFORMANCE_IDS (the sample),
# seeding Python's, NumPy's and torch's generators before each case from its place in the
# collection and $CONFORMANCE_SEED, and appending each test's outcome to $CONFORMANCE_LOG
# as it finishes (a file cut short by its timeout keeps the outcomes it reached)
SAMPLE_PLUGIN = """
import json
import os
import random
import sys


_PLACE = {}


def pytest_collection_modifyitems(config, items):
    _PLACE.update((item.nodeid, i) for i, item in enumerate(items))
    path = os.environ.get("CONFORMANCE_IDS")
    if not path:
        return
    keep = set(open(path).read().split("\\n"))
    chosen = [i for i in items if i.nodeid in keep]
    config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in keep])
    items[:] = chosen


def _log(node, outcome, report):
    path = os.environ.get("CONFORMANCE_LOG")
    if not path:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        msg = crash.message
    elif isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        msg = str(report.longrepr[-1])
    else:
        msg = str(report.longrepr or "")
    head = " | ".join(ln.strip() for ln in msg.strip().splitlines()[:4]) if msg else ""
    if outcome in ("failed", "errors"):  # the test's own last printed line (a repro)
        out = [t for n, t in getattr(report, "sections", []) if "stdout" in n]
        lines = [ln for ln in "".join(out).splitlines() if ln.strip(" =")]
        if lines:
            head = lines[-1].strip()[:300] + " || " + head
    with open(path, "a") as f:
        f.write(json.dumps([node, outcome, head[:700]]) + "\\n")


def pytest_runtest_setup(item):
    path = os.environ.get("CONFORMANCE_LOG")
    if path:  # the case now running: a process that dies is charged with it
        with open(path + ".current", "w") as f:
            f.write(item.nodeid)
    # the suite draws shapes from the unseeded global generators: each case is seeded
    # from its place in the collection, so both sides (and every rerun) draw the same
    seed = int(os.environ.get("CONFORMANCE_SEED", "0")) * 1_000_003 + _PLACE.get(item.nodeid, 0)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        outcome = "errors" if report.when != "call" and report.failed else report.outcome
        _log(report.nodeid, outcome, report)


def pytest_collectreport(report):
    if report.failed:
        _log(report.nodeid, "errors", report)
"""


def lay_out(root: Path) -> None:
    """The re-export-only ``cudnn`` package (root/shim) and the sample plugin
    (root/plugin)."""
    pkg = root / "shim" / "cudnn"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(SHIM)
    (root / "plugin").mkdir(parents=True, exist_ok=True)
    (root / "plugin" / "conformance_sample.py").write_text(SAMPLE_PLUGIN)


def fetch(source: str, root: Path) -> Path:
    """cudnn-frontend's ``test/python`` folder, from a shallow clone of SOURCE (a URL or
    a local clone), laid out as root/cudnn-frontend (replacing an earlier one)."""
    clone = root / "repo"
    if clone.exists():
        shutil.rmtree(clone)
    subprocess.run(["git", "clone", "-q", "--depth", "1", source, str(clone)], check=True)
    head = subprocess.run(
        ["git", "-C", str(clone), "log", "-1", "--format=%H %cs"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tests = root / "cudnn-frontend"
    if tests.exists():
        shutil.rmtree(tests)
    shutil.copytree(clone / "test" / "python", tests)
    (tests / "SOURCE").write_text(f"{source} {head}\n")
    shutil.rmtree(clone)
    return tests


def side_env(side: str, deps: str | None, root: Path) -> dict:
    """PYTHONPATH for a side: the plugin and the deps, and on opendnn's side the shim and
    opendnn's sources ahead of them (the deps may hold the real ``cudnn``)."""
    env = dict(os.environ)
    paths = [str(root / "plugin")] + ([deps] if deps else [])
    if side == "opendnn":  # the shim first: deps may hold the real cudnn package
        paths = [str(root / "shim"), str(REPO / "src")] + paths
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def collect(tests: Path, name: str, env: dict) -> list[str]:
    """The node ids of FILE's L0 selection."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", name],
        cwd=tests,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return [ln for ln in out.stdout.splitlines() if "::" in ln]


def run_file(
    tests: Path, name: str, env: dict, timeout: int, ids: list | None, seed: int = 0
) -> dict:
    """One pytest process over FILE: its counts and failures, from the outcomes the
    plugin logged (those reached before the timeout, if it struck)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "outcomes.jsonl"
        env = {**env, "CONFORMANCE_LOG": str(log), "CONFORMANCE_SEED": str(seed)}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        cmd += ["-p", "conformance_sample", name]
        if ids is not None:
            (Path(tmp) / "ids").write_text("\n".join(ids))
            env["CONFORMANCE_IDS"] = str(Path(tmp) / "ids")
        result: dict = {}
        try:
            proc = subprocess.run(
                cmd, cwd=tests, env=env, capture_output=True, text=True, timeout=timeout
            )
            result["tail"] = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            if proc.returncode not in (0, 1, 5):  # pytest's own codes; else it died
                result["exit"] = proc.returncode
        except subprocess.TimeoutExpired:
            result["timeout"] = timeout
        lines = log.read_text().splitlines() if log.exists() else []
        current = Path(str(log) + ".current")
        if "exit" in result and current.exists():  # the case the process died in
            node = current.read_text()
            if not any(json.loads(ln)[0] == node for ln in lines):
                msg = f"the pytest process died in this case (exit {result['exit']})"
                lines.append(json.dumps([node, "errors", msg]))
    if not lines and "timeout" not in result:
        return {"no_report": result["tail"]}
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    failures, skips, outcomes = [], {}, {}
    for node, outcome, msg in map(json.loads, lines):
        counts[outcome] += 1
        outcomes[node] = outcome[0]  # p, f, s, e: the sides compared case by case
        if outcome in ("failed", "errors"):
            failures.append([node, msg])
        elif outcome == "skipped":
            skips[msg[:120]] = skips.get(msg[:120], 0) + 1
    return {**counts, "failures": failures, "skips": skips, "outcomes": outcomes, **result}


def merge(runs: list[dict]) -> dict:
    """One (side, file) result from the results of its parts (none: an empty sample)."""
    if len(runs) == 1:
        return runs[0]
    got = [r for r in runs if "no_report" not in r]
    if runs and not got:
        return runs[0]
    out: dict = {k: sum(r[k] for r in got) for k in ("passed", "failed", "skipped", "errors")}
    out["failures"] = [f for r in got for f in r["failures"]]
    out["skips"], out["outcomes"] = {}, {}
    for r in got:
        out["outcomes"].update(r["outcomes"])
        for k, v in r["skips"].items():
            out["skips"][k] = out["skips"].get(k, 0) + v
    if any("exit" in r for r in got):  # parts that died: the cases after are unreached
        out["exit"] = [r["exit"] for r in got if "exit" in r]
    if any("timeout" in r for r in got):
        out["timeout"] = max(r.get("timeout", 0) for r in got)
    if len(got) < len(runs):
        out["parts_without_report"] = len(runs) - len(got)
    return out


def _by_place(r: dict, every: list) -> dict:
    """A side's result with its outcomes and failures keyed by collection place (the
    sides name some cases differently: pytest ids of their own enum objects)."""
    place = {n: i for i, n in enumerate(every)}
    r["outcomes"] = {str(place.get(n, n)): o for n, o in r.get("outcomes", {}).items()}
    r["failures"] = [[str(place.get(n, n)), n, m] for n, m in r.get("failures", [])]
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--tests",
        default=str(REPO / ".conformance" / "cudnn-frontend"),
        help="cudnn-frontend's test/python folder (default: where --fetch lays it out)",
    )
    ap.add_argument(
        "--fetch",
        nargs="?",
        const="https://github.com/NVIDIA/cudnn-frontend",
        metavar="URL_OR_PATH",
        help="no run: lay out cudnn-frontend's tests from its repository (or a clone)",
    )
    ap.add_argument(
        "--compare",
        nargs="+",
        metavar="JSON",
        help="no run: merge conformance.json files of earlier runs (either side, any "
        "files) and print the table and the case-by-case comparison",
    )
    ap.add_argument("--side", choices=["opendnn", "cudnn", "both"], default="both")
    ap.add_argument("--files", default="", help="comma list (default: every test_*.py)")
    ap.add_argument("--sample", action="append", default=[], help="FILE=N, repeatable")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--exclude", action="append", default=[], help="drop sampled ids containing this"
    )
    ap.add_argument(
        "--shard", default="1/1", help="K/N: run the K-th of N equal parts of each sample"
    )
    ap.add_argument(
        "--jobs", type=int, default=1, help="pytest processes at once (a sample split in J)"
    )
    ap.add_argument(
        "--where-cudnn-passes",
        action="store_true",
        help="cuDNN's side first, then opendnn's only on the cases cuDNN passed",
    )
    ap.add_argument(
        "--cudnn-from",
        metavar="JSON",
        help="with --where-cudnn-passes: cuDNN's outcomes from an earlier run's "
        "conformance.json (same files, sample and seed) instead of running its side",
    )
    ap.add_argument("--deps", default=None, help="a folder prepended to both sides' path")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per (side, file)")
    ap.add_argument("--out", default=str(REPO / ".conformance" / "out"))
    args = ap.parse_args(argv)
    if args.compare:
        merged: dict = {}
        for path in args.compare:
            for name, by in json.loads(Path(path).read_text()).items():
                merged.setdefault(name, {}).update(by)
        report(merged)
        return 0
    root = REPO / ".conformance"
    if args.fetch:
        print(f"cudnn-frontend's tests laid out in {fetch(args.fetch, root)}")
        return 0
    tests = Path(args.tests).resolve()
    if not tests.is_dir():
        ap.error(f"no test folder at {tests}: lay it out with --fetch")
    lay_out(root)
    files = [f for f in args.files.split(",") if f] or sorted(
        p.name for p in tests.glob("test_*.py")
    )
    samples = {k: int(v) for k, v in (s.split("=") for s in args.sample)}
    sides = ["opendnn", "cudnn"] if args.side == "both" else [args.side]
    envs = {s: side_env(s, args.deps, root) for s in sides}
    results: dict = {}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(max(1, args.jobs))
    lock = threading.Lock()
    earlier = json.loads(Path(args.cudnn_from).read_text()) if args.cudnn_from else {}

    def one(name: str) -> None:
        # the sides name some cases differently (pytest ids of their own enum objects),
        # so cases are matched by their place in the collection order, the same on both
        every = dict(zip(sides, pool.map(lambda s: collect(tests, name, envs[s]), sides)))
        if len({len(v) for v in every.values()}) > 1:
            print(f"{name}: the sides collect {[len(v) for v in every.values()]} cases")
        first = every[sides[0]]
        places = [i for i, n in enumerate(first) if not any(x in n for x in args.exclude)]
        sampled = name in samples or bool(args.exclude)
        if name in samples:  # the same cases on both sides
            places = sorted(
                random.Random(args.seed).sample(places, min(samples[name], len(places)))
            )
            k, n = map(int, args.shard.split("/"))
            places = places[k - 1 :: n]
        # phases: both sides at once, or (--where-cudnn-passes) cuDNN's, then opendnn's
        # on the places cuDNN passed
        phased = args.where_cudnn_passes and len(sides) == 2
        for phase in [["cudnn"], ["opendnn"]] if phased else [sides]:
            if phase == ["cudnn"] and "cudnn" in earlier.get(name, {}):
                with lock:
                    results.setdefault(name, {})["cudnn"] = earlier[name]["cudnn"]
                continue
            if phased and phase == ["opendnn"]:
                passed = results[name]["cudnn"].get("outcomes", {})
                places = [i for i in places if passed.get(str(i)) == "p"]
                sampled = True
            parts = max(1, args.jobs // len(phase)) if sampled else 1
            tasks = []
            for side in phase:
                ids = [every[side][i] for i in places if i < len(every[side])]
                chunks = [ids[j::parts] for j in range(parts)] if sampled else [None]
                tasks += [(side, chunk) for chunk in chunks if chunk != []]
            runs = list(
                pool.map(
                    lambda t: run_file(tests, name, envs[t[0]], args.timeout, t[1], args.seed),
                    tasks,
                )
            )
            for side in phase:
                r = merge([run for (s, _), run in zip(tasks, runs) if s == side])
                r = _by_place(r, every[side])
                if phased and phase == ["opendnn"]:
                    r["only_where_cudnn_passes"] = True
                with lock:
                    results.setdefault(name, {})[side] = r
                    print(f"{name:44s} {side:8s} {_fmt(r)}", flush=True)
        with lock:  # rewritten after every file: a run cut short keeps what it finished
            (out / "conformance.json").write_text(json.dumps(results, indent=1))

    # files run side by side; the pool above bounds the pytest processes at J
    with pool, ThreadPoolExecutor(max(1, args.jobs)) as files_pool:
        list(files_pool.map(one, files))
    report(results)
    return 0


def report(results: dict) -> None:
    """The per-file table, each side's counts; where both sides ran a file, how many of
    the cases cuDNN passed opendnn passes."""
    sides = [s for s in ("opendnn", "cudnn") if any(s in by for by in results.values())]
    print(f"\n{'file':44s} " + "  ".join(f"{s:>30s}" for s in sides))
    for name, by in results.items():
        print(f"{name:44s} " + "  ".join(f"{_fmt(by[s]) if s in by else '-':>30s}" for s in sides))
    both = {n: by for n, by in results.items() if "cudnn" in by and "opendnn" in by}
    if both:
        print("\ncases passing on cuDNN that pass on opendnn:")
        for name, by in both.items():
            print(f"{name:44s} {compare(by['cudnn'], by['opendnn'])}")


def compare(cudnn: dict, ours: dict) -> str:
    """How many of the cases real cuDNN passed opendnn passes (one it never reached -- a
    timeout, a process that died -- counts against it); the outcomes are keyed by the
    cases' places in their file's collection order."""
    theirs = {n for n, o in cudnn.get("outcomes", {}).items() if o == "p"}
    mine = ours.get("outcomes", {})
    reached = [n for n in theirs if n in mine]
    good = sum(mine[n] == "p" for n in reached)
    if not reached:
        return "no common cases"
    out = f"{good} / {len(theirs)} ({100.0 * good / len(theirs):.1f}%)"
    if len(reached) < len(theirs):  # cut by a timeout, or a process that died
        out += f", {len(theirs) - len(reached)} not reached"
    return out


def _fmt(r: dict) -> str:
    if "no_report" in r:
        return "no report: " + " | ".join(r["no_report"])[:60]
    cut = f" (cut at {r['timeout']} s)" if "timeout" in r else ""
    if "exit" in r:
        cut += f" (a process died: exit {r['exit']})"
    if r.get("only_where_cudnn_passes"):
        cut += " (cuDNN's passes only)"
    return f"{r['passed']} pass {r['failed']} fail {r['skipped']} skip {r['errors']} err{cut}"


if __name__ == "__main__":
    sys.exit(main())
