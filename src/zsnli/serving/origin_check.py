"""No web page drives the server unless allowed: the ``Host`` check against DNS rebinding and the ``Origin`` check
on every request that does work, in front of every route (`OriginCheck`, pure ASGI).

A page a user opens can send requests to any address the user's browser reaches, a server on ``localhost``
included. Two checks keep such a page out (the class of ollama's CVE-2024-28224):

* **Host** (every request, every method, on every address; `host_allowed`): DNS rebinding points a name the
  attacker owns (``evil.example``) at this machine, so the page's requests arrive with ``Host: evil.example``, on
  loopback or on the machine's network address alike. A request is answered when its host is an IP address; a
  name no public DNS zone can point here (one with no dot: ``localhost``, a container's or Kubernetes Service's
  short name; one ending in ``.localhost``, RFC 6761, ``.local``, RFC 6762, the Kubernetes default
  ``cluster.local`` included, ``.internal``, reserved by ICANN for private use, or ``.svc``, a Kubernetes
  Service's ``name.namespace.svc``); this machine's own name (``socket.gethostname``); the
  host of ``ZSNLI_PUBLIC_URL``; a name ``ZSNLI_ALLOWED_HOSTS`` lists. Any other dotted name is refused: a server
  behind an Ingress or a proxy with a public name sets ``ZSNLI_PUBLIC_URL`` or ``ZSNLI_ALLOWED_HOSTS``. Refused:
  403 ``forbidden``, field ``host`` (400 ``malformed_request`` for a ``Host`` that is no host).
* **Origin** (every method but ``GET`` and ``HEAD``, which start no work here; `origin_problem`): a browser names
  the page behind a request in ``Origin`` (old ones only in ``Referer``). A request without either is no
  browser's (curl, the Python client, the ``openai`` client, probes) and passes. Otherwise the page must be the
  server's own (same scheme as the request, host and port as its ``Host``: its bake-off form, ``/docs``'s
  *Try it out*; or the origin of ``ZSNLI_PUBLIC_URL``, the page a proxy that rewrites ``Host`` serves) or one
  ``ZSNLI_ALLOWED_ORIGINS`` lists (``*``: any); ``null`` (a sandboxed frame, a ``file://`` page, a
  ``no-referrer`` redirect) never is. Refused: 403 ``forbidden``, field ``origin``. An allowed page must then
  declare its body ``Content-Type: application/json`` (or ``*+json``): a body sent with no type or as
  ``text/plain`` is what a page may send anywhere without asking first (no CORS preflight), and the body reader
  reads a typeless body as JSON for curl's sake. Refused: 415 ``unsupported_media_type``, field ``content-type``.

The origins of ``ZSNLI_ALLOWED_ORIGINS`` also get CORS (starlette's ``CORSMiddleware``, inside this check, outside
the API key: a preflight carries no credentials), so a listed page can read the answers; no other page gets any
CORS header. Every refusal is an answer of the one error shape (`zsnli.errors`; OpenAI's on ``/v1/embeddings``),
counted by the metrics middleware around it under the route's own ``path`` label.

May import: the standard library, starlette, `zsnli.errors`, `zsnli.net_settings` and `zsnli.serving.http_body`
(the JSON media types).
"""

from __future__ import annotations

import json
import socket
from typing import Any

from ..errors import ApiError, ErrorType, shaped_for
from ..net_settings import DEFAULT_PORTS, ip_literal, origin_text, parse_origin, split_host
from .http_body import JSON_MEDIA_TYPES

#: Methods that start no work on any route here: no Origin check (a page cannot read their answers without CORS).
SAFE_METHODS = frozenset({"GET", "HEAD"})
#: Name endings no public DNS zone can point at this machine (RFC 6761, RFC 6762, ICANN's private-use ``.internal``).
LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".svc")
#: Most characters of a refused value quoted back in the error message.
SHOWN_CHARS = 200
#: This machine's name (``socket.gethostname``), lower case: answered as a local name (Debian maps it to 127.0.1.1).
THIS_HOST = socket.gethostname().lower().rstrip(".")
#: This machine's own names: its name only. Not ``socket.getfqdn``: a reverse DNS lookup at import can wait
#: for a resolver's timeout on a machine without a reachable DNS server, and the server's start-up is timed.
OWN_NAMES = frozenset({THIS_HOST} - {""})


