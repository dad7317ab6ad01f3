"""The request-body reader alone: content codings, charsets, duplicate keys, exact numbers, limits."""

from __future__ import annotations

import asyncio
import gzip
import json
import tracemalloc
import zlib

import pytest

from zsnli.serving.http_body import BodyError, JsonNumber, duplicate_paths, read_json_body, render_json

BODY = {"id": "r2", "text": "the match", "labels": ["sport", "business", "politics"]}
RAW = json.dumps(BODY).encode()
JSON_CT = "application/json"


async def _chunks(data: bytes, size: int = 7):
    for i in range(0, len(data), size):
        yield data[i:i + size]


def read(data: bytes, limit: int = 10_000, size: int = 7, **headers: str):
    hdrs = {"content-type": JSON_CT, **{k.replace("_", "-"): v for k, v in headers.items()}}
    hdrs = {k: v for k, v in hdrs.items() if v is not None}
    return asyncio.run(read_json_body(hdrs, _chunks(data, size), limit))


def refused(data: bytes, **kw) -> BodyError:
    with pytest.raises(BodyError) as info:
        read(data, **kw)
    return info.value


# ----------------------------------------------------------------- content encodings


@pytest.mark.parametrize("coding", ["gzip", "x-gzip", "GZip", "identity, gzip"])
def test_gzip_body_is_decoded(coding):
    assert read(gzip.compress(RAW), content_encoding=coding) == BODY


def test_concatenated_gzip_members_are_one_body():
    half = len(RAW) // 2
    assert read(gzip.compress(RAW[:half]) + gzip.compress(RAW[half:]), content_encoding="gzip") == BODY


@pytest.mark.parametrize("wbits", [zlib.MAX_WBITS, -zlib.MAX_WBITS], ids=["zlib", "raw"])
def test_deflate_body_is_decoded(wbits):
    c = zlib.compressobj(wbits=wbits)
    assert read(c.compress(RAW) + c.flush(), content_encoding="deflate") == BODY


def test_identity_is_accepted():
    assert read(RAW, content_encoding="identity") == BODY


@pytest.mark.parametrize("coding", ["br", "zstd", "compress", "gzip, gzip", "gzip, deflate", "deflate,gzip"])
def test_unknown_or_stacked_coding_is_415(coding):
    err = refused(gzip.compress(RAW), content_encoding=coding)
    assert (err.status, err.error_type, err.field) == (415, "unsupported_media_type", "content-encoding")
    assert "Content-Encoding" in err.message


def test_repeated_content_encoding_headers_are_stacked():
    pairs = [(b"content-type", b"application/json"), (b"content-encoding", b"gzip"), (b"content-encoding", b"gzip")]
    with pytest.raises(BodyError) as info:
        asyncio.run(read_json_body(pairs, _chunks(gzip.compress(gzip.compress(RAW))), 10_000))
    assert info.value.status == 415


@pytest.mark.parametrize("name,data,coding", [
    ("plain JSON sent as gzip", RAW, "gzip"),
    ("plain JSON sent as deflate", RAW, "deflate"),
    ("truncated gzip", gzip.compress(RAW)[:-6], "gzip"),
    ("truncated deflate", zlib.compress(RAW)[:-3], "deflate"),
    ("trailing bytes after gzip", gzip.compress(RAW) + b"xx", "gzip"),
    ("trailing bytes after deflate", zlib.compress(RAW) + b"\x1f\x8b", "deflate"),
    ("one byte", b"{", "gzip"),
])
def test_body_not_matching_its_coding_is_400(name, data, coding):
    err = refused(data, content_encoding=coding)
    assert (err.status, err.error_type, err.field) == (400, "invalid_encoding", "content-encoding"), name
    assert f"Content-Encoding: {coding}" in err.message


def test_gzip_bomb_is_413_with_bounded_memory():
    bomb = gzip.compress(b" " * (200 * 1024 * 1024))  # 200 MiB of spaces: about 200 KB compressed
    assert len(bomb) < 300_000
    tracemalloc.start()
    try:
        err = refused(bomb, limit=10 ** 6, size=65536, content_encoding="gzip")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (err.status, err.error_type) == (413, "payload_too_large") and "Content-Encoding: gzip" in err.message
    assert peak < 8 * 1024 * 1024, peak  # a few times the 1 MB limit, never the 200 MiB it expands to


def test_decoded_size_is_what_the_limit_counts():
    body = json.dumps({**BODY, "text": "a" * 5000}).encode()
    packed = gzip.compress(body)
    assert len(packed) < 1000 < len(body)
    assert read(packed, limit=len(body), content_encoding="gzip")["text"] == "a" * 5000
    err = refused(packed, limit=len(body) - 1, content_encoding="gzip")
    assert err.status == 413
    assert refused(body, limit=len(body) - 1).status == 413  # identity: the wire size


