"""Python clients of the server: `Client` (blocking) and `AsyncClient` (asyncio), on httpx.

    from zsnli import Client
    with Client("http://127.0.0.1:8000") as zs:
        result = zs.classify("The striker scored twice.", ["sport", "business"],
                             hypothesis_template="This text is about {}.")
        result.top, result.probabilities

Both speak the server's routes: ``classify`` (one document), ``classify_many`` (documents with their own
labels, sent as arrays of ``POST /classify``), ``zero_shot_classification`` (the Inference API payload,
answered as the transformers pipeline answers) and ``health``. A 503 (loading, overloaded, timed out,
draining) is retried after its ``Retry-After`` (at most ``retries`` times, each wait capped at
``max_retry_wait_s``); so is an item of a ``classify_many`` batch that got one. Every error is a `ZsnliError`,
and no other exception leaves a call: the server's error answers (`BadRequestError` for a 4xx, never retried;
`ServerError`; `UnavailableError`), `ConnectionFailed` and `DeadlineExceeded` (no whole answer within
``timeout`` seconds, one deadline per HTTP call), `ResponseError` (a 2xx that is not what the API promises,
e.g. from a ``--url`` naming another web server), `InvalidRequest` (arguments that cannot be sent: ``labels``
must be a list or tuple of strings, only ``zero_shot_classification`` takes one comma-separated string, as the
Inference API does) and, before anything is sent, `InvalidArgument` (a bad constructor argument). The classes
are in `zsnli.client.protocol`, the HTTP side (deadlines, a call whose connection closed under it unanswered
sent once more) in `zsnli.client.transport`.

May import: `zsnli.client.protocol`, `zsnli.client.transport`, httpx, the standard library (never the server's).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Mapping, Sequence

import httpx

from .protocol import (DEFAULT_URL, APIError, BadRequestError, Calls, Classification, ConnectionFailed, DeadlineExceeded,
                       InvalidArgument, InvalidRequest, Reply, ResponseError, ServerError, Step, UnavailableError,
                       ZsnliError, api_error, check_bool, check_client_args, check_labels, check_url, classify_body,
                       zero_shot_body)
from .transport import API_KEY_ENV, DROPPED, AsyncSender, Sender, auth_headers

__all__ = ["API_KEY_ENV", "DEFAULT_URL", "DROPPED", "APIError", "AsyncClient", "BadRequestError", "Classification", "Client",
           "ConnectionFailed", "DeadlineExceeded", "InvalidArgument", "InvalidRequest", "Reply", "ResponseError",
           "ServerError", "Step", "UnavailableError", "ZsnliError", "api_error", "check_bool", "check_client_args",
           "check_labels", "check_url", "classify_body", "zero_shot_body"]


class Client(Calls):
    """Blocking client (see the module docstring). url: the server (default ``http://127.0.0.1:8000``);
    timeout: seconds per HTTP call, connect + send + the whole answer (one deadline);
    retries: extra tries after a 503; max_retry_wait_s: cap on one ``Retry-After`` wait; batch_size:
    documents per ``POST /classify`` array in `classify_many` (keep it <= the server's
    ``ZSNLI_MAX_BATCH_ITEMS``, default 64). transport: an httpx transport (tests: a ``MockTransport``).
    api_key: the server's ``ZSNLI_API_KEY``, sent as ``Authorization: Bearer <key>`` (default: this process's
    ``$ZSNLI_API_KEY``; ``""``: none; `zsnli.client.transport.auth_headers`).
    Safe to share between threads (as ``httpx.Client`` is)."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = 60.0, retries: int = 3,
                 max_retry_wait_s: float = 30.0, batch_size: int = 32, transport: httpx.BaseTransport | None = None,
                 api_key: str | None = None):
        super().__init__(url, timeout, retries, max_retry_wait_s, batch_size)
        self._sender = Sender(self.url, self.timeout, transport, auth_headers(api_key))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._sender.http.close()

    def _run(self, steps) -> Any:
        """Drive a call's steps: requests sent (`Sender.send`), sleeps slept, here and now."""
        value = None
        try:
            while True:
                kind, arg = steps.send(value)
                value = time.sleep(arg) if kind == "sleep" else self._sender.send(*arg)
        except StopIteration as done:
            return done.value

    def health(self) -> dict[str, Any]:
        """``GET /health`` as a dict (a 503 while loading is retried, then raised as `UnavailableError`)."""
        return self._run(self._health())

    def classify(self, text: str, labels: Sequence[str], *, hypothesis_template: str | None = None,
                 multi_label: bool = False, id: Any = None, scoring: str | None = None) -> Classification:
        """Probabilities of ``labels`` for ``text`` (``POST /classify``; ``scoring="pipeline"``: the transformers
        pipeline's scoring instead of the served one; ``scoring="embedding"``: the fast path, the sentence
        encoder's cosine alone; None: the server's default). Raises a `ZsnliError`
        (`ResponseError` when the answer does not hold one probability per label)."""
        return self._run(self._classify(text, labels, hypothesis_template, multi_label, id, scoring))

    def classify_many(self, docs: Sequence[Mapping[str, Any]]) -> list[Classification | APIError]:
        """Many documents, each a ``/classify`` body (``text``, ``labels`` or ``candidate_labels``, ...):
        sent ``batch_size`` at a time as arrays; returns, in order, one `Classification` or the item's
        `APIError` per document (items answered 503 are sent again after ``Retry-After``, up to ``retries``
        times). Raises `ZsnliError` when a whole call fails (unreachable, a 4xx for the array itself), and
        `ResponseError` when an answer array does not hold exactly one entry per document sent."""
        return self._run(self._classify_many(docs))

    def zero_shot_classification(self, inputs: str | Sequence[str], candidate_labels: Sequence[str] | str, *,
                                 hypothesis_template: str | None = None, multi_label: bool = False) -> Any:
        """The Inference API call (``POST /v1/zero-shot-classification``): as the pipeline answers,
        ``{"sequence", "labels", "scores"}`` sorted by score, or a list of those for a list of inputs."""
        return self._run(self._zero_shot(inputs, candidate_labels, hypothesis_template, multi_label))


