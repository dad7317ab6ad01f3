"""``GET /metrics``: the server's numbers in the Prometheus text format (``prometheus_client``).

`metrics_extension` is a `zsnli.serving.app.create_app` extension. It gives each app
its own ``CollectorRegistry`` (two apps in one process never clash) holding:

* ``zsnli_requests_total{path, status}``, ``zsnli_requests_in_flight``,
  ``zsnli_request_seconds{path}`` (histogram): an ASGI middleware; ``path`` is
  the route's template, also for a request refused before routing (`route_label`: a 401, a 403, a 405;
  ``unmatched`` for a 404 on an unknown path, so a scanner cannot grow the label set);
* ``zsnli_queue_pairs`` (admitted, not yet answered: what a request is refused
  on), ``zsnli_queue_pending_pairs`` (waiting for a batch),
  ``zsnli_queue_capacity_pairs``: read from the batcher at scrape time;
* ``zsnli_batch_pairs`` and ``zsnli_batch_padded_tokens`` (histograms),
  ``zsnli_forward_seconds`` (histogram), ``zsnli_failed_batches_total``, each
  by ``kind`` (``nli``: premise-hypothesis pairs; ``embedding_text`` and
  ``embedding_label``: the cosine term's texts and labels):
  from the `zsnli.serving.batching.BatchRecord` of every forward, through the
  service's ``batch_observers`` (the batcher knows nothing of Prometheus);
* ``zsnli_ready`` (1 when ``/health`` is 200);
* ``zsnli_label_cache_entries``, ``zsnli_label_cache_bytes``, ``zsnli_label_cache_max_entries`` and
  ``zsnli_label_cache_hits_total`` / ``zsnli_label_cache_misses_total``: the kept label embeddings
  (`zsnli.serving.label_cache.LabelEmbeddings`), read at scrape time (0 without a sentence encoder);
* text-embeddings-inference's ``te_*`` series (`zsnli.serving.tei_metrics.TeiSeries`), fed by the batch
  observer and the request timings (`zsnli.serving.request_timing`).

``prometheus_client`` is optional (``pip install 'zsnli[metrics]'``): without
it the server starts as usual, ``/metrics`` answers 404 and one warning at
start-up says what to install.

May import: prometheus_client (lazily), starlette, `zsnli.serving.batching`, `zsnli.serving.request_ids`,
`zsnli.serving.service`, `zsnli.serving.startup`, `zsnli.serving.tei_metrics`. Used by `zsnli.serve` and ``server.py``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.responses import Response

from .batching import BatchRecord
from .request_ids import wire_status
from .service import ZeroShotClassifier
from .startup import configure_logging
from .tei_metrics import TeiSeries

logger = logging.getLogger("zsnli")

INSTALL_HINT = "pip install prometheus_client (or pip install 'zsnli[metrics]')"

# Bucket edges: seconds span a warm CPU forward (ms) to a queued request at the timeout (60 s);
# pairs and padded tokens double up to the largest token budget (`zsnli.runtime.model.default_token_budget`).
REQUEST_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FORWARD_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_PAIRS = tuple(float(2 ** i) for i in range(11))  # 1 .. 1024
PADDED_TOKENS = tuple(float(2 ** i) for i in range(6, 17))  # 64 .. 65536


class ServiceMetrics:
    """The collectors of one app, in their own ``CollectorRegistry`` (``self.registry``)."""

    def __init__(self, service: ZeroShotClassifier) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.service = service
        self.registry = r = CollectorRegistry()
        self.requests = Counter("zsnli_requests", "HTTP requests answered, by route and status code.",
                                ["path", "status"], registry=r)
        self.in_flight = Gauge("zsnli_requests_in_flight", "HTTP requests being answered now.", registry=r)
        self.request_seconds = Histogram("zsnli_request_seconds", "Seconds from request start to response end.",
                                         ["path"], buckets=REQUEST_SECONDS, registry=r)
        self.batch_pairs = Histogram("zsnli_batch_pairs", "Items per forward: premise-hypothesis pairs (kind "
                                     "nli) or texts and labels to embed (kinds embedding_text, embedding_label).",
                                     ["kind"], buckets=BATCH_PAIRS, registry=r)
        self.padded_tokens = Histogram("zsnli_batch_padded_tokens", "Padded tokens per forward (rows computed x "
                                       "padded length; bounded by the token budget).", ["kind"],
                                       buckets=PADDED_TOKENS, registry=r)
        self.forward_seconds = Histogram("zsnli_forward_seconds", "Seconds per forward (batch handed to the "
                                         "forward thread until its outputs are back).", ["kind"],
                                         buckets=FORWARD_SECONDS, registry=r)
        self.failed_batches = Counter("zsnli_failed_batches", "Forwards that raised (their requests got 500).",
                                      ["kind"], registry=r)
        r.register(_QueueCollector(service))
        self.tei = TeiSeries(r, service, service.settings.max_length)

    def observe_batch(self, record: BatchRecord) -> None:
        """Batch observer (see `zsnli.serving.batching.Batcher`): one forward's numbers into the histograms."""
        self.tei.observe_batch(record)
        self.batch_pairs.labels(record.kind).observe(record.pairs)
        self.padded_tokens.labels(record.kind).observe(record.padded_tokens)
        self.forward_seconds.labels(record.kind).observe(record.seconds)
        if not record.ok:
            self.failed_batches.labels(record.kind).inc()

    def exposition(self) -> Response:
        """The registry in the Prometheus text format."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(self.registry) + self.tei.counter_text().encode(),
                        media_type=CONTENT_TYPE_LATEST)


class _QueueCollector:
    """Queue gauges read from the live batcher at scrape time (0 while loading)."""

    def __init__(self, service: ZeroShotClassifier) -> None:
        self.service = service

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        batcher = self.service.state.batcher
        admitted = batcher.admitted_pairs if batcher is not None else 0
        pending = batcher.pending_pairs if batcher is not None else 0
        capacity = self.service.settings.queue_capacity_pairs
        ready = 1 if self.service.health()[0] == 200 else 0
        yield GaugeMetricFamily("zsnli_queue_pairs", "Pairs admitted and not yet answered (queued, tokenising or "
                                "in a forward); a request is refused (503) when this would pass the capacity.",
                                value=admitted)
        yield GaugeMetricFamily("zsnli_queue_pending_pairs", "Pairs waiting for a batch.", value=pending)
        yield GaugeMetricFamily("zsnli_queue_capacity_pairs", "ZSNLI_QUEUE_CAPACITY_PAIRS.", value=capacity)
        yield GaugeMetricFamily("zsnli_ready", "1 when /health answers 200.", value=ready)
        yield from _label_cache_families(self.service.state.label_cache)


def _label_cache_families(cache):
    """The label cache's gauges and counters (all 0 when there is none: no encoder, or still loading)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def read(name: str) -> int:
        return getattr(cache, name) if cache is not None else 0

    yield GaugeMetricFamily("zsnli_label_cache_entries", "Label embeddings kept across requests.", value=len(cache) if cache is not None else 0)
    yield GaugeMetricFamily("zsnli_label_cache_bytes", "Bytes the kept label embeddings hold (vectors, 16-byte "
                            "keys and the store's slots).", value=read("nbytes"))
    yield GaugeMetricFamily("zsnli_label_cache_max_entries", "ZSNLI_LABEL_CACHE_ENTRIES.", value=read("max_entries"))
    yield CounterMetricFamily("zsnli_label_cache_hits", "Labels whose kept embedding was used.", value=read("hits"))
    yield CounterMetricFamily("zsnli_label_cache_misses", "Labels embedded (not kept).", value=read("misses"))


