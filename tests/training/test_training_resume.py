"""Long runs across working periods: a run stopped by SIGTERM and resumed trains exactly as one that ran straight
through; checkpoints on a clock; classification pairs (zsnli.training.zsc_nli) mixed in; the "not entailment" loss."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from conftest import build_bert_nli, sigterm_at_step
from zsnli.training import arguments, callbacks
from zsnli.training import trainer as training
from zsnli.training.presets import get_preset
from zsnli.training.run_settings import RunSettingsMismatch
from zsnli.training.zsc_nli import zsc_sources

ROOT = Path(__file__).resolve().parents[2]
ZSC = ROOT / "tests" / "data" / "tiny_zsc"


def _preset(base: Path, **overrides):
    preset = get_preset("tiny", str(ROOT / "tests" / "data" / "tiny_nli"), str(base))
    return preset.with_overrides(max_steps=8, eval_steps=100, zsc_sources=zsc_sources(ZSC), zsc_ratio=0.5,
                                 **overrides)


def _losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "loss_log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    # dropout on: the resumed run must also restore the RNG that draws the dropout masks
    return build_bert_nli(tmp_path_factory.mktemp("resume") / "base",
                          id2label={0: "neutral", 1: "contradiction", 2: "entailment"}, dropout=0.1)


def test_sigterm_then_resume_gives_the_same_losses_as_a_straight_run(base, tmp_path, monkeypatch):
    preset = _preset(base)
    straight = training.train(preset, tmp_path / "a" / "model", tmp_path / "a" / "run")
    assert straight["training"]["steps"] == 8

    real_callbacks = training.trainer_callbacks

    monkeypatch.setattr(training, "trainer_callbacks", sigterm_at_step(real_callbacks, 3))
    handler_before = signal.getsignal(signal.SIGTERM)
    stopped = training.train(preset, tmp_path / "b" / "model", tmp_path / "b" / "run")
    monkeypatch.setattr(training, "trainer_callbacks", real_callbacks)
    assert stopped == {"interrupted": True, "signal": signal.SIGTERM, "steps": 3}
    assert (tmp_path / "b" / "run" / "checkpoint-3").is_dir()
    assert not (tmp_path / "b" / "model").exists()  # no model or manifest from an interrupted run
    assert signal.getsignal(signal.SIGTERM) is handler_before  # handler restored (another test may have set one)

    with pytest.raises(RunSettingsMismatch, match=r"max_length %d, this command gives %d" % (
            preset.max_length, preset.max_length // 2)):  # another pair length would train one run on two inputs
        training.train(preset.with_overrides(max_length=preset.max_length // 2), tmp_path / "b" / "model",
                       tmp_path / "b" / "run")
    other = build_bert_nli(tmp_path / "other", id2label={0: "neutral", 1: "contradiction", 2: "entailment"}, seed=7)
    with pytest.raises(RunSettingsMismatch, match=r"started from another base model \(weights sha256 [0-9a-f]{12}\) "
                                                  r"than this command's \(weights sha256 [0-9a-f]{12}\)"):
        training.train(_preset(other), tmp_path / "b" / "model", tmp_path / "b" / "run")  # the manifest would lie
    resumed = training.train(preset, tmp_path / "b" / "model", tmp_path / "b" / "run")
    assert resumed["training"]["resumed_from_checkpoint"] == "checkpoint-3"
    want, got = _losses(tmp_path / "a" / "run"), _losses(tmp_path / "b" / "run")
    assert sorted(got) == sorted(want) == list(range(1, 9))
    assert got == pytest.approx(want, rel=1e-6, abs=1e-7)


def test_the_final_loss_is_named_with_the_step_it_was_logged_at(base, tmp_path):
    """``final_loss`` is the last LOGGED loss: with a loss logged every 3 steps of 8 it is step 6's (and step 1's
    in a run shorter than the logging interval), so the manifest says which step it is."""
    manifest = training.train(_preset(base, logging_steps=3), tmp_path / "model", tmp_path / "run")
    logged = _losses(tmp_path / "run")
    assert sorted(logged) == [1, 3, 6] and manifest["training"]["steps"] == 8
    assert manifest["training"]["final_loss_step"] == 6 and manifest["training"]["final_loss"] == logged[6]


def test_checkpoint_clock_writes_checkpoints_between_eval_steps(base, tmp_path):
    preset = _preset(base, checkpoint_every_s=1e-9, keep_checkpoints=20)  # due at every step, all kept
    training.train(preset, tmp_path / "model", tmp_path / "run")
    saved = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "run").glob("checkpoint-*"))
    assert saved == list(range(1, 9))  # eval_steps is 100: every one came from the clock


def test_classification_pairs_are_trained_and_declared(base, tmp_path):
    manifest = training.train(_preset(base), tmp_path / "out" / "model", tmp_path / "run")
    zsc = manifest["data"]["counts"]["zsc_train"]
    assert zsc["pairs_used"] == 40 and zsc["labels"] == {"entailment": 20, "not_entailment": 12, "contradiction": 8}
    assert manifest["data"]["counts"]["train_rows"] == manifest["data"]["counts"]["nli_train_rows"] + 40
    sources = json.loads((tmp_path / "out" / "data_sources.json").read_text())["sources"]
    declared = {s["name"]: s for s in sources}
    assert declared["zsc-train:tiny_topic"]["rows"]["pairs_used"] == 24
    assert declared["zsc-train:tiny_topic"]["licence"] == "test fixture (team-written)"
    assert declared["zsc-train:tiny_topic"]["sha256"]
    holdout = [json.loads(x) for x in (tmp_path / "run" / "holdout.jsonl").read_text().splitlines()]
    zsc_texts = {json.loads(x)["text"] for f in ZSC.glob("*.jsonl") for x in f.read_text().splitlines()}
    assert not {r["premise"] for r in holdout} & zsc_texts  # the calibration hold-out is NLI rows only


def test_nli_loss_is_cross_entropy_without_not_entailment_and_a_union_with_it():
    import torch

    logits = torch.tensor([[2.0, 0.5, -1.0], [0.1, 0.2, 0.3], [-1.0, 1.0, 3.0]])
    labels = torch.tensor([0, 2, 1])
    assert training.nli_loss(logits, labels).item() == pytest.approx(
        torch.nn.functional.cross_entropy(logits, labels).item(), rel=1e-6)
    probs = torch.softmax(logits, -1)
    union = training.nli_loss(logits, torch.tensor([3, 3, 3]))
    assert union.item() == pytest.approx(-torch.log(probs[:, 1] + probs[:, 2]).mean().item(), rel=1e-6)


def test_mixed_precision_auto_follows_the_cpu_flags(monkeypatch):
    assert arguments.cpu_has_native_bf16("flags\t: fpu avx2 avx512f avx512_bf16\n")
    assert arguments.cpu_has_native_bf16("flags\t: fpu amx_bf16 amx_tile\n")
    assert not arguments.cpu_has_native_bf16("flags\t: fpu sse avx2 fma\n")
    monkeypatch.setattr(arguments, "cpu_has_native_bf16", lambda cpuinfo=None: False)
    assert arguments.use_bf16("auto", cuda=False) is False and arguments.use_bf16("auto", cuda=True) is True
    assert arguments.use_bf16("bf16", cuda=False) is True and arguments.use_bf16("no", cuda=True) is False
    with pytest.raises(ValueError, match="mixed_precision"):
        arguments.use_bf16("fp8", cuda=False)


def test_progress_line_says_rate_and_time_left():
    assert callbacks.progress_line(100, 400, 32.0, 0.5) == "step 100/400 (25.0 %)  32.0 pairs/s  0.500 steps/s  left 10m00s"
    assert callbacks.progress_line(100, 8000, 32.0, 2.0).endswith("left 1h05m")  # 3950 s: whole minutes, as before
    assert callbacks.progress_line(0, 400, 0.0, 0.0).endswith("left ?")


def test_bf16_autocast_is_accepted_on_a_cpu(base, tmp_path):
    """transformers refuses bf16 without CUDA unless use_cpu is set: a CPU run with bf16 must build its arguments."""
    preset = _preset(base, mixed_precision="bf16")
    args = arguments.training_arguments(preset, tmp_path, cuda=False, per_device=4, distributed_cpu=False)
    assert args.bf16 is True and args.use_cpu is True


def test_texts_of_choosing_or_reporting_data_are_never_trained_on(tmp_path):
    from zsnli.training.zsc_nli import build_zsc_pairs, normalise_text, texts_of

    held = tmp_path / "zsc-dev"
    held.mkdir()
    (held / "x.jsonl").write_text(json.dumps({"text": "  THE striker scored twice in the  second half. "}) + "\n")
    (tmp_path / "public.jsonl").write_text(json.dumps({"text": "Send the report now."}) + "\n")
    exclude = texts_of([held, tmp_path / "public.jsonl", tmp_path / "absent.jsonl"])
    assert exclude == {normalise_text("The striker scored twice in the second half."), "send the report now."}
    rows, counts = build_zsc_pairs(zsc_sources(ZSC), n_nli=1000, ratio=1.0, seed=0, exclude=exclude)
    assert {r["premise"] for r in rows}.isdisjoint({"The striker scored twice in the second half.", "Send the report now."})
    assert counts["sets"]["zsc-train:tiny_topic"]["dropped_overlap"] == 1
    assert counts["sets"]["zsc-train:tiny_polite"]["dropped_overlap"] == 1
    assert counts["pairs_used"] == 2 * (20 - 2)


def test_train_cli_excludes_the_choosing_data_beside_the_zsc_folder_by_default(tmp_path):
    from zsnli.train_cli import build_parser
    from zsnli.training import cli_checks

    data = tmp_path / "data"
    (data / "zsc-dev").mkdir(parents=True)
    (data / "zsc").mkdir()
    (data / "zsc" / "public.jsonl").write_text("")
    import shutil

    shutil.copytree(ZSC, data / "zsc-train")
    preset = get_preset("tiny", str(ROOT / "tests" / "data" / "tiny_nli"), "unused")
    # parsed by train.py's own parser, so the namespace holds every --zsc-* option the command line has
    args = build_parser().parse_args(["train", "--zsc-dir", str(data / "zsc-train")])
    got = cli_checks.with_zsc(preset, args)
    assert str(data / "zsc-dev") in got.zsc_exclude and str(data / "zsc" / "public.jsonl") in got.zsc_exclude
    args.zsc_exclude = [str(tmp_path / "nope")]
    with pytest.raises(cli_checks.UsageError, match="--zsc-exclude .*nope: not found"):
        cli_checks.with_zsc(preset, args)


def test_jsonl_texts_may_hold_unicode_line_separators(tmp_path):
    # json.dumps(ensure_ascii=False) leaves U+2028/U+2029/U+0085 raw inside strings (zsc/public.jsonl has them);
    # str.splitlines() would cut such a line in two and fail to parse it.
    from zsnli.training.zsc_nli import normalise_text, read_zsc_set, texts_of

    odd = "first part\u2028second\u2029third\x85end"
    (tmp_path / "public.jsonl").write_text(json.dumps({"text": odd}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert texts_of([tmp_path / "public.jsonl"]) == {normalise_text(odd)}
    (tmp_path / "s.jsonl").write_text(json.dumps({"text": odd, "label": "a", "label_index": 0}, ensure_ascii=False)
                                      + "\n", encoding="utf-8")
    (tmp_path / "s.labels.json").write_text(json.dumps({"dataset": "s", "classes": ["a", "b"],
                                                        "hypotheses": ["It is a.", "It is b."]}), encoding="utf-8")
    assert read_zsc_set(tmp_path / "s.jsonl").texts == (odd,)
