"""No web page drives the server unless allowed (issue 57, item 2): the ``Origin`` check on every route that does
work and the ``Host`` check against DNS rebinding (`zsnli.serving.origin_check`), with their settings
``ZSNLI_ALLOWED_ORIGINS`` and ``ZSNLI_ALLOWED_HOSTS`` (`zsnli.net_settings`). Programs (no ``Origin``) are not
affected, so the README, the clients, the harness and the Kubernetes probes work as before."""

from __future__ import annotations

import sys

import httpx
import pytest
from conftest import cached_loader, make_settings, running_app

from zsnli.config import Settings, SettingsError
from zsnli.net_settings import allowed_hosts, allowed_origins, parse_origin, split_host
from zsnli.serving.origin_check import OWN_NAMES, THIS_HOST, host_allowed

pytestmark = pytest.mark.anyio

BODY = {"text": "the match ended in a draw", "labels": ["sport", "business"]}
LOOPBACK = "http://127.0.0.1:8000"  # an in-process client whose connection came in on loopback (scope["server"])


def _app(bert_dir, **overrides):
    from zsnli.serve import served_extensions
    from zsnli.serving.app import create_app

    return create_app(make_settings(bert_dir, **overrides), loader=cached_loader, extend=served_extensions())


def _client(app, base: str = LOOPBACK) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base, timeout=60)


def _work_routes(app) -> list[str]:
    """Every route that takes a POST (the bake-off's and the compatible APIs' included): the check is in front of
    all of them, later ones too."""
    return sorted({r.path for r in app.routes if "POST" in (getattr(r, "methods", None) or ())})


def _message(response) -> str:
    body = response.json()
    return body["error"]["message"] if isinstance(body["error"], dict) else body["error"]


@pytest.mark.parametrize("value, want", [
    ("LocalHost:8000", ("localhost", 8000)), ("localhost.", ("localhost", None)), ("[::1]:8000", ("::1", 8000)),
    ("[::FFFF:127.0.0.1]", ("::ffff:127.0.0.1", None)), ("Example.COM.:80", ("example.com", 80)),
    ("zsnli.default.svc.cluster.local", ("zsnli.default.svc.cluster.local", None)), ("my_box:", ("my_box", None)),
    ("::1", None), ("a b", None), ("user@evil.example", None), ("evil.example/x", None), ("x:99999", None),
    ("[evil.example]", None), ("evil..example", None), ("", None),
])
def test_a_host_header_is_read_whatever_its_case_port_or_trailing_dot(value, want):
    assert split_host(value) == want


@pytest.mark.parametrize("value, url, want", [
    ("http://Evil.Example", False, ("http", "evil.example", 80)),
    ("HTTPS://evil.example.:443", False, ("https", "evil.example", 443)),
    ("http://[::1]:3000", False, ("http", "::1", 3000)),
    ("http://evil.example/path", False, None), ("http://evil.example/path?q", True, ("http", "evil.example", 80)),
    ("null", False, None), ("http://a.example http://b.example", False, None), ("http://u@evil.example", False, None),
])
def test_an_origin_is_read_as_browsers_write_it(value, url, want):
    assert parse_origin(value, url=url) == want


