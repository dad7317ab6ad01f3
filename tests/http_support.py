"""Raw HTTP against a real server in a thread: `ThreadServer` runs an app under the served uvicorn config
(`zsnli.serve.uvicorn_config`: the served protocol, limits and headers); `request_bytes` and
`read_response` speak HTTP/1.1 on a plain socket, so a test can reuse one connection or hang up."""

from __future__ import annotations

import socket
import threading
import time
import weakref

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadServer:
    """``app`` under `zsnli.serve.uvicorn_config` (the served protocol, limits and headers) in a thread."""

    def __init__(self, app, settings) -> None:
        import uvicorn

        from zsnli.serve import uvicorn_config

        self.port = _free_port()
        self.server = uvicorn.Server(uvicorn_config(app, settings, "127.0.0.1", self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "ThreadServer":
        self.thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health").status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not get ready")

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(15)


def request_bytes(method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: test"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


_UNREAD: "weakref.WeakKeyDictionary[socket.socket, bytes]" = weakref.WeakKeyDictionary()
"""Bytes a `read_response` received past the response it returned (the start of the next, pipelined one)."""


def read_response(sock: socket.socket, timeout: float = 30.0) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length body: ``(status, lower-case headers, body)``.
    Bytes received past it (pipelined answers in the same packet) are kept for the next call on ``sock``.
    Raises ``ConnectionError`` when the server closed or reset the connection first."""
    sock.settimeout(timeout)
    data = _UNREAD.pop(sock, b"")
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-body")
        rest += chunk
    if rest[length:]:
        _UNREAD[sock] = rest[length:]
    return status, headers, rest[:length]
