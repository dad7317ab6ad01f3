"""The bake-off protocol: folds never train on the scored example, a memorising arm gains nothing, metrics, ranking."""

from __future__ import annotations

import time

import numpy as np
import pytest

from zsnli.compare.arms import build_arm
from zsnli.compare.service.protocol import BakeoffInputError, Task, rank, score, validate_request
from zsnli.compare.service.runner import CancelToken, _run_sync
from zsnli.metrics import expected_calibration_error


def make_task(texts, labels) -> Task:
    names = list(dict.fromkeys(labels))
    return Task(task_description="t", texts=list(texts), expected=list(labels),
                gold=np.array([names.index(x) for x in labels]), label_names=names, hypotheses=names,
                arms=[], challenger=None, retain=False)


@pytest.mark.parametrize("counts", [[2, 1], [3, 3, 3], [10, 10, 11], [40, 12, 7], [5, 60]])
def test_folds_score_every_example_once_and_never_train_on_it(counts):
    gold = np.repeat(np.arange(len(counts)), counts)
    np.random.default_rng(0).shuffle(gold)
    plan = make_task([f"t{i}" for i in range(gold.size)], [f"label{g}" for g in gold]).plan()
    folds = [(f.train, f.test) for f in plan.folds]
    tested = np.concatenate([test for _, test in folds])
    assert sorted(tested.tolist()) == list(range(gold.size))
    for train, test in folds:
        assert not set(train) & set(test)
        assert len(train) + len(test) == gold.size
    method = plan.methods["task"]["method"]
    if gold.size <= 30 or min(counts) < 2:
        assert method == "loo" and len(folds) == gold.size
    else:
        assert method == "kfold" and len(folds) == min(5, min(counts))


class MemorisingArm:
    """Answers the remembered label of a text seen in training (one-hot), else uniform: a leak detector."""

    trains = True
    uses_encoder = False
    name = type_name = "memorising"
    cost = "free"

    def __init__(self):
        self.hits = 0

    def fit(self, texts, labels):
        self.memory = dict(zip(texts, labels))

    def predict_proba(self, texts, labels):
        out = np.full((len(texts), len(labels)), 1.0 / len(labels))
        for i, t in enumerate(texts):
            if t in self.memory:
                self.hits += 1
                out[i] = [1.0 if name == self.memory[t] else 0.0 for name in labels]
        return out


@pytest.mark.parametrize("n", [12, 90])  # leave-one-out and stratified k-fold
def test_a_memorising_arm_scores_nothing_special(n):
    labels = ["a", "b", "c"] * (n // 3)
    task = make_task([f"document number {i}" for i in range(n)], labels)
    arm = MemorisingArm()
    probs, seconds, _ = _run_sync(arm, task, None, CancelToken(time.monotonic() + 60))
    assert arm.hits == 0  # it never saw the text it was asked about
    assert np.allclose(probs, 1 / 3) and len(seconds) == n


def test_tfidf_logreg_learns_from_the_other_examples_only():
    texts = ["refund my invoice", "invoice refund please", "charge on my invoice", "cannot sign in",
             "sign in fails", "password reset sign in"]
    task = make_task(texts, ["billing"] * 3 + ["access"] * 3)
    # C = 10 (the registry's default is scikit-learn's C = 1, which leans on the 3-vs-2 class prior of each fold)
    probs, _, _ = _run_sync(build_arm("tfidf_logreg", "tfidf_logreg", {"C": 10.0}), task, None, CancelToken(time.monotonic() + 60))
    assert (probs.argmax(1) == task.gold).all()  # shared words with the *other* examples of its label
    probs, _, _ = _run_sync(build_arm("majority", "majority", {}), task, None, CancelToken(time.monotonic() + 60))
    np.testing.assert_allclose(probs[0], [2 / 5, 3 / 5])  # held-out billing: 2 billing of 5 left


def test_score_matches_the_project_metrics():
    p = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.2, 0.8]])
    gold = np.array([0, 1, 1, 1])
    s = score(p, gold)
    assert s["accuracy"] == 0.75
    assert s["macro_f1"] == round((2 / 3 + 0.8) / 2, 4)
    assert s["ece"] == round(expected_calibration_error(p.max(1), p.argmax(1) == gold), 4)
    assert sum(b["count"] for b in s["reliability"]) == 4


def entry(arm, f1, ece, ms, status="scored"):
    return {"arm": arm, "macro_f1": f1, "ece": ece, "latency_ms_p50": ms, "status": status}


def test_ranking_macro_f1_then_ece_then_latency_failed_last():
    ranked = rank([entry("failed", None, None, None, "failed"), entry("slow", 0.8, 0.1, 50.0),
                   entry("fast", 0.8, 0.1, 5.0), entry("calibrated", 0.8, 0.05, 90.0), entry("best", 0.9, 0.3, 99.0)])
    assert [e["arm"] for e in ranked] == ["best", "calibrated", "fast", "slow", "failed"]
    assert [e["rank"] for e in ranked] == [1, 2, 3, 4, 5]


def test_validate_lists_every_problem_and_hashes_examples():
    ok = {"task_description": "d", "examples": [{"input": "x", "expected": "a"}, {"input": "y", "expected": "b"}]}
    limits = dict(incumbents=["majority"], challengers=[], max_examples=10, max_labels=5, max_input_chars=50)
    task = validate_request(ok, **limits)
    assert task.label_names == ["a", "b"] and task.gold.tolist() == [0, 1] and len(task.example_hashes) == 2
    assert task.examples_sha256 != validate_request({**ok, "examples": ok["examples"][::-1]}, **limits).examples_sha256
    with pytest.raises(BakeoffInputError) as err:
        validate_request({"task_description": "", "examples": [{"input": "", "expected": "a"}]}, **limits)
    fields = [p["field"] for p in err.value.problems]
    assert fields[:3] == ["task_description", "examples", "examples[0].input"]
    with pytest.raises(BakeoffInputError) as err:
        validate_request([1, 2], **limits)
    assert err.value.field == "body"


@pytest.mark.parametrize("body, field, error", [
    ({"candidatez": ["majority"]}, "candidatez", "unknown field; did you mean candidates?"),
    ({"retian": True}, "retian", "unknown field; did you mean retain?"),
    ({"Task_Description": "d"}, "Task_Description", "unknown field; did you mean task_description?"),
    ({"examples": [{"input": "x", "expected": "a"}, {"text": "y", "expected": "b"}]}, "examples[1].text",
     "unknown field (an examples file's name for the text; here it is input); did you mean examples[1].input?"),
    ({"examples": [{"input": "x", "expecetd": "a"}, {"input": "y", "expected": "b"}]}, "examples[0].expecetd",
     "unknown field; did you mean examples[0].expected?"),
])
def test_a_misspelt_field_is_named_not_ignored(body, field, error):
    """``{"candidatez": ["majority"]}`` was ignored: every arm ran (and a typo'd ``retain`` stored nothing)."""
    ok = {"task_description": "d", "examples": [{"input": "x", "expected": "a"}, {"input": "y", "expected": "b"}]}
    limits = dict(incumbents=["majority"], challengers=[], max_examples=10, max_labels=5, max_input_chars=50)
    with pytest.raises(BakeoffInputError) as err:
        validate_request({**ok, **body}, **limits)
    assert err.value.problems[0] == {"field": field, "error": error}
    assert validate_request({**ok, "note": "kept for me"}, **limits).label_names == ["a", "b"]  # unlike no field: ignored
