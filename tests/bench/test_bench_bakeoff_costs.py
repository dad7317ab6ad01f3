"""zsnli.bench.bakeoff_costs: the fit of the bake-off cost model's coefficients (no timing is asserted)."""

from __future__ import annotations

import pytest

from zsnli.bench import bakeoff_costs as bc
from zsnli.compare import budget


def test_the_fit_recovers_coefficients_from_figures_that_follow_the_model():
    """Seconds made from known coefficients with budget's formulas come back as those coefficients."""
    truth = {"fit_s": 0.05, "fit_unit_s": 2e-8, "doc_s": 0.01, "doc_char_s": 3e-6}
    fitted = []
    for n, k, chars in ((30, 3, 200), (100, 10, 800), (200, 20, 2000), (60, 6, 500), (150, 4, 1200)):
        examples = bc.synthetic(n, k, chars)
        plan = bc.make_plan(examples, **bc.SERVICE_PROTOCOL)
        shape = budget.PlanShape.of(examples, plan)
        seconds = (shape.fits * (truth["fit_s"] + truth["fit_unit_s"] * shape.train_chars * shape.labels)
                   + shape.n * (truth["doc_s"] + truth["doc_char_s"] * shape.chars))
        fitted.append({"arm": "tfidf_logreg", "plan": shape.__dict__, "seconds": seconds})
    nli = [{"labels": k, "chars": c, "seconds": 0.2 + 1e-3 * k * min(512, c / 4 + 6 / 4 + 3)}
           for k, c in ((2, 100), (3, 400), (8, 2000), (4, 1000))]
    coef = bc.fit(fitted, nli, [])
    for key, value in truth.items():
        assert coef["tfidf_logreg"][key] == pytest.approx(value, rel=1e-3), key
    assert coef["nli"] == pytest.approx({"doc_s": 0.2, "pair_token_s": 1e-3}, rel=1e-3)


def test_synthetic_examples_have_the_shape_asked_for():
    examples = bc.synthetic(12, 3, 100)
    assert len(examples) == 12 and {e.label for e in examples} == {0, 1, 2}
    assert all(len(e.text) <= 100 and len(e.text) > 80 and e.labels == ("label0", "label1", "label2") for e in examples)


def test_usage_mistakes_are_one_line(tmp_path, capsys):
    for argv in (["--parts", "gpu"], ["--model-dir", str(tmp_path), "--parts", "nli"]):
        with pytest.raises(SystemExit) as exc:
            bc.main(argv)
        assert exc.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1, argv
