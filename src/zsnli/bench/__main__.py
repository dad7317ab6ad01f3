"""``python -m zsnli.bench``: the side-by-side benchmark (`zsnli.bench.compare`)."""

from .compare import main

raise SystemExit(main())
