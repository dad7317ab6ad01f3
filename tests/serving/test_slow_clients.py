"""Slow and stalled clients against a spawned ``python server.py``: read deadline, connection cap, SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import httpx
import pytest
from http_support import read_response
from test_faults import LABELS, _free_port, _server, _wait_ready

HEADERS = (b"POST /classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: 200\r\n\r\n")


def _stall(port: int, kind: str, out: dict) -> None:
    """Open a connection that stalls in the way ``kind`` says; record (seconds to close, bytes received)."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port))
    got = b""
    try:
        first = {"body": HEADERS + b'{"text": "a', "headers": HEADERS[:60], "trickle": HEADERS[:25],
                 "half-line": b"POST /clas", "silent": b""}[kind]
        if first:
            s.sendall(first)
        pending = HEADERS[25:]
        s.settimeout(2.0 if kind == "trickle" else 8.0)
        while time.monotonic() - t0 < 10:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                if kind != "trickle":
                    break
                s.sendall(pending[:1])  # one header byte every 2 s
                pending = pending[1:]
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
    finally:
        out[kind].append((time.monotonic() - t0, got))
        s.close()


@pytest.mark.timeout(120)
def test_stalled_connections_are_closed_at_the_deadline_while_normal_traffic_is_served(bert_dir):
    port = _free_port()
    # warning level: the access lines of this request loop (one per request, with its request id) would fill
    # the 64 KiB pipe that _server's output goes to and nobody reads until the end, and a server whose
    # stderr blocks stops answering
    proc = _server(bert_dir, port, ZSNLI_READ_TIMEOUT_S="1.5", ZSNLI_LOG_LEVEL="warning")
    try:
        url = _wait_ready(proc, port)
        kinds = ["body", "headers", "trickle", "half-line", "silent"]
        out: dict[str, list] = {k: [] for k in kinds}
        threads = [threading.Thread(target=_stall, args=(port, k, out)) for k in kinds for _ in range(4)]
        for t in threads:
            t.start()
        statuses, health_s = [], []
        with httpx.Client(base_url=url, timeout=30) as client:
            t_end = time.monotonic() + 3.0
            while time.monotonic() < t_end:
                t0 = time.monotonic()
                assert client.get("/health").status_code == 200
                health_s.append(time.monotonic() - t0)
                r = client.post("/classify", json={"text": "the team won", "labels": LABELS})
                statuses.append(r.status_code)
        for t in threads:
            t.join(30)
        assert statuses and set(statuses) == {200}, statuses
        assert max(health_s) < 1.0, health_s
        for kind in kinds:
            assert len(out[kind]) == 4, (kind, out[kind])
            for seconds, got in out[kind]:
                assert 1.3 <= seconds <= 5.0, (kind, seconds, got)
                if kind in ("body", "headers", "trickle"):  # a request line arrived: JSON 408, then closed
                    head, _, body = got.partition(b"\r\n\r\n")
                    assert head.startswith(b"HTTP/1.1 408"), (kind, got)
                    assert b"connection: close" in head.lower()
                    err = json.loads(body)
                    assert err["error_type"] == "request_timeout" and "ZSNLI_READ_TIMEOUT_S" in err["error"]
                else:  # nothing asked: closed without an answer
                    assert got == b"", (kind, got)
        # the server is still healthy and serving
        assert httpx.post(f"{url}/classify", json={"text": "x", "labels": LABELS}, timeout=30).status_code == 200
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.timeout(120)
def test_connection_cap_answers_503_and_sigterm_does_not_wait_for_an_upload(bert_dir):
    port = _free_port()
    proc = _server(bert_dir, port, ZSNLI_READ_TIMEOUT_S="120", ZSNLI_MAX_CONNECTIONS="4",
                   ZSNLI_DRAIN_TIMEOUT_S="60", ZSNLI_RETRY_AFTER_S="2")
    try:
        url = _wait_ready(proc, port)
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        time.sleep(0.3)
        r = httpx.post(f"{url}/classify", json={"text": "x", "labels": LABELS}, timeout=30)
        assert r.status_code == 503 and r.headers["retry-after"] == "2", r.text
        assert r.json()["error_type"] == "overloaded" and "ZSNLI_MAX_CONNECTIONS" in r.json()["error"]
        for s in idle:
            s.close()
        time.sleep(0.3)
        assert httpx.post(f"{url}/classify", json={"text": "x", "labels": LABELS}, timeout=30).status_code == 200

        upload = socket.create_connection(("127.0.0.1", port))
        upload.sendall(HEADERS + b'{"text": "a')
        trickle = socket.create_connection(("127.0.0.1", port))
        trickle.sendall(HEADERS[:30])
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        upload.settimeout(10)
        got = b""
        while chunk := upload.recv(65536):
            got += chunk
        answered_s = time.monotonic() - t0
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 2" in head.lower(), got
        assert json.loads(body)["error_type"] == "unavailable"
        assert answered_s < 5.0, answered_s  # at the signal, not at the 60 s drain or the 120 s read deadline
        assert proc.wait(30) == 0
        # the exit (interpreter teardown included, slow on a loaded machine) is not held by the upload
        assert time.monotonic() - t0 < 30.0
        trickle.settimeout(5)
        assert trickle.recv(65536) == b""
        upload.close()
        trickle.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _request(path: str, rid: str, body: bytes | None = None) -> bytes:
    head = f"{'POST' if body is not None else 'GET'} {path} HTTP/1.1\r\nHost: x\r\nX-Request-ID: {rid}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + (body or b"")


