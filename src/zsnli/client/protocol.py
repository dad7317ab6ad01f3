"""The Python clients' protocol, no I/O: the errors, the answers (`Reply` as read, `Classification` typed),
the argument checks, the request bodies, and `Calls`: each route's call as a generator of `Step`s that
`zsnli.client.Client` and `zsnli.client.AsyncClient` drive, so both share every rule.

May import: the standard library only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

DEFAULT_URL = "http://127.0.0.1:8000"


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
class Reply:
    """One whole HTTP answer, read within the deadline: ``status``, ``headers`` (httpx's), ``content`` (bytes)."""

    status: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def snippet(self) -> str:
        return self.content[:200].decode("utf-8", "replace")

    def malformed(self, what: str) -> ResponseError:
        """A `ResponseError` naming ``what`` was wrong with this answer."""
        return ResponseError(what, self.status, self.content_type, self.snippet())


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
    template is set; ``scoring``: ``"served"``, ``"pipeline"`` or ``"embedding"``, left out when None: the
    server's default). Raises
    `InvalidRequest` when ``labels`` is not a list/tuple of strings (`check_labels`) or ``multi_label``
    not a bool (`check_bool`)."""
    body: dict[str, Any] = {"text": text, "labels": check_labels(labels),
                            "multi_label": check_bool(multi_label, "multi_label")}
    optional = {"hypothesis_template": hypothesis_template, "scoring": scoring, "id": id}
    return {**body, **{k: v for k, v in optional.items() if v is not None}}


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


def _probabilities(entry: Any, n_labels: int | None, reply: Reply, where: str) -> list[float]:
    """``entry["probabilities"]`` checked: a list of ``n_labels`` numbers (when known); else `ResponseError`."""
    probs = entry.get("probabilities") if isinstance(entry, Mapping) else None
    if not isinstance(probs, list) or not all(_is_number(p) for p in probs):
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


#: A step of a call (module docstring): ``("request", (method, path, JSON bytes or None))`` answered with
#: the whole `Reply`, or ``("sleep", seconds)``.
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


class Calls:
    """Each route's call as a generator of `Step`s; the constructor checks the arguments (`check_url`,
    `check_client_args`: `InvalidArgument`) and keeps them (``timeout``, ``max_retry_wait_s``: seconds)."""

    def __init__(self, url: str, timeout: float, retries: int, max_retry_wait_s: float, batch_size: int) -> None:
        url = check_url(url)
        check_client_args(timeout, retries, max_retry_wait_s, batch_size)
        self.url, self.timeout, self.retries = url, float(timeout), int(retries)
        self.max_retry_wait_s, self.batch_size = float(max_retry_wait_s), int(batch_size)

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
        for start in range(0, len(docs), self.batch_size):
            pending = list(range(start, min(len(docs), start + self.batch_size)))
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
