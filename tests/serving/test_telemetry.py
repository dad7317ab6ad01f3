"""GET /metrics (zsnli.serving.telemetry): the Prometheus exposition, one registry per app, and a server
that starts without prometheus_client (404 and one warning)."""

from __future__ import annotations

import logging
import sys
import time

import pytest
from conftest import cached_loader, make_settings, running_app

from zsnli.serving.app import create_app
from zsnli.serving.telemetry import INSTALL_HINT, metrics_extension

pytestmark = pytest.mark.anyio

BODY = {"text": "The team won the match.", "labels": ["sport", "business", "science"]}


def samples(text: str) -> dict:
    """``{(name, frozenset(labels)): value}`` of an exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def metrics_app(model_dir, **overrides):
    return create_app(make_settings(model_dir, **overrides), loader=cached_loader, extend=metrics_extension)


async def test_exposition_counts_requests_batches_and_queue(bert_dir):
    pytest.importorskip("prometheus_client")
    app = metrics_app(bert_dir, queue_capacity_pairs=4096)
    async with running_app(app) as client:
        for body in (BODY, BODY, {"text": "x", "labels": []}):
            await client.post("/classify", json=body)
        await client.get("/no-such-path")
        batcher = app.state.classifier.state.batcher
        with batcher.admit(10):  # ten pairs admitted and not yet answered
            r = await client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    s = samples(r.text)
    assert s[("zsnli_requests_total", frozenset({("path", "/classify"), ("status", "200")}))] == 2
    assert s[("zsnli_requests_total", frozenset({("path", "/classify"), ("status", "422")}))] == 1
    assert s[("zsnli_requests_total", frozenset({("path", "unmatched"), ("status", "404")}))] == 1
    assert s[("zsnli_request_seconds_count", frozenset({("path", "/classify")}))] == 3
    assert s[("zsnli_requests_in_flight", frozenset())] == 1  # the scrape itself
    assert s[("zsnli_queue_pairs", frozenset())] == 10
    assert s[("zsnli_queue_capacity_pairs", frozenset())] == 4096
    assert s[("zsnli_ready", frozenset())] == 1
    # every forward (the warm-up included) is in the histograms, to the pair and the token
    nli = frozenset({("kind", "nli")})
    assert s[("zsnli_batch_pairs_sum", nli)] == batcher.stats.pairs
    assert s[("zsnli_batch_pairs_count", nli)] == batcher.stats.batches >= 2
    assert s[("zsnli_batch_padded_tokens_sum", nli)] == batcher.stats.padded_tokens
    assert s[("zsnli_forward_seconds_count", nli)] == batcher.stats.batches
    assert ("zsnli_failed_batches_total", nli) not in s  # a labelled counter appears with its first failure


async def test_batch_histograms_by_kind_with_the_cosine_term(tmp_path, bert_dir):
    """With a cosine term the texts and labels to embed are batches of their own kinds, counted apart."""
    pytest.importorskip("prometheus_client")
    from conftest import write_calibration

    from zsnli.runtime.embedding import embedding_digest

    calib = write_calibration(tmp_path / "calibration.json", rule="entailment", embedding_weight=2.0,
                              embedding_sha256=embedding_digest(bert_dir))
    app = metrics_app(bert_dir, calibration_path=str(calib), embedding_dir=str(bert_dir))
    async with running_app(app) as client:
        assert (await client.post("/classify", json=BODY)).status_code == 200
        s = samples((await client.get("/metrics")).text)
        stats = app.state.classifier.state.batcher.stats
    per_kind = {k: s[("zsnli_batch_pairs_sum", frozenset({("kind", k)}))]
                for k in ("nli", "embedding_text", "embedding_label")}
    assert per_kind == {"nli": 1 + 3, "embedding_text": 1 + 1, "embedding_label": 1 + 3}  # warm-up + request
    assert sum(per_kind.values()) == stats.pairs
    assert {k: s[("zsnli_forward_seconds_count", frozenset({("kind", k)}))] for k in per_kind} == stats.batches_by_kind


async def test_label_cache_size_hits_and_misses(tmp_path, bert_dir):
    """Issue 39 (5): /metrics shows the kept label embeddings, their bytes, and lookups by outcome."""
    pytest.importorskip("prometheus_client")
    from conftest import write_calibration

    from zsnli.runtime.embedding import embedding_digest

    calib = write_calibration(tmp_path / "calibration.json", rule="entailment", embedding_weight=2.0,
                              embedding_sha256=embedding_digest(bert_dir))
    app = metrics_app(bert_dir, calibration_path=str(calib), embedding_dir=str(bert_dir), label_cache_entries=64)
    async with running_app(app) as client:
        cache = app.state.classifier.state.label_cache
        before = cache.hits, cache.misses, len(cache)  # the warm-up's
        for body in (BODY, BODY, {**BODY, "labels": ["sport", "weather"]}):
            assert (await client.post("/classify", json=body)).status_code == 200
        s = samples((await client.get("/metrics")).text)
    read = {name: s[(f"zsnli_label_cache_{name}", frozenset())]
            for name in ("entries", "bytes", "max_entries", "hits_total", "misses_total")}
    assert read["hits_total"] - before[0] == 3 + 1 and read["misses_total"] - before[1] == 3 + 1
    assert read["entries"] == len(cache) == before[2] + 4 and read["max_entries"] == 64
    assert read["bytes"] == cache.nbytes > read["entries"] * cache_dim(app) * 4


def cache_dim(app) -> int:
    return app.state.classifier.state.encoder.dim


async def test_each_app_has_its_own_registry(bert_dir):
    pytest.importorskip("prometheus_client")
    first, second = metrics_app(bert_dir), metrics_app(bert_dir)  # a global registry would refuse the second
    async with running_app(first) as a, running_app(second) as b:
        await a.post("/classify", json=BODY)
        s_a, s_b = samples((await a.get("/metrics")).text), samples((await b.get("/metrics")).text)
    key = ("zsnli_requests_total", frozenset({("path", "/classify"), ("status", "200")}))
    assert s_a[key] == 1 and key not in s_b


async def test_without_prometheus_client_the_server_runs_and_metrics_is_404(bert_dir, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import raises ImportError
    with caplog.at_level(logging.WARNING, logger="zsnli"):
        app = metrics_app(bert_dir)
        async with running_app(app) as client:
            off = await client.get("/metrics")
            assert (await client.post("/classify", json=BODY)).status_code == 200
    # the 404 said "no route GET /metrics. Routes: ..." (found by a new-user pass): it says why, as the log does
    assert off.status_code == 404
    assert off.json()["error"] == f"GET /metrics is off: prometheus_client is not installed ({INSTALL_HINT})"
    warnings = [r.getMessage() for r in caplog.records if "/metrics" in r.getMessage()]
    assert len(warnings) == 1 and INSTALL_HINT in warnings[0]


async def test_a_failing_observer_never_breaks_batching(bert_dir):
    app = create_app(make_settings(bert_dir), loader=cached_loader)
    app.state.classifier.batch_observers.append(lambda record: 1 / 0)
    async with running_app(app) as client:
        assert (await client.post("/classify", json=BODY)).status_code == 200


def test_server_app_serves_metrics(monkeypatch):
    pytest.importorskip("prometheus_client")
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    server = importlib.import_module("server")
    assert "/metrics" in {getattr(r, "path", None) for r in server.app.routes}


def test_a_connection_level_answer_is_what_the_log_and_metrics_count(served, caplog):
    """A request the connection layer answered (here 408: its body did not arrive in time) while the app was reading
    it: the app's own answer afterwards (400 ``disconnected``) never went on the wire, so neither the access line nor
    ``zsnli_requests_total`` says 400 (issue 48)."""
    import socket

    import httpx
    from http_support import read_response

    with caplog.at_level("INFO", logger="zsnli.access"), served(read_timeout_s=1.0) as srv:
        with socket.create_connection(("127.0.0.1", srv.port)) as sock:
            sock.sendall(b"POST /classify HTTP/1.1\r\nHost: t\r\nX-Request-ID: slow-body\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 80\r\n\r\n{\"text\": ")
            assert read_response(sock, timeout=10)[0] == 408
        time.sleep(0.5)
        metrics = httpx.get(f"http://127.0.0.1:{srv.port}/metrics").text
    counted = [ln for ln in metrics.splitlines() if ln.startswith("zsnli_requests_total") and '"/classify"' in ln]
    assert counted and all('status="408"' in ln for ln in counted), counted
    lines = [r.getMessage() for r in caplog.records if "request_id=slow-body" in r.getMessage()]
    assert len(lines) == 1 and '" 408 ' in lines[0], lines
