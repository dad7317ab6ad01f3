"""The connection layer under the served uvicorn config (`zsnli.serve.uvicorn_config`) in a thread: a 5xx keeps
the connection usable or says Connection: close, Keep-Alive is advertised, every error from any layer is JSON."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from conftest import make_settings
from http_support import ThreadServer, read_response, request_bytes

LABELS = ["sport", "business"]


def _inject_faults(monkeypatch):
    """The test hook: a route fault (RuntimeError) in /classify for the text FAULT and in GET /v1/bakeoffs."""
    from zsnli.compare.service.store import Store
    from zsnli.serving.service import ZeroShotClassifier

    real = ZeroShotClassifier.postprocess

    def postprocess(self, prep, logits, cosine, *rest):
        if prep.text == "FAULT":
            raise RuntimeError("injected fault")
        return real(self, prep, logits, cosine, *rest)

    def latest(self, limit=50):
        raise RuntimeError("injected store fault")

    monkeypatch.setattr(ZeroShotClassifier, "postprocess", postprocess)
    monkeypatch.setattr(Store, "latest", latest)


@pytest.mark.parametrize("fault", [("POST", "/classify", {"text": "FAULT", "labels": LABELS}),
                                   ("GET", "/v1/bakeoffs", None)])
def test_a_500_keeps_the_connection_usable(served, monkeypatch, fault):
    _inject_faults(monkeypatch)
    method, path, body = fault
    with served() as srv, socket.create_connection(("127.0.0.1", srv.port)) as sock:
        sock.sendall(request_bytes(method, path, json.dumps(body).encode() if body else None))
        status, headers, payload = read_response(sock)
        assert status == 500 and headers["content-type"] == "application/json"
        assert json.loads(payload) == {"error": "internal error: RuntimeError", "field": None,
                                       "error_type": "internal", "request_id": headers["x-request-id"]}
        assert headers.get("connection") != "close"
        # the same socket answers the next request
        sock.sendall(request_bytes("POST", "/classify", json.dumps({"text": "the match", "labels": LABELS}).encode()))
        status, headers, payload = read_response(sock)
        assert status == 200 and len(json.loads(payload)["probabilities"]) == 2


def test_a_fault_outside_the_routes_says_connection_close(bert_dir, served, monkeypatch):
    """A middleware that raises (outside LastResort): the 500 is JSON and says Connection: close, then closes."""
    from zsnli.serving import telemetry

    real = telemetry.RequestMetricsMiddleware.__call__

    async def broken(self, scope, receive, send):
        if scope.get("path") == "/health" and scope.get("query_string") == b"boom":
            raise RuntimeError("middleware fault")
        return await real(self, scope, receive, send)

    monkeypatch.setattr(telemetry.RequestMetricsMiddleware, "__call__", broken)

    def extend(app, svc):
        telemetry.metrics_extension(app, svc)

    from zsnli.serving.app import create_app

    settings = make_settings(bert_dir)
    srv = ThreadServer(create_app(settings, extend=extend), settings)
    with srv, socket.create_connection(("127.0.0.1", srv.port)) as sock:
        sock.sendall(request_bytes("GET", "/health?boom"))
        status, headers, payload = read_response(sock)
        assert status == 500 and headers.get("connection") == "close"
        assert json.loads(payload)["error_type"] == "internal"
        sock.settimeout(5)
        assert sock.recv(100) == b""  # closed, as announced


def test_keep_alive_is_advertised_and_outlives_common_client_pools(served):
    from zsnli.config import Settings

    # httpx (and httpcore) retire an idle pooled connection after keepalive_expiry = 5 s; the server's
    # default idle limit is longer, so the client always retires it first (no reset on reuse).
    assert Settings().keep_alive_s > httpx.Limits().keepalive_expiry
    with served(keep_alive_s=7.5) as srv:
        r = httpx.get(f"http://127.0.0.1:{srv.port}/health")
        assert r.headers["keep-alive"] == "timeout=7"
        r = httpx.post(f"http://127.0.0.1:{srv.port}/classify", json={"text": "x", "labels": []})
        assert r.status_code == 422 and r.headers["keep-alive"] == "timeout=7"


@pytest.mark.timeout(240)
def test_a_burst_from_one_pooled_client_loses_nothing(served):
    """The issue's burst shape (400 requests of 30 labels at concurrency 128 from one pooled httpx client),
    on the tiny model: every request answered 200, no transport error."""
    import asyncio

    labels = [f"This text is about topic {i}." for i in range(30)]

    async def burst(port):
        gate = asyncio.Semaphore(128)
        limits = httpx.Limits(max_connections=128, max_keepalive_connections=128)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=120) as client:
            async def one(i):
                async with gate:
                    try:
                        return (await client.post("/classify", json={"text": f"match {i}", "labels": labels})).status_code
                    except httpx.TransportError as exc:
                        return type(exc).__name__

            return await asyncio.gather(*(one(i) for i in range(400)))

    with served() as srv:
        results = asyncio.run(burst(srv.port))
    assert results == [200] * 400, {r: results.count(r) for r in set(results)}


def _chunked(first_chunk: bytes) -> bytes:
    return (b"POST /classify HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + first_chunk)


MALFORMED = {
    "chunk size zz": (_chunked(b"zz\r\n{}\r\n0\r\n\r\n"), 400, "malformed_request"),
    "chunk size -5": (_chunked(b"-5\r\n{}\r\n0\r\n\r\n"), 400, "malformed_request"),
    "chunk size 0x10": (_chunked(b"0x10\r\n" + b"{" * 16 + b"\r\n0\r\n\r\n"), 400, "malformed_request"),
    "chunk size 2^80": (_chunked(b"%x\r\n{}\r\n0\r\n\r\n" % (1 << 80)), 400, "malformed_request"),
    "LF after chunk data": (_chunked(b"2\r\n{}\n0\r\n\r\n"), 400, "malformed_request"),
    # h11 reads LF-only header lines but waits for a chunk line's CRLF: the read deadline's JSON 408
    "LF-only request": (b"POST /classify HTTP/1.1\nHost: t\nTransfer-Encoding: chunked\n\n2\n{}\n0\n\n",
                        408, "request_timeout"),
    "garbage request line": (b"HELLO THERE\r\n\r\n", 400, "malformed_request"),
    "headers over h11's buffer": (b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 70000, 431,
                                  "headers_too_large"),
    # header limits (16 KiB, 100 fields) whether the block arrives in pieces or in one write (h11#182)
    "20 KB of headers in one write": (b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
                                      431, "headers_too_large"),
    "60 KB of headers in one write": (b"GET /health HTTP/1.1\r\nHost: t\r\n" + b"X-A: %s\r\n" % (b"b" * 1000) * 60
                                      + b"\r\n", 431, "headers_too_large"),
    "5000 header fields": (b"GET /health HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(5000))
                           + b"\r\n", 431, "headers_too_large"),
    "101 header fields": (b"GET /health HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(100))
                          + b"\r\n",
                          431, "headers_too_large"),
    "20 KB of trailer fields": (_chunked(b"2\r\n{}\r\n0\r\nX-T: " + b"t" * 20000 + b"\r\n\r\n"), 431,
                                "headers_too_large"),
    "101 trailer fields": (_chunked(b"2\r\n{}\r\n0\r\n" + b"".join(b"T-%d: 1\r\n" % i for i in range(101)) + b"\r\n"),
                           431, "headers_too_large"),
    # RFC 9112 section 6.1: both framings in one request is refused, whichever comes first or its case
    "Content-Length and chunked": (b"POST /classify HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400, "malformed_request"),
    "chunked and content-length": (b"POST /classify HTTP/1.1\r\nHost: t\r\ntransfer-encoding: chunked\r\n"
                                   b"content-length: 0\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400, "malformed_request"),
    "unsupported transfer-encoding": (b"POST /classify HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501,
                                      "not_implemented"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_requests_get_the_json_error_shape(served, case):
    raw, status, error_type = MALFORMED[case]
    with served(read_timeout_s=1.0) as srv, socket.create_connection(("127.0.0.1", srv.port)) as sock:
        sock.sendall(raw)
        got, headers, payload = read_response(sock, timeout=5)
        assert (got, headers["content-type"], headers["connection"]) == (status, "application/json", "close")
        body = json.loads(payload)
        assert body["error_type"] == error_type, body
        assert body["request_id"] == headers["x-request-id"] and len(body["request_id"]) == 32
        if status != 408:
            assert body["error"].startswith("malformed HTTP request: "), body
        assert set(body) >= {"error", "field", "error_type"}


def test_headers_within_the_limits_are_served(served):
    """The limits are not tighter than documented: 15 KB in 99 fields, sent in one write, is a 200."""
    fields = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 140) for i in range(98))
    with served() as srv, socket.create_connection(("127.0.0.1", srv.port)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n" + fields + b"\r\n")
        assert read_response(sock)[0] == 200


@pytest.mark.parametrize("order", ["length first", "chunked first"])
def test_ambiguous_framing_never_serves_the_request_behind_it(served, order):
    """RFC 9112 section 6.1: Content-Length with Transfer-Encoding is answered 400 and the connection closed, so a
    request smuggled behind it (framed by one header for a proxy, by the other here) is never served."""
    framing = [b"Content-Length: 4", b"Transfer-Encoding: chunked"]
    if order == "chunked first":
        framing.reverse()
    smuggled = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
    raw = (b"POST /classify HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" + b"\r\n".join(framing)
           + b"\r\n\r\n0\r\n\r\n" + smuggled)
    with served() as srv, socket.create_connection(("127.0.0.1", srv.port)) as sock:
        sock.sendall(raw)
        status, headers, _ = read_response(sock, timeout=5)
        assert (status, headers["connection"]) == (400, "close")
        sock.settimeout(5)
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
        assert rest == b"", rest  # nothing answered for the request behind it


def test_a_chunk_declared_over_the_body_limit_is_413_at_once(served):
    with served(max_body_bytes=4096, read_timeout_s=10) as srv, \
            socket.create_connection(("127.0.0.1", srv.port)) as sock:
        for first in (b"FFFFFFF\r\n{\"text\": ", b"800\r\n" + b" " * 0x800 + b"\r\n1000\r\n"):
            t0 = time.monotonic()
            sock.sendall(_chunked(first))
            status, headers, payload = read_response(sock, timeout=5)
            assert time.monotonic() - t0 < 2.0  # not the 10 s read deadline
            assert (status, headers["connection"]) == (413, "close")
            body = json.loads(payload)
            assert body["error_type"] == "payload_too_large" and "ZSNLI_MAX_BODY_BYTES" in body["error"]
            sock.close()
            sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.close()
    # a chunked body within the limit is still read
    with served(max_body_bytes=4096) as srv, socket.create_connection(("127.0.0.1", srv.port)) as sock:
        body = json.dumps({"text": "the match", "labels": LABELS}).encode()
        sock.sendall(_chunked(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)))
        status, _, payload = read_response(sock)
        assert status == 200 and len(json.loads(payload)["probabilities"]) == 2


@pytest.mark.parametrize("behaviour", ["raises", "returns"])
def test_json_fallback_answers_what_the_app_did_not(behaviour):
    import asyncio

    from zsnli.serving.http_protocol import json_fallback

    async def app(scope, receive, send):
        if behaviour == "raises":
            raise RuntimeError("outside every handler")

    sent = []

    async def send(message):
        sent.append(message)

    asyncio.run(json_fallback(app, 1)({"type": "http", "method": "GET", "path": "/"}, None, send))
    start, body = sent
    assert start["status"] == 500 and (b"connection", b"close") in start["headers"]
    assert (b"content-type", b"application/json") in start["headers"]
    assert json.loads(body["body"])["error_type"] == "internal"


def test_connection_level_errors_carry_the_requests_id(served):
    with served(read_timeout_s=1.0, max_body_bytes=4096) as srv:
        with socket.create_connection(("127.0.0.1", srv.port)) as sock:  # 413 for a declared chunk
            sock.sendall(_chunked(b"FFFFFF\r\n{").replace(b"Host: test\r\n", b"Host: test\r\nX-Request-ID: chunk-1\r\n"))
            status, headers, payload = read_response(sock, timeout=5)
            assert (status, headers["x-request-id"], json.loads(payload)["request_id"]) == (413, "chunk-1", "chunk-1")
        with socket.create_connection(("127.0.0.1", srv.port)) as sock:  # 408: headers read, body late
            sock.sendall(b"POST /classify HTTP/1.1\r\nHost: t\r\nX-Request-ID: slow-2\r\nContent-Length: 50\r\n\r\n{")
            status, headers, payload = read_response(sock, timeout=5)
            assert (status, headers["x-request-id"], json.loads(payload)["request_id"]) == (408, "slow-2", "slow-2")
