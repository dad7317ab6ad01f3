"""What a run folder was started with, so that resuming it under another objective is refused.

A checkpoint holds weights, optimiser state and `transformers.TrainingArguments`; it does not hold what
the loss was (in-batch or margin-MSE, a distillation's alpha and temperature, the teacher's scores). A
command that resumes a folder with another of those would train one run under two objectives and
record only the second in the manifest. `check_run_settings` writes ``run_settings.json`` when a run
starts and, when it resumes, refuses settings that differ from it (`RunSettingsMismatch`, one line).
A folder from before this record is resumed as it is and given the resuming command's settings.

May import: the standard library only.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger(__name__)

SETTINGS_FILE = "run_settings.json"


class RunSettingsMismatch(ValueError):
    """The run folder to resume was started with other loss settings than the resuming command gives."""


def check_run_settings(run_dir: str | Path, settings: Mapping[str, Any], resuming: bool, write: bool = True) -> None:
    """Refuse to resume ``run_dir`` under other ``settings``; record them when the run starts.

    ``settings``: JSON-able values that must stay fixed for a run's life (its loss, the loss's weights,
    the identity of a teacher's scores); compared after a JSON round trip, so a tuple equals its list.
    ``resuming``: this command continues a checkpoint of ``run_dir``. ``write``: this process writes the
    record (False on every rank but 0 of a launched job). Raises `RunSettingsMismatch` naming the first
    setting (in sorted order) that differs from the record, with both values.
    """
    path = Path(run_dir) / SETTINGS_FILE
    wanted = json.loads(json.dumps(dict(settings), sort_keys=True))
    if resuming and path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        differ = [k for k in sorted(set(saved) | set(wanted)) if saved.get(k) != wanted.get(k)]
        if differ:
            k = differ[0]
            raise RunSettingsMismatch(
                f"{run_dir} was started with {k} {json.dumps(saved.get(k))}, this command gives "
                f"{json.dumps(wanted.get(k))}: resume it with the run's own settings or give another --output-dir")
        return
    if resuming:
        log.info("%s has no %s (a run folder from before the record): resuming it as it is, under this "
                 "command's settings", run_dir, SETTINGS_FILE)
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(wanted, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def encoder_settings(objective: Mapping[str, Any], scale: float, negatives: str, max_length: int,
                     teacher_cache: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a ``train.py encoder`` run keeps from its first step to its last: its loss and margin weight
    (``objective``), the scale, the negatives, the text length and the sha256 of the teacher's score cache."""
    return {**objective, "scale": scale, "negatives": negatives, "max_length": max_length,
            "teacher_scores_sha256": teacher_cache["sha256"] if teacher_cache else None}


def nli_settings(max_length: int, distill: Any, teacher_cache: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a ``train.py train`` run keeps from its first step to its last: the pair length and, when it
    distils (``distill``: a `zsnli.training.distill.Distillation` or None), the loss's alpha and temperature,
    the augmented pairs' share and the sha256 of the teacher's cache file. ``max_steps`` and the plateau
    rule may change on resume (with a ``--note``)."""
    soft = None if distill is None else {"alpha": distill.alpha, "temperature": distill.temperature,
                                         "augment": distill.augment,
                                         "teacher_scores_sha256": (teacher_cache or {}).get("sha256")}
    return {"max_length": max_length, "distillation": soft}
