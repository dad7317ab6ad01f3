"""``zsnli classify --input`` on a big file: seconds to the first answer and peak memory (issue 31, item 4).

    python bench/cli_stream.py [--mib 274] [--seconds 40] [--repo DIR]

Writes a JSONL file of ``--mib`` MiB (1,000-character documents) in a temporary folder, starts an
in-process fake server on 127.0.0.1 that answers every ``POST /classify`` array at once (so the
figures are the command's own reading, sending and writing, not a model's), then runs ``python -m
zsnli.cli classify --input FILE --url ... --output OUT`` for at most ``--seconds`` seconds and prints:
seconds until the first answer line is in the output, the process's peak resident memory (``VmHWM``)
and its ratio to the file size, and the lines answered in that time. ``--repo DIR`` runs another
checkout's ``src/`` the same way first (before a change), on the same file, and prints the ratios.
Prints figures only; nothing is asserted. Linux only (reads ``/proc``).
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from zsnli.harness.cli import UsageParser, positive_float, positive_int

ROOT = Path(__file__).resolve().parents[1]


class _Instant(http.server.BaseHTTPRequestHandler):
    """Answers every document of an array with two probabilities, at once."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        items = body if isinstance(body, list) else [body]
        out = json.dumps([{"id": d.get("id") if isinstance(d, dict) else None, "probabilities": [0.5, 0.5]}
                          for d in items]).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # the command is killed mid-request at the end: quiet
        pass


def write_corpus(path: Path, mib: int) -> int:
    """``path``: JSONL of about ``mib`` MiB, one ``{"id", "text"}`` a line; returns the lines written."""
    text = ("The quarterly report shows revenue growth across every region, with costs held flat. " * 12)[:1000]
    n = 0
    with path.open("w") as f:
        while f.tell() < mib * 2**20:
            f.write(json.dumps({"id": n, "text": text}) + "\n")
            n += 1
    return n


def measure(src: Path, corpus: Path, url: str, out: Path, seconds: float) -> dict:
    """Run the command of checkout ``src`` on ``corpus``; first-answer seconds, peak RSS MiB, lines answered."""
    out.unlink(missing_ok=True)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "zsnli.cli", "classify", "--input", str(corpus), "--labels",
                             "a,b", "--url", url, "--output", str(out)], env={**os.environ, "PYTHONPATH": str(src)},
                            stderr=subprocess.DEVNULL)
    first, peak_kib = None, 0
    while proc.poll() is None and time.monotonic() - t0 < seconds:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            peak_kib = max(peak_kib, int(status.split("VmHWM:")[1].split()[0]))
        except (OSError, IndexError, ValueError):
            pass
        if first is None and out.exists() and out.stat().st_size > 0:
            first = time.monotonic() - t0
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    lines = sum(1 for _ in out.open()) if out.exists() else 0
    return {"first_s": first, "peak_mib": peak_kib / 1024, "lines": lines}


def main(argv: Sequence[str] | None = None) -> int:
    ap = UsageParser(prog="bench/cli_stream.py", description="zsnli classify --input: first answer and peak memory")
    ap.add_argument("--mib", type=positive_int, default=274, help="size of the input file (default 274 MiB)")
    ap.add_argument("--seconds", type=positive_float, default=40.0, help="run each command at most this long")
    ap.add_argument("--repo", help="another checkout measured first the same way (e.g. before a change)")
    args = ap.parse_args(argv)
    httpd = _Server(("127.0.0.1", 0), _Instant)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        n = write_corpus(corpus, args.mib)
        size = corpus.stat().st_size / 2**20
        print(f"input: {n} lines, {size:.0f} MiB; fake server answers at once; at most {args.seconds:g} s per run")
        arms = ([("--repo", Path(args.repo).resolve() / "src")] if args.repo else []) + [("this checkout", ROOT / "src")]
        figures = {}
        for name, src in arms:
            f = figures[name] = measure(src, corpus, url, Path(tmp) / "out.jsonl", args.seconds)
            first = "none" if f["first_s"] is None else f"{f['first_s']:.2f} s"
            print(f"{name}: first answer after {first}; peak RSS {f['peak_mib']:.0f} MiB "
                  f"({f['peak_mib'] / size:.2f}x the file); {f['lines']} lines answered")
        if args.repo and figures["--repo"]["first_s"] and figures["this checkout"]["first_s"]:
            before, after = figures["--repo"], figures["this checkout"]
            print(f"ratio this checkout / --repo: first answer {after['first_s'] / before['first_s']:.2f}, "
                  f"peak RSS {after['peak_mib'] / max(before['peak_mib'], 1e-9):.2f}")
    httpd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
