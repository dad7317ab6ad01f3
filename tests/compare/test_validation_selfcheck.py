"""The self-check's gates against small fake servers (FastAPI + uvicorn in a child process).

The fake server (written to a temporary file) speaks the HTTP contract and
misbehaves on request: FAKE_MODE=good | uniform | wrong_length | crash |
sick_after (health turns 503 once documents have been classified).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from zsnli.manifest import hash_model_dir
from zsnli.compare.cli import main
from zsnli.harness.examples import ExamplesError, load_examples, resample, rotate_words
from zsnli.harness.server import ServerProcess, free_port

FAKE_SERVER = textwrap.dedent(
    '''
    import hashlib, math, os, sys
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    MODE = os.environ.get("FAKE_MODE", "good")
    if MODE == "crash":
        print("fake server: crashing on purpose", flush=True)
        sys.exit(3)
    app = FastAPI()
    state = {"served": 0}

    def score(text, label):
        words = set(text.lower().replace(".", " ").split())
        overlap = sum(w in words for w in label.lower().replace(".", " ").split() if len(w) > 3)
        noise = int(hashlib.sha256((text + "|" + label).encode()).hexdigest()[:8], 16) / 2**32
        return 2.0 * overlap + noise

    @app.get("/health")
    def health():
        if MODE == "sick_after" and state["served"] > 0:
            return JSONResponse({"status": "error", "reason": "fake"}, status_code=503)
        return {"status": "ok", "model": "fake-" + MODE, "model_sha256": "f" * 64,
                "model_dir": os.environ.get("ZSNLI_MODEL_DIR"), "device": "cpu", "dtype": "float32"}

    @app.post("/classify")
    async def classify(request: Request):
        body = await request.json()
        state["served"] += 1
        labels = body["labels"]
        k = len(labels)
        if MODE == "uniform":
            probs = [1.0 / k] * k
        else:
            s = [score(body["text"], l) for l in labels]
            m = max(s)
            e = [math.exp(x - m) for x in s]
            probs = [x / sum(e) for x in e]
        if MODE == "wrong_length":
            probs = probs + [0.0]
        return {"id": body["id"], "probabilities": probs}

    if __name__ == "__main__":
        uvicorn.run(app, host=os.environ["ZSNLI_HOST"], port=int(os.environ["ZSNLI_PORT"]), log_level="warning")
    '''
)

TOPICS = ["This text is about sport.", "This text is about money.", "This text is about cooking."]
MOODS = ["The writer is happy.", "The writer is angry."]


def write_examples(path: Path) -> Path:
    rows = []
    topic_texts = [
        ("The sport final went to extra time and the crowd roared", 0),
        ("Our team trained all week for the sport festival", 0),
        ("Money markets fell as rates climbed again", 1),
        ("She saved money every month for a new bike", 1),
        ("The cooking class taught us to fold dumplings", 2),
        ("Slow cooking makes the stew tender", 2),
        ("The match ended in a draw after a late goal", 0),
        ("Bank fees went up for the third time this year", 1),
        ("Add salt and stir the sauce until thick", 2),
        ("The runner broke the sport record on a wet track", 0),
        ("Money was tight so they sold the car", 1),
        ("Nothing about anything in particular happened", 2),
    ]
    for i, (text, gold) in enumerate(topic_texts):
        rows.append({"id": f"topic-{i}", "dataset": "topic", "text": text, "labels": TOPICS, "label": gold})
    mood_texts = [
        ("I am so happy with the gift", 0), ("This makes me angry every time", 1), ("A happy day at the beach", 0),
        ("Angry drivers honked for ages", 1), ("What a lovely surprise", 0), ("I cannot stand this delay", 1),
        ("Feeling happy and rested", 0), ("So angry about the refund", 1), ("Fine weather", 0), ("Late again", 1),
    ]
    for i, (text, gold) in enumerate(mood_texts):
        rows.append({"id": i + 100, "dataset": "mood", "text": text, "labels": MOODS, "label": gold})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def fake_script(tmp_path: Path) -> Path:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER, encoding="utf-8")
    return script


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A project root with a (fake) model directory, a matching manifest and the two JSON files."""
    root = tmp_path / "project"
    model = root / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"id2label": {"0": "entailment", "1": "neutral", "2": "contradiction"}}')
    (model / "model.safetensors").write_bytes(b"not really weights")
    (root / "training_manifest.json").write_text(json.dumps({"files": hash_model_dir(model)}))
    (root / "data_sources.json").write_text("[]")
    (root / "calibration.json").write_text('{"chosen": {"rule": "entailment", "temperature": 1.0}}')
    write_examples(root / "examples.jsonl")
    return root


def serve_cmd(script: Path) -> str:
    return f"{sys.executable} {script}"


