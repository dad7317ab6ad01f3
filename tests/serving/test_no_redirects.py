"""No answer is built from the ``Host`` or ``X-Forwarded-*`` headers (issue 31 item 2): a trailing slash on any
route, GET or POST, is a JSON 404 naming the route (never a 307 to ``<scheme>://<Host>/route``); an unknown path
lists the routes (issue 32 item 6); forwarded headers are trusted only from ``ZSNLI_FORWARDED_ALLOW_IPS``."""

from __future__ import annotations

import json
import re
import socket

import pytest
from conftest import make_settings
from http_support import read_response, request_bytes

FORGED = {"Host": "evil.example", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example",
          "X-Forwarded-For": "203.0.113.9", "Forwarded": "host=evil.example;proto=https"}


def _raw(port: int, method: str, path: str, headers: dict, body: bytes | None = None):
    """One request on a fresh socket with exactly ``headers`` (our own Host among them)."""
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
        if method != "HEAD":
            return read_response(sock)
        data = b""
        while b"\r\n\r\n" not in data:  # a HEAD answer has its headers only
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head = data.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
        return int(head[0].split()[1]), headers, b""


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "bo_" + "0" * 32, path)


def test_a_trailing_slash_on_every_route_is_a_json_404_never_a_redirect(served):
    body = json.dumps({"text": "x", "labels": ["a", "b"]}).encode()
    with served() as server:  # by default a forged Host over loopback is refused before any route (the rebinding guard)
        assert _raw(server.port, "POST", "/classify/", FORGED, body)[0] == 403
    with served(allowed_hosts="*") as server:  # every Host answered: still never a redirect built from it
        app = server.server.config.app
        paths = sorted({_concrete(r.path) for r in app.routes if getattr(r, "methods", None)} - {"/"})
        assert {"/classify", "/v1/zero-shot-classification", "/v1/bakeoff", "/health", "/metrics", "/docs"} <= set(paths)
        for path in paths:
            for method in ("GET", "POST", "HEAD"):
                status, headers, raw = _raw(server.port, method, path + "/", FORGED,
                                            body if method == "POST" else None)
                assert status == 404, (method, path, status, headers)
                assert "location" not in headers and b"evil.example" not in raw, (method, path)
                if method != "HEAD":
                    out = json.loads(raw)
                    assert out["error_type"] == "not_found" and "without the trailing slash" in out["error"], out
                    assert f" {path}" in out["error"] and "Routes: " in out["error"]


def test_an_unknown_path_lists_the_routes(served):
    with served() as server:
        status, headers, raw = _raw(server.port, "GET", "/clasify", {"Host": "test"})
        out = json.loads(raw)
        assert status == 404 and out["error_type"] == "not_found"
        assert out["error"].startswith("no route GET /clasify. Routes: ")
        for route in ("POST /classify", "POST /v1/zero-shot-classification", "GET /health", "POST /v1/bakeoff"):
            assert route in out["error"]
        status, _, raw = _raw(server.port, "GET", "/Health", {"Host": "test"})
        assert status == 404 and "did you mean GET /health?" in json.loads(raw)["error"]
        for odd in ("//health", "/x/../health", "/./health", "//HEALTH"):  # doubled slashes, dot segments: a hint
            status, headers, raw = _raw(server.port, "GET", odd, {"Host": "test"})
            assert status == 404 and "location" not in headers, (odd, status)
            assert f"no route GET {odd}; did you mean GET /health?" in json.loads(raw)["error"], odd
        # a bake-off id that is not stored keeps its own 404 message
        status, _, raw = _raw(server.port, "GET", "/v1/bakeoffs/bo_" + "0" * 32, {"Host": "test"})
        assert status == 404 and "Routes:" not in json.loads(raw)["error"]


def test_forwarded_headers_are_ignored_unless_a_proxy_is_configured(bert_dir):
    from zsnli.config import Settings, SettingsError
    from zsnli.serve import uvicorn_config

    default = uvicorn_config(object(), make_settings(bert_dir), "127.0.0.1", 8000)
    assert default.proxy_headers is False  # uvicorn's default trusts X-Forwarded-* from loopback
    trusted = uvicorn_config(object(), make_settings(bert_dir, forwarded_allow_ips=" 10.0.0.1, 192.168.0.0/16"),
                             "127.0.0.1", 8000)
    assert trusted.proxy_headers is True and trusted.forwarded_allow_ips == "10.0.0.1,192.168.0.0/16"
    assert Settings.from_env({"ZSNLI_FORWARDED_ALLOW_IPS": ""}).forwarded_allow_ips is None
    assert Settings.from_env({"ZSNLI_FORWARDED_ALLOW_IPS": "*"}).forwarded_allow_ips == "*"
    for bad in ("proxy.example", "10.0.0.300", "10.0.0.1;10.0.0.2"):
        with pytest.raises(SettingsError) as err:
            Settings.from_env({"ZSNLI_FORWARDED_ALLOW_IPS": bad})
        assert str(err.value).startswith("ZSNLI_FORWARDED_ALLOW_IPS must be") and "\n" not in str(err.value)


def test_x_forwarded_for_from_loopback_does_not_set_the_client(served, caplog):
    """The access line records the peer, not a client address a loopback caller claims (uvicorn's default
    would believe it)."""
    import logging

    caplog.set_level(logging.INFO, logger="zsnli.access")
    with served() as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        with sock:
            sock.sendall(request_bytes("GET", "/health", headers={"X-Forwarded-For": "203.0.113.9"}))
            status, _, _ = read_response(sock)
        assert status == 200
    access = [r.getMessage() for r in caplog.records if r.name == "zsnli.access" and "/health" in r.getMessage()]
    assert access and all("127.0.0.1" in line and "203.0.113.9" not in line for line in access), access
