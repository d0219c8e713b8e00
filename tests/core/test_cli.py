"""The ``opendnn`` command's verbs that need no GPU."""

import opendnn.cli as cli


def test_version_and_cache_show(capsys):
    assert cli.main(["version"]) == 0
    assert "opendnn" in capsys.readouterr().out
    assert cli.main(["cache", "show"]) == 0
    assert "cache folder" in capsys.readouterr().out


def test_unknown_verb_is_an_error(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "opendnn bench" in capsys.readouterr().out


def test_bench_flush_modes_are_checked(capsys):
    import pytest

    from opendnn.bench import __main__ as runner
    from opendnn.bench import timing

    with pytest.raises(ValueError, match="flush mode 'warm'"):
        timing.set_flush("warm")
    assert timing.flush_mode() == "clean"
    with pytest.raises(SystemExit):
        runner.main(["core", "--flush", "warm"])
    assert "invalid choice: 'warm'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        runner.main(["nosuchfamily"])
    assert "unknown family nosuchfamily" in capsys.readouterr().err


def test_bench_records_the_given_commit(monkeypatch):
    """A copied tree reports its copy's git state; OPENDNN_BENCH_COMMIT names the real one."""
    from opendnn.bench import __main__ as runner

    monkeypatch.setenv("OPENDNN_BENCH_COMMIT", "abc1234")
    assert runner._commit() == "abc1234"
    monkeypatch.setenv("OPENDNN_BENCH_COMMIT", "  ")
    found = runner._commit()
    assert found is None or (found and found != "abc1234")


def test_bench_copy_holds_the_merged_file(tmp_path):
    """A partial run merges its rows into the results folder's file; the copy (``$OUT``)
    is that merged document, every row, not the run's rows alone."""
    import json

    from opendnn.bench import __main__ as runner

    main, copy = tmp_path / "results", tmp_path / "out"
    main.mkdir()
    old = {"meta": {"date": "d0", "commit": "c0"}, "rows": [{"family": "conv", "case": "a"}]}
    (main / "conv.json").write_text(json.dumps(old))
    r = runner.Runner.__new__(runner.Runner)
    r.meta, r.rows = {"date": "d1", "commit": "c1"}, [{"family": "conv", "case": "b"}]
    written = r.save([str(main)], ["conv"], restricted={"conv"}, copies=[str(copy)])
    assert written == [str(main / "conv.json"), str(copy / "conv.json")]
    merged = json.loads((main / "conv.json").read_text())
    assert [row["case"] for row in merged["rows"]] == ["b", "a"]
    assert json.loads((copy / "conv.json").read_text()) == merged


# ---- opendnn cache: show, clear, trim; the background trim of a process ----------------
def _cache_folder(tmp_path, monkeypatch):
    from opendnn.runtime import autotune

    root = tmp_path / "cache"
    (root / "kernels").mkdir(parents=True)
    monkeypatch.setenv("OPENDNN_CACHE_DIR", str(root))
    autotune.forget_memory()
    return root


def _kernel_file(root, name: str, size: int, days_ago: float) -> str:
    import os
    import time

    p = root / "kernels" / name
    p.write_bytes(b"#" * size)
    t = time.time() - days_ago * 86400
    os.utime(p, (t, t))
    return str(p)


def test_cache_show_counts_entries_files_and_bytes(tmp_path, monkeypatch, capsys):
    import opendnn.cli as cli
    from opendnn.runtime import autotune

    root = _cache_folder(tmp_path, monkeypatch)
    autotune.store("problem-a", "cpu", ["plan"], [1.0])
    autotune.store("problem-b", "cpu", ["plan"], [1.0])
    _kernel_file(root, "k_1.py", 100, 0)
    _kernel_file(root, "k_2.py", 50, 0)
    total = 150 + (root / "autotune-v1.json").stat().st_size
    assert cli.main(["cache", "show"]) == 0
    out = capsys.readouterr().out
    repro = (
        "repro: python -m pytest "
        "tests/core/test_cli.py::test_cache_show_counts_entries_files_and_bytes"
    )
    assert str(root) in out and "2 autotune entries" in out, f"{repro}: {out}"
    assert "2 generated kernel files" in out and f"{total} bytes" in out, f"{repro}: {out}"


def test_cache_clear_removes_entries_and_kernels(tmp_path, monkeypatch, capsys):
    import opendnn.cli as cli
    from opendnn.runtime import autotune

    root = _cache_folder(tmp_path, monkeypatch)
    autotune.store("problem-a", "cpu", ["plan"], [1.0])
    _kernel_file(root, "k_1.py", 100, 0)
    (root / "notes.txt").write_text("not ours")
    assert cli.main(["cache", "clear"]) == 0
    repro = (
        "repro: python -m pytest "
        "tests/core/test_cli.py::test_cache_clear_removes_entries_and_kernels"
    )
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"], (
        f"{repro}: left {sorted(p.name for p in root.iterdir())}"
    )
    assert autotune.lookup("problem-a", "cpu") is None, repro


