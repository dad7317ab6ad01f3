"""The bodies and answers of the two embedding routes, over the served sentence encoder (the cosine term's,
`zsnli.serving.service.ZeroShotClassifier.embed`):

* text-embeddings-inference's ``POST /embed`` (`read_embed`): ``inputs`` a text or a list of texts;
  ``normalize`` (default true), ``truncate`` (default true: the encoder's window cuts a text; false: a longer
  text is a 422), ``truncation_direction`` (``right`` only), ``prompt_name`` (null only: the encoder has no
  sentence-transformers prompts), ``dimensions`` (null or the encoder's width). The answer is a list of
  vectors, one per input, also for a single text (as TEI answers).
* OpenAI's ``POST /v1/embeddings`` (`read_openai`): ``input`` a text or a list of texts, none empty (token
  arrays are refused: they would be another tokenizer's ids; ``""`` is refused, as OpenAI refuses it), ``model``
  (required, as OpenAI requires it; any name: one encoder is served; the answer names it), ``encoding_format``
  ``float`` or ``base64`` (little-endian float32 bytes, what the ``openai`` client asks for by default and decodes), ``dimensions`` (null or the encoder's width), ``user`` (ignored).
  `openai_answer`: ``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
  "usage": {"prompt_tokens", "total_tokens"}}``.

The vectors are always unit length: the encoder's pooling normalises them (`zsnli.runtime.embedding.mean_pool`),
and that unit vector is the one the cosine term and the selection use, so ``normalize: false`` changes nothing
(TEI would answer the pooled vector before normalising).

May import: numpy, the standard library, `zsnli.errors`, `zsnli.serving.api_types` (the field rules),
`zsnli.serving.openapi_docs` (the error examples).
Imported by `zsnli.serving.routes_compat`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ApiError, ErrorType
from .api_types import misspelt_fields
from .openapi_docs import ERROR_DESCRIPTIONS, ERROR_EXAMPLES

#: JSON schema of OpenAI's error object, the ``error`` of every error answer of ``/v1/embeddings``
#: (`zsnli.errors.openai_shaped`: zsnli's ``field``, ``error_type``, ``errors``, ``request_id`` beside it).
OPENAI_ERROR_SCHEMA = {"type": "object", "required": ["error", "error_type"], "properties": {
    "error": {"type": "object", "required": ["message"], "properties": {
        "message": {"type": "string"}, "type": {"type": "string", "description": "zsnli's error_type"},
        "param": {"type": ["string", "null"], "description": "the request field (zsnli's field)"},
        "code": {"type": "null"}}},
    "field": {"type": ["string", "null"]}, "error_type": {"type": "string"},
    "errors": {"type": ["array", "null"], "items": {"type": "object"}}, "request_id": {"type": ["string", "null"]}}}
#: ``responses=`` of ``POST /v1/embeddings``: zsnli's statuses and examples, with OpenAI's error object.
OPENAI_ERROR_RESPONSES = {
    status: {"description": description, "content": {"application/json": {
        "schema": OPENAI_ERROR_SCHEMA,
        "example": {**ERROR_EXAMPLES[status], "error": {
            "message": ERROR_EXAMPLES[status]["error"], "type": ERROR_EXAMPLES[status].get("error_type"),
            "param": ERROR_EXAMPLES[status].get("field"), "code": None}}}}}
    for status, description in ERROR_DESCRIPTIONS.items()
}

#: Keys of a TEI ``/embed`` body (TEI's ``EmbedRequest``).
EMBED_KEYS = ("inputs", "normalize", "truncate", "truncation_direction", "prompt_name", "dimensions")
#: Keys of an OpenAI ``/v1/embeddings`` body.
OPENAI_KEYS = ("input", "model", "encoding_format", "dimensions", "user")

#: ``openapi_extra=`` of ``POST /embed``.
EMBED_OPENAPI = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"type": "object", "required": ["inputs"], "properties": {
        "inputs": {"description": "A text, or a list of texts (at most ZSNLI_MAX_BATCH_ITEMS)."},
        "normalize": {"type": "boolean", "default": True, "description": "Accepted; vectors are always unit length."},
        "truncate": {"type": "boolean", "default": True,
                     "description": "Cut a text to the encoder's window; false: a longer text is a 422."},
        "truncation_direction": {"type": "string", "enum": ["right", "Right"]},
        "prompt_name": {"type": "string", "nullable": True, "description": "Only null."},
        "dimensions": {"type": "integer", "nullable": True, "description": "Only the encoder's width."}}},
    "examples": {"text": {"summary": "one text", "value": {"inputs": "The striker scored twice."}},
                 "texts": {"summary": "a list of texts", "value": {"inputs": ["Shares fell 4%.", "It rained."]}}}}}}}

#: ``openapi_extra=`` of ``POST /v1/embeddings``.
OPENAI_OPENAPI = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"type": "object", "required": ["input", "model"], "properties": {
        "input": {"description": "A non-empty text, or a list of them (at most ZSNLI_MAX_BATCH_ITEMS)."},
        "model": {"type": "string", "minLength": 1,
                  "description": "Required, any name: the served sentence encoder answers."},
        "encoding_format": {"type": "string", "enum": ["float", "base64"], "default": "float"},
        "dimensions": {"type": "integer", "nullable": True, "description": "Only the encoder's width."},
        "user": {"type": "string", "description": "Ignored."}}},
    "examples": {"texts": {"summary": "two texts", "value": {"input": ["Shares fell 4%.", "It rained."],
                                                            "model": "zsnli-encoder"}}}}}}}


@dataclass(frozen=True)
class EmbedCall:
    """A checked embedding body: ``texts`` in order, ``single`` (one text was sent), ``truncate`` and, for
    OpenAI, ``encoding_format`` (``float`` or ``base64``)."""

    texts: list[str]
    single: bool
    truncate: bool = True
    encoding_format: str = "float"


def _invalid(message: str, field: str) -> ApiError:
    return ApiError(ErrorType.VALIDATION, f"{field}: {message}", field)


def _check_keys(payload: Any, known: tuple[str, ...], texts_field: str) -> None:
    if not isinstance(payload, dict):
        raise _invalid(f"body must be a JSON object with {texts_field}", "body")
    misspelt = misspelt_fields(payload, known)
    if misspelt:
        raise ApiError(ErrorType.VALIDATION, f"{misspelt[0]['field']}: {misspelt[0]['error']}", misspelt[0]["field"],
                       errors=misspelt)
    if texts_field not in payload:
        raise _invalid("field required (a text or a list of texts)", texts_field)


def _token_ids(value: Any) -> bool:
    """True for a non-empty list of integers (booleans are not): OpenAI's token-array input."""
    return isinstance(value, list) and bool(value) and all(isinstance(x, int) and not isinstance(x, bool)
                                                           for x in value)


