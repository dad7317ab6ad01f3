"""The routes' OpenAPI documentation (what ``/docs``, ``/redoc`` and ``/openapi.json`` show), built from the models
of `zsnli.serving.api_types`: one real error answer per status (`ERROR_EXAMPLES`) and their descriptions, the
``responses=`` of the classification routes (`ERROR_RESPONSES`) and of TEI's ``POST /predict``
(`PREDICT_ERROR_RESPONSES`), and the ``openapi_extra=`` request bodies with examples of ``POST /classify``
(`CLASSIFY_OPENAPI`) and of the Inference API routes (`ZERO_SHOT_OPENAPI`, through `inline_schema`).

May import: pydantic, the standard library and `zsnli.serving.api_types`. Imported by `zsnli.serving.routes_zsnli`,
`zsnli.serving.routes_compat`, `zsnli.serving.embeddings_api` and `zsnli.compare.service.api` (`inline_schema`).
"""

from __future__ import annotations

from pydantic import BaseModel

from .api_types import (EXAMPLE_MULTI, EXAMPLE_REQUEST, EXAMPLE_TEMPLATE, EXAMPLE_ZERO_SHOT, EXAMPLE_ZERO_SHOT_LIST,
                        ClassifyRequest, ErrorResponse, ZeroShotRequest)


