"""Pairs -> logits -> probabilities: the NLI model and the scoring rules.

A zero-shot request is one premise (the document) and K hypotheses (the
label descriptions). The NLI cross-encoder gives 3-way logits per pair;
``scores_from_logits`` turns them into one score per pair according to a
scoring rule, and ``label_probabilities`` turns the K scores of one request
into K probabilities with a temperature that may depend on K.

Everything here is synchronous and stateless; the dynamic batcher
(`zsnli.batching`) and the HTTP layer (`zsnli.app`) sit on top of it, and
offline users (calibration, benchmarks) call ``NliModel.predict_logits``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

logger = logging.getLogger(__name__)

LABEL_NAMES = ("entailment", "neutral", "contradiction")

#: Scoring rules understood by `scores_from_logits`.
#: ``entailment``: the entailment logit.
#: ``entailment_minus_contradiction``: entailment logit minus contradiction logit.
#: ``entailment_logprob``: log p(entailment) under the 3-way softmax.
RULES = ("entailment", "entailment_minus_contradiction", "entailment_logprob")

#: Upper bound on the model window when neither tokenizer nor config gives a sane one.
DEFAULT_MAX_LENGTH = 512
#: Largest window we accept from a tokenizer/config (larger values are sentinels like 1e30).
_SANE_WINDOW = 1 << 16
#: Sequences are padded to a multiple of this (tensor-core friendly shapes).
PAD_MULTIPLE = 8
# Default padded-token budget per forward batch, by device kind. On the 2-core
# AMD EPYC (AVX-512) dev machine, torch 2.13 fp32, MiniLM-L6 on 1/8 of the public
# examples, length-sorted batches: 16384 -> 5.92 docs/s, 8192 -> 6.53,
# 4096 -> 8.30, 2048 -> 8.93, 1024 -> 9.10, 512 -> 8.64 (README, Performance). Small
# CPU batches stay in cache; accelerators want large ones (not measured here).
CPU_TOKEN_BUDGET = 2048
ACCELERATOR_TOKEN_BUDGET = 16384


class ModelConfigError(RuntimeError):
    """The model directory cannot be served as an NLI model (e.g. no entailment label)."""


class ScoringConfigError(ValueError):
    """A scoring configuration (or calibration.json) is invalid."""


# --------------------------------------------------------------------------- labels


def label_indices(id2label: Mapping[Any, str]) -> tuple[int, int]:
    """Find the entailment and contradiction indices in a model's ``id2label``.

    Names are matched case-insensitively on their prefix: ``entail...`` and
    ``contradict...`` (so ``ENTAILMENT``, ``Entailed``, ``contradiction`` all
    work). Keys may be ints or digit strings (as in ``config.json``).

    Returns ``(entailment_idx, contradiction_idx)``.
    Raises ``ModelConfigError`` when either label is missing or ambiguous
    (e.g. generic ``LABEL_0/LABEL_1/LABEL_2`` names).
    """
    if not id2label:
        raise ModelConfigError("config.json has no id2label mapping")
    entail: list[int] = []
    contra: list[int] = []
    for key, name in id2label.items():
        try:
            idx = int(key)
        except (TypeError, ValueError) as exc:
            raise ModelConfigError(f"id2label key is not an integer: {key!r}") from exc
        low = str(name).strip().lower()
        if low.startswith("entail"):
            entail.append(idx)
        elif low.startswith("contradict"):
            contra.append(idx)
    names = ", ".join(f"{k}={v}" for k, v in sorted(id2label.items(), key=lambda kv: int(kv[0])))
    if len(entail) != 1:
        why = "no" if not entail else "more than one"
        raise ModelConfigError(f"{why} entailment label in id2label ({names})")
    if len(contra) != 1:
        why = "no" if not contra else "more than one"
        raise ModelConfigError(f"{why} contradiction label in id2label ({names})")
    return entail[0], contra[0]


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class ScoringConfig:
    """How per-pair logits become per-request probabilities.

    rule: one of ``RULES``.
    temperature, k_exponent: the softmax temperature for a request with K
        labels is ``T(K) = temperature * K ** k_exponent`` (must be > 0).
    content_free_premise: when set, each label's score against this premise
        (e.g. ``""`` or ``"N/A"``) is subtracted from its score against the
        document before the softmax. Computed inside the same request (K extra
        pairs), never cached.
    embedding_weight: w; when non-zero, ``w * cos(text, label)`` of the base
        encoder's sentence embeddings (`zsnli.embedding`) is added to each
        score; ``embedding_sha256`` names the embedding weights that w was
        chosen with (the server refuses other weights).
    """

    rule: str = "entailment"
    temperature: float = 1.0
    k_exponent: float = 0.0
    content_free_premise: str | None = None
    embedding_weight: float = 0.0
    embedding_sha256: str | None = None

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ScoringConfigError(f"unknown scoring rule {self.rule!r}; expected one of {RULES}")
        for name in ("temperature", "k_exponent", "embedding_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ScoringConfigError(f"{name} must be a finite number, got {value!r}")
        if self.temperature <= 0:
            raise ScoringConfigError(f"temperature must be > 0, got {self.temperature!r}")
        if self.content_free_premise is not None and not isinstance(self.content_free_premise, str):
            raise ScoringConfigError("content_free_premise must be a string or null")
        if self.embedding_weight != 0 and not isinstance(self.embedding_sha256, str):
            raise ScoringConfigError("embedding_weight != 0 needs embedding_sha256 (the digest of the embedding model)")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ScoringConfig":
        """Build from a dict (e.g. calibration.json's ``chosen``); unknown keys are ignored.

        Raises ``ScoringConfigError`` on a non-mapping or invalid values.
        """
        if not isinstance(d, Mapping):
            raise ScoringConfigError(f"scoring config must be an object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        for name in ("temperature", "k_exponent", "embedding_weight"):
            if name in kwargs and isinstance(kwargs[name], int) and not isinstance(kwargs[name], bool):
                kwargs[name] = float(kwargs[name])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with every field (inverse of ``from_dict``)."""
        return asdict(self)

    def temperature_for(self, k: int) -> float:
        """The softmax temperature for a request with ``k >= 1`` labels: ``temperature * k ** k_exponent``."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return float(self.temperature) * float(k) ** float(self.k_exponent)


def load_scoring_config(path: str | Path) -> tuple[ScoringConfig, bool]:
    """Read the ``chosen`` scoring config from calibration.json.

    Returns ``(config, True)`` when the file exists, ``(ScoringConfig(), False)``
    when it does not (the caller logs a warning: entailment logit, T = 1).
    Raises ``ScoringConfigError`` when the file exists but is unreadable or has
    no valid ``chosen`` object (a broken calibration must not be silently ignored).
    """
    p = Path(path)
    if not p.is_file():
        return ScoringConfig(), False
    try:
        with open(p, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ScoringConfigError(f"calibration file unreadable: {p}: {exc}") from exc
    if not isinstance(data, dict) or "chosen" not in data:
        raise ScoringConfigError(f"calibration file has no 'chosen' object: {p}")
    try:
        return ScoringConfig.from_dict(data["chosen"]), True
    except (TypeError, ScoringConfigError) as exc:
        raise ScoringConfigError(f"calibration file {p}: invalid 'chosen': {exc}") from exc


# --------------------------------------------------------------------------- scores


def _check_finite(name: str, arr: np.ndarray) -> None:
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values")


def scores_from_logits(logits: np.ndarray, rule: str, entail_idx: int, contra_idx: int) -> np.ndarray:
    """One score per pair from NLI logits.

    logits: ``[N, C]`` (C = 3) array, any float dtype.
    rule: one of ``RULES``.
    Returns a float64 array of shape ``[N]``. Raises ``ValueError`` on an
    unknown rule or a wrong shape. Non-finite logits pass through (callers
    check with ``label_probabilities``, which raises).
    """
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] <= max(entail_idx, contra_idx):
        raise ValueError(f"logits must be [N, C] with C > {max(entail_idx, contra_idx)}, got {x.shape}")
    if rule == "entailment":
        return x[:, entail_idx].copy()
    if rule == "entailment_minus_contradiction":
        return x[:, entail_idx] - x[:, contra_idx]
    if rule == "entailment_logprob":
        m = x.max(axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
        return x[:, entail_idx] - lse
    raise ValueError(f"unknown scoring rule {rule!r}; expected one of {RULES}")


def combined_scores(
    scores: np.ndarray,
    content_free_scores: np.ndarray | None = None,
    cosine: np.ndarray | None = None,
    embedding_weight: float = 0.0,
) -> np.ndarray:
    """Per-label score before the temperature: ``scores - cf + w * cos``.

    scores: ``[K]`` (``scores_from_logits``), K >= 1; content_free_scores:
    optional ``[K]``, subtracted; cosine: ``[K]``, required when
    ``embedding_weight`` (w) is non-zero, ignored otherwise. Returns float64
    ``[K]``. Raises ``ValueError`` on an empty or non-1-D input, a shape
    mismatch, or any non-finite value. The server (`label_probabilities`)
    and calibration use this one formula.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {s.shape}")
    _check_finite("scores", s)
    if content_free_scores is not None:
        cf = np.asarray(content_free_scores, dtype=np.float64)
        if cf.shape != s.shape:
            raise ValueError(f"content_free_scores shape {cf.shape} != scores shape {s.shape}")
        _check_finite("content_free_scores", cf)
        s = s - cf
    if embedding_weight != 0:
        if cosine is None:
            raise ValueError("embedding_weight is set but no cosine similarities were given")
        cos = np.asarray(cosine, dtype=np.float64)
        if cos.shape != s.shape:
            raise ValueError(f"cosine shape {cos.shape} != scores shape {s.shape}")
        _check_finite("cosine", cos)
        s = s + embedding_weight * cos
    return s


def label_probabilities(
    scores: np.ndarray,
    config: ScoringConfig,
    content_free_scores: np.ndarray | None = None,
    cosine: np.ndarray | None = None,
) -> np.ndarray:
    """Probabilities over one request's K labels: ``softmax((scores - cf + w * cos) / T(K))``.

    scores: ``[K]`` per-label scores (``scores_from_logits``), K >= 1.
    content_free_scores: optional ``[K]`` scores of the same labels against the
        content-free premise, subtracted first.
    cosine: ``[K]`` cosine similarities of the text with each label; required
        when ``config.embedding_weight`` is non-zero, ignored otherwise.
    Returns float64 ``[K]``, each in [0, 1], summing to 1 (max-subtracted
    softmax; one label gives exactly ``[1.0]``).
    Raises ``ValueError`` on an empty or non-1-D input, a shape mismatch, or
    any non-finite value.
    """
    s = combined_scores(scores, content_free_scores, cosine, config.embedding_weight)
    z = s / config.temperature_for(s.size)
    _check_finite("scaled scores", z)
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


def multi_label_probabilities(logits: np.ndarray, entail_idx: int, contra_idx: int) -> np.ndarray:
    """Independent per-label probabilities, as transformers' zero-shot pipeline with ``multi_label=True``.

    For each pair, softmax over its (entailment, contradiction) logits and keep
    the entailment part: ``sigmoid(l_e - l_c)``, computed stably in float64.
    logits: ``[K, C]``. Returns float64 ``[K]`` in [0, 1] (not summing to 1).
    Raises ``ValueError`` on non-finite logits or a wrong shape.
    """
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] <= max(entail_idx, contra_idx):
        raise ValueError(f"logits must be [K, C] with C > {max(entail_idx, contra_idx)}, got {x.shape}")
    _check_finite("logits", x)
    d = x[:, entail_idx] - x[:, contra_idx]
    out = np.empty_like(d)
    pos = d >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-d[pos]))
    ed = np.exp(d[~pos])
    out[~pos] = ed / (1.0 + ed)
    return out


