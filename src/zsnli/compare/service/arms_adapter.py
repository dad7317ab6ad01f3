"""The arms of a bake-off, built through the project's arm registry (`zsnli.compare.arms`).

One concept of an arm: every arm here is a `zsnli.compare.arms.Arm` (``trains``, ``fit(texts, labels)``,
``predict_proba(texts, labels) -> [n, k]`` rows over ``labels`` in that order, ``identity()``).
Arm names the API answers are the registry's type names (``majority``, ``tfidf_logreg``,
``embedding_logreg``, ``embedding_knn``, ``embedding_similarity``); the served model's two arms are
``served`` (template ``{}``) and ``served_about`` (template ``This text is about {}.``), both of the
registry's ``served`` type (the served zsnli model) but run in-process through the server's batcher.
A challenger registered by name (``ZSNLI_BAKEOFF_MODELS``) is the registry's ``pipeline`` arm on that
directory (transformers' zero-shot pipeline, template ``{}``, loaded once per server).

Shared, not reloaded: the embedding arms get one `EmbeddingCache` per bake-off through
``Arm.use_encoder``, over the server's `zsnli.runtime.embedding.SentenceEncoder` (or one loaded once by the
routes), so the example texts are embedded once for all of them and nothing is loaded per arm.

The served arms (`BatchedNliArm`) are async: their pairs go through the server's batcher at
`BACKGROUND_PRIORITY`, so ``/classify`` pairs always go first. For the receipt, `receipt_identity`
adds ``calibration_sha256`` and ``code_version`` to each arm's identity.

Imports numpy, `zsnli.compare.arms`, `zsnli.scoring`, `zsnli.serving.service` (the template rule).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from zsnli import __version__
from zsnli.compare.arms import ARMS, Arm, ArmError
from zsnli.compare.arms import build_arm as build_registry_arm
from zsnli.scoring import ScoringConfig, label_probabilities, scores_from_logits
from zsnli.serving.service import fill_template

BACKGROUND_PRIORITY = 1
"""Batcher priority of bake-off pairs (``/classify`` uses 0 and always goes first)."""

NLI_TEMPLATES = {"served": "{}", "served_about": "This text is about {}."}
"""The served-model arms: the hypothesis template is part of the arm."""

REGISTRY_INCUMBENTS = ("embedding_similarity", "embedding_logreg", "embedding_knn", "tfidf_logreg", "majority")
"""Registry arm types run with their default parameters (scikit-learn's defaults, the shipped encoder)."""

EMBEDDING_ARMS = tuple(name for name in REGISTRY_INCUMBENTS if ARMS[name].uses_encoder)

INCUMBENTS = (*NLI_TEMPLATES, *REGISTRY_INCUMBENTS)
"""Arm names a request may list in ``candidates``; all of them run by default."""

CHALLENGER_TYPE = "pipeline"
"""Registry type of a challenger registered by name (a local NLI model directory)."""


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``zsnli <version>+src.<12 hex>``: the package version and the sha256 of its Python sources (sorted paths)."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"zsnli {__version__}+src.{digest.hexdigest()[:12]}"


def receipt_identity(arm: Arm) -> dict[str, Any]:
    """``arm.identity()`` plus ``calibration_sha256`` (None unless the arm sets it) and ``code_version``."""
    return {"calibration_sha256": None, "code_version": code_version(), **arm.identity()}


# ------------------------------------------------------------------ embeddings


class EmbeddingCache:
    """Sentence embeddings of one bake-off's texts, each computed once; ``seconds[text]`` is its own encode time.

    Stands in for the `zsnli.runtime.embedding.SentenceEncoder` it wraps (``model_dir``, ``digest``, ``encode``,
    ``cosine``), so registry arms take it through ``Arm.use_encoder``. Lives for one bake-off only
    (nothing is kept between requests).
    """

    def __init__(self, encoder, digest: str | None) -> None:
        self.encoder, self.digest = encoder, digest
        self.model_dir = Path(encoder.model_dir)
        self._vectors: dict[str, np.ndarray] = {}
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str], timed: bool = False, check: Callable[[], None] | None = None) -> np.ndarray:
        """``[n, D]`` float32; texts not yet seen are encoded (one at a time when ``timed``, to record latency).

        check: called before each text when ``timed`` (a bake-off's cancel check: it raises to stop).
        """
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
            if missing and timed:
                for t in missing:
                    if check is not None:
                        check()
                    t0 = time.perf_counter()
                    self._vectors[t] = self.encoder.encode([t])[0]
                    self.seconds[t] = time.perf_counter() - t0
            elif missing:
                for t, v in zip(missing, self.encoder.encode(missing)):
                    self._vectors[t] = v
            return np.stack([self._vectors[t] for t in texts])

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """As `zsnli.runtime.embedding.SentenceEncoder.encode` (``batch_size`` applies to texts not yet cached)."""
        return self.embed(list(texts))

    def cosine(self, text: str, labels: Sequence[str]) -> np.ndarray:
        """As `zsnli.runtime.embedding.SentenceEncoder.cosine`: float64 ``[K]``."""
        return (self.embed(list(labels)) @ self.embed([text])[0]).astype(np.float64)


