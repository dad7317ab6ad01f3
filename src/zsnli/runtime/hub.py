"""Models named by hub id: a pinned snapshot in the ``huggingface_hub`` cache, downloaded only when allowed.

``ZSNLI_MODEL_ID=org/name`` (with ``ZSNLI_MODEL_REVISION``, a 40-hex commit)
serves that repository's snapshot from the local hub cache (``HF_HUB_CACHE``,
else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``: the cache
``huggingface_hub`` and transformers share). The cache is always looked at
first; the network is used only with ``ZSNLI_ALLOW_DOWNLOAD=1`` and only when
the snapshot is not cached, so a pinned model is downloaded once. Only the
files a served model reads are fetched (`SERVED_PATTERNS`: config, safetensors
weights, tokenizer files), and only safetensors weights are served (no pickle).

`resolve_hub_model` is the one entry point; `HubModelError` carries a
one-line reason that says what to do (the server prints it and exits 3).

May import: the standard library, `zsnli.harness.cli` (`one_line`; standard library only) and
``huggingface_hub`` (inside functions).
Imported by `zsnli.serving.startup`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..harness.cli import one_line

logger = logging.getLogger("zsnli")

#: The files of a hub repository that a served model reads (``allow_patterns`` of the download).
SERVED_PATTERNS = ("config.json", "*.safetensors", "*.safetensors.index.json", "tokenizer.json",
                   "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt",
                   "vocab.json", "merges.txt", "*.model")


class HubModelError(RuntimeError):
    """A hub model cannot be served: not cached (and downloads not allowed), not found, or no safetensors."""


@dataclass(frozen=True)
class HubModel:
    """A resolved hub model: ``model_id`` (``org/name``), ``revision`` (the commit served) and
    ``path`` (its snapshot folder in the cache, read like any local model directory)."""

    model_id: str
    revision: str
    path: Path


def hub_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The hub cache ``huggingface_hub`` uses: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
    ``~/.cache/huggingface/hub`` (read from ``env``, default ``os.environ``, at call time)."""
    env = os.environ if env is None else env
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def _where(model_id: str, revision: str | None) -> str:
    return f"{model_id}@{revision}" if revision else f"{model_id} (no ZSNLI_MODEL_REVISION: its cached main)"


def _snapshot(model_id: str, revision: str | None, cache_dir: Path, download: bool) -> Path:
    """``snapshot_download`` of the served files; errors become one-line `HubModelError`s."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HFValidationError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    try:
        return Path(snapshot_download(model_id, revision=revision, cache_dir=cache_dir, local_files_only=not download,
                                      allow_patterns=list(SERVED_PATTERNS)))
    except HFValidationError as exc:
        raise HubModelError(f"ZSNLI_MODEL_ID={model_id!r} is not a hub model id (org/name): "
                            f"{one_line(exc)}") from None
    except LocalEntryNotFoundError:
        if not download:
            raise HubModelError(f"{_where(model_id, revision)} is not in the hub cache {cache_dir}: run once with "
                                "ZSNLI_ALLOW_DOWNLOAD=1 where the hub is reachable (serve.sh is offline by default), "
                                "copy a cache that holds it there (HF_HUB_CACHE), or set ZSNLI_MODEL_DIR "
                                "to a local copy") from None
        from huggingface_hub import constants

        offline = (" (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set: set HF_HUB_OFFLINE=0 to download)"
                   if constants.HF_HUB_OFFLINE else "")
        raise HubModelError(f"could not download {_where(model_id, revision)} into {cache_dir}{offline}: "
                            "no network or the hub is unreachable") from None
    except GatedRepoError:
        raise HubModelError(f"{model_id} is gated on the hub: accept its terms and log in (HF_TOKEN), "
                            "then download it with ZSNLI_ALLOW_DOWNLOAD=1") from None
    except RevisionNotFoundError:
        raise HubModelError(f"{model_id} has no revision {revision} on the hub "
                            "(ZSNLI_MODEL_REVISION must be one of its commits)") from None
    except RepositoryNotFoundError:
        raise HubModelError(f"{model_id} was not found on the hub (private repositories need HF_TOKEN)") from None
    except OSError as exc:  # network errors, a cache that cannot be written
        raise HubModelError(f"could not fetch {_where(model_id, revision)}: {type(exc).__name__}: "
                            f"{one_line(exc)}") from None


def resolve_hub_model(model_id: str, revision: str | None = None, allow_download: bool = False,
                      cache_dir: str | Path | None = None) -> HubModel:
    """The cached snapshot of ``model_id`` at ``revision``; download it first only when allowed and missing.

    model_id: ``org/name`` as on the hub. revision: a 40-hex commit (pinned); None
    serves the commit the cache's ``refs/main`` names (a warning says which, to pin it)
    and, when downloading, the hub's current ``main``. allow_download: reach the
    network when the snapshot is not cached (``ZSNLI_ALLOW_DOWNLOAD=1``); never otherwise.
    cache_dir: default `hub_cache_dir`.
    Returns the `HubModel` (its ``path`` is read like a local model directory).
    Raises `HubModelError` (one line saying what to do): not cached with downloads off,
    not downloadable, not found, gated, an invalid id, or no ``*.safetensors`` weights.
    """
    cache = Path(cache_dir) if cache_dir is not None else hub_cache_dir()
    try:
        path = _snapshot(model_id, revision, cache, download=False)
    except HubModelError:
        if not allow_download:
            raise
        logger.info("downloading %s into %s (ZSNLI_ALLOW_DOWNLOAD=1)", _where(model_id, revision), cache)
        path = _snapshot(model_id, revision, cache, download=True)
    commit = path.name
    if not any(path.glob("*.safetensors")):
        raise HubModelError(f"{model_id}@{commit} in {cache} has no *.safetensors weights: only safetensors are "
                            "served (convert the weights, or pick a revision that has them)")
    if revision is None:
        logger.warning("ZSNLI_MODEL_REVISION is not set: serving commit %s of %s; pin it with "
                       "ZSNLI_MODEL_REVISION=%s", commit, model_id, commit)
    return HubModel(model_id, commit, path)
