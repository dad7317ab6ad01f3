"""``train.py encoder --loss margin-mse`` (issue 51 item 3): the sentence encoder trained on a teacher NLI
cross-encoder's margins (Margin-MSE, Hofstätter et al. 2020). The loss against a hand-computed value, zero for a
student whose margins are the teacher's, its gradient, the teacher score's invariance to a per-row constant, the
teacher's scores placed on the batch's candidates, a whole CLI run with its manifest's teacher entry, and the
one-line refusals."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import ENCODER_LABELS, build_bert_nli
from zsnli.manifest import sha256_file
from zsnli.runtime.embedding import SentenceEncoder
from zsnli.training import encoder as enc
from zsnli.training.distill import teacher_pair_scores
from zsnli.training.encoder_data import (EncoderCollator, batch_candidates, build_encoder_data, own_set_pairs,
                                         own_set_scores, teacher_matrix)
from zsnli.training.zsc_nli import zsc_sources

ROOT = Path(__file__).resolve().parents[2]
ZSC = ROOT / "tests" / "data" / "tiny_zsc"
DEV = str(ROOT / "dev" / "zeroshot_dev.jsonl")
REVERSED = {0: "contradiction", 1: "neutral", 2: "entailment"}
NAN = float("nan")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("margin")
    description = root / "teacher_plan.json"
    description.write_text(json.dumps({"base_model": {"id": "org/teacher-base"}, "sources": [{"name": "tiny:train"}],
                                       "hyperparameters": {"zsc_exclude": [DEV]}}))
    return {"base": build_bert_nli(root / "base", id2label=ENCODER_LABELS, dropout=0.0),
            "teacher": build_bert_nli(root / "teacher", id2label=REVERSED, seed=3),
            "other": build_bert_nli(root / "other", seed=5), "description": description}


# --------------------------------------------------------------------------- the loss


def test_margin_mse_matches_a_hand_computed_value():
    text = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    cands = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    teacher = torch.tensor([[2.0, -1.0, 0.5], [NAN, 1.0, -2.0]])  # row 1 has no score for candidate 0
    targets = torch.tensor([0, 1])
    # scale 2. Row 0 (h+ = 0): cos 1, 0, 0.6 -> student margins 2, 0.8; teacher margins 3, 1.5: errors 1, 0.49.
    # Row 1 (h+ = 1): candidate 0 unscored; candidate 2: student 2 x (1 - 0.8) = 0.4, teacher 3: error 6.76.
    got = enc.margin_mse_loss(text, cands, targets, teacher, scale=2.0)
    assert got.dtype == torch.float32 and got.item() == pytest.approx((1.0 + 0.49 + 6.76) / 3, abs=1e-5)
    allowed = torch.tensor([[True, True, False], [True, True, True]])  # row 0's candidate 2 left out
    masked = enc.margin_mse_loss(text, cands, targets, teacher, scale=2.0, allowed=allowed)
    assert masked.item() == pytest.approx((1.0 + 6.76) / 2, abs=1e-5)
    half = enc.margin_mse_loss(text.half(), cands.half(), targets, teacher.half(), scale=2.0)
    assert half.dtype == torch.float32  # computed in fp32 whatever the embeddings' dtype


def test_zero_when_the_students_margins_are_the_teachers_and_positive_otherwise():
    gen = torch.Generator().manual_seed(0)
    text = torch.nn.functional.normalize(torch.randn(4, 8, generator=gen), dim=-1)
    cands = torch.nn.functional.normalize(torch.randn(6, 8, generator=gen), dim=-1)
    targets = torch.tensor([0, 3, 5, 3])
    offset = torch.randn(4, 1, generator=gen) * 7  # a per-text offset the margins never see
    teacher = enc.DEFAULT_SCALE * text @ cands.T + offset
    assert enc.margin_mse_loss(text, cands, targets, teacher).item() == pytest.approx(0.0, abs=1e-8)
    assert enc.margin_mse_loss(text, cands, targets, teacher + 0.1 * torch.randn(4, 6, generator=gen)).item() > 1e-4


def test_the_gradient_reaches_both_embeddings_and_a_batch_without_negatives_gives_zero():
    gen = torch.Generator().manual_seed(1)
    raw_text, raw_cands = torch.randn(3, 8, generator=gen, requires_grad=True), torch.randn(5, 8, generator=gen,
                                                                                          requires_grad=True)
    text, cands = (torch.nn.functional.normalize(x, dim=-1) for x in (raw_text, raw_cands))
    teacher = torch.randn(3, 5, generator=gen)
    enc.margin_mse_loss(text, cands, torch.tensor([0, 1, 2]), teacher).backward()
    for grad in (raw_text.grad, raw_cands.grad):
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    lone = torch.randn(1, 8, requires_grad=True)
    only_own = torch.tensor([[1.5, NAN, NAN]])  # the teacher scored only the target: no (x, h-) pair
    zero = enc.margin_mse_loss(lone, torch.randn(3, 8), torch.tensor([0]), only_own)
    zero.backward()
    assert zero.item() == 0.0 and torch.equal(lone.grad, torch.zeros(1, 8))


def test_the_teacher_score_is_the_logit_difference_and_ignores_a_per_row_constant():
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(6, 3, generator=gen) * 4  # ID2LABEL order: entailment, neutral, contradiction
    logp = torch.log_softmax(logits, dim=-1)
    t = teacher_pair_scores(logp)
    assert torch.allclose(t, logits[:, 0] - logits[:, 2], atol=1e-5)
    shifted = logp + torch.randn(6, 1, generator=gen) * 10
    assert torch.allclose(teacher_pair_scores(shifted), t, atol=1e-5)
    assert np.allclose(teacher_pair_scores(logp.numpy()), t.numpy())  # the cache's numpy rows too
    text = torch.nn.functional.normalize(torch.randn(6, 4, generator=gen), dim=-1)
    cands = torch.nn.functional.normalize(torch.randn(3, 4, generator=gen), dim=-1)
    targets = torch.tensor([0, 1, 2, 0, 1, 2])
    scores = torch.log_softmax(torch.randn(6, 3, 3, generator=gen), dim=-1)  # 3-way rows per (text, candidate)
    a = enc.margin_mse_loss(text, cands, targets, teacher_pair_scores(scores))
    b = enc.margin_mse_loss(text, cands, targets, teacher_pair_scores(scores + torch.randn(6, 3, 1, generator=gen)))
    assert a.item() == pytest.approx(b.item(), rel=1e-5)


# --------------------------------------------------------------------------- the teacher's pairs in the batches


def test_the_teacher_scores_each_text_with_its_own_sets_hypotheses_and_the_batch_gets_them_in_place(models):
    from transformers import AutoTokenizer

    data = build_encoder_data(zsc_sources(ZSC))
    pairs = own_set_pairs(data)
    want = {(t, data.hypotheses[h]) for t, s in zip(data.texts, data.set_ids) for h in data.set_hypotheses[s]}
    assert set(pairs) == want and len(pairs) == len(want)  # every own-set pair once, raw strings as trained
    scores = np.arange(len(pairs), dtype=np.float32) * 0.5
    own = own_set_scores(data, pairs, scores)
    rows = [0, len(data.texts) - 1, 1]  # texts of both sets in one batch
    hyp, sets = [data.hyp_ids[i] for i in rows], [data.set_ids[i] for i in rows]
    candidates, _, _ = batch_candidates(hyp, sets, data.set_hypotheses)
    matrix = teacher_matrix([own[i] for i in rows], sets, candidates, data.set_hypotheses)
    for r, i in enumerate(rows):
        for c, h in enumerate(candidates):
            pair = (data.texts[i], data.hypotheses[h])
            if h in data.set_hypotheses[data.set_ids[i]]:
                assert matrix[r][c] == scores[pairs.index(pair)]
            else:
                assert math.isnan(matrix[r][c])
    tok = AutoTokenizer.from_pretrained(models["base"])
    hyp_tokens = [dict(tok(h)) for h in data.hypotheses]
    features = [{**tok(data.texts[i]), "hyp": data.hyp_ids[i], "set": data.set_ids[i], "teacher": own[i]}
                for i in rows]
    batch = EncoderCollator(tok, hyp_tokens, data.set_hypotheses)(features)
    assert batch["teacher_scores"].shape == (3, len(candidates))
    assert torch.equal(batch["teacher_scores"].isnan(), torch.tensor(matrix).isnan())
    assert "teacher_scores" not in EncoderCollator(tok, hyp_tokens, data.set_hypotheses)(
        [{k: v for k, v in f.items() if k != "teacher"} for f in features])


# --------------------------------------------------------------------------- the command line


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


def _encoder_args(models, out: Path, cache: Path, teacher: str = "teacher") -> list[str]:
    return ["encoder", "--zsc-dir", str(ZSC), "--zsc-exclude", DEV, "--base-model", str(models["base"]),
            "--output-dir", str(out), "--max-steps", "4", "--batch-size", "8", "--max-length", "48", "--lr", "1e-3",
            "--mixed-precision", "no", "--teacher", str(models[teacher]), "--teacher-description",
            str(models["description"]), "--teacher-cache", str(cache), "--teacher-chunk-rows", "16"]


def test_cli_margin_mse_run_records_the_teacher_and_writes_an_encoder_the_server_loads(models, tmp_path, tiny_run):
    out, cache = tmp_path / "out", tmp_path / "cache"
    only = _cli(*_encoder_args(models, out, cache), "--loss", "margin-mse", "--teacher-cache-only")
    assert only.returncode == 0, only.stderr[-3000:]
    record = json.loads(only.stdout.strip().splitlines()[-1])
    assert record["sha256"] == sha256_file(cache / record["file"]) and not (out / "model").exists()
    done = _cli(*_encoder_args(models, out, cache), "--loss", "margin-mse")
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((out / enc.MANIFEST_NAME).read_text())
    objective, teacher = manifest["objective"], manifest["teacher"]
    assert objective["loss_name"] == "margin-mse" and objective["margin_weight"] is None
    assert objective["scale"] == enc.DEFAULT_SCALE and "Margin-MSE" in objective["loss"]
    assert teacher["weights_sha256"] == sha256_file(models["teacher"] / "model.safetensors")
    assert teacher["cache"]["sha256"] == sha256_file(cache / teacher["cache"]["file"]) == record["sha256"]
    assert teacher["base_model"]["id"] == "org/teacher-base" and teacher["excluded_texts_from"] == [DEV]
    settings = teacher["distillation"]
    assert settings["loss"] == "margin-mse" and settings["scale"] == enc.DEFAULT_SCALE and settings["chunk_rows"] == 16
    data = build_encoder_data(zsc_sources(ZSC))
    assert teacher["cache"]["pairs"] == len(own_set_pairs(data))
    losses = [json.loads(line)["loss"] for line in (out / "run" / "loss_log.jsonl").read_text().splitlines()
              if "loss" in json.loads(line)]
    assert losses and all(math.isfinite(x) and x > 0 for x in losses)
    assert manifest["training"]["steps"] == 4
    served = SentenceEncoder(out / "model")
    assert served.digest == manifest["embedding_sha256"] and served.encode(["a text"]).shape == (1, 32)
    verify = _cli("verify", "--model-dir", str(out / "model"), "--manifest", str(out / enc.MANIFEST_NAME))
    lines = verify.stdout.splitlines()
    assert verify.returncode == 0 and any(x.startswith("OK") and "teacher cache" in x for x in lines), verify.stdout

    shipped = tmp_path / "shipped"  # install it: the served model's manifests name the teacher and its data
    shutil.copytree(tiny_run["out"], shipped)
    assert _cli("install-encoder", str(out), "--model-dir", str(shipped / "model")).returncode == 0
    table = json.loads((shipped / "training_manifest.json").read_text())["embedding"]
    assert table["teacher"] == teacher
    sources = {e["name"]: e for e in json.loads((shipped / "data_sources.json").read_text())["sources"]}
    assert sources["sentence-encoder:teacher-weights"]["sha256"] == teacher["weights_sha256"]
    assert sources["sentence-encoder:teacher-cache"]["sha256"] == record["sha256"]
    assert sources["sentence-encoder:tiny:train"]["trained_into"] == "teacher " + teacher["weights_sha256"]

    in_batch = _cli(*_encoder_args(models, out, cache)[:-8])  # the same folder resumed under the default loss
    last = in_batch.stderr.strip().splitlines()[-1]
    assert in_batch.returncode == 2 and last.startswith("train.py encoder: error:"), in_batch.stderr[-2000:]
    assert 'was started with loss "margin-mse", this command gives "in-batch"' in last

    other_base = tmp_path / "other-base"  # other base weights are refused (moved ones resume: test_run_settings)
    shutil.copytree(models["base"], other_base)
    weights = load_file(other_base / "model.safetensors")
    shifted = {k: v + 1.0 if v.is_floating_point() else v for k, v in weights.items()}
    save_file(shifted, other_base / "model.safetensors")
    rebased = _cli(*_encoder_args({**models, "base": other_base}, out, cache), "--loss", "margin-mse")
    last, digest = rebased.stderr.strip().splitlines()[-1], sha256_file(models["base"] / "model.safetensors")
    assert rebased.returncode == 2 and last.endswith(
        f"was started from another base model (weights sha256 {digest[:12]}) than this command's (weights sha256 "
        f"{sha256_file(other_base / 'model.safetensors')[:12]}): give --base-model the run's own base or another "
        "--output-dir"), rebased.stderr[-2000:]

    other = _cli(*_encoder_args(models, tmp_path / "out2", cache, teacher="other"), "--loss", "margin-mse")
    last = other.stderr.strip().splitlines()[-1]  # after the run's log lines: one error line, no traceback
    assert other.returncode == 2 and last.startswith("train.py encoder: error:") and "teacher_weights_sha256" in last
    assert "Traceback" not in other.stderr and not (tmp_path / "out2" / enc.MANIFEST_NAME).exists()


def _exit_status(main, argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def test_cli_refuses_margin_mistakes_in_one_line(models, tmp_path, capsys):
    from zsnli.train_cli import main

    base = ["encoder", "--zsc-dir", str(ZSC), "--zsc-exclude", DEV, "--base-model", str(models["base"]),
            "--output-dir", str(tmp_path / "o")]
    teacher = ["--teacher", str(models["teacher"]), "--teacher-description", str(models["description"])]
    cache = ["--teacher-cache", str(tmp_path / "cache")]
    for extra, needle in [
        (["--loss", "margin-mse"], "--loss margin-mse needs --teacher"),
        (["--loss", "margin-mse", *teacher], "--teacher-cache"),
        (["--loss", "mixed", *teacher, *cache], "--loss mixed needs --margin-weight"),
        (["--loss", "mixed", "--margin-weight", "-1", *teacher, *cache], "--margin-weight"),
        (["--loss", "mixed", "--margin-weight", "0", *teacher, *cache], "--margin-weight"),
        (["--loss", "margin-mse", "--margin-weight", "0.5", *teacher, *cache], "--margin-weight"),
        ([*teacher, *cache], "--teacher needs --loss margin-mse"),
        (["--margin-weight", "1"], "--margin-weight needs --loss"),
        (["--loss", "kl"], "--loss"),
        (["--loss", "margin-mse", "--teacher", str(tmp_path), *cache], "not a model directory"),
        (["--loss", "margin-mse", *teacher, "--teacher-cache", str(ROOT / "runs" / "c")], "outside the tree"),
        (["--loss", "margin-mse", *teacher, *cache, "--zsc-exclude", str(tmp_path)], "did not exclude"),
    ]:
        assert _exit_status(main, base + extra) == 2, (extra, capsys.readouterr())
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, (extra, err)


def test_train_encoder_refuses_a_loss_without_its_teacher_or_weight():
    from zsnli.training.distill import Distillation
    from zsnli.training.encoder_teacher import check_loss

    teacher = Distillation(teacher="t", description="d", cache_dir="c")
    for kwargs, needle in [(dict(loss="kl"), "loss 'kl'"), (dict(loss="margin-mse"), "needs a teacher"),
                           (dict(teacher=teacher), "takes no teacher"),
                           (dict(loss="mixed", teacher=teacher), "margin_weight"),
                           (dict(loss="mixed", teacher=teacher, margin_weight=-1.0), "must be > 0")]:
        with pytest.raises(ValueError, match=needle):
            check_loss(kwargs.get("loss", "in-batch"), kwargs.get("margin_weight"), kwargs.get("teacher"))


def test_the_trainer_computes_the_loss_it_was_given():
    """EncoderTrainer's objective: in-batch alone (the default, unchanged), margin-MSE alone, or their weighted sum."""
    from types import SimpleNamespace

    gen = torch.Generator().manual_seed(3)
    text = torch.nn.functional.normalize(torch.randn(3, 8, generator=gen), dim=-1)
    cands = torch.nn.functional.normalize(torch.randn(4, 8, generator=gen), dim=-1)
    inputs = {"labels": torch.tensor([0, 2, 1]), "teacher_scores": torch.randn(3, 4, generator=gen)}
    objective = enc._trainer_class()._objective
    ce = enc.in_batch_loss(text, cands, inputs["labels"])
    margin = enc.margin_mse_loss(text, cands, inputs["labels"], inputs["teacher_scores"])

    def run(loss, weight=1.0):
        me = SimpleNamespace(loss_name=loss, margin_weight=weight, scale=enc.DEFAULT_SCALE)
        return objective(me, text, cands, {k: v for k, v in inputs.items() if loss != "in-batch" or k == "labels"})

    assert torch.equal(run("in-batch"), ce)  # needs no teacher scores
    assert torch.equal(run("margin-mse"), margin)
    assert run("mixed", 0.25).item() == pytest.approx(ce.item() + 0.25 * margin.item(), rel=1e-6)