def route_label(routes: Any, scope: Any) -> str:
    """The ``path`` label of a request the router never saw (a 401 of the API key, a 403 of the origin check, a
    405): the template of the first of ``routes`` whose path it matches (``/v1/bakeoffs/{bakeoff_id}``), whatever
    its method; ``unmatched`` for a path no route serves (a scanner cannot grow the label set)."""
    from starlette.routing import Match

    for route in routes:
        try:
            match, _ = route.matches(scope)
        except Exception:  # noqa: BLE001 - a route that cannot judge this scope does not match it
            continue
        if match is not Match.NONE and getattr(route, "path", None):
            return route.path
    return "unmatched"


class RequestMetricsMiddleware:
    """Pure ASGI middleware: count, time and track in-flight HTTP requests (streaming-safe).

    The status label is the code that went on the wire: the app's, or the connection layer's when it answered
    the request itself (`zsnli.serving.request_ids.wire_status`); ``none`` when nothing was sent (the client
    left first)."""

    def __init__(self, app, metrics: ServiceMetrics, routes: Any = ()) -> None:
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: list[Any] = []

        async def send_wrapper(message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        m, t0 = self.metrics, time.perf_counter()
        m.in_flight.inc()
        try:
            await self.app(scope, receive, send_wrapper)
        except Exception:
            if not status:  # the error handler outside answers 500
                status.append(500)
            raise
        finally:
            m.in_flight.dec()
            path = getattr(scope.get("route"), "path", None) or route_label(self.routes, scope)
            sent = wire_status(scope, status[0] if status else None)
            m.requests.labels(path, str(sent) if sent is not None else "none").inc()
            m.request_seconds.labels(path).observe(time.perf_counter() - t0)


def metrics_extension(app, service: ZeroShotClassifier) -> None:
    """`zsnli.serving.app.create_app` extension: add ``GET /metrics`` and the request middleware.

    Without ``prometheus_client`` nothing is added (``/metrics`` is then a 404 saying why, with what to install:
    ``app.state.routes_off``, `zsnli.serving.app.not_found_message`) and one warning says the same.
    """
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        configure_logging(service.settings.log_level)
        off = f"GET /metrics is off: prometheus_client is not installed ({INSTALL_HINT})"
        logger.warning("%s", off)
        app.state.routes_off = {**getattr(app.state, "routes_off", {}), "/metrics": off}
        return
    metrics = ServiceMetrics(service)
    app.state.metrics = metrics
    service.batch_observers.append(metrics.observe_batch)
    app.state.timing_observers.append(metrics.tei.observe_request)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics, routes=app.router.routes)

    @app.get("/metrics", include_in_schema=False)
    async def get_metrics() -> Response:
        """The Prometheus text exposition of this server's metrics."""
        return metrics.exposition()
