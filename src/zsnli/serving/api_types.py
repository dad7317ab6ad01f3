"""The HTTP request, response and error models (pydantic), with the OpenAPI examples.

`ClassifyRequest` validates a ``POST /classify`` body (after the HTTP layer
has renamed ``candidate_labels`` to ``labels``); `ClassifyResponse`,
`ErrorResponse` and `HealthResponse` document the answers. Unknown extra
fields in a request are ignored (so a line of the examples JSONL, with
``dataset`` and ``label``, can be posted as it is), except one that looks like
a misspelt field (`resembled_field`: ``multi_lable``) or a legacy or foreign name of
one (`CLASSIFY_LEGACY`: ``multi_class``, ``sequence``), which is a 422 naming the field to use. `classify_fields` holds the pipeline rule for
``candidate_labels``: without a ``hypothesis_template`` they get the pipeline's
default, `PIPELINE_TEMPLATE` (``labels`` stay literal hypotheses).
The routes' OpenAPI documentation built from these models (error statuses with real examples, request bodies
with examples) is `zsnli.serving.openapi_docs`.

May import: pydantic and the standard library. Imported by `zsnli.serving.app`, `zsnli.serving.http_request`,
`zsnli.serving.inference_api`, `zsnli.serving.openapi_docs` and `zsnli.serving.service` (`classify_fields`).
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Iterable, Literal, Mapping, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationInfo, field_validator

FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]
RequestId = Union[StrictStr, StrictInt, FiniteFloat, None]

EXAMPLE_REQUEST = {
    "id": "doc-1",
    "text": "The striker scored twice as the home side won the derby 3-1.",
    "labels": ["This text is about sport.", "This text is about business.", "This text is about science."],
}
EXAMPLE_TEMPLATE = {
    "id": 7,
    "text": "Shares fell 4% after the bank cut its profit forecast.",
    "candidate_labels": ["sport", "business", "science"],
    "hypothesis_template": "This text is about {}.",
}
EXAMPLE_MULTI = {
    "id": "doc-3",
    "text": "The new phone's chip was designed by the football club's sponsor.",
    "labels": ["technology", "sport", "politics"],
    "hypothesis_template": "This text is about {}.",
    "multi_label": True,
}

#: The transformers zero-shot pipeline's default ``hypothesis_template``.
PIPELINE_TEMPLATE = "This example is {}."
#: The fields of a ``POST /classify`` body.
CLASSIFY_FIELDS = ("id", "text", "labels", "candidate_labels", "hypothesis_template", "multi_label", "cascade", "scoring")
#: The values of a request's ``scoring`` (`zsnli.request_scoring.scoring_named` decides; a test keeps the
#: lists equal): ``served`` (the scoring ``/health`` shows, the calibrated one for the shipped model),
#: ``pipeline`` (the transformers zero-shot pipeline's: softmax of the entailment logits over the labels at
#: T = 1; `zsnli.request_scoring.PIPELINE_SCORING`) and ``embedding`` (the fast path: the sentence encoder's
#: cosine alone, `zsnli.request_scoring.embedding_scoring`). Left out: the server's ``ZSNLI_SCORING``.
SCORINGS = ("served", "pipeline", "embedding")
Scoring = Literal["served", "pipeline", "embedding"]
#: Extra fields of an examples-file line (section 9 of DESIGN.md): ignored, never taken for a misspelling
#: (``label``, the gold index, is one letter from ``labels``).
EXAMPLE_LINE_FIELDS = ("dataset", "label")
#: How alike (difflib ratio of the names lower-cased, ``_``/``-``/spaces removed) an unknown field and a
#: known one must be for the unknown one to be taken for a misspelling: 0.8 catches one letter
#: swapped, dropped or doubled in names of 4+ letters (``multi_lable``, ``hypothesis_templte``, ``texts``).
MISSPELLING_RATIO = 0.8


#: Names a user brings from elsewhere for a ``/classify`` field, which would change the answer if ignored:
#: name -> (the field to use, where the name comes from). A 422 naming the field, whatever the spelling distance
#: (``multi_class`` is far from ``multi_label`` by letters but is the same setting).
CLASSIFY_LEGACY = {
    "multi_class": ("multi_label", "the transformers pipeline's former name for multi_label"),
    "sequences": ("text", "the transformers pipeline's argument name"),
    "sequence": ("text", "the name of the text in the pipeline's answer"),
    "template": ("hypothesis_template", "hypothesis_template is the field's name"),
    # {"hypothesis": "This is {}."} was dropped without a word and the labels scored as bare hypotheses
    "hypothesis": ("hypothesis_template", "the hypothesis of each label is made from hypothesis_template"),
}
#: The same for the keys of the Inference API's ``parameters`` (`zsnli.serving.inference_api`).
PARAMETER_LEGACY = {
    "multi_class": ("multi_label", "the transformers pipeline's former name for multi_label"),
    "labels": ("candidate_labels", "the Inference API's name for the labels"),
    "template": ("hypothesis_template", "hypothesis_template is the parameter's name"),
    "hypothesis": ("hypothesis_template", "the hypothesis of each label is made from hypothesis_template"),
}


def _squash(name: str) -> str:
    return "".join(c for c in name.lower() if c not in "_- ")


def resembled_field(name: str, known: Iterable[str], ignored: Iterable[str] = ()) -> str | None:
    """The known field an unknown field ``name`` looks like a misspelling of, or None.

    None when ``name`` is known, in ``ignored``, or like no known field (`MISSPELLING_RATIO`);
    the same name in another case or with other separators (``multiLabel``) resembles its field.
    """
    known = list(known)
    if name in known or name in ignored:
        return None
    squashed = {_squash(k): k for k in known}
    if _squash(name) in squashed:
        return squashed[_squash(name)]
    close = difflib.get_close_matches(_squash(name), list(squashed), n=1, cutoff=MISSPELLING_RATIO)
    return squashed[close[0]] if close else None


def misspelt_fields(body: Mapping[str, Any], known: Iterable[str], ignored: Iterable[str] = (),
                    prefix: str = "", legacy: Mapping[str, tuple[str, str]] | None = None) -> list[dict[str, str]]:
    """One ``{"field", "error", "type"}`` entry (a 422's ``errors`` item) per key of ``body`` that is a
    legacy or foreign name of a field (``legacy``: name -> (field, where the name comes from), e.g.
    `CLASSIFY_LEGACY`'s ``multi_class``; type ``legacy_field``) or that `resembled_field` takes for a
    misspelling (type ``misspelt_field``); ``prefix`` is put before the names (``parameters.``). A legacy
    name that is in ``known`` or ``ignored`` is not one."""
    known, ignored, legacy = list(known), list(ignored), dict(legacy or {})
    out = []
    for key in body:
        if not isinstance(key, str):
            continue
        if key in legacy and key not in known and key not in ignored:
            field, why = legacy[key]
            out.append({"field": prefix + key, "error": f"unknown field ({why}); did you mean {prefix + field}?",
                        "type": "legacy_field"})
        elif (close := resembled_field(key, known, ignored)) is not None:
            out.append({"field": prefix + key, "error": f"unknown field; did you mean {prefix + close}?",
                        "type": "misspelt_field"})
    return out


def classify_body_hint(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(field, message)`` of a 422 for a ``/classify`` body that a user brought from another API, or None.

    An Inference API payload (``inputs`` / ``parameters``, with or without a ``text``): the route that takes it. No
    ``labels`` or ``candidate_labels`` but a ``label`` (an examples line's gold index, otherwise ignored):
    the field to use. Labels given as one string (``"a, b"``): ``/classify`` takes a list; the Inference API
    route splits a string on commas as the pipeline does.
    """
    if "inputs" in body or "parameters" in body:  # ignored here, they would change the answer
        field = "parameters" if "text" in body else "text"
        missing = "field required; " if field == "text" else "not a field of POST /classify (ignored, it would " \
            "change the answer); "
        return field, (f"{field}: {missing}inputs and parameters are the Inference API's payload: send it to "
                       "POST /v1/zero-shot-classification (or POST /), or send text, labels (or candidate_labels), "
                       "hypothesis_template and multi_label at the top level here")
    if "labels" not in body and "candidate_labels" not in body and "label" in body:
        return "labels", ("labels: field required; did you mean labels (a list of label descriptions)? label is an "
                          "examples line's gold index and is ignored here")
    for name in ("labels", "candidate_labels"):
        if isinstance(body.get(name), str):
            return name, (f"{name}: must be a list of strings, got one string; POST /classify takes a list "
                          f"([\"sport\", \"business\"]); POST /v1/zero-shot-classification splits "
                          "parameters.candidate_labels given as one string on commas, as the pipeline does")
    return None


def classify_fields(body: Mapping[str, Any]) -> tuple[Any, str | None, bool]:
    """``(labels, hypothesis_template, used candidate_labels)`` of a ``/classify`` body, as sent: ``labels``,
    else ``candidate_labels``; ``candidate_labels`` without a template (absent or null) get
    `PIPELINE_TEMPLATE`, as in the transformers pipeline; ``labels`` are used as they are."""
    used_alias = "labels" not in body and "candidate_labels" in body
    labels = body.get("candidate_labels") if used_alias else body.get("labels")
    template = body.get("hypothesis_template")
    if used_alias and template is None:
        template = PIPELINE_TEMPLATE
    return labels, template, used_alias


TEMPLATE_RULE = ("hypothesis_template must contain exactly one '{}' slot and no other '{' or '}' "
                 "(e.g. 'This text is about {}.'); the label replaces the slot literally")
#: A Python ``str.format`` replacement field with a name, index, conversion or format spec: ``{label}``,
#: ``{0}``, ``{!r}``, ``{:>10}`` (``{}`` itself is the slot).
_FORMAT_FIELD = re.compile(r"\{[^{}]+\}")


def template_problem(template: str) -> str | None:
    """Why ``template`` is not a valid ``hypothesis_template`` (None when it is one): exactly one ``{}``
    slot and no other brace. Python ``str.format`` fields (``{label}``, ``{0}``, ``{!r}``) and ``{{``
    escapes get a message saying that the slot is filled literally, not by ``str.format``, and what to
    write instead (the template with each field replaced by ``{}``, when that leaves one slot)."""
    rest = template.replace("{}", "", 1)
    if template.count("{}") == 1 and not rest.count("{") and not rest.count("}"):
        return None
    if "{{" in template or "}}" in template:
        return ("'{{' and '}}' are str.format escapes, but the template is not formatted: a literal brace is not "
                f"allowed beside the slot; {TEMPLATE_RULE}")
    fields = _FORMAT_FIELD.findall(template)
    if fields:
        suggestion = _FORMAT_FIELD.sub("{}", template)
        fix = (f"write {suggestion!r}" if suggestion.count("{}") == 1 and
               not suggestion.replace("{}", "", 1).count("{") and not suggestion.replace("{}", "", 1).count("}")
               else "write the template with one '{}' where the label goes, e.g. 'This text is about {}.'")
        return (f"{fields[0]} is a Python format field, but the label is put into the template's one '{{}}' "
                f"slot literally (not by str.format, so names, indexes and format specs have no meaning): {fix}")
    if "{}" not in template:
        return f"no '{{}}' slot for the label: {TEMPLATE_RULE}"
    if template.count("{}") > 1:
        return f"{template.count('{}')} '{{}}' slots, but one label fills one slot: {TEMPLATE_RULE}"
    return TEMPLATE_RULE


class LabelError(ValueError):
    """A problem with label ``index`` (the validation error names ``labels[index]``)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


class ClassifyRequest(BaseModel):
    """One document and its candidate labels."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={"examples": [EXAMPLE_REQUEST, EXAMPLE_TEMPLATE, EXAMPLE_MULTI]},
    )

    id: RequestId = Field(None, description="Echoed back as given (string or number).")
    text: StrictStr = Field(
        description="The document (NLI premise). May be empty. Cut to ZSNLI_MAX_TEXT_CHARS characters, "
        "then truncated to the model window on the text side only."
    )
    labels: list[StrictStr] = Field(
        min_length=1,
        description="Label descriptions (NLI hypotheses), used as given unless hypothesis_template is set. "
        "`candidate_labels` is accepted as an alias; sent without hypothesis_template they get the "
        "pipeline's default template `This example is {}.`. At most ZSNLI_MAX_LABELS; none may be empty "
        "or too long to fit the model window alone.",
    )
    hypothesis_template: StrictStr | None = Field(
        None, description="Optional template with exactly one `{}` slot and no other braces, e.g. "
        "`This text is about {}.`; the label replaces the slot literally (not a Python format string: "
        "`{label}` or `{0}` is refused with a message saying what to write)."
    )
    multi_label: StrictBool = Field(
        False,
        description="Score each label independently (softmax over entailment vs contradiction); "
        "the probabilities then need not sum to 1. null: the default (false).",
    )
    cascade: StrictBool = Field(
        True,
        description="Where calibration.json has a label cascade (see /health: scoring.cascade), a request with "
        "that many labels or more has its labels ranked by the sentence encoder's cosine and only the top ones "
        "scored by the cross-encoder (the others get the lowest scored label's NLI score plus their own cosine "
        "term). false scores every label with the cross-encoder. null: the default (true).",
    )
    scoring: Scoring | None = Field(
        None, description="Single-label scoring: `served` (the scoring GET /health shows: for the "
        "shipped model its calibration), `pipeline` (the transformers zero-shot pipeline's own: softmax of the "
        "entailment logits over the labels, T = 1, no correction), to compare like with like, or `embedding` "
        "(the fast path: the sentence encoder's cosine alone with its own calibrated temperature, no "
        "cross-encoder pair; several times faster, less accurate: see the API guide). Left out: the server's "
        "default (ZSNLI_SCORING, `served` unless set; GET /health: default_scoring). multi_label is the "
        "pipeline's rule whatever the scoring.")

    @field_validator("multi_label", "cascade", mode="before")
    @classmethod
    def _null_is_the_default(cls, value: Any, info: ValidationInfo) -> Any:
        """``null`` for ``multi_label`` or ``cascade`` means the default, as it does for ``hypothesis_template`` and
        ``scoring`` (clients that write every optional field, unset ones as null); any other non-boolean is still
        refused (strict)."""
        return cls.model_fields[info.field_name].default if value is None else value

    @field_validator("labels")
    @classmethod
    def _no_blank_labels(cls, labels: list[str]) -> list[str]:
        for i, label in enumerate(labels):
            if not label.strip():
                raise LabelError(i, "label is empty or whitespace only")
        return labels

    @field_validator("hypothesis_template")
    @classmethod
    def _template_has_slot(cls, template: str | None) -> str | None:
        if template is None:
            return None
        problem = template_problem(template)
        if problem is not None:
            raise ValueError(problem)
        return template


class ClassifyResponse(BaseModel):
    """One probability per label, in the request's label order; ``labels`` names them (the labels as sent)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"id": "doc-1", "labels": ["This text is about sport.",
                                                                   "This text is about business.",
                                                                   "This text is about science."],
                                         "probabilities": [0.93, 0.04, 0.03]}]}
    )
    id: RequestId = None
    labels: list[str] = Field(description="The request's labels (or candidate_labels) as sent, in the request's "
                              "order, duplicates included: labels[i] has probabilities[i]. Not sorted: the "
                              "Inference API routes answer sorted by score, as the pipeline does.")
    probabilities: list[float]


EXAMPLE_ZERO_SHOT = {
    "inputs": "The striker scored twice as the home side won the derby 3-1.",
    "parameters": {"candidate_labels": ["sport", "business", "science"]},
}
EXAMPLE_ZERO_SHOT_LIST = {
    "inputs": ["Shares fell 4% after the bank cut its profit forecast.", "The probe sent back images of Saturn."],
    "parameters": {"candidate_labels": "sport, business, science", "hypothesis_template": "This text is about {}.",
                   "multi_label": False},
}


class ZeroShotParameters(BaseModel):
    """``parameters`` of the Inference API payload (documentation; `zsnli.serving.inference_api` reads it)."""

    model_config = ConfigDict(extra="ignore")
    candidate_labels: Union[list[StrictStr], StrictStr] = Field(
        description="Label names, or one string of names separated by commas (split as the pipeline splits it).")
    hypothesis_template: StrictStr | None = Field(
        PIPELINE_TEMPLATE, description="One `{}` slot, filled with each label (the pipeline's default; null: "
        "the default).")
    multi_label: StrictBool | None = Field(False, description="Score each label on its own (entailment against "
                                           "its alternative); with one label this is always so, as in the "
                                           "pipeline. null: the default (false).")
    cascade: StrictBool | None = Field(True, description="As `/classify`'s `cascade` (false: every label scored by "
                                       "the cross-encoder; null: the default, true).")
    scoring: Scoring | None = Field(None, description="zsnli's own parameter (the hosted API has none): "
                                       "`served`, `pipeline` or `embedding`, as in POST /classify (left out: the "
                                       "server's default, ZSNLI_SCORING).")


class ZeroShotRequest(BaseModel):
    """The Hugging Face Inference API's zero-shot-classification payload."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [EXAMPLE_ZERO_SHOT, EXAMPLE_ZERO_SHOT_LIST]})
    inputs: Union[StrictStr, list[StrictStr]] = Field(
        description="A text, or a list of texts (at most ZSNLI_MAX_BATCH_ITEMS), each classified with the same labels.")
    parameters: ZeroShotParameters


class ZeroShotAnswer(BaseModel):
    """One input's answer, as the pipeline and the hosted Inference API give it: labels sorted by score."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"sequence": "The striker scored twice as the home side won the derby 3-1.",
         "labels": ["sport", "science", "business"], "scores": [0.91, 0.05, 0.04]}]})
    sequence: str = Field(description="The input text, as sent.")
    labels: list[str] = Field(description="The candidate labels, highest score first.")
    scores: list[float] = Field(description="Their probabilities, same order (as /classify gives them).")


class ZeroShotElement(BaseModel):
    """One label of an answer as current Hugging Face clients read it (``huggingface_hub`` 1.2 and later,
    `zsnli.serving.inference_api.wants_elements`): the answer is a list of these, highest score first."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"label": "sport", "score": 0.91}]})
    label: str = Field(description="A candidate label.")
    score: float = Field(description="Its probability (as /classify gives it).")


class ErrorResponse(BaseModel):
    """The one error shape (`zsnli.errors`)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"error": "labels: List should have at least 1 item after validation, not 0",
                          "field": "labels", "error_type": "validation"}]
        }
    )
    error: str
    field: str | None = None
    error_type: str
    errors: list[dict] | None = Field(None, description="422 only: one entry per problem.")
    request_id: str | None = Field(None, description="The request's X-Request-ID (echoed in that header too; "
                                   "made up when the request had none).")


class HealthResponse(BaseModel):
    """Service state: ``ok`` (ready), ``loading``, ``draining`` (shutting down) or ``error`` (with ``reason``)."""

    model_config = ConfigDict(extra="allow")
    status: str
    model: str | None = Field(None, description="The hub id (ZSNLI_MODEL_ID), else the model directory's name.")
    variant: str | None = Field(None, description="small (model/) or base (model/base), as ZSNLI_MODEL_VARIANT resolved.")
    model_id: str | None = Field(None, description="Hub models only: the hub id served (ZSNLI_MODEL_ID).")
    revision: str | None = Field(None, description="Hub models only: the commit served (ZSNLI_MODEL_REVISION).")
    model_sha256: str | None = Field(None, description="Digest of the model's file table (training_manifest.json's "
                                     "model_sha256 when verified).")
    files: dict[str, str] | None = Field(None, description="sha256 of every file of the model directory, by path.")
    labels: list[str] | None = Field(None, description="The head's classes in index order (config.json id2label): "
                                     "3-way (entailment, neutral, contradiction) or 2-way (entailment, not_entailment).")
    verified: bool | None = Field(None, description="Every model file matched a training manifest.")
    backend: str | None = Field(None, description="torch, onnx-fp32 or onnx-int8 (ZSNLI_BACKEND).")
    device: str | None = None
    dtype: str | None = Field(None, description="float32, bfloat16 or float16 (torch), float32 or int8-dynamic (ONNX).")
    dtype_reason: str | None = Field(None, description="Why this dtype (torch): `ZSNLI_DTYPE=...` when set, else the "
                                     "device's native bf16 or its absence (CPUs serve fp32 unless ZSNLI_DTYPE says so).")
    fixed_shapes: bool | None = Field(None, description="Every forward runs in fixed shapes (ZSNLI_FIXED_SHAPES), so an "
                                      "answer does not depend on what else was in its batch.")
    token_budget: int | None = Field(None, description="Padded tokens per forward, at most (ZSNLI_TOKEN_BUDGET; 2048 "
                                     "on a CPU, 4096 on an accelerator, where max_rows caps the rows of a forward).")
    encoder: dict | None = Field(None, description="The sentence encoder, when loaded: device, dtype, tf32, "
                                 "fixed_shapes, token_budget, max_rows.")
    onnx_sha256: str | None = Field(None, description="sha256 of the ONNX file served (ONNX backends only).")
    reason: str | None = None
