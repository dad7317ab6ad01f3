"""train.py's path checks and messages: ``--dry-run`` checks what a run checks; a refusal names what is wrong with
the value given (missing, a file, a link to nothing, an empty file) and only the flags given. Every case is one line,
exit 2, from ``check_args`` (no torch, no data read)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cli_support import one_error_line
from zsnli.train_cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
TINY_DATA = str(ROOT / "tests" / "data" / "tiny_nli")
TINY_ZSC = str(ROOT / "tests" / "data" / "tiny_zsc")
NLI_CONFIG = {"id2label": {"0": "entailment", "1": "neutral", "2": "contradiction"}}


def one_line(capsys, argv: list[str]) -> str:
    """The one error line of ``train.py ARGV`` (exit 2 asserted)."""
    return one_error_line(capsys, main, argv)


@pytest.fixture
def places(tmp_path):
    """A base model folder (config.json only), an empty folder, a file, a link to nothing, an NLI model folder."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / "model" / "config.json").write_text(json.dumps(NLI_CONFIG))
    return {k: str(tmp_path / k) for k in ("base", "empty", "a_file", "dangling", "nothing")} | {
        "model": str(tmp_path / "run" / "model"), "out": str(tmp_path / "out")}


def _tiny(places, **given) -> list[str]:
    flags = {"--base-model": places["base"], "--data-dir": TINY_DATA, "--model-dir": places["out"], **given}
    return ["train", "--preset", "tiny", *[x for kv in flags.items() for x in kv]]


PATH_MISTAKES = [  # (flag, value, what the line says after "FLAG VALUE: ")
    ("--data-dir", "nothing", "no such directory; training the tiny preset reads NLI files from it"),
    ("--data-dir", "a_file", "a file, not a directory; training the tiny preset reads NLI files from it"),
    ("--data-dir", "empty", None),  # "--data-dir DIR lacks 2 of the 2 files ..."
    ("--data-dir", "", "an empty value; training the tiny preset reads NLI files from it"),
    ("--output-dir", "a_file", "a file, not a directory; give a directory, or a path to make one"),
    ("--output-dir", "dangling", "a symbolic link to nothing ("),
    ("--output-dir", "a_file/run", "{a_file} is a file, not a directory"),
    ("--output-dir", "dangling/run", "{dangling} is a symbolic link to nothing"),
    ("--manifest-dir", "a_file", "a file, not a directory; give a directory, or a path to make one"),
    ("--model-dir", "a_file", "a file, not a directory; give a directory, or a path to make one"),
    ("--model-dir", "dangling", "a symbolic link to nothing ("),
]


@pytest.mark.parametrize("flag, name, says", PATH_MISTAKES, ids=[f"{f} {n}" for f, n, _ in PATH_MISTAKES])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_dry_run_checks_the_paths_a_run_checks(places, capsys, monkeypatch, flag, name, says, dry_run):
    """`train.py train --dry-run` exited 0 silently with a --data-dir that was missing, empty or a file, an
    --output-dir that was a file or a dangling link, a --manifest-dir that was a file: it printed a plan no run could
    follow. A folder it would write and a --data-dir that is a file are refused as a run refuses them; data that are
    not there (a missing or empty --data-dir) are one warning line, and the plan still prints: a plan is read where
    the data are not (CI's clone, a teacher cache's plan)."""
    from zsnli import train_cli

    value = "" if name == "" else str(Path(places["base"]).parent / name)
    argv = _tiny(places, **{flag: value}) + (["--dry-run"] if dry_run else [])
    if dry_run and flag == "--data-dir" and name in ("nothing", "empty"):
        monkeypatch.setattr(train_cli, "_train", lambda args, preset: print("planned") or 0)
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert out == "planned\n" and err.count("\n") == 1, (out, err)
        assert err.startswith(f"train.py train: warning: --data-dir {value}") and "a run would stop here" in err, err
        return
    line = one_line(capsys, argv)
    assert line.startswith(f"train.py train: error: {flag} {value if value else repr(value)}"), line
    if says is None:
        assert f"{flag} {value} lacks 2 of the 2 files training the tiny preset reads" in line, line
    else:
        assert says.format(**places) in line, line


def test_dry_run_of_a_run_that_can_start_still_prints_its_plan(places, capsys, monkeypatch):
    """The checks refuse only what a run would: the tiny recipe's dry run passes them (its plan is not built here:
    that imports torch; tests/training/test_training.py runs the documented dry runs)."""
    from zsnli import train_cli

    monkeypatch.setattr(train_cli, "_train", lambda args, preset: print("planned") or 0)
    assert main(_tiny(places, **{"--output-dir": places["out"] + "/run"}) + ["--dry-run"]) == 0
    assert capsys.readouterr().out == "planned\n"


