"""Harness pieces without a server: contract checks, escalation, slices, scorecards, examples."""

from __future__ import annotations

import math

import pytest

from zsnli.compare.bakeoff_analysis import escalation
from zsnli.compare.cli import _named
from zsnli.compare.slices import declared_groups, findings, length_bucket, score_slices
from zsnli.harness.examples import Example, dataset_classes
from zsnli.compare.scorecards import score_examples



def test_escalation_by_hand():
    conf = [0.95, 0.9, 0.8, 0.7, 0.6, 0.5]
    right = [True, True, True, False, True, False]
    # kept accuracies from the top: 1, 1, 1, .75, .8, .667 -> lowest threshold reaching .8 is 0.6 (5 of 6 kept)
    e = escalation(conf, right, 0.8)
    assert e.reachable and e.threshold == 0.6
    assert e.kept_fraction == pytest.approx(5 / 6) and e.escalated_fraction == pytest.approx(1 / 6)
    assert e.kept_accuracy == pytest.approx(0.8)
    # 0.9: only the top three qualify
    e = escalation(conf, right, 0.9)
    assert e.threshold == 0.8 and e.kept_fraction == pytest.approx(0.5)
    # documents of equal confidence go together: a tie with a wrong answer blocks the threshold
    e = escalation([0.9, 0.9, 0.5], [True, False, True], 0.9)
    assert not e.reachable and e.threshold is None and e.escalated_fraction == 1.0


def test_worst_slices_filter_and_rank():
    examples, hits = [], []
    for i in range(40):  # dataset "good": all right, short texts
        examples.append(Example(f"g{i}", "good", "short text", ("x", "y"), 0))
        hits.append(True)
    for i in range(20):  # dataset "bad": 4 of 20 right, long texts
        examples.append(Example(f"b{i}", "bad", " ".join(["word"] * 70), ("x", "y"), i % 2))
        hits.append(i < 4)
    for i in range(3):  # a tiny, all-wrong slice: below min_n, never reported
        examples.append(Example(f"t{i}", "tiny", "short", ("x", "y"), 0))
        hits.append(False)
    every = score_slices(declared_groups(examples), hits, "declared", min_support=10)
    slices = findings(every)
    names = [(s.facet, s.name) for s in slices]
    assert ("dataset", "bad") in names and ("length", "64-255 words") in names
    assert all(s.n >= 10 for s in slices)
    assert ("dataset", "tiny") not in names and ("dataset", "good") not in names
    assert [s.rank_score for s in slices] == sorted((s.rank_score for s in slices), reverse=True)
    bad = next(s for s in slices if s.name == "bad")
    mean = sum(hits) / len(hits)
    assert bad.accuracy == pytest.approx(0.2) and bad.gap == pytest.approx(mean - 0.2)
    assert bad.rank_score == pytest.approx((mean - 0.2) * math.sqrt(20))
    assert bad.high < mean
    labels = {s.name for s in every if s.facet == "label"}
    assert "bad: y" in labels
    assert length_bucket("") == "1-15 words" and length_bucket(" ".join(["w"] * 300)) == "256+ words"


def test_score_examples_failed_answers_count_as_uniform_and_classes_follow_label_strings():
    examples = [
        Example("a", "ds", "t", ("pos", "neg"), 0),
        Example("b", "ds", "t", ("neg", "pos"), 0),  # same classes, other order
        Example("c", "ds", "t", ("pos", "neg"), 1),
    ]
    scores = score_examples(examples, [[0.9, 0.1], [0.8, 0.2], None])
    assert scores.n_failed == 1
    card = scores.per_dataset["ds"]
    assert card.n_classes == 2
    assert scores.rows[0].correct and scores.rows[1].correct
    assert scores.rows[2].failed
    assert dataset_classes(examples) == {"ds": ["pos", "neg"]}
    with pytest.raises(ValueError):
        score_examples(examples, [[0.5, 0.5]] * 2)


def test_compare_arm_names():
    assert _named("http://127.0.0.1:8000", "url") == ("127.0.0.1:8000", "http://127.0.0.1:8000")
    assert _named("mine=http://h:1", "url") == ("mine", "http://h:1")
    assert _named("runs/x/model", "model_dir") == ("model", "runs/x/model")
    assert _named("big=runs/x/model", "model_dir") == ("big", "runs/x/model")


@pytest.mark.parametrize("flag", ["--time-budget-s", "--max-fit-s", "--max-p95-ms"])
@pytest.mark.parametrize("value", ["3e6", "1e9", "1e308", "inf"])
def test_bakeoff_seconds_flags_have_an_upper_bound(flag, value, capsys):
    """``--time-budget-s 3e6`` crashed in the arm's wait (``OverflowError: timeout is too large``): every
    seconds-valued flag of ``validate.py bakeoff`` is at most a week (`zsnli.harness.cli.MAX_WAIT_S`), one line
    naming it, exit 2; a week itself is accepted."""
    from zsnli.compare.bakeoff_cli import bakeoff_parser
    from zsnli.harness.cli import MAX_WAIT_S

    if flag.endswith("-ms"):  # the same durations in milliseconds
        value = str(float(value) * 1000)
    with pytest.raises(SystemExit) as exited:
        bakeoff_parser().parse_args(["--suite", "s.toml", flag, value])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and flag in err and "Traceback" not in err, err
    week = MAX_WAIT_S * (1000 if flag.endswith("-ms") else 1)
    assert getattr(bakeoff_parser().parse_args(["--suite", "s.toml", flag, str(week)]), flag[2:].replace("-", "_")) == week


@pytest.mark.parametrize("flag", ["--startup-timeout", "--max-seconds"])
def test_compare_seconds_flags_have_an_upper_bound(flag, capsys):
    """The same bound on ``validate.py compare``'s seconds: a server-start wait of 1e9 s overflowed likewise."""
    from zsnli.compare.cli import compare_parser

    with pytest.raises(SystemExit) as exited:
        compare_parser().parse_args([flag, "1e9"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and flag in err, err
