"""Signed receipts: sign/verify round trip, one changed number fails, wrong key fails, key file mode, CLI."""

from __future__ import annotations

import copy
import json
import stat

import pytest

from zsnli.compare.service.receipts import Signer, main, receipt_payload, verify
from zsnli.manifest import canonical_json


def signed_answer(signer: Signer) -> dict:
    answer = {"id": "bo_" + "a" * 32, "created_at": "2026-12-01T00:00:00.000000Z", "task_description": "support",
              "labels": {"access": "access", "billing": "billing"}, "n": 3, "winner": "served_about",
              "scorecard": [{"rank": 1, "arm": "served_about", "role": "incumbent", "accuracy": 1.0, "macro_f1": 1.0,
                             "ece": 0.1234, "n": 3, "latency_ms_p50": 41.5, "status": "scored", "reliability": []}]}
    arms = {"served_about": {"model_sha256": "m" * 64, "calibration_sha256": "c" * 64, "code_version": "zsnli 0.1.0"}}
    receipt = signer.sign(receipt_payload(answer, "e" * 64, arms))
    answer["receipt"] = {**receipt, "examples_sha256": "e" * 64, "arms": arms}
    return answer


@pytest.fixture
def signer(tmp_path):
    return Signer(tmp_path / "keys" / "receipt.pem")


def test_round_trip_and_key_file(signer):
    answer = signed_answer(signer)
    assert verify(answer, signer.public_pem().encode()) == []
    mode = stat.S_IMODE(signer.path.stat().st_mode)
    assert mode == 0o600
    assert len(answer["receipt"]["key_id"]) == 16
    # a second signer on the same path reuses the key
    assert Signer(signer.path).key_id() == signer.key_id()


def test_canonical_payload_is_sorted_and_compact(signer):
    answer = signed_answer(signer)
    data = canonical_json(receipt_payload(answer, "e" * 64, answer["receipt"]["arms"]))
    obj = json.loads(data)
    assert list(obj) == sorted(obj) and b": " not in data and b", " not in data


@pytest.mark.parametrize("path, value", [
    (("scorecard", 0, "macro_f1"), 0.99), (("scorecard", 0, "ece"), 0.1235), (("winner",), "majority"),
    (("task_description",), "support!"), (("created_at",), "2026-12-01T00:00:01.000000Z"),
    (("receipt", "examples_sha256"), "f" * 64), (("receipt", "arms", "served_about", "model_sha256"), "n" * 64),
])
def test_any_change_fails_verification(signer, path, value):
    answer = copy.deepcopy(signed_answer(signer))
    target = answer
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    problems = verify(answer, signer.public_pem().encode())
    assert any("signature does not match" in p for p in problems)


def test_another_key_fails(signer, tmp_path):
    answer = signed_answer(signer)
    other = Signer(tmp_path / "other.pem")
    problems = verify(answer, other.public_pem().encode())
    assert any("key id mismatch" in p for p in problems) and any("signature" in p for p in problems)


def test_cli_exit_codes(signer, tmp_path, capsys):
    answer = signed_answer(signer)
    good, bad, key = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "key.pem"
    good.write_text(json.dumps(answer))
    answer["scorecard"][0]["accuracy"] = 0.5
    bad.write_text(json.dumps(answer))
    key.write_text(signer.public_pem())
    assert main([str(good), "--public-key", str(key)]) == 0
    assert "valid" in capsys.readouterr().out
    assert main([str(bad), "--public-key", str(key)]) == 1
    assert "INVALID" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.json"), "--public-key", str(key)]) == 2
    from zsnli.compare.cli import main as validate_main  # python validate.py verify-receipt ...

    assert validate_main(["verify-receipt", str(good), "--public-key", str(key)]) == 0
    assert validate_main(["verify-receipt", str(bad), "--public-key", str(key)]) == 1
    (tmp_path / "junk.json").write_text("{not json")
    assert main([str(tmp_path / "junk.json"), "--public-key", str(key)]) == 2
