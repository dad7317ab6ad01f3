"""Every command line is one style (issue 21, item 4): `zsnli.harness.cli.UsageParser`.

A flag no command knows is ONE line on stderr, ``PROG: error: ... --bogus-flag ...``, exit 2, never a
usage block or a traceback; and each script's ``--help`` lists its commands. Everything runs
in-process (the mains take ``argv``), so the whole file takes seconds.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BAD = "--bogus-flag"


def _script(rel: str):
    """The ``main`` of a script outside the package (``.ci/``, ``bench/``), loaded from its file."""
    def main(argv):
        spec = importlib.util.spec_from_file_location(Path(rel).stem, ROOT / rel)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.main(argv)

    return main


def _main(module: str):
    return lambda argv: importlib.import_module(module).main(argv)


ENTRY_POINTS = [
    # (what a user types, main, argv before the bad flag: the required arguments, prog in the error line)
    ("train.py", _main("zsnli.train_cli"), [], "train.py train"),  # train: the command when none is named
    ("train.py calibrate", _main("zsnli.train_cli"), ["calibrate"], "train.py calibrate"),
    ("train.py verify", _main("zsnli.train_cli"), ["verify"], "train.py verify"),
    ("train.py select", _main("zsnli.train_cli"), ["select"], "train.py select"),
    ("python -m zsnli.selection", _main("zsnli.selection.cli"), [], "train.py select"),
    ("python -m zsnli.selection.score_cache", _main("zsnli.selection.score_cache"), [],
     "python -m zsnli.selection.score_cache"),
    ("zsnli-batch", _main("zsnli.batch.cli"), ["in.jsonl", "--output", "out"], "zsnli-batch"),
    ("python -m zsnli.bench", _main("zsnli.bench.side_by_side_cli"), [], "python -m zsnli.bench"),
    ("python -m zsnli.bench.throughput_gate", _main("zsnli.bench.throughput_gate"), [],
     "python -m zsnli.bench.throughput_gate"),
    ("python -m zsnli.bench.overload", _main("zsnli.bench.overload"), [], "python -m zsnli.bench.overload"),
    ("python -m zsnli.bench.bakeoff_priority", _main("zsnli.bench.bakeoff_priority"), [],
     "python -m zsnli.bench.bakeoff_priority"),
    ("python -m zsnli.bench.read_routes", _main("zsnli.bench.read_routes"), [], "python -m zsnli.bench.read_routes"),
    ("python -m zsnli.bench.training_speed", _main("zsnli.bench.training_speed"), ["--nli-file", "x.jsonl"],
     "python -m zsnli.bench.training_speed"),
    ("python -m zsnli.bench.random_models", _main("zsnli.bench.random_models"), ["--out", "o"],
     "python -m zsnli.bench.random_models"),
    ("python -m zsnli.bench.pipeline_arm", _main("zsnli.bench.pipeline_arm"),
     ["--model-dir", "m", "--examples", "e", "--out", "o"], "python -m zsnli.bench.pipeline_arm"),
    ("zsnli", _main("zsnli.cli"), [], "zsnli"),
    ("zsnli classify", _main("zsnli.cli"), ["classify", "a text"], "zsnli"),
    ("zsnli serve", _main("zsnli.cli"), ["serve"], "zsnli serve"),  # the command typed, not the script it runs
    ("server.py", _main("zsnli.serve"), [], "server.py"),
    ("validate.py", _main("zsnli.compare.cli"), [], "validate.py"),
    ("validate.py compare", _main("zsnli.compare.cli"), ["compare"], "validate.py compare"),
    ("validate.py bakeoff", _main("zsnli.compare.cli"), ["bakeoff", "--suite", "s.toml"], "validate.py bakeoff"),
    ("validate.py gate", _main("zsnli.compare.cli"), ["gate", "r.json", "--baseline", "b.json"], "validate.py gate"),
    ("validate.py verify-receipt", _main("zsnli.compare.cli"), ["verify-receipt", "a.json"],
     "validate.py verify-receipt"),
    ("bench/batch.py", _script("bench/batch.py"), [], "bench/batch.py"),
    ("bench/cli_stream.py", _script("bench/cli_stream.py"), [], "bench/cli_stream.py"),
    (".ci/harness_serve.py", _script(".ci/harness_serve.py"), [], "harness_serve.py"),
]


def _exit_code(main, argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("main, argv, prog", [e[1:] for e in ENTRY_POINTS], ids=[e[0] for e in ENTRY_POINTS])
def test_an_unknown_flag_is_one_line_naming_it_and_exit_2(main, argv, prog, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # nothing a command might write lands in the checkout
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM"):  # `zsnli serve` sets them
        monkeypatch.setenv(var, "1")
    assert _exit_code(main, [*argv, BAD]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: ") and BAD in err, err
    assert "usage:" not in err and "Traceback" not in err and out == ""


def _help(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_train_py_help_lists_every_command(capsys):
    from zsnli.train_cli import COMMANDS, main

    text = _help(main, [], capsys)
    assert all(f"    {name} " in text for name in (*COMMANDS, "select")), text


def test_zsnli_help_lists_every_command(capsys):
    from zsnli.cli import build_parser, main

    text = _help(main, [], capsys)
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert set(commands) == {"classify", "serve"} and all(f"    {name} " in text for name in commands), text


def test_bench_help_lists_every_bench_command(capsys):
    from zsnli.bench.side_by_side_cli import main

    text = _help(main, [], capsys)
    bench = ROOT / "src" / "zsnli" / "bench"
    with_main = sorted(p.stem for p in bench.glob("*.py") if p.stem not in ("__main__", "side_by_side_cli")
                       and any(isinstance(n, ast.FunctionDef) and n.name == "main"
                               for n in ast.parse(p.read_text(encoding="utf-8")).body))
    assert with_main and all(f"python -m zsnli.bench.{name} " in text for name in with_main), (with_main, text)


def test_server_help_says_how_to_configure_it(capsys):
    from zsnli.serve import main

    text = _help(main, [], capsys)
    assert text.startswith("usage: ./serve.sh") and "ZSNLI_MODEL_DIR" in text


def _bare_numeric_flags(path: Path) -> list[str]:
    """``add_argument(..., type=int|float)`` calls in ``path``: flags whose range nobody checks at parse time."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for kw in node.keywords:
                if kw.arg == "type" and isinstance(kw.value, ast.Name) and kw.value.id in ("int", "float"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.literal_eval(node.args[0])}")
    return found


