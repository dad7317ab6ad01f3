"""The one receipt format of every bake-off report: canonical JSON, its sha256, an Ed25519 signature when
a key is configured; one `verify`.

Used by both front ends: ``validate.py bakeoff`` / ``compare`` seal their JSON report (`zsnli.compare.suite_bakeoff`),
``POST /v1/bakeoff`` seals its answer (`zsnli.compare.service.runner`). A report is a JSON object; its ``receipt``
(receipt ``version`` 3) is::

    {"version": 3, "sha256": hex sha256 of canonical_json(payload),
     "signature": base64 Ed25519 signature of those bytes, or null (unsigned: no key configured),
     "key_id": first 16 hex of sha256(raw 32-byte public key), or null,
     "examples_sha256": the examples' sha256, "arms": {arm name: identity (model_sha256,
     calibration_sha256 where the arm has one, code version, parameters)},
     "not_run": {arm name: why it did not finish} (empty when every arm ran)}

and the payload (`receipt_payload`) is ``{"receipt_version": the receipt's version as written, "report": every field of
the report but "receipt", "key_order", "examples_sha256", "arms", "not_run"}``, serialised by
`zsnli.manifest.canonical_json` (sorted keys, no whitespace, UTF-8). The version is signed as the receipt spells it and
must be the JSON integer 3 (`verify`), and `load_report` refuses a number not written as canonical JSON writes it
(``3e0``, ``3.0E0``, ``-0``: `NonCanonicalNumber`), so one receipt has one spelling of every signed number. Receipts
sealed before ``not_run`` existed (issue 57) have no such key; their payload has none either, so they verify as they
did, and ``verify-receipt`` says that such a receipt does not list the arms that did not run (the report's own
failed rows do).
Canonical JSON sorts object keys, so the key order of an object where it carries meaning (`ORDERED_FIELDS`: the
service's ``labels``, whose order is the probabilities' order) is signed beside it, in ``key_order``. Every field of
the report is covered, so nothing can be added beside the signature; `verify` also refuses a receipt key outside
`RECEIPT_KEYS`, and `load_report` a file with a key given twice in any object (a reader could take either value).

An unsigned receipt shows only that the file was not changed since someone computed its sha256 (anyone can recompute
it); a signed one, that the holder of the key sealed it. So an unsigned receipt is never valid by default (`verify`
with ``allow_unsigned=False``, ``verify-receipt`` without ``--allow-unsigned``): stripping a signature must not turn a
refusal into a pass (the JWT ``alg: none`` class). It is never valid at all where the file says a key signed it (a
``key_id`` without a ``signature``, or the reverse) or where it claims to come from the service (`claims_service`: the
service signs every answer). Receipts of versions 1 and 2 (the service's before this one format) are not vouched for.

The private key is a PKCS#8 PEM file: ``ZSNLI_RECEIPT_KEY`` (`KEY_ENV`) for both front ends (the service defaults to
`default_key`; the command lines sign only when ``--receipt-key`` or ``ZSNLI_RECEIPT_KEY`` names one), created with
mode 0600 on first use. ``cryptography`` is imported lazily, so the server starts without it (bake-offs then answer
503). ``python validate.py verify-receipt FILE [--public-key PEM] [--allow-unsigned]`` is
`zsnli.compare.receipt_cli`. Imports only `zsnli.manifest`, `zsnli.harness.cli` (`path_type`) (and ``cryptography``
inside functions).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Mapping

from zsnli.harness.cli import json_type, path_type
from zsnli.manifest import canonical_json, runs_path

RECEIPT_VERSION = 3
KEY_ENV = "ZSNLI_RECEIPT_KEY"


def default_key() -> str:
    """The service's key when ``ZSNLI_RECEIPT_KEY`` is unset: ``runs/bakeoff/receipt-ed25519.pem``, relative to
    the working directory, or under ``$ZSNLI_RUNS_DIR`` (`zsnli.manifest.runs_path`, read at each call)."""
    return runs_path("bakeoff", "receipt-ed25519.pem")


#: Top-level report fields whose key order is signed (see the module docstring).
ORDERED_FIELDS = ("labels",)
#: Keys of ``report["receipt"]``.
RECEIPT_KEYS = frozenset({"version", "sha256", "signature", "key_id", "examples_sha256", "arms", "not_run"})


#: Top-level fields of a service answer (`zsnli.compare.service.runner`) that no command-line report has: a
#: report holding any of them claims to come from the service, which always signs.
SERVICE_FIELDS = ("id", "created_at", "task_description", "scorecard", "winner")

#: The start of `verify`'s problem line for a signed receipt checked without a public key.
KEY_NEEDED = "the receipt is signed: a public key is needed"


class ReceiptError(RuntimeError):
    """The key cannot be created or read, or ``cryptography`` is missing."""


class NotAReport(ValueError):
    """The input is not a report with a receipt (wrong JSON type or shape); one-line message."""


_ABSENT = object()


def receipt_payload(report: Mapping[str, Any], examples_sha256: str, arms: Mapping[str, Any],
                    version: Any = RECEIPT_VERSION, not_run: Any = _ABSENT) -> dict[str, Any]:
    """The object that is hashed and signed: ``report`` (its ``receipt`` left out), the key order of its
    `ORDERED_FIELDS` objects (None for a field that is absent or not an object), ``examples_sha256``, the
    arms' identities and, when given, ``not_run`` (arm -> why it did not finish), under ``receipt_version``:
    ``version`` exactly as the receipt has it (`verify` passes the receipt's own value, so a receipt whose
    version was respelt, ``3.0``, hashes differently)."""
    body = {k: value for k, value in report.items() if k != "receipt"}
    order = {k: list(body[k]) if isinstance(body.get(k), dict) else None for k in ORDERED_FIELDS}
    payload = {"receipt_version": version, "report": body, "key_order": order, "examples_sha256": examples_sha256,
               "arms": arms}
    if not_run is not _ABSENT:
        payload["not_run"] = not_run
    return payload


def seal(report: Mapping[str, Any], examples_sha256: str, arms: Mapping[str, Any],
         signer: "Signer | None" = None, not_run: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``receipt`` of ``report`` (module docstring): signed by ``signer``, or unsigned when it is None.

    not_run: arm name -> why it did not finish (failed, timed out, never started), signed in the receipt
    (empty: every arm ran). ``report`` must already be plain JSON (no NaN, numpy scalars or tuples: what a
    reader of the written file gets back), else the file would not verify. Raises `ReceiptError` when the
    key is unusable.
    """
    not_run = {str(k): str(v) for k, v in (not_run or {}).items()}
    data = canonical_json(receipt_payload(report, examples_sha256, arms, RECEIPT_VERSION, not_run))
    signature, kid = (None, None) if signer is None else signer.sign_bytes(data)
    return {"version": RECEIPT_VERSION, "sha256": hashlib.sha256(data).hexdigest(), "signature": signature,
            "key_id": kid, "examples_sha256": examples_sha256, "arms": dict(arms), "not_run": not_run}


