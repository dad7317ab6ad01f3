"""Shared piece of the command-line tests: the one error line of a refused command."""

from __future__ import annotations


def one_error_line(capsys, main, argv: list[str]) -> str:
    """Run ``main(argv)``; it must exit 2 (returned or raised as ``SystemExit`` by the parser) with exactly one line
    on stderr. Returns that line."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, (argv, code, err)
    return err[0]
