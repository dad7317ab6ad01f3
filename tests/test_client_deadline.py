"""Issue 39 (C): a `zsnli.client.Client` call that hits its deadline leaves no thread and no socket behind,
and a bad constructor argument is the client's own `InvalidArgument`, naming it.

The dripping server runs in another process (its threads and sockets are not this process's), sends one
byte every 0.2 s (headers, or the body after whole headers) and never stops on its own: before the fix
each timed-out call left its reader thread and its connection open for as long as the drip lasted.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import pytest

from zsnli.client import AsyncClient, Client, DeadlineExceeded, InvalidArgument, ZsnliError

DRIP = r"""
import socket, sys, threading, time
head_first = sys.argv[1] == "body"
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
def answer(conn):
    with conn:
        try:
            conn.recv(65536)
            if head_first:
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n")
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
            while True:
                time.sleep(0.2)
                conn.sendall(b"{" if head_first else b"x-drip: 1\r\n")
        except OSError:
            return
while True:
    conn, _ = srv.accept()
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
"""


def _sockets() -> int:
    """Open sockets of this process (Linux: /proc/self/fd)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def _settled(baseline: tuple[int, int], within_s: float = 3.0) -> tuple[int, int]:
    end = time.monotonic() + within_s
    while True:
        now = (threading.active_count(), _sockets())
        if now <= baseline or time.monotonic() > end:
            return now
        time.sleep(0.05)


@pytest.fixture(params=["headers", "body"])
def drip_url(request):
    proc = subprocess.Popen([sys.executable, "-c", DRIP, request.param], stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{proc.stdout.readline().strip()}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts sockets through /proc")
def test_ten_timed_out_calls_leave_no_thread_and_no_socket(drip_url):
    with Client(drip_url, timeout=0.4, retries=0) as zs:
        baseline = (threading.active_count(), _sockets())
        for _ in range(10):
            t0 = time.monotonic()
            with pytest.raises(DeadlineExceeded):
                zs.classify("x", ["a", "b"])
            assert time.monotonic() - t0 < 1.5
        assert _settled(baseline) == baseline  # before the fix: 10 more threads and 10 more sockets
    assert not [t for t in threading.enumerate() if t.name == "zsnli-client-call"]


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "localhost:8000", "http://", "ftp://host", "", None, 8000,
                                 "http://host:port"])
def test_a_url_without_scheme_or_host_is_invalid_argument(url):
    with pytest.raises(InvalidArgument) as info:
        Client(url)
    message = str(info.value)
    assert message.startswith("url ") and "\n" not in message and isinstance(info.value, ZsnliError)
    if url == "127.0.0.1:8000":
        assert "http://127.0.0.1:8000" in message and "cannot be reached" not in message


@pytest.mark.parametrize("kwargs, name", [
    ({"timeout": 0}, "timeout"), ({"timeout": -1}, "timeout"), ({"timeout": math.nan}, "timeout"),
    ({"timeout": math.inf}, "timeout"), ({"timeout": "5"}, "timeout"), ({"timeout": True}, "timeout"),
    ({"retries": -1}, "retries"), ({"retries": 1.5}, "retries"), ({"max_retry_wait_s": math.nan}, "max_retry_wait_s"),
    ({"batch_size": 0}, "batch_size"),
])
def test_bad_numbers_are_invalid_argument_naming_the_argument(kwargs, name):
    for cls in (Client, AsyncClient):
        with pytest.raises(InvalidArgument, match=f"^{name} must be"):
            cls("http://127.0.0.1:8000", **kwargs)


def test_good_arguments_still_make_a_client():
    with Client("http://127.0.0.1:8000/", timeout=0.5, retries=0, batch_size=1) as zs:
        assert zs.url == "http://127.0.0.1:8000" and zs.timeout == 0.5
