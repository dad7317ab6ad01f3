"""zsnli.Client / AsyncClient and the ``zsnli`` command line (classify and serve).

The server under test is started with ``python -m zsnli.cli serve`` (what the
``zsnli`` console script runs) on a tiny model; the retry and error rules are
also checked on canned answers (httpx.MockTransport), never the network.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
from conftest import REPO, running_app

import zsnli
from zsnli.cli import main
from zsnli.client import (AsyncClient, BadRequestError, Client, ConnectionFailed, ServerError, UnavailableError,
                          ZsnliError)
from zsnli.harness.server import ServerProcess

TEXT = "the team won the match and the player scored a goal"
LABELS = ["sport", "business", "science"]
PIPELINE_TEMPLATE = "This example is {}."


@pytest.fixture(scope="module")
def server(bert_dir):
    """``python -m zsnli.cli serve`` (the console script's code) on the tiny BERT model."""
    proc = ServerProcess([sys.executable, "-m", "zsnli.cli", "serve"], cwd=REPO, model_dir=bert_dir, threads=1,
                         env={"ZSNLI_LOG_LEVEL": "info", "ZSNLI_DRAIN_TIMEOUT_S": "5"}, grace_s=60.0)
    proc.start()
    try:
        proc.wait_healthy(120)
        yield proc
    finally:
        code = proc.stop()
    assert code == 0, proc.log_path.read_text()[-3000:]  # a drained SIGTERM: exit 0, as serve.sh


def test_client_classify_and_zero_shot(server):
    with Client(server.url) as zs:
        assert zs.health()["status"] == "ok"
        result = zs.classify(TEXT, LABELS, hypothesis_template="About {}.", id="d1")
        assert result.id == "d1" and result.labels == LABELS and abs(sum(result.probabilities) - 1) < 1e-6
        assert result.top == result.ranked()[0][0]
        pipe = zs.zero_shot_classification(TEXT, "sport, business, science", hypothesis_template="About {}.")
        assert dict(zip(pipe["labels"], pipe["scores"])) == dict(zip(LABELS, result.probabilities))
        many = zs.classify_many([{"text": TEXT, "labels": LABELS, "hypothesis_template": "About {}."},
                                 {"text": TEXT, "labels": []}])
        assert many[0].probabilities == pytest.approx(result.probabilities, abs=1e-6)
        assert isinstance(many[1], BadRequestError) and many[1].field == "labels" and many[1].status == 422
        with pytest.raises(BadRequestError) as info:
            zs.classify(TEXT, ["sport", " "])
        assert info.value.error_type == "validation" and info.value.field == "labels[1]"
    with Client("http://127.0.0.1:9", timeout=2, retries=0) as nowhere, pytest.raises(ConnectionFailed):
        nowhere.health()


@pytest.mark.anyio
async def test_async_client_matches_the_blocking_one(bert_dir, make_app):
    async with running_app(make_app(bert_dir)) as http:
        async with AsyncClient("http://testserver", transport=http._transport) as zs:
            result = await zs.classify(TEXT, LABELS)
            direct = (await http.post("/classify", json={"text": TEXT, "labels": LABELS})).json()
            assert result.probabilities == direct["probabilities"]
            many = await zs.classify_many([{"text": TEXT, "candidate_labels": LABELS}] * 3)
            assert len(many) == 3 and all(m.labels == LABELS for m in many)
            with pytest.raises(BadRequestError):
                await zs.zero_shot_classification(TEXT, [])


def _canned(answers: list[tuple[int, dict | list, dict]]):
    """A MockTransport answering ``answers`` in turn (status, JSON body, headers); records the requests."""
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content or b"null"))
        status, body, headers = answers[min(len(sent) - 1, len(answers) - 1)]
        return httpx.Response(status, json=body, headers=headers)

    return httpx.MockTransport(handler), sent


OVERLOADED = {"error": "overloaded: queue full", "field": None, "error_type": "overloaded"}


