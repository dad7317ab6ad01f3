"""Ship a ``train.py encoder`` run as the served sentence encoder (``train.py install-encoder``).

Copies the run's encoder into ``model/embedding`` with its `ENCODER_MANIFEST_NAME`, replaces
``training_manifest.json``'s table of that directory (``pretrained_artifacts.embedding``, a reused
artifact, becomes ``embedding``, `zsnli.training.manifest_writer.trained_embedding`: base, interpolation,
data, teacher, files), and declares the run's training sets in ``data_sources.json``, with the teacher's
weights, cache and sets when a margin-MSE run learnt from one (the entries of an earlier installed encoder
are dropped). ``calibration.json`` pins the old encoder's digest, so the server refuses
to start until the scoring is re-chosen on the new one (``train.py select``): the command says so.

Everything is checked before anything changes: the run against its own manifest, the model directory
against ``training_manifest.json``. Exactly the files the run's manifest lists are copied (`_copy_listed`),
each hashed again once copied; a listed name that is absolute, holds ``..`` or reaches through a symbolic
link, and any symbolic link in the run's ``model/``, is refused (as pip's wheel installer and
huggingface_hub refuse paths that escape their tree). The new directory is staged beside the model
directory, never inside it (`staging_dirs`), so a killed install leaves nothing the server, ``train.py
verify`` or a rerun finds in the model directory. Then `swap_and_commit` (the order ``install-base`` uses
too): the old ``embedding/`` set aside, the staged one renamed into place, ``training_manifest.json`` written
(`zsnli.manifest.write_json`: atomic) and ``data_sources.json`` declared, and only then the old encoder
deleted. A failure before the manifest is written puts the old encoder back at once; a killed install is
finished or rolled back by the next (`_roll_back`: the manifest written means the new encoder stays and its
sets are declared again, else the old encoder returns). ``data_sources.json`` must parse before anything
changes, since it is rewritten after the manifest.

May import `zsnli.manifest` and `zsnli.training.manifest_writer`; no torch.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from ..manifest import (DATA_SOURCES_NAME, EMBEDDING_SUBDIR, MANIFEST_NAME, ManifestError, check_model_dir,
                        hash_model_dir, load_manifest, sha256_file, write_json)
from .manifest_writer import (
    ENCODER_MANIFEST_NAME, TEACHER_KEY, TRAINED_EMBEDDING_KEY, LineageError, declare_sources, teacher_sources,
    trained_embedding,
)

ENCODER_SOURCE_PREFIX = "sentence-encoder:"
"""``data_sources.json`` names of the encoder's training sets (the cross-encoder's own entries keep theirs)."""


def install_encoder(run_dir: str | Path, model_dir: str | Path, manifest_dir: str | Path) -> dict[str, Any]:
    """Make the encoder of ``run_dir`` (a ``train.py encoder --output-dir``) the served one under ``model_dir``.

    ``run_dir`` must hold ``model/`` and `ENCODER_MANIFEST_NAME` whose ``files`` match it;
    ``manifest_dir`` holds ``training_manifest.json`` (whose ``files`` must match ``model_dir``) and
    ``data_sources.json``. Returns the manifest's new ``embedding`` table. Raises `ManifestError` (one
    line) for a missing or unreadable manifest, a run or model directory whose files differ from its
    manifest, a run manifest without its data or base, or a ``data_sources.json`` that is not a sources
    document; nothing is changed then. Raises what writing raises (``OSError``) once the swap began, the old
    encoder back in place unless the manifest was written (`swap_and_commit`).
    """
    run_dir, model_dir, manifest_dir = Path(run_dir), Path(model_dir), Path(manifest_dir)
    _roll_back(model_dir, manifest_dir)  # what a killed install left
    run = load_manifest(run_dir / ENCODER_MANIFEST_NAME)
    _refuse_links(run_dir / "model")
    listed = run.get("files") if isinstance(run.get("files"), dict) else {}
    for name in listed:  # a name escaping the run is refused before anything is read
        _listed_path(run_dir / "model", name)
    _require_match(run_dir / "model", run, ENCODER_MANIFEST_NAME)
    manifest = load_manifest(manifest_dir / MANIFEST_NAME)
    _require_match(model_dir, manifest, MANIFEST_NAME, only_outside=EMBEDDING_SUBDIR)
    _check_sources_file(manifest_dir / DATA_SOURCES_NAME)
    staged = staging_dirs(model_dir)[0]
    try:
        sources = _encoder_sources(run)
        _copy_listed(run_dir, run, staged)
        table = trained_embedding(staged.parent, subdir=staged.name)
    except (KeyError, TypeError, AttributeError, LineageError) as exc:
        shutil.rmtree(staged, ignore_errors=True)
        raise ManifestError(f"{run_dir / ENCODER_MANIFEST_NAME}: not a train.py encoder manifest ({exc})") from exc
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    manifest.get("pretrained_artifacts", {}).pop(EMBEDDING_SUBDIR, None)
    manifest[TRAINED_EMBEDDING_KEY] = table
    swap_and_commit(staged, model_dir, EMBEDDING_SUBDIR, commit=lambda: _commit(manifest_dir, manifest, sources),
                    roll_back=lambda: _roll_back(model_dir, manifest_dir))
    return table


def swap_and_commit(staged: Path, model_dir: Path, sub: str, commit: Callable[[], None],
                    roll_back: Callable[[], None]) -> None:
    """Put the built ``staged`` folder in place as ``model_dir/sub`` and commit it: the order of ``install-encoder``
    and ``install-base`` (`zsnli.training.base_install.swap_in`).

    The old ``sub`` set aside (`set_aside`), ``staged`` renamed into place, ``commit()`` (the manifest writes: the
    install counts as done once its manifest is written), then the old one deleted. Any exception on the way
    calls ``roll_back()`` (a `recover` that keeps the new ``sub`` only when the manifest was written) and is
    raised again; a killed install is left to the next one's ``roll_back``. Raises what ``commit`` raises."""
    target, old = Path(model_dir) / sub, staging_dirs(model_dir, sub)[1]
    try:
        set_aside(target, old)
        staged.rename(target)
        commit()
    except BaseException:
        roll_back()
        raise
    shutil.rmtree(old, ignore_errors=True)


