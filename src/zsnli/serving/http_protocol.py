"""Connection-level limits for uvicorn: a read deadline, a connection cap, shutdown that skips uploads.

`protocol_class` builds a subclass of uvicorn's h11 protocol (``uvicorn.Config(http=...)``):

* **Read deadline** (``read_timeout_s``): the request line, the headers and the
  whole body must arrive within it. It runs whenever the server is reading a request the client has not
  finished sending, and only then (`_reading_request`): from the connection opening for the first request;
  from the first byte of the next one on a keep-alive connection; and for a pipelined request (bytes sent
  before the previous answer went out, in the same read as the previous request or a later one) from the
  moment the previous answer is complete, when the server turns to it. The time the server spends
  answering is never the client's: a complete pipelined request behind a slow answer is served however
  long that answer took. Past the deadline the server answers a JSON ``408`` ``request_timeout`` with
  ``Connection: close`` when at least the request line had arrived (headers or body partial), and
  otherwise just closes (nothing was asked). A connection whose response was
  already sent (e.g. an early 413) but whose body keeps trickling is closed.
  Idle keep-alive connections (nothing of a next request received) are uvicorn's ``timeout_keep_alive``.
  Source of the pipelining rule (uvicorn 0.55.0 ``H11Protocol`` over h11 0.16.0): once a request has fully
  arrived, h11's ``next_event`` answers ``PAUSED`` while bytes of the next one sit in its receive buffer
  (``Connection.trailing_data``) and uvicorn then pauses reading; only ``on_response_complete`` calls
  ``start_next_cycle`` and parses them. So no read marks the start of such a request (its bytes came while
  the previous one was DONE, with reading paused after them): the deadline is set from h11's state after
  every read and after every answer (`_follow`), and h11's cycle restart (`_next_cycle`) ends the previous
  request's deadline. A partial next request is kept unparsed in ``trailing_data``, so the connection is busy,
  not idle (`_is_idle`), and the 408 closes it.
* **Connection cap** (``max_connections``): an idle keep-alive connection (one that was answered and
  has sent nothing of its next request) does not hold a slot against a new client: when a connection
  opens, or a request arrives, with more than ``max_connections`` open, idle keep-alive connections
  are closed first, the longest idle first (nginx's ``ngx_drain_connections`` does the same with its
  reusable connections); only when every connection is busy does a request beyond the cap get a JSON
  ``503`` ``overloaded`` with ``Retry-After`` and ``Connection: close``. Each busy connection lives at
  most the read deadline before its request is complete, so stalled sockets cannot pile up.
* **Header limits**: the request line and headers together at most `MAX_HEADER_BYTES` (h11's own
  buffer size) in at most `MAX_HEADER_FIELDS` fields, checked on the parsed request, so the limit holds
  however the bytes arrive (h11 alone checks only a header block still incomplete: python-hyper/h11#182):
  over either, 431 ``headers_too_large``; a chunked body's trailer fields have the same limits.
* **Ambiguous framing**: a request with both ``Content-Length`` and ``Transfer-Encoding`` is answered
  400 ``malformed_request`` and the connection closed (RFC 9112 section 6.1: such a message may be a
  request-smuggling attempt; a server may reject it and must close the connection after it).
* **Malformed requests**: what h11 cannot parse (a bad request line or header, an
  illegal chunk size such as ``zz``, ``-5``, ``0x10`` or 21 hex digits, a chunk
  without its CRLF, headers over h11's buffer) is answered in the JSON shape
  (400 ``malformed_request``, 431 ``headers_too_large``, 501 ``not_implemented``
  for an unsupported ``Transfer-Encoding``) with ``Connection: close``, not
  uvicorn's ``text/plain`` 400. The message says what h11 could not read and never repeats the request's
  bytes (`unechoed`: a header line is named by its field, a key with a NUL byte is not echoed).
* **Declared size**: a chunk whose declared size takes the body past
  ``max_body_bytes`` (``ZSNLI_MAX_BODY_BYTES``) is answered 413
  ``payload_too_large`` at once, with ``Connection: close``, instead of waiting
  for bytes that would be refused anyway (a ``Content-Length`` over the limit is
  refused by the app's body reader as soon as the route reads the body).
* **Shutdown**: at SIGTERM a request whose body is still arriving is not
  admitted work: it gets a JSON ``503`` ``unavailable`` (``Retry-After``) and
  its connection is closed at once, so the exit waits only for requests
  already received (uvicorn's graceful drain); half-sent headers are closed.
  An idle keep-alive connection stays open for the read deadline (at most the drain timeout): a request
  on it is served by the draining app (503 ``unavailable``, ``/health`` 503 ``draining``) with
  ``Connection: close``, instead of meeting a connection closed under it.
* **Status on the wire**: when this layer answers a request the app is already serving (a 413, a 408,
  a 503 at SIGTERM), it puts that status in the request's scope (`WIRE_STATUS`), so the access log and
  the request metrics record what the client got, not the answer the app wrote afterwards and uvicorn
  dropped.

The h11 implementation (always installed with uvicorn) is used, not httptools,
because the subclass relies on h11's connection states. Its answers come from
the one error table (`zsnli.errors`), in the same JSON shape as the app's.
Every answer here carries a request id (``X-Request-ID`` and ``request_id``: `zsnli.serving.request_ids`).
May import: uvicorn, h11, `zsnli.errors` and `zsnli.serving.request_ids`.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import re
from http import HTTPStatus

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..errors import ApiError, ErrorType, shaped_for
from .request_ids import WIRE_STATUS, request_id

logger = logging.getLogger("zsnli")

#: Most bytes of a request line and its headers (with their CRLFs): h11's ``DEFAULT_MAX_INCOMPLETE_EVENT_SIZE``,
#: the buffer uvicorn gives h11 (16 KiB, as Node.js's ``--max-http-header-size``).
MAX_HEADER_BYTES = 16 * 1024
#: Most header fields in one request: Apache httpd's ``LimitRequestFields`` default.
MAX_HEADER_FIELDS = 100


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
    return _error_app(ApiError(ErrorType.OVERLOADED, f"overloaded: more than ZSNLI_MAX_CONNECTIONS={max_connections} "
                               "connections are busy; retry later"), retry_after_s)


def _closing_app(app):
    """ASGI wrapper: ``app``'s answer with ``Connection: close`` (uvicorn then closes after it)."""

    async def wrapped(scope, receive, send):
        async def closing_send(message):
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": headers + [(b"connection", b"close")]}
            await send(message)

        await app(scope, receive, closing_send)

    return wrapped


