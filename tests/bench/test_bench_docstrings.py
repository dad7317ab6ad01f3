"""Every function of `zsnli.bench`, private ones included, says what it does in a docstring (the house rule for
public functions, held here for the package's ``_parser`` and helpers too); read with ``ast``, nothing imported.

Exempt: functions nested inside another (a closure is read with the function around it) and dunder methods
(``__init__``, ``__enter__``: their class says what they do).
"""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "src" / "zsnli" / "bench"


def undocumented(tree: ast.Module) -> list[str]:
    """``[name]`` of every function at the top of ``tree`` or in one of its classes (``Class.method``) without a
    docstring, dunder methods left out."""
    out = []
    for node in tree.body:
        members = [(f"{node.name}.", n) for n in node.body] if isinstance(node, ast.ClassDef) else [("", node)]
        for prefix, fn in members:
            if (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and not ast.get_docstring(fn)
                    and not (fn.name.startswith("__") and fn.name.endswith("__"))):
                out.append(prefix + fn.name)
    return out


def test_the_rule_reads_functions_and_methods_not_closures_or_dunders():
    tree = ast.parse("def a():\n    def inner():\n        pass\n\ndef _b():\n    '''B.'''\n\n"
                     "class C:\n    def __init__(self):\n        pass\n\n    def m(self):\n        pass\n")
    assert undocumented(tree) == ["a", "C.m"]


def test_every_bench_function_has_a_docstring():
    """35 had none: ``_parser`` of bakeoff_priority, fair_share and read_routes, doc_figures' bake-off and quality
    generators, ``Figures.post``, ``_env_int``, ``health_poller`` and others."""
    missing = {path.name: names for path in sorted(BENCH.glob("*.py"))
               if (names := undocumented(ast.parse(path.read_text(encoding="utf-8"))))}
    assert missing == {}, "\n".join(f"{name}: {', '.join(names)}" for name, names in missing.items())
