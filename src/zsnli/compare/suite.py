"""Bake-off suite files (TOML): which arms to run, with which parameters, under which protocol.

Format (every key but ``[[arms]]`` entries' ``name`` and ``type`` optional)::

    name = "ci"
    description = "..."
    examples = "dev/zeroshot_dev.jsonl"      # relative to --root; --examples overrides
    imports = ["my_team.arms"]                # modules to import first (they register more arms)

    [protocol]                                # see zsnli.compare.protocol
    protocol = "auto"                         # auto | split | kfold | loo
    train_fraction = 0.5
    seed = 0
    folds = 5
    min_class_for_split = 8
    loo_max_n = 0                             # auto: leave-one-out for datasets of at most this many rows

    [analysis]
    min_support = 10                          # smallest slice
    targets = [0.9]                           # escalation target accuracies

    [[arms]]
    name = "zsnli"                            # unique display name
    type = "served"                           # a name in zsnli.compare.arms.ARMS
    model_dir = "model"                       # every other key is a parameter of the arm class

The same ``type`` may appear under several names with different parameters.
Arms whose class takes a ``root`` parameter get the project root unless the
entry sets one. Parameters are checked when the file is loaded, so a typo or a bad
value fails before anything runs: every arm is built (its ``__init__``, which loads
nothing: models load in ``setup``), after its parameters' names and values were checked
against the class's declared schema (`zsnli.compare.arms.base.check_params`).

Imports: tomllib (tomli before Python 3.11), `zsnli.compare.arms`, `.protocol`, `.slices`, `zsnli.harness.cli` (`one_line`).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from zsnli.compare.arms import ARMS, ArmError, build_arm
from zsnli.compare.protocol import DEFAULT_FOLDS, DEFAULT_MIN_CLASS_FOR_SPLIT, DEFAULT_TRAIN_FRACTION
from zsnli.compare.slices import DEFAULT_MIN_SUPPORT
from zsnli.harness.cli import one_line

DEFAULT_TARGET_ACCURACY = 0.9

PROTOCOL_KEYS = {"protocol": str, "train_fraction": float, "seed": int, "folds": int, "min_class_for_split": int,
                 "loo_max_n": int}
ANALYSIS_KEYS = {"min_support": int, "targets": list}
TOP_KEYS = ("name", "description", "examples", "imports", "protocol", "analysis", "arms")


class SuiteError(ValueError):
    """The suite file cannot be read or breaks the format; the message names the file and the entry."""


@dataclass
class ArmEntry:
    """One ``[[arms]]`` entry: display name, registry type, parameters for the class."""

    name: str
    type: str
    params: dict[str, Any]


@dataclass
class Suite:
    """A parsed suite file (or one built from ``validate.py compare``'s flags: ``path`` None); ``protocol``
    and ``analysis`` hold defaults for keys the file leaves out."""

    path: str | None
    name: str
    description: str
    examples: str | None
    arms: list[ArmEntry]
    protocol: dict[str, Any] = field(default_factory=dict)
    analysis: dict[str, Any] = field(default_factory=dict)


def _typed(section: dict, spec: dict, where: str) -> dict:
    out = {}
    for key, value in section.items():
        if key not in spec:
            raise SuiteError(f"{where}: unknown key {key!r}; accepted: {', '.join(spec)}")
        want = spec[key]
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, want) or isinstance(value, bool):
            raise SuiteError(f"{where}: {key} must be {want.__name__}, got {value!r}")
        out[key] = value
    return out


def _arm_entry(raw: Any, number: int, path: str, root: Path) -> ArmEntry:
    where = f"{path}: [[arms]] #{number}"
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: must be a table")
    name, type_name = raw.get("name"), raw.get("type")
    if not isinstance(name, str) or not name:
        raise SuiteError(f"{where}: needs a non-empty string 'name'")
    if not isinstance(type_name, str):
        raise SuiteError(f"{where} ({name}): needs a string 'type'; registered: {', '.join(sorted(ARMS))}")
    params = {k: v for k, v in raw.items() if k not in ("name", "type")}
    cls = ARMS.get(type_name)
    if cls is not None and "root" in inspect.signature(cls.__init__).parameters and "root" not in params:
        params["root"] = str(root)
    try:  # the declared schema (names, annotated types), then the class's own value checks: nothing is loaded yet
        build_arm(type_name, name, params)
    except (ArmError, ValueError, TypeError) as exc:
        raise SuiteError(f"{where} ({name}): {one_line(exc)}") from exc
    return ArmEntry(name, type_name, params)


def _import_modules(names, path: str) -> None:
    """Import the suite's ``imports`` (modules whose ``@register`` lines add arms)."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SuiteError(f"{path}: imports must be a list of module names")
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise SuiteError(f"{path}: cannot import {name!r} named in imports ({exc})") from exc


def load_suite(path: str | Path, root: str | Path = ".") -> Suite:
    """Read and check a suite file; ``root`` is the project root given to arms that take one.

    Raises ``SuiteError`` (one line naming the file and the entry) for a
    missing file, bad TOML, unknown keys or arm types, wrong parameters or
    duplicate arm names.
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SuiteError(f"cannot read suite file {p}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{p}: not valid TOML ({exc})") from exc
    unknown = [k for k in data if k not in TOP_KEYS]
    if unknown:
        raise SuiteError(f"{p}: unknown top-level key(s) {', '.join(unknown)}; accepted: {', '.join(TOP_KEYS)}")
    _import_modules(data.get("imports", []), str(p))
    raw_arms = data.get("arms")
    if not isinstance(raw_arms, list) or not raw_arms:
        raise SuiteError(f"{p}: needs at least one [[arms]] entry")
    arms = [_arm_entry(a, i, str(p), Path(root)) for i, a in enumerate(raw_arms, 1)]
    names = [a.name for a in arms]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SuiteError(f"{p}: arm names must be unique, repeated: {', '.join(dupes)}")
    protocol = {"protocol": "auto", "train_fraction": DEFAULT_TRAIN_FRACTION, "seed": 0, "folds": DEFAULT_FOLDS,
                "min_class_for_split": DEFAULT_MIN_CLASS_FOR_SPLIT}
    protocol.update(_typed(data.get("protocol", {}), PROTOCOL_KEYS, f"{p}: [protocol]"))
    analysis = {"min_support": DEFAULT_MIN_SUPPORT, "targets": [DEFAULT_TARGET_ACCURACY]}
    analysis.update(_typed(data.get("analysis", {}), ANALYSIS_KEYS, f"{p}: [analysis]"))
    if not all(isinstance(t, (int, float)) and 0 < t <= 1 for t in analysis["targets"]):
        raise SuiteError(f"{p}: [analysis] targets must be numbers in (0, 1]")
    examples = data.get("examples")
    if examples is not None and not isinstance(examples, str):
        raise SuiteError(f"{p}: examples must be a path string")
    return Suite(str(p), str(data.get("name", p.stem)), str(data.get("description", "")), examples, arms,
                 protocol, analysis)
