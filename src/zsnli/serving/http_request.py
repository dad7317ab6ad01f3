"""Reading a request: its JSON body (`read_json_body`, the one place a body is read), a ``/classify`` object
(`parse_classify_request`), pydantic's errors as one 422 (`validation_error`), the client's disconnect
(`wait_disconnect`). Every refusal is a `zsnli.errors.ApiError`. May import: FastAPI/starlette/pydantic,
`zsnli.serving.api_types`, `zsnli.errors`, `zsnli.serving.http_body`. Imported by `zsnli.serving.app` and the routes.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from . import http_body
from .api_types import (CLASSIFY_FIELDS, CLASSIFY_LEGACY, EXAMPLE_LINE_FIELDS, ClassifyRequest, LabelError,
                        classify_body_hint, classify_fields, misspelt_fields)
from ..errors import ApiError, ErrorType, error_type_for


async def read_json_body(request: Request, limit: int, items_alone: bool = False,
                         expected: str = http_body.CLASSIFY_BODY) -> Any:
    """Read and parse a JSON body with `zsnli.serving.http_body.read_json_body` (the one place a body is read).
    ``items_alone``: an array's items fail alone, a key given twice inside one included (`parse_classify_request`
    refuses that item). ``expected``: what the route takes, in words (an empty body is told to send it).

    limit: bytes, on the wire and after ``Content-Encoding`` is undone. Raises ``ApiError``: the `BodyError`
    through the error table (415 not JSON, a charset other than UTF-8/16/32 or an unsupported
    ``Content-Encoding``; 413 over ``limit``; 400 client gone, empty, not what its ``Content-Encoding`` says,
    undecodable or invalid JSON; 422 a key given twice: every case in `zsnli.serving.http_body`).
    """
    try:
        return await http_body.read_json_body(request.headers, request.stream(), limit, (ClientDisconnect,),
                                              items_alone, expected)
    except http_body.BodyError as exc:
        raise ApiError(error_type_for(exc.error_type, exc.status), exc.message, exc.field,
                       errors=exc.errors) from None


async def wait_disconnect(request: Request) -> None:
    """Return once the client of ``request`` is gone (its ``http.disconnect``)."""
    while True:
        if (await request.receive()).get("type") == "http.disconnect":
            return


def parse_classify_request(payload: Any) -> tuple[ClassifyRequest, bool]:
    """Validate a parsed body; returns ``(request, used_candidate_labels)``. Raises ``ApiError`` 422
    naming the field the client sent (a key given twice: `zsnli.serving.http_body.duplicate_keys_error`) (``candidate_labels[i]`` when it used the alias; a misspelt
    field, e.g. ``multi_lable``, or a legacy one, ``multi_class``, with the field to use:
    `zsnli.serving.api_types.misspelt_fields`; an Inference API payload, ``label`` without ``labels``
    or labels as one string with what to send instead: `zsnli.serving.api_types.classify_body_hint`).
    ``candidate_labels`` without a ``hypothesis_template`` get the pipeline's default template
    (`zsnli.serving.api_types.classify_fields`). ``labels`` and ``candidate_labels`` both given is a 422, unless
    one of them is null (not given)."""
    if not isinstance(payload, dict):
        raise ApiError(ErrorType.VALIDATION, f"body must be a JSON object, got {_json_type(payload)}", "body")
    duplicated = http_body.duplicate_keys_error(payload)  # an array item's (the body's own were refused at parse)
    if duplicated is not None:
        raise ApiError(ErrorType.VALIDATION, duplicated.message, duplicated.field, errors=duplicated.errors)
    hint = classify_body_hint(payload)
    if hint is not None:
        field, message = hint
        raise ApiError(ErrorType.VALIDATION, message, field,
                       errors=[{"field": field, "error": message.split(": ", 1)[1], "type": "hint"}])
    misspelt = misspelt_fields(payload, CLASSIFY_FIELDS, EXAMPLE_LINE_FIELDS, legacy=CLASSIFY_LEGACY)
    if misspelt:
        raise ApiError(ErrorType.VALIDATION, f"{misspelt[0]['field']}: {misspelt[0]['error']}", misspelt[0]["field"],
                       errors=misspelt)
    if "candidate_labels" in payload and "labels" in payload:
        # null is "not given", as for every optional field (clients that write every field): one of the two null
        # leaves the other; both null are a missing labels
        unset = "candidate_labels" if payload["candidate_labels"] is None else "labels" if payload["labels"] is None \
            else None
        if unset is None:
            raise ApiError(ErrorType.VALIDATION, "give either labels or candidate_labels, not both",
                           "candidate_labels")
        payload = {k: v for k, v in payload.items() if k != unset}
    labels, template, used_alias = classify_fields(payload)
    if used_alias:
        payload = {k: v for k, v in payload.items() if k != "candidate_labels"}
        payload.update(labels=labels, hypothesis_template=template)
    try:
        return ClassifyRequest.model_validate(payload), used_alias
    except ValidationError as exc:
        err = validation_error(exc.errors(), strip_body=False)
        raise (err.renamed("labels", "candidate_labels") if used_alias else err) from None


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


def _field_name(loc: tuple) -> str | None:
    """``("labels", 3)`` -> ``labels[3]``; union member tags (``id.str``) are dropped."""
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        elif not name:
            name = str(part)
    return name or None


_UNION_MESSAGES = {"id": "must be a string, a number or null"}


def validation_error(errors: list[dict], strip_body: bool) -> ApiError:
    """One 422 ``ApiError`` from pydantic's error list: one ``errors`` entry per field, the first on top."""
    items: list[dict] = []
    seen: set[str] = set()
    for e in errors:
        loc = tuple(e.get("loc", ()))
        if strip_body and loc[:1] == ("body",):
            loc = loc[1:]
        ctx_err = (e.get("ctx") or {}).get("error")
        if isinstance(ctx_err, LabelError):
            loc = loc + (ctx_err.index,)
            msg = str(ctx_err)
        else:
            msg = str(e.get("msg", "invalid value"))
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, "):]
        if e.get("type") == "missing":
            msg = "field required"
        field = _field_name(loc) or "body"
        msg = _UNION_MESSAGES.get(field, msg)
        if field in seen:
            continue
        seen.add(field)
        items.append({"field": field, "error": msg, "type": e.get("type")})
    if not items:
        items = [{"field": "body", "error": "invalid request", "type": "invalid"}]
    first = items[0]
    return ApiError(ErrorType.VALIDATION, f"{first['field']}: {first['error']}", first["field"], errors=items)
