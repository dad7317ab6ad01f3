"""Where a model's scoring is written, and whose model it records (``train.py select`` and ``train.py calibrate``).

A calibration belongs to one model: it records that model's `model_sha256` (the digest `zsnli.manifest` computes
over the model files, `zsnli.manifest.model_dir_digest` of `zsnli.manifest.hash_model_dir`: the value the server
compares a calibration's ``model_sha256`` with before it uses it, `zsnli.serving.startup`), and it is written
into that model's own folder. A variant folder (a model directory carrying its own ``training_manifest.json``,
as ``model/base`` does) holds its own ``calibration.json`` and ``data_sources.json``; any other model directory's
documents lie beside it (the parent folder, where ``train.py train`` writes its manifests). So:

* `select_targets`: ``train.py select``'s ``--out`` and ``--data-sources`` default to the files in the model's
  own folder (`model_home`; the current directory when it has none);
* `check_owned`: an output (or ``train.py calibrate``'s ``--manifest-dir``) in a folder whose
  ``training_manifest.json`` records another model's ``model_sha256`` is refused in one line (`TargetError`):
  it would replace the scoring or the data sources of that other model;
* `recorded_path`: how a data file the selection read is named in ``data_sources.json``.

May import `zsnli.manifest` and `zsnli.training.cli_checks` (the error class and the checkout); no torch.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..manifest import CALIBRATION_NAME, DATA_SOURCES_NAME, MANIFEST_NAME, hash_model_dir, model_dir_digest
from ..training.cli_checks import CHECKOUT, UsageError


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


def _recorded_model(folder: Path) -> str | None:
    """The ``model_sha256`` the ``training_manifest.json`` in ``folder`` records (None without one)."""
    try:
        recorded = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8")).get("model_sha256")
    except (OSError, ValueError, AttributeError):
        return None
    return recorded if isinstance(recorded, str) else None


def check_owned(model_dir: str | Path, digest: str, targets: dict[str, Path]) -> None:
    """Refuse to write ``model_dir``'s scoring into another model's folder.

    ``targets``: ``{flag: path}``, each a file to be written (``--out``, ``--data-sources``) or, for a flag
    ending in ``-dir``, the folder itself (``--manifest-dir``). Raises `TargetError` (one line naming the flag)
    when that folder's ``training_manifest.json`` records a ``model_sha256`` other than ``digest``
    (`model_sha256` of ``model_dir``); a folder without a manifest, or one recording none, is accepted."""
    for flag, path in targets.items():
        folder = (Path(path) if flag.endswith("-dir") else Path(path).parent).resolve()
        recorded = _recorded_model(folder)
        if recorded is not None and recorded != digest:
            raise TargetError(
                f"{flag} {path} belongs to another model: {folder / MANIFEST_NAME} records model {recorded[:12]}, "
                f"--model-dir {model_dir} is {digest[:12]}; write into {_home_text(model_dir)} (the default) or "
                "a folder of no other model")


def _home_text(model_dir: str | Path) -> str:
    home = model_home(model_dir)
    return str(home) if home is not None else "the current directory"


def select_targets(model_dir: Path, out: Path | None, data_sources: Path | None) -> tuple[Path, Path, str]:
    """``(calibration path, data sources path, model_sha256)`` of ``train.py select --model-dir``.

    A path not given is the file of that name in `model_home` (``model/base/calibration.json`` for the base
    variant; ``calibration.json`` beside ``model/`` for the shipped model), or in the current directory when the
    model has no manifest. Raises `TargetError` when a path belongs to another model (`check_owned`)."""
    home = model_home(model_dir) or Path()
    out = home / CALIBRATION_NAME if out is None else out
    data_sources = home / DATA_SOURCES_NAME if data_sources is None else data_sources
    digest = model_sha256(model_dir)
    check_owned(model_dir, digest, {"--out": out, "--data-sources": data_sources})
    return out, data_sources, digest


def calibrate_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` of ``train.py`` with ``calibrate``'s ``--manifest-dir`` defaulting to ``--model-dir`` itself when
    that is a variant folder (`is_variant_folder`), as ``train.py verify`` finds it; other commands unchanged.
    Its ``calibration.json`` and ``data_sources.json`` then default to that folder too."""
    if (getattr(args, "command", None) == "calibrate" and args.manifest_dir is None and args.model_dir
            and is_variant_folder(args.model_dir)):
        args.manifest_dir = str(args.model_dir)
    return args


def recorded_path(path: str | Path) -> str:
    """How the data file ``path`` is named in ``data_sources.json``: relative to the checkout when it lies in it
    or in the shared data beside it (``../shared/data/zsc-dev/banking.jsonl``, as the shipped entries are
    written), else its absolute path (the folder given with ``--zsc-dev-dir``, wherever it is)."""
    resolved = Path(path).expanduser().resolve()
    for root in (CHECKOUT, CHECKOUT.parent / "shared"):
        if resolved.is_relative_to(root.resolve()):
            return Path(os.path.relpath(resolved, CHECKOUT)).as_posix()
    return str(resolved)
