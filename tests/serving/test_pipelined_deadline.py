"""The read deadline (``ZSNLI_READ_TIMEOUT_S``, `zsnli.serving.http_protocol`) holds for every way a request's bytes
start arriving: on a fresh connection, on a keep-alive connection after the answer, and pipelined (sent before the
previous answer went out, in the same write as the previous request or in a later one while it is answered), with
the headers or the body partial: a JSON 408, then the connection closes and no longer holds a slot of
``ZSNLI_MAX_CONNECTIONS``. The time the server spends answering is not the client's: a pipelined request behind a
slow answer is served. A tiny ASGI app under the served uvicorn config (`http_support.ThreadServer`) stands in for
the classifier, except in the test of the reported ``/classify`` case."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
from conftest import make_settings
from http_support import ThreadServer, request_bytes

FIRST = request_bytes("POST", "/echo", b'{"n": 1}', {"X-Request-ID": "first"})
SECOND = request_bytes("POST", "/echo", b'{"text": "x", "labels": ["a", "b"]}', {"X-Request-ID": "second"})
PARTIAL = {"headers": SECOND[:SECOND.index(b"X-Request-ID")],  # request line and Host, the rest never sent
           "body": SECOND[:SECOND.index(b"\r\n\r\n") + 5]}  # headers and the body's first byte


class TinyApp:
    """ASGI app: ``/health`` and ``/echo`` answer at once (``{"path", "bytes"}``: the body's length, and the request's
    ``X-Request-ID`` echoed); ``/hold`` sets ``started`` and answers once ``release`` is set; ``/slow`` answers after
    ``slow_s`` seconds."""

    def __init__(self, slow_s: float = 0.0) -> None:
        self.started, self.release, self.slow_s = threading.Event(), threading.Event(), slow_s

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            return await send({"type": "lifespan.shutdown.complete"})
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        if scope["path"] == "/hold":
            self.started.set()
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        elif scope["path"] == "/slow":
            await asyncio.sleep(self.slow_s)
        out = json.dumps({"path": scope["path"], "bytes": len(body)}).encode()
        rid = dict(scope["headers"]).get(b"x-request-id", b"-")
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode()),
                                (b"x-request-id", rid)]})
        await send({"type": "http.response.body", "body": out})


class Wire:
    """HTTP/1.1 answers read off one socket in order; bytes read past an answer are kept for the next (two answers
    to pipelined requests may come in one ``recv``, which `http_support.read_response` would drop)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.file = sock, sock.makefile("rb")

    def response(self, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
        """The next answer: ``(status, lower-case headers, body)``; ``ConnectionError`` when the server closed first."""
        self.sock.settimeout(timeout)
        line = self.file.readline()
        if not line:
            raise ConnectionError("closed before an answer")
        headers = {}
        while (field := self.file.readline()) not in (b"\r\n", b""):
            name, _, value = field.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(line.split()[1]), headers, self.file.read(int(headers.get("content-length", "0")))

    def closed(self) -> bool:
        """The server closed the connection with nothing more sent (within a generous 5 s)."""
        self.sock.settimeout(5)
        try:
            return self.file.read(1) == b""
        except ConnectionResetError:
            return True


def _send_second(sock: socket.socket, wire: Wire, app: TinyApp, way: str, second: bytes) -> None:
    """Send ``FIRST`` (to ``/hold`` when ``way`` is ``later``) and ``second`` the ``way`` named, reading the first
    answer (a 200: nothing is cut while the server answers it) unless ``way`` is ``fresh`` (no first request)."""
    if way == "fresh":
        sock.sendall(second)
        return
    if way == "same read":
        sock.sendall(FIRST + second)
    elif way == "keep-alive":
        sock.sendall(FIRST)
        assert wire.response()[0] == 200
        sock.sendall(second)
        return
    else:  # "later": the second request's bytes arrive while the first is being answered
        sock.sendall(FIRST.replace(b"/echo", b"/hold"))
        assert app.started.wait(10)
        sock.sendall(second)
        time.sleep(0.6)  # longer than the read deadline: the first answer's time is not the second's
        app.release.set()
    status, headers, payload = wire.response()
    assert (status, headers["x-request-id"]) == (200, "first"), payload


@pytest.mark.parametrize("part", ["headers", "body"])
@pytest.mark.parametrize("way", ["fresh", "keep-alive", "same read", "later"])
def test_a_partial_request_gets_408_and_is_closed_however_its_bytes_arrived(tmp_path, way, part):
    """Pipelined ones (``same read``, ``later``) got no 408 and were never closed; a keep-alive timeout shorter than
    the read deadline closed a pipelined half header silently instead of the 408 (``fresh`` and ``keep-alive``
    held before, and stay)."""
    app = TinyApp()
    keep_alive_s = 0.1 if way in ("same read", "later") else 75  # idle timer armed at the first answer
    settings = make_settings(tmp_path, read_timeout_s=0.4, keep_alive_s=keep_alive_s)
    with ThreadServer(app, settings) as srv, socket.create_connection(("127.0.0.1", srv.port)) as sock:
        wire = Wire(sock)
        _send_second(sock, wire, app, way, PARTIAL[part])
        status, headers, payload = wire.response(timeout=5)
        body = json.loads(payload)
        assert (status, headers["connection"], body["error_type"]) == (408, "close", "request_timeout"), body
        assert "ZSNLI_READ_TIMEOUT_S=0.4" in body["error"]
        # the id is the partial request's own: its header when its headers arrived, else a new one, never the first's
        assert body["request_id"] == headers["x-request-id"]
        assert (body["request_id"] == "second") if part == "body" else len(body["request_id"]) == 32
        assert wire.closed()


@pytest.mark.parametrize("way", ["same read", "later"])
@pytest.mark.parametrize("rest", ["none", "after the answer"])
def test_a_pipelined_request_behind_a_slow_answer_is_not_cut(tmp_path, way, rest):
    """The first answer takes 3 s, longer than the 2 s read deadline: the pipelined request behind it, complete or
    completed right after that answer, is served (its deadline runs from the answer, not from its first byte)."""
    app = TinyApp(slow_s=3.0)
    second = SECOND if rest == "none" else PARTIAL["body"]
    with ThreadServer(app, make_settings(tmp_path, read_timeout_s=2.0)) as srv, \
            socket.create_connection(("127.0.0.1", srv.port)) as sock:
        wire = Wire(sock)
        slow = FIRST.replace(b"/echo", b"/slow")
        if way == "same read":
            sock.sendall(slow + second)
        else:
            sock.sendall(slow)
            time.sleep(0.5)
            sock.sendall(second)
        status, headers, _ = wire.response(timeout=30)
        assert (status, headers["x-request-id"]) == (200, "first")
        if rest != "none":
            sock.sendall(SECOND[len(second):])
        status, headers, payload = wire.response(timeout=30)
        assert (status, headers["x-request-id"]) == (200, "second"), payload
        assert json.loads(payload)["bytes"] == len(SECOND) - SECOND.index(b"\r\n\r\n") - 4
        assert headers.get("connection") != "close"


def test_the_reported_pipelined_classify_is_408_and_frees_its_slot(served):
    """The report: ``/classify`` answered, then a pipelined request with 1 of its 100 body bytes, in one write; four
    such connections under ZSNLI_MAX_CONNECTIONS=4 made every new client get 503 ``overloaded`` for good."""
    raw = (b'POST /classify HTTP/1.1\r\nHost: a\r\nContent-Length: 34\r\n\r\n{"text": "x", "labels": ["a","b"]}'
           b'POST /classify HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{')
    with served(read_timeout_s=0.5, max_connections=4) as srv:
        stalled = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(4)]
        try:
            for sock in stalled:
                sock.sendall(raw)
            for sock in stalled:
                wire = Wire(sock)
                assert wire.response(timeout=30)[0] == 200
                status, headers, payload = wire.response()
                assert (status, headers["connection"]) == (408, "close"), payload
                assert json.loads(payload)["error_type"] == "request_timeout"
                assert wire.closed()
            with socket.create_connection(("127.0.0.1", srv.port)) as fresh:
                fresh.sendall(request_bytes("GET", "/health"))
                assert Wire(fresh).response()[0] == 200
        finally:
            for sock in stalled:
                sock.close()