def receipt_of(report: Any) -> dict[str, Any]:
    """``report["receipt"]``; raises `NotAReport` unless its fields have their JSON types."""
    if not isinstance(report, dict):
        raise NotAReport(f"the top level is {json_type(report)}, not an object")
    receipt = report.get("receipt")
    if not isinstance(receipt, dict):
        raise NotAReport("no receipt object")
    if not isinstance(receipt.get("sha256"), str):
        raise NotAReport("receipt.sha256 is missing or not a string")
    for key in ("signature", "key_id"):
        if receipt.get(key) is not None and not isinstance(receipt[key], str):
            raise NotAReport(f"receipt.{key} is {json_type(receipt[key])}, not a string or null")
    if not isinstance(receipt.get("examples_sha256"), str) or not isinstance(receipt.get("arms"), dict):
        raise NotAReport("receipt.examples_sha256 (a string) or receipt.arms (an object) is missing")
    not_run = receipt.get("not_run", {})
    if not isinstance(not_run, dict) or not all(isinstance(v, str) for v in not_run.values()):
        raise NotAReport("receipt.not_run is not an object of arm name -> reason strings")
    return receipt


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
                raise ReceiptError(f"receipt key {self.path}: cannot create the key: {exc}") from exc
        try:
            key = serialization.load_pem_private_key(self.path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            why = (exc.strerror or exc) if isinstance(exc, OSError) else "no unencrypted PEM private key in it"
            raise ReceiptError(f"receipt key {self.path}: not a readable unencrypted PEM key ({why})") from exc
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise ReceiptError(f"receipt key {self.path}: not an Ed25519 key")
        return key

    def public_pem(self) -> str:
        """The public key, SubjectPublicKeyInfo PEM."""
        serialization, _ = _crypto()
        return self.private_key().public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    def key_id(self) -> str:
        return key_id(self.private_key().public_key())

    def sign_bytes(self, data: bytes) -> tuple[str, str]:
        """``(base64 Ed25519 signature of data, key id)``."""
        key = self.private_key()
        return base64.b64encode(key.sign(data)).decode("ascii"), key_id(key.public_key())


def claims_service(report: Mapping[str, Any]) -> bool:
    """True when ``report`` has a field of a service answer (`SERVICE_FIELDS`): it claims to come from
    ``POST /v1/bakeoff``, whose answers are always signed."""
    return any(k in report for k in SERVICE_FIELDS)


def unsigned_problems(report: Mapping[str, Any], receipt: Mapping[str, Any], public_pem: bytes | None,
                      allow_unsigned: bool) -> list[str]:
    """Why the unsigned ``receipt`` of ``report`` cannot be valid (empty: accepted).

    Always refused: a ``key_id`` with no ``signature`` (the file says a key signed it), a service answer
    (`claims_service`), and an unsigned receipt while a public key is given (no key vouches for it).
    Otherwise refused unless ``allow_unsigned``: anyone can recompute a sha256, so an unsigned receipt
    shows only that the file is unchanged since someone computed it.
    """
    if receipt.get("key_id") is not None:
        return [f"the receipt names key {receipt['key_id']} but carries no signature: a signature was removed"]
    if claims_service(report):
        return ["the report is a service answer (it has "
                f"{', '.join(k for k in SERVICE_FIELDS if k in report)}) but its receipt is unsigned: the service "
                "signs every answer, so this one was changed or made elsewhere"]
    if public_pem is not None:
        return ["the receipt is not signed (sha256 only), so no key can vouch for it"]
    if not allow_unsigned:
        return ["the receipt is unsigned (sha256 only, which anyone can recompute after changing the report): "
                "not accepted without --allow-unsigned"]
    return []


def verify(report: Any, public_pem: bytes | None = None, *, allow_unsigned: bool = False) -> list[str]:
    """Problems with ``report``'s receipt (empty list: valid).

    Rebuilds the payload (`receipt_payload`) from the report and the receipt's ``examples_sha256`` and
    ``arms``, then checks the receipt version, that the receipt has no key outside `RECEIPT_KEYS`, the
    sha256 and, for a signed receipt, the key id and the Ed25519 signature against ``public_pem``. A
    signed receipt without ``public_pem`` is a problem, and so is a signature without a ``key_id``. An
    unsigned receipt is a problem unless ``allow_unsigned`` (`unsigned_problems`: never accepted on a
    service answer, with a ``key_id``, or with ``public_pem``). Raises `NotAReport` when ``report`` is
    not an object with a receipt; ``ValueError`` on a bad PEM.
    """
    receipt = receipt_of(report)
    problems = []
    version = receipt.get("version", 1)
    if type(version) is not int or version != RECEIPT_VERSION:  # 3.0 and True are not the integer 3
        problems.append(f"receipt version {version!r} is not {RECEIPT_VERSION}: receipts from before the one receipt "
                        "format are not vouched for (run the bake-off again), and the version is the JSON integer "
                        f"{RECEIPT_VERSION}, signed as written")
    extra = sorted(set(receipt) - RECEIPT_KEYS)
    if extra:
        problems.append(f"field(s) outside the receipt format: {', '.join('receipt.' + k for k in extra)}")
    data = canonical_json(receipt_payload(report, receipt["examples_sha256"], receipt["arms"], version,
                                          receipt.get("not_run", _ABSENT)))
    digest = hashlib.sha256(data).hexdigest()
    if digest != receipt["sha256"]:
        problems.append(f"sha256 mismatch: the report hashes to {digest}, the receipt says {receipt['sha256']}")
    if receipt.get("signature") is None:
        return problems + unsigned_problems(report, receipt, public_pem, allow_unsigned)
    if receipt.get("key_id") is None:
        problems.append("the receipt is signed but names no key (key_id is null)")
    if public_pem is None:
        return problems + [KEY_NEEDED + " to check the signature"]
    return problems + _signature_problems(receipt, data, public_pem)


def _signature_problems(receipt: dict[str, Any], data: bytes, public_pem: bytes) -> list[str]:
    serialization, ed25519 = _crypto()
    from cryptography.exceptions import InvalidSignature
    try:
        signature = base64.b64decode(receipt["signature"], validate=True)
    except ValueError:
        return ["the signature is not base64"]
    if base64.b64encode(signature).decode("ascii") != receipt["signature"]:  # other bits, same bytes
        return ["the signature is not canonical base64 (RFC 4648 section 3.5: its unused bits must be zero and its "
                "padding complete): a receipt has one spelling"]
    public = serialization.load_pem_public_key(public_pem)
    if not isinstance(public, ed25519.Ed25519PublicKey):
        return ["the public key is not an Ed25519 key"]
    problems = []
    if key_id(public) != receipt.get("key_id"):
        problems.append(f"key id mismatch: the public key is {key_id(public)}, the receipt names {receipt.get('key_id')}")
    try:
        public.verify(signature, data)
    except InvalidSignature:
        problems.append("the Ed25519 signature does not match the report")
    return problems


class DuplicateKey(ValueError):
    """A JSON object in the verified file gives a key twice."""


class NonCanonicalNumber(ValueError):
    """A number in the verified file is not spelt as canonical JSON spells its value (``3e0`` for ``3.0``), or is
    not a JSON number at all (``NaN``, ``Infinity``)."""


def _canonical_float(text: str) -> float:
    value = float(text)
    if json.dumps(value) != text:
        raise NonCanonicalNumber(text)
    return value


def _canonical_int(text: str) -> int:
    value = int(text)
    if str(value) != text:  # -0
        raise NonCanonicalNumber(text)
    return value


def _no_constant(text: str) -> Any:
    raise NonCanonicalNumber(text)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKey(key)
        obj[key] = value
    return obj


def load_report(text: str) -> Any:
    """Parse the verified file. Raises `DuplicateKey` for a key given twice in any object (JSON readers
    disagree on which value wins, so a receipt cannot vouch for either), `NonCanonicalNumber` for a number not
    written as canonical JSON (`zsnli.manifest.canonical_json`, Python's ``json``) writes its value (``3e0``,
    ``1.50``, ``-0``, ``NaN``: the signed bytes hold one spelling, so another one is not what was signed), and
    ``ValueError`` for invalid JSON."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_float=_canonical_float,
                      parse_int=_canonical_int, parse_constant=_no_constant)


def add_receipt_key_flag(parser) -> None:
    """``--receipt-key PEM`` (read by `signer_for`) on an argparse parser: ``validate.py bakeoff`` and ``compare``."""
    parser.add_argument("--receipt-key", type=path_type, default=None, metavar="PEM",
                        help="Ed25519 private key (PKCS#8 PEM, created when absent) that signs the report's receipt; "
                             f"default: {KEY_ENV} when set, else the receipt is unsigned (sha256 only)")


def signer_for(path: str | Path | None, env: Mapping[str, str] | None = None) -> Signer | None:
    """The command lines' signer: the key at ``path`` (``--receipt-key``), else at ``ZSNLI_RECEIPT_KEY``
    when set, loaded (or created) now; None when neither is given (the receipt is then unsigned).
    Raises `ReceiptError` (one line) when the key cannot be created or read."""
    env = os.environ if env is None else env
    chosen = path if path is not None else (env.get(KEY_ENV, "").strip() or None)
    if chosen is None:
        return None
    signer = Signer(chosen)
    signer.private_key()
    return signer


def local_public_pem(env: Mapping[str, str] | None = None) -> bytes | None:
    """The public half of the local key (``ZSNLI_RECEIPT_KEY``, else `default_key`), or None when absent."""
    env = os.environ if env is None else env
    path = Path(env.get(KEY_ENV, "").strip() or default_key())
    return Signer(path).public_pem().encode() if path.is_file() else None


def public_pem_of(path: Path, flag: str = "--public-key") -> bytes:
    """The public PEM of the key file at ``path``: a public key, or an unencrypted private key's public half (a run's
    ``--receipt-key``). Raises `ReceiptError`, one line naming ``flag``: unreadable (missing, a directory), or neither."""
    try:
        data, serialization = path.read_bytes(), _crypto()[0]
    except OSError as exc:
        raise ReceiptError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None
    for load in (serialization.load_pem_public_key, lambda d: serialization.load_pem_private_key(d, None).public_key()):
        try:
            return load(data).public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        except (ValueError, TypeError, AttributeError):  # not that kind of PEM, an encrypted key, not a key at all
            continue
    raise ReceiptError(f"{flag} {path}: not an unencrypted PEM key; pass the signer's public key (GET "
                       "/v1/receipts/public-key) or the --receipt-key file of the run")
