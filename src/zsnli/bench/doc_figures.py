"""Rebuild, in place, every figure of README.md and docs/ that depends on the model or the calibration.

``python -m zsnli.bench.doc_figures --write`` (after ``model/`` or ``calibration.json`` changed)::

    python -m zsnli.bench.doc_figures                      # check only: name each block that differs, exit 1
    python -m zsnli.bench.doc_figures --write              # rewrite every generated block
    python -m zsnli.bench.doc_figures --write --run-bakeoff   # first regenerate baselines/main.json (ci suite)
    python -m zsnli.bench.doc_figures --write --only curl-readme,readme-client
    python -m zsnli.bench.doc_figures --write --skip parity-figure   # all but the slow pipeline comparison

A generated block sits between ``<!-- figures:NAME -->`` and ``<!-- /figures:NAME -->`` in a page; the
command that produced a figure is written beside it, inside or next to the block. `GENERATORS` maps
each NAME to what rebuilds it:

* ``curl-*``: each ``curl ... -d '{...}'`` line of the block is sent to the server (``serve.sh`` on
  ``--model-dir``, started once on a free port) and the line after it becomes the answer
  (`zsnli.bench.doc_tables.answer_json`; a ``# -> `` prefix is kept);
* ``readme-client``: the block's Python is run against that server and each ``print(...)`` line's
  comment becomes what it printed;
* ``readme-cli``: the block's first ``$ zsnli classify "..."`` command is run (``--url`` the server) and
  the lines under it become its output;
* ``bakeoff-ranking``, ``bakeoff-escalation``, ``bakeoff-slices``: tables of the bake-off report
  (``--bakeoff-report``, default ``baselines/main.json``; ``--run-bakeoff`` first runs the documented
  ``python validate.py bakeoff --suite suites/ci.toml --report baselines/main.json``);
* ``bakeoff-service``: the block's ``POST /v1/bakeoff`` request is sent and its answer shown;
* ``quality-oof``, ``quality-summary``, ``quality-public``, ``readme-quality``, ``quality-chosen``, ``quality-kinds``: the
  tables and the chosen scoring of ``calibration.json``'s ``selection`` (``train.py select`` writes them);
* ``parity-figure``: the largest difference between the server's ``scoring: "pipeline"`` answers and
  the transformers pipeline's (`zsnli.bench.pipeline_arm`, one document per call) over
  ``dev/zeroshot_dev.jsonl``, with the CPU flags.

Usage mistakes (an unknown block name, a missing report, a ``--model-dir`` under ``--root`` that is no NLI model
directory when a block needs the server) are one line, exit 2; the names and the model before the prose check.

Before any block, the figures outside every block are checked against their ledger (`zsnli.bench.doc_prose`):
a decimal figure in prose that is new, gone or changed fails the run (exit 1) unless it sits in a
``<!-- measured: COMMAND -->`` block saying how it is reproduced; ``--record-prose`` records the ledger.

The check compares only what a reader can reproduce (`same_figures`): figures that vary by nature
from run to run (a bake-off's id, a timestamp, latencies and seconds, a receipt's digest, signature and
key id, the CPU's flags) are left out, and numbers agree within ``FIGURE_ATOL`` (the last digit of
6-decimal answers moves with batching and CPU kernels). Each block is named on stderr as it starts.

May import: `zsnli.bench.doc_prose`, `zsnli.bench.doc_tables`, `zsnli.bench.bench_args` (the description, the
model directory check), `zsnli.harness` (the server over HTTP, the command-line parser) and the standard library
(httpx); nothing from the serving side: the server is reached over HTTP only.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import httpx

from ..harness.cli import UsageParser, one_line, positive_int
from ..harness.server import ServerError, ServerProcess, start_server, stops_servers
from . import doc_prose, doc_tables
from .bench_args import check_model_dir, command_description

BLOCK = re.compile(r"(<!-- figures:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /figures:(?P=name) -->)", re.S)
#: The Markdown pages that may hold generated blocks, relative to the repository root.
PAGES = ("README.md", "docs/*.md")
PARITY_EXAMPLES = "dev/zeroshot_dev.jsonl"
#: Documents per ``/classify`` array (the default ``ZSNLI_MAX_BATCH_ITEMS``).
PARITY_CHUNK = 64


#: Figures that vary by nature, replaced by a placeholder before blocks are compared: JSON fields that
#: are an id, a time, a latency or part of a receipt; "N s over HTTP"; the CPU's flags.
VARYING = (
    (re.compile(r'"(id|created_at|request_id|sha256|signature|key_id|[a-z_]*latency[a-z0-9_]*|[a-z_]*_(?:ms|s)'
                r'(?:_p\d+)?)": ("[^"]*"|-?[\d.]+(?:e-?\d+)?)'), r'"\1": <varies>'),
    (re.compile(r"\d+(?:\.\d+)? s over HTTP"), "<varies> s over HTTP"),
    (re.compile(r"CPU (?:(?:avx\w*|amx\w*)(?: |(?=[);,.]|$)))+|CPU none of avx2/avx512|CPU unknown"), "CPU <flags> "),
)
#: Numbers of two runs of one figure agree within this (6-decimal answers move by a unit or two of the
#: last digit with batching and CPU kernels; a change of model or calibration moves them far more).
FIGURE_ATOL = 5e-6
NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+e[-+]?\d+")


def same_figures(committed: str, fresh: str, atol: float = FIGURE_ATOL) -> bool:
    """Whether two renderings of a block show the same reproducible figures: equal once `VARYING` is
    masked, but for decimal numbers within ``atol`` of each other (integers, such as counts, exactly)."""
    a, b = (_masked(text) for text in (committed, fresh))
    if NUMBER.sub("#", a) != NUMBER.sub("#", b):
        return False
    return all(abs(float(x) - float(y)) <= atol for x, y in zip(NUMBER.findall(a), NUMBER.findall(b)))


def _masked(text: str) -> str:
    """``text`` as `same_figures` compares it: tied scorecard lines in arm order (`_ties_in_arm_order`) and every
    `VARYING` figure replaced by its placeholder."""
    text = _ties_in_arm_order(text)
    for pattern, placeholder in VARYING:
        text = pattern.sub(placeholder, text)
    return text


#: The reproducible keys of a scorecard entry that the ranking rule compares before p50 latency
#: (`zsnli.compare.engine.ranking_rule`): arms equal on these are ordered by a measured latency.
TIE_KEYS = ("status", "macro_f1", "ece")
CARD_LINE = re.compile(r'^(?P<lead>\s*)(?P<card>\{"rank": .*\})(?P<tail>[\],]*)$')


def tied_ranks(cards: list[dict[str, Any]]) -> dict[str, int]:
    """Each arm's reproducible rank: the first rank of the run of consecutive scorecard entries equal to
    it on `TIE_KEYS` (figures as shown, 4 decimals; a failed arm is a group of its own, failed arms keep
    their given order). Arms tied on those are ranked by their p50 latency,
    which varies from machine to machine (0.04 ms against 0.05 ms swapped places between two CPUs), so
    their order among themselves is not a reproducible figure; the place of the group is.

    ``cards``: scorecard entries in rank order, each with ``rank``, ``arm`` and the `TIE_KEYS`.
    Returns ``{arm: rank}``."""
    out: dict[str, int] = {}
    first, previous = 0, None
    for card in cards:
        key = tuple(card.get(k) for k in TIE_KEYS) if card.get("status") == "scored" else (card["arm"],)
        if key != previous:
            first, previous = card["rank"], key
        out[card["arm"]] = first
    return out


def _ties_in_arm_order(text: str) -> str:
    """Scorecard lines (``{"rank": ...}`` one entry a line) with each rank replaced by `tied_ranks`' and
    the lines of one tie group sorted by arm, so two runs that differ only in latency read the same."""
    lines = text.split("\n")
    found = [(i, m) for i, m in enumerate(CARD_LINE.match(line) for line in lines) if m]
    if not found:
        return text
    try:
        cards = [json.loads(m["card"]) for _, m in found]
    except json.JSONDecodeError:
        return text
    ranks = tied_ranks(cards)
    bodies = sorted(((ranks[c["arm"]], c["arm"], re.sub(r'^\{"rank": \d+', f'{{"rank": {ranks[c["arm"]]}', m["card"]))
                     for c, (_, m) in zip(cards, found)))
    for (i, m), (_, _, body) in zip(found, bodies):
        lines[i] = m["lead"] + body + m["tail"]
    return "\n".join(lines)


def cpu_flags() -> str:
    """The CPU's SIMD flags that matter for these figures (avx2, avx512f, avx512_bf16, amx_bf16), sorted."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    return " ".join(sorted(set(re.findall(r"\b(avx512_bf16|avx512f|avx2|amx_bf16)\b", text)))) or "none of avx2/avx512"


