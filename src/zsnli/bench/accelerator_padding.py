"""``python -m zsnli.bench.accelerator_padding``: padded against real tokens per forward on the accelerator branch.

The service runs in this process under `zsnli.bench.fake_cuda.fake_cuda` (torch reports a bf16 GPU, tensors live on
the CPU), so it is served as on a GPU: bf16, fixed shapes (`zsnli.runtime.shapes`) and the accelerator's token
budget, the model's calibration.json with its cosine term and cascade. For each ``--token-budget`` the same
documents (``--docs``, taken evenly from each dataset of ``--examples``) go through
`zsnli.serving.service.ZeroShotClassifier.classify_many` at ``--concurrency`` (32) after an untimed pass over
``--concurrency`` of them, and a batch observer adds up, per kind of work (NLI pairs, texts, labels), the
forwards, their rows, the real tokens of those rows and the padded tokens computed (filler rows and width
padding included: `zsnli.serving.batch_types.BatchRecord`). The padding factor is padded / real.

Forwards: ``--forward real`` (default) runs the model on the CPU in bf16. ``--forward simulated`` replaces the
NLI model and the encoder by stand-ins that compute nothing (deterministic outputs, a sleep of ``--forward-ms``
plus ``--ms-per-ktoken`` per thousand padded tokens), for a queue that drains at a GPU's pace rather than this
CPU's: the padding depends on how much work waits when a forward starts, so name which in any figure.
Timing only in the sense that nothing here is a test; the token counts do not depend on the machine, the
rows per forward do (through the queue).

Imports `zsnli.bench.fake_cuda`, `zsnli.bench.cost_profile` (the even sample), `zsnli.bench.bench_args` (the
model directory check), `zsnli.config`, the harness, and
in `measure` the serving package (the service in this process, `zsnli.serving.offline`, `zsnli.serving.startup`).
"""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace
from typing import Any, Sequence

from ..harness.cli import (
    path_type,
    UsageParser, non_negative_float, output_file, positive_float, positive_int, usage_error,
)
from ..harness.examples import SHARED_PUBLIC_EXAMPLES
from .bench_args import check_model_dir, command_description
from .cost_profile import sampled_documents
from .fake_cuda import fake_cuda

PROG = "python -m zsnli.bench.accelerator_padding"
KINDS = ("nli", "embedding_text", "embedding_label")


class _Counter:
    """A batch observer: per kind, forwards, rows, real and padded tokens (`zsnli.serving.batch_types.BatchRecord`)."""

    def __init__(self) -> None:
        self.by_kind: dict[str, dict[str, int]] = {}

    def __call__(self, record) -> None:
        if not record.ok:
            return
        k = self.by_kind.setdefault(record.kind, {"forwards": 0, "rows": 0, "real": 0, "padded": 0})
        k["forwards"] += 1
        k["rows"] += record.rows or record.pairs
        k["real"] += record.tokens or 0
        k["padded"] += record.padded_tokens


class _StandIn:
    """A torch module's stand-in: no arithmetic, a sleep of ``ms + ms_per_ktoken x padded tokens / 1000``, and
    outputs that depend only on each row's token ids (so a cascade keeps the same labels run to run)."""

    def __init__(self, kind: str, width: int, ms: float, ms_per_ktoken: float) -> None:
        self.kind, self.width, self.ms, self.ms_per_ktoken = kind, width, ms, ms_per_ktoken

    def __call__(self, input_ids, attention_mask, **_ignored):
        import torch

        rows, cols = input_ids.shape
        time.sleep((self.ms + self.ms_per_ktoken * rows * cols / 1000.0) / 1000.0)
        seed = (input_ids * attention_mask).sum(1, keepdim=True).float()
        grid = torch.arange(1, self.width + 1, dtype=torch.float32)
        if self.kind == "nli":
            return SimpleNamespace(logits=torch.sin(seed * grid))
        return SimpleNamespace(last_hidden_state=torch.sin(seed * grid).unsqueeze(1).expand(rows, cols, self.width))


def _simulated(ms: float, ms_per_ktoken: float):
    """A loader (the server's, then the stand-ins swapped in) and the encoder loader to patch into the lifecycle."""
    from ..serving import startup

    def loader(settings):
        model = startup.default_loader(settings)
        model.model = _StandIn("nli", model.num_labels, ms, ms_per_ktoken)
        return model

    def load_encoder(settings, model):
        encoder = startup.load_encoder(settings, model)
        encoder.model = _StandIn("embedding", encoder.dim, ms, ms_per_ktoken)
        return encoder

    return loader, load_encoder


def measure(settings, docs: list[dict], concurrency: int, simulate: tuple[float, float] | None = None,
            capped: bool = True) -> dict[str, Any]:
    """Counts of one run (module docstring) of ``docs`` (``/classify`` bodies) through a service on ``settings``
    under the fake accelerator: ``{"kinds": {kind: {forwards, rows, real, padded}}, "wall_s", "health"}``.
    ``simulate``: ``(ms per forward, ms per thousand padded tokens)`` for stand-in forwards, None: real ones.
    ``capped`` False: no row cap (`zsnli.runtime.shapes.accelerator_rows` not applied, as before issue 58).
    Raises ``RuntimeError`` when a document gets an error."""
    from contextlib import ExitStack
    from unittest import mock

    from ..serving import lifecycle, startup
    from ..serving.offline import OfflineClassifier

    counter = _Counter()
    with fake_cuda(), ExitStack() as patches:
        loader = None
        if simulate is not None:
            loader, load_encoder = _simulated(*simulate)
            patches.enter_context(mock.patch.object(lifecycle, "load_encoder", load_encoder))
        if not capped:
            patches.enter_context(mock.patch.object(startup, "accelerator_rows", lambda budget: None))
        with OfflineClassifier(settings, loader) as clf:
            clf.classify_many(docs[:concurrency], concurrency)
            clf.service.batch_observers.append(counter)
            t0 = time.perf_counter()
            answers = clf.classify_many(docs, concurrency)
            wall = time.perf_counter() - t0
            health = clf.service.health()[1]
    failed = [a for a in answers if not isinstance(a, list)]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(docs)} documents failed, e.g. {failed[0]}")
    return {"kinds": counter.by_kind, "wall_s": wall, "health": {k: health.get(k) for k in
                                                                 ("device", "dtype", "fixed_shapes", "token_budget")}}


