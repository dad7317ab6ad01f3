"""The bake-off web pages: the form (``/bakeoff``), the latest list (``/bakeoffs``) and a result page.

Pages are small HTML shells; results are rendered in the browser by ``static/bakeoff.js`` from the
JSON API answer (the result page embeds the stored answer; the form page renders POST's answer).
Everything is served by the app (``/bakeoff/static/...``): no external CDN. Imports only the
standard library and `settings`.
"""

from __future__ import annotations

import json
from html import escape
from importlib import resources
from typing import Sequence

from .protocol import LOO_MAX_N, MAX_FOLDS, RANKING_RULE
from .settings import BakeoffSettings

STATIC = {"bakeoff.js": "text/javascript; charset=utf-8", "bakeoff.css": "text/css; charset=utf-8"}

#: Characters written as ``\\uXXXX`` inside embedded JSON: ``<``, ``>`` and ``&`` (so no ``</script>``,
#: ``<!--`` or ``<script`` can end the block or switch the HTML parser into a script-data escape state,
#: the rule of Django's ``json_script``) and U+2028 / U+2029 (line terminators to older JavaScript).
_JSON_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
                        0x2028: "\\u2028", 0x2029: "\\u2029"}


def json_script(value: object, element_id: str) -> str:
    """``value`` as a ``<script type="application/json" id=element_id>`` block, safe for any strings in it.

    Every ``<``, ``>``, ``&``, U+2028 and U+2029 in the JSON text is written as its ``\\uXXXX`` escape
    (`_JSON_SCRIPT_ESCAPES`), which ``JSON.parse`` reads back as the same character; the block therefore
    holds no markup at all, whatever user text the value carries. Raises ``ValueError`` on a non-finite float.
    """
    data = json.dumps(value, allow_nan=False).translate(_JSON_SCRIPT_ESCAPES)
    return f"<script type='application/json' id='{escape(element_id)}'>{data}</script>"


def static_asset(name: str) -> tuple[bytes, str] | None:
    """``(bytes, media type)`` of a packaged asset, or None for any other name."""
    if name not in STATIC:
        return None
    return resources.files(__package__).joinpath("static", name).read_bytes(), STATIC[name]


def _shell(title: str, body: str) -> str:
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{escape(title)}</title><link rel='stylesheet' href='/bakeoff/static/bakeoff.css'></head>"
            f"<body><header><a href='/bakeoff'>New bake-off</a> · <a href='/bakeoffs'>Latest bake-offs</a></header>"
            f"<main>{body}</main><script src='/bakeoff/static/bakeoff.js'></script></body></html>")


PROTOCOL_NOTE = (f"Zero-shot arms score every example as it is. Few-shot arms are never fitted on the example "
                 f"they score: leave-one-out with up to {LOO_MAX_N} examples (or when a label has a single "
                 f"example), else stratified k-fold (k = min({MAX_FOLDS}, smallest label count)). "
                 f"Ranking: {RANKING_RULE}. ECE over 15 equal-width confidence bins.")


def form_page(incumbents: Sequence[str], challengers: Sequence[str], s: BakeoffSettings,
              public_url: str | None = None) -> str:
    """The form: task description, examples (``text<TAB>label`` lines or a CSV/JSONL file), arms, challenger.

    public_url: as `result_page` (the links of the answer rendered under the form).
    """
    arms = "".join(f"<label class='arm'><input type='checkbox' name='arm' value='{escape(a)}' checked> "
                   f"{escape(a)}</label>" for a in incumbents)
    options = "".join(f"<option value='{escape(c)}'>{escape(c)}</option>" for c in [*incumbents, *challengers])
    body = f"""
<h1>Bake-off</h1>
<p>Which classifier handles <em>your</em> examples best? Paste a few labelled examples; every arm is scored on
them, ranked, stored and signed.</p>
<form id="bakeoff-form">
  <label for="task">Task description</label>
  <input id="task" name="task_description" required maxlength="{s.max_input_chars}"
         placeholder="Classify support requests as access or billing">
  <label for="examples">Examples: one per line, <code>text&lt;TAB&gt;label</code></label>
  <textarea id="examples" name="examples" rows="8" placeholder="Cannot sign in&#9;access"></textarea>
  <label for="upload">…or upload a CSV (<code>input,expected</code> or <code>text,label</code>) or JSONL file</label>
  <input id="upload" type="file" accept=".csv,.jsonl,.json,.txt">
  <fieldset><legend>Arms</legend>{arms}</fieldset>
  <label for="challenger">Challenger (optional)</label>
  <select id="challenger" name="challenger_model"><option value="">none</option>{options}</select>
  <label class="arm retain"><input type="checkbox" id="retain" name="retain"> retain the example texts and predictions
    (default: only their sha256 is stored)</label>
  <button id="submit" type="submit">Run bake-off</button>
</form>
<p class="limits">Limits: {s.max_examples} examples, {s.max_labels} labels, {s.max_input_chars} characters per
text; time budget {s.time_budget_s:g} s.</p>
<div id="progress" hidden><progress></progress> <span id="progress-text"></span></div>
<div id="error" class="error" hidden></div>
<section id="result" data-budget="{s.time_budget_s:g}" data-base="{escape(public_url or '')}"></section>
<p class="note">{escape(PROTOCOL_NOTE)}</p>"""
    return _shell("zsnli bake-off", body)


def result_page(answer: dict, public_url: str | None) -> str:
    """A stored bake-off: the answer embedded as JSON and rendered by bakeoff.js.

    public_url: ``ZSNLI_PUBLIC_URL`` (ends with ``/``); the page's absolute links (the receipt's URLs, the
    badge Markdown) start with it, and are root-relative (``/v1/bakeoffs/...``) when it is None. Nothing
    here comes from the request (a forged ``Host`` header changes no link).
    """
    winner = escape(str(answer.get("winner")))
    body = (f"<h1>Bake-off {escape(answer['id'])}</h1><p class='task'>{escape(answer['task_description'])}</p>"
            f"<noscript><p>Winner: {winner}. JSON: <a href='/v1/bakeoffs/{escape(answer['id'])}'>"
            f"/v1/bakeoffs/{escape(answer['id'])}</a></p></noscript>"
            f"<section id='result' data-base='{escape(public_url or '')}'></section>"
            f"<p class='note'>{escape(PROTOCOL_NOTE)}</p>"
            + json_script(answer, "bakeoff-data"))
    return _shell(f"bake-off {answer['id']}", body)


def list_page(rows: list[dict]) -> str:
    """The latest bake-offs, newest first."""
    items = "".join(
        f"<tr><td><a href='/bakeoffs/{escape(r['id'])}'>{escape(r['id'])}</a></td><td>{escape(r['created_at'])}</td>"
        f"<td>{escape(str(r.get('task_description') or ''))}</td><td>{r['n']}</td>"
        f"<td>{escape(str(r['winner']))}</td></tr>" for r in rows)
    body = ("<h1>Latest bake-offs</h1><table><thead><tr><th>id</th><th>created</th><th>task</th><th>n</th>"
            f"<th>winner</th></tr></thead><tbody>{items or '<tr><td colspan=5>none yet</td></tr>'}</tbody></table>")
    return _shell("zsnli bake-offs", body)
