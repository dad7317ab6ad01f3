"""text-embeddings-inference's timing headers (zsnli.serving.request_timing) and ``te_*`` Prometheus series
(zsnli.serving.tei_metrics) beside zsnli's own (issue 49): a TEI dashboard's queries return series."""

from __future__ import annotations

import re

import pytest
from conftest import cached_loader, make_settings, running_app

from zsnli.serving.app import create_app
from zsnli.serving.telemetry import metrics_extension

pytestmark = pytest.mark.anyio

PAIR = ["The striker scored twice.", "This text is about sport."]
HEADERS = ("x-compute-time", "x-compute-characters", "x-compute-tokens", "x-total-time", "x-tokenization-time",
           "x-queue-time", "x-inference-time")


def series(text: str) -> dict[str, float]:
    """``{'name{labels}': value}`` of every sample line of an exposition, as Prometheus reads the lines."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


async def test_predict_and_classify_send_tei_timing_headers(bert_dir):
    app = create_app(make_settings(bert_dir), loader=cached_loader)
    async with running_app(app) as client:
        model = app.state.classifier.state.model
        tokens = len(model.encode([PAIR[0]], [PAIR[1]])[0])
        r = await client.post("/predict", json={"inputs": PAIR})
        assert r.status_code == 200
        values = {h: int(r.headers[h]) for h in HEADERS}
        assert values["x-compute-tokens"] == tokens and values["x-compute-characters"] == len(PAIR[0] + PAIR[1])
        assert values["x-total-time"] >= values["x-inference-time"] >= 0
        two = await client.post("/predict", json={"inputs": [PAIR, PAIR]})
        assert int(two.headers["x-compute-tokens"]) == 2 * tokens
        c = await client.post("/classify", json={"text": PAIR[0], "labels": ["sport", "news"]})
        assert c.status_code == 200 and all(h in c.headers for h in HEADERS)
        bad = await client.post("/predict", json={"inputs": "a text alone"})
        assert bad.status_code == 422 and "x-compute-time" not in bad.headers
        assert "x-compute-time" not in (await client.get("/health")).headers


async def test_tei_series_count_requests_queue_and_batches(bert_dir):
    pytest.importorskip("prometheus_client")
    app = create_app(make_settings(bert_dir), loader=cached_loader, extend=metrics_extension)
    async with running_app(app) as client:
        before = series((await client.get("/metrics")).text)
        assert before["te_queue_size"] == 0 and before['te_request_count{method="single"}'] == 0
        await client.post("/predict", json={"inputs": PAIR})
        await client.post("/predict", json={"inputs": [PAIR, PAIR, PAIR]})
        await client.post("/classify", json={"text": PAIR[0], "labels": ["sport", "news"]})
        await client.post("/predict", json={"inputs": "a text alone"})  # 422
        text = (await client.get("/metrics")).text
    got = series(text)
    assert "# TYPE te_request_count counter" in text and "# TYPE te_request_duration histogram" in text
    assert got['te_request_count{method="single"}'] == 3 and got['te_request_count{method="batch"}'] == 1
    assert got['te_request_success{method="single"}'] == 2 and got['te_request_success{method="batch"}'] == 1
    assert got['te_request_failure{err="validation"}'] == 1
    assert got["te_request_duration_count"] == 3 and got["te_request_queue_duration_count"] == 3
    assert got["te_predict_count"] == 4 and got["te_predict_success"] == 4  # valid pairs, as TEI counts them
    assert got["te_predict_duration_count"] == 2
    assert got["te_batch_next_size_count"] >= 3 and got["te_batch_next_tokens_sum"] > 0
    assert got["te_request_input_length_count"] == 1 + 3 + 2
    assert "te_queue_size" in got and got['zsnli_requests_total{path="/predict",status="200"}'] == 2


async def test_a_client_mistake_is_never_counted_as_an_inference_failure(bert_dir):
    """The tryout of issue 49: a GET on /classify (405) was counted te_request_failure{err="inference"}."""
    pytest.importorskip("prometheus_client")
    from zsnli.serving.tei_metrics import failure_reason

    assert [failure_reason(s) for s in (404, 405, 408, 409, 422, 500, 502, 503)] == [
        "validation", "validation", "validation", "validation", "validation", "inference", "inference", "overloaded"]
    app = create_app(make_settings(bert_dir), loader=cached_loader, extend=metrics_extension)
    async with running_app(app) as client:
        assert (await client.get("/classify")).status_code == 405
        assert (await client.get("/predict")).status_code == 405
        got = series((await client.get("/metrics")).text)
    assert got.get('te_request_failure{err="inference"}', 0) == 0
