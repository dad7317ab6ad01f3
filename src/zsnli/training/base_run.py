"""The checks of a finished ``train.py train`` run before ``train.py install-base`` ships it as ``model/base``
(`zsnli.training.base_install`).

The run's ``--model-dir`` (RUN) holds the weights, config and tokenizer; its ``training_manifest.json`` and
``data_sources.json`` lie in RUN or beside it. `check_run` refuses, each in one line
(`zsnli.training.usage.UsageError`, exit 2): a folder with no model (`not_a_model_dir` names the folder meant:
RUN/model, or the folder the manifest beside a run's ``--output-dir`` describes, never the served model), no
manifest (`run_manifest_path`: a Trainer ``checkpoint-N`` folder; a sentence encoder, `sentence_encoder_folder`, is
named as such), an installed base (`refuse_installed`), files that
are not the manifest's, a ``data_sources.json`` that is not a sources document (`read_sources`), an ``id2label``
other than the 3-way head (`check_head`, `NLI_ID2LABEL`), recorded data through which zsc-dev or benchmark text
could have reached the model (`zsnli.training.leak_check.leaked_text`), and a base model whose licence is not known
(its card, `zsnli.training.manifest_writer.card_licence`, or ``--base-licence``). What passes is a `Run`.

May import `zsnli.manifest`, `zsnli.training.usage` (the error), `zsnli.training.encoder_install` (`describes`),
`zsnli.training.leak_check`, `zsnli.training.manifest_writer` (the card's licence) and `zsnli.training.nli_data` (the
labels), `zsnli.harness.cli` (`json_problem`); no torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..manifest import (DATA_SOURCES_NAME, ENCODER_MANIFEST_NAME, MANIFEST_NAME, ManifestError, check_model_dir,
                        load_manifest)
from .usage import UsageError
from .encoder_install import describes
from .leak_check import leaked_text
from .manifest_writer import card_licence
from .nli_data import LABELS
from ..harness.cli import json_problem

WEIGHTS_NAME = "model.safetensors"
"""The weight file a ``train.py train`` model directory holds (`zsnli.training.nli_trainer.save_model`)."""

NLI_ID2LABEL = {str(i): name for i, name in enumerate(LABELS)}
"""The head ``train.py train`` writes and the served scoring was chosen for: 0 entailment, 1 neutral,
2 contradiction."""

RUN_HINT = "give the --model-dir of a finished train.py train run"


@dataclass(frozen=True)
class Run:
    """A checked ``train.py train`` run: its model directory, its manifest (and where it is), its
    ``data_sources.json``, the base model's licence (text) and, when given (``--base-note``), where the base model's
    weights came from (None: the run's own ``base_model.note`` stands)."""

    model_dir: Path
    manifest: dict[str, Any]
    manifest_path: Path
    sources: Path
    licence: str
    note: str | None = None


def run_manifest_path(run_dir: Path, served: Path | None = None) -> Path:
    """``training_manifest.json`` in ``run_dir``, else beside it (where ``train.py train`` writes it). Raises
    `UsageError` when ``run_dir`` is not a directory, holds no model (`not_a_model_dir`: the folder meant is named,
    never the served model directory ``served``), is a sentence encoder (`sentence_encoder_folder`: install-encoder
    named), or neither manifest exists (a Trainer checkpoint folder is named)."""
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: {'a file, not a directory' if run_dir.exists() else 'no such directory'}; "
                         f"{RUN_HINT}")
    encoder = sentence_encoder_folder(run_dir)
    if encoder is not None:
        run = (encoder / "model").is_dir()
        ship = f"; ship this encoder run with train.py install-encoder {encoder}" if run else ""
        raise UsageError(f"{run_dir}: a sentence encoder (its {ENCODER_MANIFEST_NAME} in {encoder}), not an NLI "
                         f"cross-encoder: install-base ships a train.py train run{ship}")
    if not any((run_dir / n).is_file() for n in ("config.json", WEIGHTS_NAME)):
        raise UsageError(not_a_model_dir(run_dir, served))
    for path in (run_dir / MANIFEST_NAME, run_dir.absolute().parent / MANIFEST_NAME):
        if path.is_file():
            return path
    what = "a Trainer checkpoint folder" if (run_dir / "trainer_state.json").is_file() else "not a finished run"
    raise UsageError(f"{run_dir}: no {MANIFEST_NAME} in or beside it ({what}); Trainer checkpoint folders are not "
                     "installable: finish or stop the run (--time-budget-s saves the model) so it writes its "
                     "--model-dir and manifests")


