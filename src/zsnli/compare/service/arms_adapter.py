"""The arms of a bake-off, built through the project's arm registry (`zsnli.compare.arms`).

One concept of an arm: every arm here is a `zsnli.compare.arms.Arm` (``trains``, ``fit(texts, labels)``,
``predict_proba(texts, labels) -> [n, k]`` rows over ``labels`` in that order, ``identity()``).
Arm names the API answers are the registry's type names (``majority``, ``tfidf_logreg``,
``embedding_logreg``, ``embedding_knn``, ``embedding_similarity``, ``tfidf_linearsvc``, ``char_nb``,
``keyword_rules``) or a variant's name (`VARIANTS`: ``tfidf_linearsvc_raw``); the served model's two arms are
``served`` (template ``{}``) and ``served_about`` (template ``This text is about {}.``), both of the
registry's ``served`` type (the served zsnli model) but run in-process through ``ZeroShotClassifier.classify``,
the code of ``POST /classify`` (`ClassifierArm`).
A challenger registered by name (``ZSNLI_BAKEOFF_MODELS``) is the registry's ``pipeline`` arm on that
directory (transformers' zero-shot pipeline, template ``{}``, loaded once per server).

Shared, not reloaded: the embedding arms get one `EmbeddingCache` per bake-off through
``Arm.use_encoder``, over the server's `zsnli.runtime.embedding.SentenceEncoder` (or one loaded once by the
routes), so the example texts are embedded once for all of them and nothing is loaded per arm.

The served arms (`ClassifierArm`) call ``classify`` with ``priority=BACKGROUND_PRIORITY``, so
``/classify`` pairs always go first in the batcher. For the receipt, `receipt_identity` adds
``calibration_sha256`` and ``code_version`` to each arm's identity.

Imports numpy, `zsnli.compare.arms` (the classifier is handed in: nothing from `zsnli.serving`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from zsnli import __version__
from zsnli.compare.arms import ARMS, Arm, ArmError
from zsnli.compare.arms import build_arm as build_registry_arm

BACKGROUND_PRIORITY = 1
"""Batcher priority of bake-off pairs (``/classify`` uses 0 and always goes first)."""

NLI_TEMPLATES = {"served": "{}", "served_about": "This text is about {}."}
"""The served-model arms: the hypothesis template is part of the arm."""

REGISTRY_INCUMBENTS = ("embedding_similarity", "embedding_logreg", "embedding_knn", "tfidf_logreg", "tfidf_linearsvc",
                       "tfidf_linearsvc_raw", "char_nb", "keyword_rules", "majority")
"""Registry arms run with their default parameters (scikit-learn's defaults, the shipped encoder), by arm name;
a name that is not a registry type is a variant of one (`VARIANTS`). The fine-tuned encoder is not among them:
its fits take minutes of CPU each, beyond a service bake-off's time budget (``validate.py bakeoff`` runs it)."""

VARIANTS = {"tfidf_linearsvc_raw": ("tfidf_linearsvc", {"calibration": "raw"})}
"""Incumbent name -> (registry type, parameters) for incumbents that are a registry arm with other parameters."""

EMBEDDING_ARMS = tuple(name for name in REGISTRY_INCUMBENTS if ARMS[VARIANTS.get(name, (name,))[0]].uses_encoder)

INCUMBENTS = (*NLI_TEMPLATES, *REGISTRY_INCUMBENTS)
"""Arm names a request may list in ``candidates``; all of them run by default."""

CHALLENGER_TYPE = "pipeline"
"""Registry type of a challenger registered by name (a local NLI model directory)."""


def arm_type(name: str) -> tuple[str, dict[str, Any]]:
    """The registry type and parameters of the arm a request calls ``name``: a served-model arm is ``served``
    (its template among the parameters), a variant its registry type (`VARIANTS`), an incumbent its own type,
    and any other name (a registered challenger) `CHALLENGER_TYPE`."""
    if name in NLI_TEMPLATES:
        return "served", {"hypothesis_template": NLI_TEMPLATES[name]}
    if name in VARIANTS:
        return VARIANTS[name]
    return (name, {}) if name in REGISTRY_INCUMBENTS else (CHALLENGER_TYPE, {})


def arm_kind(name: str) -> str:
    """``few-shot`` when the arm called ``name`` is fitted on the examples (its registry class ``trains``), else
    ``zero-shot``: what the scorecard says of it, also when it failed."""
    return "few-shot" if ARMS[arm_type(name)[0]].trains else "zero-shot"


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


# ------------------------------------------------------------------ the served model, through /classify's code


@dataclass
class ServedModel:
    """The running server's classifier as the served-model arms use it.

    classifier: the app's `zsnli.serving.service.ZeroShotClassifier` (its public ``classify``);
    loop: the server's event loop, where ``classify`` runs; model_sha256 / calibration_sha256 / scoring:
    what the receipt records (from ``ZeroShotClassifier.describe``).
    """

    classifier: Any
    loop: asyncio.AbstractEventLoop
    model_sha256: str | None
    calibration_sha256: str | None
    scoring: dict[str, Any]


class ClassifierArm(Arm):
    """The shipped model exactly as ``POST /classify`` answers: each document goes through
    ``ZeroShotClassifier.classify`` (text cleaning, label checks, dedupe, admission, timeout, calibrated
    scoring) with the hypothesis ``template``, at batcher priority `BACKGROUND_PRIORITY`.

    An `Arm` of the registry's ``served`` type, called from a bake-off worker thread: each call is
    scheduled on the server's loop and waited for through ``waiter`` (the bake-off's cancel token:
    ``waiter.wait(future)`` returns its result or cancels it at the deadline or on a cancel).
    """

    type_name = "served"

    def __init__(self, name: str, template: str, served: ServedModel, waiter: Any) -> None:
        super().__init__(name)
        self.template, self.served, self.waiter = template, served, waiter
        self.params = {"hypothesis_template": template, "scoring": served.scoring}

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        """``[n, k]``: ``/classify``'s probabilities of each text over ``labels`` (single-label).

        Raises the service's ``zsnli.errors.ApiError`` (503 overloaded or timed out, ...) for a document
        it refused, and the waiter's exceptions at the deadline or on a cancel.
        """
        rows = []
        for text in texts:
            work = self.served.classifier.classify(text, list(labels), self.template, priority=BACKGROUND_PRIORITY,
                                                  scoring="served")  # the served arm, whatever ZSNLI_SCORING says
            rows.append(self.waiter.wait(asyncio.run_coroutine_threadsafe(work, self.served.loop)))
        return np.asarray(rows, dtype=np.float64).reshape(len(texts), len(labels))

    def model_sha256(self) -> str | None:
        return self.served.model_sha256

    def identity(self) -> dict[str, Any]:
        """The registry identity plus the calibration digest and the code version."""
        return {**super().identity(), "calibration_sha256": self.served.calibration_sha256,
                "code_version": code_version()}


def build_challenger(name: str, model_dir: str) -> Arm:
    """The registry's `CHALLENGER_TYPE` arm on ``model_dir``, set up (loads the model). Raises ``ArmError``."""
    arm = build_registry_arm(CHALLENGER_TYPE, name, {"model_dir": str(Path(model_dir).resolve())})
    arm.setup()
    return arm


def build_arm(name: str, *, served: ServedModel | None, cache: EmbeddingCache | None,
              local_models: dict[str, Callable[[], Arm]], waiter: Any = None) -> Arm:
    """The arm called ``name``, ready to fit/predict. Raises ``RuntimeError`` (``ArmError``) when what it
    needs is not loaded.

    local_models: registered challenger name -> returns its (set-up, shared) arm (`build_challenger`);
    waiter: the bake-off's cancel token (served-model arms wait on the server's loop through it).
    """
    if name in NLI_TEMPLATES:
        if served is None:
            raise RuntimeError("the served model is not loaded")
        return ClassifierArm(name, NLI_TEMPLATES[name], served, waiter)
    if name in local_models:
        return local_models[name]()
    type_name, params = VARIANTS.get(name, (name, {}))
    arm = build_registry_arm(type_name, name, params)
    if arm.uses_encoder:
        if cache is None:
            raise ArmError("no sentence encoder is available for the embedding arms")
        arm.use_encoder(cache)
    else:
        arm.setup()
    return arm
