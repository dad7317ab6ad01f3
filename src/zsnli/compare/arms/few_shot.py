"""Few-shot arms: classifiers fitted on a dataset's labelled training rows (scikit-learn).

* ``majority``: the class frequencies of the training rows (the floor any
  trained arm has to beat);
* ``tfidf_logreg``: tf-idf word n-grams + logistic regression;
* ``embedding_logreg``: all-MiniLM-L6-v2 sentence embeddings + logistic regression;
* ``embedding_knn``: the same embeddings + k-nearest-neighbours (cosine);
* ``tfidf_linearsvc``: the same tf-idf + a linear SVM, its probabilities by Platt scaling
  (``calibration = "platt"``, scikit-learn's ``CalibratedClassifierCV``, sigmoid) or by a softmax over
  its raw decision function (``calibration = "raw"``);
* ``char_nb``: character n-gram counts + multinomial naive Bayes.

The keyword rules are in `zsnli.compare.arms.rules`, the fine-tuned encoder in
`zsnli.compare.arms.finetuned`.

Parameters default to scikit-learn's own defaults (``C = 1.0``,
``n_neighbors = 5``), not to values tuned on any evaluation data; a suite may
list an arm twice with other values. A candidate label never seen in the
training rows gets probability 0 (the classifier cannot know it).

Imports: numpy, scikit-learn, `zsnli.compare.arms.base`, and (lazily) `zsnli.runtime.embedding`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from zsnli.compare.arms.base import Arm, ArmError, normalise_rows, quiet_model_loading, register, shown_path


class FittedClassifier(Arm):
    """Shared bookkeeping: the label strings seen in fit, and mapping class columns to candidate labels."""

    trains = True

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.classes_: list[str] = []

    def _remember(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        if len(texts) != len(labels) or not texts:
            raise ArmError(f"{self.name}: fit needs as many labels as texts (>= 1), got {len(texts)} and {len(labels)}")
        self.classes_ = sorted(set(labels))

    def _to_candidates(self, class_probs: np.ndarray, labels: Sequence[str]) -> np.ndarray:
        """(n, len(classes_)) -> (n, len(labels)); labels not seen in fit get 0, rows renormalised."""
        if not self.classes_:
            raise ArmError(f"{self.name}: predict_proba before fit")
        column = {c: j for j, c in enumerate(self.classes_)}
        out = np.zeros((class_probs.shape[0], len(labels)), dtype=np.float64)
        for k, label in enumerate(labels):
            if label in column:
                out[:, k] = class_probs[:, column[label]]
        return normalise_rows(out)


@register("majority")
class MajorityArm(FittedClassifier):
    """Every document gets the training rows' class frequencies (top-1 = the majority class)."""

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        self._remember(texts, labels)
        counts = Counter(labels)
        self._prior = np.array([counts[c] for c in self.classes_], dtype=np.float64) / len(labels)

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        return self._to_candidates(np.tile(self._prior, (len(texts), 1)), labels)


def logreg(C: float, max_iter: int, seed: int):
    """scikit-learn's ``LogisticRegression`` (multinomial, lbfgs) with these settings, unfitted."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=C, max_iter=max_iter, random_state=seed)


def fit_few_shot(model, x, labels: Sequence[str], classes: list[str]):
    """``model.fit(x, class indexes of labels)`` with scikit-learn's warning that more than half the rows have their
    own class silenced: one or two rows per class is what few-shot means (it reached stderr from the in-sample
    SVM fit of ``tfidf_linearsvc``, a fit made outside `fit_or_constant`). Returns ``model``."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The number of unique classes is greater than 50%")
        return model.fit(x, [classes.index(y) for y in labels])


def fit_or_constant(model, x, labels: Sequence[str], classes: list[str]):
    """Fit ``model`` (`fit_few_shot`) unless the training rows hold a single class (then None: that class gets
    probability 1)."""
    if len(classes) < 2:
        return None
    fit_few_shot(model, x, labels, classes)
    return model


