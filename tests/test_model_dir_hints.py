"""A wrong model directory names how to give one (issue 32 item 6): the command's ``--model-dir`` where the
command has that flag (``zsnli classify``, ``zsnli-batch``), ``ZSNLI_MODEL_DIR`` where it came from there,
and that the default ``./model`` is relative to the working directory (a command run outside the checkout)."""

from __future__ import annotations

import pytest

from zsnli.config import Settings
from zsnli.serving.startup import missing_model_dir


def test_missing_model_dir_names_the_flag_the_setting_or_the_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert missing_model_dir(Settings(model_dir=str(tmp_path)), "--model-dir") is None
    assert missing_model_dir(Settings(model_dir="absent", model_id="org/name"), "--model-dir") is None  # hub model
    given = missing_model_dir(Settings(model_dir="absent"), "--model-dir", given=True)
    assert given == "--model-dir absent: not found" and "ZSNLI_MODEL_DIR" not in given
    default = missing_model_dir(Settings(), "--model-dir")
    assert "the default ./model, relative to the working directory" in default and str(tmp_path) in default
    assert default.endswith("give --model-dir DIR or set ZSNLI_MODEL_DIR")
    from_env = missing_model_dir(Settings(model_dir="/no/such"), "--model-dir")
    assert "(from ZSNLI_MODEL_DIR)" in from_env
    (tmp_path / "file").write_text("x")
    assert missing_model_dir(Settings(model_dir="file"), "--model-dir", given=True) == "--model-dir file: is not a directory"


def test_zsnli_classify_names_its_model_dir_flag(tmp_path, capsys):
    from zsnli.cli import main

    assert main(["classify", "hello", "--labels", "a,b", "--model-dir", str(tmp_path / "absent")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"zsnli: error: --model-dir {tmp_path / 'absent'}: not found"], err


@pytest.mark.parametrize("flags, expect", [([], "give --model-dir DIR or set ZSNLI_MODEL_DIR"),
                                           (["--model-dir", "absent"], "--model-dir absent: not found")])
def test_zsnli_batch_outside_the_checkout_names_its_model_dir_flag(tmp_path, monkeypatch, flags, expect):
    from zsnli.batch.cli import parse_job
    from zsnli.batch.job import UsageError

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ZSNLI_MODEL_DIR", raising=False)
    monkeypatch.delenv("ZSNLI_MODEL_ID", raising=False)
    (tmp_path / "in.jsonl").write_text('{"id": 1, "text": "a"}\n')
    with pytest.raises(UsageError) as err:
        parse_job(["in.jsonl", "--output", "out", "--labels", "a", "b", *flags])
    assert expect in str(err.value) and "(set ZSNLI_MODEL_DIR)" not in str(err.value)


def test_train_py_and_install_encoder_share_one_model_dir_check_that_tells_a_file_from_a_missing_folder(tmp_path):
    """`zsnli.training.usage.check_model_dir_arg` serves train.py's commands and install-encoder (one check,
    each with its hint); a file given as the folder is called a file, not a missing directory."""
    from zsnli.training.usage import UsageError, check_model_dir_arg

    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    cases = {"absent": "no such directory", "file": "a file, not a directory",
             "empty": "not a model directory (no config.json)"}
    for name, what in cases.items():
        with pytest.raises(UsageError) as info:
            check_model_dir_arg(tmp_path / name)
        assert str(info.value) == (f"--model-dir {tmp_path / name}: {what}; give a model directory written by "
                                   "`train.py` (the shipped one is model)")
        with pytest.raises(UsageError) as info:
            check_model_dir_arg(tmp_path / name, "--into", hint="give the served folder")
        assert str(info.value) == f"--into {tmp_path / name}: {what}; give the served folder"
    (tmp_path / "empty" / "config.json").write_text("{}")
    assert check_model_dir_arg(tmp_path / "empty") is None
