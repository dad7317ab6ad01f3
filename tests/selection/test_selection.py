"""Leave-one-dataset-out selection on synthetic score caches (no model), and the CLI on the tiny fixture."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from zsnli.selection import search as sel
from zsnli.selection import cli as selection_cli
from zsnli.selection.negation import NegationRule
from zsnli.selection.score_cache import CachedSet
from zsnli.scoring import ScoringConfig, label_probabilities, load_scoring_config


def make_set(name="s", n=60, hyps=("This text is about sport.", "This text is about music."), seed=0,
             signal=2.0) -> CachedSet:
    """N rows over the same K hypotheses; the gold label's entailment logit is raised by ``signal``."""
    rng = np.random.default_rng(seed)
    k = len(hyps)
    gold = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k, 3))
    logits[np.arange(n), gold, 0] += signal
    cos = rng.uniform(-0.2, 0.6, (n, k))
    cos[np.arange(n), gold] += 0.1
    return CachedSet(name=name, group="g", task_kind="", classes=[f"c{i}" for i in range(k)], hypotheses=list(hyps),
                     hyp_index=np.tile(np.arange(k), n), k=np.full(n, k), gold=gold,
                     label_classes=np.tile(np.arange(k), n), logits=logits.reshape(-1, 3).astype(np.float32),
                     cf_logits=np.tile(rng.normal(0, 1, (k, 3)), (n, 1)).astype(np.float32),
                     cosine=cos.ravel().astype(np.float32), entail_idx=0, contra_idx=2,
                     meta={"key": {"files": {f"{name}.jsonl": "0" * 64}}})


def test_candidates_grid():
    cands = sel.candidates()
    assert len(cands) == 3 * 2 * len(sel.EMBEDDING_WEIGHTS) * 2 and len({c.label for c in cands}) == len(cands)
    cfg = sel.Candidate("entailment_logprob", True, 20.0, "t0*K^b").config(1.5, -0.2, "abc")
    assert cfg == ScoringConfig("entailment_logprob", 1.5, -0.2, "N/A", 20.0, "abc")
    assert sel.Candidate("entailment", False, 0.0, "global").config(2, 0, "abc").embedding_sha256 is None


def _sampled_pack(rng, n, k, temp):
    s = rng.normal(0, 3, (n, k))
    p = np.exp(s / temp)
    p /= p.sum(1, keepdims=True)
    gold = np.array([rng.choice(k, p=row) for row in p])
    return sel.Packed(s, np.ones((n, k), bool), np.tile(np.arange(k), (n, 1)), np.full(n, float(k)), gold, gold, k)


def test_fit_temperature_recovers_the_generating_temperature():
    rng = np.random.default_rng(0)
    p = _sampled_pack(rng, 4000, 4, 2.0)
    t0, b = sel.fit_temperature(p, np.full(4000, 1 / 4000), "global")
    assert b == 0 and t0 == pytest.approx(2.0, rel=0.08)
    packs = [_sampled_pack(rng, 3000, 2, 1.5 * 2 ** 0.5), _sampled_pack(rng, 3000, 8, 1.5 * 8 ** 0.5)]
    joined, owner = sel.stack(packs)
    t0, b = sel.fit_temperature(joined, sel.dataset_weights(owner, np.ones(2, bool)), "t0*K^b")
    assert t0 == pytest.approx(1.5, rel=0.15) and b == pytest.approx(0.5, abs=0.1)


def test_nll_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    joined, owner = sel.stack([_sampled_pack(rng, 50, 3, 1.0), _sampled_pack(rng, 30, 6, 1.0)])
    w = sel.dataset_weights(owner, np.array([True, True]))
    _, g = sel.nll_and_grad(joined, w, 0.3, -0.2)
    eps = 1e-6
    for i, (da, db) in enumerate(((eps, 0), (0, eps))):
        up = sel.nll_and_grad(joined, w, 0.3 + da, -0.2 + db)[0]
        down = sel.nll_and_grad(joined, w, 0.3 - da, -0.2 - db)[0]
        assert g[i] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-8)


def test_dataset_weights_equal_per_dataset():
    owner = np.array([0] * 10 + [1] * 30 + [2] * 5)
    w = sel.dataset_weights(owner, np.array([True, True, False]))
    assert w[:10].sum() == pytest.approx(0.5) and w[10:40].sum() == pytest.approx(0.5) and (w[40:] == 0).all()
    with pytest.raises(ValueError):
        sel.dataset_weights(owner, np.zeros(3, bool))


