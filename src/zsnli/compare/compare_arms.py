"""Bake-off arms: running servers (``--url``), model directories started in turn (``--model-dir``),
and the in-process baselines (``--baseline pipeline|embedding``).

Every arm turns the same examples into one answer per document plus
per-document seconds; `run_arm` never raises for a failing arm (it returns
an `ArmRun` with ``error`` set) so that one broken arm does not lose the
others' results.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from zsnli.manifest import CALIBRATION_NAME, MANIFEST_NAME, hash_model_dir, model_dir_digest, sha256_file
from zsnli.harness.load import DEFAULT_CONCURRENCY, DEFAULT_WARMUPS, run_requests
from zsnli.harness.examples import Example
from zsnli.harness.server import DEFAULT_SERVE_CMD, ServerError, ServerProcess, wait_for_url

ARM_KINDS = ("url", "model_dir", "pipeline", "embedding")
BASELINES = ("pipeline", "embedding")


@dataclass(frozen=True)
class ArmSpec:
    """What to run: ``kind`` in ARM_KINDS, a display ``name``, and the URL or directory (None for embedding)."""

    kind: str
    name: str
    target: str | None = None


@dataclass
class ArmOptions:
    """How arms run: HTTP concurrency and warm-ups, server start-up, baseline settings."""

    concurrency: int = DEFAULT_CONCURRENCY
    warmups: int = DEFAULT_WARMUPS
    startup_timeout: float = 300.0
    serve_cmd: str = DEFAULT_SERVE_CMD
    root: Path = Path(".")
    pipeline_batch_size: int = 1
    embedding_scale: float = 20.0
    embedding_model: str | None = None
    progress: bool = True


@dataclass
class ArmRun:
    """One arm's answers (None where a document failed), per-document seconds and identity.

    ``concurrency`` is how many documents were in flight (1 for in-process
    baselines); ``wall_s`` covers the timed documents; ``error`` is set when
    the arm could not run at all (then ``probabilities`` is empty).
    """

    spec: ArmSpec
    identity: dict[str, Any]
    probabilities: list[list[float] | None] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    wall_s: float = float("nan")
    concurrency: int = 1
    errors: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def receipt_id(self) -> str:
        """What names this arm in the receipt: its manifest sha256, else its model sha256, else its model id."""
        ident = self.identity
        return str(ident.get("manifest_sha256") or ident.get("model_sha256") or ident.get("model") or self.spec.name)


def parse_arm(kind: str, value: str | None) -> ArmSpec:
    """``NAME=TARGET`` or ``TARGET`` for url/model_dir arms; the baseline name for baselines.

    Raises ``ValueError`` for an unknown kind or baseline.
    """
    if kind in ("url", "model_dir"):
        assert value is not None
        name, sep, target = value.partition("=")
        if not sep or "://" in name:
            name, target = "", value
        if not name:
            name = target.rstrip("/").split("://")[-1] if kind == "url" else (Path(target).name or target)
        return ArmSpec(kind, name, target)
    if kind == "baseline":
        if value not in BASELINES:
            raise ValueError(f"unknown baseline {value!r}; expected one of {BASELINES}")
        return ArmSpec(value, value, None)
    raise ValueError(f"unknown arm kind {kind!r}")


def model_dir_identity(model_dir: Path) -> dict[str, Any]:
    """Digest of a model directory's files, plus the sha256 of the training manifest and calibration.json
    the server would use with it (inside the directory, else beside it), if any."""
    ident: dict[str, Any] = {"model_dir": str(model_dir), "model_sha256": model_dir_digest(hash_model_dir(model_dir))}
    for name, key in ((MANIFEST_NAME, "manifest"), (CALIBRATION_NAME, "calibration")):
        for candidate in (model_dir / name, model_dir.parent / name):  # where the server looks, in its order
            if candidate.is_file():
                ident[key] = str(candidate)
                ident[f"{key}_sha256"] = sha256_file(candidate)
                break
    return ident


def _http_run(run: ArmRun, url: str, examples: Sequence[Example], opts: ArmOptions) -> None:
    result = run_requests(url, examples, concurrency=opts.concurrency, warmups=opts.warmups, progress=opts.progress,
                          desc=run.spec.name)
    run.probabilities = result.probabilities
    run.seconds = result.seconds
    run.wall_s = result.wall_s
    run.concurrency = opts.concurrency
    run.errors = [f"{e.id!r}: {a.error}" for e, a in zip(examples, result.answers) if not a.ok]


def _baseline_run(run: ArmRun, model, examples: Sequence[Example], opts: ArmOptions) -> None:
    for e in examples[: opts.warmups]:
        model.predict(e.text, e.labels)
    bar = None
    if opts.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(examples), desc=run.spec.name, unit="doc", leave=False, dynamic_ncols=True)
    t_start = time.perf_counter()
    for e in examples:
        t0 = time.perf_counter()
        try:
            probs = model.predict(e.text, e.labels)
            if len(probs) != len(e.labels) or not all(math.isfinite(p) for p in probs):
                raise ValueError(f"{len(probs)} probabilities for {len(e.labels)} labels or non-finite")
            run.probabilities.append([float(p) for p in probs])
        except Exception as exc:  # one bad document must not end the arm
            run.probabilities.append(None)
            run.errors.append(f"{e.id!r}: {type(exc).__name__}: {exc}")
        run.seconds.append(time.perf_counter() - t0)
        if bar:
            bar.update(1)
    run.wall_s = time.perf_counter() - t_start
    if bar:
        bar.close()
    run.concurrency = 1


def run_arm(spec: ArmSpec, examples: Sequence[Example], opts: ArmOptions, pipeline_model: Path | None = None) -> ArmRun:
    """Run one arm over ``examples``; servers it starts are stopped before it returns.

    ``pipeline_model`` is the NLI model directory of the pipeline baseline.
    Never raises for the arm's own failures: see ``ArmRun.error``.
    """
    run = ArmRun(spec, {"kind": spec.kind})
    try:
        if spec.kind == "url":
            url = spec.target
            _, body = wait_for_url(url, opts.startup_timeout)
            run.identity.update({"url": url, "model": body.get("model"), "model_sha256": body.get("model_sha256"),
                                 "scoring": body.get("scoring"), "calibrated": body.get("calibrated")})
            _http_run(run, url, examples, opts)
        elif spec.kind == "model_dir":
            model_dir = Path(spec.target).resolve()
            if not model_dir.is_dir():
                raise ServerError(f"model directory not found: {model_dir}")
            run.identity.update(model_dir_identity(model_dir))
            with ServerProcess(opts.serve_cmd, cwd=opts.root, model_dir=model_dir) as server:
                startup = server.wait_healthy(opts.startup_timeout)
                run.identity["startup_s"] = round(startup, 2)
                body = server.health or {}
                run.identity.update({"served_model_sha256": body.get("model_sha256"), "scoring": body.get("scoring"),
                                     "calibrated": body.get("calibrated")})
                _http_run(run, server.url, examples, opts)
        elif spec.kind == "pipeline":
            from zsnli.compare.arms.baselines import PipelineBaseline

            model = PipelineBaseline(pipeline_model or (opts.root / "model"), batch_size=opts.pipeline_batch_size)
            run.identity.update(model.identity())
            _baseline_run(run, model, examples, opts)
        elif spec.kind == "embedding":
            from zsnli.compare.arms.baselines import EmbeddingBaseline

            model = EmbeddingBaseline(opts.embedding_model, scale=opts.embedding_scale)
            run.identity.update(model.identity())
            _baseline_run(run, model, examples, opts)
        else:
            raise ValueError(f"unknown arm kind {spec.kind!r}")
    except Exception as exc:  # report and move on to the next arm
        run.error = f"{type(exc).__name__}: {exc}"
        run.probabilities, run.seconds = [], []
    return run
