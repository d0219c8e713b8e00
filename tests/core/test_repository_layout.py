"""The repository's layout rules, checked so that they stay true:

- the package's modules import each other without cycles (module-level imports; an
  import inside a function or under ``TYPE_CHECKING`` is not a load-order dependency);
- every engine family folder has its design note, ``docs/design/<family>.md``;
- the library and its documentation speak of the library only: no numbered work
  rounds, issue numbers, run tags or one-off probe scripts, which a reader cannot look up;
- ``bench/`` holds only what a contributor reruns (under 40 files).
"""

from __future__ import annotations

import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src", "opendnn")
ENGINES = os.path.join(SRC, "engines")

# what a reader cannot look up: "session 14", "issue 27", "issue #3", run tags such as
# "h100-2026-11-23-s14", probe scripts, the notes folder that the design notes replaced
FORBIDDEN = re.compile(
    r"\bsessions? \d|\bissues? #?\d|\b[a-z]\d{3}-\d{4}-\d\d-\d\d|_probe\d*\.py|bench/notes"
    r"|results/probes",
    re.IGNORECASE,
)


def _files(top: str, suffixes: tuple) -> list[str]:
    out = []
    for folder, dirs, files in os.walk(top):
        dirs[:] = [
            d
            for d in dirs
            if d != "__pycache__" and not d.startswith(".") and not d.endswith(".egg-info")
        ]
        out += [os.path.join(folder, f) for f in files if f.endswith(suffixes)]
    return sorted(out)


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(SRC))[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def _module_imports(path: str, name: str, modules: set) -> set:
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    deps = set()
    for node in ast.parse(open(path, encoding="utf-8").read()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            continue
        for n in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(n, ast.ImportFrom):
                if n.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - n.level + 1] + [n.module or ""])
                else:
                    base = n.module or ""
                base = base.rstrip(".")
                for a in n.names:
                    deps.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
            elif isinstance(n, ast.Import):
                deps.update(a.name for a in n.names)
    return {d for d in deps if d in modules and d != name}


def test_no_import_cycles():
    paths = {_module_name(p): p for p in _files(SRC, (".py",))}
    edges = {m: _module_imports(p, m, set(paths)) for m, p in paths.items()}
    state: dict = {}  # module -> "open" while on the walk, "done" after

    def walk(m, trail):
        state[m] = "open"
        for d in sorted(edges[m]):
            if state.get(d) == "open":
                cycle = trail[trail.index(d) :] + [d]
                pytest.fail("module-level import cycle: " + " -> ".join(cycle))
            if d not in state:
                walk(d, trail + [d])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            walk(m, [m])


def test_every_engine_family_has_a_design_note():
    families = [
        d
        for d in sorted(os.listdir(ENGINES))
        if os.path.isdir(os.path.join(ENGINES, d)) and not d.startswith(("_", "."))
    ]
    assert "conv" in families and "attention" in families, families
    missing = [
        f for f in families if not os.path.exists(os.path.join(ROOT, "docs", "design", f + ".md"))
    ]
    assert not missing, f"engine families without docs/design/<family>.md: {missing}"


@pytest.mark.parametrize("top", ["src", "docs"])
def test_library_and_docs_name_no_work_rounds_or_issues(top):
    hits = []
    for path in _files(os.path.join(ROOT, top), (".py", ".md", ".txt", ".toml")):
        for i, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
            if FORBIDDEN.search(line):
                hits.append(f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()[:90]}")
    assert not hits, "references a reader cannot look up:\n" + "\n".join(hits)


def test_bench_holds_only_what_a_contributor_reruns():
    files = _files(os.path.join(ROOT, "bench"), ("",))
    assert 0 < len(files) < 40, f"{len(files)} files under bench/"
    assert not [f for f in files if "probe" in os.path.basename(f)], files