def test_the_settings_are_normalised_and_a_bad_item_is_one_line():
    assert allowed_origins("HTTPS://App.Example:443/, http://localhost:3000,*") == \
        "https://app.example,http://localhost:3000,*"
    assert allowed_hosts("Zsnli.Example.com., *.corp.example, .lab.example, [::1], 10.0.0.5") == \
        "zsnli.example.com,.corp.example,.lab.example,::1,10.0.0.5"
    assert allowed_hosts(" , ") is None and allowed_origins("") is None
    assert Settings.from_env({"ZSNLI_ALLOWED_HOSTS": "a.example"}).allowed_hosts == "a.example"
    for env in ({"ZSNLI_ALLOWED_ORIGINS": "null"}, {"ZSNLI_ALLOWED_ORIGINS": "app.example"},
                {"ZSNLI_ALLOWED_ORIGINS": "http://app.example/page"}, {"ZSNLI_ALLOWED_HOSTS": "zsnli.example:8000"},
                {"ZSNLI_ALLOWED_HOSTS": "http://zsnli.example"}, {"ZSNLI_ALLOWED_HOSTS": "a b"},
                # a fresh-user test: a top-level domain, port 0, a scheme no page has, a value of commas only
                {"ZSNLI_ALLOWED_HOSTS": ".com"}, {"ZSNLI_ALLOWED_HOSTS": "*.com"},
                {"ZSNLI_ALLOWED_HOSTS": "a.example,.lab"}, {"ZSNLI_ALLOWED_ORIGINS": "http://x.com:0"},
                {"ZSNLI_ALLOWED_ORIGINS": "ftp://x.com"}, {"ZSNLI_ALLOWED_ORIGINS": "javascript://x.com"},
                {"ZSNLI_ALLOWED_ORIGINS": ",,"}, {"ZSNLI_ALLOWED_ORIGINS": " , "}):
        with pytest.raises(SettingsError) as err:
            Settings.from_env(env)
        (name,) = env
        assert str(err.value).startswith(name) and "\n" not in str(err.value), err.value


@pytest.mark.parametrize("env, spelt", [
    ({"ZSNLI_ALLOWED_HOSTS": "münchen.de"}, "xn--mnchen-3ya.de"),
    ({"ZSNLI_ALLOWED_HOSTS": "a.example, *.MÜNCHEN.de"}, "*.xn--mnchen-3ya.de"),
    ({"ZSNLI_ALLOWED_HOSTS": ".bücher.example"}, ".xn--bcher-kva.example"),
    ({"ZSNLI_ALLOWED_ORIGINS": "https://münchen.de"}, "https://xn--mnchen-3ya.de"),
])
def test_a_non_ascii_name_is_refused_with_its_punycode_spelling(env, spelt):
    """Browsers send a non-ASCII host in punycode (IDNA) in ``Host`` and ``Origin``; the one line used to give only
    the generic rule. It now says so, spelling the entry as Python's idna codec encodes it, which is then taken."""
    with pytest.raises(SettingsError) as err:
        Settings.from_env(env)
    text = str(err.value)
    assert text.startswith(next(iter(env))) and "\n" not in text, text
    assert text.endswith(f"; a non-ASCII name is written in punycode (IDNA): {spelt}"), text
    (name,) = env
    assert Settings.from_env({name: spelt}) is not None


def test_a_name_the_idna_codec_cannot_encode_still_gets_the_hint():
    from zsnli.net_settings import punycode_hint

    assert punycode_hint("a.example") == ""
    assert punycode_hint("ü" * 70 + ".de").endswith("(IDNA), e.g. xn--mnchen-3ya.de for münchen.de")


@pytest.mark.parametrize("entry", [".co.uk", "*.co.uk", ".CO.UK.", ".com", "*.github.io", ".kobe.jp", ".x.kobe.jp",
                                   ".uk", "*.lab", "a.example,.ac.jp"])
def test_a_domain_that_is_a_public_suffix_is_refused_in_one_line(entry):
    """``.co.uk`` (two labels) was taken, allowing every host anyone registers under it; every public suffix of the
    Public Suffix List is refused, a single label as before."""
    with pytest.raises(SettingsError) as err:
        Settings.from_env({"ZSNLI_ALLOWED_HOSTS": entry})
    text = str(err.value)
    assert text.startswith("ZSNLI_ALLOWED_HOSTS") and "public suffix" in text and "\n" not in text, text


@pytest.mark.parametrize("entry, want", [(".example.co.uk", ".example.co.uk"), ("*.corp.example", ".corp.example"),
                                         (".a.b.kobe.jp", ".a.b.kobe.jp"), (".svc.cluster.local", ".svc.cluster.local"),
                                         ("co.uk", "co.uk"), (".me.github.io", ".me.github.io")])
def test_a_domain_of_ones_own_under_a_public_suffix_is_taken(entry, want):
    assert Settings.from_env({"ZSNLI_ALLOWED_HOSTS": entry}).allowed_hosts == want


