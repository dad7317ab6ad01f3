"""``ZSNLI_API_KEY`` (issue 48): one middleware guards every route, later ones included, but the open paths of
`zsnli.serving.auth.OPEN_PATHS`; the key is compared in constant time and never logged."""

from __future__ import annotations

import logging

import pytest
from conftest import cached_loader, make_settings, running_app

from zsnli.serving.auth import OPEN_PATHS, bearer_token, is_open, key_matches

pytestmark = pytest.mark.anyio

KEY = "k3y-0f-th1s-s3rv3r"


def _served_app(bert_dir, tmp_path, monkeypatch, extra_route: bool = False, **overrides):
    """The served app (`zsnli.serve.served_extensions`: /metrics and the bake-off) with the key set, plus, when
    asked, a route added by an extension after the fact (as another family of routes would be)."""
    from zsnli.serve import served_extensions
    from zsnli.serving.app import create_app

    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "b.sqlite3"))
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "key.pem"))
    served = served_extensions()

    def extend(app, service):
        served(app, service)
        if extra_route:
            @app.post("/embed")
            async def embed() -> dict:
                """A route added later."""
                return {"embedded": True}

    return create_app(make_settings(bert_dir, api_key=KEY, **overrides), loader=cached_loader, extend=extend,
                      access_log=True)


def _concrete(path: str) -> str:
    return path.replace("{", "").replace("}", "")  # /v1/bakeoffs/{id} -> /v1/bakeoffs/id


async def test_every_route_but_the_open_ones_needs_the_key(bert_dir, tmp_path, monkeypatch, caplog):
    app = _served_app(bert_dir, tmp_path, monkeypatch, extra_route=True)
    routes = [(m, r.path) for r in app.routes if hasattr(r, "methods") for m in sorted(r.methods or ())]
    routes += [("GET", "/no/such/route"), ("POST", "/classify/")]
    paths = {p for _, p in routes}
    assert {"/classify", "/metrics", "/info", "/v1/bakeoff", "/embed", "/", "/health", "/favicon.ico"} <= paths, paths
    with caplog.at_level(logging.DEBUG):
        async with running_app(app) as client:
            for method, path in routes:
                url = _concrete(path)
                bare = await client.request(method, url)
                wrong = await client.request(method, url, headers={"Authorization": "Bearer " + KEY[:-1] + "X"})
                other = await client.request(method, url, headers={"Authorization": "Basic " + KEY})
                right = await client.request(method, url, headers={"Authorization": "bearer " + KEY},
                                             json={} if method == "POST" else None)
                if is_open(path):
                    assert 401 not in (bare.status_code, wrong.status_code), (method, path)
                    continue
                for r in (bare, wrong, other):
                    assert r.status_code == 401, (method, path, r.status_code)
                    assert r.headers["www-authenticate"].startswith("Bearer")
                    body = r.json()
                    assert body["error_type"] == "unauthorized" and body["request_id"] == r.headers["x-request-id"]
                    message = body["error"]["message"] if path == "/v1/embeddings" else body["error"]  # OpenAI's
                    assert message.startswith("unauthorized: "), (path, body)
                    assert KEY not in r.text and KEY[:-1] not in r.text
                assert right.status_code != 401, (method, path)
    assert KEY not in caplog.text and KEY[:-1] not in caplog.text
    described = make_settings(bert_dir, api_key=KEY).describe()  # the settings lines of the start-up log
    assert "ZSNLI_API_KEY=(set)" in described and KEY not in "\n".join(described)
    assert KEY not in repr(make_settings(bert_dir, api_key=KEY))


async def test_refused_requests_are_counted_by_status(bert_dir, tmp_path, monkeypatch):
    """The tryout of issue 48: 401 answers were in the access log but not in zsnli_requests_total."""
    pytest.importorskip("prometheus_client")
    app = _served_app(bert_dir, tmp_path, monkeypatch)
    async with running_app(app) as client:
        assert (await client.post("/classify", json={"text": "x", "labels": ["sport"]})).status_code == 401
        assert (await client.get("/info")).status_code == 401
        text = (await client.get("/metrics", headers={"Authorization": "Bearer " + KEY})).text
    counted = [line for line in text.splitlines() if line.startswith("zsnli_requests_total{") and 'status="401"' in line]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in counted) == 2, counted