class Figures:
    """What the generators share: the repository root, the bake-off report, and one server (started on
    first use, stopped by `close`)."""

    def __init__(self, root: Path, model_dir: str, report_path: Path, parity_docs: int | None = None) -> None:
        self.root, self.model_dir, self.report_path = root, model_dir, report_path
        self.parity_docs = parity_docs
        self._server: ServerProcess | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="zsnli-doc-figures-")
        self._report: dict | None = None

    @property
    def url(self) -> str:
        """The server's base URL (started on first use: ``serve.sh``, a fresh bake-off store and key)."""
        if self._server is None:
            tmp = Path(self._tmp.name)
            self._server = start_server(self.root / self.model_dir, {
                "ZSNLI_BAKEOFF_DB": str(tmp / "bakeoffs.sqlite3"), "ZSNLI_RECEIPT_KEY": str(tmp / "key.pem"),
                "ZSNLI_LOG_LEVEL": "warning"}, "auto", self.root, threads=None)
        return self._server.url

    @property
    def calibration(self) -> dict:
        """The committed calibration.json (its ``chosen`` and ``selection``)."""
        return json.loads((self.root / "calibration.json").read_text(encoding="utf-8"))

    @property
    def report(self) -> dict:
        """The bake-off report (``--bakeoff-report``), read once."""
        if self._report is None:
            self._report = json.loads(self.report_path.read_text(encoding="utf-8"))
        return self._report

    def post(self, path: str, body: Any, timeout: float = 300.0) -> Any:
        """The JSON answer of ``POST path`` with ``body`` on the server; ``RuntimeError`` (the status and the start
        of the body) on any status but 200."""
        r = httpx.post(self.url + path, json=body, timeout=timeout)
        if r.status_code != 200:
            raise RuntimeError(f"POST {path} answered {r.status_code}: {r.text[:300]}")
        return r.json()

    def close(self) -> None:
        """Stop the server if one was started and remove the scratch folder."""
        if self._server is not None:
            self._server.stop()
        self._tmp.cleanup()


