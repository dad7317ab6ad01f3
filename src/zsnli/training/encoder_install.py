"""Ship a ``train.py encoder`` run as the served sentence encoder (``train.py install-encoder``).

Copies the run's encoder into ``model/embedding`` with its `ENCODER_MANIFEST_NAME`, replaces
``training_manifest.json``'s table of that directory (``pretrained_artifacts.embedding``, a reused
artifact, becomes ``embedding``, `zsnli.training.manifest_writer.trained_embedding`: base, interpolation,
data, teacher, files), and declares the run's training sets in ``data_sources.json``, with the teacher's
weights, cache and sets when a margin-MSE run learnt from one (the entries of an earlier installed encoder
are dropped). A ``calibration.json`` that pins another encoder's digest makes the server refuse to start until the
scoring is re-chosen on the new one (``train.py select``): the command names each such file (`stale_calibrations`),
and none when the digest installed is the one pinned (a reinstall of the same encoder).

Everything is checked before anything changes: the run against its own manifest, the model directory
against ``training_manifest.json``. Exactly the files the run's manifest lists are copied (`_copy_listed`),
each hashed again once copied; a listed name that is absolute, holds ``..`` or reaches through a symbolic
link, and any symbolic link in the run's ``model/``, is refused (as pip's wheel installer and
huggingface_hub refuse paths that escape their tree). The new directory is staged beside the model
directory, never inside it (`staging_dirs`), so a killed install leaves nothing the server, ``train.py
verify`` or a rerun finds in the model directory. Then `swap_and_commit` (the order ``install-base`` uses
too): the old ``embedding/`` set aside, the staged one renamed into place, and `_commit`: the old
``data_sources.json`` kept in the folder set aside, the new sets declared, then ``training_manifest.json`` written
(`zsnli.manifest.write_json`: atomic), the commit point that covers both documents; only then the old encoder
deleted. A failure before the manifest is written puts the old encoder and data sources back at once. Every
``train.py install-encoder`` (`run_command`) first finishes or rolls back what a killed install left
(`_roll_back`), before it checks its arguments: the manifest written means the new encoder stays, else the old
encoder and ``data_sources.json`` return. ``data_sources.json`` must be a sources document before anything changes.
`install_checks` is what ``train.py verify`` adds: an install a kill left unfinished, and data sources that do not
declare the installed encoder's sets (`sources_check`).

May import `zsnli.manifest`, `zsnli.scoring` (the calibration reader), `zsnli.training.usage` (the error, the
folder checks) and `zsnli.training.manifest_writer`, `zsnli.harness.cli` (`json_problem`); no torch.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from ..scoring import ScoringConfigError, read_chosen
from ..manifest import (CALIBRATION_NAME, DATA_SOURCES_NAME, EMBEDDING_SUBDIR, MANIFEST_NAME, METADATA_NAMES,
                        PRETRAINED_DIRS, VARIANT_DIRS, FileCheck, ManifestError, check_model_dir, hash_model_dir,
                        install_aside, interrupted_installs, load_manifest, sha256_file, stale_writes, write_bytes,
                        write_json)
from .usage import UsageError, check_folder_arg, check_model_dir_arg
from .manifest_writer import (
    ENCODER_MANIFEST_NAME, TEACHER_KEY, TRAINED_EMBEDDING_KEY, LineageError, declare_sources, teacher_sources,
    trained_embedding,
)
from ..harness.cli import json_problem

ENCODER_SOURCE_PREFIX = "sentence-encoder:"
"""``data_sources.json`` names of the encoder's training sets (the cross-encoder's own entries keep theirs)."""


def install_encoder(run_dir: str | Path, model_dir: str | Path, manifest_dir: str | Path) -> dict[str, Any]:
    """Make the encoder of ``run_dir`` (a ``train.py encoder --output-dir``) the served one under ``model_dir``.

    ``run_dir`` must hold ``model/`` and `ENCODER_MANIFEST_NAME` whose ``files`` match it;
    ``manifest_dir`` holds ``training_manifest.json`` (whose ``files`` must match ``model_dir``) and
    ``data_sources.json``. Returns the manifest's new ``embedding`` table. Every refusal is a `UsageError` (one
    line, exit 2 in ``train.py``, as ``install-base`` refuses a run): a missing or unreadable manifest, a run or
    model directory whose files differ from its manifest, a symbolic link in the run or a listed name outside it,
    a run manifest without its data or base, a ``data_sources.json`` that is not a sources document; nothing is
    changed then (but what a killed install left is first finished or rolled back, `_roll_back`). Raises what
    writing raises (``OSError``) once the swap began, the old encoder back in place unless the manifest was
    written (`swap_and_commit`).
    """
    run_dir, model_dir, manifest_dir = Path(run_dir), Path(model_dir), Path(manifest_dir)
    _roll_back(model_dir, manifest_dir)  # what a killed install left
    run = _read_manifest(run_dir / ENCODER_MANIFEST_NAME)
    _refuse_links(run_dir / "model")
    listed = run.get("files") if isinstance(run.get("files"), dict) else {}
    for name in listed:  # a name escaping the run is refused before anything is read
        _listed_path(run_dir / "model", name)
    _require_match(run_dir / "model", run, ENCODER_MANIFEST_NAME)
    manifest = _read_manifest(manifest_dir / MANIFEST_NAME)
    _require_match(model_dir, manifest, MANIFEST_NAME, only_outside=EMBEDDING_SUBDIR)
    _check_sources_file(manifest_dir / DATA_SOURCES_NAME)
    staged = staging_dirs(model_dir)[0]
    try:
        sources = _encoder_sources(run)
        _copy_listed(run_dir, run, staged)
        table = trained_embedding(staged.parent, subdir=staged.name)
    except (KeyError, TypeError, AttributeError, LineageError) as exc:
        shutil.rmtree(staged, ignore_errors=True)
        raise UsageError(f"{run_dir / ENCODER_MANIFEST_NAME}: not a train.py encoder manifest ({exc}); "
                         f"{RUN_HINT}") from None
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    manifest.get("pretrained_artifacts", {}).pop(EMBEDDING_SUBDIR, None)
    manifest[TRAINED_EMBEDDING_KEY] = table
    aside = staging_dirs(model_dir)[1]
    swap_and_commit(staged, model_dir, EMBEDDING_SUBDIR,
                    commit=lambda: _commit(manifest_dir, manifest, sources, aside),
                    roll_back=lambda: _roll_back(model_dir, manifest_dir))
    return table


RUN_HINT = "give the --output-dir of a finished train.py encoder run"


def _read_manifest(path: Path) -> dict[str, Any]:
    """The manifest at ``path`` (`zsnli.manifest.load_manifest`); `UsageError` (its one line) when it is missing or
    unreadable: a refusal before anything changes, exit 2 as ``install-base``'s."""
    try:
        return load_manifest(path)
    except ManifestError as exc:
        raise UsageError(str(exc)) from None


