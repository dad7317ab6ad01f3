#!/usr/bin/env python
"""Validate the shipped model and server, or compare several arms.

    python validate.py [--url URL] [--examples PATH|hub:btzsc] [--docs N] [--report out.json]
    python validate.py compare [--url [NAME=]URL]... [--model-dir [NAME=]DIR]... [--baseline pipeline|embedding]...
    python validate.py bakeoff --suite suites/ci.toml [--examples PATH] [--train-fraction F] [--seed N] [--report out.json]
                               [--receipt-key PEM]
    python validate.py gate out.json --baseline baselines/main.json
    python validate.py verify-receipt REPORT.json [--public-key PEM]

Runs from the checkout without installing the package: the checkout's src/ is
put first on the import path. All logic lives in zsnli.compare; see
`python validate.py --help`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from zsnli.compare.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
