"""Run the app under uvicorn in this process, with the exit codes ``serve.sh`` relies on.

`main` (``python server.py``) builds the service from ``ZSNLI_*`` and calls
`serve`; the signal handler starts the service's drain, and the service's
shutdown hook (an argument, set here) stops uvicorn when loading fails.
The served app is ``/classify`` and ``/health`` plus the bake-off service
(`bakeoff_extension`: `zsnli.compare.service.api`, whose arms and ``cryptography``
load on the first bake-off only).

May import: uvicorn, `zsnli.serving.app`, `zsnli.config`, `zsnli.harness.cli` (the parser), `zsnli.serving.http_protocol`, `zsnli.serving.service`,
`zsnli.serving.startup`, `zsnli.serving.telemetry`, `zsnli.compare.service.settings`, and `zsnli.compare.service.api` when the app is built.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Any

from fastapi import FastAPI

from .serving.app import Extension, create_app, read_json_body
from .compare.service.settings import SETTING_NAMES as BAKEOFF_SETTING_NAMES, BakeoffSettings, check_paths
from .config import Settings, SettingsError, check_listen, listen_address, misspelt_settings
from .harness.cli import UsageParser
from .serving.http_protocol import json_fallback, protocol_class
from .serving.service import ZeroShotClassifier
from .serving.startup import (STARTUP_ERRORS, ModelLoader, Preflight, configure_logging, missing_model_dir, one_line,
                              preflight)


class _DropStartupFailed(logging.Filter):
    """Drops uvicorn's "Application startup failed. Exiting." once a refusal was reported in its own line."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.refused and record.getMessage().startswith("Application startup failed"))


def _quiet_startup_refusal(app: FastAPI):
    """ASGI wrapper: a ``StartupRefused`` is reported by its one-line log only.

    Starlette puts the formatted traceback in ``lifespan.startup.failed`` and uvicorn
    logs it, then adds "Application startup failed. Exiting."; both are dropped for a
    refusal (its ``refusing to start: <reason>`` line says it all; exit code 3).
    """
    drop = _DropStartupFailed()
    logging.getLogger("uvicorn.error").addFilter(drop)

    async def wrapped(scope, receive, send):
        if scope["type"] != "lifespan":
            return await app(scope, receive, send)

        async def quiet_send(message):
            if message.get("type") == "lifespan.startup.failed" and "StartupRefused" in message.get("message", ""):
                message = {**message, "message": ""}
                drop.refused = True
            await send(message)

        return await app(scope, receive, quiet_send)

    return wrapped


def bakeoff_extension(bsettings: BakeoffSettings | None = None) -> Extension:
    """The ``extend(app, service)`` hook that adds the bake-off routes (`zsnli.compare.service.api.add_bakeoff_routes`).

    The routes read bodies with the app's one reader (`zsnli.serving.app.read_json_body`, limit
    ``ZSNLI_MAX_BODY_BYTES``). bsettings: default ``BakeoffSettings.from_env()`` when the app is
    built (raises ``SettingsError`` on a bad ``ZSNLI_BAKEOFF_*`` / ``ZSNLI_RECEIPT_KEY`` value).
    """

    def extend(app: FastAPI, service: ZeroShotClassifier) -> None:
        from .compare.service.api import add_bakeoff_routes

        add_bakeoff_routes(app, service, bsettings=bsettings,
                           read_json=lambda request: read_json_body(
                               request, service.settings.max_body_bytes,
                               expected="a JSON object with task_description and examples"))

    return extend


def served_extensions(bsettings: BakeoffSettings | None = None) -> Extension:
    """The ``extend(app, service)`` hook of the served app: ``GET /metrics`` (`zsnli.serving.telemetry`;
    404 and one warning without prometheus_client), then the bake-off routes (`bakeoff_extension`)."""
    bakeoff = bakeoff_extension(bsettings)

    def extend(app: FastAPI, service: ZeroShotClassifier) -> None:
        from .serving.telemetry import metrics_extension

        metrics_extension(app, service)
        bakeoff(app, service)

    return extend


USAGE = "./serve.sh  (or: python server.py, or: zsnli serve)"
DESCRIPTION = """Serve zero-shot classification over HTTP (POST /classify, GET /health, /docs).
Takes no arguments: configure it with environment variables, e.g.
  HOST=127.0.0.1 PORT=8765 ZSNLI_MODEL_DIR=./model ./serve.sh
HOST / PORT (default 0.0.0.0 / 8000), ZSNLI_MODEL_DIR (default ./model) and the
other ZSNLI_* settings are listed in docs/configuration.md.
Exit codes: 0 after a drained SIGTERM, 3 on a refused start (bad setting or
failed startup check, before listening), 1 when the model failed to load."""