def _commit(manifest_dir: Path, manifest: dict[str, Any], sources: list[dict[str, Any]]) -> None:
    """Write ``training_manifest.json`` (the commit point), then declare the encoder's ``sources``."""
    write_json(manifest_dir / MANIFEST_NAME, manifest)
    declare_sources(manifest_dir, sources, replace_prefix=ENCODER_SOURCE_PREFIX)


def _committed(model_dir: Path, manifest_dir: Path) -> bool:
    """Whether ``training_manifest.json``'s ``embedding`` table lists exactly the files now in
    ``model_dir/embedding`` (the install that put them there wrote its manifest); False when it is unreadable."""
    target = model_dir / EMBEDDING_SUBDIR
    try:
        table = load_manifest(manifest_dir / MANIFEST_NAME).get(TRAINED_EMBEDDING_KEY)
        return isinstance(table, dict) and target.is_dir() and table.get("files") == hash_model_dir(target)
    except ManifestError:
        return False


def _roll_back(model_dir: Path, manifest_dir: Path) -> None:
    """Finish or undo an install stopped between its first rename and its end (`recover`): with the manifest
    written (`_committed`) the new encoder stays and its sets are declared again (its own `ENCODER_MANIFEST_NAME`
    names them; declaring twice changes nothing), else the old encoder (or none) is put back. Raises what
    reading or writing ``data_sources.json`` raises in the first case."""
    done = staging_dirs(model_dir)[1].exists() and _committed(model_dir, manifest_dir)
    if done:
        installed = load_manifest(model_dir / EMBEDDING_SUBDIR / ENCODER_MANIFEST_NAME)
        declare_sources(manifest_dir, _encoder_sources(installed), replace_prefix=ENCODER_SOURCE_PREFIX)
    recover(model_dir, committed=lambda: done)


def _check_sources_file(path: Path) -> None:
    """Raise `ManifestError` unless ``data_sources.json`` at ``path`` is absent or an object whose ``sources`` is a
    list of objects (`zsnli.training.manifest_writer.declare_sources` rewrites it after the manifest is written, so it
    is read before anything changes)."""
    if not path.exists():
        return
    try:
        sources = json.loads(path.read_text(encoding="utf-8")).get("sources", [])
    except (OSError, ValueError, AttributeError) as exc:
        raise ManifestError(f"{path}: not a data sources document ({' '.join(str(exc).split())})") from None
    if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
        raise ManifestError(f"{path}: not a data sources document ('sources' is not a list of objects)")


def staging_dirs(model_dir: Path, sub: str = EMBEDDING_SUBDIR) -> tuple[Path, Path]:
    """``(staged, old)``: where the new ``<model_dir>/<sub>`` (``embedding``, or ``base`` for
    `zsnli.training.base_install`) is built and where the old one waits during the swap, both beside
    ``model_dir`` (``.model.<sub>.staged`` / ``.old``: same filesystem, so the renames are atomic), never inside
    the checked tree (both ignored by git: ``.gitignore``)."""
    model_dir = Path(model_dir).resolve()
    stem = model_dir.parent / f".{model_dir.name}.{sub}"
    return Path(f"{stem}.staged"), Path(f"{stem}.old")


NO_PREVIOUS = ".none"
"""The file `set_aside` leaves in the aside folder when there was no ``sub`` before the install (so `recover`
clears a new one the install did not commit instead of restoring nothing)."""


def set_aside(target: Path, old: Path) -> None:
    """Rename ``target`` to ``old`` (one rename: same filesystem); with no ``target``, create ``old`` holding only
    `NO_PREVIOUS`. Either way ``old`` then tells `recover` what to restore."""
    if target.exists():
        target.rename(old)
    else:
        old.mkdir(parents=True)
        (old / NO_PREVIOUS).touch()


