"""Hard negatives for classification pairs: each text's nearest wrong class by the sentence encoder.

For a set with K > 2 classes, text i's hard negative is ``argmax_{c != gold_i} cos(e(text_i),
e(hypothesis_c))`` with ``e`` the cosine term's encoder (all-MiniLM-L6-v2 in ``model/embedding``);
`zsnli.training.zsc_nli.set_pairs` takes it as the negative class with the preset's share. The
idea (negatives the cheap first stage already confuses, so the cross-encoder learns to tell them
apart) is the hard-negative mining of dense retrieval (Karpukhin et al., 2020, DPR, sec. 3.2).

The table is written to a JSON file in the run's output directory and read back on resume, so
a resumed run trains on the very pairs it started with; it is keyed by each set file's sha256 and
the encoder's digest (`zsnli.runtime.embedding.embedding_digest`), and recomputed for a set whose
key differs.

May import numpy, `zsnli.manifest`, `zsnli.training.nli_data` (Source) and `zsnli.training.zsc_nli`;
the encoder is handed in (`zsnli.training.trainer` loads it).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from ..manifest import sha256_file
from .nli_data import Source
from .zsc_nli import ZscSet, read_zsc_set

log = logging.getLogger(__name__)


class Encoder(Protocol):
    """What is needed of `zsnli.runtime.embedding.SentenceEncoder`: unit vectors ``[N, D]`` for N texts."""

    digest: str

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray: ...


def nearest_other_classes(zset: ZscSet, encoder: Encoder) -> list[int]:
    """Text i's nearest class other than its gold one, by cosine of the unit embeddings.

    Returns ``len(zset.texts)`` class indices (each != the text's gold index). Ties go to the lower
    index (``numpy.argmax``). Raises ``ValueError`` for a set with fewer than 2 classes.
    """
    if len(zset.hypotheses) < 2:
        raise ValueError(f"{zset.name}: a hard negative needs at least 2 classes")
    texts = np.asarray(encoder.encode(list(zset.texts)), dtype=np.float64)
    hyps = np.asarray(encoder.encode(list(zset.hypotheses)), dtype=np.float64)
    sims = texts @ hyps.T
    sims[np.arange(len(zset.texts)), np.asarray(zset.labels)] = -np.inf
    return [int(c) for c in np.argmax(sims, axis=1)]


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return doc if isinstance(doc, dict) else {}
    except (OSError, json.JSONDecodeError):
        return {}


def hard_negative_table(sources: Sequence[Source], encoder: Encoder, path: str | Path) -> dict[str, list[int]]:
    """The nearest wrong class of every text of every set with more than 2 classes, by source name.

    ``path`` (JSON ``{"encoder_sha256", "sets": {name: {"sha256", "nearest"}}}``) is read first and
    rewritten (atomically) after each set that was (re)computed, so a stopped run keeps what it
    embedded. Binary sets are left out (their other class is the only one). Raises
    `zsnli.training.nli_data.DataError` for an unreadable set.
    """
    path = Path(path)
    cached = _read(path)
    same_encoder = cached.get("encoder_sha256") == encoder.digest
    sets: dict[str, Any] = dict(cached.get("sets", {})) if same_encoder else {}
    table: dict[str, list[int]] = {}
    for src in sources:
        zset = read_zsc_set(src.path)
        if len(zset.hypotheses) <= 2:
            continue
        digest = sha256_file(src.path)
        entry = sets.get(src.name)
        if not (isinstance(entry, dict) and entry.get("sha256") == digest
                and len(entry.get("nearest", ())) == len(zset.texts)):
            log.info("hard negatives: embedding %d texts of %s", len(zset.texts), src.name)
            entry = {"sha256": digest, "nearest": nearest_other_classes(zset, encoder)}
            sets[src.name] = entry
            _write(path, encoder.digest, sets)  # after each set: a stopped run keeps what it embedded
        table[src.name] = [int(c) for c in entry["nearest"]]
    if not same_encoder:
        _write(path, encoder.digest, sets)
    return table


def _write(path: Path, encoder_sha256: str, sets: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"encoder_sha256": encoder_sha256, "sets": sets}), encoding="utf-8")
    tmp.replace(path)
