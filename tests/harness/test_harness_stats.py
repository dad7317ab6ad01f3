"""zsnli.harness.stats: percentiles (numpy's linear definition), latency summary, rates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from zsnli.harness.stats import latency_summary, per_second, percentile


@pytest.mark.parametrize("values", [[1.0, 2.0, 3.0, 4.0], [5.0], [0.3, 0.1, 0.9, 0.2, 0.25, 4.0, 0.0]])
@pytest.mark.parametrize("q", [0, 37.5, 50, 95, 99, 100])
def test_percentile_matches_numpy_linear(values, q):
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_edges():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        percentile([1.0], 101)


def test_latency_summary_skips_unanswered():
    s = latency_summary([0.1, 0.2, float("nan"), 0.3, 0.4, 1.0])
    assert s["p50_s"] == pytest.approx(0.3) and s["max_s"] == 1.0
    assert s["p95_s"] == pytest.approx(0.88) and s["mean_s"] == pytest.approx(0.4)
    assert all(math.isnan(v) for v in latency_summary([float("nan")]).values())


def test_per_second():
    assert per_second(10, 4.0) == 2.5
    assert math.isnan(per_second(10, 0.0)) and math.isnan(per_second(3, float("nan")))