def recover(model_dir: Path, sub: str = EMBEDDING_SUBDIR, committed: Callable[[], bool] | None = None) -> None:
    """Clear what a killed install of ``<model_dir>/<sub>`` left: its staged copy (and the in-tree
    ``.embedding.new`` of installs before issue 48), then the old ``sub`` set aside (`staging_dirs`), if any.

    That old one is deleted when the new ``sub`` is in place and ``committed()`` says it was committed (its
    manifest written, `_committed` for ``install-encoder``; None: being in place is enough). Otherwise (the kill
    came before that point) the new ``sub`` is removed and the old one renamed back, or none left when there was
    none before (`NO_PREVIOUS`): the model directory is as before that install."""
    staged, old = staging_dirs(model_dir, sub)
    shutil.rmtree(staged, ignore_errors=True)
    shutil.rmtree(Path(model_dir) / f".{sub}.new", ignore_errors=True)
    if not old.exists():
        return
    target = Path(model_dir) / sub
    if target.exists() and (committed is None or committed()):
        shutil.rmtree(old, ignore_errors=True)
        return
    shutil.rmtree(target, ignore_errors=True)
    if (old / NO_PREVIOUS).is_file():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.rename(target)


def _refuse_links(root: Path) -> None:
    """Raise `ManifestError` naming the first symbolic link under ``root`` (file or directory, never followed)."""
    for where, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs + files):
            if os.path.islink(os.path.join(where, name)):
                rel = Path(where, name).relative_to(root).as_posix()
                raise ManifestError(f"{root}: {rel} is a symbolic link; an installed encoder holds regular files only "
                                    "(copy the file into the run instead)")


def _listed_path(root: Path, name: Any) -> Path:
    """``root / name`` for a manifest's file name that stays inside ``root``: a relative POSIX path without
    ``..``, ``.`` or empty parts and no backslash; else `ManifestError`."""
    parts = PurePosixPath(name).parts if isinstance(name, str) else ()
    if (not parts or PurePosixPath(name).is_absolute() or "\\" in name
            or any(p in ("", ".", "..") for p in parts) or name != "/".join(parts)):
        raise ManifestError(f"{ENCODER_MANIFEST_NAME} lists {name!r}: not a path inside the run's model/")
    return root.joinpath(*parts)


def _copy_listed(run_dir: Path, run: dict[str, Any], staged: Path) -> None:
    """Copy exactly the files ``run['files']`` lists from ``run_dir/model`` (each a regular file, reached
    through no link) and the run's manifest into ``staged``, each copy hashed against the manifest."""
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    source = run_dir / "model"
    for name, entry in run["files"].items():
        src, dst = _listed_path(source, name), _listed_path(staged, name)
        hops = [source.joinpath(*PurePosixPath(name).parts[:k]) for k in range(1, len(PurePosixPath(name).parts))]
        if not stat.S_ISREG(os.lstat(src).st_mode) or any(os.path.islink(h) for h in hops):
            raise ManifestError(f"{source}: {name} is not a regular file inside the run")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst, follow_symlinks=False)
        os.chmod(dst, 0o644)
        if sha256_file(dst) != entry["sha256"]:
            raise ManifestError(f"{source}: {name} changed while it was copied (its sha256 is not the manifest's)")
    shutil.copyfile(run_dir / ENCODER_MANIFEST_NAME, staged / ENCODER_MANIFEST_NAME, follow_symlinks=False)


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


def _teacher_entries(teacher: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The ``data_sources.json`` entries of the teacher a margin-MSE encoder learnt from (its weights, its cache
    of scores and its own training sets, `zsnli.training.manifest_writer.teacher_sources`), named under
    `ENCODER_SOURCE_PREFIX` so that a later install replaces them with its own; empty without a teacher."""
    return [{**entry, "name": ENCODER_SOURCE_PREFIX + entry["name"],
             "model": f"model/{EMBEDDING_SUBDIR} (the sentence encoder)"} for entry in teacher_sources(teacher)]


def _encoder_sources(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``data_sources.json`` entries of an encoder run's manifest ``run``: its training sets and its teacher's.
    Raises ``KeyError`` / ``TypeError`` for a manifest without ``data.sources``."""
    return [_source_entry(s) for s in run["data"]["sources"]] + _teacher_entries(run.get(TEACHER_KEY))


def _source_entry(source: dict[str, Any]) -> dict[str, Any]:
    """One ``data_sources.json`` entry for a set the encoder trained on."""
    keep = ("kind", "licence", "path", "sha256", "rows", "rows_used", "classes", "task_kind")
    return {"name": ENCODER_SOURCE_PREFIX + source["name"], "role": "train",
            "model": f"model/{EMBEDDING_SUBDIR} (the sentence encoder)", **{k: source[k] for k in keep if k in source}}
