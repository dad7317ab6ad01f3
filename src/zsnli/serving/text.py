"""The one text-cleaning rule, applied to every text field of every route before any work starts.

JSON can carry a lone UTF-16 surrogate (``"\\ud800"``): Python parses it into a ``str`` that cannot be
encoded as UTF-8, so a tokenizer, a sha256, SQLite or a JSON answer would fail on it later (the
bake-off used to run every arm and then lose the result at signing). `clean_text` replaces each lone
surrogate with U+FFFD (the replacement character, as a UTF-8 decoder does with bad bytes); every other
character is kept as sent. `zsnli.serving.http_body.parse_json` applies it to every string and key of every
request body (so ``/classify`` and the bake-off get the same text), and `zsnli.serving.service` applies it
again to text given in-process (`zsnli.serving.offline`, ``zsnli-batch``). Labels are also NFKC-normalised
before the model reads them (`normalize_label`), as the bake-off compares label names.

Pages show stored text (labels, arm and dataset names) with the display rule `show_bidi` / `html_text`:
a bidirectional control character is shown as ``<U+202E>`` instead of acting (``acc`` U+202E ``sse`` would
display as "access", and an unclosed override runs on through its paragraph: the Trojan Source class,
CVE-2021-42574), and user text is isolated in ``<bdi>`` so right-to-left text cannot reorder what is around
it. Answers and stored JSON keep the text as sent.

Imports only the standard library.
"""

from __future__ import annotations

import html
import re
import unicodedata
from typing import Any


def clean_text(s: str) -> str:
    """``s`` with every lone surrogate (U+D800..U+DFFF not part of a pair) replaced by U+FFFD; else ``s`` itself."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def normalize_label(s: str) -> str:
    """A label as the model is given it: `clean_text`, then Unicode NFKC (UAX #15, compatibility composition):
    fullwidth ``ｆｉｎａｎｃｅ``, the ligature ``ﬁnance`` and other compatibility forms become ``finance``, which a
    tokenizer reads instead of ``[UNK]``. Answers still echo the label as sent."""
    return unicodedata.normalize("NFKC", clean_text(s))


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


#: The Unicode bidirectional formatting characters (UAX #9, "Explicit Directional Embeddings / Overrides /
#: Isolates" and the implicit marks): LRE, RLE, PDF, LRO, RLO (U+202A..U+202E), LRI, RLI, FSI, PDI
#: (U+2066..U+2069), LRM, RLM (U+200E, U+200F) and the Arabic letter mark (U+061C).
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
_BIDI_RE = re.compile("[" + "".join(sorted(BIDI_CONTROLS)) + "]")


def show_bidi(s: str) -> str:
    """``s`` with every `BIDI_CONTROLS` character replaced by its visible name, ``<U+202E>`` (upper-case hex,
    at least 4 digits); other characters unchanged. Plain text, not escaped."""
    return _BIDI_RE.sub(lambda m: f"<U+{ord(m.group(0)):04X}>", s)


def html_attr(x: Any) -> str:
    """``str(x)`` for an HTML attribute or a text node that needs no isolation: `show_bidi`, then escaped
    (``html.escape``, quotes included)."""
    return html.escape(show_bidi(str(x)))


def html_text(x: Any) -> str:
    """User text (a label, an arm or dataset name) as HTML content: `html_attr`, isolated in ``<bdi>``
    (HTML's bidirectional isolate: its direction is its own first strong character's, and it cannot
    reorder the text around it)."""
    return f"<bdi>{html_attr(x)}</bdi>"