def check_run_folder(run_dir: str | Path, model_dir: str | Path | None = None) -> Path:
    """The encoder run folder ``run_dir`` (expanded), once it holds ``model/config.json`` and
    `ENCODER_MANIFEST_NAME`. Raises `UsageError` (one line): a missing path or a file, the served encoder
    (``<model_dir>/embedding`` or anything inside the served ``model_dir``, as ``install-base`` refuses the served
    model) or a copy of an installed one (its own `ENCODER_MANIFEST_NAME` beside its ``config.json``), a ``train.py
    train`` run (a ``training_manifest.json`` in it, or beside its ``config.json``: install-base named), the run's own
    ``model/`` folder (its parent holds the manifest: give the parent), a folder without those files."""
    run = Path(run_dir).expanduser()
    if not run.is_dir():
        raise UsageError(f"{run_dir}: {'a file, not a directory' if run.exists() else 'no such directory'}; {RUN_HINT}")
    served = Path(model_dir).resolve() if model_dir is not None else None
    if served is not None and run.resolve().is_relative_to(served):
        what = ("is the served sentence encoder" if run.resolve() == served / EMBEDDING_SUBDIR else
                "is the served model directory" if run.resolve() == served else
                f"lies inside the served model directory {model_dir}")
        raise UsageError(f"{run_dir} {what}, not an encoder run: {RUN_HINT} (it holds model/ and "
                         f"{ENCODER_MANIFEST_NAME})")
    if (run / "config.json").is_file() and (run / ENCODER_MANIFEST_NAME).is_file():
        raise UsageError(f"{run_dir} is an installed sentence encoder (its {ENCODER_MANIFEST_NAME} beside its "
                         f"config.json), not an encoder run: {RUN_HINT}, the one it came from")
    nli_run = _train_run_manifest_folder(run)
    if nli_run is not None:
        model = next((d for d in (run, run / "model") if (d / "config.json").is_file()), None)
        raise UsageError(f"{run_dir}: a train.py train run (its {MANIFEST_NAME} in {nli_run}), an NLI "
                         f"cross-encoder, not a sentence encoder run: ship it with train.py install-base"
                         f"{f' {model}' if model else ''}; {RUN_HINT}")
    parent = run.absolute().parent  # `.` has a parent too
    if not (run / "model").is_dir() and (parent / ENCODER_MANIFEST_NAME).is_file():
        raise UsageError(f"{run_dir} is the model/ folder of the encoder run {parent}: give {parent} (its "
                         f"--output-dir, which holds model/ and {ENCODER_MANIFEST_NAME})")
    for need in (run / "model" / "config.json", run / ENCODER_MANIFEST_NAME):
        if not need.is_file():
            raise UsageError(f"{run_dir}: no {need.relative_to(run)}; {RUN_HINT}")
    return run


