"""The one error table: every error the service answers, with its HTTP status and ``Retry-After``.

`ErrorType` lists the error kinds (wire name in ``error_type``, status code,
whether the answer carries ``Retry-After``); `ApiError` is raised by the
service and the HTTP layer alike and derives the JSON body and headers from
its type. Every answer has the shape ``{"error": str, "field": str | null,
"error_type": str}``; a 422 also carries ``"errors"``, one ``{"field",
"error", "type"}`` entry per problem (one entry built from the error itself
when the raiser gives none).

May import: the standard library only (no FastAPI: the HTTP layer turns
``body()`` and ``headers()`` into a response).
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class ErrorType(Enum):
    """``(wire name, HTTP status, carries Retry-After)`` of each kind of error."""

    INVALID_JSON = ("invalid_json", 400, False)
    INVALID_ENCODING = ("invalid_encoding", 400, False)
    MALFORMED_REQUEST = ("malformed_request", 400, False)
    BODY_DISCONNECTED = ("disconnected", 400, False)
    UNAUTHORIZED = ("unauthorized", 401, False)
    FORBIDDEN = ("forbidden", 403, False)
    NOT_FOUND = ("not_found", 404, False)
    METHOD_NOT_ALLOWED = ("method_not_allowed", 405, False)
    REQUEST_TIMEOUT = ("request_timeout", 408, False)
    PAYLOAD_TOO_LARGE = ("payload_too_large", 413, False)
    UNSUPPORTED_MEDIA_TYPE = ("unsupported_media_type", 415, False)
    HEADERS_TOO_LARGE = ("headers_too_large", 431, False)
    VALIDATION = ("validation", 422, False)
    LABEL_TOO_LONG = ("label_too_long", 422, False)
    CLIENT_GONE = ("disconnected", 499, False)
    INTERNAL = ("internal", 500, False)
    INFERENCE = ("inference", 500, False)
    NON_FINITE = ("non_finite", 500, False)
    NOT_IMPLEMENTED = ("not_implemented", 501, False)
    LOADING = ("loading", 503, True)
    UNAVAILABLE = ("unavailable", 503, True)
    OVERLOADED = ("overloaded", 503, True)
    TIMEOUT = ("timeout", 503, True)
    RECEIPT = ("receipt", 503, True)
    STORE = ("store", 503, True)

    def __init__(self, wire: str, status: int, retry_after: bool) -> None:
        self.wire = wire
        self.status = status
        self.retry_after = retry_after


def error_type_for(wire: str, status: int) -> ErrorType:
    """The `ErrorType` with this wire name and status (``("disconnected", 400)`` is
    ``BODY_DISCONNECTED``, ``("disconnected", 499)`` ``CLIENT_GONE``). Raises ``KeyError``
    for a pair the table does not hold (a raiser that left the table)."""
    for kind in ErrorType:
        if kind.wire == wire and kind.status == status:
            return kind
    raise KeyError(f"no error type {wire!r} with status {status}")


#: Most ``errors`` entries one answer lists; the rest are counted in one last entry of type ``truncated``. A body of a
#: million bad items (``"labels": [1, 1, ...]``) was answered with a million entries, 93 MB for 2 MiB (issue 57).
MAX_ERROR_ENTRIES = 50
#: Most characters of any text an error answer quotes back (its message, a field name, an entry's text): a
#: misspelt key of a megabyte is named by its first `MAX_ERROR_CHARS` characters and its length.
MAX_ERROR_CHARS = 2000


def clipped(text: str | None) -> str | None:
    """``text`` cut to `MAX_ERROR_CHARS` characters with ``... (N characters)`` after the cut; None stays None."""
    if text is None or len(text) <= MAX_ERROR_CHARS:
        return text
    return f"{text[:MAX_ERROR_CHARS]}... ({len(text)} characters)"


def bounded_entries(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most `MAX_ERROR_ENTRIES` of ``errors`` with their texts `clipped`, and, when there were more, one last
    entry ``{"field": "body", "error": "N more problems not listed ...", "type": "truncated"}``: an error answer is
    bounded whatever the request held."""
    kept = [{k: clipped(v) if isinstance(v, str) else v for k, v in entry.items()}
            for entry in errors[:MAX_ERROR_ENTRIES]]
    if len(errors) > MAX_ERROR_ENTRIES:
        kept.append({"field": "body", "error": f"{len(errors) - MAX_ERROR_ENTRIES} more problems not listed (the first "
                     f"{MAX_ERROR_ENTRIES} are; fix those and send again)", "type": "truncated"})
    return kept


