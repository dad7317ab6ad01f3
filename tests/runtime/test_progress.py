"""zsnli.runtime.progress: the same logits as the model's own predict_logits, and plain lines off a terminal."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from zsnli.runtime import progress


def test_predict_logits_with_progress_is_bit_identical(bert_model):
    """Batch for batch the same forward passes as `NliModel.predict_logits` (calibration must reproduce)."""
    premises = [("the team won the match " * (1 + i % 9)).strip() for i in range(70)]
    hypotheses = [["This text is about sport.", "This text is about business.", "good"][i % 3] for i in range(70)]
    for budget in (64, 256, 2048):
        want = bert_model.predict_logits(premises, hypotheses, token_budget=budget)
        got = progress.predict_logits(bert_model, premises, hypotheses, desc="x", token_budget=budget)
        assert np.array_equal(got, want)
    assert progress.predict_logits(bert_model, [], [], desc="x").shape == (0, 3)


def test_predict_logits_reports_every_planned_token(bert_model, monkeypatch, caplog):
    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.0)
    premises = [("the team won the match " * (1 + i % 5)).strip() for i in range(20)]
    with caplog.at_level(logging.INFO, logger="zsnli.runtime.progress"):
        progress.predict_logits(bert_model, premises, ["sport"] * 20, desc="nli", token_budget=64)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) > 2 and lines[0].startswith("nli (20 pairs): ")
    assert "(100%)" in lines[-1] and all("(100%)" not in line for line in lines[:-2])


def test_predict_logits_refuses_like_the_model(bert_model):
    with pytest.raises(ValueError, match="premises but"):
        progress.predict_logits(bert_model, ["a"], [], desc="x")
    with pytest.raises(ValueError, match="do not fit"):
        progress.predict_logits(bert_model, ["a", "b"], ["ok", "sport " * 200], desc="x")


def test_plain_lines_when_not_a_terminal(monkeypatch, caplog):
    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.0)
    with caplog.at_level(logging.INFO, logger="zsnli.runtime.progress"):
        with progress.progress(10, "work", unit="pairs") as advance:  # pytest's stderr is not a terminal
            advance(4)
            advance(6)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("work: 4/10 pairs (40%)")
    assert lines[-1].startswith("work: 10/10 pairs (100%)")