async def test_the_openapi_document_declares_the_key_for_swagger_uis_authorize(bert_dir, tmp_path, monkeypatch):
    app = _served_app(bert_dir, tmp_path, monkeypatch)
    async with running_app(app) as client:
        doc = (await client.get("/openapi.json")).json()
    assert doc["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer", "description": (
        "ZSNLI_API_KEY, sent as 'Authorization: Bearer <key>'")}
    assert doc["security"] == [{"bearer": []}]
    assert doc["paths"]["/health"]["get"]["security"] == []
    assert "security" not in doc["paths"]["/classify"]["post"]  # the document-wide requirement applies


async def test_without_the_key_nothing_is_guarded(bert_dir, tmp_path, monkeypatch):
    from zsnli.serving.app import create_app

    async with running_app(create_app(make_settings(bert_dir), loader=cached_loader)) as client:
        assert (await client.get("/info")).status_code == 200
        assert "securitySchemes" not in (await client.get("/openapi.json")).json().get("components", {})


def test_key_checks():
    assert key_matches(KEY.encode(), KEY) and not key_matches(KEY[:-1], KEY) and not key_matches(b"", KEY)
    assert bearer_token([(b"authorization", b"Bearer abc")]) == b"abc"
    assert bearer_token([(b"Authorization", b"BEARER  abc ")]) == b"abc"
    assert bearer_token([(b"authorization", b"Bearer")]) is None and bearer_token([]) is None
    assert "/health" in OPEN_PATHS and not is_open("/health/") and not is_open("/metrics")
    assert is_open("/favicon.ico")  # a browser fetches it by itself, never with the key: it answered 401


@pytest.mark.parametrize("raw", ["", "has space", "tab\there", "caf\u00e9"])
def test_a_key_that_cannot_be_sent_is_refused_in_one_line(raw):
    from zsnli.config import Settings, SettingsError

    with pytest.raises(SettingsError) as err:
        Settings.from_env({"ZSNLI_API_KEY": raw})
    assert "ZSNLI_API_KEY" in str(err.value) and "\n" not in str(err.value) and (not raw or raw not in str(err.value))


@pytest.mark.parametrize("raw", ["", "   "])
def test_an_empty_key_is_called_empty(raw):
    """An empty ZSNLI_API_KEY was refused as 'must be visible ASCII without spaces'; it now says it is empty."""
    from zsnli.config import Settings, SettingsError

    with pytest.raises(SettingsError) as err:
        Settings.from_env({"ZSNLI_API_KEY": raw})
    assert str(err.value).startswith("ZSNLI_API_KEY is set but empty") and "unset it" in str(err.value), err.value


def test_the_client_and_the_cli_send_the_key_from_the_same_variable(served, monkeypatch, capsys):
    from zsnli.cli import main
    from zsnli.client import BadRequestError, Client, InvalidArgument

    with served(api_key=KEY) as srv:
        url = f"http://127.0.0.1:{srv.port}"
        capsys.readouterr()  # the server's start-up output (a weights bar when this test loads them) is not the CLI's
        monkeypatch.delenv("ZSNLI_API_KEY", raising=False)
        with Client(url, retries=0) as zs:
            with pytest.raises(BadRequestError) as err:
                zs.classify("the match", ["sport", "business"])
            assert err.value.status == 401 and zs.health()["status"] == "ok"  # /health needs none
        assert main(["classify", "the match", "--labels", "sport,business", "--url", url]) != 0
        err_text = capsys.readouterr().err
        assert "unauthorized" in err_text and len(err_text.strip().splitlines()) == 1, err_text
        assert "set ZSNLI_API_KEY" in err_text, err_text  # issue 57, item 10: what to do, in the same line
        monkeypatch.setenv("ZSNLI_API_KEY", "not-the-key-of-this-server")
        assert main(["classify", "the match", "--labels", "sport,business", "--url", url]) != 0
        err_text = capsys.readouterr().err
        assert "is not the key this server was started with" in err_text and "not-the-key" not in err_text, err_text
        monkeypatch.setenv("ZSNLI_API_KEY", KEY + "\n")  # as a mounted Secret file often ends
        with Client(url) as zs:
            assert len(zs.classify("the match", ["sport", "business"]).probabilities) == 2
        assert main(["classify", "the match", "--labels", "sport,business", "--url", url]) == 0
        with Client(url, api_key="") as zs, pytest.raises(BadRequestError):
            zs.classify("the match", ["sport", "business"])
        with pytest.raises(InvalidArgument):
            Client(url, api_key="two words")
        for not_text in (123, b"bytes", ["k"]):  # the tryout: an int raised AttributeError
            with pytest.raises(InvalidArgument, match="api_key must be a string"):
                Client(url, api_key=not_text)


