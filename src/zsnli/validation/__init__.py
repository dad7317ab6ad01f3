"""The validation harness behind ``validate.py``.

One module per concern:

* `scorecards` - per-dataset metrics (via `zsnli.metrics`) and the headline;
* `selfcheck`  - the self-check's six gates (``validate.py``);
* `compare_arms` - ``validate.py compare``'s arms: servers, model directories, baselines;
* `analysis`   - escalation thresholds and worst slices;
* `bakeoff`    - the compare run and its tables (``validate.py compare``);
* `suite`, `protocol`, `bakeoff_runner`, `bakeoff_analysis`, `slices`, `suite_bakeoff`,
  `bakeoff_html`, `regression_gate`, `bakeoff_cli` - ``validate.py bakeoff`` (TOML suites of
  `zsnli.arms`, folds without leakage, slices, HTML) and ``validate.py gate``;
* `report`     - receipt, reliability diagrams, HTML;
* `cli`        - the command line.

Examples, server processes, the HTTP load driver and latency statistics come
from the harness toolkit shared with the benchmarks (`zsnli.harness`). May
import `zsnli.harness`, `zsnli.metrics`, `zsnli.manifest`, `zsnli.baselines`;
never the server's modules.
"""

from zsnli.validation.cli import main

__all__ = ["main"]
