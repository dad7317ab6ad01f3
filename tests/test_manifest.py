"""zsnli.manifest: verifying model bytes, recording evaluation figures, declaring sources."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zsnli.manifest import (
    ManifestError,
    calibration_sources,
    check_model_dir,
    declare_sources,
    load_manifest,
    record_evaluation,
    verify_model_dir,
)

ROOT = Path(__file__).resolve().parents[1]


def test_verify_fails_on_a_flipped_byte(tiny_run, tmp_path):
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
