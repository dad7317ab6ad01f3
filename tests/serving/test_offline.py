"""zsnli.serving.offline: the blocking wrappers around the service (what a batch job calls)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cached_loader, direct_probabilities, make_settings

from zsnli.errors import ApiError
from zsnli.serving.offline import OfflineClassifier, classify_documents

TEXT = "The striker scored twice as the home side won the derby."
LABELS = ["sport", "business", "science"]
TEMPLATE = "This text is about {}."


def test_classify_documents_blocking(bert_dir):
    docs = [{"text": TEXT, "labels": LABELS, "hypothesis_template": TEMPLATE}]
    (probs,) = classify_documents(docs, make_settings(bert_dir), loader=cached_loader)
    np.testing.assert_allclose(probs, direct_probabilities(cached_loader(make_settings(bert_dir)), TEXT, LABELS, TEMPLATE),
                               atol=1e-6)


def test_failed_load_raises_without_signalling(bert_dir):
    def broken(settings):
        raise OSError("weights unreadable")

    with pytest.raises(RuntimeError, match="weights unreadable"):
        classify_documents([{"text": TEXT, "labels": LABELS}], make_settings(bert_dir, exit_on_startup_error=True),
                           loader=broken)


def test_offline_classifier_loads_once_and_answers_many_calls(bert_dir):
    with OfflineClassifier(make_settings(bert_dir), loader=cached_loader) as clf:
        model = clf.service.state.model
        first = clf.classify_many([{"text": TEXT, "labels": LABELS}])
        second = clf.classify_many([{"text": TEXT, "labels": LABELS}, {"text": TEXT, "labels": ["sport " * 100]}])
        assert clf.service.state.model is model
        assert first[0] == second[0] and isinstance(second[1], ApiError)
    assert clf.service.state.batcher._closed  # stopped on exit
