"""The arms of a bake-off, behind the arm interface planned for the harness's registry (issue 15).

Interface (sync arms), the same as ``zsnli.arms.Arm`` of the harness: ``trains`` (class attribute: True
for few-shot arms, fitted per fold), ``fit(texts, labels)`` (``labels[i]`` is the label name of
``texts[i]``; zero-shot arms keep the no-op), ``predict_proba(texts, labels) -> [n, k]`` (rows over
``labels`` in that order, each summing to 1; zero-shot arms get the label descriptions, few-shot arms
the label names), ``identity() -> {"name", "type", "parameters", "model_sha256"}`` plus, for the
receipt, ``calibration_sha256`` and ``code_version``. Arm names are the harness's registry type names
(``majority``, ``tfidf_logreg``, ``embedding_logreg``, ``embedding_knn``, ``embedding_similarity``);
the served model's two arms are ``served`` (template ``{}``) and ``served_about``.

The served zero-shot NLI arm is async (`BatchedNliArm`): its pairs go through the server's batcher at
background priority, so ``/classify`` pairs always go first. When the harness's registry
(``zsnli.arms``) is merged, the sync arms here map onto its classes one to one (the embedding arms
need the shared encoder injected instead of loading their own); only `build_arm` needs switching.

Imports numpy, scikit-learn, `zsnli.scoring`, `zsnli.embedding`, `zsnli.manifest`, `zsnli.baselines`.
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
from zsnli.baselines import DEFAULT_EMBEDDING_SCALE, softmax
from zsnli.scoring import ScoringConfig, label_probabilities, scores_from_logits

BACKGROUND_PRIORITY = 1
"""Batcher priority of bake-off pairs (``/classify`` uses 0 and always goes first)."""

NLI_TEMPLATES = {"served": "{}", "served_about": "This text is about {}."}
"""The served-model arms: the hypothesis template is part of the arm."""

EMBEDDING_ARMS = ("embedding_similarity", "embedding_logreg", "embedding_knn")

INCUMBENTS = ("served", "served_about", "embedding_similarity", "embedding_logreg", "embedding_knn",
              "tfidf_logreg", "majority")
"""Arm names a request may list in ``candidates``; all of them run by default."""


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``zsnli <version>+src.<12 hex>``: the package version and the sha256 of its Python sources (sorted paths)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"zsnli {__version__}+src.{digest.hexdigest()[:12]}"


def fill_template(template: str, label: str) -> str:
    """The template's single ``{}`` replaced literally by ``label`` (as ``/classify`` does)."""
    return template.replace("{}", label, 1)


# ------------------------------------------------------------------ embeddings


class EmbeddingCache:
    """Sentence embeddings of one bake-off's texts, each computed once; ``seconds[text]`` is its own encode time.

    encoder: a `zsnli.embedding.SentenceEncoder` (``encode(texts) -> [n, D]`` unit vectors); ``digest`` its
    model digest. Lives for one bake-off only (nothing is kept between requests).
    """

    def __init__(self, encoder, digest: str | None) -> None:
        self.encoder, self.digest = encoder, digest
        self._vectors: dict[str, np.ndarray] = {}
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str], timed: bool = False) -> np.ndarray:
        """``[n, D]`` float32; texts not yet seen are encoded (one at a time when ``timed``, to record latency)."""
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
            if missing and timed:
                for t in missing:
                    t0 = time.perf_counter()
                    self._vectors[t] = self.encoder.encode([t])[0]
                    self.seconds[t] = time.perf_counter() - t0
            elif missing:
                for t, v in zip(missing, self.encoder.encode(missing)):
                    self._vectors[t] = v
            return np.stack([self._vectors[t] for t in texts])


def _spread(classes: Sequence[str], proba: np.ndarray, labels: Sequence[str]) -> np.ndarray:
    """Columns of ``proba`` (over ``classes``) placed at their label's position; labels never seen get 0."""
    out = np.zeros((proba.shape[0], len(labels)))
    where = {name: j for j, name in enumerate(labels)}
    for c, name in enumerate(classes):
        out[:, where[name]] = proba[:, c]
    return out


