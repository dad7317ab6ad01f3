"""HTTP client side of the harness: send documents to POST /classify and check every answer.

`check_answer` is the contract check (DESIGN.md, "HTTP contract"): a 200 with
the id echoed and one finite probability in [0, 1] per label, summing to 1
within ``SUM_TOLERANCE``. `run_requests` sends many documents at a fixed
concurrency after warm-ups, with a time limit and a progress bar, and
returns every answer with its latency.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import httpx
import numpy as np

from zsnli.validation.examples import Example

SUM_TOLERANCE = 1e-6
DEFAULT_CONCURRENCY = 32
DEFAULT_WARMUPS = 16
REQUEST_TIMEOUT_S = 300.0


@dataclass
class Answer:
    """One document's outcome: parsed probabilities (None on failure), error text, latency.

    ``status`` is the HTTP status (None when no response came back);
    ``seconds`` is the wall time of the request (NaN when not sent).
    """

    probabilities: list[float] | None
    error: str | None
    status: int | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.error is None and self.probabilities is not None


@dataclass
class RunResult:
    """Answers of a run, one per document in the order sent, plus timing figures.

    ``wall_s`` covers the timed documents only (warm-ups excluded);
    ``timed_out`` is True when ``max_seconds`` stopped the run early (the
    documents never answered carry an error).
    """

    answers: list[Answer]
    wall_s: float
    timed_out: bool
    warmup_errors: list[str] = field(default_factory=list)

    @property
    def n_ok(self) -> int:
        return sum(a.ok for a in self.answers)

    def latency_stats(self) -> dict[str, float]:
        """Request seconds over answered documents: mean, p50, p95, max, plus docs/s over the wall time."""
        secs = np.array([a.seconds for a in self.answers if a.status is not None and math.isfinite(a.seconds)])
        done = int(secs.size)
        stats = {
            "docs": len(self.answers),
            "answered": done,
            "wall_s": self.wall_s,
            "docs_per_s": (done / self.wall_s) if self.wall_s > 0 else float("nan"),
        }
        if done:
            stats.update(mean_s=float(secs.mean()), p50_s=float(np.percentile(secs, 50)),
                         p95_s=float(np.percentile(secs, 95)), max_s=float(secs.max()))
        else:
            stats.update(mean_s=float("nan"), p50_s=float("nan"), p95_s=float("nan"), max_s=float("nan"))
        return stats


def check_answer(status: int, body: Any, example: Example, tolerance: float = SUM_TOLERANCE) -> tuple[list[float] | None, str | None]:
    """Check one /classify answer against the contract for ``example``.

    Returns ``(probabilities, None)`` when valid, else ``(None, reason)`` with a
    one-line reason (wrong status, not an object, id not echoed, wrong
    length, non-number, non-finite, outside [0, 1], sum off by more than
    ``tolerance``).
    """
    if status != 200:
        detail = ""
        if isinstance(body, dict):
            detail = ": " + str(body.get("error") or body.get("detail") or body)[:200]
        return None, f"HTTP {status}{detail}"
    if not isinstance(body, dict):
        return None, "answer is not a JSON object"
    if body.get("id") != example.id:
        return None, f"id not echoed (sent {example.id!r}, got {body.get('id')!r})"
    probs = body.get("probabilities")
    if not isinstance(probs, list):
        return None, "no 'probabilities' list"
    if len(probs) != len(example.labels):
        return None, f"{len(probs)} probabilities for {len(example.labels)} labels"
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


async def classify_one(client: httpx.AsyncClient, url: str, example: Example) -> Answer:
    """POST one document; never raises for HTTP or parse failures (they become ``Answer.error``)."""
    t0 = time.perf_counter()
    try:
        resp = await client.post(url.rstrip("/") + "/classify", json=example.request())
    except httpx.HTTPError as exc:
        return Answer(None, f"{type(exc).__name__}: {exc}"[:300], None, time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    try:
        body = resp.json()
    except ValueError:
        return Answer(None, f"HTTP {resp.status_code}: body is not JSON", resp.status_code, seconds)
    probs, error = check_answer(resp.status_code, body, example)
    return Answer(probs, error, resp.status_code, seconds)


async def _pool(client, url, docs, concurrency, on_done, answers: list[Answer | None]) -> None:
    """Fill ``answers[i]`` for each document as it completes (partial results survive cancellation)."""
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(docs):
            i = next_index
            next_index += 1
            answers[i] = await classify_one(client, url, docs[i])
            on_done(answers[i])

    workers = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(docs)) or 1)]
    try:
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()


async def run_requests_async(
    url: str,
    docs: Sequence[Example],
    concurrency: int = DEFAULT_CONCURRENCY,
    warmups: int = DEFAULT_WARMUPS,
    max_seconds: float | None = None,
    progress: bool = True,
    desc: str = "classify",
    request_timeout: float = REQUEST_TIMEOUT_S,
) -> RunResult:
    """Async form of `run_requests`."""
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
        await _pool(client, url, warm_docs, concurrency, lambda a: None, warm)
        warmup_errors = [a.error for a in warm if a is not None and a.error]
        answers: list[Answer | None] = [None] * len(docs)
        t0 = time.perf_counter()
        timed_out = False
        try:
            await asyncio.wait_for(
                _pool(client, url, docs, concurrency, lambda a: bar.update(1) if bar else None, answers),
                timeout=max_seconds,
            )
        except asyncio.TimeoutError:
            timed_out = True
        wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    final = [a if a is not None else Answer(None, "not answered within the time limit", None, float("nan")) for a in answers]
    return RunResult(final, wall, timed_out, warmup_errors)


def run_requests(
    url: str,
    docs: Sequence[Example],
    concurrency: int = DEFAULT_CONCURRENCY,
    warmups: int = DEFAULT_WARMUPS,
    max_seconds: float | None = None,
    progress: bool = True,
    desc: str = "classify",
    request_timeout: float = REQUEST_TIMEOUT_S,
) -> RunResult:
    """Send ``docs`` to ``{url}/classify`` at ``concurrency`` after ``warmups`` untimed requests.

    Warm-ups reuse the first documents (cycled). ``max_seconds`` (None: no
    limit) bounds the timed part; documents not answered by then get the
    error "not answered within the time limit". Transport errors, non-200
    answers and contract violations never raise: they are recorded per
    document (see `check_answer`). Returns a `RunResult` whose ``answers``
    align with ``docs``. Raises ``ValueError`` if ``concurrency`` < 1.
    """
    return asyncio.run(run_requests_async(url, docs, concurrency, warmups, max_seconds, progress, desc, request_timeout))
