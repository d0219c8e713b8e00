"""The on-disk caches when the file system is in the way: every case must degrade to a
warning, never an error, a wrong result or a hang.

The matrix: the autotune file truncated, random bytes, JSON of the wrong shapes, JSON
nested 100,000 deep, a directory or a FIFO in its place; the cache folder a FIFO, a
regular file, below a regular file (cannot be created: unwritable even for root),
uncreatable (in /proc), read-only (chmod; not for root, who writes anyway); ``kernels``
a regular file; a FIFO or a directory where a generated kernel goes. In each case a
pointwise operation on CPU tensors (benchmark mode on, so it reads and writes the
autotune file too) must return torch's result exactly, issue a RuntimeWarning and
finish within the case's timeout. Every failure message starts with a one-line
reproduction.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import warnings

import pytest
import torch

import opendnn
import opendnn.torch.functional as F
from opendnn import backends
from opendnn.runtime import autotune, launch

SRC = os.path.dirname(os.path.dirname(opendnn.__file__))  # the opendnn under test
CASE_TIMEOUT_S = 60
FORMAT = "opendnn-autotune-v1"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _repro(request, **params) -> str:
    extra = " ".join(f"{k}={v}" for k, v in params.items())
    return f"repro: PYTHONPATH={SRC} python -m pytest '{request.node.nodeid}' [{extra}]"


_counter = [random.randrange(1, 1 << 16) * 64]


def _fresh_bounds() -> tuple[float, float]:
    """hardtanh bounds new to this process (a new generated kernel), exact in float32."""
    _counter[0] += 1
    return -1.0 - _counter[0] / 1048576, 1.0 + _counter[0] / 524288


def _autotune_file(content: bytes):
    def make(root):
        os.makedirs(root)
        with open(os.path.join(root, "autotune-v1.json"), "wb") as f:
            f.write(content)
        return root

    return make


def _truncated() -> bytes:
    doc = {
        "format": FORMAT,
        "entries": {f"p{i}|cpu": {"order": ["a", "b"], "times_ms": [1, 2]} for i in range(20)},
    }
    text = json.dumps(doc).encode()
    return text[: len(text) // 2]


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _in_entry(depth: int) -> bytes:
    return b'{"format": "%s", "entries": {"k": ' % FORMAT.encode() + _nested(depth) + b"}}"


def _dir_at_file(root):
    os.makedirs(os.path.join(root, "autotune-v1.json"))
    return root


def _fifo_at_file(root):
    os.makedirs(root)
    os.mkfifo(os.path.join(root, "autotune-v1.json"))
    return root


def _fifo_as_folder(root):
    os.makedirs(os.path.dirname(root), exist_ok=True)
    os.mkfifo(root)
    return root


def _file_as_folder(root):
    os.makedirs(os.path.dirname(root), exist_ok=True)
    with open(root, "w") as f:
        f.write("not a folder")
    return root


def _below_a_file(root):
    _file_as_folder(root)
    return os.path.join(root, "cache")


def _uncreatable(root):
    return "/proc/opendnn-cache-cannot-be-made"


def _read_only(root):
    os.makedirs(root)
    os.chmod(root, 0o555)
    return root


def _kernels_a_file(root):
    os.makedirs(root)
    with open(os.path.join(root, "kernels"), "w") as f:
        f.write("not a folder")
    return root


CASES = {
    "truncated": _autotune_file(_truncated()),
    "random-bytes": _autotune_file(random.Random(7).randbytes(4096)),
    "empty": _autotune_file(b""),
    "json-list": _autotune_file(b"[1, 2, 3]"),
    "json-string": _autotune_file(b'"opendnn"'),
    "entries-a-list": _autotune_file(b'{"format": "%s", "entries": []}' % FORMAT.encode()),
    "foreign-format": _autotune_file(b'{"format": "someone-else", "entries": {}}'),
    "record-not-a-dict": _autotune_file(
        b'{"format": "%s", "entries": {"k": 42}}' % FORMAT.encode()
    ),
    "record-order-not-list": _autotune_file(
        b'{"format": "%s", "entries": {"k": {"order": "ab"}}}' % FORMAT.encode()
    ),
    "record-order-not-str": _autotune_file(
        b'{"format": "%s", "entries": {"k": {"order": [1, null]}}}' % FORMAT.encode()
    ),
    "nested-100k": _autotune_file(_nested(100_000)),
    "nested-100k-in-entry": _autotune_file(_in_entry(100_000)),
    "directory-at-file": _dir_at_file,
    "fifo-at-file": _fifo_at_file,
    "fifo-as-folder": _fifo_as_folder,
    "file-as-folder": _file_as_folder,
    "folder-below-a-file": _below_a_file,
    "uncreatable-folder": _uncreatable,
    "read-only-folder": _read_only,
    "kernels-a-file": _kernels_a_file,
}


def _run_case(make_op, timeout: float):
    """(result or None, exception or None, warnings, finished) of ``make_op()`` run on a
    thread, with every warning recorded."""
    out: dict = {}

    def work():
        try:
            out["result"] = make_op()
        except BaseException as e:  # noqa: BLE001 -- reported by the test
            out["error"] = e

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        t = threading.Thread(target=work, daemon=True)
        t.start()
        t.join(timeout)
    return out.get("result"), out.get("error"), list(seen), not t.is_alive()


def _release_fifos(*paths) -> None:
    """Open each FIFO for writing and close it, so that a reader blocked on it gets EOF
    (a hung case must not keep its thread forever)."""
    for p in paths:
        try:
            fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass


def _opendnn_warnings(seen) -> list[str]:
    return [
        f"{w.category.__name__}: {w.message}"
        for w in seen
        if issubclass(w.category, RuntimeWarning) and "opendnn" in str(w.message)
    ]


@pytest.mark.parametrize("case", list(CASES))
def test_pointwise_survives_a_broken_cache(request, tmp_path, monkeypatch, case):
    if case == "read-only-folder" and IS_ROOT:
        pytest.skip(
            "running as root: chmod does not deny root's writes (the unwritable "
            "folder is covered by folder-below-a-file)"
        )
    if case == "uncreatable-folder" and not os.path.isdir("/proc/self"):
        pytest.skip("no /proc on this system")
    root = CASES[case](str(tmp_path / "cache"))
    monkeypatch.setenv("OPENDNN_CACHE_DIR", root)
    autotune.forget_memory()
    backends.benchmark = True
    try:
        for call in range(2):  # the second call may not warn again
            lo, hi = _fresh_bounds()
            x = torch.randn(40) * 3
            result, error, seen, finished = _run_case(lambda: F.hardtanh(x, lo, hi), CASE_TIMEOUT_S)
            where = _repro(request, case=case, call=call, bounds=(lo, hi), folder=root)
            if not finished:
                _release_fifos(root, os.path.join(root, "autotune-v1.json"))
            assert finished, where + f": hangs (more than {CASE_TIMEOUT_S} s)"
            assert error is None, where + f": raised {type(error).__name__}: {error}"
            want = torch.nn.functional.hardtanh(x, lo, hi)
            assert torch.equal(result, want), where + ": wrong result"
            ours = _opendnn_warnings(seen)
            if call == 0:
                assert ours, where + ": no RuntimeWarning about the cache"
            else:
                fallback = [w for w in ours if "cannot be used" in w]
                assert not fallback, where + f": warned again: {fallback}"
    finally:
        backends.benchmark = False
        if case == "read-only-folder":
            os.chmod(root, 0o755)
        autotune.forget_memory()


def test_a_malformed_record_is_dropped_alone(request, tmp_path, monkeypatch):
    """One bad entry is discarded with a warning; the good ones of the file are kept."""
    monkeypatch.setenv("OPENDNN_CACHE_DIR", str(tmp_path))
    autotune.forget_memory()
    good = autotune.problem_key("good", "cpu")
    doc = {
        "format": FORMAT,
        "entries": {
            good: {"order": ["plan-a"], "times_ms": [1.0]},
            autotune.problem_key("bad", "cpu"): {"order": 7},
        },
    }
    with open(os.path.join(tmp_path, "autotune-v1.json"), "w") as f:
        json.dump(doc, f)
    with pytest.warns(RuntimeWarning, match="malformed"):
        bad = autotune.lookup("bad", "cpu")
    assert bad is None, _repro(request) + f": a malformed entry came back: {bad}"
    hit = autotune.lookup("good", "cpu")
    assert hit and hit["order"] == ["plan-a"], _repro(request) + f": good entry lost: {hit}"
    autotune.store("new", "cpu", ["plan-b"], [2.0])
    autotune.forget_memory()
    assert autotune.lookup("good", "cpu")["order"] == ["plan-a"], _repro(request)
    assert autotune.lookup("new", "cpu")["order"] == ["plan-b"], _repro(request)


# ``c = ...; c.to(...)`` runs only as the interpreter rewrites it (each assignment made a
# tensor), and the rewrite reads the kernel's source at its first launch
KERNEL = """
@triton.jit
def shift_{tag}(X, Y, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    c = {tag}.0
    tl.store(Y + offs, tl.load(X + offs, mask=mask) + c.to(tl.float32), mask=mask)
"""


@pytest.mark.parametrize("what", ["fifo", "directory"])
def test_a_kernel_path_that_is_not_a_file(request, tmp_path, monkeypatch, what):
    """A FIFO or a folder where a generated kernel goes: the kernel is written elsewhere
    (or over the FIFO), with a warning, and runs; reading never blocks."""
    monkeypatch.setenv("OPENDNN_CACHE_DIR", str(tmp_path))
    tag = random.randrange(1 << 20)
    source = KERNEL.format(tag=tag)
    digest = hashlib.sha256((launch._HEADER + source).encode()).hexdigest()[:24]
    path = os.path.join(tmp_path, "kernels", f"k_{digest}.py")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if what == "fifo":
        os.mkfifo(path)
    else:
        os.makedirs(path)
    x = torch.arange(12, dtype=torch.float32)

    def op():
        kern = launch.kernel_from_source(source, f"shift_{tag}")
        y = torch.empty_like(x)
        kern((1,), x, y, 12, BLOCK=16)
        return y

    result, error, seen, finished = _run_case(op, CASE_TIMEOUT_S)
    where = _repro(request, what=what, tag=tag)
    if not finished:
        _release_fifos(path)
    assert finished, where + f": hangs (more than {CASE_TIMEOUT_S} s)"
    assert error is None, where + f": raised {type(error).__name__}: {error}"
    assert torch.equal(result, x + tag), where + ": wrong result"
    assert _opendnn_warnings(seen), where + ": no RuntimeWarning about the kernel file"


def test_kernel_files_removed_under_a_running_process(request, tmp_path, monkeypatch):
    """``opendnn cache clear`` (or a trim) in another process removes the kernel files of
    this one: a kernel made before is written again at its import, and a kernel imported
    before is launched from the source kept in memory."""
    import shutil

    monkeypatch.setenv("OPENDNN_CACHE_DIR", str(tmp_path))
    tags = [random.randrange(1 << 20) for _ in range(2)]
    not_imported = launch.kernel_from_source(KERNEL.format(tag=tags[0]), f"shift_{tags[0]}")
    imported = launch.kernel_from_source(KERNEL.format(tag=tags[1]), f"shift_{tags[1]}")
    imported.interpreted  # imported, not launched yet
    shutil.rmtree(tmp_path / "kernels")
    x = torch.arange(12, dtype=torch.float32)
    for kern, tag in zip((not_imported, imported), tags):
        where = _repro(request, tag=tag)
        y = torch.empty_like(x)
        try:
            kern((1,), x, y, 12, BLOCK=16)
        except Exception as e:  # noqa: BLE001 -- reported with the reproduction
            pytest.fail(f"{where}: raised {type(e).__name__}: {str(e)[:300]}")
        assert torch.equal(y, x + tag), where + ": wrong result"
