"""The one-line user mistake (`UsageError`) and the checks of path arguments that every command taking a folder,
a file or a model directory shares: ``train.py``'s commands (`zsnli.training.cli_checks`), its installs
(`zsnli.training.base_install`, `zsnli.training.encoder_install`) and ``train.py select``
(`zsnli.selection.cli`). Each check raises `UsageError` naming the flag and the value as the user gave it: a file
is called a file, a folder a folder, a missing path missing; a ``--device`` this torch cannot use is named too.

May import `zsnli.manifest` and `zsnli.harness.cli` (`json_problem`) at module level and
`zsnli.runtime.model_config` (standard library only) inside
`check_nli_model_dir`, `zsnli.runtime.devices` (which imports torch) inside `check_device_arg`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..harness.cli import json_problem
from ..manifest import ENCODER_MANIFEST_NAME

SHIPPED_MODEL_DIR = "model"
"""The model directory the server loads by default (``train`` never writes there unless told so)."""


class UsageError(Exception):
    """A user mistake: its message is the one line printed (exit 2)."""


def check_not_empty(value: str | Path, flag: str, hint: str) -> None:
    """Raise `UsageError` (one line naming ``flag``, ending with ``hint``) when a path was given as ``''``: ``Path('')``
    is the current directory, so an empty value would otherwise pass for ``.``. Every path check below starts here."""
    if isinstance(value, str) and value == "":
        raise UsageError(f"{flag} {value!r}: an empty value; {hint}")


def check_folder_arg(folder: str | Path, flag: str, hint: str) -> None:
    """Raise `UsageError` (one line naming ``flag`` and the value as given, ending with ``hint``) unless ``folder``
    is a directory: a file there is called a file, not a missing directory (an empty value: `check_not_empty`)."""
    check_not_empty(folder, flag, hint)
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise UsageError(f"{flag} {folder}: {'a file, not a directory' if path.exists() else 'no such directory'}; "
                         f"{hint}")


def check_file_arg(file: str | Path, flag: str, hint: str) -> None:
    """Raise `UsageError` (one line naming ``flag`` and the value as given, ending with ``hint``) unless ``file``
    is a file: a directory there is called a directory, not a missing file (`check_folder_arg`'s twin)."""
    check_not_empty(file, flag, hint)
    path = Path(file).expanduser()
    if not path.is_file():
        raise UsageError(f"{flag} {file}: {'a directory, not a file' if path.is_dir() else 'no such file'}; {hint}")


def check_output_file_arg(file: str | Path, flag: str, hint: str = "give a file path in an existing folder") -> None:
    """Raise `UsageError` (one line naming ``flag`` and the value as given, ending with ``hint``) unless ``file`` can
    be written as a file: not a directory, not a symbolic link to nothing (writing through it would create its target
    elsewhere), its folder an existing directory (not a file). Checked before any work, so a long run never fails at
    its last write."""
    check_not_empty(file, flag, hint)
    path = Path(file).expanduser()
    if path.is_dir():
        raise UsageError(f"{flag} {file}: a directory, not a file; {hint}")
    if path.is_symlink() and not path.exists():
        raise UsageError(f"{flag} {file}: a symbolic link to nothing ({os.readlink(path)}); {hint}")
    parent = path.parent
    if not parent.is_dir():
        what = "is a file, not a directory" if parent.exists() else "does not exist"
        raise UsageError(f"{flag} {file}: its folder {parent} {what}; {hint}")


def check_output_folder_arg(folder: str | Path, flag: str,
                            hint: str = "give a directory, or a path to make one") -> None:
    """Raise `UsageError` (one line naming ``flag`` and the value as given, ending with ``hint``) unless a command
    can write into ``folder``: an existing directory, or a path not there yet (the command makes it) whose nearest
    existing parent is a directory. A file there, a symbolic link to nothing (``mkdir`` refuses it: "File exists"),
    or a file or dangling link among its parents is refused before any work, so a run never fails at its first or
    last write."""
    check_not_empty(folder, flag, hint)
    path = Path(folder).expanduser()
    if path.is_dir():
        return
    if path.is_symlink() and not path.exists():
        raise UsageError(f"{flag} {folder}: a symbolic link to nothing ({os.readlink(path)}); {hint}")
    if path.exists():
        raise UsageError(f"{flag} {folder}: a file, not a directory; {hint}")
    for parent in path.parents:  # the nearest one that is there (or a link) decides
        if parent.is_dir():
            return
        if parent.exists() or parent.is_symlink():
            what = "a file, not a directory" if parent.exists() else "a symbolic link to nothing"
            raise UsageError(f"{flag} {folder}: {parent} is {what}; {hint}")


def check_model_dir_arg(model_dir: str | Path, flag: str = "--model-dir", hint: str | None = None) -> None:
    """Raise `UsageError` (one line naming ``flag``) unless ``model_dir`` is a directory (`check_folder_arg`) holding
    a config.json; ``hint`` ends the line (default: where a model directory comes from)."""
    hint = hint or f"give a model directory written by `train.py` (the shipped one is {SHIPPED_MODEL_DIR})"
    path = Path(model_dir).expanduser()
    check_folder_arg(model_dir, flag, hint)
    if not (path / "config.json").is_file():
        raise UsageError(f"{flag} {model_dir}: not a model directory (no config.json); {hint}")


def _nli_head(model_dir: str | Path, flag: str, hint: str) -> tuple[bool, str | None]:
    """`check_model_dir_arg`, then what ``model_dir`` holds: ``(True, None)`` for a sentence encoder's folder (its own
    `ENCODER_MANIFEST_NAME` or ``sentence_bert_config.json``, as ``model/embedding``), else ``(False, why)`` with why
    ``config.json``'s ``id2label`` is no 3-way NLI head by the server's rule
    (`zsnli.runtime.model_config.label_indices`: an entailment label and its alternative), None when it is one.
    An unreadable config.json raises `UsageError` named under ``flag``."""
    from ..runtime.model_config import ModelConfigError, label_indices

    check_model_dir_arg(model_dir, flag, hint)
    path = Path(model_dir).expanduser()
    if any((path / name).is_file() for name in (ENCODER_MANIFEST_NAME, "sentence_bert_config.json")):
        return True, None
    try:
        config = read_json(path / "config.json")
    except UsageError as exc:  # named under the flag it came from
        raise UsageError(f"{flag} {model_dir}: {exc}; {hint}") from None
    try:
        label_indices((config.get("id2label") if isinstance(config, dict) else None) or {})
    except ModelConfigError as exc:
        return False, str(exc)
    return False, None


def check_nli_model_dir(model_dir: str | Path, flag: str = "--model-dir", hint: str | None = None) -> None:
    """Raise `UsageError` (one line naming ``flag``) unless ``model_dir`` is an NLI cross-encoder's directory
    (`_nli_head`: a model directory whose ``id2label`` has an entailment label and its alternative). A sentence
    encoder's folder (as ``model/embedding``) is named as such. ``hint`` ends the line (default: what to give
    instead)."""
    hint = hint or f"give an NLI model directory (the shipped one is {SHIPPED_MODEL_DIR})"
    encoder, not_nli = _nli_head(model_dir, flag, hint)
    if encoder:
        raise UsageError(f"{flag} {model_dir}: this is a sentence encoder (the cosine term's model, as "
                         f"{SHIPPED_MODEL_DIR}/embedding), not a 3-way NLI model; {hint}")
    if not_nli:
        raise UsageError(f"{flag} {model_dir}: not a 3-way NLI model ({not_nli}); {hint}")


def check_encoder_dir(model_dir: str | Path, flag: str, hint: str) -> None:
    """Raise `UsageError` (one line naming ``flag``) unless ``model_dir`` is a model directory that is not a 3-way
    NLI cross-encoder (`_nli_head`: a sentence encoder's own files, or no NLI head in ``id2label``). The mirror of
    `check_nli_model_dir`: the served model given where its sentence encoder goes was taken (``select
    --embedding-dir model`` rewrote calibration.json; ``encoder --base-model model`` trained from it)."""
    encoder, not_nli = _nli_head(model_dir, flag, hint)
    if not encoder and not not_nli:
        raise UsageError(f"{flag} {model_dir}: this is a 3-way NLI cross-encoder (as the served "
                         f"{SHIPPED_MODEL_DIR}/), not a sentence encoder; {hint}")


def check_device_arg(device: str, flag: str = "--device") -> None:
    """Raise `UsageError` (one line naming ``flag`` and the value) unless this torch can use ``device``
    (`zsnli.runtime.devices.device_problem`: ``cuda`` on a machine without a GPU is refused here, before any model
    loads, not by torch once it has). Imports torch."""
    from ..runtime.devices import device_problem

    problem = device_problem(device, flag, " ")
    if problem:
        raise UsageError(problem)


def read_json(path: Path) -> Any:
    """The JSON document in the file ``path``. Raises `UsageError` (one line naming ``path``) when it cannot be read
    or parsed (an empty file called so: `zsnli.harness.cli.json_problem`)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not readable JSON ({json_problem(exc)})") from None