def test_503_is_retried_after_retry_after_then_raised(monkeypatch):
    waits = []
    monkeypatch.setattr("zsnli.client.time.sleep", waits.append)
    transport, sent = _canned([(503, OVERLOADED, {"Retry-After": "2"}), (503, OVERLOADED, {"Retry-After": "90"}),
                               (200, {"id": None, "probabilities": [0.6, 0.4]}, {})])
    with Client(transport=transport, retries=3, max_retry_wait_s=30) as zs:
        assert zs.classify("x", ["a", "b"]).probabilities == [0.6, 0.4]
    assert waits == [2.0, 30.0] and len(sent) == 3  # Retry-After honoured, capped at max_retry_wait_s
    waits.clear()
    transport, sent = _canned([(503, OVERLOADED, {"Retry-After": "1"})])
    with Client(transport=transport, retries=2) as zs, pytest.raises(UnavailableError) as info:
        zs.classify("x", ["a", "b"])
    assert info.value.error_type == "overloaded" and info.value.status == 503 and len(sent) == 3
    assert waits == [1.0, 1.0] and isinstance(info.value, ServerError) and isinstance(info.value, ZsnliError)


def test_errors_are_typed_and_never_retried_but_503(monkeypatch):
    monkeypatch.setattr("zsnli.client.time.sleep", lambda s: None)
    cases = [(422, {"error": "labels: too short", "field": "labels", "error_type": "validation",
                    "errors": [{"field": "labels"}]}, BadRequestError),
             (413, {"error": "too large", "field": None, "error_type": "payload_too_large"}, BadRequestError),
             (500, {"error": "batch failed", "field": None, "error_type": "inference"}, ServerError)]
    for status, body, kind in cases:
        transport, sent = _canned([(status, body, {})])
        with Client(transport=transport) as zs, pytest.raises(kind) as info:
            zs.classify("x", ["a"])
        assert (info.value.status, info.value.error_type, info.value.field) == (status, body["error_type"],
                                                                                 body["field"])
        assert len(sent) == 1 and not isinstance(info.value, UnavailableError)

    def timeout(request):
        raise httpx.ReadTimeout("slow", request=request)

    with Client(transport=httpx.MockTransport(timeout), timeout=0.5) as zs, pytest.raises(ConnectionFailed,
                                                                                          match="within 0.5 s"):
        zs.health()


def test_classify_many_resends_only_the_items_answered_503(monkeypatch):
    monkeypatch.setattr("zsnli.client.time.sleep", lambda s: None)
    ok = {"id": 1, "probabilities": [1.0]}
    busy = {**OVERLOADED, "status": 503, "id": 2}
    transport, sent = _canned([(200, [ok, busy], {"Retry-After": "1"}), (200, [{"id": 2, "probabilities": [1.0]}], {})])
    docs = [{"id": 1, "text": "a", "labels": ["x"]}, {"id": 2, "text": "b", "labels": ["x"]}]
    with Client(transport=transport) as zs:
        out = zs.classify_many(docs)
    assert [o.id for o in out] == [1, 2] and [d["id"] for d in sent[1]] == [2]


def test_package_root_exports_the_clients_lazily():
    assert zsnli.Client is Client and zsnli.AsyncClient is AsyncClient
    code = "import sys, zsnli; assert 'httpx' not in sys.modules and 'zsnli.client' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(REPO / "src")})


# --------------------------------------------------------------------------- command line