def run_selfcheck(project: Path, script: Path, mode: str, monkeypatch, *extra: str) -> tuple[int, dict]:
    monkeypatch.setenv("FAKE_MODE", mode)
    report = project / f"report-{mode}.json"
    code = main(["--root", str(project), "--examples", str(project / "examples.jsonl"), "--serve-cmd",
                 serve_cmd(script), "--concurrency", "4", "--warmups", "2", "--startup-timeout", "60",
                 "--no-progress", "--report", str(report), *extra])
    return code, json.loads(report.read_text())


def port_closed(url: str) -> bool:
    host, port = url.rsplit("//", 1)[1].split(":")
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) != 0


def test_all_gates_pass_and_server_is_stopped(project, fake_script, monkeypatch, capsys):
    code, report = run_selfcheck(project, fake_script, "good", monkeypatch)
    out = capsys.readouterr().out
    assert code == 0, out
    assert [g["verdict"] for g in report["gates"]] == ["PASS"] * 6
    assert "ALL GATES PASS" in out and "headline" in out
    assert report["throughput"]["answered"] == 22
    metrics = report["metrics"]
    assert set(metrics["per_dataset"]) == {"topic", "mood"}
    assert metrics["per_dataset"]["topic"]["n"] == 12
    assert 0 <= metrics["headline_mean_normalised"] <= 100
    url = report["gates"][1]["figure"].rsplit(" at ", 1)[1]
    assert port_closed(url), "the server the harness started must be stopped"


def test_wrong_number_of_probabilities_fails_and_exit_code_is_nonzero(project, fake_script, monkeypatch, capsys):
    code, report = run_selfcheck(project, fake_script, "wrong_length", monkeypatch)
    verdicts = {g["number"]: g["verdict"] for g in report["gates"]}
    assert code == 1
    assert verdicts[3] == "FAIL" and verdicts[5] == "FAIL"
    assert "4 probabilities for 3 labels" in report["gates"][2]["figure"]
    assert "FAILED" in capsys.readouterr().out


def test_uniform_server_scores_the_floor_exactly(project, fake_script, monkeypatch):
    code, report = run_selfcheck(project, fake_script, "uniform", monkeypatch)
    assert code == 0
    for card in report["metrics"]["per_dataset"].values():
        assert card["calibrated_macro_f1"] == pytest.approx(card["floor"])
        assert card["normalised"] == 0.0


def test_startup_failure_fails_gate_2_and_skips_the_rest(project, fake_script, monkeypatch):
    code, report = run_selfcheck(project, fake_script, "crash", monkeypatch)
    verdicts = [g["verdict"] for g in report["gates"]]
    assert code == 1
    assert verdicts == ["PASS", "FAIL", "SKIP", "SKIP", "SKIP", "SKIP"]
    assert "exited with code 3" in report["gates"][1]["figure"]
    assert any("crashing on purpose" in line for line in report["gates"][1]["details"])


def test_health_after_gate_fails_when_server_turns_sick(project, fake_script, monkeypatch):
    code, report = run_selfcheck(project, fake_script, "sick_after", monkeypatch)
    assert code == 1
    assert report["gates"][5]["verdict"] == "FAIL" and "503" in report["gates"][5]["figure"]


def test_prerequisites_catch_a_changed_model_file(project, fake_script, monkeypatch):
    (project / "model" / "model.safetensors").write_bytes(b"tampered")
    (project / "model" / "extra.bin").write_bytes(b"x")
    code, report = run_selfcheck(project, fake_script, "good", monkeypatch, "--docs", "5")
    gate1 = report["gates"][0]
    assert code == 1 and gate1["verdict"] == "FAIL"
    assert "model.safetensors: mismatch" in gate1["details"]
    assert "extra.bin: unlisted" in gate1["details"]
    (project / "calibration.json").unlink()
    code, report = run_selfcheck(project, fake_script, "good", monkeypatch, "--docs", "5")
    assert "missing: calibration.json" in report["gates"][0]["figure"]


def test_url_mode_with_docs_resampling(project, fake_script, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "good")
    with ServerProcess(serve_cmd(fake_script)) as server:
        server.wait_healthy(60)
        report_path = project / "url.json"
        code = main(["--root", str(project), "--url", server.url, "--examples", str(project / "examples.jsonl"),
                     "--docs", "50", "--concurrency", "8", "--warmups", "4", "--no-progress", "--report",
                     str(report_path)])
        report = json.loads(report_path.read_text())
        assert code == 0
        assert report["throughput"]["docs"] == 50
        assert report["health"]["model"] == "fake-good"
        assert any("NOT the model/" in line for line in report["gates"][1]["details"])
        assert sum(c["n"] for c in report["metrics"]["per_dataset"].values()) == 22  # unrotated docs only
    assert port_closed(server.url)


def test_time_limit_fails_throughput_gate(project, fake_script, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "good")
    with ServerProcess(serve_cmd(fake_script)) as server:
        server.wait_healthy(60)
        report_path = project / "slow.json"
        code = main(["--root", str(project), "--url", server.url, "--examples", str(project / "examples.jsonl"),
                     "--docs", "3000", "--concurrency", "2", "--warmups", "0", "--max-seconds", "0.3",
                     "--no-progress", "--report", str(report_path)])
        report = json.loads(report_path.read_text())
    assert code == 1
    gate4 = report["gates"][3]
    assert gate4["verdict"] == "FAIL" and "not answered within the time limit" in gate4["details"][0]