@pytest.mark.parametrize("name", ["ZSNLI_API_KEYS", "ZSNLI_APIKEY", "zsnli_api_key"])
def test_a_misspelt_key_is_refused_without_printing_it(name):
    from zsnli.config import misspelt_settings

    (line,) = misspelt_settings({name: KEY})
    assert "ZSNLI_API_KEY" in line and KEY not in line


SECRET = "sk-Th1sIsAS3cretOfTheClient"


@pytest.mark.parametrize("query", [f"api_key={SECRET}", f"ACCESS_TOKEN={SECRET}", f"a=1&Key={SECRET}&b=2",
                                   f"token={SECRET}", f"%61pi_key={SECRET}", f"x=1;hf_token={SECRET}",
                                   f"api-key={SECRET}&api_key={SECRET}", f"password={SECRET}"])
async def test_a_key_sent_in_the_query_is_never_logged_in_clear(bert_dir, tmp_path, monkeypatch, caplog, query):
    """Issue 57, item 6: a key sent as ``?api_key=`` (or ``access_token``, ``key``, ``token``, any case) was refused
    and then written in clear to the access log. Its value is ``REDACTED`` there; the 401 says where a key goes."""
    app = _served_app(bert_dir, tmp_path, monkeypatch)
    caplog.set_level(logging.INFO, logger="zsnli.access")
    async with running_app(app) as client:
        r = await client.post(f"/classify?{query}", json={"text": "x", "labels": ["a", "b"]})
        assert r.status_code == 401 and "query string is never read" in r.json()["error"], r.text
        r = await client.get(f"/health?{query}")  # an open route: answered, logged
        assert r.status_code == 200
    access = [rec.getMessage() for rec in caplog.records if rec.name == "zsnli.access"]
    assert len(access) >= 2 and all("REDACTED" in line for line in access[-2:]), access
    assert SECRET not in caplog.text and SECRET[:12] not in caplog.text


def test_uvicorns_own_access_line_is_redacted_too(bert_dir, caplog):
    """A bare ``uvicorn server:app`` logs its own access line (``uvicorn.access``): the app puts a filter on it."""
    from zsnli.serving.app import create_app

    create_app(make_settings(bert_dir), loader=cached_loader)
    caplog.set_level(logging.INFO, logger="uvicorn.access")
    logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET",
                                             f"/info?x=1&access_token={SECRET}", "1.1", 401)
    assert SECRET not in caplog.text and "/info?x=1&access_token=REDACTED" in caplog.text


@pytest.mark.parametrize("line", [
    b"Authorization: Bearer " + SECRET.encode() + b"\x00tail",
    b"Authorization: Bearer \x00" + SECRET.encode(),
    b"X-Api-Key: " + SECRET.encode() + b"\x00",
    b"Authori\x00zation: Bearer " + SECRET.encode(),
])
def test_a_header_the_parser_refuses_is_named_never_repeated(served, line):
    """Issue 57, item 6: a key with a NUL byte got a 400 whose message echoed the whole header line."""
    import socket

    from http_support import read_response

    with served(api_key=KEY) as srv, socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
        sock.sendall(b"GET /info HTTP/1.1\r\nHost: test\r\n" + line + b"\r\n\r\n")
        status, _, body = read_response(sock)
    assert status == 400 and b"malformed_request" in body, body
    assert SECRET.encode() not in body and SECRET[:8].encode() not in body and b"Bearer" not in body, body
    assert b"bytearray" not in body and b"b'" not in body, body  # h11's bytearray(b'...') wrapper left out whole
    if line.startswith(b"Authorization:"):
        assert b"illegal header line (field 'authorization'; its value is not repeated)" in body, body


def test_h11s_bytearray_wrapper_is_left_out_with_the_bytes():
    """The 400 for a NUL byte read ``illegal header line: bytearray( (field 'authorization'; ...))``."""
    from zsnli.serving.http_protocol import unechoed

    for raw in ("bytearray(b'Authorization: Bearer x\\x00y')", "b'Authorization: Bearer x\\x00y'"):
        assert unechoed(f"illegal header line: {raw}") == \
            "illegal header line (field 'authorization'; its value is not repeated)", raw
    assert unechoed("illegal request line: bytearray(b'GET /?k=1 HTTP/1.1')") == "illegal request line (not repeated)"


