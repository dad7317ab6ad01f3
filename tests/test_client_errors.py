"""zsnli.Client / AsyncClient: every failure is a typed `ZsnliError`, and ``timeout`` bounds the whole call.

Canned answers come from ``httpx.MockTransport``; the deadline is checked against a fake server on a
loopback socket that drips its answer (headers or body) a byte at a time, as a slow or hostile server
would: httpx's own timeouts are per read, so only a whole-call deadline stops it.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from zsnli.client import (AsyncClient, BadRequestError, Client, ConnectionFailed, DeadlineExceeded, InvalidRequest,
                          ResponseError, ZsnliError)

LABELS = ["a", "b"]


def _answering(status: int, content: bytes, content_type: str = "application/json", headers: dict | None = None):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=content, headers={"content-type": content_type, **(headers or {})})

    return httpx.MockTransport(handler)


HTML = b"<!doctype html><html><body>Welcome to nginx!</body></html>"

MALFORMED_CLASSIFY = [
    (200, HTML, "text/html", "not JSON"),
    (200, b"{}", "application/json", "no list of probabilities"),
    (200, b'{"probabilities": "0.5"}', "application/json", "no list of probabilities"),
    (200, b'{"probabilities": [0.5, null]}', "application/json", "no list of probabilities"),
    (200, b'{"probabilities": [true, false]}', "application/json", "no list of probabilities"),
    (200, b'{"probabilities": [0.5]}', "application/json", "1 probabilities for 2 labels"),
    (200, b"[1, 2]", "application/json", "not a JSON object"),
    (200, b"null", "application/json", "not a JSON object"),
    (200, b"\xff\xfe{", "application/json", "not JSON"),
    (307, b"", "text/plain", "redirect to http://elsewhere/classify"),
]


@pytest.mark.parametrize("status, content, ctype, fragment", MALFORMED_CLASSIFY)
def test_an_unexpected_answer_to_classify_is_a_response_error(status, content, ctype, fragment):
    headers = {"location": "http://elsewhere/classify"} if status == 307 else None
    with Client(transport=_answering(status, content, ctype, headers)) as zs, pytest.raises(ResponseError) as info:
        zs.classify("x", LABELS)
    assert fragment in str(info.value) and info.value.status == status and "\n" not in str(info.value)
    assert isinstance(info.value, ZsnliError)


@pytest.mark.anyio
@pytest.mark.parametrize("status, content, ctype, fragment", MALFORMED_CLASSIFY[:6])
async def test_the_async_client_types_them_the_same(status, content, ctype, fragment):
    async with AsyncClient(transport=_answering(status, content, ctype)) as zs:
        with pytest.raises(ResponseError, match=fragment):
            await zs.classify("x", LABELS)


@pytest.mark.parametrize("content, fragment", [
    (b'[{"id": 0, "probabilities": [0.5, 0.5]}]', "2 documents were sent and the answer is 1 answers"),
    (b'[{"probabilities": [0.5, 0.5]}, {"probabilities": [0.5, 0.5]}, {"probabilities": [1, 0]}]', "is 3 answers"),
    (b'{"probabilities": [0.5, 0.5]}', "not a JSON array"),
    (b'[{"probabilities": [0.5, 0.5]}, "oops"]', "answer 1 of the array is neither"),
    (b'[{"probabilities": [0.5, 0.5]}, {"error": "x"}]', "answer 1 of the array is neither"),
    (b'[{"probabilities": [0.5, 0.5]}, {"probabilities": [1.0]}]', "answer 1 of the array has 1 probabilities"),
])
def test_classify_many_refuses_an_answer_array_that_does_not_match_the_documents(content, fragment):
    docs = [{"text": "x", "labels": LABELS}, {"text": "y", "candidate_labels": LABELS}]
    with Client(transport=_answering(200, content)) as zs, pytest.raises(ResponseError, match=fragment):
        zs.classify_many(docs)


def test_other_routes_check_their_answers_too():
    with Client(transport=_answering(200, b"[]")) as zs, pytest.raises(ResponseError, match="/health"):
        zs.health()
    with Client(transport=_answering(200, b'{"labels": ["a"], "scores": [1.0]}')) as zs:
        with pytest.raises(ResponseError, match="sequence"):
            zs.zero_shot_classification("x", ["a"])
    with Client(transport=_answering(200, b'[{"sequence": "x", "labels": ["a"], "scores": [1.0]}]')) as zs:
        with pytest.raises(ResponseError, match="2 inputs"):
            zs.zero_shot_classification(["x", "y"], ["a"])


def test_an_error_status_with_a_non_json_body_is_typed_with_its_text():
    with Client(transport=_answering(404, b"<html>Not Found</html>", "text/html")) as zs, \
            pytest.raises(BadRequestError) as info:
        zs.classify("x", LABELS)
    assert info.value.status == 404 and "Not Found" in str(info.value)


@pytest.mark.parametrize("kwargs", [{"id": object()}, {"id": float("nan")}, {"hypothesis_template": float("inf")}])
def test_arguments_json_cannot_hold_are_refused_before_sending(kwargs):
    sent = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200, json={}))
    with Client(transport=transport) as zs, pytest.raises(InvalidRequest, match="cannot be sent as JSON"):
        zs.classify("x", LABELS, **kwargs)
    assert sent == []


BAD_LABELS = [("sport,business", "must be a list of strings.*accepts one comma-separated string"),
              ({"sport": 1, "business": 2}, "must be a list of strings"),
              ("ab", "must be a list of strings"), (None, "must be a list of strings"),
              (iter(["a", "b"]), "must be a list of strings"), (["a", 2], r"labels\[1\] must be a string"),
              (["a", None], r"labels\[1\] must be a string"), ([b"a"], r"labels\[0\] must be a string")]


@pytest.mark.parametrize("labels, message", BAD_LABELS)
def test_labels_that_are_not_a_list_of_strings_are_refused_before_sending(labels, message):
    """A comma string was split into one-character labels (list("sport,business")), a dict sent its keys."""
    sent = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200, json={}))
    with Client(transport=transport) as zs, pytest.raises(InvalidRequest, match=message):
        zs.classify("x", labels)
    assert sent == []


@pytest.mark.parametrize("value", ["false", "true", 0, 1, None, "no"])
def test_non_bool_multi_label_is_refused_before_sending(value):
    """multi_label="false" became True (bool("false")); the server answers a non-boolean 422."""
    sent = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200, json={}))
    with Client(transport=transport) as zs:
        with pytest.raises(InvalidRequest, match="multi_label must be a boolean"):
            zs.classify("x", LABELS, multi_label=value)
        with pytest.raises(InvalidRequest, match="multi_label must be a boolean"):
            zs.zero_shot_classification("x", LABELS, multi_label=value)
    assert sent == []


def test_zero_shot_takes_a_comma_string_or_a_list_of_strings_only():
    sent = []
    transport = httpx.MockTransport(lambda r: sent.append(json.loads(r.content)) or httpx.Response(
        200, json={"sequence": "x", "labels": ["a", "b"], "scores": [0.6, 0.4]}))
    with Client(transport=transport) as zs:
        zs.zero_shot_classification("x", "a,b")
        zs.zero_shot_classification("x", ("a", "b"), multi_label=True)
        for bad in ({"a": 1}, ["a", 3]):
            with pytest.raises(InvalidRequest, match="candidate_labels"):
                zs.zero_shot_classification("x", bad)
    assert [b["parameters"]["candidate_labels"] for b in sent] == ["a,b", ["a", "b"]]
    assert [b["parameters"]["multi_label"] for b in sent] == [False, True]


@pytest.mark.anyio
async def test_async_client_refuses_the_same_arguments():
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json={}))
    async with AsyncClient(transport=transport) as zs:
        with pytest.raises(InvalidRequest, match="must be a list of strings"):
            await zs.classify("x", "a,b")
        with pytest.raises(InvalidRequest, match="multi_label must be a boolean"):
            await zs.classify("x", LABELS, multi_label="false")


# --------------------------------------------------------------------------- the deadline


class DripServer:
    """A loopback HTTP server that answers every request with a valid ``/classify`` answer, sent one byte
    every ``gap_s`` seconds from the first byte of the headers (``headers=True``) or of the body."""

    def __init__(self, gap_s: float, drip_headers: bool) -> None:
        self.gap_s, self.drip_headers = gap_s, drip_headers
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        body = json.dumps({"id": None, "probabilities": [0.25, 0.75]}).encode()
        head = (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode()
        with conn:
            conn.recv(65536)
            fast, slow = (b"", head + body) if self.drip_headers else (head, body)
            try:
                conn.sendall(fast)
                for i in range(len(slow)):
                    if self.stop.wait(self.gap_s):
                        return
                    conn.sendall(slow[i:i + 1])
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture(params=[False, True], ids=["body", "headers"])
def drip(request):
    server = DripServer(gap_s=0.1, drip_headers=request.param)  # ~4 to 13 s for the whole answer
    yield server
    server.close()


def test_timeout_bounds_the_whole_call_against_a_dripping_server(drip):
    with Client(drip.url, timeout=1.0, retries=0) as zs:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="did not answer within 1 s"):
            zs.classify("x", LABELS)
        took = time.monotonic() - t0
    assert took < 2.5, took  # the drip takes >= 4 s: a per-read timeout would have waited for all of it
    assert isinstance(DeadlineExceeded("x"), ConnectionFailed)


@pytest.mark.anyio
async def test_the_async_timeout_bounds_the_whole_call_too(drip):
    async with AsyncClient(drip.url, timeout=1.0, retries=0) as zs:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            await zs.classify("x", LABELS)
        assert time.monotonic() - t0 < 2.5


def test_a_slow_answer_within_the_deadline_is_read_whole():
    server = DripServer(gap_s=0.002, drip_headers=False)
    try:
        with Client(server.url, timeout=20.0, retries=0) as zs:
            assert zs.classify("x", LABELS).probabilities == [0.25, 0.75]
    finally:
        server.close()
