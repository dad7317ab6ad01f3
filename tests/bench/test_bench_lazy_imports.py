"""Every ``python -m zsnli.bench.*`` command reads its command line before torch or transformers is imported: its
``--help``, an unknown flag and a wrong model folder answer at once (importing torch alone takes seconds), and a
command refused for a mistake never loads them at all.

Each command runs in a fresh interpreter (this one has torch already: tests/conftest.py), which records after each
step (the module imported, its parser built, ``main`` on each refused command line) which of `HEAVY` it holds.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench_support import MODEL_DIR_COMMANDS, bench_commands, child_env

HEAVY = ("torch", "transformers")
"""The modules a bench command may import only once its arguments are read and checked."""

_PROBE = r"""
import contextlib, importlib, io, json, sys
name, heavy, argvs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
held = lambda: [m for m in heavy if m in sys.modules]
steps = {}
module = importlib.import_module(f"zsnli.bench.{name}")
steps["import"] = held()
build = getattr(module, "build_parser", None) or getattr(module, "_parser")
build()
steps["parser"] = held()
for argv in argvs:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = module.main(argv)
        except SystemExit as exc:
            code = exc.code
    steps[f"main({argv}) -> exit {code}"] = held()
print(json.dumps(steps))
"""


def _refused_lines(name: str, tmp: str) -> list[list[str]]:
    """The command lines of ``name`` that must be refused before any work: ``--help`` (exit 0), an unknown flag, and
    a missing folder for each flag that names a model folder (`bench_support.MODEL_DIR_COMMANDS`)."""
    lines = [["--help"], ["--no-such-flag"]]
    for module, flag, extra, _ in MODEL_DIR_COMMANDS:
        if module == f"zsnli.bench.{name}":
            lines.append([flag, f"{tmp}/no-such-model", *(a.replace("{tmp}", tmp) for a in extra)])
    return lines


@pytest.mark.parametrize("name", sorted(bench_commands()))
def test_a_bench_command_reads_its_arguments_before_importing_torch(name, tmp_path):
    """batch_invariance was reported to import torch before parsing; none does now (each imports it inside the
    function that needs it), and this holds it for every command and every refused command line."""
    argvs = _refused_lines(name, str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", _PROBE, name, json.dumps(HEAVY), json.dumps(argvs)],
                          capture_output=True, text=True, env=child_env(), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(steps) == 2 + len(argvs) and all("exit 0" in s or "exit 2" in s for s in list(steps)[2:]), steps
    loaded = {step: held for step, held in steps.items() if held}
    assert loaded == {}, f"{name}: torch/transformers imported by {loaded}"
