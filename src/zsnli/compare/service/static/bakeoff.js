// Bake-off pages: parse the form, POST /v1/bakeoff, render an answer (scorecard, winner,
// reliability diagrams, receipt, badge). Served by the app; no external code.
"use strict";

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// ---------------------------------------------------------------- input parsing

function parseTabLines(text) {
  const out = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (!line.trim()) return;
    const cut = line.lastIndexOf("\t");
    if (cut < 0) throw new Error(`line ${i + 1}: expected text<TAB>label`);
    out.push({ input: line.slice(0, cut), expected: line.slice(cut + 1).trim() });
  });
  return out;
}

function parseCsv(text) {
  const rows = [];
  let row = [], field = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; }
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") { row.push(field); field = ""; }
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(field); field = "";
      if (row.some((f) => f.trim())) rows.push(row);
      row = [];
    } else field += c;
  }
  row.push(field);
  if (row.some((f) => f.trim())) rows.push(row);
  if (!rows.length) return [];
  const head = rows[0].map((h) => h.trim().toLowerCase());
  let ti = head.indexOf("input"), li = head.indexOf("expected");
  if (ti < 0) ti = head.indexOf("text");
  if (li < 0) li = head.indexOf("label");
  const body = ti >= 0 && li >= 0 ? rows.slice(1) : rows;
  if (ti < 0 || li < 0) { ti = 0; li = 1; }
  return body.map((r) => ({ input: r[ti] ?? "", expected: (r[li] ?? "").trim() }));
}

function parseJsonl(text) {
  return text.split(/\r?\n/).filter((l) => l.trim()).map((line, i) => {
    const o = JSON.parse(line);
    const input = o.input ?? o.text;
    // {"expected"} / {"label": name}, or the project's examples format: {"labels": [...], "label": index}
    const expected = o.expected ?? (Number.isInteger(o.label) && Array.isArray(o.labels) ? o.labels[o.label] : o.label);
    if (typeof input !== "string" || typeof expected !== "string")
      throw new Error(`line ${i + 1}: needs "input"/"expected" (or "text"/"label") strings, or "text", "labels" and a "label" index`);
    return { input, expected };
  });
}

// ---------------------------------------------------------------- rendering

const fmt = (x, d = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));

function reliabilitySvg(entry) {
  // plot area S x S at (L, T); numbered axes: confidence (x) and accuracy (y), both 0..1
  const S = 150, L = 40, T = 6, B = 34, NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", L + S + 10); svg.setAttribute("height", T + S + B);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `reliability diagram of ${entry.arm}`);
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e); return e;
  };
  const x = (v) => L + v * S, y = (v) => T + (1 - v) * S;
  add("rect", { x: L, y: T, width: S, height: S, fill: "#fff", stroke: "#999" });
  for (const v of [0, 0.25, 0.5, 0.75, 1]) {
    const major = v === 0 || v === 0.5 || v === 1;
    add("line", { x1: x(v), y1: y(0), x2: x(v), y2: y(0) + 4, stroke: "#666" });
    add("line", { x1: x(0) - 4, y1: y(v), x2: x(0), y2: y(v), stroke: "#666" });
    if (!major) continue;
    add("text", { x: x(v), y: y(0) + 14, "text-anchor": "middle", "font-size": 10, class: "tick-x" }, String(v));
    add("text", { x: x(0) - 6, y: y(v) + 3, "text-anchor": "end", "font-size": 10, class: "tick-y" }, String(v));
  }
  add("line", { x1: x(0), y1: y(0), x2: x(1), y2: y(1), stroke: "#bbb", "stroke-dasharray": "4 3" });
  for (const b of entry.reliability || []) {
    add("rect", { x: x(b.lo) + 1, y: y(b.accuracy), width: Math.max(1, (b.hi - b.lo) * S - 2),
                  height: b.accuracy * S, fill: "#42a5f5", opacity: 0.8 })
      .append(Object.assign(document.createElementNS(NS, "title"),
        { textContent: `confidence ${fmt(b.confidence, 2)}, accuracy ${fmt(b.accuracy, 2)}, n = ${b.count}` }));
    add("circle", { cx: x(b.confidence), cy: y(b.confidence), r: 2.5, fill: "#e53935" });
  }
  add("text", { x: L + S / 2, y: T + S + 28, "text-anchor": "middle", "font-size": 10 }, "confidence");
  add("text", { x: 10, y: T + S / 2, "font-size": 10, transform: `rotate(-90 10 ${T + S / 2})`,
                "text-anchor": "middle" }, "accuracy");
  return svg;
}

