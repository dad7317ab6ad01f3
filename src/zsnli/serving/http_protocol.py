"""Connection-level limits for uvicorn: a read deadline, a connection cap, shutdown that skips uploads.

`protocol_class` builds a subclass of uvicorn's h11 protocol (``uvicorn.Config(http=...)``):

* **Read deadline** (``read_timeout_s``): the request line, the headers and the
  whole body must arrive within it, counted from the connection opening (or,
  on a keep-alive connection, from the first byte of the next request). Past
  it the server answers a JSON ``408`` ``request_timeout`` with
  ``Connection: close`` when at least the request line had arrived, and
  otherwise just closes (nothing was asked). A connection whose response was
  already sent (e.g. an early 413) but whose body keeps trickling is closed.
  Idle keep-alive connections are uvicorn's ``timeout_keep_alive``.
* **Connection cap** (``max_connections``): connections beyond it are not
  served: their request gets a JSON ``503`` ``overloaded`` with
  ``Retry-After`` and ``Connection: close``. Each open connection lives at
  most the read deadline before its request is complete, so stalled sockets
  cannot pile up.
* **Malformed requests**: what h11 cannot parse (a bad request line or header, an
  illegal chunk size such as ``zz``, ``-5``, ``0x10`` or 21 hex digits, a chunk
  without its CRLF, headers over h11's buffer) is answered in the JSON shape
  (400 ``malformed_request``, 431 ``headers_too_large``, 501 ``not_implemented``
  for an unsupported ``Transfer-Encoding``) with ``Connection: close``, not
  uvicorn's ``text/plain`` 400.
* **Declared size**: a chunk whose declared size takes the body past
  ``max_body_bytes`` (``ZSNLI_MAX_BODY_BYTES``) is answered 413
  ``payload_too_large`` at once, with ``Connection: close``, instead of waiting
  for bytes that would be refused anyway (a ``Content-Length`` over the limit is
  refused by the app's body reader as soon as the route reads the body).
* **Shutdown**: at SIGTERM a request whose body is still arriving is not
  admitted work: it gets a JSON ``503`` ``unavailable`` (``Retry-After``) and
  its connection is closed at once, so the exit waits only for requests
  already received (uvicorn's graceful drain); half-sent headers are closed.

The h11 implementation (always installed with uvicorn) is used, not httptools,
because the subclass relies on h11's connection states. Its answers come from
the one error table (`zsnli.errors`), in the same JSON shape as the app's.
Every answer here carries a request id (``X-Request-ID`` and ``request_id``: `zsnli.serving.request_ids`).
May import: uvicorn, h11, `zsnli.errors` and `zsnli.serving.request_ids`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import ApiError, ErrorType
from .request_ids import request_id

logger = logging.getLogger("zsnli")


def _head(error: ApiError, retry_after_s: int, length: int, rid: str | None = None) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(length).encode()),
               (b"connection", b"close")]
    headers += [(k.lower().encode(), v.encode()) for k, v in (error.headers(retry_after_s) or {}).items()]
    if rid is not None:
        headers.append((b"x-request-id", rid.encode("latin-1")))
    return headers


def json_error_bytes(error: ApiError, retry_after_s: int, rid: str | None = None) -> bytes:
    """A complete HTTP/1.1 response of ``error``: its JSON body (`zsnli.errors.ApiError.body`, plus
    ``request_id`` and an ``X-Request-ID`` header when ``rid`` is given), ``Connection: close`` and
    ``Retry-After: retry_after_s`` when its type carries it."""
    obj = error.body() if rid is None else {**error.body(), "request_id": rid}
    body = json.dumps(obj).encode()
    lines = [b"HTTP/1.1 %d %s" % (error.status, HTTPStatus(error.status).phrase.encode())]
    lines += [name + b": " + value for name, value in _head(error, retry_after_s, len(body), rid)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _overloaded_app(max_connections: int, retry_after_s: int):
    """ASGI app answering every request 503 ``overloaded`` (the connection is over the cap)."""
    error = ApiError(ErrorType.OVERLOADED, f"overloaded: more than ZSNLI_MAX_CONNECTIONS={max_connections} "
                     "connections are open; retry later")

    async def app(scope, receive, send):
        rid = request_id(scope.get("headers"))
        body = json.dumps({**error.body(), "request_id": rid}).encode()
        await send({"type": "http.response.start", "status": error.status,
                    "headers": _head(error, retry_after_s, len(body), rid)})
        await send({"type": "http.response.body", "body": body})

    return app


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a read deadline, a connection cap and upload-skipping shutdown.

    Configured through class attributes (set by `protocol_class`).
    """

    read_timeout_s: float = 10.0
    max_connections: int = 512
    retry_after_s: int = 1
    max_body_bytes: int = 2 * 1024 * 1024

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._line_seen = False  # the current request's first line has arrived
        self._request_done = False  # the current request (headers and body) has fully arrived
        self._body_seen = 0  # body bytes of the current request h11 has handed over
        self._protocol_error: h11.RemoteProtocolError | None = None
        self.conn.next_event = self._next_event  # type: ignore[method-assign]
        if len(self.connections) > self.max_connections:
            self.app = _overloaded_app(self.max_connections, self.retry_after_s)
        self._arm()

    def _next_event(self):
        """h11's ``next_event``, keeping the parse error for the answer and counting the body's bytes."""
        try:
            event = h11.Connection.next_event(self.conn)
        except h11.RemoteProtocolError as exc:
            self._protocol_error = exc
            raise
        if isinstance(event, h11.Request):
            self._body_seen = 0
        elif isinstance(event, h11.Data):
            self._body_seen += len(event.data)
        return event

    def _declared_body(self) -> int:
        """Body bytes handed over plus the rest of the chunk being read (h11's chunked reader state)."""
        reader = getattr(self.conn, "_reader", None)
        return self._body_seen + int(getattr(reader, "_bytes_in_chunk", 0) or 0)

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.read_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def data_received(self, data: bytes) -> None:
        if self._request_done and self.conn.their_state is h11.IDLE:  # first bytes of the next request
            self._request_done, self._line_seen = False, False
            self._arm()
        if not self._line_seen and b"\n" in data:
            self._line_seen = True
        super().data_received(data)
        if self.conn.their_state is h11.SEND_BODY and self._declared_body() > self.max_body_bytes:
            self.logger.info("declared body over ZSNLI_MAX_BODY_BYTES: 413")
            self._abort(ApiError(ErrorType.PAYLOAD_TOO_LARGE, f"body: a chunk declares {self._declared_body()} "
                                 f"bytes in all; the limit is {self.max_body_bytes} (ZSNLI_MAX_BODY_BYTES)", "body"))
            return
        self._check_done()

    def send_400_response(self, msg: str) -> None:
        """What h11 could not parse: the JSON error (`_protocol_error`'s status hint) and a close."""
        exc = self._protocol_error
        status = getattr(exc, "error_status_hint", 400)
        kind = {431: ErrorType.HEADERS_TOO_LARGE, 501: ErrorType.NOT_IMPLEMENTED}.get(status,
                                                                                     ErrorType.MALFORMED_REQUEST)
        reason = " ".join(str(exc).split())[:200] if exc is not None else msg
        self._abort(ApiError(kind, f"malformed HTTP request: {reason}"))

    def _check_done(self) -> None:
        if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED):
            self._request_done = True
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._check_done()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _abort(self, error: ApiError | None) -> None:
        """Answer ``error`` as JSON (when given and no answer was started) and close; a running app sees
        a disconnect."""
        self._disarm()
        if self.transport.is_closing():
            return
        if error is not None and self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE) and (
                self.cycle is None or not self.cycle.response_started):
            # the current request's X-Request-ID once its headers were read, else a new id
            headers = self.cycle.scope["headers"] if self.cycle is not None and self.conn.their_state in (
                h11.SEND_BODY, h11.DONE) else None
            self.transport.write(json_error_bytes(error, self.retry_after_s, request_id(headers)))
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.close()

    def _awaiting_body(self) -> bool:
        """Headers were read and the body is still arriving, no response started."""
        return (self.conn.their_state is h11.SEND_BODY and self.cycle is not None
                and not self.cycle.response_started)

    def _expired(self) -> None:
        self._deadline = None
        if self._request_done or self.transport.is_closing():
            return
        answered = self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE)  # a response was started
        if self._line_seen and not answered:
            self.logger.info("request not received within %.3g s: 408", self.read_timeout_s)
            self._abort(ApiError(ErrorType.REQUEST_TIMEOUT, f"request not received within ZSNLI_READ_TIMEOUT_S="
                                 f"{self.read_timeout_s:g} s (headers and body must arrive within it)"))
        else:
            self._abort(None)

    def shutdown(self) -> None:
        if self._awaiting_body():
            self._abort(ApiError(ErrorType.UNAVAILABLE,
                                 "server shutting down: the request body had not arrived; retry"))
            return
        super().shutdown()  # idle or half-sent headers: closed; a received request: answered, then closed


