#!/usr/bin/env python
"""Build the served model: fine-tune, calibrate, evaluate, verify, select (`python train.py --help`).

A thin launcher: it puts this checkout's ``src/`` first on ``sys.path`` (so
it runs without ``pip install -e .``) and hands over to `zsnli.train_cli`. A
missing third-party package is one line naming it and the README's install
command, exit 2 (`zsnli.exit_if_missing`), as for server.py and validate.py.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

import zsnli  # noqa: E402  (standard library only)

#: What the training commands import (`zsnli.training`): named in one line, exit 2, when any is missing.
TRAIN_MODULES = ("numpy", "torch", "transformers", "tokenizers", "safetensors", "datasets", "accelerate")
zsnli.exit_if_missing("python train.py", TRAIN_MODULES)
try:
    from zsnli.train_cli import main  # noqa: E402
except ModuleNotFoundError as exc:  # one the list above does not name
    if not exc.name or exc.name.split(".")[0] == "zsnli":
        raise
    print(zsnli.missing_line("python train.py", [exc.name.split(".")[0]]), file=sys.stderr)
    raise SystemExit(2) from None

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
