"""``validate.py``'s refusals after parsing: one line on stderr named by the command (`zsnli.harness.cli.usage_error`),
exit 2, nothing on stdout; an unknown command named with the commands; ``--help`` lists every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from zsnli.compare.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "dev" / "smoke.jsonl")


@pytest.fixture()
def files(tmp_path):
    """An empty examples file, a one-arm suite, a file that is no PEM key, a path that is not there."""
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "suite.toml").write_text("[[arms]]\nname = 'm'\ntype = 'majority'\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    return {"empty": str(tmp_path / "empty.jsonl"), "suite": str(tmp_path / "suite.toml"),
            "key": str(tmp_path / "key.pem"), "none": str(tmp_path / "none.json"),
            "report": str(tmp_path / "r.json")}


# (argv with {placeholders} of `files`, the command's name, what the line says) -- each was printed on STDOUT as
# "error: ..." / "examples: ..." (bakeoff, gate, compare, the self-check), the exit status alone telling a script
CASES = [
    (["bakeoff", "--suite", "{none}"], "validate.py bakeoff", "--suite {none}: no such file; give a suite file"),
    (["bakeoff", "--suite", "{suite}", "--examples", "{empty}", "--report", "{report}"], "validate.py bakeoff",
     "no examples"),
    (["bakeoff", "--suite", "{suite}", "--examples", SMOKE, "--only", "zz", "--report", "{report}"],
     "validate.py bakeoff", "--only names arm(s) not in the suite: zz"),
    (["bakeoff", "--suite", "{suite}", "--examples", SMOKE, "--receipt-key", "{key}", "--report", "{report}"],
     "validate.py bakeoff", "receipt key {key}: not a readable unencrypted PEM key (no unencrypted PEM private key in "
                            "it)"),
    (["gate", "{none}", "--baseline", "{none}"], "validate.py gate", "REPORT {none}: no such file"),
    (["compare", "--url", "http://127.0.0.1:9", "--examples", "{empty}"], "validate.py compare", "no examples"),
    (["compare", "--url", "http://127.0.0.1:9", "--examples", SMOKE, "--receipt-key", "{key}"],
     "validate.py compare", "receipt key"),
    (["--url", "http://127.0.0.1:9", "--examples", "{empty}"], "validate.py", "no examples"),
]


@pytest.mark.parametrize("argv, prog, needle", CASES, ids=[f"{c[1]}: {c[2]}" for c in CASES])
def test_every_refusal_after_parsing_is_one_line_on_stderr(files, capsys, argv, prog, needle):
    argv, needle = [a.format(**files) for a in argv], needle.format(**files)
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "", captured.out
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and needle in lines[0], captured.err
    assert not Path(files["report"]).exists()


# every path flag of validate.py, given a directory where a file belongs, a file where a directory belongs, or a path
# that is not there: each called what it is (bakeoff --examples DIR said "examples file not found", compare and the
# self-check "no such file" for a directory and "no such directory" for a file)
URL = ["--url", "http://127.0.0.1:9"]
PATH_CASES = [
    (["bakeoff", "--suite", "{dir}"], "validate.py bakeoff", "--suite {dir}: a directory, not a file"),
    (["bakeoff", "--suite", "{suite}", "--examples", "{dir}"], "validate.py bakeoff",
     "--examples {dir}: a directory, not a file; pass --examples PATH"),
    (["bakeoff", "--suite", "{suite}", "--examples", "{none}"], "validate.py bakeoff",
     "--examples {none}: no such file"),
    (["bakeoff", "--suite", "{suite}", "--examples", SMOKE, "--root", "{suite}"], "validate.py bakeoff",
     "--root {suite}: a file, not a directory"),
    (["bakeoff", "--suite", "{suite}", "--examples", SMOKE, "--root", "{none}"], "validate.py bakeoff",
     "--root {none}: no such directory"),
    (["bakeoff", "--suite", "{suite}", "--examples", SMOKE, "--receipt-key", "{dir}"], "validate.py bakeoff",
     "--receipt-key {dir}: a directory, not a file"),
    (["gate", "{dir}", "--baseline", "{suite}"], "validate.py gate", "REPORT {dir}: a directory, not a file"),
    (["gate", "{suite}", "--baseline", "{dir}"], "validate.py gate", "--baseline {dir}: a directory, not a file"),
    (["compare", *URL, "--examples", "{dir}"], "validate.py compare", "--examples {dir}: a directory, not a file"),
    (["compare", *URL, "--examples", SMOKE, "--root", "{suite}"], "validate.py compare",
     "--root {suite}: a file, not a directory"),
    (["compare", "--model-dir", "{suite}", "--examples", SMOKE], "validate.py compare",
     "--model-dir {suite}: a file, not a directory"),
    (["compare", *URL, "--baseline", "pipeline", "--pipeline-model", "{suite}", "--examples", SMOKE],
     "validate.py compare", "--pipeline-model {suite}: a file, not a directory"),
    ([*URL, "--examples", "{dir}"], "validate.py", "--examples {dir}: a directory, not a file"),
    ([*URL, "--examples", SMOKE, "--root", "{suite}"], "validate.py", "--root {suite}: a file, not a directory"),
]


@pytest.mark.parametrize("argv, prog, needle", PATH_CASES, ids=[c[2].split(" {")[0] + " " + c[2].split(": ")[-1]
                                                                for c in PATH_CASES])
def test_every_path_flag_calls_a_file_a_file_a_directory_a_directory_and_a_missing_path_missing(
        files, tmp_path, capsys, argv, prog, needle):
    files = {**files, "dir": str(tmp_path)}
    argv, needle = [a.format(**files) for a in argv], needle.format(**files)
    try:
        code = main(argv + ["--report", files["report"]] if argv[0] in ("bakeoff", "compare") else argv)
    except SystemExit as exc:  # refused by the parser's own check (parser.error)
        code = exc.code
    assert code == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith(f"{prog}: error: {needle}"), captured.err


@pytest.mark.parametrize("word, hint", [("bakeof", "did you mean 'bakeoff'? "),
                                        ("verify", "did you mean 'verify-receipt'? "), ("selfcheck", "")])
def test_an_unknown_command_is_named_with_the_commands(capsys, word, hint):
    """``validate.py bakeof`` said "unrecognized arguments: bakeof"; it names the unknown command, the one meant
    when one is close, and every command."""
    assert main([word, "--examples", SMOKE]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"validate.py: error: unknown command {word!r}; {hint}the commands are compare, bakeoff, "
                            "gate, verify-receipt (none: the self-check; validate.py --help)\n")


def test_help_lists_every_command(capsys):
    """``validate.py --help`` named compare and verify-receipt only; bakeoff and gate were nowhere."""
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in ("compare", "bakeoff", "gate", "verify-receipt"):
        assert f"{name}: " in text, name
