"""The HTTP side of `zsnli.client`: `Sender` (blocking) and `AsyncSender` read a call's whole answer (a
`zsnli.client.protocol.Reply`) within the deadline, resend a `DROPPED` call once, type failures (`connection_failure`).

``timeout`` is one deadline per HTTP call: connecting, sending the body and reading the WHOLE answer together
(httpx's own timeouts bound each network operation, so a server dripping its answer a byte at a time would
never trip them). `Sender` reads in a worker thread and stops waiting at the deadline; every socket operation
of that thread is bounded by the call's deadline too (`_DeadlineBackend`, under httpx's own transport), so at
the deadline the read fails, httpx closes that connection and the thread ends: timed-out calls leave no thread
and no socket behind, however long the server drips. `AsyncSender` cancels the call at the deadline
(``anyio.fail_after``). Each 503 retry is a new HTTP call with its own deadline; the ``Retry-After`` waits
between them are not counted.

A call whose connection was closed under it with no answer (`DROPPED`: the keep-alive close race, where the
server closes an idle pooled connection just as the client reuses it) is sent once more on a new connection,
at once, with a deadline of its own: every route this client calls is a pure function of its request (no state
changes on the server), so sending it twice is safe, as Go's ``net/http`` and urllib3 resend idempotent
requests on a reused connection that closed first.

May import: `zsnli.client.protocol`, `zsnli.harness.cli` (`one_line`; standard library only), httpx (and httpcore and anyio, which httpx runs on), the standard library.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import httpcore  # httpx's own engine (a dependency of httpx): the deadline-bound sockets below
import httpx

from .protocol import ConnectionFailed, DeadlineExceeded, InvalidArgument, Reply
from ..harness.cli import one_line

#: The connection closed under the call with no answer (module docstring); a timeout is never one.
DROPPED = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)

TRANSPORT_ERRORS = (httpx.HTTPError, httpx.InvalidURL, TimeoutError, OSError)  #: other failures: `connection_failure`

_HEADERS = {"content-type": "application/json"}

API_KEY_ENV = "ZSNLI_API_KEY"  #: the server's key; the clients send it unless given one


def auth_headers(api_key: str | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <key>"}`` for ``api_key``, else for ``$ZSNLI_API_KEY`` (surrounding whitespace
    stripped, as the server strips it); ``{}`` when neither is set (or ``api_key`` is ``""``: send none).
    Raises `zsnli.client.protocol.InvalidArgument` for a key that is not a string or cannot be a header value (not
    visible ASCII)."""
    import os

    if api_key is not None and not isinstance(api_key, str):
        raise InvalidArgument(f"api_key must be a string (or None: ${API_KEY_ENV}), got {type(api_key).__name__}")
    key = (os.environ.get(API_KEY_ENV, "") if api_key is None else api_key).strip()
    if not key:
        return {}
    if not all("\x21" <= c <= "\x7e" for c in key):
        where = API_KEY_ENV if api_key is None else "api_key"
        raise InvalidArgument(f"{where}: the key must be visible ASCII without spaces (it is sent as "
                              "'Authorization: Bearer <key>')")
    return {"Authorization": f"Bearer {key}"}


def connection_failure(exc: BaseException, url: str, timeout: float) -> ConnectionFailed:
    """The error a call to ``url`` raises for ``exc``: `DeadlineExceeded` for a timeout (``timeout``: the
    client's deadline, seconds), else `ConnectionFailed` naming the exception on one line."""
    if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
        return DeadlineExceeded(f"server {url} did not answer within {timeout:g} s")
    return ConnectionFailed(f"server {url} cannot be reached "
                            f"({type(exc).__name__}: {one_line(exc) or 'no detail'})")


class _CallDeadline(threading.local):
    """The ``time.monotonic()`` deadline of the call this thread is reading (None: no bound)."""

    at: float | None = None


_DEADLINE = _CallDeadline()


