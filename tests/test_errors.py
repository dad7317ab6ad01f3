"""zsnli.errors: the one table of error types, and what ApiError derives from it."""

from __future__ import annotations

import pytest

from zsnli.errors import ApiError, ErrorType


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
    assert err.body()["errors"][0]["field"] == "candidate_labels[1]"
    other = ApiError(ErrorType.LABEL_TOO_LONG, "hypothesis_template is long", "hypothesis_template")
    assert other.renamed("labels", "candidate_labels").field == "hypothesis_template"
