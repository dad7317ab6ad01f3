"""Where a model's scoring is written, and whose model it records (``train.py select`` and ``train.py calibrate``).

A calibration belongs to one model: it records that model's `model_sha256` (the digest `zsnli.manifest` computes
over the model files, `zsnli.manifest.model_dir_digest` of `zsnli.manifest.hash_model_dir`: the value the server
compares a calibration's ``model_sha256`` with before it uses it, `zsnli.serving.startup`), and it is written
into that model's own folder. A variant folder (a model directory carrying its own ``training_manifest.json``,
as ``model/base`` does) holds its own ``calibration.json`` and ``data_sources.json``; any other model directory's
documents lie beside it (the parent folder, where ``train.py train`` writes its manifests). So:

* `select_targets`: ``train.py select``'s ``--out`` and ``--data-sources`` default to the files in the model's
  own folder (`model_home`; the current directory when it has none);
* `check_owned`: an output (or ``train.py calibrate``'s ``--manifest-dir``) is refused in one line
  (`TargetError`) when the server of ANOTHER model would read it as that model's calibration or data sources:
  its folder holds a model (``config.json``: another NLI model, a variant folder, the sentence encoder in
  ``model/embedding``) other than ``--model-dir``, or the manifest that governs the folder (inside it, else
  beside it: `zsnli.manifest.beside_model`, the server's lookup) describes another ``model_sha256``;
* `recorded_path`: how a data file the selection read is named in ``data_sources.json``;
* `calibrate_defaults`: ``train.py calibrate``'s manifest folder in a variant folder, and the preset and base model
  ``calibrate`` and ``evaluate`` rebuild the model's data from, read from the model's own manifest (`model_home`).

May import `zsnli.manifest`, `zsnli.harness.cli` (`json_problem`), `zsnli.training.cli_checks` (the checkout),
`zsnli.training.usage` (the error class and the model check) and
`zsnli.training.presets` (the preset names); no torch.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Collection

from ..harness.cli import json_problem
from ..manifest import (CALIBRATION_NAME, DATA_SOURCES_NAME, ENCODER_MANIFEST_NAME, MANIFEST_NAME, beside_model,
                        hash_model_dir, model_dir_digest)
from ..training.cli_checks import CHECKOUT
from ..training.usage import UsageError, check_nli_model_dir
from ..training.presets import DEFAULT_PRESET, PRESETS


class TargetError(UsageError, ValueError):
    """An output that belongs to another model: its message is the one line printed (exit 2). A `UsageError` for
    ``train.py``'s commands and a ``ValueError`` for ``train.py select``'s argument checks."""


def model_sha256(model_dir: str | Path) -> str:
    """The digest of ``model_dir``'s model files (hex sha256, `zsnli.manifest.model_dir_digest` of
    `zsnli.manifest.hash_model_dir`: the sentence encoder, variant folders and the metadata documents left out):
    what a calibration of that model records and the server compares. Reads every model file once.
    Raises ``ManifestError`` when the directory does not exist."""
    return model_dir_digest(hash_model_dir(model_dir))


def is_variant_folder(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` carries its own ``training_manifest.json`` (``model/base``, or a run whose manifests
    were moved into its model directory), so that its scoring and data sources live inside it."""
    return (Path(model_dir) / MANIFEST_NAME).is_file()


def model_home(model_dir: str | Path) -> Path | None:
    """The folder of ``model_dir``'s own documents: ``model_dir`` itself for a variant folder
    (`is_variant_folder`), else its parent when that holds a ``training_manifest.json``, else None."""
    model_dir = Path(model_dir)
    if is_variant_folder(model_dir):
        return model_dir
    parent = model_dir.resolve().parent
    return parent if (parent / MANIFEST_NAME).is_file() else None


def _described_model(manifest: Path) -> str | None:
    """The ``model_sha256`` the training manifest ``manifest`` describes: its ``model_sha256``, else the digest of
    its ``files`` table (`zsnli.manifest.model_dir_digest`); None without a readable manifest or either field."""
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("model_sha256"), str):
        return doc["model_sha256"]
    try:
        return model_dir_digest(doc["files"]) if doc.get("files") else None
    except (AttributeError, KeyError, TypeError):  # no file table of {name: {"sha256"}}: it describes none
        return None


def other_model(folder: str | Path, model_dir: str | Path, digest: str) -> str | None:
    """Why a calibration or data sources document in ``folder`` would be another model's, or None when it would be
    ``model_dir``'s (``digest``: its `model_sha256`) or no model's. A server reads a model's documents inside its
    model directory, else beside it (`zsnli.manifest.beside_model`), so ``folder`` is another model's when it
    holds a model (``config.json``) and is not ``model_dir``, or when the training manifest governing it (its own
    ``training_manifest.json``, else its parent's) describes a ``model_sha256`` other than ``digest``."""
    folder = Path(folder).resolve()
    if (folder / "config.json").is_file() and folder != Path(model_dir).resolve():
        kind = "a sentence encoder" if (folder / ENCODER_MANIFEST_NAME).is_file() else "a model directory"
        return f"{folder} is {kind} (config.json) other than --model-dir {model_dir}"
    manifest = beside_model(folder, MANIFEST_NAME)
    described = _described_model(manifest)
    if described is not None and described != digest:
        return f"{manifest} describes model {described[:12]}, --model-dir {model_dir} is {digest[:12]}"
    return None


