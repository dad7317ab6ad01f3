"""``python -m zsnli.bench``: the side-by-side benchmark (`zsnli.bench.side_by_side`, its command line `zsnli.bench.side_by_side_cli`)."""

from .side_by_side_cli import main

raise SystemExit(main())