def inline_schema(model: type[BaseModel]) -> dict:
    """A model's JSON schema with its ``$defs`` inlined (an ``openapi_extra`` body cannot use ``#/$defs``)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node):
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(defs[ref[len("#/$defs/"):]])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


#: One real error answer per status, as ``/docs`` shows them, with the default settings' numbers
#: (``tests/serving/test_docs_examples.py`` provokes every one but the 408, a stalled client, and compares;
#: ``request_id`` is each answer's own).
ERROR_EXAMPLES: dict[int, dict] = {
    400: {"error": "invalid JSON: Expecting value (line 1, column 30)", "field": "body", "error_type": "invalid_json",
          "request_id": "363e1701b5064ec0b9524b51a9f72fa8"},
    408: {"error": "request not received within ZSNLI_READ_TIMEOUT_S=10 s (headers and body must arrive within it)",
          "field": None, "error_type": "request_timeout", "request_id": "5b0e2f4c8a9d4e7f9a1c3b5d7e9f1a2b"},
    413: {"error": "body is 2100012 bytes; the limit is 2097152 (ZSNLI_MAX_BODY_BYTES)", "field": "body",
          "error_type": "payload_too_large", "request_id": "79a37460dbc8439db50b4347977f21ff"},
    415: {"error": "content type must be application/json, got 'application/x-www-form-urlencoded' "
                   "(curl: add -H 'Content-Type: application/json')",
          "field": "content-type", "error_type": "unsupported_media_type",
          "request_id": "73eb6eda419d4f50a33bed91090d23b4"},
    422: {"error": "labels: List should have at least 1 item after validation, not 0", "field": "labels",
          "error_type": "validation", "errors": [{"field": "labels", "error": "List should have at least 1 item "
                                                  "after validation, not 0", "type": "too_short"}],
          "request_id": "7614c63de2184d2993949fbf544c618f"},
    500: {"error": "inference failed: RuntimeError: CUDA error: device-side assert triggered", "field": None,
          "error_type": "inference", "request_id": "0d4c9e2a6b8f4a1c8e3b5d7f9a2c4e6b"},
    503: {"error": "overloaded: queue full (8192 of 8192 pairs admitted); retry later", "field": None,
          "error_type": "overloaded", "request_id": "e3f1a5c7b9d24f6a8c0e2b4d6f8a0c2e"},
}


# --------------------------------------------------------------------------- OpenAPI of the routes

#: The description of each error status in the routes' OpenAPI ``responses`` (`ERROR_RESPONSES`).
ERROR_DESCRIPTIONS = {
    400: "Malformed body: invalid JSON or text in its charset, empty body (`invalid_json`); a body that is not "
         "what its Content-Encoding says (`invalid_encoding`).",
    408: "Headers and body did not arrive within ZSNLI_READ_TIMEOUT_S (`request_timeout`; the connection is "
         "closed). Served by `python server.py`, not a bare uvicorn.",
    413: "Body over ZSNLI_MAX_BODY_BYTES, on the wire or after decoding its Content-Encoding (gzip, deflate).",
    415: "Content type is not JSON, its charset is not UTF-8/16/32, or its Content-Encoding is not identity, gzip "
         "or deflate (`field` names the header).",
    422: "A field is missing or invalid, misspelt, or a key is given twice (named in `field`; one entry per "
         "problem in `errors`).",
    500: "Inference failed for this request (batch fault, non-finite logits).",
    503: "Loading, queue full, timed out, or more than ZSNLI_MAX_CONNECTIONS connections open (`overloaded`); "
         "retry after `Retry-After` s.",
}
#: ``responses=`` of the classification routes: each error status with its model, description and real example.
ERROR_RESPONSES = {
    status: {"model": ErrorResponse, "description": description, "content": {"application/json": {
        "example": ERROR_EXAMPLES[status]}}}
    for status, description in ERROR_DESCRIPTIONS.items()
}
#: ``responses=`` of ``POST /predict``: the same, but a full queue is TEI's 429 there (`zsnli.serving.tei.tei_status`,
#: same body and ``Retry-After``); its 503 is then only loading, a timeout or too many connections.
PREDICT_ERROR_RESPONSES = {
    **ERROR_RESPONSES,
    429: {"model": ErrorResponse, "content": {"application/json": {"example": {
              **ERROR_EXAMPLES[503], "request_id": "a81c3e5f7b9d4f2a8c6e0b2d4f6a8c1e"}}},
          "description": "Queue full (`overloaded`), as TEI answers it; retry after `Retry-After` s."},
    503: {**ERROR_RESPONSES[503], "description": "Loading, timed out, or more than ZSNLI_MAX_CONNECTIONS connections "
          "open; retry after `Retry-After` s (a full queue is the 429)."},
}


def classify_request_schema() -> dict:
    """`ClassifyRequest`'s JSON schema as the wire takes it (`zsnli.serving.http_request.parse_classify_request`):
    ``candidate_labels`` is a property too, the alias of ``labels``; one of the two is required as an array
    (``anyOf``), and the other may be absent or null; ``multi_label`` and ``cascade`` also take null (their
    defaults). The model alone says ``required: [text, labels]`` and plain booleans, which refused the README's
    own ``candidate_labels`` bodies in a client generated from the schema."""
    schema = ClassifyRequest.model_json_schema()
    props = schema["properties"]
    labels = {k: v for k, v in props["labels"].items() if k not in ("title", "description")}
    props["candidate_labels"] = {
        "title": "Candidate Labels",
        "description": "The transformers pipeline's name for `labels` (give one of the two; the other may be "
                       "null). Sent without hypothesis_template they get the pipeline's default template "
                       "`This example is {}.`."}
    for name in ("labels", "candidate_labels"):
        props[name] = {**props[name], "anyOf": [labels, {"type": "null"}]}
        for key in labels:
            props[name].pop(key, None)
    for name in ("multi_label", "cascade"):
        boolean = {k: v for k, v in props[name].items() if k != "type"}
        props[name] = {**boolean, "anyOf": [{"type": "boolean"}, {"type": "null"}]}
    schema["required"] = ["text"]
    schema["anyOf"] = [{"required": [name], "properties": {name: labels}} for name in ("labels", "candidate_labels")]
    schema["not"] = {"required": ["labels", "candidate_labels"],  # both as arrays: "give either ..., not both"
                     "properties": {"labels": {"type": "array"}, "candidate_labels": {"type": "array"}}}
    return schema


_CLASSIFY_SCHEMA = classify_request_schema()
#: ``openapi_extra=`` of ``POST /classify``: the body's schema (one request or an array) and its examples.
CLASSIFY_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {
            "schema": {"oneOf": [_CLASSIFY_SCHEMA,
                                 {"type": "array", "items": _CLASSIFY_SCHEMA, "minItems": 1,
                                  "description": "Several documents, each with its own labels (at most "
                                  "ZSNLI_MAX_BATCH_ITEMS): answered by an array in the same order."}]},
            "examples": {
                "labels": {"summary": "label descriptions", "value": EXAMPLE_REQUEST},
                "template": {"summary": "candidate_labels + hypothesis_template", "value": EXAMPLE_TEMPLATE},
                "multi_label": {"summary": "independent labels", "value": EXAMPLE_MULTI},
                "array": {"summary": "several documents in one request (one answer or error each)",
                          "value": [EXAMPLE_REQUEST, EXAMPLE_TEMPLATE]},
            },
        }},
    }
}
#: ``openapi_extra=`` of the Inference API routes: the payload's schema and its examples.
ZERO_SHOT_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {
            "schema": inline_schema(ZeroShotRequest),
            "examples": {
                "one": {"summary": "one text", "value": EXAMPLE_ZERO_SHOT},
                "list": {"summary": "a list of texts, labels as one string, a template",
                         "value": EXAMPLE_ZERO_SHOT_LIST},
            },
        }},
    }
}
