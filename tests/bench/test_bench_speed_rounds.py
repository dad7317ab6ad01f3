"""The README's speed check in interleaved rounds (zsnli.bench.speed_rounds, issue 49): a load spike lands in one
round, not one arm, so the median of the per-round ratios holds where the ratio of two back-to-back arms did not."""

from __future__ import annotations

import pytest

from bench_support import write_nli_config
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
    assert "[speed] round 1/5 (pipeline then server): " in err and "round 2/5 (server then pipeline" in err
    assert err.count("[load 1.00]") == 5  # the load beside every round's ratio
    assert "speed rounds (pipeline + server documents): 40/40 docs" in err  # the progress reporter's last line


def test_usage_mistakes_are_one_line(tmp_path, capsys):
    for argv in (["--model-dir", str(tmp_path / "none")], ["--rounds", "0"],
                 ["--model-dir", "model", "--examples", str(tmp_path / "none.jsonl")]):
        with pytest.raises(SystemExit) as exc:
            sr.main(argv)
        assert exc.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1, argv


def test_fast_path_rounds_interleave_the_fast_path_with_the_default(capsys):
    """Issue 57: ``python -m zsnli.bench --fast-path`` ran its arms one after another (0.772x, then 2.812x); the
    interleaved check now runs the fast path against the shipped default, alternating which goes first."""
    calls = []

    def arm(name, seconds_per_doc):
        def run(chunk, advance):
            calls.append(name)
            advance(len(chunk))
            return seconds_per_doc * len(chunk)
        return run

    readings = iter([1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5])
    rows = sr.run_rounds(list(range(10)), {"server": arm("server", 3.0), "fast": arm("fast", 1.0)}, rounds=4,
                         per_round=2, load=lambda: next(readings), terminal=False, pair=sr.FAST_PAIR,
                         cpu="Xeon x2: avx2 avx512f")
    assert calls == ["server", "fast", "fast", "server", "server", "fast", "fast", "server"]
    assert [r["order"] for r in rows] == [["server", "fast"], ["fast", "server"]] * 2
    assert [r["ratio"] for r in rows] == [3.0] * 4  # fast docs/s over default docs/s
    assert [(r["load1"], r["load1_end"]) for r in rows] == [(1.0, 1.5), (2.0, 2.5), (3.0, 3.5), (4.0, 4.5)]
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[speed] round")]
    assert lines[0] == ("[speed] round 1/4 (server then fast): server 0.33 docs/s, fast 1.00 docs/s, ratio 3.00x "
                        "[load 1.00-1.50; CPU: Xeon x2: avx2 avx512f]")
    assert all("load " in x and "; CPU: Xeon" in x for x in lines) and len(lines) == 4


def test_the_printed_summary_carries_the_load_and_cpu_beside_every_ratio():
    from types import SimpleNamespace

    rows = [{"round": 1, "docs": 2, "order": ["server", "fast"], "load1": 1.0, "load1_end": 2.0, "server_s": 2.0,
             "fast_s": 1.0, "ratio": 2.0},
            {"round": 2, "docs": 2, "order": ["fast", "server"], "load1": 3.0, "load1_end": 3.0, "server_s": 3.0,
             "fast_s": 1.0, "ratio": 3.0}]
    args = SimpleNamespace(model_dir="model", examples="x.jsonl", concurrency=32)
    rep = sr.report(rows, {"model": "Xeon"}, args, sr.FAST_PAIR)
    assert rep["pair"] == ["server", "fast"] and rep["load1"] == {"min": 1.0, "median": 2.5, "max": 3.0}
    text = sr.render(rep, "Xeon, 2 logical CPUs, flags avx2 avx512f").splitlines()
    assert "1.00-2.00" in text[1] and text[2].split()[2] == "3.00"
    assert all(line.endswith("[CPU: Xeon, 2 logical CPUs, flags avx2 avx512f]") for line in text[1:3])
    assert text[-1].startswith("fast path (concurrency 32) / shipped default: median 2.50x over 2 rounds")
    assert "[load average (1 min) 1.00-3.00, median 2.50; " in text[-1] and "flags avx2 avx512f]" in text[-1]


def test_fast_path_without_the_calibrations_embedding_scoring_is_one_line(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    write_nli_config(model)
    (model / "calibration.json").write_text('{"chosen": {"rule": "entailment", "temperature": 1.0}}')
    with pytest.raises(SystemExit) as exc:
        sr.main(["--model-dir", str(model), "--fast-path"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and "--fast-path" in err and "embedding_scoring" in err