# --------------------------------------------------------------------------- model

_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}


def _resolve_dtype(name: str):
    import torch

    key = str(name).lower().replace("torch.", "")
    if key not in _DTYPES:
        raise ValueError(f"unsupported dtype {name!r}; expected one of {sorted(_DTYPES)}")
    return getattr(torch, _DTYPES[key])


def _window(tokenizer, config, cap: int) -> int:
    candidates: list[int] = []
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < _SANE_WINDOW:
        candidates.append(tok_max)
    pos_max = getattr(config, "max_position_embeddings", None)
    if isinstance(pos_max, int) and 0 < pos_max < _SANE_WINDOW:
        # RoBERTa-family position ids start after the padding index.
        if "roberta" in str(getattr(config, "model_type", "")) or getattr(config, "model_type", "") in (
            "camembert",
            "longformer",
        ):
            pad = getattr(config, "pad_token_id", 1) or 1
            pos_max -= pad + 1
        candidates.append(pos_max)
    window = min(candidates) if candidates else DEFAULT_MAX_LENGTH
    return max(8, min(window, cap))


def default_token_budget(device: str) -> int:
    """Padded tokens per forward batch when none is configured.

    ``CPU_TOKEN_BUDGET`` (2048) for ``"cpu"``, ``ACCELERATOR_TOKEN_BUDGET``
    (16384) for anything else (``"cuda"``, ``"cuda:1"``, ``"mps"``). The CPU
    figure is the measured optimum above; returns an int > 0.
    """
    return CPU_TOKEN_BUDGET if str(device).split(":")[0] == "cpu" else ACCELERATOR_TOKEN_BUDGET