def sentence_encoder_folder(run_dir: Path) -> Path | None:
    """The folder, ``run_dir`` or its parent, whose `ENCODER_MANIFEST_NAME` makes ``run_dir`` a sentence encoder (a
    ``train.py encoder`` run, its ``model/`` or an installed ``model/embedding``), when no ``training_manifest.json``
    lies in or beside ``run_dir``; else None. ``run_dir`` may be relative (``.``: its parent is looked at too)."""
    here = run_dir.absolute()
    if any((d / MANIFEST_NAME).is_file() for d in (here, here.parent)):
        return None
    return next((d for d in (here, here.parent) if (d / ENCODER_MANIFEST_NAME).is_file()), None)


OUTPUT_FILES = ("trainer_state.json", "run_settings.json", "holdout.jsonl")
"""Files a ``train.py train --output-dir`` holds beside its ``checkpoint-N`` folders (never a model directory)."""


def _outside(folder: Path, served: Path | None) -> bool:
    """Whether ``folder`` is neither the served model directory ``served`` nor inside it."""
    return served is None or not folder.resolve().is_relative_to(served.resolve())


def described_dirs(run_dir: Path) -> list[Path]:
    """The folders beside ``run_dir`` (or in it) whose files are those that a ``training_manifest.json`` in or beside
    ``run_dir`` lists (`zsnli.training.encoder_install.describes`: names compared, nothing hashed), sorted."""
    found = []
    for manifest in (run_dir / MANIFEST_NAME, run_dir.absolute().parent / MANIFEST_NAME):
        if manifest.is_file():
            found += [d for d in sorted(manifest.parent.iterdir()) if d.is_dir() and d != run_dir
                      and not d.name.startswith(".") and describes(d, manifest)]
    return found


def not_a_model_dir(run_dir: Path, served: Path | None = None) -> str:
    """The one-line refusal of a RUN that holds no ``config.json`` or `WEIGHTS_NAME`, pointing at the model folder
    meant: its ``model/`` subfolder (the run's ``--output-dir`` or the folder of its manifests), else a folder the
    manifest beside it describes (`described_dirs`), for a run's ``--output-dir`` (``checkpoint-N`` folders,
    `OUTPUT_FILES`) or any other folder; never the served model directory ``served`` (the checkout's ``model/``)."""
    head = f"{run_dir}: holds no config.json or {WEIGHTS_NAME}"
    inner = run_dir / "model"
    if inner.is_dir():
        if _outside(inner, served):
            return f"{head} but a model/ folder: give {inner} (the run's --model-dir)"
        return f"{head}; its model/ is the served model directory, not a run: {RUN_HINT}"
    output = any(run_dir.glob("checkpoint-*")) or any((run_dir / n).is_file() for n in OUTPUT_FILES)
    what = "a train run's --output-dir (checkpoints and logs), not its model" if output else "not a model directory"
    found = [d for d in described_dirs(run_dir) if _outside(d, served)]
    if found:
        return f"{head}: {what}; the model its {MANIFEST_NAME} describes is {found[0]}: give {found[0]}"
    if output:
        return f"{head}: this is a run's output folder, give its --model-dir (where the run wrote config.json)"
    return f"{head}: {what}; {RUN_HINT}"


def check_head(model_dir: Path) -> None:
    """Raise `UsageError` unless ``model_dir/config.json``'s ``id2label`` is `NLI_ID2LABEL` (names compared
    case-insensitively)."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        found = {str(k): str(v).lower() for k, v in (config.get("id2label") or {}).items()}
    except (OSError, ValueError, AttributeError) as exc:
        raise UsageError(f"{model_dir}/config.json: unreadable ({json_problem(exc)})") from None
    if found != NLI_ID2LABEL:
        raise UsageError(f"{model_dir}: config.json id2label is {found}, not the 3-way NLI head {NLI_ID2LABEL} that "
                         "train.py train writes and the served scoring expects")


FILE_STATUS = {"mismatch": "{name} differs from what {manifest} lists", "missing": "{name} is listed in {manifest} "
               "but missing", "unlisted": "{name} is not listed in {manifest}"}
"""How a run's file disagrees with its manifest (`zsnli.manifest.FileCheck` status), as the refusal says it."""