def build_parser(prog: str = "server.py") -> UsageParser:
    """The server's parser: ``-h``/``--help`` only (`USAGE`, `DESCRIPTION`); the server is configured by
    environment variables. ``prog`` is the command as the user typed it (``zsnli serve`` names itself), which
    starts every usage error."""
    return UsageParser(prog=prog, usage=USAGE, description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)


def main(argv: list[str] | None = None, prog: str = "server.py") -> int:
    """``python server.py``: serve with settings from ``ZSNLI_*``; returns the exit code.

    argv: command-line arguments (server.py passes ``sys.argv[1:]``; None: none, so an
    in-process call never reads the caller's own argv): ``-h``/``--help``
    prints `USAGE` and `DESCRIPTION` and exits 0; any other argument is refused in one line
    naming it, exit code 2, as ``prog: error: ...`` (``prog``: the command typed, `build_parser`; the server is
    configured by environment only).
    A setting that does not parse or is out of range (``ZSNLI_*``, ``HOST``,
    ``PORT``; `zsnli.config.RANGES`; the bake-off's, `zsnli.compare.service.settings`), and an unknown
    ``ZSNLI_*`` name that closely resembles a setting (`zsnli.config.misspelt_settings`: it would leave
    that setting at its default), and a bake-off store or receipt key that can never work
    (`zsnli.compare.service.settings.check_paths`), are refused like the preflight checks: one line ``refusing to start: <reason>`` on
    stderr, exit code 3, nothing listens. Otherwise as `serve`, with the extensions of
    `served_extensions`: ``GET /metrics`` and the bake-off routes.
    """
    parser = build_parser(prog)
    _, extra = parser.parse_known_args([] if argv is None else list(argv))
    if extra:
        parser.error(f"unknown argument {extra[0]!r}: it takes none; set HOST, PORT and ZSNLI_* environment "
                     "variables instead")
    try:
        settings, bsettings, path_warnings = checked_settings()
        host, port = listen_address()
        check_listen(host, port)
        checked = early_preflight(settings)
    except SettingsError as exc:
        print(f"refusing to start: {one_line(exc)}", file=sys.stderr, flush=True)
        return 3
    for line in path_warnings:  # stderr, last before the server's own log: a default path bake-offs cannot use
        print(f"warning: {line}", file=sys.stderr, flush=True)
    return serve(settings, host, port, extend=served_extensions(bsettings), preflighted=checked)


def early_preflight(settings: Settings) -> Preflight:
    """`zsnli.serving.startup.preflight` (model, manifest, calibration, encoder digest) run before uvicorn starts, so a
    refusal is its one line alone, as a refused setting is (uvicorn's start lines came before it when the lifespan
    ran it); the service takes the result (``ZeroShotClassifier.preflighted``) instead of running it again.
    Raises ``SettingsError`` with the refusal's one-line reason."""
    configure_logging(settings.log_level)
    try:
        return preflight(settings)
    except STARTUP_ERRORS as exc:
        raise SettingsError(one_line(exc)) from None


def checked_settings() -> tuple[Settings, BakeoffSettings, list[str]]:
    """The server's settings from ``ZSNLI_*`` with every check made before anything listens: ``(settings,
    bake-off settings, warnings about bake-off paths)``. Raises ``SettingsError`` (one line) for a
    misspelt ``ZSNLI_*`` name (`zsnli.config.misspelt_settings`), a value that does not parse or is out of
    range, a bake-off store or key that can never work, or a model directory that is not there."""
    misspelt = misspelt_settings(bakeoff_names=BAKEOFF_SETTING_NAMES)
    if misspelt:
        raise SettingsError(misspelt[0])
    settings = Settings.from_env()
    bsettings = BakeoffSettings.from_env()
    path_warnings = check_paths(bsettings)
    missing = missing_model_dir(settings)  # before uvicorn and the settings lines: one line, nothing else
    if missing:
        raise SettingsError(missing)
    return settings, bsettings, path_warnings


def bare_app() -> FastAPI:
    """The app ``uvicorn server:app`` imports, with `main`'s checks of the ``ZSNLI_*`` settings (`checked_settings`;
    uvicorn's own flags give the address): a refused setting is one line ``refusing to start: <reason>`` on
    stderr and ``SystemExit(3)`` while uvicorn imports the module, never a traceback."""
    try:
        settings, bsettings, path_warnings = checked_settings()
        checked = early_preflight(settings)
    except SettingsError as exc:
        print(f"refusing to start: {one_line(exc)}", file=sys.stderr, flush=True)
        raise SystemExit(3) from None
    for line in path_warnings:
        print(f"warning: {line}", file=sys.stderr, flush=True)
    app = create_app(settings, extend=served_extensions(bsettings))
    app.state.classifier.preflighted = checked
    return app


