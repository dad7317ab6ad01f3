"""The Hugging Face Inference API's zero-shot-classification payload (``POST /v1/zero-shot-classification``, ``POST /``).

What the hosted Inference API and Inference Endpoints containers receive:
``{"inputs": str | [str], "parameters": {"candidate_labels": [..] | "a, b, c",
"hypothesis_template": str, "multi_label": bool}}``; what they and the
transformers pipeline answer: ``{"sequence", "labels", "scores"}`` with the
labels sorted by score, highest first (a list of those for a list of inputs).
The hosted API answers ``[{"label", "score"}, ...]`` today, and that is what
``huggingface_hub.InferenceClient.zero_shot_classification`` reads from version 1.2
on (earlier versions read ``labels`` and ``scores``). `wants_elements` tells that
client apart by its User-Agent; it then gets `elements_answer` (a list of such
lists for a list of inputs), every other caller the pipeline's shape.

`read_zero_shot` turns a parsed body into a `ZeroShotCall`: the texts, and one
``/classify``-shaped body the HTTP layer validates with the same rules as
``POST /classify`` (`FIELD_NAMES` renames its errors to the fields the client
sent). `pipeline_answer` builds one answer. The pipeline's rules kept here:
``candidate_labels`` as a string is split on commas (blank parts dropped),
``hypothesis_template`` defaults to `PIPELINE_TEMPLATE`, and one candidate label
is scored on its own (entailment against its alternative, as ``multi_label``),
not given 1.0 (`single_label_scored_alone`). ``parameters.scoring`` (zsnli's own: ``served``, ``embedding`` or
``pipeline``) is ``/classify``'s ``scoring``.

A key of the payload or of ``parameters`` that looks like a misspelt one
(``multi_lable``), a legacy or foreign name of a parameter (``multi_class``, ``labels``:
`zsnli.serving.api_types.PARAMETER_LEGACY`), or a parameter put beside ``parameters`` instead of in it
(`TOP_LEGACY`), is a 422 naming the field to use
(`zsnli.serving.api_types.misspelt_fields`); other unknown keys are ignored. A ``/classify``
body sent here is told so.

May import: the standard library, `zsnli.serving.api_types` (the field rules), `zsnli.errors`. Imported by
`zsnli.serving.app`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import ApiError, ErrorType
from .api_types import PARAMETER_LEGACY, PIPELINE_TEMPLATE, misspelt_fields
#: ``/classify`` field -> the field of this payload it came from (errors name the latter).
FIELD_NAMES = {"labels": "parameters.candidate_labels", "hypothesis_template": "parameters.hypothesis_template",
               "multi_label": "parameters.multi_label", "cascade": "parameters.cascade",
               "scoring": "parameters.scoring", "text": "inputs"}
#: Keys of the payload and of its ``parameters`` (others are ignored, e.g. the hosted API's ``options``).
TOP_KEYS = ("inputs", "parameters", "options")
PARAMETER_KEYS = ("candidate_labels", "hypothesis_template", "multi_label", "cascade", "scoring")
#: Keys that belong elsewhere when they are at the top of the payload (ignored there, they would change the
#: answer): the parameters, and the pipeline's argument name for the inputs.
TOP_LEGACY = {**{k: (f"parameters.{k}", "a parameter: it goes inside parameters") for k in PARAMETER_KEYS},
              "multi_class": ("parameters.multi_label", "the transformers pipeline's former name for multi_label, "
                                                        "inside parameters"),
              "sequences": ("inputs", "the transformers pipeline's argument name")}


@dataclass(frozen=True)
class ZeroShotCall:
    """One zero-shot-classification request: ``texts`` (the inputs, in order), ``single`` (``inputs``
    was one string: answer one object, not a list) and ``body`` (a ``/classify`` body without
    ``text``: ``labels``, ``hypothesis_template``, ``multi_label``, validated by the HTTP layer)."""

    texts: list[str]
    single: bool
    body: dict[str, Any]


def _invalid(message: str, field: str) -> ApiError:
    return ApiError(ErrorType.VALIDATION, f"{field}: {message}", field)


def split_labels(value: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``: the pipeline's reading of ``candidate_labels`` given as
    one string (split on commas, each part stripped, blank parts dropped)."""
    return [part.strip() for part in value.split(",") if part.strip()]