def _bounded(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of this thread's call deadline; raises ``error`` when none is left."""
    at = _DEADLINE.at
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read and write ends by the reading thread's call deadline (a byte-a-
    second drip cannot keep it open); a timeout here makes httpcore close the connection."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _bounded(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with connects and streams bounded by the call deadline (`_DeadlineStream`)."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _DeadlineStream(self._inner.connect_tcp(host, port, _bounded(timeout, httpcore.ConnectTimeout),
                                                       local_address, socket_options))

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _DeadlineStream(self._inner.connect_unix_socket(path, _bounded(timeout, httpcore.ConnectTimeout),
                                                               socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _deadline_transport() -> httpx.BaseTransport:
    """httpx's default transport with its sockets bounded by each call's deadline (`_DeadlineBackend`). On an
    httpx whose transport is laid out otherwise it stays as it is (the caller still stops at the deadline;
    only the reader thread would outlive it)."""
    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.NetworkBackend):
        pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    return transport


class Sender:
    """Blocking HTTP calls to ``url`` (no trailing ``/``), each read whole within ``timeout`` seconds; ``http``:
    the ``httpx.Client`` on ``transport`` (None: httpx's own, its sockets bounded by each call's deadline);
    headers: sent with every call (`auth_headers`)."""

    def __init__(self, url: str, timeout: float, transport: httpx.BaseTransport | None,
                 headers: dict[str, str] | None = None) -> None:
        self.url, self.timeout = url, timeout
        self.http = httpx.Client(base_url=url, timeout=timeout, headers=headers,
                                 transport=transport if transport is not None else _deadline_transport())

    def send(self, method: str, path: str, content: bytes | None) -> Reply:
        """One HTTP call (``content``: the JSON body, or None), sent once more on a new connection when the
        first was `DROPPED`. Raises `DeadlineExceeded` or `ConnectionFailed`."""
        for resend in (False, True):
            try:
                return self._send_once(method, path, content)
            except DROPPED as exc:  # the keep-alive close race: once more, at once
                if resend:
                    raise connection_failure(exc, self.url, self.timeout) from None
        raise AssertionError("unreachable")

    def _send_once(self, method: str, path: str, content: bytes | None) -> Reply:
        """One HTTP call read whole within ``timeout`` seconds by a reader thread (module docstring); raises
        `DeadlineExceeded`, `ConnectionFailed`, or a `DROPPED` error as it came."""
        deadline = time.monotonic() + self.timeout
        box: dict[str, Any] = {}
        done = threading.Event()

        def read() -> None:
            _DEADLINE.at = deadline
            try:
                with self.http.stream(method, path, content=content,
                                      headers=_HEADERS if content is not None else None) as response:
                    chunks = []
                    for chunk in response.iter_bytes():
                        if time.monotonic() > deadline:
                            raise TimeoutError
                        chunks.append(chunk)
                    box["reply"] = Reply(response.status_code, response.headers, b"".join(chunks))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                box["error"] = exc
            finally:
                _DEADLINE.at = None
                done.set()

        threading.Thread(target=read, name="zsnli-client-call", daemon=True).start()
        if not done.wait(max(0.0, deadline - time.monotonic())):
            done.wait(0.5)  # the thread's sockets time out at the deadline too: it closes them and ends
            raise connection_failure(TimeoutError(), self.url, self.timeout)
        if "error" in box:
            exc = box["error"]
            if isinstance(exc, DROPPED):
                raise exc  # `send` sends it once more
            if isinstance(exc, TRANSPORT_ERRORS):
                raise connection_failure(exc, self.url, self.timeout) from None
            raise exc
        return box["reply"]


class AsyncSender:
    """The asyncio twin of `Sender` (``http``: an ``httpx.AsyncClient`` on ``transport``, None for httpx's
    own); each call is cancelled at its deadline (``anyio.fail_after``)."""

    def __init__(self, url: str, timeout: float, transport: httpx.AsyncBaseTransport | None,
                 headers: dict[str, str] | None = None) -> None:
        self.url, self.timeout = url, timeout
        self.http = httpx.AsyncClient(base_url=url, timeout=timeout, transport=transport, headers=headers)

    async def send(self, method: str, path: str, content: bytes | None) -> Reply:
        """See `Sender.send`; the call is cancelled at its deadline."""
        for resend in (False, True):
            try:
                with anyio.fail_after(self.timeout):
                    response = await self.http.request(method, path, content=content,
                                                       headers=_HEADERS if content is not None else None)
                return Reply(response.status_code, response.headers, response.content)
            except DROPPED as exc:  # the keep-alive close race: once more, at once
                if resend:
                    raise connection_failure(exc, self.url, self.timeout) from None
            except TRANSPORT_ERRORS as exc:
                raise connection_failure(exc, self.url, self.timeout) from None
        raise AssertionError("unreachable")