def test_declared_length_over_the_limit_is_413_before_reading():
    err = refused(RAW, limit=10, content_length=str(len(RAW)))
    assert (err.status, err.field) == (413, "body") and str(len(RAW)) in err.message


def test_empty_gzip_body_is_the_empty_body_error():
    err = refused(b"", content_encoding="gzip")
    assert (err.status, err.error_type, err.field) == (400, "invalid_json", "body")


# ----------------------------------------------------------------- charsets


@pytest.mark.parametrize("charset,codec", [
    ("utf-16le", "utf-16-le"), ("utf-16be", "utf-16-be"), ("UTF-16LE", "utf-16-le"), ('"utf-16le"', "utf-16-le"),
    ("utf-32le", "utf-32-le"), ("utf-32be", "utf-32-be"), ("utf-8", "utf-8"), ("utf8", "utf-8"),
    ("utf-16", "utf-16-be"), ("utf-32", "utf-32-be"),
])
def test_declared_charset_is_decoded(charset, codec):
    body = {**BODY, "text": "naïve café – 東京 \U0001f600"}
    assert read(json.dumps(body, ensure_ascii=False).encode(codec), content_type=f"{JSON_CT}; charset={charset}") == body


@pytest.mark.parametrize("charset,data", [
    ("utf-16", b"\xff\xfe" + RAW.decode().encode("utf-16-le")),  # the BOM picks little-endian
    ("utf-16", b"\xfe\xff" + RAW.decode().encode("utf-16-be")),
    ("utf-16le", b"\xff\xfe" + RAW.decode().encode("utf-16-le")),  # a BOM of the declared encoding is dropped
    ("utf-32", b"\xff\xfe\x00\x00" + RAW.decode().encode("utf-32-le")),
    ("utf-8", b"\xef\xbb\xbf" + RAW),
    (None, b"\xef\xbb\xbf" + RAW),  # no charset: any BOM decides
    (None, b"\xff\xfe" + RAW.decode().encode("utf-16-le")),
    (None, b"\x00\x00\xfe\xff" + RAW.decode().encode("utf-32-be")),
])
def test_byte_order_mark_is_honoured(charset, data):
    ctype = JSON_CT + (f"; charset={charset}" if charset else "")
    assert read(data, content_type=ctype) == BODY


@pytest.mark.parametrize("charset", ["iso-8859-1", "latin1", "windows-1252", "utf-7", ""])
def test_other_charset_is_415_naming_it(charset):
    err = refused(RAW, content_type=f"{JSON_CT}; charset={charset}")
    assert (err.status, err.error_type, err.field) == (415, "unsupported_media_type", "content-type")
    assert "charset" in err.message and repr(charset) in err.message


def test_charset_mismatch_is_400():
    err = refused(RAW.decode().encode("utf-16-le")[:-1], content_type=f"{JSON_CT}; charset=utf-16le")
    assert (err.status, err.error_type) == (400, "invalid_json") and "UTF-16-LE" in err.message


def test_utf16_gzip_body():
    data = gzip.compress(RAW.decode().encode("utf-16-le"))
    assert read(data, content_type=f"{JSON_CT}; charset=utf-16le", content_encoding="gzip") == BODY


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_non_json_media_type_is_415(ctype):
    err = refused(RAW, content_type=ctype)
    assert (err.status, err.field) == (415, "content-type")


def test_json_suffix_and_no_content_type_are_accepted():
    assert read(RAW, content_type="application/vnd.api+json") == BODY
    assert read(RAW, content_type=None) == BODY


# ----------------------------------------------------------------- duplicate keys


@pytest.mark.parametrize("text,path", [
    ('{"id":"r2","text":"x","labels":["sport","business","politics"],"labels":["business","sport"]}', "labels"),
    ('{"id":1,"text":"x","text":"y","labels":["a"]}', "text"),
    ('{"id":1,"id":2,"text":"x","labels":["a"]}', "id"),
    ('{"text":"x","labels":["a"],"meta":{"source":"a","source":"b"}}', "meta.source"),
    ('{"text":"x","labels":["a"],"rows":[{"k":1},{"k":1,"k":2}]}', "rows[1].k"),
    ('{"text":"x","labels":["a"],"multi_label":true,"multi_label":false}', "multi_label"),
])
def test_duplicate_key_is_422_naming_its_path(text, path):
    err = refused(text.encode())
    assert (err.status, err.error_type, err.field) == (422, "validation", path)
    assert err.errors and err.errors[0]["field"] == path and path in err.message


def test_every_duplicated_path_is_listed_in_document_order():
    text = '{"c":0,"a":{"x":1,"x":2},"b":[{"y":1,"y":1}],"c":2}'
    assert [e["field"] for e in refused(text.encode()).errors] == ["c", "a.x", "b[0].y"]
    assert duplicate_paths(json.loads(text)) == []  # a plain dict records nothing


