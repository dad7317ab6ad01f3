"""HTTP layer: FastAPI app with ``POST /classify`` and ``GET /health``.

Only HTTP concerns live here: request/response models, limits, the error
shape, startup and shutdown. Tokenising, batching and scoring are delegated
to `zsnli.scoring` and `zsnli.batching`.

Every error answer is JSON ``{"error": str, "field": str | null,
"error_type": str}`` (422s also carry ``"errors"``, one entry per problem).
Status codes: 400 malformed body (invalid JSON/UTF-8, empty body), 413 body
over ``ZSNLI_MAX_BODY_BYTES``, 415 non-JSON content type, 422 schema
violations, 503 loading / queue full / timed out (with ``Retry-After``),
500 inference failure or non-finite logits (never NaN in a body).

Unknown extra fields in a request are ignored (so a line of the examples
JSONL, with ``dataset`` and ``label``, can be posted as it is).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import os
import signal
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, Union

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from . import __version__
from .batching import BatchError, Batcher, BatcherClosed, QueueFull
from .config import Settings, SettingsError, unknown_settings
from .embedding import SentenceEncoder, default_embedding_dir, embedding_digest
from .manifest import ManifestError, model_dir_digest, hash_model_dir, verify_model_dir
from .onnx_backend import OnnxUnavailableError, ensure_cache_dir, require_onnx
from .scoring import (
    ModelConfigError,
    NliModel,
    ScoringConfig,
    ScoringConfigError,
    default_token_budget,
    label_indices,
    label_probabilities,
    load_scoring_config,
    multi_label_probabilities,
    scores_from_logits,
)

logger = logging.getLogger("zsnli")

# A hypothesis longer than this many characters per window token is rejected
# (label_too_long) before it is tokenised: no tokenizer packs that much into a token.
HYPOTHESIS_CHARS_PER_TOKEN = 20

# --------------------------------------------------------------------------- schema

FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]
RequestId = Union[StrictStr, StrictInt, FiniteFloat, None]

_EXAMPLE_REQUEST = {
    "id": "doc-1",
    "text": "The striker scored twice as the home side won the derby 3-1.",
    "labels": ["This text is about sport.", "This text is about business.", "This text is about science."],
}
_EXAMPLE_TEMPLATE = {
    "id": 7,
    "text": "Shares fell 4% after the bank cut its profit forecast.",
    "candidate_labels": ["sport", "business", "science"],
    "hypothesis_template": "This text is about {}.",
}
_EXAMPLE_MULTI = {
    "id": "doc-3",
    "text": "The new phone's chip was designed by the football club's sponsor.",
    "labels": ["technology", "sport", "politics"],
    "hypothesis_template": "This text is about {}.",
    "multi_label": True,
}


class ClassifyRequest(BaseModel):
    """One document and its candidate labels."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={"examples": [_EXAMPLE_REQUEST, _EXAMPLE_TEMPLATE, _EXAMPLE_MULTI]},
    )

    id: RequestId = Field(None, description="Echoed back as given (string or number).")
    text: StrictStr = Field(
        description="The document (NLI premise). May be empty. Cut to ZSNLI_MAX_TEXT_CHARS characters, "
        "then truncated to the model window on the text side only."
    )
    labels: list[StrictStr] = Field(
        min_length=1,
        description="Label descriptions (NLI hypotheses), used as given unless hypothesis_template is set. "
        "`candidate_labels` is accepted as an alias. At most ZSNLI_MAX_LABELS; none may be empty "
        "or too long to fit the model window alone.",
    )
    hypothesis_template: StrictStr | None = Field(
        None, description="Optional template with exactly one `{}` slot and no other braces, e.g. "
        "`This text is about {}.`; the label replaces the slot literally (not a Python format string)."
    )
    multi_label: StrictBool = Field(
        False,
        description="Score each label independently (softmax over entailment vs contradiction); "
        "the probabilities then need not sum to 1.",
    )

    @field_validator("labels")
    @classmethod
    def _no_blank_labels(cls, labels: list[str]) -> list[str]:
        for i, label in enumerate(labels):
            if not label.strip():
                raise _LabelError(i, "label is empty or whitespace only")
        return labels

    @field_validator("hypothesis_template")
    @classmethod
    def _template_has_slot(cls, template: str | None) -> str | None:
        if template is None:
            return None
        if template.count("{}") != 1 or template.replace("{}", "", 1).count("{") or template.replace("{}", "", 1).count("}"):
            raise ValueError(TEMPLATE_RULE)
        return template


TEMPLATE_RULE = ("hypothesis_template must contain exactly one '{}' slot and no other '{' or '}' "
                 "(e.g. 'This text is about {}.'); the label replaces the slot literally")


