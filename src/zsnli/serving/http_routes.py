"""The ``Allow`` header of a 405: exactly the methods a path is served with, over all routes.

Starlette answers a 405 from the first route whose path matches, so a path served by two
routes (``GET /health`` and ``HEAD /health``) listed only one of them. `allowed_methods`
takes the union over every route whose path pattern matches. Duck-typed over routes with
``path_regex`` and ``methods`` (Starlette/FastAPI routes); imports nothing else.
"""

from __future__ import annotations

from typing import Any, Iterable

#: The order methods are listed in (RFC 9110 section 9 order, then any others alphabetically).
METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")


def allowed_methods(routes: Iterable[Any], path: str) -> list[str]:
    """The methods served at ``path``: the union of ``methods`` of every route whose
    ``path_regex`` matches it, in `METHOD_ORDER`. Routes without methods (mounts,
    websockets) are skipped. Returns ``[]`` when no route serves the path."""
    found: set[str] = set()
    for route in routes:
        regex, methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and methods and regex.match(path):
            found.update(m.upper() for m in methods)
    return sorted(found, key=lambda m: (METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER), m))


def allow_header(routes: Iterable[Any], path: str) -> str:
    """``Allow`` header value for a 405 at ``path``, e.g. ``"GET, HEAD"``."""
    return ", ".join(allowed_methods(routes, path))