def _pad_to(n: int, multiple: int = PAD_MULTIPLE) -> int:
    return ((n + multiple - 1) // multiple) * multiple


@dataclass
class Encoded:
    """The token ids of one (premise, hypothesis) pair, ready for batching.

    input_ids: token ids including special tokens, at most the model window.
    token_type_ids: segment ids, or None when the tokenizer emits none.
    """

    input_ids: list[int]
    token_type_ids: list[int] | None = None

    def __len__(self) -> int:
        return len(self.input_ids)


class NliModel:
    """A tokenizer plus an ``AutoModelForSequenceClassification`` NLI head.

    Attributes: ``tokenizer``, ``model`` (eval mode; None for a backend that
    runs without a torch model, e.g. `zsnli.onnx_backend.OnnxNliModel`),
    ``config`` (the HF config), ``backend`` (``"torch"`` here), ``device``
    (str), ``dtype`` (torch dtype here), ``entail_idx``, ``contra_idx``,
    ``max_length`` (model window in tokens, including special tokens), ``id2label``.

    Tokenizer calls are serialised by a lock (fast tokenizers are not safe to
    reconfigure from several threads); ``logits`` may run in another thread
    concurrently with ``encode``.
    """

    #: Which runtime computes ``logits`` (shown by /health and the startup log).
    backend = "torch"

    def __init__(self, tokenizer, model, device: str, dtype, max_length: int, config=None) -> None:
        """``config``: the HF config; default ``model.config`` (give it when ``model`` is None)."""
        self.tokenizer = tokenizer
        self.model = model
        self.device = device
        self.dtype = dtype
        self.max_length = int(max_length)
        cfg = config if config is not None else model.config
        self.config = cfg
        self.id2label = {int(k): str(v) for k, v in cfg.id2label.items()}
        self.entail_idx, self.contra_idx = label_indices(self.id2label)
        self.num_labels = len(self.id2label)
        self._tok_lock = threading.Lock()
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad) if pad is not None else 0
        self._n_special_pair = int(tokenizer.num_special_tokens_to_add(pair=True))
        self.emits_token_type_ids = "token_type_ids" in getattr(
            tokenizer, "model_input_names", ["input_ids", "token_type_ids", "attention_mask"]
        )

    # ----------------------------------------------------------------- loading

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        device: str | None = None,
        dtype: str | None = None,
        max_length: int | None = None,
    ) -> "NliModel":
        """Load tokenizer and model from a local directory (``local_files_only``, no network).

        device: ``"cuda"``, ``"cuda:1"``, ``"cpu"``...; default CUDA when available, else CPU.
        dtype: ``"float32"``/``"bfloat16"``/``"float16"`` (aliases fp32/bf16/fp16);
            default bf16 on CUDA, fp32 on CPU. Always passed explicitly to
            ``from_pretrained`` (weights may be stored in fp16).
        max_length: cap on the model window (default 512).
        Raises ``ModelConfigError`` when id2label has no entailment/contradiction
        label, ``OSError``/``ValueError`` from transformers on missing or bad files.
        """
        import torch
        from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

        model_dir = Path(model_dir)
        config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        label_indices(config.id2label)  # refuse early, before loading weights
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if dtype is None:
            torch_dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
        else:
            torch_dtype = _resolve_dtype(dtype)
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            model_dir, local_files_only=True, dtype=torch_dtype
        )
        model.to(device)
        model.eval()
        window = _window(tokenizer, model.config, max_length or DEFAULT_MAX_LENGTH)
        return cls(tokenizer, model, str(device), torch_dtype, window)

    # ----------------------------------------------------------------- tokens

    def _clip_premises(self, premises: Sequence[str]) -> dict[str, str]:
        """Cut each distinct premise to the characters of its first ``max_length`` tokens.

        Pair truncation keeps fewer tokens than that, so the result is the same
        while a request's K pairs no longer re-tokenise a long document K times.
        """
        unique = list(dict.fromkeys(premises))
        if not getattr(self.tokenizer, "is_fast", False):  # no offsets: tokenise in full
            return {text: text for text in unique}
        enc = self.tokenizer(
            unique,
            add_special_tokens=False,
            truncation=True,
            max_length=self.max_length,
            return_offsets_mapping=True,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        clipped: dict[str, str] = {}
        for text, offsets in zip(unique, enc["offset_mapping"]):
            if len(offsets) < self.max_length:
                clipped[text] = text
            else:
                clipped[text] = text[: max(end for _, end in offsets)]
        return clipped

    def encode(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[Encoded]:
        """Tokenise N (premise, hypothesis) pairs in one batched fast-tokenizer call.

        Truncation is ``only_first`` (the premise) to ``max_length``; callers
        must check ``hypothesis_fits`` first (a hypothesis that does not fit
        makes the tokenizer raise). Returns N ``Encoded`` in input order.
        Raises ``ValueError`` when the list lengths differ.
        """
        if len(premises) != len(hypotheses):
            raise ValueError(f"{len(premises)} premises but {len(hypotheses)} hypotheses")
        if not premises:
            return []
        with self._tok_lock:
            clip = self._clip_premises(premises)
            enc = self.tokenizer(
                [clip[p] for p in premises],
                list(hypotheses),
                truncation="only_first",
                max_length=self.max_length,
                padding=False,
                return_attention_mask=False,
                return_token_type_ids=self.emits_token_type_ids,
            )
        ids = enc["input_ids"]
        types = enc.get("token_type_ids") if self.emits_token_type_ids else None
        if types is None:
            return [Encoded(list(i)) for i in ids]
        return [Encoded(list(i), list(t)) for i, t in zip(ids, types)]

    def hypothesis_lengths(self, hypotheses: Sequence[str]) -> list[int]:
        """Token count of each hypothesis alone, without special tokens (one batched call)."""
        if not hypotheses:
            return []
        with self._tok_lock:
            enc = self.tokenizer(
                list(hypotheses),
                add_special_tokens=False,
                truncation=False,
                return_attention_mask=False,
                return_token_type_ids=False,
                verbose=False,
            )
        return [len(i) for i in enc["input_ids"]]

    def max_hypothesis_tokens(self) -> int:
        """The longest hypothesis (tokens, no specials) that leaves room for one premise token."""
        return self.max_length - self._n_special_pair - 1

    def hypothesis_fits(self, hypothesis: str) -> bool:
        """True when the hypothesis alone, with the pair's special tokens and at least
        one premise token, fits in the model window (so it is never cut)."""
        return self.hypothesis_lengths([hypothesis])[0] <= self.max_hypothesis_tokens()

    # ----------------------------------------------------------------- forward

    def collate(self, batch: Sequence[Encoded]) -> dict[str, Any]:
        """Right-pad a batch to a multiple of 8 tokens; returns CPU torch tensors."""
        import torch

        n = len(batch)
        width = _pad_to(max(len(e) for e in batch))
        ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        with_types = self.emits_token_type_ids and all(e.token_type_ids is not None for e in batch)
        types = torch.zeros((n, width), dtype=torch.long) if with_types else None
        for row, e in enumerate(batch):
            L = len(e.input_ids)
            ids[row, :L] = torch.as_tensor(e.input_ids, dtype=torch.long)
            mask[row, :L] = 1
            if types is not None:
                types[row, :L] = torch.as_tensor(e.token_type_ids, dtype=torch.long)
        inputs = {"input_ids": ids, "attention_mask": mask}
        if types is not None:
            inputs["token_type_ids"] = types
        return inputs

    def logits(self, encoded_batch: Sequence[Encoded]) -> np.ndarray:
        """Forward one batch of encoded pairs.

        Pads to the batch's longest pair rounded up to a multiple of 8, runs
        under ``torch.inference_mode``, returns float32 numpy ``[B, C]`` (C = 3)
        in batch order. Non-finite values are returned as they are (callers check).
        """
        import torch

        if not encoded_batch:
            return np.zeros((0, self.num_labels), dtype=np.float32)
        inputs = self.collate(encoded_batch)
        with torch.inference_mode():
            inputs = {k: v.to(self.device, non_blocking=True) for k, v in inputs.items()}
            out = self.model(**inputs).logits
            return out.float().cpu().numpy()

    def predict_logits(
        self,
        premises: Sequence[str],
        hypotheses: Sequence[str],
        token_budget: int | None = None,
    ) -> np.ndarray:
        """Logits for N pairs, for offline use (calibration, benchmarks).

        Pairs are length-sorted and grouped so that each batch's padded size
        (pairs x longest length rounded to 8) stays within ``token_budget``
        (default: ``default_token_budget(self.device)``).
        Returns float32 ``[N, C]`` in input order. Hypotheses that do not fit
        the window raise ``ValueError``.
        """
        n = len(premises)
        if n != len(hypotheses):
            raise ValueError(f"{n} premises but {len(hypotheses)} hypotheses")
        out = np.zeros((n, self.num_labels), dtype=np.float32)
        if n == 0:
            return out
        limit = self.max_hypothesis_tokens()
        uniq = list(dict.fromkeys(hypotheses))
        too_long = [h for h, L in zip(uniq, self.hypothesis_lengths(uniq)) if L > limit]
        if too_long:
            raise ValueError(f"{len(too_long)} hypotheses do not fit the {self.max_length}-token window, e.g. {too_long[0][:80]!r}")
        encoded = self.encode(premises, hypotheses)
        budget = token_budget or default_token_budget(self.device)
        for idx in plan_batches([len(e) for e in encoded], budget):
            out[idx] = self.logits([encoded[i] for i in idx])
        return out


def plan_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Group item indices into length-sorted batches under a padded-token budget.

    A batch of n items whose longest is L (rounded up to a multiple of 8)
    costs n * L tokens and is kept <= ``token_budget``; an item alone over the
    budget still forms its own batch. Returns lists of indices (longest first).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        w = _pad_to(lengths[i])
        if current and max(width, w) * (len(current) + 1) > token_budget:
            batches.append(current)
            current, width = [], 0
        current.append(i)
        width = max(width, w)
    if current:
        batches.append(current)
    return batches
