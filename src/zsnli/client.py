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
the server cannot be reached, `DeadlineExceeded` (a `ConnectionFailed`) when an
HTTP call does not end within ``timeout``, `ResponseError` when a 2xx answer is
not what the API promises (not JSON, a field missing, a wrong length: e.g. a
``--url`` that names another web server), and `InvalidRequest` when the
arguments cannot be sent: not JSON-serialisable, ``labels`` that are not a list
or tuple of strings (a string is never split into its characters; only
``zero_shot_classification`` takes one comma-separated string, as the Inference
API does), a ``multi_label`` that is not a bool (the server would answer 422).
No other exception leaves a call. A bad constructor argument (a ``url`` without
``http://`` or ``https://`` and a host, a ``timeout`` that is not a finite number
> 0, ``retries`` < 0, ...) is `InvalidArgument`, naming the argument, before
anything is sent.

``timeout`` is one deadline per HTTP call: connecting, sending the body and
reading the WHOLE answer together (httpx's own timeouts bound each network
operation, so a server dripping its answer a byte at a time would never trip
them). `Client` reads in a worker thread and stops waiting at the deadline; every
socket operation of that thread is bounded by the call's deadline too (`_DeadlineBackend`, under
httpx's own transport), so at the deadline the read fails, httpx closes that connection and the
thread ends: timed-out calls leave no thread and no socket behind, however long the server drips.
`AsyncClient` cancels the call at the deadline (``anyio.fail_after``). Each
503 retry is a new HTTP call with its own deadline; the ``Retry-After`` waits
between them are not counted.

A call whose connection was closed under it with no answer (`DROPPED`: the
keep-alive close race, where the server closes an idle pooled connection just
as the client reuses it) is sent once more on a new connection, at once, with a
deadline of its own: every route this client calls is a pure function of its
request (no state changes on the server), so sending it twice is safe, as Go's
``net/http`` and urllib3 resend idempotent requests on a reused connection that
closed first.

