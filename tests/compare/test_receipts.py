"""The one receipt format: signed and unsigned round trips, any changed field fails, wrong key fails, key file
mode, the verify-receipt command line. (The CLI's and the service's receipts of one bake-off: test_engine_parity.)"""

from __future__ import annotations

import copy
import json
import stat

import pytest

from zsnli.compare.receipt_cli import main
from zsnli.compare.receipts import RECEIPT_VERSION, Signer, receipt_payload, seal, signer_for, verify
from zsnli.manifest import canonical_json


def signed_answer(signer: Signer) -> dict:
    preds = [{"expected": e, "predicted": p, "probabilities": [0.7, 0.3] if p == "access" else [0.2, 0.8]}
             for e, p in (("access", "access"), ("billing", "billing"), ("access", "billing"))]
    answer = {"id": "bo_" + "a" * 32, "created_at": "2026-12-01T00:00:00.000000Z", "task_description": "support",
              "labels": {"access": "access", "billing": "billing"}, "n": 3, "winner": "served_about",
              "scorecard": [{"rank": 1, "arm": "served_about", "role": "incumbent", "accuracy": 0.6667,
                             "macro_f1": 0.6667, "ece": 0.1234, "n": 3, "latency_ms_p50": 41.5, "status": "scored",
                             "reliability": [], "predictions": preds},
                            {"rank": 2, "arm": "majority", "role": "incumbent", "accuracy": None, "macro_f1": None,
                             "ece": None, "n": 0, "latency_ms_p50": None, "status": "failed", "error": "boom"}]}
    arms = {"served_about": {"model_sha256": "m" * 64, "calibration_sha256": "c" * 64, "code_version": "zsnli 0.1.0"}}
    answer["receipt"] = seal(answer, "e" * 64, arms, signer, not_run={"majority": "boom"})
    return answer


def cli_report() -> dict:
    """The fields of a ``validate.py bakeoff`` report that matter here, sealed unsigned."""
    report = {"tool": "zsnli validate bakeoff", "version": "0.1.0", "created_unix": 1764547200.5,
              "suite": {"name": "ci", "path": "suites/ci.toml"}, "examples": {"sha256": "e" * 64, "n": 3},
              "arms": [{"name": "majority", "identity": {"model_sha256": None}, "scores": {"means": {"macro_f1": 0.25}}}],
              "leaderboard": [{"arm": "majority", "macro_f1": 0.25, "error": None}]}
    report["receipt"] = seal(report, "e" * 64, {"majority": {"model_sha256": None}})
    return report


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
    assert obj["key_order"] == {"labels": ["access", "billing"]}  # the label order is signed
    assert answer["receipt"]["version"] == obj["receipt_version"] == RECEIPT_VERSION


def test_unsigned_receipt_checks_the_hash_only():
    report = cli_report()
    assert report["receipt"]["signature"] is None and report["receipt"]["key_id"] is None
    assert set(report["receipt"]) == {"version", "sha256", "signature", "key_id", "examples_sha256", "arms", "not_run"}
    assert verify(report, allow_unsigned=True) == []
    assert any("not accepted without --allow-unsigned" in p for p in verify(report))  # never valid by default
    report["leaderboard"][0]["macro_f1"] = 0.5
    assert any("sha256 mismatch" in p for p in verify(report, allow_unsigned=True))


def test_an_unsigned_receipt_is_not_vouched_for_by_a_key(signer):
    assert any("not signed" in p for p in verify(cli_report(), signer.public_pem().encode()))
    assert any("public key is needed" in p for p in verify(signed_answer(signer)))


def test_signer_for_flag_env_or_none(tmp_path):
    assert signer_for(None, env={}) is None
    from_env = signer_for(None, env={"ZSNLI_RECEIPT_KEY": str(tmp_path / "env.pem")})
    assert from_env.path == tmp_path / "env.pem" and from_env.path.is_file()  # created on first use
    flag = signer_for(tmp_path / "flag.pem", env={"ZSNLI_RECEIPT_KEY": str(tmp_path / "env.pem")})
    assert flag.path == tmp_path / "flag.pem"
    (tmp_path / "junk.pem").write_text("not a key")
    from zsnli.compare.receipts import ReceiptError

    with pytest.raises(ReceiptError, match="junk.pem: not a readable"):
        signer_for(tmp_path / "junk.pem", env={})