def read_sources(path: Path) -> dict[str, Any]:
    """The run's ``data_sources.json`` at ``path``: an object whose ``sources`` is a list of objects, as ``train.py
    train`` writes it (`zsnli.training.manifest_writer.write_manifests`). Raises `UsageError` when it is missing,
    not JSON or not such an object (it is copied into the base as the record of its data)."""
    if not path.is_file():
        raise UsageError(f"{path.parent}: no {DATA_SOURCES_NAME} beside {MANIFEST_NAME}; {RUN_HINT}")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not readable JSON ({json_problem(exc)}); {RUN_HINT}") from None
    sources = doc.get("sources") if isinstance(doc, dict) else None
    if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
        raise UsageError(f"{path}: not a data sources document (an object whose 'sources' is a list of objects, as "
                         "train.py train writes it)")
    return doc


def check_run(run_dir: str | Path, base_licence: str | None = None, served: Path | None = None,
              base_note: str | None = None) -> Run:
    """Check a ``train.py train`` model directory before anything is written; returns the `Run`.

    Raises `UsageError` (one line) for a missing manifest (`run_manifest_path`), files that differ from it (each
    re-hashed, `zsnli.manifest.check_model_dir`; `FILE_STATUS` says how), no `WEIGHTS_NAME`, no readable
    ``data_sources.json`` beside the manifest (`read_sources`), another head (`check_head`), leaked text
    (`leaked_text`), or no licence: ``base_licence`` when given, else the card of a local base folder
    (`zsnli.training.manifest_writer.card_licence` of ``base_model.id``); and an installed base (`refuse_installed`).
    ``served``: the served model directory, never suggested as the folder meant (`not_a_model_dir`); ``base_note``:
    the `Run`'s ``note``."""
    run_dir = Path(run_dir).expanduser()
    path = run_manifest_path(run_dir, served)
    try:
        manifest = load_manifest(path)
    except ManifestError as exc:
        raise UsageError(str(exc)) from None
    refuse_installed(run_dir, manifest)
    bad = [c for c in check_model_dir(run_dir, manifest) if c.status != "ok"]
    if bad:
        how = FILE_STATUS.get(bad[0].status, "{name} is " + bad[0].status + " against {manifest}")
        raise UsageError(f"{run_dir}: {how.format(name=bad[0].name, manifest=path)} ({len(bad)} file(s) differ); "
                         "install the exact files a run wrote")
    if WEIGHTS_NAME not in manifest["files"]:
        raise UsageError(f"{run_dir}: no {WEIGHTS_NAME} in {path}'s files; {RUN_HINT}")
    read_sources(path.parent / DATA_SOURCES_NAME)
    check_head(run_dir)
    leak = leaked_text(manifest)
    if leak:
        raise UsageError(f"{path}: {leak}; such a model is not installable")
    base = manifest.get("base_model") if isinstance(manifest.get("base_model"), dict) else {}
    licence = base_licence or (card_licence(str(base["id"])) if base.get("id") else None)
    if not licence:
        raise UsageError(f"{path}: the base model {base.get('id')!r} is not a local folder whose card (README.md) "
                         "names a licence; give it with --base-licence TEXT")
    return Run(run_dir, manifest, path, path.parent / DATA_SOURCES_NAME, licence, base_note)


def refuse_installed(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Raise `UsageError` when ``manifest`` (RUN's) is that of an installed base (it records ``converted``, as
    `base_manifest` writes it): a copy of ``model/base`` installed again would lose its run's lineage; the original
    run recorded in ``converted.from`` is named."""
    converted = manifest.get("converted")
    if isinstance(converted, dict):
        origin = converted.get("from") if isinstance(converted.get("from"), dict) else {}
        run = origin.get("dir") or "the run it was converted from"
        raise UsageError(f"{run_dir} is an installed base (its {MANIFEST_NAME} records converted by "
                         f"{converted.get('by', 'train.py install-base')} from {run}): install the run itself: "
                         f"give {run}")
