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
