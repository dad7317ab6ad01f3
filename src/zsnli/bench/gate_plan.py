"""What the throughput gate (`zsnli.bench.throughput_gate`, ``bench/gpu.sh``) serves: its arms, and the plan it prints.

By default the gate is the graded setup (issue 58): ``serve.sh`` on ``--model-dir`` (``model/``) exactly as shipped,
with the calibration.json the server finds beside it (its cosine term, so the sentence encoder, and its cascade),
on the server's own default device and dtype (CUDA and bf16 on a GPU), nothing else set. Where the checkout has
the optional ``model/base/`` variant and its server reads ``ZSNLI_MODEL_VARIANT``, the gate serves each variant in
turn (``small``, then ``base``), one server each. ``--random-deberta`` (the gate's default before issue 58)
serves a random-weight deberta-v3-base of the published architecture instead, built offline (timing of that
architecture only), and ``--tiny`` a tiny random deberta-v2 (the CPU smoke run).

`plan` lists the arms (`GateArm`) without starting anything; `render_plan` is what ``--dry-run`` prints.

May import: `zsnli.config` (the setting names, where calibration.json is), `zsnli.harness.examples`,
`zsnli.bench.random_models` (inside `materialise`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..config import Settings, setting_names
from ..harness.examples import Example

#: The setting that picks the served model variant, and the variants the gate serves when the checkout has them.
VARIANT_SETTING = "ZSNLI_MODEL_VARIANT"
VARIANTS = ("small", "base")
#: The folder of the optional base variant inside the model directory.
BASE_SUBDIR = "base"


@dataclass
class GateArm:
    """One server the gate runs: ``name``, the model directory served (None until a random model is built by
    `materialise`), the ``ZSNLI_*`` settings added to serve.sh's environment, what is served (``note``) and
    whether its weights are random (``random``: ``deberta-v3-base``, ``deberta-tiny``, or None: trained)."""

    name: str
    model_dir: Path | None
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""
    random: str | None = None

    @property
    def weights_dir(self) -> Path:
        """The directory whose weights the server runs: ``<model_dir>/base`` for the ``base`` variant, else
        ``model_dir`` (the parameter and token counts of the compute ceiling come from it)."""
        assert self.model_dir is not None, "materialise the arm first"
        return self.model_dir / BASE_SUBDIR if self.env.get(VARIANT_SETTING) == "base" else self.model_dir


def served_scoring(model_dir: str | Path) -> str:
    """One line on the scoring serve.sh would read for ``model_dir``: the calibration.json it finds
    (`zsnli.config.Settings.resolved_calibration_path`), its rule, the cosine term (the encoder directory,
    ``<model_dir>/embedding``) and the cascade; or that none is found (served uncalibrated)."""
    settings = Settings(model_dir=str(model_dir))
    path = settings.resolved_calibration_path()
    try:
        chosen = json.loads(path.read_text(encoding="utf-8"))["chosen"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"no readable calibration.json at {path}: served uncalibrated (the pipeline's scoring)"
    parts = [f"calibration {path}: {chosen.get('rule')}"]
    if chosen.get("embedding_weight"):
        parts.append(f"cosine term x {chosen['embedding_weight']:g} (sentence encoder {Path(model_dir) / 'embedding'})")
    cascade = chosen.get("cascade")
    parts.append(f"cascade {cascade['min_labels']}:{cascade['keep']}" if cascade else "no cascade")
    return ", ".join(parts)


def _architecture(model_dir: Path) -> str:
    """``model_dir``'s type and size as its config.json says (``deberta-v2, 12 layers x 768``), or that it has no
    readable one."""
    try:
        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no readable config.json"
    return (f"{cfg.get('model_type')}, {cfg.get('num_hidden_layers')} layers x {cfg.get('hidden_size')}")


def plan(args: Any) -> list[GateArm]:
    """The gate's arms for parsed ``args`` (``model_dir``, ``tiny``, ``random_deberta``, ``device``, ``dtype``),
    in the order they run (module docstring). Reads files only."""
    extra = {k: v for k, v in (("ZSNLI_DEVICE", args.device), ("ZSNLI_DTYPE", args.dtype)) if v}
    if args.tiny or args.random_deberta:
        arch = "deberta-tiny" if args.tiny else "deberta-v3-base"
        why = "--tiny" if args.tiny else "--random-deberta"
        return [GateArm(arch, None, dict(extra), f"RANDOM WEIGHTS, {arch} architecture ({why}; timing only, not "
                                                 "accuracy), served uncalibrated", random=arch)]
    model_dir = Path(args.model_dir).resolve()
    what = f"{model_dir} ({_architecture(model_dir)}) as serve.sh serves it; {served_scoring(model_dir)}"
    if (model_dir / BASE_SUBDIR / "config.json").is_file() and VARIANT_SETTING in setting_names():
        return [GateArm(v, model_dir, {**extra, VARIANT_SETTING: v}, f"{VARIANT_SETTING}={v}: {what}")
                for v in VARIANTS]
    return [GateArm("served", model_dir, dict(extra), what)]


def materialise(arm: GateArm, work: Path, examples: Sequence[Example], tokenizer_from: str | Path, say) -> GateArm:
    """``arm`` with its model directory: a random-weight model built offline in ``work`` (`zsnli.bench.random_models`;
    its tokenizer said in the note), or ``arm`` itself when it serves a trained one."""
    if arm.random is None:
        return arm
    from .random_models import build_random_nli

    say(f"[gate] building a RANDOM-WEIGHT {arm.random} model offline in {work / 'model'}")
    corpus = [t for d in examples for t in (d.text, *d.labels)]
    info = build_random_nli(work / "model", arm.random, corpus=corpus,
                            tokenizer_from=None if arm.random == "deberta-tiny" else tokenizer_from)
    note = f"{arm.note}; {info['parameters'] / 1e6:.1f}M parameters; tokenizer: {info['tokenizer']}"
    return GateArm(arm.name, Path(info["model_dir"]).resolve(), arm.env, note, arm.random)


def render_plan(arms: Sequence[GateArm], docs: int, doc_note: str, warmup: int, concurrency: int) -> str:
    """What ``--dry-run`` prints: each arm (its settings beyond serve.sh's defaults and what it serves), then the load."""
    lines = ["== zsnli throughput gate: plan (dry run, nothing started) =="]
    for arm in arms:
        settings = " ".join(f"{k}={v}" for k, v in sorted(arm.env.items())) or "none (serve.sh's defaults)"
        where = arm.model_dir if arm.model_dir is not None else "(built at run time)"
        lines += [f"arm {arm.name}: serve.sh, ZSNLI_MODEL_DIR={where}, settings: {settings}", f"  serves {arm.note}"]
    lines.append(f"load: {warmup} warm-up requests, then {docs} documents ({doc_note}) at concurrency {concurrency}; "
                 "every answer parsed and checked; startup seconds to /health 200")
    return "\n".join(lines)
