"""HTTP routes of the bake-off service, added by `add_bakeoff_routes` through ``create_app(extend=...)``.

Routes: ``POST /v1/bakeoff``, ``GET /v1/bakeoffs`` (latest, JSON), ``GET /v1/bakeoffs/{id}``,
``GET /v1/receipts/public-key``, and the pages ``GET /bakeoff``, ``GET /bakeoffs``,
``GET /bakeoffs/{id}``, ``GET /bakeoffs/{id}/report.html``, ``GET /bakeoffs/{id}/badge.svg``,
``GET /bakeoff/static/{name}``.
Errors are rows of the one error table (`zsnli.errors.ErrorType`), raised as ``ApiError`` and answered
by the app in its one shape ``{"error", "field", "error_type"}`` (422s add ``errors``; 503s carry the
app's ``Retry-After``); an unknown id is a 404 JSON on every route. ``/classify`` shares only the batcher (at a lower priority) and the
loaded models with this module: it never reads or writes the store.

Registering the routes is cheap and is part of every served app (`zsnli.serve`): at import this module
loads only FastAPI, the standard library and the light bake-off modules (settings, store, badge,
receipts without ``cryptography``). The protocol, the pages, the arms and the runner (scikit-learn, which
may pull ``rich``; the sentence encoder) are imported on the first bake-off request or page (`_engine`),
and ``cryptography`` on the first signature or public-key request, so a server that never runs a
bake-off never loads them (``tests/test_serve_imports.py`` checks it).
Imports the other `zsnli.compare.service` modules, `zsnli` core modules, `zsnli.serving.http_request` (the wait for a
client's disconnect) and `zsnli.serving.openapi_docs` (`inline_schema`); never `zsnli.serving.app` (the app hands
its body reader in).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import re
import sqlite3
import threading
from types import SimpleNamespace
from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from zsnli.errors import ApiError, ErrorType
from zsnli.serving.openapi_docs import inline_schema
from zsnli.serving.http_request import wait_disconnect
from zsnli.serving.request_ids import log_safe
from zsnli.compare.receipts import ReceiptError, Signer
from zsnli.manifest import sha256_file

from .badge import bakeoff_badge
from .schema import EXAMPLE_BAKEOFF, BakeoffRequest
from .settings import BakeoffSettings
from .store import Store

logger = logging.getLogger("zsnli.compare.service")

ID_RE = re.compile(r"^bo_[0-9a-f]{32}$")


_BAKEOFF_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": inline_schema(BakeoffRequest), "examples": {"support": {
        "summary": "8 support requests, 2 labels, 3 fast arms", "value": EXAMPLE_BAKEOFF}}}}}}
_BAKEOFF_RESPONSES = {
    200: {"description": "The result, stored and signed: `id`, `n`, `labels`, `scorecard` (per arm: rank, role, "
                         "accuracy, macro_f1, ece, latency_ms_p50, fit_s, reliability bins, the arm view's coverage, "
                         "per_class, confusion and slices, status), `winner`, `receipt` "
                         "(sha256, Ed25519 signature, key id), and the page and badge links.",
          "content": {"application/json": {"schema": {"type": "object"}}}},
    422: {"description": "A field is missing or invalid (every problem in `errors`, e.g. `examples[3].expected`)."},
    503: {"description": "Loading or draining, ZSNLI_BAKEOFF_MAX_CONCURRENT bake-offs already running, or the "
                         "result could not be signed or stored; retry after `Retry-After` s."},
}


def _not_found(bakeoff_id: str) -> ApiError:
    return ApiError(ErrorType.NOT_FOUND, f"no bake-off with id {bakeoff_id!r}", "id")


def _engine() -> SimpleNamespace:
    """The bake-off's heavy half, imported on first use (module docstring): ``arms_adapter``, ``runner``,
    ``protocol`` and ``page`` modules as attributes."""
    from . import arms_adapter, page, protocol, runner

    return SimpleNamespace(arms_adapter=arms_adapter, runner=runner, protocol=protocol, page=page)


class _Resources:
    """Lazily loaded, shared across bake-offs: the sentence encoder, registered challengers, digests.

    service: the app's `zsnli.serving.service.ZeroShotClassifier`, used through its public methods only
    (``settings``, ``describe``, ``health``, ``sentence_encoder``, ``classify``, ``check_labels``, ``admitted``).
    """

    def __init__(self, service: Any, bsettings: BakeoffSettings) -> None:
        self.service, self.bsettings = service, bsettings
        # Arm work: one thread per running bake-off (its arms run one after another) and one for a cancelled
        # one finishing its last step; niced so the event loop and /classify get the CPU first.
        self.executor = concurrent.futures.ThreadPoolExecutor(bsettings.max_concurrent + 1,
                                                              thread_name_prefix="zsnli-bakeoff-work",
                                                              initializer=_background_thread)
        # Reads and writes of the store, the key, signing: never queued behind arm work.
        self.io = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="zsnli-bakeoff-io")
        self._lock = threading.Lock()
        self._encoder: tuple[Any, str] | None = None
        self._models: dict[str, Any] = {}
        self._calibration: tuple[str, str | None] | None = None

    @property
    def settings(self) -> Any:
        """The service's settings as served (a hub model's ``model_dir`` is set at start-up)."""
        return self.service.settings

    def encoder(self) -> tuple[Any, str]:
        """The server's sentence encoder when it has one, else the one at ZSNLI_EMBEDDING_DIR / model/embedding."""
        shared = self.service.sentence_encoder()
        if shared is not None:
            return shared, shared.digest
        with self._lock:
            if self._encoder is None:
                from zsnli.runtime.embedding import SentenceEncoder
                from zsnli.serving.startup import resolved_embedding_dir

                enc = SentenceEncoder(resolved_embedding_dir(self.settings))
                self._encoder = (enc, enc.digest)
            return self._encoder

    def local_model(self, name: str, path: str):
        """The registered challenger ``name`` (the registry's pipeline arm on ``path``), loaded once per server."""
        with self._lock:
            if name not in self._models:
                self._models[name] = _engine().arms_adapter.build_challenger(name, path)
            return self._models[name]

    def calibration_sha256(self, calibrated: bool) -> str | None:
        """sha256 of the served ``calibration.json`` (None when the server runs uncalibrated)."""
        path = self.settings.resolved_calibration_path()
        if not calibrated or not path.is_file():
            return None
        if self._calibration is None or self._calibration[0] != str(path):
            self._calibration = (str(path), sha256_file(path))
        return self._calibration[1]

    def context(self):
        """The `runner.RunContext` of one bake-off (the served model only when it is loaded); called on the
        server's event loop, where the served-model arms' ``classify`` calls run."""
        engine = _engine()
        desc = self.service.describe()
        served = None
        if desc["status"] == "ok":
            served = engine.arms_adapter.ServedModel(
                self.service, asyncio.get_running_loop(), desc["model_sha256"],
                self.calibration_sha256(desc["calibrated"]), desc["scoring"])
        models = {name: (lambda n=name, p=path: self.local_model(n, p)) for name, path in self.bsettings.models}
        return engine.runner.RunContext(served, self.encoder, models, self.executor, self.bsettings.time_budget_s,
                                        sign_executor=self.io)