def test_same_key_in_sibling_objects_is_fine():
    assert read(b'{"text":"x","labels":["a"],"rows":[{"k":1},{"k":2}]}')["rows"] == [{"k": 1}, {"k": 2}]


# ----------------------------------------------------------------- numbers and JSON errors


@pytest.mark.parametrize("text", ["1e-400", "0.1", "1E+2", "-0.0", "-0", "1.50", "123456789012345678901234567890.5"])
def test_non_integer_ids_come_back_exactly_as_sent(text):
    value = read(b'{"id":' + text.encode() + b',"text":"x","labels":["a"]}')["id"]
    assert isinstance(value, JsonNumber) and value == float(text)
    assert render_json({"id": value, "p": [0.5]}) == '{"id":' + text + ',"p":[0.5]}'


def test_big_integers_stay_exact():
    big = 10 ** 40 + 1
    assert read(b'{"id":' + str(big).encode() + b'}')["id"] == big
    assert render_json({"id": big}) == '{"id":' + str(big) + "}"


@pytest.mark.parametrize("text,needle", [
    (b'{"id":NaN}', "NaN"), (b'{"id":1e400}', "out of range"), (b'{"a":', "invalid JSON"),
    (b"  ", "empty body"), (b"{\"a\":\"\x80\x81\"}", "UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "invalid JSON: arrays or objects nested too deep for this server"),
    (b'{"text": "x', "invalid JSON: Unterminated string (line 1, column 10)"),
    (b'{"text": "a\x00"}', "invalid JSON: Invalid control character (line 1, column 12)"),
    (b'{"text": "x",}', "invalid JSON: Expecting property name enclosed in double quotes (line 1, column 14)"),
])
def test_malformed_json_is_400(text, needle):
    err = refused(text, limit=10 ** 6)
    assert (err.status, err.error_type, err.field) == (400, "invalid_json", "body") and needle in err.message


def test_disconnect_is_reported():
    class Gone(Exception):
        pass

    async def chunks():
        yield b'{"te'
        raise Gone()

    with pytest.raises(BodyError) as info:
        asyncio.run(read_json_body({}, chunks(), 100, disconnect_errors=(Gone,)))
    assert (info.value.status, info.value.error_type) == (400, "disconnected")


# ----------------------------------------------------------------- the one text-cleaning rule

from hypothesis import given, settings, strategies as st  # noqa: E402

from zsnli.serving.text import clean_json_text, clean_text  # noqa: E402

_any_text = st.text(st.characters(exclude_categories=()), max_size=12)  # lone surrogates included


@settings(max_examples=300, deadline=None)
@given(st.recursive(_any_text | st.integers(), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(_any_text, inner, max_size=3), max_leaves=12))
def test_every_string_and_key_of_a_body_gets_clean_text(value):
    def cleaned(v):
        if isinstance(v, str):
            return clean_text(v)
        if isinstance(v, list):
            return [cleaned(x) for x in v]
        if isinstance(v, dict):
            return {clean_text(k): cleaned(x) for k, x in v.items()}
        return v

    def collides(v):  # two keys that differ only in lone surrogates: a duplicate key (tested below)
        if isinstance(v, dict):
            return len({clean_text(k) for k in v}) < len(v) or any(collides(x) for x in v.values())
        return isinstance(v, list) and any(collides(x) for x in v)

    text = json.dumps(value)  # a lone surrogate travels as its \\uXXXX escape (it has no UTF-8 form)
    if collides(value):
        return
    assert read(text.encode("utf-8"), limit=1 << 20) == cleaned(value)


def test_clean_json_text_keeps_pairs_and_escaped_backslashes():
    assert clean_json_text('"\\ud83d\\ude00 \\ud800 \\\\ud800 \\udc00\\ud800"') == \
        '"\\ud83d\\ude00 \\ufffd \\\\ud800 \\ufffd\\ufffd"'
    assert clean_json_text('"plain"') == '"plain"'


def test_keys_that_collide_after_cleaning_are_a_duplicate_key():
    with pytest.raises(BodyError) as err:
        read(b'{"text": "x", "\\ud800": 1, "\\udfff": 2}')
    assert err.value.status == 422 and err.value.field == "\ufffd"


@pytest.mark.parametrize("how", ["declared", "streamed", "decoded"])
def test_every_413_names_the_setting(how):
    big = json.dumps({"text": "x" * 5000, "labels": ["a"]}).encode()
    with pytest.raises(BodyError) as err:
        if how == "declared":
            read(big, limit=2000, content_length=str(len(big)))
        elif how == "streamed":
            read(big, limit=2000)
        else:
            read(gzip.compress(big), limit=2000, content_encoding="gzip")
    assert err.value.status == 413 and "ZSNLI_MAX_BODY_BYTES" in err.value.message
