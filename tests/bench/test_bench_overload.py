"""zsnli.bench.overload (python -m zsnli.bench.overload): argument checks and the verdict line.
"""

from __future__ import annotations

import pytest

from bench_support import refused


def _overload():
    from zsnli.bench import overload

    return overload


@pytest.mark.parametrize("argv, option", [
    (["--text-chars", "0"], "--text-chars"), (["--text-chars=-5"], "--text-chars"),
    (["--requests", "0"], "--requests"), (["--requests", "100001"], "--requests"),
    (["--concurrency", "0"], "--concurrency"), (["--labels", "0"], "--labels"), (["--labels", "x"], "--labels"),
    (["--url", "http://example.com:8000"], "--url"), (["--spawn-model-dir", "/no/such/dir"], "--spawn-model-dir"),
])
def test_overload_refuses_bad_arguments(capsys, argv, option):
    line = refused(capsys, lambda: _overload().parse_args(argv))
    assert option in line


def test_overload_accepts_ones():
    args = _overload().parse_args(["--text-chars", "1", "--requests", "1", "--concurrency", "1", "--labels", "1"])
    assert (args.text_chars, args.requests, args.concurrency, args.labels) == (1, 1, 1, 1)
    assert _overload().parse_args([]).text_chars is None


@pytest.mark.parametrize("report, passed, needle", [
    ({"requests": 10, "status_200": 6, "status_503": 4, "statuses": {"200": 6, "503": 4}}, True, "PASS"),
    ({"requests": 10, "status_200": 6, "status_503": 2, "statuses": {"200": 6, "503": 2, "500": 2}}, False,
     "2 of 10 requests not answered 200/503 (other: {'500': 2}"),
    ({"requests": 10, "status_200": 6, "status_503": 4, "503_without_retry_after": 3}, False,
     "3 503 answers without Retry-After"),
    ({"requests": 10, "status_200": 7, "status_503": 0, "unfinished": 3, "statuses": {"200": 7}}, False,
     "unfinished: 3"),
])
def test_overload_verdict_says_why(report, passed, needle):
    ok, line = _overload().verdict(report)
    assert ok is passed and line.startswith("verdict: " + ("PASS" if passed else "FAIL")) and needle in line


def test_overload_main_prints_a_verdict_when_nothing_listens(capsys):
    from zsnli.harness.server import free_port

    code = _overload().main(["--url", f"http://127.0.0.1:{free_port()}", "--requests", "1", "--ready-timeout", "60"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 1 and out[-1].startswith("verdict: FAIL: no server:") and "connection refused" in out[-1]
    # the hint names this command's own way to start a server, not validate.py's "(no --url)"
    assert "--spawn-model-dir" in out[-1] and "no --url" not in out[-1]
