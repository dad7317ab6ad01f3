"""The transformers pipeline loaded as a user writes it computes as the server does (issue 40, item 2).

transformers 5 loads a model in its ``config.json``'s ``dtype`` by default. The shipped weights are stored in
fp16; while ``config.json`` said ``"dtype": "float16"``, ``pipeline("zero-shot-classification", model="model")``
computed in fp16 and ``"scoring": "pipeline"`` (fp32) differed from it by 1e-4 to 1e-2. The config now names
the dtype the server computes in (`zsnli.training.trainer.COMPUTE_DTYPE`), the storage stays fp16 and is
recorded in the manifest (``training.saved_dtype``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import REPO, running_app

pytestmark = pytest.mark.anyio

SHIPPED = REPO / "model"
#: The documented parity (docs/configuration.md: 1.2e-6 over 316 documents, one per call); fp16 misses it.
PARITY_ATOL = 1e-5


def _stored_dtypes(model_dir) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as weights:
        return {str(weights.get_slice(name).get_dtype()) for name in weights.keys()}


def _plain_pipeline(model_dir):
    """``pipeline("zero-shot-classification", model=DIR)``: no dtype, no device, as a user writes it."""
    from transformers import pipeline

    return pipeline("zero-shot-classification", model=str(model_dir))


def _first_examples(n: int) -> list[dict]:
    rows = [json.loads(line) for line in (REPO / "dev" / "zeroshot_dev.jsonl").read_text().splitlines()]
    by_dataset: dict[str, dict] = {}
    for row in rows:
        if row["text"]:
            by_dataset.setdefault(row["dataset"], row)
    return list(by_dataset.values())[:n]


async def test_the_shipped_model_through_a_plain_pipeline_gets_the_documented_parity(make_app):
    """Stored in fp16, loaded by a plain ``pipeline()`` in fp32; its scores are the server's ``"scoring":
    "pipeline"`` answers within the documented parity, one document per call (the parity figure's way:
    label descriptions as they are, template ``{}``), on one document of each of 6 datasets."""
    config = json.loads((SHIPPED / "config.json").read_text())
    manifest = json.loads((REPO / "training_manifest.json").read_text())
    assert config["dtype"] == "float32" and _stored_dtypes(SHIPPED) == {"F16"}
    assert manifest["training"]["saved_dtype"] == manifest["hyperparameters"]["save_dtype"] == "float16"
    pipe = _plain_pipeline(SHIPPED)
    assert str(pipe.model.dtype) == "torch.float32"
    worst = 0.0
    async with running_app(make_app(SHIPPED, dtype="float32")) as client:
        for row in _first_examples(6):
            out = pipe(row["text"], candidate_labels=row["labels"], hypothesis_template="{}")
            want = [dict(zip(out["labels"], out["scores"]))[lb] for lb in row["labels"]]
            r = await client.post("/classify", json={"text": row["text"], "labels": row["labels"],
                                                     "scoring": "pipeline"})
            assert r.status_code == 200, r.text
            worst = max(worst, float(np.abs(np.array(r.json()["probabilities"]) - np.array(want)).max()))
    assert worst < PARITY_ATOL, worst


def test_a_model_saved_in_fp16_says_float32_and_a_plain_load_computes_in_fp32(bert_dir, tmp_path):
    """`save_model` stores the weights in the preset's ``save_dtype`` and writes ``config.json``'s ``dtype`` as
    the compute dtype, so ``from_pretrained`` / ``pipeline`` without a dtype load it as the server does."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from zsnli.training.trainer import COMPUTE_DTYPE, save_model

    model = AutoModelForSequenceClassification.from_pretrained(bert_dir)
    save_model(model, AutoTokenizer.from_pretrained(bert_dir), tmp_path / "saved", "float16")
    assert COMPUTE_DTYPE == "float32"
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["dtype"] == "float32"
    assert _stored_dtypes(tmp_path / "saved") == {"F16"}
    assert str(AutoModelForSequenceClassification.from_pretrained(tmp_path / "saved").dtype) == "torch.float32"
    assert str(_plain_pipeline(tmp_path / "saved").model.dtype) == "torch.float32"