def uvicorn_config(app: Any, settings: Settings, host: str, port: int, **overrides: Any):
    """The ``uvicorn.Config`` `serve` runs ``app`` under (tests run the same one in a thread).

    Connections use `zsnli.serving.http_protocol` (read deadline, connection cap, JSON errors); idle
    keep-alive connections close after ``ZSNLI_KEEP_ALIVE_S`` and every answer advertises it as
    ``Keep-Alive: timeout=N`` (N = whole seconds, rounded down), so a client that honours the header
    retires a pooled connection before the server closes it. ``X-Forwarded-For`` / ``-Proto`` are read
    only from the proxies of ``ZSNLI_FORWARDED_ALLOW_IPS`` (default none: uvicorn's ``proxy_headers`` off,
    where uvicorn would trust loopback). uvicorn's access line is off: the app's
    (`zsnli.serving.request_ids`, ``zsnli.access``) carries the request id. overrides: other ``uvicorn.Config`` arguments.
    """
    import uvicorn

    trusted = settings.forwarded_allow_ips  # None: no proxy is trusted, X-Forwarded-* are ignored
    options = dict(host=host, port=port, workers=1, lifespan="on", log_level=settings.log_level,
                   proxy_headers=trusted is not None, forwarded_allow_ips=trusted or "",
                   timeout_graceful_shutdown=settings.drain_timeout_s or None,
                   http=protocol_class(settings.read_timeout_s, settings.max_connections, settings.retry_after_s,
                                       settings.max_body_bytes, settings.drain_timeout_s),
                   timeout_keep_alive=settings.keep_alive_s, access_log=False,  # zsnli.access logs, with the id
                   headers=[("Keep-Alive", f"timeout={int(settings.keep_alive_s)}")])
    return uvicorn.Config(app, **{**options, **overrides})


def serve(settings: Settings, host: str | None = None, port: int | None = None, *,
          loader: ModelLoader | None = None, extend: Extension | None = None,
          preflighted: Preflight | None = None) -> int:
    """Serve a `ZeroShotClassifier` for ``settings`` under uvicorn in this process; returns the exit code.

    0 after a clean stop (SIGTERM/SIGINT: stop accepting, drain in-flight
    requests for up to ``ZSNLI_DRAIN_TIMEOUT_S``; requests still unanswered
    shortly before that deadline get a JSON 503 ``unavailable`` with
    ``Retry-After`` instead of being cancelled, and the log says how many), 3 when a preflight check
    refused to start (manifest mismatch, no entailment label, bad
    calibration, missing model), 1 when loading the model failed.
    Host and port default to ``$HOST`` (0.0.0.0) and ``$PORT`` (8000)
    (`zsnli.config.listen_address`; raises ``SettingsError`` on a bad one).
    loader, extend: as `create_app`. preflighted: `early_preflight`'s result (`main` runs it before uvicorn starts).

    Connections use `zsnli.serving.http_protocol`: headers and body must arrive within
    ``ZSNLI_READ_TIMEOUT_S`` (else 408 ``request_timeout`` or a close), at most
    ``ZSNLI_MAX_CONNECTIONS`` are served at once (more get 503 ``overloaded``),
    idle keep-alive connections close after ``ZSNLI_KEEP_ALIVE_S``, and at SIGTERM
    an upload still arriving is answered 503 instead of holding the drain. (A bare
    ``uvicorn server:app`` gets none of these three.)
    """
    import uvicorn

    if host is None or port is None:
        default_host, default_port = listen_address()
        host, port = host or default_host, port or default_port
    servers: list[uvicorn.Server] = []

    def stop_server() -> None:  # the service's shutdown hook: a failed load stops uvicorn
        for server in servers:
            server.should_exit = True

    service = ZeroShotClassifier(settings, loader, shutdown_hook=stop_server)
    service.preflighted = preflighted
    app = create_app(service=service, extend=extend, access_log=True)
    config = uvicorn_config(_quiet_startup_refusal(json_fallback(app, settings.retry_after_s)), settings, host, port)

    class _Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:  # signal handler: stop admitting, start the drain clock
            super().handle_exit(sig, frame)
            service.drain.request()

    servers.append(_Server(config))
    # uvicorn re-raises a handled SIGTERM/SIGINT with the handlers it found at
    # start; make those no-ops so a drained shutdown exits 0, not 143.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    servers[0].run()
    if not servers[0].started:
        return 3
    return service.state.exit_code
