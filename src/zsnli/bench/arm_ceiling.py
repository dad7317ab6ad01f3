"""Each server arm's compute ceiling, counted on the model(s) that arm serves (`zsnli.bench.side_by_side`).

A server arm runs with its own ``ZSNLI_*`` settings (``--variant NAME:ZSNLI_X=v``), and some of them change the
work `zsnli.bench.ceiling` counts (``FLOPs(pair) = 2 x P_enc x L + 2 x P_head``):

* **the model** (P_enc, P_head from its config; L from its tokenizer): ``ZSNLI_MODEL_DIR``,
  ``ZSNLI_MODEL_VARIANT`` (``base``: ``<model dir>/base``; ``auto``: that folder on a CUDA device) and
  ``ZSNLI_MODEL_ID`` (its snapshot in the hub cache), resolved by the server's own rules
  (`zsnli.serving.startup.resolve_variant`, `zsnli.runtime.hub.resolve_hub_model`; never downloading);
* **the window** (L): ``ZSNLI_MAX_LENGTH`` (the arm's, its own or inherited), else the bench's ``--max-length``,
  else the server's default, capped by that model's own (`zsnli.runtime.model_config.model_window`);
* **which work** (the ceiling's kind): ``ZSNLI_SCORING=embedding`` runs no NLI pair (``none``: no ceiling);
  ``ZSNLI_SCORING=pipeline``, or a calibration whose scoring is the pipeline's own (entailment logit, T = 1:
  `zsnli.request_scoring.PIPELINE_SCORING`), the NLI pairs (``nli``); any other calibration
  (``ZSNLI_CALIBRATION_PATH``) the least work of its served scoring (``default``, `served_ceiling`): its distinct
  pairs under its cascade, its content-free pairs and, with a cosine term, the passes of the sentence encoder of
  ``ZSNLI_EMBEDDING_DIR``, else the server's default beside the served model
  (`zsnli.serving.startup.resolved_embedding_dir`).

`arm_work` makes that choice (an `ArmWork`), `work_ceiling` counts one and `arm_ceilings` gives a run one entry per
distinct work. What cannot be resolved or counted (a hub id not in the cache, a base folder without its pin, a
config that does not load, a label longer than that model's window) is an entry with an ``error`` saying so, never
another model's ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..harness.examples import Example
from .ceiling import (cascade_token_counts, combined_ceiling, compute_ceiling, embedding_token_counts,
                      first_use_token_counts, model_dir_window, pair_token_counts, param_counts)
from ..harness.cli import one_line

#: the kinds of ceiling: NLI pairs, the served scoring's least work, none (no NLI pair), unknown (not resolved)
KINDS = ("nli", "default", "none", "unknown")


@dataclass(frozen=True)
class ArmWork:
    """What one arm computes, as far as its ceiling counts it (equal works share one ceiling).

    kind: one of `KINDS`. model_dir: the cross-encoder's folder (absolute; a hub model's snapshot). model: how
    the report names it (the folder, or ``org/name@commit``). cap: the window cap in tokens (the model's own
    window may be smaller). calibration: the calibration.json of a ``default`` ceiling, or of a ``none`` arm (the
    fast path: its ``embedding_scoring``). embedding_dir: the sentence encoder of a ``default`` ceiling whose
    scoring has a cosine term, or of a ``none`` arm. error: why ``unknown``. `zsnli.bench.arm_agreement` reads the
    same fields to decide which arms are meant to answer alike.
    """

    kind: str
    model_dir: str | None = None
    model: str = ""
    cap: int | None = None
    calibration: str | None = None
    embedding_dir: str | None = None
    error: str | None = None


def pipeline_work(model_dir: str | Path, max_length: int | None = None) -> ArmWork:
    """The work of the pipeline arms (a) and (b): ``model_dir``'s NLI pairs, its window capped at ``max_length``
    (the bench's ``--max-length``; default the server's, `zsnli.config.Settings.max_length`)."""
    from ..config import Settings

    path = str(Path(model_dir).resolve())
    return ArmWork("nli", path, path, max_length or Settings.max_length)


def arm_work(env: Mapping[str, str], max_length: int | None = None) -> ArmWork:
    """The work a server started with ``env`` does, as its ceiling counts it (see the module docstring).

    env: the server's whole environment (``ZSNLI_MODEL_DIR`` and every other ``ZSNLI_*`` it gets, inherited ones
    included; ``HF_HUB_CACHE`` / ``HF_HOME`` for a hub model). max_length: the bench's ``--max-length``, the cap
    where ``env`` sets no ``ZSNLI_MAX_LENGTH``. Returns an `ArmWork`; kind ``unknown`` with ``error`` (one line)
    when the server's rules refuse the settings or a hub model is not in the cache.
    """
    from ..config import Settings, SettingsError
    from ..manifest import ManifestError
    from ..runtime.hub import HubModelError, hub_cache_dir, resolve_hub_model
    from ..scoring import ScoringConfigError
    from ..serving.startup import resolve_variant

    named = env.get("ZSNLI_MODEL_ID") or env.get("ZSNLI_MODEL_DIR") or Settings.model_dir
    try:
        settings = Settings.from_env(env)
        settings, _ = resolve_variant(settings)
        model = str(Path(settings.model_dir).resolve())
        if settings.model_id:
            hub = resolve_hub_model(settings.model_id, settings.model_revision, False, hub_cache_dir(env))
            settings = settings.with_(model_dir=str(hub.path))
            model = f"{hub.model_id}@{hub.revision}"
        cap = settings.max_length if "ZSNLI_MAX_LENGTH" in env or max_length is None else max_length
        return _scored_work(settings, str(Path(settings.model_dir).resolve()), model, cap)
    except (SettingsError, ManifestError, ScoringConfigError, HubModelError, OSError) as exc:
        return ArmWork("unknown", model=str(named), error=" ".join(str(exc).split()))


def _scored_work(settings, model_dir: str, model: str, cap: int) -> ArmWork:
    """`ArmWork` of a resolved ``settings`` (its scoring and calibration decide the kind)."""
    from ..request_scoring import PIPELINE_SCORING, load_request_scoring
    from ..scoring import ScoringConfigError
    from ..serving.startup import resolved_embedding_dir

    if settings.scoring == "embedding":  # no ceiling; the calibration and encoder say what it answers
        return ArmWork("none", model_dir, model, cap, str(settings.resolved_calibration_path().resolve()),
                       str(Path(resolved_embedding_dir(settings)).resolve()))
    if settings.scoring == "pipeline":
        return ArmWork("nli", model_dir, model, cap)
    calibration = settings.resolved_calibration_path()
    scoring, found = load_request_scoring(calibration)
    if not found:  # the server refuses an explicit path that is missing; the default lookup serves uncalibrated
        if settings.calibration_path:
            raise ScoringConfigError(f"ZSNLI_CALIBRATION_PATH={settings.calibration_path} does not exist")
        return ArmWork("nli", model_dir, model, cap)
    if scoring == PIPELINE_SCORING:
        return ArmWork("nli", model_dir, model, cap)
    encoder = resolved_embedding_dir(settings) if scoring.default.embedding_weight != 0 else None
    return ArmWork("default", model_dir, model, cap, str(Path(calibration).resolve()),
                   str(Path(encoder).resolve()) if encoder is not None else None)


def served_ceiling(work: ArmWork, docs: Sequence[Example], window: int, params, rate: float) -> dict[str, Any]:
    """The compute ceiling of the least work a ``default`` arm does (`zsnli.bench.ceiling.combined_ceiling`): its NLI
    pairs (each distinct label once; under the calibration's label cascade only the kept pairs,
    `cascade_token_counts`), the content-free pairs when the calibration has a content-free premise, and the
    sentence encoder's text and distinct labels when it has a cosine term, each label embedded once in the run
    (`first_use_token_counts`: the server keeps label embeddings). An arm that does more (the label cache off)
    shows a lower fraction of this ceiling. ``params``: the NLI model's `ParamCounts`; rate in FLOP/s."""
    from ..request_scoring import load_request_scoring

    served, _ = load_request_scoring(work.calibration)
    nli = pair_token_counts(work.model_dir, docs, window, distinct=True)
    if served.cascade is not None:  # the server's rule, document by document
        pruned = [served.pruning(list(d.labels)) is not None for d in docs]
        nli = cascade_token_counts(nli, served.cascade.min_labels, served.cascade.keep, pruned)
    parts = {"nli": (nli, params)}
    if served.content_free_premise is not None:
        parts["content_free"] = (pair_token_counts(work.model_dir, docs, window, premise=served.content_free_premise,
                                                   distinct=True), params)
    if work.embedding_dir is not None:
        parts["embedding"] = (first_use_token_counts(embedding_token_counts(work.embedding_dir, docs), docs),
                              param_counts(work.embedding_dir))
    return combined_ceiling(parts, rate)