def test_a_request_line_the_parser_refuses_is_not_repeated(served):
    import socket

    from http_support import read_response

    with served() as srv, socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
        sock.sendall(f"GET /info?api_key={SECRET} \x01 HTTP/1.1\r\nHost: test\r\n\r\n".encode())
        status, _, body = read_response(sock)
    assert status == 400 and SECRET.encode() not in body, body


async def test_401s_are_counted_under_the_routes_own_path(bert_dir, tmp_path, monkeypatch):
    """Issue 57, item 6: 401s were counted as ``path="unmatched"``, as if no route had been asked."""
    pytest.importorskip("prometheus_client")
    app = _served_app(bert_dir, tmp_path, monkeypatch)
    async with running_app(app) as client:
        await client.post("/classify", json={"text": "x", "labels": ["a", "b"]})
        await client.get("/v1/bakeoffs/bo_" + "0" * 32)
        await client.get("/no/such/route")
        text = (await client.get("/metrics", headers={"Authorization": "Bearer " + KEY})).text
    assert 'zsnli_requests_total{path="/classify",status="401"} 1.0' in text, text
    assert 'zsnli_requests_total{path="/v1/bakeoffs/{bakeoff_id}",status="401"} 1.0' in text
    assert 'zsnli_requests_total{path="unmatched",status="401"} 1.0' in text  # no route: still one label


@pytest.mark.parametrize("length", [1, 8, 15])
def test_a_key_too_short_to_guard_anything_is_refused_at_start(length):
    from zsnli.config import MIN_API_KEY_CHARS, Settings, SettingsError

    key = "Zq" * 20
    with pytest.raises(SettingsError) as err:
        Settings.from_env({"ZSNLI_API_KEY": key[:length]})
    line = str(err.value)
    assert line.startswith("ZSNLI_API_KEY must be at least 16 characters") and "\n" not in line
    assert key[:length] not in line.replace("ZSNLI_API_KEY", "")
    assert Settings.from_env({"ZSNLI_API_KEY": key[:MIN_API_KEY_CHARS]}).api_key == key[:16]


async def test_uvicorns_trace_lines_show_no_secret(bert_dir, tmp_path, monkeypatch, caplog):
    """At ZSNLI_LOG_LEVEL=trace uvicorn logs every scope (``ASGI [2] Started scope={... 'query_string': b'...'}``,
    headers included) on ``uvicorn.asgi``: the query's secret values and the key-carrying headers are REDACTED."""
    import httpx
    from uvicorn.logging import TRACE_LOG_LEVEL
    from uvicorn.middleware.message_logger import MessageLoggerMiddleware

    app = _served_app(bert_dir, tmp_path, monkeypatch)
    caplog.set_level(TRACE_LOG_LEVEL)
    caplog.set_level(TRACE_LOG_LEVEL, logger="uvicorn.asgi")
    asgi_logger = logging.getLogger("uvicorn.asgi")  # uvicorn's logging config may stop propagation at "uvicorn"
    monkeypatch.setattr(asgi_logger, "handlers", [*asgi_logger.handlers, caplog.handler])
    traced = httpx.AsyncClient(transport=httpx.ASGITransport(app=MessageLoggerMiddleware(app)),
                               base_url="http://127.0.0.1:8000", timeout=60)
    async with running_app(app), traced as client:
        r = await client.get(f"/health?a=1&api_key={SECRET}", headers={"Authorization": f"Bearer {SECRET}x",
                                                                       "Cookie": f"session={SECRET}"})
        assert r.status_code == 200
    server_lines = [rec.getMessage() for rec in caplog.records if not rec.name.startswith(("httpx", "httpcore"))]
    started = [line for line in server_lines if "Started scope=" in line]
    assert started and "a=1&api_key=REDACTED" in started[-1], started
    assert not [line for line in server_lines if SECRET[:12] in line]


@pytest.mark.parametrize("name", ["pwd", "pass", "PassPhrase", "jwt", "sig", "signature", "bearer", "sessionid",
                                  "session", "k", "K", "", "%6Bey", "client_secret", "cookie"])