def _error_app(error: ApiError, retry_after_s: int):
    """ASGI app answering every request ``error`` as JSON with ``Connection: close``."""

    async def app(scope, receive, send):
        rid = request_id(scope.get("headers"))
        body = json.dumps({**shaped_for(scope.get("path"), error.body()), "request_id": rid}).encode()
        await send({"type": "http.response.start", "status": error.status,
                    "headers": _head(error, retry_after_s, len(body), rid)})
        await send({"type": "http.response.body", "body": body})

    return app


_QUOTED_BYTES = re.compile(r""":?\s*(?P<wrap>bytearray\()?(?<!\w)(?P<raw>b(?P<q>['"])(?:\\.|(?!(?P=q)).)*(?P=q))"""
                           r"""(?(wrap)\))""")


def unechoed(message: str) -> str:
    """h11's parse error ``message`` on one line with no byte of the request in it: h11 quotes the offending
    header line, header value or request line (``illegal header line: b'Authorization: Bearer ...\\x00'``, or
    in ``bytearray(b'...')``), which may hold a key (a header, or a query's ``api_key=``). A header line is named
    by its field name only (``illegal header line (field 'authorization'; its value is not repeated)``); any
    other quoted bytes are left out."""
    def name_only(match: re.Match) -> str:
        try:
            raw = ast.literal_eval(match.group("raw"))
        except (ValueError, SyntaxError):
            raw = b""
        field = raw.partition(b":")[0].strip().lower() if isinstance(raw, bytes) and b":" in raw else b""
        if field and re.fullmatch(rb"[!#$%&'*+.^_`|~0-9a-z-]{1,64}", field):
            return f" (field {field.decode()!r}; its value is not repeated)"
        return " (not repeated)"

    text = " ".join(message.split())
    return _QUOTED_BYTES.sub(name_only, text)


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a read deadline, a connection cap and upload-skipping shutdown.

    Configured through class attributes (set by `protocol_class`).
    """

    read_timeout_s: float = 10.0
    max_connections: int = 512
    retry_after_s: int = 1
    max_body_bytes: int = 2 * 1024 * 1024
    shutdown_linger_s: float = 10.0  # an idle keep-alive connection stays open this long after SIGTERM

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._body_seen = 0  # body bytes of the current request h11 has handed over
        self._protocol_error: h11.RemoteProtocolError | None = None
        self._error_headers: list | None = None  # the headers of a request refused while parsing
        self._served_app = self.app
        self._answered = 0  # responses completed on this connection
        self._idle_since = self.loop.time()
        self._closing_idle: asyncio.TimerHandle | None = None
        self.conn.next_event = self._next_event  # type: ignore[method-assign]
        self._h11_next_cycle = self.conn.start_next_cycle
        self.conn.start_next_cycle = self._next_cycle  # type: ignore[method-assign]
        self._over_cap = not self._shed_idle()  # checked again when its request arrives
        self._arm()

    def _is_idle(self) -> bool:
        """A keep-alive connection that was answered and has sent nothing of its next request."""
        return (self._answered > 0 and not self.transport.is_closing()
                and self.conn.our_state is h11.IDLE and self.conn.their_state is h11.IDLE
                and (self.cycle is None or self.cycle.response_complete) and not self.conn.trailing_data[0])

    def _shed_idle(self) -> bool:
        """Close idle keep-alive connections, the longest idle first, until at most ``max_connections`` are
        open; False when every other connection is busy and this one is still over the cap."""
        if len(self.connections) <= self.max_connections:
            return True
        idle = sorted((c for c in self.connections if c is not self and isinstance(c, DeadlineH11Protocol)
                       and c._is_idle()), key=lambda c: c._idle_since)
        for conn in idle[:len(self.connections) - self.max_connections]:
            conn.timeout_keep_alive_handler()  # uvicorn's close of an idle keep-alive connection
            self.connections.discard(conn)  # connection_lost runs later; the slot is free now
        return len(self.connections) <= self.max_connections

    def _next_event(self):
        """h11's ``next_event``, keeping the parse error for the answer, counting the body's bytes, and
        checking each request's header limits, framing and the connection cap."""
        if self.conn.their_state is h11.IDLE:  # reading a new request's head: no headers of it yet
            self._error_headers = None
        try:
            event = h11.Connection.next_event(self.conn)
            if isinstance(event, h11.Request):
                self._error_headers = event.headers
                self._check_head(event)
            elif isinstance(event, h11.EndOfMessage) and event.headers:  # a chunked body's trailer fields
                self._check_sizes(event.headers, 0, "trailer")
        except h11.RemoteProtocolError as exc:
            self._protocol_error = exc
            raise
        if isinstance(event, h11.Request):
            self._body_seen = 0
            if self._over_cap and self._closing_idle is None:  # idle ones may have gone since it opened
                self._over_cap = not self._shed_idle()
                self.app = _overloaded_app(self.max_connections, self.retry_after_s) if self._over_cap \
                    else self._served_app
        elif isinstance(event, h11.Data):
            self._body_seen += len(event.data)
        return event

    @staticmethod
    def _check_head(event: h11.Request) -> None:
        """Raise ``h11.RemoteProtocolError`` (with the status to answer) for headers over `MAX_HEADER_BYTES` or
        `MAX_HEADER_FIELDS`, and for ``Content-Length`` together with ``Transfer-Encoding``."""
        headers = event.headers
        DeadlineH11Protocol._check_sizes(headers, len(event.method) + len(event.target) + len(b"  HTTP/1.1\r\n"),
                                         "header")
        names = {name for name, _ in headers}
        if b"content-length" in names and b"transfer-encoding" in names:
            raise h11.RemoteProtocolError("both Content-Length and Transfer-Encoding: the framing is ambiguous "
                                          "(RFC 9112 section 6.1); send one", error_status_hint=400)

    @staticmethod
    def _check_sizes(fields, line: int, what: str) -> None:
        """Raise ``h11.RemoteProtocolError`` (431) when ``fields`` (with a request line of ``line`` bytes) are over
        `MAX_HEADER_BYTES` or `MAX_HEADER_FIELDS`; the trailer fields of a chunked body have the same limits."""
        size = line + 2 + sum(len(name) + len(value) + 4 for name, value in fields)  # "name: value\r\n", end CRLF
        if size > MAX_HEADER_BYTES or len(fields) > MAX_HEADER_FIELDS:
            raise h11.RemoteProtocolError(
                f"request {what}s: {len(fields)} fields, at least {size} bytes; the limits are {MAX_HEADER_FIELDS} "
                f"fields and {MAX_HEADER_BYTES} bytes", error_status_hint=431)

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

    def _next_cycle(self) -> None:
        """h11's ``start_next_cycle`` (both sides DONE: the previous request arrived and was answered): its
        deadline is over; `_follow` starts the next request's when bytes of it are already buffered."""
        self._h11_next_cycle()
        self._disarm()

    def _reading_request(self) -> bool:
        """The server is reading a request the client has not finished sending: a body still arriving, or at the
        start of a cycle, the first request of the connection or buffered bytes of the next one (h11 keeps a
        partial request line and headers unparsed in ``trailing_data``). False once the request has fully
        arrived (h11 DONE), which covers a pipelined request's bytes buffered while the previous one is served."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            return True
        return state is h11.IDLE and (self._answered == 0 or bool(self.conn.trailing_data[0]))

    def _follow(self) -> None:
        """After each read and each answer: run the read deadline while `_reading_request`, stop it otherwise.
        A request being read is not an idle keep-alive connection, so uvicorn's keep-alive timer (armed at each
        answer, even with the next request's head buffered) is stopped."""
        if self.transport.is_closing():
            return
        if self._reading_request():
            self._unset_keepalive_if_required()
            self._arm()
        else:
            self._disarm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.SEND_BODY and self._declared_body() > self.max_body_bytes:
            self.logger.info("declared body over ZSNLI_MAX_BODY_BYTES: 413")
            self._abort(ApiError(ErrorType.PAYLOAD_TOO_LARGE, f"body: a chunk declares {self._declared_body()} "
                                 f"bytes in all; the limit is {self.max_body_bytes} (ZSNLI_MAX_BODY_BYTES)", "body"))
            return
        self._follow()

    def send_400_response(self, msg: str) -> None:
        """What h11 could not parse: the JSON error (`_protocol_error`'s status hint) and a close."""
        exc = self._protocol_error
        status = getattr(exc, "error_status_hint", 400)
        kind = {431: ErrorType.HEADERS_TOO_LARGE, 501: ErrorType.NOT_IMPLEMENTED}.get(status,
                                                                                     ErrorType.MALFORMED_REQUEST)
        reason = unechoed(str(exc))[:200] if exc is not None else msg
        self._abort(ApiError(kind, f"malformed HTTP request: {reason}"))

    def on_response_complete(self) -> None:
        self._answered += 1
        self._idle_since = self.loop.time()
        super().on_response_complete()  # starts the next cycle and parses what of it is buffered
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._closing_idle is not None:
            self._closing_idle.cancel()
        super().connection_lost(exc)

    def _abort(self, error: ApiError | None) -> None:
        """Answer ``error`` as JSON (when given and no answer was started) and close; a running app sees
        a disconnect."""
        self._disarm()
        if self.transport.is_closing():
            return
        current = self.cycle is not None and not self.cycle.response_complete  # None/complete: an earlier request's
        if error is not None and self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE) and (
                not current or not self.cycle.response_started):
            # the current request's X-Request-ID once its headers were read, else a new id
            serving = current and self.conn.their_state in (h11.SEND_BODY, h11.DONE)
            headers = self.cycle.scope["headers"] if serving else self._error_headers
            self.transport.write(json_error_bytes(error, self.retry_after_s, request_id(headers)))
            if serving:  # the app, still serving this request, answers into the void: log what the client got
                self.cycle.scope[WIRE_STATUS] = error.status
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
        if self.transport.is_closing() or not self._reading_request():
            return
        answered = self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE)  # a response was started
        line_seen = self.conn.their_state is not h11.IDLE or b"\n" in self.conn.trailing_data[0]
        if line_seen and not answered:
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
        if self._is_idle() and self.read_timeout_s > 0:
            # a pooled client may send on it any moment: answer 503 for a while rather than close under it
            self.app = _closing_app(self._served_app)  # the draining app answers it 503, then the connection closes
            self._closing_idle = self.loop.call_later(self.shutdown_linger_s, self._close_lingering)
            return
        super().shutdown()  # half-sent headers: closed; a received request: answered, then closed

    def _close_lingering(self) -> None:
        """End of the shutdown linger: close unless a request is being answered (then it closes after it)."""
        if self.cycle is None or self.cycle.response_complete:
            super().shutdown()


