"""zsnli.runtime.progress: the same logits as the model's own predict_logits, and plain lines off a terminal."""

from __future__ import annotations

import logging
import sys

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


@pytest.fixture
def emitted(monkeypatch):
    """The progress lines written (whatever logging another test set up), in order."""
    lines: list[str] = []
    monkeypatch.setattr(progress, "emit", lines.append)
    return lines


def _lines(lines: list[str], prefix: str) -> list[str]:
    return [line for line in lines if line.startswith(prefix)]


def test_lines_go_to_stderr_when_logging_would_not_show_them(monkeypatch, capsys):
    logger = logging.getLogger("zsnli.runtime.progress")
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "propagate", False)
    progress.emit("x: 1/2 rows")
    assert capsys.readouterr().err == "x: 1/2 rows\n"


def test_a_wait_with_nothing_finished_still_gets_lines_with_the_time_left(monkeypatch, emitted):
    """The line thread speaks during a long first unit (it used to print only when a unit finished)."""
    import time

    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.2)
    with progress.progress(10, "slow", unit="rows") as advance:
        time.sleep(0.9)
        advance(5)
        time.sleep(0.5)
    lines = _lines(emitted, "slow: ")
    assert lines[0].startswith("slow: 0/10 rows (0%), 0.0/s, ? left, ")
    assert any(line.startswith("slow: 5/10 rows (50%)") and "s left" in line for line in lines)
    assert lines[-1].startswith("slow: 10/10 rows (100%)") or lines[-1].startswith("slow: 5/10 rows (50%)")
    assert progress.format_line("x", 5, 10, "rows", 10.0) == "x: 5/10 rows (50%), 0.5/s, ~10 s left, 10 s elapsed"
    assert progress.format_line("x", 1, 100, "rows", 60.0).startswith("x: 1/100 rows (1%), 0.0/s, ~1h39m left")
    assert [progress.duration_text(s) for s in (float("nan"), 0.4, 59, 725, 3840)] == ["?", "0 s", "59 s", "12m05s",
                                                                                         "1h04m"]
    assert progress.format_line("x", 7, None, "docs", 2.0) == "x: 7 docs, 3.5/s, 2 s elapsed"


def test_watch_reports_a_count_a_forked_child_advances(monkeypatch, emitted):
    import multiprocessing
    import time

    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.2)
    counter = progress.shared_counter()

    def child():
        for _ in range(4):
            time.sleep(0.15)
            with counter.get_lock():
                counter.value += 1

    with progress.watch(lambda: counter.value, 4, "arm x", "rows"):
        proc = multiprocessing.get_context("fork").Process(target=child)
        proc.start()
        proc.join()
    lines = _lines(emitted, "arm x: ")
    assert len(lines) >= 2 and lines[-1].startswith("arm x: 4/4 rows (100%)")


def test_waiting_speaks_during_a_long_wait_and_not_after_a_short_one(monkeypatch, emitted):
    import time

    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.1)
    with progress.waiting("server"):
        time.sleep(0.5)
    lines = _lines(emitted, "server: ")
    assert len(lines) >= 2 and all(line.startswith("server: still waiting, ") for line in lines)
    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 5.0)
    with progress.waiting("fast"):
        pass
    assert _lines(emitted, "fast") == []


def test_the_stderr_handler_writes_to_the_stderr_of_the_moment(monkeypatch):
    """CI (stop 55): the CLI's progress handler, made in one in-process call, held that call's stderr; once it
    closed, a later call's progress lines were lost. `StderrHandler` reads sys.stderr at each record."""
    import io
    import logging

    from zsnli.runtime.progress import StderrHandler

    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    handler = StderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    first.close()
    monkeypatch.setattr(sys, "stderr", second)
    handler.emit(logging.LogRecord("zsnli.runtime.progress", logging.INFO, __file__, 1, "classify: 3 docs", None, None))
    assert second.getvalue() == "classify: 3 docs\n"
