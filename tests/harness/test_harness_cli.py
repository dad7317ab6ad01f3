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


def test_a_range_bound_is_written_as_a_reader_writes_it(capsys):
    """``--max-p95-ms -1`` said "expected a number in (0, 6.048e+08]": a whole bound is a plain integer now."""
    from zsnli.harness.cli import MAX_WAIT_S, bound_text, number_type, positive_ms

    with pytest.raises(argparse.ArgumentTypeError, match=r"^expected a number in \(0, 604800000\], got -1$"):
        positive_ms("-1")
    assert positive_ms.__name__ == "a number in (0, 604800000]"
    assert number_type(float, 0.5, MAX_WAIT_S)("1").__class__ is float
    assert [bound_text(v) for v in (0, 8, 604800.0, 6.048e8, 0.5, 1e-6, 1e300, -3.0)] == \
        ["0", "8", "604800", "604800000", "0.5", "1e-06", "1e+300", "-3"]


def _naming_type(text: str) -> str:
    raise argparse.ArgumentTypeError(f"--spec expects A:B, got {text!r}")


def _quoting_type(text: str) -> str:
    raise argparse.ArgumentTypeError(f"--spec {text!r}: A >= 8 expected")


@pytest.mark.parametrize("kind, line", [
    (_naming_type, "tool: error: argument --spec/-s: expects A:B, got 'x' (see tool --help)"),
    (_quoting_type, "tool: error: argument --spec/-s: 'x': A >= 8 expected (see tool --help)"),
])
def test_a_type_message_that_names_its_flag_names_it_once(capsys, kind, line):
    """``argument --premise-windows: --premise-windows expects ...`` named the flag twice: argparse names it, then the
    type's own message did again. Both parsers (UsageParser and train.py's TrainParser) drop the repeat."""
    from zsnli.training.cli_parser import TrainParser

    for parser_class in (UsageParser, TrainParser):
        p = parser_class(prog="tool")
        p.add_argument("--spec", "-s", type=kind)
        for flag in ("--spec", "-s"):
            with pytest.raises(SystemExit):
                p.parse_args([flag, "x"])
            assert capsys.readouterr().err == line + "\n", parser_class
    p = UsageParser(prog="tool")
    p.add_argument("--other", type=kind)  # a message naming another flag is left as it is
    with pytest.raises(SystemExit):
        p.parse_args(["--other", "x"])
    assert "argument --other: --spec " in capsys.readouterr().err


def test_select_premise_windows_names_its_flag_once(capsys):
    from zsnli.selection.cli_args import parser

    for value, rest in (("x", "expects WINDOW:OVERLAP:RULE"), ("2:0.5:max", "'2:0.5:max': WINDOW >= 8")):
        with pytest.raises(SystemExit):
            parser().parse_args(["--premise-windows", value])
        err = capsys.readouterr().err
        assert err.count("--premise-windows") == 1 and f"argument --premise-windows: {rest}" in err, err
