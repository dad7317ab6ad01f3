"""The plateau stop of long NLI runs (issue 51: stop when validation gains less than half a point over 3,000 steps):
the rule as a pure function, and a tiny run that the callback stops, resumed history included."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import build_bert_nli, sigterm_at_step
from zsnli.training import trainer as training
from zsnli.training.callbacks import plateaued
from zsnli.training.presets import get_preset

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("evaluations, expected", [
    ([], False),
    ([(1500, 0.50)], False),                                     # nothing 3,000 steps old yet
    ([(1500, 0.50), (3000, 0.51)], False),                       # still: 3000 - 3000 = 0 < 1500
    ([(1500, 0.50), (3000, 0.52), (4500, 0.53)], False),         # best 0.53 vs best by 1,500 (0.50): +3 points
    ([(1500, 0.50), (3000, 0.52), (4500, 0.524)], False),        # +2.4 points over 3,000 steps
    ([(1500, 0.52), (3000, 0.52), (4500, 0.524)], True),         # +0.4 points: flat
    ([(4500, 0.524), (1500, 0.52), (3000, 0.52)], True),         # order does not matter
    ([(1500, 0.55), (3000, 0.50), (4500, 0.54)], True),          # a best-so-far that was never beaten
    ([(1500, 0.50), (3000, 0.60), (4500, 0.50), (6000, 0.50)], True),  # best 0.60 by 3,000: no gain since
    ([(1500, 0.50), (3000, 0.60), (4500, 0.50), (6000, 0.61)], False),
])
def test_plateau_rule_compares_best_so_far_across_the_window(evaluations, expected):
    assert plateaued(evaluations, 3000, 0.005) is expected


def test_a_gain_of_exactly_the_threshold_keeps_training():
    assert plateaued([(0, 0.5), (3000, 0.505)], 3000, 0.005) is (0.505 - 0.5 < 0.005)
    assert plateaued([(0, 0.5), (3000, 0.75)], 3000, 0.25) is False


def test_a_tiny_run_stops_at_the_first_flat_window_and_resumes_into_it(tmp_path, monkeypatch):
    base = build_bert_nli(tmp_path / "base" / "model")
    preset = get_preset("tiny", str(ROOT / "tests" / "data" / "tiny_nli"), str(base)).with_overrides(
        max_steps=12, eval_steps=2, keep_checkpoints=20)
    # a gain of a whole accuracy point per 2 steps is impossible: flat at the second evaluation (step 4)
    stopped = training.train(preset.with_overrides(plateau_gain=1.0, plateau_steps=2), tmp_path / "1" / "model", tmp_path / "1" / "run")
    assert stopped["training"]["steps"] == 4
    assert (tmp_path / "1" / "run" / "checkpoint-4").is_dir()
    # without the rule the same run goes the whole way
    straight = training.train(preset, tmp_path / "2" / "model", tmp_path / "2" / "run")
    assert straight["training"]["steps"] == 12
    # a window longer than the run never stops it
    long_window = training.train(preset.with_overrides(plateau_gain=1.0, plateau_steps=100), tmp_path / "3" / "model",
                                 tmp_path / "3" / "run")
    assert long_window["training"]["steps"] == 12
    # stopped by SIGTERM at step 3 (after the step-2 evaluation), resumed: the evaluation saved in the checkpoint's
    # history counts, so the resumed run stops at step 4 as the straight one did
    flat = preset.with_overrides(plateau_gain=1.0, plateau_steps=2)
    real_callbacks = training.trainer_callbacks
    monkeypatch.setattr(training, "trainer_callbacks", sigterm_at_step(real_callbacks, 3))
    assert training.train(flat, tmp_path / "4" / "model", tmp_path / "4" / "run")["steps"] == 3
    monkeypatch.setattr(training, "trainer_callbacks", real_callbacks)
    resumed = training.train(flat, tmp_path / "4" / "model", tmp_path / "4" / "run")
    assert resumed["training"]["resumed_from_checkpoint"] == "checkpoint-3"
    assert resumed["training"]["steps"] == 4
