"""The harness's one HTTP load driver: POST /classify at a concurrency and check every answer.

`check_answer` is the contract check (DESIGN.md, "HTTP contract"): a 200 with
the id echoed and one finite probability in [0, 1] per label, summing to 1
within ``SUM_TOLERANCE``. `run_requests` sends request bodies from
``concurrency`` closed-loop workers (each sends its next document as soon as
its previous answer arrived) after untimed warm-ups, optionally retrying 503
answers, with a time limit and a progress bar, and returns every answer with
its latency.

Used by validation and bench; may import `zsnli.harness.examples` (the
`Example` type) and `zsnli.harness.stats`, nothing else from zsnli.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import httpx

from zsnli.harness.examples import Example
from zsnli.harness.stats import latency_summary, per_second

SUM_TOLERANCE = 1e-6
DEFAULT_CONCURRENCY = 32
DEFAULT_WARMUPS = 16
REQUEST_TIMEOUT_S = 300.0
#: a retried 503 waits this fraction of its Retry-After (seconds), at most RETRY_WAIT_CAP_S
RETRY_WAIT_FRACTION = 0.1
RETRY_WAIT_CAP_S = 0.5
#: the error of a request the time limit cut off (never sent, or sent and not answered in time)
NOT_ANSWERED = "not answered within the time limit"


@dataclass
class Answer:
    """One document's outcome: parsed probabilities (None on failure), error text, latency.

    ``status`` is the final HTTP status (None when no response came back);
    ``seconds`` is the wall time of the request, retries included (NaN when
    not sent); ``retries`` counts 503 answers retried; ``retry_after`` is the
    final answer's Retry-After header (None when absent).
    """

    probabilities: list[float] | None
    error: str | None
    status: int | None
    seconds: float
    retries: int = 0
    retry_after: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.probabilities is not None

    @property
    def kind(self) -> str | None:
        """A short error class for counting: ``HTTP 503``, ``invalid answer`` (a 200 breaking the
        contract), the transport exception's name, or ``not answered``; None when ok."""
        if self.ok:
            return None
        if self.status is not None:
            return "invalid answer" if self.status == 200 else f"HTTP {self.status}"
        if self.error in (None, NOT_ANSWERED):
            return "not answered"
        return self.error.split(":")[0]


@dataclass
class RunResult:
    """Answers of a run, one per request in the order given, plus timing figures.

    ``wall_s`` covers the timed requests only (warm-ups excluded);
    ``timed_out`` is True when ``max_seconds`` stopped the run early (the
    requests never answered carry an error).
    """

    answers: list[Answer]
    wall_s: float
    timed_out: bool
    warmup_errors: list[str] = field(default_factory=list)

    @property
    def n_ok(self) -> int:
        return sum(a.ok for a in self.answers)

    @property
    def probabilities(self) -> list[list[float] | None]:
        """Per request, the answer's probabilities (None on failure)."""
        return [a.probabilities for a in self.answers]

    @property
    def seconds(self) -> list[float]:
        """Per request, its seconds (NaN when not answered)."""
        return [a.seconds for a in self.answers]

    @property
    def retries_503(self) -> int:
        """503 answers retried over the timed requests."""
        return sum(a.retries for a in self.answers)

    def error_counts(self) -> dict[str, int]:
        """``{Answer.kind: count}`` of the failed requests (empty when all succeeded)."""
        return dict(Counter(a.kind for a in self.answers if not a.ok))

    def latency_stats(self) -> dict[str, float]:
        """Request seconds over answered requests (`zsnli.harness.stats.latency_summary`), plus
        ``docs``, ``answered``, ``wall_s`` and ``docs_per_s`` (answered / wall)."""
        secs = [a.seconds for a in self.answers if a.status is not None and math.isfinite(a.seconds)]
        lat = latency_summary(secs)
        return {"docs": len(self.answers), "answered": len(secs), "wall_s": self.wall_s,
                "docs_per_s": per_second(len(secs), self.wall_s),
                **{k: lat[k] for k in ("mean_s", "p50_s", "p95_s", "max_s")}}


def request_body(doc: Example | Mapping[str, Any]) -> dict[str, Any]:
    """The POST /classify body of an `Example` or of a ``{"id", "text", "labels"}`` mapping."""
    if isinstance(doc, Example):
        return doc.request()
    return {"id": doc.get("id"), "text": doc["text"], "labels": list(doc["labels"])}


def check_answer(status: int, body: Any, request: Example | Mapping[str, Any],
                 tolerance: float = SUM_TOLERANCE) -> tuple[list[float] | None, str | None]:
    """Check one /classify answer against the contract for the request sent.

    Returns ``(probabilities, None)`` when valid, else ``(None, reason)`` with a
    one-line reason (wrong status, not an object, id not echoed, wrong
    length, non-number, non-finite, outside [0, 1], sum off by more than
    ``tolerance``).
    """
    sent = request_body(request)
    if status != 200:
        detail = ""
        if isinstance(body, dict):
            detail = ": " + str(body.get("error") or body.get("detail") or body)[:200]
        return None, f"HTTP {status}{detail}"
    if not isinstance(body, dict):
        return None, "answer is not a JSON object"
    if body.get("id") != sent["id"]:
        return None, f"id not echoed (sent {sent['id']!r}, got {body.get('id')!r})"
    probs = body.get("probabilities")
    if not isinstance(probs, list):
        return None, "no 'probabilities' list"
    if len(probs) != len(sent["labels"]):
        return None, f"{len(probs)} probabilities for {len(sent['labels'])} labels"
    if not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in probs):
        return None, "a probability is not a number"
    values = [float(p) for p in probs]
    if not all(math.isfinite(p) for p in values):
        return None, "non-finite probability"
    if any(p < 0.0 or p > 1.0 for p in values):
        return None, "probability outside [0, 1]"
    total = math.fsum(values)
    if abs(total - 1.0) > tolerance:
        return None, f"probabilities sum to {total:.9f}, not 1 (tolerance {tolerance:g})"
    return values, None