# --------------------------------------------------------------------------- generators


def curl_request(line: str) -> tuple[str, Any]:
    """``(path, JSON body)`` of a documented ``curl -s URL -H ... -d '{...}'`` line."""
    args = shlex.split(line)
    url = next(a for a in args if a.startswith("http"))
    body = args[args.index("-d") + 1]
    return "/" + url.split("/", 3)[3] if url.count("/") >= 3 else "/", json.loads(body)


def gen_curl(fig: Figures, body: str) -> str:
    """Each ``curl`` line followed by the server's answer to it (the next line; a ``# -> `` prefix kept)."""
    lines, out, i = body.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        if line.startswith("curl "):
            path, request = curl_request(line)
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            prefix = "# -> " if nxt.startswith("# -> ") else ""
            out.append(prefix + doc_tables.answer_json(fig.post(path, request)))
            i += 1
        i += 1
    return "\n".join(out)


def gen_client(fig: Figures, body: str) -> str:
    """Run the block's Python against the server; each ``print(`` line's comment becomes its output."""
    code = body.split("```python\n", 1)[1].split("```", 1)[0]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace("http://127.0.0.1:8000", fig.url), "<README client snippet>", "exec"), {})
    outputs = iter(printed.getvalue().splitlines())
    out = []
    for line in body.split("\n"):
        if line.lstrip().startswith("print(") and "#" in line:
            code_part = line.split("#", 1)[0]
            line = f"{code_part}# {next(outputs)}"
        out.append(line)
    return "\n".join(out)


