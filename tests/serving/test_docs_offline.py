"""/docs and /redoc are served with the app's own assets (issue 11, part 3); a real browser test is in
test_docs_browser.py."""

from __future__ import annotations

import re

import pytest
from conftest import cached_loader, make_settings, running_app

from zsnli.serving.app import create_app
from zsnli.serving.docs_assets import (ASSET_FILES, ASSET_PREFIX, BLANK_IMAGE, REDOC_LOGO_URL, asset_dir,
                                       install_offline_docs)

pytestmark = pytest.mark.anyio


def _referenced_urls(html: str) -> list[str]:
    """Every URL the page loads: src/href attributes and the JS string literals naming a URL or path."""
    attrs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    literals = re.findall(r"""(?:url|spec-url|openapi_url)\W{1,4}["']([^"']+)["']""", html)
    return attrs + literals


async def test_docs_pages_load_only_local_assets(bert_dir):
    static = asset_dir()
    assert static is not None, "fastapi-offline is a declared dependency and must be installed for the tests"
    app = create_app(make_settings(bert_dir), loader=cached_loader)
    async with running_app(app) as client:
        for page, expected in (("/docs", {"swagger-ui-bundle.js", "swagger-ui.css"}), ("/redoc", {"redoc.standalone.js"})):
            resp = await client.get(page)
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
            urls = _referenced_urls(resp.text)
            assert urls, resp.text
            external = [u for u in urls if re.match(r"^(https?:)?//", u)]
            assert external == [], f"{page} still loads {external}"
            assets = {u.rsplit("/", 1)[-1] for u in urls if u.startswith(ASSET_PREFIX + "/")}
            assert expected | {"favicon.png"} <= assets
            assert "/openapi.json" in urls
        assert (await client.get("/redoc")).headers["content-security-policy"] == "img-src 'self' data:"
        for name, media_type in ASSET_FILES.items():
            resp = await client.get(f"{ASSET_PREFIX}/{name}")
            assert resp.status_code == 200, name
            assert resp.headers["content-type"].split(";")[0] == media_type
            if name != "redoc.standalone.js":
                assert resp.content == (static / name).read_bytes()
        icon = await client.get("/favicon.ico")  # what a browser asks for on a page naming no icon (GET /)
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/png"
        assert icon.content == (static / "favicon.png").read_bytes()
        missing = await client.get(f"{ASSET_PREFIX}/../server.py")
        assert missing.status_code == 404
        assert (await client.get(f"{ASSET_PREFIX}/index.html")).status_code == 404
        schema = (await client.get("/openapi.json")).json()
        assert not any(path.startswith(ASSET_PREFIX) or path in ("/docs", "/redoc", "/favicon.ico")
                       for path in schema["paths"])


async def test_redoc_bundle_names_nothing_off_the_machine_to_load(bert_dir):
    """ReDoc 2.5 draws its footer's Redocly logo from cdn.redoc.ly unconditionally; the served bundle inlines a
    blank image there instead, and is otherwise the package's file byte for byte."""
    original = (asset_dir() / "redoc.standalone.js").read_bytes()
    assert original.count(REDOC_LOGO_URL.encode()) == 1, "the bundled ReDoc changed: recheck its off-site loads"
    app = create_app(make_settings(bert_dir), loader=cached_loader)
    async with running_app(app) as client:
        served = (await client.get(f"{ASSET_PREFIX}/redoc.standalone.js")).content
    assert b"cdn.redoc.ly" not in served and served.count(BLANK_IMAGE.encode()) == 1
    assert served.replace(BLANK_IMAGE.encode(), REDOC_LOGO_URL.encode()) == original


async def test_docs_without_the_asset_package_say_what_to_install(bert_dir):
    app = create_app(make_settings(bert_dir), loader=cached_loader)
    app.router.routes[:] = [r for r in app.router.routes if not getattr(r, "path", "").startswith(("/docs", "/redoc"))]
    app.docs_url, app.redoc_url = "/docs", "/redoc"
    assert install_offline_docs(app, package="zsnli_no_such_asset_package") is None
    async with running_app(app) as client:
        for page in ("/docs", "/redoc"):
            resp = await client.get(page)
            assert resp.status_code == 501
            body = resp.json()
            assert body["error_type"] == "docs_unavailable" and "\n" not in body["error"]
            assert "pip install fastapi-offline" in body["error"] and page in body["error"]
        assert (await client.get(f"{ASSET_PREFIX}/swagger-ui.css")).status_code == 404
        assert (await client.get("/favicon.ico")).status_code == 404
        assert (await client.get("/openapi.json")).status_code == 200


def test_asset_dir_is_none_for_a_package_without_the_files(tmp_path, monkeypatch):
    pkg = tmp_path / "zsnli_fake_assets"
    (pkg / "static").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('located, never imported')\n")
    (pkg / "static" / "swagger-ui.css").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert asset_dir("zsnli_fake_assets") is None
    for name in ASSET_FILES:
        (pkg / "static" / name).write_text("")
    assert asset_dir("zsnli_fake_assets") == pkg / "static"


def test_disabled_docs_stay_disabled():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    app = FastAPI(docs_url=None, redoc_url="/redoc")
    install_offline_docs(app)
    client = TestClient(app)
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 200