def test_fast_figures_equal_served_code_and_metrics():
    cs = make_set(hyps=("a", "b", "c"), n=90)
    cand = sel.Candidate("entailment_minus_contradiction", True, 5.0, "t0*K^b")
    cfg = cand.config(1.7, 0.1, "digest")
    served = sel.served_probabilities(cs, cfg)
    off = cs.offsets
    for i in (0, 7, 89):
        s = cs.logits[off[i]:off[i + 1], 0] - cs.logits[off[i]:off[i + 1], 2]
        cf = cs.cf_logits[off[i]:off[i + 1], 0] - cs.cf_logits[off[i]:off[i + 1], 2]
        z = (s - cf + 5.0 * cs.cosine[off[i]:off[i + 1]]) / (1.7 * 3 ** 0.1)
        np.testing.assert_allclose(served[i], np.exp(z) / np.exp(z).sum(), rtol=1e-6)
        np.testing.assert_allclose(served[i], label_probabilities(s, cfg, cf, cs.cosine[off[i]:off[i + 1]]))
    card = sel.score_cached(cs, served)
    p = sel.pack(cs, sel.candidate_scores(cs, cand))
    norm, ece = sel.fast_normalised(p, sel.fast_macro_f1(p), sel.row_temperatures(p, np.log(1.7), 0.1),
                                    sel.Bounds(card.floor, card.ceiling))
    assert norm == pytest.approx(card.normalised, abs=1e-6) and ece == pytest.approx(card.ece, abs=1e-9)


def test_objective_penalises_only_beyond_the_margin():
    base = np.array([50.0, 50.0])
    assert sel.objective(np.array([45.0, 41.0]), base) == 43.0
    assert sel.objective(np.array([60.0, 30.0]), base) == 45.0 - (20.0 - sel.ROBUSTNESS_MARGIN)


def test_leave_one_out_never_looks_at_the_held_out_dataset():
    D, C = 3, 2
    fold = np.full((C, D, D), 50.0)
    fold[1, :, :] = 40.0
    fold[1, 0, 0] = 100.0  # candidate 1 is best only on dataset 0 when 0 is held out
    grid = sel.Grid(["a", "b", "c"], [sel.Candidate("entailment", False, 0.0, "global")] * 2, fold,
                    np.ones((C, D, 2)), fold[:, 0, :], np.ones((C, 2)), np.zeros(D))
    assert sel.leave_one_out(grid) == [0, 0, 0]
    fold[1, 1:, 0] = 100.0  # now the others' folds rate candidate 1 highly on dataset 0
    assert sel.leave_one_out(grid)[1:] == [1, 1]


def test_evaluate_grid_and_choice_on_synthetic_sets():
    sets = {f"g/{i}": make_set(f"s{i}", seed=i, hyps=tuple(f"label {j}" for j in range(2 + i))) for i in range(4)}
    cands = [sel.Candidate("entailment", False, 0.0, "global"), sel.Candidate("entailment", False, 10.0, "t0*K^b")]
    grid = sel.evaluate_grid(sets, cands)
    assert grid.fold_norm.shape == (2, 4, 4) and np.all(grid.temps[:, :, 0] > 0)
    cfg = cands[0].config(*grid.temps[0, 2], None)
    card = sel.score_cached(sets["g/2"], sel.served_probabilities(sets["g/2"], cfg))
    assert grid.fold_norm[0, 2, 2] == pytest.approx(card.normalised, abs=0.05)
    assert sel.choose_on_all(grid) in (0, 1) and len(sel.leave_one_out(grid)) == 4


NEG = ("This example tweet is not offensive.", "This example tweet is offensive.")


def test_negation_pack_and_probabilities():
    cs = make_set(hyps=NEG, n=40, seed=3)
    assert sel.is_negation_set(cs) and not sel.is_negation_set(make_set())
    packed, pos_neg = sel.negation_pack(cs, NegationRule())
    off = cs.offsets
    assert (pos_neg[:, 0] == off[:-1] + 1).all() and (pos_neg[:, 1] == off[:-1]).all()
    assert (packed.gold == np.where(cs.gold == 1, 0, 1)).all()
    d = cs.logits[pos_neg[:, 0], 0] - cs.logits[pos_neg[:, 0], 2]
    np.testing.assert_allclose(packed.scores[:, 0], d, rtol=1e-6)
    probs = sel.negation_served_probabilities(cs, NegationRule(2.0))
    assert probs[0][1] == pytest.approx(1 / (1 + np.exp(-d[0] / 2.0)))
    assert all(p.sum() == pytest.approx(1.0) for p in probs)
    card = sel.score_cached(cs, probs)
    assert card.n_classes == 2 and 0 <= card.ece <= 1


def test_negation_leave_one_out_reports_every_negation_set():
    sets = {f"g/n{i}": make_set(f"n{i}", hyps=NEG, seed=i) for i in range(3)}
    sets["g/topic"] = make_set("topic", hyps=("a", "b", "c"), seed=9)
    cands = [sel.Candidate("entailment", False, 0.0, "global")]
    grid = sel.evaluate_grid(sets, cands)
    out = sel.negation_leave_one_out(sets, grid, sel.leave_one_out(grid), [NegationRule(1.0, False, 0.0)])
    assert out["n"] == 3 and set(out["datasets"]) == {"g/n0", "g/n1", "g/n2"}
    for row in out["datasets"].values():
        assert row["choice"] in ("off", "negation rule")


@pytest.fixture
def tiny_model_dir(bert_dir, tmp_path):
    root = tmp_path / "model"
    shutil.copytree(bert_dir, root)
    shutil.copytree(bert_dir, root / "embedding")
    return root