def test_every_numeric_flag_names_its_range():
    # A bare type=float let `zsnli classify --timeout -1` end in a ValueError traceback from the client, and
    # `train.py --warmup-ratio 1.5` reach the Trainer; every numeric flag takes a zsnli.harness.cli range type.
    files = [*(ROOT / "src").rglob("*.py"), *(ROOT / "bench").glob("*.py"), *(ROOT / ".ci").glob("*.py"),
             *ROOT.glob("*.py")]
    assert len(files) > 50
    assert [hit for f in files for hit in _bare_numeric_flags(f)] == []


@pytest.mark.parametrize("main, argv, flag", [
    (_main("zsnli.cli"), ["classify", "a text", "--labels", "a", "b", "--timeout", "-1"], "--timeout"),
    (_main("zsnli.train_cli"), ["--warmup-ratio", "1"], "--warmup-ratio"),
    (_main("zsnli.train_cli"), ["encoder", "--warmup-ratio", "1.5"], "--warmup-ratio"),
    (_main("zsnli.train_cli"), ["--max-length", "4"], "--max-length"),
    (_main("zsnli.compare.cli"), ["bakeoff", "--suite", "s.toml", "--train-fraction", "1"], "--train-fraction"),
    (_main("zsnli.compare.cli"), ["bakeoff", "--suite", "s.toml", "--target-accuracy", "0"], "--target-accuracy"),
    (_main("zsnli.compare.cli"), ["bakeoff", "--suite", "s.toml", "--folds", "1"], "--folds"),
    (_main("zsnli.batch.cli"), ["in.jsonl", "--output", "o", "--cpus-per-actor", "nan"], "--cpus-per-actor"),
    (_script(".ci/harness_serve.py"), ["--port", "70000"], "--port"),
], ids=["classify-timeout", "warmup-1", "encoder-warmup", "max-length", "train-fraction", "target-accuracy",
        "folds", "cpus-nan", "port"])
def test_a_number_out_of_range_is_one_line_naming_the_flag_and_range(main, argv, flag, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert _exit_code(main, argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and flag in err and "expected " in err and "Traceback" not in err, err