# ------------------------------------------------------------------ served model through the batcher


@dataclass
class NliService:
    """What the served-model arms borrow from the running server.

    model: the loaded `zsnli.runtime.model.NliRuntime`; batcher: the server's `zsnli.serving.batching.Batcher`;
    scoring: the served `ScoringConfig` (calibration.json); model_sha256 / calibration_sha256: digests for
    the receipt; executor: a thread for tokenising off the event loop.
    """

    model: Any
    batcher: Any
    scoring: ScoringConfig
    model_sha256: str | None
    calibration_sha256: str | None
    executor: Executor


class BatchedNliArm(Arm):
    """The shipped model as ``/classify`` scores it (rule, temperature, content-free premise, cosine term),
    with the hypothesis ``template``; its pairs are submitted at `BACKGROUND_PRIORITY`.

    An `Arm` of the registry's ``served`` type, but async: use `apredict` (one text at a time, on the
    server's event loop); ``predict_proba`` is not available here.
    """

    type_name = "served"

    def __init__(self, name: str, template: str, service: NliService, cache: EmbeddingCache | None) -> None:
        super().__init__(name)
        self.template, self.service, self.cache = template, service, cache
        self.uses_encoder = service.scoring.embedding_weight != 0  # the cosine term of the served scoring
        self.params = {"hypothesis_template": template, "scoring": service.scoring.to_dict()}
        self._cf: np.ndarray | None = None

    def model_sha256(self) -> str | None:
        return self.service.model_sha256

    def identity(self) -> dict[str, Any]:
        """The registry identity plus the calibration digest and the code version."""
        return {**super().identity(), "calibration_sha256": self.service.calibration_sha256,
                "code_version": code_version()}

    async def _logits(self, premises: list[str], hyps: list[str]) -> np.ndarray:
        svc = self.service
        loop = asyncio.get_running_loop()
        encoded = await loop.run_in_executor(svc.executor, svc.model.encode, premises, hyps)
        job = svc.batcher.submit(encoded, priority=BACKGROUND_PRIORITY)
        try:
            return await job.result()
        except asyncio.CancelledError:
            svc.batcher.cancel(job)
            raise

    def _scores(self, logits: np.ndarray) -> np.ndarray:
        m = self.service.model
        return scores_from_logits(logits, self.service.scoring.rule, m.entail_idx, m.contra_idx)

    async def apredict(self, text: str, descriptions: Sequence[str]) -> np.ndarray:
        """Probabilities ``[k]`` over the labels for one text (the content-free scores are computed once)."""
        hyps = [fill_template(self.template, d) for d in descriptions]
        cfg = self.service.scoring
        if cfg.content_free_premise is not None and self._cf is None:
            self._cf = self._scores(await self._logits([cfg.content_free_premise] * len(hyps), hyps))
        logits = await self._logits([text] * len(hyps), hyps)
        if not np.all(np.isfinite(logits)):
            raise ValueError("the model produced non-finite logits")
        cosine = None
        if cfg.embedding_weight != 0:
            if self.cache is None:
                raise RuntimeError("calibration sets an embedding weight but no sentence encoder is loaded")
            loop = asyncio.get_running_loop()
            cosine = await loop.run_in_executor(self.service.executor, self.cache.cosine, text, hyps)
        return label_probabilities(self._scores(logits), cfg, self._cf, cosine)


def build_challenger(name: str, model_dir: str) -> Arm:
    """The registry's `CHALLENGER_TYPE` arm on ``model_dir``, set up (loads the model). Raises ``ArmError``."""
    arm = build_registry_arm(CHALLENGER_TYPE, name, {"model_dir": str(Path(model_dir).resolve())})
    arm.setup()
    return arm


def build_arm(name: str, *, service: NliService | None, cache: EmbeddingCache | None,
              local_models: dict[str, Callable[[], Arm]]) -> Arm:
    """The arm called ``name``, ready to fit/predict. Raises ``RuntimeError`` (``ArmError``) when what it
    needs is not loaded.

    local_models: registered challenger name -> returns its (set-up, shared) arm (`build_challenger`).
    """
    if name in NLI_TEMPLATES:
        if service is None:
            raise RuntimeError("the served model is not loaded")
        return BatchedNliArm(name, NLI_TEMPLATES[name], service, cache)
    if name in local_models:
        return local_models[name]()
    arm = build_registry_arm(name, name, {})
    if arm.uses_encoder:
        if cache is None:
            raise ArmError("no sentence encoder is available for the embedding arms")
        arm.use_encoder(cache)
    else:
        arm.setup()
    return arm
