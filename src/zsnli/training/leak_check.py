"""The leak check of ``train.py install-base``: could zsc-dev or benchmark text have reached a model?

`leaked_text` reads a ``train.py train`` manifest: the data sources and ``--zsc-exclude`` folders of the run, of each
run it continued from and of its teacher, against the zsc-dev folder and the benchmark's examples (`PROTECTED`)
beside every classification set recorded and beside the checkout (`SHARED_DATA`): by path, by the folder holding
them, and by bytes. A folder that is merely named ``zsc`` is no reason.

May import `zsnli.manifest` (hashing) and `zsnli.training.cli_checks` (the checkout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..manifest import sha256_file
from .cli_checks import CHECKOUT

PROTECTED = ("zsc-dev", "zsc/public.jsonl")
"""The texts no installed model may have seen, beside the data folder that holds zsc-train (and beside the checkout,
`SHARED_DATA`): the choosing set and the benchmark's examples."""

SHARED_DATA = CHECKOUT.parent / "shared" / "data"
"""The team's data folder beside the checkout (``../shared/data``), whose zsc-dev and benchmark are protected
wherever they exist."""


def _runs_recorded(manifest: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]], list[str]]]:
    """``(who, sources, exclusions)`` of the run, of each run it continued from, and of the teacher it distilled."""
    hp = manifest.get("hyperparameters") or {}
    out = [("the run", (manifest.get("data") or {}).get("sources") or [], hp.get("zsc_exclude") or [])]
    chain = manifest.get("continued_from")
    while isinstance(chain, dict):
        out.append((f"the run it continued from (model {str(chain.get('model_sha256'))[:12]})",
                    chain.get("data_sources") or [], (chain.get("hyperparameters") or {}).get("zsc_exclude") or []))
        chain = chain.get("continued_from")
    teacher = manifest.get("teacher")
    if isinstance(teacher, dict):
        out.append(("its teacher", teacher.get("data_sources") or [], teacher.get("excluded_texts_from") or []))
    return out


def _covers(excluded: Path, item: Path) -> bool:
    """An exclusion covers ``item``: the same path, a folder holding it, or a file with the same bytes."""
    return (item == excluded or item.is_relative_to(excluded)
            or (item.is_file() and excluded.is_file() and sha256_file(item) == sha256_file(excluded)))


def _paths(sources: list[Any]) -> list[tuple[dict[str, Any], Path]]:
    """``(entry, path)`` of each recorded source that names a path (hub sets name none)."""
    return [(s, Path(str(s["path"])).expanduser()) for s in sources if isinstance(s, dict) and s.get("path")]


def _zsc_roots(sources: list[Any]) -> set[Path]:
    """The data folders holding the classification sets (``kind: "zsc"``) of ``sources``: ``<root>/zsc-train``."""
    return {path.resolve().parent.parent for s, path in _paths(sources) if s.get("kind") == "zsc"}


def protected_items(manifest: dict[str, Any]) -> list[Path]:
    """The zsc-dev folders and benchmark files (`PROTECTED`) the leak check knows about, resolved: beside the folder
    of every classification set the run, a run it continued from or its teacher recorded, and in `SHARED_DATA`;
    only those that exist."""
    roots = {SHARED_DATA.resolve()}
    for _, sources, _ in _runs_recorded(manifest):
        roots |= _zsc_roots(sources)
    return [root / rel for root in sorted(roots) for rel in PROTECTED if (root / rel).exists()]


def _digests(items: list[Path]) -> dict[str, Path]:
    """``{sha256: file}`` of every file of ``items`` (a protected folder's files, or the file itself)."""
    files = [f for item in items for f in ([item] if item.is_file() else sorted(item.rglob("*")))]
    return {sha256_file(f): f for f in files if f.is_file()}


def _protected_source(source: dict[str, Any], path: Path, items: list[Path], digests: dict[str, Path]) -> str | None:
    """How ``source`` (read from ``path``) reaches a protected item: it is one, lies in one or holds one, or has the
    bytes of a protected file (its recorded ``sha256``, else the file hashed when its size is that of a protected
    file); None when it does not."""
    path = path.resolve()
    for item in items:
        if path == item or path.is_relative_to(item) or item.is_relative_to(path):
            return f"{'is' if path == item else 'lies in' if path.is_relative_to(item) else 'holds'} {item}"
    digest = source.get("sha256") if isinstance(source.get("sha256"), str) else None
    if digest is None and path.is_file() and path.stat().st_size in {f.stat().st_size for f in digests.values()}:
        digest = sha256_file(path)
    return f"has the bytes of {digests[digest]}" if digest in digests else None


def leaked_text(manifest: dict[str, Any]) -> str | None:
    """Why zsc-dev or benchmark text could have reached the model ``manifest`` describes, or None.

    For the run, each run it continued from and its teacher: a data source that is, lies under or holds one of
    `protected_items` (the same resolved path, or a file with the same bytes), or classification sets
    (``kind: "zsc"``) mixed in without excluding the zsc-dev folder and ``zsc/public.jsonl`` beside their folder and
    beside the checkout (``../shared/data``) where those exist (``train.py train``'s default ``--zsc-exclude``; a
    folder excluded covers what it holds). A folder merely named ``zsc`` elsewhere is no reason."""
    items = protected_items(manifest)
    digests = _digests(items)
    for who, sources, exclusions in _runs_recorded(manifest):
        for source, path in _paths(sources):
            how = _protected_source(source, path, items, digests)
            if how is not None:
                return f"{who} trained on {source.get('name')} ({path}), which {how}"
        roots = _zsc_roots(sources)
        excluded = [Path(str(e)).expanduser().resolve() for e in exclusions]
        for root in sorted(roots | ({SHARED_DATA.resolve()} if roots else set())):
            for item in (root / "zsc-dev", root / "zsc" / "public.jsonl"):
                if item.exists() and not any(_covers(e, item) for e in excluded):
                    return (f"{who} mixed in classification sets without excluding {item} (its --zsc-exclude), so "
                            "its text could have reached the model")
    return None
