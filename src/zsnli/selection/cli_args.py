"""``train.py select``'s arguments: the parser and the checks of what they name, before any model is loaded or
anything scored.

`parser` builds the parser; `check_args` checks each path flag (`zsnli.training.usage`: a missing path, a file
given for a folder and a folder given for a file are each one line naming the flag and the value as given) and
the NLI model; `check_dev_data` then reads the dev sets and the kinds file and checks that every fold has
something to choose on. The run itself is `zsnli.selection.cli`.

May import `zsnli.training.usage`, `zsnli.training.cli_parser`, `zsnli.harness.cli` (``positive_int``),
`zsnli.selection.devsets`, `zsnli.selection.grouped`, `zsnli.selection.premise_windows` and `zsnli.selection.score_cache` (no
torch at import).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import grouped
from ..harness.cli import path_type, positive_int
from ..training.cli_parser import TrainParser
from ..training.usage import (check_encoder_dir, check_file_arg, check_folder_arg, check_nli_model_dir,
                             check_output_file_arg)
from .devsets import list_zsc_dev, read_examples, read_zsc_dev
from .grouped import read_kinds
from .premise_windows import PremiseWindows
from .score_cache import (DEFAULT_MAX_ROWS, DEFAULT_MAX_ROWS_FOR, check_max_rows_for, default_cache_dir,
                          parse_max_rows_for)

DESCRIPTION = "Choose the served scoring by leave-one-dataset-out and write calibration.json."
"""The parser's description (the command's docs: `zsnli.selection.cli`)."""
PROG = "train.py select"
ZSC_DEV_DEFAULT = Path("../shared/data/zsc-dev")
"""``--zsc-dev-dir``'s default: the team's zsc-dev suite beside the checkout."""


def _premise_windows(text: str) -> PremiseWindows:
    try:
        return PremiseWindows.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser() -> TrainParser:
    """``train.py select``'s parser (`zsnli.training.cli_parser.TrainParser`: a mistake is one line, exit 2)."""
    p = TrainParser(prog=PROG, description=DESCRIPTION)
    p.add_argument("--zsc-dev-dir", type=path_type, default=ZSC_DEV_DEFAULT,
                   help="zsc-dev folder: <name>.jsonl + <name>.labels.json per set (default %(default)s; docs/training.md)")
    p.add_argument("--dev-examples", type=path_type, default=Path("dev/zeroshot_dev.jsonl"),
                   help="the team-written dev set (examples format), chosen on beside zsc-dev (default %(default)s)")
    p.add_argument("--cache", type=path_type, default=default_cache_dir(),
                   help="folder of the score cache (the model's logits per dev set; made when missing, reused "
                        "while the model, sets and rows are the same; default %(default)s)")
    p.add_argument("--model-dir", type=path_type, default=Path("model"),
                   help="the NLI cross-encoder whose scoring is chosen, e.g. model/base (default %(default)s)")
    p.add_argument("--embedding-dir", type=path_type, default=None,
                   help="sentence encoder of the cosine term (default: <model-dir>/embedding), e.g. one trained by "
                        "`train.py encoder`; its digest goes into the chosen scoring's embedding_sha256")
    p.add_argument("--out", type=path_type, default=None,
                   help="calibration.json to write (default: the model's own: inside a variant folder such as "
                        "model/base, else beside --model-dir's training_manifest.json; refused in another model's)")
    p.add_argument("--data-sources", type=path_type, default=None,
                   help="data_sources.json to update (default: as --out)")
    p.add_argument("--report-public", type=path_type, default=None,
                   help="examples file reported after the choice (e.g. ../shared/data/zsc/public.jsonl); never chosen on")
    p.add_argument("--compare-with", type=path_type, default=None, metavar="CALIBRATION",
                   help="with --kinds: another run's output on the same rows (e.g. with another --embedding-dir); its "
                        "served figures both ways of holding out are recorded beside this run's (kind_weighted."
                        "compared_with); refused when it was chosen on other rows")
    p.add_argument("--negation", action="store_true",
                   help="also run the negation-pair experiment (figures only; the server does not read them)")
    p.add_argument("--max-rows", type=positive_int, default=DEFAULT_MAX_ROWS,
                   help="rows per dev dataset, stratified subsample (default %(default)s)")
    p.add_argument("--max-rows-for", action="append", default=[], metavar="NAME=ROWS",
                   help="per-dataset override (repeatable; defaults: "
                        + ", ".join(f"{k}={v}" for k, v in DEFAULT_MAX_ROWS_FOR.items()) + ")")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--premise-windows", type=_premise_windows, default=None, metavar="WINDOW:OVERLAP:RULE",
                   help="score long premises as overlapping windows, e.g. 128:0.5:max (a measurement of issue 30: "
                        "the server reads the premise cut to its window; default: the same)")
    p.add_argument("--kinds", type=path_type, default=None,
                   help="benchmark_kinds.json (e.g. ../shared/data/zsc-dev/benchmark_kinds.json): choose on zsc-dev "
                        "with each set weighted by task kind as the benchmark is, among the per-group and calibrator "
                        "arms (zsnli.selection.grouped); the team dev set is then reported only")
    return p


