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


def test_a_text_embeds_the_same_alone_and_padded_in_a_batch(bert_dir):
    """Mean pooling runs over the attention mask: a text's vector does not change with the batch it is in."""
    import torch

    enc = SentenceEncoder(bert_dir)
    texts = ["sport", "the striker scored twice in the second half of the final", "a quiet day at the market"]
    seqs = enc.tokenize(texts)
    assert [len(s) for s in seqs] == [len(enc.tokenizer(t)["input_ids"]) for t in texts]
    together = enc.embed(seqs)
    alone = np.stack([enc.embed([s])[0] for s in seqs])
    np.testing.assert_allclose(together, alone, atol=1e-6)
    # an independent reference: the tokenizer's own padding, mean over real tokens, L2 norm
    batch = enc.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = enc.model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    ref = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    np.testing.assert_allclose(together, ref, atol=1e-6)
    assert enc.embed([]).shape == (0, enc.dim)
    np.testing.assert_allclose(enc.encode(texts, batch_size=2), ref, atol=1e-6)
    np.testing.assert_allclose(enc.cosine(texts[1], [texts[0], texts[2]]), ref[[0, 2]] @ ref[1], atol=1e-6)
