"""The keep-alive close race (issue 31 item 9): a pooled connection closed by the server just as the client
reuses it ends the call with no answer (``httpx.ReadError`` on a reset, ``RemoteProtocolError`` on a
close); `zsnli.client` sends such a call once more on a new connection, so every call gets an answer.

The race is reproduced with a raw-socket HTTP/1.1 server in a thread (loopback only, no network): every
connection answers its first request with keep-alive and then, like a server whose idle timer fired
just as the next request arrived, reads the next request and closes without answering (a FIN, or a
reset with SO_LINGER 0: what a close with unread bytes sends).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading

import pytest

from zsnli.client import AsyncClient, Client, ConnectionFailed


def _read_request(conn: socket.socket) -> bytes | None:
    """One request (headers and Content-Length body), or None when the peer closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    return body


class RacingServer:
    """Answers each connection's first request, then drops the connection under the next one."""

    def __init__(self, how: str, always_drop: bool = False) -> None:
        self.how, self.always_drop = how, always_drop
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.answered = self.dropped = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            first = True
            while True:
                body = _read_request(conn)
                if body is None:
                    return
                if self.always_drop or not first:
                    self.dropped += 1
                    if self.how == "reset":
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return  # closed with no answer
                first = False
                labels = json.loads(body)["labels"]
                out = json.dumps({"id": None, "probabilities": [1 / len(labels)] * len(labels)}).encode()
                self.answered += 1  # counted before the client can read it, so a finished client sees the count
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(out), out))

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("how", ["fin", "reset"])
def test_a_call_on_a_connection_dropped_under_it_is_sent_again_and_answered(how):
    server = RacingServer(how)
    try:
        with Client(server.url, retries=0) as zs:
            answers = [zs.classify(f"text {i}", ["a", "b"]) for i in range(4)]
        assert [a.probabilities for a in answers] == [[0.5, 0.5]] * 4  # every call answered
        assert (server.answered, server.dropped) == (4, 3)  # calls 2-4 each reused a connection that was dropped
    finally:
        server.close()


@pytest.mark.parametrize("how", ["fin", "reset"])
def test_the_async_client_sends_a_dropped_call_again(how):
    server = RacingServer(how)

    async def calls():
        async with AsyncClient(server.url, retries=0) as zs:
            return [await zs.classify(f"text {i}", ["a", "b", "c", "d"]) for i in range(3)]

    try:
        answers = asyncio.run(calls())
        assert [a.probabilities for a in answers] == [[0.25] * 4] * 3
        assert (server.answered, server.dropped) == (3, 2)
    finally:
        server.close()


def test_a_server_that_always_drops_is_one_connection_failed_after_one_resend():
    server = RacingServer("fin", always_drop=True)
    try:
        with Client(server.url, retries=3) as zs, pytest.raises(ConnectionFailed, match="cannot be reached"):
            zs.classify("text", ["a", "b"])
        assert server.dropped == 2  # the call and its one resend, no more
    finally:
        server.close()
