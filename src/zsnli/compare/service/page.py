"""The bake-off web pages: the form (``/bakeoff``), the latest list (``/bakeoffs``) and a result page.

Pages are small HTML shells. A result is rendered on the server by the one report renderer
(`zsnli.compare.render.report_html`, the same function behind the HTML file of ``validate.py bakeoff``, with
its arm toggles, ceilings and script, ``report.js``), plus this page's links (permalink, JSON, report file,
badge, how to verify the receipt). ``static/bakeoff.js`` only reads the form, posts it, shows progress and
errors, then shows the stored result page's ``#result`` and adds "Re-run bake-off" to its arm toggles.
Everything is served by the app (``/bakeoff/static/...``): no external CDN. User text (tasks, labels, arm names)
is shown with its bidirectional controls visible and isolated (`zsnli.serving.text.html_text`). Imports the
standard library, `zsnli.compare.render`, `zsnli.serving.text`, `protocol` and `settings`.
"""

from __future__ import annotations

from html import escape
from importlib import resources
from typing import Sequence

from zsnli.compare.render import render_html, report_html
from zsnli.compare.render_arms import report_script
from zsnli.serving.text import html_attr, html_text

from .protocol import LOO_MAX_N, MAX_FOLDS, RANKING_RULE
from .settings import BakeoffSettings

STATIC = {"bakeoff.js": "text/javascript; charset=utf-8", "bakeoff.css": "text/css; charset=utf-8",
          "report.js": "text/javascript; charset=utf-8"}


def static_asset(name: str) -> tuple[bytes, str] | None:
    """``(bytes, media type)`` of a packaged asset, or None for any other name. ``report.js`` is the report's own
    script (`zsnli.compare.render_arms.report_script`: arm views, toggles, ceilings), the one the command line's
    HTML file inlines."""
    if name not in STATIC:
        return None
    if name == "report.js":
        return report_script().encode("utf-8"), STATIC[name]
    return resources.files(__package__).joinpath("static", name).read_bytes(), STATIC[name]


def _shell(title: str, body: str) -> str:
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{escape(title)}</title><link rel='stylesheet' href='/bakeoff/static/bakeoff.css'></head>"
            f"<body><header><a href='/bakeoff'>New bake-off</a> · <a href='/bakeoffs'>Latest bake-offs</a></header>"
            f"<main>{body}</main><script src='/bakeoff/static/report.js'></script>"
            "<script src='/bakeoff/static/bakeoff.js'></script></body></html>")


PROTOCOL_NOTE = (f"Zero-shot arms score every example as it is. Few-shot arms are never fitted on the example "
                 f"they score: leave-one-out with up to {LOO_MAX_N} examples (or when a label has a single "
                 f"example), else stratified k-fold (k = min({MAX_FOLDS}, smallest label count)). "
                 f"Ranking: {RANKING_RULE}. ECE over 15 equal-width confidence bins.")


#: One line per arm a bake-off may run (the incumbents of `zsnli.compare.service.arms_adapter`), for the
#: page's glossary.
ARM_NOTES = {
    "served": "the served NLI model (zero-shot): each label description is the hypothesis as it is",
    "served_about": "the served NLI model with the template \u201cThis text is about {}.\u201d (zero-shot)",
    "embedding_similarity": "cosine of all-MiniLM-L6-v2 sentence embeddings of the text and each label "
                            "description, softmax(20 \u00d7 cosine); nothing fitted (zero-shot)",
    "embedding_logreg": "logistic regression on those sentence embeddings, fitted on the other examples (few-shot)",
    "embedding_knn": "the 5 nearest other examples by embedding cosine vote (few-shot)",
    "tfidf_logreg": "logistic regression on word 1-2-gram tf-idf, fitted on the other examples (few-shot)",
    "tfidf_linearsvc": "a linear SVM on the same tf-idf, its probabilities by Platt scaling (a sigmoid fitted on "
                       "held-out decision values) (few-shot)",
    "tfidf_linearsvc_raw": "the same linear SVM, its probabilities a softmax of the raw decision values: same "
                           "ranking of labels, other confidences (few-shot)",
    "char_nb": "multinomial naive Bayes on character 2-5-grams: cheap, and its probabilities sit near 0 and 1 "
               "(few-shot)",
    "keyword_rules": "keyword rules read off the other examples (each label's most distinctive words); the first "
                     "match wins at confidence 1.0, else the most frequent label: the floor of triage systems "
                     "(few-shot)",
    "majority": "always the most frequent label of the other examples: the floor any arm should beat",
}

