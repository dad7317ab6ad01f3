"""The README's test command runs the whole suite, and what it cannot run it says (issue 32, item 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO


def test_a_skipped_test_is_named_with_its_reason_in_the_summary(tmp_path):
    """The repository's pytest settings (``-rs``) make the summary list each skip and its reason."""
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
