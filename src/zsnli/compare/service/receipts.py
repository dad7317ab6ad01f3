"""Signed receipts of bake-offs: canonical JSON, its sha256, an Ed25519 signature; offline verification.

What is signed (receipt ``version`` 2, `receipt_payload`): everything the API answers and the pages show
as the result. The payload is the canonical JSON (sorted keys, no whitespace, UTF-8;
`zsnli.manifest.canonical_json`) of::

    {"receipt_version": 2, "id", "created_at", "task_description",
     "labels": [[name, description], ...]            -- in the answer's order (the order is signed),
     "n", "examples_sha256",
     "arms": {arm name: identity (model_sha256, calibration_sha256, code_version, params)},
     "scorecard": [every entry, every field: rank, arm, role, metrics, status, error, reliability,
                   and "predictions" when the request set retain],
     "winner"}

``receipt = {"version": 2, "sha256": hex sha256 of the payload, "signature": base64 Ed25519 signature
of the payload bytes, "key_id": first 16 hex of sha256(raw 32-byte public key), "examples_sha256",
"arms"}`` (the last two are carried in the receipt so that anyone holding the answer can rebuild the
payload). `verify` also refuses an answer with a field the signature does not cover (`ANSWER_KEYS`,
`RECEIPT_KEYS`), and `main` refuses a file with a key given twice in any object (a reader could take
either value). A version-1 receipt (before labels order and predictions were signed) is not vouched for.

The private key lives at ``ZSNLI_RECEIPT_KEY`` (PKCS#8 PEM), created with mode 0600 on first use.
``cryptography`` is imported lazily, so the server starts without it (bake-offs then answer 503).
``python validate.py verify-receipt FILE [--public-key PEM]`` runs `main`.
Imports only `zsnli.manifest` (and ``cryptography`` inside functions).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Sequence

from zsnli.manifest import canonical_json

RECEIPT_VERSION = 2
PAYLOAD_KEYS = ("id", "created_at", "task_description", "n", "winner")
#: Top-level keys of a bake-off answer; each is signed (``receipt`` holds the signature and signed inputs).
ANSWER_KEYS = frozenset({*PAYLOAD_KEYS, "labels", "scorecard", "receipt"})
#: Keys of ``answer["receipt"]``: the signature itself and the signed ``examples_sha256`` and ``arms``.
RECEIPT_KEYS = frozenset({"version", "sha256", "signature", "key_id", "examples_sha256", "arms"})
#: What a valid receipt vouches for, as `main` prints it.
COVERED = ("id, created_at, task_description, labels (names, descriptions and their order), n, examples_sha256 "
           "(the examples), arms (model, calibration and code identities), scorecard (every field of every entry, "
           "predictions included when retained), winner")


class ReceiptError(RuntimeError):
    """The key cannot be created or read, or ``cryptography`` is missing."""


class NotAnAnswer(ValueError):
    """The input is not a bake-off answer with a receipt (wrong JSON type or shape); one-line message."""


def receipt_payload(answer: dict[str, Any], examples_sha256: str, arms: dict[str, Any]) -> dict[str, Any]:
    """The object that is hashed and signed (see module docstring); ``answer`` is the bake-off answer.

    ``labels`` becomes a list of ``[name, description]`` pairs so that its order is part of the signature
    (canonical JSON sorts object keys). Raises `NotAnAnswer` when a field has the wrong JSON type.
    """
    check_shape(answer)
    payload = {k: answer[k] for k in PAYLOAD_KEYS}
    payload["receipt_version"] = RECEIPT_VERSION
    payload["labels"] = [[name, description] for name, description in answer["labels"].items()]
    payload["scorecard"] = answer["scorecard"]
    payload["examples_sha256"] = examples_sha256
    payload["arms"] = arms
    return payload


def check_shape(answer: Any) -> None:
    """Raise `NotAnAnswer` unless ``answer`` has the JSON types of a bake-off answer (object, ``labels``
    an object of strings, ``scorecard`` a list of objects, ``n`` an integer, strings where strings belong)."""
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise NotAnAnswer(what)

    need(isinstance(answer, dict), f"the top level is {_json_type(answer)}, not an object")
    missing = [k for k in (*PAYLOAD_KEYS, "labels", "scorecard") if k not in answer]
    need(not missing, f"missing field(s): {', '.join(missing)}")
    for key in ("id", "created_at", "task_description"):
        need(isinstance(answer[key], str), f"{key} is {_json_type(answer[key])}, not a string")
    need(isinstance(answer["n"], int) and not isinstance(answer["n"], bool), f"n is {_json_type(answer['n'])}, "
         "not an integer")
    need(answer["winner"] is None or isinstance(answer["winner"], str), "winner is neither a string nor null")
    labels = answer["labels"]
    need(isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values()),
         "labels is not an object of name -> description strings")
    need(isinstance(answer["scorecard"], list) and all(isinstance(e, dict) for e in answer["scorecard"]),
         f"scorecard is {_json_type(answer['scorecard'])}, not a list of objects")


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ReceiptError("signed receipts need the 'cryptography' package (pip install cryptography)") from exc
    return serialization, ed25519


def key_id(public_key) -> str:
    """First 16 hex digits of sha256 of the raw 32-byte Ed25519 public key."""
    serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


class Signer:
    """The receipt key at ``path``: loaded, or created (mode 0600, atomically) on first use."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._key = None
        self._lock = threading.Lock()

    def private_key(self):
        """The Ed25519 private key. Raises ``ReceiptError`` when unreadable or not Ed25519."""
        with self._lock:
            if self._key is None:
                self._key = self._load_or_create()
            return self._key

    def _load_or_create(self):
        serialization, ed25519 = _crypto()
        if not self.path.exists():
            key = ed25519.Ed25519PrivateKey.generate()
            pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".receipt-key-")  # mode 0600
                with os.fdopen(fd, "wb") as handle:
                    handle.write(pem)
                try:
                    os.link(tmp, self.path)  # atomic; fails if another process created it first
                except FileExistsError:
                    pass
                finally:
                    os.unlink(tmp)
            except OSError as exc:
                raise ReceiptError(f"ZSNLI_RECEIPT_KEY={self.path}: cannot create the key: {exc}") from exc
        try:
            key = serialization.load_pem_private_key(self.path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise ReceiptError(f"ZSNLI_RECEIPT_KEY={self.path}: not a readable unencrypted PEM key: {exc}") from exc
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise ReceiptError(f"ZSNLI_RECEIPT_KEY={self.path}: not an Ed25519 key")
        return key

    def public_pem(self) -> str:
        """The public key, SubjectPublicKeyInfo PEM."""
        serialization, _ = _crypto()
        return self.private_key().public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    def key_id(self) -> str:
        return key_id(self.private_key().public_key())

    def sign(self, payload: dict[str, Any]) -> dict[str, str]:
        """``{"sha256", "signature" (base64), "key_id"}`` of ``canonical_json(payload)``."""
        data = canonical_json(payload)
        key = self.private_key()
        return {"sha256": hashlib.sha256(data).hexdigest(),
                "signature": base64.b64encode(key.sign(data)).decode("ascii"), "key_id": key_id(key.public_key())}


def verify(answer: dict[str, Any], public_pem: bytes) -> list[str]:
    """Problems with ``answer``'s receipt against ``public_pem`` (empty list: valid).

    Rebuilds the payload (`receipt_payload`) from the answer and the receipt's ``examples_sha256`` and
    ``arms``, then checks the receipt version, that no field lies outside the signature (`ANSWER_KEYS`,
    `RECEIPT_KEYS`), the sha256, the key id and the Ed25519 signature. Raises `NotAnAnswer` when
    ``answer`` is not a bake-off answer with a receipt (wrong JSON types); ``ValueError`` on a bad PEM.
    """
    serialization, ed25519 = _crypto()
    check_shape(answer)
    receipt = answer.get("receipt")
    if not isinstance(receipt, dict):
        raise NotAnAnswer("no receipt object")
    for key in ("sha256", "signature", "key_id"):
        if not isinstance(receipt.get(key), str):
            raise NotAnAnswer(f"receipt.{key} is missing or not a string")
    if not isinstance(receipt.get("examples_sha256"), str) or not isinstance(receipt.get("arms"), dict):
        raise NotAnAnswer("receipt.examples_sha256 (a string) or receipt.arms (an object) is missing")
    problems = []
    if receipt.get("version") != RECEIPT_VERSION:
        problems.append(f"receipt version {receipt.get('version', 1)!r} is not {RECEIPT_VERSION}: version 1 did not "
                        "sign the label order or the predictions, so it is not vouched for (run the bake-off again)")
    extra = sorted(set(answer) - ANSWER_KEYS) + [f"receipt.{k}" for k in sorted(set(receipt) - RECEIPT_KEYS)]
    if extra:
        problems.append(f"field(s) not covered by the signature: {', '.join(extra)}")
    try:
        signature = base64.b64decode(receipt["signature"], validate=True)
    except ValueError:
        return problems + ["the signature is not base64"]
    data = canonical_json(receipt_payload(answer, receipt["examples_sha256"], receipt["arms"]))
    public = serialization.load_pem_public_key(public_pem)
    if not isinstance(public, ed25519.Ed25519PublicKey):
        return ["the public key is not an Ed25519 key"]
    digest = hashlib.sha256(data).hexdigest()
    if digest != receipt["sha256"]:
        problems.append(f"sha256 mismatch: the answer hashes to {digest}, the receipt says {receipt['sha256']}")
    if key_id(public) != receipt["key_id"]:
        problems.append(f"key id mismatch: the public key is {key_id(public)}, the receipt names {receipt['key_id']}")
    from cryptography.exceptions import InvalidSignature

    try:
        public.verify(signature, data)
    except InvalidSignature:
        problems.append("the Ed25519 signature does not match the answer")
    return problems


class DuplicateKey(ValueError):
    """A JSON object in the verified file gives a key twice."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKey(key)
        obj[key] = value
    return obj


def load_answer(text: str) -> Any:
    """Parse the verified file. Raises `DuplicateKey` for a key given twice in any object (JSON readers
    disagree on which value wins, so a signature cannot vouch for either) and ``ValueError`` for invalid JSON."""
    return json.loads(text, object_pairs_hook=_no_duplicates)


def main(argv: Sequence[str] | None = None) -> int:
    """``verify-receipt FILE [--public-key PEM]``: exit 0 valid, 1 invalid, 2 usage or unreadable input.

    Without ``--public-key`` the public half of the local ``ZSNLI_RECEIPT_KEY`` is used (the server's
    ``GET /v1/receipts/public-key`` gives it to anyone else).
    """
    from zsnli.harness.cli import UsageParser

    p = UsageParser(prog="validate.py verify-receipt", description="Verify the signed receipt of a bake-off answer offline.")
    p.add_argument("file", type=Path, help="a bake-off answer (JSON of POST /v1/bakeoff or GET /v1/bakeoffs/ID)")
    p.add_argument("--public-key", type=Path, default=None,
                   help="PEM public key (GET /v1/receipts/public-key); default: the local ZSNLI_RECEIPT_KEY's")
    args = p.parse_args(argv)
    try:
        answer = load_answer(args.file.read_text(encoding="utf-8"))
        if args.public_key is not None:
            pem = args.public_key.read_bytes()
        else:
            from .settings import BakeoffSettings

            key_path = Path(BakeoffSettings.from_env().key_path)
            if not key_path.is_file():
                print(f"verify-receipt: --public-key is needed (no local key at {key_path})", file=sys.stderr)
                return 2
            pem = Signer(key_path).public_pem().encode()
        problems = verify(answer, pem)
    except DuplicateKey as exc:
        print(f"INVALID: key {str(exc)!r} is given more than once in an object of {args.file}: a reader could take "
              "either value, so the receipt vouches for neither")
        return 1
    except NotAnAnswer as exc:
        print(f"verify-receipt: {args.file} is not a bake-off answer with a receipt: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, ReceiptError) as exc:
        print(f"verify-receipt: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if problems:
        for line in problems:
            print(f"INVALID: {line}")
        return 1
    print(f"valid: receipt {answer['receipt']['sha256']} signed by key {answer['receipt']['key_id']} "
          f"(bake-off {answer['id']}, winner {answer['winner']})")
    print(f"the signature covers: {COVERED}")
    return 0
