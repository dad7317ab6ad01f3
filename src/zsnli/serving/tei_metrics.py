"""text-embeddings-inference's Prometheus series beside zsnli's (`TeiSeries`), so a dashboard or alert written
for TEI keeps working: the names, types, labels and bucket edges of TEI's router (``router/src/prometheus.rs``,
``core/src/queue.rs``, ``core/src/infer.rs``, ``router/src/http/server.rs``), filled from what zsnli measures.

What each series means here (docs/api.md's table says the same for users):

* ``te_request_count{method}``, ``te_request_success{method}`` (counters; ``method`` ``single`` or ``batch``:
  one input or a list), ``te_request_failure{err}`` (counter): requests to ``/predict``, ``/classify``,
  ``/embed`` and ``/v1/embeddings`` (`zsnli.serving.request_timing.TIMED_PATHS`); ``err`` from the status
  (`FAILURE_REASONS`: ``validation``, ``batch_size``, ``overloaded``, ``dropped``, ``inference``,
  ``model_type``);
* ``te_request_duration``, ``te_request_tokenization_duration``, ``te_request_queue_duration``,
  ``te_request_inference_duration`` (histograms, seconds): the request's wall time, and its tokeniser, queue and
  forward times per input (`zsnli.serving.request_timing.RequestTiming`, the ``x-*`` headers' figures), on
  success, as TEI records them;
* ``te_request_input_length`` (histogram, tokens): each sequence computed for a request (a pair, a text or a
  label to embed);
* ``te_embed_count`` / ``te_embed_success`` and ``te_predict_count`` / ``te_predict_success`` (counters, inputs),
  ``te_embed_*_duration`` / ``te_predict_*_duration`` (histograms, one per successful request, seconds): the
  same for the embedding routes and for ``/predict``;
* ``te_queue_size`` (gauge): items of every kind waiting for a batch (read from the batcher at scrape time);
* ``te_batch_next_size`` (histogram, items) and ``te_batch_next_tokens`` (histogram, padded tokens: rows x
  padded width, what the token budget bounds; TEI counts the batch's unpadded tokens): per forward.

TEI's counters have no ``_total`` suffix (its exporter writes them as they are named); ``prometheus_client``
would add one, so the counters are written by `TeiSeries.counter_text` and appended to the exposition.

May import: prometheus_client (the caller checked it is installed), `zsnli.serving.batching` (the record),
`zsnli.serving.request_timing`. Used by `zsnli.serving.telemetry`.
"""

from __future__ import annotations

import threading
from typing import Any

from .batching import BatchRecord
from .request_timing import RequestTiming

#: TEI's duration buckets (seconds): 1e-5 x 1.5^k, k = 1..35 (``router/src/prometheus.rs``).
DURATION_BUCKETS = tuple(1e-5 * 1.5 ** k for k in range(1, 36))
#: TEI's ``te_batch_next_size`` buckets: 2^0 .. 2^12; ``te_batch_next_tokens``: 2^0 .. 2^20.
BATCH_SIZE_BUCKETS = tuple(float(2 ** k) for k in range(13))
BATCH_TOKENS_BUCKETS = tuple(float(2 ** k) for k in range(21))

#: ``te_request_failure``'s ``err`` label of each status (TEI's values); any other 4xx (a client's mistake: 404,
#: 405, ...) is ``validation`` and any other 5xx ``inference`` (`failure_reason`).
FAILURE_REASONS = {400: "validation", 413: "batch_size", 415: "validation", 422: "validation", 429: "overloaded",
                   499: "dropped", 500: "inference", 501: "model_type", 503: "overloaded"}

def failure_reason(status: int) -> str:
    """``te_request_failure``'s ``err`` of an error ``status``: `FAILURE_REASONS`, else ``validation`` for a 4xx
    (the client's request; never counted as an inference failure) and ``inference`` for anything else."""
    return FAILURE_REASONS.get(status, "validation" if 400 <= status < 500 else "inference")


_COUNTER_HELP = {
    "te_request_count": "Requests received, by method (single input or batch).",
    "te_request_success": "Requests answered 2xx, by method.",
    "te_request_failure": "Requests that failed, by reason (err).",
    "te_embed_count": "Inputs received on the embedding routes.",
    "te_embed_success": "Inputs embedded.",
    "te_predict_count": "Pairs received on /predict.",
    "te_predict_success": "Pairs scored on /predict.",
}


