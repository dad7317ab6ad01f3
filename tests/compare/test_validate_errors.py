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
    (["bakeoff", "--suite", "{none}"], "validate.py bakeoff", "cannot read suite file"),
    (["bakeoff", "--suite", "{suite}", "--examples", "{empty}", "--report", "{report}"], "validate.py bakeoff",
     "no examples"),
    (["bakeoff", "--suite", "{suite}", "--examples", SMOKE, "--only", "zz", "--report", "{report}"],
     "validate.py bakeoff", "--only names arm(s) not in the suite: zz"),
    (["bakeoff", "--suite", "{suite}", "--examples", SMOKE, "--receipt-key", "{key}", "--report", "{report}"],
     "validate.py bakeoff", "receipt key"),
    (["gate", "{none}", "--baseline", "{none}"], "validate.py gate", "cannot read"),
    (["compare", "--url", "http://127.0.0.1:9", "--examples", "{empty}"], "validate.py compare", "no examples"),
    (["compare", "--url", "http://127.0.0.1:9", "--examples", SMOKE, "--receipt-key", "{key}"],
     "validate.py compare", "receipt key"),
    (["--url", "http://127.0.0.1:9", "--examples", "{empty}"], "validate.py", "no examples"),
]


@pytest.mark.parametrize("argv, prog, needle", CASES, ids=[f"{c[1]}: {c[2]}" for c in CASES])
def test_every_refusal_after_parsing_is_one_line_on_stderr(files, capsys, argv, prog, needle):
    argv = [a.format(**files) for a in argv]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "", captured.out
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and needle in lines[0], captured.err
    assert not Path(files["report"]).exists()


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
