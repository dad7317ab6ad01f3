#!/usr/bin/env python
"""Build the served model: fine-tune, calibrate, evaluate, verify, select (`python train.py --help`).

A thin launcher: it puts this checkout's ``src/`` first on ``sys.path`` (so
it runs without ``pip install -e .``) and hands over to `zsnli.train_cli`. A
missing third-party package is one line naming it and the README's install
command, exit 2 (`zsnli.import_entry`), as for server.py and validate.py.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

import zsnli  # noqa: E402  (standard library only)

#: What the training commands import (`zsnli.training`): named in one line, exit 2, when any is missing.
TRAIN_MODULES = ("numpy", "torch", "transformers", "tokenizers", "safetensors", "datasets", "accelerate")
main = zsnli.import_entry("python train.py", TRAIN_MODULES, "zsnli.train_cli", "main")

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
