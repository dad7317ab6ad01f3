"""X-Request-ID: echoed when valid, made up otherwise, in every error body and in the access line."""

from __future__ import annotations

import logging
import re

import pytest
from conftest import running_app

pytestmark = pytest.mark.anyio

HEX32 = re.compile(r"[0-9a-f]{32}")
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def app(bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "b.sqlite3"))
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "key.pem"))
    from conftest import cached_loader, make_settings

    from zsnli.serve import served_extensions
    from zsnli.serving.app import create_app

    return create_app(make_settings(bert_dir), loader=cached_loader, extend=served_extensions(), access_log=True)


async def test_id_is_echoed_or_made_up(app):
    async with running_app(app) as client:
        r = await client.get("/health", headers={"X-Request-ID": "abc-123_XYZ.1"})
        assert r.headers["x-request-id"] == "abc-123_XYZ.1"
        for bad in (None, "x" * 129, "two words", "caf\u00e9".encode("utf-8")):
            headers = {} if bad is None else {"X-Request-ID": bad}
            r = await client.post("/classify", json={"text": "a", "labels": ["b"]}, headers=headers)
            assert r.status_code == 200 and HEX32.fullmatch(r.headers["x-request-id"]), r.headers
        ids = {(await client.get("/health")).headers["x-request-id"] for _ in range(5)}
        assert len(ids) == 5


@pytest.mark.parametrize("method, path, body, status", [
    ("POST", "/classify", {"text": "a", "labels": []}, 422),
    ("POST", "/classify", b"{not json", 400),
    ("GET", "/nowhere", None, 404),
    ("DELETE", "/classify", None, 405),
    ("POST", "/v1/bakeoff", {"task_description": "t", "examples": []}, 422),
    ("GET", "/v1/bakeoffs/bo_" + "0" * 32, None, 404),
])
async def test_every_error_body_carries_the_id(app, method, path, body, status):
    async with running_app(app) as client:
        kwargs = {"content": body} if isinstance(body, bytes) else {"json": body} if body is not None else {}
        for sent in ("req-7", None):
            headers = {"X-Request-ID": sent} if sent else {}
            r = await client.request(method, path, headers=headers, **kwargs)
            assert r.status_code == status
            rid = r.headers["x-request-id"]
            assert r.json()["request_id"] == rid and (rid == sent or HEX32.fullmatch(rid))
            assert {"error", "field", "error_type"} <= set(r.json())
            assert int(r.headers["content-length"]) == len(r.content)


async def test_access_line_has_the_id_and_traceparent(app, caplog):
    caplog.set_level(logging.INFO, logger="zsnli.access")
    async with running_app(app) as client:
        await client.post("/classify", json={"text": "a", "labels": ["b"]},
                          headers={"X-Request-ID": "log-me", "traceparent": TRACE})
        await client.get("/nowhere")
    lines = [r.getMessage() for r in caplog.records if r.name == "zsnli.access"]
    mine = [line for line in lines if "request_id=log-me" in line]
    assert len(mine) == 1 and '"POST /classify HTTP/1.1" 200' in mine[0] and f"traceparent={TRACE}" in mine[0]
    assert any('"GET /nowhere HTTP/1.1" 404' in line and re.search(r"request_id=[0-9a-f]{32}$", line)
               for line in lines)


@pytest.mark.parametrize("sent, valid", [
    (TRACE, True),
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future-field", True),  # a later version, parsed as 00
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),  # all-zero trace id
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", False),  # all-zero parent id
    ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),  # version ff is invalid
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", False),  # upper-case hex
    ("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", False),  # 31-digit trace id
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01", False),  # 15-digit parent id
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", False),  # 1-digit flags
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", False),  # version 00 ends at the flags
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", False),  # a later version goes on with '-' only
    ("0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
])
async def test_only_a_valid_traceparent_is_logged(app, caplog, sent, valid):
    """Issue 57, item 8: an invalid W3C traceparent (all-zero ids, version ff, upper case, wrong lengths) was logged
    as if valid; the spec treats it as absent (a new trace starts)."""
    from zsnli.serving.request_ids import valid_traceparent

    assert valid_traceparent(sent) is valid
    caplog.set_level(logging.INFO, logger="zsnli.access")
    async with running_app(app) as client:
        await client.get("/health", headers={"X-Request-ID": "trace-me", "traceparent": sent})
    (line,) = [m for m in (r.getMessage() for r in caplog.records if r.name == "zsnli.access") if "=trace-me" in m]
    assert (f"traceparent={sent}" in line) is valid and ("traceparent=" in line) is valid, line


async def test_two_traceparent_headers_are_treated_as_absent(app, caplog):
    """W3C Trace Context (section 3.2) treats a request with two ``traceparent`` headers as having an invalid one:
    the first was logged as valid; now neither is."""
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    caplog.set_level(logging.INFO, logger="zsnli.access")
    async with running_app(app) as client:
        for rid, headers in (("two", [("traceparent", TRACE), ("traceparent", other)]),
                             ("same-twice", [("traceparent", TRACE), ("traceparent", TRACE)]),
                             ("one", [("traceparent", TRACE)])):
            await client.get("/health", headers=[("X-Request-ID", rid), *headers])
    lines = {m.split("request_id=")[1].split()[0]: m for m in (r.getMessage() for r in caplog.records
                                                               if r.name == "zsnli.access")}
    assert "traceparent=" not in lines["two"] and "traceparent=" not in lines["same-twice"], lines
    assert f"traceparent={TRACE}" in lines["one"]