def fill_template(template: str | None, label: str) -> str:
    """The hypothesis for ``label``: the template's single ``{}`` replaced literally (never ``str.format``)."""
    return label if template is None else template.replace("{}", label, 1)


class _LabelError(ValueError):
    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


class ClassifyResponse(BaseModel):
    """One probability per label, in the request's label order."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"id": "doc-1", "probabilities": [0.93, 0.04, 0.03]}]}
    )
    id: RequestId = None
    probabilities: list[float]


class ErrorResponse(BaseModel):
    """The one error shape."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"error": "labels: List should have at least 1 item after validation, not 0",
                          "field": "labels", "error_type": "validation"}]
        }
    )
    error: str
    field: str | None = None
    error_type: str


class HealthResponse(BaseModel):
    """Service state: ``ok`` (ready), ``loading``, ``draining`` (shutting down) or ``error`` (with ``reason``)."""

    model_config = ConfigDict(extra="allow")
    status: str
    model: str | None = None
    model_sha256: str | None = None
    backend: str | None = Field(None, description="torch, onnx-fp32 or onnx-int8 (ZSNLI_BACKEND).")
    device: str | None = None
    dtype: str | None = None
    onnx_sha256: str | None = Field(None, description="sha256 of the ONNX file served (ONNX backends only).")
    reason: str | None = None


@dataclass
class _Drain:
    """Shutdown bookkeeping: requests in flight, the drain deadline, how many were cut off."""

    draining: bool = False
    inflight: int = 0
    cut_off: int = 0
    cutoff: asyncio.Event = field(default_factory=asyncio.Event)


class StartupRefused(RuntimeError):
    """A preflight check failed; the server does not start (uvicorn exits non-zero)."""