def test_bad_examples_exit_2(project, capsys):
    bad = project / "bad.jsonl"
    bad.write_text('{"id": 1, "dataset": "d", "text": "t", "labels": ["a"], "label": 1}\n')
    assert main(["--root", str(project), "--examples", str(bad), "--url", "http://127.0.0.1:9"]) == 2
    refused = capsys.readouterr()  # one line on stderr (it was "examples: ..." on stdout), stdout left to results
    assert refused.err.startswith("validate.py: error: ") and refused.err.count("\n") == 1
    assert "bad.jsonl:1" in refused.err and "bad.jsonl" not in refused.out
    with pytest.raises(ExamplesError, match="missing.jsonl: no such file"):
        load_examples(project / "missing.jsonl")


def test_resample_rotates_reused_documents_by_whole_words(project):
    examples = load_examples(project / "examples.jsonl").examples
    docs = resample(examples, 50, seed=1)
    assert len(docs) == 50
    assert [d.id for d in docs[:22]] == [e.id for e in examples]
    reused = docs[22:]
    assert all(d.reuse >= 1 and str(d.id).endswith(f"#{d.reuse}") for d in reused)
    originals = {e.id: e for e in examples}
    for d in reused:
        base = originals[int(d.id.split("#")[0]) if d.dataset == "mood" else d.id.split("#")[0]]
        assert sorted(d.text.split()) == sorted(base.text.split())
        if len(base.text.split()) > 1 and d.reuse % len(base.text.split()):
            assert d.text != base.text
    assert rotate_words("a b c d", 1) == "b c d a"
    assert rotate_words("one", 3) == "one"
    assert resample(examples, 5) == examples[:5]


def test_sigterm_stops_the_server_it_started(project, tmp_path):
    """validate.py killed while waiting for /health still stops the server it started (the whole group)."""
    import signal
    import time

    pid_file = tmp_path / "server.pid"
    never_healthy = f"bash -c 'echo $$ > {pid_file}; exec sleep 600'"
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve().parents[2] / "validate.py"), "--root", str(project),
         "--examples", str(project / "examples.jsonl"), "--serve-cmd", never_healthy, "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "server command never started"
        time.sleep(0.1)
    server_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out  # 128 + SIGTERM
    for _ in range(50):
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"server process {server_pid} still alive after validate.py was terminated")


def test_validate_py_imports_the_checkout_without_install(tmp_path):
    """validate.py puts its checkout's src/ first on the import path (no `pip install -e .` needed)."""
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = ("import runpy, sys; runpy.run_path(sys.argv[1], run_name='probe'); import zsnli.compare; "
             "print(zsnli.compare.__file__)")
    proc = subprocess.run([sys.executable, "-c", probe, str(repo / "validate.py")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).resolve().is_relative_to(repo / "src")
    proc = subprocess.run([sys.executable, str(repo / "validate.py"), "--docs", "0"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "validate.py: error: argument --docs: expected an integer >= 1, got 0 (see validate.py --help)"]


@pytest.mark.parametrize("args, needle", [
    (["--url", "127.0.0.1:8000"], "--url: '127.0.0.1:8000' lacks a scheme: write http://127.0.0.1:8000"),
    (["--examples", "{tmp}/missing.jsonl"], "/missing.jsonl: no such file"),
    (["--root", "{tmp}/nowhere"], "/nowhere: no such directory"),
    (["--max-seconds", "-1"], "--max-seconds: expected a number in [0, 604800], got -1"),
    (["--warmups", "x"], "--warmups: expected an integer >= 0"),
    (["--serve-cmd", ""], "--serve-cmd: '' is empty: give the command that starts a server"),  # was IndexError
    (["--serve-cmd", " \t "], "--serve-cmd: ' \\t ' is empty"),
    (["--serve-cmd", "bash 'serve.sh"], "--serve-cmd: \"bash 'serve.sh\" is not a command line (No closing "
                                        "quotation)"),  # was a shlex ValueError traceback
])
def test_selfcheck_usage_mistakes_are_one_line_exit_2(project, tmp_path, capsys, args, needle):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    with pytest.raises(SystemExit) as info:
        main(["--root", str(project), "--examples", str(project / "examples.jsonl"), *args])
    assert info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("validate.py: error:"), captured.err
    assert captured.out == ""


def test_selfcheck_url_with_nothing_listening_fails_at_once(project, capsys):
    import time

    t0 = time.monotonic()
    code = main(["--root", str(project), "--examples", str(project / "examples.jsonl"), "--url",
                 f"http://127.0.0.1:{free_port()}", "--startup-timeout", "120", "--no-progress"])
    assert code == 1 and time.monotonic() - t0 < 30
    out = capsys.readouterr().out
    assert "connection refused" in out and "[red]" not in out and "\x1b[" not in out