def test_without_publicsuffixlist_the_server_still_starts_and_refuses_single_labels(monkeypatch):
    """serve.sh runs where only the product card's packages are installed: no ``publicsuffixlist``. A domain entry
    must not fail the start there with an ImportError; single labels are still refused, longer suffixes taken."""
    from zsnli import net_settings

    monkeypatch.setitem(sys.modules, "publicsuffixlist", None)  # import fails as if not installed
    net_settings._suffix_list.cache_clear()
    try:
        assert Settings.from_env({"ZSNLI_ALLOWED_HOSTS": ".co.uk,.example.com"}).allowed_hosts == ".co.uk,.example.com"
        with pytest.raises(SettingsError) as err:
            Settings.from_env({"ZSNLI_ALLOWED_HOSTS": ".com"})
        assert "public suffix" in str(err.value) and "\n" not in str(err.value)
    finally:
        net_settings._suffix_list.cache_clear()


@pytest.mark.parametrize("host, want", [
    ("127.0.0.1", True), ("::1", True), ("192.168.1.20", True), ("localhost", True),
    ("app.localhost", True), ("zsnli", True), ("zsnli.ns.svc.cluster.local", True), ("zsnli.ns.svc", True),
    ("host.docker.internal", True), (THIS_HOST, True), *[(name, True) for name in OWN_NAMES],
    ("evil.example", False), ("127.0.0.1.evil.example", False), ("localhost.evil.example", False),
    ("evil.com", False), ("svc.evil.com", False),
])
def test_the_default_host_rule(host, want):
    assert host_allowed(host, ()) is want


def test_listed_hosts_and_domains():
    listed = ("zsnli.example.com", ".corp.example")
    assert host_allowed("zsnli.example.com", listed) and host_allowed("corp.example", listed)
    assert host_allowed("a.b.corp.example", listed) and not host_allowed("evilcorp.example", listed)
    assert not host_allowed("www.zsnli.example.com", listed) and host_allowed("any.example", ("*",))


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"}, {"Origin": "HTTP://EVIL.EXAMPLE:80"}, {"Origin": "null"},
    {"Origin": "http://127.0.0.1:9999"}, {"Origin": "http://localhost:8000"}, {"Origin": "http://[::1]:8000"},
    {"Origin": "http://evil.example."}, {"Origin": "file://"}, {"Origin": "chrome-extension://abcdef"},
    {"Referer": "http://evil.example/page.html"}, {"Origin": "http://a.example http://127.0.0.1:8000"},
])
async def test_a_foreign_page_is_refused_403_on_every_route_that_does_work(bert_dir, headers):
    app = _app(bert_dir)
    routes = _work_routes(app)
    assert {"/classify", "/", "/v1/zero-shot-classification", "/predict", "/embed", "/v1/embeddings", "/tokenize",
            "/v1/bakeoff"} <= set(routes), routes
    async with running_app(app), _client(app) as client:
        for path in routes:
            for extra in ({"Content-Type": "application/json"}, {"Content-Type": "text/plain"}, {}):
                r = await client.post(path, content=b'{"inputs": "x"}', headers={**headers, **extra})
                assert r.status_code == 403, (path, headers, extra, r.status_code, r.text)
                body = r.json()
                assert body["error_type"] == "forbidden" and body["request_id"] == r.headers["x-request-id"]
                assert "forbidden" in _message(r) and "access-control-allow-origin" not in r.headers
                if path == "/v1/embeddings":  # OpenAI's error shape there
                    assert body["error"]["type"] == "forbidden"


