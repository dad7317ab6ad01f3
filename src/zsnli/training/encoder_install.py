"""Ship a ``train.py encoder`` run as the served sentence encoder (``train.py install-encoder``).

Copies the run's encoder into ``model/embedding`` with its `ENCODER_MANIFEST_NAME`, replaces
``training_manifest.json``'s table of that directory (``pretrained_artifacts.embedding``, a reused
artifact, becomes ``embedding``, `zsnli.training.manifest_writer.trained_embedding`: base, interpolation,
data, files), and declares the run's training sets in ``data_sources.json`` (the entries of an earlier
installed encoder are dropped). ``calibration.json`` pins the old encoder's digest, so the server refuses
to start until the scoring is re-chosen on the new one (``train.py select``): the command says so.

Everything is checked before anything changes: the run against its own manifest, the model directory
against ``training_manifest.json``; the new directory is built beside the old one and renamed into place.

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
    ``manifest_dir`` holds ``training_manifest.json`` (whose ``files`` must match ``model_dir``) and
    ``data_sources.json``. Returns the manifest's new ``embedding`` table. Raises `ManifestError` (one
    line) for a missing or unreadable manifest, a run or model directory whose files differ from its
    manifest, or a run manifest without its data or base; nothing is changed then.
    """
    run_dir, model_dir, manifest_dir = Path(run_dir), Path(model_dir), Path(manifest_dir)
    run = load_manifest(run_dir / ENCODER_MANIFEST_NAME)
    _require_match(run_dir / "model", run, ENCODER_MANIFEST_NAME)
    manifest = load_manifest(manifest_dir / MANIFEST_NAME)
    _require_match(model_dir, manifest, MANIFEST_NAME, only_outside=EMBEDDING_SUBDIR)
    try:
        sources = [_source_entry(s) for s in run["data"]["sources"]]
        staged = _stage(run_dir, model_dir)
        table = trained_embedding(model_dir, subdir=staged.name)
    except (KeyError, TypeError, LineageError) as exc:
        shutil.rmtree(model_dir / f".{EMBEDDING_SUBDIR}.new", ignore_errors=True)
        raise ManifestError(f"{run_dir / ENCODER_MANIFEST_NAME}: not a train.py encoder manifest ({exc})") from exc
    target = model_dir / EMBEDDING_SUBDIR
    old = model_dir / f".{EMBEDDING_SUBDIR}.old"
    if target.exists():
        target.rename(old)
    staged.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    manifest.get("pretrained_artifacts", {}).pop(EMBEDDING_SUBDIR, None)
    manifest[TRAINED_EMBEDDING_KEY] = table
    write_json(manifest_dir / MANIFEST_NAME, manifest)
    declare_sources(manifest_dir, sources, replace_prefix=ENCODER_SOURCE_PREFIX)
    return table


def _require_match(directory: Path, manifest: dict[str, Any], name: str, only_outside: str | None = None) -> None:
    """Raise `ManifestError` naming the first file of ``directory`` that is not as ``manifest`` lists it
    (files under ``only_outside/`` left out: the directory about to be replaced)."""
    skip = f"{only_outside}/" if only_outside else None
    bad = [c for c in check_model_dir(directory, manifest)
           if c.status != "ok" and not (skip and c.name.startswith(skip))]
    if bad:
        how = {"mismatch": f"differs from what {name} lists", "missing": f"is listed in {name} but missing",
               "unlisted": f"is not listed in {name}"}
        raise ManifestError(f"{directory}: {bad[0].name} {how.get(bad[0].status, bad[0].status)}")


def _stage(run_dir: Path, model_dir: Path) -> Path:
    """``model_dir/.embedding.new``: the run's encoder and its manifest, ready to be renamed into place."""
    staged = model_dir / f".{EMBEDDING_SUBDIR}.new"
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(run_dir / "model", staged)
    shutil.copy2(run_dir / ENCODER_MANIFEST_NAME, staged / ENCODER_MANIFEST_NAME)
    return staged


def _source_entry(source: dict[str, Any]) -> dict[str, Any]:
    """One ``data_sources.json`` entry for a set the encoder trained on."""
    keep = ("kind", "licence", "path", "sha256", "rows", "rows_used", "classes", "task_kind")
    return {"name": ENCODER_SOURCE_PREFIX + source["name"], "role": "train",
            "model": f"model/{EMBEDDING_SUBDIR} (the sentence encoder)", **{k: source[k] for k in keep if k in source}}