class ApiError(Exception):
    """An error answered as ``{"error", "field", "error_type"}`` with ``status``."""

    def __init__(self, status: int, message: str, error_type: str, field: str | None = None,
                 headers: dict[str, str] | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.field = field
        self.headers = headers
        self.extra = extra or {}

    def response(self) -> JSONResponse:
        body = {"error": self.message, "field": self.field, "error_type": self.error_type, **self.extra}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


# --------------------------------------------------------------------------- state


@dataclass
class ServiceState:
    """What the running service knows; replaced wholesale at startup."""

    status: str = "loading"  # loading | ok | error
    reason: str | None = None
    model: NliModel | None = None
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    calibrated: bool = False
    verified: bool = False  # model files matched the training manifest
    encoder: SentenceEncoder | None = None
    batcher: Batcher | None = None
    model_name: str | None = None
    model_sha256: str | None = None
    startup_seconds: float | None = None
    exit_code: int = 0


ModelLoader = Callable[[Settings], NliModel]


def _default_loader(settings: Settings) -> NliModel:
    """``settings.backend``: torch -> ``NliModel.load``; onnx-fp32 / onnx-int8 -> ``OnnxNliModel.load``
    (ORT intra-op threads = ``ZSNLI_TORCH_THREADS`` when set)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if settings.backend.startswith("onnx-"):
        from .onnx_backend import OnnxNliModel

        return OnnxNliModel.load(settings.model_dir, variant=settings.backend[len("onnx-"):],
                                 threads=settings.torch_threads, cache_dir=settings.onnx_cache_dir,
                                 max_length=settings.max_length)
    return NliModel.load(settings.model_dir, device=settings.device, dtype=settings.dtype, max_length=settings.max_length)


def _one_line(exc: BaseException) -> str:
    text = f"{exc}".strip() or type(exc).__name__
    return " ".join(text.split())


def preflight(settings: Settings) -> tuple[str, ScoringConfig, bool, bool]:
    """The fast startup checks, before the server listens: refuse early and loudly.

    Checks the model directory and its config.json (an entailment and a
    contradiction label in ``id2label``), that onnxruntime and onnx are
    installed and the ONNX cache directory is writable for an ONNX backend, verifies every file against the
    training manifest when one exists (unless ``skip_manifest_check``), and
    reads calibration.json. An explicitly set ``ZSNLI_MANIFEST_PATH`` or
    ``ZSNLI_CALIBRATION_PATH`` that does not exist is a refusal; only the
    default lookup falls back (unverified / uncalibrated, with a warning).
    Returns ``(model_sha256, scoring_config, calibrated, verified)``.
    Raises ``ManifestError``, ``ModelConfigError``, ``ScoringConfigError`` or
    ``OnnxUnavailableError`` with a one-line reason.
    """
    if settings.backend.startswith("onnx-"):
        require_onnx()
        ensure_cache_dir(settings.onnx_cache_dir)
    model_dir = Path(settings.model_dir)
    if not model_dir.is_dir():
        raise ModelConfigError(f"model directory not found: {model_dir} (set ZSNLI_MODEL_DIR)")
    config_path = model_dir / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ModelConfigError(f"no config.json in {model_dir}") from exc
    except (OSError, ValueError) as exc:
        raise ModelConfigError(f"config.json unreadable: {_one_line(exc)}") from exc
    label_indices(config.get("id2label") or {})
    manifest_path = settings.resolved_manifest_path()
    if settings.manifest_path and not settings.skip_manifest_check and not manifest_path.is_file():
        raise ManifestError(f"ZSNLI_MANIFEST_PATH={settings.manifest_path} does not exist: "
                            "refusing to serve unverified (unset it to use the default lookup)")
    if settings.calibration_path and not Path(settings.calibration_path).is_file():
        raise ScoringConfigError(f"ZSNLI_CALIBRATION_PATH={settings.calibration_path} does not exist: "
                                 "refusing to serve uncalibrated (unset it to use the default lookup)")
    verified = False
    if settings.skip_manifest_check:
        logger.warning("manifest check SKIPPED (ZSNLI_SKIP_MANIFEST_CHECK): development only")
        digest = model_dir_digest(hash_model_dir(model_dir))
    elif manifest_path.exists():
        digest = verify_model_dir(model_dir, manifest_path)
        verified = True
        logger.info("model files match %s", manifest_path)
    else:
        logger.warning("no training manifest at %s: serving %s unverified", manifest_path, model_dir)
        digest = model_dir_digest(hash_model_dir(model_dir))
    calibration_path = settings.resolved_calibration_path()
    scoring, calibrated = load_scoring_config(calibration_path)
    if calibrated:
        logger.info("scoring from %s: %s", calibration_path, scoring.to_dict())
    else:
        logger.warning("no calibration at %s: using the entailment logit and T = 1", calibration_path)
    if scoring.embedding_weight != 0:
        embedding_dir = resolved_embedding_dir(settings)
        found = embedding_digest(embedding_dir)
        if found != scoring.embedding_sha256:
            raise ManifestError(f"embedding model {embedding_dir} has digest {found[:12]}, "
                                f"calibration was fitted with {str(scoring.embedding_sha256)[:12]}")
    return digest, scoring, calibrated, verified


def resolved_embedding_dir(settings: Settings) -> Path:
    """The sentence-embedding model directory: ``ZSNLI_EMBEDDING_DIR``, else ``<model dir>/embedding``."""
    if settings.embedding_dir:
        return Path(settings.embedding_dir)
    return default_embedding_dir(settings.model_dir)


# --------------------------------------------------------------------------- app


def create_app(settings: Settings | None = None, *, loader: ModelLoader | None = None,
               shutdown_hook: Callable[[], None] | None = None) -> FastAPI:
    """Build the FastAPI app.

    settings: default ``Settings.from_env()``.
    loader: ``f(settings) -> NliModel`` (tests inject tiny or faulty models);
        default ``NliModel.load`` on ``settings.model_dir``.
    shutdown_hook: called when the background load fails and
        ``exit_on_startup_error`` is set (``server.py`` stops uvicorn with exit
        code 1); default sends SIGTERM to this process.

    Startup: ``preflight`` runs in the lifespan before the socket opens
    (failure: uvicorn exits non-zero); loading weights and one warm-up
    forward run in a background task while ``/health`` answers 503 loading.
    """
    settings = settings or Settings.from_env()
    loader = loader or _default_loader
    state_box: dict[str, ServiceState] = {"state": ServiceState()}
    drain = _Drain()
    tokenize_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="zsnli-tokenize")
    embed_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="zsnli-embed")

    def state() -> ServiceState:
        return state_box["state"]

    async def load_in_background(digest: str, scoring: ScoringConfig, calibrated: bool, t0: float) -> None:
        loop = asyncio.get_running_loop()
        st = state()
        batcher: Batcher | None = None
        try:
            model = await loop.run_in_executor(tokenize_pool, loader, settings)
            encoder = None
            if scoring.embedding_weight != 0:
                encoder = await loop.run_in_executor(
                    tokenize_pool, lambda: SentenceEncoder(resolved_embedding_dir(settings), device=str(model.device)))
                await loop.run_in_executor(embed_pool, encoder.cosine, "Warm-up text.", ["A label."])
            batcher = Batcher(
                model.logits,
                token_budget=settings.token_budget or default_token_budget(model.device),
                max_wait_s=settings.max_batch_wait_ms / 1000.0,
                capacity_pairs=settings.queue_capacity_pairs,
                num_outputs=model.num_labels,
            )
            await batcher.start()
            warm = await loop.run_in_executor(
                tokenize_pool, model.encode, ["Warm-up premise."], ["This text is about warming up."]
            )
            logits = await batcher.submit(warm).result()
            if not np.all(np.isfinite(logits)):
                raise ModelConfigError("warm-up forward produced non-finite logits")
        except asyncio.CancelledError:
            if batcher is not None:
                await batcher.close()
            raise
        except Exception as exc:  # noqa: BLE001 - any load failure is reported, one line
            if batcher is not None:
                await batcher.close()
            st.status, st.reason = "error", f"model load failed: {type(exc).__name__}: {_one_line(exc)}"
            logger.error("refusing to serve: %s", st.reason)
            if settings.exit_on_startup_error:
                st.exit_code = 1
                hook = getattr(app.state, "shutdown_hook", None) or shutdown_hook
                if hook is not None:
                    hook()
                else:
                    os.kill(os.getpid(), signal.SIGTERM)
            return
        st.model, st.batcher, st.scoring, st.calibrated, st.encoder = model, batcher, scoring, calibrated, encoder
        st.model_name = str(Path(settings.model_dir).resolve().name)
        st.model_sha256 = digest
        st.startup_seconds = time.monotonic() - t0
        st.status = "ok"
        try:
            import psutil

            since_start = f" ({time.time() - psutil.Process().create_time():.2f} s since process start)"
        except Exception:  # noqa: BLE001 - psutil is optional here
            since_start = ""
        logger.info(
            "ready in %.2f s%s: model=%s sha256=%s backend=%s%s device=%s dtype=%s window=%d token_budget=%d "
            "entail=%d contra=%d",
            st.startup_seconds, since_start, settings.model_dir, digest, model.backend,
            f" onnx={model.onnx_path} onnx_sha256={model.onnx_sha256}" if getattr(model, "onnx_sha256", None) else "",
            model.device, _dtype_name(model.dtype), model.max_length, batcher.token_budget,
            model.entail_idx, model.contra_idx,
        )

    def begin_drain() -> None:
        """Shutdown began (SIGTERM/SIGINT): admit no new work, and answer requests still in
        flight with 503 shortly before ZSNLI_DRAIN_TIMEOUT_S, when uvicorn would cancel them."""
        if drain.draining:
            return
        drain.draining = True
        timeout = settings.drain_timeout_s
        logger.info("draining: %d request(s) in flight, no new work admitted", drain.inflight)
        if timeout > 0:  # 0: uvicorn waits for in-flight requests without a limit
            cutoff = max(0.0, timeout - min(1.0, timeout / 4))
            asyncio.get_running_loop().call_later(cutoff, cut_off)

    def cut_off() -> None:
        if drain.inflight:
            logger.warning("drain deadline: answering %d in-flight request(s) with 503", drain.inflight)
        drain.cutoff.set()

    def request_drain() -> None:
        """Thread- and signal-safe ``begin_drain`` (what ``serve`` calls from its signal handler)."""
        loop = getattr(app.state, "loop", None)
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(begin_drain)

    async def until_cutoff(work) -> Any:
        """Run a request's work; at the drain deadline cancel it (its queued pairs are dropped) -> 503."""
        task = asyncio.ensure_future(work)
        cut = asyncio.ensure_future(drain.cutoff.wait())
        try:
            done, _ = await asyncio.wait({task, cut}, return_when=asyncio.FIRST_COMPLETED)
            if task not in done:
                task.cancel()
                try:
                    return await task  # finished after all (cancel came too late)
                except asyncio.CancelledError:
                    pass
                drain.cut_off += 1
                raise ApiError(503, "server shutting down: not answered before the drain deadline; retry",
                               "unavailable", headers={"Retry-After": str(settings.retry_after_s)})
            return task.result()
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            cut.cancel()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        t0 = time.monotonic()
        app.state.loop = asyncio.get_running_loop()
        _configure_logging(settings.log_level)
        logger.info("zsnli %s starting; settings:", __version__)
        for line in settings.describe():
            logger.info("  %s", line)
        for warning in unknown_settings():
            logger.warning("%s", warning)
        if settings.torch_threads:
            import torch

            torch.set_num_threads(settings.torch_threads)
        try:
            digest, scoring, calibrated, verified = preflight(settings)
        except (ManifestError, ModelConfigError, ScoringConfigError, OnnxUnavailableError, OSError) as exc:
            reason = _one_line(exc)
            state_box["state"] = ServiceState(status="error", reason=reason, exit_code=1)
            logger.error("refusing to start: %s", reason)
            raise StartupRefused(reason) from None
        state().verified = verified
        loading = asyncio.create_task(load_in_background(digest, scoring, calibrated, t0), name="zsnli-load")
        app.state.loading_task = loading
        try:
            yield
        finally:
            if not loading.done():
                loading.cancel()
                try:
                    await loading
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass
            st = state()
            if st.batcher is not None:
                await st.batcher.close()
            tokenize_pool.shutdown(wait=False, cancel_futures=True)
            embed_pool.shutdown(wait=False, cancel_futures=True)
            if drain.cut_off:
                logger.warning("stopped: %d request(s) cut off at the drain deadline (answered 503)", drain.cut_off)
            else:
                logger.info("stopped")

    app = FastAPI(
        title="zsnli",
        version=__version__,
        description="Zero-shot text classification served from an NLI cross-encoder. "
        "POST a document and its label descriptions; get one probability per label.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.service = state
    app.state.begin_drain = begin_drain
    app.state.request_drain = request_drain
    app.state.drain = drain

    # ----------------------------------------------------------- error handlers

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_response(exc.errors(), strip_body=True).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kinds = {404: "not_found", 405: "method_not_allowed"}
        return JSONResponse(
            {"error": str(exc.detail), "field": None, "error_type": kinds.get(exc.status_code, "http_error")},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:  # pragma: no cover - last resort
        logger.exception("unhandled error")
        return JSONResponse({"error": f"internal error: {type(exc).__name__}", "field": None,
                             "error_type": "internal"}, status_code=500)

    # ----------------------------------------------------------- routes

    @app.get(
        "/health",
        response_model=HealthResponse,
        response_model_exclude_none=True,
        responses={503: {"model": HealthResponse, "description": "Loading, or failed to start (`reason`)."}},
    )
    async def health() -> Any:
        """200 once the model is loaded and warmed up; 503 ``loading`` or ``error`` before that."""
        st = state()
        if drain.draining:
            return JSONResponse({"status": "draining"}, status_code=503,
                                headers={"Retry-After": str(settings.retry_after_s)})
        if st.status != "ok" or st.model is None:
            body = {"status": st.status}
            if st.reason:
                body["reason"] = st.reason
            return JSONResponse(body, status_code=503, headers={"Retry-After": str(settings.retry_after_s)})
        body = {
            "status": "ok",
            "model": st.model_name,
            "model_sha256": st.model_sha256,
            "backend": st.model.backend,
            "device": st.model.device,
            "dtype": _dtype_name(st.model.dtype),
            "architecture": (getattr(st.model.config, "architectures", None) or [None])[0],
            "max_length": st.model.max_length,
            "scoring": st.scoring.to_dict(),
            "calibrated": st.calibrated,
            "verified": st.verified,
        }
        if getattr(st.model, "onnx_sha256", None):
            body["onnx_sha256"] = st.model.onnx_sha256  # the exact ONNX file the session runs
        return body

    @app.head("/health", include_in_schema=False)
    async def health_head() -> Any:
        """HEAD /health: the status code (200 / 503) of GET, no body."""
        return await health()

    error_responses = {
        400: {"model": ErrorResponse, "description": "Malformed body: invalid JSON or UTF-8, empty body."},
        413: {"model": ErrorResponse, "description": "Body over ZSNLI_MAX_BODY_BYTES."},
        415: {"model": ErrorResponse, "description": "Content type is not JSON."},
        422: {"model": ErrorResponse, "description": "A field is missing or invalid (named in `field`)."},
        500: {"model": ErrorResponse, "description": "Inference failed for this request (batch fault, non-finite logits)."},
        503: {"model": ErrorResponse, "description": "Loading, queue full or timed out; retry after `Retry-After` s."},
    }
    request_schema = ClassifyRequest.model_json_schema()

    @app.post(
        "/classify",
        response_model=ClassifyResponse,
        responses=error_responses,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": request_schema,
                        "examples": {
                            "labels": {"summary": "label descriptions", "value": _EXAMPLE_REQUEST},
                            "template": {"summary": "candidate_labels + hypothesis_template", "value": _EXAMPLE_TEMPLATE},
                            "multi_label": {"summary": "independent labels", "value": _EXAMPLE_MULTI},
                        },
                    }
                },
            }
        },
    )
    async def classify(request: Request) -> Any:
        """Probabilities of each label description for one document (see DESIGN.md)."""
        st = state()
        if drain.draining:
            raise ApiError(503, "server shutting down: no new requests accepted; retry", "unavailable",
                           headers={"Retry-After": str(settings.retry_after_s)})
        if st.status != "ok" or st.batcher is None or st.model is None:
            raise ApiError(503, "model is loading" if st.status == "loading" else f"service unavailable: {st.reason}",
                           "loading" if st.status == "loading" else "unavailable",
                           headers={"Retry-After": str(settings.retry_after_s)})
        drain.inflight += 1
        try:
            return await until_cutoff(_handle(st, request))
        finally:
            drain.inflight -= 1

    async def _handle(st: ServiceState, request: Request) -> Any:
        payload = await _read_json(request, settings.max_body_bytes)
        req, used_alias = _validate(payload)
        if len(req.labels) > settings.max_labels:
            raise ApiError(422, f"too many labels: {len(req.labels)} > {settings.max_labels}", "validation",
                           "candidate_labels" if used_alias else "labels")
        return await _classify(st, req, used_alias, request)

    async def _classify(st: ServiceState, req: ClassifyRequest, used_alias: bool, request: Request) -> Any:
        model, batcher = st.model, st.batcher
        assert model is not None and batcher is not None
        labels_field = "candidate_labels" if used_alias else "labels"
        text = clean_text(req.text)[: settings.max_text_chars]
        template = clean_text(req.hypothesis_template) if req.hypothesis_template is not None else None
        labels = [clean_text(lb) for lb in req.labels]
        # Cheap character cap before anything is built or tokenised: no token covers
        # HYPOTHESIS_CHARS_PER_TOKEN characters, so a longer hypothesis cannot fit the window.
        char_cap = HYPOTHESIS_CHARS_PER_TOKEN * model.max_length
        extra = len(template) - 2 if template is not None else 0
        if extra > char_cap:
            raise ApiError(422, f"hypothesis_template is {extra} characters without its slot (limit {char_cap}): "
                           "it cannot fit the model window", "label_too_long", "hypothesis_template")
        for i, lb in enumerate(labels):
            if len(lb) + extra > char_cap:
                raise ApiError(422, f"label {i} is {len(lb) + extra} characters with the template (limit {char_cap}): "
                               f"it cannot fit the model window ({model.max_length} tokens); labels are never cut",
                               "label_too_long", f"{labels_field}[{i}]")
        hyps = [fill_template(template, lb) for lb in labels]
        slot = {h: i for i, h in enumerate(dict.fromkeys(hyps))}
        unique = list(slot)
        where = [slot[h] for h in hyps]
        content_free = st.scoring.content_free_premise if not req.multi_label else None
        n_pairs = len(unique) * (2 if content_free is not None else 1)
        retry = {"Retry-After": str(settings.retry_after_s)}
        try:
            with batcher.admit(n_pairs):
                loop = asyncio.get_running_loop()
                bare = list(dict.fromkeys(labels)) if template is not None else None
                encoded, empty, too_long = await loop.run_in_executor(
                    tokenize_pool, _prepare, model, text, unique, content_free, bare
                )
                if empty is not None:
                    i = labels.index(bare[empty]) if bare is not None else hyps.index(unique[empty])
                    raise ApiError(422, f"{labels_field}[{i}]: label is empty after normalisation "
                                   "(it has no tokens: only invisible, control or whitespace characters)",
                                   "validation", f"{labels_field}[{i}]")
                if too_long is not None:
                    i = hyps.index(unique[too_long])
                    raise ApiError(
                        422,
                        f"label {i} does not fit the model window ({model.max_length} tokens with the text): "
                        "shorten it; labels are never cut",
                        "label_too_long",
                        f"{labels_field}[{i}]",
                    )
                cosine_future = None
                if st.encoder is not None and not req.multi_label:
                    cosine_future = loop.run_in_executor(embed_pool, st.encoder.cosine, text, unique)
                try:
                    logits = await _await_job(batcher, encoded, request, settings.request_timeout_s)
                    cosine = await cosine_future if cosine_future is not None else None
                finally:
                    # A request that gives up (timeout, disconnect, failed batch) drops its queued
                    # embedding job too, so abandoned work does not pile up behind a burst.
                    if cosine_future is not None and not cosine_future.done():
                        cosine_future.cancel()
        except QueueFull as exc:
            raise ApiError(503, f"overloaded: {exc}; retry later", "overloaded", headers=retry) from None
        except asyncio.TimeoutError:
            raise ApiError(503, f"timed out after {settings.request_timeout_s:g} s in the queue; retry later",
                           "timeout", headers=retry) from None
        except BatchError as exc:
            raise ApiError(500, str(exc), "inference") from None
        except BatcherClosed as exc:
            raise ApiError(503, str(exc), "unavailable", headers=retry) from None
        except _ClientGone:
            return JSONResponse({"error": "client disconnected", "field": None, "error_type": "disconnected"},
                                status_code=499)

        if not np.all(np.isfinite(logits)):
            logger.error("non-finite logits for request id=%r", req.id)
            raise ApiError(500, "the model produced non-finite logits for this request", "non_finite")
        k = len(unique)
        try:
            if req.multi_label:
                probs_u = multi_label_probabilities(logits[:k], model.entail_idx, model.contra_idx)
            else:
                scores = scores_from_logits(logits, st.scoring.rule, model.entail_idx, model.contra_idx)
                probs_u = _request_probabilities(scores, k, len(hyps), where, st.scoring,
                                                 content_free is not None, cosine)
        except ValueError as exc:
            raise ApiError(500, f"scoring failed: {exc}", "non_finite") from None
        probs = probs_u[where] if req.multi_label else probs_u
        if not np.all(np.isfinite(probs)):
            raise ApiError(500, "scoring produced non-finite probabilities", "non_finite")
        rid = clean_text(req.id) if isinstance(req.id, str) else req.id
        return {"id": rid, "probabilities": [float(p) for p in probs]}

    return app


