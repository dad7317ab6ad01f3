"""Which arm of ``python -m zsnli.bench`` each arm's answers are compared with, and how far apart they are.

Two arms are meant to give the same answers when they serve the same model with the same scoring: what an arm's
answers *are* is decided by its model (``ZSNLI_MODEL_DIR`` / ``ZSNLI_MODEL_VARIANT`` / ``ZSNLI_MODEL_ID``,
resolved by the server's rules), ``ZSNLI_SCORING`` and the calibration it reads (``ZSNLI_CALIBRATION_PATH``, else
the one beside the model; a calibration with the pipeline's own scoring counts as ``ZSNLI_SCORING=pipeline``), and,
with a cosine term or the fast path, its sentence encoder (``ZSNLI_EMBEDDING_DIR``). `answers_of` reads that from
the arm's `zsnli.bench.arm_ceiling.ArmWork` (the same resolution its ceiling uses). Everything else a variant
may set (dtype, backend, fixed shapes, window, text cut, batching) changes *how* the answers are computed, which
is what the agreement line measures: each arm is compared with the first arm of the run (in run order: (a), then
(b), (c), (d), (f), the variants) that serves the same model and scoring, its *reference* (`agreements`).

Imports `zsnli.bench.arm_ceiling` (`ArmWork`) only.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from .arm_ceiling import ArmWork


def agreement(reference: Sequence[Sequence[float] | None], other: Sequence[Sequence[float] | None]) -> dict[str, Any]:
    """Compare two runs' per-document probabilities (same documents, same label order).

    Returns ``{"docs" (compared), "same_argmax" (count), "missing" (docs
    absent from either run), "max_abs_dp" (max over docs and labels of
    ``|p_ref - p_other|``), "worst_doc" (index)}``.
    """
    same = missing = 0
    compared = 0
    max_dp = 0.0
    worst = None
    for i, (ref, oth) in enumerate(zip(reference, other)):
        if ref is None or oth is None or len(ref) != len(oth):
            missing += 1
            continue
        compared += 1
        if max(range(len(ref)), key=ref.__getitem__) == max(range(len(oth)), key=oth.__getitem__):
            same += 1
        dp = max(abs(a - b) for a, b in zip(ref, oth))
        if worst is None or dp > max_dp:
            max_dp, worst = dp, i
    return {"docs": compared, "same_argmax": same, "missing": missing, "max_abs_dp": max_dp, "worst_doc": worst}


def answers_of(work: ArmWork) -> tuple | None:
    """What decides an arm's answers (equal tuples: the same answers are meant), or None when its settings could
    not be resolved (kind ``unknown``). ``nli`` (the pipeline's scoring): the model; ``default`` (a calibrated
    scoring): the model, the calibration file and the encoder of its cosine term; ``none`` (the fast path): the
    calibration (its ``embedding_scoring``) and the encoder, not the cross-encoder, which it never runs."""
    if work.kind == "unknown":
        return None
    if work.kind == "none":
        return ("embedding", work.calibration, work.embedding_dir)
    return (work.kind, work.model_dir, work.calibration, work.embedding_dir)


def scoring_name(work: ArmWork, shipped_calibration: str | None) -> str:
    """A server arm's scoring as its row's ``scoring`` says it: ``pipeline`` (the NLI pairs' pipeline scoring,
    whatever set it), ``shipped`` (arm (d)'s calibration, ``shipped_calibration``, resolved), ``embedding`` (the fast
    path), ``other`` (another calibration) or ``unknown``."""
    if work.kind == "default":
        return "shipped" if shipped_calibration is not None and work.calibration == shipped_calibration else "other"
    return {"nli": "pipeline", "none": "embedding"}.get(work.kind, "unknown")


def describe(work: ArmWork) -> str:
    """The model and scoring an arm serves, in words (the line of an arm no other arm matches)."""
    if work.kind == "unknown":
        return f"its model or scoring is not resolved: {work.error}"
    if work.kind == "none":
        return f"the fast path of {work.calibration} with encoder {work.embedding_dir}"
    if work.kind == "nli":
        return f"the pipeline scoring of {work.model}"
    return f"calibration {work.calibration} on {work.model}" + (
        f" with encoder {work.embedding_dir}" if work.embedding_dir else "")


def agreements(rows: Sequence[Mapping[str, Any]], probs: Mapping[str, list], works: Mapping[Any, ArmWork],
               skip: Iterable[tuple[str, str]] = ()) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each arm's `agreement` with its reference (the first row, in ``rows`` order, whose `answers_of` is the same).

    rows: the report's arm rows (``key``; ``variant``: the server arm's name, absent for the pipeline arms).
    probs: row key -> its per-document probabilities. works: arm name (None: the pipeline arms) -> its `ArmWork`.
    skip: ``(key, reference)`` pairs compared elsewhere (the batched-vs-alone lines). Returns ``(compared,
    unmatched)``: ``{key: {"vs": reference key, **agreement}}`` for every arm after the first of its kind, and
    ``{key: why}`` for every arm no other arm matches (`describe`).
    """
    skip = set(skip)
    idents = {r["key"]: answers_of(works[r.get("variant")]) for r in rows}
    compared: dict[str, dict[str, Any]] = {}
    unmatched: dict[str, str] = {}
    for r in rows:
        key, ident = r["key"], idents[r["key"]]
        mates = [k for k, i in idents.items() if ident is not None and i == ident]
        if len(mates) < 2:
            unmatched[key] = ("no other arm serves " + describe(works[r.get("variant")]) if ident is not None
                              else describe(works[r.get("variant")]))
        elif mates[0] != key and (key, mates[0]) not in skip:
            compared[key] = {"vs": mates[0], **agreement(probs[mates[0]], probs[key])}
    return compared, unmatched
