"""A new terminal without the venv (issue 40 B): ``./serve.sh``, ``python validate.py`` and ``python train.py`` run by a python
that lacks a package end in one line naming it and the README's install command, exit 2, no traceback
(`zsnli.import_entry`); serve.sh prefers ``$VIRTUAL_ENV``'s python."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL = "pip install -e '.[dev]'"


def _bare_python(tmp_path: Path) -> Path:
    """An interpreter without site-packages (``python -S``): the standard library only."""
    wrapper = tmp_path / "bare-python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


def _one_line(proc: subprocess.CompletedProcess, command: str, *names: str) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = lines[0]
    assert line.startswith(f"{command}: missing Python package(s) ") and INSTALL in line, line
    for name in names:
        assert name in line, line
    return line


def test_serve_sh_without_the_packages_is_one_line(tmp_path):
    proc = subprocess.run([str(ROOT / "serve.sh")], env=_env(PYTHON=str(_bare_python(tmp_path))),
                          capture_output=True, text=True, timeout=60)
    _one_line(proc, "./serve.sh", "fastapi", "uvicorn", "torch")


def test_validate_without_the_packages_is_one_line(tmp_path):
    proc = subprocess.run([str(_bare_python(tmp_path)), str(ROOT / "validate.py"), "--help"], env=_env(),
                          capture_output=True, text=True, timeout=60)
    _one_line(proc, "python validate.py", "rich", "httpx")


def test_train_without_the_packages_is_one_line(tmp_path):
    """``python3 train.py --help`` in a new terminal printed a ModuleNotFoundError traceback (numpy)."""
    proc = subprocess.run([str(_bare_python(tmp_path)), str(ROOT / "train.py"), "--help"], env=_env(),
                          capture_output=True, text=True, timeout=60)
    _one_line(proc, "python train.py", "numpy", "torch", "transformers")


@pytest.mark.parametrize("script,command", [("validate.py", "python validate.py"), ("server.py", "server.py"),
                                            ("train.py", "python train.py")])
def test_a_package_that_fails_on_import_is_named_too(tmp_path, script, command):
    """A package found but not importable (a shim raising ModuleNotFoundError, as a broken install does)."""
    shim = tmp_path / "shim"
    shim.mkdir()
    blocked = {"validate.py": "rich", "server.py": "fastapi", "train.py": "numpy"}[script]
    (shim / f"{blocked}.py").write_text(f"raise ModuleNotFoundError(\"No module named '{blocked}'\", name='{blocked}')\n")
    proc = subprocess.run([sys.executable, str(ROOT / script), "--help"], env=_env(PYTHONPATH=str(shim)),
                          capture_output=True, text=True, timeout=120)
    line = _one_line(proc, command, blocked)
    assert f"package(s) {blocked} for" in line


def test_serve_sh_prefers_the_active_venv(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(_bare_python(tmp_path))
    proc = subprocess.run([str(ROOT / "serve.sh")], env=_env(VIRTUAL_ENV=str(venv)),
                          capture_output=True, text=True, timeout=60)
    _one_line(proc, "./serve.sh", "fastapi")  # the venv's (bare) python ran, not python3