async def test_programs_and_the_servers_own_pages_pass(bert_dir):
    """No Origin (curl, the clients, the harness): as before, a typeless body included. The server's own page
    (same host and port: the bake-off form, /docs's Try it out) passes with a JSON body; a typeless or text/plain
    body from any page is refused (no CORS preflight guards those)."""
    app = _app(bert_dir)
    async with running_app(app), _client(app) as client:
        assert (await client.post("/classify", json=BODY)).status_code == 200
        assert (await client.post("/classify", content=b'{"text": "x", "labels": ["a", "b"]}')).status_code == 200
        for own in ("http://127.0.0.1:8000", "HTTP://127.0.0.1:8000"):  # https: another scheme, refused (below)
            r = await client.post("/classify", json=BODY, headers={"Origin": own})
            assert r.status_code == 200, (own, r.text)
        r = await client.post("/classify", json=BODY, headers={"Referer": "http://127.0.0.1:8000/docs"})
        assert r.status_code == 200
        for content_type in (None, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded"):
            headers = {"Origin": "http://127.0.0.1:8000", **({"Content-Type": content_type} if content_type else {})}
            r = await client.post("/classify", content=b'{"text": "x", "labels": ["a", "b"]}', headers=headers)
            assert r.status_code == 415 and r.json()["field"] == "content-type", (content_type, r.text)
        assert (await client.get("/info", headers={"Origin": "http://evil.example"})).status_code == 200  # reads


@pytest.mark.parametrize("host", ["evil.example", "EVIL.example:8000", "evil.example.", "127.0.0.1.evil.example",
                                  "localhost.evil.example:8000", "zsnli.ns"])
async def test_a_rebound_name_over_loopback_is_refused_on_every_route(bert_dir, host):
    app = _app(bert_dir)
    async with running_app(app), _client(app) as client:
        for method, path in (("GET", "/health"), ("GET", "/info"), ("GET", "/metrics"), ("GET", "/v1/bakeoffs"),
                             ("POST", "/classify"), ("POST", "/tokenize"), ("POST", "/v1/bakeoff")):
            r = await client.request(method, path, json=BODY if method == "POST" else None, headers={"Host": host})
            assert r.status_code == 403 and r.json()["field"] == "host", (method, path, host, r.text)
            assert "ZSNLI_ALLOWED_HOSTS" in r.json()["error"]


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "LOCALHOST.", "[::1]:8000", "zsnli",
                                  "zsnli.default.svc.cluster.local", "host.docker.internal", THIS_HOST])
async def test_addresses_and_local_names_are_answered_over_loopback(bert_dir, host):
    app = _app(bert_dir)
    async with running_app(app), _client(app) as client:
        assert (await client.post("/classify", json=BODY, headers={"Host": host})).status_code == 200


async def test_the_allowed_hosts_setting_opens_a_name_and_makes_the_check_hold_on_every_address(bert_dir):
    app = _app(bert_dir, allowed_hosts="zsnli.example.com", public_url="https://pub.example/zsnli/")
    async with running_app(app), _client(app) as loop, _client(app, "http://10.1.2.3:8000") as network:
        for client in (loop, network):
            for host, want in (("zsnli.example.com", 200), ("pub.example", 200), ("10.1.2.3:8000", 200),
                               ("other.example", 403)):
                assert (await client.get("/info", headers={"Host": host})).status_code == want, (host, client.base_url)


async def test_dns_rebinding_is_refused_on_a_network_address_too(bert_dir):
    """Bound to 0.0.0.0 (the README's default) a rebinding page reaches the LAN address with Host and Origin
    equal: refused unless the name is listed or is ZSNLI_PUBLIC_URL's host; addresses and cluster names pass."""
    default = _app(bert_dir)
    rebinding = {"Host": "evil.com:8124", "Origin": "http://evil.com:8124"}
    async with running_app(default), _client(default, "http://10.1.2.3:8000") as network:
        r = await network.post("/classify", json=BODY, headers=rebinding)
        assert r.status_code == 403 and r.json()["field"] == "host", r.text
        assert "ZSNLI_PUBLIC_URL" in r.json()["error"] and "ZSNLI_ALLOWED_HOSTS" in r.json()["error"]
        for host in ("10.1.2.3:8000", "zsnli.default.svc", "zsnli.default.svc.cluster.local", "zsnli"):
            assert (await network.post("/classify", json=BODY, headers={"Host": host})).status_code == 200, host
    public = _app(bert_dir, public_url="https://zsnli.example.com/")
    async with running_app(public), _client(public, "http://10.1.2.3:8000") as network:
        r = await network.post("/classify", json=BODY, headers={"Host": "zsnli.example.com"})
        assert r.status_code == 200, r.text


