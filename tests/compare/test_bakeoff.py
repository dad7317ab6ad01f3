"""The bake-off harness: arm interface and registry, protocol (no leakage), slices, gate, suite files, report.

Arms here are pure Python (registered at test time) or scikit-learn on a few
made-up sentences; one test serves the tiny random NLI model through serve.sh.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from zsnli.compare.arms import ARMS, Arm, ArmError, build_arm, normalise_rows, register
from zsnli.manifest import hash_model_dir
from zsnli.compare.bakeoff_analysis import coverage_curve, pick_within
from zsnli.compare.bakeoff_runner import run_arm
from zsnli.compare.cli import main
from zsnli.harness.examples import Example, load_examples
from zsnli.compare.protocol import ProtocolError, make_plan
from zsnli.compare.regression_gate import compare_reports
from zsnli.compare.slices import declared_groups, discovered_groups, findings, read_metadata, score_slices
from zsnli.compare.suite import SuiteError, load_suite

REPO = Path(__file__).resolve().parents[2]
COLOURS = ("red", "green", "blue")
SHAPES = ("circle", "square", "triangle", "star")


def _rows() -> list[dict]:
    rows = []
    for i in range(36):  # 12 per class: auto -> one stratified split
        c = COLOURS[i % 3]
        rows.append({"id": f"c{i}", "dataset": "colours", "text": f"item {i} painted {c} with care {'long ' * (i % 5)}",
                     "labels": list(COLOURS), "label": i % 3, "source": "web" if i % 2 else "mail"})
    for i in range(12):  # 3 per class: auto -> stratified 3-fold
        s = SHAPES[i % 4]
        rows.append({"id": f"s{i}", "dataset": "shapes", "text": f"a drawing number {i} of a {s}",
                     "labels": list(SHAPES), "label": i % 4, "source": "web"})
    return rows


@pytest.fixture()
def examples_file(tmp_path: Path) -> Path:
    path = tmp_path / "examples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()), encoding="utf-8")
    return path


@pytest.fixture()
def examples(examples_file) -> list[Example]:
    return load_examples(examples_file).examples


@register("test_memoriser")
class MemoriserArm(Arm):
    """Remembers every training row: one-hot on a text it was trained on, uniform on any other."""

    trains = True

    def fit(self, texts, labels):
        self.memory = dict(zip(texts, labels))

    def predict_proba(self, texts, labels):
        out = np.full((len(texts), len(labels)), 1.0 / len(labels))
        for i, t in enumerate(texts):
            if t in self.memory:
                out[i] = [1.0 if lab == self.memory[t] else 0.0 for lab in labels]
        return out


@register("test_keyword")
class KeywordArm(Arm):
    """Zero-shot: the label whose text appears in the document gets ``weight``, the rest share what is left."""

    def __init__(self, name=None, weight: float = 0.9):
        super().__init__(name)
        self.params = {"weight": weight}

    def predict_proba(self, texts, labels):
        out = np.ones((len(texts), len(labels)))
        for i, t in enumerate(texts):
            for k, lab in enumerate(labels):
                if lab in t:
                    out[i, k] = self.params["weight"] * 100
        return normalise_rows(out)


# ---- arm interface and registry -------------------------------------------------------------------------------

def test_registry_builds_arms_and_rejects_unknown_types_and_parameters():
    assert {"served", "pipeline", "embedding_similarity", "embedding_logreg", "embedding_knn", "tfidf_logreg",
            "majority"} <= set(ARMS)
    arm = build_arm("test_keyword", "kw", {"weight": 0.5})
    assert arm.identity() == {"name": "kw", "type": "test_keyword", "parameters": {"weight": 0.5}, "model_sha256": None}
    with pytest.raises(ArmError, match="unknown arm type 'nope'"):
        build_arm("nope", "x", {})
    with pytest.raises(ArmError, match="accepted parameters: weight"):
        build_arm("test_keyword", "kw", {"wieght": 0.5})
    with pytest.raises(ValueError, match="already registered"):
        register("test_keyword")(type("Other", (Arm,), {}))


def test_few_shot_arms_give_one_row_per_text_and_zero_to_labels_never_trained_on():
    texts = ["great fun, loved it", "awful, a waste", "loved the fun parts", "a waste of money, awful"]
    gold = ["pos", "neg", "pos", "neg"]
    for type_name in ("tfidf_logreg", "majority"):
        arm = build_arm(type_name, type_name, {})
        arm.fit(texts, gold)
        p = arm.predict_proba(["loved it", "awful waste"], ["neg", "pos", "neutral"])
        assert p.shape == (2, 3)
        np.testing.assert_allclose(p.sum(axis=1), 1.0)
        assert (p[:, 2] == 0).all()
    tfidf = build_arm("tfidf_logreg", "t", {"C": 10.0})
    tfidf.fit(texts, gold)
    p = tfidf.predict_proba(["loved it", "awful waste"], ["neg", "pos"])
    assert p[0, 1] > 0.5 and p[1, 0] > 0.5
    majority = build_arm("majority", "m", {})
    majority.fit(texts[:3], gold[:3])
    np.testing.assert_allclose(majority.predict_proba(["x"], ["pos", "neg"]), [[2 / 3, 1 / 3]])
    with pytest.raises(ArmError, match="before fit"):
        build_arm("tfidf_logreg", "t", {}).predict_proba(["x"], ["a"])


def test_embedding_arms_share_one_loaded_encoder_and_other_arms_refuse_one(bert_dir, monkeypatch):
    from zsnli.runtime import embedding

    encoder = embedding.SentenceEncoder(bert_dir)

    def no_second_load(*_a, **_k):
        raise AssertionError("an arm loaded its own sentence encoder")

    monkeypatch.setattr(embedding.SentenceEncoder, "__init__", no_second_load)
    texts, gold = ["great fun, loved it", "awful, a waste", "loved the fun parts", "a waste of money"], list("pnpn")
    for type_name in ("embedding_logreg", "embedding_knn", "embedding_similarity"):
        arm = build_arm(type_name, type_name, {})
        assert arm.uses_encoder
        arm.use_encoder(encoder)
        arm.fit(texts, gold)
        p = arm.predict_proba(["loved it"], ["p", "n"])
        assert p.shape == (1, 2) and math.isclose(float(p.sum()), 1.0, rel_tol=1e-6)
        assert arm.identity()["model_sha256"] == encoder.digest
    for type_name in ("tfidf_logreg", "majority"):
        arm = build_arm(type_name, type_name, {})
        assert not arm.uses_encoder
        with pytest.raises(ArmError, match="does not use a sentence encoder"):
            arm.use_encoder(encoder)


def test_normalise_rows_rescales_and_turns_all_zero_rows_uniform():
    np.testing.assert_allclose(normalise_rows(np.array([[1.0, 3.0], [0.0, 0.0]])), [[0.25, 0.75], [0.5, 0.5]])
    with pytest.raises(ArmError):
        normalise_rows(np.array([[-1.0, 2.0]]))


# ---- protocol -------------------------------------------------------------------------------------------------

def test_auto_protocol_splits_big_datasets_and_folds_small_ones(examples):
    plan = make_plan(examples, train_fraction=0.5, seed=0)
    assert plan.methods["colours"]["method"] == "split" and plan.methods["colours"]["n_test"] == 18
    assert plan.methods["shapes"] == {"method": "kfold", "folds": 3, "n": 12, "n_test": 12, "train_per_fold": 8.0}
    test = plan.test_rows
    assert len(test) == len(set(test)) == 18 + 12
    for fold in plan.folds:
        assert not set(fold.train) & set(fold.test)
        assert {examples[i].dataset for i in fold.train + fold.test} == {fold.dataset}
    colours_test = [examples[i] for i in test if examples[i].dataset == "colours"]
    assert sorted(e.label for e in colours_test) == [0] * 6 + [1] * 6 + [2] * 6  # stratified
    assert make_plan(examples, seed=0).folds == plan.folds
    assert make_plan(examples, seed=1).folds != plan.folds
    assert make_plan(examples, train_fraction=0.75).methods["colours"]["n_test"] == 9


def test_protocol_loo_scores_every_row_once_and_bad_settings_fail(examples):
    plan = make_plan(examples, protocol="loo")
    assert len(plan.folds) == len(examples) and plan.test_rows == list(range(len(examples)))
    assert all(len(f.test) == 1 and len(f.train) == (35 if f.dataset == "colours" else 11) for f in plan.folds)
    with pytest.raises(ProtocolError, match="train fraction"):
        make_plan(examples, train_fraction=1.0)
    one_each = [Example(i, "d", f"t{i}", ("a", "b"), i % 2) for i in range(2)]
    with pytest.raises(ProtocolError, match="dataset 'd'.*at least 2 rows per class"):
        make_plan(one_each, protocol="kfold")


def test_no_arm_sees_the_row_it_is_scored_on(examples):
    """The memoriser is perfect on its training rows, yet on every test row it answers uniform: no leak."""
    plan = make_plan(examples)
    result = run_arm(build_entry("mem", "test_memoriser"), examples, plan, warmups=0)
    assert result.error is None and result.fits == len(plan.folds)
    assert sorted(result.probabilities) == plan.test_rows
    for i in plan.test_rows:
        np.testing.assert_allclose(result.probabilities[i], 1.0 / len(examples[i].labels))
    memoriser = build_arm("test_memoriser", "m", {})
    fold = plan.folds[0]
    memoriser.fit([examples[i].text for i in fold.train], [examples[i].labels[examples[i].label] for i in fold.train])
    seen = examples[fold.train[0]]
    assert memoriser.predict_proba([seen.text], list(seen.labels)).max() == 1.0  # it would show a leak


def test_zero_shot_arms_are_scored_on_exactly_the_few_shot_test_rows(examples):
    plan = make_plan(examples)
    zero = run_arm(build_entry("kw", "test_keyword"), examples, plan, warmups=0)
    few = run_arm(build_entry("maj", "majority"), examples, plan, warmups=0)
    assert not zero.trains and zero.fits == 0
    assert sorted(zero.probabilities) == sorted(few.probabilities) == plan.test_rows


def build_entry(name: str, type_name: str, **params):
    from zsnli.compare.suite import ArmEntry

    return ArmEntry(name, type_name, params)


# ---- slices ---------------------------------------------------------------------------------------------------

def test_slice_is_a_finding_only_with_support_and_an_interval_top_below_the_arm_accuracy():
    correct = [True] * 80 + [False] * 20  # arm accuracy 0.8
    groups = {("x", "bad-big"): list(range(70, 100)),  # 10/30 right: top of Wilson interval ~0.52 < 0.8
              ("x", "bad-small"): list(range(95, 100)),  # 0/5 right but n < 10
              ("x", "slightly-low"): list(range(60, 100)),  # 20/40 = 0.5, top ~0.65 < 0.8
              ("x", "noisy"): list(range(75, 90))}  # 5/15 ... top ~0.59 < 0.8
    slices = score_slices(groups, correct, "declared", min_support=10)
    by = {s.name: s for s in slices}
    assert not by["bad-small"].finding and by["bad-small"].accuracy == 0.0
    assert by["bad-big"].finding and by["bad-big"].high < 0.8
    ranked = findings(slices)
    assert [s.name for s in ranked] == sorted((s.name for s in ranked), key=lambda n: -by[n].rank_score)
    assert math.isclose(by["bad-big"].rank_score, (0.8 - 10 / 30) * math.sqrt(30))
    near = score_slices({("x", "near"): list(range(0, 10)) + list(range(80, 85))}, correct, "declared", 10)[0]
    assert near.accuracy < 0.8 and near.high >= 0.8 and not near.finding  # lower, but not surely lower


def test_declared_slices_cover_dataset_label_length_and_extra_fields_and_ngrams_are_discovered(examples_file, examples):
    meta = read_metadata(examples_file, examples)
    assert meta[0] == {"source": "mail"} and meta[1] == {"source": "web"}
    groups = declared_groups(examples, meta)
    assert len(groups[("dataset", "shapes")]) == 12
    assert len(groups[("label", "colours: red")]) == 12
    assert len(groups[("meta:source", "mail")]) == 18
    assert ("length", "1-15 words") in groups
    found = discovered_groups([e.text for e in examples], min_support=10)
    assert ("ngram", "drawing number") not in found or len(found[("ngram", "drawing number")]) >= 10
    # "care", "item" and "painted" are in the same 36 rows: one group, named by the first in order
    assert [k for k, v in found.items() if len(v) == 36] == [("ngram", "care")]
    assert all(len(v) >= 10 for v in found.values()) and ("ngram", "blue") in found and ("ngram", "painted blue") not in found
    rows = [tuple(v) for v in found.values()]
    assert len(rows) == len(set(rows))  # n-grams on the same rows are merged


# ---- gate -----------------------------------------------------------------------------------------------------

def _report(f1: float, ece: float, slices: dict, sha: str = "abc") -> dict:
    return {"examples": {"sha256": sha}, "protocol": {"settings": {"seed": 0}},
            "arms": [{"name": "zsnli", "error": None, "scores": {"means": {"macro_f1": f1, "ece": ece}},
                      "declared_slices": {k: {"n": 20, "accuracy": 0.8 - g, "gap": g} for k, g in slices.items()}}]}


def test_gate_each_condition_and_the_slice_that_loses_ground_while_averages_improve(tmp_path, capsys):
    base = _report(0.70, 0.10, {"dataset=a": 0.05, "label=a: x": 0.10})
    assert compare_reports(_report(0.69, 0.11, {"dataset=a": 0.09, "label=a: x": 0.10}), base) == []
    assert [v.what for v in compare_reports(_report(0.67, 0.10, {"dataset=a": 0.05, "label=a: x": 0.1}), base)] == ["macro_f1"]
    assert [v.what for v in compare_reports(_report(0.70, 0.13, {"dataset=a": 0.05, "label=a: x": 0.1}), base)] == ["ece"]
    better_but_one_slice_lost = _report(0.75, 0.05, {"dataset=a": 0.12, "label=a: x": 0.0})
    violations = compare_reports(better_but_one_slice_lost, base)
    assert [v.what for v in violations] == ["slice dataset=a"]
    assert (violations[0].baseline, violations[0].current) == (0.05, 0.12)
    assert [v.what for v in compare_reports(_report(0.7, 0.1, {"dataset=a": 0.05}, sha="other"), base)] == ["examples"]
    rp, bp = tmp_path / "r.json", tmp_path / "b.json"
    rp.write_text(json.dumps(better_but_one_slice_lost))
    bp.write_text(json.dumps(base))
    assert main(["gate", str(rp), "--baseline", str(bp)]) == 1
    out = capsys.readouterr().out
    assert "slice dataset=a" in out and "+0.0500 -> +0.1200" in out and "macro-F1" not in out
    assert main(["gate", str(rp), "--baseline", str(bp), "--max-slice-drop", "0.1"]) == 0
    assert capsys.readouterr().out.startswith("gate: PASS")
    assert main(["gate", str(tmp_path / "missing.json"), "--baseline", str(bp)]) == 2
    gone = capsys.readouterr()  # a user mistake: one line on stderr, named by its command, stdout left to results
    assert gone.out == "" and gone.err.count("\n") == 1
    assert gone.err.startswith("validate.py gate: error: REPORT ") and "missing.json: no such file" in gone.err


@pytest.mark.parametrize("change, what", [
    ({"examples": {"sha256": "other"}}, "examples"),
    ({"protocol": {"settings": {"seed": 1}}}, "protocol"),
    ({"options": {"min_support": 20}}, "min_support"),
])
def test_reports_that_are_not_comparable_give_one_line_and_no_arm_or_slice_checks(tmp_path, capsys, change, what):
    base = _report(0.70, 0.10, {"dataset=a": 0.05, "label=a: x": 0.10})
    base["options"] = {"min_support": 10}
    base["arms"].append(dict(base["arms"][0], name="other"))
    new = {**_report(0.10, 0.90, {}), "options": {"min_support": 10}, **change}  # every arm check would fail
    assert [v.what for v in compare_reports(new, base)] == [what]
    rp, bp = tmp_path / "r.json", tmp_path / "b.json"
    rp.write_text(json.dumps(new))
    bp.write_text(json.dumps(base))
    assert main(["gate", str(rp), "--baseline", str(bp)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("FAIL ") and out[0].endswith("not comparable")


def _spoil(edit):
    report = _report(0.70, 0.10, {"dataset=a": 0.05})
    edit(report)
    return report


@pytest.mark.parametrize("edit, needle", [
    (lambda r: r["arms"][0].pop("scores"), "arms[0].scores.means must be an object (an arm that ran holds its "
                                           "scores)"),
    (lambda r: r["arms"][0]["scores"]["means"].update(macro_f1=None), "arms[0].scores.means.macro_f1 must be a finite "
                                                                      "number, not null"),
    (lambda r: r["arms"][0]["scores"]["means"].update(ece="0.1"), "arms[0].scores.means.ece must be a finite number, "
                                                                  "not a string"),
    (lambda r: r["arms"][0]["scores"]["means"].update(ece=True), "arms[0].scores.means.ece must be a finite number, "
                                                                 "not a boolean"),
    (lambda r: r.update(protocol=[1]), "protocol must be an object, not a list"),
    (lambda r: r.update(arms=[{}]), "arms[0].name must be a non-empty string, not null"),
    (lambda r: r.update(arms=[1]), "arms[0] must be an object, not a number"),
    (lambda r: r.update(arms=[]), "arms is empty"),
    (lambda r: r["arms"].append(dict(r["arms"][0])), "arms[1].name 'zsnli' is given twice"),
    (lambda r: r.pop("examples"), "examples.sha256 is missing (every report names the examples it ran on)"),
    (lambda r: r["arms"][0]["declared_slices"]["dataset=a"].pop("gap"), "arms[0].declared_slices['dataset=a'] must "
                                                                       "hold the numbers gap, accuracy and n"),
])
@pytest.mark.parametrize("side", ["REPORT", "--baseline"])
def test_a_hand_edited_report_is_one_line_naming_the_field_not_a_traceback(tmp_path, capsys, edit, needle, side):
    """``gate`` ended in a KeyError / TypeError / AttributeError traceback (exit 1) on a report whose arm had no scores,
    a null or string macro-F1, a list for protocol, an arm without a name (found by a new-user pass)."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_report(0.70, 0.10, {"dataset=a": 0.05})))
    bad.write_text(json.dumps(_spoil(edit)))
    report, baseline = (bad, good) if side == "REPORT" else (good, bad)
    assert main(["gate", str(report), "--baseline", str(baseline)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == (f"validate.py gate: error: {bad}: not a bake-off report the gate can read: "
                                         f"{needle}; write one with validate.py bakeoff --report\n")


def test_a_failed_arm_needs_no_scores():
    report = _spoil(lambda r: r["arms"][0].update(error="fit failed", scores=None))
    from zsnli.compare.regression_gate import report_problem

    assert report_problem(report) is None


# ---- suite files and the whole run ----------------------------------------------------------------------------

SUITE = """
name = "test"
description = "an arm registered by the test, twice, plus a built-in few-shot arm"
[protocol]
train_fraction = 0.5
[analysis]
min_support = 5
targets = [0.8]
[[arms]]
name = "keyword strong"
type = "test_keyword"
weight = 0.9
[[arms]]
name = "keyword weak"
type = "test_keyword"
weight = 0.02
[[arms]]
name = "majority"
type = "majority"
"""


@pytest.mark.parametrize("isolate", [True, False])
def test_a_suite_defined_only_in_a_file_runs_end_to_end(tmp_path, examples_file, capsys, isolate):
    suite = tmp_path / "suite.toml"
    suite.write_text(SUITE, encoding="utf-8")
    report_path = tmp_path / "out" / "report.json"
    argv = ["bakeoff", "--suite", str(suite), "--examples", str(examples_file), "--report", str(report_path),
            "--max-p95-ms", "1000", "--max-rss-mb", "100000"] + ([] if isolate else ["--in-process"])
    assert main(argv) == 0, capsys.readouterr().out
    report = json.loads(report_path.read_text())
    board = {r["arm"]: r for r in report["leaderboard"]}
    assert set(board) == {"keyword strong", "keyword weak", "majority"}
    assert board["keyword strong"]["accuracy"] == 1.0 and board["keyword strong"]["kind"] == "zero-shot"
    assert board["majority"]["kind"] == "few-shot" and board["majority"]["fit_s"] >= 0
    assert board["keyword strong"]["macro_f1"] == board["keyword weak"]["macro_f1"]  # same top-1, other confidence
    assert board["keyword strong"]["ece"] != board["keyword weak"]["ece"]
    assert report["constraints"]["best"] == report["leaderboard"][0]["arm"]
    assert all(r["peak_rss_mb"] > 0 and r["cost"] == "free (local)" for r in report["leaderboard"])
    arm = next(a for a in report["arms"] if a["name"] == "majority")
    assert arm["declared_slices"]["dataset=shapes"]["n"] == 12 and arm["per_class"]["shapes"][0]["support"] == 3
    html = report_path.with_suffix(".html").read_text()
    assert "alt='coverage of keyword strong'" in html and "aria-label='reliability diagram of majority'" in html
    assert "Top confusions" in html and "Per-class F1" in html
    assert main(["gate", str(report_path), "--baseline", str(report_path)]) == 0


def test_suite_file_mistakes_are_one_line_and_exit_2(tmp_path, examples_file, capsys):
    bad = tmp_path / "bad.toml"
    for text, expected in (("[[arms]]\nname='x'\ntype='nope'\n", "unknown arm type 'nope'"),
                           ("[[arms]]\nname='x'\ntype='majority'\nC=1\n", "accepted parameters: none"),
                           ("[[arms]]\nname='x'\ntype='majority'\n[[arms]]\nname='x'\ntype='majority'\n", "repeated: x"),
                           ("arms = 3\n", "at least one [[arms]]"),
                           ("imports = ['no_such_module_xyz']\n", "cannot import 'no_such_module_xyz'"),
                           ("[[arms\n", "not valid TOML")):
        bad.write_text(text)
        with pytest.raises(SuiteError, match=expected.replace("[", r"\[")):
            load_suite(bad)
    assert main(["bakeoff", "--suite", str(bad), "--examples", str(examples_file)]) == 2
    refused = capsys.readouterr()
    assert refused.out == "" and refused.err.count("\n") == 1 and "not valid TOML" in refused.err
    assert refused.err.startswith("validate.py bakeoff: error: ")
    with pytest.raises(SystemExit) as exc:  # out of (0, 1): refused by the parser, one line (zsnli.harness.cli)
        main(["bakeoff", "--suite", str(bad), "--train-fraction", "2"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--train-fraction" in err and "expected a number in (0, 1)" in err


@pytest.mark.parametrize("change, needle", [
    (lambda r: r["label"] if r["dataset"] != "shapes" else 0, "dataset 'shapes' needs at least 2 distinct gold labels, "
                                                             "got 1 ('circle')"),
    (None, "example id 's5' (dataset 'shapes'): 'text' must not be blank"),
])
def test_examples_the_service_refuses_are_refused_before_any_arm_runs(tmp_path, capsys, change, needle):
    """As POST /v1/bakeoff answers 422: a dataset with one gold label, or a blank text, is one line, exit 2."""
    rows = _rows()
    for r in rows:
        if change is not None:
            r["label"] = change(r)
        elif r["id"] == "s5":
            r["text"] = " \t "
    path = tmp_path / "examples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    suite = tmp_path / "suite.toml"
    suite.write_text("[[arms]]\nname = 'majority'\ntype = 'majority'\n", encoding="utf-8")
    assert main(["bakeoff", "--suite", str(suite), "--examples", str(path), "--report", str(tmp_path / "r.json")]) == 2
    refused = capsys.readouterr()
    assert refused.out == "" and refused.err.count("\n") == 1 and needle in refused.err and str(path) in refused.err
    assert not (tmp_path / "r.json").exists()


def test_coverage_curve_and_constraint_pick():
    curve = coverage_curve([0.9, 0.8, 0.8, 0.3], [True, True, False, False], points=4)
    assert curve["coverage"] == [0.25, 0.75, 1.0] and curve["accuracy"] == [1.0, 2 / 3, 0.5]
    board = [{"arm": "big", "error": None, "macro_f1": 0.5, "p95_ms": 90.0, "peak_rss_mb": 900.0},
             {"arm": "small", "error": None, "macro_f1": 0.3, "p95_ms": 5.0, "peak_rss_mb": 120.0},
             {"arm": "unmeasured", "error": None, "macro_f1": 0.2, "p95_ms": 1.0, "peak_rss_mb": None}]
    assert pick_within(board)["best"] == "big"
    assert pick_within(board, max_p95_ms=50.0)["best"] == "small"
    assert pick_within(board, max_p95_ms=50.0, max_rss_mb=100.0)["best"] is None
    board[1]["fit_s"], board[0]["fit_s"] = 3.0, None  # the cost ceiling: fit seconds here, none for zero-shot
    assert pick_within(board, max_fit_s=1.0)["fitting"] == ["big", "unmeasured"]


@pytest.mark.skipif(not (REPO / "serve.sh").exists(), reason="serve.sh not in this checkout")
def test_served_arm_runs_serve_sh_and_reports_the_offline_training_time(tmp_path, bert_dir, examples):
    root = tmp_path / "project"
    shutil.copytree(bert_dir, root / "model")
    (root / "training_manifest.json").write_text(json.dumps({"files": hash_model_dir(root / "model"),
                                                             "training": {"wall_seconds": 123.5}}))
    (root / "calibration.json").write_text(json.dumps({"chosen": {"rule": "entailment", "temperature": 1.0}}))
    plan = make_plan(examples[:36])
    entry = build_entry("served", "served", model_dir="model", root=str(root), serve_cmd=f"bash {REPO / 'serve.sh'}",
                        startup_timeout=120.0)
    result = run_arm(entry, examples[:36], plan, warmups=1)
    assert result.error is None, result.error
    assert sorted(result.probabilities) == plan.test_rows and all(p is not None for p in result.probabilities.values())
    assert result.offline_training["seconds"] == 123.5 and result.peak_rss > 10 * 2**20
    assert result.identity["model_sha256"] and result.identity["manifest_sha256"]


@register("test_crasher")
class CrasherArm(Arm):
    """Kills its own process on the first prediction (a segfaulting native library, say)."""

    def predict_proba(self, texts, labels):
        import os

        os._exit(3)


def test_an_arm_that_kills_its_process_loses_only_its_own_result(examples):
    from zsnli.compare.bakeoff_runner import run_arms

    plan = make_plan(examples)
    crashed, fine = run_arms([build_entry("crash", "test_crasher"), build_entry("maj", "majority")], examples, plan,
                             isolate=True, warmups=0)
    assert "died without a result" in crashed.error and "exit code 3" in crashed.error
    assert fine.error is None and sorted(fine.probabilities) == plan.test_rows
    assert fine.peak_rss and fine.rss_source.startswith("the arm's own process")


def test_a_suite_imports_a_module_whose_register_line_adds_the_arm(tmp_path, examples_file, monkeypatch):
    (tmp_path / "team_arms_for_test.py").write_text(
        "import numpy as np\n"
        "from zsnli.compare.arms import Arm, register\n\n"
        "@register('test_first_label')\n"
        "class FirstLabel(Arm):\n"
        "    def predict_proba(self, texts, labels):\n"
        "        out = np.zeros((len(texts), len(labels)))\n"
        "        out[:, 0] = 1.0\n"
        "        return out\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = tmp_path / "suite.toml"
    suite.write_text("imports = ['team_arms_for_test']\n[[arms]]\nname = 'first'\ntype = 'test_first_label'\n")
    report = tmp_path / "r.json"
    assert main(["bakeoff", "--suite", str(suite), "--examples", str(examples_file), "--report", str(report),
                 "--in-process"]) == 0
    board = json.loads(report.read_text())["leaderboard"]
    assert board[0]["arm"] == "first" and math.isclose(board[0]["accuracy"], (1 / 3 + 1 / 4) / 2)


def test_metadata_lines_are_split_on_newlines_only(tmp_path):
    """A text holding U+2028 (JSON lets it stand unescaped) is one line of the examples file: its
    extra fields are found; ``str.splitlines`` would cut the line and fail on the halves."""
    from zsnli.harness.examples import Example

    rows = [{"id": 1, "dataset": "d", "text": "a\u2028b", "labels": ["x", "y"], "label": "x", "source": "mail"},
            {"id": 2, "dataset": "d", "text": "c\u2029d", "labels": ["x", "y"], "label": "y", "source": "web"}]
    path = tmp_path / "ex.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    examples = [Example(r["id"], "d", r["text"], ("x", "y"), k) for k, r in enumerate(rows)]
    assert read_metadata(path, examples) == [{"source": "mail"}, {"source": "web"}]


@register("test_slow_first_label")
class SlowFirstLabelArm(Arm):
    """Answers the first label after a short sleep: a slow arm whose rows the parent counts."""

    def predict_proba(self, texts, labels):
        import time

        time.sleep(0.05)
        out = np.zeros((len(texts), len(labels)))
        out[:, 0] = 1.0
        return out


def test_a_running_arm_reports_rows_done_and_time_left(examples, monkeypatch):
    """The forked arm counts its test rows; the parent's progress lines say how many and how long is left
    (it used to print only "still running, N s")."""
    from rich.console import Console

    from zsnli.compare.bakeoff_runner import run_arms
    from zsnli.runtime import progress

    monkeypatch.setattr(progress, "LINE_INTERVAL_S", 0.2)
    emitted: list[str] = []
    monkeypatch.setattr(progress, "emit", emitted.append)
    plan = make_plan(examples)
    n = len(plan.test_rows)
    [result] = run_arms([build_entry("slow", "test_slow_first_label")], examples, plan, isolate=True, warmups=0,
                        console=Console(file=open("/dev/null", "w")))
    assert result.error is None
    lines = [line for line in emitted if line.startswith("arm slow: ")]
    assert lines and lines[-1].startswith(f"arm slow: {n}/{n} rows (100%)")
    assert all(" rows (" in line and " elapsed" in line for line in lines)


def test_tables_in_a_log_keep_every_column():
    """Off a terminal the console is `LOG_WIDTH` wide: a table wider than 80 or 150 columns is printed
    whole (rich would cut its cells with an ellipsis to fit a narrower console)."""
    import io

    from rich.table import Table

    from zsnli.compare.cli import output_console

    stream = io.StringIO()
    console = output_console(stream)
    table = Table(title="Ranking")
    for k in range(12):
        table.add_column(f"column number {k}")
    table.add_row(*[f"value-{k}-" + "x" * 12 for k in range(12)])
    console.print(table)
    text = stream.getvalue()
    assert "…" not in text and all(f"value-{k}-" + "x" * 12 in text for k in range(12))
    assert "\x1b[" not in text and max(len(line) for line in text.splitlines()) > 200


def test_a_report_path_that_cannot_be_written_is_refused_before_any_arm_runs(tmp_path, examples_file, capsys):
    """The tryout of issue 52: ``--report /tmp`` ran every arm, then failed, losing the results."""
    suite = tmp_path / "s.toml"
    suite.write_text("[[arms]]\nname='m'\ntype='majority'\n")
    blocked = tmp_path / "file"
    blocked.write_text("")
    # a file where a folder goes was "cannot be written (File exists)" (found by a new-user pass): it is named
    for flag, path, expected in (("--report", tmp_path, "is a directory"),
                                 ("--report", blocked / "r.json", f"{blocked} is a file, not a folder"),
                                 ("--report", blocked / "sub" / "r.json", f"{blocked} is a file, not a folder"),
                                 ("--html", tmp_path, "is a directory")):
        with pytest.raises(SystemExit) as exited:  # refused while the flags parse (zsnli.harness.cli.output_file)
            main(["bakeoff", "--suite", str(suite), "--examples", str(examples_file), flag, str(path)])
        captured = capsys.readouterr()
        out = captured.out + captured.err
        assert exited.value.code == 2 and out.count("\n") == 1 and flag in out and expected in out, out
        assert "arm m" not in out
    fresh = tmp_path / "new" / "deeper" / "r.json"
    from zsnli.compare.bakeoff_cli import check_writable

    check_writable(fresh, "--report")
    assert not (tmp_path / "new").exists()  # the check leaves nothing behind


# ---- issue 57: checks when the suite loads, kinds of failed arms, rules for labels the data lacks ------------


@pytest.mark.parametrize("type_name, params, expected", [
    ("tfidf_linearsvc", {"calibration": "isotonic"}, "'platt' or 'raw'"),
    ("tfidf_logreg", {"C": -1.0}, "C > 0"),
    ("tfidf_logreg", {"C": "big"}, "C = 'big': Input should be a valid number"),
    ("embedding_knn", {"weights": "far"}, "'uniform' or 'distance'"),
    ("char_nb", {"alpha": 0}, "alpha > 0"),
    ("keyword_rules", {"rules": {"billing": "refund"}}, "billing: Input should be a valid list"),
    ("finetuned_encoder", {"max_fits": 0}, ">= 1"),
    ("served", {"url": "http://127.0.0.1:9", "concurrency": 0}, "concurrency must be >= 1"),
])
def test_a_bad_parameter_value_is_refused_when_the_suite_loads(tmp_path, examples_file, capsys, type_name, params,
                                                                 expected):
    """Issue 57: ``calibration = "isotonic"`` loaded, the arm then failed at run time with empty tables (exit 1)."""
    suite = tmp_path / "suite.toml"
    values = "".join(f"{k} = {json.dumps(v) if not isinstance(v, dict) else _toml_table(v)}\n" for k, v in params.items())
    suite.write_text(f"[[arms]]\nname = 'x'\ntype = '{type_name}'\n{values}", encoding="utf-8")
    with pytest.raises(SuiteError, match=expected.replace("(", r"\(")):
        load_suite(suite)
    assert main(["bakeoff", "--suite", str(suite), "--examples", str(examples_file),
                 "--report", str(tmp_path / "r.json")]) == 2
    refused = capsys.readouterr()
    assert refused.out == "" and refused.err.count("\n") == 1 and "(x)" in refused.err
    assert refused.err.startswith("validate.py bakeoff: error: ")
    assert not (tmp_path / "r.json").exists()


def test_every_string_parameter_of_every_arm_refuses_a_blank_value_when_the_suite_loads(tmp_path):
    """The class of ``serve_cmd = ""`` (loaded, then failed only when the served arm ran): each string an arm takes
    (path, URL, command) is refused blank at load, naming the parameter."""
    import inspect
    import typing

    checked = 0
    for type_name, cls in sorted(ARMS.items()):
        hints = typing.get_type_hints(cls.__init__)
        for key in inspect.signature(cls.__init__).parameters:
            if key in ("self", "name") or str not in (hints.get(key), *typing.get_args(hints.get(key))):
                continue
            suite = tmp_path / f"{type_name}-{key}.toml"
            suite.write_text(f"[[arms]]\nname = 'x'\ntype = '{type_name}'\n{key} = ' '\n", encoding="utf-8")
            with pytest.raises(SuiteError, match=f"parameter {key} = ' ': an empty string"):
                load_suite(suite)
            checked += 1
    assert checked >= 10


def _toml_table(d: dict) -> str:
    return "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in d.items()) + "}"


def test_every_annotated_parameter_of_every_arm_is_checked_against_its_type():
    """The class of the fault: each registered arm's declared schema holds for each of its parameters."""
    import inspect
    import typing

    from zsnli.compare.arms import check_params

    checked = 0
    for type_name, cls in sorted(ARMS.items()):
        hints = typing.get_type_hints(cls.__init__)
        for key in inspect.signature(cls.__init__).parameters:
            if key in ("self", "name") or hints.get(key) in (None, typing.Any):
                continue
            with pytest.raises(ArmError, match=f"parameter {key} = "):
                check_params(type_name, {key: {"not": object()}})
            checked += 1
    assert checked >= 40


@register("test_broken_few_shot")
class BrokenFewShotArm(Arm):
    """A few-shot arm whose set-up fails (a model that cannot load)."""

    trains = True

    def setup(self):
        raise ArmError("cannot load")


@register("test_fit_crasher")
class FitCrasherArm(Arm):
    """A few-shot arm that kills its process in its first fit."""

    trains = True

    def fit(self, texts, labels):
        import os

        os._exit(4)


@pytest.mark.parametrize("isolate", [True, False])
def test_a_failed_few_shot_arm_is_still_labelled_few_shot(tmp_path, examples_file, capsys, isolate):
    """Issue 57: an arm that failed before it was built was labelled zero-shot though it is few-shot."""
    suite = tmp_path / "suite.toml"
    arms = [("broken", "test_broken_few_shot"), ("majority", "majority")] + ([("crash", "test_fit_crasher")]
                                                                             if isolate else [])
    suite.write_text("".join(f"[[arms]]\nname = '{n}'\ntype = '{t}'\n" for n, t in arms), encoding="utf-8")
    report_path = tmp_path / "report.json"
    argv = ["bakeoff", "--suite", str(suite), "--examples", str(examples_file), "--report", str(report_path)]
    assert main(argv + ([] if isolate else ["--in-process"])) == 1
    board = {r["arm"]: r for r in json.loads(report_path.read_text())["leaderboard"]}
    assert board["broken"]["error"] and board["broken"]["kind"] == "few-shot"
    if isolate:
        assert "died without a result" in board["crash"]["error"] and board["crash"]["kind"] == "few-shot"


def test_keyword_rules_for_a_label_the_data_lacks_are_refused_before_any_arm_runs(tmp_path, examples_file, capsys,
                                                                                  monkeypatch):
    """Issue 57: ``keyword_rules`` silently ignored rules whose label no example has."""
    from zsnli.compare import suite_bakeoff

    monkeypatch.setattr(suite_bakeoff, "run_arms", lambda *a, **k: pytest.fail("an arm ran"))
    suite = tmp_path / "suite.toml"
    suite.write_text("[[arms]]\nname = 'rules'\ntype = 'keyword_rules'\n"
                     "rules = {red = ['red'], purple = ['violet'], 'Circle' = ['round']}\n", encoding="utf-8")
    assert main(["bakeoff", "--suite", str(suite), "--examples", str(examples_file),
                 "--report", str(tmp_path / "r.json")]) == 2
    refused = capsys.readouterr()  # one line on stderr, named by its command (it was on stdout)
    err = refused.err
    assert err.count("\n") == 1 and "'purple', 'Circle'" in err and "no example has" in err, err
    assert err.startswith("validate.py bakeoff: error: ") and "no example has" not in refused.out
    rules = build_arm("keyword_rules", "r", {"rules": {"red": ["red"], "circle": ["round"]}})
    rules.check_labels({"red", "green", "circle"})  # every rule's label is in the data: accepted