def work_ceiling(work: ArmWork, docs: Sequence[Example], rate: float, strict: bool = False) -> dict[str, Any]:
    """The ceiling entry of one `ArmWork` on ``docs`` at ``rate`` FLOP/s: ``{"kind", "model", "model_dir",
    "window" (tokens), "calibration", "embedding_dir", "params" (the NLI model's `ParamCounts.to_dict`),
    "embedding_params", "ceiling" (`compute_ceiling` for ``nli``, `served_ceiling` for ``default``), "error"}``.

    A work that cannot be counted (``unknown``, a config or tokenizer that does not load, a label that does not
    fit this model's window) gets ``error`` (one line) and no ``ceiling``; with ``strict`` the error is raised
    instead (e.g. ``LabelTooLong``, or ``OSError`` from a model folder that does not load)."""
    entry: dict[str, Any] = {"kind": work.kind, "model": work.model, "model_dir": work.model_dir, "window": None,
                             "calibration": work.calibration, "embedding_dir": work.embedding_dir, "params": None,
                             "embedding_params": None, "ceiling": None, "error": work.error}
    if work.kind not in ("nli", "default"):
        return entry
    try:
        entry["window"] = window = model_dir_window(work.model_dir, work.cap)
        params = param_counts(work.model_dir)
        entry["params"] = params.to_dict()
        if work.kind == "nli":
            entry["ceiling"] = compute_ceiling(pair_token_counts(work.model_dir, docs, window), params, rate)
        else:
            entry["ceiling"] = served_ceiling(work, docs, window, params, rate)
            if work.embedding_dir is not None:
                entry["embedding_params"] = param_counts(work.embedding_dir).to_dict()
    except Exception as exc:  # a derived figure: after minutes of measured arms, the report must still come
        if strict:
            raise
        entry.update(kind="unknown", ceiling=None, error=f"{type(exc).__name__}: {one_line(exc)}")
    return entry


