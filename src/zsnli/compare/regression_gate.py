"""``python validate.py gate REPORT.json --baseline baselines/main.json``: fail on regressions against a baseline.

For every arm of the baseline report, the new report must hold an arm of
the same name that ran, and:

1. mean macro-F1 over datasets dropped by at most ``max_f1_drop``;
2. mean ECE over datasets rose by at most ``max_ece_rise``;
3. every declared slice of the baseline arm (n >= min support, see
   `bakeoff_analysis`) fell further behind the arm's own accuracy by at most
   ``max_slice_drop``: (arm accuracy - slice accuracy) now, minus the same gap
   in the baseline.

Reports over different examples (sha256), protocol settings or slice
minimum support are not comparable: that is a violation too, and the only
one reported (the arm checks would compare different rows). Condition 3 is what catches a change
that lifts the averages while one group of documents loses ground.

Imports: the standard library and `zsnli.harness.cli` (standard library only: `json_problem`, `json_type`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zsnli.harness.cli import json_problem, json_type

DEFAULT_MAX_F1_DROP = 0.02
DEFAULT_MAX_ECE_RISE = 0.02
DEFAULT_MAX_SLICE_DROP = 0.05


class GateInputError(ValueError):
    """A report or baseline file is missing, not JSON, or not a bake-off report."""


@dataclass(frozen=True)
class Violation:
    """One failed condition: arm, what (macro_f1 | ece | slice KEY | arm | examples | protocol), both numbers."""

    arm: str
    what: str
    baseline: Any
    current: Any
    limit: float | None
    message: str


def load_report(path: str | Path) -> dict[str, Any]:
    """Read a bake-off JSON report; raises ``GateInputError`` with a one-line reason."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GateInputError(f"cannot read {p}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise GateInputError(f"{p}: not JSON ({json_problem(exc)})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("arms"), list):
        raise GateInputError(f"{p}: not a bake-off report (no 'arms' list); write one with validate.py bakeoff --report")
    problem = report_problem(data)
    if problem:
        raise GateInputError(f"{p}: not a bake-off report the gate can read: {problem}; write one with validate.py "
                             "bakeoff --report")
    return data


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def report_problem(report: dict[str, Any]) -> str | None:
    """The first field of ``report`` (with its ``arms`` list) that the gate reads and that is not what
    ``validate.py bakeoff --report`` writes, in words (``arms[0].scores.means.macro_f1 must be a finite number, not
    null``); None when every one is. Read: ``examples.sha256``, ``protocol`` and ``options`` (objects or absent),
    and for every arm its unique ``name`` and, when it did not fail (no ``error``), ``scores.means.macro_f1`` and
    ``ece`` and each ``declared_slices`` entry's ``gap``, ``accuracy`` and ``n``. A hand-edited report used to end
    the gate in a traceback (KeyError, TypeError) instead of this line."""
    examples = report.get("examples")
    if not isinstance(examples, dict) or not isinstance(examples.get("sha256"), str):
        return "examples.sha256 is missing (every report names the examples it ran on)"
    for key in ("protocol", "options"):
        if report.get(key) is not None and not isinstance(report[key], dict):
            return f"{key} must be an object, not {json_type(report[key])}"
    if not report["arms"]:
        return "arms is empty"
    names: set[str] = set()
    for i, arm in enumerate(report["arms"]):
        where = f"arms[{i}]"
        if not isinstance(arm, dict):
            return f"{where} must be an object, not {json_type(arm)}"
        if not isinstance(arm.get("name"), str) or not arm["name"]:
            return f"{where}.name must be a non-empty string, not {json_type(arm.get('name'))}"
        if arm["name"] in names:
            return f"{where}.name {arm['name']!r} is given twice"
        names.add(arm["name"])
        if arm.get("error"):
            continue  # a failed arm holds no scores: nothing is read of it
        means = (arm.get("scores") or {}).get("means") if isinstance(arm.get("scores"), dict) else None
        if not isinstance(means, dict):
            return f"{where}.scores.means must be an object (an arm that ran holds its scores)"
        for metric in ("macro_f1", "ece"):
            if not _number(means.get(metric)):
                return f"{where}.scores.means.{metric} must be a finite number, not {json_type(means.get(metric))}"
        slices = arm.get("declared_slices")
        if slices is not None and not isinstance(slices, dict):
            return f"{where}.declared_slices must be an object, not {json_type(slices)}"
        for key, entry in (slices or {}).items():
            if not isinstance(entry, dict) or not all(_number(entry.get(k)) for k in ("gap", "accuracy", "n")):
                return f"{where}.declared_slices[{key!r}] must hold the numbers gap, accuracy and n"
    return None


def _arm_checks(name: str, old: dict, new: dict, f1_drop: float, ece_rise: float, slice_drop: float) -> list[Violation]:
    out = []
    om, nm = old["scores"]["means"], new["scores"]["means"]
    if nm["macro_f1"] < om["macro_f1"] - f1_drop:
        out.append(Violation(name, "macro_f1", om["macro_f1"], nm["macro_f1"], f1_drop,
                             f"{name}: macro-F1 {om['macro_f1']:.4f} -> {nm['macro_f1']:.4f} "
                             f"(drop {om['macro_f1'] - nm['macro_f1']:.4f} > {f1_drop})"))
    if nm["ece"] > om["ece"] + ece_rise:
        out.append(Violation(name, "ece", om["ece"], nm["ece"], ece_rise,
                             f"{name}: ECE {om['ece']:.4f} -> {nm['ece']:.4f} (rise {nm['ece'] - om['ece']:.4f} > {ece_rise})"))
    new_slices = new.get("declared_slices") or {}
    for key, s in sorted((old.get("declared_slices") or {}).items()):
        cur = new_slices.get(key)
        if cur is None:
            out.append(Violation(name, f"slice {key}", s["gap"], None, slice_drop,
                                 f"{name}: declared slice {key} (n={s['n']}) missing from the report"))
        elif cur["gap"] > s["gap"] + slice_drop:
            out.append(Violation(name, f"slice {key}", s["gap"], cur["gap"], slice_drop,
                                 f"{name}: slice {key} behind the arm's accuracy by {s['gap']:+.4f} -> {cur['gap']:+.4f} "
                                 f"(accuracy {s['accuracy']:.4f} -> {cur['accuracy']:.4f}, n={cur['n']}; "
                                 f"lost {cur['gap'] - s['gap']:.4f} > {slice_drop})"))
    return out


NOT_COMPARABLE = ("examples", "protocol", "min_support")


def not_comparable(report: dict, baseline: dict) -> list[Violation]:
    """Why the two reports cannot be held to each other (what: one of `NOT_COMPARABLE`); [] when they can.

    Different examples (sha256), protocol settings or slice minimum support
    (``options.min_support``, which decides which declared slices a report
    holds) make every arm and slice check meaningless.
    """
    out = []
    old_ex, new_ex = (baseline.get("examples") or {}).get("sha256"), (report.get("examples") or {}).get("sha256")
    if old_ex != new_ex:
        out.append(Violation("*", "examples", old_ex, new_ex, None,
                             f"examples differ (sha256 {str(old_ex)[:12]} -> {str(new_ex)[:12]}): not comparable"))
    old_pr = (baseline.get("protocol") or {}).get("settings")
    new_pr = (report.get("protocol") or {}).get("settings")
    if old_pr != new_pr:
        out.append(Violation("*", "protocol", old_pr, new_pr, None,
                             f"protocol settings differ: {old_pr} -> {new_pr}: not comparable"))
    old_ms = (baseline.get("options") or {}).get("min_support")
    new_ms = (report.get("options") or {}).get("min_support")
    if old_ms != new_ms:
        out.append(Violation("*", "min_support", old_ms, new_ms, None,
                             f"slice min_support differs ({old_ms} -> {new_ms}; validate.py bakeoff --min-support): "
                             "not comparable"))
    return out


def compare_reports(report: dict, baseline: dict, max_f1_drop: float = DEFAULT_MAX_F1_DROP,
                    max_ece_rise: float = DEFAULT_MAX_ECE_RISE,
                    max_slice_drop: float = DEFAULT_MAX_SLICE_DROP) -> list[Violation]:
    """Every violation of the three conditions (module docstring) over the baseline's arms; [] means pass.

    Reports that are not comparable (`not_comparable`) give only those violations.
    """
    out = not_comparable(report, baseline)
    if out:  # every arm check below would compare different rows or settings: one line per cause, no cascade
        return out
    current = {a["name"]: a for a in report["arms"]}
    for old in baseline["arms"]:
        name = old["name"]
        if old.get("error"):
            continue  # nothing to hold the arm to
        new = current.get(name)
        if new is None or new.get("error"):
            why = "missing from the report" if new is None else f"failed: {new['error']}"
            out.append(Violation(name, "arm", "ran", why, None, f"{name}: {why}"))
            continue
        out.extend(_arm_checks(name, old, new, max_f1_drop, max_ece_rise, max_slice_drop))
    return out