def _header(headers: Any, name: bytes) -> str | None:
    values = [value.decode("latin-1") for key, value in headers or () if key.lower() == name]
    return ", ".join(values) if values else None


def host_allowed(host: str, listed: tuple[str, ...]) -> bool:
    """Whether a request for ``host`` (as `zsnli.net_settings.split_host` gives it) is answered (module docstring),
    whatever address it came in on.

    listed: ``ZSNLI_ALLOWED_HOSTS`` items (names, IP addresses, ``.domain`` suffixes, ``*``) and the public URL's
    host."""
    if ip_literal(host) or "." not in host or host.endswith(LOCAL_SUFFIXES) or host in OWN_NAMES:
        return True
    return any(item == "*" or item == host or (item.startswith(".") and (host == item[1:] or host.endswith(item)))
               for item in listed)


def _shown(value: str) -> str:
    return repr(value[:SHOWN_CHARS] + ("..." if len(value) > SHOWN_CHARS else ""))


def origin_problem(method: str, headers: Any, host: tuple[str, int | None] | None,
                   origins: frozenset[str], own: str | None = None, scheme: str = "http") -> ApiError | None:
    """The refusal of a request whose page may not drive the server (module docstring), else None.

    method: the request's; headers: its ASGI header pairs; host: its ``Host`` as `split_host` gives it (None:
    none sent); origins: ``ZSNLI_ALLOWED_ORIGINS`` as `zsnli.net_settings.allowed_origins` spells them; own: the
    origin of ``ZSNLI_PUBLIC_URL`` as `origin_text` spells it (None: unset), the server's own too; scheme: the
    request's (the ASGI scope's: ``http`` on a plain socket, ``https`` only behind a proxy
    ``ZSNLI_FORWARDED_ALLOW_IPS`` trusts), which a page of the request's own host must share."""
    if method in SAFE_METHODS:
        return None
    sent, name = _header(headers, b"origin"), "Origin"
    if sent is None:
        sent, name = _header(headers, b"referer"), "Referer"
        if sent is None:
            return None  # no browser's request
    origin = parse_origin(sent, url=name == "Referer") if sent.strip().lower() != "null" else None
    if origin is None:
        return ApiError(ErrorType.FORBIDDEN, f"forbidden: the {name} {_shown(sent)} names no web page this server "
                        "answers (a null or unreadable origin never is); send the request without it, from a "
                        "program, or from a page ZSNLI_ALLOWED_ORIGINS lists", name.lower())
    same = host is not None and origin == (scheme, host[0], host[1] or DEFAULT_PORTS.get(scheme))
    if not (same or "*" in origins or origin_text(origin) in origins or origin_text(origin) == own):
        return ApiError(ErrorType.FORBIDDEN, f"forbidden: a web page at {origin_text(origin)} may not drive this "
                        f"server ({name} header); only the server's own pages and those of ZSNLI_ALLOWED_ORIGINS may "
                        "(programs send no Origin and are not affected)", name.lower())
    if method == "OPTIONS":
        return None
    media = (_header(headers, b"content-type") or "").partition(";")[0].strip().lower()
    if media not in JSON_MEDIA_TYPES and not media.endswith("+json"):
        return ApiError(ErrorType.UNSUPPORTED_MEDIA_TYPE, "a request from a web page must declare its body "
                        f"'Content-Type: application/json', got {_shown(media) if media else 'none'} (a page may "
                        "send a body of no type or text/plain anywhere without asking first)", "content-type")
    return None


