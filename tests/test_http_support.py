"""The tests' own raw-HTTP reader (`http_support.read_response`): two answers in one packet are two answers."""

from __future__ import annotations

import socket

from http_support import read_response


def _answer(body: bytes, status: str = "200 OK") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def test_pipelined_answers_in_one_packet_are_each_read():
    """It returned the first and dropped the bytes after it, so a pipelining test's second read hung or failed."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(_answer(b'{"a": 1}') + _answer(b"", "408 Request Timeout") + _answer(b"xyz")[:20])
        assert read_response(ours, timeout=5) == (200, {"content-length": "8"}, b'{"a": 1}')
        assert read_response(ours, timeout=5) == (408, {"content-length": "0"}, b"")
        theirs.sendall(_answer(b"xyz")[20:])  # the third arrives split across packets
        assert read_response(ours, timeout=5) == (200, {"content-length": "3"}, b"xyz")