def protocol_class(read_timeout_s: float, max_connections: int, retry_after_s: int,
                   max_body_bytes: int = 2 * 1024 * 1024) -> type[DeadlineH11Protocol]:
    """A `DeadlineH11Protocol` subclass with these limits, for ``uvicorn.Config(http=...)``.

    read_timeout_s: seconds for the request line, headers and body (``ZSNLI_READ_TIMEOUT_S``);
    max_connections: connections served at once (``ZSNLI_MAX_CONNECTIONS``);
    retry_after_s: ``Retry-After`` of the 503s (``ZSNLI_RETRY_AFTER_S``);
    max_body_bytes: a declared chunk taking the body past it is answered 413 at once (``ZSNLI_MAX_BODY_BYTES``).
    """
    return type("ZsnliH11Protocol", (DeadlineH11Protocol,), {
        "read_timeout_s": float(read_timeout_s), "max_connections": int(max_connections),
        "retry_after_s": int(retry_after_s), "max_body_bytes": int(max_body_bytes),
    })


def json_fallback(app, retry_after_s: int):
    """ASGI wrapper (outermost): an app that raises or returns before starting its answer gets the JSON 500
    ``internal`` with ``Connection: close`` instead of uvicorn's ``text/plain`` one (the app's own
    handlers normally answer first: `zsnli.serving.app.LastResort`)."""
    error = ApiError(ErrorType.INTERNAL, "internal error: the request was not answered")

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        started = False

        async def tracking_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await app(scope, receive, tracking_send)
        except Exception:
            if started:
                raise
            logger.exception("unhandled error outside the app's handlers")
        if not started:
            rid = request_id(scope.get("headers"))
            body = json.dumps({**error.body(), "request_id": rid}).encode()
            await send({"type": "http.response.start", "status": 500,
                        "headers": _head(error, retry_after_s, len(body), rid)})
            await send({"type": "http.response.body", "body": body})

    return wrapped