async def test_a_page_of_the_servers_host_with_another_scheme_is_not_its_own(bert_dir):
    """Origin ws:// or https:// with the server's host and port counted as same-origin for an http server; the
    scheme is compared too (https is the server's own only where the request came as https: a trusted proxy)."""
    app = _app(bert_dir)
    async with running_app(app), _client(app) as http, _client(app, "https://127.0.0.1:8000") as https:
        for client, origin, want in ((http, "http://127.0.0.1:8000", 200), (http, "ws://127.0.0.1:8000", 403),
                                     (http, "https://127.0.0.1:8000", 403), (https, "https://127.0.0.1:8000", 200),
                                     (https, "http://127.0.0.1:8000", 403)):
            r = await client.post("/classify", json=BODY, headers={"Origin": origin})
            assert r.status_code == want, (client.base_url, origin, r.text)


async def test_the_public_urls_origin_is_the_servers_own_behind_a_proxy_that_rewrites_host(bert_dir):
    """nginx's default sends Host: 127.0.0.1:8130 while the page is at ZSNLI_PUBLIC_URL: its Origin passes; any
    other page (another scheme or port of that name too) is still refused."""
    app = _app(bert_dir, public_url="https://zsnli.example.com/")
    proxied = {"Host": "127.0.0.1:8130"}
    async with running_app(app), _client(app) as client:
        for origin, want in (("https://zsnli.example.com", 200), ("https://ZSNLI.example.com:443", 200),
                             ("http://zsnli.example.com", 403), ("https://zsnli.example.com:8443", 403),
                             ("https://evil.example", 403)):
            r = await client.post("/classify", json=BODY, headers={**proxied, "Origin": origin})
            assert r.status_code == want, (origin, r.text)


async def test_listed_origins_get_cors_and_others_none(bert_dir):
    app = _app(bert_dir, allowed_origins="http://localhost:3000")
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    async with running_app(app), _client(app) as client:
        r = await client.options("/classify", headers={"Origin": "http://localhost:3000", **preflight})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
        r = await client.post("/classify", json=BODY, headers={"Origin": "http://LOCALHOST:3000"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://LOCALHOST:3000"  # as sent
        assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
        r = await client.options("/classify", headers={"Origin": "http://localhost:3001", **preflight})
        assert r.status_code == 403 and r.json()["error_type"] == "forbidden"
        assert "access-control-allow-origin" not in r.headers
        r = await client.post("/classify", json=BODY, headers={"Origin": "http://localhost:3001"})
        assert r.status_code == 403
        for path in ("/health", "/info"):  # a GET from an unlisted page: answered, with no CORS header at all
            r = await client.get(path, headers={"Origin": "http://localhost:3001"})
            assert r.status_code == 200 and not [k for k in r.headers if k.startswith("access-control-")], r.headers
            assert "origin" in r.headers.get("vary", "").lower()
        r = await client.get("/health", headers={"Origin": "http://localhost:3000"})
        assert "x-request-id" in r.headers["access-control-expose-headers"].lower()


async def test_any_origin_when_listed_as_a_star(bert_dir):
    app = _app(bert_dir, allowed_origins="*")
    async with running_app(app), _client(app) as client:
        r = await client.post("/classify", json=BODY, headers={"Origin": "https://anywhere.example"})
        assert r.status_code == 200
        assert (await client.post("/classify", json=BODY, headers={"Origin": "null"})).status_code == 403


def test_refusals_on_the_wire_are_counted_under_their_route(served):
    """Under the served uvicorn config (a real loopback socket): the 403s are in zsnli_requests_total with the
    route's own path label, and a request as the README, the client and the harness send it is answered."""
    pytest.importorskip("prometheus_client")
    with served() as srv:
        base = f"http://127.0.0.1:{srv.port}"
        assert httpx.post(base + "/classify", json=BODY).status_code == 200
        assert httpx.post(base + "/classify", json=BODY, headers={"Host": "evil.example"}).status_code == 403
        assert httpx.post(base + "/classify", json=BODY, headers={"Origin": "http://evil.example"}).status_code == 403
        r = httpx.post(base + "/v1/bakeoff", json={}, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403
        text = httpx.get(base + "/metrics").text
    assert 'zsnli_requests_total{path="/classify",status="403"} 2.0' in text, text
    assert 'zsnli_requests_total{path="/v1/bakeoff",status="403"} 1.0' in text
