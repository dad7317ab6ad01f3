"""`zsnli.training.run_settings`: a run folder remembers the loss settings it was started with, and a command
that resumes it under others is refused with one line naming the setting and both values."""

from __future__ import annotations

import json

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