def test_cache_trim_by_size_and_age_least_recently_used_first(tmp_path, monkeypatch, capsys):
    import opendnn.cli as cli

    root = _cache_folder(tmp_path, monkeypatch)
    repro = (
        "repro: python -m pytest "
        "tests/core/test_cli.py::test_cache_trim_by_size_and_age_least_recently_used_first"
    )
    files = {
        name: _kernel_file(root, name, 100, age)
        for name, age in [("k_new.py", 0), ("k_day.py", 1), ("k_week.py", 7), ("k_month.py", 40)]
    }
    stale = "k_x.py.1.2.ab.tmp"
    _kernel_file(root, stale, 10, 1)  # an orphan
    assert cli.main(["cache", "trim", "--max-age-days", "30"]) == 0
    left = sorted(p.name for p in (root / "kernels").iterdir())
    assert left == ["k_day.py", "k_new.py", "k_week.py"], f"{repro} (age 30 days): left {left}"
    assert cli.main(["cache", "trim", "--max-bytes", "250", "--max-age-days", "30"]) == 0
    left = sorted(p.name for p in (root / "kernels").iterdir())
    assert left == ["k_day.py", "k_new.py"], f"{repro} (250 bytes): left {left}"
    assert files["k_new.py"] in [str(p) for p in (root / "kernels").iterdir()]
    assert "removed 1 kernel files (100 bytes)" in capsys.readouterr().out.splitlines()[-2], repro
    assert not (root / "kernels" / stale).exists(), f"{repro}: the orphaned temporary is left"


def test_cache_trim_defaults_come_from_backends(tmp_path, monkeypatch, capsys):
    import opendnn.cli as cli
    from opendnn import backends

    root = _cache_folder(tmp_path, monkeypatch)
    for i in range(4):
        _kernel_file(root, f"k_{i}.py", 100, i)
    backends.disk_cache_max_bytes = 200
    backends.disk_cache_max_age_days = 30.0
    assert cli.main(["cache", "trim"]) == 0
    left = sorted(p.name for p in (root / "kernels").iterdir())
    assert left == ["k_0.py", "k_1.py"], (
        "repro: python -m pytest "
        "tests/core/test_cli.py::test_cache_trim_defaults_come_"
        f"from_backends: left {left}"
    )


def test_a_process_trims_and_sweeps_once_when_it_first_writes(tmp_path, monkeypatch):
    """The first cache write of a process starts the background sweep and trim: old kernel
    files and old orphaned temporaries go, recent ones stay."""
    import os
    import subprocess
    import sys
    import textwrap
    import time

    import opendnn

    root = _cache_folder(tmp_path, monkeypatch)
    old = _kernel_file(root, "k_old.py", 100, 60)
    recent = _kernel_file(root, "k_recent.py", 100, 1)
    orphan = str(root / "autotune-v1.json.1.2.ab.tmp")
    young = str(root / "autotune-v1.json.3.4.cd.tmp")
    for p in (orphan, young):
        open(p, "w").close()
    t = time.time() - 3600
    os.utime(orphan, (t, t))
    script = textwrap.dedent("""
        import threading
        from opendnn import backends
        from opendnn.runtime import autotune
        backends.disk_cache_max_age_days = 30.0
        autotune.store("problem", "cpu", ["plan"], [1.0])
        for t in threading.enumerate():
            if t.name == "opendnn-cache-trim":
                t.join(timeout=60)
    """)
    src = os.path.dirname(os.path.dirname(opendnn.__file__))
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=300)
    state = {p: os.path.exists(p) for p in (old, recent, orphan, young)}
    assert state == {old: False, recent: True, orphan: False, young: True}, (
        "repro: python -m pytest "
        f"tests/core/test_cli.py::test_a_process_trims_and_sweeps_once_when_it_first_writes: {state}"
    )
