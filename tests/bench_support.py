"""Shared pieces of the bench tests: a small examples file, a child environment, usage-error capture, a fake
started server."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from zsnli.harness.examples import parse_examples, write_examples

REPO = Path(__file__).resolve().parents[1]

_DOCS = [
    {"id": "d0", "dataset": "t", "text": "the team won the football match and the player scored a goal .",
     "labels": ["This text is about sport.", "This text is about business."], "label": 0},
    {"id": "d1", "dataset": "t", "text": "the bank said the stock market price and company profit were good .",
     "labels": ["This text is about sport.", "This text is about business.", "about science"], "label": 1},
    {"id": "d2", "dataset": "t", "text": "research on space and computer software data .",
     "labels": ["about science", "about politics", "about music", "about food"], "label": 0},
    {"id": "d3", "dataset": "t", "text": "", "labels": ["about weather", "about the city"], "label": 0},
]


@pytest.fixture()
def examples_file(tmp_path) -> Path:
    return write_examples(tmp_path / "ex.jsonl", parse_examples([json.dumps(d) for d in _DOCS]))


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "PYTHON": sys.executable})
    return env


def refused(capsys, call) -> str:
    """Run ``call``; it must be an argparse error (exit 2). Returns the error line."""
    with pytest.raises(SystemExit) as info:
        call()
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "error:" in x]
    assert len(lines) == 1, err
    return lines[0]


class FakeServer:
    """Stands in for the server `zsnli.harness.server.start_server` starts: no process, health ok, stops with code 0.
    ``settings`` are the environment the arm would have started it with (kept for assertions)."""

    launcher, url, startup_s = "fake", "http://fake", 0.1

    def __init__(self, settings: dict[str, str] | None = None):
        self.settings, self.pid, self.health = settings or {}, os.getpid(), {"status": "ok"}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def stop(self) -> int:
        return 0
