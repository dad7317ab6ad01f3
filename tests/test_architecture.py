"""The package tree is the architecture (issue 21, item 3), checked from the source with ``ast``.

* no import cycle among the modules of ``src/zsnli`` (imports inside functions count too: a lazy
  import is still a dependency);
* at most `MAX_FLAT` modules flat at the top of ``src/zsnli`` (the shared core and the two
  composition roots); everything else lives in a package named for its concern;
* no module uses another module's ``_private`` name (``from m import _x`` or ``m._x``);
* every import of a zsnli module names one that exists (a move leaves no stale relative import);
* the serving package imports nothing from training, selection or comparison code.

Nothing is imported or run: the checks need no torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

MAX_FLAT = 12
"""Modules allowed directly under ``src/zsnli`` (``__init__.py`` included)."""

SERVING_MAY_NOT_IMPORT = ("zsnli.training", "zsnli.selection", "zsnli.compare", "zsnli.train_cli")
"""Packages the serving package (``zsnli.serving``) must never import, even lazily."""


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    imports: set[str] = field(default_factory=set)
    """Modules of ``zsnli`` this module imports (resolved to the module, not the name)."""
    private_uses: list[str] = field(default_factory=list)
    """``"zsnli.x._name"`` for every private name of another module used here."""
    unresolved: list[str] = field(default_factory=list)
    """zsnli modules imported here that do not exist (a relative import left behind by a move)."""


def _resolve(dotted: str, names: set[str]) -> str | None:
    """The longest prefix of ``dotted`` that is a module of the tree."""
    while dotted and dotted not in names:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module named by ``from <node.module> import ...`` inside ``module``."""
    if not node.level:
        return node.module or ""
    base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def scan(src: Path = SRC) -> dict[str, Module]:
    """Every module under ``src/zsnli`` with the zsnli modules it imports and the private names it uses."""
    modules: dict[str, Module] = {}
    for path in sorted((src / "zsnli").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, path, is_package)
    names = set(modules)
    for module in modules.values():
        tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
        aliases: dict[str, str] = {}  # local name -> zsnli module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "zsnli" and alias.name not in names:
                        module.unresolved.append(alias.name)
                    target = _resolve(alias.name, names) if alias.name.split(".")[0] == "zsnli" else None
                    if target:
                        module.imports.add(target)
                        if alias.asname:
                            aliases[alias.asname] = target
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, node)
                if base.split(".")[0] != "zsnli":
                    continue
                if base not in names:
                    module.unresolved.append(base)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in names:  # a submodule: from zsnli.x import y
                        module.imports.add(full)
                        aliases[alias.asname or alias.name] = full
                        continue
                    target = _resolve(base, names)
                    if target:
                        module.imports.add(target)
                        if _is_private(alias.name) and target != module.name:
                            module.private_uses.append(f"{target}.{alias.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and _is_private(node.attr)
                    and aliases[node.value.id] != module.name):
                module.private_uses.append(f"{aliases[node.value.id]}.{node.attr}")
        module.imports.discard(module.name)
    return modules


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted.

    A package's ``__init__`` importing its own submodules is not an edge back from them unless
    a submodule imports the package itself.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # iterative Tarjan: no recursion limit to hit
        work = [(start, iter(sorted(modules[start].imports)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(modules[child].imports))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for name in sorted(modules):
        if name not in index:
            visit(name)
    return sorted(found)


def flat_modules(src: Path = SRC) -> list[str]:
    return sorted(p.name for p in (src / "zsnli").glob("*.py"))


# --------------------------------------------------------------------------- the checks


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return scan()


def test_no_import_cycle(modules):
    found = cycles(modules)
    assert not found, "import cycles among src/zsnli modules: " + "; ".join(" <-> ".join(c) for c in found)


def test_at_most_twelve_modules_flat_at_the_top():
    flat = flat_modules()
    assert len(flat) <= MAX_FLAT, f"{len(flat)} modules flat in src/zsnli (at most {MAX_FLAT}): {', '.join(flat)}"


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 500, 80  # the house's bars (issue 41)


def oversized(src: Path = SRC) -> list[str]:
    """Modules over `MAX_MODULE_LINES` lines and functions over `MAX_FUNCTION_LINES` (decorators excluded)."""
    out = []
    for path in sorted(src.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(src)
        if text.count("\n") > MAX_MODULE_LINES:
            out.append(f"{rel}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    return out


def test_no_module_over_500_lines_and_no_function_over_80():
    found = oversized()
    assert not found, "rooms over the house's bars: " + "; ".join(found)


def test_the_size_check_finds_a_long_module_and_a_long_function(tmp_path):
    (tmp_path / "zsnli").mkdir()
    (tmp_path / "zsnli" / "big.py").write_text("x = 1\n" * 501)
    body = "".join(f"    y{i} = {i}\n" for i in range(80))
    (tmp_path / "zsnli" / "long.py").write_text(f"def long():\n{body}\n\ndef short():\n    return 1\n")
    assert oversized(tmp_path) == ["zsnli/big.py: 501 lines", "zsnli/long.py:1 long: 81 lines"]


def test_no_module_uses_another_modules_private_names(modules):
    uses = sorted(f"{m.name} uses {use}" for m in modules.values() for use in m.private_uses)
    assert not uses, "private names used across modules: " + "; ".join(uses)


def test_every_zsnli_import_names_a_module_that_exists(modules):
    bad = sorted(f"{m.name} imports {name}" for m in modules.values() for name in m.unresolved)
    assert not bad, "imports of zsnli modules that do not exist: " + "; ".join(bad)


def test_serving_imports_no_training_selection_or_comparison_code(modules):
    bad = sorted(f"{m.name} -> {target}" for m in modules.values() if m.name.split(".")[:2] == ["zsnli", "serving"]
                 for target in m.imports if target.startswith(SERVING_MAY_NOT_IMPORT))
    assert not bad, "the serving package imports training/selection/comparison code: " + "; ".join(bad)


# --------------------------------------------------------------------------- the checker itself


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / "src" / "zsnli" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path / "src"


def test_checker_finds_a_lazy_relative_cycle_and_private_uses(tmp_path):
    src = _tree(tmp_path, {
        "__init__.py": "",
        "a.py": "from .pkg.b import thing\n",
        "pkg/__init__.py": "",
        "pkg/b.py": "def thing():\n    from .. import a\n    return a._hidden\n",
        "pkg/c.py": "from zsnli.pkg import b as bee\nfrom zsnli.a import _secret\nx = bee._inner\n",
        "pkg/d.py": "def late():\n    from .a import thing\n    import zsnli.gone\n",
    })
    modules = scan(src)
    assert modules["zsnli.a"].imports == {"zsnli.pkg.b"}
    assert modules["zsnli.pkg.b"].imports == {"zsnli.a"}
    assert cycles(modules) == [["zsnli.a", "zsnli.pkg.b"]]
    assert modules["zsnli.pkg.b"].private_uses == ["zsnli.a._hidden"]
    assert sorted(modules["zsnli.pkg.c"].private_uses) == ["zsnli.a._secret", "zsnli.pkg.b._inner"]
    assert modules["zsnli.pkg.d"].unresolved == ["zsnli.pkg.a", "zsnli.gone"]


def test_checker_passes_a_clean_tree(tmp_path):
    src = _tree(tmp_path, {
        "__init__.py": "__version__ = '1'\n",
        "core.py": "def _own():\n    return 1\nVALUE = _own()\n",
        "pkg/__init__.py": "from zsnli.pkg.leaf import VALUE\n",
        "pkg/leaf.py": "from zsnli.core import VALUE\nfrom zsnli import __version__\n",
    })
    modules = scan(src)
    assert cycles(modules) == []
    assert all(not m.private_uses and not m.unresolved for m in modules.values())
    assert flat_modules(src) == ["__init__.py", "core.py"]
