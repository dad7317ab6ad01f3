"""The command line of the side-by-side benchmark (``python -m zsnli.bench``, `zsnli.bench.side_by_side`).

Every argument is checked before any arm runs (one line, exit 2: `zsnli.harness.cli.UsageParser`):
the model directory, the checkout (``--repo-root``), the device (`zsnli.bench.bench_args`), the examples file, the
``--batch-sizes`` / ``--concurrency`` lists, each ``--variant``'s ``ZSNLI_*`` settings (as the server would parse
them), the shipped calibration of arm (d) and its sentence encoder, and with ``--fast-path`` its
``embedding_scoring`` object. `main` runs the arms, prints `zsnli.bench.side_by_side_table.render` and writes
``--out``.

Imports `zsnli.bench.side_by_side`, `zsnli.bench.side_by_side_table`, `zsnli.bench.bench_args`, `zsnli.harness`,
`zsnli.config` (and `zsnli.scoring` and `zsnli.request_scoring` to read the calibration).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from ..config import closest_setting, setting_names
from ..harness.cli import UsageParser, non_negative_int, number_type, positive_float, positive_int, output_file
from ..harness.server import stops_servers
from ..harness.examples import DEV_EXAMPLES, SHARED_PUBLIC_EXAMPLES, first_existing
from .bench_args import check_device, check_examples, check_file, check_model_dir, check_repo_root, device_name
from .side_by_side import BUILTIN_SERVERS, failed_servers, run, server_base_settings, shipped_embedding_dir
from .side_by_side_table import render
from .reports import write_report


def parse_variant(spec: str) -> tuple[str, dict[str, str]]:
    """``"bf16:ZSNLI_DTYPE=bfloat16,ZSNLI_TOKEN_BUDGET=2048"`` -> ``("bf16", {...})``.

    Raises ``ValueError`` on a missing name, a name a built-in server arm has in the report
    (`zsnli.bench.side_by_side.BUILTIN_SERVERS`, in any case), an item without ``=``, a key
    that is not a ``ZSNLI_*`` setting the server knows (the message suggests
    the closest known name) or a key given twice (which value was meant is not known; the last
    one used to win silently). Values are checked by `check_variant`.
    """
    name, sep, rest = spec.partition(":")
    name = name.strip()
    if not sep or not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"{spec!r}: expected NAME:KEY=VALUE[,KEY=VALUE] with a plain NAME (letters, digits, - and _)")
    if name.lower() in BUILTIN_SERVERS:
        raise ValueError(f"{spec!r}: NAME {name!r} is a built-in arm's name in the report (reserved: "
                         f"{', '.join(BUILTIN_SERVERS)}); give the variant another NAME")
    env: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key.startswith("ZSNLI_"):
            raise ValueError(f"{spec!r}: {item!r} is not ZSNLI_NAME=VALUE")
        known = setting_names()
        if key not in known:
            close = closest_setting(key)
            hint = f"did you mean {close}?" if close else f"known: {', '.join(sorted(known))}"
            raise ValueError(f"{spec!r}: unknown setting {key} ({hint})")
        if key in env:
            raise ValueError(f"{spec!r}: {key} is given twice ({env[key]!r} and {value.strip()!r}); give each "
                             "setting once")
        env[key] = value.strip()
    if not env:
        raise ValueError(f"{spec!r}: no settings")
    return name, env


def duplicate_names(names: Sequence[str]) -> list[str]:
    """The names of ``names`` that another one equals ignoring case (``casefold``), each group as given:
    ``["a", "A", "b"]`` -> ``["A = a"]``; ``[]`` when all differ. The names key the report's rows
    (``c32-NAME``) and files, which a case-insensitive file system or reader would merge."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.casefold(), []).append(name)
    return sorted(" = ".join(sorted(set(group))) for group in groups.values() if len(group) > 1)


def check_variant(name: str, env: dict[str, str], base: dict[str, str] | None = None) -> None:
    """Raise ``ValueError`` (one line) when the server would refuse ``base`` + ``env``: the same
    `zsnli.config.Settings.from_env` parse and checks it runs at startup."""
    from ..config import Settings, SettingsError

    try:
        Settings.from_env({**(base or {}), **env})
    except SettingsError as exc:
        raise ValueError(f"{name}: {exc}") from None


