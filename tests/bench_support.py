"""Shared pieces of the bench tests: every bench command and its parser, a small examples file, an NLI model's
config, the flags that name a model folder, a child environment, usage-error capture, a fake started server."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import pkgutil
import sys
from pathlib import Path

import pytest

import zsnli.bench
from zsnli.harness.examples import parse_examples, write_examples

REPO = Path(__file__).resolve().parents[1]
SMOKE = str(REPO / "dev" / "smoke.jsonl")
#: every flag of a bench command that names a model folder (tests/bench/test_bench_args.py holds the list whole),
#: the other flags the command needs to get that far, and whether the folder must be an NLI cross-encoder's (the
#: model served or scored) or any model's
MODEL_DIR_COMMANDS = [
    ("zsnli.bench.side_by_side_cli", "--model-dir", ["--examples", SMOKE, "--calibration", "none"], True),
    ("zsnli.bench.side_by_side_cli", "--embedding-dir",
     ["--model-dir", str(REPO / "model"), "--examples", SMOKE, "--calibration", "none"], False),
    ("zsnli.bench.throughput_gate", "--model-dir", ["--dry-run"], True),
    ("zsnli.bench.speed_rounds", "--model-dir", ["--examples", SMOKE], True),
    ("zsnli.bench.pipeline_arm", "--model-dir", ["--examples", SMOKE, "--out", "{tmp}/o.json"], True),
    ("zsnli.bench.accelerator_padding", "--model-dir", [], True),
    ("zsnli.bench.bakeoff_costs", "--model-dir", [], True),
    ("zsnli.bench.bakeoff_priority", "--model-dir", [], True),
    ("zsnli.bench.batch_invariance", "--model-dir", ["--examples", SMOKE], True),
    ("zsnli.bench.cost_profile", "--model-dir", [], True),
    ("zsnli.bench.doc_figures", "--model-dir", ["--root", str(REPO)], True),
    ("zsnli.bench.fair_share", "--model-dir", [], True),
    ("zsnli.bench.read_routes", "--model-dir", [], True),
    ("zsnli.bench.idle_clients", "--model-dir", [], True),
    ("zsnli.bench.overload", "--spawn-model-dir", [], True),
    ("zsnli.bench.training_speed", "--model-dir", ["--nli-file", SMOKE], False),
]
PARSER_FUNCTIONS = ("build_parser", "_parser")
"""The names under which a bench module returns its command line's parser."""


def bench_commands() -> dict[str, object]:
    """``{name: module}`` of every `zsnli.bench` module with a ``main`` or an ``add_argument`` call (a command;
    ``python -m zsnli.bench`` itself is `zsnli.bench.side_by_side_cli`)."""
    found = {}
    for info in pkgutil.iter_modules(zsnli.bench.__path__):
        if info.name == "__main__":  # runs side_by_side_cli.main on import
            continue
        module = importlib.import_module(f"zsnli.bench.{info.name}")
        if callable(getattr(module, "main", None)) or "add_argument(" in inspect.getsource(module):
            found[info.name] = module
    return found


def bench_parsers() -> dict[str, argparse.ArgumentParser | None]:
    """``{name: parser}`` of every command of `bench_commands`, built by one of `PARSER_FUNCTIONS` without parsing
    anything (None where none builds one)."""
    out = {}
    for name, module in sorted(bench_commands().items()):
        build = next((getattr(module, f) for f in PARSER_FUNCTIONS if callable(getattr(module, f, None))), None)
        out[name] = build() if build else None
    return out

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


def write_nli_config(folder: Path) -> Path:
    """``folder/config.json`` of a 3-way NLI head (``id2label`` only): a model directory as the bench commands
    check ``--model-dir`` to be (`zsnli.bench.bench_args.check_model_dir`), for tests whose arms are faked."""
    path = folder / "config.json"
    path.write_text(json.dumps({"id2label": {"0": "entailment", "1": "neutral", "2": "contradiction"}}))
    return path


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