def _train_run_manifest_folder(run: Path) -> Path | None:
    """Where the `MANIFEST_NAME` of a ``train.py train`` run lies when ``run`` is one (its absolute path), or its
    parent when ``run`` is that run's model folder (its own ``config.json`` beside the parent's manifest); None for
    anything else, and for a folder that holds an `ENCODER_MANIFEST_NAME` (an encoder run's own)."""
    if (run / ENCODER_MANIFEST_NAME).is_file():
        return None
    here = run.absolute()  # `.` has a parent too
    if (here / MANIFEST_NAME).is_file():
        return here
    if (run / "config.json").is_file() and (here.parent / MANIFEST_NAME).is_file():
        return here.parent
    return None


def top_manifest(manifest_dir: Path, given: bool, role: str) -> dict[str, Any]:
    """The top-level ``training_manifest.json`` in ``manifest_dir`` (``given``: named by ``--manifest-dir``, else
    the default beside ``--model-dir``; ``role``: what it does for this install, e.g. ``pins model/base``). Raises
    `UsageError` naming the path given and what is wrong with it (no such folder, no manifest in it, unreadable)."""
    path = manifest_dir / MANIFEST_NAME
    try:
        return load_manifest(path)
    except ManifestError as exc:
        if not given:
            raise UsageError(f"{exc} (the top-level {MANIFEST_NAME} beside --model-dir {role}); give --manifest-dir "
                             "DIR when it lies elsewhere") from None
        check_folder_arg(manifest_dir, "--manifest-dir", f"give the folder of the top-level {MANIFEST_NAME}, which "
                         f"{role}")
        what = f"no {MANIFEST_NAME} in it" if not path.exists() else str(exc)
        raise UsageError(f"--manifest-dir {manifest_dir}: {what} (the top-level {MANIFEST_NAME}, which "
                         f"{role})") from None


def run_command(args: Any, manifest_dir: Path) -> int:
    """``train.py install-encoder``: first finish or roll back what a killed install left (`_roll_back`, whatever is
    wrong with the arguments, as long as ``--model-dir`` exists), then check the run, the model directory, the
    top-level manifest and ``data_sources.json`` (one line each, `UsageError`), install and print; returns 0."""
    model_dir = Path(args.model_dir)
    note = _roll_back(model_dir, manifest_dir)
    if note:
        print(note)
    run = check_run_folder(args.run_dir, model_dir)
    check_model_dir_arg(model_dir, hint=f"give the served model directory whose {EMBEDDING_SUBDIR}/ is replaced")
    top_manifest(manifest_dir, args.manifest_dir is not None, f"lists {EMBEDDING_SUBDIR}/")
    _check_sources_file(manifest_dir / DATA_SOURCES_NAME)
    table = install_encoder(run, model_dir, manifest_dir)
    print(f"{model_dir / EMBEDDING_SUBDIR} is now {table['id']} (embedding sha256 {table['sha256']})")
    for path, pinned in stale_calibrations(model_dir, manifest_dir, table["sha256"]):
        variants = {(model_dir / sub).resolve() for sub in VARIANT_DIRS}  # base/ holds its own scoring
        scored = path.parent if path.parent.resolve() in variants else model_dir
        print(f"{path} pins another encoder ({pinned[:12]}): the server refuses it until the scoring is re-chosen "
              f"on this one: python train.py select --model-dir {scored}")
    return 0


