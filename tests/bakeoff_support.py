"""The one place the bake-off tests build an app with the bake-off routes (tiny models, test settings).

The routes go in through ``create_app``'s ``extend`` hook, with the app's one body reader, exactly as
the served app does (`zsnli.serve.bakeoff_extension`).
"""

from __future__ import annotations

from conftest import cached_loader, make_settings


def make_bakeoff_app(model_dir, loader=cached_loader, **overrides):
    """``create_app`` on ``model_dir`` with the bake-off routes; ``overrides`` are server settings."""
    from zsnli.serving.app import create_app, read_json_body
    from zsnli.compare.service.api import add_bakeoff_routes

    def extend(app, svc):
        add_bakeoff_routes(app, svc, read_json=lambda request: read_json_body(request, svc.settings.max_body_bytes))

    return create_app(make_settings(model_dir, **overrides), loader=loader, extend=extend)