// The arms ranked first on macro-F1 together with the winner (a tie the ranking broke by ECE, then latency,
// then the arm's name: zsnli.compare.engine.RANKING_RULE).
function tiedWithWinner(answer) {
  const scored = answer.scorecard.filter((e) => e.status === "scored").sort((a, b) => a.rank - b.rank);
  if (scored.length < 2) return [];
  return scored.filter((e) => Math.abs(e.macro_f1 - scored[0].macro_f1) < 1e-9);
}

function tieNote(answer) {
  const tied = tiedWithWinner(answer);
  if (tied.length < 2) return null;
  const [first, second] = tied;
  const by = Math.abs(first.ece - second.ece) > 1e-9 ? "its lower ECE (calibration)"
    : Math.abs(first.latency_ms_p50 - second.latency_ms_p50) > 1e-9 ? "its lower p50 latency" : "its name";
  const others = tied.slice(1).map((e) => e.arm).join(", ");
  return `Tie: ${first.arm} and ${others} have the same macro-F1 (${fmt(first.macro_f1)}) on these ` +
    `${answer.n} examples; ${first.arm} is ranked first only by ${by}. ` +
    `${answer.n < 30 ? "That is too few examples to tell them apart: add more examples." : ""}`.trim();
}

// base: ZSNLI_PUBLIC_URL (ending with "/") from the page, or "" for root-relative links. Never the
// browser's or the request's host: a page reached through a forged Host header links nowhere else.
function renderAnswer(answer, container, base) {
  container.replaceChildren();
  const origin = base || "/";
  const won = answer.scorecard.find((e) => e.arm === answer.winner);
  const tie = tieNote(answer);
  container.append(el("div", { class: tie ? "winner tie" : "winner", id: "winner" },
    answer.winner ? `Winner${tie ? " (by a tie-break)" : ""}: ${answer.winner} (macro-F1 ${fmt(won.macro_f1)}, ` +
      `ECE ${fmt(won.ece)}, p50 ${fmt(won.latency_ms_p50, 1)} ms)` : "No arm was scored."));
  if (tie) container.append(el("p", { class: "tie-note", id: "tie-note" }, tie));
  if (answer.n < 30 && !tie) container.append(el("p", { class: "note", id: "small-n" },
    `With ${answer.n} examples one example moves accuracy by ${fmt(100 / answer.n, 1)} points: ` +
    "treat small differences as noise."));
  const labels = Object.entries(answer.labels).map(([k, v]) => (k === v ? k : `${k} (“${v}”)`)).join(", ");
  container.append(el("p", {}, `${answer.n} examples; labels: ${labels}; created ${answer.created_at}.`));
  const head = el("tr", {}, ...["rank", "arm", "role", "accuracy", "macro-F1", "ECE", "n", "p50 ms", "status"]
    .map((h) => el("th", {}, h)));
  const body = answer.scorecard.map((e) => el("tr", { class: e.status, "data-arm": e.arm },
    el("td", {}, e.rank), el("td", {}, e.arm), el("td", {}, e.role), el("td", {}, fmt(e.accuracy)),
    el("td", {}, fmt(e.macro_f1)), el("td", {}, fmt(e.ece)), el("td", {}, e.n), el("td", {}, fmt(e.latency_ms_p50, 1)),
    el("td", {}, e.status === "failed" ? `failed: ${e.error}` : e.status)));
  container.append(el("h2", {}, "Scorecard"),
    el("table", { id: "scorecard" }, el("thead", {}, head), el("tbody", {}, ...body)),
    el("p", { class: "note" }, "Ranked by macro-F1; ties broken by calibration (lower ECE), then by latency " +
      "(lower p50), then by the arm's name. What the columns and the arms mean: see \u201cReading the results\u201d below."));
  const diagrams = answer.scorecard.filter((e) => e.status === "scored")
    .map((e) => el("div", { class: "diagram" }, el("h4", {}, `${e.arm} · ECE ${fmt(e.ece)}`), reliabilitySvg(e)));
  container.append(el("h2", {}, "Reliability"), el("p", { class: "note" },
    "Bars: accuracy per confidence bin; red dots: mean confidence; dashed: perfect calibration."),
    el("div", { class: "diagrams" }, ...diagrams));
  const r = answer.receipt;
  container.append(el("h2", {}, "Receipt"), el("dl", { class: "receipt", id: "receipt" },
    el("dt", {}, "sha256"), el("dd", {}, el("code", { id: "receipt-sha256" }, r.sha256)),
    el("dt", {}, "Ed25519 signature"), el("dd", {}, el("code", {}, r.signature)),
    el("dt", {}, "key id"), el("dd", {}, el("code", {}, r.key_id)),
    el("dt", {}, "examples sha256"), el("dd", {}, el("code", {}, r.examples_sha256))),
    el("p", { class: "note" }, "Verify offline: save ", el("code", {}, `${origin}v1/bakeoffs/${answer.id}`),
      " and ", el("code", {}, `${origin}v1/receipts/public-key`), ", then run ",
      el("code", {}, "python validate.py verify-receipt bakeoff.json --public-key key.pem")));
  const page = `${origin}bakeoffs/${answer.id}`;
  const md = `[![bake-off](${page}/badge.svg)](${page})`;
  container.append(el("h2", {}, "Badge"), el("p", { class: "badge" }, el("img", { src: `/bakeoffs/${answer.id}/badge.svg`,
    alt: "bake-off badge" })), el("p", { class: "badge" }, el("code", { id: "badge-markdown" }, md)),
    ...(base ? [] : [el("p", { class: "note" }, "Links are relative to this server: it has no ZSNLI_PUBLIC_URL.")]),
    el("p", {}, el("a", { href: `/bakeoffs/${answer.id}`, id: "permalink" }, "Permalink"), " · ",
      el("a", { href: `/v1/bakeoffs/${answer.id}` }, "JSON")));
}