class _Base:
    """Shared by the sync arms: name, type, parameters, identity (see module docstring)."""

    trains = True
    uses_embedding = False
    type_name: str | None = None  # default: the arm's name (the registry type of the built-in arms)

    def __init__(self, name: str, params: dict[str, Any] | None = None, model_sha256: str | None = None) -> None:
        self.name, self.params, self._model_sha256 = name, dict(params or {}), model_sha256

    def setup(self) -> None:
        """Nothing to load: shared models are injected."""

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        """Zero-shot arms: nothing to fit."""

    def identity(self) -> dict[str, Any]:
        """``{"name", "type", "parameters", "model_sha256", "calibration_sha256", "code_version"}``."""
        return {"name": self.name, "type": self.type_name or self.name, "parameters": self.params, "model_sha256": self._model_sha256,
                "calibration_sha256": None, "code_version": code_version()}


class MajorityArm(_Base):
    """The floor: every text gets the training label frequencies."""

    def fit(self, texts, labels) -> None:
        names, counts = np.unique(np.asarray(labels), return_counts=True)
        self._classes, self._freq = list(names), counts / counts.sum()

    def predict_proba(self, texts, labels) -> np.ndarray:
        return _spread(self._classes, np.tile(self._freq, (len(texts), 1)), labels)


class _SklearnArm(_Base):
    """A scikit-learn classifier on features of the texts; one training label gives a one-hot answer."""

    def _features(self, texts: Sequence[str], fitting: bool) -> Any:
        raise NotImplementedError

    def _estimator(self, n_train: int):
        raise NotImplementedError

    def fit(self, texts, labels) -> None:
        self._single = None
        if len(set(labels)) == 1:
            self._single = labels[0]
            return
        self._clf = self._estimator(len(texts)).fit(self._features(texts, True), list(labels))

    def predict_proba(self, texts, labels) -> np.ndarray:
        if self._single is not None:
            return _spread([self._single], np.ones((len(texts), 1)), labels)
        return _spread(list(self._clf.classes_), self._clf.predict_proba(self._features(texts, False)), labels)


class EmbeddingLogRegArm(_SklearnArm):
    """Logistic regression (L2, C = 1, lbfgs) on the sentence embeddings."""

    uses_embedding = True

    def __init__(self, name: str, cache: EmbeddingCache) -> None:
        super().__init__(name, params={"C": 1.0}, model_sha256=cache.digest)
        self.cache = cache

    def _features(self, texts, fitting):
        return self.cache.embed(texts)

    def _estimator(self, n_train):
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=1.0, max_iter=1000)


class EmbeddingKnnArm(_SklearnArm):
    """k nearest neighbours (cosine, distance-weighted, k = min(5, training size)) on the sentence embeddings."""

    uses_embedding = True

    def __init__(self, name: str, cache: EmbeddingCache, k: int = 5) -> None:
        super().__init__(name, params={"n_neighbors": k, "metric": "cosine", "weights": "distance"},
                         model_sha256=cache.digest)
        self.cache, self.k = cache, k

    def _features(self, texts, fitting):
        return self.cache.embed(texts)

    def _estimator(self, n_train):
        from sklearn.neighbors import KNeighborsClassifier

        return KNeighborsClassifier(n_neighbors=min(self.k, n_train), metric="cosine", weights="distance")


class TfidfLogRegArm(_SklearnArm):
    """tf-idf of word 1-2-grams (sublinear tf, fitted on the training texts only) + logistic regression."""

    def __init__(self, name: str) -> None:
        super().__init__(name, params={"ngram_range": [1, 2], "sublinear_tf": True, "C": 10.0})

    def _features(self, texts, fitting):
        if fitting:
            from sklearn.feature_extraction.text import TfidfVectorizer

            self._vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
            return self._vec.fit_transform(texts)
        return self._vec.transform(texts)

    def _estimator(self, n_train):
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=10.0, max_iter=1000)


