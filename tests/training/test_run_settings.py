"""`zsnli.training.run_settings`: a run folder remembers the loss settings it was started with, and a command
that resumes it under others is refused with one line naming the setting and both values."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from zsnli.training.run_settings import SETTINGS_FILE, RunSettingsMismatch, check_run_settings


def test_a_new_run_records_its_settings_and_a_resume_with_the_same_ones_passes(tmp_path):
    check_run_settings(tmp_path, {"loss": "margin-mse", "shape": (1, 2)}, resuming=False)
    assert json.loads((tmp_path / SETTINGS_FILE).read_text()) == {"loss": "margin-mse", "shape": [1, 2]}
    check_run_settings(tmp_path, {"shape": [1, 2], "loss": "margin-mse"}, resuming=True)  # a tuple is its list


def test_a_resume_under_another_setting_names_the_first_that_differs(tmp_path):
    check_run_settings(tmp_path, {"loss": "in-batch", "scale": 20.0, "margin_weight": None}, resuming=False)
    with pytest.raises(RunSettingsMismatch) as caught:
        check_run_settings(tmp_path, {"loss": "mixed", "scale": 10.0, "margin_weight": 0.5}, resuming=True)
    assert str(caught.value) == (f'{tmp_path} was started with loss "in-batch", this command gives "mixed": resume '
                                 "it with the run's own settings or give another --output-dir")
    with pytest.raises(RunSettingsMismatch, match="teacher_scores_sha256 null, this command gives \"ab\""):
        check_run_settings(tmp_path, {"loss": "in-batch", "scale": 20.0, "margin_weight": None,
                                      "teacher_scores_sha256": "ab"}, resuming=True)  # a key added is a change
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["loss"] == "in-batch"  # the record is kept


def test_a_folder_without_a_record_is_resumed_and_given_one_and_a_fresh_start_replaces_it(tmp_path):
    check_run_settings(tmp_path, {"loss": "in-batch"}, resuming=True, write=False)  # another rank: reads only
    assert not (tmp_path / SETTINGS_FILE).exists()
    check_run_settings(tmp_path, {"loss": "in-batch"}, resuming=True)
    assert json.loads((tmp_path / SETTINGS_FILE).read_text()) == {"loss": "in-batch"}
    check_run_settings(tmp_path, {"loss": "mixed"}, resuming=False)  # --no-resume: a new run in the folder
    assert json.loads((tmp_path / SETTINGS_FILE).read_text()) == {"loss": "mixed"}


def test_the_base_model_is_kept_by_its_weights_or_by_its_hub_name(tmp_path):
    from zsnli.training.manifest_writer import run_base_identity
    from zsnli.training.run_settings import base_identity

    assert base_identity("org/model", "abc123", None) == {"id": "org/model", "revision": "abc123"}
    assert base_identity("/a/b", None, "f" * 64) == {"weights_sha256": "f" * 64}
    for name in ("a", "b"):  # the same weights in two folders (another machine's path) are one base model
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"weights")
    a, b, hub = (SimpleNamespace(base_model=m, base_revision=r) for m, r in
                 ((str(tmp_path / "a"), None), (str(tmp_path / "b"), "r1"), ("org/not-a-folder", "r1")))
    assert run_base_identity(a) == run_base_identity(b) == {"weights_sha256": hashlib.sha256(b"weights").hexdigest()}
    assert run_base_identity(hub) == {"id": "org/not-a-folder", "revision": "r1"}  # never downloaded to hash it


def test_a_resume_under_another_base_model_is_refused_and_an_older_record_gains_the_base(tmp_path, caplog):
    old = {"max_length": 128, "distillation": None}  # a record written before the base model was kept
    (tmp_path / SETTINGS_FILE).write_text(json.dumps(old))
    with caplog.at_level("INFO", logger="zsnli.training.run_settings"):
        check_run_settings(tmp_path, {**old, "base_model": {"weights_sha256": "aa"}}, resuming=True)
    assert "has no base_model (written before it was kept)" in caplog.text
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["base_model"] == {"weights_sha256": "aa"}
    with pytest.raises(RunSettingsMismatch) as refused:
        check_run_settings(tmp_path, {**old, "base_model": {"id": "org/base", "revision": None}}, resuming=True)
    assert str(refused.value) == (f"{tmp_path} was started from another base model (weights sha256 aa) than this "
                                  "command's (org/base@no pinned revision): give --base-model the run's own base or "
                                  "another --output-dir")
    assert not list(tmp_path.glob(".run_settings.json.*"))  # written whole: no partial file left
    with pytest.raises(RunSettingsMismatch, match="max_length 128, this command gives 64"):  # only the base is new
        (tmp_path / SETTINGS_FILE).write_text(json.dumps(old))
        check_run_settings(tmp_path, {"max_length": 64, "distillation": None, "base_model": {"id": "x"}}, True)
    assert json.loads((tmp_path / SETTINGS_FILE).read_text()) == old  # a refused resume leaves the record as it was


def test_a_base_given_with_a_tilde_or_in_shards_is_still_one_base_model(tmp_path, monkeypatch):
    from zsnli.training.manifest_writer import run_base_identity

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "model.safetensors").write_bytes(b"weights")
    tilde = SimpleNamespace(base_model="~/base", base_revision=None)  # a quoted ~ was sent to the hub, unhashed
    assert run_base_identity(tilde) == {"weights_sha256": hashlib.sha256(b"weights").hexdigest()}
    (tmp_path / "sharded").mkdir()  # no single weights file: kept by its resolved path, wherever it was given from
    (tmp_path / "sharded" / "model-00001-of-00002.safetensors").write_bytes(b"a")
    monkeypatch.chdir(tmp_path / "base")
    relative = SimpleNamespace(base_model="../sharded", base_revision=None)
    assert run_base_identity(relative) == {"id": str((tmp_path / "sharded").resolve()), "revision": None}


def test_the_base_weights_are_read_once_a_process_and_again_when_they_change(tmp_path, monkeypatch):
    import os

    from zsnli.training import manifest_writer

    reads = []
    monkeypatch.setattr(manifest_writer, "sha256_file", lambda p: reads.append(p) or hashlib.sha256(
        Path(p).read_bytes()).hexdigest())
    (tmp_path / "base").mkdir()
    weights = tmp_path / "base" / "model.safetensors"
    weights.write_bytes(b"weights")
    run = SimpleNamespace(base_model=str(tmp_path / "base"), base_revision=None)
    first = manifest_writer.run_base_identity(run)["weights_sha256"]  # the run's start ...
    assert manifest_writer.base_weights_sha256(str(tmp_path / "base"), None) == first  # ... and its manifest
    assert first == hashlib.sha256(b"weights").hexdigest() and len(reads) == 1
    weights.write_bytes(b"changed")  # same size: the new mtime alone makes it read again
    os.utime(weights, ns=(1, 1))
    assert manifest_writer.base_weights_sha256(str(tmp_path / "base"), None) == hashlib.sha256(b"changed").hexdigest()
    weights.write_bytes(b"longer weights")  # another size
    os.utime(weights, ns=(1, 1))
    assert manifest_writer.base_weights_sha256(str(tmp_path / "base"), None) == hashlib.sha256(
        b"longer weights").hexdigest()
    assert len(reads) == 3
