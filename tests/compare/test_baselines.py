"""The two baselines: the transformers pipeline agrees with the model's own entailment softmax; both keep label order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zsnli.compare.arms.baselines import BaselineError, EmbeddingBaseline, PipelineBaseline, softmax
from zsnli.runtime.embedding import default_embedding_dir, embedding_digest, encoder_id

TEXT = "the team won the football match and the league season"
LABELS = ["This text is about sport.", "This text is about business.", "This text is about food.",
          "the weather is good"]


def test_pipeline_baseline_is_the_entailment_softmax_in_label_order(deberta_dir):
    """deberta_dir has id2label {0: contradiction, 1: entailment, 2: neutral}: the pipeline must find index 1."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    base = PipelineBaseline(deberta_dir)
    probs = base.predict(TEXT, LABELS)
    tok = AutoTokenizer.from_pretrained(deberta_dir)
    model = AutoModelForSequenceClassification.from_pretrained(deberta_dir).eval()
    with torch.inference_mode():
        enc = tok([TEXT] * len(LABELS), LABELS, return_tensors="pt", padding=True, truncation="only_first")
        logits = model(**enc).logits.float().numpy()
    expected = softmax(logits[:, 1])
    np.testing.assert_allclose(probs, expected, atol=1e-5)
    reversed_probs = base.predict(TEXT, LABELS[::-1])
    np.testing.assert_allclose(reversed_probs, probs[::-1], atol=1e-5)
    assert base.predict(TEXT, ["only one"]) == [1.0]
    ident = base.identity()
    assert ident["kind"] == "pipeline" and len(ident["model_sha256"]) == 64


def test_embedding_baseline_probabilities():
    base = EmbeddingBaseline(scale=20.0)
    probs = base.predict(TEXT, LABELS)
    assert len(probs) == 4 and abs(sum(probs) - 1) < 1e-9
    assert int(np.argmax(probs)) == 0
    np.testing.assert_allclose(base.predict(TEXT, LABELS[::-1]), probs[::-1], atol=1e-6)
    flat = EmbeddingBaseline(scale=0.0).predict(TEXT, LABELS)
    np.testing.assert_allclose(flat, [0.25] * 4)
    # the shipped model/embedding is trained here (issue 42): named as such, with its digest
    assert base.identity()["model"] == encoder_id(default_embedding_dir()) == (
        "sentence-transformers/all-MiniLM-L6-v2, fine-tuned by zsnli")
    # one digest for the embedding weights: the one calibration.json records and the server checks
    assert base.identity()["model_sha256"] == embedding_digest(default_embedding_dir())


def test_missing_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(BaselineError, match="not found"):
        PipelineBaseline(tmp_path / "nope")
    with pytest.raises(BaselineError, match="not found"):
        EmbeddingBaseline(tmp_path / "nope")


def test_pipeline_baseline_loads_without_a_progress_bar(deberta_dir, capfd):
    """`validate.py compare` printed transformers' "Loading weights" bar (raw \\r frames in a log) per pipeline arm."""
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()  # whatever an earlier test did: the baseline itself must turn it off
    PipelineBaseline(deberta_dir)
    captured = capfd.readouterr()
    assert "Loading weights" not in captured.err + captured.out


def test_identities_record_a_checkouts_model_dir_relative_and_the_committed_baseline_does(tmp_path, monkeypatch):
    """Issue 40: baselines/main.json recorded the embedding arms' model_dir as the path of the worktree that
    ran it (/root/...), which no clone has. Under the working directory a path is recorded relative."""
    import json
    from pathlib import Path

    from zsnli.compare.arms.base import shown_path

    (tmp_path / "model" / "embedding").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "model" / "embedding") == "model/embedding"
    assert shown_path("model/embedding") == "model/embedding"
    outside = tmp_path.parent / "elsewhere"
    assert shown_path(outside) == str(outside)

    def dirs(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "model_dir" and value is not None:
                    yield value
                yield from dirs(value)
        elif isinstance(node, list):
            for value in node:
                yield from dirs(value)

    report = json.loads((Path(__file__).resolve().parents[2] / "baselines" / "main.json").read_text())
    recorded = set(dirs(report))
    assert recorded and not [d for d in recorded if Path(d).is_absolute()], recorded


@pytest.mark.parametrize("load", ["embedding baseline", "embedding few-shot arm"])
def test_arms_that_load_the_sentence_encoder_draw_no_progress_bar(capfd, load):
    """A bake-off log held transformers' "Loading weights: 100%|..." bar: the pipeline arm turned it off, the
    arms loading the sentence encoder did not."""
    from transformers.utils import logging as hf_logging

    from zsnli.compare.arms import build_arm

    hf_logging.enable_progress_bar()  # whatever an earlier test did: the arm itself must turn it off
    if load == "embedding baseline":
        EmbeddingBaseline()
    else:
        build_arm("embedding_logreg", "e", {}).setup()
    captured = capfd.readouterr()
    assert "Loading weights" not in captured.err + captured.out