def check_owned(model_dir: str | Path, digest: str, targets: dict[str, Path],
                given: Collection[str] | None = None) -> None:
    """Refuse to write ``model_dir``'s scoring where another model's server would read it (`other_model`): the one
    rule of ``train.py select`` (``--out``, ``--data-sources``) and ``train.py calibrate`` (``--out``,
    ``--manifest-dir``).

    ``targets``: ``{flag: path}``, each a file to be written or, for a flag ending in ``-dir``, the folder itself.
    ``given``: the flags the user gave (None: all of them); a path of a flag not given is its default, and its
    refusal names the model directory and the manifest found for it instead (`_default_refused`).
    Raises `TargetError` (one line naming the flag and why) for the first path in another model's folder."""
    for flag, path in targets.items():
        folder = Path(path) if flag.endswith("-dir") else Path(path).parent
        why = other_model(folder, model_dir, digest)
        if why is None:
            continue
        if given is not None and flag not in given:
            raise TargetError(_default_refused(flag, folder, model_dir, digest))
        home = model_home(model_dir) or Path()
        default = f"{_home_text(model_dir)} (the default) or " if other_model(home, model_dir, digest) is None else ""
        raise TargetError(f"{flag} {path} belongs to another model: {why}; write into {default}a folder of no other "
                          "model")


def _default_refused(flag: str, folder: Path, model_dir: str | Path, digest: str) -> str:
    """The refusal of ``flag``'s default ``folder`` (`check_owned`): it names ``--model-dir`` and what was found for
    it (another model's folder, or the training manifest in or beside it that describes other files), and what to
    do: restore the files, or give ``flag`` (``--out`` and ``--data-sources`` together)."""
    give = ("give --manifest-dir DIR holding this model's own training_manifest.json" if flag == "--manifest-dir"
            else "give --out and --data-sources in a folder of no other model")
    folder = folder.resolve()
    if (folder / "config.json").is_file() and folder != Path(model_dir).resolve():
        return (f"--model-dir {model_dir}: its documents would go to {folder}, the folder of another model "
                f"(config.json); {give}")
    manifest = beside_model(folder, MANIFEST_NAME)
    where = "in" if manifest.parent == Path(model_dir).resolve() else "beside"
    described = _described_model(manifest) or ""
    return (f"--model-dir {model_dir}: the {MANIFEST_NAME} found {where} it ({manifest}) describes model "
            f"{described[:12]}, but its files are {digest[:12]}: the files changed since (`train.py verify --model-dir "
            f"{model_dir}` names them) or the manifest is another model's; restore the files, or {give}")


def _home_text(model_dir: str | Path) -> str:
    home = model_home(model_dir)
    return str(home) if home is not None else "the current directory"


def select_targets(model_dir: Path, out: Path | None, data_sources: Path | None) -> tuple[Path, Path, str]:
    """``(calibration path, data sources path, model_sha256)`` of ``train.py select --model-dir``.

    A path not given is the file of that name in `model_home` (``model/base/calibration.json`` for the base
    variant; ``calibration.json`` beside ``model/`` for the shipped model), or in the current directory when the
    model has no manifest. Raises `TargetError` when a path belongs to another model (`check_owned`)."""
    home = model_home(model_dir) or Path()
    given = [flag for flag, value in (("--out", out), ("--data-sources", data_sources)) if value is not None]
    out = home / CALIBRATION_NAME if out is None else out
    data_sources = home / DATA_SOURCES_NAME if data_sources is None else data_sources
    digest = model_sha256(model_dir)
    check_owned(model_dir, digest, {"--out": out, "--data-sources": data_sources}, given)
    return out, data_sources, digest