def gen_cli(fig: Figures, body: str) -> str:
    """Run the block's first ``$ zsnli classify "..."`` command against the server; its output replaces the
    lines under it (up to the next ``$`` line)."""
    lines = body.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("$ zsnli classify \""))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("$ ") or lines[i].startswith("```")),
               len(lines))
    args = shlex.split(lines[start][2:])[1:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(fig.root / "src"), os.environ.get("PYTHONPATH"))))}
    proc = subprocess.run([sys.executable, "-m", "zsnli.cli", *args, "--url", fig.url], capture_output=True, text=True,
                          cwd=fig.root, env=env, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"zsnli {' '.join(args[:1])} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return "\n".join(lines[:start + 1] + proc.stdout.rstrip("\n").split("\n") + lines[end:])


def _bakeoff_source(fig: Figures) -> str:
    """The line under a bake-off table saying which report it comes from and the commands that write and render it."""
    rel = os.path.relpath(fig.report_path, fig.root)
    return (f"(from `{rel}`, written by `python validate.py bakeoff --suite suites/ci.toml --report {rel}`; "
            f"rendered by `python -m zsnli.bench.doc_figures --write`)\n\n")


def gen_bakeoff_ranking(fig: Figures, body: str) -> str:
    """The bake-off report's ranking table (`zsnli.bench.doc_tables.ranking_table`) under its source line."""
    return _bakeoff_source(fig) + doc_tables.ranking_table(fig.report)


def gen_bakeoff_escalation(fig: Figures, body: str) -> str:
    """The escalation table of the bake-off report (`zsnli.bench.doc_tables.escalation_table`): its target accuracy
    and pooled rows, then its source line."""
    facts = doc_tables.escalation_facts(fig.report)
    return (f"**Escalation** (target accuracy {facts['target']:g}, pooled over the {facts['n']} test rows: the "
            "lowest top-1 confidence whose kept documents reach it; the rest go to a person) "
            + _bakeoff_source(fig) + doc_tables.escalation_table(fig.report))


def gen_bakeoff_slices(fig: Figures, body: str) -> str:
    """The worst slices of each arm in the bake-off report (`zsnli.bench.doc_tables.slices_table`) under its source
    line."""
    return (f"**Worst slices of each arm** (the top {doc_tables.SLICES_PER_ARM} of its list) " + _bakeoff_source(fig)
            + doc_tables.slices_table(fig.report))


def gen_bakeoff_service(fig: Figures, body: str) -> str:
    """Send the block's ``curl ... /v1/bakeoff -d '...'`` request; the ``json`` fence becomes its answer."""
    request = json.loads(body.split("-d '", 1)[1].split("'", 1)[0])
    t0 = time.monotonic()
    answer = fig.post("/v1/bakeoff", request)
    seconds = time.monotonic() - t0
    head = body.split("```json\n", 1)[0]
    head = re.sub(r"\d+(\.\d+)? s over HTTP", f"{seconds:.1f} s over HTTP", head)
    return head + "```json\n" + doc_tables.bakeoff_answer_json(answer) + "```\n"


def gen_parity(fig: Figures, body: str) -> str:
    """Largest |p(server, scoring pipeline) - p(transformers pipeline)| over the parity examples."""
    docs = [json.loads(line) for line in (fig.root / PARITY_EXAMPLES).read_text(encoding="utf-8").splitlines()
            if line.strip()]
    docs = [d for d in docs if d["text"]][: fig.parity_docs]  # the pipeline refuses an empty text
    tmp = Path(fig._tmp.name)
    (tmp / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(fig.root / "src"), os.environ.get("PYTHONPATH")))),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "zsnli.bench.pipeline_arm", "--model-dir", str(fig.root / fig.model_dir),
                           "--examples", str(tmp / "docs.jsonl"), "--docs", str(len(docs)), "--batch-size", "1",
                           "--mode", "doc", "--warmup", "0", "--out", str(tmp / "pipeline.json"), "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"pipeline arm exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    pipe = json.loads((tmp / "pipeline.json").read_text())["probabilities"]
    bodies = [{"text": d["text"], "labels": d["labels"], "scoring": "pipeline"} for d in docs]
    served = [answer for i in range(0, len(bodies), PARITY_CHUNK) for answer in fig.post("/classify", bodies[i:i + PARITY_CHUNK])]
    worst, same, labels = 0.0, 0, 0
    for p, s in zip(pipe, served):
        probs = s["probabilities"]
        labels += len(probs)
        worst = max(worst, max(abs(a - b) for a, b in zip(p, probs)))
        same += max(range(len(p)), key=p.__getitem__) == max(range(len(probs)), key=probs.__getitem__)
    return (f"largest |difference| {worst:.1e} over {len(docs)} documents ({labels:,} labels), the same top label "
            f"for {same}/{len(docs)} (`python -m zsnli.bench.doc_figures --write --only parity-figure`: "
            f"`POST /classify` with `\"scoring\": \"pipeline\"` against `zsnli.bench.pipeline_arm`; CPU {cpu_flags()})")


