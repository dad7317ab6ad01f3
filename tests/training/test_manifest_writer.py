"""zsnli.training.manifest_writer: recording evaluation figures, declaring sources."""

from __future__ import annotations

import json
import shutil

import pytest

from zsnli.manifest import load_manifest
from zsnli.training.manifest_writer import calibration_sources, declare_sources, record_evaluation


def test_record_evaluation_refuses_figures_of_another_model(tiny_run, tmp_path):
    shutil.copy(tiny_run["out"] / "training_manifest.json", tmp_path / "training_manifest.json")
    with pytest.raises(ValueError, match="not of the model"):
        record_evaluation(tmp_path, {"model_sha256": "0" * 64, "validation": {}})
    digest = load_manifest(tmp_path / "training_manifest.json")["model_sha256"]
    record_evaluation(tmp_path, {"model_sha256": digest, "validation": {"x": {"n": 1, "accuracy": 1.0}}})
    assert load_manifest(tmp_path / "training_manifest.json")["evaluation"]["validation"]["x"]["n"] == 1


def test_declare_sources_replaces_by_name_and_keeps_the_rest(tmp_path):
    (tmp_path / "data_sources.json").write_text(json.dumps({"preset": "p", "sources": [
        {"name": "a", "role": "train"}, {"name": "team-zero-shot-dev", "rows": 1}]}))
    dev = tmp_path / "dev.jsonl"
    dev.write_text('{"id": 1}\n')
    declare_sources(tmp_path, calibration_sources(dev, 5, "org/emb", "ab" * 32))
    doc = json.loads((tmp_path / "data_sources.json").read_text())
    assert doc["preset"] == "p"
    assert [s["name"] for s in doc["sources"]] == ["a", "team-zero-shot-dev", "all-MiniLM-L6-v2-embeddings"]
    assert doc["sources"][1]["rows"] == 5 and doc["sources"][2]["sha256"] == "ab" * 32
    assert calibration_sources(None, 0, "org/emb", None) == []
