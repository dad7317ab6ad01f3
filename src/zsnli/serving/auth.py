"""The optional API key (``ZSNLI_API_KEY``): one ASGI middleware in front of every route.

`ApiKeyMiddleware` lets a request through only with ``Authorization: Bearer <key>`` (RFC 6750 section 2.1;
the scheme name in any letter case), compared in constant time (`key_matches`), and answers every other one
401 ``unauthorized`` with ``WWW-Authenticate: Bearer`` (RFC 6750 section 3). It guards the whole app, so a
route added later (an extension, the bake-off's, a new family of routes) is covered without a change here;
only the paths of `OPEN_PATHS` stay open:

* ``/health``: liveness and readiness probes (Kubernetes, a load balancer) carry no credentials, and a
  probe answered 401 would restart or drain a healthy pod. It shows the model's name and hashes, which
  ``/info`` (TEI's, keyed) shows too; that is the price of an unauthenticated probe, as with TEI's ``/health``.
* ``/docs``, ``/redoc``, ``/openapi.json`` and the docs' own assets (`zsnli.serving.docs_assets.ASSET_PREFIX`):
  the API's description, the same for every deployment of this version and free of model, data or answers;
  a browser cannot attach a header to the page load, and Swagger UI's *Authorize* button then sends the key
  with every *Try it out* call (which the key guards as any other call). ``/favicon.ico`` too: the bundled icon a
  browser fetches by itself for any page, never with the key.

The key never reaches a log: the access line (`zsnli.serving.request_ids`) has no headers and writes a query's
``api_key=`` (``access_token``, ``key``, ``token``, ``pwd``, ...: `zsnli.serving.request_ids.secret_name`) as ``REDACTED``
(uvicorn's trace lines too, their key-carrying headers included), the
401's message never echoes what was sent (it says that a key in the query is never read), a header the HTTP parser
refuses is named, never repeated (`zsnli.serving.http_protocol.unechoed`), and `zsnli.config.Settings.describe`
prints only ``(set)``. A key shorter than `zsnli.config.MIN_API_KEY_CHARS` is refused at start.

May import: the standard library, `zsnli.errors`, `zsnli.serving.docs_assets` (its asset prefix) and
`zsnli.serving.request_ids` (`secret_name`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from ..errors import ApiError, ErrorType, shaped_for
from .docs_assets import ASSET_PREFIX
from .request_ids import secret_name

#: Paths answered without the key (see the module docstring for why each one).
OPEN_PATHS = frozenset({"/health", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/favicon.ico"})


def is_open(path: str) -> bool:
    """Whether ``path`` is served without the key: one of `OPEN_PATHS` or under the docs' asset prefix."""
    return path in OPEN_PATHS or path.startswith(ASSET_PREFIX + "/")


def key_matches(sent: str | bytes, key: str) -> bool:
    """Whether ``sent`` is ``key``, in time independent of where they differ and of their lengths.

    Both sides are hashed (SHA-256) first, so `hmac.compare_digest` compares two 32-byte digests: a plain
    ``compare_digest`` of unequal lengths returns at once and tells a prober the key's length."""
    sent_bytes = sent if isinstance(sent, bytes) else sent.encode("utf-8", "surrogateescape")
    return hmac.compare_digest(hashlib.sha256(sent_bytes).digest(), hashlib.sha256(key.encode()).digest())


def bearer_token(headers: Any) -> bytes | None:
    """The token of the request's ``Authorization: Bearer <token>`` header (ASGI header pairs), else None."""
    for name, value in headers or ():
        if name.lower() == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" and token.strip() else None
    return None


def query_names_a_key(query: bytes) -> bool:
    """Whether a request's query string has a parameter that may carry a key (`zsnli.serving.request_ids.secret_name`:
    ``api_key``, ``access_token``, ``key``, ``token``, any case), so the 401 can say where the key goes."""
    names = (part.partition(b"=")[0].decode("latin-1") for part in query.replace(b";", b"&").split(b"&"))
    return any(secret_name(name) for name in names if name)


class ApiKeyMiddleware:
    """Pure ASGI middleware: every HTTP request but those of `is_open` needs ``Authorization: Bearer <key>``.

    app: the wrapped ASGI app; key: ``ZSNLI_API_KEY`` (visible ASCII, checked by `zsnli.config.Settings`).
    """

    def __init__(self, app: Any, key: str) -> None:
        self.app, self.key = app, key

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or is_open(scope.get("path", "")):
            return await self.app(scope, receive, send)
        token = bearer_token(scope.get("headers"))
        if token is not None and key_matches(token, self.key):
            return await self.app(scope, receive, send)
        why = "no 'Authorization: Bearer <key>' header" if token is None else "the key sent is not this server's"
        if token is None and query_names_a_key(scope.get("query_string") or b""):
            why += " (a key in the query string is never read: it would be kept in logs and browser history)"
        error = ApiError(ErrorType.UNAUTHORIZED, f"unauthorized: {why}; send the ZSNLI_API_KEY the server was started "
                         "with as 'Authorization: Bearer <key>' (GET /health needs none)", "authorization")
        body = json.dumps(shaped_for(scope.get("path"), error.body())).encode()
        await send({"type": "http.response.start", "status": error.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="zsnli"')]})
        await send({"type": "http.response.body", "body": body})


def add_bearer_scheme(app: Any) -> None:
    """Declare the key in the app's OpenAPI document (``/openapi.json``), so Swagger UI at ``/docs`` shows its
    *Authorize* button: an HTTP ``bearer`` security scheme required by every operation but those of `is_open`
    paths (OpenAPI 3.1, "Security Scheme Object"). ``app``: a FastAPI app; its ``openapi`` is wrapped."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = build()  # FastAPI keeps it in app.openapi_schema; completed here once
            schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
                "type": "http", "scheme": "bearer", "description": "ZSNLI_API_KEY, sent as 'Authorization: Bearer <key>'"}
            schema["security"] = [{"bearer": []}]
            for path, operations in schema.get("paths", {}).items():
                for operation in operations.values() if is_open(path) else ():
                    operation["security"] = []
        return app.openapi_schema

    app.openapi = openapi

