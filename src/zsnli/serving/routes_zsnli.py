"""zsnli's own routes (`add_zsnli_routes`): ``GET /health``, ``GET /`` (`route_index`, `index_page`: every route with
what it is for) and ``POST /classify`` (one request object, or an array answered item by item); `classify_each`
classifies the documents of one request, for the Inference API too.

May import: FastAPI, `zsnli.serving.api_types`, `zsnli.serving.openapi_docs`, `zsnli.errors`, `zsnli.serving.http_body`, `zsnli.serving.http_request`,
`zsnli.serving.request_timing` (the route notes its inputs),
`zsnli.serving.service`, `zsnli.serving.text`. Imported by `zsnli.serving.app`, `zsnli.serving.routes_compat`.
"""

from __future__ import annotations

from typing import Any, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from .. import __version__
from . import http_body
from .api_types import ClassifyResponse, HealthResponse
from .openapi_docs import CLASSIFY_OPENAPI, ERROR_RESPONSES
from ..errors import ApiError, ErrorType
from .http_request import parse_classify_request, read_json_body, wait_disconnect
from .request_timing import note_request
from .request_ids import REQUEST_ID_STATE
from .service import ZeroShotClassifier
from .text import clean_text, html_attr, html_text


def add_zsnli_routes(app: FastAPI, service: ZeroShotClassifier) -> None:
    """Add ``GET /health``, ``GET /`` and ``POST /classify`` to ``app``."""
    settings = service.settings

    @app.get("/health", response_model=HealthResponse, response_model_exclude_none=True,
             responses={503: {"model": HealthResponse, "description": "Loading, or failed to start (`reason`)."}})
    async def health() -> Any:
        """200 once the model is loaded and warmed up; 503 ``loading``, ``draining`` or ``error`` before that."""
        status, body = service.health()
        if status != 200:
            return JSONResponse(body, status_code=status, headers={"Retry-After": str(settings.retry_after_s)})
        return body

    @app.get("/", response_model=None)
    async def index(request: Request) -> Any:
        """Where things are: the routes this server answers, each with what it is for, and the model's status."""
        status, health = service.health()
        body = {"service": "zsnli", "version": __version__, "status": health.get("status"),
                "model": health.get("model"), "docs": "/docs", "redoc": "/redoc", "openapi": "/openapi.json",
                "routes": route_index(request.app)}
        if "text/html" in request.headers.get("accept", ""):  # a browser: the same as a page of links
            return HTMLResponse(index_page(body))
        return body

    @app.post("/classify", response_model=ClassifyResponse, responses=ERROR_RESPONSES, openapi_extra=CLASSIFY_OPENAPI)
    async def classify(request: Request) -> Any:
        """Probabilities of each label description for one document, or for each of an array of documents."""
        return await service.admitted(lambda: _classify(service, request))


async def _classify(service: ZeroShotClassifier, request: Request) -> Any:
    """Read and validate the body, classify, answer ``{"id", "labels", "probabilities"}``.

    A number ``id`` with a fraction or exponent (a `zsnli.serving.http_body.JsonNumber`) is
    echoed with the exact text it was sent as (``1e-400`` stays ``1e-400``, not ``0.0``).
    """
    payload = await read_json_body(request, service.settings.max_body_bytes, items_alone=True)
    items = payload if isinstance(payload, list) else [payload]
    note_request(len(items), batch=isinstance(payload, list),
                 chars=sum(len(i["text"]) for i in items if isinstance(i, dict) and isinstance(i.get("text"), str)))
    if isinstance(payload, list):
        return await _classify_array(service, request, payload)
    req, used_alias = parse_classify_request(payload)
    try:
        probs = await service.classify(req.text, req.labels, req.hypothesis_template, req.multi_label,
                                       disconnected=lambda: wait_disconnect(request), cascade=req.cascade,
                                       scoring=req.scoring)
    except ApiError as exc:
        raise exc.renamed("labels", "candidate_labels") if used_alias else exc
    labels = [clean_text(lb) for lb in req.labels]
    if isinstance(payload.get("id"), http_body.JsonNumber):  # echo the id's exact text
        return Response(http_body.render_json({"id": payload["id"], "labels": labels, "probabilities": probs}),
                        media_type="application/json")
    rid = clean_text(req.id) if isinstance(req.id, str) else req.id
    return {"id": rid, "labels": labels, "probabilities": probs}


