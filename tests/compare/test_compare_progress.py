"""``validate.py compare --no-progress`` prints no progress line: the arms' rows done included
(`zsnli.compare.bakeoff_runner.run_arms`'s ``progress``, `zsnli.compare.suite_bakeoff.BakeoffOptions.progress`)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def no_arm_runs(monkeypatch):
    """Every arm 'runs' in no time (its rows counted, an error as its result); the progress lines are collected."""
    from zsnli.compare import bakeoff_runner
    from zsnli.runtime import progress

    lines: list[str] = []
    monkeypatch.setattr(progress, "emit", lines.append)

    def run_arm(entry, examples, plan, warmups=None, counter=None):
        with counter.get_lock():
            counter.value += len(plan.test_rows)
        return bakeoff_runner.blank_result(entry, "not run (test)")

    monkeypatch.setattr(bakeoff_runner, "run_arm", run_arm)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # validate.py sets them
        monkeypatch.setenv(var, "1")
    return lines


def _examples(tmp_path):
    path = tmp_path / "examples.jsonl"
    rows = [{"id": k, "dataset": "d", "text": f"text {k}", "labels": ["a", "b"], "label": k % 2} for k in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("flags, shown", [([], True), (["--no-progress"], False)])
def test_compare_says_the_rows_done_unless_no_progress(tmp_path, no_arm_runs, capsys, flags, shown):
    """`validate.py compare --no-progress` still printed ``arm model: 0/44 rows...`` on stderr."""
    from zsnli.compare.cli import main

    main(["compare", "--root", str(tmp_path), "--examples", str(_examples(tmp_path)), "--url",
          "arm=http://127.0.0.1:9", *flags])
    rows = [line for line in no_arm_runs if line.startswith("arm arm: ")]
    assert bool(rows) is shown, no_arm_runs
    if shown:
        assert rows[-1].startswith("arm arm: 4/4 rows"), rows
    assert "arm 1/1: arm" in capsys.readouterr().out  # the arm's start is said either way


def test_run_arms_without_progress_watches_nothing(no_arm_runs):
    from io import StringIO
    from types import SimpleNamespace

    from rich.console import Console

    from zsnli.compare.bakeoff_runner import run_arms
    from zsnli.compare.suite import ArmEntry

    plan = SimpleNamespace(test_rows=[0, 1, 2])
    for progress, lines in ((False, 0), (True, 1)):
        no_arm_runs.clear()
        results = run_arms([ArmEntry("x", "served", {})], [], plan, isolate=False, console=Console(file=StringIO()),
                           progress=progress)
        assert [r.error for r in results] == ["not run (test)"]
        assert len(no_arm_runs) == lines and all(line.startswith("arm x: 3/3 rows") for line in no_arm_runs)


def test_the_self_check_says_no_wait_with_no_progress(tmp_path, monkeypatch):
    """``validate.py --no-progress`` still wrote "gate 2: waiting for .../health" lines while the server started."""
    from contextlib import contextmanager

    from zsnli.compare import cli, selfcheck

    waits: list[str] = []

    @contextmanager
    def waiting(desc):
        waits.append(desc)
        yield

    class Server:
        url = "http://127.0.0.1:9"

        def __init__(self, *args, **kwargs):
            pass

        def start(self):
            pass

        def wait_healthy(self, timeout):
            return 0.1

    monkeypatch.setattr(selfcheck, "waiting", waiting)
    monkeypatch.setattr(selfcheck, "ServerProcess", Server)
    seen = []
    monkeypatch.setattr(selfcheck, "run_selfcheck", lambda opts, console: seen.append(opts) or 1 / 0)
    examples = _examples(tmp_path)
    for flags, said in (([], True), (["--no-progress"], False)):
        with pytest.raises(ZeroDivisionError):  # the options built, nothing run
            cli.main(["--root", str(tmp_path), "--examples", str(examples), *flags])
        waits.clear()
        gate, _, url = selfcheck.gate_startup(seen[-1], tmp_path)
        assert gate.passed and url == Server.url and bool(waits) is said, (flags, waits)