def _positive_ints(text: str) -> list[int]:
    """argparse type: ``"1,32"`` -> ``[1, 32]``; every item a positive integer, at least one."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated positive integers, e.g. 1,32")
    values = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{item!r} is not a positive integer (expected e.g. 1,32)")
        values.append(value)
    return values


def _batch_sizes(text: str) -> list[int]:
    """argparse type of ``--batch-sizes``: `_positive_ints`, or ``none`` (no (b) sweep: ``[]``)."""
    return [] if str(text).strip().lower() == "none" else _positive_ints(text)


def resolve_shipped(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Set ``args.shipped`` to ``(calibration path, ScoringConfig)`` of arm (d), or None with
    ``args.calibration_note`` saying why (``--calibration none``, or no calibration.json where the
    server looks: ``<model-dir>/calibration.json``, else beside ``<model-dir>``).

    Usage errors (one line, exit 2): an explicit ``--calibration`` that does not exist, an ``--embedding-dir``
    that is no model directory (`zsnli.bench.bench_args.check_model_dir`), a calibration the server would refuse,
    a cosine term whose sentence encoder is missing.
    """
    from ..config import Settings
    from ..scoring import ScoringConfigError, load_scoring_config

    args.shipped, args.calibration_note = None, ""
    if args.embedding_dir:
        check_model_dir(ap, args.embedding_dir, "--embedding-dir", nli=False,
                        hint="give the sentence encoder's directory (the shipped one is model/embedding)")
    if args.calibration is not None and args.calibration.strip().lower() == "none":
        args.calibration_note = "--calibration none"
        return
    if args.calibration is None:
        path = Settings(model_dir=args.model_dir).resolved_calibration_path()
        if not path.is_file():
            args.calibration_note = f"no calibration.json at {path} (where the server looks)"
            return
    else:
        path = Path(args.calibration)
        check_file(ap, args.calibration, "--calibration", "pass the shipped calibration.json, or none to leave out "
                   f"arm (d) (resolved: {path.resolve()})")
    try:
        scoring, _ = load_scoring_config(path)
    except ScoringConfigError as exc:
        ap.error(f"--calibration: {exc}")
    if scoring.embedding_weight != 0 and not shipped_embedding_dir(args).is_dir():
        ap.error(f"--calibration {path} has a cosine term but its sentence encoder {shipped_embedding_dir(args)} is "
                 "missing; pass --embedding-dir")
    args.shipped = (path.resolve(), scoring)


def resolve_examples(ap: argparse.ArgumentParser, given: str | None) -> str:
    """The examples to use: ``given`` when it exists (or is ``hub:...``), else the default (the shared
    public examples, else the repository's dev set, said in one line on stderr); a usage error when
    neither is there."""
    if given is not None:
        if not given.startswith("hub:"):
            check_file(ap, given, "--examples", "pass --examples PATH (JSONL as docs/bakeoff.md's 'The examples "
                       f"file' says) or --examples hub:btzsc (needs network) (resolved: {Path(given).resolve()})")
        return given
    found = first_existing(SHARED_PUBLIC_EXAMPLES, DEV_EXAMPLES)
    if found is None:
        ap.error(f"--examples: neither {SHARED_PUBLIC_EXAMPLES} nor {DEV_EXAMPLES} is here (run from the repository "
                 "root); pass --examples PATH (JSONL as docs/bakeoff.md's 'The examples file' says) or --examples "
                 "hub:btzsc")
    if str(found) != SHARED_PUBLIC_EXAMPLES:
        print(f"zsnli.bench: {SHARED_PUBLIC_EXAMPLES} not found: using the repository's {found} "
              "(pass --examples PATH or hub:btzsc for other data)", file=sys.stderr, flush=True)
    return str(found)


DESCRIPTION = """\
The side-by-side throughput benchmark: the transformers zero-shot pipeline, one document at a time (a) and
batched (b), against the zsnli server at each --concurrency (c), with the shipped default scoring (d), each
--variant and with --fast-path the fast path (f); the same model and documents for every arm. Prints the
table (docs/s, latency, memory, agreement, ratios, compute ceilings) and writes --out."""
"""The description of ``python -m zsnli.bench --help``: plain text (the module docstring's reST markup, such as
double backquotes, used to be shown as it is)."""

