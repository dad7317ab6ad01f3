"""The validation harness behind ``validate.py``.

One module per concern:

* `examples`   - examples files (and ``hub:btzsc``), resampling with word rotation;
* `server`     - start/stop a server process, poll ``/health``;
* `client`     - POST /classify at a concurrency, contract checks, latencies;
* `scorecards` - per-dataset metrics (via `zsnli.metrics`) and the headline;
* `gates`      - the self-check's six gates;
* `arms`       - bake-off arms: servers, model directories, baselines;
* `analysis`   - escalation thresholds and worst slices;
* `compare`    - the bake-off run and its tables;
* `report`     - receipt, reliability diagrams, HTML;
* `cli`        - the command line.
"""

from zsnli.validation.cli import main

__all__ = ["main"]
