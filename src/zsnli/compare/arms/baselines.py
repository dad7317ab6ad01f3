"""The two reference arms of the bake-off, run in-process (no HTTP).

* `PipelineBaseline`: the ``transformers`` zero-shot-classification pipeline
  on an NLI model directory, labels passed as given
  (``hypothesis_template="{}"``), single-label mode (softmax of the
  entailment logits over the document's labels, temperature 1).
* `EmbeddingBaseline`: embedding similarity with all-MiniLM-L6-v2 (the copy
  shipped in ``model/embedding``): the document and every
  label description are embedded and L2-normalised, and the probabilities
  are ``softmax(scale x cosine)``. ``scale`` defaults to 20, the logit
  scale of the in-batch contrastive (multiple-negatives ranking) loss such
  sentence embedders are trained with; it is a fixed convention, not tuned
  on any evaluation data.

Both expose ``predict(text, labels) -> list[float]`` (one probability per
label, in order, summing to 1) and ``identity() -> dict`` (what the receipt
records).

May import: numpy, transformers (lazily), `zsnli.runtime.embedding` (the one place
that embeds and takes cosines) and `zsnli.manifest`. Used by `zsnli.compare`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from zsnli.runtime.embedding import SentenceEncoder, default_embedding_dir, encoder_id
from zsnli.compare.arms.base import quiet_model_loading, shown_path
from zsnli.manifest import hash_model_dir, model_dir_digest

DEFAULT_EMBEDDING_SCALE = 20.0


class BaselineError(RuntimeError):
    """A baseline could not be loaded (missing directory, unusable model)."""


def softmax(x: np.ndarray) -> np.ndarray:
    """Numerically stable softmax of a 1-D float vector (float64 out)."""
    z = np.asarray(x, dtype=np.float64)
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


class PipelineBaseline:
    """transformers ``pipeline("zero-shot-classification")`` over a local NLI model directory."""

    name = "pipeline"

    def __init__(self, model_dir: str | Path, batch_size: int = 1) -> None:
        """Load the pipeline on CPU from ``model_dir`` (config.json, weights, tokenizer).

        ``batch_size`` is the pipeline's own batch size over (document, label)
        pairs. Raises ``BaselineError`` when the directory is missing or
        transformers cannot build the pipeline from it.
        """
        self.model_dir = Path(model_dir)
        if not self.model_dir.is_dir():
            raise BaselineError(f"pipeline baseline: model directory not found: {self.model_dir}")
        try:
            from transformers import pipeline

            quiet_model_loading()
            self._pipe = pipeline(
                "zero-shot-classification", model=str(self.model_dir), tokenizer=str(self.model_dir), device="cpu"
            )
        except Exception as exc:  # transformers raises many types here
            raise BaselineError(f"pipeline baseline: cannot load {self.model_dir}: {type(exc).__name__}: {exc}") from exc
        self.batch_size = batch_size
        self._digest: str | None = None

    def predict(self, text: str, labels: Sequence[str]) -> list[float]:
        """Probabilities over ``labels`` (K >= 1) in the given order; K = 1 gives [1.0] as the HTTP contract does."""
        labels = list(labels)
        if len(labels) == 1:
            return [1.0]
        out = self._pipe(text, candidate_labels=labels, hypothesis_template="{}", multi_label=False,
                         batch_size=self.batch_size)
        pool: dict[str, list[float]] = {}
        for label, score in zip(out["labels"], out["scores"]):
            pool.setdefault(label, []).append(float(score))
        return [pool[label].pop(0) for label in labels]

    def identity(self) -> dict[str, Any]:
        """``{"kind": "pipeline", "model_dir": ..., "model_sha256": digest of the directory's files}``."""
        if self._digest is None:
            self._digest = model_dir_digest(hash_model_dir(self.model_dir))
        return {"kind": "pipeline", "model_dir": shown_path(self.model_dir), "model_sha256": self._digest,
                "hypothesis_template": "{}"}


class EmbeddingBaseline:
    """Cosine similarity of the served sentence encoder's embeddings (``model/embedding``: all-MiniLM-L6-v2,
    fine-tuned here since issue 42), x scale, softmax over labels."""

    name = "embedding"

    def __init__(self, model_path: str | Path | None = None, scale: float = DEFAULT_EMBEDDING_SCALE,
                 encoder: SentenceEncoder | None = None) -> None:
        """Load the encoder (default: the repository's ``model/embedding``) on CPU as a `SentenceEncoder`,
        or use ``encoder``, already loaded (shared; ``model_path`` is then its ``model_dir``).

        Raises ``BaselineError`` when the directory is missing or cannot be loaded.
        """
        self.scale = float(scale)
        if encoder is not None:
            self.model_path, self._encoder = Path(encoder.model_dir), encoder
            return
        self.model_path = Path(model_path) if model_path is not None else default_embedding_dir()
        if not self.model_path.is_dir():
            raise BaselineError(f"embedding baseline: model directory not found: {self.model_path}")
        try:
            quiet_model_loading()
            self._encoder = SentenceEncoder(self.model_path, device="cpu")
        except Exception as exc:  # transformers raises many types here
            raise BaselineError(f"embedding baseline: cannot load {self.model_path}: {type(exc).__name__}: {exc}") from exc

    def predict(self, text: str, labels: Sequence[str]) -> list[float]:
        """softmax(scale x cos(doc, label_k)) over ``labels`` (K >= 1), cosines from `SentenceEncoder.cosine`."""
        return softmax(self.scale * self._encoder.cosine(text, list(labels))).tolist()

    def identity(self) -> dict[str, Any]:
        """``{"kind": "embedding", "model": id, "model_sha256": embedding_digest (as calibration.json), "scale"}``."""
        return {"kind": "embedding", "model": encoder_id(self.model_path, self._encoder.digest), "model_sha256": self._encoder.digest,
                "scale": self.scale}