@pytest.mark.parametrize("path, value", [
    (("scorecard", 0, "macro_f1"), 0.99), (("scorecard", 0, "ece"), 0.1235), (("winner",), "majority"),
    (("task_description",), "support!"), (("created_at",), "2026-12-01T00:00:01.000000Z"),
    (("receipt", "examples_sha256"), "f" * 64), (("receipt", "arms", "served_about", "model_sha256"), "n" * 64),
    (("scorecard", 0, "predictions", 2, "predicted"), "access"),  # a retained prediction rewritten
    (("scorecard", 0, "predictions", 0, "probabilities"), [0.1, 0.9]),
    (("scorecard", 0, "reliability"), [{"lo": 0.0}]), (("scorecard", 1, "error"), "fine"),
    (("scorecard", 0, "role"), "challenger"), (("labels", "billing"), "money"),
])
def test_any_change_fails_verification(signer, path, value):
    answer = copy.deepcopy(signed_answer(signer))
    target = answer
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    problems = verify(answer, signer.public_pem().encode())
    assert any("signature does not match" in p for p in problems)
    assert any("sha256 mismatch" in p for p in problems)


def test_reordered_or_reshaped_labels_and_dropped_predictions_fail(signer):
    answer = signed_answer(signer)
    answer["labels"] = dict(reversed(list(answer["labels"].items())))
    assert any("signature does not match" in p for p in verify(answer, signer.public_pem().encode()))
    answer = signed_answer(signer)
    answer["labels"] = [[name, description] for name, description in answer["labels"].items()]  # same pairs, a list
    assert any("signature does not match" in p for p in verify(answer, signer.public_pem().encode()))
    answer = signed_answer(signer)
    del answer["scorecard"][0]["predictions"]
    assert any("signature does not match" in p for p in verify(answer, signer.public_pem().encode()))


def test_fields_outside_the_receipt_and_older_versions_are_not_vouched_for(signer):
    pem = signer.public_pem().encode()
    answer = signed_answer(signer)
    answer["verdict"] = "approved"  # every report field is covered: an added one breaks the signature
    assert any("signature does not match" in p for p in verify(answer, pem))
    answer = signed_answer(signer)
    answer["receipt"]["note"] = "x"
    assert any("receipt.note" in p for p in verify(answer, pem))
    for version in (None, 2):
        answer = signed_answer(signer)
        if version is None:
            del answer["receipt"]["version"]
        else:
            answer["receipt"]["version"] = version
        assert any(f"version {version or 1} is not {RECEIPT_VERSION}" in p for p in verify(answer, pem))


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


def test_cli_accepts_an_unsigned_report_only_by_the_explicit_flag(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ZSNLI_RECEIPT_KEY", raising=False)
    report = cli_report()
    path = tmp_path / "bakeoff.json"
    path.write_text(json.dumps(report, indent=2))
    assert main([str(path)]) == 1  # unsigned: anyone can recompute a sha256
    out = capsys.readouterr().out
    assert out.startswith("INVALID: the receipt is unsigned") and "--allow-unsigned" in out and "valid:" not in out
    assert main([str(path), "--allow-unsigned"]) == 0
    assert capsys.readouterr().out.startswith("valid (unsigned, accepted by --allow-unsigned)")
    report["arms"][0]["scores"]["means"]["macro_f1"] = 0.9
    path.write_text(json.dumps(report))
    assert main([str(path), "--allow-unsigned"]) == 1
    assert "sha256 mismatch" in capsys.readouterr().out


def test_cli_needs_a_key_for_a_signed_receipt(signer, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "absent.pem"))
    path = tmp_path / "a.json"
    path.write_text(json.dumps(signed_answer(signer)))
    assert main([str(path)]) == 2
    assert "--public-key is needed" in capsys.readouterr().err
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(signer.path))  # the local key's public half
    assert main([str(path)]) == 0


