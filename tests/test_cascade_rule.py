"""Issue 41 (1): one cascade rule and one request-group rule, held to the same answer by the server, the
selection's out-of-fold figures and the bench, at each edge: K just below and at the cascade's threshold, a
content-free premise, and multi_label.

For each edge request the server's `ZeroShotClassifier.preprocess` (does it prune, which group) and
`postprocess` (its probabilities, from given logits and cosines) are compared with the selection's
`served_probabilities` and `score_dataset` on a one-row cached set holding the same logits and cosines,
and with the bench's `cascade_token_counts` under the rule.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cached_loader, make_settings, running_app

from zsnli.bench.ceiling import cascade_token_counts
from zsnli.request_scoring import Cascade, RequestScoring, prunes, request_group
from zsnli.scoring import ScoringConfig
from zsnli.selection.grouped import GroupCandidate, score_dataset, served_probabilities
from zsnli.selection.score_cache import CONTENT_FREE_PREMISE, CachedSet
from zsnli.serving.app import create_app

pytestmark = pytest.mark.anyio

MIN_LABELS, KEEP, W = 5, 2, 10.0
CASCADE = Cascade(min_labels=MIN_LABELS, keep=KEEP)
PLAIN = RequestScoring(ScoringConfig(embedding_weight=W, embedding_sha256="e" * 64), cascade=CASCADE)
CONTENT_FREE = RequestScoring(ScoringConfig(embedding_weight=W, embedding_sha256="e" * 64,
                                            content_free_premise=CONTENT_FREE_PREMISE), cascade=CASCADE)


def labels(k: int) -> list[str]:
    return [f"topic {chr(97 + i)}" for i in range(k)]


EDGES = [  # (name, scoring, labels, multi_label, pruned by the rule)
    ("K one below the threshold", PLAIN, labels(MIN_LABELS - 1), False, False),
    ("K at the threshold", PLAIN, labels(MIN_LABELS), False, True),
    ("a content-free premise", CONTENT_FREE, labels(MIN_LABELS), False, False),
    ("multi_label", PLAIN, labels(MIN_LABELS), True, False),
]


def one_row_set(hyps: list[str], logits: np.ndarray, cf_logits: np.ndarray, cosine: np.ndarray) -> CachedSet:
    k = len(hyps)
    return CachedSet(name="edge", group="g", task_kind="", classes=list(hyps), hypotheses=list(hyps),
                     hyp_index=np.arange(k), k=np.array([k]), gold=np.array([0]), label_classes=np.arange(k),
                     logits=logits.astype(np.float32), cf_logits=cf_logits.astype(np.float32),
                     cosine=cosine.astype(np.float32), entail_idx=0, contra_idx=2, meta={},
                     premise_tokens=np.array([0]))


def test_the_rule_at_each_edge():
    for name, scoring, hyps, multi, pruned in EDGES:
        config = scoring.config_for(request_group(hyps, multi))
        assert prunes(scoring.cascade, config, len(hyps), multi) is pruned, name
        assert (scoring.pruning(hyps, multi) is not None) is pruned, name
    assert request_group(labels(3), multi_label=True) is None and request_group(labels(3)) == "few"


@pytest.fixture
async def service(bert_dir):
    app = create_app(make_settings(bert_dir), loader=cached_loader)
    async with running_app(app):
        yield app.state.classifier


@pytest.mark.parametrize("name, scoring, hyps, multi, pruned", EDGES, ids=[e[0] for e in EDGES])
async def test_server_selection_and_bench_agree(service, name, scoring, hyps, multi, pruned):
    rng = np.random.default_rng(len(hyps) + 7 * multi)
    k = len(hyps)
    as_cached = lambda a: a.astype(np.float32).astype(np.float64)  # noqa: E731 - the cache stores float32
    logits, cf_logits = as_cached(rng.normal(0, 2, (k, 3))), as_cached(rng.normal(0, 2, (k, 3)))
    cosine = as_cached(rng.uniform(-0.2, 0.8, k))
    entail, contra = service.state.model.entail_idx, service.state.model.contra_idx
    # the cached set holds the logits in the served model's class order
    order = [entail, 3 - entail - contra, contra]

    prep = service.preprocess("A text.", hyps, None, multi, scoring=scoring)
    assert (prep.cascade is not None) is pruned, name
    assert prep.group == request_group(hyps, multi), name
    if multi:
        return  # a multi-label request has no group and no cascade: nothing of the selection applies

    kept = np.arange(k) if not pruned else CASCADE.kept(cosine)
    prep.kept = kept.tolist() if pruned else None
    served_logits = np.zeros((k, 3))
    served_logits[:, order] = logits  # the cached set's columns: entailment, neutral, contradiction
    served_cf = np.zeros((k, 3))
    served_cf[:, order] = cf_logits
    rows = [served_logits[kept]] + ([served_cf] if prep.content_free is not None else [])
    answer = service.postprocess(prep, np.concatenate(rows), cosine)

    cs = one_row_set(hyps, logits, cf_logits, cosine)
    chosen, pairs = served_probabilities(cs, scoring)
    assert pairs == (KEEP if pruned else k), name
    np.testing.assert_allclose(answer, chosen[0], rtol=0, atol=1e-9, err_msg=name)
    if scoring is PLAIN:  # the out-of-fold search scores candidates with the same rule
        assert score_dataset(cs, GroupCandidate("entailment", W), scoring.cascade).pairs_per_row == pairs, name
    tokens = [[10 + i for i in range(k)]]
    left = cascade_token_counts(tokens, CASCADE.min_labels, CASCADE.keep, [scoring.pruning(hyps) is not None])
    assert len(left[0]) == pairs, name
