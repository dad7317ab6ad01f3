"""Interactive API docs (``/docs`` Swagger UI, ``/redoc`` ReDoc) that work offline.

FastAPI's default pages load their JavaScript and CSS from a CDN, so offline
they are blank. Here the pages are FastAPI's own HTML (``get_swagger_ui_html``
/ ``get_redoc_html``, its "self-hosting the docs assets" recipe) pointed at
asset files served by the app itself. The files come from an installed
distribution, never from this repository: by default the ``static/`` folder
of the ``fastapi-offline`` package (Swagger UI bundle and CSS, ReDoc
standalone bundle, favicon). The package is only *located* (``find_spec``),
never imported, so serving does not execute it.

Nothing on these pages reaches off the machine: ReDoc's bundle (2.5) draws the
Redocly logo of its side menu's footer from ``cdn.redoc.ly`` with no option to
turn it off, so the bundle is served with that one URL replaced by an inline
blank image (`redoc_bundle`). The bundled icon also answers ``/favicon.ico``,
the icon a browser asks for on a page that names none (``GET /``, the
bake-off's pages, a JSON answer).

When the package is absent, ``/docs`` and ``/redoc`` answer one JSON error
line (501) saying what to install; everything else works as before.

May import: the standard library, fastapi/starlette. Imported by `zsnli.serving.app` only.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response

ASSET_PACKAGE = "fastapi_offline"
"""Import name of the distribution whose ``static/`` folder holds the assets."""
INSTALL_HINT = "pip install fastapi-offline"
ASSET_FILES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
"""The asset files served, with their media types; any other name is a 404."""
ASSET_PREFIX = "/docs-assets"
REDOC_CSP = "img-src 'self' data:"
"""``Content-Security-Policy`` of the ReDoc page: images from this server only (a guard; `redoc_bundle` already
names none elsewhere)."""
REDOC_LOGO_URL = "https://cdn.redoc.ly/redoc/logo-mini.svg"
"""The image ReDoc 2.x's side menu footer ("API docs by Redocly") loads from its CDN, always (no option hides it)."""
BLANK_IMAGE = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='1' height='1'/%3E"
"""What `redoc_bundle` puts in place of `REDOC_LOGO_URL`: an empty 1x1 SVG, inline (no request at all)."""


def asset_dir(package: str = ASSET_PACKAGE) -> Path | None:
    """The folder holding every file of `ASSET_FILES`, or None when ``package`` is not installed.

    Located with ``importlib.util.find_spec`` (the package is not imported).
    Returns None too when the package exists but lacks one of the files.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        static = Path(location) / "static"
        if all((static / name).is_file() for name in ASSET_FILES):
            return static
    return None


@functools.lru_cache(maxsize=2)
def redoc_bundle(path: Path) -> bytes:
    """The ReDoc standalone bundle at ``path`` as served: its bytes with `REDOC_LOGO_URL` replaced by `BLANK_IMAGE`.

    Read once per path (cached, about 1 MB). A bundle without that URL (another ReDoc version) is served as
    it is. Raises OSError when ``path`` cannot be read.
    """
    return path.read_bytes().replace(REDOC_LOGO_URL.encode(), BLANK_IMAGE.encode())


def _unavailable(page: str) -> JSONResponse:
    message = (f"{page} needs the {ASSET_PACKAGE.replace('_', '-')} package for its offline assets "
               f"({INSTALL_HINT}); the API schema is at /openapi.json")
    return JSONResponse({"error": message, "field": None, "error_type": "docs_unavailable"}, status_code=501)


def install_offline_docs(app: FastAPI, package: str = ASSET_PACKAGE) -> Path | None:
    """Replace ``app``'s CDN-based ``/docs`` and ``/redoc`` with self-hosted ones; returns the asset folder.

    Keeps the app's ``docs_url``/``redoc_url`` (default ``/docs``, ``/redoc``;
    one set to None stays off) and ``openapi_url``; removes FastAPI's default routes for them (and the
    OAuth2 redirect page, unused here; and an earlier call's asset routes) and adds ``GET {ASSET_PREFIX}/{name}``
    for the `ASSET_FILES` (ReDoc's bundle as `redoc_bundle` rewrites it) and ``GET /favicon.ico`` (the
    bundled PNG icon). The asset folder is looked up once, here: None
    (package absent) makes both pages answer 501 with an install hint, and the assets 404.
    """
    docs_url, redoc_url = app.docs_url, app.redoc_url
    replaced = {docs_url, redoc_url, app.swagger_ui_oauth2_redirect_url} - {None}
    replaced |= {ASSET_PREFIX + "/{name}", "/favicon.ico"}
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) not in replaced]
    static = asset_dir(package)

    def _openapi_url(request: Request) -> str:
        return request.scope.get("root_path", "").rstrip("/") + (app.openapi_url or "/openapi.json")

    def _asset_url(request: Request, name: str) -> str:
        return request.scope.get("root_path", "").rstrip("/") + f"{ASSET_PREFIX}/{name}"

    async def swagger_ui(request: Request) -> HTMLResponse:
        if static is None:
            return _unavailable(docs_url)
        return get_swagger_ui_html(
            openapi_url=_openapi_url(request), title=f"{app.title} - Swagger UI",
            swagger_js_url=_asset_url(request, "swagger-ui-bundle.js"),
            swagger_css_url=_asset_url(request, "swagger-ui.css"),
            swagger_favicon_url=_asset_url(request, "favicon.png"),
            swagger_ui_parameters=app.swagger_ui_parameters,
        )

    async def redoc(request: Request) -> HTMLResponse:
        if static is None:
            return _unavailable(redoc_url)
        page = get_redoc_html(
            openapi_url=_openapi_url(request), title=f"{app.title} - ReDoc",
            redoc_js_url=_asset_url(request, "redoc.standalone.js"),
            redoc_favicon_url=_asset_url(request, "favicon.png"), with_google_fonts=False,
        )
        # the bundle's own off-site logo is rewritten (redoc_bundle); the CSP keeps any other off-site image out
        page.headers["Content-Security-Policy"] = REDOC_CSP
        return page

    if docs_url:
        app.get(docs_url, include_in_schema=False)(swagger_ui)
    if redoc_url:
        app.get(redoc_url, include_in_schema=False)(redoc)

    @app.get(ASSET_PREFIX + "/{name}", include_in_schema=False)
    async def docs_asset(name: str):
        if static is None or name not in ASSET_FILES:
            return JSONResponse({"error": f"no docs asset {name!r}", "field": None, "error_type": "not_found"},
                                status_code=404)
        if name == "redoc.standalone.js":
            return Response(redoc_bundle(static / name), media_type=ASSET_FILES[name])
        return FileResponse(static / name, media_type=ASSET_FILES[name])

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon():
        return await docs_asset("favicon.png")

    return static
