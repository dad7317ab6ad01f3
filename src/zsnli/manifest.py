"""Hashes and manifests: what was trained, from what, and which bytes are served.

`training_manifest.json` records (among the training facts written by
`zsnli.training`) a ``files`` table: for every file in the model directory,
its sha256 and size in bytes. `verify_model_dir` re-hashes a model directory
against that table; the server refuses to start and `train.py verify` exits
non-zero when any entry disagrees.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_NAME = "training_manifest.json"
DATA_SOURCES_NAME = "data_sources.json"
CALIBRATION_NAME = "calibration.json"

_CHUNK = 1 << 20


class ManifestError(RuntimeError):
    """The manifest is missing, unreadable, or does not match the model files."""


def sha256_file(path: str | Path) -> str:
    """Return the hex sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_json(obj: Any) -> bytes:
    """Serialise ``obj`` as canonical JSON (sorted keys, no spaces, UTF-8)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256_json(obj: Any) -> str:
    """Return the hex sha256 of ``canonical_json(obj)``."""
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def hash_model_dir(model_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Hash every regular file directly or recursively under ``model_dir``.

    Returns ``{relative_posix_path: {"sha256": hex, "bytes": int}}`` sorted by
    path. Raises ``ManifestError`` if the directory does not exist.
    """
    root = Path(model_dir)
    if not root.is_dir():
        raise ManifestError(f"model directory not found: {root}")
    table: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        table[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    return table


def model_dir_digest(files: dict[str, dict[str, Any]]) -> str:
    """One sha256 naming a whole model directory: the hash of its canonical file table."""
    return sha256_json({name: entry["sha256"] for name, entry in files.items()})


@dataclass(frozen=True)
class FileCheck:
    """The outcome of checking one file of the model directory against the manifest."""

    name: str
    status: str  # "ok" | "mismatch" | "missing" | "unlisted"
    expected: str | None
    actual: str | None


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read a training manifest; raise ``ManifestError`` with a one-line reason if unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except FileNotFoundError as exc:
        raise ManifestError(f"manifest not found: {path}") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise ManifestError(f"manifest unreadable: {path}: {exc}") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise ManifestError(f"manifest has no 'files' table: {path}")
    return manifest


def check_model_dir(model_dir: str | Path, manifest: dict[str, Any]) -> list[FileCheck]:
    """Compare every file listed in ``manifest['files']`` with the bytes in ``model_dir``.

    Files present in the directory but absent from the manifest are reported
    as ``unlisted`` (a served model must be exactly the manifest's files).
    """
    expected: dict[str, dict[str, Any]] = manifest.get("files", {})
    root = Path(model_dir)
    actual = hash_model_dir(root)
    checks: list[FileCheck] = []
    for name in sorted(set(expected) | set(actual)):
        want = expected.get(name, {}).get("sha256") if name in expected else None
        have = actual.get(name, {}).get("sha256") if name in actual else None
        if want is None:
            status = "unlisted"
        elif have is None:
            status = "missing"
        elif want == have:
            status = "ok"
        else:
            status = "mismatch"
        checks.append(FileCheck(name, status, want, have))
    return checks


def verify_model_dir(model_dir: str | Path, manifest_path: str | Path) -> str:
    """Raise ``ManifestError`` unless every file in ``model_dir`` matches the manifest.

    Returns the directory digest (`model_dir_digest`) on success. The error
    message is one line naming the first failing files.
    """
    manifest = load_manifest(manifest_path)
    checks = check_model_dir(model_dir, manifest)
    bad = [c for c in checks if c.status != "ok"]
    if bad:
        listed = ", ".join(f"{c.name} ({c.status})" for c in bad[:5])
        raise ManifestError(f"model files do not match {manifest_path}: {listed}")
    return model_dir_digest(manifest["files"])