def _request_probabilities(scores: np.ndarray, k: int, n_labels: int, where: list[int],
                           config: ScoringConfig, with_cf: bool, cosine: np.ndarray | None = None) -> np.ndarray:
    """Softmax over the request's labels (duplicates included, K = number of labels sent)."""
    s = scores[:k][where]
    cf = scores[k:2 * k][where] if with_cf else None
    cos = cosine[where] if cosine is not None else None
    return label_probabilities(s, config, cf, cos)


def _prepare(model: NliModel, text: str, hypotheses: list[str], content_free: str | None,
             bare_labels: list[str] | None = None):
    """Tokeniser thread: check labels, then encode all pairs.

    Returns ``(encoded, None, None)``, ``(None, i, None)`` when label ``i`` has no
    tokens (of ``bare_labels`` when a template was used, else of ``hypotheses``),
    or ``(None, None, i)`` when hypothesis ``i`` does not fit the window.
    """
    limit = model.max_hypothesis_tokens()
    lengths = model.hypothesis_lengths(hypotheses)
    bare_lengths = model.hypothesis_lengths(bare_labels) if bare_labels is not None else lengths
    for i, n in enumerate(bare_lengths):
        if n == 0:
            return None, i, None
    for i, n in enumerate(lengths):
        if n > limit:
            return None, None, i
    premises = [text] * len(hypotheses)
    hyps = list(hypotheses)
    if content_free is not None:
        premises += [content_free] * len(hypotheses)
        hyps += list(hypotheses)
    return model.encode(premises, hyps), None, None