def check_args(args) -> None:
    """Check ``args``' paths before any model or data is read: each mistake one line naming its flag and the value
    as given (`zsnli.training.usage`: a file given for a folder is called a file, and the other way round)."""
    own = "give a folder of <name>.jsonl + <name>.labels.json (docs/training.md)"
    check_folder_arg(args.zsc_dev_dir, "--zsc-dev-dir", own if args.zsc_dev_dir != ZSC_DEV_DEFAULT else (
        "the team's zsc-dev suite is read from ../shared/data/zsc-dev beside the checkout; without it, give "
        "--zsc-dev-dir DIR of your own: docs/training.md, \"Choosing a scoring without the team's data\""))
    check_file_arg(args.dev_examples, "--dev-examples", "give the team's dev set, dev/zeroshot_dev.jsonl")
    if args.cache.exists():
        check_folder_arg(args.cache, "--cache", "give a folder for the score cache (made when missing)")
    check_nli_model_dir(args.model_dir)
    args.max_rows_given = parse_max_rows_for(args.max_rows_for)
    args.max_rows_for = {**DEFAULT_MAX_ROWS_FOR, **args.max_rows_given}
    if args.embedding_dir is not None:
        check_encoder_dir(args.embedding_dir, "--embedding-dir", "give a sentence encoder directory, as "
                          "model/embedding or one written by train.py encoder")
    for flag, path, hint in (("--report-public", args.report_public, "give an examples file, e.g. "
                              "../shared/data/zsc/public.jsonl"),
                             ("--kinds", args.kinds, "give benchmark_kinds.json, e.g. "
                              "../shared/data/zsc-dev/benchmark_kinds.json"),
                             ("--compare-with", args.compare_with, "give the calibration.json another "
                              "train.py select --kinds run wrote")):
        if path is not None:
            check_file_arg(path, flag, hint)


def check_targets(args, out: Path, data_sources: Path, model_sha256: str) -> None:
    """Set ``args.out``, ``args.data_sources`` and ``args.model_sha256`` (`zsnli.selection.targets.select_targets`'s
    answer) after checking that both files can be written (`zsnli.training.usage.check_output_file_arg`), before any
    scoring: a folder, a missing folder or a link to nothing found after hours of scoring lost them. A default path
    is named as the default of its flag. Raises `UsageError` (one line)."""
    for flag, given, path in (("--out", args.out, out), ("--data-sources", args.data_sources, data_sources)):
        check_output_file_arg(path, flag if given is not None else f"the default {flag}",
                              "give a file path in an existing folder" if given is not None else
                              f"give {flag} FILE in an existing folder")
    args.out, args.data_sources, args.model_sha256 = out, data_sources, model_sha256


def check_dev_data(args) -> None:
    """Read the zsc-dev sets (``args.zsc``), the team dev set (``args.dev_sets``) and the kinds file, and check them
    before any scoring: each set whole (`list_zsc_dev`, `read_zsc_dev`), a kind for every set and something to fit
    on in every fold (`zsnli.selection.grouped.check_kinds`; without ``--kinds``, 2 sets in all), every
    ``--max-rows-for`` NAME a set read (`zsnli.selection.score_cache.check_max_rows_for`). Raises
    ``ValueError`` (one line) on the first mistake."""
    args.zsc = {n: read_zsc_dev(args.zsc_dev_dir, n) for n in list_zsc_dev(args.zsc_dev_dir)}
    args.dev_sets = read_examples(args.dev_examples)
    check_max_rows_for(args.max_rows_given, [*(ds.name for ds in args.zsc.values()),
                                             *(ds.name for ds in args.dev_sets.values())])
    if args.kinds is not None:
        grouped.check_kinds(read_kinds(args.kinds), list(args.zsc), args.kinds)
    elif len(args.zsc) + len(args.dev_sets) < 2:
        raise ValueError("one dev set in all: leaving it out leaves nothing to choose on; give at least 2 sets")
