"""The ``Allow`` header of a 405: exactly the methods a path is served with, over all routes.

Starlette answers a 405 from the first route whose path matches, so a path served by two
routes (``GET /health`` and ``HEAD /health``) listed only one of them. `allowed_methods`
takes the union over every route whose path pattern matches. Duck-typed over routes with
``path_regex`` and ``methods`` (Starlette/FastAPI routes); imports nothing else.

A path served with GET is served with HEAD too (RFC 9110 section 9.3.2: the same status and headers,
``Content-Length`` included, with no body), as Starlette's own ``Route`` does and FastAPI's ``APIRoute``
does not: `HeadAsGet` answers a HEAD through the GET route itself, so the two can never disagree (a
separate HEAD route rendered ``GET /health``'s body without its ``response_model``, and its
``Content-Length`` was that other body's), and `allowed_methods` lists HEAD wherever GET is.
"""

from __future__ import annotations

from typing import Any, Iterable

#: The order methods are listed in (RFC 9110 section 9 order, then any others alphabetically).
METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")


def route_methods(routes: Iterable[Any], path: str) -> set[str]:
    """The union of ``methods`` (upper case) of every route whose ``path_regex`` matches ``path``, as the
    routes declare them (no implied HEAD); routes without methods (mounts, websockets) are skipped."""
    found: set[str] = set()
    for route in routes:
        regex, methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and methods and regex.match(path):
            found.update(m.upper() for m in methods)
    return found


def allowed_methods(routes: Iterable[Any], path: str) -> list[str]:
    """The methods served at ``path``: the union of ``methods`` of every route whose
    ``path_regex`` matches it, plus HEAD where GET is (`HeadAsGet`), in `METHOD_ORDER`. Routes without methods (mounts,
    websockets) are skipped. Returns ``[]`` when no route serves the path."""
    found = route_methods(routes, path)
    if "GET" in found:
        found.add("HEAD")  # `HeadAsGet`
    return sorted(found, key=lambda m: (METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER), m))


def allow_header(routes: Iterable[Any], path: str) -> str:
    """``Allow`` header value for a 405 at ``path``, e.g. ``"GET, HEAD"``."""
    return ", ".join(allowed_methods(routes, path))


class HeadAsGet:
    """Pure ASGI middleware: a ``HEAD`` request to a path that a route serves with GET but none with HEAD
    is passed on as that GET, and the answer's body is dropped (its status and headers, ``Content-Length``
    included, are GET's). ``routes``: the app's route list (read at each request, so routes added later,
    e.g. by extensions, count). Other requests pass through untouched."""

    def __init__(self, app: Any, routes: list[Any]) -> None:
        self.app, self.routes = app, routes

    def _served_by_get(self, path: str) -> bool:
        methods = route_methods(self.routes, path)
        return "GET" in methods and "HEAD" not in methods

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "HEAD" or not self._served_by_get(scope["path"]):
            return await self.app(scope, receive, send)

        async def headers_only(message: Any) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