def test_cli_classify_a_text_against_the_server(server, capsys):
    assert main(["classify", TEXT, "--labels", "sport, business,science", "--url", server.url, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    with Client(server.url) as zs:
        want = zs.classify(TEXT, LABELS, hypothesis_template=PIPELINE_TEMPLATE)  # --labels: candidate_labels
    assert out == {"labels": LABELS, "probabilities": want.probabilities}
    assert main(["classify", TEXT, "--labels", "sport,business", "--template", "{}", "--url", server.url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 2 and {line.split()[0] for line in table} == {"sport", "business"}


def test_cli_in_process_answers_as_the_server(server, bert_dir, capsys):
    args = ["classify", TEXT, "--labels", "sport,business,science", "--template", "About {}.", "--json"]
    assert main(args + ["--url", server.url]) == 0
    over_http = json.loads(capsys.readouterr().out)
    assert main(args + ["--model-dir", str(bert_dir)]) == 0
    in_process = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(in_process["probabilities"], over_http["probabilities"], atol=1e-6)


def test_cli_input_file_to_output_file_with_progress(server, bert_dir, tmp_path, capsys):
    lines = [{"id": i, "text": f"{TEXT} {i}"} for i in range(7)]
    lines[3] = {"id": 3, "text": "x", "labels": ["sport", ""]}  # a bad line fails alone
    lines[5] = {"id": 5, "text": "y", "labels": ["a literal hypothesis."], "multi_label": True}  # its own labels
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    outputs = {}
    for where in (["--url", server.url], ["--model-dir", str(bert_dir)]):
        out = tmp_path / f"out-{where[0][2:]}.jsonl"
        code = main(["classify", "--input", str(src), "--output", str(out), "--labels", "sport,business",
                     "--batch-size", "3", *where])
        err = capsys.readouterr().err
        assert code == 1 and "1 of 7 requests got an error" in err
        assert "classify: 7/7 docs (100%)" in err  # the progress line (stderr is not a terminal here)
        outputs[where[0]] = [json.loads(x) for x in out.read_text().splitlines()]
    http, local = outputs["--url"], outputs["--model-dir"]
    assert [a.get("id") for a in http] == list(range(7)) and http[3]["field"] == "labels[1]" and http[3]["status"] == 422
    assert local[3] == {k: v for k, v in http[3].items() if k != "request_id"} and http[3]["line"] == 4  # its line
    assert len(http[3]["request_id"]) == 32  # the server's id of the array request it was answered in
    for a, b in zip(http, local):
        if "probabilities" in a:  # the same line shape over --url and --model-dir: labels included
            assert list(a) == list(b) == ["id", "labels", "probabilities"] and a["labels"] == b["labels"]
            np.testing.assert_allclose(a["probabilities"], b["probabilities"], atol=1e-6)
    assert http[0]["labels"] == ["sport", "business"] and http[5]["labels"] == ["a literal hypothesis."]
    with Client(server.url) as zs:
        # batched with other documents: the same numbers up to float noise of the padding
        assert http[0]["probabilities"] == pytest.approx(zs.classify(
            lines[0]["text"], ["sport", "business"], hypothesis_template=PIPELINE_TEMPLATE).probabilities, abs=1e-6)
        assert http[5]["probabilities"] == pytest.approx(zs.classify(
            "y", ["a literal hypothesis."], multi_label=True).probabilities, abs=1e-6)


@pytest.mark.parametrize("argv, fragment", [
    (["classify", TEXT], "--labels is required"),
    (["classify", "--labels", "a,b"], "give a text to classify or --input"),
    (["classify", TEXT, "--labels", " , "], "--labels has no label"),
    (["classify", TEXT, "--labels", "a", "--url", "http://127.0.0.1:9", "--timeout", "2"], "cannot be reached"),
    (["classify", "--input", "/no/such.jsonl", "--labels", "a"], "cannot read --input /no/such.jsonl"),
    (["classify", "--input", "/dev/null", "--labels", "a"], "--input /dev/null holds no request"),
    (["classify", "--input", __file__, "--labels", "a", "--output", "/no/such/dir/out.jsonl"],
     "cannot write --output /no/such/dir/out.jsonl"),
    (["classify", TEXT, "--labels", "a", "--url", "u", "--model-dir", "m"], "not allowed with argument"),
    (["classify", TEXT, "--labels", "a", "--model-dir", "/no/model"], "--model-dir /no/model: not found"),
    (["classify", TEXT, "--batch-size", "0"], "expected an integer >= 1"),
    (["frobnicate"], "invalid choice"),
])
def test_cli_mistakes_are_one_line_exit_2(argv, fragment, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own mistakes
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and fragment in err and len(err.splitlines()) == 1, err


def test_cli_bad_lines_are_error_lines_and_the_rest_are_answered(server, bert_dir, tmp_path, capsys):
    """Valid JSON that is not an object, a line that is not JSON and a line that is not UTF-8 each get an
    error line (in place, with ``line`` and ``status``); the good lines around them are answered; exit 1."""
    good = json.dumps({"id": "g", "text": TEXT}).encode()
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join([good, b'"just a string"', b"42", b"[1, 2]", b"{oops", b'{"text": "caf\xe9"}', good,
                                 b"null"]) + b"\n")
    outputs = {}
    for where in (["--url", server.url], ["--model-dir", str(bert_dir)]):
        out = tmp_path / "out.jsonl"
        assert main(["classify", "--input", str(src), "--output", str(out), "--labels", "sport,business",
                     "--batch-size", "3", "--quiet", *where]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"zsnli: 6 of 8 requests got an error (see their lines in {out})"]
        outputs[where[0]] = answers = [json.loads(x) for x in out.read_text().splitlines()]
        assert len(answers) == 8 and "probabilities" in answers[0] and "probabilities" in answers[6]
        assert [a.get("status") for a in answers] == [None, 422, 422, 422, 400, 400, None, 422]
        assert "body must be a JSON object, got a string" in answers[1]["error"]  # the server's own answer
        assert answers[4]["error"].startswith("line 5: not valid JSON") and answers[4]["line"] == 5
        assert answers[5]["error"] == "line 6: not UTF-8 (byte 0xe9 at byte 14)"
        # "invalid_encoding" here, "invalid_json" from the server for the same bytes (a new-user pass): one type
        assert answers[4]["error_type"] == answers[5]["error_type"] == "invalid_json"
        # every error line names its input line, the server's 422s (not an object) too
        assert [a.get("line") for a in answers] == [None, 2, 3, 4, 5, 6, None, 8]
    over_http = [{k: v for k, v in a.items() if k != "request_id"} for a in outputs["--url"]]
    assert over_http[1:6] == outputs["--model-dir"][1:6]  # the server's items also name its array's request id
    assert [("request_id" in a) for a in outputs["--url"][1:6]] == [True, True, True, False, False]


def test_cli_blank_lines_are_skipped_and_error_lines_keep_their_input_line(tmp_path, capsys):
    """Blank lines get no output line (as JSONL readers skip them), so an error line's ``line`` is the
    place in the input: here lines 3 and 6 (the blank lines 2 and 5 counted)."""
    from zsnli.cli import answer_chunk, read_requests

    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a"}\n\n[1]\n{"text": "b"}\n   \n{"text": "c", "labels": []}\n')
    pairs = list(read_requests(str(src), {"candidate_labels": ["x", "y"]}))
    assert [n for n, _ in pairs] == [1, 3, 4, 6]

    def backend(docs):  # the server's answers: 422 for a non-object and for empty labels
        return [{"id": None, "labels": d["candidate_labels"], "probabilities": [0.5, 0.5]}
                if isinstance(d, dict) and d.get("labels", d.get("candidate_labels")) else
                {"error": "bad", "field": None, "error_type": "validation", "status": 422} for d in docs]

    out = answer_chunk(backend, pairs)
    assert [a.get("line") for a in out] == [None, 3, None, 6] and out[0]["labels"] == ["x", "y"]


def test_ctrl_c_is_one_line_saying_what_was_written(tmp_path, capsys, monkeypatch):
    """Ctrl-C during ``--input`` was a 40-line KeyboardInterrupt traceback (exit 130) with part of the answers in
    --output and nothing saying how many; now one line naming the count, exit 130, the written lines whole."""
    import zsnli.cli as cli

    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": f"doc {i}"}) + "\n" for i in range(7)))
    calls = []

    def backend_factory(url, timeout, batch_size):
        def run(docs):
            calls.append(len(docs))
            if len(calls) == 3:
                raise KeyboardInterrupt
            return [{"id": d["id"], "labels": ["a", "b"], "probabilities": [0.5, 0.5]} for d in docs]
        return run, type("C", (), {"close": lambda self: None})()

    monkeypatch.setattr(cli, "http_backend", backend_factory)
    out = tmp_path / "out.jsonl"
    code = cli.main(["classify", "--input", str(src), "--output", str(out), "--labels", "a,b", "--batch-size", "2",
                     "--quiet"])
    err = capsys.readouterr().err
    assert code == 130 and err == (f"zsnli: interrupted (Ctrl-C): 4 answer(s) written to {out}, those of the first "
                                   f"4 request(s) of {src} in order\n")
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == [0, 1, 2, 3]

    def interrupted(url, timeout, batch_size):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "http_backend", interrupted)
    assert cli.main(["classify", "a text", "--labels", "a,b"]) == 130
    assert capsys.readouterr().err == "zsnli: interrupted (Ctrl-C)\n"


def test_cli_input_encodings(server, tmp_path, capsys):
    """A UTF-8 byte-order mark is skipped (the server skips it in a body); UTF-16 (with or without its mark)
    is one line naming it and exit 2, before anything is sent."""
    line = json.dumps({"id": 1, "text": TEXT}, ensure_ascii=False) + "\n"
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + line.encode())
    (tmp_path / "u16.jsonl").write_text(line, encoding="utf-16")
    (tmp_path / "u16le.jsonl").write_text(line, encoding="utf-16-le")
    base = ["classify", "--labels", "sport,business", "--url", server.url, "--quiet", "--input"]
    assert main(base + [str(tmp_path / "bom.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == 1
    for name, fragment in (("u16.jsonl", "is UTF-16 (its byte-order mark says so)"), ("u16le.jsonl", "NUL bytes")):
        assert main(base + [str(tmp_path / name)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and fragment in captured.err


def test_cli_a_url_that_is_not_a_zsnli_server_is_one_line(tmp_path, capsys):
    import http.server
    import threading

    class Html(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("content-length", 0)))
            body = b"<html><body>It works!</body></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        src = tmp_path / "in.jsonl"
        src.write_text(json.dumps({"text": TEXT}) + "\n")
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        for argv in (["classify", TEXT, "--labels", "a,b", "--url", url],
                     ["classify", "--input", str(src), "--labels", "a,b", "--url", url, "--quiet"]):
            assert main(argv) == 2
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and "not JSON" in err and "It works!" in err, err
    finally:
        httpd.shutdown()


def test_cli_streams_its_input(server, tmp_path):
    """The first answers are written while the input is still being written (a FIFO the test holds open):
    the command reads a batch, answers it, then reads on."""
    import os
    import threading

    fifo, out = tmp_path / "in.fifo", tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    seen_early = threading.Event()

    def feed():
        with open(fifo, "w") as w:
            w.write(json.dumps({"id": 0, "text": TEXT}) + "\n")
            w.flush()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if out.exists() and out.read_text().count("\n") >= 1:
                    seen_early.set()
                    break
                time.sleep(0.05)
            w.write(json.dumps({"id": 1, "text": TEXT}) + "\n")

    writer = threading.Thread(target=feed)
    writer.start()
    code = main(["classify", "--input", str(fifo), "--output", str(out), "--labels", "sport,business",
                 "--batch-size", "1", "--url", server.url])
    writer.join()
    assert code == 0 and seen_early.is_set()
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == [0, 1]


def test_cli_server_error_answer_is_one_line(server, capsys):
    assert main(["classify", TEXT, "--labels", "a", "--template", "no slot", "--url", server.url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hypothesis_template" in err and "validation" in err


def test_zsnli_serve_is_serve_sh(tmp_path):
    run = [sys.executable, "-m", "zsnli.cli", "serve"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO / "src"), "PYTHON": sys.executable}
    helped = subprocess.run(run + ["--help"], capture_output=True, text=True, env=env, timeout=120)
    assert helped.returncode == 0 and "zsnli serve" in helped.stdout
    for cmd in (run, [str(REPO / "serve.sh")]):
        bad = subprocess.run(cmd, capture_output=True, text=True, env={**env, "ZSNLI_MAX_LABELS": "0"}, timeout=120)
        assert bad.returncode == 3 and bad.stderr.strip().count("\n") == 0, bad.stderr
        assert "refusing to start: ZSNLI_MAX_LABELS must be in [1, 4096], got 0" in bad.stderr
        extra = subprocess.run(cmd + ["--port", "1"], capture_output=True, text=True, env=env, timeout=120)
        assert extra.returncode == 2 and "unknown argument '--port'" in extra.stderr


def test_input_lines_are_split_on_newlines_only(tmp_path):
    """A text holding U+2028/U+2029/U+0085 (JSON lets them stand unescaped) stays one request;
    ``str.splitlines`` would cut it into invalid JSON lines."""
    from zsnli.cli import read_requests

    texts = ["first\u2028line", "para\u2029graph", "next\x85line"]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\r\n" for t in texts), encoding="utf-8")
    docs = list(read_requests(str(path), {"candidate_labels": ["a", "b"]}))
    assert [d["text"] for _, d in docs] == texts and [n for n, _ in docs] == [1, 2, 3]


def test_cli_reads_stdin_with_a_dash(server, monkeypatch, capsys):
    import io

    lines = b"".join(json.dumps({"id": i, "text": TEXT}).encode() + b"\n" for i in range(3))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(lines))))
    assert main(["classify", "--input", "-", "--labels", "sport,business", "--url", server.url]) == 0
    captured = capsys.readouterr()
    assert [json.loads(x)["id"] for x in captured.out.splitlines()] == [0, 1, 2]
    assert "classify: 3 docs" in captured.err  # stdin has no total: done and rate only


def test_head_over_the_real_protocol_layer_has_gets_headers_and_no_body(server):
    """HEAD through the h11 protocol layer (not only the ASGI app): GET's status and Content-Length, no body."""
    import httpx

    with httpx.Client(base_url=server.url, timeout=30) as http:
        for path in ("/health", "/", "/info"):
            got, head = http.get(path), http.head(path)
            assert head.status_code == got.status_code == 200, path
            assert head.content == b"" and int(head.headers["content-length"]) == len(got.content), path
        assert http.get("/health").status_code == 200  # the keep-alive connection is still in step


@pytest.mark.parametrize("url,words", [("127.0.0.1:8000", "lacks a scheme: write http://127.0.0.1:8000"),
                                       ("localhost:8000/", "lacks a scheme: write http://localhost:8000/"),
                                       ("ftp://127.0.0.1:8000", "is not an http:// or https:// URL")])
def test_cli_a_url_without_its_scheme_is_named_in_one_line(url, words, capsys, monkeypatch):
    """Issue 40 C: ``--url 127.0.0.1:8000`` said the server could not be reached (start one) while it ran."""
    monkeypatch.delenv("ZSNLI_URL", raising=False)
    assert main(["classify", TEXT, "--labels", "sport,business", "--url", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == f"zsnli: error: --url: {url!r} {words}", err
    assert "zsnli serve" not in err[0]
    monkeypatch.setenv("ZSNLI_URL", url)  # the same from the environment, named as such
    assert main(["classify", TEXT, "--labels", "sport,business"]) == 2
    assert capsys.readouterr().err.strip() == f"zsnli: error: ZSNLI_URL: {url!r} {words}"
