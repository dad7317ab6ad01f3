"""The bake-off protocol: the request, its checks, cross-validation folds, the metrics and the ranking.

* `validate_request` turns a parsed JSON body into a `Task` or raises
  `BakeoffInputError` naming the field (``examples[3].expected``, ``labels``,
  ``candidates[1]`` ...), the way a 422 answer reports it.
* `Task.plan`: the few-shot protocol, the one fold rule of every bake-off
  (`zsnli.compare.protocol.make_plan` with `SERVICE_PROTOCOL`): leave-one-out
  when the examples are few (n <= `LOO_MAX_N`) or a label has a single example,
  else seeded stratified k-fold with k = min(5, smallest label count). Every
  example is scored exactly once, by a model fitted without it.
* `score` computes accuracy, macro-F1, ECE (`zsnli.metrics.score_rows`, the
  figures of every bake-off) and the reliability bins of one arm; `rank` orders
  arms by the one ranking rule (`zsnli.compare.engine.ranking_rule`).

Imports pydantic, numpy, `zsnli.metrics` / `zsnli.manifest`, `zsnli.compare.engine`, `zsnli.compare.protocol`,
`zsnli.harness.examples` and `zsnli.compare.service.schema` (the request model) only.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from pydantic import ValidationError

from zsnli.compare.engine import rank_key, ranking_rule
from zsnli.compare.protocol import SERVICE_PROTOCOL, Plan, make_plan
from zsnli.harness.examples import Example
from zsnli.manifest import canonical_json
from zsnli.metrics import N_BINS, argmax_random_ties, reliability_bins, score_rows
from zsnli.serving.api_types import misspelt_fields

from .schema import BakeoffExample, BakeoffRequest

RANKING_RULE = ranking_rule(1)
"""The ranking rule in words for a service bake-off: one dataset, the request's examples."""

LOO_MAX_N = SERVICE_PROTOCOL["loo_max_n"]
"""At most this many examples: leave-one-out (n fits); more: stratified k-fold."""

MAX_FOLDS = SERVICE_PROTOCOL["folds"]
SEED = SERVICE_PROTOCOL["seed"]


class BakeoffInputError(ValueError):
    """A request problem: ``field`` is the JSON path (``examples[3].expected``), ``message`` says what is accepted.

    ``problems`` lists every problem found as ``{"field", "error"}`` (the first one is ``field``/``message``).
    """

    def __init__(self, problems: list[dict[str, str]]) -> None:
        self.problems = problems
        self.field = problems[0]["field"]
        self.message = problems[0]["error"]
        super().__init__(f"{self.field}: {self.message}")


@dataclass
class Task:
    """A validated bake-off request.

    texts: the example inputs (n); gold: index of each example's label in ``label_names`` (n);
    label_names: k distinct names, in the order of ``labels`` when given, else of first appearance;
    hypotheses: the description of each label (the NLI hypothesis before any template; default the name);
    arms: the arm names to run (incumbents requested, then the challenger); challenger: its name or None;
    example_hashes: sha256 of each example's canonical JSON ``{"expected", "input"}`` (as sent);
    examples_sha256: sha256 of the canonical JSON list of the examples (what the receipt binds);
    label_fields: the request field each label came from, for a 422 about it (``labels.<name>``, or the
    first ``examples[i].expected`` naming it when ``labels`` was not given).
    """

    task_description: str
    texts: list[str]
    expected: list[str]
    gold: np.ndarray
    label_names: list[str]
    hypotheses: list[str]
    arms: list[str]
    challenger: str | None
    retain: bool
    example_hashes: list[str] = field(default_factory=list)
    examples_sha256: str = ""
    label_fields: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.texts)

    def examples(self) -> list[Example]:
        """The examples as the comparison engine reads them: one dataset, each row's candidate labels the
        label descriptions (``hypotheses``) and its gold label the index of its expected label."""
        labels = tuple(self.hypotheses)
        return [Example(id=i, dataset="task", text=t, labels=labels, label=int(g))
                for i, (t, g) in enumerate(zip(self.texts, self.gold))]

    def plan(self) -> Plan:
        """The folds of the one fold rule (`zsnli.compare.protocol.make_plan`) under `SERVICE_PROTOCOL`:
        leave-one-out when n <= `LOO_MAX_N` or a label has one example, else stratified k-fold with
        k = min(`MAX_FOLDS`, smallest label count); every example is scored exactly once."""
        return make_plan(self.examples(), **SERVICE_PROTOCOL)


