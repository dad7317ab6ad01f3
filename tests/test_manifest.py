"""zsnli.manifest: verifying model bytes (the writers are tests/training/test_manifest_writer.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zsnli.manifest import ManifestError, check_model_dir, load_manifest, verify_model_dir

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
