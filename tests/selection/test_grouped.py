"""Kind-weighted selection: weights, temperatures fitted on the objective, the calibrator fit, served figures, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_selection import make_set, tiny_model_dir  # noqa: F401 (a fixture)

from zsnli import metrics
from zsnli.request_scoring import CALIBRATOR_FEATURES, Calibrator, Cascade, RequestScoring
from zsnli.scoring import ScoringConfig
from zsnli.selection import fits
from zsnli.selection import grouped as G
from zsnli.selection import search as sel

KINDS = {"benchmark": {f"b{i}": {"kind": k, "labels": 2} for i, k in enumerate(["sent"] * 3 + ["topic"] * 1)},
         "zsc_dev": {"s1": "sent", "s2": "sent", "t1": "topic", "q1": "question"}}


def test_kind_weights_follow_the_benchmark_mix():
    w = G.kind_weights(["s1", "s2", "t1", "q1"], KINDS)
    assert w == pytest.approx({"s1": 0.375, "s2": 0.375, "t1": 0.25, "q1": 0.0})
    assert G.weighted_mean({"s1": 10.0, "t1": 50.0, "q1": 99.0}, w) == pytest.approx((0.375 * 10 + 0.25 * 50) / 0.625)
    with pytest.raises(ValueError, match="no task kind"):
        G.kind_weights(["unknown"], KINDS)


def test_read_kinds_refuses_a_bad_file(tmp_path):
    bad = tmp_path / "k.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="expected 'benchmark' and 'zsc_dev'"):
        G.read_kinds(bad)
    with pytest.raises(ValueError, match="cannot read"):
        G.read_kinds(tmp_path / "absent.json")


def test_groups_of_datasets():
    assert G.dataset_group(make_set()) == "binary"
    assert G.dataset_group(make_set(hyps=("It is spam.", "It is not spam."))) == "negation"
    assert G.dataset_group(make_set(hyps=tuple(f"label {i}" for i in range(12)))) == "many"


def _scored(cs, w=0.0):
    return G.score_dataset(cs, G.GroupCandidate("entailment", w))


def test_temperature_on_objective_minimises_ece_and_ignores_a_floor_dataset():
    good = make_set("good", n=400, hyps=tuple(f"l{i}" for i in range(4)), signal=3.0, seed=1)
    s = _scored(good)
    bounds = [sel.dataset_bounds(good)]
    t0, b = G.fit_temperature_on_objective([s], [1.0], bounds)
    assert b == 0.0  # one K: no exponent
    grid = np.exp(fits.LOG_T0_GRID)
    eces = [sel.fast_normalised(s.packed, sel.fast_macro_f1(s.packed), np.full(len(s.packed.k), t), bounds[0])[1]
            for t in grid]
    assert t0 == pytest.approx(grid[int(np.argmin(eces))])
    # a dataset whose normalised score is 0 at every temperature does not move the fit
    noise = make_set("noise", n=400, hyps=tuple(f"l{i}" for i in range(4)), signal=-3.0, seed=2)
    both = G.fit_temperature_on_objective([s, _scored(noise)], [1.0, 1.0], bounds + [sel.dataset_bounds(noise)])
    assert both == (t0, b)


def test_calibrator_fit_lowers_the_loss_and_keeps_the_argmax():
    sets = [make_set(f"s{i}", n=200, hyps=tuple(f"l{j}" for j in range(3 + i)), signal=1.5 + i, seed=i) for i in range(3)]
    scored = [_scored(cs) for cs in sets]
    log_base = [np.zeros(len(cs)) for cs in sets]
    cal = G.fit_calibrator(scored, [1.0, 1.0, 1.0], log_base, "nll", CALIBRATOR_FEATURES, 1e-3)
    zero = Calibrator(CALIBRATOR_FEATURES, (0.0,) * len(CALIBRATOR_FEATURES))

    def loss(c):
        total = 0.0
        for s, lb in zip(scored, log_base):
            w = np.full(len(s.packed.k), 1 / 600)
            total += fits.calibrator_loss_and_grad(s.packed, s.features(lb), w, lb, np.array(c.coefficients), "nll")[0]
        return total

    assert loss(cal) < loss(zero)
    theta = np.array(cal.coefficients)
    s = scored[0]
    v, g = fits.calibrator_loss_and_grad(s.packed, s.features(log_base[0]), np.full(len(s.packed.k), 1.0), log_base[0], theta, "top_label")
    eps = 1e-6
    for i in range(len(theta)):  # the top-label gradient is the loss's
        d = np.zeros_like(theta)
        d[i] = eps
        up = fits.calibrator_loss_and_grad(s.packed, s.features(log_base[0]), np.full(len(s.packed.k), 1.0), log_base[0], theta + d,
                              "top_label")[0]
        assert (up - v) / eps == pytest.approx(g[i], rel=1e-3, abs=1e-5)


def test_served_figures_are_the_fast_figures_and_the_cascade_cuts_pairs():
    many = make_set("many", n=120, hyps=tuple(f"label {i}" for i in range(12)), signal=2.0, seed=3)
    config = ScoringConfig(temperature=1.7, embedding_weight=5.0, embedding_sha256="offline")
    fast = _scored(many, 5.0)
    bounds = sel.dataset_bounds(many)
    norm, ece = sel.fast_normalised(fast.packed, sel.fast_macro_f1(fast.packed),
                                    np.full(len(many), 1.7), bounds)
    served = G.served_figures({"many": many}, RequestScoring(config))["many"]
    assert served["normalised"] == pytest.approx(norm) and served["ece"] == pytest.approx(ece)
    assert served["pairs_per_row"] == 12
    cascade = Cascade(10, 4)
    cut = G.served_figures({"many": many}, RequestScoring(config, cascade=cascade))["many"]
    assert cut["pairs_per_row"] == 4
    fast_cut = G.score_dataset(many, G.GroupCandidate("entailment", 5.0), cascade)
    f1 = sel.fast_macro_f1(fast_cut.packed)
    assert cut["normalised"] == pytest.approx(sel.fast_normalised(fast_cut.packed, f1, np.full(len(many), 1.7), bounds)[0])
    assert cut["macro_f1"] == pytest.approx(metrics.macro_f1(fast_cut.packed.gold_classes,
                                                             fast_cut.packed.classes[np.arange(len(many)),
                                                                                     fast_cut.packed.scores.argmax(1)], 12))


def test_leave_one_out_fits_without_the_held_out_set():
    sets = {n: make_set(n, n=80, hyps=h, seed=i) for i, (n, h) in enumerate(
        [("s1", ("good", "bad")), ("s2", ("great", "awful")), ("t1", ("sport", "music", "food")),
         ("q1", ("who", "what", "where"))])}
    weights = G.kind_weights(list(sets), KINDS)
    spec = G.Spec(t_fit="objective", group_t=True)
    out = G.leave_one_out(G.Selector(sets, weights), [spec])
    for h, scoring in out["_scoring"][spec.label].items():
        # the held-out set's figures are those of the scoring fitted without it
        assert out[spec.label][h]["normalised"] == pytest.approx(G.served_figures({h: sets[h]}, scoring)[h]["normalised"])
        train = [n for n in sets if n != h]
        assert scoring == G.fold_scoring(G.Selector(sets, weights), train, spec, "offline")
    # a changed held-out set changes nothing fitted for it
    changed = dict(sets, s1=make_set("s1", n=80, hyps=("good", "bad"), seed=99, signal=-1.0))
    again = G.leave_one_out(G.Selector(changed, weights), [spec])
    assert again["_scoring"][spec.label]["s1"] == out["_scoring"][spec.label]["s1"]


def test_leave_one_kind_out_fits_without_any_set_of_the_held_out_kind():
    sets = {n: make_set(n, n=80, hyps=h, seed=i) for i, (n, h) in enumerate(
        [("s1", ("good", "bad")), ("s2", ("great", "awful")), ("t1", ("sport", "music", "food")),
         ("q1", ("who", "what", "where"))])}
    kind_of = {n: KINDS["zsc_dev"][n] for n in sets}
    folds = G.kind_folds(list(sets), kind_of)
    assert sorted(map(sorted, folds.values())) == [["q1"], ["s1", "s2"], ["t1"]]
    weights = G.kind_weights(list(sets), KINDS)
    spec = G.Spec(t_fit="objective", group_t=True)
    out = G.leave_out(G.Selector(sets, weights), folds, [spec])
    lodo = G.leave_one_out(G.Selector(sets, weights), [spec])
    for h in ("s1", "s2"):
        # both sentiment sets are scored with the one scoring fitted on t1 and q1 alone
        assert out["_scoring"][spec.label][h] == G.fold_scoring(G.Selector(sets, weights), ["t1", "q1"], spec, "offline")
        assert out[spec.label][h]["normalised"] == pytest.approx(
            G.served_figures({h: sets[h]}, out["_scoring"][spec.label][h])[h]["normalised"])
    # s2 is in s1's leave-one-dataset-out training data, never in its leave-one-kind-out data
    assert lodo["_scoring"][spec.label]["s1"] != out["_scoring"][spec.label]["s1"]
    # a kind whose only set is held out is scored the same both ways
    assert out["_scoring"][spec.label]["t1"] == lodo["_scoring"][spec.label]["t1"]
    with pytest.raises(ValueError, match="holds out every set"):
        G.leave_out(G.Selector(sets, weights), {"all": list(sets)}, [spec])


def test_pick_spec_passes_over_an_arm_that_loses_a_kind_held_out_whole():
    plain = {"per_kind": {"a": 30.0, "b": 10.0}}
    lodo = {"x": {"weighted_normalised": 40.0, "per_kind": {"a": 31.0, "b": 50.0}},
            "y": {"weighted_normalised": 35.0, "per_kind": {"a": 30.5, "b": 40.0}}}
    loko = {"x": {"weighted_normalised": 30.0, "per_kind": {"a": 25.0, "b": 45.0}},
            "y": {"weighted_normalised": 33.0, "per_kind": {"a": 30.0, "b": 38.0}}}
    from zsnli.selection.grouped_doc import pick_spec

    assert pick_spec(lodo, plain) == "x"
    assert pick_spec(lodo, plain, loko) == "y"


def test_pick_spec_passes_over_an_arm_that_loses_a_kind():
    plain = {"per_kind": {"a": 30.0, "b": 10.0}}
    arms = {"x": {"weighted_normalised": 40.0, "per_kind": {"a": 28.0, "b": 50.0}},
            "y": {"weighted_normalised": 35.0, "per_kind": {"a": 29.5, "b": 40.0}}}
    from zsnli.selection.grouped_doc import pick_spec

    assert pick_spec(arms, plain) == "y"
    assert pick_spec({"x": arms["x"]}, plain) == "x"  # none qualifies: the best overall


def test_cli_kinds_writes_the_grouped_choice(tmp_path, tiny_model_dir):
    from test_devsets_negation import write_zsc

    from zsnli.request_scoring import load_request_scoring
    from zsnli.selection import cli as selection_cli

    data = tmp_path / "zsc"
    data.mkdir()
    write_zsc(data, "spamish", n=24, classes=("not spam", "spam"))
    write_zsc(data, "offish", n=24, classes=("not offensive", "offensive"))
    write_zsc(data, "topic", n=24, classes=("sport", "music", "food"), counts=[8, 8, 8],
              hyps=["This text is about sport.", "This text is about music.", "This text is about food."])
    kinds = tmp_path / "kinds.json"
    kinds.write_text(json.dumps({"benchmark": {"a": {"kind": "negation-pair", "labels": 2},
                                               "b": {"kind": "topic", "labels": 3}},
                                 "zsc_dev": {"spamish": "negation-pair", "offish": "negation-pair", "topic": "topic"}}))
    ex = tmp_path / "ex.jsonl"
    ex.write_text("\n".join(json.dumps({"id": i, "dataset": "d", "text": f"the game {i}", "labels": ["sport", "business"],
                                        "label": i % 2}) for i in range(8)))
    out, sources = tmp_path / "calibration.json", tmp_path / "data_sources.json"
    out.write_text(json.dumps({"chosen": {"rule": "entailment", "temperature": 2.0}, "model_sha256": "m" * 64}))
    rc = selection_cli.main(["--zsc-dev-dir", str(data), "--dev-examples", str(ex), "--cache", str(tmp_path / "c"),
                             "--model-dir", str(tiny_model_dir), "--out", str(out), "--data-sources", str(sources),
                             "--kinds", str(kinds), "--report-public", str(ex)])
    assert rc == 0
    doc = json.loads(out.read_text())
    scoring, ok = load_request_scoring(out)
    from zsnli.manifest import hash_model_dir, model_dir_digest

    assert ok and scoring.to_dict() == doc["chosen"]
    assert doc["model_sha256"] == model_dir_digest(hash_model_dir(tiny_model_dir))  # --model-dir's, not the old file's
    block = doc["selection"]["kind_weighted"]
    assert block["weights"] == {"offish": 0.25, "spamish": 0.25, "topic": 0.5}
    assert set(block["arms"]) == {s.label for s in G.SPECS} and block["chosen_arm"] == doc["selection"]["chosen_candidate"]
    assert set(doc["selection"]["out_of_fold"]) == {"zsc-dev/offish", "zsc-dev/spamish", "zsc-dev/topic", "dev/d"}
    assert "previous_scoring" in block
    assert doc["selection"]["public_report"]["new_default"]["mean"]["normalised"] >= 0
    assert selection_cli.quality_markdown(doc).count("| zsc-dev/") == 3
    from zsnli.request_scoring import load_embedding_scoring  # the fast path's row, served as written

    fast = load_embedding_scoring(out)
    assert fast.default.temperature == doc["embedding_scoring"]["temperature"] and fast.cascade.keep == 0
    assert "leave_one_kind_out" in block["embedding_scoring"] and "embedding_scoring" in doc["selection"]["public_report"]
    assert all("leave_one_kind_out" in v for v in block["cascade"]["out_of_fold"].values())  # each cascade both ways
    assert "leave_one_kind_out" not in block["served_leave_one_dataset_out"]
    bad = tmp_path / "nokinds.json"
    bad.write_text("[]")
    assert selection_cli.main(["--zsc-dev-dir", str(data), "--dev-examples", str(ex), "--model-dir", str(tiny_model_dir),
                               "--kinds", str(bad)]) == 2


def test_vectorised_features_are_the_served_features():
    from zsnli.request_scoring import calibrator_features
    from zsnli.scoring import scores_from_logits

    import dataclasses

    cs = dataclasses.replace(make_set("f", n=30, hyps=tuple(f"label {i}" for i in range(11)), seed=5),
                             premise_tokens=np.arange(30) * 7)
    s = G.score_dataset(cs, G.GroupCandidate("entailment", 3.0))
    log_t = np.full(30, np.log(1.7))
    phi = s.features(log_t)
    off = cs.offsets
    nli = scores_from_logits(cs.logits, "entailment", cs.entail_idx, cs.contra_idx)
    cos = cs.cosine.astype(np.float64)
    for i, (a, b) in enumerate(zip(off[:-1], off[1:])):
        combined = nli[a:b] + 3.0 * cos[a:b]
        np.testing.assert_allclose(phi[i], calibrator_features(combined / 1.7, nli[a:b], cos[a:b], "many",
                                                               int(cs.premise_tokens[i])), atol=1e-9)


def test_pick_cascade_needs_both_ways_within_the_tolerance_of_exact_and_of_today():
    from zsnli.selection.grouped_doc import CASCADE_TOLERANCE, pick_cascade

    def fig(lodo, loko, pairs):
        return ({"weighted_normalised": lodo, "pairs_per_row": pairs}, {"weighted_normalised": loko})

    exact = fig(40.0, 38.0, 6.0)
    today, cheap, cheaper = Cascade(10, 4), Cascade(6, 2), Cascade(4, 2)
    figures = {today: fig(40.2, 38.1, 3.3), cheap: fig(39.95, 37.9, 2.8), cheaper: fig(39.9, 37.6, 2.5)}
    # cheaper loses 0.4 leaving one kind out: passed over; cheap is within 0.3 of exact both ways
    assert pick_cascade(figures, [exact], 6.0) == cheap
    # against today's too, cheap loses 0.25 / 0.2: still in; a tighter today's rules it out
    assert pick_cascade(figures, [exact, figures[today]], 6.0) == cheap
    figures[today] = fig(40.3, 38.0 + CASCADE_TOLERANCE + 0.2, 3.3)
    assert pick_cascade(figures, [exact, figures[today]], 6.0) == today
    assert pick_cascade({today: fig(30.0, 30.0, 3.3)}, [exact], 6.0) is None


def test_pick_cascade_passes_over_a_cascade_that_loses_one_kind_even_when_its_mean_holds():
    """Issue 50's re-choice: 6:3 and 8:3 cost the same on zsc-dev (2.68 pairs) and had the same kind-weighted
    means, but 6:3 prunes trec6's 6 labels to 3 and lost 3.15 points on question (a kind of weight 0)."""
    from zsnli.selection.grouped_doc import KIND_TOLERANCE, pick_cascade

    def fig(lodo, loko, pairs, question):
        kinds = {"question": question, "topic": 64.0}
        return ({"weighted_normalised": lodo, "pairs_per_row": pairs, "per_kind": kinds},
                {"weighted_normalised": loko, "per_kind": kinds})

    exact = fig(37.25, 38.03, 6.11, 42.02)
    six, eight, ten = Cascade(6, 3), Cascade(8, 3), Cascade(10, 4)
    figures = {six: fig(37.20, 37.99, 2.68, 38.87), eight: fig(37.20, 37.99, 2.68, 42.02),
               ten: fig(37.27, 38.06, 3.32, 42.02)}
    assert pick_cascade(figures, [exact, figures[ten]], 6.11) == eight
    # within the kind tolerance, equal costs and means go to the larger min_labels, whatever the order
    figures[six] = fig(37.20, 37.99, 2.68, 42.02 - KIND_TOLERANCE + 0.01)
    assert pick_cascade(dict(reversed(list(figures.items()))), [exact, figures[ten]], 6.11) == eight
    assert pick_cascade(figures, [exact, figures[ten]], 6.11) == eight
    # the better mean wins a tie in cost
    figures[six] = fig(37.22, 37.99, 2.68, 42.02)
    assert pick_cascade(figures, [exact, figures[ten]], 6.11) == six
    # a kind lost leaving one kind out only is enough to pass a cascade over
    lodo, loko = fig(37.30, 38.10, 2.5, 42.02)
    figures[Cascade(4, 2)] = (lodo, {**loko, "per_kind": {"question": 40.0, "topic": 64.0}})
    assert pick_cascade(figures, [exact, figures[ten]], 6.11) == six


