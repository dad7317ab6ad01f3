"""The validation harness behind ``validate.py``.

One module per concern:

* `scorecards` - per-dataset metrics (via `zsnli.metrics`) and the headline;
* `selfcheck`  - the self-check's six gates (``validate.py``);
* `arms`       - bake-off arms: servers, model directories, baselines;
* `analysis`   - escalation thresholds and worst slices;
* `bakeoff`    - the bake-off run and its tables (``validate.py compare``);
* `report`     - receipt, reliability diagrams, HTML;
* `cli`        - the command line.

Examples, server processes, the HTTP load driver and latency statistics come
from the harness toolkit shared with the benchmarks (`zsnli.harness`). May
import `zsnli.harness`, `zsnli.metrics`, `zsnli.manifest`, `zsnli.baselines`;
never the server's modules.
"""

from zsnli.validation.cli import main

__all__ = ["main"]