def predict_columns(model, x, n_classes: int) -> np.ndarray:
    """``[n, n_classes]`` probabilities of ``model`` (from `fit_or_constant`; None: the one class) on ``x``."""
    if model is None:
        return np.ones((x.shape[0], 1), dtype=np.float64)
    proba = model.predict_proba(x)
    out = np.zeros((x.shape[0], n_classes), dtype=np.float64)
    out[:, model.classes_] = proba  # classes_ are the integer class ids seen in fit
    return out


@register("tfidf_logreg")
class TfidfLogRegArm(FittedClassifier):
    """tf-idf over lower-cased word n-grams (``ngram_max``), then multinomial logistic regression."""

    def __init__(self, name: str | None = None, C: float = 1.0, ngram_max: int = 2, min_df: int = 1,
                 sublinear_tf: bool = True, max_iter: int = 1000, seed: int = 0) -> None:
        super().__init__(name)
        if C <= 0 or ngram_max < 1 or min_df < 1:
            raise ArmError(f"{self.name}: need C > 0, ngram_max >= 1, min_df >= 1")
        self.params = {"C": C, "ngram_max": ngram_max, "min_df": min_df, "sublinear_tf": sublinear_tf,
                       "max_iter": max_iter, "seed": seed}

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        self._remember(texts, labels)
        p = self.params
        self._vec = _tfidf(p)
        x = self._vec.fit_transform(list(texts))
        self._model = fit_or_constant(logreg(p["C"], p["max_iter"], p["seed"]), x, labels, self.classes_)

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        if not self.classes_:
            raise ArmError(f"{self.name}: predict_proba before fit")
        x = self._vec.transform(list(texts))
        return self._to_candidates(predict_columns(self._model, x, len(self.classes_)), labels)