class OriginCheck:
    """Pure ASGI middleware: the ``Host`` and ``Origin`` checks of the module docstring, in front of ``app``.

    allowed_hosts / allowed_origins: the settings as `zsnli.net_settings` normalises them (None: unset);
    public_url: ``ZSNLI_PUBLIC_URL`` (its host is always answered)."""

    def __init__(self, app: Any, allowed_hosts: str | None, allowed_origins: str | None,
                 public_url: str | None = None) -> None:
        self.app = app
        listed = [item for item in (allowed_hosts or "").split(",") if item]
        public = parse_origin(public_url, url=True) if public_url else None
        self.listed = tuple(listed + ([public[1]] if public else []))
        self.origins = frozenset(item for item in (allowed_origins or "").split(",") if item)
        self.own = origin_text(public) if public else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        error = self.refusal(scope)
        if error is None:
            return await self.app(scope, receive, send)
        body = json.dumps(shaped_for(scope.get("path"), error.body())).encode()
        await send({"type": "http.response.start", "status": error.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"vary", b"Origin")]})
        await send({"type": "http.response.body", "body": body})

    def refusal(self, scope: Any) -> ApiError | None:
        """The error ``scope``'s request is refused with, or None when it may go on."""
        headers = scope.get("headers") or ()
        sent = _header(headers, b"host")
        host = split_host(sent) if sent is not None else None
        if sent is not None and host is None:
            return ApiError(ErrorType.MALFORMED_REQUEST, f"malformed Host header {_shown(sent)}: send host[:port]",
                            "host")
        if host is not None and not host_allowed(host[0], self.listed):
            return ApiError(ErrorType.FORBIDDEN, f"forbidden: this server does not answer for host "
                            f"{_shown(host[0])} (a DNS rebinding guard: it answers IP addresses, localhost, local "
                            "names and its own only); behind an Ingress or a proxy with a public name, set "
                            "ZSNLI_PUBLIC_URL or list the name in ZSNLI_ALLOWED_HOSTS",
                            "host")
        return origin_problem(scope.get("method", "GET"), headers, host, self.origins, self.own,
                              str(scope.get("scheme") or "http").lower())


def _listed_cors():
    """starlette's ``CORSMiddleware`` comparing origins as `zsnli.net_settings.origin_text` spells them (the same
    rule as `OriginCheck`: letter case and a default port make no difference), and giving an unlisted page no CORS
    header at all (starlette adds ``Access-Control-Expose-Headers`` to any answer that had an ``Origin``): only
    ``Vary: Origin``."""
    from starlette.datastructures import MutableHeaders
    from starlette.middleware.cors import CORSMiddleware

    class ListedCors(CORSMiddleware):
        def is_allowed_origin(self, origin: str) -> bool:
            parsed = parse_origin(origin)
            return super().is_allowed_origin(origin_text(parsed) if parsed else origin)

        async def send(self, message: Any, send: Any, request_headers: Any) -> None:
            origin = request_headers.get("origin")
            if message["type"] != "http.response.start" or origin is None or self.is_allowed_origin(origin):
                return await super().send(message, send, request_headers)
            message.setdefault("headers", [])
            headers = MutableHeaders(scope=message)
            headers["Vary"] = ", ".join([*headers.getlist("Vary"), "Origin"])
            await send(message)

    return ListedCors


def add_origin_check(app: Any, settings: Any) -> None:
    """Add `OriginCheck` to a starlette/FastAPI ``app`` (outermost so far) for ``settings``
    (`zsnli.config.Settings`), with starlette's ``CORSMiddleware`` inside it for the origins of
    ``ZSNLI_ALLOWED_ORIGINS`` (any request header, ``X-Request-ID`` and ``Retry-After`` readable; no cookies)."""
    if settings.allowed_origins:
        app.add_middleware(_listed_cors(), allow_origins=settings.allowed_origins.split(","),
                           allow_methods=["*"], allow_headers=["*"],
                           expose_headers=["X-Request-ID", "Retry-After"], max_age=600)
    app.add_middleware(OriginCheck, allowed_hosts=settings.allowed_hosts, allowed_origins=settings.allowed_origins,
                       public_url=settings.public_url)