def test_a_quoted_tilde_in_base_model_reaches_the_run_as_the_home_folder(places, capsys, monkeypatch):
    """`train.py train --base-model "~/base"` (a quoted ~ the shell did not expand) passed the check but reached the
    run unexpanded: a local base was taken for a hub id. The run is given the folder itself."""
    from zsnli import train_cli

    monkeypatch.setenv("HOME", str(Path(places["base"]).parent))
    seen = []  # what the run is handed: the command's --base-model and the preset's
    monkeypatch.setattr(train_cli, "_train", lambda args, preset: seen.append((args.base_model, preset.base_model))
                        or 0)
    assert main(_tiny(places, **{"--base-model": "~/base"}) + ["--dry-run"]) == 0
    assert seen == [(places["base"], places["base"])], seen


@pytest.mark.parametrize("command", ["train", "calibrate", "evaluate", "encoder"])
@pytest.mark.parametrize("name, says", [("nothing", "no such directory"), ("a_file", "a file, not a directory"),
                                        ("empty", "not a model directory (no config.json)")])
def test_base_model_says_missing_a_file_or_no_model(places, capsys, command, name, says):
    """`train.py train/calibrate --base-model /nope` (or a file) said "not a model directory (no config.json)"."""
    value = str(Path(places["base"]).parent / name)
    argv = {"train": _tiny(places, **{"--base-model": value}), "encoder": ["encoder", "--base-model", value],
            "calibrate": ["calibrate", "--model-dir", places["model"], "--preset", "tiny", "--base-model", value],
            "evaluate": ["evaluate", "--model-dir", places["model"], "--preset", "tiny", "--base-model", value]}
    line = one_line(capsys, argv[command])
    assert line.startswith(f"train.py {command}: error: --base-model {value}: {says}; give a local "), line


@pytest.mark.parametrize("given", [["--zsc-exclude", "X"], ["--zsc-ratio", "0", "--zsc-exclude", "X"],
                                   ["--zsc-commercial-only"], ["--zsc-sets", "a", "--zsc-negated-share", "0"]])
def test_zsc_flags_without_zsc_dir_name_only_those_given(places, capsys, given):
    """`--zsc-exclude X` without --zsc-dir listed all seven zsc flags; `--zsc-ratio 0` was not counted as given."""
    line = one_line(capsys, _tiny(places) + given + ["--dry-run"])
    flags = [g for g in given if g.startswith("--")]
    need = "needs" if len(flags) == 1 else "need"
    assert line == f"train.py train: error: {', '.join(flags)} {need} --zsc-dir DIR (the classification sets mixed in)"


def test_flags_given_counts_a_zero():
    from zsnli.training.cli_checks import flags_given

    args = argparse.Namespace(a=0, b=0.0, c=None, d=False, e=True, f="")
    assert flags_given(args, "abcdef") == ["--a", "--b", "--e", "--f"]


@pytest.mark.parametrize("command", ["train", "encoder"])
def test_an_unknown_zsc_set_lists_the_sets_there(places, capsys, command):
    """`--zsc-sets nosuch` did not say which sets exist."""
    argv = (_tiny(places) + ["--dry-run"]) if command == "train" else ["encoder"]
    line = one_line(capsys, argv + ["--zsc-dir", TINY_ZSC, "--zsc-sets", "tiny_topic,nosuch"])
    assert line == (f"train.py {command}: error: --zsc-sets tiny_topic,nosuch: no set 'nosuch' in {TINY_ZSC} (its "
                    "sets: tiny_polite, tiny_topic)"), line
    line = one_line(capsys, argv + ["--zsc-dir", TINY_ZSC, "--zsc-sets", "tiny_topic,"])
    assert "--zsc-sets 'tiny_topic,': name 2 of 2 is empty" in line, line


def test_many_sets_are_listed_short(tmp_path, places, capsys):
    for k in range(12):
        (tmp_path / f"set{k:02d}.jsonl").write_text("")
        (tmp_path / f"set{k:02d}.labels.json").write_text("{}")
    line = one_line(capsys, _tiny(places) + ["--zsc-dir", str(tmp_path), "--zsc-sets", "x", "--dry-run"])
    assert line.endswith("(its sets: set00, set01, set02, set03, set04, set05, set06, set07, ... (12 sets))"), line


def test_verify_without_a_manifest_says_what_it_looked_for(places, capsys):
    """`verify --model-dir DIR` (config.json only) said "--manifest: manifest not found..." though --manifest was
    not given: it names --model-dir, the two manifest names and the folders looked in."""
    line = one_line(capsys, ["verify", "--model-dir", places["model"]])
    run = str(Path(places["model"]).parent)
    assert line == (f"train.py verify: error: --model-dir {places['model']}: no manifest to check it against: no "
                    f"encoder_manifest.json or training_manifest.json in it or beside it (in {run}); give --manifest "
                    "PATH"), line
    line = one_line(capsys, ["verify", "--model-dir", places["model"], "--manifest", places["nothing"]])
    assert line.startswith(f"train.py verify: error: --manifest: manifest not found: {places['nothing']}; "), line


