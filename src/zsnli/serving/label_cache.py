"""Label embeddings kept across requests: `LabelEmbeddings`, a bounded least-recently-used store.

The cosine term (and the label cascade's ranking) embeds every distinct hypothesis of a request
with the sentence encoder. Zero-shot traffic sends the same label set with document after document
(every banking77 request carries the same 72 descriptions), so most of that work repeats: on the 500
public documents the labels are 8,700 of the encoder's 9,200 sequences. A label's embedding depends
only on its tokens and the encoder, so the service keeps the last ``max_entries`` of them, keyed by
a digest of their token ids, and sends only the others to the batcher.

Memory: an entry is its float32 vector, a 16-byte digest and the store's bookkeeping, whatever the
label's length (`LabelEmbeddings.nbytes` counts it; `/metrics` shows it). Measured with tracemalloc
for all-MiniLM-L6-v2 (384 dimensions, CPython 3.12): 1.74 KiB an entry for a 10-token and a
512-token label alike, so the default 4,096 entries hold about 7 MiB (tests/serving/
test_label_cache_memory.py holds it). Keyed by the token ids themselves (before issue 39), an entry
cost 2.2 KiB at 10 tokens and 21.7 KiB at 512, so the default reached about 87 MiB on window-long labels.

What an answer may depend on does not change: the encoder runs in fp32 whatever the NLI dtype
(`zsnli.serving.startup.ENCODER_DTYPE`), where the same sequence embedded in another batch differs
by float rounding only (measured: cosines within 1.8e-7, docs/performance.md), and in fixed shapes
(`zsnli.runtime.shapes`) not at all, so a kept embedding is the one the request would get computed.
The store holds digests of the labels' token ids (BLAKE2b, 16 bytes: not the label descriptions
clients sent) and float32 vectors, nothing of any document; it lives and dies with the service process. ``max_entries`` = 0 turns it off (``ZSNLI_LABEL_CACHE_ENTRIES``).

May import: numpy, `zsnli.runtime.model` (the `Encoded` record). Used by `zsnli.serving.service`.
"""

from __future__ import annotations

import hashlib
import sys
from collections import OrderedDict
from typing import Sequence

import numpy as np

from ..runtime.model import Encoded

Key = bytes

# The store's own cost of one entry beyond its key and vector: an OrderedDict slot and its linked-list
# node (CPython 3.11-3.13, measured with tracemalloc by tests/serving/test_label_cache_memory.py).
ENTRY_OVERHEAD_BYTES = 96


def label_key(item: Encoded) -> Key:
    """What a label's embedding depends on besides the encoder: a 16-byte BLAKE2b digest of its token
    ids (and segment ids, when it has them), the same size for a label of any length."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(memoryview(_int64(item.input_ids)))
    if item.token_type_ids is not None:  # 7 more bytes: never the length of an id list alone (8 n)
        digest.update(b"|types|")
        digest.update(memoryview(_int64(item.token_type_ids)))
    return digest.digest()


def _int64(ids: Sequence[int]) -> bytes:
    return np.asarray(ids, dtype=np.int64).tobytes()


class LabelEmbeddings:
    """The last ``max_entries`` label embeddings (float32 ``[D]`` each) of one sentence encoder.

    Use from one thread (the service's event loop). ``hits`` / ``misses`` count lookups since start.
    Raises ``ValueError`` on ``max_entries`` < 0.
    """

    def __init__(self, max_entries: int) -> None:
        if int(max_entries) < 0:
            raise ValueError(f"label cache size must be >= 0, got {max_entries!r}")
        self.max_entries = int(max_entries)
        self._store: OrderedDict[Key, np.ndarray] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._store)

    @property
    def nbytes(self) -> int:
        """Bytes the kept entries hold (`_entry_bytes` each; read at a ``/metrics`` scrape, not per request)."""
        return sum(self._entry_bytes(key, vector) for key, vector in self._store.items())

    @staticmethod
    def _entry_bytes(key: Key, vector: np.ndarray) -> int:
        """One entry's bytes: its key and vector objects (``sys.getsizeof``, data included) and the
        store's slot (`ENTRY_OVERHEAD_BYTES`)."""
        return sys.getsizeof(key) + sys.getsizeof(vector) + ENTRY_OVERHEAD_BYTES

    def lookup(self, items: Sequence[Encoded]) -> tuple[list[np.ndarray | None], list[Encoded]]:
        """Each item's kept embedding (None when not kept) and the items to compute, in order
        (an item that repeats within ``items`` is computed once)."""
        found: list[np.ndarray | None] = []
        missing: dict[Key, Encoded] = {}
        for item in items:
            key = label_key(item)
            vector = self._store.get(key)
            if vector is not None:
                self._store.move_to_end(key)
                self.hits += 1
            else:
                missing.setdefault(key, item)
                self.misses += 1
            found.append(vector)
        return found, list(missing.values())

    def complete(self, items: Sequence[Encoded], found: Sequence[np.ndarray | None], computed: Sequence[Encoded],
                 vectors: np.ndarray) -> np.ndarray:
        """float32 ``[len(items), D]``: ``found`` with its gaps filled from ``vectors`` (``[len(computed), D]``,
        the batcher's output for `lookup`'s items to compute), which are kept for later requests
        (the least recently used beyond ``max_entries`` are dropped). Raises ``ValueError`` when
        ``vectors`` does not have one row per computed item."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(computed):
            raise ValueError(f"{len(computed)} label embeddings expected, got an array of shape {vectors.shape}")
        fresh = {label_key(item): vectors[i] for i, item in enumerate(computed)}
        for key, vector in fresh.items():
            self._keep(key, vector)
        rows = [v if v is not None else fresh[label_key(item)] for item, v in zip(items, found)]
        return np.stack(rows).astype(np.float32, copy=False) if rows else np.zeros((0, vectors.shape[1]), np.float32)

    def _keep(self, key: Key, vector: np.ndarray) -> None:
        if self.max_entries == 0:
            return
        self._store[key] = vector.copy()
        self._store.move_to_end(key)
        while len(self._store) > self.max_entries:
            self._store.popitem(last=False)
