"""What a run folder was started with, so that resuming it under another objective or base model is refused.

A checkpoint holds weights, optimiser state and `transformers.TrainingArguments`; it does not hold what
the loss was (in-batch or margin-MSE, a distillation's alpha and temperature, the teacher's scores) or
which base model the run started from. A command that resumes a folder with another of those would train
one run under two objectives, or record another base model than the one its first steps started from, and
the manifest would say only the second. `check_run_settings` writes ``run_settings.json`` when a run
starts and, when it resumes, refuses settings that differ from it (`RunSettingsMismatch`, one line).
A folder from before this record is resumed as it is and given the resuming command's settings; a record
from before a key of `LATER_KEYS` was kept gains that key from the resuming command.

May import: the standard library only.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger(__name__)

SETTINGS_FILE = "run_settings.json"

#: Keys a record may lack because it was written before they were kept (``base_model``: since 2026-12-07).
#: A resume gives such a record the command's value (logged) instead of refusing it; any other key the
#: record lacks counts as null, so adding it is a change.
LATER_KEYS = ("base_model",)


class RunSettingsMismatch(ValueError):
    """The run folder to resume was started with other loss settings or another base model than the resuming
    command gives."""


def check_run_settings(run_dir: str | Path, settings: Mapping[str, Any], resuming: bool, write: bool = True) -> None:
    """Refuse to resume ``run_dir`` under other ``settings``; record them when the run starts.

    ``settings``: JSON-able values that must stay fixed for a run's life (its loss, the loss's weights,
    the identity of a teacher's scores, the base model); compared after a JSON round trip, so a tuple equals
    its list; a key of `LATER_KEYS` that the record lacks is given this command's value (logged, recorded).
    ``resuming``: this command continues a checkpoint of ``run_dir``. ``write``: this process writes the
    record (False on every rank but 0 of a launched job). Raises `RunSettingsMismatch` naming the first
    setting (in sorted order) that differs from the record, with both values.
    """
    path = Path(run_dir) / SETTINGS_FILE
    wanted = json.loads(json.dumps(dict(settings), sort_keys=True))
    if resuming and path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        unrecorded = [k for k in LATER_KEYS if k in wanted and k not in saved]
        differ = [k for k in sorted(set(saved) | set(wanted))
                  if k not in unrecorded and saved.get(k) != wanted.get(k)]
        if differ and differ[0] == "base_model":
            raise RunSettingsMismatch(
                f"{run_dir} was started from another base model ({base_text(saved['base_model'])}) than this "
                f"command's ({base_text(wanted['base_model'])}): give --base-model the run's own base or another "
                "--output-dir")
        if differ:
            k = differ[0]
            raise RunSettingsMismatch(
                f"{run_dir} was started with {k} {json.dumps(saved.get(k))}, this command gives "
                f"{json.dumps(wanted.get(k))}: resume it with the run's own settings or give another --output-dir")
        if not unrecorded:
            return
        log.info("%s's %s has no %s (written before it was kept): recording this command's", run_dir,
                 SETTINGS_FILE, ", ".join(unrecorded))
    elif resuming:
        log.info("%s has no %s (a run folder from before the record): resuming it as it is, under this "
                 "command's settings", run_dir, SETTINGS_FILE)
    if write:  # whole or not at all: the other ranks of a launched job read it meanwhile
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{SETTINGS_FILE}.{os.getpid()}")
        partial.write_text(json.dumps(wanted, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(partial, path)


def base_text(base: Any) -> str:
    """A recorded base model (`base_identity`) in words: ``weights sha256 <12 hex>`` or ``<id>@<revision>``."""
    if not isinstance(base, dict):
        return json.dumps(base)
    if base.get("weights_sha256"):
        return f"weights sha256 {str(base['weights_sha256'])[:12]}"
    return f"{base.get('id')}@{base.get('revision') or 'no pinned revision'}"


def base_identity(base_model: str, revision: str | None, weights_sha256: str | None) -> dict[str, Any]:
    """The base model a run starts from, as its record keeps it: ``{"weights_sha256": ...}`` when the weights
    were hashed (a local folder: the same weights under another path, on another machine, resume), else
    ``{"id": base_model, "revision": revision}`` (a hub model, not downloaded to hash it; a sharded local folder,
    given here by its resolved path)."""
    return {"weights_sha256": weights_sha256} if weights_sha256 else {"id": base_model, "revision": revision}


def encoder_settings(objective: Mapping[str, Any], scale: float, negatives: str, max_length: int,
                     teacher_cache: Mapping[str, Any] | None, base: Mapping[str, Any]) -> dict[str, Any]:
    """What a ``train.py encoder`` run keeps from its first step to its last: its loss and margin weight
    (``objective``), the scale, the negatives, the text length, the sha256 of the teacher's score cache and
    the base model (``base``: `base_identity`)."""
    return {**objective, "scale": scale, "negatives": negatives, "max_length": max_length,
            "teacher_scores_sha256": teacher_cache["sha256"] if teacher_cache else None, "base_model": dict(base)}


def nli_settings(max_length: int, distill: Any, teacher_cache: Mapping[str, Any] | None,
                 base: Mapping[str, Any]) -> dict[str, Any]:
    """What a ``train.py train`` run keeps from its first step to its last: the pair length, the base model
    (``base``: `base_identity`) and, when it distils (``distill``: a `zsnli.training.distill.Distillation` or
    None), the loss's alpha and temperature, the augmented pairs' share and the sha256 of the teacher's cache
    file. ``max_steps`` and the plateau rule may change on resume (with a ``--note``)."""
    soft = None if distill is None else {"alpha": distill.alpha, "temperature": distill.temperature,
                                         "augment": distill.augment,
                                         "teacher_scores_sha256": (teacher_cache or {}).get("sha256")}
    return {"max_length": max_length, "distillation": soft, "base_model": dict(base)}