OTHER_COMMANDS = """the other benchmark commands (each with its own --help):
  python -m zsnli.bench.throughput_gate   the grading-style throughput gate (what bench/gpu.sh runs)
  python -m zsnli.bench.overload          a burst far above capacity: every answer 200 or 503 + Retry-After
  python -m zsnli.bench.idle_clients      a fresh client's GET /health beside N idle keep-alive clients
  python -m zsnli.bench.speed_rounds      the README's speed check: pipeline vs default in interleaved rounds
  python -m zsnli.bench.cost_profile      where a document's time goes per scoring, in process (issue 50)
  python -m zsnli.bench.bakeoff_priority  /classify p50/p95 alone and while a bake-off runs
  python -m zsnli.bench.bakeoff_costs     time the bake-off's arms, fit its cost model (zsnli.compare.budget.COSTS)
  python -m zsnli.bench.fair_share        a small client alone and beside one large /classify array (issue 31)
  python -m zsnli.bench.doc_figures       rebuild every model- and calibration-dependent figure of README and docs/
  python -m zsnli.bench.read_routes       read-route p50/p95 idle and while two bake-offs run
  python -m zsnli.bench.training_speed    training pairs/s, fp32 vs bf16, against the compute ceiling
  python -m zsnli.bench.batch_invariance  alone vs batched max |dp| and pairs/s: fp32, bf16, bf16 in fixed shapes
  python -m zsnli.bench.random_models     a random-weight model of a given architecture, built offline
  python -m zsnli.bench.accelerator_padding  padded against real tokens of the accelerator's forwards (fake GPU)
  python -m zsnli.bench.pipeline_arm      one pipeline arm in its own process (run by this benchmark)"""
"""The epilog of ``python -m zsnli.bench --help``: every other ``python -m zsnli.bench.*`` command."""


