"""Hashes and manifests, the serving side: which bytes are served, and are they the manifest's.

The three documents beside the model directory are ``training_manifest.json``,
``data_sources.json`` and ``calibration.json`` (their names are here). This
module hashes (`sha256_file`, `sha256_json`, `hash_model_dir`,
`model_dir_digest`), reads (`load_manifest`) and checks: `verify_model_dir`
re-hashes a model directory against the manifest's ``files`` table; the
server refuses to start and `train.py verify` exits non-zero when any entry
disagrees. A variant folder (``model/base``, `variant_of`) is served only as its top-level manifest pins it
(`check_variant_pin`, `pin_checks`). `write_json` writes any of the three, atomically. `runs_path` names where a
run's outputs go by default (``runs/``, or ``ZSNLI_RUNS_DIR``).

Building and writing the documents is training-side code,
`zsnli.training.manifest_writer`; the server never imports it.

May import the standard library, `zsnli.manifest_shape` (the shape of its tables) and `zsnli.harness.cli`
(`json_problem`; standard library only) only.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .harness.cli import json_problem
from .manifest_shape import manifest_shape_error


MANIFEST_NAME = "training_manifest.json"
DATA_SOURCES_NAME = "data_sources.json"
CALIBRATION_NAME = "calibration.json"
METADATA_NAMES = (MANIFEST_NAME, CALIBRATION_NAME, DATA_SOURCES_NAME)
"""What a model folder may carry about itself, never one of its model files (`hash_model_dir` leaves them out)."""
#: The folder a run's outputs go to by default (the bake-off store and receipt key, the score cache,
#: ``train.py``'s ``runs/<preset>``): ``runs``, relative to the working directory, unless this variable names
#: another. The test suite points it at a temporary folder, so no test reads what a run left in the checkout.
RUNS_ENV = "ZSNLI_RUNS_DIR"

_CHUNK = 1 << 20


def runs_path(*parts: str) -> str:
    """``runs/<parts...>`` as a path string: under ``$ZSNLI_RUNS_DIR`` when set (non-empty; ``~`` expanded),
    else under ``runs`` relative to the working directory. Read at each call, never cached, so a default
    follows the environment of the moment (`RUNS_ENV`)."""
    root = os.environ.get(RUNS_ENV, "").strip()
    return str(Path(os.path.expanduser(root) if root else "runs", *parts))


class ManifestError(RuntimeError):
    """The manifest is missing, unreadable, or does not match the model files."""


def sha256_file(path: str | Path) -> str:
    """Return the hex sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_json(obj: Any) -> bytes:
    """Serialise ``obj`` as canonical JSON (sorted keys, no spaces, UTF-8)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256_json(obj: Any) -> str:
    """Return the hex sha256 of ``canonical_json(obj)``."""
    return hashlib.sha256(canonical_json(obj)).hexdigest()


EMBEDDING_SUBDIR = "embedding"
"""Subdirectory of the model directory holding the sentence encoder (trained here since issue 42, or reused)."""

ENCODER_MANIFEST_NAME = "encoder_manifest.json"
"""The manifest ``train.py encoder`` writes beside its encoder, kept inside ``model/embedding`` once shipped."""

PRETRAINED_DIRS = (EMBEDDING_SUBDIR,)
"""Model subdirectories hashed in their own manifest table (``embedding`` when trained here, else
``pretrained_artifacts``), apart from the cross-encoder's ``files``."""


BASE_VARIANT_SUBDIR = "base"
"""Subdirectory of the model directory holding the optional base-size cross-encoder (``ZSNLI_MODEL_VARIANT=base``):
a whole model folder of its own, with its own ``training_manifest.json`` and ``calibration.json`` inside, pinned by
the top-level manifest's ``variants`` table (`variant_pin`)."""

VARIANT_DIRS = (BASE_VARIANT_SUBDIR,)
"""Model subdirectories that are other models (variants), never files of the served one."""


