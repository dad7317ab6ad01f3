"""Every ``python -m zsnli.bench.*`` command has a help line for each of its options, and its ``--help`` works.

A command is a module of `zsnli.bench` with a ``main`` (or one that adds arguments to a parser); its parser
comes from one of `bench_support.PARSER_FUNCTIONS`, built without parsing anything, so nothing runs (no model, no
server).
``python -m zsnli.bench`` itself is `zsnli.bench.side_by_side_cli`.
"""

from __future__ import annotations

import argparse
import re

from bench_support import PARSER_FUNCTIONS, bench_commands, bench_parsers
from zsnli.bench.side_by_side_cli import OTHER_COMMANDS

SENTENCE_ENDS = (".", "?", "!")
"""How a description that says what its command does ends: a whole sentence (one ending in ``:`` announces a list
the help does not show; one ending in a word or a bracket was cut)."""


def description_problem(text: str | None) -> str | None:
    """Why ``text``, a command's ``--help`` description, does not say in whole sentences what the command does
    (none; the command's own name first, which the usage line above it already gives; not ending as a sentence,
    `SENTENCE_ENDS`; a bracket or quote left open), or None."""
    text = (text or "").strip()
    if not text:
        return "no description"
    if text.startswith("python -m"):
        return f"starts with the command's name (the usage line gives it): {text[:60]!r}"
    if not text.endswith(SENTENCE_ENDS):
        return f"ends mid-sentence: ...{text[-60:]!r}"
    for opening, closing in ("()", "[]", "{}"):
        if text.count(opening) != text.count(closing):
            return f"{opening}{closing} unbalanced: {text!r}"
    if text.count('"') % 2:
        return f"a quote left open: {text!r}"
    return None


def test_description_problem_holds_whole_sentences_only():
    """The rule itself: speed_rounds' old description (its docstring's first line) is cut; a sentence is not."""
    assert "ends mid-sentence" in description_problem("The README's speed check, made to survive a busy machine: the "
                                                      "transformers zero-shot pipeline (one document per")
    assert "ends mid-sentence" in description_problem("What do fixed shapes cost? (issue 33, item 2)")
    assert "the usage line" in description_problem("python -m zsnli.bench.cost_profile: where a document's time goes.")
    assert "unbalanced" in description_problem("A burst (issue 6. Done.")
    assert description_problem("Overload test for the zsnli server (issue 6): a burst far above capacity.") is None
    assert description_problem("Is the queue shared fairly? Against 127.0.0.1 only.") is None


def test_every_bench_command_describes_itself_in_whole_sentences():
    """``python -m zsnli.bench.speed_rounds --help`` showed its docstring's first line, cut at "one document per"
    (five commands took the first line, not the first paragraph); batch_invariance's ended in "(issue 33, item 2)"
    after its question, three began with their own ``python -m`` name. Every description now says in whole
    sentences what its command does (`description_problem`)."""
    parsers = {name: parser for name, parser in bench_parsers().items() if parser is not None}
    problems = {name: description_problem(parser.description) for name, parser in parsers.items()}
    problems = {name: why for name, why in problems.items() if why}
    assert len(parsers) > 10 and problems == {}, "\n".join(f"{name}: {why}" for name, why in problems.items())


def default_not_shown(action: argparse.Action) -> bool:
    """Whether ``action`` has a default its help line does not take from the parser (``%(default)s``): a default
    written out as text ("default 32") goes stale when the code's changes. No default (None, an empty list, a flag's
    False) is nothing to show."""
    flag = isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._StoreConstAction))
    empty = action.default is None or action.default is argparse.SUPPRESS or action.default == []
    return bool(action.option_strings) and not flag and not empty and "%(default)" not in str(action.help or "")


def test_every_bench_option_with_a_default_shows_the_parsers():
    """25 help lines wrote their default as text ("(default 32)", "default 1 0", "(default .)"), 24 did not say it;
    each now shows the parser's own (``%(default)s``), so ``--help`` and the code cannot disagree."""
    missing = {name: [a.option_strings[0] for a in parser._actions if default_not_shown(a)]
               for name, parser in bench_parsers().items() if parser is not None}
    assert {name: flags for name, flags in missing.items() if flags} == {}


def _help_problem(module, parser: argparse.ArgumentParser, capsys) -> str | None:
    """Why ``main(["--help"])`` of ``module`` is not a clean help (exit 0, usage of ``parser`` on stdout, every
    option named, nothing on stderr), or None."""
    try:
        module.main(["--help"])
        code = "main returned"
    except SystemExit as exc:
        code = exc.code
    except Exception as exc:  # noqa: BLE001 - a traceback of any kind is the failure reported
        capsys.readouterr()
        return f"raised {type(exc).__name__}: {exc}"
    out, err = capsys.readouterr()
    options = [a.option_strings[0] for a in parser._actions if a.option_strings]
    unnamed = [o for o in options if o not in out]
    if code not in (0, None) or err or "Traceback" in out or not out.startswith(f"usage: {parser.prog}") or unnamed:
        return f"exit {code}, stderr {err[-300:]!r}, options not shown {unnamed}, stdout starts {out[:80]!r}"
    return None


def test_every_bench_option_has_a_help_line_and_every_help_exits_0(capsys):
    """53 options of twelve bench commands showed no help line (and ten commands built their parser inside
    main or parse_args, out of reach without parsing); every option now says what it does."""
    commands = bench_commands()
    listed = set(re.findall(r"python -m zsnli\.bench\.(\w+)", OTHER_COMMANDS))
    assert listed and listed <= set(commands), f"listed in python -m zsnli.bench --help, not found: {listed - set(commands)}"
    no_parser, undocumented, bad_help = [], {}, {}
    for name, module in sorted(commands.items()):
        build = next((getattr(module, f) for f in PARSER_FUNCTIONS if callable(getattr(module, f, None))), None)
        if build is None:
            no_parser.append(name)
            continue
        parser = build()
        missing = [a.option_strings[0] if a.option_strings else a.dest for a in parser._actions
                   if not isinstance(a, argparse._HelpAction) and not str(a.help or "").strip()]
        if missing:
            undocumented[name] = missing
        problem = _help_problem(module, parser, capsys)
        if problem:
            bad_help[name] = problem
    assert (no_parser, undocumented, bad_help) == ([], {}, {}), (
        f"commands without any of {PARSER_FUNCTIONS}: {no_parser}; options without a help line: {undocumented}; "
        f"--help not clean: {bad_help}")