class EmbeddingSimilarityArm(_Base):
    """Zero-shot: softmax(scale x cosine(text, label description)), scale 20 (`zsnli.baselines`)."""

    trains = False
    uses_embedding = True

    def __init__(self, name: str, cache: EmbeddingCache, scale: float = DEFAULT_EMBEDDING_SCALE) -> None:
        super().__init__(name, params={"scale": scale}, model_sha256=cache.digest)
        self.cache, self.scale = cache, scale

    def predict_proba(self, texts, labels) -> np.ndarray:
        cos = self.cache.embed(texts) @ self.cache.embed(labels).T
        return np.stack([softmax(self.scale * row) for row in cos])


class LocalNliArm(_Base):
    """Zero-shot challenger: a registered local NLI model directory, in-process (not through the batcher).

    Scoring as transformers' zero-shot pipeline: softmax over the labels of the entailment logits
    (temperature 1), hypothesis ``template`` filled with each description.
    """

    trains = False
    type_name = "local_nli"

    def __init__(self, name: str, model, model_sha256: str, template: str = "This text is about {}.") -> None:
        super().__init__(name, params={"hypothesis_template": template}, model_sha256=model_sha256)
        self.model, self.template = model, template

    def predict_proba(self, texts, labels) -> np.ndarray:
        hyps = [fill_template(self.template, d) for d in labels]
        rows = []
        for text in texts:
            logits = self.model.logits(self.model.encode([text] * len(hyps), hyps))
            s = scores_from_logits(logits, "entailment", self.model.entail_idx, self.model.contra_idx)
            rows.append(label_probabilities(s, ScoringConfig()))
        return np.stack(rows)


# ------------------------------------------------------------------ served model through the batcher


@dataclass
class NliService:
    """What the served-model arms borrow from the running server.

    model: the loaded `zsnli.scoring.NliModel`; batcher: the server's `zsnli.batching.Batcher`;
    scoring: the served `ScoringConfig` (calibration.json); model_sha256 / calibration_sha256: digests for
    the receipt; executor: a thread for tokenising off the event loop.
    """

    model: Any
    batcher: Any
    scoring: ScoringConfig
    model_sha256: str | None
    calibration_sha256: str | None
    executor: Executor


class BatchedNliArm:
    """The shipped model as ``/classify`` scores it (rule, temperature, content-free premise, cosine term),
    with the hypothesis ``template``; its pairs are submitted at `BACKGROUND_PRIORITY`."""

    trains = False

    def __init__(self, name: str, template: str, service: NliService, cache: EmbeddingCache | None) -> None:
        self.name, self.template, self.service, self.cache = name, template, service, cache
        self.uses_embedding = service.scoring.embedding_weight != 0
        self._cf: np.ndarray | None = None

    def identity(self) -> dict[str, Any]:
        """Model and calibration digests, the template and the scoring config."""
        return {"name": self.name, "type": "served", "model_sha256": self.service.model_sha256,
                "calibration_sha256": self.service.calibration_sha256, "code_version": code_version(),
                "parameters": {"hypothesis_template": self.template, "scoring": self.service.scoring.to_dict()}}

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
            cosine = await loop.run_in_executor(
                self.service.executor, lambda: self.cache.embed(hyps) @ self.cache.embed([text])[0])
        return label_probabilities(self._scores(logits), cfg, self._cf, cosine)


def build_arm(name: str, *, service: NliService | None, cache: EmbeddingCache | None,
              local_models: dict[str, Callable[[], tuple[Any, str]]]) -> Any:
    """The arm called ``name``. Raises ``RuntimeError`` when what it needs is not loaded.

    local_models: registered challenger name -> loader returning ``(NliModel, model_sha256)``.
    """
    if name in NLI_TEMPLATES:
        if service is None:
            raise RuntimeError("the served model is not loaded")
        return BatchedNliArm(name, NLI_TEMPLATES[name], service, cache)
    if name in local_models:
        model, digest = local_models[name]()
        return LocalNliArm(name, model, digest)
    if name == "majority":
        return MajorityArm(name)
    if name == "tfidf_logreg":
        return TfidfLogRegArm(name)
    if cache is None:
        raise RuntimeError("no sentence encoder is available for the embedding arms")
    return {"embedding_similarity": EmbeddingSimilarityArm, "embedding_logreg": EmbeddingLogRegArm,
            "embedding_knn": EmbeddingKnnArm}[name](name, cache)