class _ClientGone(Exception):
    pass


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return


async def _await_job(batcher: Batcher, encoded, request: Request, timeout: float) -> np.ndarray:
    """Submit and wait; drop the job's queued pairs if the client leaves or the timeout passes."""
    job = batcher.submit(encoded)
    result = asyncio.ensure_future(job.result())
    gone = asyncio.ensure_future(_wait_disconnect(request))
    try:
        done, _ = await asyncio.wait({result, gone}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if result in done:
            return result.result()
        batcher.cancel(job)
        if gone in done:
            logger.info("client disconnected: dropped its queued pairs")
            raise _ClientGone()
        raise asyncio.TimeoutError()
    except asyncio.CancelledError:
        batcher.cancel(job)
        raise
    finally:
        for t in (result, gone):
            if not t.done():
                t.cancel()
        if result.done() and not result.cancelled():
            result.exception()  # mark retrieved


# --------------------------------------------------------------------------- body parsing

_JSON_TYPES = ("application/json",)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


async def _read_json(request: Request, limit: int) -> Any:
    """Read and parse the body: 415 / 413 / 400 on a wrong type, size, or malformed JSON."""
    ctype = request.headers.get("content-type")
    if ctype is not None:
        media = ctype.split(";", 1)[0].strip().lower()
        if media and media not in _JSON_TYPES and not media.endswith("+json"):
            raise ApiError(415, f"content type must be application/json, got {media!r} "
                           "(curl: add -H 'Content-Type: application/json')",
                           "unsupported_media_type", "content-type")
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise ApiError(413, f"body is {int(length)} bytes; the limit is {limit}", "payload_too_large", "body")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"body exceeds the limit of {limit} bytes", "payload_too_large", "body")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(400, "client disconnected while sending the body", "disconnected", "body") from None
    raw = b"".join(chunks)
    if not raw.strip():
        raise ApiError(400, "empty body: send a JSON object with text and labels", "invalid_json", "body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"body is not valid UTF-8 (byte {exc.start})", "invalid_json", "body") from None
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                       "invalid_json", "body") from None
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"invalid JSON: {_one_line(exc)[:200]}", "invalid_json", "body") from None