def calibrate_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` of ``train.py`` with ``calibrate``'s ``--manifest-dir`` defaulting to ``--model-dir`` itself when
    that is a variant folder (`is_variant_folder`), as ``train.py verify`` finds it (its ``calibration.json`` and
    ``data_sources.json`` then default to that folder too), and ``calibrate``'s and ``evaluate``'s ``--preset`` and
    ``--base-model`` defaulting to those the model was trained with (`trained_with`); other commands unchanged.
    ``args.manifest_given`` records whether ``--manifest-dir`` was given (every command that has it), so a
    refusal names the flag only then. ``calibrate``'s and ``evaluate``'s ``--model-dir`` is checked first
    (`zsnli.training.usage.check_nli_model_dir`: a folder, a model, an NLI model, not the sentence encoder).
    Raises `UsageError` for those, and as `trained_with`."""
    command = getattr(args, "command", None)
    args.manifest_given = getattr(args, "manifest_dir", None) is not None
    if command in ("calibrate", "evaluate"):
        check_nli_model_dir(args.model_dir)
    if command == "calibrate" and args.manifest_dir is None and args.model_dir and is_variant_folder(args.model_dir):
        args.manifest_dir = str(args.model_dir)
    if command in ("calibrate", "evaluate"):
        trained_with(args)
    return args


def manifest_text(args: argparse.Namespace, path: Path) -> str:
    """How a refusal names the training manifest ``path`` of ``args.model_dir``: by ``--manifest-dir`` when it was
    given (``args.manifest_given``, `calibrate_defaults`), else as found in or beside ``--model-dir``."""
    if getattr(args, "manifest_given", False):
        return f"the {MANIFEST_NAME} in --manifest-dir {args.manifest_dir} ({path})"
    where = "in" if path.resolve().parent == Path(args.model_dir).resolve() else "beside"
    return f"the {MANIFEST_NAME} {where} --model-dir {args.model_dir} ({path})"


def _recorded(args: argparse.Namespace, manifest: Path | None) -> dict:
    """The training manifest ``manifest`` as a dict ({} when there is none). Raises `UsageError` naming it
    (`manifest_text`) when it exists but is not a readable JSON object: it records what the model was trained with,
    and falling back to a default preset would rebuild another model's data."""
    if manifest is None or not manifest.exists():
        return {}
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        why = (f"not readable JSON ({json_problem(exc)})" if isinstance(exc, ValueError)
               else f"unreadable ({exc.strerror or exc})")
    else:
        if isinstance(doc, dict):
            return doc
        why = f"not a JSON object (a {type(doc).__name__})"
    raise UsageError(f"{manifest_text(args, manifest)} is {why}; it records the preset and base model the model was "
                     "trained with: restore it (the copy its run wrote, or git)")


def trained_with(args: argparse.Namespace) -> None:
    """Fill ``args.preset`` and ``args.base_model`` (``calibrate`` and ``evaluate``; None when not given) from the
    training manifest that describes ``--model-dir``: ``--manifest-dir``'s, else the one in `model_home` (inside a
    variant folder such as ``model/base``, else beside the model directory: the manifest ``train.py select`` writes
    beside). Its ``preset`` and ``base_model.id`` are what ``train.py train`` recorded; the base model is only a
    name here (neither command loads it), so ``args.base_model_recorded`` is set to skip the check of a base given
    by hand. Without a manifest or a recorded preset, `zsnli.training.presets.DEFAULT_PRESET`. ``calibrate``'s
    ``--preset``, when given, must be the recorded one (its hold-out is rebuilt from it): checked here, before any
    data or hub is read. Raises `UsageError` when the manifest exists but is unreadable (`_recorded`), records a
    preset that is none of `zsnli.training.presets.PRESETS`, or (``calibrate``) another preset than ``--preset``."""
    args.base_model_recorded = False
    if args.preset is not None and args.command != "calibrate":
        return
    home = Path(args.manifest_dir) if args.manifest_dir else model_home(args.model_dir) if args.model_dir else None
    manifest = home / MANIFEST_NAME if home is not None else None
    doc = _recorded(args, manifest)
    recorded = doc.get("preset")
    if args.preset is not None:
        if recorded is not None and recorded != args.preset:
            raise UsageError(f"--preset {args.preset}: the model was trained with preset {recorded!r} (recorded in "
                             f"{manifest_text(args, manifest)}), and calibrate rebuilds that preset's hold-out; leave "
                             "--preset out (it defaults to the recorded one)")
        return
    if recorded is None:
        args.preset = DEFAULT_PRESET
        return
    if recorded not in PRESETS:
        raise UsageError(f"{manifest_text(args, manifest)} records preset {recorded!r}, none of "
                         f"{', '.join(PRESETS)}; give --preset (and --data-dir) the model was trained with")
    args.preset = recorded
    base = doc.get("base_model") if isinstance(doc.get("base_model"), dict) else {}
    if args.base_model is None and isinstance(base.get("id"), str) and base["id"]:
        args.base_model, args.base_model_recorded = base["id"], True


def recorded_path(path: str | Path) -> str:
    """How the data file ``path`` is named in ``data_sources.json``: relative to the checkout when it lies in it
    or in the shared data beside it (``../shared/data/zsc-dev/banking.jsonl``, as the shipped entries are
    written), else its absolute path (the folder given with ``--zsc-dev-dir``, wherever it is)."""
    resolved = Path(path).expanduser().resolve()
    for root in (CHECKOUT, CHECKOUT.parent / "shared"):
        if resolved.is_relative_to(root.resolve()):
            return Path(os.path.relpath(resolved, CHECKOUT)).as_posix()
    return str(resolved)
