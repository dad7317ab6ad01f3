"""The harness toolkit shared by validation (``validate.py``) and the benchmarks (`zsnli.bench`).

One module per concern, none imported by the server but `cli` (standard library only: the one-line errors
the server's command line, its manifest and scoring readers share):

* `examples` - the one examples reader/writer (DESIGN.md's JSONL, ``hub:btzsc``), resampling;
* `server`   - `ServerProcess`: start ``serve.sh`` on a free port, wait for ``/health``, stop by
  process group; `wait_for_url` for a server already running; `stops_servers`: a command's servers
  stopped on SIGINT/SIGTERM, one line, exit 130/143;
* `load`     - `run_requests`: the one HTTP load driver (warm-ups, concurrency, time limit, 503
  retries as an option) and `check_answer`, the contract check;
* `stats`    - percentiles, latency summary, per-second rates;
* `cli`      - one-line usage errors (exit 2) and argparse types.

Data flows one way: examples -> load (via server) -> stats. May import
`zsnli.manifest` (examples digests) and nothing else from zsnli.
"""
