"""Training, data pipeline, calibration and manifests (issue 3), on tiny fixtures only."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import build_bert_nli
from zsnli import calibration, nli_data
from zsnli.manifest import ManifestError, check_model_dir, load_manifest, verify_model_dir
from zsnli.nli_data import DataError, Source, dedupe, hold_out_by_premise, normalise_label
from zsnli.presets import get_preset

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("entailment", "neutral", "contradiction")


# ----------------------------------------------------------------------------- data


@pytest.mark.parametrize(
    "raw, expected",
    [(0, "entailment"), (1, "neutral"), (2, "contradiction"), (-1, None), ("-", None), ("", None),
     ("Entailment", "entailment"), ("CONTRADICTION", "contradiction"), ("neutral", "neutral"), ("2", "contradiction")],
)
def test_label_mapping(raw, expected):
    assert normalise_label(raw) == expected


@pytest.mark.parametrize("raw", [3, "maybe", None, True, 1.5])
def test_label_mapping_rejects_unknown(raw):
    with pytest.raises(DataError):
        normalise_label(raw)


def test_hub_rows_drop_no_gold_label(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [{"premise": "p", "hypothesis": "h1", "label": 0}, {"premise": "p", "hypothesis": "h2", "label": -1},
            {"premise": "p", "hypothesis": "h3", "label": 2}, {"premise": " ", "hypothesis": "h4", "label": 1}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept, counts = nli_data.load_source(Source(name="x", kind="local", role="train", path=str(path)))
    assert [r["label"] for r in kept] == ["entailment", "contradiction"]
    assert counts == {"read": 4, "dropped_no_gold_label": 1, "dropped_empty_text": 1, "kept": 2}


def test_dedupe_keeps_first_occurrence():
    rows = [{"premise": "a", "hypothesis": "b", "label": "neutral"},
            {"premise": "a", "hypothesis": "b", "label": "entailment"},
            {"premise": "a", "hypothesis": "c", "label": "neutral"}]
    kept, removed = dedupe(rows)
    assert removed == 1
    assert kept == [rows[0], rows[2]]


def test_holdout_is_disjoint_by_premise():
    rng = random.Random(0)
    rows = [{"premise": f"p{rng.randrange(50)}", "hypothesis": f"h{i}", "label": LABELS[i % 3]} for i in range(400)]
    train, held = hold_out_by_premise(rows, 60, seed=3)
    assert len(held) >= 60
    assert len(train) + len(held) == len(rows)
    assert not {r["premise"] for r in train} & {r["premise"] for r in held}
    again_train, again_held = hold_out_by_premise(rows, 60, seed=3)
    assert again_held == held and again_train == train
    with pytest.raises(DataError):
        hold_out_by_premise(rows, 401, seed=0)


# ----------------------------------------------------------------------------- calibration maths


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
    scores, mask, k = calibration._pack(score_lists)
    return scores, mask, k, np.array(gold)


def test_temperature_fit_recovers_known_t():
    scores, mask, k, gold = _synthetic_tasks(2.5, 0.0, 6000, seed=0)
    t0, b = calibration.fit_temperature(scores, mask, k, gold, k_dependent=False)
    assert b == 0.0
    assert abs(t0 - 2.5) / 2.5 < 0.08


def test_k_dependent_temperature_fit_recovers_known_form():
    scores, mask, k, gold = _synthetic_tasks(0.8, 0.5, 8000, seed=1)
    t0, b = calibration.fit_temperature(scores, mask, k, gold, k_dependent=True)
    assert abs(b - 0.5) < 0.12
    assert abs(t0 - 0.8) / 0.8 < 0.25


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


# ----------------------------------------------------------------------------- tiny preset end to end


def _write_rows(path: Path, n_premises: int, offset: int) -> None:
    words = ["cat", "dog", "bird", "horse", "child", "woman", "man", "car", "boat", "tree"]
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(n_premises):
            a, b = words[(i + offset) % 10], words[(3 * i + offset + 1) % 10]
            premise = f"a {a} sees the {b} number {i + offset}"
            for label, hyp in zip(LABELS, [f"a {a} sees", f"the {b} is happy", f"nobody sees the {b}"]):
                handle.write(json.dumps({"premise": premise, "hypothesis": hyp, "label": label}) + "\n")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_run")
    base = build_bert_nli(root / "base", id2label={0: "neutral", 1: "contradiction", 2: "entailment"})
    data = root / "data"
    data.mkdir()
    _write_rows(data / "train.jsonl", 30, 0)
    _write_rows(data / "validation.jsonl", 4, 100)
    out = root / "out"
    cmd = [sys.executable, str(ROOT / "train.py"), "--preset", "tiny", "--data-dir", str(data),
           "--base-model", str(base), "--model-dir", str(out / "model"), "--output-dir", str(root / "run")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"root": root, "base": base, "data": data, "out": out}


def test_tiny_training_writes_model_and_manifests(tiny_run):
    out = tiny_run["out"]
    manifest = load_manifest(out / "training_manifest.json")
    assert {"config.json", "model.safetensors"} <= set(manifest["files"])
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["id2label"] == {"0": "entailment", "1": "neutral", "2": "contradiction"}
    assert manifest["training"]["steps"] == 4
    assert manifest["hyperparameters"]["seed"] == 42
    counts = manifest["data"]["counts"]
    assert counts["holdout_rows"] >= 8
    assert counts["train_rows"] + counts["holdout_rows"] == 90 - counts["duplicates_removed"]
    assert manifest["base_model"]["weights_sha256"]
    sources = json.loads((out / "data_sources.json").read_text())
    roles = {s["name"]: s["role"] for s in sources["sources"]}
    assert roles["tiny:train"] == "train" and roles["tiny:validation"] == "validation"
    assert roles["calibration-holdout"] == "calibration hold-out"
    assert verify_model_dir(out / "model", out / "training_manifest.json") == manifest["model_sha256"]


def test_tiny_calibration_writes_candidates(tiny_run):
    out = tiny_run["out"]
    preset = get_preset("tiny", str(tiny_run["data"]), str(tiny_run["base"]))
    dev = out.parent / "dev.jsonl"
    dev.write_text("".join((ROOT / "dev" / "smoke.jsonl").read_text().splitlines(True)[::4]))  # all 4 datasets
    doc = calibration.calibrate(preset, out / "model", out, n_tasks=50, dev_examples=dev,
                                embedding_dir=tiny_run["base"])
    written = json.loads((out / "calibration.json").read_text())
    assert written["chosen"] == doc["chosen"]
    assert len(written["candidates"]) == 2 * len(calibration.candidate_configs(calibration.EMBEDDING_WEIGHTS))
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


def test_verify_fails_on_a_flipped_byte(tiny_run, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(tiny_run["out"], out)
    cmd = [sys.executable, str(ROOT / "train.py"), "verify", "--model-dir", str(out / "model")]
    ok = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    weights = out / "model" / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    weights.write_bytes(bytes(blob))
    bad = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1
    assert "MISMATCH  model.safetensors" in bad.stdout
    statuses = {c.name: c.status for c in check_model_dir(out / "model", load_manifest(out / "training_manifest.json"))}
    assert statuses["model.safetensors"] == "mismatch" and statuses["config.json"] == "ok"
    with pytest.raises(ManifestError):
        verify_model_dir(out / "model", out / "training_manifest.json")


def test_trained_tiny_model_loads_in_scoring(tiny_run):
    from zsnli.model import NliModel

    nli = NliModel.load(tiny_run["out"] / "model")
    assert (nli.entail_idx, nli.contra_idx) == (0, 2)
    logits = nli.predict_logits(["a cat sees the dog"], ["a cat sees"])
    assert logits.shape == (1, 3) and np.isfinite(logits).all()


def test_deberta_dry_run_plan():
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "--preset", "deberta-v3-base", "--dry-run"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads(proc.stdout)
    assert plan["base_model"] == {"id": "microsoft/deberta-v3-base",
                                  "revision": "8ccc9b6f36199bec6961081d44eb72fb3f7353f3"}
    train = {s["hub_id"]: s for s in plan["sources"] if s["role"] == "train"}
    assert train["stanfordnlp/snli"]["revision"] == "cdb5c3d5eed6ead6e5a341c8e56e669bb666725b"
    assert train["nyu-mll/multi_nli"]["revision"] == "da70db2af9d09693783c3320c4249840212ee221"
    assert train["facebook/anli"]["splits"] == ["train_r1", "train_r2", "train_r3"]
    hp = plan["hyperparameters"]
    assert (hp["epochs"], hp["batch_size"], hp["max_length"], hp["lr"]) == (2.0, 32, 256, 2e-5)
    assert plan["manifest_skeleton"]["files"] is None


def test_evaluation_keeps_dataset_order_with_length_grouped_training(tmp_path):
    """Per-split accuracy needs predictions in dataset order; stock Trainer length-groups eval too."""
    import datasets
    from torch.utils.data import SequentialSampler
    from transformers import Trainer, TrainingArguments

    from zsnli.training import _sequential_eval_trainer_class

    ds = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in (3, 9, 1, 7, 2, 8)] * 10,
                                     "length": [3, 9, 1, 7, 2, 8] * 10, "labels": [0] * 60})
    args = TrainingArguments(output_dir=str(tmp_path), train_sampling_strategy="group_by_length",
                             per_device_eval_batch_size=4, report_to="none", use_cpu=True)
    model = build_bert_nli(tmp_path / "m")
    from transformers import AutoModelForSequenceClassification

    m = AutoModelForSequenceClassification.from_pretrained(model)
    stock = Trainer(model=m, args=args)._get_eval_sampler(ds)
    assert list(iter(stock)) != list(range(60))  # the behaviour this guards against
    ours = _sequential_eval_trainer_class()(model=m, args=args)._get_eval_sampler(ds)
    assert isinstance(ours, SequentialSampler) and list(iter(ours)) == list(range(60))


def test_evaluate_records_full_split_accuracy_in_manifest(tiny_run, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(tiny_run["out"], out)
    cmd = [sys.executable, str(ROOT / "train.py"), "evaluate", "--preset", "tiny", "--data-dir", str(tiny_run["data"]),
           "--base-model", str(tiny_run["base"]), "--model-dir", str(out / "model"), "--update-manifest"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = load_manifest(out / "training_manifest.json")
    ev = manifest["evaluation"]["validation"]["tiny:validation"]
    assert ev["n"] == 12 and 0 <= ev["accuracy"] <= 1
    from zsnli.model import NliModel

    nli = NliModel.load(out / "model")
    rows = [json.loads(line) for line in (tiny_run["data"] / "validation.jsonl").read_text().splitlines()]
    logits = nli.predict_logits([r["premise"] for r in rows], [r["hypothesis"] for r in rows])
    names = [nli.model.config.id2label[int(i)] for i in logits.argmax(-1)]
    assert ev["accuracy"] == round(float(np.mean([n == r["label"] for n, r in zip(names, rows)])), 4)
    assert verify_model_dir(out / "model", out / "training_manifest.json") == manifest["model_sha256"]


@pytest.mark.parametrize("reset", [False, True])
def test_reset_best_on_resume_ignores_a_stale_best_metric(tiny_run, tmp_path, reset):
    """A resumed state whose best metric came from an older evaluation (here an unbeatable 99)
    keeps choosing that old checkpoint unless --reset-best is given."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_run["root"] / "run", run)
    last = max(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    state = json.loads((last / "trainer_state.json").read_text())
    state["best_metric"], state["best_model_checkpoint"] = 99.0, str(last)
    state["best_global_step"] = int(last.name.split("-")[-1])
    (last / "trainer_state.json").write_text(json.dumps(state))
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "train.py"), "--preset", "tiny", "--data-dir", str(tiny_run["data"]),
           "--base-model", str(tiny_run["base"]), "--model-dir", str(out / "model"), "--output-dir", str(run),
           "--max-steps", "8", *(["--reset-best"] if reset else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    training = load_manifest(out / "training_manifest.json")["training"]
    assert training["resumed_from_checkpoint"] == last.name and training["steps"] == 8
    assert training["best_reset_on_resume"] is reset
    if reset:
        assert training["best_checkpoint"] != last.name and training["best_metric"] < 99
    else:
        assert training["best_checkpoint"] == last.name and training["best_metric"] == 99.0
