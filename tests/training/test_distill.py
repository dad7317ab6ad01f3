"""zsnli.training.distill: the teacher's cache (resumed after a kill, byte for byte), the augmented pairs (never an
excluded text), the loss (KL zero for a student equal to its teacher, a hand-computed value, alpha = 1 the plain NLI
loss of a whole run), the manifest's teacher entry with train.py verify, and the CLI's one-line refusals."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import build_bert_nli
from zsnli.manifest import sha256_file
from zsnli.training import distill as d
from zsnli.training import trainer as training
from zsnli.training.presets import get_preset
from zsnli.training.zsc_nli import normalise_text, read_zsc_set, texts_of, zsc_sources

ROOT = Path(__file__).resolve().parents[2]
NLI = ROOT / "tests" / "data" / "tiny_nli"
ZSC = ROOT / "tests" / "data" / "tiny_zsc"
REVERSED = {0: "contradiction", 1: "neutral", 2: "entailment"}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("distill")
    return {"teacher": build_bert_nli(root / "teacher", id2label=REVERSED, seed=3),
            "student": build_bert_nli(root / "student", id2label={0: "neutral", 1: "contradiction", 2: "entailment"},
                                      seed=0, dropout=0.0),
            "two_way": build_bert_nli(root / "two_way", id2label={0: "entailment", 1: "not_entailment"}, seed=4)}


def _pairs() -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in (NLI / "train.jsonl").read_text().splitlines()]
    return d.unique_pairs(rows)[:37]


def _distill(models, cache: Path, **kw) -> d.Distillation:
    return d.Distillation(teacher=str(models["teacher"]), description="unused", cache_dir=str(cache), **kw)


def _file(cache: Path, record: dict) -> Path:
    return cache / record["file"]


def test_cache_killed_then_resumed_has_the_bytes_of_a_straight_run(models, tmp_path):
    pairs = _pairs()
    straight, record = d.build_cache(_distill(models, tmp_path / "a", chunk_rows=8, batch_size=3), pairs, 64)
    assert straight.shape == (37, 3) and straight.dtype == np.float32
    assert record["sha256"] == sha256_file(_file(tmp_path / "a", record)) and record["pairs"] == 37

    def kill_after_second(k):
        if k == 1:
            raise KeyboardInterrupt

    resumed = _distill(models, tmp_path / "b", chunk_rows=8, batch_size=3)
    with pytest.raises(KeyboardInterrupt):
        d.build_cache(resumed, pairs, 64, on_chunk=kill_after_second)
    assert [p.name[:11] for p in sorted((tmp_path / "b").glob("chunk-*.npy"))] == ["chunk-00000", "chunk-00001"]
    assert not list((tmp_path / "b").glob("teacher_logp-*"))
    chunk2 = sorted((tmp_path / "a").glob("chunk-00002-*.npy"))[0].name
    (tmp_path / "b" / (chunk2 + ".tmp")).write_bytes(b"half a chunk")  # a write cut short is never read
    done: list[int] = []
    again, record_b = d.build_cache(resumed, pairs, 64, on_chunk=done.append)
    assert done == [2, 3, 4]  # only the missing chunks were computed
    assert _file(tmp_path / "b", record_b).read_bytes() == _file(tmp_path / "a", record).read_bytes()
    assert record_b == record and np.array_equal(again, straight)
    done.clear()
    d.build_cache(resumed, pairs, 64, on_chunk=done.append)
    assert done == []  # complete: read back, nothing computed


def test_a_run_whose_pairs_extend_anothers_reuses_its_whole_chunks(models, tmp_path):
    """Augmented pairs come after the gold ones: the augmented run recomputes only from the first chunk
    that differs; another teacher setting in the same folder is refused."""
    gold, more = _pairs()[:12], _pairs()[:19]
    cache = tmp_path / "c"
    first, gold_record = d.build_cache(_distill(models, cache, chunk_rows=4), gold, 64)
    done: list[int] = []
    both, record = d.build_cache(_distill(models, cache, chunk_rows=4), more, 64, on_chunk=done.append)
    assert done == [3, 4] and np.array_equal(both[:12], first)
    assert record["file"] != gold_record["file"] and _file(cache, gold_record).is_file()
    with pytest.raises(d.CacheMismatch, match="chunk_rows"):
        d.build_cache(_distill(models, cache, chunk_rows=5), gold, 64)
    with pytest.raises(d.CacheMismatch, match="batch_size"):
        d.build_cache(_distill(models, cache, chunk_rows=4, batch_size=7), gold, 64)


def test_cache_holds_the_teachers_log_probabilities_in_the_students_label_order(models, tmp_path):
    import torch

    pairs = _pairs()[:5]
    cache, _ = d.build_cache(_distill(models, tmp_path / "c", chunk_rows=4), pairs, 64)
    tokenizer, model, _ = d.load_teacher(models["teacher"])
    with torch.no_grad():
        logits = model(**tokenizer([p for p, _ in pairs], [h for _, h in pairs], padding=True,
                                   return_tensors="pt")).logits
    want = torch.log_softmax(logits, -1)[:, [2, 1, 0]].numpy()  # teacher: contradiction, neutral, entailment
    assert np.allclose(cache, want, atol=1e-5)
    assert np.allclose(np.exp(cache).sum(1), 1.0, atol=1e-6)


def test_the_teachers_weights_are_read_once_a_run_and_again_when_they_change(tmp_path, monkeypatch):
    """The cache's identity and the manifest's teacher entry name the same file: one read, not two."""
    import hashlib
    import os

    from zsnli.training import manifest_writer

    reads = []
    monkeypatch.setattr(manifest_writer, "sha256_file", lambda p: reads.append(p) or hashlib.sha256(
        Path(p).read_bytes()).hexdigest())
    teacher = tmp_path / "teacher"
    teacher.mkdir()
    (teacher / "pytorch_model.bin").write_bytes(b"old format")
    assert d.teacher_weights_sha256(teacher) == hashlib.sha256(b"old format").hexdigest()
    (teacher / "model.safetensors").write_bytes(b"teacher")  # preferred over pytorch_model.bin
    assert d.teacher_weights_sha256(teacher) == d.teacher_weights_sha256(str(teacher)) == hashlib.sha256(
        b"teacher").hexdigest()
    assert len(reads) == 2
    (teacher / "model.safetensors").write_bytes(b"TEACHER")  # same size: the new mtime alone makes it read again
    os.utime(teacher / "model.safetensors", ns=(1, 1))
    assert d.teacher_weights_sha256(teacher) == hashlib.sha256(b"TEACHER").hexdigest() and len(reads) == 3
    (teacher / "model.safetensors").unlink()
    (teacher / "pytorch_model.bin").unlink()
    with pytest.raises(d.DataError, match="no model.safetensors or pytorch_model.bin"):
        d.teacher_weights_sha256(teacher)


def test_a_teacher_without_the_three_nli_labels_is_refused():
    with pytest.raises(d.DataError, match="three NLI labels"):
        d.label_order({"id2label": {"0": "entailment", "1": "not_entailment"}})
    assert d.label_order({"id2label": {str(k): v for k, v in REVERSED.items()}}) == [2, 1, 0]


def test_augmented_pairs_cross_label_spaces_and_premises_and_never_use_an_excluded_text(tmp_path):
    sets = {s.name: read_zsc_set(s.path) for s in zsc_sources(ZSC)}
    topic, polite = sets["zsc-train:tiny_topic"], sets["zsc-train:tiny_polite"]
    nli = [json.loads(line) for line in (NLI / "train.jsonl").read_text().splitlines()]
    banned = [topic.texts[0], topic.texts[5], polite.texts[1], nli[0]["premise"], nli[4]["hypothesis"]]
    excluded = tmp_path / "dev.jsonl"
    excluded.write_text("".join(json.dumps({"text": t.upper() + "  "}) + "\n" for t in banned))
    exclude = texts_of([excluded])
    rows = d.augmented_pairs(nli, zsc_sources(ZSC), exclude, 400, seed=7)
    assert len(rows) == 400 and {r["label"] for r in rows} == {d.NO_GOLD}
    used = {normalise_text(r[k]) for r in rows for k in ("premise", "hypothesis")}
    assert not used & exclude
    home = {t: s for s in sets.values() for t in s.texts}
    zsc_rows = [r for r in rows if r["premise"] in home]
    assert len(zsc_rows) == 200  # half the pairs: a text against another set's hypotheses
    assert all(r["hypothesis"] not in home[r["premise"]].hypotheses for r in zsc_rows)
    assert {r["hypothesis"] for r in zsc_rows} >= set(topic.hypotheses) | set(polite.hypotheses)
    hypotheses_of = {}
    for r in nli:
        hypotheses_of.setdefault(r["premise"], set()).add(r["hypothesis"])
    nli_rows = [r for r in rows if r["premise"] not in home]
    assert nli_rows and all(r["hypothesis"] not in hypotheses_of[r["premise"]] for r in nli_rows)
    assert rows == d.augmented_pairs(nli, zsc_sources(ZSC), exclude, 400, seed=7)


def test_kl_term_is_zero_for_a_student_equal_to_its_teacher():
    import torch

    logits = torch.randn(6, 3, generator=torch.Generator().manual_seed(0)) * 3
    teacher = torch.log_softmax(logits, -1) - 5.0  # any shift per row is the same distribution
    labels = torch.full((6,), d.NO_GOLD_ID)
    for t in (0.5, 1.0, 4.0):
        assert abs(float(d.distillation_loss(logits, labels, teacher, alpha=0.0, temperature=t))) < 1e-6


def test_loss_matches_a_hand_computed_value():
    import torch

    s, p, t, alpha = [1.0, 0.0, -1.0], [0.7, 0.2, 0.1], 2.0, 0.3

    def softmax(z):
        e = [math.exp(x) for x in z]
        return [x / sum(e) for x in e]

    p_t = softmax([math.log(x) / t for x in p])
    q_t = softmax([x / t for x in s])
    kl = sum(a * (math.log(a) - math.log(b)) for a, b in zip(p_t, q_t))
    ce = -math.log(softmax(s)[0])  # row 0: gold entailment; row 1: augmented, no gold
    want = alpha * ce + (1 - alpha) * t * t * kl  # both rows have the same KL: the mean is kl
    got = d.distillation_loss(torch.tensor([s, s]), torch.tensor([0, d.NO_GOLD_ID]),
                              torch.log(torch.tensor([p, p])), alpha, t)
    assert float(got) == pytest.approx(want, rel=1e-5, abs=1e-7)
    only_augmented = d.distillation_loss(torch.tensor([s]), torch.tensor([d.NO_GOLD_ID]),
                                         torch.log(torch.tensor([p])), alpha, t)
    assert float(only_augmented) == pytest.approx((1 - alpha) * t * t * kl, rel=1e-5, abs=1e-7)


def test_alpha_one_is_the_nli_loss_exactly():
    import torch

    from zsnli.training.nli_trainer import nli_loss

    g = torch.Generator().manual_seed(1)
    logits, teacher = torch.randn(8, 3, generator=g), torch.log_softmax(torch.randn(8, 3, generator=g), -1)
    labels = torch.tensor([0, 1, 2, 3, 0, 3, 2, 1])
    assert torch.equal(d.distillation_loss(logits, labels, teacher, 1.0, 3.0), nli_loss(logits, labels))


def _description(tmp_path: Path, exclude: list[str]) -> Path:
    path = tmp_path / f"teacher_plan_{len(exclude)}.json"
    path.write_text(json.dumps({"base_model": {"id": "org/teacher-base"}, "sources": [{"name": "tiny:train"}],
                                "hyperparameters": {"zsc_exclude": exclude}}))
    return path


def _losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "loss_log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def test_a_whole_run_at_alpha_one_trains_exactly_as_the_plain_run(models, tmp_path):
    preset = get_preset("tiny", str(NLI), str(models["student"])).with_overrides(
        max_steps=4, eval_steps=100, zsc_sources=zsc_sources(ZSC), zsc_ratio=0.5)
    plain = training.train(preset, tmp_path / "a" / "model", tmp_path / "a" / "run")
    distill = _distill(models, tmp_path / "cache", alpha=1.0, temperature=3.0)
    distill = d.Distillation(**{**distill.__dict__, "description": str(_description(tmp_path, []))})
    distilled = training.train(preset, tmp_path / "b" / "model", tmp_path / "b" / "run", distill=distill)
    assert _losses(tmp_path / "b" / "run") == _losses(tmp_path / "a" / "run")  # bit for bit
    assert distilled["model_sha256"] == plain["model_sha256"]
    assert distilled["teacher"]["cache"]["sha256"] == sha256_file(_file(tmp_path / "cache", distilled["teacher"]["cache"]))
    assert "teacher" not in plain
    half = d.Distillation(**{**distill.__dict__, "alpha": 0.5})  # the teacher term reaches the loss: other losses
    training.train(preset, tmp_path / "c" / "model", tmp_path / "c" / "run", distill=half)
    mixed, gold = _losses(tmp_path / "c" / "run"), _losses(tmp_path / "a" / "run")
    assert sorted(mixed) == sorted(gold) and all(mixed[k] != gold[k] for k in gold)


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_cli_distils_records_the_teacher_and_verify_rehashes_it(models, tmp_path):
    """train.py train --teacher ... with augmented pairs: the manifest's teacher entry, data_sources.json's
    teacher rows, and train.py verify failing once the cache's bytes change."""
    exclude = [str(ROOT / "dev" / "zeroshot_dev.jsonl")]
    out = tmp_path / "s"
    done = _cli("train", "--preset", "tiny", "--data-dir", str(NLI), "--base-model", str(models["student"]),
                "--zsc-dir", str(ZSC), "--teacher", str(models["teacher"]),
                "--teacher-description", str(_description(tmp_path, exclude)), "--teacher-cache",
                str(tmp_path / "cache"), "--distill-augment", "1", "--distill-alpha", "0.25",
                "--distill-temperature", "2", "--teacher-chunk-rows", "64", "--model-dir", str(out / "model"),
                "--output-dir", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((out / "training_manifest.json").read_text())
    teacher = manifest["teacher"]
    assert teacher["weights_sha256"] == sha256_file(models["teacher"] / "model.safetensors")
    assert teacher["cache"]["sha256"] == sha256_file(_file(tmp_path / "cache", teacher["cache"]))
    assert teacher["base_model"]["id"] == "org/teacher-base" and teacher["excluded_texts_from"] == exclude
    assert teacher["distillation"]["alpha"] == 0.25 and teacher["distillation"]["augment"] == 1.0
    counts = manifest["data"]["counts"]
    assert counts["distill_augmented_pairs"] == counts["train_rows"] // 2
    assert teacher["cache"]["pairs"] == counts["teacher_cache"]["pairs"] <= counts["train_rows"]
    names = [s["name"] for s in json.loads((out / "data_sources.json").read_text())["sources"]]
    assert {"teacher-weights", "teacher-cache"} <= set(names)
    assert _cli("verify", "--model-dir", str(out / "model")).returncode == 0
    cache = _file(tmp_path / "cache", teacher["cache"])
    cache.write_bytes(cache.read_bytes()[:-4] + b"\0\0\0\0")
    verify = _cli("verify", "--model-dir", str(out / "model"))
    assert verify.returncode == 1 and "MISMATCH  teacher cache" in verify.stdout


def test_cli_refuses_bad_distillation_arguments_in_one_line(models, tmp_path, capsys):
    from zsnli.train_cli import main

    good = _description(tmp_path, [str(ROOT / "dev" / "zeroshot_dev.jsonl")])
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.jsonl").write_text("")
    base = ["train", "--preset", "tiny", "--data-dir", str(NLI), "--base-model", str(models["student"]),
            "--zsc-dir", str(ZSC)]
    teacher = ["--teacher", str(models["teacher"]), "--teacher-description", str(good)]
    cache = ["--teacher-cache", str(tmp_path / "cache")]
    unweighted = tmp_path / "unweighted"  # the teacher's folder without its weight file
    shutil.copytree(models["teacher"], unweighted, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    for extra, needle in [
        (["--teacher", str(unweighted), "--teacher-description", str(good), *cache],
         "no model.safetensors or pytorch_model.bin"),
        (["--distill-alpha", "0.5"], "--distill-alpha needs --teacher"),
        (["--teacher-cache-only"], "--teacher-cache-only needs --teacher"),
        (["--teacher", str(tmp_path), *cache], "not a model directory"),
        (["--teacher", str(models["two_way"]), "--teacher-description", str(good), *cache], "three NLI labels"),
        (["--teacher", str(models["teacher"]), *cache], "--teacher-description"),
        ([*teacher], "--teacher-cache"),
        ([*teacher, "--teacher-cache", str(ROOT / "runs" / "cache")], "outside the tree"),
        ([*teacher, *cache, "--distill-augment", "1", "--distill-alpha", "1"], "below 1"),
        ([*teacher, *cache, "--distill-alpha", "1.5"], "--distill-alpha"),
        ([*teacher, *cache, "--distill-temperature", "0"], "--distill-temperature"),
        ([*teacher, *cache, "--zsc-exclude", str(other)], "did not exclude"),
        (["--teacher", str(models["teacher"]), "--teacher-description", str(_description(tmp_path, [])), *cache],
         "did not exclude"),
    ]:
        assert _exit_status(main, base + extra) == 2, (extra, capsys.readouterr())
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, (extra, err)


def _exit_status(main, argv: list[str]) -> int:
    """``main(argv)``'s status, also when the parser exits (a value its type refuses)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def test_augmented_pairs_stop_when_no_new_pair_can_be_drawn(tmp_path):
    """Two premises that each hold both hypotheses: every cross pair is gold, so none is drawn (and the draw ends)."""
    nli = [{"premise": p, "hypothesis": h, "label": "neutral"} for p in ("p one", "p two") for h in ("h one", "h two")]
    assert d.augmented_pairs(nli, (), set(), 50, seed=0) == []
