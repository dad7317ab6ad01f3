"""The one text-cleaning rule, applied to every text field of every route before any work starts.

JSON can carry a lone UTF-16 surrogate (``"\\ud800"``): Python parses it into a ``str`` that cannot be
encoded as UTF-8, so a tokenizer, a sha256, SQLite or a JSON answer would fail on it later (the
bake-off used to run every arm and then lose the result at signing). `clean_text` replaces each lone
surrogate with U+FFFD (the replacement character, as a UTF-8 decoder does with bad bytes); every other
character is kept as sent. `zsnli.serving.http_body.parse_json` applies it to every string and key of every
request body (so ``/classify`` and the bake-off get the same text), and `zsnli.serving.service` applies it
again to text given in-process (`zsnli.serving.offline`, ``zsnli-batch``).

Imports only the standard library.
"""

from __future__ import annotations

import re


def clean_text(s: str) -> str:
    """``s`` with every lone surrogate (U+D800..U+DFFF not part of a pair) replaced by U+FFFD; else ``s`` itself."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# In JSON text, left to right: a surrogate pair escape (kept), a lone surrogate escape (replaced), any other
# escape (kept; consuming an escaped backslash here keeps the text "\\\\ud800" as it is: a backslash, then "ud800").
_ESCAPES = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})|\\.",
                      re.S)


def clean_json_text(text: str) -> str:
    """JSON text whose strings parse to `clean_text`'s result: every ``\\uXXXX`` escape of a lone surrogate
    becomes ``\\ufffd``; everything else is unchanged (valid surrogate pairs included).

    Works on the text, before parsing, so it covers every string and key at any nesting depth in one
    linear pass (no walk of the parsed value). Decoded body text never holds a raw lone surrogate (the UTF
    decoders refuse them), so escapes are the only way one can arrive.
    """
    if "\\u" not in text:
        return text
    return _ESCAPES.sub(lambda m: "\\ufffd" if m.group(1) else m.group(0), text)
