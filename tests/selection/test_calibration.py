"""zsnli.selection.calibration: the temperature fit, choice tasks, and a whole calibration of the tiny trained model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from zsnli.selection import calibration
from zsnli.manifest import load_manifest
from zsnli.training.presets import get_preset

ROOT = Path(__file__).resolve().parents[2]
LABELS = ("entailment", "neutral", "contradiction")


def _synthetic_tasks(true_t0: float, true_b: float, n: int, seed: int):
    rng = np.random.default_rng(seed)
    score_lists, gold = [], []
    for _ in range(n):
        k = int(rng.choice(calibration.K_CHOICES))
        s = rng.normal(0, 3, size=k)
        z = s / (true_t0 * k ** true_b)
        p = np.exp(z - z.max())
        p /= p.sum()
        score_lists.append(s)
        gold.append(int(rng.choice(k, p=p)))
    return calibration.pack_tasks(score_lists, gold)


def test_temperature_fit_recovers_known_t():
    t0, b = calibration.fit_tasks(_synthetic_tasks(2.5, 0.0, 6000, seed=0), "global")
    assert b == 0.0
    assert abs(t0 - 2.5) / 2.5 < 0.08


def test_k_dependent_temperature_fit_recovers_known_form():
    t0, b = calibration.fit_tasks(_synthetic_tasks(0.8, 0.5, 8000, seed=1), "t0*K^b")
    assert abs(b - 0.5) < 0.12
    assert abs(t0 - 0.8) / 0.8 < 0.25


def test_choice_figures_match_a_direct_computation():
    """NLL and accuracy of `choice_figures` equal a plain per-task softmax at T(K) = t0 * K ** b."""
    p = _synthetic_tasks(1.5, 0.0, 300, seed=2)
    t0, b = 1.3, 0.2
    nll, hits = [], []
    for i in range(len(p.gold)):
        kk = int(p.k[i])
        z = p.scores[i, :kk] / (t0 * kk ** b)
        logp = z - z.max() - np.log(np.exp(z - z.max()).sum())
        nll.append(-logp[p.gold[i]])
        hits.append(int(np.argmax(z) == p.gold[i]))
    figs = calibration.choice_figures(p, t0, b)
    assert figs["nll"] == pytest.approx(np.mean(nll), abs=1e-5)
    assert figs["accuracy"] == pytest.approx(np.mean(hits), abs=1e-5)


def test_choice_tasks_have_exactly_one_entailed_hypothesis():
    rows = []
    for p in range(40):
        for j, label in enumerate(LABELS):
            rows.append({"premise": f"premise {p}", "hypothesis": f"hyp {p}-{j}", "label": label})
    tasks = calibration.build_choice_tasks(rows, 30, seed=0)
    assert len(tasks) == 30
    entailed = {(r["premise"], r["hypothesis"]) for r in rows if r["label"] == "entailment"}
    for task in tasks:
        assert 2 <= len(task.hypotheses) <= max(calibration.K_CHOICES)
        assert len(set(task.hypotheses)) == len(task.hypotheses)
        hits = [i for i, h in enumerate(task.hypotheses) if (task.premise, h) in entailed]
        assert hits == [task.gold]


def test_split_tasks_halves_are_disjoint_seeded_and_cover_all():
    fit, sel = calibration.split_tasks(11, seed=43)
    assert sorted([*fit, *sel]) == list(range(11)) and len(fit) == 5
    again = calibration.split_tasks(11, seed=43)
    assert (again[0] == fit).all() and (again[1] == sel).all()
    assert not (calibration.split_tasks(11, seed=44)[0] == fit).all()


def test_tiny_calibration_writes_candidates(tiny_run):
    out = tiny_run["out"]
    preset = get_preset("tiny", str(tiny_run["data"]), str(tiny_run["base"]))
    dev = out.parent / "dev.jsonl"
    dev.write_text("".join((ROOT / "dev" / "smoke.jsonl").read_text().splitlines(True)[::4]))  # all 4 datasets
    doc = calibration.calibrate(preset, out / "model", out, n_tasks=50, dev_examples=dev,
                                embedding_dir=tiny_run["base"])
    written = json.loads((out / "calibration.json").read_text())
    assert written["chosen"] == doc["chosen"]
    assert (out / "calibration.json").stat().st_mode & 0o777 == 0o644
    assert len(written["candidates"]) == 2 * len(calibration.search.candidates(calibration.EMBEDDING_WEIGHTS))
    for cand in written["candidates"]:
        assert math.isfinite(cand["nli_select_after"]["nll"])
        assert cand["config"]["temperature"] > 0
        assert 0 <= cand["dev"]["mean"]["calibrated_macro_f1"] <= 1
        assert (cand["config"]["embedding_sha256"] is not None) == (cand["config"]["embedding_weight"] != 0)
    assert "team dev set" in written["decided_by"]
    assert written["method"]["dev_documents"] == 11
    declared = {s["name"]: s for s in json.loads((out / "data_sources.json").read_text())["sources"]}
    assert declared["team-zero-shot-dev"]["rows"] == 11 and declared["tiny:train"]["role"] == "train"
    dev_fitted = [c for c in written["candidates"] if c["temperature_fitted_on"].startswith("team dev set")]
    assert len(dev_fitted) == len(written["candidates"]) // 2
    assert all(len(c["dev"]["datasets"]) == 4 for c in dev_fitted)
    manifest = load_manifest(out / "training_manifest.json")
    assert written["method"]["n_tasks"] == manifest["data"]["counts"]["holdout_premises"] >= 3
    assert written["model_sha256"] == manifest["model_sha256"]


def test_calibration_refuses_public_examples(tiny_run, tmp_path):
    out = tiny_run["out"]
    preset = get_preset("tiny", str(tiny_run["data"]), str(tiny_run["base"]))
    fake = tmp_path / "zsc" / "public.jsonl"
    fake.parent.mkdir()
    fake.write_text(json.dumps({"id": 1, "dataset": "d", "text": "t", "labels": ["a", "b"], "label": 0}) + "\n")
    with pytest.raises(ValueError, match="reporting only"):
        calibration.calibrate(preset, out / "model", out, out=tmp_path / "c.json", dev_examples=fake, n_tasks=10)


def test_calibration_refuses_another_holdout(tiny_run, tmp_path):
    """Calibrating on rows other than the recorded hold-out (here: another seed) could leak training data."""
    preset = get_preset("tiny", str(tiny_run["data"]), str(tiny_run["base"])).with_overrides(seed=7)
    with pytest.raises(calibration.HoldoutMismatch):
        calibration.calibrate(preset, tiny_run["out"] / "model", tiny_run["out"], out=tmp_path / "c.json", n_tasks=10)
    assert not (tmp_path / "c.json").exists()


def _ship_with_base(tiny_run, tmp_path, bert_dir):
    """``ship/model`` (a small model, its manifest beside it, ``embedding/``) holding ``base/``: the tiny run's model
    with its own manifest and data sources. Returns ``(ship, base, argv of train.py calibrate --model-dir base)``."""
    import shutil

    from zsnli.manifest import hash_model_dir, model_dir_digest, write_json

    ship, base = tmp_path / "ship", tmp_path / "ship" / "model" / "base"
    shutil.copytree(bert_dir, ship / "model")
    shutil.copytree(tiny_run["base"], ship / "model" / "embedding")
    files = hash_model_dir(ship / "model")
    write_json(ship / "training_manifest.json", {"files": files, "model_sha256": model_dir_digest(files)})
    shutil.copytree(tiny_run["out"] / "model", base)
    for name in ("training_manifest.json", "data_sources.json"):
        shutil.copyfile(tiny_run["out"] / name, base / name)
    argv = ["calibrate", "--preset", "tiny", "--data-dir", str(tiny_run["data"]), "--base-model",
            str(tiny_run["base"]), "--model-dir", str(base), "--no-dev-examples", "--tasks", "10"]
    return ship, base, argv


def test_calibrate_on_a_variant_folder_writes_into_it_and_records_its_model(tiny_run, tmp_path, bert_dir, capsys):
    """``train.py calibrate --model-dir model/base``: the base's own manifest (inside it, as verify finds it) and its
    own calibration.json with its model_sha256; the small model's calibration.json beside model/ is refused."""
    from zsnli.manifest import hash_model_dir, model_dir_digest
    from zsnli.train_cli import main

    ship, base, argv = _ship_with_base(tiny_run, tmp_path, bert_dir)
    capsys.readouterr()
    assert main(argv + ["--out", str(ship / "calibration.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {ship / 'calibration.json'} belongs to another model" in err[0], err
    assert main(argv) == 0
    doc = json.loads((base / "calibration.json").read_text())
    assert doc["model_sha256"] == model_dir_digest(hash_model_dir(base))
    assert not (ship / "calibration.json").exists() and not (ship / "data_sources.json").exists()


def test_calibrate_and_evaluate_take_the_preset_and_base_from_the_models_own_manifest(tiny_run, tmp_path, bert_dir,
                                                                                      capsys):
    """``train.py calibrate --model-dir model/base`` took the minilm-cpu default, not the preset in
    model/base/training_manifest.json, and needed --preset and --base-model by hand; it reads them from the manifest
    train.py select finds for the folder (`zsnli.selection.targets.model_home`), unless given."""
    from zsnli.selection.targets import calibrate_defaults
    from zsnli.train_cli import build_parser, main
    from zsnli.training.cli_checks import check_args
    from zsnli.training.usage import UsageError
    from zsnli.manifest import hash_model_dir, model_dir_digest, write_json

    ship, base, _ = _ship_with_base(tiny_run, tmp_path, bert_dir)
    given = ["--model-dir", str(base), "--data-dir", str(tiny_run["data"])]
    for command in ("calibrate", "evaluate"):
        args = calibrate_defaults(build_parser().parse_args([command, *given]))
        preset = check_args(args)
        assert (preset.name, args.base_model) == ("tiny", str(tiny_run["base"])), command
    args = calibrate_defaults(build_parser().parse_args(["evaluate", *given, "--preset", "minilm-cpu"]))
    assert args.preset == "minilm-cpu" and args.base_model is None  # evaluate: other splits, what is given wins
    with pytest.raises(UsageError, match="^--preset minilm-cpu: the model was trained with preset 'tiny'"):
        calibrate_defaults(build_parser().parse_args(["calibrate", *given, "--preset", "minilm-cpu"]))  # its hold-out
    assert calibrate_defaults(build_parser().parse_args(["calibrate", *given, "--preset", "tiny"])).preset == "tiny"
    capsys.readouterr()
    assert main(["calibrate", *given, "--no-dev-examples", "--tasks", "10"]) == 0
    assert json.loads((base / "calibration.json").read_text())["model_sha256"] == model_dir_digest(hash_model_dir(base))
    manifest = json.loads((base / "training_manifest.json").read_text())
    write_json(base / "training_manifest.json", {**manifest, "preset": "gpt-9"})
    capsys.readouterr()
    assert main(["calibrate", *given, "--no-dev-examples"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "records preset 'gpt-9'" in err[0] and "give --preset" in err[0], err


def test_embeddings_with_progress_equal_one_encode_call(bert_dir):
    """`zsnli.runtime.progress.encode_texts` (what the pair cache embeds with) reports each batch of
    `SentenceEncoder.encode` and returns its vectors, bit for bit."""
    from zsnli.runtime.embedding import SentenceEncoder
    from zsnli.runtime.progress import encode_texts

    encoder = SentenceEncoder(bert_dir)
    texts = [f"text {i} about " + "the sport news " * (i % 7) for i in range(150)]  # many equal lengths
    seen: list[int] = []
    assert np.array_equal(encoder.encode(texts, on_batch=seen.append), encoder.encode(texts))
    assert seen == [64, 64, 22]
    assert np.array_equal(encode_texts(encoder, texts, "texts"), encoder.encode(texts))


@pytest.mark.parametrize("rule, content_free, w", [("entailment", False, 0.0), ("entailment_minus_contradiction", True, 0.0),
                                                   ("entailment_logprob", True, 5.0)])
def test_pair_cache_scores_equal_the_served_formula(bert_dir, rule, content_free, w):
    """Calibration scores its tasks and dev rows through the one pair cache (`score_cache.score_in_memory`):
    each row's scores are `zsnli.scoring.combined_scores` of the model's own logits and cosines."""
    from zsnli.runtime.embedding import SentenceEncoder
    from zsnli.runtime.model import NliModel
    from zsnli.scoring import combined_scores, scores_from_logits
    from zsnli.selection.search import Candidate

    nli, encoder = NliModel.load(bert_dir), SentenceEncoder(bert_dir)
    tasks = [calibration.ChoiceTask("A man plays football.", ("A person plays.", "Nobody moves.", "A cat sleeps."), 0),
             calibration.ChoiceTask("The market fell.", ("Stocks dropped.", "Prices rose."), 0)]
    dev = [{"dataset": "d", "text": "The striker scored.", "labels": ["about sport", "about money"], "label": 0}]
    scores = calibration.score_pairs(nli, encoder, tasks, dev)
    cand = Candidate(rule=rule, content_free=content_free, embedding_weight=w, temperature_form="global")
    got = calibration.PairScores.row_scores(scores.tasks, cand) + calibration.PairScores.row_scores(scores.dev, cand)
    for (premise, hyps), row in zip([(t.premise, t.hypotheses) for t in tasks] + [(d["text"], d["labels"]) for d in dev],
                                    got):
        def rule_scores(p):
            return scores_from_logits(nli.predict_logits([p] * len(hyps), list(hyps)), rule, nli.entail_idx,
                                      nli.contra_idx)

        doc, hyp_emb = encoder.encode([premise])[0], encoder.encode(list(hyps))
        want = combined_scores(rule_scores(premise), rule_scores(calibration.CONTENT_FREE_PREMISE) if content_free
                               else None, hyp_emb @ doc, w)
        np.testing.assert_allclose(row, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("where", ["model/calibration.json", "model/embedding/calibration.json"])
def test_calibrate_refuses_a_path_another_models_server_would_read(tiny_run, tmp_path, bert_dir, capsys, where):
    # The tester: calibrate --model-dir model/base --out model/calibration.json exited 0 (no manifest inside model/),
    # and the small model's server then read the base's calibration first and served uncalibrated.
    from zsnli.train_cli import main

    ship, base, argv = _ship_with_base(tiny_run, tmp_path, bert_dir)
    capsys.readouterr()
    assert main(argv + ["--out", str(ship / where)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {ship / where} belongs to another model" in err[0], err
    assert not (ship / where).exists()


def test_a_variant_folder_whose_manifest_describes_other_files_is_named_as_found(tiny_run, tmp_path, bert_dir,
                                                                                 capsys):
    """calibrate on a model folder holding a training_manifest.json of other weights, no --manifest-dir given, said
    "--manifest-dir X belongs to another model ... write into X (the default)". It names the manifest found in the
    folder and what to do; with --manifest-dir given, that flag is named."""
    from zsnli.train_cli import main

    ship, base, argv = _ship_with_base(tiny_run, tmp_path, bert_dir)
    (base / "config.json").write_text((base / "config.json").read_text() + " ")  # its files changed since
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"train.py calibrate: error: --model-dir {base}: the training_manifest.json found in it "
        f"({base.resolve() / 'training_manifest.json'}) describes model "), err
    assert "belongs to another model" not in err[0] and "(the default)" not in err[0], err
    assert "give --manifest-dir DIR holding this model's own training_manifest.json" in err[0], err
    assert main(argv + ["--manifest-dir", str(base)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--manifest-dir {base} belongs to another model" in err[0], err
    assert "(the default)" not in err[0], err  # the default is that same folder
