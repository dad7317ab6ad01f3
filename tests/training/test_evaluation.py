"""zsnli.training.evaluation: per-split accuracy and `train.py evaluate` on the tiny trained model."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from zsnli.training.evaluation import accuracy_by_split
from zsnli.manifest import load_manifest, verify_model_dir

ROOT = Path(__file__).resolve().parents[2]


def test_accuracy_by_split_per_split_mean_and_pooled():
    logits = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0], [0, 1, 0]], dtype=float)
    labels = np.array([0, 1, 0, 0, 2])
    split_ids = np.array([0, 0, 0, 1, 1])
    out = accuracy_by_split(logits, labels, split_ids, ["a", "b"])
    assert out == {"acc_a": 2 / 3, "acc_b": 0.5, "mean_accuracy": (2 / 3 + 0.5) / 2, "accuracy": 3 / 5}


def test_evaluate_records_full_split_accuracy_in_manifest(tiny_run, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(tiny_run["out"], out)
    cmd = [sys.executable, str(ROOT / "train.py"), "evaluate", "--preset", "tiny", "--data-dir", str(tiny_run["data"]),
           "--base-model", str(tiny_run["base"]), "--model-dir", str(out / "model"), "--update-manifest",
           "--out", str(tmp_path / "figures.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tiny:validation (12 pairs)" in proc.stderr  # the progress line (not a terminal: a log line)
    manifest = load_manifest(out / "training_manifest.json")
    assert json.loads((tmp_path / "figures.json").read_text()) == manifest["evaluation"]
    ev = manifest["evaluation"]["validation"]["tiny:validation"]
    assert ev["n"] == 12 and 0 <= ev["accuracy"] <= 1
    from zsnli.runtime.model import NliModel

    nli = NliModel.load(out / "model")
    rows = [json.loads(line) for line in (tiny_run["data"] / "validation.jsonl").read_text().splitlines()]
    logits = nli.predict_logits([r["premise"] for r in rows], [r["hypothesis"] for r in rows])
    names = [nli.model.config.id2label[int(i)] for i in logits.argmax(-1)]
    assert ev["accuracy"] == round(float(np.mean([n == r["label"] for n, r in zip(names, rows)])), 4)
    assert verify_model_dir(out / "model", out / "training_manifest.json") == manifest["model_sha256"]