// ---------------------------------------------------------------- form

async function readExamples() {
  const file = document.getElementById("upload").files[0];
  if (file) {
    const text = await file.text();
    if (/\.jsonl?$/i.test(file.name)) return parseJsonl(text);
    if (/\.csv$/i.test(file.name)) return parseCsv(text);
    return parseTabLines(text);
  }
  return parseTabLines(document.getElementById("examples").value);
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message; box.hidden = !message;
}

async function submitForm(event) {
  event.preventDefault();
  showError("");
  let examples;
  try { examples = await readExamples(); } catch (err) { showError(`examples: ${err.message}`); return; }
  const arms = [...document.querySelectorAll("input[name=arm]:checked")].map((c) => c.value);
  const body = { task_description: document.getElementById("task").value, examples, candidates: arms };
  const challenger = document.getElementById("challenger").value;
  if (challenger) body.challenger_model = challenger;
  if (document.getElementById("retain").checked) body.retain = true;
  const result = document.getElementById("result"), progress = document.getElementById("progress");
  const button = document.getElementById("submit"), text = document.getElementById("progress-text");
  const t0 = Date.now(), budget = result.dataset.budget;
  const nArms = new Set(challenger ? [...arms, challenger] : arms).size;
  const tick = () => { text.textContent = `running ${nArms} arms on ${examples.length} ` +
    `examples… ${Math.round((Date.now() - t0) / 1000)} s (budget ${budget} s)`; };
  tick();
  const timer = setInterval(tick, 500);
  progress.hidden = false; button.disabled = true; result.replaceChildren();
  try {
    const resp = await fetch("/v1/bakeoff", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body) });
    const answer = await resp.json();
    if (!resp.ok) {
      const lines = (answer.errors || [{ field: answer.field, error: answer.error }])
        .map((e) => `${e.field}: ${e.error}`);
      showError(`${resp.status}: ${lines.join("\n")}`);
      return;
    }
    renderAnswer(answer, result, result.dataset.base);
  } catch (err) {
    showError(`request failed: ${err.message}`);
  } finally {
    clearInterval(timer); progress.hidden = true; button.disabled = false;
  }
}

// Tab types a tab character in the examples box (text<TAB>label); Esc then Tab leaves the box as usual.
function tabTyping(area) {
  let leaving = false;
  area.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") { leaving = true; return; }
    const plainTab = ev.key === "Tab" && !ev.shiftKey && !ev.ctrlKey && !ev.altKey && !ev.metaKey;
    if (plainTab && !leaving) {
      ev.preventDefault();
      // insertText keeps the browser's undo history; setRangeText where it is not supported
      if (!document.execCommand || !document.execCommand("insertText", false, "\t")) {
        area.setRangeText("\t", area.selectionStart, area.selectionEnd, "end");
      }
    }
    leaving = false;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("bakeoff-form");
  if (form) form.addEventListener("submit", submitForm);
  const area = document.getElementById("examples");
  if (area) tabTyping(area);
  const data = document.getElementById("bakeoff-data");
  if (data) {
    const result = document.getElementById("result");
    renderAnswer(JSON.parse(data.textContent), result, result.dataset.base);
  }
});
