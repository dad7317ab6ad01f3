"""zsnli.runtime.embedding.SentenceEncoder: truncation to the encoder's own window."""

from __future__ import annotations

import numpy as np
from conftest import WINDOW

from zsnli.runtime.embedding import EMBEDDING_MAX_LENGTH, SentenceEncoder


def test_texts_longer_than_a_small_encoder_window_are_truncated_not_refused(bert_dir):
    enc = SentenceEncoder(bert_dir)
    assert enc.max_length == min(EMBEDDING_MAX_LENGTH, WINDOW) == WINDOW
    long_text = " ".join(["the striker scored twice"] * 100)  # far over 64 tokens
    assert len(enc.tokenizer(long_text)["input_ids"]) > WINDOW
    out = enc.encode([long_text, "sport"])
    assert out.shape == (2, enc.model.config.hidden_size) and np.all(np.isfinite(out))
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