def _validate(payload: Any) -> tuple[ClassifyRequest, bool]:
    """Validate a parsed body; returns (request, used_candidate_labels). Raises ApiError 422."""
    if not isinstance(payload, dict):
        raise ApiError(422, f"body must be a JSON object, got {_json_type(payload)}", "validation", "body")
    used_alias = False
    if "candidate_labels" in payload:
        if "labels" in payload:
            raise ApiError(422, "give either labels or candidate_labels, not both", "validation", "candidate_labels")
        payload = dict(payload)
        payload["labels"] = payload.pop("candidate_labels")
        used_alias = True
    try:
        return ClassifyRequest.model_validate(payload), used_alias
    except ValidationError as exc:
        err = _validation_response(exc.errors(), strip_body=False)
        if used_alias:  # name the field the client sent, at the top and in every item of errors[]

            def aliased(text: str | None) -> str | None:
                if text and text.startswith("labels"):
                    return "candidate_labels" + text[len("labels"):]
                return text

            if err.field and err.field.startswith("labels"):
                err.field, err.message = aliased(err.field), aliased(err.message)
            for item in err.extra.get("errors", []):
                if "field" in item:
                    item["field"] = aliased(item["field"])
        raise err from None


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


def _field_name(loc: tuple) -> str | None:
    """``("labels", 3)`` -> ``labels[3]``; union member tags (``id.str``) are dropped."""
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        elif not name:
            name = str(part)
    return name or None


