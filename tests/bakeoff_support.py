"""The one place the bake-off tests build an app with the bake-off routes (tiny models, test settings).

Today ``create_app`` installs the routes itself; with ``create_app(extend=...)`` this becomes
``create_app(..., extend=lambda app, svc: add_bakeoff_routes(app, svc, read_json=...))``.
"""

from __future__ import annotations

from conftest import cached_loader, make_settings


def make_bakeoff_app(model_dir, loader=cached_loader, **overrides):
    """``create_app`` on ``model_dir`` with the bake-off routes; ``overrides`` are server settings."""
    from zsnli.app import create_app

    return create_app(make_settings(model_dir, **overrides), loader=loader)
