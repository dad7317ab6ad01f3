"""zsnli.harness.cli: usage mistakes are one line and exit 2."""

from __future__ import annotations

import argparse

import pytest

from zsnli.harness.cli import (UsageParser, non_negative_float, non_negative_int, one_line, positive_float, positive_int,
                               usage_error)


def _parser() -> UsageParser:
    p = UsageParser(prog="tool")
    p.add_argument("--n", type=positive_int)
    p.add_argument("--w", type=non_negative_int)
    p.add_argument("--t", type=positive_float)
    p.add_argument("--m", type=non_negative_float)
    return p


@pytest.mark.parametrize("argv, needle", [
    (["--n", "0"], "argument --n: expected an integer >= 1, got 0"),
    (["--n", "x"], "argument --n: expected an integer >= 1, got 'x'"),
    (["--w", "-1"], "argument --w: expected an integer >= 0"),
    (["--t", "0"], "argument --t: expected a number > 0"),
    (["--t", "inf"], "argument --t: expected a number > 0"),
    (["--m", "-0.5"], "argument --m: expected a number >= 0"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_usage_errors_are_one_line_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tool: error: ") and needle in err and "usage:" not in err


def test_good_values_parse():
    args = _parser().parse_args(["--n", "1", "--w", "0", "--t", "0.5", "--m", "0"])
    assert (args.n, args.w, args.t, args.m) == (1, 0, 0.5, 0.0)
    with pytest.raises(argparse.ArgumentTypeError):
        positive_int("1.5")


@pytest.mark.parametrize("message, line", [
    ("--x 'a  b': no such file", "--x 'a  b': no such file"),  # blanks inside a value are kept
    ("first line\n    second line", "first line second line"),
    ("a \r\n b\rc\u2028d\x0be", "a b c d e"),
    ("  padded\n", "padded"),
])
def test_usage_error_joins_lines_and_keeps_the_blanks_inside_one(capsys, message, line):
    """usage_error collapsed every run of blanks, so a value given with two spaces was shown with one."""
    assert usage_error("tool", message) == 2
    assert capsys.readouterr().err == f"tool: error: {line}\n"
    assert one_line(message) == line