May import: httpx (and httpcore, its engine) and the standard library only (never the server's modules).
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence
from urllib.parse import urlsplit

import anyio
import httpcore  # httpx's own engine (a dependency of httpx): the deadline-bound sockets below
import httpx

DEFAULT_URL = "http://127.0.0.1:8000"

#: The connection closed under the call without an answer (reset, closed before the status line,
#: the socket gone): sent once more on a new connection (module docstring). Not a timeout: a server
#: that is slow to answer is not asked twice.
DROPPED = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


class ZsnliError(Exception):
    """Any failure of a client call; ``str(exc)`` is one line."""


class InvalidRequest(ZsnliError, ValueError):
    """The call's arguments cannot be sent (not JSON-serialisable, NaN or infinity, labels that are not a list
    of strings, a non-bool option); nothing was sent."""


class InvalidArgument(ZsnliError, ValueError):
    """A constructor argument is wrong (``url``, ``timeout``, ``retries``, ``max_retry_wait_s``,
    ``batch_size``); the message names it. Raised before anything is sent."""


class ConnectionFailed(ZsnliError):
    """The server could not be reached, or the connection broke before a whole answer came (no HTTP status)."""


class DeadlineExceeded(ConnectionFailed):
    """An HTTP call (connect, send, whole answer) did not end within the client's ``timeout`` seconds."""


class ResponseError(ZsnliError):
    """A 2xx (or 3xx) answer that is not what the API promises: not JSON, the wrong shape, a field missing,
    fewer or more answers than documents sent. ``status`` (the HTTP status), ``content_type`` and
    ``snippet`` (the first 200 characters of the body) say what came instead."""

    def __init__(self, what: str, status: int, content_type: str, snippet: str) -> None:
        self.status, self.content_type, self.snippet = int(status), content_type, snippet
        shown = " ".join(snippet.split())[:120]
        super().__init__(f"{what} (HTTP {status}, {content_type or 'no content type'}: {shown!r})")


class APIError(ZsnliError):
    """An error answer of the server: ``status``, ``error_type`` (the server's, e.g. ``validation``),
    ``field`` (the request field it names, or None), ``errors`` (a 422's per-problem list) and ``body``."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        self.status = int(status)
        self.body = dict(body)
        self.error_type = str(body.get("error_type") or "http_error")
        self.field = body.get("field")
        self.errors = body.get("errors")
        self.message = " ".join(str(body.get("error") or f"HTTP {status}").split())
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


@dataclass(frozen=True)
class Reply:
    """One whole HTTP answer, read within the deadline: ``status``, ``headers``, ``content`` (bytes)."""

    status: int
    headers: httpx.Headers
    content: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def snippet(self) -> str:
        return self.content[:200].decode("utf-8", "replace")

    def malformed(self, what: str) -> ResponseError:
        """A `ResponseError` naming ``what`` was wrong with this answer."""
        return ResponseError(what, self.status, self.content_type, self.snippet())


# --------------------------------------------------------------------------- shared request logic


def check_labels(labels: Any, name: str = "labels", comma_string: bool = False) -> list[str]:
    """``labels`` as a list of strings; raises `InvalidRequest` (nothing sent) unless it is a list or tuple
    of strings, or, with ``comma_string`` (the Inference API's ``candidate_labels``), one string. A string
    is never split into its characters, nor a dict taken for its keys, as ``list(labels)`` would."""
    if comma_string and isinstance(labels, str):
        return labels  # type: ignore[return-value]  # the server splits it at commas, as the pipeline does
    if not isinstance(labels, (list, tuple)):
        hint = (" (zero_shot_classification, the Inference API route, accepts one comma-separated string)"
                if isinstance(labels, str) else "")
        raise InvalidRequest(f"{name} must be a list of strings, got {type(labels).__name__} {labels!r:.80}{hint}")
    for i, label in enumerate(labels):
        if not isinstance(label, str):
            raise InvalidRequest(f"{name}[{i}] must be a string, got {type(label).__name__} {label!r:.80}")
    return list(labels)


def check_bool(value: Any, name: str) -> bool:
    """``value`` when it is a bool; raises `InvalidRequest` otherwise (``"false"``, 0, None...), as the
    server answers 422 for a non-boolean rather than guessing what a truthy value meant."""
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name} must be a boolean (True or False), got {type(value).__name__} {value!r:.80}")
    return value


def classify_body(text: str, labels: Sequence[str], hypothesis_template: str | None = None,
                  multi_label: bool = False, id: Any = None, scoring: str | None = None) -> dict[str, Any]:
    """The ``POST /classify`` body of one document (``labels`` as given: literal hypotheses unless a
    template is set; ``scoring``: ``"served"`` or ``"pipeline"``, left out when None). Raises
    `InvalidRequest` when ``labels`` is not a list/tuple of strings (`check_labels`) or ``multi_label``
    not a bool (`check_bool`)."""
    body: dict[str, Any] = {"text": text, "labels": check_labels(labels),
                            "multi_label": check_bool(multi_label, "multi_label")}
    if hypothesis_template is not None:
        body["hypothesis_template"] = hypothesis_template
    if scoring is not None:
        body["scoring"] = scoring
    if id is not None:
        body["id"] = id
    return body


def _labels_of(doc: Any) -> list[str] | None:
    """The labels a ``/classify`` object sends, or None when it sends no list of them."""
    if not isinstance(doc, Mapping):
        return None
    labels = doc.get("labels", doc.get("candidate_labels"))
    return list(labels) if isinstance(labels, (list, tuple)) else None


def _encode(body: Any) -> bytes:
    """``body`` as strict JSON bytes (UTF-8); raises `InvalidRequest` for what JSON cannot hold."""
    try:
        return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"the request cannot be sent as JSON: {exc}") from None


_NOT_JSON = object()


def _json(reply: Reply) -> Any:
    """The answer's JSON value, or `_NOT_JSON` when the body is not JSON."""
    try:
        return json.loads(reply.content)
    except (ValueError, UnicodeDecodeError):
        return _NOT_JSON


def _retry_after(reply: Reply | None, cap: float) -> float:
    """Seconds to wait before a retry: the ``Retry-After`` header (seconds), else 1, at most ``cap``."""
    raw = reply.headers.get("retry-after", "") if reply is not None else ""
    try:
        wait = float(raw)
    except ValueError:
        wait = 1.0
    return max(0.0, min(wait, cap)) if math.isfinite(wait) else (cap if wait > 0 else 1.0)


def _batches(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


def _probabilities(entry: Any, n_labels: int | None, reply: Reply, where: str) -> list[float]:
    """``entry["probabilities"]`` checked: a list of ``n_labels`` numbers (when known); else `ResponseError`."""
    probs = entry.get("probabilities") if isinstance(entry, Mapping) else None
    if not isinstance(probs, list) or not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in probs):
        raise reply.malformed(f"{where} has no list of probabilities")
    if n_labels is not None and len(probs) != n_labels:
        raise reply.malformed(f"{where} has {len(probs)} probabilities for {n_labels} labels")
    return [float(p) for p in probs]


def _outcome(doc: Mapping[str, Any], entry: Any, reply: Reply, where: str) -> Classification | APIError:
    if isinstance(entry, Mapping) and "probabilities" in entry:
        labels = _labels_of(doc)
        return Classification(labels or [], _probabilities(entry, labels and len(labels), reply, where),
                              entry.get("id"))
    status = entry.get("status") if isinstance(entry, Mapping) else None
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        raise reply.malformed(f"{where} is neither an answer nor an error with a status")
    return api_error(status, entry)


def zero_shot_body(inputs: str | Sequence[str], candidate_labels: Sequence[str] | str,
                   hypothesis_template: str | None = None, multi_label: bool = False) -> dict[str, Any]:
    """The Inference API payload of ``POST /v1/zero-shot-classification`` (``candidate_labels`` may be one
    comma-separated string, as the pipeline accepts; no template: the server uses the pipeline's). Raises
    `InvalidRequest` for other labels (`check_labels`) or a non-bool ``multi_label`` (`check_bool`)."""
    params: dict[str, Any] = {"candidate_labels": check_labels(candidate_labels, "candidate_labels", comma_string=True),
                              "multi_label": check_bool(multi_label, "multi_label")}
    if hypothesis_template is not None:
        params["hypothesis_template"] = hypothesis_template
    return {"inputs": inputs if isinstance(inputs, str) else list(inputs), "parameters": params}


def _check_pipeline_answer(value: Any, reply: Reply) -> None:
    """A pipeline answer is ``{"sequence", "labels", "scores"}`` (labels and scores of one length)."""
    if not (isinstance(value, Mapping) and isinstance(value.get("sequence"), str)
            and isinstance(value.get("labels"), list) and isinstance(value.get("scores"), list)
            and len(value["labels"]) == len(value["scores"])):
        raise reply.malformed("the answer is not {\"sequence\", \"labels\", \"scores\"}")


#: A step of a call: ``("request", (method, path, JSON bytes or None))`` answered with the whole `Reply`,
#: or ``("sleep", seconds)``. Each call is a generator of steps (no I/O) that `Client` and
#: `AsyncClient` drive, blocking or awaited, so both share every rule.
Step = tuple


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_url(url: Any) -> str:
    """``url`` without a trailing ``/``; raises `InvalidArgument` unless it is ``http://`` or ``https://``
    with a host (``127.0.0.1:8000`` names no scheme: the message suggests ``http://127.0.0.1:8000``)."""
    if not isinstance(url, str):
        raise InvalidArgument(f"url must be a string such as {DEFAULT_URL!r}, got {type(url).__name__} {url!r:.80}")
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise InvalidArgument(f"url {url!r:.120} is not a URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https"):
        hint = f" (did you mean 'http://{url.strip()[:100]}'?)" if "://" not in url else ""
        raise InvalidArgument(f"url {url!r:.120} has no http:// or https:// scheme{hint}")
    if not host:
        raise InvalidArgument(f"url {url!r:.120} names no host (e.g. {DEFAULT_URL!r})")
    return url.strip().rstrip("/")


def check_client_args(timeout: Any, retries: Any, max_retry_wait_s: Any, batch_size: Any) -> None:
    """Raise `InvalidArgument`, naming the first bad one, unless ``timeout`` is a finite number > 0 (seconds),
    ``retries`` an int >= 0, ``max_retry_wait_s`` a finite number >= 0 and ``batch_size`` an int >= 1."""
    if not (_is_number(timeout) and math.isfinite(timeout) and timeout > 0):
        raise InvalidArgument(f"timeout must be a finite number of seconds > 0, got {timeout!r:.80}")
    if not (isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0):
        raise InvalidArgument(f"retries must be an integer >= 0, got {retries!r:.80}")
    if not (_is_number(max_retry_wait_s) and math.isfinite(max_retry_wait_s) and max_retry_wait_s >= 0):
        raise InvalidArgument(f"max_retry_wait_s must be a finite number of seconds >= 0, got {max_retry_wait_s!r:.80}")
    if not (isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size >= 1):
        raise InvalidArgument(f"batch_size must be an integer >= 1, got {batch_size!r:.80}")


class _Base:
    def __init__(self, url: str, timeout: float, retries: int, max_retry_wait_s: float, batch_size: int) -> None:
        url = check_url(url)
        check_client_args(timeout, retries, max_retry_wait_s, batch_size)
        self.url, self.timeout, self.retries = url, float(timeout), int(retries)
        self.max_retry_wait_s, self.batch_size = float(max_retry_wait_s), int(batch_size)

    def _failed(self, exc: BaseException) -> ConnectionFailed:
        if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
            return DeadlineExceeded(f"server {self.url} did not answer within {self.timeout:g} s")
        return ConnectionFailed(f"server {self.url} cannot be reached "
                                f"({type(exc).__name__}: {' '.join(str(exc).split()) or 'no detail'})")

    @staticmethod
    def _answer(reply: Reply) -> Any:
        """The JSON value of a 2xx answer; raises the `APIError` of an error status, `ResponseError` for
        a 2xx that is not JSON or a status the API never answers with (1xx, 3xx)."""
        body = _json(reply)
        if reply.status >= 400:
            if not isinstance(body, dict):
                text = " ".join(reply.snippet().split())[:200] if body is _NOT_JSON else str(body)[:200]
                body = {"error": text or f"HTTP {reply.status}", "error_type": "http_error"}
            raise api_error(reply.status, body)
        if not 200 <= reply.status < 300:
            where = reply.headers.get("location")
            raise reply.malformed(f"the server answered HTTP {reply.status}"
                                  + (f" (a redirect to {where}, not followed)" if where else ""))
        if body is _NOT_JSON:
            raise reply.malformed("the answer is not JSON (is the URL a zsnli server?)")
        return body

    def _call(self, method: str, path: str, body: Any = None):
        """One HTTP call, sent again after each 503's ``Retry-After``, up to ``retries`` times."""
        content = None if body is None else _encode(body)
        for attempt in range(self.retries + 1):
            reply = yield ("request", (method, path, content))
            if reply.status != 503 or attempt == self.retries:
                return reply
            yield ("sleep", _retry_after(reply, self.max_retry_wait_s))
        raise AssertionError("unreachable")

    def _health(self):
        reply = yield from self._call("GET", "/health")
        value = self._answer(reply)
        if not isinstance(value, dict):
            raise reply.malformed("the /health answer is not a JSON object")
        return value

    def _classify(self, text, labels, hypothesis_template, multi_label, id, scoring=None):
        body = classify_body(text, labels, hypothesis_template, multi_label, id, scoring)
        labels = body["labels"]
        reply = yield from self._call("POST", "/classify", body)
        entry = self._answer(reply)
        if not isinstance(entry, dict):
            raise reply.malformed("the /classify answer is not a JSON object")
        return Classification(list(labels), _probabilities(entry, len(labels), reply, "the answer"), entry.get("id"))

    def _classify_many(self, docs):
        out: list[Any] = [None] * len(docs)
        for idx in _batches(len(docs), self.batch_size):
            pending = list(idx)
            for attempt in range(self.retries + 1):
                items = [dict(docs[i]) if isinstance(docs[i], Mapping) else docs[i] for i in pending]
                reply = yield from self._call("POST", "/classify", items)  # a non-object: the server's 422
                entries = self._answer(reply)
                if not isinstance(entries, list) or len(entries) != len(pending):
                    got = f"{len(entries)} answers" if isinstance(entries, list) else "not a JSON array"
                    raise reply.malformed(f"{len(pending)} documents were sent and the answer is {got}")
                for n, (i, entry) in enumerate(zip(pending, entries)):
                    out[i] = _outcome(docs[i], entry, reply, f"answer {n} of the array")
                pending = [i for i in pending if isinstance(out[i], UnavailableError)]
                if not pending or attempt == self.retries:
                    break
                yield ("sleep", _retry_after(reply, self.max_retry_wait_s))
        return out

    def _zero_shot(self, inputs, candidate_labels, hypothesis_template, multi_label):
        body = zero_shot_body(inputs, candidate_labels, hypothesis_template, multi_label)
        reply = yield from self._call("POST", "/v1/zero-shot-classification", body)
        value = self._answer(reply)
        if isinstance(inputs, str):
            _check_pipeline_answer(value, reply)
        elif not isinstance(value, list) or len(value) != len(inputs):
            raise reply.malformed(f"{len(inputs)} inputs were sent and the answer is not a list of that many")
        else:
            for item in value:
                _check_pipeline_answer(item, reply)
        return value


_HEADERS = {"content-type": "application/json"}


class _CallDeadline(threading.local):
    """The ``time.monotonic()`` deadline of the call this thread is reading (None: no bound)."""

    at: float | None = None


_DEADLINE = _CallDeadline()


def _bounded(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of this thread's call deadline; raises ``error`` when none is left."""
    at = _DEADLINE.at
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read and write ends by the reading thread's call deadline (a byte-a-
    second drip cannot keep it open); a timeout here makes httpcore close the connection."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _bounded(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with connects and streams bounded by the call deadline (`_DeadlineStream`)."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _DeadlineStream(self._inner.connect_tcp(host, port, _bounded(timeout, httpcore.ConnectTimeout),
                                                       local_address, socket_options))

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _DeadlineStream(self._inner.connect_unix_socket(path, _bounded(timeout, httpcore.ConnectTimeout),
                                                               socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _deadline_transport() -> httpx.BaseTransport:
    """httpx's default transport with its sockets bounded by each call's deadline (`_DeadlineBackend`). On an
    httpx whose transport is laid out otherwise it stays as it is (the caller still stops at the deadline;
    only the reader thread would outlive it)."""
    transport = httpx.HTTPTransport()
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.NetworkBackend):
        pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    return transport


class Client(_Base):
    """Blocking client (see the module docstring). url: the server (default ``http://127.0.0.1:8000``);
    timeout: seconds per HTTP call, connect + send + the whole answer (one deadline);
    retries: extra tries after a 503; max_retry_wait_s: cap on one ``Retry-After`` wait; batch_size:
    documents per ``POST /classify`` array in `classify_many` (keep it <= the server's
    ``ZSNLI_MAX_BATCH_ITEMS``, default 64). transport: an httpx transport (tests: a ``MockTransport``).
    Safe to share between threads (as ``httpx.Client`` is)."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = 60.0, retries: int = 3,
                 max_retry_wait_s: float = 30.0, batch_size: int = 32, transport: httpx.BaseTransport | None = None):
        super().__init__(url, timeout, retries, max_retry_wait_s, batch_size)
        self._http = httpx.Client(base_url=self.url, timeout=self.timeout,
                                  transport=transport if transport is not None else _deadline_transport())

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _send(self, method: str, path: str, content: bytes | None) -> Reply:
        """One HTTP call read whole within ``timeout`` seconds. The reading runs in a daemon thread whose
        socket operations end at the deadline (`_DeadlineBackend`: the connection is then closed and the
        thread ends); the caller stops waiting at the deadline itself, and gives the thread a moment
        to finish. Raises `DeadlineExceeded` or `ConnectionFailed`."""
        deadline = time.monotonic() + self.timeout
        box: dict[str, Any] = {}
        done = threading.Event()

        def read() -> None:
            _DEADLINE.at = deadline
            try:
                with self._http.stream(method, path, content=content,
                                       headers=_HEADERS if content is not None else None) as response:
                    chunks = []
                    for chunk in response.iter_bytes():
                        if time.monotonic() > deadline:
                            raise TimeoutError
                        chunks.append(chunk)
                    box["reply"] = Reply(response.status_code, response.headers, b"".join(chunks))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                box["error"] = exc
            finally:
                _DEADLINE.at = None
                done.set()

        threading.Thread(target=read, name="zsnli-client-call", daemon=True).start()
        if not done.wait(max(0.0, deadline - time.monotonic())):
            done.wait(0.5)  # the thread's sockets time out at the deadline too: it closes them and ends
            raise self._failed(TimeoutError())
        if "error" in box:
            exc = box["error"]
            if isinstance(exc, DROPPED):
                raise exc  # `_run` sends it once more
            if isinstance(exc, (httpx.HTTPError, httpx.InvalidURL, TimeoutError, OSError)):
                raise self._failed(exc) from None
            raise exc
        return box["reply"]

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
                        value = self._send(*arg)
                        break
                    except DROPPED as exc:
                        if resend:
                            raise self._failed(exc) from None
        except StopIteration as done:
            return done.value

    def health(self) -> dict[str, Any]:
        """``GET /health`` as a dict (a 503 while loading is retried, then raised as `UnavailableError`)."""
        return self._run(self._health())

    def classify(self, text: str, labels: Sequence[str], *, hypothesis_template: str | None = None,
                 multi_label: bool = False, id: Any = None, scoring: str | None = None) -> Classification:
        """Probabilities of ``labels`` for ``text`` (``POST /classify``; ``scoring="pipeline"``: the transformers
        pipeline's scoring instead of the served one). Raises a `ZsnliError`
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


class AsyncClient(_Base):
    """The asyncio twin of `Client`: the same arguments and methods, awaited
    (``async with AsyncClient(url) as zs: await zs.classify(...)``); each HTTP call is cancelled at its
    deadline (``anyio.fail_after``)."""

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

    async def _send(self, method: str, path: str, content: bytes | None) -> Reply:
        """One HTTP call read whole within ``timeout`` seconds (cancelled at the deadline)."""
        try:
            with anyio.fail_after(self.timeout):
                response = await self._http.request(method, path, content=content,
                                                    headers=_HEADERS if content is not None else None)
        except DROPPED:
            raise  # `_run` sends it once more
        except (httpx.HTTPError, httpx.InvalidURL, TimeoutError, OSError) as exc:
            raise self._failed(exc) from None
        return Reply(response.status_code, response.headers, response.content)

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
                        value = await self._send(*arg)
                        break
                    except DROPPED as exc:
                        if resend:
                            raise self._failed(exc) from None
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