class ApiError(Exception):
    """An error answered as ``{"error", "field", "error_type"}`` with the status of ``error_type``
    (`openai_shaped` on an OpenAI-compatible route).

    message: one line for the client; field: the request field it is about
    (``labels[3]``, ``body``) or None; errors: for a 422, the per-problem
    entries (default: one built from ``field`` and ``message``; an entry without ``type`` gets the error's
    wire name, so every route's entries are ``{"field", "error", "type"}``); status:
    overrides the type's status (only for errors passed through from the
    framework, e.g. an HTTP error other than 404/405). The answer is bounded whatever the request held:
    ``message`` and ``field`` are `clipped`, ``errors`` is `bounded_entries`.
    """

    def __init__(self, error_type: ErrorType, message: str, field: str | None = None, *,
                 errors: list[dict[str, Any]] | None = None, status: int | None = None) -> None:
        message, field = clipped(message) or "", clipped(field)
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.field = field
        self.status = status or error_type.status
        if errors is None and self.status == 422:
            errors = [{"field": field or "body", "error": message, "type": error_type.wire}]
        if errors is not None:  # one shape on every route: an entry that names no type has the error's own
            errors = [entry if "type" in entry else {**entry, "type": error_type.wire} for entry in errors]
        self.errors = bounded_entries(errors) if errors is not None else None

    def body(self) -> dict[str, Any]:
        """The JSON body: ``error``, ``field``, ``error_type`` and, for a 422, ``errors``."""
        out: dict[str, Any] = {"error": self.message, "field": self.field, "error_type": self.error_type.wire}
        if self.errors is not None:
            out["errors"] = self.errors
        return out

    def headers(self, retry_after_s: int) -> dict[str, str] | None:
        """``{"Retry-After": str(retry_after_s)}`` when the type carries it, else None."""
        return {"Retry-After": str(retry_after_s)} if self.error_type.retry_after else None

    def renamed(self, old: str, new: str) -> "ApiError":
        """Rename the field ``old`` (and ``old[i]``) to ``new`` in ``field``, a message that starts
        with it and every ``errors`` entry, its ``field`` and an ``error`` text that starts with it (the HTTP layer
        names the alias the client sent, in every place the answer names the field)."""

        def swap(text: str | None) -> str | None:
            return new + text[len(old):] if text and text.startswith(old) else text

        if self.field and self.field.startswith(old):
            self.field, self.message = swap(self.field), swap(self.message)
        for item in self.errors or []:
            if isinstance(item.get("field"), str) and item["field"].startswith(old):
                item["field"] = swap(item["field"])
                if isinstance(item.get("error"), str):
                    item["error"] = swap(item["error"])
        return self


def openai_shaped(body: dict[str, Any]) -> dict[str, Any]:
    """A zsnli error body (``{"error": str, "field", "error_type", ...}``) in OpenAI's error shape, for an
    OpenAI-compatible route: ``error`` becomes ``{"message", "type", "param", "code"}`` (message the text,
    type zsnli's ``error_type``, param the ``field``, code null), every other key kept. The ``openai``
    client puts ``error.message`` in its exception; with ``error`` a string it showed only the status."""
    return {**body, "error": {"message": body["error"], "type": body.get("error_type"), "param": body.get("field"),
                              "code": None}}


#: Paths whose clients read OpenAI's error shape (`openai_shaped`): the OpenAI-compatible embeddings route.
OPENAI_ROUTES = ("/v1/embeddings",)


def shaped_for(path: str | None, body: dict[str, Any]) -> dict[str, Any]:
    """An error ``body`` as the route at ``path`` answers it: `openai_shaped` on `OPENAI_ROUTES`, else as it is.
    Every writer of an error answer (the app's handlers, the API key check, the connection layer) calls it."""
    return openai_shaped(body) if path in OPENAI_ROUTES else body
