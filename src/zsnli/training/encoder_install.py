"""Ship a ``train.py encoder`` run as the served sentence encoder (``train.py install-encoder``).

Copies the run's encoder into ``model/embedding`` with its `ENCODER_MANIFEST_NAME`, replaces
``training_manifest.json``'s table of that directory (``pretrained_artifacts.embedding``, a reused
artifact, becomes ``embedding``, `zsnli.training.manifest_writer.trained_embedding`: base, interpolation,
data, files), and declares the run's training sets in ``data_sources.json``. ``calibration.json`` pins
the old encoder's digest, so the server refuses to start until the scoring is re-chosen on the new
one (``train.py select``): the command says so.

May import `zsnli.manifest` and `zsnli.training.manifest_writer`; no torch.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..manifest import EMBEDDING_SUBDIR, MANIFEST_NAME, ManifestError, check_model_dir, load_manifest, write_json
from .manifest_writer import (
    ENCODER_MANIFEST_NAME, TRAINED_EMBEDDING_KEY, LineageError, declare_sources, trained_embedding,
)

ENCODER_SOURCE_PREFIX = "sentence-encoder:"
"""``data_sources.json`` names of the encoder's training sets (the cross-encoder's own entries keep theirs)."""


def install_encoder(run_dir: str | Path, model_dir: str | Path, manifest_dir: str | Path) -> dict[str, Any]:
    """Make the encoder of ``run_dir`` (a ``train.py encoder --output-dir``) the served one under ``model_dir``.

    ``run_dir`` must hold ``model/`` and `ENCODER_MANIFEST_NAME` whose ``files`` match it;
    ``manifest_dir`` holds ``training_manifest.json`` and ``data_sources.json``. Returns the manifest's
    new ``embedding`` table. Raises `ManifestError` (one line) for a missing or unreadable manifest or a
    run whose files differ from its manifest; nothing is changed then.
    """
    run_dir, model_dir, manifest_dir = Path(run_dir), Path(model_dir), Path(manifest_dir)
    run = load_manifest(run_dir / ENCODER_MANIFEST_NAME)
    bad = [c for c in check_model_dir(run_dir / "model", run) if c.status != "ok"]
    if bad:
        raise ManifestError(f"{run_dir / 'model'}: {bad[0].name} is {bad[0].status} against {ENCODER_MANIFEST_NAME}")
    manifest = load_manifest(manifest_dir / MANIFEST_NAME)
    target = model_dir / EMBEDDING_SUBDIR
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(run_dir / "model", target)
    shutil.copy2(run_dir / ENCODER_MANIFEST_NAME, target / ENCODER_MANIFEST_NAME)
    try:
        table = trained_embedding(model_dir)
    except LineageError as exc:  # pragma: no cover - the copy above was checked
        raise ManifestError(str(exc)) from exc
    manifest.get("pretrained_artifacts", {}).pop(EMBEDDING_SUBDIR, None)
    manifest[TRAINED_EMBEDDING_KEY] = table
    write_json(manifest_dir / MANIFEST_NAME, manifest)
    declare_sources(manifest_dir, [_source_entry(s) for s in run["data"]["sources"]])
    return table


def _source_entry(source: dict[str, Any]) -> dict[str, Any]:
    """One ``data_sources.json`` entry for a set the encoder trained on."""
    keep = ("kind", "licence", "path", "sha256", "rows", "rows_used", "classes", "task_kind")
    return {"name": ENCODER_SOURCE_PREFIX + source["name"], "role": "train",
            "model": f"model/{EMBEDDING_SUBDIR} (the sentence encoder)", **{k: source[k] for k in keep if k in source}}
