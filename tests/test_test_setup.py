"""The README's test command runs the whole suite, and what it cannot run it says (issue 32, item 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO


def test_a_skipped_test_is_named_with_its_reason_in_the_summary(tmp_path):
    """The repository's pytest settings (``-rfEs``) make the summary list each skip and its reason."""
    (tmp_path / "test_skipper.py").write_text(
        "import pytest\n\n@pytest.mark.skip(reason='needs a thing this machine lacks')\ndef test_x():\n    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-c", str(REPO / "pyproject.toml"),
                          "--rootdir", str(tmp_path), "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert "SKIPPED [1] " in run.stdout and "needs a thing this machine lacks" in run.stdout, run.stdout


def test_the_quick_start_installs_what_the_browser_tests_need():
    """Every test file that drives Chromium skips with the reason the README gives and the command it runs,
    and the README names every such file."""
    readme = (REPO / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):readme.index("## API in brief")]
    assert "apt-get install -y chromium chromium-driver" in quick
    assert "needs Debian's chromium and chromium-driver" in " ".join(quick.split()).replace("`", "")
    browser_files = [p for p in (REPO / "tests").rglob("test_*.py")
                     if p.name != "test_test_setup.py" and "chromium" in p.read_text()]
    assert browser_files
    for path in browser_files:
        text = " ".join(path.read_text().split())
        assert "needs Debian's chromium and chromium-driver (apt-get install -y chromium" in text, path
        assert str(path.relative_to(REPO)) in quick, path


def _quick_start_line() -> str:
    """The Quick start's one command line that installs Chromium (comments left out)."""
    readme = (REPO / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):readme.index("## API in brief")]
    lines = [line for line in quick.splitlines() if "apt-get install" in line and not line.startswith("#")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("uid, want", [
    ("0", ["apt-get update", "apt-get install -y chromium chromium-driver"]),  # a root container: no sudo there
    ("1000", ["sudo apt-get update", "sudo apt-get install -y chromium chromium-driver"]),
])
def test_the_quick_start_browser_step_updates_first_and_needs_sudo_only_when_not_root(tmp_path, uid, want):
    """The README's Chromium line, run by bash as it is with ``id``, ``sudo`` and ``apt-get`` stand-ins that
    log their calls: ``apt-get update`` comes first (a fresh image has no package lists: ``install`` alone
    fails), and ``sudo`` is used only by a user who is not root (a root container has no sudo)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    stubs = {"id": f'[ "$1" = -u ] && echo {uid}\n',
             "apt-get": f'echo "apt-get $*" >> {log}\n',
             "sudo": f'echo "sudo $*" >> {log}\n'}
    for name, body in stubs.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    run = subprocess.run(["/bin/bash", "-c", _quick_start_line()], env={"PATH": str(bin_dir)},
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert log.read_text().splitlines() == want


def test_failures_and_errors_are_listed_in_the_summary_as_well_as_skips(tmp_path):
    """Issue 57, item 1: the repository's pytest settings (``-rfEs``) name each failed test and each error in the
    short summary, not only the skips (a failure far up a long run was not in the summary at all)."""
    (tmp_path / "test_mixed.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef broken():\n    raise RuntimeError('fixture broke')\n\n"
        "def test_fails():\n    assert 1 == 2, 'the failing one'\n\n"
        "def test_errors(broken):\n    pass\n\n"
        "@pytest.mark.skip(reason='a skip')\ndef test_skipped():\n    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-c", str(REPO / "pyproject.toml"),
                          "--rootdir", str(tmp_path), "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    summary = run.stdout[run.stdout.index("short test summary info"):]
    assert "FAILED test_mixed.py::test_fails" in summary, run.stdout
    assert "ERROR test_mixed.py::test_errors" in summary, run.stdout
    assert "SKIPPED [1] " in summary and "a skip" in summary, run.stdout


def test_what_a_run_left_in_the_working_directory_is_never_read(tmp_path, monkeypatch, capsys):
    """Issue 57, item 1: a checkout where the README's server ran a bake-off holds ``runs/bakeoff/
    receipt-ed25519.pem`` (and its store); training leaves ``runs/<preset>``, selection ``runs/score_cache``.
    Within the suite every default run folder is a temporary one (conftest's ``ZSNLI_RUNS_DIR``), so a test that
    checks "no local key" still sees none, and nothing a test writes by default lands in the checkout."""
    import json

    from zsnli.compare.receipt_cli import main
    from zsnli.compare.receipts import Signer, local_public_pem, seal
    from zsnli.compare.service.settings import BakeoffSettings
    from zsnli.selection import score_cache

    monkeypatch.chdir(tmp_path)  # a checkout the README's own server and a training run have used
    stray = Signer(tmp_path / "runs" / "bakeoff" / "receipt-ed25519.pem")
    stray.private_key()
    (tmp_path / "runs" / "score_cache").mkdir()
    monkeypatch.delenv("ZSNLI_RECEIPT_KEY", raising=False)
    monkeypatch.delenv("ZSNLI_BAKEOFF_DB", raising=False)
    left = (tmp_path / "runs").resolve()

    assert local_public_pem() is None  # the stray key is not "the local key"
    settings = BakeoffSettings.from_env()
    for path in (settings.db_path, settings.key_path, score_cache._build_parser().parse_args([]).out):
        assert not Path(path).resolve().is_relative_to(left), path
    other = Signer(tmp_path / "elsewhere" / "other.pem")
    answer = {"id": "bo_" + "a" * 32, "created_at": "2026-12-01T00:00:00.000000Z", "task_description": "t",
              "labels": {"a": "a", "b": "b"}, "n": 0, "winner": None, "scorecard": []}
    answer["receipt"] = seal(answer, "e" * 64, {}, other)
    (tmp_path / "answer.json").write_text(json.dumps(answer))
    assert main([str(tmp_path / "answer.json")]) == 2  # signed, no local key to check it: not "key id mismatch"
    assert "--public-key is needed" in capsys.readouterr().err


def test_hypothesis_keeps_no_examples_in_the_checkout():
    """Issue 57, item 1: hypothesis' example database (``.hypothesis/`` in the working directory) replayed what an
    earlier run found; the suite's profile keeps none, so a property test reads nothing a run left behind."""
    hypothesis = pytest.importorskip("hypothesis")

    assert hypothesis.settings().database is None