def stale_calibrations(model_dir: Path, manifest_dir: Path, digest: str) -> list[tuple[Path, str]]:
    """``(path, pinned digest)`` of each ``calibration.json`` a server of ``model_dir`` or of its variant folders
    reads (in the model directory, beside it in ``manifest_dir``, in ``base/``) whose ``chosen.embedding_sha256``
    is another encoder's than ``digest`` (the one just installed). A calibration that pins no encoder (the cosine
    term off), or is no readable JSON object, is left to the server's own check."""
    found = []
    for path in (model_dir / CALIBRATION_NAME, manifest_dir / CALIBRATION_NAME,
                 *(model_dir / sub / CALIBRATION_NAME for sub in VARIANT_DIRS)):
        try:
            chosen = read_chosen(path) or {}
        except ScoringConfigError:  # unreadable, or no 'chosen' object: the server's own check names it
            continue
        pinned = chosen.get("embedding_sha256")
        if isinstance(pinned, str) and pinned != digest and path.resolve() not in (p.resolve() for p, _ in found):
            found.append((path, pinned))
    return found


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


SOURCES_BEFORE = ".data_sources.before.json"
"""The copy of ``data_sources.json`` as it was before an install, kept in the old folder set aside (`_commit`) until
the manifest is written; `SOURCES_NONE` there instead when there was none."""
SOURCES_NONE = ".data_sources.none"


def _commit(manifest_dir: Path, manifest: dict[str, Any], sources: list[dict[str, Any]], aside: Path) -> None:
    """Commit an encoder whose folder is in place: the old ``data_sources.json`` kept in ``aside`` (`SOURCES_BEFORE`,
    atomically), the encoder's ``sources`` declared in it, then ``training_manifest.json`` written: the commit point,
    after which both documents are the new encoder's. Until then `_roll_back` restores the old data sources too."""
    path = manifest_dir / DATA_SOURCES_NAME
    if path.is_file():
        write_bytes(aside / SOURCES_BEFORE, path.read_bytes())
    else:
        (aside / SOURCES_NONE).touch()
    declare_sources(manifest_dir, sources, replace_prefix=ENCODER_SOURCE_PREFIX)
    write_json(manifest_dir / MANIFEST_NAME, manifest)


def _restore_sources(aside: Path, manifest_dir: Path) -> None:
    """Put ``data_sources.json`` back as `_commit` found it (its copy in ``aside``, or no file), then drop the copy."""
    before, none, path = aside / SOURCES_BEFORE, aside / SOURCES_NONE, manifest_dir / DATA_SOURCES_NAME
    if before.is_file():
        write_bytes(path, before.read_bytes())
        before.unlink()
    elif none.exists():
        path.unlink(missing_ok=True)
        none.unlink()


def _committed(model_dir: Path, manifest_dir: Path) -> bool:
    """Whether ``training_manifest.json``'s ``embedding`` table lists exactly the files now in
    ``model_dir/embedding`` (the install that put them there wrote its manifest); False when it is unreadable."""
    target = model_dir / EMBEDDING_SUBDIR
    try:
        table = load_manifest(manifest_dir / MANIFEST_NAME).get(TRAINED_EMBEDDING_KEY)
        return isinstance(table, dict) and target.is_dir() and table.get("files") == hash_model_dir(target)
    except ManifestError:
        return False


def describes(model_dir: Path, manifest_path: Path) -> bool:
    """Whether the manifest at ``manifest_path`` is readable and lists exactly the names of ``model_dir``'s own files
    (its subfolders `PRETRAINED_DIRS` / `VARIANT_DIRS`, metadata and hidden entries such as the ``.embedding.new`` of
    old installs left out; names only, nothing hashed): the manifest of this model directory, which alone tells
    whether a killed install was committed."""
    try:
        listed = set(load_manifest(manifest_path)["files"])
    except ManifestError:
        return False
    root = Path(model_dir)
    names = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    skip = PRETRAINED_DIRS + VARIANT_DIRS
    return listed == {n for n in names if n.split("/")[0] not in skip and not n.startswith(".")
                      and n not in METADATA_NAMES}


