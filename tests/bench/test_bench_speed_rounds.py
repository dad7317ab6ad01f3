"""The README's speed check in interleaved rounds (zsnli.bench.speed_rounds, issue 49): a load spike lands in one
round, not one arm, so the median of the per-round ratios holds where the ratio of two back-to-back arms did not."""

from __future__ import annotations

import pytest

from zsnli.bench import speed_rounds as sr


def test_rounds_slice_the_examples_and_alternate_the_order():
    assert [list(r) for r in sr.round_slices(5, 3, 2)] == [[0, 1], [0, 1], [0, 1]]  # the same work every round
    assert [list(r) for r in sr.round_slices(5, 3, 2, same=False)] == [[0, 1], [2, 3], [4, 5]]  # 5 wraps to doc 0
    assert [len(r) for r in sr.round_slices(3, 2, 10)] == [3, 3]
    assert [sr.order_of(i) for i in range(3)] == [("pipeline", "server"), ("server", "pipeline"),
                                                 ("pipeline", "server")]
    with pytest.raises(ValueError):
        sr.round_slices(0, 1, 1)


def test_summary_is_the_median_and_spread():
    s = sr.summarize([2.0, 2.2, 1.8, 9.0])
    assert s["median"] == pytest.approx(2.1) and (s["min"], s["max"], s["rounds"]) == (1.8, 9.0, 4)
    assert s["q1"] <= s["median"] <= s["q3"]
    assert sr.summarize([3.0])["median"] == 3.0
    with pytest.raises(ValueError):
        sr.summarize([])


def test_a_load_spike_in_one_round_leaves_the_median_ratio(capsys):
    """Arms whose speed is 1x and 2x of a machine that slows 15-fold during a stretch of the run: run one after
    the other, the stretch falls on one arm (the old check's 2.34x -> 36.8x); in rounds the median is 2.0."""
    calls = []

    def slowness():
        return 15.0 if 4 <= len(calls) < 6 else 1.0  # the spike: the 5th and 6th arm runs

    def arm(seconds_per_doc):
        def run(chunk, advance):
            calls.append(1)
            t = seconds_per_doc * len(chunk) * slowness()
            advance(len(chunk))
            return t
        return run

    rows = sr.run_rounds(list(range(40)), {"pipeline": arm(2.0), "server": arm(1.0)}, rounds=5, per_round=4,
                         load=lambda: 1.0, terminal=False)
    ratios = [r["ratio"] for r in rows]
    assert sr.summarize(ratios)["median"] == pytest.approx(2.0)
    assert max(ratios) != pytest.approx(2.0)  # the spiked round is there, and does not move the median
    err = capsys.readouterr().err
    assert "[speed] round 1/5 (pipeline then server, load 1.00)" in err and "round 2/5 (server then pipeline" in err
    assert "speed rounds (pipeline + server documents): 40/40 docs" in err  # the progress reporter's last line


def test_usage_mistakes_are_one_line(tmp_path, capsys):
    for argv in (["--model-dir", str(tmp_path / "none")], ["--rounds", "0"],
                 ["--model-dir", "model", "--examples", str(tmp_path / "none.jsonl")]):
        with pytest.raises(SystemExit) as exc:
            sr.main(argv)
        assert exc.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1, argv
