"""The HTTP face's app: `create_app` builds the FastAPI app around the service (its lifespan, its middleware in their
order, its error answers) with zsnli's own routes (`zsnli.serving.routes_zsnli`) and the Inference API's and
text-embeddings-inference's (`zsnli.serving.routes_compat`); more through ``create_app(extend=...)``. Names imported
from here stay here (`__all__`).

Every refusal has the one error shape (statuses: `zsnli.errors.ErrorType`): each `zsnli.errors.ApiError`, FastAPI's
validation (422 with ``errors``), a 404 naming the routes there are (`not_found_message`), a 405 with ``Allow`` and
`LastResort`'s 500. The 408 and 503 ``overloaded`` come from the connection layer under `zsnli.serve`
(`zsnli.serving.http_protocol`), not from here: a bare ``uvicorn server:app`` has neither.

May import: FastAPI/starlette, `zsnli.serving.auth`, `zsnli.config`, `zsnli.errors`, `zsnli.serving.docs_assets`,
`zsnli.serving.http_request`, `zsnli.serving.http_routes`, `zsnli.serving.origin_check`, `zsnli.serving.request_ids`,
`zsnli.serving.request_timing`, `zsnli.serving.routes_compat`, `zsnli.serving.routes_zsnli`, `zsnli.serving.service`,
`zsnli.serving.startup`. Imported by `zsnli.serve`, server.py.
"""

from __future__ import annotations

import logging
import posixpath
from contextlib import asynccontextmanager
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from .auth import ApiKeyMiddleware, add_bearer_scheme
from ..config import Settings
from .docs_assets import install_offline_docs
from ..errors import ApiError, ErrorType, shaped_for
from .http_request import parse_classify_request, read_json_body, validation_error
from .http_routes import HeadAsGet, allow_header, allowed_methods
from .origin_check import add_origin_check
from .request_ids import RequestIdMiddleware, log_safe, redact_uvicorn_access_log
from .request_timing import TimingMiddleware
from .routes_compat import add_compat_routes
from .routes_zsnli import add_zsnli_routes, array_entry, index_page, route_index
from .service import ZeroShotClassifier
from .startup import ModelLoader

__all__ = ["Extension", "create_app", "LastResort", "route_index", "index_page", "not_found_message", "read_json_body",
           "parse_classify_request", "validation_error", "array_entry"]

logger = logging.getLogger("zsnli")

#: ``extend(app, service)``: adds routes (or middleware) to the app built by `create_app`.
Extension = Callable[[FastAPI, ZeroShotClassifier], None]


