"""Idle keep-alive connections never lock new clients out (issue 48): over ``ZSNLI_MAX_CONNECTIONS`` the longest
idle keep-alive connections are closed first, as nginx does; only busy connections hold slots."""

from __future__ import annotations

import socket
import time

import pytest
from http_support import read_response, request_bytes


def _idle_clients(port: int, n: int) -> list[socket.socket]:
    """``n`` keep-alive connections, each answered once (GET /health) and left idle, oldest first."""
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(request_bytes("GET", "/health"))
        assert read_response(sock)[0] == 200
        socks.append(sock)
        time.sleep(0.01)  # a distinct idle-since time each
    return socks


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


@pytest.mark.parametrize("cap, idle", [(4, 4), (4, 9), (6, 7)])
def test_idle_keep_alive_connections_do_not_hold_slots(served, cap, idle):
    with served(max_connections=cap, keep_alive_s=75) as srv:
        socks = _idle_clients(srv.port, idle)
        try:
            for _ in range(3):  # fresh clients, one after another, each served
                with socket.create_connection(("127.0.0.1", srv.port)) as fresh:
                    fresh.sendall(request_bytes("GET", "/health"))
                    status, _, body = read_response(fresh, timeout=10)
                    assert status == 200, body
            # the longest idle went first; the newest idle ones are still open and usable
            newest = socks[-1]
            newest.sendall(request_bytes("GET", "/health"))
            assert read_response(newest, timeout=10)[0] == 200
            assert _closed(socks[0])
        finally:
            for sock in socks:
                sock.close()


def test_busy_connections_still_hold_the_cap(served):
    """Connections with a request under way (here: headers half sent) are not shed: over the cap is 503."""
    with served(max_connections=3, read_timeout_s=30) as srv:
        busy = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(3)]
        try:
            for sock in busy:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n")
            time.sleep(0.3)
            with socket.create_connection(("127.0.0.1", srv.port)) as fresh:
                fresh.sendall(request_bytes("GET", "/health"))
                status, headers, _ = read_response(fresh, timeout=10)
                assert (status, headers["connection"]) == (503, "close")
            for sock in busy:  # the busy ones are served once their request is complete
                sock.sendall(b"\r\n")
                assert read_response(sock, timeout=10)[0] == 200
        finally:
            for sock in busy:
                sock.close()
