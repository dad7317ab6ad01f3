"""The self-check (``python validate.py``): six gates, in order, each PASS or FAIL with its figure.

1. prerequisites: model/, training_manifest.json, data_sources.json and
   calibration.json present and readable; every file of model/ matches the
   manifest's sha256 (no file missing, changed or unlisted);
2. startup: seconds until ``GET /health`` answers 200 (the harness starts
   ``serve.sh`` itself unless ``--url`` names a running server);
3. one ``POST /classify``: right length, finite, in [0, 1], sums to 1, and
   order: the same document with its labels reversed gets the reversed
   probabilities (within ``ORDER_TOLERANCE``);
4. throughput: N documents at the configured concurrency after warm-ups,
   within the time limit: docs/s and request seconds mean/p50/p95;
5. every answer of gate 4 parsed and valid;
6. ``/health`` still 200 afterwards.

Then the metrics per dataset, from gate 4's answers to the unrotated
documents. The server the harness started is stopped whatever happens.

May import `zsnli.harness`, `zsnli.metrics`, `zsnli.manifest` and the other
validation modules.
"""

from __future__ import annotations

import json
import math
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from zsnli import __version__
from zsnli.manifest import (
    CALIBRATION_NAME, DATA_SOURCES_NAME, MANIFEST_NAME, ManifestError, check_model_dir, load_manifest, model_dir_digest,
)
from zsnli.runtime.progress import waiting
from zsnli.harness.load import DEFAULT_CONCURRENCY, DEFAULT_WARMUPS, RunResult, check_answer, run_requests
from zsnli.harness.examples import DEFAULT_EXAMPLES, Example, ExampleSet, load_examples, resample
from zsnli.compare.scorecards import Scores, score_examples
from zsnli.harness.server import DEFAULT_SERVE_CMD, ServerError, ServerProcess, get_health, wait_for_url

ORDER_TOLERANCE = 1e-3
DEFAULT_STARTUP_TIMEOUT_S = 300.0
DEFAULT_MAX_SECONDS = 600.0
MODEL_DIR_NAME = "model"


@dataclass
class Gate:
    """One gate's outcome: ``passed`` is None when it could not run (counted as a failure)."""

    number: int
    name: str
    passed: bool | None
    figure: str
    details: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else ("FAIL" if self.passed is False else "SKIP")


@dataclass
class SelfCheckOptions:
    """Everything the self-check needs; see ``validate.py --help`` for each flag."""

    root: Path = Path(".")
    url: str | None = None
    examples: str = DEFAULT_EXAMPLES
    docs: int | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    warmups: int = DEFAULT_WARMUPS
    max_seconds: float | None = DEFAULT_MAX_SECONDS
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT_S
    serve_cmd: str = DEFAULT_SERVE_CMD
    seed: int = 0
    progress: bool = True
    waits_said: bool = True  # a line every 10 s while the server starts (off a terminal too); False: --no-progress


@dataclass
class SelfCheckResult:
    """Gates in order, the metrics (None if gate 4 never ran), and the JSON report."""

    gates: list[Gate]
    scores: Scores | None
    report: dict[str, Any]

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


