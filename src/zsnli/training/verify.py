"""``train.py verify``: re-hash a model directory against its manifest, one line per check, then a summary.

`check_verify_args` checks ``--model-dir`` and ``--manifest`` (or finds the manifest: `default_verify_manifest`);
`run_verify` runs every check of ``--model-dir`` against ``--manifest`` (both already checked by
`zsnli.training.cli_checks.check_args`) and prints them (`check_line`) and the summary (`summary`: files counted apart
from the other checks, the manifest named as given).

May import `zsnli.manifest`, `zsnli.training.usage` (the argument checks),
`zsnli.training.encoder_install` (the state of an install) and, inside `run_verify`,
`zsnli.training.distill` (a teacher's check; no torch).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..manifest import (DATA_SOURCES_NAME, ENCODER_MANIFEST_NAME, MANIFEST_NAME, PIN_FIELD_ABSENT, PIN_FIELDS,
                        VARIANT_DIRS, FileCheck, ManifestError, check_encoder_dir, check_model_dir, check_variants,
                        is_encoder_manifest, load_manifest)
from .encoder_install import install_checks
from .usage import UsageError, check_model_dir_arg


def default_verify_manifest(model_dir: Path) -> Path:
    """The manifest ``train.py verify`` checks ``model_dir`` against when ``--manifest`` is not given: the one the
    directory carries (a shipped sentence encoder's `ENCODER_MANIFEST_NAME`, the base variant's `MANIFEST_NAME` in
    ``model/base``), else the one beside it that the run wrote (an encoder run's `ENCODER_MANIFEST_NAME`, a training
    run's `MANIFEST_NAME`), named as ``model_dir`` is (relative when it is; absolute only when a symbolic link makes
    its written parent another folder). Raises `UsageError` naming ``--model-dir`` (``--manifest`` was not given)
    when both are beside it (say which with ``--manifest``) and when there is none: what was looked for, and where."""
    for own in (model_dir / ENCODER_MANIFEST_NAME, model_dir / MANIFEST_NAME):  # model/base carries its own
        if own.is_file():
            return own
    parent = model_dir.resolve().parent
    written = Path(os.path.normpath(model_dir / os.pardir))  # the parent as the user wrote --model-dir
    parent = written if written.resolve() == parent else parent
    found = [parent / name for name in (ENCODER_MANIFEST_NAME, MANIFEST_NAME) if (parent / name).is_file()]
    if len(found) > 1:
        raise UsageError(f"--model-dir {model_dir}: both {found[0]} and {found[1]} are beside it; say which to check "
                         "with --manifest")
    if not found:
        raise UsageError(f"--model-dir {model_dir}: no manifest to check it against: no {ENCODER_MANIFEST_NAME} or "
                         f"{MANIFEST_NAME} in it or beside it (in {parent}); give --manifest PATH")
    return found[0]


def check_verify_args(args: argparse.Namespace) -> None:
    """``train.py verify``'s arguments: ``--model-dir`` a model directory (a run folder stands for its ``model/``,
    which ``args.model_dir`` becomes), and the manifest a readable one (`zsnli.manifest.load_manifest`): ``--manifest``
    when given, else the one found (`default_verify_manifest`), which ``args.manifest`` becomes. Raises `UsageError`
    (one line) naming only a flag given: a manifest found by default is named under ``--model-dir``; an empty file
    is called so (`zsnli.manifest.load_manifest`)."""
    inner = Path(args.model_dir) / "model"  # a run folder (train or encoder --output-dir): its model/
    if not (Path(args.model_dir) / "config.json").is_file() and (inner / "config.json").is_file():
        args.model_dir = str(inner)
    check_model_dir_arg(args.model_dir)
    given = args.manifest is not None
    path = Path(args.manifest) if given else default_verify_manifest(Path(args.model_dir))
    try:
        load_manifest(path)
    except ManifestError as exc:
        reason = str(exc)
        if given:
            raise UsageError(f"--manifest: {reason}; give the path of the model's {MANIFEST_NAME} (or "
                             f"{ENCODER_MANIFEST_NAME})") from None
        raise UsageError(f"--model-dir {args.model_dir}: the manifest found for it is not usable ({reason}); give "
                         "--manifest PATH") from None
    args.manifest = str(path)


def run_verify(args: argparse.Namespace) -> int:
    """Re-hash ``--model-dir`` against ``--manifest``: a training manifest (`zsnli.manifest.check_model_dir`, and the
    variant folders it declares, `zsnli.manifest.check_variants`), or a
    sentence encoder's own ``encoder_manifest.json`` (`zsnli.manifest.check_encoder_dir`: the manifest file itself
    is not one of the files it lists), plus an install a kill left unfinished or data sources that disagree with the
    installed encoder (`zsnli.training.encoder_install.install_checks`). Every check prints a line (`check_line`);
    the summary (`summary`) counts the checks of files apart from the others. Returns 1 when any check fails, else
    0."""
    manifest = load_manifest(args.manifest)
    encoder = is_encoder_manifest(manifest)
    checks = (check_encoder_dir if encoder else check_model_dir)(args.model_dir, manifest)
    if not encoder:  # model/base: its own manifest against the pin, then its files against that manifest
        checks += check_variants(args.model_dir, manifest)
    if manifest.get("teacher"):  # the teacher and its cache are not shipped: "absent" here is no failure
        from .distill import check_teacher

        checks += check_teacher(manifest["teacher"])
    checks += install_checks(args.model_dir, args.manifest)
    if not encoder:
        declared = declared_sources_check(manifest, Path(args.manifest).parent / DATA_SOURCES_NAME)
        checks += [declared] if declared.status != "absent" else []
    for check in checks:
        print(check_line(check))
    print(summary(checks, args.manifest, encoder))
    return 1 if any(c.status not in ("ok", "absent") for c in checks) else 0


def declared_sources_check(manifest: dict, path: Path) -> FileCheck:
    """Whether ``data_sources.json`` at ``path`` (beside a training manifest) declares every source the manifest
    says the model was trained from (``data.sources``, by name): ``ok``; ``missing`` when the document is absent;
    ``absent`` (no check) when the manifest names no source;
    ``mismatch`` when it is no sources document or lacks a source (the ``actual`` names the first). A deleted or
    emptied data_sources.json used to pass ``verify`` (a new-user pass): what a model was trained from is half
    of what verify vouches for."""
    import json

    name = f"{DATA_SOURCES_NAME} (declares every source of the manifest)"
    wanted = [s.get("name") if isinstance(s, dict) else s for s in (manifest.get("data") or {}).get("sources") or []]
    if not wanted:  # a manifest naming no source (not one train.py writes): nothing to hold the document to
        return FileCheck(name, "absent", None, None, file=False)
    if not path.is_file():
        return FileCheck(name, "missing", None, None, file=False)
    try:
        declared = {e.get("name") for e in json.loads(path.read_text(encoding="utf-8"))["sources"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return FileCheck(name, "mismatch", None, "not a sources document", file=False)
    undeclared = [w for w in wanted if w not in declared]
    return FileCheck(name, "mismatch" if undeclared else "ok", None, undeclared[0] if undeclared else None,
                     file=False)


def check_line(check: FileCheck) -> str:
    """One check's line: its status, its name and, where the status alone says too little, why: a pin field the
    pin lacks (`zsnli.manifest.PIN_FIELD_ABSENT`), a variant folder no ``variants`` entry pins."""
    line = f"{check.status.upper():9s} {check.name}"
    if check.actual == PIN_FIELD_ABSENT:
        return f"{line}: the field is absent from the pin (a pin records {', '.join(PIN_FIELDS)})"
    if check.name.startswith(DATA_SOURCES_NAME) and check.actual:
        return f"{line}: {check.actual}" + (" is not declared" if check.actual != "not a sources document" else "")
    if check.status == "unlisted" and not check.file and check.name.rstrip("/") in VARIANT_DIRS:
        return f"{line}: a model folder no variants entry of the manifest pins (train.py install-base pins one)"
    return line


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def summary(checks: list[FileCheck], manifest: str | Path, encoder: bool) -> str:
    """The last line: ``OK`` or ``FAIL``, how many of the files (`zsnli.manifest.FileCheck.file`) match
    ``manifest`` (named as given), and how many other checks (an install's state, a sources table, a pin's fields,
    an unpinned variant folder) there were and how many failed; for an encoder's own manifest, what it leaves out."""
    bad = [c for c in checks if c.status not in ("ok", "absent")]
    files = [c for c in checks if c.file]
    others, other_bad = len(checks) - len(files), sum(not c.file for c in bad)
    good = len(files) - (len(bad) - other_bad)
    match = "file matches" if len(files) == 1 else "files match"
    text = f"{'FAIL' if bad else 'OK'}: {good}/{len(files)} {match} {manifest}"
    if others:
        text += (f"; {other_bad} of {_count(others, 'other check')} failed" if other_bad
                 else f"; {_count(others, 'other check')} passed")
    if encoder:
        text += (" (the sentence encoder alone; `python train.py verify` checks the whole served model/, encoder "
                 "included, against training_manifest.json)")
    return text