COLUMNS = (
    ("rank", "the order of the ranking rule below (failed arms last)"),
    ("arm", "the classifier; see the arms below"),
    ("role", "incumbent (a standard arm) or challenger (the model you added)"),
    ("accuracy", "the share of examples whose top label is the expected one"),
    ("macro-F1", "F1 of each label, averaged with equal weight per label: a rare label counts as much as a "
                 "frequent one (the ranking key)"),
    ("ECE", "expected calibration error: the examples are put into 15 equal-width bins by the arm's confidence "
            "(its top probability); ECE is the mean |accuracy \u2212 confidence| over the bins, weighted by their "
            "examples. 0: a confidence of 0.8 is right 80% of the time; 0.2: off by 20 points on average"),
    ("n", "examples the arm scored"),
    ("p50 ms", "median milliseconds to score one example"),
    ("fit s", "seconds spent fitting the arm on the other examples, summed over all folds: its training cost "
              "(n/a for a zero-shot arm, which fits nothing)"),
    ("status", "scored, or failed with the reason (a failed arm does not stop the others)"),
)


def glossary(arms: Sequence[str]) -> str:
    """The "Reading the results" block: every column, every arm in ``arms``, the reliability diagrams."""
    cols = "".join(f"<dt>{escape(name)}</dt><dd>{escape(text)}</dd>" for name, text in COLUMNS)
    other = "a registered model (ZSNLI_BAKEOFF_MODELS) run through the transformers zero-shot pipeline"
    notes = "".join(f"<dt>{html_text(a)}</dt><dd>{escape(ARM_NOTES.get(a, other))}</dd>" for a in arms)
    return (f"<details class='glossary' id='glossary' open><summary>Reading the results</summary>"
            f"<h3>Columns</h3><dl>{cols}</dl><h3>Arms</h3><dl>{notes}</dl><h3>Reliability diagrams</h3>"
            "<p>One per arm: the examples binned by confidence (x axis, 0 to 1); each bar is the accuracy in its bin "
            "(y axis), each red dot the bin's mean confidence. Bars on the dashed diagonal: well calibrated; "
            "bars below it: over-confident. With a handful of examples most bins are empty or hold one example: "
            "read them as a sketch.</p></details>")


def form_page(incumbents: Sequence[str], challengers: Sequence[str], s: BakeoffSettings) -> str:
    """The form: task description, examples (``text<TAB>label`` lines or a CSV/JSONL file), arms, challenger.

    A finished bake-off is shown under the form as its result page's ``#result`` (`result_page`, fetched by
    ``bakeoff.js``), links included.
    """
    arms = "".join(f"<label class='arm'><input type='checkbox' name='arm' value='{escape(a)}' checked> "
                   f"{html_text(a)}</label>" for a in incumbents)
    # an option holds text only (no <bdi>): the controls are shown, and dir=auto isolates the name
    options = "".join(f"<option value='{escape(c)}' dir='auto'>{html_attr(c)}</option>"
                      for c in [*incumbents, *challengers])
    body = f"""
<h1>Bake-off</h1>
<p>Which classifier handles <em>your</em> examples best? Paste a few labelled examples; every arm is scored on
them, ranked, stored and signed.</p>
<form id="bakeoff-form">
  <label for="task">Task description</label>
  <input id="task" name="task_description" required maxlength="{s.max_input_chars}"
         placeholder="Classify support requests as access or billing">
  <label for="examples">Examples: one per line, <code>text&lt;TAB&gt;label</code></label>
  <textarea id="examples" name="examples" rows="8" placeholder="Cannot sign in&#9;access"
            aria-describedby="examples-hint"></textarea>
  <p class="hint" id="examples-hint">Tab types a tab between the text and its label; press Esc, then Tab, to leave
    the box.</p>
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
<section id="result" data-budget="{s.time_budget_s:g}"></section>
<p class="note">{escape(PROTOCOL_NOTE)}</p>
{glossary([*incumbents, *challengers])}"""
    return _shell("zsnli bake-off", body)


