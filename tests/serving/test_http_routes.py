"""405 ``Allow`` lists exactly the methods each path serves (the union over its routes)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from conftest import running_app

from zsnli.errors import OPENAI_ROUTES
from zsnli.serving.http_routes import allow_header, allowed_methods

pytestmark = pytest.mark.anyio

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _route(path: str, *methods: str):
    return SimpleNamespace(path_regex=re.compile("^" + path + "$"), methods=set(methods))


def test_union_over_routes_in_a_fixed_order():
    routes = [_route("/health", "GET"), _route("/health", "HEAD"), _route("/classify", "POST"),
              SimpleNamespace(path_regex=re.compile("^/ws$"), methods=None)]
    assert allow_header(routes, "/health") == "GET, HEAD"
    assert allowed_methods(routes, "/classify") == ["POST"]
    assert allowed_methods(routes, "/ws") == [] and allowed_methods(routes, "/nope") == []
    assert allowed_methods([_route("/x", "PATCH", "OPTIONS", "GET", "PURGE")], "/x") == ["GET", "HEAD", "OPTIONS",
                                                                                        "PATCH", "PURGE"]
    assert allowed_methods([_route("/x", "GET")], "/x") == ["GET", "HEAD"]  # served by `HeadAsGet`
    assert allowed_methods([_route("/x", "POST")], "/x") == ["POST"]


async def test_every_405_lists_exactly_the_methods_served(bert_dir, make_app):
    app = make_app(bert_dir)
    paths = sorted({r.path for r in app.routes if getattr(r, "methods", None)})
    assert {"/health", "/classify"} <= set(paths)
    async with running_app(app) as client:
        for path in paths:
            served = [m for m in METHODS if m in allowed_methods(app.routes, path)]
            refused = []
            for method in METHODS:
                r = await client.request(method, path)
                if r.status_code == 405:
                    refused.append(method)
                    assert r.headers["allow"] == ", ".join(served), (path, method)
                    if method != "HEAD":
                        err = r.json()  # OpenAI's error object on its route, zsnli's string elsewhere
                        message = err["error"]["message"] if path in OPENAI_ROUTES else err["error"]
                        assert err["error_type"] == "method_not_allowed" and method in message
            assert refused and sorted(set(METHODS) - set(refused)) == sorted(served), (path, refused, served)
        r = await client.options("/health")
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
        r = await client.get("/classify")
        assert r.status_code == 405 and r.headers["allow"] == "POST"


async def test_head_is_get_without_its_body_on_every_get_route(bert_dir, make_app):
    """HEAD /health said Content-Length 1532 for GET's 1500 bytes (a separate HEAD route rendered the body
    without GET's response_model), and HEAD / and HEAD /info were 405: uptime checks send HEAD."""
    app = make_app(bert_dir)
    gets = sorted({r.path for r in app.routes if "GET" in (getattr(r, "methods", None) or ())
                   and "{" not in r.path})
    assert {"/", "/health", "/info"} <= set(gets)
    async with running_app(app) as client:
        for path in gets:
            got, head = await client.get(path), await client.head(path)
            assert head.status_code == got.status_code, path
            assert head.content == b"" and int(head.headers["content-length"]) == len(got.content), path
            assert head.headers.get("content-type") == got.headers.get("content-type"), path
        r = await client.head("/classify")  # no GET there: still a 405 naming what is served
        assert r.status_code == 405 and r.headers["allow"] == "POST"