async def _classify_array(service: ZeroShotClassifier, request: Request, items: list) -> Response:
    """``POST /classify`` with a JSON array of request objects: one answer per item, in order.

    Each item is what one ``/classify`` call would answer: ``{"id", "probabilities"}``, or its
    error body plus ``status`` (the status that call would have had) and the item's ``id`` when it
    sent one, so one bad item fails alone (`classify_each`: admitted progressively; over ``ZSNLI_MAX_REQUEST_PAIRS``
    one 413). The answer is 200, with ``Retry-After`` when an item got a 503. An empty array, or more than
    ``ZSNLI_MAX_BATCH_ITEMS`` items, is one 422 (field ``body``).
    """
    settings = service.settings
    if not items or len(items) > settings.max_batch_items:
        why = "is empty" if not items else f"has {len(items)} items, more than {settings.max_batch_items} " \
              "(ZSNLI_MAX_BATCH_ITEMS): split it"
        raise ApiError(ErrorType.VALIDATION, f"body: the array of requests {why}", "body")
    answers: list[Any] = [None] * len(items)
    aliases: dict[int, bool] = {}
    calls = []
    for i, item in enumerate(items):
        try:
            req, aliases[i] = parse_classify_request(item)
            calls.append((i, req))
        except ApiError as exc:
            answers[i] = exc
    results = await classify_each(service, request, [(r.text, r.labels, r.hypothesis_template, r.multi_label,
                                                      r.cascade, r.scoring) for _, r in calls])
    labels: dict[int, list[str]] = {i: r.labels for i, r in calls}
    for (i, _), result in zip(calls, results):
        answers[i] = result.renamed("labels", "candidate_labels") if isinstance(result, ApiError) and aliases[i] \
            else result
    rid = getattr(request.state, REQUEST_ID_STATE, None)
    body = [array_entry(item, answer, labels.get(i), rid) for i, (item, answer) in enumerate(zip(items, answers))]
    retry = any(isinstance(a, ApiError) and a.error_type.retry_after for a in answers)
    headers = {"Retry-After": str(settings.retry_after_s)} if retry else None
    return Response(http_body.render_json(body), media_type="application/json", headers=headers)


def array_entry(item: Any, answer: list[float] | ApiError, labels: Sequence[str] | None = None,
                request_id: str | None = None) -> dict[str, Any]:
    """One entry of an array answer: ``{"id", "labels", "probabilities"}`` (``labels``: the item's labels
    as sent), or the error's body plus ``status`` (with the item's ``id`` when it sent one) and, when given, the
    array request's ``request_id`` (as every error body carries it). ``item`` is the request object as sent."""
    rid = item.get("id") if isinstance(item, dict) else None
    rid = clean_text(rid) if isinstance(rid, str) else rid
    if not isinstance(answer, ApiError):
        return {"id": rid, "labels": [clean_text(lb) for lb in labels or ()], "probabilities": answer}
    entry = {**answer.body(), "status": answer.status}
    if request_id is not None:
        entry["request_id"] = request_id
    return {"id": rid, **entry} if isinstance(item, dict) and "id" in item else entry


async def classify_each(service: ZeroShotClassifier, request: Request,
                        calls: Sequence[tuple[str, list[str], str | None, bool, bool, str]]) -> list[Any]:
    """Classify several documents of one request: ``calls`` are ``(text, labels, template, multi_label, cascade,
    scoring)``, each prepared (``ZeroShotClassifier.preprocess``: its own 422s), then
    ``ZeroShotClassifier.classify_request`` (the 413 cap, the request's share). Returns, in order, each one's
    probabilities or its ``ApiError``."""
    service.check_ready()
    prepared: list[Any] = []
    for text, labels, template, multi, cascade, scoring in calls:
        try:
            prepared.append(service.preprocess(text, labels, template, multi, cascade,
                                               service.scoring_config(scoring)))
        except ApiError as exc:
            prepared.append(exc)
    return await service.classify_request(prepared, disconnected=lambda: wait_disconnect(request))


def route_index(app: FastAPI) -> list[dict[str, str]]:
    """``[{"route": "POST /classify", "what": first line of its docstring}]`` for every route of ``app`` with a
    docstring (extensions included: /metrics, the bake-off), static assets left out."""
    out = []
    for route in app.routes:
        endpoint, path = getattr(route, "endpoint", None), getattr(route, "path", "")
        doc = (getattr(endpoint, "__doc__", None) or "").strip()
        if not doc or "static" in path or "assets" in path:
            continue
        methods = sorted(m for m in (getattr(route, "methods", None) or {"GET"}) if m != "HEAD") or ["HEAD"]
        first = " ".join(doc.split("\n\n")[0].split()).replace("``", "`")
        out.append({"route": f"{'/'.join(methods)} {path}", "what": first.split(". ")[0].rstrip(".") + "."})
    return out


def index_page(index: dict[str, Any]) -> str:
    """``GET /`` for a browser: the `route_index` as an HTML list (GET routes without parameters are links).
    Text is escaped with its bidirectional controls shown; the model's name (a directory or hub id) is isolated
    (`zsnli.serving.text.html_text`)."""
    escape = html_attr

    def route(entry: dict[str, str]) -> str:
        method, path = entry["route"].split(" ", 1)
        target = f"<a href='{escape(path)}'>{escape(path)}</a>" if method == "GET" and "{" not in path \
            else escape(path)
        return f"<li><code>{escape(method)}</code> {target}: {escape(entry['what'])}</li>"

    items = "".join(route(e) for e in index["routes"])
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>zsnli</title></head>"
            f"<body style='font-family: system-ui, sans-serif; max-width: 60em; margin: 2em auto'>"
            f"<h1>zsnli {escape(index['version'])}</h1><p>Zero-shot text classification from an NLI cross-encoder. "
            f"Status: <b>{escape(str(index['status']))}</b>, model {html_text(index['model'])}. "
            f"Try it in <a href='/docs'>/docs</a> (or <a href='/redoc'>/redoc</a>, "
            f"<a href='/openapi.json'>/openapi.json</a>).</p><ul>{items}</ul></body></html>")
