#!/usr/bin/env python
"""Validate the shipped model and server, or compare several arms.

    python validate.py [--url URL] [--examples PATH|hub:btzsc] [--docs N] [--report out.json]
    python validate.py compare [--url [NAME=]URL]... [--model-dir [NAME=]DIR]... [--baseline pipeline|embedding]...

All logic lives in zsnli.validation; see `python validate.py --help`.
"""

import sys

from zsnli.validation import main

if __name__ == "__main__":
    sys.exit(main())
