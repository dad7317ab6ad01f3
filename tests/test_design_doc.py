"""DESIGN.md stays true to the code: every module path and ``zsnli.x.y`` name it cites exists,
every package under ``src/zsnli`` is described (the modules describe themselves: each has a
docstring), and its error table is `zsnli.errors.ErrorType`.

Names are resolved from the source (``ast``), not imported, so the check needs no torch
and cannot run module code.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

import pytest

from zsnli.config import OTHER_TOOLS_PREFIXES, setting_names
from zsnli.errors import ErrorType
from zsnli.scoring import ScoringConfig

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DESIGN = ROOT / "DESIGN.md"
TOP_LEVEL_SCRIPTS = ("serve.sh", "server.py", "train.py", "validate.py")

PATH_RE = re.compile(r"src/zsnli(?:/[A-Za-z0-9_.]+)*/?")
DOTTED_RE = re.compile(r"(?<![\w.])zsnli(?:\.[A-Za-z_]\w*)+")
SETTING_RE = re.compile(r"\bZSNLI_[A-Z][A-Z0-9_]*")
ERROR_ROW_RE = re.compile(r"^\|\s*`([A-Z_]+)`\s*\|\s*`([a-z_]+)`\s*\|\s*(\d{3})\s*\|\s*(yes|no)\s*\|", re.M)


def _text() -> str:
    assert DESIGN.is_file(), "DESIGN.md is missing at the repository top level"
    return DESIGN.read_text(encoding="utf-8")


def module_files(src: Path = SRC) -> dict[str, Path]:
    """``{"zsnli.x.y": path}`` for every ``.py`` file under ``src/zsnli`` (a package is its ``__init__``)."""
    out = {}
    for path in sorted((src / "zsnli").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _defined(body: list[ast.stmt]) -> set[str]:
    """Names bound by a module or class body: defs, classes, assignments, imports."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            names |= _defined(node.body)
    return names


def resolves(dotted: str, modules: dict[str, Path] | None = None) -> bool:
    """True when ``dotted`` is a module, or a module plus a top-level name (plus a class member)."""
    modules = module_files() if modules is None else modules
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in modules:
            rest = parts[cut:]
            break
    else:
        return False
    if not rest:
        return True
    body = _tree(modules[module]).body
    if rest[0] not in _defined(body):
        return False
    if len(rest) == 1:
        return True
    cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == rest[0]), None)
    return cls is not None and rest[1] in _defined(cls.body)


def unmentioned_packages(text: str, modules: dict[str, Path] | None = None, root: Path = ROOT) -> list[str]:
    """Packages (folders with an ``__init__.py`` under ``src/zsnli``, the root excluded) whose folder
    ``src/zsnli/x/`` the text does not cite; ``root`` is the checkout holding ``src/``."""
    modules = module_files(root / "src") if modules is None else modules
    paths = {p.rstrip("/") for p in PATH_RE.findall(text)}
    return [name for name, path in modules.items() if path.name == "__init__.py" and name != "zsnli"
            and path.parent.relative_to(root).as_posix() not in paths]


def modules_without_docstring(modules: dict[str, Path] | None = None) -> list[str]:
    """Modules whose docstring is missing or shorter than one sentence (20 characters)."""
    modules = module_files() if modules is None else modules
    return [name for name, path in modules.items() if len((ast.get_docstring(_tree(path)) or "").strip()) < 20]


# --------------------------------------------------------------------------- the checks


def test_every_cited_path_exists():
    missing = sorted({p for p in PATH_RE.findall(_text()) if not (ROOT / p.rstrip("/.")).exists()})
    assert not missing, f"DESIGN.md cites paths that do not exist: {', '.join(missing)}"


def test_every_cited_dotted_name_exists():
    names = sorted(set(DOTTED_RE.findall(_text())))
    assert names, "DESIGN.md cites no zsnli.x names: the check would be empty"
    missing = [n for n in names if not resolves(n)]
    assert not missing, f"DESIGN.md cites names that the code does not define: {', '.join(missing)}"


