"""Signed receipts of bake-offs: canonical JSON, its sha256, an Ed25519 signature; offline verification.

The signed payload (`receipt_payload`) is the canonical JSON (sorted keys, no whitespace, UTF-8;
`zsnli.manifest.canonical_json`) of::

    {"id", "created_at", "task_description", "labels", "n", "examples_sha256",
     "arms": {arm name: identity (model_sha256, calibration_sha256, code_version, params)},
     "scorecard": [entries without "predictions"], "winner"}

``receipt = {"sha256": hex sha256 of the payload, "signature": base64 Ed25519 signature of the payload
bytes, "key_id": first 16 hex of sha256(raw 32-byte public key), "examples_sha256", "arms"}`` (the last
two are carried in the receipt so that anyone holding the answer can rebuild the payload).

The private key lives at ``ZSNLI_RECEIPT_KEY`` (PKCS#8 PEM), created with mode 0600 on first use.
``cryptography`` is imported lazily, so the server starts without it (bake-offs then answer 503).
``python validate.py verify-receipt FILE [--public-key PEM]`` runs `main`.
Imports only `zsnli.manifest` (and ``cryptography`` inside functions).
"""

from __future__ import annotations

import argparse
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

PAYLOAD_KEYS = ("id", "created_at", "task_description", "labels", "n", "winner")


class ReceiptError(RuntimeError):
    """The key cannot be created or read, or ``cryptography`` is missing."""


def receipt_payload(answer: dict[str, Any], examples_sha256: str, arms: dict[str, Any]) -> dict[str, Any]:
    """The object that is hashed and signed (see module docstring); ``answer`` is the bake-off answer."""
    payload = {k: answer[k] for k in PAYLOAD_KEYS}
    payload["scorecard"] = [{k: v for k, v in e.items() if k != "predictions"} for e in answer["scorecard"]]
    payload["examples_sha256"] = examples_sha256
    payload["arms"] = arms
    return payload


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

    Rebuilds the payload from the answer and the receipt's ``examples_sha256`` and ``arms``, then checks
    the sha256, the key id and the Ed25519 signature.
    """
    serialization, ed25519 = _crypto()
    receipt = answer.get("receipt") or {}
    try:
        data = canonical_json(receipt_payload(answer, receipt["examples_sha256"], receipt["arms"]))
        signature = base64.b64decode(receipt["signature"], validate=True)
    except (KeyError, TypeError, ValueError) as exc:
        return [f"not a bake-off answer with a receipt: {type(exc).__name__}: {exc}"]
    public = serialization.load_pem_public_key(public_pem)
    if not isinstance(public, ed25519.Ed25519PublicKey):
        return ["the public key is not an Ed25519 key"]
    problems = []
    digest = hashlib.sha256(data).hexdigest()
    if digest != receipt.get("sha256"):
        problems.append(f"sha256 mismatch: the answer hashes to {digest}, the receipt says {receipt.get('sha256')}")
    if key_id(public) != receipt.get("key_id"):
        problems.append(f"key id mismatch: the public key is {key_id(public)}, the receipt names "
                        f"{receipt.get('key_id')}")
    from cryptography.exceptions import InvalidSignature

    try:
        public.verify(signature, data)
    except InvalidSignature:
        problems.append("the Ed25519 signature does not match the answer")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """``verify-receipt FILE [--public-key PEM]``: exit 0 valid, 1 invalid, 2 usage or unreadable input.

    Without ``--public-key`` the public half of the local ``ZSNLI_RECEIPT_KEY`` is used (the server's
    ``GET /v1/receipts/public-key`` gives it to anyone else).
    """
    p = argparse.ArgumentParser(prog="validate.py verify-receipt",
                                description="Verify the signed receipt of a bake-off answer offline.")
    p.add_argument("file", type=Path, help="a bake-off answer (JSON of POST /v1/bakeoff or GET /v1/bakeoffs/ID)")
    p.add_argument("--public-key", type=Path, default=None,
                   help="PEM public key (GET /v1/receipts/public-key); default: the local ZSNLI_RECEIPT_KEY's")
    args = p.parse_args(argv)
    try:
        answer = json.loads(args.file.read_text(encoding="utf-8"))
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
    except (OSError, ValueError, ReceiptError) as exc:
        print(f"verify-receipt: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if problems:
        for line in problems:
            print(f"INVALID: {line}")
        return 1
    print(f"valid: receipt {answer['receipt']['sha256']} signed by key {answer['receipt']['key_id']} "
          f"(bake-off {answer.get('id')}, winner {answer.get('winner')})")
    return 0