def test_embedding_row_is_the_served_fast_path_out_of_fold_both_ways():
    from zsnli.request_scoring import EMBEDDING_WEIGHT, embedding_scoring
    from zsnli.selection.grouped_doc import embedding_row

    sets = {n: make_set(n, n=80, hyps=h, seed=i) for i, (n, h) in enumerate(
        [("s1", ("good", "bad")), ("s2", ("great", "awful")), ("t1", ("sport", "music", "food")),
         ("q1", ("who", "what", "where"))])}
    weights = G.kind_weights(list(sets), KINDS)
    kind_of = {n: KINDS["zsc_dev"][n] for n in sets}
    row, figures = embedding_row(sets, weights, kind_of, "offline")
    fast = embedding_scoring(row["temperature"], row["k_exponent"], "offline")
    served = G.served_figures(sets, fast)
    assert all(f["pairs_per_row"] == 0 for f in served.values())  # no cross-encoder pair
    # its probabilities are softmax(20 cos / T(K)) whatever the NLI logits
    cs = sets["t1"]
    probs, _ = G.served_probabilities(cs, fast)
    z = EMBEDDING_WEIGHT * cs.cosine[:3].astype(np.float64) / (row["temperature"] * 3 ** row["k_exponent"])
    np.testing.assert_allclose(probs[0], np.exp(z - z.max()) / np.exp(z - z.max()).sum(), atol=1e-12)
    assert set(figures["fits"]) == {"w pooled, T pooled by nll", "w pooled, T pooled by objective"}
    assert figures["leave_one_dataset_out"]["pairs_per_row"] == 0
    # leaving one kind out, both sentiment sets are scored with the T fitted on t1 and q1 alone
    selector = G.Selector(sets, weights, cands=[G.GroupCandidate("entailment", EMBEDDING_WEIGHT)],
                          cascade=fast.cascade)
    spec = next(s for s in G.SPECS if s.label == figures["fit"])
    fold = G.fold_scoring(selector, ["t1", "q1"], spec, "offline")
    held = G.served_figures({n: sets[n] for n in ("s1", "s2")}, fold)
    assert figures["leave_one_kind_out"]["per_kind"]["sent"] == pytest.approx(
        np.mean([held[n]["normalised"] for n in held]), abs=0.01)


def test_a_memoised_selection_is_recomputed_when_the_selection_code_changes(tmp_path, monkeypatch):
    """Issue 50: a rule change in pick_cascade was answered from kind_weighted.pkl written by the old code."""
    from zsnli.selection import memo as cli

    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    path = tmp_path / "memo.pkl"
    assert cli.memoised(path, ["sets"], "built", compute) == 1
    assert cli.memoised(path, ["sets"], "built", compute) == 1  # same key, same code: the pickle answers
    assert cli.memoised(path, ["other sets"], "built", compute) == 2
    monkeypatch.setattr(cli, "code_digest", lambda files=cli.SELECTION_CODE: "another rule")
    assert cli.memoised(path, ["other sets"], "built", compute) == 3
    assert len(calls) == 3


def test_the_code_digest_covers_the_rule_modules_and_changes_with_them(tmp_path):
    from zsnli.selection import memo as cli

    assert "selection/grouped_doc.py" in cli.SELECTION_CODE and "selection/grouped.py" in cli.SELECTION_CODE
    assert cli.code_digest() == cli.code_digest()
    assert cli.code_digest(cli.SELECTION_CODE[:1]) != cli.code_digest(cli.SELECTION_CODE[:2])
