"""Comparison and validation: everything behind ``validate.py`` and the bake-off service.

Subpackages: `zsnli.compare.arms` (the arm registry and the built-in arms, the in-process
baselines among them) and `zsnli.compare.service` (``POST /v1/bakeoff``, added to the served app
by `zsnli.serve`). One module per concern here:

* `scorecards` - per-dataset metrics (via `zsnli.metrics`) and the headline;
* `selfcheck`  - the self-check's six gates (``validate.py``);
* `engine`     - the comparison engine of every bake-off: the arm runner and the one ranking rule;
* `suite`, `protocol`, `bakeoff_runner`, `bakeoff_analysis`, `slices`, `suite_bakeoff`,
  `regression_gate`, `bakeoff_cli` - ``validate.py bakeoff`` and ``validate.py
  compare`` (a suite built from its flags: TOML suites of `zsnli.compare.arms`, folds without
  leakage, slices) and ``validate.py gate``;
* `render`     - the one report renderer (HTML and terminal) of the CLI and the service;
* `receipts`   - the one receipt format (sha256, Ed25519 signature) and ``verify-receipt``;
* `report`     - the report as plain JSON, the JSON report file;
* `cli`        - the command line.

Examples, server processes, the HTTP load driver and latency statistics come
from the harness toolkit shared with the benchmarks (`zsnli.harness`). May
import `zsnli.harness`, `zsnli.metrics`, `zsnli.manifest`, `zsnli.compare.arms.baselines`;
never the server's modules. Imports nothing at package import
(``validate.py`` runs `zsnli.compare.cli.main`), so importing the service or the arms stays light.
"""