def read_zero_shot(payload: Any, max_items: int) -> ZeroShotCall:
    """Check the payload's shape and build a `ZeroShotCall`.

    payload: the parsed JSON body. max_items: most inputs in one request (``ZSNLI_MAX_BATCH_ITEMS``).
    Raises ``ApiError`` 422 naming the field: body not an object, a misspelt key (one ``errors``
    entry each, `zsnli.serving.api_types.misspelt_fields`), ``inputs`` missing, not a string
    or a non-empty list of strings (``inputs[i]``), or more than ``max_items``; ``parameters``
    missing or not an object; ``parameters.candidate_labels`` missing, or a string with no
    label. The labels, template and ``multi_label`` are checked later, as ``/classify`` checks them.
    """
    if not isinstance(payload, dict):
        raise _invalid("body must be a JSON object with inputs and parameters", "body")
    if "inputs" not in payload and any(k in payload for k in ("text", "labels", "candidate_labels")):
        raise _invalid("field required: this looks like a POST /classify body (text, labels): send it to "
                       "POST /classify, or send {\"inputs\": ..., \"parameters\": {\"candidate_labels\": "
                       "[...]}} here", "inputs")
    misspelt = misspelt_fields(payload, TOP_KEYS, legacy=TOP_LEGACY)
    if isinstance(payload.get("parameters"), dict):
        misspelt += misspelt_fields(payload["parameters"], PARAMETER_KEYS, prefix="parameters.",
                                    legacy=PARAMETER_LEGACY)
    if misspelt:
        raise ApiError(ErrorType.VALIDATION, f"{misspelt[0]['field']}: {misspelt[0]['error']}", misspelt[0]["field"],
                       errors=misspelt)
    if "inputs" not in payload:
        raise _invalid("field required (the text, or a list of texts, to classify)", "inputs")
    inputs = payload["inputs"]
    single = isinstance(inputs, str)
    texts = [inputs] if single else inputs
    if not isinstance(texts, list) or not texts:
        raise _invalid("must be a string or a non-empty list of strings", "inputs")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise _invalid("must be a string", f"inputs[{i}]")
    if len(texts) > max_items:
        raise _invalid(f"too many inputs: {len(texts)} > {max_items} (ZSNLI_MAX_BATCH_ITEMS); split the request",
                       "inputs")
    params = payload.get("parameters")
    if not isinstance(params, dict):
        raise _invalid("field required: an object with candidate_labels" if params is None
                       else "must be an object with candidate_labels", "parameters")
    if "candidate_labels" not in params:
        raise _invalid("field required", "parameters.candidate_labels")
    labels = params["candidate_labels"]
    if isinstance(labels, str):
        labels = split_labels(labels)
        if not labels:
            raise _invalid("no label in the string (labels are separated by commas)", "parameters.candidate_labels")
    template = params.get("hypothesis_template")
    body = {"labels": labels, "hypothesis_template": PIPELINE_TEMPLATE if template is None else template}
    for key in ("multi_label", "cascade", "scoring"):  # checked as /classify checks them
        if key in params:
            body[key] = params[key]
    return ZeroShotCall(list(texts), single, body)


def single_label_scored_alone(n_labels: int, multi_label: bool) -> bool:
    """True when the labels are scored each on its own: ``multi_label``, or one label only (the pipeline
    then scores it against its alternative instead of answering 1.0 as ``/classify`` does)."""
    return multi_label or n_labels == 1


def check_echo(texts: Sequence[str], labels: Sequence[str], limit: int) -> None:
    """Refuse a payload whose answer would repeat its labels past ``limit`` bytes (``ZSNLI_MAX_BODY_BYTES``): the
    pipeline's answer (and the hosted API's list of ``{"label", "score"}``) names every candidate label again for
    each input, so 64 inputs sent with 128 labels of 300 characters were answered with 68 times the request's
    bytes (issue 57). With this bound an answer is at most the request (each text once), ``limit`` bytes of
    labels and one score per pair. One input is never refused by it (its labels are named once).
    Raises ``ApiError`` 413 ``payload_too_large`` (field ``inputs``)."""
    if len(texts) < 2:
        return
    echoed = len(texts) * sum(len(label.encode("utf-8", "surrogatepass")) for label in labels)
    if echoed > limit:
        raise ApiError(ErrorType.PAYLOAD_TOO_LARGE, f"inputs: the answer names the {len(labels)} candidate labels "
                       f"again for each of the {len(texts)} inputs, {echoed} bytes in all, more than {limit} "
                       "(ZSNLI_MAX_BODY_BYTES); send fewer inputs per request, or shorter labels", "inputs")


def pipeline_answer(sequence: str, labels: Sequence[str], scores: Sequence[float]) -> dict[str, Any]:
    """``{"sequence", "labels", "scores"}`` with the labels sorted by score, highest first (ties keep
    the order sent; duplicate labels stay, each with its score)."""
    order = sorted(range(len(labels)), key=lambda i: (-scores[i], i))
    return {"sequence": sequence, "labels": [labels[i] for i in order], "scores": [float(scores[i]) for i in order]}


#: The first ``huggingface_hub`` version whose ``InferenceClient.zero_shot_classification`` reads a list of
#: ``{"label", "score"}`` (earlier versions index ``labels`` and ``scores`` of the pipeline's answer).
HUB_ELEMENTS_SINCE = (1, 2)
_HUB_AGENT = re.compile(r"(?:^|[;\s])hf_hub/(\d+)\.(\d+)")


def hub_version(user_agent: str | None) -> tuple[int, int] | None:
    """``(major, minor)`` of the ``hf_hub/X.Y...`` part of a User-Agent header (``huggingface_hub`` and the
    libraries built on it send ``unknown/None; hf_hub/1.2.0; python/3.11``), or None when there is none or it
    is not a version."""
    match = _HUB_AGENT.search(user_agent or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def wants_elements(user_agent: str | None) -> bool:
    """True when the caller is a ``huggingface_hub`` client that reads ``[{"label", "score"}, ...]``
    (User-Agent ``hf_hub/`` at `HUB_ELEMENTS_SINCE` or later); False for every other caller (curl, requests,
    older ``huggingface_hub``, code written for the pipeline), which gets ``{"sequence", "labels", "scores"}``."""
    version = hub_version(user_agent)
    return version is not None and version >= HUB_ELEMENTS_SINCE


def elements_answer(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """A `pipeline_answer` as current clients read it: ``[{"label", "score"}, ...]`` in the same order
    (highest score first)."""
    return [{"label": label, "score": score} for label, score in zip(answer["labels"], answer["scores"])]
