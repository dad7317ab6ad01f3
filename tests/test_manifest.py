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


def test_verify_takes_an_encoder_directory_with_its_own_manifest(tmp_path):
    """Issue 49: ``train.py verify --model-dir DIR [--manifest DIR/encoder_manifest.json]`` on a sentence encoder's
    directory checks its files against its own manifest (which cannot list itself): OK, and a changed byte fails."""
    import json

    from zsnli.manifest import ENCODER_ARTIFACT, ENCODER_MANIFEST_NAME, hash_model_dir

    enc = tmp_path / "embedding"
    enc.mkdir()
    (enc / "config.json").write_text("{}", encoding="utf-8")
    (enc / "model.safetensors").write_bytes(b"\x00" * 64)
    (enc / ENCODER_MANIFEST_NAME).write_text(json.dumps({"artifact": ENCODER_ARTIFACT, "files": hash_model_dir(enc)}),
                                             encoding="utf-8")
    for extra in ([], ["--manifest", str(enc / ENCODER_MANIFEST_NAME)]):
        ok = subprocess.run([sys.executable, str(ROOT / "train.py"), "verify", "--model-dir", str(enc), *extra],
                            capture_output=True, text=True, cwd=ROOT)
        assert ok.returncode == 0 and "OK: 2/2 files match" in ok.stdout and "python train.py verify" in ok.stdout, \
            ok.stdout + ok.stderr
    (enc / "model.safetensors").write_bytes(b"\x01" * 64)
    bad = subprocess.run([sys.executable, str(ROOT / "train.py"), "verify", "--model-dir", str(enc)],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1 and "MISMATCH  model.safetensors" in bad.stdout
