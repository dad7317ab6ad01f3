"""text-embeddings-inference (TEI) shapes: ``GET /info`` and the sequence-classification ``POST /predict``.

For users of TEI's routes (field names and shapes from TEI's router: ``Info`` and ``PredictRequest`` /
``Prediction`` in ``router/src/lib.rs`` and ``router/src/http/types.rs`` of
huggingface/text-embeddings-inference):

* `info_body` builds ``GET /info``: ``model_id``, ``model_sha`` (the hub commit; null for a local
  directory), ``model_dtype``, ``model_type`` (``{"classifier": {"id2label", "label2id"}}``: the NLI
  head's classes), ``max_concurrent_requests``, ``max_input_length``, ``max_batch_tokens``,
  ``max_batch_requests``, ``max_client_batch_size``, ``auto_truncate``, ``tokenization_workers``,
  ``version``, ``sha``, ``docker_label``, each filled from the zsnli setting that plays its part.
* `read_predict` reads a ``/predict`` body: ``inputs`` is one (premise, hypothesis) pair
  ``[premise, hypothesis]`` or a list of pairs; ``raw_scores`` (default false) answers the logits
  instead of the softmax over the head's classes; ``truncate`` is accepted and changes nothing (the premise is
  always cut to the window, only on its own side: ``auto_truncate``), ``truncation_direction`` may only be right.
  A single text is refused: an NLI head's classes (entailment, neutral, contradiction) describe a pair,
  so a text alone has no meaning for it (`zsnli.serving.app` says to send pairs, or ``/classify``).
  `predictions` builds the answer: per pair ``[{"score", "label"}]``, highest score first, as TEI.

* `read_tokenize` reads a ``/tokenize`` body (``inputs``: a text or a list of texts; ``add_special_tokens``,
  default true; ``prompt_name`` only null: the model has no sentence-transformers prompts) and
  `simple_tokens` answers TEI's ``SimpleToken`` list of each text: ``{"id", "text", "special", "start",
  "stop"}``, ``start``/``stop`` UTF-8 byte offsets into the text (as TEI's), null for a special token,
  whose ``text`` is the token itself; nothing is truncated. The answer is always a list of lists. The texts
  of one request hold at most ``ZSNLI_MAX_TEXT_CHARS`` characters in all (413 beyond: every token is answered
  as an object of about 70 bytes).
* `tei_status`: an ``overloaded`` error (the queue is full) is answered 429 on these routes, TEI's status
  for its ``Overloaded`` error (``Retry-After`` kept); every other route answers it 503.

This is the model's own head, not zero-shot labels: ``/predict`` answers the NLI classes of each pair,
with no template, calibration or cosine term (``/classify`` is the zero-shot route).

May import: numpy, the standard library, `zsnli.errors`, `zsnli.serving.api_types` (the field rules).
Imported by `zsnli.serving.app`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..errors import ApiError, ErrorType
from .api_types import misspelt_fields

#: Keys of a ``/predict`` body (others are ignored; a misspelt one is a 422 naming it).
PREDICT_KEYS = ("inputs", "truncate", "truncation_direction", "raw_scores")
PAIR_HINT = ("this model is an NLI cross-encoder: its classes describe a (premise, hypothesis) pair, so send "
             "inputs as [premise, hypothesis] or a list of such pairs; for zero-shot labels of one text use "
             "POST /classify or POST /v1/zero-shot-classification")


#: ``openapi_extra=`` of ``POST /predict``: the body's schema and two examples (one pair, a list of pairs).
PREDICT_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {
            "schema": {"type": "object", "required": ["inputs"], "properties": {
                "inputs": {"description": "One [premise, hypothesis] pair, or a list of pairs (at most "
                           "ZSNLI_MAX_BATCH_ITEMS).", "type": "array"},
                "raw_scores": {"type": "boolean", "default": False,
                               "description": "Answer the logits instead of the softmax over the classes."},
                "truncate": {"type": "boolean", "description": "Accepted; the premise is always truncated."},
                "truncation_direction": {"type": "string", "enum": ["right", "Right"],
                                         "description": "Only right: the end of the premise is cut."}}},
            "examples": {
                "pair": {"summary": "one (premise, hypothesis) pair",
                         "value": {"inputs": ["The striker scored twice.", "This text is about sport."]}},
                "pairs": {"summary": "a list of pairs, logits",
                          "value": {"inputs": [["Shares fell 4%.", "This text is about business."],
                                               ["Shares fell 4%.", "This text is about sport."]],
                                    "raw_scores": True}},
            },
        }},
    }
}


#: ``openapi_extra=`` of ``POST /tokenize``: the body's schema and an example.
TOKENIZE_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {
            "schema": {"type": "object", "required": ["inputs"], "properties": {
                "inputs": {"description": "A text, or a list of texts (at most ZSNLI_MAX_BATCH_ITEMS)."},
                "add_special_tokens": {"type": "boolean", "default": True},
                "prompt_name": {"type": "string", "nullable": True,
                                "description": "Only null: the model has no sentence-transformers prompts."}}},
            "examples": {"text": {"summary": "one text", "value": {"inputs": "The striker scored twice."}}}}},
    },
}


@dataclass(frozen=True)
class PredictCall:
    """One ``/predict`` request: ``pairs`` ``[(premise, hypothesis)]`` in order, ``single`` (inputs was one
    pair: answer one list, not a list of lists) and ``raw_scores``."""

    pairs: list[tuple[str, str]]
    single: bool
    raw_scores: bool


def _invalid(message: str, field: str) -> ApiError:
    return ApiError(ErrorType.VALIDATION, f"{field}: {message}", field)


def _is_pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)


def read_predict(payload: Any, max_items: int) -> PredictCall:
    """Check a ``/predict`` body and build a `PredictCall`.

    payload: the parsed JSON body. max_items: most pairs in one request (``ZSNLI_MAX_BATCH_ITEMS``, TEI's
    ``max_client_batch_size``). A list of exactly two strings is one pair (TEI reads it so too).
    Raises ``ApiError`` 422 naming the field: body not an object, a misspelt key, ``inputs`` missing, a
    text alone or a list of texts (`PAIR_HINT`), a pair that is not two strings (``inputs[i]``), an empty
    list or more than ``max_items`` pairs; ``raw_scores`` or ``truncate`` not a boolean, ``truncation_direction``
    other than right (as ``/embed``).
    """
    if not isinstance(payload, dict):
        raise _invalid("body must be a JSON object with inputs", "body")
    misspelt = misspelt_fields(payload, PREDICT_KEYS)
    if misspelt:
        raise ApiError(ErrorType.VALIDATION, f"{misspelt[0]['field']}: {misspelt[0]['error']}", misspelt[0]["field"],
                       errors=misspelt)
    if "inputs" not in payload:
        raise _invalid(f"field required ({PAIR_HINT})", "inputs")
    inputs = payload["inputs"]
    for key in ("raw_scores", "truncate"):
        if key in payload and payload[key] is not None and not isinstance(payload[key], bool):
            raise _invalid("must be a boolean", key)
    direction = payload.get("truncation_direction")  # any value was taken: "sideways" answered 200
    if direction is not None and (not isinstance(direction, str) or direction.lower() != "right"):
        raise _invalid("only right (the end of the premise is cut to fit the window)", "truncation_direction")
    raw = bool(payload.get("raw_scores") or False)
    if isinstance(inputs, str):
        raise _invalid(f"a text alone cannot be scored: {PAIR_HINT}", "inputs")
    if _is_pair(inputs):
        return PredictCall([(inputs[0], inputs[1])], True, raw)
    if not isinstance(inputs, list) or not inputs:
        raise _invalid(f"must be a [premise, hypothesis] pair or a non-empty list of pairs ({PAIR_HINT})", "inputs")
    if len(inputs) > max_items:
        raise _invalid(f"too many pairs: {len(inputs)} > {max_items} (ZSNLI_MAX_BATCH_ITEMS); split the request",
                       "inputs")
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            raise _invalid(f"a text alone cannot be scored: {PAIR_HINT}", f"inputs[{i}]")
        if not _is_pair(item):
            raise _invalid("must be a [premise, hypothesis] pair of two strings", f"inputs[{i}]")
    return PredictCall([(p, h) for p, h in inputs], False, raw)


def class_probabilities(logits: np.ndarray) -> np.ndarray:
    """Softmax over the head's classes of each row (what TEI's ``/predict`` answers without ``raw_scores``):
    logits ``[N, C]`` -> float64 ``[N, C]``, rows summing to 1 (max-subtracted)."""
    x = np.asarray(logits, dtype=np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def predictions(scores: np.ndarray, id2label: Mapping[int, str]) -> list[list[dict[str, Any]]]:
    """Per row of ``scores`` ``[N, C]``, ``[{"score", "label"}]`` over the C classes, highest score first
    (ties: class index order)."""
    out = []
    for row in np.asarray(scores, dtype=np.float64):
        order = sorted(range(len(row)), key=lambda c: (-row[c], c))
        out.append([{"score": float(row[c]), "label": id2label[c]} for c in order])
    return out


def info_body(health: Mapping[str, Any], *, version: str, token_budget: int, max_client_batch_size: int,
              max_concurrent_requests: int) -> dict[str, Any]:
    """``GET /info`` in TEI's shape from ``GET /health``'s body (200) and the limits that play TEI's parts.

    health: `zsnli.serving.service.ZeroShotClassifier.health`'s body. token_budget: the batcher's padded
    tokens per forward (TEI's ``max_batch_tokens``). max_client_batch_size: ``ZSNLI_MAX_BATCH_ITEMS``.
    max_concurrent_requests: ``ZSNLI_MAX_CONNECTIONS``. ``max_batch_requests`` is null (a batch is bounded by
    tokens only), ``tokenization_workers`` 1 (one tokeniser thread), ``auto_truncate`` true (the premise
    is always cut to the window), ``sha`` and ``docker_label`` null; ``variant`` (not TEI's) says which model
    ``ZSNLI_MODEL_VARIANT`` serves, ``small`` or ``base``.
    """
    id2label = {str(i): name for i, name in enumerate(health["labels"])}
    return {
        "model_id": health.get("model_id") or health["model"],
        "model_sha": health.get("revision"),
        "model_dtype": health["dtype"],
        "model_type": {"classifier": {"id2label": id2label, "label2id": {v: int(k) for k, v in id2label.items()}}},
        "max_concurrent_requests": int(max_concurrent_requests),
        "max_input_length": int(health["max_length"]),
        "max_batch_tokens": int(token_budget),
        "max_batch_requests": None,
        "max_client_batch_size": int(max_client_batch_size),
        "auto_truncate": True,
        "tokenization_workers": 1,
        "version": version,
        "sha": None,
        "docker_label": None,
        "variant": health.get("variant"),  # zsnli's own: small or base (ZSNLI_MODEL_VARIANT)
    }


def renamed_pair_fields(exc: ApiError, single: bool) -> ApiError:
    """An error of `zsnli.serving.service.ZeroShotClassifier.predict` (fields ``pairs[i]``) with its field
    named as the body sent it: ``inputs`` for one pair, ``inputs[i]`` for a list."""
    if single and exc.field is not None and exc.field.startswith("pairs[0]"):
        return exc.renamed("pairs[0]", "inputs")
    return exc.renamed("pairs", "inputs")


def scores_for(logits: np.ndarray, raw_scores: bool) -> np.ndarray:
    """``logits`` as they are (``raw_scores``) or `class_probabilities` of them."""
    return np.asarray(logits, dtype=np.float64) if raw_scores else class_probabilities(logits)


#: Keys of a ``/tokenize`` body (TEI's ``TokenizeRequest``).
TOKENIZE_KEYS = ("inputs", "add_special_tokens", "prompt_name")
#: TEI's status for ``Overloaded`` (429 Too Many Requests); zsnli's own routes answer 503 ``overloaded``.
TEI_OVERLOADED_STATUS = 429


def tei_status(exc: ApiError) -> ApiError:
    """``exc`` as TEI's routes answer it: an ``overloaded`` error (queue full) gets status
    `TEI_OVERLOADED_STATUS`, its body, ``error_type`` and ``Retry-After`` unchanged; any other as it is."""
    if exc.error_type is ErrorType.OVERLOADED:
        exc.status = TEI_OVERLOADED_STATUS
    return exc


@dataclass(frozen=True)
class TokenizeCall:
    """A checked ``/tokenize`` body: ``texts`` (one per answer list), ``single`` (``inputs`` was one text),
    ``add_special_tokens``."""

    texts: list[str]
    single: bool
    add_special_tokens: bool


def read_tokenize(payload: Any, max_items: int, max_chars: int | None = None) -> TokenizeCall:
    """Check a ``/tokenize`` body and build a `TokenizeCall`.

    payload: the parsed JSON body; max_items: most texts in one request (``ZSNLI_MAX_BATCH_ITEMS``); max_chars:
    most characters of all its texts together (``ZSNLI_MAX_TEXT_CHARS``, what one ``/classify`` reads; None: no
    limit). The answer lists every token as an object of about 70 bytes, so without that bound a 2 MiB body
    of one-character tokens was answered with 70 MB (issue 57); with it the answer is at most about
    ``70 x max_chars`` bytes (1.4 MB at the default 20,000).
    Raises ``ApiError`` 422 naming the field: body not an object, a misspelt key, ``inputs`` missing, not a
    text or a non-empty list of texts (``inputs[i]`` for a non-string item), more than ``max_items`` texts;
    ``add_special_tokens`` not a boolean; ``prompt_name`` set (the model has no prompts); 413
    ``payload_too_large`` (field ``inputs``) for texts over ``max_chars`` characters in all.
    """
    if not isinstance(payload, dict):
        raise _invalid("body must be a JSON object with inputs", "body")
    misspelt = misspelt_fields(payload, TOKENIZE_KEYS)
    if misspelt:
        raise ApiError(ErrorType.VALIDATION, f"{misspelt[0]['field']}: {misspelt[0]['error']}", misspelt[0]["field"],
                       errors=misspelt)
    if "inputs" not in payload:
        raise _invalid("field required (a text or a list of texts)", "inputs")
    special = payload.get("add_special_tokens", True)
    if special is None:
        special = True
    if not isinstance(special, bool):
        raise _invalid("must be a boolean", "add_special_tokens")
    if payload.get("prompt_name") is not None:
        raise _invalid("this model has no sentence-transformers prompts: leave prompt_name out", "prompt_name")
    inputs = payload["inputs"]
    single = isinstance(inputs, str)
    if not single and (not isinstance(inputs, list) or not inputs):
        raise _invalid("must be a text or a non-empty list of texts", "inputs")
    texts = [inputs] if single else list(inputs)
    if len(texts) > max_items:
        raise _invalid(f"too many texts: {len(texts)} > {max_items} (ZSNLI_MAX_BATCH_ITEMS); split the request",
                       "inputs")
    for i, item in enumerate(texts):
        if not isinstance(item, str):
            raise _invalid("must be a string", f"inputs[{i}]")
    chars = sum(len(text) for text in texts)
    if max_chars is not None and chars > max_chars:
        raise ApiError(ErrorType.PAYLOAD_TOO_LARGE, f"inputs: {chars} characters in all, more than {max_chars} "
                       "(ZSNLI_MAX_TEXT_CHARS, the text one /classify reads): every token is answered as an object, "
                       "so the answer would outgrow the request; split the text or the request", "inputs")
    return TokenizeCall(texts, single, special)


def simple_tokens(tokenizer, text: str, add_special_tokens: bool = True) -> list[dict[str, Any]]:
    """TEI's ``SimpleToken`` list of ``text`` under the model's fast ``tokenizer`` (no truncation): per token
    ``{"id", "text", "special", "start", "stop"}``; for a special token ``text`` is the token and ``start`` /
    ``stop`` are null, for any other ``text`` is ``text``'s slice and ``start`` / ``stop`` its UTF-8 byte
    offsets (``text.encode()[start:stop]``), as TEI answers. Raises ``TypeError`` for a slow tokenizer
    (no offsets)."""
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("simple_tokens needs a fast tokenizer (offsets)")
    enc = tokenizer(text, add_special_tokens=add_special_tokens, truncation=False, return_offsets_mapping=True,
                    return_special_tokens_mask=True, verbose=False)  # no "longer than the maximum" log: by design
    byte_at = [0]
    for ch in text:
        byte_at.append(byte_at[-1] + len(ch.encode("utf-8", "surrogatepass")))
    pieces = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    out = []
    for token_id, (start, stop), special, piece in zip(enc["input_ids"], enc["offset_mapping"],
                                                       enc["special_tokens_mask"], pieces):
        if special:
            out.append({"id": int(token_id), "text": piece, "special": True, "start": None, "stop": None})
        else:
            out.append({"id": int(token_id), "text": text[start:stop], "special": False,
                        "start": byte_at[start], "stop": byte_at[stop]})
    return out