class AsyncClient(Calls):
    """The asyncio twin of `Client`: the same arguments and methods, awaited; each HTTP call is cancelled at its
    deadline (``anyio.fail_after``). ``async with AsyncClient(url) as zs: await zs.classify(...)``."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = 60.0, retries: int = 3,
                 max_retry_wait_s: float = 30.0, batch_size: int = 32, transport: httpx.AsyncBaseTransport | None = None,
                 api_key: str | None = None):
        super().__init__(url, timeout, retries, max_retry_wait_s, batch_size)
        self._sender = AsyncSender(self.url, self.timeout, transport, auth_headers(api_key))

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._sender.http.aclose()

    async def _run(self, steps) -> Any:
        """Drive a call's steps, awaiting each request (`AsyncSender.send`) and sleep."""
        value = None
        try:
            while True:
                kind, arg = steps.send(value)
                value = await (asyncio.sleep(arg) if kind == "sleep" else self._sender.send(*arg))
        except StopIteration as done:
            return done.value

    async def health(self) -> dict[str, Any]:
        """See `Client.health`."""
        return await self._run(self._health())

    async def classify(self, text: str, labels: Sequence[str], *, hypothesis_template: str | None = None,
                       multi_label: bool = False, id: Any = None, scoring: str | None = None) -> Classification:
        """See `Client.classify`."""
        return await self._run(self._classify(text, labels, hypothesis_template, multi_label, id, scoring))

    async def classify_many(self, docs: Sequence[Mapping[str, Any]]) -> list[Classification | APIError]:
        """See `Client.classify_many`."""
        return await self._run(self._classify_many(docs))

    async def zero_shot_classification(self, inputs: str | Sequence[str], candidate_labels: Sequence[str] | str, *,
                                       hypothesis_template: str | None = None, multi_label: bool = False) -> Any:
        """See `Client.zero_shot_classification`."""
        return await self._run(self._zero_shot(inputs, candidate_labels, hypothesis_template, multi_label))
