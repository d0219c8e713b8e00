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
