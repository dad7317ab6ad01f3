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
    published = "sentence-transformers/all-MiniLM-L6-v2"
    declare_sources(tmp_path, calibration_sources(dev, 5, published, "ab" * 32))
    doc = json.loads((tmp_path / "data_sources.json").read_text())
    assert doc["preset"] == "p"
    assert [s["name"] for s in doc["sources"]] == ["a", "team-zero-shot-dev", "all-MiniLM-L6-v2-embeddings"]
    assert doc["sources"][1]["rows"] == 5 and doc["sources"][2]["sha256"] == "ab" * 32
    assert "reused pretrained artifact" in doc["sources"][2]["role"]
    assert calibration_sources(None, 0, published, None) == []
    # an encoder trained here (zsnli.runtime.embedding.encoder_id) is declared as trained, not as reused
    (trained,) = calibration_sources(None, 0, published + ", fine-tuned by zsnli", "cd" * 32)
    assert trained["name"] == "sentence-encoder-weights" and "trained by this project" in trained["role"]
    assert "reused" not in trained["role"] and trained["sha256"] == "cd" * 32


def test_a_run_continued_from_a_trained_model_records_the_whole_chain(tiny_run, tmp_path):
    """Training from a zsnli model (its manifest beside it) puts that run in ``continued_from`` and its
    sources in data_sources.json; the base's own hash is the previous manifest's model_sha256."""
    import subprocess
    import sys

    from conftest import REPO

    first = load_manifest(tiny_run["out"] / "training_manifest.json")
    out = tmp_path / "out"
    cmd = [sys.executable, str(REPO / "train.py"), "--preset", "tiny", "--data-dir", str(tiny_run["data"]),
           "--base-model", str(tiny_run["out"] / "model"), "--model-dir", str(out / "model"),
           "--output-dir", str(tmp_path / "run"), "--max-steps", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    second = load_manifest(out / "training_manifest.json")
    chain = second["continued_from"]
    assert chain["model_sha256"] == first["model_sha256"] != second["model_sha256"]
    assert chain["base_model"] == first["base_model"] and chain["data_sources"] == first["data"]["sources"]
    assert chain["training"]["steps"] == first["training"]["steps"] and chain["continued_from"] is None
    assert first["model_sha256"] in second["base_model"]["note"]
    declared = json.loads((out / "data_sources.json").read_text())["sources"]
    earlier = [s for s in declared if s.get("trained_into") == first["model_sha256"]]
    assert {s["name"] for s in earlier} == {s["name"] for s in first["data"]["sources"]}


def test_lineage_refuses_a_base_whose_manifest_describes_other_weights(tiny_run, tmp_path):
    from zsnli.training.manifest_writer import LineageError, lineage

    base = tmp_path / "base"
    shutil.copytree(tiny_run["out"] / "model", base)
    shutil.copy(tiny_run["out"] / "training_manifest.json", base / "training_manifest.json")
    assert lineage(str(base))["model_sha256"] == load_manifest(base / "training_manifest.json")["model_sha256"]
    (base / "config.json").write_text((base / "config.json").read_text() + "\n")
    with pytest.raises(LineageError, match="config.json is not the file"):
        lineage(str(base))
    assert lineage(str(tiny_run["base"])) is None  # a plain base: no manifest, no chain


def test_train_cli_names_a_tampered_continuation_base_in_one_line(tiny_run, tmp_path):
    import subprocess
    import sys

    from conftest import REPO

    base = tmp_path / "base"
    shutil.copytree(tiny_run["out"] / "model", base)
    shutil.copy(tiny_run["out"] / "training_manifest.json", base / "training_manifest.json")
    (base / "model.safetensors").write_bytes((base / "model.safetensors").read_bytes()[:-1] + b" ")
    proc = subprocess.run([sys.executable, str(REPO / "train.py"), "--preset", "tiny", "--data-dir",
                           str(tiny_run["data"]), "--base-model", str(base), "--dry-run"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "model.safetensors is not the file " + str(base / "training_manifest.json")
        + " describes (a continued run must start from the exact weights of a manifest)")
    assert "Traceback" not in proc.stderr
