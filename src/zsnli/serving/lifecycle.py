"""The service's life: `ServiceLifecycle` (start-up, ``/health``, admission, the drain, stop) and its
`ServiceState`. `zsnli.serving.service.ZeroShotClassifier` adds the request pipeline on top.

Start-up: `zsnli.serving.startup.preflight` (settings, model files, calibration; refused in one line),
then, in the background, the runtime, the optional sentence encoder, the dynamic batcher and one warm-up
forward of each kind of work; ``state.status`` is ``loading`` until then, ``ok`` or ``error`` after.

May import: `zsnli.serving.batching`, `zsnli.config`, `zsnli.serving.document` (the kinds and the warm-up
record), `zsnli.serving.drain`, `zsnli.serving.label_cache`, `zsnli.runtime.embedding`, `zsnli.errors`,
`zsnli.runtime.model`, `zsnli.runtime.model_config`, `zsnli.request_scoring`, `zsnli.serving.request_timing` (the
tokeniser pool times its work per request), `zsnli.serving.startup`. Never FastAPI or anything HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np

from .. import __version__
from ..config import Settings, unknown_settings
from ..errors import ApiError, ErrorType
from ..request_scoring import RequestScoring
from ..runtime.embedding import SentenceEncoder
from ..runtime.model import NliRuntime, default_token_budget
from ..runtime.model_config import ModelConfigError
from .batching import BatchObserver, Batcher, WorkKind
from .document import LABEL_KIND, TEXT_KIND, Tokenized
from .drain import Drain
from .label_cache import LabelEmbeddings
from .request_timing import TimedExecutor
from .startup import (STARTUP_ERRORS, ModelLoader, Preflight, StartupRefused, configure_logging, default_loader,
                      load_encoder, one_line, preflight)

logger = logging.getLogger("zsnli")


@dataclass
class ServiceState:
    """What the running service knows: ``status`` (loading | ok | error) and, once loaded,
    the runtime, batcher, encoder and scoring; filled in by the background load."""

    status: str = "loading"
    reason: str | None = None
    model: NliRuntime | None = None
    scoring: RequestScoring = field(default_factory=RequestScoring)
    embedding_scoring: RequestScoring | None = None  # ``scoring: "embedding"`` (calibration.json's embedding_scoring)
    calibrated: bool = False
    verified: bool = False  # model files matched the training manifest
    encoder: SentenceEncoder | None = None
    label_cache: LabelEmbeddings | None = None  # label embeddings kept across requests (with the encoder)
    batcher: Batcher | None = None
    model_name: str | None = None
    model_sha256: str | None = None
    variant: str = "small"  # ZSNLI_MODEL_VARIANT as resolved: small (model_dir) or base (model_dir/base)
    model_id: str | None = None  # hub id (ZSNLI_MODEL_ID), None for a local directory
    revision: str | None = None  # hub commit served
    files: dict[str, str] = field(default_factory=dict)  # {relative path: sha256} of every served model file
    startup_seconds: float | None = None
    exit_code: int = 0



class ServiceLifecycle:
    """The service's life (issue 41: apart from its request pipeline, as transformers keeps a model's loading
    apart from `Pipeline`'s preprocess / forward / postprocess): start-up (`preflight`, then loading the
    runtime, the optional sentence encoder and the batcher in the background, one warm-up forward of each
    kind), ``/health``, admission and the shutdown drain, and ``stop``.

    settings: the ``ZSNLI_*`` configuration. loader: ``f(settings) -> NliRuntime``
    (default `zsnli.serving.startup.default_loader`; tests inject tiny or faulty models).
    shutdown_hook: called when the background load fails and
    ``exit_on_startup_error`` is set (``zsnli.serve`` stops uvicorn, exit code 1);
    default sends SIGTERM to this process.
    """

    def __init__(self, settings: Settings, loader: ModelLoader | None = None,
                 shutdown_hook: Callable[[], None] | None = None) -> None:
        self.settings = settings
        self.loader = loader or default_loader
        self.shutdown_hook = shutdown_hook
        self.state = ServiceState()
        #: Called with a `zsnli.serving.batching.BatchRecord` after every forward (`zsnli.serving.telemetry` appends here).
        self.batch_observers: list[BatchObserver] = []
        self.drain = Drain(settings.drain_timeout_s)
        self._tokenize_pool = TimedExecutor(1, thread_name_prefix="zsnli-tokenize")  # times it per request
        self._loading: asyncio.Task | None = None
        #: `zsnli.serving.startup.preflight`'s result when it ran before the server started (`zsnli.serve`: a refusal is
        #: then its one line with nothing of uvicorn's before it); `start` runs it otherwise.
        self.preflighted: Preflight | None = None

    async def start(self) -> None:
        """Log the settings, run `preflight` and start loading in the background.

        Returns at once (``state.status`` is ``loading`` until the warm-up
        forward is done). Raises ``StartupRefused`` (one-line reason) when a
        preflight check fails; ``state`` is then ``error`` with exit code 1.
        """
        t0 = time.monotonic()
        settings = self.settings
        self.drain.loop = asyncio.get_running_loop()
        configure_logging(settings.log_level)
        for warning in unknown_settings():
            logger.warning("%s", warning)
        if settings.torch_threads:
            import torch

            torch.set_num_threads(settings.torch_threads)
        try:
            pre = self.preflighted or preflight(settings)
        except STARTUP_ERRORS as exc:  # the refusal alone, without the settings lines (issue 48)
            reason = one_line(exc)
            self.state = ServiceState(status="error", reason=reason, exit_code=1)
            logger.error("refusing to start: %s", reason)
            raise StartupRefused(reason) from None
        logger.info("zsnli %s starting; settings:", __version__)
        for line in settings.describe():
            logger.info("  %s", line)
        self.settings = pre.settings  # a hub model's snapshot folder is its model_dir from here on
        st = self.state
        st.verified, st.model_id, st.revision, st.files = pre.verified, pre.model_id, pre.revision, pre.files
        st.embedding_scoring, st.variant = pre.embedding_scoring, pre.variant
        self._loading = asyncio.create_task(self._load(pre.model_sha256, pre.scoring, pre.calibrated, t0),
                                            name="zsnli-load")

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait for the background load; raises ``RuntimeError`` naming the reason when it failed."""
        if self._loading is not None:
            await asyncio.wait_for(asyncio.shield(self._loading), timeout)
        if self.state.status != "ok":
            raise RuntimeError(f"service not ready: {self.state.status}: {self.state.reason}")

    async def stop(self) -> None:
        """Cancel a load still running, close the batcher and the worker threads, log the drain count."""
        if self._loading is not None and not self._loading.done():
            self._loading.cancel()
            try:
                await self._loading
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self.state.batcher is not None:
            await self.state.batcher.close()
        self._tokenize_pool.shutdown(wait=False, cancel_futures=True)
        if self.drain.cut_off:
            logger.warning("stopped: %d request(s) cut off at the drain deadline (answered 503)", self.drain.cut_off)
        else:
            logger.info("stopped")

    async def _build(self, loop: asyncio.AbstractEventLoop, scoring: RequestScoring, started: list) -> tuple:
        """Load the runtime and encoder, start the batcher (with the encoder's kinds of work when
        the scoring has a cosine term or the embedding scoring is served), run one warm-up forward of each kind."""
        settings = self.settings
        model = await loop.run_in_executor(self._tokenize_pool, self.loader, settings)
        encoder, kinds = None, {}
        if scoring.needs_encoder or self.state.embedding_scoring is not None:
            encoder = await loop.run_in_executor(self._tokenize_pool, lambda: load_encoder(settings, model))
            kinds = {kind: WorkKind(encoder.embed, encoder.dim, encoder.shapes) for kind in (TEXT_KIND, LABEL_KIND)}
        batcher = Batcher(model.logits, token_budget=settings.token_budget or default_token_budget(model.device),
                          max_wait_s=settings.max_batch_wait_ms / 1000.0, capacity_pairs=settings.queue_capacity_pairs,
                          num_outputs=model.num_labels, kinds=kinds, share_identical=settings.share_identical_rows,
                          max_padding=settings.max_padding, shapes=getattr(model, "shapes", None),
                          observers=self.batch_observers)
        started.append(batcher)
        await batcher.start()
        warm = Tokenized(await loop.run_in_executor(
            self._tokenize_pool, model.encode, ["Warm-up premise."], ["This text is about warming up."]))
        if encoder is not None:
            warm.text, warm.labels = await loop.run_in_executor(
                self._tokenize_pool, lambda: (encoder.tokenize(["Warm-up text."]), encoder.tokenize(["A label."])))
        for (kind, items) in warm.work():
            out = await batcher.submit(items, kind=kind).result()
            if not np.all(np.isfinite(out)):
                raise ModelConfigError(f"warm-up forward ({kind}) produced non-finite numbers")
        return model, encoder, batcher

    async def _load(self, digest: str, scoring: RequestScoring, calibrated: bool, t0: float) -> None:
        st, started = self.state, []
        try:
            model, encoder, batcher = await self._build(asyncio.get_running_loop(), scoring, started)
        except asyncio.CancelledError:
            for batcher in started:
                await batcher.close()
            raise
        except Exception as exc:  # noqa: BLE001 - any load failure is reported, one line
            for batcher in started:
                await batcher.close()
            st.status, st.reason = "error", f"model load failed: {type(exc).__name__}: {one_line(exc)}"
            logger.error("refusing to serve: %s", st.reason)
            if self.settings.exit_on_startup_error:
                st.exit_code = 1
                if self.shutdown_hook is not None:
                    self.shutdown_hook()
                else:
                    os.kill(os.getpid(), signal.SIGTERM)
            return
        st.model, st.batcher, st.scoring, st.calibrated, st.encoder = model, batcher, scoring, calibrated, encoder
        st.label_cache = LabelEmbeddings(self.settings.label_cache_entries) if encoder is not None else None
        st.model_name = st.model_id or str(Path(self.settings.model_dir).resolve().name)
        st.model_sha256 = digest
        st.startup_seconds = time.monotonic() - t0
        st.status = "ok"
        self._log_ready()

    def _log_ready(self) -> None:
        st = self.state
        try:
            import psutil

            since_start = f" ({time.time() - psutil.Process().create_time():.2f} s since process start)"
        except Exception:  # noqa: BLE001 - psutil is optional here
            since_start = ""
        desc = st.model.describe()
        onnx = f" onnx={st.model.onnx_path} onnx_sha256={desc['onnx_sha256']}" if desc.get("onnx_sha256") else ""
        logger.info(
            "ready in %.2f s%s: model=%s sha256=%s backend=%s%s device=%s dtype=%s%s fixed_shapes=%s window=%d "
            "token_budget=%d entail=%d contra=%d", st.startup_seconds, since_start, self.settings.model_dir,
            st.model_sha256, desc["backend"], onnx, desc["device"], desc["dtype"],
            f" ({desc['dtype_reason']})" if desc.get("dtype_reason") else "", desc.get("fixed_shapes", False),
            desc["max_length"], st.batcher.token_budget, st.model.entail_idx, st.model.contra_idx)

    def describe(self) -> dict[str, Any]:
        """The served model as code outside the request path may see it (the bake-off's receipts):
        ``status`` (loading | ok | error), ``model`` (name), ``variant`` (small | base), ``model_sha256``, ``scoring``
        (`zsnli.request_scoring.RequestScoring.to_dict`: the pooled config's fields, ``groups``, ``calibrator``,
        ``cascade``) and ``calibrated``; `health` adds what ``GET /health`` shows."""
        st = self.state
        return {"status": st.status, "model": st.model_name, "variant": st.variant, "model_sha256": st.model_sha256,
                "scoring": st.scoring.to_dict(), "calibrated": st.calibrated}

    def sentence_encoder(self) -> SentenceEncoder | None:
        """The loaded sentence encoder (None unless the served scoring has the cosine term or while
        loading); other arms on the same server may share it."""
        return self.state.encoder

    def health(self) -> tuple[int, dict[str, Any]]:
        """``(status code, body)`` of ``GET /health``: 200 ready, 503 loading / error / draining."""
        st = self.state
        if self.drain.draining:
            return 503, {"status": "draining"}
        if st.status != "ok" or st.model is None:
            body = {"status": st.status}
            if st.reason:
                body["reason"] = st.reason
            return 503, body
        desc = st.model.describe()
        onnx_sha256 = desc.pop("onnx_sha256", None)
        body = {"status": "ok", "model": st.model_name, "variant": st.variant, "model_id": st.model_id,
                "revision": st.revision,
                "model_sha256": st.model_sha256, "files": st.files, **desc, "token_budget": st.batcher.token_budget,
                "encoder": st.encoder.describe() if st.encoder is not None else None,
                "labels": [st.model.id2label[i] for i in sorted(st.model.id2label)],
                "scoring": st.scoring.to_dict(), "calibrated": st.calibrated, "verified": st.verified,
                "default_scoring": self.settings.scoring,
                "embedding_scoring": st.embedding_scoring.to_dict() if st.embedding_scoring is not None else None}
        if onnx_sha256:
            body["onnx_sha256"] = onnx_sha256  # the exact ONNX file the session runs
        return 200, body

    # ----------------------------------------------------------------- admission

    def begin_drain(self) -> None:
        """Shutdown began: admit no new work (`zsnli.serving.drain.Drain.begin`)."""
        self.drain.begin()

    def check_ready(self, admitting: bool = False) -> None:
        """Raise ``ApiError`` 503: ``loading``, or ``unavailable`` after a failed load or, when
        ``admitting`` new work, while draining."""
        st = self.state
        if admitting and self.drain.draining:
            raise ApiError(ErrorType.UNAVAILABLE, "server shutting down: no new requests accepted; retry")
        if st.status != "ok" or st.batcher is None or st.model is None:
            if st.status == "loading":
                raise ApiError(ErrorType.LOADING, "model is loading")
            raise ApiError(ErrorType.UNAVAILABLE, f"service unavailable: {st.reason}")

    async def admitted(self, work: Callable[[], Awaitable[Any]]) -> Any:
        """Run one request's ``work()`` (body reading included) as admitted work: refused (503)
        when not ready or draining, counted in flight, cut off at the drain deadline (503)."""
        self.check_ready(admitting=True)
        return await self.drain.run(work)