def hash_model_dir(model_dir: str | Path,
                   exclude: tuple[str, ...] = PRETRAINED_DIRS + VARIANT_DIRS) -> dict[str, dict[str, Any]]:
    """Hash every regular file directly or recursively under ``model_dir``.

    Returns ``{relative_posix_path: {"sha256": hex, "bytes": int}}`` sorted by
    path; files under a top-level subdirectory named in ``exclude`` (e.g. the
    reused pretrained artifacts of `PRETRAINED_DIRS`, and the other models of `VARIANT_DIRS`) are left out, and so
    are the metadata files of `METADATA_NAMES` at its top (a folder that carries its own manifest and calibration,
    as ``model/base`` does, cannot list the manifest's own digest in it). Raises
    ``ManifestError`` if the directory does not exist.
    """
    root = Path(model_dir)
    if not root.is_dir():
        raise ManifestError(f"model directory not found: {root}")
    table: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if rel.parts[0] in exclude or rel.as_posix() in METADATA_NAMES:
            continue
        table[rel.as_posix()] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    return table


def model_dir_digest(files: dict[str, dict[str, Any]]) -> str:
    """One sha256 naming a whole model directory: the hash of its canonical file table."""
    return sha256_json({name: entry["sha256"] for name, entry in files.items()})


@dataclass(frozen=True)
class FileCheck:
    """The outcome of checking one file of the model directory against the manifest. ``file`` is False for a check
    that is of no one file (a pin's field or directory digest, a folder, a table entry, an install's state): what
    ``train.py verify`` prints but leaves out of its count of files."""

    name: str
    status: str  # "ok" | "mismatch" | "missing" | "unlisted"
    expected: str | None
    actual: str | None
    file: bool = True


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read a training manifest; raise ``ManifestError`` with a one-line reason naming ``path`` if it is unreadable
    (not JSON, not UTF-8, or empty: `zsnli.harness.cli.json_problem`),
    has no ``files`` table, or any table its checks read is malformed (`manifest_shape_error`, naming the entry)."""
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except FileNotFoundError as exc:
        raise ManifestError(f"manifest not found: {path}") from exc
    except (OSError, ValueError) as exc:  # ValueError: bad JSON, or bytes that are not UTF-8 text
        raise ManifestError(f"manifest unreadable: {path}: {json_problem(exc)}") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise ManifestError(f"manifest has no 'files' table: {path}")
    problem = manifest_shape_error(manifest)
    if problem:
        raise ManifestError(f"manifest malformed: {path}: {problem}")
    return manifest


def check_model_dir(model_dir: str | Path, manifest: dict[str, Any]) -> list[FileCheck]:
    """Compare every file listed in the manifest with the bytes in ``model_dir``.

    ``manifest['files']`` covers the trained model (everything outside
    `PRETRAINED_DIRS`); each ``manifest['pretrained_artifacts'][name]['files']``, and
    ``manifest['embedding']['files']`` for an encoder trained here,
    covers its subdirectory (names reported as ``embedding/<file>``). Files
    present but absent from the manifest are reported as ``unlisted`` (a
    served model must be exactly the manifest's files).
    """
    root = Path(model_dir)
    checks = _check_table(manifest.get("files", {}), hash_model_dir(root), "")
    tables = dict(manifest.get("pretrained_artifacts", {}))
    if isinstance(manifest.get("embedding"), dict):  # model/embedding trained by this project
        tables["embedding"] = manifest["embedding"]
    for name, artifact in sorted(tables.items()):
        sub = artifact.get("dir", name)
        actual = hash_model_dir(root / sub) if (root / sub).is_dir() else {}
        checks += _check_table(artifact.get("files", {}), actual, f"{sub}/")
    for name in PRETRAINED_DIRS:
        if (root / name).is_dir() and name not in tables:
            checks += _check_table({}, hash_model_dir(root / name), f"{name}/")
    return checks


#: ``artifact`` of a ``train.py encoder`` manifest (`ENCODER_MANIFEST_NAME`).
ENCODER_ARTIFACT = "sentence-encoder"


def is_encoder_manifest(manifest: dict[str, Any]) -> bool:
    """Whether ``manifest`` is a sentence encoder's own (``encoder_manifest.json``), not a training manifest."""
    return manifest.get("artifact") == ENCODER_ARTIFACT


def check_encoder_dir(model_dir: str | Path, manifest: dict[str, Any]) -> list[FileCheck]:
    """`check_model_dir` for a sentence encoder's directory against its own ``encoder_manifest.json``: every file
    of ``manifest['files']``, the manifest file itself left out (it cannot list its own digest; the training
    manifest's ``embedding`` table lists it). Raises ``ManifestError`` if the directory does not exist."""
    actual = {k: v for k, v in hash_model_dir(model_dir).items() if k != ENCODER_MANIFEST_NAME}
    return _check_table(manifest.get("files", {}), actual, "")


def _check_table(expected: dict[str, dict[str, Any]], actual: dict[str, dict[str, Any]], prefix: str) -> list[FileCheck]:
    """Compare one file table with the hashed files; names in the result carry ``prefix``."""
    checks: list[FileCheck] = []
    for name in sorted(set(expected) | set(actual)):
        want = expected.get(name, {}).get("sha256") if name in expected else None
        have = actual.get(name, {}).get("sha256") if name in actual else None
        if want is None:
            status = "unlisted"
        elif have is None:
            status = "missing"
        elif want == have:
            status = "ok"
        else:
            status = "mismatch"
        checks.append(FileCheck(prefix + name, status, want, have))
    return checks


def verify_model_files(model_dir: str | Path, manifest_path: str | Path) -> tuple[str, dict[str, str]]:
    """Check every file of ``model_dir`` against the manifest, hashing each once.

    Returns ``(directory digest (`model_dir_digest`), {relative path: sha256} of every file,
    pretrained subdirectories included as ``embedding/<file>``)``. Raises ``ManifestError``
    (one line naming the first failing files) unless every file matches, nothing missing or unlisted.
    """
    manifest = load_manifest(manifest_path)
    checks = check_model_dir(model_dir, manifest)
    bad = [c for c in checks if c.status != "ok"]
    if bad:
        listed = ", ".join(f"{c.name} ({c.status})" for c in bad[:5])
        raise ManifestError(f"model files do not match {manifest_path}: {listed}")
    return model_dir_digest(manifest["files"]), {c.name: c.actual for c in sorted(checks, key=lambda c: c.name)}


def verify_model_dir(model_dir: str | Path, manifest_path: str | Path) -> str:
    """Raise ``ManifestError`` unless every file in ``model_dir`` matches the manifest.

    Returns the directory digest (`model_dir_digest`) on success. The error
    message is one line naming the first failing files (`verify_model_files`).
    """
    return verify_model_files(model_dir, manifest_path)[0]


# --------------------------------------------------------------------------- model variants (model/base)

def beside_model(model_dir: str | Path, name: str) -> Path:
    """Where a local model directory's ``name`` document (`MANIFEST_NAME`, `CALIBRATION_NAME`) is looked up by
    default: ``<model_dir>/<name>`` when it exists, else the file of that name in ``model_dir``'s parent (the
    checkout's top level for ``./model``). The path may not exist (`zsnli.config.Settings.resolved_manifest_path`)."""
    inside = Path(model_dir) / name
    return inside if inside.exists() else Path(model_dir).resolve().parent / name


def variant_of(model_dir: str | Path) -> tuple[Path, str] | None:
    """``(model root, variant name)`` when ``model_dir`` IS a variant folder (``model/base``), else None: its folder
    name is one of `VARIANT_DIRS` and its parent holds a model (``config.json``) or its parent's top-level manifest
    (`beside_model`) lists that name in ``variants``. Tried as written (made absolute) and with symlinks resolved.
    The one rule every entry point (server, offline classifier, ``train.py verify``) uses to decide that the pin
    (`check_variant_pin`) applies. Never raises (an unreadable parent manifest lists nothing)."""
    for folder in dict.fromkeys((Path(os.path.abspath(model_dir)), Path(model_dir).resolve())):
        root = folder.parent
        if folder.name in VARIANT_DIRS and ((root / "config.json").is_file() or folder.name in _declared(root)):
            return root, folder.name
    return None


def _declared(model_root: Path) -> dict[str, Any]:
    """The ``variants`` table of ``model_root``'s top-level manifest; {} when it has none or cannot be read."""
    try:
        manifest = json.loads(beside_model(model_root, MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    variants = manifest.get("variants") if isinstance(manifest, dict) else None
    return variants if isinstance(variants, dict) else {}


#: The fields of a pin, in the order `variant_pin` writes them (it writes exactly these), each required by
#: `pin_checks`: a pin without one is a mismatch, never a field left unchecked.
PIN_FIELDS = ("dir", "training_manifest_sha256", "model_sha256")


def variant_pin(model_root: str | Path, variant: str = BASE_VARIANT_SUBDIR) -> dict[str, Any]:
    """The top-level manifest's ``variants[variant]`` entry for ``<model_root>/<variant>``: ``dir``, the sha256 of
    its own ``training_manifest.json`` (which hashes every file of it) and its directory digest
    (`model_dir_digest`). Raises ``ManifestError`` when the folder or its manifest is missing."""
    folder = Path(model_root) / variant
    own = folder / MANIFEST_NAME
    if not own.is_file():
        raise ManifestError(f"{folder} has no {MANIFEST_NAME}: a variant folder carries its own manifest")
    return dict(zip(PIN_FIELDS, (variant, sha256_file(own), model_dir_digest(hash_model_dir(folder))), strict=True))


#: The name of the pin's ``model_sha256`` check (`pin_checks`), after ``<variant>/ ``.
PIN_MODEL_FIELD = "(model_sha256)"

#: ``FileCheck.actual`` of a pin field the entry does not hold (`pin_checks`).
PIN_FIELD_ABSENT = "(absent from the pin)"


def pin_checks(model_root: str | Path, entry: dict[str, Any], variant: str = BASE_VARIANT_SUBDIR) -> list[FileCheck]:
    """Every field the pin ``entry`` (a ``variants[variant]`` of `variant_pin`) records, against
    ``<model_root>/<variant>``, in this one place. Each of `PIN_FIELDS` is required: one the entry lacks is a
    mismatch named ``<variant>/ (<field>)`` (actual `PIN_FIELD_ABSENT`). ``dir`` must be ``variant``
    (check ``<variant>/ (dir)``); ``training_manifest_sha256`` the sha256 of the folder's own manifest
    (``<variant>/training_manifest.json``: ok, mismatch or missing); ``model_sha256`` the digest
    (`model_dir_digest`) of the file table that manifest lists (``<variant>/ (model_sha256)``, checked once the
    manifest is the pinned one; `check_model_dir` then holds the files to that table). A digest that is not a
    string is a mismatch. Raises ``ManifestError`` when the pinned manifest has no ``files`` table."""
    own = Path(model_root) / variant / MANIFEST_NAME
    checks = [FileCheck(f"{variant}/ ({field})", "mismatch", None, PIN_FIELD_ABSENT, file=False)
              for field in PIN_FIELDS if field not in entry]
    if "dir" in entry and entry["dir"] != variant:
        checks.append(FileCheck(f"{variant}/ (dir)", "mismatch", str(entry["dir"]), variant, file=False))
    if "training_manifest_sha256" not in entry:
        return checks
    want = entry["training_manifest_sha256"]
    have = sha256_file(own) if own.is_file() else None
    checks.append(FileCheck(f"{variant}/{MANIFEST_NAME}", _status(want, have), want, have))
    if checks[-1].status == "ok" and "model_sha256" in entry:
        want, have = entry["model_sha256"], model_dir_digest(load_manifest(own)["files"])
        checks.append(FileCheck(f"{variant}/ {PIN_MODEL_FIELD}", _status(want, have), want, have, file=False))
    return checks


def _status(want: Any, have: str | None) -> str:
    """ok / missing / mismatch of one pinned digest (``want``, as recorded) against the one found (``have``)."""
    if have is None:
        return "missing"
    return "ok" if isinstance(want, str) and want == have else "mismatch"


def check_variant_pin(model_root: str | Path, manifest: dict[str, Any], variant: str = BASE_VARIANT_SUBDIR) -> None:
    """Raise ``ManifestError`` (one line) unless the top-level ``manifest`` pins ``<model_root>/<variant>``: its
    ``variants[variant]`` entry exists and every field it records holds (`pin_checks`: the folder's own
    ``training_manifest.json`` and the directory digest it lists). The folder's files are then checked against its
    own manifest like any model directory's."""
    entry = (manifest.get("variants") or {}).get(variant)
    if not isinstance(entry, dict):
        raise ManifestError(f"the training manifest declares no '{variant}' variant (its 'variants' table), so "
                            f"{Path(model_root) / variant} is not a declared model")
    for check in pin_checks(model_root, entry, variant):
        if check.status != "ok":
            raise ManifestError(_pin_refusal(Path(model_root), check, variant))


def _pin_refusal(model_root: Path, check: FileCheck, variant: str) -> str:
    """The one line saying which field of the ``variant`` pin does not hold (`pin_checks`'s ``check``)."""
    pinned = f"pins {str(check.expected)[:12] if check.expected else 'nothing'} for the '{variant}' variant"
    folder = model_root / variant
    if check.actual == PIN_FIELD_ABSENT:
        field = check.name.rsplit("(", 1)[-1].rstrip(")")
        return (f"the training manifest's '{variant}' variant has no {field!r} (a pin records "
                f"{', '.join(PIN_FIELDS)}), so {folder} is not pinned")
    if check.name.endswith(PIN_MODEL_FIELD):
        return (f"{folder}: its {MANIFEST_NAME} lists files of digest {str(check.actual)[:12]}, the training manifest "
                f"{pinned.replace('pins', 'pins model_sha256', 1)}")
    if check.name.endswith("(dir)"):
        return f"the training manifest's '{variant}' variant names dir {check.expected!r}, not {variant!r}"
    found = "is missing" if check.actual is None else f"has sha256 {check.actual[:12]}"
    return f"{model_root / check.name} {found}, the training manifest {pinned}"


def check_variants(model_root: str | Path, manifest: dict[str, Any]) -> list[FileCheck]:
    """`check_model_dir` for the variants of ``model_root`` (``train.py verify``): when ``model_root`` is itself a
    variant folder (``model/base``), its own pin (`variant_dir_checks`); for each variant folder (``base/``) the
    ``manifest`` declares, its pin (`pin_checks`: ``base/training_manifest.json`` and ``base/ (model_sha256)``: ok,
    mismatch or missing), then every file of the folder against its own manifest (names ``base/<file>``); a variant
    folder holding a model that no ``variants`` entry declares is reported ``unlisted``. Raises ``ManifestError``
    as `pin_checks`."""
    root = Path(model_root)
    declared = manifest.get("variants") or {}
    checks: list[FileCheck] = variant_dir_checks(root)
    for name in VARIANT_DIRS:
        folder = root / name
        entry = declared.get(name)
        if not isinstance(entry, dict):
            if (folder / "config.json").is_file():
                checks.append(FileCheck(f"{name}/", "unlisted", None, None, file=False))
            continue
        pins = pin_checks(root, entry, name)
        checks += pins
        if pins[-1].status == "ok":
            own = load_manifest(folder / MANIFEST_NAME)
            checks += [replace(c, name=f"{name}/{c.name}") for c in check_model_dir(folder, own)]
    return checks


def variant_dir_checks(model_dir: str | Path) -> list[FileCheck]:
    """The pin of ``model_dir`` itself when it is a variant folder (`variant_of`): `pin_checks` against its parent's
    top-level manifest (`beside_model`), a ``missing`` check naming that manifest (or its ``variants.<name>`` entry)
    when there is none; [] for any other directory. For ``train.py verify --model-dir model/base``, where none of
    these is one of the files the folder's own manifest lists (its ``training_manifest.json`` is held to the pin, not
    to itself), so every check has ``file`` False. Raises ``ManifestError`` when the top-level manifest is
    unreadable."""
    found = variant_of(model_dir)
    if found is None:
        return []
    root, name = found
    top = beside_model(root, MANIFEST_NAME)
    if not top.is_file():
        return [FileCheck(str(top), "missing", None, None, file=False)]
    entry = (load_manifest(top).get("variants") or {}).get(name)
    if not isinstance(entry, dict):
        return [FileCheck(f"{top} variants.{name}", "missing", None, None, file=False)]
    return [replace(check, file=False) for check in pin_checks(root, entry, name)]


# --------------------------------------------------------------------------- writing and hold-out digest


WRITE_TEMP_SUFFIX = ".zsnli-write.tmp"
"""How the temporary file of an atomic write (`write_bytes`) ends: ``.<name>.<random>.zsnli-write.tmp`` beside the
document, one pattern for every document (ignored by git: ``.gitignore``; `stale_writes` finds those a kill left)."""


def write_json(path: str | Path, obj: Any, mode: int = 0o644) -> None:
    """Write ``obj`` as indented JSON plus a newline, file mode ``mode`` (644: like every shipped file), atomically
    (`write_bytes`). Raises what serialising (``TypeError``, ``ValueError``: before any file is made) or writing
    (``OSError``) raises, ``path`` untouched."""
    write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode("utf-8"), mode)


def write_bytes(path: str | Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically: into a temporary file in the same folder (named with
    `WRITE_TEMP_SUFFIX`), flushed to disk (fsync), then renamed over ``path`` (`os.replace`), so a reader, or a
    process killed mid-write, sees the old file or the new one, never a part. The temporary file is removed when
    anything fails (a kill leaves it: `stale_writes`). Raises what writing raises (``OSError``), ``path``
    untouched."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=WRITE_TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def stale_writes(path: str | Path) -> list[Path]:
    """The temporary files of writes of ``path`` (`write_bytes`) that a killed process left beside it, sorted; also
    those of the earlier pattern, ``.<name>.<8 random characters>.tmp`` (`tempfile.mkstemp`'s names)."""
    path = Path(path)
    name = glob.escape(path.name)
    found = set(path.parent.glob(f".{name}.*{WRITE_TEMP_SUFFIX}")) | set(path.parent.glob(f".{name}.{'?' * 8}.tmp"))
    return sorted(p for p in found if p.is_file())


INSTALL_COMMANDS = {EMBEDDING_SUBDIR: "install-encoder", BASE_VARIANT_SUBDIR: "install-base"}
"""The ``train.py`` command that installs each subfolder of a model directory (`install_aside`)."""


def install_aside(model_dir: str | Path, sub: str) -> tuple[Path, Path]:
    """``(staged, old)``: where an install of ``<model_dir>/<sub>`` (`INSTALL_COMMANDS`) builds the new folder and
    where the old one waits during the swap, both beside the model directory (``.<model dir name>.<sub>.staged`` /
    ``.old``: same filesystem, so the renames are atomic), never inside it."""
    model_dir = Path(model_dir).resolve()
    stem = model_dir.parent / f".{model_dir.name}.{sub}"
    return Path(f"{stem}.staged"), Path(f"{stem}.old")


def interrupted_installs(model_dir: str | Path) -> list[str]:
    """One line per install of a subfolder of ``model_dir`` (or, for ``model/embedding`` or ``model/base`` itself,
    of its model directory) that a kill left unfinished (`install_aside`: the staged or the old folder still there),
    naming the command whose next run finishes or rolls it back; [] when there is none."""
    found = []
    roots = [Path(model_dir)] + ([Path(model_dir).parent] if Path(model_dir).name in INSTALL_COMMANDS else [])
    for root in roots:
        for sub, command in INSTALL_COMMANDS.items():
            left = [p.name for p in install_aside(root, sub)[::-1] if p.exists()]
            if left:
                found.append(f"an install of {root / sub} was interrupted ({' / '.join(left)} beside it): rerun "
                             f"train.py {command} to finish or roll it back")
    return found


def _fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (the rename) to disk where the platform allows opening a folder."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def holdout_digest(rows: list[dict[str, str]]) -> str:
    """sha256 of the canonical JSON of the hold-out rows (so calibration can prove it used the same rows)."""
    return sha256_json(rows)