class EmbeddingClassifier(FittedClassifier):
    """Sentence embeddings (zsnli.runtime.embedding.SentenceEncoder: mean-pooled, L2-normalised) as features."""

    uses_encoder = True

    def __init__(self, name: str | None = None, model_dir: str | None = None) -> None:
        super().__init__(name)
        self.model_dir = model_dir
        self._encoder = None
        self._train_cache: dict[str, np.ndarray] = {}

    def setup(self) -> None:
        from zsnli.runtime.embedding import SentenceEncoder, default_embedding_dir

        path = Path(self.model_dir) if self.model_dir else default_embedding_dir()
        if not path.is_dir():
            raise ArmError(f"{self.name}: embedding model directory not found: {path}")
        self._path = path
        quiet_model_loading()
        self._encoder = SentenceEncoder(path)

    def use_encoder(self, encoder: Any) -> None:
        """Embed with ``encoder`` (already loaded, shared); `setup` then loads nothing."""
        self._encoder, self._path = encoder, Path(encoder.model_dir)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        """Fresh embeddings (what a prediction pays for)."""
        if self._encoder is None:
            self.setup()
        return self._encoder.encode(list(texts))

    def _embed_training(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of training texts, each encoded once per arm: later folds reuse them.

        The encoder is fixed and never sees a label, so reusing a training
        text's vector changes no result, only the fit time (which then counts
        each training text once, as training on all rows at once would).
        """
        missing = list(dict.fromkeys(t for t in texts if t not in self._train_cache))
        if missing:
            self._train_cache.update(zip(missing, self._embed(missing)))
        return np.stack([self._train_cache[t] for t in texts])

    def model_sha256(self) -> str | None:
        return self._encoder.digest if self._encoder is not None else None  # = embedding_digest(self._path)

    def identity(self) -> dict[str, Any]:
        ident = super().identity()
        if self._encoder is not None:
            ident["model_dir"] = shown_path(self._path)
        return ident


@register("embedding_logreg")
class EmbeddingLogRegArm(EmbeddingClassifier):
    """Sentence embeddings + multinomial logistic regression."""

    def __init__(self, name: str | None = None, model_dir: str | None = None, C: float = 1.0, max_iter: int = 1000,
                 seed: int = 0) -> None:
        super().__init__(name, model_dir)
        if C <= 0:
            raise ArmError(f"{self.name}: need C > 0")
        self.params = {"model_dir": model_dir, "C": C, "max_iter": max_iter, "seed": seed}

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        self._remember(texts, labels)
        p = self.params
        self._model = fit_or_constant(logreg(p["C"], p["max_iter"], p["seed"]), self._embed_training(texts), labels,
                                       self.classes_)

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        if not self.classes_:
            raise ArmError(f"{self.name}: predict_proba before fit")
        return self._to_candidates(predict_columns(self._model, self._embed(texts), len(self.classes_)), labels)


@register("embedding_knn")
class EmbeddingKnnArm(EmbeddingClassifier):
    """Sentence embeddings + k-nearest-neighbours vote (cosine distance; k capped at the training rows)."""

    def __init__(self, name: str | None = None, model_dir: str | None = None, n_neighbors: int = 5,
                 weights: Literal["uniform", "distance"] = "uniform") -> None:
        super().__init__(name, model_dir)
        if n_neighbors < 1 or weights not in ("uniform", "distance"):
            raise ArmError(f"{self.name}: need n_neighbors >= 1 and weights 'uniform' or 'distance'")
        self.params = {"model_dir": model_dir, "n_neighbors": n_neighbors, "weights": weights}

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        from sklearn.neighbors import KNeighborsClassifier

        self._remember(texts, labels)
        k = min(self.params["n_neighbors"], len(texts))
        model = KNeighborsClassifier(n_neighbors=k, weights=self.params["weights"], metric="cosine")
        self._model = fit_or_constant(model, self._embed_training(texts), labels, self.classes_)

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        if not self.classes_:
            raise ArmError(f"{self.name}: predict_proba before fit")
        return self._to_candidates(predict_columns(self._model, self._embed(texts), len(self.classes_)), labels)


def _tfidf(p: dict[str, Any]):
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(ngram_range=(1, p["ngram_max"]), min_df=p["min_df"], sublinear_tf=p["sublinear_tf"])


def softmax_decision(scores: np.ndarray) -> np.ndarray:
    """Softmax over a linear model's raw decision values: ``(n,)`` (two classes: the positive class's margin,
    read as class scores ``[0, d]``, so the softmax is the logistic sigmoid of ``d``) or ``(n, k)`` (one score
    per class) -> ``(n, k)`` rows summing to 1. The temperature is 1: nothing is fitted, which is the point
    of the ``raw`` calibration."""
    d = np.asarray(scores, dtype=np.float64)
    if d.ndim == 1:
        d = np.stack([np.zeros_like(d), d], axis=1)
    z = np.exp(d - d.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


@register("tfidf_linearsvc")
class TfidfLinearSvcArm(FittedClassifier):
    """tf-idf word n-grams (as ``tfidf_logreg``), then a linear SVM (``LinearSVC``, squared hinge, one-vs-rest).

    calibration: ``"platt"`` (default): ``CalibratedClassifierCV(method="sigmoid", ensemble=False)``, Platt
    (1999) scaling: one sigmoid per class fitted on out-of-fold decision values (k = min(5, smallest class
    count) folds) of the one SVM fitted on all the rows; with a class of one training row no fold can hold it
    out, so the sigmoids are fitted on the SVM's own training rows (in-sample). ``identity()["platt_fits"]``
    counts the fits done each way. ``"raw"``: `softmax_decision` of ``decision_function``, nothing fitted.
    The SVM is the same; with more than two classes the per-class sigmoids can reorder a row's labels, so
    the arg-max may differ a little, and the confidence (ECE) differs.
    """

    def __init__(self, name: str | None = None, C: float = 1.0, calibration: Literal["platt", "raw"] = "platt", ngram_max: int = 2,
                 min_df: int = 1, sublinear_tf: bool = True, max_iter: int = 5000, seed: int = 0) -> None:
        super().__init__(name)
        if C <= 0 or ngram_max < 1 or min_df < 1:
            raise ArmError(f"{self.name}: need C > 0, ngram_max >= 1, min_df >= 1")
        if calibration not in ("platt", "raw"):
            raise ArmError(f"{self.name}: calibration must be 'platt' or 'raw', got {calibration!r}")
        self.params = {"C": C, "calibration": calibration, "ngram_max": ngram_max, "min_df": min_df,
                       "sublinear_tf": sublinear_tf, "max_iter": max_iter, "seed": seed}
        self.platt_fits: Counter[str] = Counter()

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        from sklearn.svm import LinearSVC

        self._remember(texts, labels)
        p = self.params
        self._vec = _tfidf(p)
        x = self._vec.fit_transform(list(texts))
        svm = LinearSVC(C=p["C"], max_iter=p["max_iter"], random_state=p["seed"])
        if p["calibration"] == "raw" or len(self.classes_) < 2:
            self._model = fit_or_constant(svm, x, labels, self.classes_)
            return
        smallest = min(Counter(labels).values())
        if smallest >= 2:
            from sklearn.calibration import CalibratedClassifierCV

            self.platt_fits[f"out-of-fold, {min(5, smallest)} folds"] += 1
            model = CalibratedClassifierCV(svm, method="sigmoid", cv=min(5, smallest), ensemble=False)
        else:
            from sklearn.calibration import CalibratedClassifierCV
            from sklearn.frozen import FrozenEstimator

            self.platt_fits["in-sample (a class has one training row)"] += 1
            fit_few_shot(svm, x, labels, self.classes_)
            every = np.arange(len(labels))  # one "split" whose calibration rows are all the training rows
            model = CalibratedClassifierCV(FrozenEstimator(svm), method="sigmoid", cv=[(every, every)])
        self._model = fit_or_constant(model, x, labels, self.classes_)

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        if not self.classes_:
            raise ArmError(f"{self.name}: predict_proba before fit")
        x = self._vec.transform(list(texts))
        if self._model is None or self.params["calibration"] == "platt":
            return self._to_candidates(predict_columns(self._model, x, len(self.classes_)), labels)
        out = np.zeros((x.shape[0], len(self.classes_)), dtype=np.float64)
        out[:, self._model.classes_] = softmax_decision(self._model.decision_function(x))
        return self._to_candidates(out, labels)

    def identity(self) -> dict[str, Any]:
        ident = super().identity()
        if self.platt_fits:
            ident["platt_fits"] = dict(sorted(self.platt_fits.items()))  # how each fit's sigmoid was fitted -> fits
        return ident


@register("char_nb")
class CharNaiveBayesArm(FittedClassifier):
    """Character n-gram counts (``char_wb``: n-grams inside word boundaries, ``ngram_min``..``ngram_max``,
    lower-cased), then multinomial naive Bayes (``alpha``: Laplace/Lidstone smoothing, scikit-learn's
    default 1.0). Naive Bayes multiplies one likelihood per n-gram as if they were independent, and
    overlapping character n-grams are anything but, so its probabilities sit near 0 and 1 whatever its
    accuracy: the over-confident arm of a bake-off."""

    def __init__(self, name: str | None = None, ngram_min: int = 2, ngram_max: int = 5, alpha: float = 1.0) -> None:
        super().__init__(name)
        if not 1 <= ngram_min <= ngram_max or alpha <= 0:
            raise ArmError(f"{self.name}: need 1 <= ngram_min <= ngram_max and alpha > 0")
        self.params = {"ngram_min": ngram_min, "ngram_max": ngram_max, "alpha": alpha}

    def fit(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        from sklearn.feature_extraction.text import CountVectorizer
        from sklearn.naive_bayes import MultinomialNB

        self._remember(texts, labels)
        p = self.params
        self._vec = CountVectorizer(analyzer="char_wb", ngram_range=(p["ngram_min"], p["ngram_max"]))
        x = self._vec.fit_transform(list(texts))
        self._model = fit_or_constant(MultinomialNB(alpha=p["alpha"]), x, labels, self.classes_)

    def predict_proba(self, texts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        if not self.classes_:
            raise ArmError(f"{self.name}: predict_proba before fit")
        x = self._vec.transform(list(texts))
        return self._to_candidates(predict_columns(self._model, x, len(self.classes_)), labels)