def create_app(settings: Settings | None = None, *, loader: ModelLoader | None = None,
               shutdown_hook: Callable[[], None] | None = None, service: ZeroShotClassifier | None = None,
               extend: Extension | None = None, access_log: bool = False) -> FastAPI:
    """Build the FastAPI app around a `ZeroShotClassifier` (``app.state.classifier``).

    settings: default ``Settings.from_env()``. loader, shutdown_hook: passed to the
    service (see `ZeroShotClassifier`); ignored when ``service`` is given.
    extend: ``f(app, service)`` called last, to add routes. With ``ZSNLI_API_KEY`` set every route, the
    extensions' included, needs ``Authorization: Bearer <key>`` but `zsnli.serving.auth.OPEN_PATHS`. Every route
    answers only the hosts and web pages `zsnli.serving.origin_check.OriginCheck` lets through (before the key).
    Every answer carries ``X-Request-ID`` and every error body a ``request_id`` (`zsnli.serving.request_ids.RequestIdMiddleware`, outermost);
    access_log: write its access line with the id (`zsnli.serve` sets it and turns uvicorn's off).

    Startup: the service's preflight runs in the lifespan before the socket opens (failure: uvicorn exits
    non-zero); loading weights and one warm-up forward run in the background while ``/health`` answers 503 loading.
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

    app = FastAPI(title="zsnli", version=__version__, lifespan=lifespan,
                  description="Zero-shot text classification served from an NLI cross-encoder. "
                  "POST a document and its label descriptions; get one probability per label.",
                  redirect_slashes=False)  # a 307 to <scheme>://<Host>/path is built from headers: a 404 instead
    install_offline_docs(app)
    app.state.settings = settings
    app.state.classifier = service
    _add_error_handlers(app, settings.retry_after_s)
    app.add_middleware(LastResort, retry_after_s=settings.retry_after_s)  # innermost: extensions wrap it
    app.add_middleware(HeadAsGet, routes=app.router.routes)  # HEAD wherever GET: GET's headers, no body
    app.state.timing_observers = []  # TEI's timing headers; the metrics extension observes (request_timing)
    app.add_middleware(TimingMiddleware, observers=app.state.timing_observers)
    add_zsnli_routes(app, service)
    add_compat_routes(app, service)
    if settings.api_key:  # before every route, the extensions' too: only `zsnli.serving.auth.OPEN_PATHS` are open;
        app.add_middleware(ApiKeyMiddleware, key=settings.api_key)  # inside the extensions' middleware (metrics count 401s)
        add_bearer_scheme(app)  # /docs's Authorize button
    add_origin_check(app, settings)  # Host and Origin checks (and CORS for listed origins) before the key, inside metrics
    if extend is not None:
        extend(app, service)
    app.add_middleware(RequestIdMiddleware, access_log=access_log)  # last added: outermost
    redact_uvicorn_access_log()  # a bare uvicorn's access line: no secret of a query in clear
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
                                      self.retry_after_s, scope.get("path"))
            await response(scope, receive, send)


def not_found_message(app: FastAPI, method: str, path: str) -> str:
    """The message of a 404 for a path no route serves: the route it nearly is (the same path without its
    trailing slash, with other letter case, or with doubled slashes and ``.``/``..`` segments resolved as
    ``posixpath.normpath`` does: ``//classify``, ``/x/../classify``) and every route of `route_index`. Only the
    request's method and path are used (never ``Host`` or ``X-Forwarded-*``); a path is never redirected. A route an
    extension left off (``app.state.routes_off``: path -> why, e.g. ``/metrics`` without prometheus_client) says
    why instead."""
    off = getattr(app.state, "routes_off", {}).get(path)
    if off:
        return off
    routes = route_index(app)
    hint = ""
    tidy = "/" + posixpath.normpath("/" + path).lstrip("/")
    for candidate in dict.fromkeys([path.rstrip("/") or "/", path.lower(), path.rstrip("/").lower() or "/", tidy,
                                    tidy.lower()]):
        methods = allowed_methods(app.routes, candidate) if candidate != path else []
        if methods:
            slash = " (without the trailing slash)" if path.rstrip("/") == candidate else ""
            method_hint = method if method in methods else "/".join(m for m in methods if m != "HEAD") or methods[0]
            hint = f"; did you mean {method_hint} {candidate}{slash}?"
            break
    listed = ", ".join(e["route"] for e in routes)
    return f"no route {method} {path}{hint or '.'} Routes: {listed} (GET / lists them with what each is for)"


def error_response(exc: ApiError, retry_after_s: int, path: str | None = None) -> JSONResponse:
    """The JSON answer of an `ApiError` (``Retry-After`` when its type carries it), shaped for the route at
    ``path`` (`zsnli.errors.shaped_for`: OpenAI's error shape on the OpenAI-compatible route)."""
    return JSONResponse(shaped_for(path, exc.body()), status_code=exc.status, headers=exc.headers(retry_after_s))


def _add_error_handlers(app: FastAPI, retry_after_s: int) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc, retry_after_s, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(exc.errors(), strip_body=True), retry_after_s, request.url.path)

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
        return JSONResponse(shaped_for(request.url.path, body), status_code=exc.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error")  # outside `LastResort`: Starlette re-raises, uvicorn closes the connection
        response = error_response(ApiError(ErrorType.INTERNAL, f"internal error: {type(exc).__name__}"), retry_after_s,
                                  request.url.path)
        response.headers["Connection"] = "close"
        return response