def render(results: dict[int, dict[str, Any]], docs: int) -> list[str]:
    """A markdown table: per budget and kind, forwards, real rows per forward, real and padded tokens, padded / real."""
    lines = ["| token budget | kind | forwards | real rows / forward | real tokens | padded tokens | padded / real |",
             "|---|---|---|---|---|---|---|"]
    for budget, r in results.items():
        total = {"forwards": 0, "rows": 0, "real": 0, "padded": 0}
        for kind in KINDS:
            k = r["kinds"].get(kind)
            if not k:
                continue
            for key in total:
                total[key] += k[key]
            lines.append(_row(budget, kind, k))
        lines.append(_row(budget, f"**all** ({docs / r['wall_s']:.1f} docs/s)", total))
    return lines


def _row(budget: int, name: str, k: dict[str, int]) -> str:
    """One Markdown row of the padding table: ``budget``, ``name`` and the counts ``k`` (forwards, rows, real and
    padded tokens) with rows per forward and padded over real tokens."""
    ratio = k["padded"] / k["real"] if k["real"] else float("nan")
    return (f"| {budget:,} | {name} | {k['forwards']:,} | {k['rows'] / max(1, k['forwards']):.1f} | {k['real']:,} | "
            f"{k['padded']:,} | {ratio:.2f}x |")


def build_parser() -> UsageParser:
    """The command line (module docstring): one help line for every option."""
    p = UsageParser(prog=PROG, description=command_description(__doc__))
    p.add_argument("--model-dir", default="model",
                   help="the NLI model served, with its calibration.json as the server finds it (default: %(default)s)")
    p.add_argument("--examples", type=path_type, default=SHARED_PUBLIC_EXAMPLES,
                   help="examples JSONL the documents come from (default: %(default)s)")
    p.add_argument("--docs", type=positive_int, default=300,
                   help="documents, taken evenly from each dataset (default: %(default)s)")
    p.add_argument("--concurrency", type=positive_int, default=32,
                   help="documents in flight at once; the untimed first pass sends this many (default: %(default)s)")
    p.add_argument("--token-budget", type=positive_int, action="append", default=None,
                   help="padded tokens per forward (repeatable; default: the accelerator's default)")
    p.add_argument("--forward", choices=("real", "simulated"), default="real",
                   help="real: the model's bf16 forwards on the CPU; simulated: stand-ins that compute nothing and "
                        "sleep --forward-ms plus --ms-per-ktoken per 1,000 padded tokens (default: %(default)s)")
    p.add_argument("--forward-ms", type=positive_float, default=2.0,
                   help="simulated: ms per forward (default: %(default)s)")
    p.add_argument("--ms-per-ktoken", type=non_negative_float, default=0.07,
                   help="simulated: ms per thousand padded tokens (default: %(default)s)")
    p.add_argument("--uncapped", action="store_true",
                   help="rows per forward = token budget // width, no cap (the accelerator's shapes before issue 58)")
    p.add_argument("--scoring", choices=("served", "embedding", "pipeline"), default="served",
                   help="the scoring every document asks for: served (the shipped default), embedding (the fast "
                        "path) or pipeline (plain NLI) (default: %(default)s)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads of the service (default: torch's)")
    p.add_argument("--out", type=output_file, default=None,
                   help="also write the counts of each token budget here as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, measure each budget, print the table (and ``--out`` JSON); exit 2 with one line on a usage mistake."""
    ap = build_parser()
    args = ap.parse_args(argv)
    check_model_dir(ap, args.model_dir)
    try:
        docs = sampled_documents(args.examples, args.docs)
    except ValueError as exc:
        return usage_error(PROG, str(exc))
    docs = [{"text": d["text"], "labels": d["labels"], "scoring": args.scoring} for d in docs]
    from ..config import Settings

    simulate = (args.forward_ms, args.ms_per_ktoken) if args.forward == "simulated" else None
    results = {}
    for budget in args.token_budget or [None]:
        settings = Settings(model_dir=args.model_dir, token_budget=budget, torch_threads=args.threads,
                            log_level="warning")
        r = measure(settings, docs, args.concurrency, simulate, capped=not args.uncapped)
        results[r["health"]["token_budget"]] = r
    how = (f"simulated forwards ({args.forward_ms:g} ms + {args.ms_per_ktoken:g} ms per 1,000 padded tokens)"
           if simulate else "real bf16 forwards on the CPU") + (", rows not capped" if args.uncapped else "")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{len(docs)} documents ({args.examples}), scoring {args.scoring}, concurrency {args.concurrency}, "
          f"fake accelerator, {how}; load average {load:.2f}")
    print("\n".join(render(results, len(docs))))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({str(k): v for k, v in results.items()}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
