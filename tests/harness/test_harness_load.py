"""zsnli.harness.load: the contract check, and the load driver against a small fake server (503s, errors)."""

from __future__ import annotations

import sys
import textwrap

import pytest

from zsnli.harness.examples import Example
from zsnli.harness.load import Answer, RunResult, check_answer, request_body, run_requests
from zsnli.harness.server import ServerProcess

EX = Example("d1", "ds", "some text", ("a", "b", "c"), 1)

BUSY_SERVER = textwrap.dedent(
    '''
    import sys
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()
    seen = {}

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.post("/classify")
    async def classify(request: Request):
        body = await request.json()
        key = str(body["id"])
        seen[key] = seen.get(key, 0) + 1
        if key.startswith("busy") and seen[key] <= 2:
            return JSONResponse({"error": "overloaded"}, status_code=503, headers={"Retry-After": "1"})
        if key.startswith("bare503"):
            return JSONResponse({"error": "overloaded"}, status_code=503)
        if key.startswith("bad"):
            return {"id": body["id"], "probabilities": [1.0] * (len(body["labels"]) + 1)}
        k = len(body["labels"])
        return {"id": body["id"], "probabilities": [1.0 / k] * k}

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    '''
)


@pytest.mark.parametrize(
    "status, body, reason",
    [
        (200, {"id": "d1", "probabilities": [0.2, 0.5, 0.3]}, None),
        (200, {"id": "d1", "probabilities": [0.5, 0.5]}, "2 probabilities for 3 labels"),
        (200, {"id": "d2", "probabilities": [0.2, 0.5, 0.3]}, "id not echoed"),
        (200, {"id": "d1", "probabilities": [0.2, 0.5, 0.31]}, "sum to"),
        (200, {"id": "d1", "probabilities": [-0.1, 0.8, 0.3]}, "outside [0, 1]"),
        (200, {"id": "d1", "probabilities": [0.2, "x", 0.3]}, "not a number"),
        (200, {"id": "d1"}, "no 'probabilities'"),
        (200, [1, 2], "not a JSON object"),
        (503, {"error": "overloaded"}, "HTTP 503: overloaded"),
    ],
)
def test_check_answer(status, body, reason):
    probs, error = check_answer(status, body, EX)
    if reason is None:
        assert error is None and probs == [0.2, 0.5, 0.3]
    else:
        assert probs is None and reason in error


def test_check_answer_rejects_nan():
    probs, error = check_answer(200, {"id": "d1", "probabilities": [float("nan"), 0.5, 0.5]}, EX)
    assert error == "non-finite probability"


def test_check_answer_takes_a_request_mapping():
    body = {"id": 7, "text": "t", "labels": ["x", "y"]}
    assert request_body(body) == body
    assert check_answer(200, {"id": 7, "probabilities": [0.5, 0.5]}, body) == ([0.5, 0.5], None)


def test_answer_kinds_and_run_counts():
    answers = [Answer([1.0], None, 200, 0.1, retries=2), Answer(None, "HTTP 503: busy", 503, 0.2),
               Answer(None, "2 probabilities for 1 labels", 200, 0.3),
               Answer(None, "ConnectError: refused", None, 0.01),
               Answer(None, "not answered within the time limit", None, float("nan"))]
    run = RunResult(answers, wall_s=2.0, timed_out=True)
    assert run.error_counts() == {"HTTP 503": 1, "invalid answer": 1, "ConnectError": 1, "not answered": 1}
    assert run.retries_503 == 2 and run.n_ok == 1
    stats = run.latency_stats()
    assert stats["answered"] == 3 and stats["docs_per_s"] == pytest.approx(1.5)
    assert stats["max_s"] == pytest.approx(0.3) and stats["p50_s"] == pytest.approx(0.2)


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory):
    script = tmp_path_factory.mktemp("busy") / "busy_server.py"
    script.write_text(BUSY_SERVER, encoding="utf-8")
    with ServerProcess(f"{sys.executable} {script} {{port}}", cwd=script.parent) as server:
        server.wait_healthy(60)
        yield server


def _doc(i: str, k: int = 2) -> dict:
    return {"id": i, "text": "some text", "labels": [f"label {j}" for j in range(k)]}


def test_run_requests_retries_503_only_when_asked(busy_server):
    docs = [_doc("busy-1"), _doc("ok-1", 3)]
    no_retry = run_requests(busy_server.url, docs, concurrency=2, warmups=0, progress=False)
    assert no_retry.answers[0].status == 503 and no_retry.answers[0].retry_after == "1"
    assert no_retry.answers[1].ok and no_retry.answers[1].probabilities == pytest.approx([1 / 3] * 3)
    retried = run_requests(busy_server.url, [_doc("busy-2")], concurrency=1, warmups=0, progress=False,
                           retry_503=5)
    assert retried.answers[0].ok and retried.answers[0].retries == 2 and retried.retries_503 == 2
    bare = run_requests(busy_server.url, [_doc("bare503-1")], concurrency=1, warmups=0, progress=False)
    assert bare.answers[0].status == 503 and bare.answers[0].retry_after is None


def test_run_requests_records_contract_violations_and_warmups(busy_server):
    docs = [_doc(f"ok-{i}") for i in range(5)] + [_doc("bad-1")]
    run = run_requests(busy_server.url, docs, concurrency=3, warmups=4, progress=False)
    assert [a.ok for a in run.answers] == [True] * 5 + [False]
    assert run.answers[5].error == "3 probabilities for 2 labels" and run.error_counts() == {"invalid answer": 1}
    assert run.warmup_errors == [] and not run.timed_out and run.wall_s > 0
    with pytest.raises(ValueError, match="concurrency"):
        run_requests(busy_server.url, docs, concurrency=0)