_UNION_MESSAGES = {"id": "must be a string, a number or null"}


def _validation_response(errors: list[dict], strip_body: bool) -> ApiError:
    items: list[dict] = []
    seen: set[str] = set()
    for e in errors:
        loc = tuple(e.get("loc", ()))
        if strip_body and loc[:1] == ("body",):
            loc = loc[1:]
        ctx_err = (e.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _LabelError):
            loc = loc + (ctx_err.index,)
            msg = str(ctx_err)
        else:
            msg = str(e.get("msg", "invalid value"))
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, "):]
        if e.get("type") == "missing":
            msg = "field required"
        field = _field_name(loc) or "body"
        msg = _UNION_MESSAGES.get(field, msg)
        if field in seen:
            continue
        seen.add(field)
        items.append({"field": field, "error": msg, "type": e.get("type")})
    if not items:
        items = [{"field": "body", "error": "invalid request", "type": "invalid"}]
    first = items[0]
    return ApiError(422, f"{first['field']}: {first['error']}", "validation", first["field"],
                    extra={"errors": items})


def clean_text(s: str) -> str:
    """Make a JSON string safe for the tokenizer: lone surrogates become U+FFFD."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _configure_logging(level: str) -> None:
    root = logging.getLogger("zsnli")
    root.setLevel(level.upper())
    if not root.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)


def _quiet_startup_refusal(app: FastAPI):
    """ASGI wrapper: a ``StartupRefused`` is reported by its one-line log, not a traceback.

    Starlette puts the formatted traceback in ``lifespan.startup.failed``; uvicorn logs it.
    """

    async def wrapped(scope, receive, send):
        if scope["type"] != "lifespan":
            return await app(scope, receive, send)

        async def quiet_send(message):
            if message.get("type") == "lifespan.startup.failed" and "StartupRefused" in message.get("message", ""):
                message = {**message, "message": ""}
            await send(message)

        return await app(scope, receive, quiet_send)

    return wrapped


def main() -> int:
    """``python server.py``: build the app from ``ZSNLI_*`` and serve it; returns the exit code.

    A setting that does not parse or is out of range is refused like the
    preflight checks: one line ``refusing to start: <reason>`` on stderr,
    exit code 3, nothing listens. Otherwise as `serve`.
    """
    try:
        app = create_app()
    except SettingsError as exc:
        print(f"refusing to start: {_one_line(exc)}", file=sys.stderr, flush=True)
        return 3
    return serve(app)


def serve(app: FastAPI, host: str | None = None, port: int | None = None) -> int:
    """Run ``app`` under uvicorn in this process; returns the exit code.

    0 after a clean stop (SIGTERM/SIGINT: stop accepting, drain in-flight
    requests for up to ``ZSNLI_DRAIN_TIMEOUT_S``; requests still unanswered
    shortly before that deadline get a JSON 503 ``unavailable`` with
    ``Retry-After`` instead of being cancelled, and the log says how many), 3 when a preflight check
    refused to start (manifest mismatch, no entailment label, bad
    calibration, missing model), 1 when loading the model failed.
    Host and port default to ``$HOST`` (0.0.0.0) and ``$PORT`` (8000).
    """
    import uvicorn

    settings: Settings = app.state.settings
    host = host or os.environ.get("HOST") or "0.0.0.0"
    port = int(port or os.environ.get("PORT") or 8000)
    config = uvicorn.Config(
        _quiet_startup_refusal(app),
        host=host,
        port=port,
        workers=1,
        lifespan="on",
        log_level=settings.log_level,
        timeout_graceful_shutdown=settings.drain_timeout_s or None,
    )
    class _Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:  # signal handler: stop admitting, start the drain clock
            super().handle_exit(sig, frame)
            app.state.request_drain()

    server = _Server(config)
    app.state.shutdown_hook = lambda: setattr(server, "should_exit", True)
    # uvicorn re-raises a handled SIGTERM/SIGINT with the handlers it found at
    # start; make those no-ops so a drained shutdown exits 0, not 143.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    server.run()
    if not server.started:
        return 3
    return app.state.service().exit_code
