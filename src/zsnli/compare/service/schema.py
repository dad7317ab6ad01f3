"""The request body of ``POST /v1/bakeoff`` (pydantic) and its runnable example, for the checks and for ``/docs``.

`BakeoffRequest` is what `zsnli.compare.service.protocol.validate_request` validates
first (then the limits and label rules); `zsnli.compare.service.api` shows its schema
and `EXAMPLE_BAKEOFF` on ``/docs``. Kept apart from the protocol so that
registering the route imports only pydantic (the protocol brings scikit-learn).

May import: pydantic and the standard library.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

#: A bake-off that runs as it is from ``/docs`` ("Try it out"): two labels, four examples each, three fast arms.
EXAMPLE_BAKEOFF = {
    "task_description": "Route support requests to the account or the billing team",
    "examples": [
        {"input": "I cannot sign in since I changed my password", "expected": "account"},
        {"input": "The login page says my account is locked", "expected": "account"},
        {"input": "How do I change the email address of my profile?", "expected": "account"},
        {"input": "Two-factor codes never arrive on my phone", "expected": "account"},
        {"input": "I was charged twice for the March invoice", "expected": "billing"},
        {"input": "Please refund the subscription I cancelled", "expected": "billing"},
        {"input": "My card was declined when paying the renewal", "expected": "billing"},
        {"input": "Can I get a VAT receipt for last month?", "expected": "billing"},
    ],
    "labels": {"account": "signing in and account settings", "billing": "payments, invoices and refunds"},
    "candidates": ["served_about", "tfidf_logreg", "majority"],
}


class BakeoffExample(BaseModel):
    """One labelled example."""

    model_config = ConfigDict(extra="ignore")
    input: StrictStr = Field(description="The text (at most ZSNLI_BAKEOFF_MAX_INPUT_CHARS characters).")
    expected: StrictStr = Field(description="Its label: a name in `labels` when `labels` is given.")


class BakeoffRequest(BaseModel):
    """The request body of ``POST /v1/bakeoff``: unknown fields are ignored, but one that looks like a misspelt
    field (``candidatez``) is a 422 naming the field meant
    (`zsnli.compare.service.protocol.misspelt_request_fields`)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [EXAMPLE_BAKEOFF]})
    task_description: StrictStr = Field(description="What the labels mean, in a sentence (stored with the result).")
    examples: list[BakeoffExample] = Field(
        description="At least 2 labelled examples and 2 labels, at most ZSNLI_BAKEOFF_MAX_EXAMPLES examples and "
        "ZSNLI_BAKEOFF_MAX_LABELS labels; every label needs an example.")
    labels: dict[StrictStr, StrictStr] | None = Field(
        None, description="Label name -> description (the NLI hypothesis the zero-shot arms use, before any "
        "template); default: the names themselves, in order of first appearance.")
    candidates: list[StrictStr] | None = Field(
        None, description="The arms to run (default: all): served, served_about (the served model, plain and "
        "with 'This text is about {}.'), embedding_similarity, embedding_logreg, embedding_knn, tfidf_logreg, "
        "majority.")
    challenger_model: StrictStr | None = Field(
        None, description="One more arm: a model registered with ZSNLI_BAKEOFF_MODELS (by name), or an arm name.")
    retain: StrictBool = Field(False, description="Store the example texts and predictions (default: only their "
                               "sha256 is stored).")