def _retry_wait(resp: httpx.Response) -> float:
    try:
        after = float(resp.headers.get("retry-after", "1") or 1)
    except ValueError:
        after = 1.0
    return min(max(after, 0.0) * RETRY_WAIT_FRACTION, RETRY_WAIT_CAP_S)


async def classify_one(client: httpx.AsyncClient, url: str, doc: Example | Mapping[str, Any],
                       retry_503: int = 0) -> Answer:
    """POST one document, retrying a 503 up to ``retry_503`` times (after a tenth of its Retry-After,
    at most half a second); never raises for HTTP or parse failures (they become ``Answer.error``)."""
    body = request_body(doc)
    t0 = time.perf_counter()
    retries = 0
    while True:
        try:
            resp = await client.post(url.rstrip("/") + "/classify", json=body)
        except httpx.HTTPError as exc:
            return Answer(None, f"{type(exc).__name__}: {exc}"[:300], None, time.perf_counter() - t0, retries)
        if resp.status_code == 503 and retries < retry_503:
            retries += 1
            await asyncio.sleep(_retry_wait(resp))
            continue
        break
    seconds = time.perf_counter() - t0
    after = resp.headers.get("retry-after")
    try:
        answer = resp.json()
    except ValueError:
        return Answer(None, f"HTTP {resp.status_code}: body is not JSON", resp.status_code, seconds, retries, after)
    probs, error = check_answer(resp.status_code, answer, body)
    return Answer(probs, error, resp.status_code, seconds, retries, after)


async def _pool(client, url, docs, concurrency, on_done, answers: list[Answer | None], retry_503: int) -> None:
    """Fill ``answers[i]`` for each document as it completes (partial results survive cancellation)."""
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(docs):
            i = next_index
            next_index += 1
            answers[i] = await classify_one(client, url, docs[i], retry_503)
            on_done(answers[i])

    workers = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(docs)) or 1)]
    try:
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()


async def run_requests_async(
    url: str,
    docs: Sequence[Example | Mapping[str, Any]],
    concurrency: int = DEFAULT_CONCURRENCY,
    warmups: int = DEFAULT_WARMUPS,
    max_seconds: float | None = None,
    progress: bool = True,
    desc: str = "classify",
    request_timeout: float = REQUEST_TIMEOUT_S,
    retry_503: int = 0,
    on_answer: Callable[[], None] | None = None,
) -> RunResult:
    """Send ``docs`` to ``{url}/classify`` at ``concurrency`` after ``warmups`` untimed requests.

    docs: `Example` objects or ``{"id", "text", "labels"}`` mappings.
    Warm-ups reuse the first documents (cycled). ``max_seconds`` (None: no
    limit) bounds the timed part; documents not answered by then get the
    error ``NOT_ANSWERED``. ``retry_503`` > 0 retries an
    overloaded server's 503 that many times per document (the bench; the
    self-check counts a 503 as a failure). Transport errors, non-200 answers
    and contract violations never raise: they are recorded per document (see
    `check_answer`). ``on_answer()`` is called after each timed document is
    answered (a progress count). Returns a `RunResult` whose ``answers`` align with
    ``docs``. Raises ``ValueError`` if ``concurrency`` < 1.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(request_timeout, connect=30.0)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(docs), desc=desc, unit="doc", leave=False, dynamic_ncols=True)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        warm_docs = [docs[i % len(docs)] for i in range(warmups)] if docs else []
        warm: list[Answer | None] = [None] * len(warm_docs)
        await _pool(client, url, warm_docs, concurrency, lambda a: None, warm, retry_503)
        warmup_errors = [a.error for a in warm if a is not None and a.error]
        answers: list[Answer | None] = [None] * len(docs)
        t0 = time.perf_counter()
        timed_out = False
        try:
            await asyncio.wait_for(
                _pool(client, url, docs, concurrency, lambda a: _answered(bar, on_answer), answers, retry_503),
                timeout=max_seconds,
            )
        except asyncio.TimeoutError:
            timed_out = True
        wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    final = [a if a is not None else Answer(None, NOT_ANSWERED, None, float("nan"))
             for a in answers]
    return RunResult(final, wall, timed_out, warmup_errors)


def _answered(bar, on_answer: Callable[[], None] | None) -> None:
    if bar is not None:
        bar.update(1)
    if on_answer is not None:
        on_answer()


def run_requests(url: str, docs: Sequence[Example | Mapping[str, Any]], **options: Any) -> RunResult:
    """`run_requests_async` in a fresh event loop (``options``: its keyword arguments)."""
    return asyncio.run(run_requests_async(url, docs, **options))
