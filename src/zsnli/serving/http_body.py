"""The one request-body reader: headers + a stream of bytes -> a parsed JSON value, or a typed error.

Framework-light on purpose: `read_json_body` takes any header container
(a Starlette ``Headers``, a mapping, or ``(name, value)`` pairs) and any
async iterator of ``bytes``, so the server and the bake-off routes share it.
It never touches the network itself and imports only the standard library and `zsnli.serving.text`.

What it checks, in order (each failure is a `BodyError` naming the header or field):

1. ``Content-Type``: absent, ``application/json`` or ``*/*+json`` (else 415
   ``unsupported_media_type``, field ``content-type``). Its ``charset``
   parameter is honoured: ``utf-8``, ``utf-16``, ``utf-16le``, ``utf-16be``,
   ``utf-32``, ``utf-32le``, ``utf-32be`` (the encodings RFC 8259 section 8.1
   lets a reader accept); any other charset is 415 field ``content-type``.
   Without a charset the body is UTF-8 unless it starts with a UTF-8, UTF-16
   or UTF-32 byte-order mark, which is honoured; a BOM matching the declared
   charset is dropped; ``utf-16`` / ``utf-32`` without a BOM are big-endian
   (RFC 2781 section 4.3).
2. ``Content-Encoding``: ``identity`` (or absent), ``gzip`` / ``x-gzip``
   (RFC 1952, concatenated members allowed) or ``deflate`` (RFC 9110
   section 8.4.1.2: zlib-wrapped; a raw deflate stream, which some clients
   send, is also read). Decoded while streaming; the size limit applies to
   the wire bytes and to the decoded bytes, and the decoder is never asked
   for more than the limit, so a small "gzip bomb" costs at most the limit in
   memory (413 ``payload_too_large``). Any other coding, or more than one
   coding (``gzip, gzip``), is 415 field ``content-encoding``. A body that is
   not what the header says (truncated, trailing bytes, plain JSON sent as
   gzip) is 400 ``invalid_encoding`` field ``content-encoding``.
3. Text: every lone surrogate escape (``"\\ud800"``) in a string or key becomes U+FFFD
   (`zsnli.serving.text.clean_json_text`, the one text-cleaning rule of every route), so no route
   ever holds a string that cannot be encoded as UTF-8.
4. JSON: empty body, invalid JSON, ``NaN`` / ``Infinity``, numbers that
   overflow a float, nesting too deep: 400 ``invalid_json`` field ``body``.
   A key given twice in any object is 422 ``validation`` naming the path of
   the first one in document order (``labels``, ``meta.source``,
   ``rows[1].k``), one entry per duplicated path in ``errors``; on a route whose array items fail alone
   (``parse_json(items_alone=True)``: ``POST /classify``) only the item holding it is refused.

Numbers: integers are Python ``int`` (exact at any size), except ``-0``. A number with a
fraction or exponent, and ``-0``, is a `JsonNumber`: a ``float`` that remembers the text
it was sent as, and `render_json` writes that text back, so an ``id`` of
``1e-400`` is echoed as ``1e-400`` (its float value is 0.0).
"""

from __future__ import annotations

import json
import math
import re
import zlib
from typing import Any, AsyncIterator, Iterable, Mapping

from ..harness.cli import json_syntax
from .text import clean_json_text

#: The media types accepted besides any ``*/*+json``.
JSON_MEDIA_TYPES = ("application/json",)
#: The setting that raises the size limit, named in every 413 message.
LIMIT_SETTING = "ZSNLI_MAX_BODY_BYTES"
#: Content codings that are decoded (``identity`` is a no-op).
CONTENT_CODINGS = ("identity", "gzip", "x-gzip", "deflate")
#: Charsets decoded, lower case -> codec (``utf-16`` / ``utf-32``: the BOM picks the byte order).
CHARSETS = {
    "utf-8": "utf-8", "utf8": "utf-8",
    "utf-16": "utf-16", "utf-16le": "utf-16-le", "utf-16be": "utf-16-be",
    "utf-32": "utf-32", "utf-32le": "utf-32-le", "utf-32be": "utf-32-be",
}
# Byte-order marks, longest first (the UTF-32LE BOM starts with the UTF-16LE one).
_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"),
)
_NUMBER_TEXT = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?\Z")


