"""zsnli.bench.accelerator_padding: the service on the fake accelerator, real and padded tokens counted per kind."""

from __future__ import annotations

import json
import shutil

import pytest
from bench_support import examples_file  # noqa: F401
from conftest import write_calibration

from zsnli.bench import accelerator_padding


@pytest.fixture
def served_model(tmp_path, bert_dir):
    """A model directory with its own sentence encoder (``embedding/``) and a calibration with the cosine term and
    a cascade, as model/ ships."""
    from zsnli.runtime.embedding import embedding_digest

    model = tmp_path / "model"
    shutil.copytree(bert_dir, model)
    shutil.copytree(bert_dir, model / "embedding")
    write_calibration(model / "calibration.json", rule="entailment", temperature=0.7, embedding_weight=4.0,
                      embedding_sha256=embedding_digest(model / "embedding"), cascade={"min_labels": 3, "keep": 2})
    return model


def test_counts_real_and_padded_tokens_on_the_fake_accelerator(served_model, examples_file, tmp_path, capsys):
    out = tmp_path / "padding.json"
    argv = ["--model-dir", str(served_model), "--examples", str(examples_file), "--docs", "3", "--concurrency", "3",
            "--forward", "simulated", "--forward-ms", "0.1", "--out", str(out)]
    assert accelerator_padding.main(argv) == 0
    capped = json.loads(out.read_text())["4096"]
    assert capped["health"] == {"device": "cuda", "dtype": "bfloat16", "fixed_shapes": True, "token_budget": 4096}
    kinds = capped["kinds"]
    assert {"nli", "embedding_text"} <= set(kinds)  # the cosine term ran (labels: kept since the untimed pass)
    for k in kinds.values():
        assert 0 < k["real"] <= k["padded"] and k["rows"] >= k["forwards"] > 0
        assert k["padded"] <= 8 * 64 * k["forwards"]  # 8 rows a forward at most, 64 the tiny model's window
    assert accelerator_padding.main(argv + ["--uncapped"]) == 0
    uncapped = json.loads(out.read_text())["4096"]
    assert sum(k["padded"] for k in uncapped["kinds"].values()) > sum(k["padded"] for k in kinds.values())
    printed = capsys.readouterr().out
    assert "fake accelerator, simulated forwards" in printed and "| 4,096 | **all**" in printed