def _roll_back(model_dir: Path, manifest_dir: Path) -> str | None:
    """Finish or undo an install of ``model_dir/embedding`` stopped between its first rename and its end (`recover`);
    returns what was done (one line), None when nothing was left. With the manifest written (`_committed`) the new
    encoder stays (and its sets are declared again where ``data_sources.json`` lacks them, as an install before
    `_commit`'s order could leave it), else the old encoder (or none) and the old ``data_sources.json`` are put back.
    The temporary files of killed writes of both documents are removed. Does nothing while ``manifest_dir``'s
    manifest is missing or not this model directory's (`describes`): it alone says whether the install was
    committed."""
    if not model_dir.is_dir() or not describes(model_dir, manifest_dir / MANIFEST_NAME):
        return None
    for doc in (MANIFEST_NAME, DATA_SOURCES_NAME):
        for left in stale_writes(manifest_dir / doc):
            left.unlink(missing_ok=True)
    aside = staging_dirs(model_dir)[1]
    done = aside.exists() and _committed(model_dir, manifest_dir)
    if done and sources_check(model_dir, manifest_dir).status != "ok":
        try:
            installed = load_manifest(model_dir / EMBEDDING_SUBDIR / ENCODER_MANIFEST_NAME)
            declare_sources(manifest_dir, _encoder_sources(installed), replace_prefix=ENCODER_SOURCE_PREFIX)
        except (ManifestError, ValueError, KeyError, TypeError, AttributeError):
            pass  # no sets named, or a data_sources.json that is no sources document: the install refuses it
    elif aside.exists() and not done:
        _restore_sources(aside, manifest_dir)
    return recover(model_dir, committed=lambda: done)


def sources_check(model_dir: Path, manifest_dir: Path) -> FileCheck:
    """``data_sources.json``'s `ENCODER_SOURCE_PREFIX` entries against those of the encoder installed in
    ``model_dir/embedding`` (its `ENCODER_MANIFEST_NAME`): ``ok``, ``mismatch`` (another encoder's sets, or none),
    ``absent`` when there is nothing to compare (no installed encoder manifest naming its data, or no sources
    document). Never raises."""
    name = f"{DATA_SOURCES_NAME} ({ENCODER_SOURCE_PREFIX}* entries)"
    try:
        want = _encoder_sources(load_manifest(model_dir / EMBEDDING_SUBDIR / ENCODER_MANIFEST_NAME))
        doc = json.loads((manifest_dir / DATA_SOURCES_NAME).read_text(encoding="utf-8"))
        have = [e for e in doc["sources"] if str(e.get("name", "")).startswith(ENCODER_SOURCE_PREFIX)]
    except (ManifestError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return FileCheck(name, "absent", None, None, file=False)
    return FileCheck(name, "ok" if have == want else "mismatch", None, None, file=False)


def install_checks(model_dir: str | Path, manifest_path: str | Path) -> list[FileCheck]:
    """What ``train.py verify`` adds for installs: one ``interrupted`` check per install a kill left unfinished
    (`zsnli.manifest.interrupted_installs`, its line the name), and for a training manifest whose model directory
    holds an installed encoder, whether ``data_sources.json`` beside the manifest declares that encoder's sets
    (`sources_check`; ``mismatch`` when the two documents disagree)."""
    checks = [FileCheck(line, "interrupted", None, None, file=False) for line in interrupted_installs(model_dir)]
    sources = sources_check(Path(model_dir), Path(manifest_path).parent)
    return checks + ([sources] if sources.status != "absent" else [])


def _check_sources_file(path: Path) -> None:
    """Raise `UsageError` (one sentence) unless ``data_sources.json`` at ``path`` is absent or an object whose
    ``sources`` is a list of objects (`zsnli.training.manifest_writer.declare_sources` rewrites it during the swap, so
    it is read before anything changes)."""
    if not path.exists():
        return
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not readable JSON ({json_problem(exc)}); it must be a data sources "
                         "document (restore it) before an encoder is installed") from None
    sources = doc.get("sources", []) if isinstance(doc, dict) else None
    if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
        what = (f"a JSON {type(doc).__name__}, not an object whose 'sources' is a list of objects"
                if not isinstance(doc, dict) else "its 'sources' is not a list of objects")
        raise UsageError(f"{path}: not a data sources document ({what}); restore it before an encoder is installed")


def staging_dirs(model_dir: Path, sub: str = EMBEDDING_SUBDIR) -> tuple[Path, Path]:
    """``(staged, old)``: where the new ``<model_dir>/<sub>`` (``embedding``, or ``base`` for
    `zsnli.training.base_install`) is built and where the old one waits during the swap, both beside
    ``model_dir`` (``.model.<sub>.staged`` / ``.old``: same filesystem, so the renames are atomic), never inside
    the checked tree (both ignored by git: ``.gitignore``)."""
    return install_aside(model_dir, sub)


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