BACKGROUND_NICE = 10
"""Niceness added to the bake-off's worker threads (Linux: per thread), so reads and /classify come first."""


def _background_thread() -> None:
    """Worker-thread initializer: lower this thread's CPU priority by `BACKGROUND_NICE` where the OS allows."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except (AttributeError, OSError):  # not Linux, or not permitted: same priority as the rest
        pass


async def until_disconnect(request: Request, work: Awaitable[Any]) -> tuple[bool, Any]:
    """``(True, result)`` of ``work``, or ``(False, None)`` when the client left first: ``work`` is then
    cancelled and has finished cancelling when this returns (a bake-off's threads stop at their next step)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(wait_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return True, task.result()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return False, None
    finally:
        for t in (task, gone):
            if not t.done():
                t.cancel()


class _Bakeoffs:
    """One app's bake-off service: its settings, shared resources, store, signer and running count."""

    def __init__(self, service: Any, read_json: Callable[[Request], Awaitable[Any]],
                 bsettings: BakeoffSettings) -> None:
        self.service, self.read_json, self.bsettings = service, read_json, bsettings
        self.res = _Resources(service, bsettings)
        self.store = Store(bsettings.db_path)
        self.signer = Signer(bsettings.key_path)
        self.running = {"n": 0}
        self.challengers = [name for name, _ in bsettings.models]

    async def in_thread(self, fn, *args):
        """``fn(*args)`` on the io threads (store, key): never queued behind arm work."""
        return await asyncio.get_running_loop().run_in_executor(self.res.io, fn, *args)

    async def read_store(self, fn, *args):
        """``fn(*args)`` on the io threads, for a route that reads the store: a store that cannot be opened
        (``sqlite3.Error``, ``OSError``: an unusable ``ZSNLI_BAKEOFF_DB`` or ``ZSNLI_RUNS_DIR`` folder) raises the
        503 ``store`` `ApiError` naming it, never a 500."""
        try:
            return await self.in_thread(fn, *args)
        except (sqlite3.Error, OSError) as exc:
            logger.error("bake-off store %s cannot be read: %s", log_safe(self.bsettings.db_path), log_safe(exc))
            raise ApiError(ErrorType.STORE, f"the bake-off store cannot be read ({type(exc).__name__}: {exc}); "
                           f"retry later (ZSNLI_BAKEOFF_DB={self.bsettings.db_path})") from None

    async def get(self, bakeoff_id: str) -> dict:
        """The stored answer; raises the 404 `ApiError` for an unknown or malformed id, the 503 ``store`` one
        for a store that cannot be read (`read_store`)."""
        answer = await self.read_store(self.store.get, bakeoff_id) if ID_RE.match(bakeoff_id) else None
        if answer is None:
            raise _not_found(bakeoff_id)
        return answer

    async def run(self, request: Request) -> Any:
        """``POST /v1/bakeoff`` once admitted: read, validate, run under the concurrency limit, store.

        Raises ``ApiError``: 422 ``validation`` / ``label_too_long`` (a plan estimated over the time budget
        too: `check_budget`, before anything runs), 503 ``overloaded`` (too many running),
        ``receipt`` (cannot sign) or ``store`` (cannot store), 499 when the client left (nothing stored).
        """
        bs = self.bsettings
        payload = await self.read_json(request)
        engine = await asyncio.to_thread(_engine)  # the first import takes ~1 s: off the event loop
        try:
            task = engine.protocol.validate_request(
                payload, incumbents=engine.arms_adapter.INCUMBENTS, challengers=self.challengers,
                max_examples=bs.max_examples, max_labels=bs.max_labels, max_input_chars=bs.max_input_chars)
        except engine.protocol.BakeoffInputError as exc:
            raise ApiError(ErrorType.VALIDATION, str(exc), exc.field, errors=exc.problems) from None
        await self.check_labels(task, engine.arms_adapter.NLI_TEMPLATES)
        self.check_budget(task, engine)
        if self.running["n"] >= bs.max_concurrent:
            raise ApiError(ErrorType.OVERLOADED, f"{self.running['n']} bake-offs are running "
                           "(ZSNLI_BAKEOFF_MAX_CONCURRENT); retry later")
        try:  # a store that cannot be written fails now, not after every arm ran (transient: 503 + Retry-After)
            await self.in_thread(self.store.check_writable)
        except (sqlite3.Error, OSError) as exc:
            raise ApiError(ErrorType.STORE, f"the bake-off store cannot be written ({type(exc).__name__}: {exc}); "
                           f"nothing was run; retry later (ZSNLI_BAKEOFF_DB={bs.db_path})") from None
        self.running["n"] += 1
        try:
            answered, answer = await until_disconnect(
                request, engine.runner.run_bakeoff(task, self.res.context(), self.signer))
        except ReceiptError as exc:
            raise ApiError(ErrorType.RECEIPT, f"cannot sign the receipt: {exc}") from None
        finally:
            self.running["n"] -= 1  # at once, also when cancelled: the slot is free for the next bake-off
        if not answered:
            logger.info("bake-off cancelled: the client disconnected (nothing stored)")
            raise ApiError(ErrorType.CLIENT_GONE, "client disconnected: the bake-off was cancelled and nothing was "
                           "stored")
        retained = list(zip(task.texts, task.expected)) if task.retain else None
        try:
            await self.in_thread(self.store.save, answer, task.example_hashes, retained)
        except (sqlite3.Error, OSError) as exc:
            logger.error("bake-off %s not stored: %s", log_safe(answer["id"]), log_safe(exc))
            raise ApiError(ErrorType.STORE, f"the bake-off ran but could not be stored ({type(exc).__name__}: "
                           f"{exc}); retry later (ZSNLI_BAKEOFF_DB={bs.db_path})") from None
        return JSONResponse(answer)

    def check_budget(self, task, engine: SimpleNamespace) -> None:
        """The plan against ``ZSNLI_BAKEOFF_TIME_BUDGET_S`` before anything runs (`zsnli.compare.budget.check` on
        `zsnli.compare.service.runner.estimate`, at the served model's window): raises the 422 `ApiError`
        (field ``candidates``) naming the estimate, the costliest arms and which to leave out."""
        from zsnli.compare import budget

        status, health = self.service.health()
        window = int(health.get("max_length") or 0) if status == 200 else 0
        window = window or min(int(self.service.settings.max_length), budget.NLI_WINDOW)
        estimate = engine.runner.estimate(task, window, health.get("scoring") if status == 200 else None)
        try:
            budget.check(estimate, self.bsettings.time_budget_s, "ZSNLI_BAKEOFF_TIME_BUDGET_S",
                         keep=[task.challenger] if task.challenger else ())
        except budget.OverBudget as exc:
            raise ApiError(ErrorType.VALIDATION, str(exc), "candidates",
                           errors=[{"field": "candidates", "error": str(exc), "type": "validation"}]) from None

    async def check_labels(self, task, templates: dict[str, str]) -> None:
        """``/classify``'s label checks (`zsnli.serving.service.ZeroShotClassifier.check_labels`, the same code) on
        the label descriptions, bare and with the template of each served-model arm requested; raises the 422
        `ApiError` renamed to the bake-off field (``labels.<name>`` or ``examples[i].expected``)."""
        for template in dict.fromkeys([None, *(templates[a] for a in task.arms if a in templates)]):
            try:
                await self.service.check_labels(task.hypotheses, template)
            except ApiError as exc:
                if exc.status != 422:
                    raise
                m = re.match(r"labels\[(\d+)\]", exc.field or "")
                field = task.label_fields[int(m.group(1))] if m else exc.field
                if field == "labels" and not any(f.startswith("labels.") for f in task.label_fields):
                    field = "examples"
                message = re.sub(r"^labels(\[\d+\])?:?\s*", "", exc.message)
                if template not in (None, "{}"):
                    message += f" (with the template {template!r} of the served-model arms)"
                raise ApiError(exc.error_type, f"{field}: {message}", field,
                               errors=[{"field": field, "error": message, "type": exc.error_type.wire}]) from None


def add_bakeoff_routes(app: FastAPI, service: Any, *, read_json: Callable[[Request], Awaitable[Any]],
                       bsettings: BakeoffSettings | None = None) -> None:
    """Add the bake-off routes to ``app``: the ``extend(app, service)`` hook of `zsnli.serving.app.create_app`.

    service: the app's `zsnli.serving.service.ZeroShotClassifier` (its settings, ``describe``,
    ``classify`` for the served-model arms, and its admission: ``POST /v1/bakeoff`` is refused with 503
    while loading or draining and counts as work in flight during the drain, like ``/classify``).
    read_json: the app's body reader (``await read_json(request)`` -> parsed JSON; raises the app's
    400/413/415 errors). bsettings: default ``BakeoffSettings.from_env()``, which raises
    ``zsnli.config.SettingsError`` on a bad ``ZSNLI_BAKEOFF_*`` value (`zsnli.serve.main` parses it
    first and refuses to start, exit 3). Nothing is opened, created or imported beyond the light
    modules here: the store, the key and the arms come on first use (module docstring). Errors are
    raised as ``zsnli.errors.ApiError`` and answered by the app (its one error shape and ``Retry-After``).
    """
    bo = _Bakeoffs(service, read_json, bsettings or BakeoffSettings.from_env())
    app.state.bakeoff = {"settings": bo.bsettings, "store": bo.store, "signer": bo.signer, "running": bo.running}
    _add_api_routes(app, bo)
    _add_page_routes(app, bo)


def _add_api_routes(app: FastAPI, bo: _Bakeoffs) -> None:
    """The JSON routes: ``POST /v1/bakeoff``, ``GET /v1/bakeoffs[/{id}]``, ``GET /v1/receipts/public-key``."""

    @app.post("/v1/bakeoff", tags=["bake-off"], openapi_extra=_BAKEOFF_BODY, responses=_BAKEOFF_RESPONSES)
    async def post_bakeoff(request: Request) -> Any:
        """Rank the arms on the request's labelled examples; the answer is stored and signed (see docs/bakeoff.md).

        Every arm scores every example (few-shot arms never on an example they were fitted on); the
        answer holds the scorecard (accuracy, macro-F1, ECE, p50 latency per arm), the winner, the
        reliability bins, a signed receipt and the links of its page and badge. The example runs three
        fast arms in a few seconds."""
        return await bo.service.admitted(lambda: bo.run(request))

    @app.get("/v1/bakeoffs", tags=["bake-off"])
    async def list_bakeoffs() -> Any:
        """The latest 50 bake-offs, newest first."""
        return {"bakeoffs": await bo.read_store(bo.store.latest, 50)}

    @app.get("/v1/bakeoffs/{bakeoff_id}", tags=["bake-off"])
    async def get_bakeoff(bakeoff_id: str) -> Any:
        """A stored bake-off answer (as POST answered it); 404 for an unknown id."""
        return JSONResponse(await bo.get(bakeoff_id))

    @app.get("/v1/receipts/public-key", tags=["bake-off"], response_class=PlainTextResponse)
    async def public_key() -> Any:
        """The Ed25519 public key of the receipts (PEM); its key id is in the ``X-Key-Id`` header."""
        try:
            pem, kid = await bo.in_thread(lambda: (bo.signer.public_pem(), bo.signer.key_id()))
        except (ReceiptError, OSError) as exc:
            raise ApiError(ErrorType.RECEIPT, str(exc)) from None
        return PlainTextResponse(pem, media_type="application/x-pem-file", headers={"X-Key-Id": kid})


def _add_page_routes(app: FastAPI, bo: _Bakeoffs) -> None:
    """The pages: ``/bakeoff`` (form), ``/bakeoffs`` (latest), ``/bakeoffs/{id}`` (a result), its report file
    (``report.html``, as ``validate.py bakeoff`` writes one), its badge, assets."""
    public_url = bo.service.settings.public_url

    @app.get("/bakeoff", include_in_schema=False)
    async def form_page() -> Any:
        """The bake-off form: paste or upload labelled examples, pick the arms, run."""
        engine = await asyncio.to_thread(_engine)
        return HTMLResponse(engine.page.form_page(engine.arms_adapter.INCUMBENTS, bo.challengers, bo.bsettings))

    @app.get("/bakeoff/static/{name}", include_in_schema=False)
    async def static(name: str) -> Any:
        found = (await asyncio.to_thread(_engine)).page.static_asset(name)
        if found is None:
            raise ApiError(ErrorType.NOT_FOUND, f"no static asset {name!r}", "name")
        return Response(found[0], media_type=found[1])

    @app.get("/bakeoffs", include_in_schema=False)
    async def list_page() -> Any:
        """The latest bake-offs (a page)."""
        return HTMLResponse((await asyncio.to_thread(_engine)).page.list_page(await bo.read_store(bo.store.latest, 50)))

    @app.get("/bakeoffs/{bakeoff_id}", include_in_schema=False)
    async def result_page(bakeoff_id: str) -> Any:
        """A stored bake-off: scorecard, winner, reliability diagrams, receipt, badge (a page)."""
        answer = await bo.get(bakeoff_id)
        return HTMLResponse((await asyncio.to_thread(_engine)).page.result_page(answer, public_url))

    @app.get("/bakeoffs/{bakeoff_id}/report.html", include_in_schema=False)
    async def report_file(bakeoff_id: str) -> Any:
        """A stored bake-off as one self-contained HTML report (`zsnli.compare.render.render_html`)."""
        answer = await bo.get(bakeoff_id)
        return HTMLResponse((await asyncio.to_thread(_engine)).page.report_file(answer))

    @app.get("/bakeoffs/{bakeoff_id}/badge.svg", include_in_schema=False)
    async def badge(bakeoff_id: str) -> Any:
        """The SVG badge of a bake-off (its winner)."""
        answer = await bo.get(bakeoff_id)
        return Response(bakeoff_badge(answer), media_type="image/svg+xml", headers={"Cache-Control": "no-cache"})