def arm_ceilings(works: Mapping[Any, ArmWork], docs: Sequence[Example], rate: float,
                 known: Mapping[ArmWork, dict[str, Any]] | None = None
                 ) -> tuple[dict[str, dict[str, Any]], dict[Any, str | None]]:
    """One ceiling entry per distinct work of a run, and which one each arm is measured against.

    works: arm name -> its `ArmWork`. known: entries already counted (e.g. the pipeline arms', `work_ceiling`
    with ``strict``), reused for an equal work. Returns ``(entries, of_arm)``: entries keyed ``nli``,
    ``default``, ``unknown`` for the first of each kind (``nli`` is the first known one), then ``nli-2``, ... in
    order of first use; of_arm: arm name -> entry key, None for a ``none`` work (no NLI pair to count)."""
    entries: dict[str, dict[str, Any]] = {}
    ids: dict[ArmWork, str] = {}

    def add(work: ArmWork, entry: dict[str, Any]) -> str:
        kind, n = entry["kind"], 1
        while (key := kind if n == 1 else f"{kind}-{n}") in entries:
            n += 1
        entries[key], ids[work] = entry, key
        return key

    for work, entry in (known or {}).items():
        add(work, entry)
    of_arm: dict[Any, str | None] = {}
    for name, work in works.items():
        if work.kind == "none":
            of_arm[name] = None
            continue
        of_arm[name] = ids[work] if work in ids else add(work, work_ceiling(work, docs, rate))
    return entries, of_arm


def apply_ceilings(rows: list[dict[str, Any]], entries: Mapping[str, dict[str, Any]],
                   of_arm: Mapping[Any, str | None]) -> None:
    """Give every row its ceiling (in place): ``ceiling`` (the entry's kind, ``none`` without one),
    ``ceiling_id`` (the key in ``entries``), ``fraction_of_ceiling`` (docs/s over the ceiling's docs/s) and
    ``achieved_flops_per_s`` (the ceiling's FLOPs over the arm's wall seconds); NaN where there is none.
    A row's arm is its ``variant`` (server arms), None for the pipeline arms."""
    nan = float("nan")
    for r in rows:
        cid = of_arm.get(r.get("variant"))
        entry = entries.get(cid) if cid is not None else None
        r["ceiling_id"] = cid
        r["ceiling"] = entry["kind"] if entry is not None else "none"
        work = (entry or {}).get("ceiling")
        if work is None:
            r["fraction_of_ceiling"] = r["achieved_flops_per_s"] = nan
            continue
        r["fraction_of_ceiling"] = r["docs_per_s"] / work["ceiling_docs_per_s"]
        r["achieved_flops_per_s"] = work["total_flops"] / r["wall_s"] if r["wall_s"] > 0 else nan
