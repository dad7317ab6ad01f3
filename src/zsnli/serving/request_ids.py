"""Request ids: ``X-Request-ID`` echoed (or made up), logged in the access line and put in error bodies.

`RequestIdMiddleware` (pure ASGI, outermost of the app's middleware):

* the id is the request's ``X-Request-ID`` when it is 1 to `MAX_ID_CHARS` visible ASCII characters,
  else a new one (32 hex digits, uuid4), as text-embeddings-inference and vLLM do;
* every answer carries it back in ``X-Request-ID``;
* every JSON error answer (status >= 400 with an ``error_type``) gets ``"request_id"`` in its body, and the
  request's state holds it (`REQUEST_ID_STATE`) for an error answered inside a 200 (a ``/classify`` array's item);
* with ``access_log`` on (`zsnli.serve` turns uvicorn's own access line off and this one on), one line
  per request on the ``zsnli.access`` logger: client, request line, status, milliseconds, ``request_id=``
  and, when the client sent a valid W3C ``traceparent`` (`valid_traceparent`: an all-zero id, version ``ff``,
  upper-case hex, a wrong length or a second ``traceparent`` header is treated as absent), ``traceparent=``
  (not echoed: it is passed on, not answered).

Every value of that line a client controls (client address, method, path, query, version, id,
traceparent) goes through `log_safe` first, as does every other client-controlled value logged by
the server (`zsnli.serving.app`, the bake-off service): percent-decoded ``%0d%0a`` in a path cannot
start a forged log line, and ``%1b`` / ``%07`` cannot reach a terminal raw (uvicorn's
CVE-2020-7694, which its own access logger fixed by quoting the path); the path and query are quoted too
(`logged_target`), so a ``"`` or ``request_id=`` in them cannot fake a field of the line. The value of a query
parameter that may carry a secret (``?api_key=``, ``access_token``, ``key``, ``token``, ``pwd``, ``jwt``, ``sig``,
``session``, ``k``, an empty name and more, any case, matched as whole words: `secret_name`) is written `REDACTED`, in this line, in
uvicorn's own access line (`RedactedQueryFilter`, for a bare ``uvicorn server:app``; the query spelt the same way,
`logged_query`) and in uvicorn's trace lines (`RedactedScopeFilter`: the query and the key-carrying headers).

`request_id` gives the id a connection-level answer should carry (`zsnli.serving.http_protocol`), and
`wire_status` the status a request really got when that layer answered it while the app was serving it.
Imports only the standard library.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any, Iterable
from urllib.parse import quote, unquote_plus

MAX_ID_CHARS = 128
_VALID_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_ID_CHARS}}}")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.S)

access_logger = logging.getLogger("zsnli.access")

#: Key of the request's state (``request.state.request_id``) that holds its id, for an answer that carries errors
#: inside a 200 (the items of a ``/classify`` array: `zsnli.serving.routes_zsnli.array_entry`).
REQUEST_ID_STATE = "request_id"

#: Scope key where `zsnli.serving.http_protocol` puts the status it wrote itself for a request the app is serving.
WIRE_STATUS = "zsnli.wire_status"


def wire_status(scope: Any, app_status: int | None) -> int | None:
    """The status that went on the wire for ``scope``'s request: the connection layer's own answer
    (`WIRE_STATUS`, e.g. the 503 of a body cut off at SIGTERM, after which the app's answer is dropped),
    else ``app_status`` (the app's)."""
    return scope.get(WIRE_STATUS, app_status)

_BIDI = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escaped(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    code = ord(ch)
    if code < 0x20 or 0x7f <= code <= 0x9f or code in (0x2028, 0x2029) or ch in _BIDI:
        return f"\\x{code:02x}" if code <= 0xff else f"\\u{code:04x}"
    return ch


_UNSAFE = re.compile("[\\\\\x00-\x1f\x7f-\x9f\u2028\u2029" + "".join(sorted(_BIDI)) + "]")


def log_safe(value: Any) -> str:
    """``str(value)`` fit for one log line: C0 controls (CR, LF, ESC, BEL, ...), DEL, C1 controls
    (NEL included), the line and paragraph separators U+2028/U+2029 and bidi overrides written as
    ``\\xNN`` / ``\\uNNNN``, a backslash as ``\\\\`` (so an escape in the log is never the client's
    own text). Everything else, non-ASCII letters included, stays as it is. ``None`` -> ``"-"``.
    Never raises."""
    if value is None:
        return "-"
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(lambda m: _escaped(m.group()), text)


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def request_id(headers: Iterable[tuple[bytes, bytes]] | None = None) -> str:
    """The request's ``X-Request-ID`` when valid (1-128 visible ASCII characters), else a new uuid4 hex."""
    given = _header(headers or (), b"x-request-id")
    if given is not None and _VALID_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """See the module docstring. ``access_log``: write the ``zsnli.access`` line of each request."""

    def __init__(self, app: Any, access_log: bool = False) -> None:
        self.app, self.access_log = app, access_log

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rid = request_id(scope.get("headers", ()))
        scope.setdefault("state", {})[REQUEST_ID_STATE] = rid  # request.state.request_id, for errors inside a 200
        t0 = time.perf_counter()
        state: dict[str, Any] = {"status": None, "start": None, "body": None}

        async def tagged_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                headers.append((b"x-request-id", rid.encode("latin-1")))
                message = {**message, "headers": headers}
                state["status"] = message["status"]
                if message["status"] >= 400 and (_header(headers, b"content-type") or "").startswith(
                        "application/json"):
                    state["start"], state["body"] = message, b""  # hold it: the body gets the id
                    return
                self._log(scope, message["status"], t0, rid)
                return await send(message)
            if message["type"] == "http.response.body" and state["start"] is not None:
                state["body"] += message.get("body", b"")
                if message.get("more_body", False):
                    return
                start, body = state["start"], _with_id(state["body"], rid)
                state["start"] = None
                headers = [(k, str(len(body)).encode() if k.lower() == b"content-length" else v)
                           for k, v in start["headers"]]
                self._log(scope, start["status"], t0, rid)
                await send({**start, "headers": headers})
                return await send({"type": "http.response.body", "body": body})
            return await send(message)

        await self.app(scope, receive, tagged_send)

    def _log(self, scope: Any, status: int, t0: float, rid: str) -> None:
        if not self.access_log:
            return
        client = scope.get("client")
        where = log_safe(f"{client[0]}:{client[1]}") if client else "-"
        path = logged_target(scope.get("path", ""), scope.get("query_string") or b"")
        traces = [v for k, v in scope.get("headers", ()) if k.lower() == b"traceparent"]
        trace = traces[0].decode("latin-1") if len(traces) == 1 else None  # two or more: invalid (W3C 3.2)
        trace = f" traceparent={log_safe(trace)}" if trace and valid_traceparent(trace) else ""
        access_logger.info('%s - "%s %s HTTP/%s" %d %.1f ms request_id=%s%s', where, log_safe(scope.get("method")),
                           log_safe(path), log_safe(scope.get("http_version", "1.1")), wire_status(scope, status),
                           (time.perf_counter() - t0) * 1000, log_safe(rid), trace)


def secret_name(name: str) -> bool:
    """Whether a query parameter named ``name`` (percent-decoded or not, any letter case) may carry a secret.

    The name is cut into words (`name_words`: at every character other than a letter, between a lower-case letter
    or digit and a capital, and between digits and letters: ``X-Api-Key``, ``apiKey``, ``api_key2`` -> ``api``,
    ``key``) and is secret when a word is one of `SECRET_WORDS` (``key``, ``token``, ``secret``, ``pass``,
    ``password``, ``passwd``, ``passphrase``, ``pwd``, ``auth``, ``sig``, ``signature``, ``jwt``, ``bearer``,
    ``session``, ``sessionid``, ``cred``, ``cookie``, ``apikey``, ..., and their plurals) or ends in one of
    `SECRET_ENDINGS` (a compound written as one word: ``accesstoken``, ``clientsecret``, ``newpassword``,
    ``jsessionid``, ``xapikey``, ``dbpass``, ``hfkey``) or in one of them and an ``s`` (its plural: ``accesstokens``,
    ``clientsecrets``, ``dbpasswords``, ``hotkeys``, once logged in clear while ``tokens`` was hidden), or the whole
    name is ``k`` or empty (``?=value``). Whole words, not substrings: ``passage``, ``design``, ``keyboard``,
    ``author``, ``tokenizer``, ``passes_total`` keep their values (issue: ``?passage=`` was hidden as if ``pass``);
    a word ending in ``key`` or ``pass`` (``compass``) is hidden. ``api_key``, ``access_token`` (RFC 6750 section
    2.3), Google's ``key``, ``hf_token``, ``sessionid``, ``sid`` are hidden. ``code`` (an OAuth authorisation code)
    is shown on purpose: too many harmless parameters are named so (a language, a status, a postcode)."""
    decoded = unquote_plus(name).strip()
    if decoded.lower() in _SECRET_NAMES:
        return True
    return any(_secret_word(word) or (word.endswith("s") and _secret_word(word[:-1])) for word in name_words(decoded))


def _secret_word(word: str) -> bool:
    return word in SECRET_WORDS or word.endswith(SECRET_ENDINGS)


def name_words(name: str) -> list[str]:
    """``name`` cut into lower-case words: runs of letters or of digits, a capital starting a new word after a
    lower-case letter or a digit, and an acronym's last capital starting the next word (``APIKey`` -> ``api``,
    ``key``); every other character separates (``_``, ``-``, ``.``, ``[``, a space)."""
    return [w.lower() for w in _WORD.findall(name)]


_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_]+")
#: Whole words (in `name_words`) of a parameter name that may carry a secret; a plural (``keys``) counts too.
SECRET_WORDS = frozenset({
    "key", "apikey", "accesskey", "privatekey", "secretkey", "sessionkey", "authkey", "token", "secret", "pass",
    "passwd", "password", "passphrase", "passcode", "passkey", "pwd", "auth", "oauth", "authorization", "authn",
    "sig", "signature", "jwt", "bearer", "session", "sessionid", "sessid", "sid", "cred", "credential", "cookie"})
#: Endings of a one-word compound that carries a secret (``accesstoken``, ``clientsecret``, ``jsessionid``, ``dbpass``,
#: ``hfkey``; their plurals too: `secret_name`): ``key`` and ``pass`` too, so ``compass`` and ``monkey`` are hidden in vain, which costs less than
#: ``dbpass`` in clear.
SECRET_ENDINGS = ("token", "secret", "password", "passwd", "pwd", "apikey", "sessionid", "sessid", "signature",
                  "credential", "credentials", "key", "pass")
_SECRET_NAMES = frozenset({"", "k"})
#: What stands in the log for the value of a `secret_name` parameter.
REDACTED = "REDACTED"


def redacted_query(query: str) -> str:
    """``query`` (a URL's query, ``a=1&api_key=s3cr3t``) with the value of every parameter of `secret_name`
    replaced by `REDACTED` (``a=1&api_key=REDACTED``); every other byte as it was. A key sent in the query is
    refused (the server reads it only from ``Authorization``) and must not reach a log in clear either."""
    parts = re.split(r"([&;])", query)
    for i in range(0, len(parts), 2):
        name, sep, _ = parts[i].partition("=")
        if sep and secret_name(name):
            parts[i] = f"{name}={REDACTED}"
    return "".join(parts)


def valid_traceparent(value: str) -> bool:
    """Whether ``value`` is a valid W3C ``traceparent`` (Trace Context Level 1, section 3.2): ``version-trace_id-
    parent_id-flags`` in lower-case hex of 2, 32, 16 and 2 digits; version ``ff`` is invalid, an all-zero trace id
    or parent id is invalid, version ``00`` has nothing after the flags, and a higher version may only continue
    with ``-`` (section 3.2.4). An invalid one is treated as absent, as the spec asks (a new trace would start):
    it is not logged."""
    found = _TRACEPARENT.fullmatch(value)
    if found is None:
        return False
    version, trace_id, parent_id, _, rest = found.groups()
    return (version != "ff" and trace_id != "0" * 32 and parent_id != "0" * 16
            and (version != "00" or rest is None))


def logged_query(query: str) -> str:
    """A query as both access lines show it (ours and a bare uvicorn's): `redacted_query`, then everything but
    its existing escapes and ``/?&%:+,;@=`` percent-encoded, so a quote or a space the client sent cannot close the
    quoted request; the ``=`` of a name that is a field of the line (``request_id=``, ``traceparent=``) is
    written ``%3D``, so the query cannot plant such a field before the real one."""
    text = quote(redacted_query(query), safe="/?&%:+,;@=", encoding="latin-1")
    return _FIELD_NAME.sub(lambda found: found.group(1) + "%3D", text)


_FIELD_NAME = re.compile(r"(request_id|traceparent)=", re.I)


def logged_target(path: str, query: bytes) -> str:
    """The request target as the access line shows it: the (percent-decoded) path percent-encoded again as
    uvicorn's access logger does (``urllib.parse.quote``, only ``/`` kept), then ``?`` and `logged_query`."""
    text = quote(path, safe="/")
    if query:
        text += "?" + logged_query(query.decode("latin-1"))
    return text


class RedactedQueryFilter(logging.Filter):
    """A filter for uvicorn's own access logger (``uvicorn.access``, on under a bare ``uvicorn server:app``): its
    request target (the third argument of ``'%s - "%s %s HTTP/%s" %d'``) with `logged_query` applied."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            path, _, query = args[2].partition("?")
            record.args = (*args[:2], f"{path}?{logged_query(query)}", *args[3:])
        return True


#: Request headers whose values a trace line never shows (uvicorn's ``Started scope=`` line lists all headers).
SECRET_HEADERS = frozenset({b"authorization", b"proxy-authorization", b"cookie", b"x-api-key", b"api-key"})


def redacted_scope(value: Any) -> Any:
    """An ASGI scope (or message) dict as a trace line may show it: a copy with `redacted_query` applied to its
    ``query_string`` and the values of `SECRET_HEADERS` replaced by `REDACTED`; anything else as it is."""
    if not isinstance(value, dict):
        return value
    shown = dict(value)
    if isinstance(shown.get("query_string"), (bytes, bytearray)):
        shown["query_string"] = redacted_query(bytes(shown["query_string"]).decode("latin-1")).encode("latin-1")
    if isinstance(shown.get("headers"), (list, tuple)):
        shown["headers"] = [(k, REDACTED.encode()) if isinstance(k, bytes) and k.lower() in SECRET_HEADERS else (k, v)
                            for k, v in shown["headers"]]
    return shown


class RedactedScopeFilter(logging.Filter):
    """A filter for uvicorn's trace loggers (``uvicorn.asgi``, ``uvicorn.error``; on at ``ZSNLI_LOG_LEVEL=trace``):
    every dict argument (``ASGI [2] Started scope={...}``, a message) through `redacted_scope`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(arg, dict) for arg in record.args):
            record.args = tuple(redacted_scope(arg) for arg in record.args)
        return True


def redact_uvicorn_access_log() -> None:
    """Put one `RedactedQueryFilter` on the ``uvicorn.access`` logger and one `RedactedScopeFilter` on
    ``uvicorn.asgi`` and ``uvicorn.error`` (idempotent)."""
    for name, kind in (("uvicorn.access", RedactedQueryFilter), ("uvicorn.asgi", RedactedScopeFilter),
                       ("uvicorn.error", RedactedScopeFilter)):
        target = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in target.filters):
            target.addFilter(kind())


def _with_id(body: bytes, rid: str) -> bytes:
    """An error body with ``"request_id"`` added (bodies that are not a JSON error object come back as they are)."""
    try:
        obj = json.loads(body)
    except ValueError:
        return body
    if not isinstance(obj, dict) or "error_type" not in obj:
        return body
    obj["request_id"] = rid
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