def build_parser() -> UsageParser:
    """The parser of ``python -m zsnli.bench``: `DESCRIPTION`, a help line for every option, `OTHER_COMMANDS`."""
    ap = UsageParser(prog="python -m zsnli.bench", description=DESCRIPTION, epilog=OTHER_COMMANDS,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", default="model",
                    help="the NLI model every arm serves or runs (default: %(default)s)")
    ap.add_argument("--examples", default=None,
                    help=f"examples JSONL in DESIGN.md's format or hub:btzsc (default: {SHARED_PUBLIC_EXAMPLES} where "
                         f"the team's shared data is mounted, else the repository's {DEV_EXAMPLES}; relative to the "
                         "current directory)")
    ap.add_argument("--docs", type=positive_int, default=None, help="first N documents (default all)")
    ap.add_argument("--out", type=output_file, default=None, help="write the JSON report here")
    ap.add_argument("--batch-sizes", type=_batch_sizes, default="8,32,64",
                    help="pipeline batch_size sweep for (b), or none to leave (b) out (default: %(default)s)")
    ap.add_argument("--pipeline-mode", default="stream",
                    help="(b) modes, comma-separated: stream (label-set groups streamed across documents) and/or "
                         "doc (one call per document, pairs batched within it) (default: %(default)s)")
    ap.add_argument("--concurrency", type=_positive_ints, default="1,32",
                    help="server concurrency levels for (c) and (d) (default: %(default)s)")
    ap.add_argument("--calibration", default=None, metavar="PATH|none",
                    help="calibration.json of arm (d), the shipped default scoring (default: the one the server "
                         "finds: <model-dir>/calibration.json, else beside <model-dir>); none: no arm (d)")
    ap.add_argument("--embedding-dir", default=None,
                    help="sentence encoder of arm (d)'s cosine term (ZSNLI_EMBEDDING_DIR; default: the server's, "
                         "<model-dir>/embedding)")
    ap.add_argument("--warmup", type=non_negative_int, default=4,
                    help="untimed documents before each arm (default: %(default)s)")
    ap.add_argument("--threads", type=positive_int, default=None,
                    help="torch/OMP threads for every arm (default: leave the environment's)")
    ap.add_argument("--launcher", choices=("auto", "serve.sh", "uvicorn"), default="auto",
                    help="how each server arm is started: serve.sh of --repo-root, or uvicorn on the app factory; "
                         "auto: serve.sh where it exists, else uvicorn (default: %(default)s)")
    ap.add_argument("--repo-root", default=".", help="where serve.sh lives (default: %(default)s)")
    ap.add_argument("--skip-manifest-check", action="store_true",
                    help="set ZSNLI_SKIP_MANIFEST_CHECK for the server (model dirs without a matching manifest)")
    ap.add_argument("--max-length", type=number_type(int, 8), default=None, help="window for token counts (default: the server's)")
    ap.add_argument("--matmul-n", type=positive_int, default=None, help="matmul side for the rate (default 1024)")
    ap.add_argument("--matmul-seconds", type=positive_float, default=2.0,
                    help="seconds the fp32 matmul that measures the compute ceiling runs (default: %(default)s)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE[,KEY=VALUE]",
                    help="also run the server with these ZSNLI_* settings at the top concurrency (repeatable), "
                         "e.g. bf16:ZSNLI_DTYPE=bfloat16 or int8:ZSNLI_BACKEND=onnx-int8")
    ap.add_argument("--device", type=device_name, default="cpu",
                    help="device of every server and pipeline arm (cpu, cuda, cuda:N); fp32 unless a --variant sets "
                         "ZSNLI_DTYPE; bench/gpu.sh --rows uses cuda (default: %(default)s)")
    ap.add_argument("--fast-path", action="store_true",
                    help="also run arm (f): the shipped server with ZSNLI_SCORING=embedding (the fast path), at the "
                         "same concurrencies; needs the calibration's embedding_scoring object")
    ap.add_argument("--no-progress", action="store_true",
                    help="no progress bars or [bench] lines on stderr (the table and --out still come)")
    return ap


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """CLI arguments (see module docstring).

    Refused here (argparse error, exit 2, before any arm runs): a ``--model-dir`` that is no model directory,
    a ``--repo-root`` that is no checkout, a ``--device`` the server would not take (`zsnli.bench.bench_args`), a
    missing ``--examples`` file or one without examples, ``--batch-sizes``/``--concurrency`` items that are
    not positive integers, malformed, reserved (a built-in server arm's) or duplicate ``--variant`` names
    (both ignoring case: `duplicate_names`),
    variants whose settings the server would refuse (unknown ``ZSNLI_*``
    name, bad value), and a bad ``--calibration`` / ``--embedding-dir``
    (`resolve_shipped`).
    """
    ap = build_parser()
    args = ap.parse_args(argv)
    check_repo_root(ap, args.repo_root)
    try:
        args.variant = [parse_variant(v) for v in args.variant]
        for name, env in args.variant:
            check_variant(name, env, server_base_settings(args))
    except ValueError as exc:
        ap.error(f"--variant {exc}")
    dup = duplicate_names([name for name, _ in args.variant])
    if dup:
        ap.error(f"--variant: duplicate name(s) {', '.join(dup)} (names are compared ignoring case: they key the "
                 "report's rows and files); give each variant its own NAME")
    args.examples = resolve_examples(ap, args.examples)
    check_examples(ap, args.examples)
    check_model_dir(ap, args.model_dir)
    resolve_shipped(ap, args)
    if args.fast_path:
        from ..request_scoring import load_embedding_scoring

        if args.shipped is None or load_embedding_scoring(args.shipped[0]) is None:
            ap.error("--fast-path: the shipped calibration has no embedding_scoring object (train.py select --kinds "
                     "writes one)" if args.shipped else "--fast-path needs the shipped calibration (arm (d))")
    args.pipeline_mode = [m.strip() for m in str(args.pipeline_mode).split(",") if m.strip()]
    bad = [m for m in args.pipeline_mode if m not in ("stream", "doc")]
    if bad:
        ap.error(f"--pipeline-mode: unknown mode(s) {bad}; use stream and/or doc")
    check_device(ap, args.device)
    return args


@stops_servers("python -m zsnli.bench")
def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the table, write ``--out``; returns 0, or 1 when a server request failed
    or a server (plain, shipped default or variant) failed to start or run."""
    args = parse_args(argv)
    report = run(args)
    render(report)
    write_report(args.out, report)
    return 1 if any(r.get("errors") for r in report["arms"]) or failed_servers(report) else 0
