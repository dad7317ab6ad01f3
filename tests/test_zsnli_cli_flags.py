"""The ``zsnli`` command's flag mistakes, each one line naming the flag and value, exit 2, before any server or model
is reached (`zsnli.cli.check_flags`, `zsnli.serve.build_parser`'s ``prog``)."""

from __future__ import annotations

import pytest

from cli_support import one_error_line
from zsnli.cli import main

TEXT = "the team won the match"


def _one_line(capsys, argv: list[str]) -> str:
    return one_error_line(capsys, main, argv)


@pytest.mark.parametrize("argv, line", [
    (["classify", TEXT, "--labels", "a,b", "--url", ""],
     "zsnli: error: --url '': an empty value; give the server's URL"),
    (["classify", TEXT, "--labels", "a,b", "--model-dir", ""],
     "zsnli: error: --model-dir '': an empty value; give a path, or leave the flag out"),
    (["classify", "--input", "", "--labels", "a,b"],
     "zsnli: error: --input '': an empty value; give a path, or leave the flag out"),
    (["classify", "--input", "-", "--output", "", "--labels", "a,b"],
     "zsnli: error: --output '': an empty value; give a path, or leave the flag out"),
    (["classify", TEXT, "--labels", "a,,b"],
     "zsnli: error: --labels 'a,,b': label 2 of 3 is empty (two commas in a row, or one at an end)"),
    (["classify", TEXT, "--labels", "a, b, "],
     "zsnli: error: --labels 'a, b, ': label 3 of 3 is empty"),
    (["classify", TEXT, "--labels", ",a"], "zsnli: error: --labels ',a': label 1 of 2 is empty"),
    (["classify", "--input", "-", "--labels", "a,b", "--json"],
     "zsnli: error: --json prints a single text's answer as one JSON object; with --input every answer is already "
     "a JSON line: leave out --json"),
    (["classify", TEXT, "--labels", "a,b", "--output", "answers.jsonl"],
     "zsnli: error: --output answers.jsonl: it takes the answers of --input FILE; a text's answer is printed"),
])
def test_a_flag_that_cannot_mean_anything_is_refused_before_any_server(capsys, monkeypatch, argv, line):
    """``--url ''`` used the default server, ``--labels a,,b`` dropped the empty label, ``--json`` with ``--input``
    and ``--output`` with a text were ignored: each is one line naming the flag now, and no server is asked (the
    URL below would refuse every connection)."""
    monkeypatch.setenv("ZSNLI_URL", "http://127.0.0.1:9")
    assert _one_line(capsys, argv).startswith(line)


def test_zsnli_serve_names_itself_in_a_usage_error(capsys, monkeypatch):
    """``zsnli serve --bogus`` said ``server.py: error: ... (see server.py --help)``: the command typed is named."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):  # zsnli serve sets them
        monkeypatch.setenv(name, "1")
    line = _one_line(capsys, ["serve", "--bogus"])
    assert line.startswith("zsnli serve: error: unknown argument '--bogus'") and "server.py" not in line, line
    assert line.endswith("(see zsnli serve --help)"), line
    from zsnli.serve import build_parser

    assert build_parser().prog == "server.py"  # python server.py (and serve.sh, which runs it) keep their name