def test_cli_without_shared_data_is_one_line_exit_2(tmp_path, capsys):
    assert selection_cli.main(["--zsc-dev-dir", str(tmp_path / "absent")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--zsc-dev-dir" in err[0]


def test_cli_writes_calibration_and_sources(tmp_path, tiny_model_dir, monkeypatch):
    from test_devsets_negation import write_zsc

    data, ex = _zsc_and_examples(tmp_path)
    write_zsc(data, "offish", n=24, classes=("not offensive", "offensive"))
    out, sources = tmp_path / "calibration.json", tmp_path / "data_sources.json"
    out.write_text(json.dumps({"chosen": {"rule": "entailment", "temperature": 2.0}, "model_sha256": "m" * 64,
                               "decided_by": "old way", "candidates": [1, 2, 3]}))
    sources.write_text(json.dumps({"sources": [{"name": "x", "role": "train"}]}))
    monkeypatch.setattr(sel, "candidates", lambda: [sel.Candidate("entailment", False, 0.0, "global"),
                                                    sel.Candidate("entailment_logprob", True, 10.0, "t0*K^b")])
    monkeypatch.setattr(sel, "negation_variants", lambda: [NegationRule(1.0, False, 0.0)])
    rc = selection_cli.main(["--zsc-dev-dir", str(data), "--dev-examples", str(ex), "--cache", str(tmp_path / "c"),
                             "--model-dir", str(tiny_model_dir), "--out", str(out), "--data-sources", str(sources),
                             "--report-public", str(ex), "--negation"])
    assert rc == 0
    doc = json.loads(out.read_text())
    config, ok = load_scoring_config(out)
    from zsnli.manifest import hash_model_dir, model_dir_digest, sha256_file

    assert ok and config.to_dict() == doc["chosen"]
    assert doc["model_sha256"] == model_dir_digest(hash_model_dir(tiny_model_dir))  # --model-dir's, not the old file's
    assert doc["superseded"]["chosen"] == {"rule": "entailment", "temperature": 2.0} and "candidates" not in doc
    table = doc["selection"]["out_of_fold"]
    assert set(table) == {"zsc-dev/offish", "zsc-dev/spamish", "zsc-dev/topic", "dev/d"}
    assert set(doc["selection"]["negation_pairs"]["out_of_fold"]) == {"zsc-dev/offish", "zsc-dev/spamish"}
    assert doc["selection"]["public_report"]["note"].startswith("reporting only")
    assert len(out.read_bytes()) < 200_000
    table_md = selection_cli.quality_markdown(doc)
    assert "| zsc-dev/topic |" in table_md and "| public 500 (reporting only)" in table_md
    entries = [s for s in json.loads(sources.read_text())["sources"] if s["role"] == "selection"]
    assert [e["name"] for e in entries] == ["zsc-dev:offish", "zsc-dev:spamish", "zsc-dev:topic"]
    assert entries[0]["licence"] == "CC BY 4.0" and len(entries[0]["sha256"]) == 64
    assert entries[0]["path"] == str((data / "offish.jsonl").resolve())  # the --zsc-dev-dir read, wherever it is
    assert entries[0]["sha256"] == sha256_file(data / "offish.jsonl")
    assert selection_cli.main(["--zsc-dev-dir", str(data), "--dev-examples", str(ex), "--cache", str(tmp_path / "c"),
                               "--model-dir", str(tiny_model_dir), "--out", str(out),
                               "--data-sources", str(sources)]) == 0
    again = json.loads(out.read_text())
    assert again["superseded"] == doc["superseded"]
    # without --negation: no negation experiment in the document, and the same choice
    assert "negation_pairs" not in again["selection"] and "negation_pairs" not in again
    assert len(again["selection"]["decisions"]) == 1
    assert again["chosen"] == doc["chosen"] and again["selection"]["out_of_fold"] == doc["selection"]["out_of_fold"]
    assert len([s for s in json.loads(sources.read_text())["sources"] if s["role"] == "selection"]) == 3


def test_cli_embedding_dir_scores_and_records_another_encoder(tmp_path, tiny_model_dir, monkeypatch, capsys):
    from conftest import ENCODER_LABELS, build_bert_nli
    from test_devsets_negation import write_zsc
    from zsnli.runtime.embedding import embedding_digest
    from zsnli.selection.score_cache import load_all

    data = tmp_path / "zsc"
    data.mkdir()
    write_zsc(data, "topic", n=24, classes=("sport", "music", "food"), counts=[8, 8, 8],
              hyps=["This text is about sport.", "This text is about music.", "This text is about food."])
    write_zsc(data, "spamish", n=24, classes=("not spam", "spam"))
    ex = tmp_path / "ex.jsonl"
    ex.write_text("\n".join(json.dumps({"id": i, "dataset": "d", "text": f"the game {i}", "labels": ["sport", "business"],
                                        "label": i % 2}) for i in range(8)))
    other = build_bert_nli(tmp_path / "encoder", id2label=ENCODER_LABELS, seed=7)  # an encoder: no NLI head
    monkeypatch.setattr(sel, "candidates", lambda: [sel.Candidate("entailment_logprob", False, 10.0, "global")])
    base = ["--zsc-dev-dir", str(data), "--dev-examples", str(ex), "--model-dir", str(tiny_model_dir),
            "--data-sources", str(tmp_path / "sources.json"), "--max-rows", "18", "--max-rows-for", "topic=15"]
    assert selection_cli.main(base + ["--cache", str(tmp_path / "c1"), "--out", str(tmp_path / "a.json")]) == 0
    assert selection_cli.main(base + ["--cache", str(tmp_path / "c2"), "--out", str(tmp_path / "b.json"),
                                      "--embedding-dir", str(other)]) == 0
    a, b = (json.loads((tmp_path / f"{x}.json").read_text())["chosen"] for x in "ab")
    assert a["embedding_sha256"] == embedding_digest(tiny_model_dir / "embedding")
    assert b["embedding_sha256"] == embedding_digest(other) != a["embedding_sha256"]
    c1, c2 = load_all(tmp_path / "c1"), load_all(tmp_path / "c2")
    assert not np.allclose(c1["zsc-dev/topic"].cosine, c2["zsc-dev/topic"].cosine)
    np.testing.assert_array_equal(c1["zsc-dev/topic"].logits, c2["zsc-dev/topic"].logits)
    assert (len(c1["zsc-dev/topic"]), len(c1["zsc-dev/spamish"])) == (15, 18)
    for bad, flag in [(["--embedding-dir", str(tmp_path / "none")], "--embedding-dir"),
                      (["--max-rows-for", "topic"], "--max-rows-for"), (["--max-rows", "0"], "--max-rows")]:
        capsys.readouterr()
        try:
            code = selection_cli.main(base + bad)
        except SystemExit as exc:  # --max-rows 0: refused by the parser's range type (zsnli.harness.cli)
            code = exc.code
        assert code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and flag in err[0], err


def test_the_previous_scoring_is_compared_only_on_the_encoder_it_was_served_with():
    """A previous calibration pinned to another sentence encoder cannot be re-scored with this run's cosines: its
    "previous scoring" row would mix the old temperatures with the new cosines (issue 42's encoder change)."""
    from zsnli.selection.cli import comparable_previous

    chosen = {"rule": "entailment", "temperature": 1.35, "k_exponent": 0.0, "content_free_premise": None,
              "embedding_weight": 40.0, "embedding_sha256": "a" * 64, "groups": {}, "calibrator": None,
              "cascade": {"min_labels": 10, "keep": 4}}
    assert comparable_previous({"chosen": chosen}, "a" * 64).default.embedding_weight == 40.0
    assert comparable_previous({"chosen": chosen}, "b" * 64) is None
    assert comparable_previous({}, "a" * 64) is None
    plain = {**chosen, "embedding_weight": 0.0, "embedding_sha256": None, "cascade": None}
    assert comparable_previous({"chosen": plain}, "b" * 64) is not None


def test_compare_with_records_another_runs_figures_on_the_same_rows_only(tmp_path):
    from zsnli.selection.cli import DevSetError, _compared_run, compared_with

    served = {"weighted_normalised": 35.2, "unweighted_normalised": 34.6, "per_kind": {"topic": 62.2}}
    loko = {"weighted_normalised": 33.8, "unweighted_normalised": 33.4, "per_kind": {"topic": 58.1}}
    rows = {"zsc-dev/a": {"files": {"a.jsonl": "1" * 64}, "rows_used": 200, "negation_pairs": False}}
    doc = {"chosen": {"embedding_sha256": "e" * 64},
           "selection": {"decided_by": rows, "kind_weighted": {
               "chosen_arm": "w pooled, T pooled by objective", "served_leave_one_dataset_out": served,
               "leave_one_kind_out": {"served": loko, "per_set": {}}}}}
    path = tmp_path / "other.json"
    path.write_text(json.dumps(doc))
    got = compared_with(path, rows)
    assert got["served_leave_one_dataset_out"] == served and got["leave_one_kind_out"] == loko
    assert got["embedding_sha256"] == "e" * 64 and got["file"] == str(path)
    other_rows = {"zsc-dev/a": {**rows["zsc-dev/a"], "rows_used": 100}}
    with pytest.raises(DevSetError, match="other sets, files or rows"):
        compared_with(path, other_rows)
    (tmp_path / "bad.json").write_text(json.dumps({"chosen": {}}))
    with pytest.raises(ValueError, match=r"not the output of train.py select --kinds \(no 'selection'\)"):
        _compared_run(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_text(json.dumps({"selection": {"kind_weighted": []}}))
    with pytest.raises(ValueError, match=r"--kinds \(no 'leave_one_kind_out'\)"):
        _compared_run(tmp_path / "bad.json")
    (tmp_path / "empty.json").write_text("\n")
    with pytest.raises(ValueError, match=r"empty.json: not readable JSON \(empty file\)$"):
        _compared_run(tmp_path / "empty.json")


def test_superseded_is_the_replaced_choice_unless_the_rerun_chose_the_same():
    from zsnli.selection.cli import superseded_block

    old = {"chosen": {"temperature": 1.0}, "selection": {}, "superseded": {"chosen": {"temperature": 2.0}}}
    assert superseded_block(old, {"temperature": 1.5})["chosen"] == {"temperature": 1.0}
    assert superseded_block(old, {"temperature": 1.0}) == old["superseded"]  # a rerun keeps the earlier record
    assert superseded_block({"chosen": {"temperature": 3.0}})["chosen"] == {"temperature": 3.0}  # an older format


def _zsc_and_examples(tmp_path):
    from test_devsets_negation import write_zsc

    data = tmp_path / "zsc"
    data.mkdir()
    write_zsc(data, "spamish", n=24, classes=("not spam", "spam"))
    write_zsc(data, "topic", n=24, classes=("sport", "music", "food"), counts=[8, 8, 8],
              hyps=["This text is about sport.", "This text is about music.", "This text is about food."])
    ex = tmp_path / "ex.jsonl"
    ex.write_text("\n".join(json.dumps({"id": i, "dataset": "d", "text": f"the game {i}", "labels": ["sport", "business"],
                                        "label": i % 2}) for i in range(8)))
    return data, ex


@pytest.fixture
def shipped_with_base(tmp_path, bert_dir, deberta_dir):
    """``ship/model`` (the small model, its manifest, calibration and data sources beside it) holding ``base/`` (a
    variant folder with its own manifest and data sources) and ``embedding/``."""
    from zsnli.manifest import hash_model_dir, model_dir_digest, write_json

    ship = tmp_path / "ship"
    shutil.copytree(bert_dir, ship / "model")
    shutil.copytree(bert_dir, ship / "model" / "embedding")
    shutil.copytree(deberta_dir, ship / "model" / "base")
    for folder in (ship, ship / "model" / "base"):
        model = ship / "model" if folder == ship else folder
        files = hash_model_dir(model)
        write_json(folder / "training_manifest.json", {"files": files, "model_sha256": model_dir_digest(files)})
        write_json(folder / "data_sources.json", {"sources": [{"name": "its-own", "role": "train"}]})
    write_json(ship / "calibration.json", {"chosen": {"rule": "entailment", "temperature": 1.5},
                                           "model_sha256": json.loads((ship / "training_manifest.json").read_text())[
                                               "model_sha256"]})
    return ship


def test_select_on_a_variant_folder_writes_into_it_and_records_its_model(tmp_path, shipped_with_base, monkeypatch,
                                                                        capsys):
    """``--model-dir model/base`` alone: its own calibration.json and data_sources.json, never the small model's."""
    from zsnli.manifest import hash_model_dir, model_dir_digest

    ship, base = shipped_with_base, shipped_with_base / "model" / "base"
    small = {n: (ship / n).read_bytes() for n in ("calibration.json", "data_sources.json")}
    data, ex = _zsc_and_examples(tmp_path)
    monkeypatch.setattr(sel, "candidates", lambda: [sel.Candidate("entailment", False, 0.0, "global")])
    monkeypatch.chdir(ship)  # where the old defaults (./calibration.json) pointed: the small model's
    argv = ["--zsc-dev-dir", str(data), "--dev-examples", str(ex), "--cache", str(tmp_path / "c"),
            "--model-dir", "model/base"]
    assert selection_cli.main(argv) == 0
    assert {n: (ship / n).read_bytes() for n in small} == small
    doc = json.loads((base / "calibration.json").read_text())
    assert doc["model_sha256"] == model_dir_digest(hash_model_dir(base))
    names = [s["name"] for s in json.loads((base / "data_sources.json").read_text())["sources"]]
    assert names == ["its-own", "zsc-dev:spamish", "zsc-dev:topic"]
    for flag, path in (("--out", "calibration.json"), ("--data-sources", "data_sources.json")):
        capsys.readouterr()
        assert selection_cli.main(argv + [flag, path]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{flag} {path} belongs to another model" in err[0], err
    assert {n: (ship / n).read_bytes() for n in small} == small


def test_recorded_paths_are_relative_to_the_checkout_in_it_and_beside_it():
    from zsnli.selection.targets import recorded_path
    from zsnli.training.cli_checks import CHECKOUT

    assert recorded_path(CHECKOUT.parent / "shared" / "data" / "zsc-dev" / "a.jsonl") == "../shared/data/zsc-dev/a.jsonl"
    assert recorded_path(CHECKOUT / "tests" / "data" / "a.jsonl") == "tests/data/a.jsonl"
    assert recorded_path("/elsewhere/zsc-dev/a.jsonl") == "/elsewhere/zsc-dev/a.jsonl"


@pytest.mark.parametrize("model_dir, flag, path", [
    ("model/base", "--out", "model/calibration.json"),  # beside the small model: its server reads model/ first
    ("model/base", "--data-sources", "model/data_sources.json"),
    ("model/base", "--out", "model/embedding/calibration.json"),  # the sentence encoder's folder
    ("model", "--out", "model/base/calibration.json"),  # the base's own folder, for the small model
    ("model", "--out", "model/embedding/calibration.json"),
    ("model/base", "--out", "notes/calibration.json"),  # no manifest inside: the small model's beside it governs
])
def test_select_refuses_a_path_another_models_server_would_read(tmp_path, shipped_with_base, monkeypatch, capsys,
                                                                 model_dir, flag, path):
    # The tester: select --model-dir model/base --out model/calibration.json exited 0; the small server then found
    # the base's calibration in model/ first, skipped it (another model_sha256) and served uncalibrated.
    ship = shipped_with_base
    (ship / "notes").mkdir()
    data, ex = _zsc_and_examples(tmp_path)
    monkeypatch.setattr(sel, "candidates", lambda: [sel.Candidate("entailment", False, 0.0, "global")])
    monkeypatch.chdir(ship)
    before = sorted(p for p in ship.rglob("*") if p.is_file())
    argv = ["--zsc-dev-dir", str(data), "--dev-examples", str(ex), "--cache", str(tmp_path / "c"),
            "--model-dir", model_dir, flag, path]
    assert selection_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{flag} {path} belongs to another model" in err[0], err
    assert sorted(p for p in ship.rglob("*") if p.is_file()) == before


def test_select_writes_where_only_its_own_server_reads(tmp_path, shipped_with_base, monkeypatch):
    # The rule refuses only other models' folders: the small model's own model/calibration.json (read first by its
    # server) and a folder governed by no manifest are written.
    ship = shipped_with_base
    data, ex = _zsc_and_examples(tmp_path)
    monkeypatch.setattr(sel, "candidates", lambda: [sel.Candidate("entailment", False, 0.0, "global")])
    monkeypatch.chdir(ship)
    common = ["--zsc-dev-dir", str(data), "--dev-examples", str(ex), "--cache", str(tmp_path / "c")]
    assert selection_cli.main(common + ["--model-dir", "model", "--out", "model/calibration.json",
                                        "--data-sources", str(tmp_path / "ds.json")]) == 0
    assert (ship / "model" / "calibration.json").is_file() and (tmp_path / "ds.json").is_file()


def _two_kinds(tmp_path):
    """``mydev/`` with a ``news`` (topic) and a ``reviews`` (sentiment) set, its kinds file, and a team dev file."""
    from test_devsets_negation import write_zsc

    data = tmp_path / "mydev"
    data.mkdir()
    write_zsc(data, "news", n=8, classes=("sport", "business"), counts=[4, 4])
    write_zsc(data, "reviews", n=8, classes=("negative", "positive"), counts=[4, 4])
    kinds = {"benchmark": {"b1": {"kind": "topic"}, "b2": {"kind": "sentiment"}},
             "zsc_dev": {"news": "topic", "reviews": "sentiment"}}
    ex = tmp_path / "ex.jsonl"
    ex.write_text(json.dumps({"id": 1, "dataset": "d", "text": "t", "labels": ["a", "b"], "label": 0}) + "\n")
    return data, kinds, ex


def _no_kind(data, kinds):
    del kinds["zsc_dev"]["reviews"]


@pytest.mark.parametrize("mistake, needle", [
    (_no_kind, "no task kind for the zsc-dev set(s) reviews"),
    (lambda data, kinds: (data / "reviews.labels.json").unlink(), "reviews.jsonl has no reviews.labels.json"),
    (lambda data, kinds: (data / "news.jsonl").unlink(), "news.labels.json has no news.jsonl"),
    (lambda data, kinds: kinds["zsc_dev"].update(reviews="topic"), "every zsc-dev set is of kind 'topic'"),
    (lambda data, kinds: [(data / f"reviews{s}").unlink() for s in (".jsonl", ".labels.json")],
     "holds one set (news)"),
    (lambda data, kinds: kinds["benchmark"].update(b3={"labels": 3}), "benchmark dataset 'b3' needs a \"kind\""),
    (lambda data, kinds: kinds["zsc_dev"].update(news=["topic"]), "zsc_dev set 'news': its kind must be"),
    (lambda data, kinds: (data / "news.jsonl").write_text('{"text": "x", "label_index": 7}\n'), "news.jsonl:1"),
    # a labels file of any other shape (AttributeError at devsets.py:129), a string of classes (split in letters), a
    # boolean index, a directory or a link to nothing among the files, bytes that are not UTF-8 (no file named)
    (lambda data, kinds: (data / "news.labels.json").write_text("[1]"),
     "news.labels.json: must be a JSON object with classes and hypotheses, not a list"),
    (lambda data, kinds: (data / "news.labels.json").write_text('"str"'),
     "news.labels.json: must be a JSON object with classes and hypotheses, not a string"),
    (lambda data, kinds: (data / "news.labels.json").write_text('{"classes": "ab", "hypotheses": ["a", "b"]}'),
     "news.labels.json: classes must be a list of strings, not a string"),
    (lambda data, kinds: (data / "news.labels.json").write_text('{"classes": ["a", 2], "hypotheses": ["a", "b"]}'),
     "news.labels.json: classes[1] must be a non-blank string, not a number"),
    (lambda data, kinds: (data / "news.labels.json").write_text('{"classes": ["a", "b"], "hypotheses": {"a": 1}}'),
     "news.labels.json: hypotheses must be a list of strings, not an object"),
    (lambda data, kinds: (data / "news.labels.json").write_text(
        '{"classes": ["a", "b"], "hypotheses": ["a", "b"], "source": "me"}'), "news.labels.json: source must be"),
    (lambda data, kinds: (data / "news.jsonl").write_text('{"text": "x", "label_index": true}\n'),
     "news.jsonl:1: label_index must be an integer in [0, 2), not true"),
    (lambda data, kinds: (data / "news.jsonl").write_text('["x", 0]\n'), "news.jsonl:1: a row must be a JSON object"),
    (lambda data, kinds: ((data / "news.jsonl").unlink(), (data / "news.jsonl").mkdir()),
     "news.jsonl is a directory"),
    (lambda data, kinds: (data / "y.jsonl").symlink_to(data / "gone.jsonl"), "y.jsonl is a symbolic link to nothing"),
    (lambda data, kinds: (data / "news.jsonl").write_bytes(b'{"text": "caf\xe9", "label_index": 0}\n'),
     "news.jsonl: not UTF-8 text (byte 0xe9 on line 1 (byte 14 of the line))"),
    (lambda data, kinds: (data / "news.labels.json").write_bytes(b'{"classes": ["\xff"]}'),
     "news.labels.json: not UTF-8 text"),
])
def test_select_checks_the_zsc_dev_folder_and_kinds_before_any_scoring(tmp_path, tiny_model_dir, monkeypatch, capsys,
                                                                      mistake, needle):
    # The tester: a set missing from the kinds file, or one without its .labels.json, gave a traceback (exit 1)
    # after every set had been scored.
    data, kinds, ex = _two_kinds(tmp_path)
    mistake(data, kinds)
    (tmp_path / "kinds.json").write_text(json.dumps(kinds))

    def scored(*args, **kwargs):
        raise AssertionError("scored before the data was checked")

    monkeypatch.setattr(selection_cli, "fill_cache", scored)
    argv = ["--zsc-dev-dir", str(data), "--dev-examples", str(ex), "--cache", str(tmp_path / "c"),
            "--model-dir", str(tiny_model_dir), "--out", str(tmp_path / "cal.json"),
            "--data-sources", str(tmp_path / "ds.json"), "--kinds", str(tmp_path / "kinds.json")]
    assert selection_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "cal.json").exists()


def test_a_missing_default_zsc_dev_folder_points_to_the_docs(tmp_path, tiny_model_dir, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no ../shared/data/zsc-dev beside it
    assert selection_cli.main(["--model-dir", str(tiny_model_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--zsc-dev-dir ../shared/data/zsc-dev: no such directory" in err[0], err
    assert "docs/training.md, \"Choosing a scoring without the team's data\"" in err[0]
    from zsnli.training.cli_checks import CHECKOUT

    assert "**Choosing a scoring without the team's data.**" in (CHECKOUT / "docs" / "training.md").read_text()


@pytest.mark.parametrize("flag,wrong,needle", [
    ("--zsc-dev-dir", "file", "a file, not a directory; give a folder of <name>.jsonl + <name>.labels.json"),
    ("--zsc-dev-dir", "missing", "no such directory; give a folder of <name>.jsonl"),
    ("--dev-examples", "folder", "a directory, not a file; give the team's dev set"),
    ("--dev-examples", "missing", "no such file; give the team's dev set"),
    ("--cache", "file", "a file, not a directory; give a folder for the score cache"),
    ("--embedding-dir", "file", "a file, not a directory; give a sentence encoder directory"),
    ("--embedding-dir", "folder", "not a model directory (no config.json); give a sentence encoder directory"),
    ("--kinds", "folder", "a directory, not a file; give benchmark_kinds.json"),
    ("--kinds", "missing", "no such file; give benchmark_kinds.json"),
    ("--report-public", "folder", "a directory, not a file; give an examples file"),
    ("--report-public", "missing", "no such file; give an examples file"),
    ("--compare-with", "folder", "a directory, not a file; give the calibration.json another"),
])
def test_each_path_flag_of_select_names_a_file_a_folder_or_a_missing_path_as_such(tmp_path, tiny_model_dir, monkeypatch,
                                                                                 capsys, flag, wrong, needle):
    """`select --zsc-dev-dir FILE` said "not found" of a file that exists; each path flag says what it was given."""
    data, kinds, ex = _two_kinds(tmp_path)
    (tmp_path / "kinds.json").write_text(json.dumps(kinds))
    given = {"file": ex, "folder": data, "missing": tmp_path / "absent"}[wrong]

    def scored(*args, **kwargs):
        raise AssertionError("scored before the arguments were checked")

    monkeypatch.setattr(selection_cli, "fill_cache", scored)
    args = {"--zsc-dev-dir": str(data), "--dev-examples": str(ex), "--cache": str(tmp_path / "c"),
            "--model-dir": str(tiny_model_dir), "--out": str(tmp_path / "cal.json"),
            "--data-sources": str(tmp_path / "ds.json"), "--kinds": str(tmp_path / "kinds.json"), flag: str(given)}
    assert selection_cli.main([part for pair in args.items() for part in pair]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"train.py select: error: {flag} {given}: {needle}"), err
    assert not (tmp_path / "cal.json").exists() and not (tmp_path / "c").exists()


def _dangling(tmp_path):
    link = tmp_path / "gone.json"
    link.symlink_to(tmp_path / "nowhere" / "x.json")
    return link


@pytest.mark.parametrize("extra, needle", [
    (lambda t: ["--out", str(t)], "--out {t}: a directory, not a file"),
    (lambda t: ["--out", str(t / "nodir" / "cal.json")], f"--out {{t}}/nodir/cal.json: its folder {{t}}/nodir does not exist"),
    (lambda t: ["--out", str(t / "ex.jsonl" / "cal.json")], "its folder {t}/ex.jsonl is a file, not a directory"),
    (lambda t: ["--data-sources", str(t)], "--data-sources {t}: a directory, not a file"),
    (lambda t: ["--data-sources", str(_dangling(t))], "--data-sources {t}/gone.json: a symbolic link to nothing"),
    (lambda t: ["--max-rows-for", "newz=5"], "--max-rows-for newz=5: no set named 'newz' was read (sets: d, news, reviews)"),
    (lambda t: ["--max-rows-for", "=5"], "--max-rows-for expects NAME=ROWS with a set's NAME and ROWS >= 1, got '=5'"),
])
def test_select_refuses_unwritable_targets_and_unknown_row_overrides_before_any_scoring(tmp_path, tiny_model_dir,
                                                                                       monkeypatch, capsys, extra,
                                                                                       needle):
    """The tester: --out or --data-sources as a folder, in a missing folder or a link to nothing failed only after
    every set was scored (and --data-sources after calibration.json was written); a misspelled --max-rows-for name
    was ignored."""
    data, kinds, ex = _two_kinds(tmp_path)
    (tmp_path / "kinds.json").write_text(json.dumps(kinds))

    def scored(*args, **kwargs):
        raise AssertionError("scored before the arguments were checked")

    monkeypatch.setattr(selection_cli, "fill_cache", scored)
    argv = {"--zsc-dev-dir": str(data), "--dev-examples": str(ex), "--cache": str(tmp_path / "c"),
            "--model-dir": str(tiny_model_dir), "--out": str(tmp_path / "cal.json"),
            "--data-sources": str(tmp_path / "ds.json"), "--kinds": str(tmp_path / "kinds.json")}
    given = extra(tmp_path)
    argv.update(dict(zip(given[::2], given[1::2])))
    assert selection_cli.main([part for pair in argv.items() for part in pair]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle.format(t=tmp_path) in err[0], err
    assert not (tmp_path / "cal.json").exists() and not (tmp_path / "ds.json").exists()


def test_a_well_formed_zsc_dev_folder_and_kinds_file_reach_the_scoring(tmp_path, tiny_model_dir, monkeypatch):
    data, kinds, ex = _two_kinds(tmp_path)
    (tmp_path / "kinds.json").write_text(json.dumps(kinds))
    reached = []

    def scored(jobs, *args, **kwargs):
        reached.append(sorted(f"{group}/{ds.name}" for group, ds in jobs))
        raise KeyboardInterrupt  # stop here: the checks passed

    monkeypatch.setattr(selection_cli, "fill_cache", scored)
    code = selection_cli.main(["--zsc-dev-dir", str(data), "--dev-examples", str(ex), "--cache", str(tmp_path / "c"),
                               "--model-dir", str(tiny_model_dir), "--out", str(tmp_path / "cal.json"),
                               "--data-sources", str(tmp_path / "ds.json"), "--kinds", str(tmp_path / "kinds.json")])
    assert code == 130  # the stand-in Ctrl-C, as the guard of every main answers it
    assert reached == [["dev/d", "zsc-dev/news", "zsc-dev/reviews"]]


def test_a_default_target_of_another_model_names_the_manifest_found_not_a_flag(tmp_path, shipped_with_base,
                                                                              monkeypatch, capsys):
    """A model folder whose own training_manifest.json describes other files: select said "--out X belongs to another
    model ... write into X (the default)", naming a flag not given and the very folder it refused. It names where the
    manifest was found and what to do."""
    base = shipped_with_base / "model" / "base"
    (base / "config.json").write_text((base / "config.json").read_text() + " ")  # weights changed since its manifest
    data, ex = _zsc_and_examples(tmp_path)
    monkeypatch.chdir(shipped_with_base)
    argv = ["--zsc-dev-dir", str(data), "--dev-examples", str(ex), "--cache", str(tmp_path / "c"),
            "--model-dir", "model/base"]
    assert selection_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"train.py select: error: --model-dir model/base: the training_manifest.json found in it "
        f"({base.resolve() / 'training_manifest.json'}) describes model "), err
    assert "belongs to another model" not in err[0] and "(the default)" not in err[0], err
    assert "train.py verify --model-dir model/base" in err[0] and "give --out and --data-sources" in err[0], err
