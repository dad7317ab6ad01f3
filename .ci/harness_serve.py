#!/usr/bin/env python3
"""The grading harness, reproduced: serve the checkout with only the product card's packages.

    python3 .ci/harness_serve.py [--reuse] [--venv DIR] [--port N] [--startup-timeout S]

Steps, each timed and printed:

1. build a clean virtual environment (default ``.venv-harness/``, gitignored)
   holding exactly the card's packages (`CARD`) and what they depend on;
   nothing from this project is installed (no ``pip install -e .``), and
   ``import zsnli`` must fail in it;
2. run ``./serve.sh`` from the checkout with that interpreter on a free
   loopback port, with no ``PYTHONPATH``;
3. expect ``GET /health`` 200 with ``status`` ``ok``, then a valid
   ``POST /classify`` answer: one probability per candidate label, each
   finite and in [0, 1], summing to 1 (single-label request);
4. send SIGTERM and expect exit code 0.

``--reuse`` keeps the environment between runs when it was built for the
same package list (a stamp file records it). Exit code 0 when every step
passed, 1 with one line ``harness: FAIL <step>: <reason>`` (and the tail of
the server's log) otherwise, 2 for a bad argument.

Standard library only: this script runs before anything is installed. Its
command line is `zsnli.harness.cli.UsageParser` (standard library only too),
read from this checkout's ``src/`` (one-line usage errors, exit 2).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from zsnli.harness.cli import UsageParser, port_number, positive_float  # noqa: E402  (standard library only; nothing else of zsnli)

# The product card's packages. torch is pinned to the CPU release the project
# is tested on (the pip configuration here resolves it to the CPU wheel).
CARD = (
    "torch==2.13.0",
    "transformers",
    "datasets",
    "accelerate",
    "safetensors",
    "fastapi",
    "uvicorn",
    "numpy",
    "scikit-learn",
    "pytest",
)
STAMP = ".harness-packages"
REQUEST = {
    "id": "harness-1",
    "text": "The striker scored twice in the second half and the home team won the cup final.",
    "candidate_labels": ["sport", "business", "politics", "science"],
    "hypothesis_template": "This text is about {}.",
}
SUM_TOLERANCE = 1e-6


class HarnessFailure(Exception):
    """One failed step: ``step`` names it, the message says why."""

    def __init__(self, step: str, reason: str):
        super().__init__(reason)
        self.step = step


def _run(cmd: list[str], step: str, **kwargs) -> subprocess.CompletedProcess:
    print(f"harness: {step} ...", flush=True)  # pip steps take minutes: say which one runs
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    print(f"harness: {step} done in {time.monotonic() - t0:.0f} s", flush=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise HarnessFailure(step, f"{' '.join(cmd[:4])} ... exited {proc.returncode}: {' | '.join(tail)}")
    return proc


def venv_python(venv: Path) -> Path:
    """The interpreter inside ``venv`` (POSIX layout)."""
    return venv / "bin" / "python"


def build_venv(venv: Path, reuse: bool) -> bool:
    """Create ``venv`` with exactly `CARD` installed; returns True when it was (re)built.

    With ``reuse``, an environment whose stamp lists the same packages is kept.
    Raises ``HarnessFailure`` when venv creation or pip fails.
    """
    stamp = venv / STAMP
    wanted = "\n".join(CARD) + "\n"
    if reuse and venv_python(venv).exists() and stamp.is_file() and stamp.read_text() == wanted:
        return False
    if venv.exists():
        shutil.rmtree(venv)
    _run([sys.executable, "-m", "venv", str(venv)], "venv")
    py = str(venv_python(venv))
    pip = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # torch first and alone, as .ci/run does, so the pinned CPU build is the one resolved.
    _run(pip + [CARD[0]], "pip install torch")
    _run(pip + list(CARD[1:]), "pip install card packages")
    stamp.write_text(wanted)
    return True


def check_clean(venv: Path) -> str:
    """Check that this project is not importable in ``venv``; returns ``pip freeze`` as one line.

    Runs from an empty directory with ``PYTHONPATH`` removed, so neither the
    checkout nor the caller's environment can leak in. Raises ``HarnessFailure``.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with tempfile.TemporaryDirectory() as empty:
        probe = subprocess.run([str(venv_python(venv)), "-c", "import zsnli"], cwd=empty, env=env,
                               capture_output=True, text=True)
        if probe.returncode == 0 or "No module named 'zsnli'" not in probe.stderr:
            raise HarnessFailure("clean venv", f"`import zsnli` must fail in {venv}, got rc={probe.returncode} "
                                 f"{probe.stderr.strip()[-200:]!r}")
        freeze = _run([str(venv_python(venv)), "-m", "pip", "freeze"], "clean venv", cwd=empty, env=env).stdout
    if any(line.lower().startswith(("zsnli", "-e ")) for line in freeze.splitlines()):
        raise HarnessFailure("clean venv", f"the project is installed in {venv}: {freeze!r}")
    return " ".join(sorted(freeze.split()))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(method: str, url: str, body: dict | None = None, timeout: float = 60.0) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        payload = exc.read()
        try:
            return exc.code, json.loads(payload or b"null")
        except ValueError:
            return exc.code, {"raw": payload[:200].decode(errors="replace")}