class BodyError(Exception):
    """Why a body was refused: ``status`` (400/413/415/422), ``error_type`` (wire name),
    ``message`` (one line), ``field`` (``body``, ``content-type``, ``content-encoding`` or a
    JSON path) and, for 422, ``errors`` (``[{"field", "error", "type"}]``)."""

    def __init__(self, status: int, error_type: str, message: str, field: str | None,
                 errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.field = field
        self.errors = errors


class JsonNumber(float):
    """A JSON number with a fraction or exponent: its float value plus ``text``, as sent."""

    text: str

    def __new__(cls, text: str) -> "JsonNumber":
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"number out of range: {text[:40]}")
        self = super().__new__(cls, value)
        self.text = text
        return self


def render_json(value: Any) -> str:
    """Compact JSON text of ``value`` (dict/list/str/int/float/bool/None); a `JsonNumber` is
    written as the text it was parsed from. Raises ``ValueError`` on a non-finite float."""
    if isinstance(value, JsonNumber) and _NUMBER_TEXT.match(value.text):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(str(k)) + ":" + render_json(v) for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(render_json(v) for v in value) + "]"
    return json.dumps(value, allow_nan=False)


# --------------------------------------------------------------------------- headers


def header_values(headers: Any, name: str) -> list[str]:
    """Every value of header ``name`` (case-insensitive) in ``headers``: a Starlette ``Headers``
    (``getlist``), a mapping, or an iterable of ``(name, value)`` str/bytes pairs."""
    if hasattr(headers, "getlist"):
        return list(headers.getlist(name))
    items: Iterable = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for key, value in items:
        key = key.decode("latin-1") if isinstance(key, bytes) else key
        if key.lower() == name:
            out.append(value.decode("latin-1") if isinstance(value, bytes) else value)
    return out


def _one(headers: Any, name: str) -> str | None:
    values = header_values(headers, name)
    return ", ".join(values) if values else None


def check_content_type(value: str | None) -> str | None:
    """The Python codec the body is read with (``None``: UTF-8 or its BOM decides).

    Raises `BodyError` 415 on a non-JSON media type or an unsupported charset.
    """
    if value is None:
        return None
    media, _, params = value.partition(";")
    media = media.strip().lower()
    if media and media not in JSON_MEDIA_TYPES and not media.endswith("+json"):
        raise BodyError(415, "unsupported_media_type", f"content type must be application/json, got {media!r} "
                        "(curl: add -H 'Content-Type: application/json')", "content-type")
    charset = None
    for param in params.split(";"):
        key, sep, val = param.partition("=")
        if sep and key.strip().lower() == "charset":
            charset = val.strip().strip('"').lower()
    if charset is None:
        return None
    if charset not in CHARSETS:
        raise BodyError(415, "unsupported_media_type", f"charset {charset!r} of Content-Type is not supported; "
                        "send utf-8 (or utf-16/utf-32, with or without le/be)", "content-type")
    return CHARSETS[charset]


def content_codings(value: str | None) -> str | None:
    """The one content coding to undo (``gzip``, ``deflate``) or ``None`` for identity.

    Raises `BodyError` 415 on an unknown coding or more than one (stacked) coding.
    """
    if value is None:
        return None
    codings = [c.strip().lower() for c in value.split(",") if c.strip()]
    unknown = [c for c in codings if c not in CONTENT_CODINGS]
    if unknown:
        raise BodyError(415, "unsupported_media_type", f"Content-Encoding {unknown[0]!r} is not supported; "
                        "send identity, gzip or deflate", "content-encoding")
    real = [c for c in codings if c != "identity"]
    if len(real) > 1:
        raise BodyError(415, "unsupported_media_type", f"Content-Encoding {value.strip()!r} stacks "
                        f"{len(real)} codings; send one of gzip or deflate", "content-encoding")
    if not real:
        return None
    return "gzip" if real[0] in ("gzip", "x-gzip") else "deflate"


# --------------------------------------------------------------------------- decoding