async def test_every_secret_looking_query_name_is_redacted(bert_dir, tmp_path, monkeypatch, caplog, name):
    """A fresh-user test: ``pwd``, ``jwt``, ``sig``, ``session``, ``k``, ``?=VALUE`` and others were logged in
    clear; harmless names keep their values."""
    app = _served_app(bert_dir, tmp_path, monkeypatch)
    caplog.set_level(logging.INFO, logger="zsnli.access")
    async with running_app(app) as client:
        assert (await client.get(f"/health?case=valid&{name}={SECRET}")).status_code == 200
    (line,) = [rec.getMessage() for rec in caplog.records if rec.name == "zsnli.access" and "case=" in rec.getMessage()]
    assert f"?case=valid&{name}=REDACTED " in line and SECRET[:12] not in caplog.text, line


HIDDEN_NAMES = ["password", "passwd", "pass", "api_key", "token", "secret", "pwd", "PassPhrase", "jwt", "sig",
                "signature", "bearer", "sessionid", "session", "k", "", "%6Bey", "%70ass", "client_secret", "cookie",
                "apiKey", "APIKey", "X-Api-Key", "XAPIKEY", "ACCESS_TOKEN", "accesstoken", "hf_token", "apikey",
                "PHPSESSID", "api_key2", "keys", "Authorization", "oauth_token", "newPassword", "user[password]",
                "credentials", "dbpass", "userpass", "hfkey", "mykey", "adminPass", "compass", "bypass_cache",
                # plural compounds (once in clear beside a hidden "tokens") and a session id's short name
                "accesstokens", "clientsecrets", "dbpasswords", "mytokens", "hotkeys", "AccessTokens", "api_keys2",
                "sid", "SID", "sids", "user.sid"]
SHOWN_NAMES = ["passage", "PassageId", "design", "keyboard", "author", "tokenizer", "case", "labels", "passes_total",
               "passages", "designs", "keyboards", "authors", "tokenizers", "code", "side", "inside"]


@pytest.mark.parametrize("name", HIDDEN_NAMES)
def test_a_secret_name_is_matched_as_a_whole_word(name):
    from zsnli.serving.request_ids import redacted_query, secret_name

    assert secret_name(name) and redacted_query(f"a=1&{name}=v") == f"a=1&{name}=REDACTED"


@pytest.mark.parametrize("name", SHOWN_NAMES)
def test_a_harmless_name_holding_a_secret_word_keeps_its_value(name):
    """``passage`` was hidden because it holds ``pass`` (``design``: ``sig``); names are now cut into words and a
    word must be a secret word or end a one-word compound like ``accesstoken`` or ``dbpass`` (so ``compass`` stays
    hidden: a harmless value hidden costs less than a secret in clear)."""
    from zsnli.serving.request_ids import redacted_query, secret_name

    assert not secret_name(name) and redacted_query(f"a=1&{name}=v") == f"a=1&{name}=v"


async def test_the_access_line_shows_a_passage_parameter(bert_dir, tmp_path, monkeypatch, caplog):
    """End to end: ``?passage=`` is written as sent, ``?password=`` beside it is not."""
    app = _served_app(bert_dir, tmp_path, monkeypatch)
    caplog.set_level(logging.INFO, logger="zsnli.access")
    async with running_app(app) as client:
        assert (await client.get(f"/health?passage=the-text&password={SECRET}")).status_code == 200
    (line,) = [rec.getMessage() for rec in caplog.records if rec.name == "zsnli.access" and "passage" in rec.getMessage()]
    assert "?passage=the-text&password=REDACTED " in line and SECRET[:12] not in caplog.text, line


def test_both_access_lines_write_a_query_the_same_readable_way(bert_dir, caplog):
    """Under serve.sh (our zsnli.access line) a query's ``=`` was written ``%3D`` while a bare uvicorn wrote ``=``;
    both now write ``=``, and only a planted field name (``request_id=``) gets ``%3D``."""
    from zsnli.serving.app import create_app
    from zsnli.serving.request_ids import logged_target

    create_app(make_settings(bert_dir), loader=cached_loader)
    caplog.set_level(logging.INFO, logger="uvicorn.access")
    for query, want in (("case=valid", "/health?case=valid"), ("a=1&b=x%20y", "/health?a=1&b=x%20y"),
                        ('q="a b"&request_id=forged', "/health?q=%22a%20b%22&request_id%3Dforged")):
        assert logged_target("/health", query.encode()) == want
        caplog.clear()
        logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET",
                                                 f"/health?{query}", "1.1", 200)
        assert f'"GET {want} HTTP/1.1" 200' in caplog.text, (query, caplog.text)
