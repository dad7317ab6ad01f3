"""Corpus throughput: ``zsnli-batch`` on Ray Data vs the single-process `OfflineClassifier`, same run.

    python bench/batch.py [--input dev/zeroshot_dev.jsonl] [--model-dir model] [--actors 2] [--batch-rows 16]

Arm 1 loads the model once in this process and classifies every document
with ``OfflineClassifier.classify_many`` (pairs batched across documents).
Arm 2 runs ``python -m zsnli.batch`` in a subprocess (a local Ray, N actors,
a fresh output under runs/) and reads its summary. Printed per arm: model-load
seconds, scoring seconds, docs/s of scoring and docs/s end to end (Ray's includes
starting Ray and the actors), then the ratio and the largest probability
difference between the two arms (both run the server's service: ~0 expected).
Prints figures only; nothing is asserted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from zsnli.harness.cli import UsageParser, positive_int
from zsnli.harness.examples import Example, ExamplesError, load_examples


def offline_arm(docs: list[Example], model_dir: str) -> tuple[dict, list]:
    from zsnli.batch.cli import batch_settings
    from zsnli.config import Settings
    from zsnli.serving.offline import OfflineClassifier

    # the actors' settings (no 60 s request timeout: a corpus waits its turn), all CPUs in one process
    settings = batch_settings(Settings.from_env(model_dir=model_dir, log_level="warning"), os.cpu_count() or 1)
    t0 = time.monotonic()
    with OfflineClassifier(settings) as clf:
        loaded = time.monotonic()
        out = clf.classify_many([{"text": d.text, "labels": list(d.labels)} for d in docs])
        done = time.monotonic()
    errors = sum(not isinstance(p, list) for p in out)
    return {"errors": errors, "load_s": loaded - t0, "score_s": done - loaded, "docs_per_s": len(docs) / (done - loaded),
            "end_to_end_docs_per_s": len(docs) / (done - t0)}, out


def ray_arm(source: str, model_dir: str, actors: int, batch_rows: int, n: int) -> tuple[dict, dict]:
    import pyarrow.dataset as pads

    output = Path("runs") / f"bench-batch-{int(time.time())}"
    cmd = [sys.executable, "-m", "zsnli.batch", source, "--output", str(output), "--model-dir", model_dir,
           "--labels-col", "labels", "--actors", str(actors), "--batch-rows", str(batch_rows)]
    env = {**os.environ, "ZSNLI_LOG_LEVEL": "warning"}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"zsnli-batch failed ({proc.returncode}): {proc.stderr[-2000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("zsnli-batch:"))
    job_s = float(re.search(r"in ([0-9.]+) s", line).group(1))
    rows = {r["id"]: r for r in pads.dataset(str(output), format="parquet").to_table().to_pylist()}
    return {"summary": line, "process_wall_s": wall, "job_s": job_s, "docs_per_s": n / job_s,
            "end_to_end_docs_per_s": n / wall, "output": str(output)}, rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run both arms and print their figures; returns 0 (a usage mistake: one line, exit 2)."""
    ap = UsageParser(prog="bench/batch.py", description=__doc__.splitlines()[0])
    ap.add_argument("--input", default="dev/zeroshot_dev.jsonl")
    ap.add_argument("--model-dir", default="model")
    ap.add_argument("--actors", type=positive_int, default=2)
    ap.add_argument("--batch-rows", type=positive_int, default=16)
    args = ap.parse_args(argv)
    try:
        docs = load_examples(args.input).examples  # the one examples reader (DESIGN.md's format)
    except ExamplesError as exc:
        ap.error(f"--input: {exc}")
    print(f"{len(docs)} documents from {args.input}, {os.cpu_count()} CPUs", flush=True)
    single, probs = offline_arm(docs, args.model_dir)
    print("single process:", json.dumps({k: round(v, 2) for k, v in single.items()}), flush=True)
    ray_stats, rows = ray_arm(args.input, args.model_dir, args.actors, args.batch_rows, len(docs))
    print(f"ray data ({args.actors} actors):", json.dumps({k: (round(v, 2) if isinstance(v, float) else v)
                                                        for k, v in ray_stats.items()}), flush=True)
    dp = max(float(np.max(np.abs(np.subtract(rows[d.id]["probabilities"], p))))
             for d, p in zip(docs, probs) if isinstance(p, list))
    same = sum(int(np.argmax(rows[d.id]["probabilities"])) == int(np.argmax(p))
               for d, p in zip(docs, probs) if isinstance(p, list))
    print(f"ratio ray/single docs/s: scoring-only job {ray_stats['docs_per_s'] / single['docs_per_s']:.2f}, "
          f"end to end {ray_stats['end_to_end_docs_per_s'] / single['end_to_end_docs_per_s']:.2f}; "
          f"max |dp| {dp:.2e}, same argmax {same}/{sum(isinstance(p, list) for p in probs)} scored")
    return 0


if __name__ == "__main__":
    sys.exit(main())