def _answer(sock: socket.socket) -> tuple[bytes, dict]:
    """Everything the server sends until it closes: (head, JSON body)."""
    sock.settimeout(10)
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    return head, json.loads(body)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("after_s", [0.2, 1.5])
def test_after_sigterm_a_kept_connection_gets_503_and_the_log_says_what_went_on_the_wire(bert_dir, after_s):
    port = _free_port()
    proc = _server(bert_dir, port, ZSNLI_READ_TIMEOUT_S="5", ZSNLI_DRAIN_TIMEOUT_S="20", ZSNLI_RETRY_AFTER_S="2")
    try:
        _wait_ready(proc, port)
        kept = []
        for i in range(2):  # pooled keep-alive connections, answered once, now idle
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(_request("/health", f"warm-{i}"))
            assert read_response(sock, timeout=10)[0] == 200
            kept.append(sock)
        upload = socket.create_connection(("127.0.0.1", port))
        upload.sendall(HEADERS.replace(b"Host: x\r\n", b"Host: x\r\nX-Request-ID: cut-1\r\n") + b'{"text": "a')
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        head, body = _answer(upload)
        assert head.startswith(b"HTTP/1.1 503") and body["error_type"] == "unavailable"
        time.sleep(after_s)
        kept[0].sendall(_request("/classify", "late-1", json.dumps({"text": "x", "labels": LABELS}).encode()))
        head, body = _answer(kept[0])  # answered, then closed
        assert head.startswith(b"HTTP/1.1 503") and b"connection: close" in head.lower(), head
        assert (body["error_type"], body["request_id"]) == ("unavailable", "late-1") and b"retry-after: 2" in head.lower()
        kept[1].sendall(_request("/health", "late-2"))
        head, body = _answer(kept[1])
        assert head.startswith(b"HTTP/1.1 503") and body["status"] == "draining"
        assert proc.wait(30) == 0
        log = proc.stdout.read()
        lines = {rid: [ln for ln in log.splitlines() if f"request_id={rid}" in ln] for rid in ("cut-1", "late-1")}
        assert len(lines["cut-1"]) == 1 and '" 503 ' in lines["cut-1"][0], lines  # what the client got, not 400
        assert len(lines["late-1"]) == 1 and '" 503 ' in lines["late-1"][0], lines
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