def wait_healthy(base: str, proc: subprocess.Popen, timeout: float) -> dict:
    """Poll ``GET /health`` until 200; returns its body. Raises ``HarnessFailure`` on exit or timeout."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    t0 = said = time.monotonic()
    print(f"harness: waiting for {base}/health ...", flush=True)
    while time.monotonic() < deadline:
        if time.monotonic() - said >= 10:
            said = time.monotonic()
            print(f"harness: ... /health not 200 yet after {said - t0:.0f} s ({last})", flush=True)
        if proc.poll() is not None:
            raise HarnessFailure("health", f"serve.sh exited with code {proc.returncode} before /health was 200")
        try:
            status, body = _http("GET", base + "/health", timeout=5)
            if status == 200:
                return body
            last = f"{status} {body}"
        except (OSError, ValueError) as exc:
            last = str(exc)
        time.sleep(0.25)
    raise HarnessFailure("health", f"/health not 200 within {timeout:.0f} s (last: {last})")


def check_classify(base: str) -> dict:
    """POST `REQUEST` and check the answer; returns it. Raises ``HarnessFailure``."""
    status, body = _http("POST", base + "/classify", REQUEST)
    if status != 200:
        raise HarnessFailure("classify", f"status {status}: {body}")
    probs = body.get("probabilities") if isinstance(body, dict) else None
    labels = REQUEST["candidate_labels"]
    if not isinstance(probs, list) or len(probs) != len(labels):
        raise HarnessFailure("classify", f"expected {len(labels)} probabilities, got {body}")
    if not all(isinstance(p, (int, float)) and math.isfinite(p) and 0.0 <= p <= 1.0 for p in probs):
        raise HarnessFailure("classify", f"a probability is not finite or not in [0, 1]: {probs}")
    if abs(math.fsum(probs) - 1.0) > SUM_TOLERANCE:
        raise HarnessFailure("classify", f"probabilities sum to {math.fsum(probs)!r}, not 1: {probs}")
    if body.get("id") != REQUEST["id"]:
        raise HarnessFailure("classify", f"id not echoed: {body.get('id')!r}")
    return body


def stop(proc: subprocess.Popen, timeout: float) -> float:
    """SIGTERM the server and wait up to ``timeout`` s for exit code 0; returns the seconds it took.

    Raises ``HarnessFailure("sigterm", ...)`` when it exits with another code, or when it is still
    running after ``timeout`` s (it is killed then).
    """
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise HarnessFailure("sigterm", f"no exit within {timeout:.0f} s of SIGTERM") from None
    if code != 0:
        raise HarnessFailure("sigterm", f"exit code {code} after SIGTERM, expected 0")
    return time.monotonic() - t0


def serve_and_check(venv: Path, port: int, startup_timeout: float, log_path: Path) -> dict[str, float]:
    """Steps 2-4: returns the measured seconds per step. Raises ``HarnessFailure``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PYTHON=str(venv_python(venv)), HOST="127.0.0.1", PORT=str(port),
               PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    base = f"http://127.0.0.1:{port}"
    times: dict[str, float] = {}
    with open(log_path, "wb") as log:
        t0 = time.monotonic()
        # serve.sh execs python: the server is this process, so SIGTERM reaches it directly.
        proc = subprocess.Popen(["./serve.sh"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            health = wait_healthy(base, proc, startup_timeout)
            times["startup_s"] = time.monotonic() - t0
            if health.get("status") != "ok":
                raise HarnessFailure("health", f"/health 200 but status {health.get('status')!r}")
            t1 = time.monotonic()
            answer = check_classify(base)
            times["classify_s"] = time.monotonic() - t1
            print(f"harness: /classify -> {json.dumps(answer)}", flush=True)
            times["shutdown_s"] = stop(proc, timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return times


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = UsageParser(prog="harness_serve.py", description=__doc__.split("\n")[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-harness", help="environment folder")
    parser.add_argument("--reuse", action="store_true", help="keep the environment if built for the same packages")
    parser.add_argument("--port", type=port_number, default=0, help="port to serve on (default: a free one)")
    parser.add_argument("--startup-timeout", type=positive_float, default=300.0, help="seconds to wait for /health 200")
    args = parser.parse_args(argv)
    venv = args.venv.resolve()
    log_path = Path(tempfile.gettempdir()) / f"harness-serve-{os.getpid()}.log"
    step_times: dict[str, float] = {}
    try:
        t0 = time.monotonic()
        built = build_venv(venv, args.reuse)
        step_times["venv_s"] = time.monotonic() - t0
        print(f"harness: venv {'built' if built else 'reused'}: {venv}", flush=True)
        print(f"harness: packages: {check_clean(venv)}", flush=True)
        step_times.update(serve_and_check(venv, args.port or free_port(), args.startup_timeout, log_path))
    except HarnessFailure as exc:
        print(f"harness: FAIL {exc.step}: {exc}", file=sys.stderr, flush=True)
        tail = _log_tail(log_path)
        if tail:
            print(f"--- last lines of the server log ({log_path}) ---\n{tail}", file=sys.stderr, flush=True)
        return 1
    timings = " ".join(f"{k}={v:.1f}" for k, v in step_times.items())
    print(f"harness: OK /health 200, /classify valid, SIGTERM -> exit 0 ({timings})", flush=True)
    log_path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