Generator = Callable[["Figures", str], str]


def _calibration_source() -> str:
    """The line under a quality table saying it comes from calibration.json's ``selection`` and how it is rendered."""
    return "(from `calibration.json`'s `selection`, written by `python train.py select`; rendered by " \
           "`python -m zsnli.bench.doc_figures --write`)\n\n"


def gen_quality(render: Callable[[dict], str]) -> Generator:
    """A generator of a table of calibration.json's ``selection``."""
    def gen(fig: Figures, body: str) -> str:
        return _calibration_source() + render(fig.calibration["selection"])
    return gen


def gen_chosen(fig: Figures, body: str) -> str:
    """The sentence naming the shipped scoring of calibration.json (`zsnli.bench.doc_tables.chosen_sentence`)."""
    return doc_tables.chosen_sentence(fig.calibration)


#: The generators whose blocks need the server, so a model under ``--model-dir`` (checked first: `main`).
SERVED = (gen_curl, gen_client, gen_cli, gen_bakeoff_service, gen_parity)
GENERATORS: dict[str, Generator] = {
    "readme-client": gen_client, "readme-cli": gen_cli, "bakeoff-ranking": gen_bakeoff_ranking,
    "bakeoff-escalation": gen_bakeoff_escalation, "bakeoff-slices": gen_bakeoff_slices,
    "bakeoff-service": gen_bakeoff_service, "parity-figure": gen_parity,
    "quality-oof": gen_quality(doc_tables.oof_table), "quality-summary": gen_quality(doc_tables.oof_summary_table),
    "quality-public": gen_quality(doc_tables.public_table), "readme-quality": gen_quality(doc_tables.readme_quality_table),
    "quality-chosen": gen_chosen, "quality-kinds": gen_quality(doc_tables.kind_weighted_table),
}


def generator_for(name: str) -> Generator | None:
    """The generator of block ``name`` (every ``curl-*`` block is `gen_curl`), None for an unknown name."""
    return gen_curl if name.startswith("curl-") else GENERATORS.get(name)


# --------------------------------------------------------------------------- pages


def pages(root: Path) -> list[Path]:
    """The Markdown pages that may hold generated blocks (`PAGES`)."""
    out: list[Path] = []
    for pattern in PAGES:
        out += sorted(root.glob(pattern))
    return out


def blocks(text: str) -> list[tuple[str, str]]:
    """``[(name, body)]`` of every generated block of a page, in order."""
    return [(m["name"], m["body"]) for m in BLOCK.finditer(text)]


def rebuild(text: str, fig: Figures, only: set[str] | None, timings: dict[str, float],
            progress: Callable[[str], None] = lambda name: None) -> str:
    """``text`` with every block (or those in ``only``) regenerated; ``timings`` gets each block's seconds;
    ``progress`` is called with a block's name as it starts."""
    def one(m: re.Match) -> str:
        name = m["name"]
        if only is not None and name not in only:
            return m.group(0)
        progress(name)
        t0 = time.monotonic()
        new = generator_for(name)(fig, m["body"])
        timings[name] = timings.get(name, 0.0) + time.monotonic() - t0
        return m.group(1) + new.rstrip("\n") + "\n" + m.group(4)

    return BLOCK.sub(one, text)


