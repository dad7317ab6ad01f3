#!/usr/bin/env python
"""Build the served model: fine-tune, calibrate, evaluate, verify, select (`python train.py --help`).

A thin launcher: it puts this checkout's ``src/`` first on ``sys.path`` (so
it runs without ``pip install -e .``) and hands over to `zsnli.train_cli`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from zsnli.train_cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
