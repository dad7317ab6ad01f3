// Bake-off form: parse the examples, POST /v1/bakeoff, show progress and errors, then the stored result
// page's report (rendered on the server) with "Re-run bake-off" added to its arm toggles: it runs the bake-off
// again on the same examples with the ticked arms. The report's own behaviour (arm views, toggles, ceilings)
// is report.js's, the script the command line's HTML file inlines. Served by the app; no external code.
"use strict";

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

// ---------------------------------------------------------------- the result

// The stored result page's #result (rendered on the server by zsnli.compare.render), shown under the form.
async function showResult(answer, container) {
  const resp = await fetch(`/bakeoffs/${encodeURIComponent(answer.id)}`);
  if (!resp.ok) throw new Error(`the result page answered ${resp.status}`);
  const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
  container.replaceChildren(...doc.getElementById("result").childNodes);
  rerunButton(container);
}

// ---------------------------------------------------------------- re-run

// In the report's arm toggles (zsnli.compare.render_arms.toggles): a button that ticks the form's arm boxes as
// the toggles are (an arm the result does not have stays unticked) and runs the bake-off again.
function rerunButton(container) {
  const form = document.getElementById("bakeoff-form"), bar = container.querySelector("#arm-toggles");
  if (!form || !bar) return;
  const button = document.createElement("button");
  button.type = "button"; button.id = "rerun-button"; button.textContent = "Re-run bake-off";
  button.addEventListener("click", () => {
    const ticked = new Set([...bar.querySelectorAll("input[name=arm-toggle]:checked")].map((box) => box.value));
    form.querySelectorAll("input[name=arm]").forEach((box) => { box.checked = ticked.has(box.value); });
    const challenger = document.getElementById("challenger");
    if (challenger && challenger.value && !ticked.has(challenger.value)) challenger.value = "";
    form.requestSubmit();
  });
  bar.append(button);
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

// Bidirectional controls (zsnli.serving.text.BIDI_CONTROLS) shown as <U+202E>, as the server's pages show them:
// an error message may quote a label.
const BIDI_CONTROLS = /[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]/g;
function showBidi(text) {
  return String(text).replace(BIDI_CONTROLS,
    (c) => `<U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}>`);
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message ? showBidi(message) : message; box.hidden = !message;
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
    await showResult(answer, result);
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
});
