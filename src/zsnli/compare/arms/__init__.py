"""Bake-off arms: the `Arm` interface, the registry, and the built-in zero-shot and few-shot arms.

Importing this package registers the built-in arms (`zero_shot`, `few_shot`, `rules`, `finetuned`).
To add an arm, subclass `Arm` and decorate it with ``@register("type_name")``;
see `zsnli.compare.arms.base`.
"""

from zsnli.compare.arms.base import ARMS, COST_LOCAL, Arm, ArmError, build_arm, check_params, normalise_rows, register
from zsnli.compare.arms import few_shot, finetuned, rules, zero_shot  # noqa: F401  (registers the built-in arms)

__all__ = ["ARMS", "COST_LOCAL", "Arm", "ArmError", "build_arm", "check_params", "normalise_rows", "register"]
