"""devsets readers/subsample and the negation-pair detector and rule (no model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from zsnli.selection.devsets import DevSetError, list_zsc_dev, read_examples, read_zsc_dev, stratified_subsample
from zsnli.selection.negation import negation_pair, negation_probabilities, pair_difference


def write_zsc(root, name="toy", n=40, classes=("not spam", "spam"), hyps=None, counts=None):
    hyps = hyps or [f"This example message is {c}." for c in classes]
    counts = counts or [n - n // 4, n // 4]
    (root / f"{name}.labels.json").write_text(json.dumps({
        "dataset": name, "classes": list(classes), "hypotheses": hyps, "task_kind": "binary-property",
        "source": {"licence": "CC BY 4.0", "repo": "someone/toy"}}))
    rows = [{"text": f"text {c} {i}", "label": classes[c], "label_index": c}
            for c, m in enumerate(counts) for i in range(m)]
    (root / f"{name}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return rows


def test_read_zsc_dev(tmp_path):
    write_zsc(tmp_path)
    assert list_zsc_dev(tmp_path) == ["toy"]
    ds = read_zsc_dev(tmp_path, "toy")
    assert len(ds) == 40 and ds.classes == ["not spam", "spam"] and ds.task_kind == "binary-property"
    assert ds.hypotheses[0] == ["This example message is not spam.", "This example message is spam."]
    assert ds.gold.tolist() == [0] * 30 + [1] * 10
    assert ds.gold_classes.tolist() == ds.gold.tolist()
    assert ds.source["licence"] == "CC BY 4.0" and len(ds.files) == 2


def test_read_zsc_dev_errors(tmp_path):
    with pytest.raises(DevSetError, match="not found"):
        list_zsc_dev(tmp_path / "missing")
    write_zsc(tmp_path)
    with open(tmp_path / "toy.jsonl", "a") as f:
        f.write(json.dumps({"text": "x", "label": "spam", "label_index": 0}) + "\n")
    with pytest.raises(DevSetError, match=r"toy.jsonl:41"):
        read_zsc_dev(tmp_path, "toy")


def test_read_examples_groups_and_maps_classes(tmp_path):
    path = tmp_path / "ex.jsonl"
    rows = [{"id": 1, "dataset": "a", "text": "t1", "labels": ["x", "y"], "label": 1},
            {"id": 2, "dataset": "b", "text": "t2", "labels": ["p", "q", "r"], "label": 0},
            {"id": 3, "dataset": "a", "text": "t3", "labels": ["y", "x"], "label": 0}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    sets = read_examples(path)
    assert list(sets) == ["a", "b"]
    a = sets["a"]
    assert a.classes == ["x", "y"] and a.gold_classes.tolist() == [1, 1]
    assert [c.tolist() for c in a.label_classes] == [[0, 1], [1, 0]]
    path.write_text(json.dumps({"id": 1, "dataset": "a", "text": "t", "labels": ["x"], "label": 0}))
    with pytest.raises(DevSetError, match="ex.jsonl: example 1 has 1 label; a choice needs >= 2"):
        read_examples(path)
    # the one examples reader's rules (zsnli.harness.examples): every field, unique ids, the line named
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "id": 1}) + "\n")
    with pytest.raises(DevSetError, match=r"ex.jsonl:2: duplicate id 1"):
        read_examples(path)
    path.write_text(json.dumps({k: v for k, v in rows[0].items() if k != "id"}) + "\n")
    with pytest.raises(DevSetError, match=r"ex.jsonl:1: missing field 'id'"):
        read_examples(path)


def test_stratified_subsample(tmp_path):
    write_zsc(tmp_path, n=400)
    ds = read_zsc_dev(tmp_path, "toy")
    sub = stratified_subsample(ds, 100, seed=0)
    assert len(sub) == 100 and np.bincount(sub.gold).tolist() == [75, 25]
    assert (np.diff(sub.row_ids) > 0).all()
    assert [ds.texts[i] for i in sub.row_ids] == sub.texts
    again = stratified_subsample(ds, 100, seed=0)
    assert again.row_ids.tolist() == sub.row_ids.tolist()
    assert stratified_subsample(ds, 100, seed=1).row_ids.tolist() != sub.row_ids.tolist()
    assert stratified_subsample(ds, 1000) is ds
    with pytest.raises(ValueError):
        stratified_subsample(ds, 0)


@pytest.mark.parametrize("hyps, expected", [
    (["This example tweet is not offensive.", "This example tweet is offensive."], (1, 0)),
    (["This example comment contains hate speech.", "This example comment does not contain hate speech."], (0, 1)),
    (["This example comment doesn't contain hate speech.", "This example comment contains hate speech."], (1, 0)),
    (["There is no threat.", "There is a threat."], (1, 0)),
    (["It isn\u2019t spam.", "It is spam."], (1, 0)),
    (["This example text is toxic.", "This example text is non-toxic."], (0, 1)),
])
def test_negation_pair_detected(hyps, expected):
    assert negation_pair(hyps) == expected


@pytest.mark.parametrize("hyps", [
    ["This review expresses a positive sentiment.", "This review expresses a negative sentiment."],
    ["This is not spam.", "This is not ham."],
    ["This is spam.", "This is spam."],
    ["This is not spam.", "This is spam.", "This is unclear."],
    ["This is not spam."],
    ["This is not spam.", "That is spam."],
])
def test_negation_pair_not_detected(hyps):
    assert negation_pair(hyps) is None


def test_negation_probabilities_complement_and_temperature():
    p = negation_probabilities(np.array([0.0, 2.0, -800.0]), temperature=2.0)
    assert np.allclose(p.sum(axis=1), 1.0)
    assert p[0, 0] == pytest.approx(0.5)
    assert p[1, 0] == pytest.approx(1 / (1 + np.exp(-1.0)))
    assert p[2, 0] == pytest.approx(0.0) and np.isfinite(p).all()
    with pytest.raises(ValueError):
        negation_probabilities(np.array([1.0]), 0.0)


def test_pair_difference_terms():
    logits = np.array([[3.0, 0.0, 1.0]])
    cf = np.array([[1.0, 0.0, 0.5]])
    assert pair_difference(logits, 0, 2).tolist() == [2.0]
    assert pair_difference(logits, 0, 2, cf).tolist() == [1.5]
    d = pair_difference(logits, 0, 2, None, np.array([0.5]), np.array([0.25]), embedding_weight=4.0)
    assert d.tolist() == [3.0]
    with pytest.raises(ValueError):
        pair_difference(logits, 0, 2, embedding_weight=1.0)
