"""zsnli.errors: the one table of error types, and what ApiError derives from it."""

from __future__ import annotations

import pytest

from zsnli.errors import ApiError, ErrorType, error_type_for


def test_table_statuses_and_retry_after():
    assert {t.status for t in ErrorType if t.retry_after} == {503}
    assert all(t.retry_after for t in ErrorType if t.status == 503)
    assert (ErrorType.CLIENT_GONE.wire, ErrorType.CLIENT_GONE.status) == ("disconnected", 499)
    assert (ErrorType.BODY_DISCONNECTED.wire, ErrorType.BODY_DISCONNECTED.status) == ("disconnected", 400)
    assert len({(t.wire, t.status) for t in ErrorType}) == len(ErrorType)


@pytest.mark.parametrize("kind", list(ErrorType))
def test_body_and_headers_follow_the_type(kind):
    err = ApiError(kind, "what went wrong", "labels[2]")
    body = err.body()
    assert (body["error"], body["field"], body["error_type"], err.status) == ("what went wrong", "labels[2]",
                                                                               kind.wire, kind.status)
    assert ("errors" in body) == (kind.status == 422)
    if kind.status == 422:
        assert body["errors"] == [{"field": "labels[2]", "error": "what went wrong", "type": kind.wire}]
    assert err.headers(7) == ({"Retry-After": "7"} if kind.status == 503 else None)


def test_given_errors_are_kept_and_status_override():
    items = [{"field": "text", "error": "field required", "type": "missing"}]
    assert ApiError(ErrorType.VALIDATION, "text: field required", "text", errors=items).body()["errors"] == items
    assert ApiError(ErrorType.INTERNAL, "x", status=502).status == 502


def test_renamed_names_the_alias_everywhere():
    err = ApiError(ErrorType.VALIDATION, "labels[1]: label is empty", "labels[1]").renamed("labels", "candidate_labels")
    assert (err.field, err.message) == ("candidate_labels[1]", "candidate_labels[1]: label is empty")
    assert err.body()["errors"][0] == {"field": "candidate_labels[1]", "error": "candidate_labels[1]: label is empty",
                                       "type": "validation"}
    other = ApiError(ErrorType.LABEL_TOO_LONG, "hypothesis_template is long", "hypothesis_template")
    assert other.renamed("labels", "candidate_labels").field == "hypothesis_template"
    listed = ApiError(ErrorType.VALIDATION, "texts[1]: 402 tokens", "texts[1]", errors=[
        {"field": "texts[1]", "error": "texts[1]: 402 tokens", "type": "validation"},
        {"field": "dimensions", "error": "texts: not this one", "type": "validation"}]).renamed("texts", "inputs")
    assert [e["error"] for e in listed.body()["errors"]] == ["inputs[1]: 402 tokens", "texts: not this one"]


def test_every_errors_entry_names_its_type():
    """The bake-off's 422 entries were ``{"field", "error"}`` while every other route's carried ``type``."""
    err = ApiError(ErrorType.VALIDATION, "x", "a", errors=[{"field": "a", "error": "x"},
                                                           {"field": "b", "error": "y", "type": "missing"}])
    assert [e["type"] for e in err.body()["errors"]] == ["validation", "missing"]


def test_error_type_for_finds_each_pair_and_refuses_unknown():
    for kind in ErrorType:
        assert error_type_for(kind.wire, kind.status) is kind
    with pytest.raises(KeyError):
        error_type_for("invalid_json", 422)


def test_every_body_and_connection_error_is_in_the_table():
    # each (status, wire name) the body reader raises, and the connection layer's answers
    import re
    from pathlib import Path

    import zsnli.serving.http_body as http_body

    raised = set(re.findall(r'BodyError\((\d{3}), "(\w+)"', Path(http_body.__file__).read_text()))
    assert {(int(s), w) for s, w in raised} >= {(400, "invalid_encoding"), (415, "unsupported_media_type"),
                                                (413, "payload_too_large"), (422, "validation")}
    for status, wire in raised:
        assert error_type_for(wire, int(status)).status == int(status)
    assert (ErrorType.REQUEST_TIMEOUT.wire, ErrorType.REQUEST_TIMEOUT.status) == ("request_timeout", 408)
    assert (ErrorType.INVALID_ENCODING.wire, ErrorType.INVALID_ENCODING.status) == ("invalid_encoding", 400)


def test_connection_layer_answers_use_the_table_shape():
    import json

    from zsnli.serving.http_protocol import json_error_bytes

    raw = json_error_bytes(ApiError(ErrorType.OVERLOADED, "too many"), 7)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n") and b"\r\nretry-after: 7" in head
    assert b"\r\nconnection: close" in head and b"content-length: %d" % len(body) in head
    assert json.loads(body) == {"error": "too many", "field": None, "error_type": "overloaded"}
    head, _ = json_error_bytes(ApiError(ErrorType.REQUEST_TIMEOUT, "late"), 7).split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and b"retry-after" not in head