def protocol_class(read_timeout_s: float, max_connections: int, retry_after_s: int,
                   max_body_bytes: int = 2 * 1024 * 1024, drain_timeout_s: float = 0) -> type[DeadlineH11Protocol]:
    """A `DeadlineH11Protocol` subclass with these limits, for ``uvicorn.Config(http=...)``.

    read_timeout_s: seconds for the request line, headers and body (``ZSNLI_READ_TIMEOUT_S``), and how long an
    idle keep-alive connection stays open after SIGTERM (at most ``drain_timeout_s`` when that is not 0);
    max_connections: busy connections served at once (``ZSNLI_MAX_CONNECTIONS``; idle keep-alive ones are shed);
    retry_after_s: ``Retry-After`` of the 503s (``ZSNLI_RETRY_AFTER_S``);
    max_body_bytes: a declared chunk taking the body past it is answered 413 at once (``ZSNLI_MAX_BODY_BYTES``);
    drain_timeout_s: ``ZSNLI_DRAIN_TIMEOUT_S`` (0: no limit).
    """
    linger = min(read_timeout_s, drain_timeout_s) if drain_timeout_s > 0 else read_timeout_s
    return type("ZsnliH11Protocol", (DeadlineH11Protocol,), {
        "read_timeout_s": float(read_timeout_s), "max_connections": int(max_connections),
        "retry_after_s": int(retry_after_s), "max_body_bytes": int(max_body_bytes),
        "shutdown_linger_s": float(linger),
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
            body = json.dumps({**shaped_for(scope.get("path"), error.body()), "request_id": rid}).encode()
            await send({"type": "http.response.start", "status": 500,
                        "headers": _head(error, retry_after_s, len(body), rid)})
            await send({"type": "http.response.body", "body": body})

    return wrapped