def _texts(value: Any, field: str, max_items: int) -> tuple[list[str], bool]:
    """``(texts, single)`` of a text-or-list field; 422 naming ``field`` / ``field[i]`` otherwise."""
    if isinstance(value, str):
        return [value], True
    if not isinstance(value, list) or not value:
        raise _invalid("must be a text or a non-empty list of texts", field)
    if _token_ids(value):  # OpenAI's one token array
        raise _invalid("token ids are not accepted (send the text)", field)
    if len(value) > max_items:
        raise _invalid(f"too many texts: {len(value)} > {max_items} (ZSNLI_MAX_BATCH_ITEMS); split the request",
                       field)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            what = "token ids are not accepted (send the text)" if _token_ids(item) else "must be a string"
            raise _invalid(what, f"{field}[{i}]")
    return list(value), False


def _check_dimensions(payload: dict, dim: int) -> None:
    value = payload.get("dimensions")
    if value is not None and (isinstance(value, bool) or value != dim):
        raise _invalid(f"the served encoder's vectors have {dim} dimensions; leave dimensions out or send {dim}",
                       "dimensions")


def _boolean(payload: dict, key: str, default: bool) -> bool:
    value = payload.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _invalid("must be a boolean", key)
    return value


def read_embed(payload: Any, max_items: int, dim: int) -> EmbedCall:
    """Check a TEI ``/embed`` body and build an `EmbedCall` (see the module docstring).

    max_items: ``ZSNLI_MAX_BATCH_ITEMS`` (TEI's ``max_client_batch_size``); dim: the encoder's width.
    Raises ``ApiError`` 422 naming the field: body not an object, a misspelt key, ``inputs`` missing or not a
    text or non-empty list of texts (``inputs[i]``), too many texts, ``normalize`` / ``truncate`` not a boolean,
    ``truncation_direction`` other than right, ``prompt_name`` set, ``dimensions`` other than ``dim``.
    """
    _check_keys(payload, EMBED_KEYS, "inputs")
    texts, single = _texts(payload["inputs"], "inputs", max_items)
    _boolean(payload, "normalize", True)
    truncate = _boolean(payload, "truncate", True)
    direction = payload.get("truncation_direction")
    if direction is not None and (not isinstance(direction, str) or direction.lower() != "right"):
        raise _invalid("only right (the end of a text is cut, as the cosine term cuts it)", "truncation_direction")
    if payload.get("prompt_name") is not None:
        raise _invalid("the sentence encoder has no sentence-transformers prompts: leave prompt_name out",
                       "prompt_name")
    _check_dimensions(payload, dim)
    return EmbedCall(texts, single, truncate)