def _label_text(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return "{" + inner + "}"


class TeiSeries:
    """TEI's series of one app: histograms and the queue gauge in ``registry``, the counters kept here.

    service: the `zsnli.serving.service.ZeroShotClassifier` (its batcher is read for ``te_queue_size``);
    max_input_length: the model window in tokens (``te_request_input_length``'s last bucket, as TEI cuts its
    buckets at ``max_input_length``)."""

    def __init__(self, registry: Any, service: Any, max_input_length: int) -> None:
        from prometheus_client import Histogram

        self.service = service
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, tuple], float] = {}
        self.hist: dict[str, Any] = {}
        for family in ("request", "embed", "predict"):
            for part in ("", "tokenization_", "queue_", "inference_"):
                name = f"te_{family}_{part}duration"
                self.hist[name] = Histogram(name, f"Seconds: {family} {part.rstrip('_') or 'total'} time.",
                                            buckets=DURATION_BUCKETS, registry=registry)
        lengths = tuple(float(2 ** k) for k in range(20) if 2 ** k <= max(1, max_input_length))
        self.hist["te_request_input_length"] = Histogram("te_request_input_length", "Tokens of each sequence "
                                                         "computed for a request.", buckets=lengths, registry=registry)
        self.hist["te_batch_next_size"] = Histogram("te_batch_next_size", "Items per forward.",
                                                    buckets=BATCH_SIZE_BUCKETS, registry=registry)
        self.hist["te_batch_next_tokens"] = Histogram("te_batch_next_tokens", "Padded tokens per forward.",
                                                      buckets=BATCH_TOKENS_BUCKETS, registry=registry)
        registry.register(_QueueSize(service))

    def _inc(self, name: str, labels: tuple = (), by: float = 1.0) -> None:
        with self._lock:
            self._counts[(name, labels)] = self._counts.get((name, labels), 0.0) + by

    def observe_batch(self, record: BatchRecord) -> None:
        """Batch observer: ``te_batch_next_size`` and ``te_batch_next_tokens`` of one forward."""
        self.hist["te_batch_next_size"].observe(record.pairs)
        self.hist["te_batch_next_tokens"].observe(record.padded_tokens)

    def observe_request(self, path: str, status: int, t: RequestTiming) -> None:
        """Timing observer (`zsnli.serving.request_timing.TimingMiddleware`): one answered request."""
        self._inc("te_request_count", (("method", t.method),))
        if t.family is not None:
            self._inc(f"te_{t.family}_count", (), t.inputs)
        if not 200 <= status < 300:
            self._inc("te_request_failure", (("err", failure_reason(status)),))
            return
        self._inc("te_request_success", (("method", t.method),))
        per = max(1, t.inputs)
        times = {"": t.elapsed(), "tokenization_": t.tokenization_s / per, "queue_": t.queue_s / per,
                 "inference_": t.inference_s / per}
        families = ("request",) if t.family is None else ("request", t.family)
        for family in families:
            for part, seconds in times.items():
                self.hist[f"te_{family}_{part}duration"].observe(seconds)
        if t.family is not None:
            self._inc(f"te_{t.family}_success", (), t.inputs)
        for job in t.jobs:
            for item in job.pairs:
                self.hist["te_request_input_length"].observe(len(item.enc))

    def counter_text(self) -> str:
        """The counters in the Prometheus text format, named as TEI names them (no ``_total``); every counter
        of `_COUNTER_HELP` is written (0 before its first event, with the labels TEI starts with)."""
        with self._lock:
            counts = dict(self._counts)
        for name, labels in (("te_request_count", (("method", "single"),)),
                             ("te_request_success", (("method", "single"),)), ("te_embed_count", ()),
                             ("te_embed_success", ()), ("te_predict_count", ()), ("te_predict_success", ())):
            counts.setdefault((name, labels), 0.0)
        lines = []
        for name, help_text in _COUNTER_HELP.items():
            samples = sorted((labels, v) for (n, labels), v in counts.items() if n == name)
            if not samples:
                continue
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
            lines += [f"{name}{_label_text(labels)} {int(value)}" for labels, value in samples]
        return "\n".join(lines) + "\n"


class _QueueSize:
    """``te_queue_size``: items of every kind waiting for a batch, read at scrape time (0 while loading)."""

    def __init__(self, service: Any) -> None:
        self.service = service

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        batcher = self.service.state.batcher
        waiting = sum(batcher.pending_items(kind) for kind in batcher.kinds) if batcher is not None else 0
        yield GaugeMetricFamily("te_queue_size", "Items waiting for a batch (every kind of work).", value=waiting)
