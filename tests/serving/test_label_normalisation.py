"""Labels the model cannot read (issue 48): every route that takes labels NFKC-normalises them (fullwidth, ligatures,
other compatibility forms read as their plain letters), and a label whose tokens are all the unknown token is a 422
naming ``labels[i]``, as a label empty after normalisation is; answers echo the labels as sent."""

from __future__ import annotations

import pytest
from conftest import running_app

pytestmark = pytest.mark.anyio

TEXT = "A small cafe near the stadium serves coffee before every match."
# compatibility forms of "finance": fullwidth Latin, the fi ligature, circled letters are not NFKC-equal (left out)
FORMS = ["\uff46\uff49\uff4e\uff41\uff4e\uff43\uff45", "\ufb01nance", "f\u0131nance".replace("\u0131", "i"),
         "\U0001d41f\U0001d422\U0001d427\U0001d41a\U0001d427\U0001d41c\U0001d41e"]  # mathematical bold
# emoji, Gothic, symbols in two words, Egyptian hieroglyphs: in no tiny vocabulary (nor the shipped model's)
UNREADABLE = ["\U0001f680", "\U00010330\U00010331", "\u2603 \U0001f680", "\U00013000\U00013001"]


async def test_compatibility_forms_score_as_the_plain_label(model_dir, make_app):
    async with running_app(make_app(model_dir)) as client:
        for form in FORMS:
            r = await client.post("/classify", json={"text": TEXT, "labels": ["finance", form, "sport"]})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["labels"] == ["finance", form, "sport"]  # echoed as sent
            p = body["probabilities"]
            assert p[0] == pytest.approx(p[1], abs=1e-6), (form, p)


@pytest.mark.parametrize("template", [None, "This text is about {}."])
async def test_a_label_read_only_as_unknown_tokens_is_refused(model_dir, make_app, template):
    async with running_app(make_app(model_dir)) as client:
        tok = client._transport.app.state.classifier.state.model.tokenizer
        if tok.unk_token_id is None:
            pytest.skip("this tokenizer has no unknown token")
        for i, bad in enumerate(UNREADABLE):
            labels = ["finance", "sport", bad][: 2] + [bad] if i % 2 else [bad, "finance"]
            where = labels.index(bad)
            r = await client.post("/classify", json={"text": TEXT, "labels": labels, "hypothesis_template": template})
            assert r.status_code == 422, (bad, r.text)
            body = r.json()
            assert body["field"] == f"labels[{where}]" and "[UNK]" in body["error"], body
        r = await client.post("/v1/zero-shot-classification",
                              json={"inputs": TEXT, "parameters": {"candidate_labels": ["sport", UNREADABLE[0]]}})
        assert r.status_code == 422 and r.json()["field"] == "parameters.candidate_labels[1]", r.text
        # a label with known tokens beside an unknown one is read, not refused
        r = await client.post("/classify", json={"text": TEXT, "labels": ["sport \U0001f680", "finance"]})
        assert r.status_code == 200, r.text