def read_openai(payload: Any, max_items: int, dim: int) -> EmbedCall:
    """Check an OpenAI ``/v1/embeddings`` body and build an `EmbedCall` (see the module docstring).

    Raises ``ApiError`` 422 naming the field: body not an object, a misspelt key, ``input`` missing, not a text
    or non-empty list of texts, token ids (``input[i]``), too many texts, an empty text (``input`` /
    ``input[i]``: OpenAI refuses ``""``); ``model`` missing, empty or not a string (OpenAI requires it; any name
    is served by the one encoder); ``encoding_format`` other than float/base64; ``dimensions`` other than ``dim``.
    """
    _check_keys(payload, OPENAI_KEYS, "input")
    texts, single = _texts(payload["input"], "input", max_items)
    for i, text in enumerate(texts):
        if not text:
            raise _invalid("must not be empty (as OpenAI refuses an empty string)",
                           "input" if single else f"input[{i}]")
    model = payload.get("model")
    if not isinstance(model, str) or not model.strip():
        raise _invalid("field required: the model to embed with, as OpenAI requires (any name: the one served "
                       "encoder answers, named in the answer's model)" if model is None else
                       "must be a model name (a non-empty string)", "model")
    fmt = payload.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise _invalid(f"must be float or base64, got {fmt!r}", "encoding_format")
    _check_dimensions(payload, dim)
    return EmbedCall(texts, single, True, fmt)


def embed_answer(vectors: np.ndarray) -> list[list[float]]:
    """TEI's ``/embed`` answer: one list of floats per row of ``vectors`` ``[N, D]``."""
    return np.asarray(vectors, dtype=np.float32).tolist()


def openai_answer(vectors: np.ndarray, tokens: list[int], model: str, encoding_format: str) -> dict[str, Any]:
    """OpenAI's embeddings answer of ``vectors`` ``[N, D]`` (one per input, in order), each input's token count
    ``tokens`` (``usage``), the served ``model`` name; ``base64``: each vector's little-endian float32 bytes."""
    rows = np.asarray(vectors, dtype="<f4")
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(row.tobytes()).decode("ascii") if encoding_format == "base64"
             else row.tolist()} for i, row in enumerate(rows)]
    total = int(sum(tokens))
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": total, "total_tokens": total}}