def test_cli_refuses_a_duplicate_key_whose_first_value_is_forged(signer, tmp_path, capsys):
    answer = signed_answer(signer)
    key = tmp_path / "key.pem"
    key.write_text(signer.public_pem())
    text = json.dumps(answer)
    forged = tmp_path / "forged.json"
    forged.write_text(text.replace('"winner": "served_about"', '"winner": "majority", "winner": "served_about"', 1))
    assert json.loads(forged.read_text())["winner"] == "served_about"  # the last value is the signed one
    assert main([str(forged), "--public-key", str(key)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("INVALID: key 'winner' is given more than once") and "valid:" not in out
    nested = tmp_path / "nested.json"
    nested.write_text(text.replace('"arm": "majority"', '"arm": "served", "arm": "majority"', 1))
    assert main([str(nested), "--public-key", str(key)]) == 1


def test_cli_says_what_it_vouches_for(signer, tmp_path, capsys):
    good, key = tmp_path / "good.json", tmp_path / "key.pem"
    good.write_text(json.dumps(signed_answer(signer)))
    key.write_text(signer.public_pem())
    assert main([str(good), "--public-key", str(key)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("valid: receipt ") and len(out) == 3
    for field in ("labels with their order", "predictions when retained", "winner", "every field of the report",
                  "calibration", "arms that did not run", "version"):
        assert field in out[1]
    assert out[2] == "arms that did not run (1, signed): majority: boom"


@pytest.mark.parametrize("content", ["[]", "null", "3", '"text"', "{}", '{"receipt": []}',
                                     "RECEIPT_NO_SHA", "RECEIPT_SIGNATURE_NUMBER", "RECEIPT_NO_ARMS"])
def test_cli_input_that_is_not_an_answer_is_one_line_exit_2(signer, tmp_path, capsys, content):
    answer = signed_answer(signer)
    receipt = answer["receipt"]
    variants = {"RECEIPT_NO_SHA": {**answer, "receipt": {k: v for k, v in receipt.items() if k != "sha256"}},
                "RECEIPT_SIGNATURE_NUMBER": {**answer, "receipt": {**receipt, "signature": 3}},
                "RECEIPT_NO_ARMS": {**answer, "receipt": {k: v for k, v in receipt.items() if k != "arms"}}}
    path, key = tmp_path / "in.json", tmp_path / "key.pem"
    path.write_text(json.dumps(variants[content]) if content in variants else content)
    key.write_text(signer.public_pem())
    assert main([str(path), "--public-key", str(key)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured
    assert "Traceback" not in captured.err and "is not a bake-off report with a receipt" in captured.err


def _resealed_unsigned(report: dict) -> dict:
    """``report`` with its signature and key id stripped and its sha256 recomputed: what anyone can make."""
    body = {k: v for k, v in report.items() if k != "receipt"}
    receipt = seal(body, report["receipt"]["examples_sha256"], report["receipt"]["arms"])
    return {**body, "receipt": receipt}


def _forgeries(signer: Signer, other: Signer) -> dict[str, dict]:
    """Forged service answers (issue 31 item 3): the winner changed, then sealed the ways a forger can."""
    genuine = signed_answer(signer)
    changed = {**copy.deepcopy(genuine), "winner": "majority"}
    stripped = _resealed_unsigned(changed)  # signature and key_id null, sha256 recomputed
    kept_key_id = copy.deepcopy(stripped)
    kept_key_id["receipt"]["key_id"] = genuine["receipt"]["key_id"]  # signature null, key id kept
    as_cli = _resealed_unsigned({**{k: v for k, v in changed.items() if k != "id"}, "tool": "zsnli validate bakeoff"})
    other_key = {**changed, "receipt": seal({k: v for k, v in changed.items() if k != "receipt"}, "e" * 64,
                                            genuine["receipt"]["arms"], other)}  # signed, by another key
    changed_key_id = copy.deepcopy(other_key)
    changed_key_id["receipt"]["key_id"] = genuine["receipt"]["key_id"]  # another key's signature, our key id
    another_report = copy.deepcopy(changed)  # the genuine signature of another report
    another_report["receipt"]["sha256"] = stripped["receipt"]["sha256"]
    no_key_id = copy.deepcopy(genuine)
    no_key_id["receipt"]["key_id"] = None
    added = copy.deepcopy(genuine)
    added["note"] = "checked by the auditors"  # a field added beside the signature
    added_receipt = copy.deepcopy(genuine)
    added_receipt["receipt"]["signed_by"] = "auditors"  # a receipt field outside the format
    return {"stripped": stripped, "stripped, key id kept": kept_key_id, "stripped, passed off as a CLI report": as_cli,
            "signed by another key": other_key, "another key, our key id": changed_key_id,
            "signature of another report": another_report, "key id removed": no_key_id,
            "field added": added, "receipt field added": added_receipt}


FORGERY_KINDS = ("stripped", "stripped, key id kept", "stripped, passed off as a CLI report", "signed by another key",
                 "another key, our key id", "signature of another report", "key id removed", "field added",
                 "receipt field added")


@pytest.mark.parametrize("kind", FORGERY_KINDS)
def test_no_forgery_verifies_with_exit_0(signer, tmp_path, capsys, monkeypatch, kind):
    """Issue 31 item 3: with or without --public-key, with or without a local key, with or without
    --allow-unsigned, no forgery exits 0; a signature stripped never turns a refusal into a pass."""
    forged = _forgeries(signer, Signer(tmp_path / "other.pem"))[kind]
    path, key = tmp_path / "forged.json", tmp_path / "key.pem"
    path.write_text(json.dumps(forged))
    key.write_text(signer.public_pem())
    for local in (str(tmp_path / "absent.pem"), str(signer.path)):
        monkeypatch.setenv("ZSNLI_RECEIPT_KEY", local)
        for flags in ([], ["--allow-unsigned"], ["--public-key", str(key)],
                      ["--public-key", str(key), "--allow-unsigned"]):
            code = main([str(path), *flags])
            out = capsys.readouterr().out
            assert code in (1, 2) and "valid:" not in out and "valid (" not in out, (kind, local, flags, out)
            if forged["receipt"]["signature"] is None or "--public-key" in flags or local == str(signer.path):
                assert code == 1 and out.startswith("INVALID: "), (kind, local, flags, out)


def test_an_unsigned_service_answer_is_refused_even_with_the_flag(signer, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ZSNLI_RECEIPT_KEY", raising=False)
    stripped = _forgeries(signer, Signer(tmp_path / "other.pem"))["stripped"]
    assert any("service answer" in p for p in verify(stripped, allow_unsigned=True))
    assert any("carries no signature" in p
               for p in verify(_forgeries(signer, Signer(tmp_path / "o2.pem"))["stripped, key id kept"],
                               allow_unsigned=True))
    genuine = tmp_path / "genuine.json"
    genuine.write_text(json.dumps(signed_answer(signer)))
    assert main([str(genuine)]) == 2  # signed, no key to check it: not a pass either


def test_a_non_canonical_spelling_of_the_signature_is_refused(signer):
    """Issue 48: base64 has unused bits in its last character; setting them spells other text for the same
    bytes. A receipt's signature has one spelling (RFC 4648 section 3.5), so any other is a problem."""
    import base64 as b64

    answer = signed_answer(signer)
    pem = signer.public_pem().encode()
    assert verify(answer, pem) == []
    sig = answer["receipt"]["signature"]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    body = sig.rstrip("=")
    last = alphabet.index(body[-1])
    spellings = [body[:-1] + alphabet[last ^ bit] + sig[len(body):] for bit in (1, 2, 3)]
    for other in spellings:
        assert b64.b64decode(other) == b64.b64decode(sig) and other != sig
        changed = copy.deepcopy(answer)
        changed["receipt"]["signature"] = other
        assert any("not canonical base64" in p for p in verify(changed, pem)), other


# ---- issue 57: the version is signed as written, numbers have one spelling, the arms that did not run ----------


@pytest.mark.parametrize("version", [3.0, True, "3", 4])
def test_a_version_other_than_the_integer_3_is_refused(signer, version):
    """Issue 57: a receipt's version was not signed: 3.0 and 3e0 both verified."""
    answer = signed_answer(signer)
    pem = signer.public_pem().encode()
    assert verify(answer, pem) == []
    answer["receipt"]["version"] = version
    problems = verify(answer, pem)
    assert any(f"receipt version {version!r} is not 3" in p for p in problems), problems
    assert any("sha256 mismatch" in p for p in problems)  # the version is in the signed bytes as written


@pytest.mark.parametrize("old, new", [('"version": 3,', '"version": 3e0,'), ('"version": 3,', '"version": 3.0,'),
                                      ('"macro_f1": 0.6667', '"macro_f1": 6.667e-1'),
                                      ('"macro_f1": 0.6667', '"macro_f1": 0.66670'), ('"n": 3', '"n": 3E0'),
                                      ('"n": 3', '"n": -0'), ('"ece": 0.1234', '"ece": NaN')])
def test_a_number_respelt_in_the_file_is_refused(signer, tmp_path, capsys, old, new):
    answer = signed_answer(signer)
    good, forged, key = tmp_path / "good.json", tmp_path / "forged.json", tmp_path / "key.pem"
    good.write_text(json.dumps(answer))
    key.write_text(signer.public_pem())
    assert main([str(good), "--public-key", str(key)]) == 0
    capsys.readouterr()
    assert old in good.read_text()
    forged.write_text(good.read_text().replace(old, new, 1))
    assert main([str(forged), "--public-key", str(key)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("INVALID: ") and "valid:" not in out, out
    token = new.split(": ")[1].rstrip(",")
    if token == "3.0":  # canonical for a float: refused as a version that is not the integer 3 (and its hash)
        assert "receipt version 3.0 is not 3" in out and "sha256 mismatch" in out
    else:
        assert f"INVALID: the number '{token}'" in out


def test_the_arms_that_did_not_run_are_signed_in_the_receipt(signer, tmp_path, capsys):
    answer = signed_answer(signer)
    pem = signer.public_pem().encode()
    assert answer["receipt"]["not_run"] == {"majority": "boom"} and verify(answer, pem) == []
    for forge in (lambda r: r["not_run"].clear(), lambda r: r.pop("not_run"),
                  lambda r: r["not_run"].update({"served_about": "timed out"})):
        forged = copy.deepcopy(answer)
        forge(forged["receipt"])
        assert any("sha256 mismatch" in p for p in verify(forged, pem))
    bad = copy.deepcopy(answer)
    bad["receipt"]["not_run"] = ["majority"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    (tmp_path / "key.pem").write_text(signer.public_pem())
    assert main([str(path), "--public-key", str(tmp_path / "key.pem")]) == 2
    assert "receipt.not_run" in capsys.readouterr().err


def test_a_receipt_sealed_before_not_run_existed_verifies_and_says_it_does_not_list_them(signer, tmp_path, capsys):
    """Receipts written before issue 57 (no not_run key) verify as they did; the command line says what they lack."""
    answer = signed_answer(signer)
    del answer["receipt"]
    receipt = {"version": 3, "examples_sha256": "e" * 64, "arms": {"majority": {"model_sha256": None}}}
    data = canonical_json(receipt_payload(answer, receipt["examples_sha256"], receipt["arms"]))  # the old payload
    import hashlib

    receipt["sha256"] = hashlib.sha256(data).hexdigest()
    receipt["signature"], receipt["key_id"] = signer.sign_bytes(data)
    answer["receipt"] = receipt
    assert verify(answer, signer.public_pem().encode()) == []
    path, key = tmp_path / "old.json", tmp_path / "key.pem"
    path.write_text(json.dumps(answer))
    key.write_text(signer.public_pem())
    assert main([str(path), "--public-key", str(key)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("arms that did not run: not listed")


def test_public_key_flag_takes_the_private_key_that_signed_and_a_file_that_is_no_key_is_one_line(signer, tmp_path,
                                                                                                  capsys):
    """The --receipt-key file is the only key a command-line user holds: its public half checks the receipt."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(signed_answer(signer)))
    assert main([str(good), "--public-key", str(signer.path)]) == 0
    assert capsys.readouterr().out.startswith("valid: receipt ")
    other = Signer(tmp_path / "other.pem")
    other.private_key()
    assert main([str(good), "--public-key", str(other.path)]) == 1  # another private key: its half does not match
    assert "key id mismatch" in capsys.readouterr().out
    for name, content in (("garbage.pem", "-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n"),
                          ("text.pem", "hello\n"), ("empty.pem", "")):
        (tmp_path / name).write_text(content)
        assert main([str(good), "--public-key", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"validate.py verify-receipt: error: --public-key {tmp_path / name}: not ")
        assert "Error" not in err and "--receipt-key" in err and "/v1/receipts/public-key" in err


def test_an_unreadable_public_key_names_its_flag_not_only_a_path(signer, tmp_path, capsys):
    """``--public-key DIR`` said ``verify-receipt: cannot read DIR: Is a directory``, which reads as the report's
    fault; a key path that is missing or a directory names --public-key, one line, exit 2."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(signed_answer(signer)))
    for key in (tmp_path, tmp_path / "missing.pem"):
        assert main([str(good), "--public-key", str(key)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"validate.py verify-receipt: error: --public-key {key}: cannot read it ("), err
    assert main([str(tmp_path / "missing.json"), "--public-key", str(signer.path)]) == 2  # the report's own fault
    assert capsys.readouterr().err.startswith(f"validate.py verify-receipt: error: cannot read {tmp_path / 'missing.json'}: ")
