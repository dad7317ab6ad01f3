"""``python validate.py verify-receipt FILE [--public-key PEM] [--allow-unsigned]``: check a bake-off report's receipt
offline (the format and `verify` are `zsnli.compare.receipts`).

A user mistake or an unreadable input is one line on stderr, ``validate.py verify-receipt: error: ...`` (as every
other command of validate.py writes its mistakes), exit `EXIT_UNREADABLE`; a receipt that does not hold is one
``INVALID: ...`` line per problem on stdout, exit `EXIT_INVALID`.

Imports: `zsnli.compare.receipts` and `zsnli.harness.cli` (standard library only).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from zsnli.compare.receipts import (KEY_ENV, KEY_NEEDED, DuplicateKey, NonCanonicalNumber, NotAReport, ReceiptError,
                                    default_key, load_report, local_public_pem, public_pem_of, receipt_of,
                                    verify)
from zsnli.harness.cli import UsageParser, json_problem, one_line, path_type, usage_error

PROG = "validate.py verify-receipt"
#: What a valid receipt vouches for, as `main` prints it.
COVERED = ("every field of the report (for a service answer: id, created_at, task_description, labels with their "
           "order, n, scorecard with predictions when retained, winner), the examples' sha256 and each arm's "
           "identity (model, calibration and code hashes, parameters), the arms that did not run and the receipt's "
           "version")
#: Exit codes (docs/bakeoff.md): valid (signed and checked, or unsigned and ``--allow-unsigned``), invalid (a
#: problem, an unsigned receipt not accepted included), unreadable input or no public key for a signature.
EXIT_VALID, EXIT_INVALID, EXIT_UNREADABLE = 0, 1, 2


def _parser() -> UsageParser:
    p = UsageParser(prog=PROG,
                    description="Verify the receipt of a bake-off report (service answer or validate.py "
                                "bakeoff/compare JSON report) offline. Exit 0 valid, 1 invalid (an unsigned receipt "
                                "too, unless --allow-unsigned), 2 unreadable or no public key for a signed receipt.")
    p.add_argument("file", type=path_type, help="a bake-off report: JSON of POST /v1/bakeoff, GET /v1/bakeoffs/ID, or "
                                           "validate.py bakeoff/compare --report")
    p.add_argument("--public-key", type=path_type, default=None,
                   help="PEM public key (GET /v1/receipts/public-key) or the private key that signed (the run's "
                        "--receipt-key file: its public half is used); default: the local ZSNLI_RECEIPT_KEY's")
    p.add_argument("--allow-unsigned", action="store_true",
                   help="accept an unsigned (sha256-only) receipt of a command-line report: it shows only that the "
                        "file is unchanged since someone computed its sha256 (never accepted for a service answer)")
    return p


def _subject(report: dict[str, Any]) -> str:
    if "id" in report:
        return f"bake-off {report['id']}, winner {report.get('winner')}"
    suite = report.get("suite") if isinstance(report.get("suite"), dict) else {}
    return f"{report.get('tool', 'report')}, suite {suite.get('name')}"


def _read(path: Path, public_key: Path | None) -> tuple[Any, dict[str, Any], bytes | None]:
    """The report, its receipt and the public key to check it with. Raises what `main` turns into its lines."""
    report = load_report(path.read_text(encoding="utf-8"))
    receipt = receipt_of(report)
    pem = public_pem_of(public_key) if public_key is not None else None
    if pem is None and receipt.get("signature") is not None:
        pem = local_public_pem()
    return report, receipt, pem


def main(argv: Sequence[str] | None = None) -> int:
    """``verify-receipt FILE [--public-key PEM] [--allow-unsigned]``; returns the exit code.

    `EXIT_VALID` (0): a signed receipt whose signature the public key checks, or an unsigned one accepted by
    ``--allow-unsigned`` (a command-line report only: `zsnli.compare.receipts.unsigned_problems`); `EXIT_INVALID`
    (1): any problem `verify` finds, an unsigned receipt without ``--allow-unsigned`` included, a key given twice
    or a number not written canonically; `EXIT_UNREADABLE` (2): usage, unreadable input, not a report with a
    receipt, or a signed receipt with no public key to check it. FILE is a service answer or a ``validate.py
    bakeoff`` / ``compare`` JSON report. A signed receipt without ``--public-key`` is checked against the public
    half of the local ``ZSNLI_RECEIPT_KEY`` (the server's ``GET /v1/receipts/public-key`` gives it to anyone else).
    """
    args = _parser().parse_args(argv)
    if args.file.is_dir():
        return usage_error(PROG, f"{args.file}: a directory, not a file; give a bake-off JSON report")
    try:
        report, receipt, pem = _read(args.file, args.public_key)
        problems = verify(report, pem, allow_unsigned=args.allow_unsigned)
    except DuplicateKey as exc:
        print(f"INVALID: key {str(exc)!r} is given more than once in an object of {args.file}: a reader could take "
              "either value, so the receipt vouches for neither")
        return EXIT_INVALID
    except NonCanonicalNumber as exc:
        print(f"INVALID: the number {str(exc)!r} in {args.file} is not written as the receipt's canonical JSON writes "
              "numbers (the signed bytes hold one spelling of each: the file was rewritten or changed)")
        return EXIT_INVALID
    except NotAReport as exc:
        return usage_error(PROG, f"{args.file} is not a bake-off report with a receipt: {exc}")
    except OSError as exc:  # a missing or unreadable file (the report's or the key's)
        return usage_error(PROG, f"cannot read {exc.filename or args.file}: {exc.strerror or exc}")
    except RecursionError:  # JSON nested deeper than Python can walk: no report is
        return usage_error(PROG, f"{args.file} is nested too deeply to be a bake-off report")
    except json.JSONDecodeError as exc:  # (a ValueError) the report is not JSON, or an empty file
        return usage_error(PROG, f"{args.file}: not JSON ({json_problem(exc)})")
    except UnicodeDecodeError as exc:  # (a ValueError)
        return usage_error(PROG, f"{args.file}: not UTF-8 text ({one_line(exc)})")
    except (ValueError, ReceiptError) as exc:  # a key file that is no key names its flag (`public_pem_of`)
        return usage_error(PROG, one_line(exc))
    return _answer(args.file, report, receipt, problems)


def _answer(path: Path, report: Any, receipt: dict[str, Any], problems: list[str]) -> int:
    """Print what `verify` found (or that the receipt holds) and return the exit code."""
    no_key = [line for line in problems if line.startswith(KEY_NEEDED)]
    if problems and len(no_key) == len(problems):
        return usage_error(PROG, f"--public-key is needed (the receipt is signed; no local key at "
                                 f"{os.environ.get(KEY_ENV, '').strip() or default_key()})")
    if problems:
        for line in problems:
            print(f"INVALID: {line}")
        return EXIT_INVALID
    if receipt.get("signature") is None:
        print(f"valid (unsigned, accepted by --allow-unsigned): receipt {receipt['sha256']} (the sha256 matches, "
              f"which shows only that the file is unchanged since it was computed) ({_subject(report)})")
    else:
        print(f"valid: receipt {receipt['sha256']} signed by key {receipt['key_id']} ({_subject(report)})")
    print(f"the receipt covers: {COVERED}")
    print(not_run_line(receipt))
    return EXIT_VALID


def not_run_line(receipt: Mapping[str, Any]) -> str:
    """What a valid receipt says about the arms that did not finish: each with its reason, that every arm ran,
    or (a receipt sealed before ``not_run`` existed) that it does not say."""
    if "not_run" not in receipt:
        return ("arms that did not run: not listed (a receipt sealed before issue 57 has no not_run; the report's "
                "failed rows say which arms failed)")
    not_run = receipt["not_run"]
    if not not_run:
        return "arms that did not run: none (every arm of the bake-off finished)"
    return (f"arms that did not run ({len(not_run)}, signed): "
            + "; ".join(f"{arm}: {' '.join(str(why).split())}" for arm, why in not_run.items()))