def test_every_package_is_described():
    missing = unmentioned_packages(_text())
    assert not missing, (
        f"DESIGN.md's layout does not name the package(s) {', '.join(missing)}: add a row (src/zsnli/x/) "
        "to its Layout table and place it in the import flow"
    )


def test_every_module_says_what_it_is():
    missing = modules_without_docstring()
    assert not missing, f"modules without a docstring saying what they hold: {', '.join(missing)}"


def test_top_level_scripts_exist_and_are_described():
    text = _text()
    for script in TOP_LEVEL_SCRIPTS:
        assert (ROOT / script).is_file(), f"{script} is missing at the top level"
        assert f"`{script}`" in text, f"DESIGN.md's layout does not describe {script}"


def test_error_table_is_the_error_type_table():
    rows = {name: (wire, int(status), flag == "yes") for name, wire, status, flag in ERROR_ROW_RE.findall(_text())}
    expected = {e.name: (e.wire, e.status, e.retry_after) for e in ErrorType}
    assert rows == expected, (
        "DESIGN.md's error table differs from zsnli.errors.ErrorType: "
        f"missing {sorted(set(expected) - set(rows))}, extra {sorted(set(rows) - set(expected))}, "
        f"different {sorted(k for k in set(rows) & set(expected) if rows[k] != expected[k])}"
    )


def test_cited_settings_exist():
    known = set(setting_names())
    cited = sorted(set(SETTING_RE.findall(_text())))
    unknown = [s for s in cited if s not in known and not s.startswith(OTHER_TOOLS_PREFIXES)]
    assert not unknown, f"DESIGN.md cites settings zsnli.config.Settings does not have: {', '.join(unknown)}"


def test_calibration_chosen_fields_are_the_scoring_config_fields():
    section = _text().split("`calibration.json` holds:", 1)[1].split("`decided_by`", 1)[0]
    for name in ScoringConfig.__dataclass_fields__:
        assert f"`{name}`" in section, f"DESIGN.md's calibration.json 'chosen' list lacks {name}"


# --------------------------------------------------------------------------- the checker itself


def test_checker_rejects_what_does_not_exist(tmp_path):
    assert resolves("zsnli.serving.service.ZeroShotClassifier.preprocess")
    assert resolves("zsnli.compare.arms.ARMS")  # bound by an import in the package's __init__
    assert not resolves("zsnli.serving.service.NoSuchThing")
    assert not resolves("zsnli.serving.service.ZeroShotClassifier.no_such_method")
    assert not resolves("zsnli.no_such_module")
    pkg = tmp_path / "src" / "zsnli"
    (pkg / "sub").mkdir(parents=True)
    for rel in ("__init__.py", "a.py", "sub/__init__.py", "sub/b.py"):
        (pkg / rel).write_text('"""x"""\n', encoding="utf-8")
    modules = module_files(tmp_path / "src")
    assert sorted(modules) == ["zsnli", "zsnli.a", "zsnli.sub", "zsnli.sub.b"]
    text = "`src/zsnli/` holds `zsnli.a`; sub as a plain word or `zsnli.sub` does not count"
    assert unmentioned_packages(text, modules, tmp_path) == ["zsnli.sub"]
    assert unmentioned_packages(text + "; `src/zsnli/sub/`", modules, tmp_path) == []
    assert modules_without_docstring(modules) == list(modules)  # '"""x"""' is no description
    (pkg / "a.py").write_text('"""The a module: what it holds and may import."""\n', encoding="utf-8")
    _tree.cache_clear()
    assert "zsnli.a" not in modules_without_docstring(module_files(tmp_path / "src"))


@pytest.mark.parametrize("line", ["see `zsnli.serving.app.create_app`.", "python -m zsnli.bench;"])
def test_dotted_names_are_found_in_prose(line):
    assert DOTTED_RE.findall(line) and all(resolves(n) for n in DOTTED_RE.findall(line))
