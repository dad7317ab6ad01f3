"""``python -m zsnli.batch``: the same command as ``zsnli-batch`` (`zsnli.batch.cli.main`)."""

import sys

from zsnli.batch.cli import main

if __name__ == "__main__":
    sys.exit(main())