def build_parser() -> UsageParser:
    """The command line (module docstring): one help line for every option."""
    ap = UsageParser(prog="python -m zsnli.bench.doc_figures", description=command_description(__doc__))
    ap.add_argument("--write", action="store_true", help="rewrite the pages (default: only say which blocks differ)")
    ap.add_argument("--only", default=None, help="comma-separated block names (default: every block)")
    ap.add_argument("--model-dir", default="model",
                    help="the model the server serves; a relative path is read under --root (default: %(default)s)")
    ap.add_argument("--bakeoff-report", default="baselines/main.json",
                    help="bake-off report of the tables (default: %(default)s)")
    ap.add_argument("--run-bakeoff", action="store_true",
                    help="first run the ci suite into --bakeoff-report (validate.py bakeoff; minutes)")
    ap.add_argument("--skip", default=None, help="comma-separated block names to leave as they are")
    ap.add_argument("--parity-docs", type=positive_int, default=None,
                    help=f"documents of {PARITY_EXAMPLES} for parity-figure (default: all; the pipeline is slow)")
    ap.add_argument("--root", default=".", help="the repository root (default: %(default)s)")
    ap.add_argument("--record-prose", action="store_true", help="record the figures outside every block in "
                    f"{doc_prose.LEDGER} (for figures that depend on nothing measured) and stop")
    return ap


@stops_servers("python -m zsnli.bench.doc_figures")
def main(argv: list[str] | None = None) -> int:
    """Check (default) or rewrite (``--write``) the generated blocks, as the module docstring says; returns 0 when
    every block matches or was written, 1 when a block differs in a check or a figure (or the bake-off) fails, 2
    (one line) on a usage mistake."""
    ap = build_parser()
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    if args.record_prose:
        return 0 if doc_prose.held(root, pages(root), write=True) else 1
    found = {path: blocks(path.read_text(encoding="utf-8")) for path in pages(root)}
    names = {name for bl in found.values() for name, _ in bl}
    unknown = sorted(n for n in names if generator_for(n) is None)
    only = set(args.only.split(",")) if args.only else None
    skip = set(args.skip.split(",")) if args.skip else set()
    wrong = unknown or sorted((only or set()) - names) or sorted(skip - names)
    if wrong:
        ap.error(f"unknown block name(s): {', '.join(wrong)} (blocks in the pages: {', '.join(sorted(names))})")
    if skip:
        only = (only or names) - skip
    if any(generator_for(name) in SERVED for name in (names if only is None else only)):
        check_model_dir(ap, Path(args.root) / args.model_dir)
    if not doc_prose.held(root, pages(root)):
        return 1
    report = (root / args.bakeoff_report) if not Path(args.bakeoff_report).is_absolute() else Path(args.bakeoff_report)
    t_start = time.monotonic()
    if args.run_bakeoff:
        cmd = [sys.executable, "validate.py", "bakeoff", "--suite", "suites/ci.toml", "--report", str(report)]
        print("running:", " ".join(cmd), file=sys.stderr)
        if subprocess.run(cmd, cwd=root).returncode != 0:
            print("doc_figures: the bake-off failed; nothing rewritten", file=sys.stderr)
            return 1
    if not report.is_file() and any(n.startswith("bakeoff-") and n != "bakeoff-service" for n in names):
        ap.error(f"--bakeoff-report {args.bakeoff_report} does not exist (--run-bakeoff writes it)")
    fig, timings, changed = Figures(root, args.model_dir, report, args.parity_docs), {}, []
    todo = sum(1 for bl in found.values() for name, _ in bl if only is None or name in only)
    done = iter(range(1, todo + 1))
    try:
        for path, bl in found.items():
            if not bl:
                continue
            text = path.read_text(encoding="utf-8")
            where = path.relative_to(root)
            new = rebuild(text, fig, only, timings, lambda name: print(
                f"[{next(done)}/{todo}] {where}: {name} ({time.monotonic() - t_start:.0f} s)", file=sys.stderr, flush=True))
            before, after = dict(blocks(text)), dict(blocks(new))
            changed += [f"{where}: {n}" for n in after if not same_figures(before[n], after[n])]
            if args.write and new != text:
                path.write_text(new, encoding="utf-8")
    except (ServerError, RuntimeError, OSError, KeyError, ValueError) as exc:
        print(f"doc_figures: {one_line(exc)[:500]}", file=sys.stderr)
        return 1
    finally:
        fig.close()
    for name, seconds in sorted(timings.items()):
        print(f"  {name}: {seconds:.1f} s", file=sys.stderr)
    print(f"{'rewrote' if args.write else 'differ'}: {', '.join(changed) or 'nothing'}; "
          f"{time.monotonic() - t_start:.0f} s in all (CPU {cpu_flags()})")
    return 0 if args.write or not changed else 1


if __name__ == "__main__":
    sys.exit(main())