def recover(model_dir: Path, sub: str = EMBEDDING_SUBDIR, committed: Callable[[], bool] | None = None) -> str | None:
    """Clear what a killed install of ``<model_dir>/<sub>`` left: its staged copy (and the in-tree
    ``.embedding.new`` of installs before issue 48), then the old ``sub`` set aside (`staging_dirs`), if any.
    Returns what was done, one line naming ``<model_dir>/<sub>`` (None when nothing was left).

    That old one is deleted when the new ``sub`` is in place and ``committed()`` says it was committed (its
    manifest written, `_committed` for ``install-encoder``; None: being in place is enough). Otherwise (the kill
    came before that point) the new ``sub`` is removed and the old one renamed back, or none left when there was
    none before (`NO_PREVIOUS`): the model directory is as before that install."""
    staged, old = staging_dirs(model_dir, sub)
    target = Path(model_dir) / sub
    note = f"{target}: removed {staged.name}, the copy a killed install left" if staged.exists() else None
    shutil.rmtree(staged, ignore_errors=True)
    shutil.rmtree(Path(model_dir) / f".{sub}.new", ignore_errors=True)
    if not old.exists():
        return note
    if target.exists() and (committed is None or committed()):
        shutil.rmtree(old, ignore_errors=True)
        return f"{target}: finished an interrupted install (it was committed; {old.name} removed)"
    shutil.rmtree(target, ignore_errors=True)
    if (old / NO_PREVIOUS).is_file():
        shutil.rmtree(old, ignore_errors=True)
        return f"{target}: rolled back an interrupted install (it was not committed; there was none before)"
    old.rename(target)
    return f"{target}: rolled back an interrupted install (it was not committed; the old one is back from {old.name})"


def _refuse_links(root: Path) -> None:
    """Raise `UsageError` naming the first symbolic link under ``root`` (file or directory, never followed)."""
    for where, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs + files):
            if os.path.islink(os.path.join(where, name)):
                rel = Path(where, name).relative_to(root).as_posix()
                raise UsageError(f"{root}: {rel} is a symbolic link; an installed encoder holds regular files only "
                                    "(copy the file into the run instead)")


def _listed_path(root: Path, name: Any) -> Path:
    """``root / name`` for a manifest's file name that stays inside ``root``: a relative POSIX path without
    ``..``, ``.`` or empty parts and no backslash; else `UsageError`."""
    parts = PurePosixPath(name).parts if isinstance(name, str) else ()
    if (not parts or PurePosixPath(name).is_absolute() or "\\" in name
            or any(p in ("", ".", "..") for p in parts) or name != "/".join(parts)):
        raise UsageError(f"{ENCODER_MANIFEST_NAME} lists {name!r}: not a path inside the run's model/")
    return root.joinpath(*parts)


def _copy_listed(run_dir: Path, run: dict[str, Any], staged: Path) -> None:
    """Copy exactly the files ``run['files']`` lists from ``run_dir/model`` (each a regular file, reached
    through no link) and the run's manifest into ``staged``, each copy hashed against the manifest; `UsageError`
    for a file that is not a regular file inside the run or whose copy is not the listed one."""
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    source = run_dir / "model"
    for name, entry in run["files"].items():
        src, dst = _listed_path(source, name), _listed_path(staged, name)
        hops = [source.joinpath(*PurePosixPath(name).parts[:k]) for k in range(1, len(PurePosixPath(name).parts))]
        if not stat.S_ISREG(os.lstat(src).st_mode) or any(os.path.islink(h) for h in hops):
            raise UsageError(f"{source}: {name} is not a regular file inside the run")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst, follow_symlinks=False)
        os.chmod(dst, 0o644)
        if sha256_file(dst) != entry["sha256"]:
            raise UsageError(f"{source}: {name} changed while it was copied (its sha256 is not the manifest's)")
    shutil.copyfile(run_dir / ENCODER_MANIFEST_NAME, staged / ENCODER_MANIFEST_NAME, follow_symlinks=False)


def _require_match(directory: Path, manifest: dict[str, Any], name: str, only_outside: str | None = None) -> None:
    """Raise `UsageError` naming the first file of ``directory`` that is not as ``manifest`` lists it
    (files under ``only_outside/`` left out: the directory about to be replaced)."""
    skip = f"{only_outside}/" if only_outside else None
    bad = [c for c in check_model_dir(directory, manifest)
           if c.status != "ok" and not (skip and c.name.startswith(skip))]
    if bad:
        how = {"mismatch": f"differs from what {name} lists", "missing": f"is listed in {name} but missing",
               "unlisted": f"is not listed in {name}"}
        raise UsageError(f"{directory}: {bad[0].name} {how.get(bad[0].status, bad[0].status)}")


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
