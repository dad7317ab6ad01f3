"""Python clients of the server: `Client` (blocking) and `AsyncClient` (asyncio), on httpx.

    from zsnli import Client
    with Client("http://127.0.0.1:8000") as zs:
        result = zs.classify("The striker scored twice.", ["sport", "business"],
                             hypothesis_template="This text is about {}.")
        result.top, result.probabilities

Both speak the server's routes: ``classify`` (one document), ``classify_many``
(documents with their own labels, sent as arrays of ``POST /classify``),
``zero_shot_classification`` (the Inference API payload, answered as the
transformers pipeline answers) and ``health``. A 503 (loading, overloaded,
timed out, draining) is retried after its ``Retry-After`` (at most
``retries`` times, each wait capped at ``max_retry_wait_s``); so is an item of a
``classify_many`` batch that got one. Every error is a `ZsnliError`:
`BadRequestError` (4xx: the request is wrong, never retried), `ServerError`
(5xx), `UnavailableError` (503 after the retries), each carrying the server's
``status``, ``error_type``, ``field`` and ``errors``; `ConnectionFailed` when
the server cannot be reached or does not answer within ``timeout``.

A call whose connection was closed under it with no answer (`DROPPED`: the
keep-alive close race, where the server closes an idle pooled connection just
as the client reuses it) is sent once more on a new connection, at once: every
route this client calls is a pure function of its request (no state changes on
the server), so sending it twice is safe, as Go's ``net/http`` and urllib3 resend
idempotent requests on a reused connection that closed first.

May import: httpx and the standard library only (never the server's modules).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"

#: The connection closed under the call without an answer (reset, closed before the status line,
#: the socket gone): sent once more on a new connection (module docstring). Not a timeout: a server
#: that is slow to answer is not asked twice.
DROPPED = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


class ZsnliError(Exception):
    """Any failure of a client call; ``str(exc)`` is one line."""


class ConnectionFailed(ZsnliError):
    """The server could not be reached, or did not answer within the timeout (no HTTP status)."""


class APIError(ZsnliError):
    """An error answer of the server: ``status``, ``error_type`` (the server's, e.g. ``validation``),
    ``field`` (the request field it names, or None), ``errors`` (a 422's per-problem list) and ``body``."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        self.status = int(status)
        self.body = dict(body)
        self.error_type = str(body.get("error_type") or "http_error")
        self.field = body.get("field")
        self.errors = body.get("errors")
        self.message = str(body.get("error") or f"HTTP {status}")
        super().__init__(f"{self.message} ({self.error_type}, HTTP {self.status})")


class BadRequestError(APIError):
    """A 4xx: the request is wrong (invalid field, too many labels, body too large); never retried."""


class ServerError(APIError):
    """A 5xx other than 503 (inference failed for this request, non-finite numbers)."""


class UnavailableError(ServerError):
    """A 503 (loading, overloaded, timed out, draining) still answered after the retries."""


def api_error(status: int, body: Mapping[str, Any]) -> APIError:
    """The `APIError` subclass for ``status`` (422 -> `BadRequestError`, 503 -> `UnavailableError`...)."""
    if status == 503:
        return UnavailableError(status, body)
    return (BadRequestError if status < 500 else ServerError)(status, body)


@dataclass(frozen=True)
class Classification:
    """One document's answer: ``labels`` as sent, ``probabilities`` in the same order, ``id`` echoed."""

    labels: list[str]
    probabilities: list[float]
    id: Any = None

    @property
    def top(self) -> str:
        """The label with the highest probability (the first such one on a tie)."""
        return self.labels[max(range(len(self.labels)), key=lambda i: (self.probabilities[i], -i))]

    def ranked(self) -> list[tuple[str, float]]:
        """``(label, probability)`` pairs, highest first (ties keep the order sent)."""
        order = sorted(range(len(self.labels)), key=lambda i: (-self.probabilities[i], i))
        return [(self.labels[i], self.probabilities[i]) for i in order]


# --------------------------------------------------------------------------- shared request logic


def classify_body(text: str, labels: Sequence[str], hypothesis_template: str | None = None,
                  multi_label: bool = False, id: Any = None) -> dict[str, Any]:
    """The ``POST /classify`` body of one document (``labels`` as given: literal hypotheses unless a
    template is set)."""
    body: dict[str, Any] = {"text": text, "labels": list(labels), "multi_label": bool(multi_label)}
    if hypothesis_template is not None:
        body["hypothesis_template"] = hypothesis_template
    if id is not None:
        body["id"] = id
    return body


def _labels_of(doc: Mapping[str, Any]) -> list[str]:
    labels = doc.get("labels", doc.get("candidate_labels"))
    return list(labels) if isinstance(labels, (list, tuple)) else []


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"error": response.text[:200] or f"HTTP {response.status_code}", "error_type": "http_error"}


def _retry_after(response: httpx.Response | None, cap: float) -> float:
    """Seconds to wait before a retry: the ``Retry-After`` header (seconds), else 1, at most ``cap``."""
    raw = response.headers.get("retry-after", "") if response is not None else ""
    try:
        wait = float(raw)
    except ValueError:
        wait = 1.0
    return max(0.0, min(wait, cap))


def _batches(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


def _outcome(doc: Mapping[str, Any], entry: Mapping[str, Any]) -> Classification | APIError:
    if "probabilities" in entry:
        return Classification(_labels_of(doc), list(entry["probabilities"]), entry.get("id"))
    return api_error(int(entry.get("status", 500)), entry)


def zero_shot_body(inputs: str | Sequence[str], candidate_labels: Sequence[str] | str,
                   hypothesis_template: str | None = None, multi_label: bool = False) -> dict[str, Any]:
    """The Inference API payload of ``POST /v1/zero-shot-classification`` (``candidate_labels`` may be one
    comma-separated string, as the pipeline accepts; no template: the server uses the pipeline's)."""
    params: dict[str, Any] = {"candidate_labels": candidate_labels if isinstance(candidate_labels, str)
                              else list(candidate_labels), "multi_label": bool(multi_label)}
    if hypothesis_template is not None:
        params["hypothesis_template"] = hypothesis_template
    return {"inputs": inputs if isinstance(inputs, str) else list(inputs), "parameters": params}


#: A step of a call: ``("request", (method, path, json body))`` answered with the ``httpx.Response``,
#: or ``("sleep", seconds)``. Each call is a generator of steps (no I/O) that `Client` and
#: `AsyncClient` drive, blocking or awaited, so both share every rule.
Step = tuple


class _Base:
    def __init__(self, url: str, timeout: float, retries: int, max_retry_wait_s: float, batch_size: int) -> None:
        if retries < 0 or batch_size < 1 or not timeout > 0:
            raise ValueError("retries must be >= 0, batch_size >= 1 and timeout > 0")
        self.url, self.timeout, self.retries = url.rstrip("/"), float(timeout), int(retries)
        self.max_retry_wait_s, self.batch_size = float(max_retry_wait_s), int(batch_size)

    def _failed(self, exc: httpx.HTTPError) -> ConnectionFailed:
        kind = "did not answer within %g s" % self.timeout if isinstance(exc, httpx.TimeoutException) \
            else f"cannot be reached ({type(exc).__name__}: {' '.join(str(exc).split()) or 'no detail'})"
        return ConnectionFailed(f"server {self.url} {kind}")

    @staticmethod
    def _answer(response: httpx.Response) -> Any:
        body = _json(response)
        if response.status_code >= 400:
            raise api_error(response.status_code, body if isinstance(body, dict) else {"error": str(body)})
        return body

    def _call(self, method: str, path: str, body: Any = None):
        """One HTTP call, sent again after each 503's ``Retry-After``, up to ``retries`` times."""
        for attempt in range(self.retries + 1):
            response = yield ("request", (method, path, body))
            if response.status_code != 503 or attempt == self.retries:
                return response
            yield ("sleep", _retry_after(response, self.max_retry_wait_s))
        raise AssertionError("unreachable")

    def _health(self):
        return self._answer((yield from self._call("GET", "/health")))

    def _classify(self, text, labels, hypothesis_template, multi_label, id):
        body = classify_body(text, labels, hypothesis_template, multi_label, id)
        entry = self._answer((yield from self._call("POST", "/classify", body)))
        return Classification(list(labels), list(entry["probabilities"]), entry.get("id"))

    def _classify_many(self, docs):
        out: list[Any] = [None] * len(docs)
        for idx in _batches(len(docs), self.batch_size):
            pending = list(idx)
            for attempt in range(self.retries + 1):
                response = yield from self._call("POST", "/classify", [dict(docs[i]) for i in pending])
                for i, entry in zip(pending, self._answer(response)):
                    out[i] = _outcome(docs[i], entry)
                pending = [i for i in pending if isinstance(out[i], UnavailableError)]
                if not pending or attempt == self.retries:
                    break
                yield ("sleep", _retry_after(response, self.max_retry_wait_s))
        return out

    def _zero_shot(self, inputs, candidate_labels, hypothesis_template, multi_label):
        body = zero_shot_body(inputs, candidate_labels, hypothesis_template, multi_label)
        return self._answer((yield from self._call("POST", "/v1/zero-shot-classification", body)))


class Client(_Base):
    """Blocking client (see the module docstring). url: the server (default ``http://127.0.0.1:8000``);
    timeout: seconds per HTTP call (connect, read, write); retries: extra tries after a 503;
    max_retry_wait_s: cap on one ``Retry-After`` wait; batch_size: documents per ``POST /classify``
    array in `classify_many` (keep it <= the server's ``ZSNLI_MAX_BATCH_ITEMS``, default 64).
    transport: an httpx transport (tests: ``httpx.ASGITransport`` or a ``MockTransport``)."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = 60.0, retries: int = 3,
                 max_retry_wait_s: float = 30.0, batch_size: int = 32, transport: httpx.BaseTransport | None = None):
        super().__init__(url, timeout, retries, max_retry_wait_s, batch_size)
        self._http = httpx.Client(base_url=self.url, timeout=self.timeout, transport=transport)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _run(self, steps) -> Any:
        """Drive a call's steps: requests sent, sleeps slept, here and now."""
        value = None
        try:
            while True:
                kind, arg = steps.send(value)
                if kind == "sleep":
                    time.sleep(arg)
                    value = None
                    continue
                for resend in (False, True):
                    try:
                        value = self._http.request(arg[0], arg[1], json=arg[2])
                        break
                    except DROPPED as exc:
                        if resend:
                            raise self._failed(exc) from None
                    except httpx.HTTPError as exc:
                        raise self._failed(exc) from None
        except StopIteration as done:
            return done.value

    def health(self) -> dict[str, Any]:
        """``GET /health`` as a dict (a 503 while loading is retried, then raised as `UnavailableError`)."""
        return self._run(self._health())

    def classify(self, text: str, labels: Sequence[str], *, hypothesis_template: str | None = None,
                 multi_label: bool = False, id: Any = None) -> Classification:
        """Probabilities of ``labels`` for ``text`` (``POST /classify``). Raises a `ZsnliError`."""
        return self._run(self._classify(text, labels, hypothesis_template, multi_label, id))

    def classify_many(self, docs: Sequence[Mapping[str, Any]]) -> list[Classification | APIError]:
        """Many documents, each a ``/classify`` body (``text``, ``labels`` or ``candidate_labels``, ...):
        sent ``batch_size`` at a time as arrays; returns, in order, a `Classification` or the item's
        `APIError` (items answered 503 are sent again after ``Retry-After``, up to ``retries`` times).
        Raises `ZsnliError` when a whole call fails (unreachable, a 4xx for the array itself)."""
        return self._run(self._classify_many(docs))

    def zero_shot_classification(self, inputs: str | Sequence[str], candidate_labels: Sequence[str] | str, *,
                                 hypothesis_template: str | None = None, multi_label: bool = False) -> Any:
        """The Inference API call (``POST /v1/zero-shot-classification``): as the pipeline answers,
        ``{"sequence", "labels", "scores"}`` sorted by score, or a list of those for a list of inputs."""
        return self._run(self._zero_shot(inputs, candidate_labels, hypothesis_template, multi_label))


class AsyncClient(_Base):
    """The asyncio twin of `Client`: the same arguments and methods, awaited
    (``async with AsyncClient(url) as zs: await zs.classify(...)``)."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = 60.0, retries: int = 3,
                 max_retry_wait_s: float = 30.0, batch_size: int = 32,
                 transport: httpx.AsyncBaseTransport | None = None):
        super().__init__(url, timeout, retries, max_retry_wait_s, batch_size)
        self._http = httpx.AsyncClient(base_url=self.url, timeout=self.timeout, transport=transport)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _run(self, steps) -> Any:
        """Drive a call's steps, awaiting each request and sleep."""
        value = None
        try:
            while True:
                kind, arg = steps.send(value)
                if kind == "sleep":
                    await asyncio.sleep(arg)
                    value = None
                    continue
                for resend in (False, True):
                    try:
                        value = await self._http.request(arg[0], arg[1], json=arg[2])
                        break
                    except DROPPED as exc:
                        if resend:
                            raise self._failed(exc) from None
                    except httpx.HTTPError as exc:
                        raise self._failed(exc) from None
        except StopIteration as done:
            return done.value

    async def health(self) -> dict[str, Any]:
        """See `Client.health`."""
        return await self._run(self._health())

    async def classify(self, text: str, labels: Sequence[str], *, hypothesis_template: str | None = None,
                       multi_label: bool = False, id: Any = None) -> Classification:
        """See `Client.classify`."""
        return await self._run(self._classify(text, labels, hypothesis_template, multi_label, id))

    async def classify_many(self, docs: Sequence[Mapping[str, Any]]) -> list[Classification | APIError]:
        """See `Client.classify_many`."""
        return await self._run(self._classify_many(docs))

    async def zero_shot_classification(self, inputs: str | Sequence[str], candidate_labels: Sequence[str] | str, *,
                                       hypothesis_template: str | None = None, multi_label: bool = False) -> Any:
        """See `Client.zero_shot_classification`."""
        return await self._run(self._zero_shot(inputs, candidate_labels, hypothesis_template, multi_label))