@pytest.mark.parametrize("where", ["--manifest", "beside", "own encoder manifest"])
def test_verify_calls_an_empty_manifest_an_empty_file(places, capsys, where):
    model = Path(places["model"])
    path = {"--manifest": Path(places["empty"]) / "m.json", "beside": model.parent / "training_manifest.json",
            "own encoder manifest": model / "encoder_manifest.json"}[where]
    path.write_text("")
    line = one_line(capsys, ["verify", "--model-dir", str(model)]
                    + (["--manifest", str(path)] if where == "--manifest" else []))
    assert f"manifest unreadable: {path}: empty file" in line and "Expecting value" not in line, line
    assert line.startswith("train.py verify: error: " + ("--manifest:" if where == "--manifest" else
                                                         f"--model-dir {model}: the manifest found for it")), line


def _empty(tmp_path, name="empty.json") -> Path:
    path = tmp_path / name
    path.write_text("  \n")
    return path


def test_shared_json_readers_call_an_empty_file_so(tmp_path):
    """The JSON parser's "Expecting value: line 1 column 1 (char 0)" for an empty file was printed as is."""
    from zsnli.compare.regression_gate import GateInputError, load_report
    from zsnli.selection.grouped import read_kinds
    from zsnli.training import base_install, base_run, encoder_install
    from zsnli.training.distill import read_description
    from zsnli.training.nli_data import DataError
    from zsnli.training.usage import UsageError, read_json

    path = _empty(tmp_path)
    readers = [(read_json, UsageError, f"{path}: not readable JSON (empty file)"),
               (read_kinds, ValueError, f"cannot read the task kinds file {path}: empty file"),
               (load_report, GateInputError, f"{path}: not JSON (empty file)"),
               (base_run.read_sources, UsageError, f"{path}: not readable JSON (empty file)"),
               (base_install.read_calibration, UsageError, f"--calibration {path}: not readable JSON (empty file)"),
               (encoder_install._check_sources_file, UsageError, f"{path}: not readable JSON (empty file)"),
               (read_description, DataError, f"--teacher-description {path}: not readable JSON (empty file)")]
    for reader, error, says in readers:
        with pytest.raises(error) as raised:
            reader(path)
        assert says in str(raised.value) and "Expecting value" not in str(raised.value), (reader, raised.value)
    _empty(tmp_path, "config.json")
    with pytest.raises(UsageError, match=r"config.json: unreadable \(empty file\)"):
        base_run.check_head(tmp_path)


def test_json_problem_names_only_an_empty_document():
    from zsnli.harness.cli import json_problem

    for text, says in (("", "empty file"), (" \n\t", "empty file"), ("{", "Expecting property name enclosed in "
                                                                          "double quotes (line 1, column 2)"),
                       ('{"a": "x', "Unterminated string (line 1, column 7)"),
                       ('{"a": "\x00"}', "Invalid control character (line 1, column 8)")):
        with pytest.raises(json.JSONDecodeError) as raised:
            json.loads(text)
        assert json_problem(raised.value) == says
    assert json_problem(OSError("no")) == "no"


def test_commands_name_an_empty_json_file_they_read(places, capsys, tmp_path):
    """config.json of --model-dir (under its flag) and the training manifest calibrate reads beside it."""
    model = Path(places["model"])
    (model.parent / "training_manifest.json").write_text("")
    line = one_line(capsys, ["calibrate", "--model-dir", str(model)])
    assert "training_manifest.json beside --model-dir" in line and "is not readable JSON (empty file)" in line, line
    (model / "config.json").write_text("")
    line = one_line(capsys, ["evaluate", "--model-dir", str(model), "--preset", "tiny", "--base-model",
                             places["base"]])
    assert line.startswith(f"train.py evaluate: error: --model-dir {model}: {model / 'config.json'}: not readable "
                           "JSON (empty file); "), line


def test_verify_receipt_names_an_empty_file(tmp_path, capsys):
    """`validate.py verify-receipt empty.json` printed "verify-receipt: JSONDecodeError: ..." without the file."""
    from zsnli.compare.receipt_cli import main as verify_receipt

    path = _empty(tmp_path)
    assert verify_receipt([str(path)]) == 2
    assert capsys.readouterr().err == f"validate.py verify-receipt: error: {path}: not JSON (empty file)\n"
    path.write_text("{")
    assert verify_receipt([str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"validate.py verify-receipt: error: {path}: not JSON (Expecting property name")


def test_every_command_has_a_description():
    """`train.py calibrate --help` and `evaluate --help` (train, encoder and verify too) had no description."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [name for name, parser in sub.choices.items() if name != "select" and not parser.description]
    assert missing == []
