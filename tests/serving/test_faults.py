"""Faults: a failing batch, non-finite logits, disconnects, timeouts, a full queue, SIGTERM, refusal to start."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import cached_loader, make_settings, running_app

from zsnli.serving.app import create_app
from zsnli.manifest import hash_model_dir

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
LABELS = ["This text is about sport.", "This text is about business.", "This text is about science."]


class FaultyModel:
    """Delegates to a real NliModel; its ``logits`` can raise, return NaN/inf rows, or block."""

    def __init__(self, model, marker: str, mode: str = "raise"):
        self._model = model
        self.marker_id = model.tokenizer.convert_tokens_to_ids(marker)
        assert self.marker_id != model.tokenizer.unk_token_id
        self.mode = mode
        self.gate: threading.Event | None = None
        self.failed_batches: list[set[tuple]] = []
        self.seen: list[tuple] = []

    def __getattr__(self, name):
        return getattr(self._model, name)

    def logits(self, batch):
        if self.gate is not None:
            self.gate.wait(20)
        self.seen.extend(tuple(e.input_ids) for e in batch)
        hit = [self.marker_id in e.input_ids for e in batch]
        if self.mode == "raise" and any(hit):
            self.failed_batches.append({tuple(e.input_ids) for e in batch})
            raise RuntimeError("injected CUDA error: device-side assert")
        out = self._model.logits(batch)
        if self.mode in ("nan", "inf"):
            out[np.array(hit, dtype=bool)] = np.nan if self.mode == "nan" else np.inf
        return out


def faulty_app(model_dir, mode, marker="terrible", **overrides):
    holder = {}

    def loader(settings):
        holder["model"] = FaultyModel(cached_loader(settings), marker, mode)
        return holder["model"]

    return create_app(make_settings(model_dir, **overrides), loader=loader), holder


def _texts(n):
    # letters, not numbers: the tiny vocab maps "0" and "10" both to [UNK], which made two
    # requests' pairs identical and the "which batch failed" bookkeeping below ambiguous
    assert n <= 26
    return [" ".join(["the team won the match"] * (1 + i % 5)) + f" {chr(ord('a') + i)}" for i in range(n)]


async def test_batch_fault_fails_only_that_batch(bert_dir):
    app, holder = faulty_app(bert_dir, "raise", max_batch_wait_ms=30, token_budget=256)
    async with running_app(app) as client:
        fm = holder["model"]
        reqs = [{"id": i, "text": t, "labels": LABELS} for i, t in enumerate(_texts(20))]
        reqs.insert(7, {"id": "bad", "text": "a terrible match", "labels": LABELS})
        rs = await asyncio.gather(*(client.post("/classify", json=r) for r in reqs))
        assert fm.failed_batches
        failed_pairs = set().union(*fm.failed_batches)
        all_pairs = [tuple(e.input_ids) for req in reqs for e in fm.encode([req["text"]] * 3, LABELS)]
        assert len(set(all_pairs)) == len(all_pairs)  # every request's pairs are its own
        for req, r in zip(reqs, rs):
            pairs = {tuple(e.input_ids) for e in fm.encode([req["text"]] * 3, LABELS)}
            if pairs & failed_pairs:
                assert r.status_code == 500, (req["id"], r.text)
                err = r.json()
                assert err["error_type"] == "inference" and "injected CUDA error" in err["error"]
            else:
                assert r.status_code == 200, (req["id"], r.text)
        assert rs[7].status_code == 500
        assert sum(r.status_code == 200 for r in rs) >= 1
        # the worker keeps running
        assert (await client.post("/classify", json={"text": "fine", "labels": LABELS})).status_code == 200
        assert (await client.get("/health")).status_code == 200


@pytest.mark.parametrize("mode", ["nan", "inf"])
async def test_non_finite_logits_are_a_clear_5xx(bert_dir, mode):
    app, _ = faulty_app(bert_dir, mode, max_batch_wait_ms=20)
    async with running_app(app) as client:
        bad = {"id": "bad", "text": "a terrible day", "labels": LABELS}
        good = {"id": "good", "text": "a great day", "labels": LABELS}
        r_bad, r_good = await asyncio.gather(client.post("/classify", json=bad), client.post("/classify", json=good))
        assert r_bad.status_code == 500 and r_bad.json()["error_type"] == "non_finite"
        assert "NaN" not in r_bad.text and "Infinity" not in r_bad.text
        assert r_good.status_code == 200 and all(np.isfinite(r_good.json()["probabilities"]))
        multi = await client.post("/classify", json={**bad, "multi_label": True})
        assert multi.status_code == 500 and "NaN" not in multi.text


async def test_disconnected_client_has_its_pairs_dropped(bert_dir):
    app, holder = faulty_app(bert_dir, "none")
    async with running_app(app) as client:
        fm = holder["model"]
        batcher = app.state.classifier.state.batcher
        fm.gate = threading.Event()
        blocker = asyncio.create_task(client.post("/classify", json={"text": "first", "labels": ["a"]}))
        await asyncio.sleep(0.2)  # the blocker's batch is now inside the forward

        body = json.dumps({"text": "a terrible thing", "labels": LABELS}).encode()
        disconnect = asyncio.Event()
        sent: list[dict] = []
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():
            if messages:
                return messages.pop(0)
            await disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/classify", "raw_path": b"/classify", "query_string": b"",
                 "root_path": "", "headers": [(b"content-type", b"application/json"), (b"host", b"testserver")],
                 "client": ("127.0.0.1", 1), "server": ("testserver", 80)}
        call = asyncio.create_task(app(scope, receive, send))
        for _ in range(200):
            if batcher.pending_pairs == 3:
                break
            await asyncio.sleep(0.01)
        assert batcher.pending_pairs == 3
        dropped_before = batcher.stats.dropped_pairs
        disconnect.set()
        await asyncio.wait_for(call, 10)
        assert batcher.pending_pairs == 0
        assert batcher.stats.dropped_pairs - dropped_before == 3
        assert batcher.admitted_pairs <= 1  # only the blocker still holds room
        fm.gate.set()
        assert (await blocker).status_code == 200
        assert not any(fm.marker_id in ids for ids in fm.seen)  # never computed


async def test_request_timeout_is_503_and_drops_pairs(bert_dir):
    app, holder = faulty_app(bert_dir, "none", request_timeout_s=0.3)
    async with running_app(app) as client:
        fm = holder["model"]
        fm.gate = threading.Event()
        first = asyncio.create_task(client.post("/classify", json={"text": "one", "labels": ["a"]}))
        await asyncio.sleep(0.05)
        r = await client.post("/classify", json={"text": "a terrible wait", "labels": LABELS})
        assert r.status_code == 503 and r.json()["error_type"] == "timeout" and "Retry-After" in r.headers
        fm.gate.set()
        await first
        assert app.state.classifier.state.batcher.pending_pairs == 0
        assert not any(fm.marker_id in ids for ids in fm.seen)


async def test_work_once_started_is_finished_past_the_request_timeout(bert_dir):
    """ZSNLI_REQUEST_TIMEOUT_S bounds the wait before a request's first pair enters a batch, not its whole
    work: a request split over several slow batches is answered though it takes longer than the timeout
    (it used to get 503 timeout after 0.3 s, its rows already computed thrown away)."""
    import time as _time

    class Slow:
        def __init__(self, model):
            self._model, self.batches = model, 0

        def __getattr__(self, name):
            return getattr(self._model, name)

        def logits(self, batch):
            self.batches += 1
            _time.sleep(0.15)
            return self._model.logits(batch)

    holder = {}

    def loader(settings):
        holder["model"] = Slow(cached_loader(settings))
        return holder["model"]

    labels = [f"This text is about topic {j}." for j in range(12)]
    app = create_app(make_settings(bert_dir, request_timeout_s=0.3, token_budget=64), loader=loader)
    async with running_app(app) as client:
        before = holder["model"].batches
        t0 = _time.monotonic()
        r = await client.post("/classify", json={"text": "the team won the match", "labels": labels})
        took = _time.monotonic() - t0
        assert r.status_code == 200, r.text
        assert len(r.json()["probabilities"]) == 12
        assert holder["model"].batches - before >= 3 and took > 0.3  # several batches, past the timeout
        assert app.state.classifier.state.batcher.admitted_pairs == 0


async def test_full_queue_is_503_with_retry_after(bert_dir):
    app, holder = faulty_app(bert_dir, "none", max_labels=4, queue_capacity_pairs=8, retry_after_s=2)
    async with running_app(app) as client:
        fm = holder["model"]
        fm.gate = threading.Event()
        labels = ["a", "b", "c", "d"]
        held = [asyncio.create_task(client.post("/classify", json={"text": f"t{i}", "labels": labels})) for i in range(2)]
        await asyncio.sleep(0.2)
        r = await client.post("/classify", json={"text": "t3", "labels": labels})
        assert r.status_code == 503 and r.json()["error_type"] == "overloaded"
        assert r.headers["Retry-After"] == "2"
        assert (await client.get("/health")).status_code == 200  # health answers while full
        fm.gate.set()
        assert [(await t).status_code for t in held] == [200, 200]
        assert (await client.post("/classify", json={"text": "t4", "labels": labels})).status_code == 200
        assert app.state.classifier.state.batcher.admitted_pairs == 0


async def test_drain_deadline_answers_in_flight_with_503(bert_dir):
    app, holder = faulty_app(bert_dir, "none", drain_timeout_s=0.8, retry_after_s=3)
    async with running_app(app) as client:
        fm = holder["model"]
        fm.gate = threading.Event()
        try:
            held = [asyncio.create_task(client.post("/classify", json={"text": f"t{i}", "labels": LABELS}))
                    for i in range(3)]
            await asyncio.sleep(0.2)
            assert app.state.classifier.drain.inflight == 3
            t0 = time.monotonic()
            app.state.classifier.begin_drain()
            r = await client.post("/classify", json={"text": "late", "labels": LABELS})  # not admitted
            assert r.status_code == 503 and r.json()["error_type"] == "unavailable" and r.headers["Retry-After"] == "3"
            h = await client.get("/health")
            assert h.status_code == 503 and h.json()["status"] == "draining"
            rs = await asyncio.wait_for(asyncio.gather(*held), 5)
            waited = time.monotonic() - t0
            assert 0.4 < waited < 0.8, waited  # before the drain timeout, when uvicorn would cancel
            for r in rs:
                assert r.status_code == 503, r.text
                err = r.json()
                assert err["error_type"] == "unavailable" and "drain deadline" in err["error"] and err["field"] is None
                assert r.headers["Retry-After"] == "3"
            assert app.state.classifier.drain.cut_off == 3 and app.state.classifier.drain.inflight == 0
            assert app.state.classifier.state.batcher.pending_pairs == 0
        finally:
            fm.gate.set()


# --------------------------------------------------------------------- real processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(model_dir, port, **env_extra):
    env = {**os.environ, "ZSNLI_MODEL_DIR": str(model_dir), "HOST": "127.0.0.1", "PORT": str(port),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "ZSNLI_LOG_LEVEL": "info",
           **env_extra}
    return subprocess.Popen([sys.executable, "server.py"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_ready(proc, port: int, limit_s: float = 120) -> str:
    """Poll /health of a spawned server until 200 (fails if the process exits first); returns its URL."""
    import httpx

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    return url


def test_sigterm_drains_in_flight_and_exits_0(bert_dir):
    import httpx

    port = _free_port()
    # a long batch wait keeps a request in flight long enough to SIGTERM it
    proc = _server(bert_dir, port, ZSNLI_MAX_BATCH_WAIT_MS="1500", ZSNLI_DRAIN_TIMEOUT_S="20")
    try:
        url = _wait_ready(proc, port)
        result = {}

        def call():
            result["r"] = httpx.post(f"{url}/classify", json={"id": 1, "text": "a match", "labels": LABELS}, timeout=30)

        t = threading.Thread(target=call)
        t.start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        t.join(30)
        assert result["r"].status_code == 200 and len(result["r"].json()["probabilities"]) == 3
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_past_drain_timeout_answers_503_json(bert_dir):
    import httpx

    port = _free_port()
    # a batch wait longer than the drain timeout keeps the requests queued past the deadline
    proc = _server(bert_dir, port, ZSNLI_MAX_BATCH_WAIT_MS="8000", ZSNLI_DRAIN_TIMEOUT_S="1.5")
    try:
        url = _wait_ready(proc, port)
        results: dict[int, httpx.Response] = {}

        def call(i):
            results[i] = httpx.post(f"{url}/classify", json={"id": i, "text": "a match", "labels": LABELS}, timeout=30)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.7)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(30)
        assert time.monotonic() - t0 < 10
        for i in range(3):
            r = results[i]
            assert r.status_code == 503, r.text
            assert r.headers["content-type"].startswith("application/json") and "Retry-After" in r.headers
            assert r.json()["error_type"] == "unavailable"
        assert proc.wait(30) == 0
        out = proc.stdout.read()
        assert "3 request(s) cut off at the drain deadline" in out, out
        assert "Traceback" not in out, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_manifest_mismatch_exits_nonzero_with_one_line_reason(tmp_path, bert_dir):
    model_dir = tmp_path / "model"
    shutil.copytree(bert_dir, model_dir)
    files = hash_model_dir(model_dir)
    files["model.safetensors"]["sha256"] = "0" * 64
    (tmp_path / "training_manifest.json").write_text(json.dumps({"files": files}))
    proc = _server(model_dir, _free_port())
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode not in (0, None)
    lines = [line for line in out.splitlines() if "refusing to start" in line]
    assert lines and "model.safetensors (mismatch)" in lines[0], out


def test_explicit_missing_manifest_exits_with_one_line_no_traceback(tmp_path, bert_dir):
    proc = _server(bert_dir, _free_port(), ZSNLI_MANIFEST_PATH=str(tmp_path / "missing.json"))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode not in (0, None), out
    lines = [line for line in out.splitlines() if "refusing to start" in line]
    assert lines and "ZSNLI_MANIFEST_PATH=" in lines[0] and "does not exist" in lines[0], out
    assert "Traceback" not in out, out
    assert proc.returncode == 3 and "Application startup failed" not in out, out  # the refusal line alone


@pytest.mark.parametrize("env", [
    {"ZSNLI_BACKEND": "onnx"},
    {"ZSNLI_TOKEN_BUDGET": "abc"},
    {"ZSNLI_TOKEN_BUDGET": "-5"},
    {"ZSNLI_BACKEND": "onnx-int8", "ZSNLI_DEVICE": "cuda"},
])
def test_bad_setting_is_a_one_line_refusal_exit_3(bert_dir, env):
    proc = _server(bert_dir, _free_port(), **env)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out
    assert "Traceback" not in out, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("refusing to start: ZSNLI_"), out


def test_unwritable_onnx_cache_refused_before_listening(tmp_path, bert_dir):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    proc = _server(bert_dir, _free_port(), ZSNLI_BACKEND="onnx-int8", ZSNLI_ONNX_CACHE_DIR=str(blocker / "cache"))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out
    assert "Uvicorn running" not in out and "Traceback" not in out, out
    lines = [line for line in out.splitlines() if "refusing to start" in line]
    assert lines and "ZSNLI_ONNX_CACHE_DIR" in lines[0], out


def test_corrupt_weights_exit_nonzero(tmp_path, bert_dir):
    model_dir = tmp_path / "model"
    shutil.copytree(bert_dir, model_dir)
    (model_dir / "model.safetensors").write_bytes(b"not a safetensors file")
    proc = _server(model_dir, _free_port())
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert any("refusing to serve: model load failed" in line for line in out.splitlines()), out


@pytest.mark.parametrize("damage", ["tokenizer", "weights-missing"])
async def test_unreadable_files_report_error_on_health(tmp_path, bert_dir, damage):
    model_dir = tmp_path / "model"
    shutil.copytree(bert_dir, model_dir)
    if damage == "tokenizer":
        (model_dir / "tokenizer.json").write_text("{ not json")
    else:
        (model_dir / "model.safetensors").unlink()
    app = create_app(make_settings(model_dir))  # the real loader
    async with running_app(app, wait_ready=False) as client:
        for _ in range(3000):
            r = await client.get("/health")
            if r.json()["status"] != "loading":
                break
            await asyncio.sleep(0.01)
        assert r.status_code == 503 and r.json()["status"] == "error", r.json()
        assert r.json()["reason"].startswith("model load failed:") and "\n" not in r.json()["reason"]
        assert (await client.post("/classify", json={"text": "a", "labels": ["b"]})).status_code == 503


async def test_timed_out_requests_drop_their_queued_embedding_jobs(tmp_path, bert_dir):
    """Abandoned requests must not leave texts or labels to embed in the batcher (post-burst latency)."""
    from conftest import write_calibration

    from zsnli.serving.batching import BatchRecord
    from zsnli.runtime.embedding import embedding_digest
    from zsnli.serving.service import LABEL_KIND, TEXT_KIND

    calib = write_calibration(tmp_path / "calibration.json", rule="entailment", embedding_weight=2.0,
                              embedding_sha256=embedding_digest(bert_dir))
    app, holder = faulty_app(bert_dir, "none", request_timeout_s=0.3, calibration_path=str(calib),
                             embedding_dir=str(bert_dir))
    records: list[BatchRecord] = []
    async with running_app(app) as client:
        service, fm = app.state.classifier, holder["model"]
        batcher = service.state.batcher
        assert set(batcher.kinds) == {"nli", TEXT_KIND, LABEL_KIND}
        service.batch_observers.append(records.append)
        fm.gate = threading.Event()
        blocker = asyncio.create_task(client.post("/classify", json={"text": "one", "labels": ["a", "b"]}))
        await asyncio.sleep(0.05)  # the blocker's pairs are in the (gated) forward
        rs = await asyncio.gather(*[client.post("/classify", json={"text": f"wait {i}", "labels": LABELS})
                                    for i in range(6)])
        assert [r.json()["error_type"] for r in rs] == ["timeout"] * 6
        # nothing of the 6 timed-out requests is left queued: neither pairs nor texts and labels to embed; what
        # is queued is the blocker's text and 2 labels (its pairs are in the forward: its work has started)
        assert batcher.pending_pairs == 0
        assert (batcher.pending_items(TEXT_KIND), batcher.pending_items(LABEL_KIND)) == (1, 2)
        fm.gate.set()
        # the blocker's pairs were in the forward before its timeout: its work is finished, not thrown away
        assert (await blocker).status_code == 200
        after = await client.post("/classify", json={"text": "after the burst", "labels": ["x", "y"]})
        assert after.status_code == 200
    embedded = {kind: sum(r.pairs for r in records if r.kind == kind) for kind in (TEXT_KIND, LABEL_KIND)}
    # only the blocker's and the last request's were ever computed (1 text and 2 labels each)
    assert embedded == {TEXT_KIND: 2, LABEL_KIND: 4}, records


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["-h"], 0), (["--port", "9"], 2)])
def test_serve_sh_arguments_help_or_one_line_refusal(argv, code):
    # serve.sh used to ignore its arguments and start listening on 0.0.0.0:8000 for `--help`.
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PORT": str(_free_port()), "HOST": "127.0.0.1", "PYTHON": sys.executable}
    proc = subprocess.run([os.path.join(repo, "serve.sh"), *argv], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Uvicorn running" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    if code == 0:
        assert proc.stdout.startswith("usage: ./serve.sh") and "ZSNLI_MODEL_DIR" in proc.stdout
    else:
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "'--port'" in lines[0] and "PORT" in lines[0], proc.stderr
        # it said "server.py: error: ... (see server.py --help)": the command typed is named
        assert lines[0].startswith("serve.sh: error: ") or "/serve.sh: error: " in lines[0], lines[0]
        assert "server.py" not in lines[0], lines[0]


def test_serve_main_in_process_ignores_the_callers_argv(monkeypatch, capsys):
    # main() called from Python (tests, embedding apps) must not read pytest's own sys.argv as server arguments
    from zsnli.serve import main

    monkeypatch.setattr(sys, "argv", ["pytest", "-q", "-x"])
    monkeypatch.setenv("PORT", "notaport")
    assert main() == 3 and "PORT" in capsys.readouterr().err
    with pytest.raises(SystemExit) as helped:  # argparse's --help: print, exit 0
        main(["--help"])
    assert helped.value.code == 0 and capsys.readouterr().out.startswith("usage: ./serve.sh")


@pytest.mark.parametrize("env, names", [
    ({"ZSNLI_LOG_LEVEL": "verbose"}, "ZSNLI_LOG_LEVEL"),
    ({"HOST": "localhost:8000"}, "HOST"),
    ({"HOST": "[localhost]"}, "HOST"),
    ({"ZSNLI_PUBLIC_URL": "evil.example"}, "ZSNLI_PUBLIC_URL"),
])
def test_settings_refused_before_listening_name_the_variable(bert_dir, env, names):
    proc = _server(bert_dir, _free_port(), **env)
    out, _ = proc.communicate(timeout=120)
    lines = [line for line in out.splitlines() if line.strip()]
    assert proc.returncode == 3 and len(lines) == 1, out
    assert lines[0].startswith(f"refusing to start: {names}") and "Traceback" not in out, out


def test_port_in_use_is_refused_in_one_line_naming_port(bert_dir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _server(bert_dir, port)
        out, _ = proc.communicate(timeout=120)
    lines = [line for line in out.splitlines() if line.strip()]
    assert proc.returncode == 3 and len(lines) == 1, out
    assert lines[0].startswith(f"refusing to start: PORT {port} is already in use"), out


@pytest.mark.parametrize("device", ["gpu", "cuda"])
def test_device_torch_cannot_use_is_refused_before_listening(bert_dir, device):
    import torch

    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    port = _free_port()
    t0 = time.monotonic()
    proc = _server(bert_dir, port, ZSNLI_DEVICE=device)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out
    lines = [line for line in out.splitlines() if "refusing to start" in line]
    assert len(lines) == 1 and f"ZSNLI_DEVICE" in lines[0], out
    assert "Uvicorn running" not in out and "Traceback" not in out and "Loading weights" not in out, out
    assert time.monotonic() - t0 < 60


def test_bracketed_ipv6_host_serves(bert_dir):
    import httpx

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("the IPv6 loopback is not configured here")
    port = _free_port()
    proc = _server(bert_dir, port, HOST="[::1]")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(f"http://[::1]:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail("no answer on [::1]")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0