class _Decoder:
    """Incremental gzip/deflate decoder that never returns more than ``room`` bytes per call."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._d: Any = None
        self._pending = b""  # bytes seen before the first chunk decides raw vs zlib deflate

    def _new(self, first: bytes) -> Any:
        if self.coding == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        # RFC 1950 header: CM = 8 and the 16-bit header a multiple of 31; else raw deflate.
        zlib_wrapped = len(first) >= 2 and first[0] & 0x0F == 8 and ((first[0] << 8) | first[1]) % 31 == 0
        return zlib.decompressobj(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)

    def feed(self, data: bytes, room: int) -> bytes:
        """Decode ``data``; at most ``room + 1`` bytes come back (one more than fits means "too big")."""
        if self._d is None:
            data = self._pending + data
            if len(data) < 2:
                self._pending = data
                return b""
            self._d, self._pending = self._new(data), b""
        out = bytearray()
        while data:
            if self._d.eof:
                # Another gzip member may follow (RFC 1952 2.2); anything else is trailing garbage.
                rest = self._d.unused_data + data
                if self.coding != "gzip" or not rest.startswith(b"\x1f\x8b"):
                    raise self._bad("trailing bytes after the compressed stream")
                self._d = self._new(rest)
                data = rest
            try:
                out += self._d.decompress(data, room + 1 - len(out))
            except zlib.error as exc:
                raise self._bad(f"not a valid {self.coding} stream ({exc})") from None
            if len(out) > room:
                return bytes(out)
            data = self._d.unconsumed_tail
        return bytes(out)

    def finish(self) -> None:
        if self._d is None or not self._d.eof:
            raise self._bad(f"truncated {self.coding} stream")
        if self._d.unused_data:
            raise self._bad("trailing bytes after the compressed stream")

    def _bad(self, why: str) -> BodyError:
        return BodyError(400, "invalid_encoding", f"body does not match Content-Encoding: {self.coding}: {why}",
                         "content-encoding")


async def read_body(headers: Any, chunks: AsyncIterator[bytes], limit: int,
                    disconnect_errors: tuple[type[BaseException], ...] = ()) -> tuple[bytes, str | None]:
    """The decoded body bytes and the codec named by the charset (None: UTF-8/BOM).

    limit: most bytes accepted, on the wire and after undoing Content-Encoding.
    disconnect_errors: exceptions the iterator raises when the client leaves
    (Starlette's ``ClientDisconnect``), reported as 400 ``disconnected``.
    Raises `BodyError` (415 before any byte is read, 413, 400).
    """
    codec = check_content_type(_one(headers, "content-type"))
    coding = content_codings(_one(headers, "content-encoding"))
    length = _one(headers, "content-length")
    if length is not None and length.strip().isdigit() and int(length) > limit:
        raise BodyError(413, "payload_too_large", f"body is {int(length)} bytes; the limit is {limit} "
                        f"({LIMIT_SETTING})", "body")
    decoder = _Decoder(coding) if coding else None
    out = bytearray()
    wire = 0
    too_big = BodyError(413, "payload_too_large", f"body exceeds the limit of {limit} bytes"
                        + (f" after undoing Content-Encoding: {coding}" if coding else "") + f" ({LIMIT_SETTING})",
                        "body")
    try:
        async for chunk in chunks:
            wire += len(chunk)
            if wire > limit:
                raise BodyError(413, "payload_too_large", f"body exceeds the limit of {limit} bytes ({LIMIT_SETTING})",
                                "body")
            out += decoder.feed(chunk, limit - len(out)) if decoder else chunk
            if len(out) > limit:
                raise too_big
    except disconnect_errors:
        raise BodyError(400, "disconnected", "client disconnected while sending the body", "body") from None
    if decoder is not None and wire:
        decoder.finish()
    return bytes(out), codec


def decode_text(raw: bytes, codec: str | None) -> str:
    """Bytes -> text by the declared codec or the BOM (see the module docstring).

    codec: from `check_content_type`: ``None`` (UTF-8 unless a BOM says otherwise),
    ``utf-16`` / ``utf-32`` (the BOM picks the byte order, big-endian without one), or an
    exact codec (``utf-8``, ``utf-16-le``, ...; a leading BOM of it is dropped).
    Raises `BodyError` 400 ``invalid_json`` when the bytes do not decode.
    """
    use = codec or "utf-8"
    if codec in (None, "utf-16", "utf-32"):
        width = {None: "", "utf-16": "utf-16", "utf-32": "utf-32"}[codec]
        use = codec + "-be" if codec else "utf-8"
        for bom, name in _BOMS:
            if raw.startswith(bom) and name.startswith(width):
                use, raw = name, raw[len(bom):]
                break
    try:
        text = raw.decode(use)
    except UnicodeDecodeError as exc:
        raise BodyError(400, "invalid_json", f"body is not valid {use.upper()} (byte {exc.start})", "body") from None
    return text[1:] if text.startswith("\ufeff") else text


# --------------------------------------------------------------------------- JSON


class _DupObject(dict):
    """A parsed object that had at least one key twice (``dups``, in order)."""

    dups: list[str]


def _pairs_hook(flag: list[bool]):
    def hook(pairs: list[tuple[str, Any]]) -> dict:
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        seen: set[str] = set()
        dups: list[str] = []
        for key, _ in pairs:
            if key in seen and key not in dups:
                dups.append(key)
            seen.add(key)
        marked = _DupObject(obj)
        marked.dups = dups
        flag[0] = True
        return marked

    return hook


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def duplicate_paths(value: Any) -> list[str]:
    """Paths (``labels``, ``meta.source``, ``rows[1].k``) of every duplicated key, in document
    order (pre-order walk). Only objects built by `parse_json` record duplicates; a key whose
    earlier value was itself an object with duplicates reports only the key (that value is gone)."""
    found: list[str] = []
    stack: list[tuple[str, Any, bool]] = [("", value, False)]
    while stack:
        path, node, dup = stack.pop()
        if dup:
            found.append(path)
        if isinstance(node, dict):
            dups = set(getattr(node, "dups", ()))
            stack.extend(reversed([(_join(path, k), child, k in dups) for k, child in node.items()]))
        elif isinstance(node, list):
            stack.extend(reversed([(_join(path, i), child, False) for i, child in enumerate(node)]))
    return found


def _parse_int(text: str) -> int | JsonNumber:
    """JSON integers are ``int``, except ``-0``: a `JsonNumber` (-0.0 that remembers its text), because the
    ``int`` would lose the sign and an echoed id must keep its text."""
    return JsonNumber(text) if text == "-0" else int(text)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


#: What an empty body is told to send, unless its route says (``expected=``): ``/classify``'s body.
CLASSIFY_BODY = "a JSON object with text and labels"


def parse_json(text: str, items_alone: bool = False, expected: str = CLASSIFY_BODY) -> Any:
    """Parse ``text``: `JsonNumber` for non-integers, ``NaN``/``Infinity`` refused, duplicate keys refused,
    lone surrogates in strings and keys replaced by U+FFFD (`zsnli.serving.text.clean_json_text`).

    ``items_alone``: a route whose array items fail alone (``POST /classify`` with an array): a key given twice
    inside an item is left to that item's check (`duplicate_keys_error` on the item: its objects keep the
    record), so the other items are answered; one outside the items still refuses the body.
    ``expected``: what the route takes, in words, for the message of an empty body. Raises `BodyError` 400
    ``invalid_json`` or 422 ``validation`` (duplicate key).
    """
    if not text.strip():
        raise BodyError(400, "invalid_json", f"empty body: send {expected}", "body")
    flag = [False]
    try:
        value = json.loads(clean_json_text(text), parse_constant=_reject_constant, parse_float=JsonNumber,
                           parse_int=_parse_int,
                           object_pairs_hook=_pairs_hook(flag))
    except json.JSONDecodeError as exc:
        raise BodyError(400, "invalid_json", f"invalid JSON: {json_syntax(exc)}", "body") from None
    except RecursionError:
        raise BodyError(400, "invalid_json", "invalid JSON: arrays or objects nested too deep for this server",
                        "body") from None
    except ValueError as exc:
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise BodyError(400, "invalid_json", f"invalid JSON: {why[:200]}", "body") from None
    if flag[0]:
        if items_alone and isinstance(value, list):
            return value  # every duplicate is inside an item: the top level is an array, no object
        error = duplicate_keys_error(value)
        if error is not None:
            raise error
    return value


def duplicate_keys_error(value: Any) -> BodyError | None:
    """The 422 ``validation`` `BodyError` for the keys given more than once in ``value`` (a value `parse_json`
    built: one ``errors`` entry per path, `duplicate_paths`; the message and ``field`` name the first), or None
    when it has none. Paths are relative to ``value`` (an array item's: ``text``, not ``[1].text``)."""
    paths = duplicate_paths(value)
    if not paths:
        return None
    errors = [{"field": p, "error": "key given more than once", "type": "duplicate_key"} for p in paths]
    return BodyError(422, "validation", f"{paths[0]}: key given more than once (each key may appear once)",
                     paths[0], errors)


async def read_json_body(headers: Any, chunks: AsyncIterator[bytes], limit: int,
                         disconnect_errors: tuple[type[BaseException], ...] = (), items_alone: bool = False,
                         expected: str = CLASSIFY_BODY) -> Any:
    """`read_body`, `decode_text` and `parse_json` (with ``items_alone`` and ``expected``) in one call: the parsed
    request value.

    Raises `BodyError`; see the module docstring for every case.
    """
    raw, codec = await read_body(headers, chunks, limit, disconnect_errors)
    if not raw.strip():
        raise BodyError(400, "invalid_json", f"empty body: send {expected}", "body")
    return parse_json(decode_text(raw, codec), items_alone, expected)