def gate_prerequisites(root: Path) -> Gate:
    """Gate 1: the shipped files exist and ``model/`` matches ``training_manifest.json``."""
    details: list[str] = []
    missing = [n for n in (MODEL_DIR_NAME, MANIFEST_NAME, DATA_SOURCES_NAME, CALIBRATION_NAME) if not (root / n).exists()]
    if missing:
        return Gate(1, "prerequisites", False, "missing: " + ", ".join(missing), details)
    for name in (DATA_SOURCES_NAME, CALIBRATION_NAME):
        try:
            json.loads((root / name).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return Gate(1, "prerequisites", False, f"{name} unreadable: {exc}", details)
    try:
        manifest = load_manifest(root / MANIFEST_NAME)
        checks = check_model_dir(root / MODEL_DIR_NAME, manifest)
    except ManifestError as exc:
        return Gate(1, "prerequisites", False, str(exc), details)
    bad = [c for c in checks if c.status != "ok"]
    details += [f"{c.name}: {c.status}" for c in bad[:10]]
    if bad or not checks:
        return Gate(1, "prerequisites", False, f"{len(bad)} of {len(checks)} model files do not match {MANIFEST_NAME}", details)
    digest = model_dir_digest(manifest["files"])
    return Gate(1, "prerequisites", True, f"{len(checks)} model files match {MANIFEST_NAME} (model digest {digest[:12]})", details)


def gate_one_request(url: str, example: Example) -> Gate:
    """Gate 3: one document, checked against the contract, then again with its labels reversed."""
    import httpx

    t0 = time.perf_counter()
    try:
        resp = httpx.post(url.rstrip("/") + "/classify", json=example.request(), timeout=120)
        body = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return Gate(3, "one request", False, f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - t0
    probs, error = check_answer(resp.status_code, body, example)
    if error:
        return Gate(3, "one request", False, error)
    figure = f"{len(probs)} labels, sum {math.fsum(probs):.7f}, {seconds:.3f} s"
    if len(example.labels) < 2:
        return Gate(3, "one request", True, figure + " (single label: order not checked)")
    flipped = Example(example.id, example.dataset, example.text, tuple(reversed(example.labels)), 0)
    try:
        resp2 = httpx.post(url.rstrip("/") + "/classify", json=flipped.request(), timeout=120)
        body2 = resp2.json()
    except (httpx.HTTPError, ValueError) as exc:
        return Gate(3, "one request", False, f"reversed labels: {type(exc).__name__}: {exc}")
    probs2, error2 = check_answer(resp2.status_code, body2, flipped)
    if error2:
        return Gate(3, "one request", False, f"reversed labels: {error2}")
    gap = max(abs(a - b) for a, b in zip(probs, reversed(probs2)))
    figure += f", order kept (labels reversed: max |dp| {gap:.1e})"
    if gap > ORDER_TOLERANCE:
        return Gate(3, "one request", False, figure.replace("order kept", "ORDER NOT KEPT"))
    return Gate(3, "one request", True, figure)


def gate_startup(opts: SelfCheckOptions, root: Path) -> tuple[Gate, ServerProcess | None, str | None]:
    """Gate 2: start serve.sh (or reach ``opts.url``) until /health is 200.

    Returns (gate, the server started here or None, the healthy URL or None).
    The caller stops the server, whatever happens next.
    """
    if opts.url is not None:
        gate = _wait_url(opts.url, opts.startup_timeout)
        return gate, None, opts.url if gate.passed else None
    server = ServerProcess(opts.serve_cmd, cwd=root, model_dir=root / MODEL_DIR_NAME)
    try:
        server.start()
        with waiting(f"gate 2: waiting for {server.url}/health") if opts.waits_said else nullcontext():
            took = server.wait_healthy(opts.startup_timeout)
    except ServerError as exc:
        lines = str(exc).splitlines()
        return Gate(2, "startup", False, lines[0], lines[1:]), server, None
    except BaseException:  # interrupted (SIGTERM, Ctrl-C) while waiting: the caller never sees the server
        server.stop()
        raise
    figure = f"/health 200 after {took:.1f} s (limit {opts.startup_timeout:.0f} s) at {server.url}"
    return Gate(2, "startup", True, figure), server, server.url


def gate_throughput(url: str, sent: list[Example], opts: SelfCheckOptions) -> tuple[Gate, Gate, RunResult]:
    """Gates 4 and 5: ``sent`` at the configured concurrency after warm-ups within the time limit
    (docs/s, request seconds mean/p50/p95), then every answer valid. Returns (gate 4, gate 5, the run)."""
    run = run_requests(url, sent, concurrency=opts.concurrency, warmups=opts.warmups, max_seconds=opts.max_seconds,
                       progress=opts.progress, desc="throughput")
    stats = run.latency_stats()
    limit = f"limit {opts.max_seconds:.0f} s" if opts.max_seconds else "no limit"
    figure = (f"{len(sent)} docs at concurrency {opts.concurrency} after {opts.warmups} warm-ups: "
              f"{stats['wall_s']:.1f} s ({limit}), {stats['docs_per_s']:.2f} docs/s; request s "
              f"mean {stats['mean_s']:.3f} p50 {stats['p50_s']:.3f} p95 {stats['p95_s']:.3f}")
    unanswered = len(sent) - stats["answered"]
    details = []
    if run.timed_out:
        details.append(f"{unanswered} documents not answered within the time limit")
    elif unanswered:
        first = next(a.error for a in run.answers if a.status is None)
        details.append(f"{unanswered} requests got no HTTP response, e.g. {first}")
    if run.warmup_errors:
        details.append(f"{len(run.warmup_errors)} warm-up requests failed, e.g. {run.warmup_errors[0]}")
    g4 = Gate(4, "throughput", not run.timed_out and unanswered == 0, figure, details)
    errors = [(d.id, a.error) for d, a in zip(sent, run.answers) if not a.ok]
    g5 = Gate(5, "valid answers", not errors, f"{len(sent) - len(errors)}/{len(sent)} answers valid",
              [f"{i!r}: {err}" for i, err in errors[:5]])
    return g4, g5, run


def _first_pass_scores(examples: list[Example], sent: list[Example], run: RunResult, seed: int) -> Scores | None:
    """Metrics over the unrotated documents of the throughput run (None when there are none)."""
    first_pass = [(d, a) for d, a in zip(sent, run.answers) if d.reuse == 0]
    if not first_pass:
        return None
    scores = score_examples([d for d, _ in first_pass], [a.probabilities for _, a in first_pass], seed=seed)
    if len(first_pass) < len(examples):
        scores.notes.append(f"metrics over the first {len(first_pass)} of {len(examples)} examples (--docs)")
    return scores


def run_selfcheck(opts: SelfCheckOptions, console=None) -> SelfCheckResult:
    """Run gates 1-6 and the metrics; never leaves a server it started running.

    Raises ``ExamplesError`` (before anything starts) when the examples
    cannot be loaded; every other failure becomes a FAIL gate.
    """
    root = Path(opts.root)
    example_set: ExampleSet = load_examples(opts.examples)
    examples = example_set.examples
    gates: list[Gate] = []
    say = _printer(console)

    def add(g: Gate) -> Gate:
        gates.append(g)
        say(g)
        return g

    add(gate_prerequisites(root))
    server: ServerProcess | None = None
    health: dict | None = None
    run: RunResult | None = None
    scores: Scores | None = None
    try:
        g2, server, url = gate_startup(opts, root)
        add(g2)
        if url is None:
            for n, name in ((3, "one request"), (4, "throughput"), (5, "valid answers"), (6, "health after")):
                add(Gate(n, name, None, "not run: no healthy server"))
        else:
            _, health, _ = get_health(url)
            note = _served_model_note(root, health)
            if note:
                g2.details.append(note)
                if console is not None:
                    console.print(f"      {note}", highlight=False, markup=False)
            probe = next((e for e in examples if len(e.labels) >= 2), examples[0])
            add(gate_one_request(url, probe))
            sent = resample(examples, opts.docs, seed=opts.seed)
            g4, g5, run = gate_throughput(url, sent, opts)
            add(g4)
            add(g5)
            code, _, err = get_health(url)
            add(Gate(6, "health after", code == 200, f"/health {code if code is not None else err}"))
            scores = _first_pass_scores(examples, sent, run, opts.seed)
    finally:
        if server is not None:
            server.stop()
    report = {
        "tool": "zsnli validate",
        "version": __version__,
        "created_unix": time.time(),
        "passed": all(g.passed for g in gates),
        "url": opts.url,
        "root": str(root.resolve()),
        "examples": {"source": example_set.source, "sha256": example_set.sha256, "n": len(examples),
                     "datasets": example_set.datasets(), "notes": example_set.notes},
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
        "gates": [asdict(g) | {"verdict": g.verdict} for g in gates],
        "health": health,
        "throughput": run.latency_stats() if run is not None else None,
        "metrics": scores.as_dict() if scores else None,
    }
    return SelfCheckResult(gates, scores, report)


def _served_model_note(root: Path, health: dict | None) -> str | None:
    """One line saying whether the server's reported model_sha256 is the digest of the local manifest's model/."""
    served = (health or {}).get("model_sha256")
    try:
        local = model_dir_digest(load_manifest(root / MANIFEST_NAME)["files"])
    except ManifestError:
        return f"server reports model_sha256 {served}" if served else None
    if not served:
        return "server reports no model_sha256"
    if served == local:
        return f"server reports model_sha256 {served[:12]}: the model/ of {MANIFEST_NAME}"
    return f"server reports model_sha256 {served[:12]}, NOT the model/ of {MANIFEST_NAME} ({local[:12]})"


def _wait_url(url: str, timeout: float) -> Gate:
    """Gate 2 for a running server: /health 200 within ``timeout`` s; nothing listening fails at once."""
    try:
        took, _ = wait_for_url(url, timeout)
    except ServerError as exc:
        return Gate(2, "startup", False, str(exc))
    return Gate(2, "startup", True, f"running server at {url}: /health 200 after {took:.1f} s of polling")


def _printer(console):
    def say(g: Gate) -> None:
        if console is None:
            return
        colour = "green" if g.passed else "red"
        console.print(f"[bold]{g.number}. {g.name:<14}[/bold] [{colour}]{g.verdict}[/{colour}]  {escape(g.figure)}",
                      highlight=False)
        for line in g.details:
            console.print(f"      {line}", highlight=False, markup=False)
    return say
