"""``python -m zsnli.bench``: the side-by-side benchmark (`zsnli.bench.side_by_side`)."""

from .side_by_side import main

raise SystemExit(main())