def result_page(answer: dict, public_url: str | None) -> str:
    """A stored bake-off: `zsnli.compare.render.report_html` of the answer and the page's links (`_links`).

    public_url: ``ZSNLI_PUBLIC_URL`` (ends with ``/``); the page's absolute links (the receipt's URLs, the
    badge Markdown) start with it, and are root-relative (``/v1/bakeoffs/...``) when it is None. Nothing
    here comes from the request (a forged ``Host`` header changes no link).
    """
    body = (f"<section id='result'>{report_html(answer)}{_links(answer, public_url)}</section>"
            f"<p class='note'>{escape(PROTOCOL_NOTE)}</p>" + glossary([e['arm'] for e in answer.get('scorecard', [])]))
    return _shell(f"bake-off {answer['id']}", body)


def _links(answer: dict, public_url: str | None) -> str:
    """Where to fetch the answer and the public key to verify it, the badge, the permalink and the report file."""
    origin, bid = public_url or "/", escape(answer["id"])
    page = f"{origin}bakeoffs/{bid}"
    relative = "" if public_url else "<p class='note'>Links are relative to this server: it has no ZSNLI_PUBLIC_URL.</p>"
    return (f"<p class='note'>For the command above, REPORT.json is <code>{escape(origin)}v1/bakeoffs/{bid}</code> and "
            f"key.pem is <code>{escape(origin)}v1/receipts/public-key</code>.</p>"
            f"<h2>Badge</h2><p class='badge'><img src='/bakeoffs/{bid}/badge.svg' alt='bake-off badge'></p>"
            f"<p class='badge'><code id='badge-markdown'>[![bake-off]({escape(page)}/badge.svg)]({escape(page)})</code></p>"
            f"{relative}<p><a href='/bakeoffs/{bid}' id='permalink'>Permalink</a> \u00b7 "
            f"<a href='/v1/bakeoffs/{bid}'>JSON</a> \u00b7 <a href='/bakeoffs/{bid}/report.html'>Report (one HTML file)</a></p>")


def report_file(answer: dict) -> str:
    """A stored bake-off as one self-contained HTML file: `zsnli.compare.render.render_html`, as the CLI writes."""
    return render_html(answer)


def _partial(row: dict) -> str:
    """`` (F of R arms)`` after a listed winner when some arms did not finish (`zsnli.compare.service.store.Store.
    latest`'s ``arms_run``), else nothing."""
    run = row.get("arms_run") or ""
    finished, _, rest = run.partition(" of ")
    return f" ({escape(run)})" if run and finished != rest.split(" ")[0] else ""


def list_page(rows: list[dict]) -> str:
    """The latest bake-offs, newest first."""
    items = "".join(
        f"<tr><td><a href='/bakeoffs/{escape(r['id'])}'>{escape(r['id'])}</a></td><td>{escape(r['created_at'])}</td>"
        f"<td>{html_text(r.get('task_description') or '')}</td><td>{r['n']}</td>"
        f"<td>{html_text(r['winner'])}{_partial(r)}</td></tr>" for r in rows)
    body = ("<h1>Latest bake-offs</h1><table><thead><tr><th>id</th><th>created</th><th>task</th><th>n</th>"
            f"<th>winner</th></tr></thead><tbody>{items or '<tr><td colspan=5>none yet</td></tr>'}</tbody></table>")
    return _shell("zsnli bake-offs", body)
