"""HTTP layer: FastAPI routes mapping ``POST /classify`` (one request or an array), ``GET /health``,
``GET /`` (where things are), the Inference API payload (``POST /v1/zero-shot-classification``,
``POST /``; `zsnli.serving.inference_api`) and text-embeddings-inference's ``GET /info``,
``POST /predict`` and ``POST /tokenize`` (`zsnli.serving.tei`) onto the service.

Only HTTP concerns live here: routes, reading and validating the body
(`read_json_body` is the one place a body is read), renaming the
``candidate_labels`` alias, and answering every `zsnli.errors.ApiError`
(and framework error) in the one error shape. Classification itself is
`zsnli.serving.service.ZeroShotClassifier`; the models and the routes' OpenAPI documentation are in
`zsnli.serving.api_types`.

Status codes: 400 malformed body (invalid JSON or text in its charset, empty
body; ``invalid_encoding`` when the body is not what its ``Content-Encoding``
says), 413 body over ``ZSNLI_MAX_BODY_BYTES`` (counted on the wire and after
decoding gzip/deflate), 415 non-JSON content type, a charset other than
UTF-8/16/32 or an unsupported ``Content-Encoding`` (field names the header),
422 schema violations or a key given twice (with ``errors``, one entry per
problem), 503 loading / queue full / timed out (with ``Retry-After``), 500
inference failure or non-finite logits (never NaN in a body). A numeric ``id``
is echoed with the exact text it was sent as. Two answers come from the
connection layer under `zsnli.serve` (`zsnli.serving.http_protocol`), not from here:
408 ``request_timeout`` when headers and body do not arrive within
``ZSNLI_READ_TIMEOUT_S`` and 503 ``overloaded`` beyond ``ZSNLI_MAX_CONNECTIONS``;
a bare ``uvicorn server:app`` has neither.

More routes (a bake-off, ``/metrics``) are added through ``create_app(extend=...)``,
which gets the app and the service.

May import: FastAPI/starlette/pydantic, `zsnli.serving.api_types`, `zsnli.serving.inference_api`, `zsnli.config`,
`zsnli.errors`, `zsnli.serving.http_body`, `zsnli.serving.http_routes`, `zsnli.serving.request_ids`,
`zsnli.serving.service`, `zsnli.serving.startup`, `zsnli.serving.tei`, `zsnli.serving.text`. Imported by `zsnli.serve` and ``server.py``.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any, Callable, Sequence, Union

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .. import __version__
from . import http_body, inference_api, tei
from .api_types import (CLASSIFY_FIELDS, CLASSIFY_LEGACY, CLASSIFY_OPENAPI, ERROR_RESPONSES, EXAMPLE_LINE_FIELDS,
                        PREDICT_ERROR_RESPONSES, ZERO_SHOT_OPENAPI, ClassifyRequest, ClassifyResponse, HealthResponse, LabelError,
                        ZeroShotAnswer, ZeroShotElement, classify_body_hint, classify_fields, misspelt_fields)
from ..config import Settings
from .docs_assets import install_offline_docs
from ..errors import ApiError, ErrorType, error_type_for
from .http_routes import HeadAsGet, allow_header
from .service import ZeroShotClassifier
from .request_ids import RequestIdMiddleware, log_safe
from .startup import ModelLoader
from .text import clean_text, html_attr, html_text

logger = logging.getLogger("zsnli")

#: ``extend(app, service)``: adds routes (or middleware) to the app built by `create_app`.
Extension = Callable[[FastAPI, ZeroShotClassifier], None]


def create_app(settings: Settings | None = None, *, loader: ModelLoader | None = None,
               shutdown_hook: Callable[[], None] | None = None, service: ZeroShotClassifier | None = None,
               extend: Extension | None = None, access_log: bool = False) -> FastAPI:
    """Build the FastAPI app around a `ZeroShotClassifier` (``app.state.classifier``).

    settings: default ``Settings.from_env()``. loader, shutdown_hook: passed to the
    service (see `ZeroShotClassifier`); ignored when ``service`` is given.
    extend: ``f(app, service)`` called last, to add routes. Every answer carries ``X-Request-ID``
    and every error body a ``request_id`` (`zsnli.serving.request_ids.RequestIdMiddleware`, outermost);
    access_log: write its access line with the id (`zsnli.serve` sets it and turns uvicorn's off).

    Startup: the service's preflight runs in the lifespan before the socket
    opens (failure: uvicorn exits non-zero); loading weights and one warm-up
    forward run in the background while ``/health`` answers 503 loading.
    """
    if service is None:
        service = ZeroShotClassifier(settings or Settings.from_env(), loader, shutdown_hook)
    settings = service.settings

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(
        title="zsnli",
        version=__version__,
        description="Zero-shot text classification served from an NLI cross-encoder. "
        "POST a document and its label descriptions; get one probability per label.",
        lifespan=lifespan,
        redirect_slashes=False,  # a 307 to <scheme>://<Host>/path is built from request headers: a 404 instead
    )
    install_offline_docs(app)
    app.state.settings = settings
    app.state.classifier = service
    _add_error_handlers(app, settings.retry_after_s)
    app.add_middleware(LastResort, retry_after_s=settings.retry_after_s)  # innermost: extensions wrap it
    app.add_middleware(HeadAsGet, routes=app.router.routes)  # HEAD wherever GET: GET's headers, no body
    _add_routes(app, service)
    if extend is not None:
        extend(app, service)
    app.add_middleware(RequestIdMiddleware, access_log=access_log)  # last added: outermost
    return app


class LastResort:
    """Pure ASGI middleware: an exception no route handled becomes the JSON 500 ``internal`` on a
    connection that stays usable.

    Without it Starlette's outermost error middleware answers the 500 and then re-raises, and uvicorn
    closes the keep-alive connection after that complete answer without saying ``Connection: close``:
    a pooled client's next request on it is reset unread. Here the exception ends at the answer (logged
    with its traceback), so the server reads the next request as usual. An exception after the answer
    started is re-raised: uvicorn then cuts the connection mid-answer, which no client can take for a
    complete response. Faults outside this middleware (another middleware) reach the app's last-resort
    handler, whose 500 says ``Connection: close``.
    """

    def __init__(self, app: Any, retry_after_s: int) -> None:
        self.app, self.retry_after_s = app, retry_after_s

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # noqa: BLE001 - the last resort: answered, logged
            if started:
                raise
            logger.exception("unhandled error in %s %s", log_safe(scope.get("method")), log_safe(scope.get("path")))
            response = error_response(ApiError(ErrorType.INTERNAL, f"internal error: {type(exc).__name__}"),
                                      self.retry_after_s)
            await response(scope, receive, send)


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


def not_found_message(app: FastAPI, method: str, path: str) -> str:
    """The message of a 404 for a path no route serves: the route it nearly is (the same path without its
    trailing slash, or with other letter case) and every route of `route_index`. Only the request's method
    and path are used (never ``Host`` or ``X-Forwarded-*``); a trailing slash is never redirected."""
    from .http_routes import allowed_methods

    routes = route_index(app)
    hint = ""
    for candidate in dict.fromkeys([path.rstrip("/") or "/", path.lower(), path.rstrip("/").lower() or "/"]):
        methods = allowed_methods(app.routes, candidate) if candidate != path else []
        if methods:
            slash = " (without the trailing slash)" if path.rstrip("/") == candidate else ""
            method_hint = method if method in methods else "/".join(m for m in methods if m != "HEAD") or methods[0]
            hint = f"; did you mean {method_hint} {candidate}{slash}?"
            break
    listed = ", ".join(e["route"] for e in routes)
    return f"no route {method} {path}{hint or '.'} Routes: {listed} (GET / lists them with what each is for)"


def error_response(exc: ApiError, retry_after_s: int) -> JSONResponse:
    """The JSON answer of an `ApiError` (``Retry-After`` when its type carries it)."""
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers(retry_after_s))


def _add_error_handlers(app: FastAPI, retry_after_s: int) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc, retry_after_s)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(exc.errors(), strip_body=True), retry_after_s)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kinds = {404: ErrorType.NOT_FOUND, 405: ErrorType.METHOD_NOT_ALLOWED}
        kind = kinds.get(exc.status_code)
        headers, message = getattr(exc, "headers", None), str(exc.detail)
        if exc.status_code == 405:  # every method the path serves, over all its routes
            allow = allow_header(app.routes, request.url.path)
            headers = {**(headers or {}), "Allow": allow}
            message = f"method {request.method} is not allowed on {request.url.path}; allowed: {allow}"
        elif exc.status_code == 404 and message == "Not Found":  # no route: say which there are
            message = not_found_message(app, request.method, request.url.path)
        body = ApiError(kind, message).body() if kind else {
            "error": message, "field": None, "error_type": "http_error"}
        return JSONResponse(body, status_code=exc.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        # Reached only by a fault outside `LastResort` (in another middleware). Starlette re-raises after
        # this answer and uvicorn then closes the connection, so the answer says so.
        logger.exception("unhandled error")
        response = error_response(ApiError(ErrorType.INTERNAL, f"internal error: {type(exc).__name__}"), retry_after_s)
        response.headers["Connection"] = "close"
        return response


def _add_routes(app: FastAPI, service: ZeroShotClassifier) -> None:
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

    zero_shot_answer = Union[ZeroShotAnswer, list[ZeroShotAnswer], list[ZeroShotElement], list[list[ZeroShotElement]]]

    @app.post("/v1/zero-shot-classification", response_model=zero_shot_answer, responses=ERROR_RESPONSES,
              openapi_extra=ZERO_SHOT_OPENAPI)
    async def zero_shot_classification(request: Request) -> Any:
        """The Hugging Face Inference API's zero-shot-classification payload, answered as the hosted API and the
        pipeline answer it: `{"sequence", "labels", "scores"}` sorted by score (a list for a list of inputs);
        to `huggingface_hub` 1.2 and later (by its User-Agent), as the hosted API answers today:
        `[{"label", "score"}, ...]` sorted by score (a list of those for a list of inputs).
        The scores are `/classify`'s probabilities for the same text, labels and template (the pipeline's
        default template `This example is {}.` when none is given); one label is scored on its own, as in
        the pipeline."""
        return await service.admitted(lambda: _zero_shot(service, request))

    @app.post("/", response_model=zero_shot_answer, responses=ERROR_RESPONSES, openapi_extra=ZERO_SHOT_OPENAPI)
    async def inference_endpoint(request: Request) -> Any:
        """The same as `POST /v1/zero-shot-classification`, at the path Inference Endpoints containers receive it."""
        return await service.admitted(lambda: _zero_shot(service, request))

    @app.get("/info", responses={503: {"model": HealthResponse, "description": "Loading, or failed to start."}})
    async def info() -> Any:
        """The served model and limits in text-embeddings-inference's `/info` shape (model_id, model_sha,
        model_dtype, model_type, max_input_length, max_batch_tokens, max_client_batch_size, version, ...)."""
        status, health = service.health()
        if status != 200:
            return JSONResponse(health, status_code=status, headers={"Retry-After": str(settings.retry_after_s)})
        return tei.info_body(health, version=__version__, token_budget=service.state.batcher.token_budget,
                             max_client_batch_size=settings.max_batch_items,
                             max_concurrent_requests=settings.max_connections)

    @app.post("/predict", responses=PREDICT_ERROR_RESPONSES, openapi_extra=tei.PREDICT_OPENAPI)
    async def predict(request: Request) -> Any:
        """The NLI head's classes of (premise, hypothesis) pairs, as text-embeddings-inference's `/predict`
        answers a sequence-classification model: `[{"score", "label"}]` per pair, highest first."""
        return await service.admitted(lambda: _predict(service, request))

    @app.post("/tokenize", responses=ERROR_RESPONSES, openapi_extra=tei.TOKENIZE_OPENAPI)
    async def tokenize(request: Request) -> Any:
        """The model tokenizer's tokens of each text, as text-embeddings-inference's `/tokenize` answers:
        a list of `{"id", "text", "special", "start", "stop"}` per text (always a list of lists; `start`/`stop`
        UTF-8 byte offsets, null for a special token); nothing is truncated."""
        return await service.admitted(lambda: _tokenize(service, request))


async def _classify(service: ZeroShotClassifier, request: Request) -> Any:
    """Read and validate the body, classify, answer ``{"id", "labels", "probabilities"}``.

    A number ``id`` with a fraction or exponent (a `zsnli.serving.http_body.JsonNumber`) is
    echoed with the exact text it was sent as (``1e-400`` stays ``1e-400``, not ``0.0``).
    """
    payload = await read_json_body(request, service.settings.max_body_bytes)
    if isinstance(payload, list):
        return await _classify_array(service, request, payload)
    req, used_alias = parse_classify_request(payload)
    try:
        probs = await service.classify(req.text, req.labels, req.hypothesis_template, req.multi_label,
                                       disconnected=lambda: _wait_disconnect(request), cascade=req.cascade,
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
    sent one, so one bad item fails alone. The items are admitted progressively, within the request's
    share of the queue (`_classify_each`); the answer is 200, with ``Retry-After`` when an item got a
    503. An empty array, or more than ``ZSNLI_MAX_BATCH_ITEMS`` items, is one 422 (field ``body``); more
    than ``ZSNLI_MAX_REQUEST_PAIRS`` units of work in all (``Prepared.work``) one 413 (field ``body``), nothing
    computed.
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
    results = await _classify_each(service, request, [(r.text, r.labels, r.hypothesis_template, r.multi_label,
                                                       r.cascade, r.scoring) for _, r in calls])
    labels: dict[int, list[str]] = {i: r.labels for i, r in calls}
    for (i, _), result in zip(calls, results):
        answers[i] = result.renamed("labels", "candidate_labels") if isinstance(result, ApiError) and aliases[i] \
            else result
    body = [array_entry(item, answer, labels.get(i)) for i, (item, answer) in enumerate(zip(items, answers))]
    retry = any(isinstance(a, ApiError) and a.error_type.retry_after for a in answers)
    headers = {"Retry-After": str(settings.retry_after_s)} if retry else None
    return Response(http_body.render_json(body), media_type="application/json", headers=headers)


def array_entry(item: Any, answer: list[float] | ApiError, labels: Sequence[str] | None = None) -> dict[str, Any]:
    """One entry of an array answer: ``{"id", "labels", "probabilities"}`` (``labels``: the item's labels
    as sent), or the error's body plus ``status`` (with the item's ``id`` when it sent one). ``item`` is
    the request object as sent."""
    rid = item.get("id") if isinstance(item, dict) else None
    rid = clean_text(rid) if isinstance(rid, str) else rid
    if not isinstance(answer, ApiError):
        return {"id": rid, "labels": [clean_text(lb) for lb in labels or ()], "probabilities": answer}
    entry = {**answer.body(), "status": answer.status}
    return {"id": rid, **entry} if isinstance(item, dict) and "id" in item else entry


async def _zero_shot(service: ZeroShotClassifier, request: Request) -> Any:
    """Read an Inference API payload (`zsnli.serving.inference_api`), validate its labels as `/classify` does,
    classify every input (`_classify_each`) and answer as the pipeline does, or as the hosted API does today
    (``[{"label", "score"}]``) to a client that reads that (`zsnli.serving.inference_api.wants_elements`).

    Errors name the payload's fields (``parameters.candidate_labels[2]``, ``inputs[1]``); an input
    that fails fails the request (the payload has no place for one error per input): the first error
    in input order is answered.
    """
    settings = service.settings
    payload = await read_json_body(request, settings.max_body_bytes)
    call = inference_api.read_zero_shot(payload, settings.max_batch_items)
    try:
        req, _ = parse_classify_request({"text": "", **call.body})
    except ApiError as exc:
        raise _renamed(exc, inference_api.FIELD_NAMES) from None
    multi = inference_api.single_label_scored_alone(len(req.labels), req.multi_label)
    results = await _classify_each(service, request, [(text, req.labels, req.hypothesis_template, multi, req.cascade,
                                                       req.scoring)
                                                      for text in call.texts])
    answers = []
    labels = [clean_text(lb) for lb in req.labels]
    for i, (text, result) in enumerate(zip(call.texts, results)):
        if isinstance(result, ApiError):
            names = {**inference_api.FIELD_NAMES, "text": "inputs" if call.single else f"inputs[{i}]"}
            raise _renamed(result, names)
        answers.append(inference_api.pipeline_answer(clean_text(text), labels, result))
    if inference_api.wants_elements(request.headers.get("user-agent")):
        answers = [inference_api.elements_answer(a) for a in answers]
    return answers[0] if call.single else answers


async def _predict(service: ZeroShotClassifier, request: Request) -> Any:
    """Read a TEI ``/predict`` body (`zsnli.serving.tei.read_predict`), score its pairs with the NLI head
    (`ZeroShotClassifier.predict`) and answer TEI's shape: one list of ``{"score", "label"}`` for one pair,
    a list of them for a list of pairs. Errors name ``inputs`` / ``inputs[i]``; a full queue is TEI's 429
    (`zsnli.serving.tei.tei_status`), not 503."""
    payload = await read_json_body(request, service.settings.max_body_bytes)
    call = tei.read_predict(payload, service.settings.max_batch_items)
    try:
        logits = await service.predict(call.pairs, disconnected=lambda: _wait_disconnect(request))
    except ApiError as exc:
        raise tei.tei_status(tei.renamed_pair_fields(exc, call.single)) from None
    answers = tei.predictions(tei.scores_for(logits, call.raw_scores), service.state.model.id2label)
    return answers[0] if call.single else answers


async def _tokenize(service: ZeroShotClassifier, request: Request) -> Any:
    """Read a TEI ``/tokenize`` body (`zsnli.serving.tei.read_tokenize`) and answer each text's
    `zsnli.serving.tei.simple_tokens` (a list of lists, one per text, for one text too, as TEI)."""
    payload = await read_json_body(request, service.settings.max_body_bytes)
    call = tei.read_tokenize(payload, service.settings.max_batch_items)
    return await service.with_tokenizer(
        lambda tokenizer: [tei.simple_tokens(tokenizer, text, call.add_special_tokens) for text in call.texts])


def _renamed(exc: ApiError, names: dict[str, str]) -> ApiError:
    """``exc`` with every field of ``names`` (and its ``[i]`` items) renamed (`ApiError.renamed`)."""
    for old, new in names.items():
        exc = exc.renamed(old, new)
    return exc


async def _classify_each(service: ZeroShotClassifier, request: Request,
                         calls: Sequence[tuple[str, list[str], str | None, bool, bool, str]]) -> list[Any]:
    """Classify several documents of one request: ``calls`` are ``(text, labels, template, multi_label,
    cascade, scoring)``. Each is prepared (``ZeroShotClassifier.preprocess``: its own 422s) and the request goes to
    ``ZeroShotClassifier.classify_request``: refused whole with 413 over ``ZSNLI_MAX_REQUEST_PAIRS``, its
    documents admitted progressively within the request's share of the queue (``ZSNLI_REQUEST_SHARE_PAIRS``),
    their pairs batched with everyone's. Returns, in order, each one's probabilities or its ``ApiError``."""
    service.check_ready()
    prepared: list[Any] = []
    for text, labels, template, multi, cascade, scoring in calls:
        try:
            prepared.append(service.preprocess(text, labels, template, multi, cascade,
                                               service.scoring_config(scoring)))
        except ApiError as exc:
            prepared.append(exc)
    return await service.classify_request(prepared, disconnected=lambda: _wait_disconnect(request))


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return


# --------------------------------------------------------------------------- body


async def read_json_body(request: Request, limit: int) -> Any:
    """Read and parse a JSON body with `zsnli.serving.http_body.read_json_body` (the one place a body is read).

    limit: bytes, applied to the wire body and to the body after ``Content-Encoding``
    is undone. Raises ``ApiError`` (the `BodyError` through the error table):
    415 a content type that is not JSON, a charset other than UTF-8/16/32 or an
    unsupported ``Content-Encoding``; 413 over ``limit`` (declared, streamed or
    decoded); 400 client gone mid-body, empty body, a body that is not what its
    ``Content-Encoding`` says (``invalid_encoding``), undecodable text or invalid
    JSON (``NaN``/``Infinity`` and out-of-range numbers included); 422 a key given
    twice (with ``errors``, one entry per duplicated path).
    """
    try:
        return await http_body.read_json_body(request.headers, request.stream(), limit, (ClientDisconnect,))
    except http_body.BodyError as exc:
        raise ApiError(error_type_for(exc.error_type, exc.status), exc.message, exc.field,
                       errors=exc.errors) from None


def parse_classify_request(payload: Any) -> tuple[ClassifyRequest, bool]:
    """Validate a parsed body; returns ``(request, used_candidate_labels)``. Raises ``ApiError`` 422
    naming the field the client sent (``candidate_labels[i]`` when it used the alias; a misspelt
    field, e.g. ``multi_lable``, or a legacy one, ``multi_class``, with the field to use:
    `zsnli.serving.api_types.misspelt_fields`; an Inference API payload, ``label`` without ``labels``
    or labels as one string with what to send instead: `zsnli.serving.api_types.classify_body_hint`).
    ``candidate_labels`` without a ``hypothesis_template`` get the pipeline's default template
    (`zsnli.serving.api_types.classify_fields`)."""
    if not isinstance(payload, dict):
        raise ApiError(ErrorType.VALIDATION, f"body must be a JSON object, got {_json_type(payload)}", "body")
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
        raise ApiError(ErrorType.VALIDATION, "give either labels or candidate_labels, not both", "candidate_labels")
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
