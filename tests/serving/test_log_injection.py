"""Issue 39 (A): no client-controlled value reaches a log line raw (uvicorn's CVE-2020-7694, log forging).

Every value a client controls (path, query, headers, request id, the bake-off's task text) goes through
`zsnli.serving.request_ids.log_safe` before it is logged: CR/LF, ESC, BEL, the other C0/C1 controls
and U+2028/U+2029 come out as ``\\xNN`` / ``\\uNNNN``, so one request is one log line.
"""

from __future__ import annotations

import logging
import re

import pytest
from conftest import running_app

from zsnli.serving.request_ids import log_safe

pytestmark = pytest.mark.anyio

FORGED = "2026-12-04 03:00:00,000 INFO zsnli.access: 10.9.9.9:1 - \"POST /v1/bakeoff HTTP/1.1\" 200"
# every character a terminal or a log reader takes for a line break or a control sequence
BAD = "\r\n\x1b\x07\x00\x08\x0b\x0c\x1c\x1d\x1e\x1f\x7f\x85\x9b\u2028\u2029"
RAW = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def test_log_safe_escapes_every_control_and_keeps_text():
    out = log_safe("/x" + BAD + "caf\u00e9 \\x0d")
    assert not RAW.search(out) and len(out.splitlines()) == 1
    assert out.startswith("/x\\x0d\\x0a\\x1b\\x07\\x00") and "\\u2028\\u2029" in out and "\\x85\\x9b" in out
    assert out.endswith("caf\u00e9 \\\\x0d")  # a backslash the client typed is doubled: no fake escape
    assert log_safe(None) == "-" and log_safe(12) == "12"
    for code in list(range(0x20)) + list(range(0x7f, 0xa0)) + [0x2028, 0x2029]:
        assert not RAW.search(log_safe(chr(code))), hex(code)


@pytest.fixture
def app(bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "b.sqlite3"))
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "key.pem"))
    from conftest import cached_loader, make_settings

    from zsnli.serve import served_extensions
    from zsnli.serving.app import create_app

    return create_app(make_settings(bert_dir), loader=cached_loader, extend=served_extensions(), access_log=True)


def _capture(caplog):
    caplog.set_level(logging.DEBUG)
    for name in ("zsnli.access", "zsnli.compare.service", "zsnli.serving", "zsnli.batch"):
        caplog.set_level(logging.DEBUG, logger=name)  # the app's startup sets the "zsnli" level itself


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def _assert_clean(lines):
    for line in lines:
        assert not RAW.search(line), repr(line)
        assert len(line.splitlines()) <= 1 and not line.startswith("2026-12-04"), repr(line)  # one request, one line


async def test_percent_decoded_path_cannot_forge_an_access_line(app, caplog):
    _capture(caplog)
    async with running_app(app) as client:
        await client.get("/x%0d%0a" + FORGED.replace(" ", "%20").replace('"', "%22"))
        await client.get("/y%1b%5b31m%07%c2%85%e2%80%a8%e2%80%a9%00")
    access = [r.getMessage() for r in caplog.records if r.name == "zsnli.access"]
    mine = [line for line in access if '"GET /x' in line or '"GET /y' in line]
    assert len(mine) == 2, access
    _assert_clean(_lines(caplog))
    assert "/x%0D%0A2026-12-04" in mine[0] and "/y%1B%5B31m%07%C2%85%E2%80%A8%E2%80%A9%00" in mine[1]


async def test_query_headers_and_request_id_are_escaped(app, caplog):
    _capture(caplog)
    async with running_app(app) as client:
        await client.get("/health", params={"q": "a" + BAD + FORGED})
        await client.get("/health", headers={"User-Agent": "ua\x1b[2J\x07", "X-Request-ID": "id\x1b\x07",
                                             "traceparent": "00-\x1b\x07"})
    access = [r.getMessage() for r in caplog.records if r.name == "zsnli.access"]
    assert len(access) >= 2
    _assert_clean(_lines(caplog))


async def test_raw_control_bytes_in_the_request_target_are_escaped(app, caplog):
    # a client that skips percent-encoding: raw bytes in the path and the query of the ASGI scope
    _capture(caplog)
    from zsnli.serving.request_ids import RequestIdMiddleware

    async def inner(scope, receive, send):
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    mw = RequestIdMiddleware(inner, access_log=True)
    scope = {"type": "http", "method": "GET\x1b", "path": "/p\r\n" + FORGED, "query_string": b"q=\r\n\x1b\x07",
             "http_version": "1.1\x07", "headers": [(b"x-request-id", b"r\x1bid")], "client": ("1.2.3.4\n", 5)}

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        pass

    await mw(scope, receive, send)
    access = [r.getMessage() for r in caplog.records if r.name == "zsnli.access"]
    assert len(access) == 1 and len(access[0].splitlines()) == 1
    _assert_clean(access)


async def test_bakeoff_task_text_never_reaches_a_log_raw(app, caplog):
    _capture(caplog)
    async with running_app(app) as client:
        r = await client.post("/v1/bakeoff?t=%0d%0a", json={"task_description": "t" + BAD + FORGED, "examples": []},
                              headers={"X-Request-ID": "bo-1"})
        assert r.status_code == 422
    _assert_clean(_lines(caplog))


async def test_store_error_text_is_escaped(monkeypatch, caplog):
    # the bake-off's "not stored" error line carries the store's message, which may quote the task text
    import sqlite3

    from zsnli.compare.service import api

    caplog.set_level(logging.DEBUG, logger="zsnli.compare.service")
    api.logger.error("bake-off %s not stored: %s", api.log_safe("bo_1"), api.log_safe(sqlite3.Error("x\r\n" + FORGED)))
    assert len(caplog.records) == 1 and not RAW.search(caplog.records[0].getMessage())


@pytest.mark.parametrize("target", ['/x%22%20200%201.0%20ms%20request_id=forged%20%22', "/p?request_id=forged",
                                    '/p?a="%20request_id=forged', "/x%20request_id=forged%09traceparent=00"])
async def test_a_path_or_query_cannot_plant_a_field_before_the_real_one(app, caplog, target):
    """Issue 48: quotes, spaces and ``=`` in the path or query are quoted as uvicorn's access logger does, so the
    line holds exactly one ``request_id=`` field: the server's."""
    _capture(caplog)
    async with running_app(app) as client:
        await client.get(target, headers={"X-Request-ID": "real-1"})
    mine = [r.getMessage() for r in caplog.records if r.name == "zsnli.access" and "real-1" in r.getMessage()]
    assert len(mine) == 1 and mine[0].count("request_id=") == 1 and mine[0].endswith("request_id=real-1"), mine
    assert mine[0].count('"') == 2 and "traceparent=" not in mine[0], mine
