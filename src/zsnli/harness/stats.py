"""Latency and throughput figures of a harness run: percentiles, a latency summary, docs/s.

Pure functions over lists of seconds; imports nothing from zsnli.
"""

from __future__ import annotations

import math
from typing import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (``q`` in 0..100) of ``values`` by linear interpolation between closest
    ranks (numpy's default, "linear", Hyndman & Fan 1996 definition 7); NaN when ``values`` is empty.

    Raises ``ValueError`` when ``q`` is outside [0, 100].
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def finite(values: Sequence[float]) -> list[float]:
    """The finite entries of ``values`` (NaN marks a request never sent or never answered)."""
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """``{"mean_s", "p50_s", "p95_s", "p99_s", "max_s"}`` of per-request seconds.

    Non-finite entries are left out; every figure is NaN when none is left.
    """
    xs = finite(seconds)
    if not xs:
        nan = float("nan")
        return {"mean_s": nan, "p50_s": nan, "p95_s": nan, "p99_s": nan, "max_s": nan}
    return {
        "mean_s": math.fsum(xs) / len(xs),
        "p50_s": percentile(xs, 50),
        "p95_s": percentile(xs, 95),
        "p99_s": percentile(xs, 99),
        "max_s": max(xs),
    }


def per_second(count: int | float, wall_s: float) -> float:
    """``count / wall_s`` (documents, pairs or requests per second); NaN when ``wall_s`` <= 0 or not finite."""
    if not (wall_s > 0 and math.isfinite(wall_s)):
        return float("nan")
    return count / wall_s