_INVISIBLE = ("Cc", "Cf")
"""Unicode categories that never show: control and format characters (zero-width space, joiners, BOM, ...)."""


def _invisible(c: str) -> bool:
    return unicodedata.category(c) in _INVISIBLE


def label_key(name: str) -> str:
    """What two label names must share to be the same label: NFKC, whitespace runs as one space, invisible
    characters (`_INVISIBLE`) dropped, surrounding whitespace dropped, case folded.

    ``"billing"``, ``" Billing "`` and ``"bill\u200bing"`` share the key ``"billing"``; a name with no
    visible character has the key ``""``.
    """
    text = "".join(" " if c.isspace() else c for c in unicodedata.normalize("NFKC", name))
    return " ".join("".join(c for c in text if not _invisible(c)).split()).casefold()


def display_name(name: str) -> str:
    """``name`` without surrounding whitespace and invisible characters (the label as the answer shows it)."""
    start, end = 0, len(name)
    while start < end and (name[start].isspace() or _invisible(name[start])):
        start += 1
    while end > start and (name[end - 1].isspace() or _invisible(name[end - 1])):
        end -= 1
    return name[start:end]


def _field(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


#: Names of an examples file's rows (`zsnli.harness.examples`) for the fields of a bake-off example.
EXAMPLE_LEGACY = {"text": ("input", "an examples file's name for the text; here it is input"),
                  "label": ("expected", "an examples file's gold index; here the label itself is expected")}


def misspelt_request_fields(payload: dict) -> list[dict[str, str]]:
    """A ``{"field", "error"}`` problem per key of the body, or of an example, that looks like a misspelt field
    (``candidatez``, ``retian``: `zsnli.serving.api_types.misspelt_fields`) or is an examples file's name
    (``text``, ``label``: `EXAMPLE_LEGACY`). Such a key was ignored, so a typo'd ``candidates`` ran every arm and
    a typo'd ``retain`` stored nothing; other unknown keys are still ignored, as on ``/classify``."""
    out = misspelt_fields(payload, BakeoffRequest.model_fields)
    examples = payload.get("examples")
    for i, example in enumerate(examples if isinstance(examples, list) else []):
        if isinstance(example, dict):
            out += misspelt_fields(example, BakeoffExample.model_fields, prefix=f"examples[{i}].",
                                   legacy=EXAMPLE_LEGACY)
    return [{"field": p["field"], "error": p["error"]} for p in out]


def _schema(payload: Any) -> BakeoffRequest:
    if not isinstance(payload, dict):
        raise BakeoffInputError([{"field": "body", "error": "body must be a JSON object"}])
    misspelt = misspelt_request_fields(payload)
    if misspelt:
        raise BakeoffInputError(misspelt)
    try:
        return BakeoffRequest.model_validate(payload)
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            msg = "field required" if e.get("type") == "missing" else str(e.get("msg", "invalid value"))
            problems.append({"field": _field(e.get("loc", ())), "error": msg})
        raise BakeoffInputError(problems) from None


def validate_request(payload: Any, *, incumbents: Sequence[str], challengers: Sequence[str], max_examples: int,
                     max_labels: int, max_input_chars: int) -> Task:
    """Check a parsed body; returns a `Task` or raises `BakeoffInputError` listing every problem.

    incumbents: the arm names a request may list in ``candidates`` (default: all of them);
    challengers: the names accepted as ``challenger_model`` besides the incumbents (registered model dirs);
    limits: at most ``max_examples`` examples and ``max_labels`` labels; every input, label description
    and the task description at most ``max_input_chars`` characters.
    """
    req = _schema(payload)
    problems: list[dict[str, str]] = []

    def bad(where: str, error: str) -> None:
        problems.append({"field": where, "error": error})

    if not req.task_description.strip():
        bad("task_description", "must not be blank")
    elif len(req.task_description) > max_input_chars:
        bad("task_description", f"{len(req.task_description)} characters; the limit is {max_input_chars} "
            "(ZSNLI_BAKEOFF_MAX_INPUT_CHARS)")
    if len(req.examples) < 2:
        bad("examples", f"needs at least 2 examples, got {len(req.examples)}")
    if len(req.examples) > max_examples:
        bad("examples", f"{len(req.examples)} examples; the limit is {max_examples} (ZSNLI_BAKEOFF_MAX_EXAMPLES)")
    for i, ex in enumerate(req.examples):
        if not ex.input.strip():
            bad(f"examples[{i}].input", "must not be blank")
        elif len(ex.input) > max_input_chars:
            bad(f"examples[{i}].input", f"{len(ex.input)} characters; the limit is {max_input_chars} "
                "(ZSNLI_BAKEOFF_MAX_INPUT_CHARS)")
        if not label_key(ex.expected):
            bad(f"examples[{i}].expected", "must not be blank (it has no visible character)")
    names, descriptions, fields = _labels(req, bad, max_input_chars)
    if len(names) < 2:
        bad("labels" if req.labels is not None else "examples", f"needs at least 2 distinct labels, got {len(names)} "
            "(labels differing only in case, surrounding whitespace or invisible characters are one label)")
    if len(names) > max_labels:
        bad("labels" if req.labels is not None else "examples",
            f"{len(names)} labels; the limit is {max_labels} (ZSNLI_BAKEOFF_MAX_LABELS)")
    arms = _arms(req, incumbents, challengers, bad)
    if problems:
        raise BakeoffInputError(problems)
    index = {label_key(name): j for j, name in enumerate(names)}
    rows = [{"input": ex.input, "expected": ex.expected} for ex in req.examples]
    return Task(
        task_description=req.task_description, texts=[ex.input for ex in req.examples],
        expected=[ex.expected for ex in req.examples],
        gold=np.array([index[label_key(ex.expected)] for ex in req.examples]),
        label_names=names, hypotheses=descriptions, arms=arms, challenger=req.challenger_model, retain=req.retain,
        example_hashes=[hashlib.sha256(canonical_json(r)).hexdigest() for r in rows],
        examples_sha256=hashlib.sha256(canonical_json(rows)).hexdigest(), label_fields=fields)


def _labels(req: BakeoffRequest, bad, max_chars: int) -> tuple[list[str], list[str], list[str]]:
    """Label names, descriptions and the field each came from; every expected value must be a label and
    every label needs an example. Names are matched by `label_key` and shown as `display_name` (of their
    first appearance when they come from the examples)."""
    first: dict[str, int] = {}  # label key -> first example naming it
    for i, ex in enumerate(req.examples):
        key = label_key(ex.expected)
        if key:
            first.setdefault(key, i)
    if req.labels is None:
        names = [display_name(req.examples[i].expected) for i in first.values()]
        return names, list(names), [f"examples[{i}].expected" for i in first.values()]
    names, descriptions, fields, given = [], [], [], {}
    for raw, description in req.labels.items():
        name, key = display_name(raw), label_key(raw)
        where = f"labels.{name}"
        if not key:
            bad("labels", f"label name {raw!r} must not be blank (it has no visible character)")
            continue
        if key in given:
            bad(where, f"{raw!r} and {given[key]!r} are the same label (case, surrounding whitespace and invisible "
                "characters are ignored)")
            continue
        given[key] = raw
        if not description.strip():
            bad(where, "description must not be blank")
        elif len(description) > max_chars:
            bad(where, f"{len(description)} characters; the limit is {max_chars} (ZSNLI_BAKEOFF_MAX_INPUT_CHARS)")
        names.append(name)
        descriptions.append(description)
        fields.append(where)
    for i, ex in enumerate(req.examples):
        key = label_key(ex.expected)
        if key and key not in given:
            bad(f"examples[{i}].expected", f"{ex.expected!r} is not one of labels: {', '.join(names)}")
    for name, key in zip(names, [label_key(n) for n in names]):
        if key not in first:
            bad(f"labels.{name}", "has no example: every label needs at least one labelled example")
    return names, descriptions, fields


def _arms(req: BakeoffRequest, incumbents: Sequence[str], challengers: Sequence[str], bad) -> list[str]:
    arms = list(incumbents)
    if req.candidates is not None:
        if not req.candidates:
            bad("candidates", f"must list at least one arm of: {', '.join(incumbents)}")
        for i, name in enumerate(req.candidates):
            if name not in incumbents:
                bad(f"candidates[{i}]", f"unknown arm {name!r}; known: {', '.join(incumbents)}")
        arms = list(dict.fromkeys(c for c in req.candidates if c in incumbents))
    if req.challenger_model is not None:
        known = list(incumbents) + [c for c in challengers if c not in incumbents]
        if req.challenger_model not in known:
            bad("challenger_model", f"unknown model or arm {req.challenger_model!r}; known: {', '.join(known)} "
                "(register a local model directory with ZSNLI_BAKEOFF_MODELS=name=DIR)")
        else:
            arms = [a for a in arms if a != req.challenger_model] + [req.challenger_model]
    return arms


# ------------------------------------------------------------------ metrics


def score(probabilities: np.ndarray, gold: np.ndarray, seed: int = SEED) -> dict[str, Any]:
    """Accuracy, macro-F1, ECE (`zsnli.metrics.score_rows`) and reliability bins of one arm.

    probabilities: ``[n, k]`` rows over the task's labels (finite, each in [0, 1]); gold: ``[n]``.
    Arg-max ties are broken by a generator seeded with ``seed`` (`zsnli.metrics.argmax_random_ties`).
    Returns ``{"accuracy", "macro_f1", "ece", "n", "predicted", "reliability"}`` with ``predicted`` the
    ``[n]`` arg-max indices and ``reliability`` the non-empty bins of `N_BINS` equal-width confidence bins
    as ``[{"lo", "hi", "count", "confidence", "accuracy"}]``. Raises ``ValueError`` on a shape mismatch.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    gold = np.asarray(gold)
    if p.ndim != 2 or p.shape[0] != gold.size or p.shape[0] == 0:
        raise ValueError(f"probabilities must be [n, k] with n = {gold.size}, got {p.shape}")
    if not np.all(np.isfinite(p)):
        raise ValueError("probabilities contain non-finite values")
    card = score_rows(p, gold, n_classes=p.shape[1], seed=seed)
    rng = np.random.default_rng(seed)  # the same draws as score_rows' own arg-max
    pred = np.array([argmax_random_ties(row, rng) for row in p])
    conf = np.clip(p.max(axis=1), 0.0, 1.0)
    bins = reliability_bins(conf, pred == gold, N_BINS)
    diagram = [{"lo": round(float(bins.edges[b]), 4), "hi": round(float(bins.edges[b + 1]), 4),
                "count": int(bins.counts[b]), "confidence": round(float(bins.confidence[b]), 4),
                "accuracy": round(float(bins.accuracy[b]), 4)}
               for b in range(N_BINS) if bins.counts[b] > 0]
    return {"accuracy": round(card.accuracy, 4), "macro_f1": round(card.macro_f1, 4), "ece": round(card.ece, 4),
            "n": int(gold.size), "predicted": pred, "reliability": diagram}


def p50_ms(latencies_s: Sequence[float]) -> float:
    """Median of per-document latencies given in seconds, in milliseconds (2 decimals)."""
    return round(float(np.median(np.asarray(latencies_s, dtype=np.float64))) * 1000.0, 2)


def p95_ms(latencies_s: Sequence[float]) -> float:
    """95th percentile of per-document latencies given in seconds, in milliseconds (2 decimals; numpy's linear
    interpolation): the figure the report's latency ceiling bounds."""
    return round(float(np.percentile(np.asarray(latencies_s, dtype=np.float64), 95)) * 1000.0, 2)


def rank(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Order scorecard entries by `RANKING_RULE`, failed arms last (in their given order); sets ``rank`` 1..m.

    Scored entries need ``macro_f1``, ``ece`` and ``latency_ms_p50``; failed ones get their rank after all
    scored ones. Returns a new list.
    """
    scored = [e for e in entries if e["status"] == "scored"]
    failed = [e for e in entries if e["status"] != "scored"]
    scored.sort(key=lambda e: rank_key(e["arm"], e["macro_f1"], e["ece"], e["latency_ms_p50"]))
    out = []
    for r, e in enumerate(scored + failed, 1):
        out.append({"rank": r, **e})
    return out
